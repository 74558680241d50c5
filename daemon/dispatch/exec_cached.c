/*
 * `cached`: newCachedThreadPool, grpc-java's default server executor. A ThreadPoolExecutor
 * with no core threads over a SynchronousQueue: a submit hands the task straight to a thread
 * that is parked waiting for work, and if none is, starts a new thread with the task as its
 * first. A thread that finishes parks for keep_alive and exits if nothing was handed to it.
 *
 * Parked threads form a LIFO stack, as in the SynchronousQueue's default (non-fair) mode: the
 * most recently parked thread gets the next task, so under a steady load a few hot threads do
 * the work and the surplus ages out.
 *
 * The hand-off is the JDK's (SynchronousQueue.TransferStack, JDK 17): the stack is guarded by
 * `lock`, but nobody is woken while holding it, and a thread that finds the stack empty
 * yields once before it makes itself wakeable (the "yield once if was empty" of awaitFulfill),
 * so a submit that comes meanwhile hands over with no wake-up at all. Each thread has its own
 * park word (LockSupport.park/unpark: a futex); a submit marks it HANDED under the lock and
 * wakes the futex after unlocking, and only if the thread had gone to sleep. A wake under the
 * lock made the woken thread preempt the submitter on one CPU and block at once on the lock it
 * still held: two extra context switches per hand-off that the JDK does not have.
 *
 * With max_threads set (an echod extension; the JDK pool
 * would reject) a submit that finds no parked thread and no room queues the task FIFO, and
 * every thread empties that queue before it parks; so a task is never queued while a thread
 * is parked.
 *
 * Threads are joinable but nobody waits for them while the pool runs: each exiting thread
 * joins the one that exited before it (and frees its struct), so at most one exited thread is
 * ever unjoined and destroy joins that last one. Every thread ever started is joined.
 *
 * Threading: submit from any thread. Everything but the gauges is guarded by `lock`; the
 * gauges are atomics written under the lock and read without it.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "dispatch/exec_internal.h"

/* A parked thread's park word: pushed and still awake, asleep in the futex, or given work. */
enum { PARK_AWAKE = 0, PARK_SLEEPING = 1, PARK_HANDED = 2 };

typedef struct cached cached_t;
typedef struct cached_worker cached_worker_t;

struct cached_worker {
    cached_t *pool;
    pthread_t tid;
    unsigned index;
    echod_task_t *first;   /* set before the thread starts */
    echod_task_t *handoff; /* given by a submit while parked (NULL from destroy) */
    int parked;            /* on the idle stack */
    cached_worker_t *up;   /* idle stack links; `up` is towards the top */
    cached_worker_t *down;
    _Atomic uint32_t park;   /* PARK_*: the futex word; HANDED is set under the lock */
    _Atomic unsigned wakers; /* submits between setting HANDED and their futex wake, or a spawn waiting for `started` */
    _Atomic uint32_t started; /* futex word: 0 until the thread runs (the spawner waits for it) */
};

struct cached {
    echod_exec_t super;
    _Alignas(ECHOD_EXEC_CACHE_LINE) pthread_mutex_t lock;
    pthread_cond_t all_exited;
    cached_worker_t *idle_top;
    echod_task_t *head; /* overflow FIFO, only used at max_threads */
    echod_task_t **tail;
    unsigned alive;   /* started (or about to be) and not yet exited */
    unsigned started; /* ever, for thread names */
    unsigned max_threads;
    uint64_t keep_alive_ns;
    int stopping;
    cached_worker_t *zombie; /* the last thread to exit; not joined yet */
    _Atomic unsigned depth;
    _Atomic unsigned alive_gauge;
    _Atomic unsigned idle_gauge;
};

static void push_idle_locked(cached_t *c, cached_worker_t *w)
{
    w->parked = 1;
    atomic_store_explicit(&w->park, PARK_AWAKE, memory_order_relaxed);
    w->up = NULL;
    w->down = c->idle_top;
    if (c->idle_top != NULL)
        c->idle_top->up = w;
    c->idle_top = w;
    atomic_fetch_add_explicit(&c->idle_gauge, 1, memory_order_relaxed);
}

static void remove_idle_locked(cached_t *c, cached_worker_t *w)
{
    if (w->up != NULL)
        w->up->down = w->down;
    else
        c->idle_top = w->down;
    if (w->down != NULL)
        w->down->up = w->up;
    w->up = w->down = NULL;
    w->parked = 0;
    atomic_fetch_sub_explicit(&c->idle_gauge, 1, memory_order_relaxed);
}

