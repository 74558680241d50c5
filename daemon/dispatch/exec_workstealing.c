/*
 * `workstealing`: the ForkJoinPool that carries virtual threads. n carrier threads, each with
 * its own queue; a carrier that runs dry steals from the others, then parks; a submission
 * unparks one parked carrier if there is one.
 *
 * Queues: 2n of them. Queue i < n belongs to carrier i and takes the submissions made on that
 * carrier (a task submitting a task). Queues n..2n-1 are submission queues for threads outside
 * the pool, picked by a per-thread number, as FJP picks an external queue by thread probe: the
 * I/O loop always feeds the same one, several loops spread out. A carrier looks at its own
 * queue first, then scans all the others from a random start.
 *
 * Order: both the owner and thieves take the oldest task (FIFO), which is FJP's asyncMode, the
 * mode the virtual-thread scheduler runs in: event-style tasks are never joined, so LIFO's
 * locality buys nothing and FIFO keeps one chatty call from starving the rest.
 *
 * Each queue is a linked list under its own mutex rather than a lock-free Chase-Lev deque: with
 * FIFO at both ends the owner and thieves meet at the same end anyway, so Chase-Lev's owner
 * fast path would not apply, and the mutex keeps this obviously correct. What the arm measures
 * is the structure (per-carrier queues, stealing, park/unpark), which this keeps.
 *
 * Parking without lost wake-ups: a carrier announces itself parked (nparked++), scans once
 * more, and only then sleeps; a submitter bumps the queue's size, then reads nparked. Both
 * sides use seq_cst, so either the carrier's rescan sees the task or the submitter sees the
 * carrier and unparks one.
 *
 * Threading: submit from any thread. A queue's list is guarded by its lock, its size is an
 * atomic readable without it; the parked stack, `parked` flags and `stopping` are guarded by
 * park_lock.
 */
#include <stdlib.h>
#include <string.h>
#include "dispatch/exec_internal.h"

typedef struct ws ws_t;
typedef struct ws_carrier ws_carrier_t;

typedef struct {
    _Alignas(ECHOD_EXEC_CACHE_LINE) pthread_mutex_t lock;
    echod_task_t *head;
    echod_task_t **tail;
    _Atomic unsigned size;
} ws_queue_t;

struct ws_carrier {
    _Alignas(ECHOD_EXEC_CACHE_LINE) ws_t *pool;
    unsigned index;
    pthread_t tid;
    uint32_t rng;
    _Atomic unsigned busy;
    pthread_cond_t wake;
    int parked;
    ws_carrier_t *up; /* parked stack links; `up` is towards the top */
    ws_carrier_t *down;
};

struct ws {
    echod_exec_t super;
    unsigned ncarriers;
    unsigned nqueues;
    ws_queue_t *queues;
    ws_carrier_t *carriers;
    _Alignas(ECHOD_EXEC_CACHE_LINE) pthread_mutex_t park_lock;
    ws_carrier_t *parked_top; /* LIFO: the most recently parked carrier has the warmest cache */
    _Atomic unsigned nparked;
    int stopping;
};

/* The carrier the calling thread is, of whichever pool; NULL outside every pool. */
static _Thread_local ws_carrier_t *self_carrier;

/* Which external queue the calling thread feeds (0: not assigned yet). */
static _Thread_local unsigned self_probe;
static _Atomic unsigned next_probe;

static void queue_push(ws_queue_t *q, echod_task_t *task)
{
    task->next = NULL;
    pthread_mutex_lock(&q->lock);
    *q->tail = task;
    q->tail = &task->next;
    atomic_fetch_add_explicit(&q->size, 1, memory_order_seq_cst);
    pthread_mutex_unlock(&q->lock);
}

