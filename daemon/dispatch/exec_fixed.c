/*
 * `fixed`: newFixedThreadPool(n). n threads started at create, all taking from ONE FIFO under
 * ONE mutex and condvar. That single lock is the point: it is the contended
 * LinkedBlockingQueue whose cost this arm measures, so nothing here tries to be cleverer.
 *
 * Threading: submit from any thread; the queue, its counters and `stopping` are guarded by
 * `lock`; the gauges are atomics written under the lock and read without it.
 */
#include <stdlib.h>
#include <string.h>
#include "dispatch/exec_internal.h"

typedef struct fixed fixed_t;

typedef struct {
    fixed_t *pool;
    unsigned index;
    pthread_t tid;
} fixed_worker_t;

struct fixed {
    echod_exec_t super;
    /* Submitters and workers all write the lock's line; keep it off the read-mostly header's. */
    _Alignas(ECHOD_EXEC_CACHE_LINE) pthread_mutex_t lock;
    pthread_cond_t nonempty;
    echod_task_t *head;
    echod_task_t **tail;
    unsigned waiting; /* workers inside cond_wait */
    int stopping;
    _Atomic unsigned depth;
    _Atomic unsigned busy;
    unsigned nworkers;
    fixed_worker_t *workers;
};

/* Pops the oldest task; lock held, queue non-empty. */
static echod_task_t *pop_locked(fixed_t *f)
{
    echod_task_t *task = f->head;
    if ((f->head = task->next) == NULL)
        f->tail = &f->head;
    atomic_fetch_sub_explicit(&f->depth, 1, memory_order_relaxed);
    return task;
}

static void *worker_main(void *arg)
{
    fixed_worker_t *w = arg;
    fixed_t *f = w->pool;

    echod_exec__worker_enter(&f->super, w->index);
    pthread_mutex_lock(&f->lock);
    for (;;) {
        while (f->head == NULL && !f->stopping) {
            f->waiting++;
            pthread_cond_wait(&f->nonempty, &f->lock);
            f->waiting--;
            echod_exec__woke = 1;
        }
        /* Stopping with an empty queue: anything a still-running task adds, that task's thread finds. */
        if (f->head == NULL)
            break;
        echod_task_t *task = pop_locked(f);
        /*
         * Submit wakes one waiter per submit, but a second submit can land before the first
         * woken thread has left cond_wait and "signal" nobody new; pass the wake-up on, as
         * LinkedBlockingQueue.take does, so a backlog never waits on a single consumer.
         */
        int cascade = f->head != NULL && f->waiting > 0;
        atomic_fetch_add_explicit(&f->busy, 1, memory_order_relaxed);
        pthread_mutex_unlock(&f->lock);
        if (cascade)
            pthread_cond_signal(&f->nonempty);

        echod_exec__run(&f->super, task);

        pthread_mutex_lock(&f->lock);
        atomic_fetch_sub_explicit(&f->busy, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&f->lock);
    echod_exec__worker_leave(&f->super);
    return NULL;
}

static void fixed_submit(echod_exec_t *exec, echod_task_t *task)
{
    fixed_t *f = (fixed_t *)exec;

    task->next = NULL;
    pthread_mutex_lock(&f->lock);
    *f->tail = task;
    f->tail = &task->next;
    atomic_fetch_add_explicit(&f->depth, 1, memory_order_relaxed);
    int wake = f->waiting > 0;
    pthread_mutex_unlock(&f->lock);
    /* Signalled after unlocking so the woken worker does not block straight away on our lock. */
    if (wake)
        pthread_cond_signal(&f->nonempty);
}

static unsigned fixed_queue_depth(const echod_exec_t *exec)
{
    return atomic_load_explicit(&((const fixed_t *)exec)->depth, memory_order_relaxed);
}

static unsigned fixed_busy_threads(const echod_exec_t *exec)
{
    return atomic_load_explicit(&((const fixed_t *)exec)->busy, memory_order_relaxed);
}

/* Stops and joins the first `started` workers, runs any stragglers, frees everything. */
static void shutdown_and_free(fixed_t *f, unsigned started)
{
    pthread_mutex_lock(&f->lock);
    f->stopping = 1;
    pthread_mutex_unlock(&f->lock);
    pthread_cond_broadcast(&f->nonempty);
    for (unsigned i = 0; i < started; i++)
        pthread_join(f->workers[i].tid, NULL);

    /*
     * Workers leave only with an empty queue, and a task's own submissions are found by its own
     * thread, so this is empty unless a worker of another executor submitted here during
     * destroy. Run those here rather than lose them.
     */
    echod_exec_t *prev = echod_exec__swap_current(&f->super);
    pthread_mutex_lock(&f->lock);
    while (f->head != NULL) {
        echod_task_t *task = pop_locked(f);
        pthread_mutex_unlock(&f->lock);
        echod_exec__run(&f->super, task);
        pthread_mutex_lock(&f->lock);
    }
    pthread_mutex_unlock(&f->lock);
    echod_exec__swap_current(prev);

    pthread_cond_destroy(&f->nonempty);
    pthread_mutex_destroy(&f->lock);
    free(f->workers);
    free(f);
}

static void fixed_destroy(echod_exec_t *exec)
{
    fixed_t *f = (fixed_t *)exec;
    shutdown_and_free(f, f->nworkers);
}

static const echod_exec_ops_t fixed_ops = {
    .submit = fixed_submit,
    .destroy = fixed_destroy,
    .queue_depth = fixed_queue_depth,
    .busy_threads = fixed_busy_threads,
};

echod_exec_t *echod_exec__fixed_create(const char *name, unsigned threads, char *err, size_t errlen)
{
    if (threads == 0) {
        echod_set_err(err, errlen, "executor fixed: threads must be at least 1");
        return NULL;
    }
    fixed_t *f = echod_exec__alloc_lines(sizeof(*f));
    fixed_worker_t *workers = echod_must(calloc(threads, sizeof(*workers)), "fixed workers");
    echod_exec__init(&f->super, &fixed_ops, ECHOD_EXEC_FIXED, name);
    /* One thread draining one FIFO runs tasks one at a time, in order: the serializer may skip itself. */
    f->super.sequential = threads == 1;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->nonempty, NULL);
    f->head = NULL;
    f->tail = &f->head;
    atomic_init(&f->depth, 0);
    atomic_init(&f->busy, 0);
    f->nworkers = threads;
    f->workers = workers;

    for (unsigned i = 0; i < threads; i++) {
        workers[i].pool = f;
        workers[i].index = i;
        int ret = echod_exec__start_thread(&workers[i].tid, worker_main, &workers[i]);
        if (ret != 0) {
            echod_set_err(err, errlen, "executor fixed: starting thread %u of %u: %s" THREAD_HINT, i + 1, threads,
                          strerror(ret));
            shutdown_and_free(f, i);
            return NULL;
        }
    }
    return &f->super;
}