static echod_task_t *pop_locked(cached_t *c)
{
    echod_task_t *task = c->head;
    if ((c->head = task->next) == NULL)
        c->tail = &c->head;
    atomic_fetch_sub_explicit(&c->depth, 1, memory_order_relaxed);
    return task;
}

static void push_locked(cached_t *c, echod_task_t *task)
{
    task->next = NULL;
    *c->tail = task;
    c->tail = &task->next;
    atomic_fetch_add_explicit(&c->depth, 1, memory_order_relaxed);
}

/* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline; 0 or an errno. */
static int futex_sleep(_Atomic uint32_t *word, uint32_t val, const struct timespec *deadline)
{
    if (syscall(SYS_futex, word, FUTEX_WAIT_BITSET_PRIVATE, val, deadline, NULL, FUTEX_BITSET_MATCH_ANY) == 0)
        return 0;
    return errno;
}

static void futex_wake_one(_Atomic uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/*
 * Pops the top parked thread and hands it task: the TransferStack fulfil. Returns the thread
 * to wake once the lock is released (unpark_after_unlock), or NULL when the thread needs no
 * wake-up, or when no thread is parked (*taken says which).
 */
static cached_worker_t *handoff_locked(cached_t *c, echod_task_t *task, int *taken)
{
    cached_worker_t *w = c->idle_top;
    *taken = w != NULL;
    if (w == NULL)
        return NULL;
    remove_idle_locked(c, w);
    w->handoff = task;
    if (atomic_exchange_explicit(&w->park, PARK_HANDED, memory_order_acq_rel) != PARK_SLEEPING)
        return NULL; /* still awake: it sees HANDED before it would sleep */
    /* w may finish the task, exit and be joined before our wake: free_worker waits for us. */
    atomic_fetch_add_explicit(&w->wakers, 1, memory_order_relaxed);
    return w;
}

static void unpark_after_unlock(cached_worker_t *w)
{
    if (w == NULL)
        return;
    futex_wake_one(&w->park);
    atomic_fetch_sub_explicit(&w->wakers, 1, memory_order_release);
}

/*
 * Parked (pushed on the stack, lock released): yield once if the stack was empty, then sleep
 * until handed a task or the deadline. Returns 1 when handed (w->handoff, which destroy leaves
 * NULL), 0 on timeout: the caller retakes the lock and settles a hand-off racing the timeout.
 */
static int park(cached_worker_t *w, int stack_was_empty, const struct timespec *deadline)
{
    if (stack_was_empty)
        sched_yield();
    uint32_t expect = PARK_AWAKE;
    if (atomic_compare_exchange_strong_explicit(&w->park, &expect, PARK_SLEEPING, memory_order_acq_rel,
                                                memory_order_acquire)) {
        for (;;) {
            int err = futex_sleep(&w->park, PARK_SLEEPING, deadline);
            /* EAGAIN: handed (or timed out) before it slept; anything else returns from a sleep */
            if (err != EAGAIN)
                echod_exec__woke = 1;
            if (atomic_load_explicit(&w->park, memory_order_acquire) == PARK_HANDED)
                break;
            if (err == ETIMEDOUT)
                return 0;
        }
    }
    return 1;
}

/*
 * What a thread runs next. Called with the lock held; returns a task with the lock released,
 * or NULL, with the lock still held, when the thread should exit.
 */
static echod_task_t *next_task(cached_t *c, cached_worker_t *w)
{
    struct timespec deadline;
    int armed = 0;

    for (;;) {
        if (c->head != NULL) {
            echod_task_t *task = pop_locked(c);
            pthread_mutex_unlock(&c->lock);
            return task;
        }
        if (c->stopping)
            return NULL;
        if (!armed) {
            clock_gettime(CLOCK_MONOTONIC, &deadline);
            uint64_t ns = (uint64_t)deadline.tv_nsec + c->keep_alive_ns % 1000000000u;
            deadline.tv_sec += (time_t)(c->keep_alive_ns / 1000000000u + ns / 1000000000u);
            deadline.tv_nsec = (long)(ns % 1000000000u);
            armed = 1;
        }
        int was_empty = c->idle_top == NULL;
        push_idle_locked(c, w);
        pthread_mutex_unlock(&c->lock);
        echod_task_t *task;
        if (park(w, was_empty, &deadline)) {
            /* HANDED, read with acquire: the handoff written before it is ours to take. */
            task = w->handoff;
            w->handoff = NULL;
            if (task != NULL)
                return task;
            pthread_mutex_lock(&c->lock);
        } else {
            pthread_mutex_lock(&c->lock);
            if (w->parked) {
                /* keep_alive passed with nothing handed over: this thread is surplus. */
                remove_idle_locked(c, w);
                return NULL;
            }
            /* Handed over just as the deadline passed: HANDED and handoff were set under the lock. */
            if ((task = w->handoff) != NULL) {
                w->handoff = NULL;
                pthread_mutex_unlock(&c->lock);
                return task;
            }
        }
        /* Unparked without a task: destroy began. Loop to empty the queue, then leave. */
    }
}

static void free_worker(cached_worker_t *w)
{
    /* A submit that handed us our last task may still be inside its futex wake. */
    while (atomic_load_explicit(&w->wakers, memory_order_acquire) != 0)
        sched_yield();
    free(w);
}

static void *worker_main(void *arg)
{
    cached_worker_t *w = arg;
    cached_t *c = w->pool;
    echod_task_t *task = w->first;

    /*
     * Our own record of our id, for whoever joins us: it reaches them through the lock we exit
     * under, whereas POSIX does not promise pthread_create has stored it before we run.
     */
    w->tid = pthread_self();
    echod_exec__worker_enter(&c->super, w->index);
    atomic_store_explicit(&w->started, 1, memory_order_release);
    futex_wake_one(&w->started);
    for (;;) {
        echod_exec__run(&c->super, task);
        pthread_mutex_lock(&c->lock);
        if ((task = next_task(c, w)) == NULL)
            break;
    }
    echod_exec__worker_leave(&c->super);
    c->alive--;
    atomic_store_explicit(&c->alive_gauge, c->alive, memory_order_relaxed);
    cached_worker_t *prev = c->zombie;
    c->zombie = w;
    if (c->alive == 0 && c->stopping)
        pthread_cond_signal(&c->all_exited);
    pthread_mutex_unlock(&c->lock);

    /* c may be gone from here on; prev has exited or is about to, so this join is short. */
    if (prev != NULL) {
        pthread_join(prev->tid, NULL);
        free_worker(prev);
    }
    return NULL;
}

/*
 * Starts a thread whose first task is `task` and waits until it runs, as Thread.start() does
 * in HotSpot (the parent waits for the child to reach INITIALIZED): the submitter gives up the
 * CPU once per new thread, which lets threads already woken run and park again, so a burst
 * grows the pool about as far as the JDK's. 0 or an errno.
 */
static int spawn(cached_t *c, echod_task_t *task, unsigned index)
{
    cached_worker_t *w = echod_must(calloc(1, sizeof(*w)), "cached worker");
    atomic_init(&w->park, PARK_AWAKE);
    atomic_init(&w->wakers, 1); /* ours, until we stop reading `started` */
    atomic_init(&w->started, 0);
    w->pool = c;
    w->index = index;
    w->first = task;
    pthread_t unused;
    int ret = echod_exec__start_thread(&unused, worker_main, w);
    if (ret == 0)
        while (atomic_load_explicit(&w->started, memory_order_acquire) == 0)
            futex_sleep(&w->started, 0, NULL);
    atomic_fetch_sub_explicit(&w->wakers, 1, memory_order_release);
    if (ret != 0)
        free_worker(w);
    return ret;
}

static void cached_submit(echod_exec_t *exec, echod_task_t *task)
{
    cached_t *c = (cached_t *)exec;

    cached_worker_t *wake;
    int taken;

    pthread_mutex_lock(&c->lock);
    /* During destroy only queue: the threads still running empty the queue before they exit. */
    if (!c->stopping) {
        wake = handoff_locked(c, task, &taken);
        if (taken) {
            pthread_mutex_unlock(&c->lock);
            unpark_after_unlock(wake);
            return;
        }
        if (c->max_threads == 0 || c->alive < c->max_threads) {
            unsigned index = c->started++;
            c->alive++;
            atomic_store_explicit(&c->alive_gauge, c->alive, memory_order_relaxed);
            /* Thread creation is slow; submitters to this pool should not queue behind it. */
            pthread_mutex_unlock(&c->lock);
            if (spawn(c, task, index) == 0)
                return;
            pthread_mutex_lock(&c->lock);
            c->alive--;
            atomic_store_explicit(&c->alive_gauge, c->alive, memory_order_relaxed);
            /* No new thread: one may have parked meanwhile; failing that, queue for a live one. */
            wake = handoff_locked(c, task, &taken);
            if (taken) {
                pthread_mutex_unlock(&c->lock);
                unpark_after_unlock(wake);
                return;
            }
            if (c->alive == 0 && !c->stopping) {
                /* Nobody would ever take it: run it here (CallerRunsPolicy) rather than lose it. */
                pthread_mutex_unlock(&c->lock);
                echod_exec__run(&c->super, task);
                return;
            }
            /* Destroy may be waiting for our reservation to go; it runs what is left in the queue. */
            if (c->alive == 0)
                pthread_cond_signal(&c->all_exited);
        }
    }
    push_locked(c, task);
    pthread_mutex_unlock(&c->lock);
}

static unsigned cached_queue_depth(const echod_exec_t *exec)
{
    return atomic_load_explicit(&((const cached_t *)exec)->depth, memory_order_relaxed);
}

static unsigned cached_busy_threads(const echod_exec_t *exec)
{
    const cached_t *c = (const cached_t *)exec;
    /* Alive and not parked; a thread between tasks counts as busy for that instant. */
    unsigned alive = atomic_load_explicit(&c->alive_gauge, memory_order_relaxed);
    unsigned idle = atomic_load_explicit(&c->idle_gauge, memory_order_relaxed);
    return alive > idle ? alive - idle : 0;
}

static void cached_destroy(echod_exec_t *exec)
{
    cached_t *c = (cached_t *)exec;

    pthread_mutex_lock(&c->lock);
    c->stopping = 1;
    while (c->idle_top != NULL) {
        cached_worker_t *w = c->idle_top;
        remove_idle_locked(c, w);
        w->handoff = NULL;
        /* Woken under the lock: w cannot get past it to exit (and be freed) before we let go. */
        if (atomic_exchange_explicit(&w->park, PARK_HANDED, memory_order_acq_rel) == PARK_SLEEPING)
            futex_wake_one(&w->park);
    }
    while (c->alive > 0)
        pthread_cond_wait(&c->all_exited, &c->lock);
    cached_worker_t *last = c->zombie;
    c->zombie = NULL;
    pthread_mutex_unlock(&c->lock);
    /* Joining the last thread to exit transitively joins all: each joined its predecessor. */
    if (last != NULL) {
        pthread_join(last->tid, NULL);
        free_worker(last);
    }

    /*
     * Threads leave only with an empty queue, so anything here was submitted during destroy by
     * a worker of another executor after our last thread left. Run it rather than lose it.
     */
    echod_exec_t *prev = echod_exec__swap_current(&c->super);
    pthread_mutex_lock(&c->lock);
    while (c->head != NULL) {
        echod_task_t *task = pop_locked(c);
        pthread_mutex_unlock(&c->lock);
        echod_exec__run(&c->super, task);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    echod_exec__swap_current(prev);

    pthread_cond_destroy(&c->all_exited);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static const echod_exec_ops_t cached_ops = {
    .submit = cached_submit,
    .destroy = cached_destroy,
    .queue_depth = cached_queue_depth,
    .busy_threads = cached_busy_threads,
};

echod_exec_t *echod_exec__cached_create(const char *name, unsigned max_threads, uint64_t keep_alive_ms, char *err,
                                        size_t errlen)
{
    /* Past this the deadline arithmetic could overflow; nobody means a keep-alive of 500 years. */
    if (keep_alive_ms > UINT64_C(1) << 44) {
        echod_set_err(err, errlen, "executor cached: keep_alive %llu ms is too large",
                      (unsigned long long)keep_alive_ms);
        return NULL;
    }
    cached_t *c = echod_exec__alloc_lines(sizeof(*c));
    echod_exec__init(&c->super, &cached_ops, ECHOD_EXEC_CACHED, name);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->all_exited, NULL);
    c->idle_top = NULL;
    c->head = NULL;
    c->tail = &c->head;
    c->max_threads = max_threads;
    c->keep_alive_ns = keep_alive_ms * 1000000u;
    atomic_init(&c->depth, 0);
    atomic_init(&c->alive_gauge, 0);
    atomic_init(&c->idle_gauge, 0);
    return &c->super;
}