static echod_task_t *queue_take(ws_queue_t *q)
{
    /* The unlocked peek keeps scans from bouncing the locks of empty queues. */
    if (atomic_load_explicit(&q->size, memory_order_seq_cst) == 0)
        return NULL;
    pthread_mutex_lock(&q->lock);
    echod_task_t *task = q->head;
    if (task != NULL) {
        if ((q->head = task->next) == NULL)
            q->tail = &q->head;
        atomic_fetch_sub_explicit(&q->size, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&q->lock);
    return task;
}

static uint32_t next_random(uint32_t *state)
{
    uint32_t x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *state = x;
}

/* The carrier's own queue first, then every other queue from a random start. */
static echod_task_t *scan(ws_t *ws, ws_carrier_t *self)
{
    echod_task_t *task = queue_take(&ws->queues[self->index]);
    if (task != NULL)
        return task;
    unsigned start = next_random(&self->rng) % ws->nqueues;
    for (unsigned i = 0; i < ws->nqueues; i++) {
        unsigned q = (start + i) % ws->nqueues;
        if (q != self->index && (task = queue_take(&ws->queues[q])) != NULL)
            return task;
    }
    return NULL;
}

static void park_push_locked(ws_t *ws, ws_carrier_t *c)
{
    c->parked = 1;
    c->up = NULL;
    c->down = ws->parked_top;
    if (ws->parked_top != NULL)
        ws->parked_top->up = c;
    ws->parked_top = c;
    atomic_fetch_add_explicit(&ws->nparked, 1, memory_order_seq_cst);
}

static void park_remove_locked(ws_t *ws, ws_carrier_t *c)
{
    if (c->up != NULL)
        c->up->down = c->down;
    else
        ws->parked_top = c->down;
    if (c->down != NULL)
        c->down->up = c->up;
    c->up = c->down = NULL;
    c->parked = 0;
    atomic_fetch_sub_explicit(&ws->nparked, 1, memory_order_seq_cst);
}

static void unpark_one(ws_t *ws)
{
    pthread_mutex_lock(&ws->park_lock);
    ws_carrier_t *c = ws->parked_top;
    if (c != NULL)
        park_remove_locked(ws, c);
    pthread_mutex_unlock(&ws->park_lock);
    /* Carriers live until destroy has joined them, so signalling outside the lock is safe. */
    if (c != NULL)
        pthread_cond_signal(&c->wake);
}

static void run_on_carrier(ws_t *ws, ws_carrier_t *self, echod_task_t *task)
{
    atomic_store_explicit(&self->busy, 1, memory_order_relaxed);
    echod_exec__run(&ws->super, task);
    atomic_store_explicit(&self->busy, 0, memory_order_relaxed);
}

static void *carrier_main(void *arg)
{
    ws_carrier_t *self = arg;
    ws_t *ws = self->pool;

    echod_exec__worker_enter(&ws->super, self->index);
    self_carrier = self;
    for (;;) {
        echod_task_t *task = scan(ws, self);
        if (task != NULL) {
            run_on_carrier(ws, self, task);
            continue;
        }
        pthread_mutex_lock(&ws->park_lock);
        if (ws->stopping) {
            /*
             * Nothing left that is ours to find: a task still running elsewhere pushes what it
             * submits onto its own carrier's queue, and that carrier looks there next.
             */
            pthread_mutex_unlock(&ws->park_lock);
            break;
        }
        park_push_locked(ws, self);
        pthread_mutex_unlock(&ws->park_lock);

        task = scan(ws, self);

        pthread_mutex_lock(&ws->park_lock);
        if (task != NULL) {
            if (self->parked)
                park_remove_locked(ws, self);
            pthread_mutex_unlock(&ws->park_lock);
            run_on_carrier(ws, self, task);
            continue;
        }
        while (self->parked) {
            pthread_cond_wait(&self->wake, &ws->park_lock);
            echod_exec__woke = 1;
        }
        pthread_mutex_unlock(&ws->park_lock);
    }
    self_carrier = NULL;
    echod_exec__worker_leave(&ws->super);
    return NULL;
}

static void ws_submit(echod_exec_t *exec, echod_task_t *task)
{
    ws_t *ws = (ws_t *)exec;
    ws_queue_t *q;

    if (self_carrier != NULL && self_carrier->pool == ws) {
        q = &ws->queues[self_carrier->index];
    } else {
        if (self_probe == 0)
            self_probe = atomic_fetch_add_explicit(&next_probe, 1, memory_order_relaxed) + 1;
        q = &ws->queues[ws->ncarriers + self_probe % ws->ncarriers];
    }
    queue_push(q, task);
    if (atomic_load_explicit(&ws->nparked, memory_order_seq_cst) > 0)
        unpark_one(ws);
}

static unsigned ws_queue_depth(const echod_exec_t *exec)
{
    const ws_t *ws = (const ws_t *)exec;
    unsigned n = 0;
    for (unsigned i = 0; i < ws->nqueues; i++)
        n += atomic_load_explicit(&ws->queues[i].size, memory_order_relaxed);
    return n;
}

static unsigned ws_busy_threads(const echod_exec_t *exec)
{
    const ws_t *ws = (const ws_t *)exec;
    unsigned n = 0;
    for (unsigned i = 0; i < ws->ncarriers; i++)
        n += atomic_load_explicit(&ws->carriers[i].busy, memory_order_relaxed);
    return n;
}

/* Stops and joins the first `started` carriers, runs any stragglers, frees everything. */
static void shutdown_and_free(ws_t *ws, unsigned started)
{
    pthread_mutex_lock(&ws->park_lock);
    ws->stopping = 1;
    ws_carrier_t *woken = NULL;
    while (ws->parked_top != NULL) {
        ws_carrier_t *c = ws->parked_top;
        park_remove_locked(ws, c);
        c->down = woken; /* reuse the link to signal them after unlocking */
        woken = c;
    }
    pthread_mutex_unlock(&ws->park_lock);
    for (ws_carrier_t *c = woken, *next; c != NULL; c = next) {
        next = c->down;
        pthread_cond_signal(&c->wake);
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(ws->carriers[i].tid, NULL);

    /*
     * Carriers leave only after a scan of every queue found nothing, so this finds work only if
     * a worker of another executor submitted here during destroy. Run it rather than lose it;
     * what it submits lands in an external queue and is picked up by the next pass.
     */
    echod_exec_t *prev = echod_exec__swap_current(&ws->super);
    for (int found = 1; found;) {
        found = 0;
        for (unsigned i = 0; i < ws->nqueues; i++) {
            echod_task_t *task;
            while ((task = queue_take(&ws->queues[i])) != NULL) {
                echod_exec__run(&ws->super, task);
                found = 1;
            }
        }
    }
    echod_exec__swap_current(prev);

    for (unsigned i = 0; i < ws->nqueues; i++)
        pthread_mutex_destroy(&ws->queues[i].lock);
    for (unsigned i = 0; i < ws->ncarriers; i++)
        pthread_cond_destroy(&ws->carriers[i].wake);
    pthread_mutex_destroy(&ws->park_lock);
    free(ws->queues);
    free(ws->carriers);
    free(ws);
}

static void ws_destroy(echod_exec_t *exec)
{
    ws_t *ws = (ws_t *)exec;
    shutdown_and_free(ws, ws->ncarriers);
}

static const echod_exec_ops_t ws_ops = {
    .submit = ws_submit,
    .destroy = ws_destroy,
    .queue_depth = ws_queue_depth,
    .busy_threads = ws_busy_threads,
};

echod_exec_t *echod_exec__workstealing_create(const char *name, unsigned threads, char *err, size_t errlen)
{
    if (threads == 0) {
        echod_set_err(err, errlen, "executor workstealing: threads must be at least 1");
        return NULL;
    }
    ws_t *ws = echod_exec__alloc_lines(sizeof(*ws));
    ws_queue_t *queues = echod_exec__alloc_lines(sizeof(*queues) * 2 * threads);
    ws_carrier_t *carriers = echod_exec__alloc_lines(sizeof(*carriers) * threads);
    echod_exec__init(&ws->super, &ws_ops, ECHOD_EXEC_WORKSTEALING, name);
    ws->ncarriers = threads;
    ws->nqueues = 2 * threads;
    ws->queues = queues;
    ws->carriers = carriers;
    pthread_mutex_init(&ws->park_lock, NULL);
    ws->parked_top = NULL;
    atomic_init(&ws->nparked, 0);
    ws->stopping = 0;
    for (unsigned i = 0; i < ws->nqueues; i++) {
        pthread_mutex_init(&queues[i].lock, NULL);
        queues[i].head = NULL;
        queues[i].tail = &queues[i].head;
        atomic_init(&queues[i].size, 0);
    }
    for (unsigned i = 0; i < threads; i++) {
        carriers[i].pool = ws;
        carriers[i].index = i;
        /* Any non-zero seed will do for xorshift; spread them so carriers start scans apart. */
        carriers[i].rng = (i + 1) * 0x9E3779B9u;
        atomic_init(&carriers[i].busy, 0);
        pthread_cond_init(&carriers[i].wake, NULL);
        carriers[i].parked = 0;
    }
    for (unsigned i = 0; i < threads; i++) {
        int ret = echod_exec__start_thread(&carriers[i].tid, carrier_main, &carriers[i]);
        if (ret != 0) {
            echod_set_err(err, errlen, "executor workstealing: starting thread %u of %u: %s" THREAD_HINT, i + 1,
                          threads, strerror(ret));
            shutdown_and_free(ws, i);
            return NULL;
        }
    }
    return &ws->super;
}
