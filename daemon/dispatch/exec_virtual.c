/*
 * `virtual`: Executors.newVirtualThreadPerTaskExecutor() on JDK 21's default scheduler
 * (docs/virtual-threads.md). Every submitted task (a serializer drain) starts a new virtual
 * thread, which runs on a stack (and that stack's fiber) from this executor's pool. Virtual
 * threads are mounted by carriers, a `workstealing` pool built inside this one (the JDK's
 * ForkJoinPool in async mode: own queues, stealing, parking): the carrier pool runs one small
 * task per mount, and that task switches into the fiber and back.
 *
 * A fiber that sleeps (echod_exec_sleep) yields to its carrier, which then files it with the
 * unparker: one timer thread per executor ("VirtualThread-unparker" in the JDK) that resubmits it
 * to the carriers when its time comes, one more hand-off, as in the JDK. echod_exec_interrupt
 * (the call was cancelled, timed out or cut by drain) takes it off the timer and resubmits it at
 * once. A fiber that computes keeps its carrier until it sleeps or ends.
 *
 * The order that keeps a fiber from running twice: it is filed (timer heap) only by its carrier
 * after the switch away has completed, and it leaves the heap only under the same lock, by
 * whoever resubmits it; the resubmission is the only way back onto a carrier.
 *
 * A virtual thread is a small struct from submit on, as in the JDK; its stack is taken when a
 * carrier first mounts it, so a deep queue costs no stacks. A stack is one mapping: a PROT_NONE
 * guard page at the bottom (an overflow faults instead of corrupting memory), the stack, and its
 * pool header at the top. Ended ones go back to a pool (at most POOL_IDLE_MAX idle), so a steady
 * load maps nothing.
 *
 * Threading: submit from any thread; the timer heap, `stopping` and every sleeper's `parked` are
 * guarded by timer_lock, the stack pool by pool_lock; counters are atomics.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "dispatch/exec_internal.h"
#include "dispatch/fiber.h"

/* Stacks of ended virtual threads kept mapped for reuse; beyond this they are unmapped. */
#define POOL_IDLE_MAX 64

typedef enum { VT_NEW = 0, VT_RUNNING, VT_PARKING, VT_PARKED, VT_DONE } vt_state_t;

typedef struct vt vt_t;
typedef struct vexec vexec_t;
typedef struct vstack vstack_t;

/* At the top of each stack mapping, above the stack itself. */
struct vstack {
    echod_fiber_t fiber; /* runs the virtual threads that get this stack, one after another */
    vt_t *vt;            /* the one that has it now */
    void *map;           /* the whole mapping: guard page, stack, this header */
    vstack_t *next_idle;
    unsigned valgrind_id;
};

struct vt {
    echod_task_t mount; /* what the carriers run: mount this virtual thread until it yields */
    vexec_t *owner;
    echod_task_t *task;     /* the submitted task this virtual thread runs */
    vt_state_t state;       /* written by the fiber before it yields, read by its carrier after */
    echod_fiber_t *carrier; /* the carrier context it is mounted on (set at each mount) */
    uint64_t wake_ns;       /* while parking/parked */
    echod_exec_sleeper_t *sleeper;
    size_t heap_index; /* while parked */
    vt_t *next_due;    /* in the unparker's batch */
    vstack_t *stack;   /* from the first mount on */
};

struct vexec {
    echod_exec_t super;
    echod_exec_t *carriers; /* a workstealing pool */
    size_t stack_bytes;     /* usable, page-rounded */
    size_t map_bytes;       /* guard + stack + header page */
    size_t page;
    _Atomic uint64_t started, parks, unparks;
    _Atomic unsigned live;
    _Atomic size_t stack_peak;

    _Alignas(ECHOD_EXEC_CACHE_LINE) pthread_mutex_t pool_lock;
    vstack_t *idle;
    unsigned nidle;

    _Alignas(ECHOD_EXEC_CACHE_LINE) pthread_mutex_t timer_lock;
    pthread_cond_t timer_wake; /* CLOCK_MONOTONIC */
    vt_t **heap;               /* min-heap on wake_ns */
    size_t nheap, heap_cap;
    int stopping; /* destroy began: parking resubmits at once, the unparker ends when told */
    int unparker_quit;
    pthread_t unparker;
    int unparker_started;

    pthread_mutex_t idle_lock; /* destroy waits here for live to reach 0 */
    pthread_cond_t idle_cond;
    _Atomic int draining;
};

/* The carrier context of this thread (its own stack), made at its first mount. */
static _Thread_local echod_fiber_t carrier_ctx;
static _Thread_local int carrier_ctx_made;
/* The virtual thread mounted on this carrier right now: read only between switches. */
static _Thread_local vt_t *mounted;

/* --- the stack pool --- */

static void stack_main(void *arg);

static char *stack_lo(const vexec_t *vx, const vstack_t *st)
{
    return (char *)st->map + vx->page;
}

static void note_peak(vexec_t *vx, const vstack_t *st)
{
    /* The lowest page ever touched is resident (mincore), then its first non-zero word. */
    char *lo = stack_lo(vx, st), *top = (char *)st;
    size_t npages = ((size_t)(top - lo) + vx->page - 1) / vx->page;
    unsigned char vec[4096];
    if (npages > sizeof(vec) || mincore(lo, npages * vx->page, vec) != 0)
        return;
    for (size_t i = 0; i < npages; i++) {
        if (!(vec[i] & 1))
            continue;
        echod_fiber_stack_peek(lo + i * vx->page, vx->page);
        const uint64_t *w = (const uint64_t *)(lo + i * vx->page);
        while ((const char *)w < top && *w == 0)
            w++;
        size_t used = (size_t)(top - (const char *)w);
        size_t old = atomic_load_explicit(&vx->stack_peak, memory_order_relaxed);
        while (used > old && !atomic_compare_exchange_weak_explicit(&vx->stack_peak, &old, used, memory_order_relaxed,
                                                                    memory_order_relaxed))
            ;
        return;
    }
}

static void unmap_stack(vexec_t *vx, vstack_t *st)
{
    note_peak(vx, st);
    echod_fiber_dispose(&st->fiber);
    echod_fiber_stack_deregister(st->valgrind_id);
    munmap(st->map, vx->map_bytes);
}

static vstack_t *take_stack(vexec_t *vx)
{
    pthread_mutex_lock(&vx->pool_lock);
    vstack_t *st = vx->idle;
    if (st != NULL) {
        vx->idle = st->next_idle;
        vx->nidle--;
    }
    pthread_mutex_unlock(&vx->pool_lock);
    if (st != NULL)
        return st;
    void *map = mmap(NULL, vx->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    if (mprotect(map, vx->page, PROT_NONE) != 0) {
        munmap(map, vx->map_bytes);
        return NULL;
    }
    /* the header sits at the very top; the stack grows down from just below it */
    st = (vstack_t *)(((uintptr_t)map + vx->map_bytes - sizeof(vstack_t)) & ~(uintptr_t)(ECHOD_EXEC_CACHE_LINE - 1));
    memset(st, 0, sizeof(*st));
    st->map = map;
    char *lo = stack_lo(vx, st);
    st->valgrind_id = echod_fiber_stack_register(lo, (size_t)((char *)st - lo));
    echod_fiber_make(&st->fiber, lo, (size_t)((char *)st - lo), stack_main, st);
    return st;
}

static void put_stack(vexec_t *vx, vstack_t *st)
{
    pthread_mutex_lock(&vx->pool_lock);
    if (vx->nidle < POOL_IDLE_MAX) {
        st->next_idle = vx->idle;
        vx->idle = st;
        vx->nidle++;
        st = NULL;
    }
    pthread_mutex_unlock(&vx->pool_lock);
    if (st != NULL)
        unmap_stack(vx, st);
}

/* --- the timer heap (timer_lock held) --- */

static void heap_set(vexec_t *vx, size_t i, vt_t *v)
{
    vx->heap[i] = v;
    v->heap_index = i;
}

static void heap_up(vexec_t *vx, size_t i)
{
    vt_t *v = vx->heap[i];
    while (i > 0 && vx->heap[(i - 1) / 2]->wake_ns > v->wake_ns) {
        heap_set(vx, i, vx->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(vx, i, v);
}

static void heap_down(vexec_t *vx, size_t i)
{
    vt_t *v = vx->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= vx->nheap)
            break;
        if (c + 1 < vx->nheap && vx->heap[c + 1]->wake_ns < vx->heap[c]->wake_ns)
            c++;
        if (vx->heap[c]->wake_ns >= v->wake_ns)
            break;
        heap_set(vx, i, vx->heap[c]);
        i = c;
    }
    heap_set(vx, i, v);
}

static void heap_push(vexec_t *vx, vt_t *v)
{
    if (vx->nheap == vx->heap_cap) {
        size_t cap = vx->heap_cap != 0 ? 2 * vx->heap_cap : 64;
        vx->heap = echod_must(realloc(vx->heap, cap * sizeof(*vx->heap)), "virtual thread timers");
        vx->heap_cap = cap;
    }
    vx->heap[vx->nheap] = v;
    v->heap_index = vx->nheap++;
    heap_up(vx, v->heap_index);
}

static void heap_remove(vexec_t *vx, vt_t *v)
{
    size_t i = v->heap_index;
    vt_t *last = vx->heap[--vx->nheap];
    if (i == vx->nheap)
        return;
    heap_set(vx, i, last);
    heap_up(vx, i);
    heap_down(vx, last->heap_index);
}

/* --- mounting --- */

static void resubmit(vexec_t *vx, vt_t *v)
{
    atomic_fetch_add_explicit(&vx->unparks, 1, memory_order_relaxed);
    echod_exec_submit(vx->carriers, &v->mount);
}

/* On the carrier, after the fiber has yielded for a sleep: file it with the unparker. */
static void file_parked(vexec_t *vx, vt_t *v)
{
    echod_exec_sleeper_t *s = v->sleeper;
    /* seq_cst pairs with echod_exec_interrupt: it either sees this executor or we see its cancel
     * (an exchange, not a store: docs/threads.md, "Store-buffering pairs") */
    atomic_exchange_explicit(&s->exec, &vx->super, memory_order_seq_cst);
    pthread_mutex_lock(&vx->timer_lock);
    int wake_now = vx->stopping || atomic_load_explicit(s->cancelled, memory_order_seq_cst);
    if (!wake_now) {
        v->state = VT_PARKED;
        heap_push(vx, v);
        s->parked = v;
        if (v->heap_index == 0)
            pthread_cond_signal(&vx->timer_wake);
    }
    pthread_mutex_unlock(&vx->timer_lock);
    if (wake_now)
        resubmit(vx, v);
}

/* A virtual thread is over: its stack back to the pool, the struct freed, destroy told. */
static void vt_ended(vexec_t *vx, vt_t *v)
{
    if (v->stack != NULL)
        put_stack(vx, v->stack);
    free(v);
    /* seq_cst pairs with vx_destroy's exchange of `draining` then load of `live`: either it sees our
     * decrement, or we see `draining` and wake it (under idle_lock, so the wake-up is not lost) */
    if (atomic_fetch_sub_explicit(&vx->live, 1, memory_order_seq_cst) == 1 &&
        atomic_load_explicit(&vx->draining, memory_order_seq_cst)) {
        pthread_mutex_lock(&vx->idle_lock);
        pthread_cond_broadcast(&vx->idle_cond);
        pthread_mutex_unlock(&vx->idle_lock);
    }
}

/* A stack's fiber: each turn runs the virtual thread that took the stack, to its end. */
static void stack_main(void *arg)
{
    vstack_t *st = arg;
    for (;;) {
        vt_t *v = st->vt;
        v->task->run(v->task);
        v->state = VT_DONE;
        echod_fiber_switch(&st->fiber, v->carrier);
    }
}

/* The carriers' task: run the virtual thread until it yields or ends, then act on which. */
static void mount_run(echod_task_t *task)
{
    vt_t *v = (vt_t *)((char *)task - offsetof(vt_t, mount));
    vexec_t *vx = v->owner;
    if (v->state == VT_NEW) {
        if (vx->super.on_start != NULL) {
            uint64_t now = echod_now_ns(), then = v->task->enqueued_ns;
            vx->super.on_start(vx->super.on_start_ctx, now > then ? now - then : 0);
        }
        if ((v->stack = take_stack(vx)) == NULL) {
            /* no memory for a stack: run it on the carrier's own (a sleep then blocks the carrier) */
            v->task->run(v->task);
            vt_ended(vx, v);
            return;
        }
        v->stack->vt = v;
    }
    if (!carrier_ctx_made) {
        echod_fiber_init_thread(&carrier_ctx);
        carrier_ctx_made = 1;
    }
    v->state = VT_RUNNING;
    v->carrier = &carrier_ctx;
    mounted = v;
    echod_fiber_switch(&carrier_ctx, &v->stack->fiber);
    mounted = NULL;
    if (v->state == VT_DONE)
        vt_ended(vx, v);
    else
        file_parked(vx, v);
}

static void vx_submit(echod_exec_t *exec, echod_task_t *task)
{
    vexec_t *vx = (vexec_t *)exec;
    vt_t *v = echod_must(calloc(1, sizeof(*v)), "virtual thread");
    v->owner = vx;
    v->task = task;
    v->state = VT_NEW;
    v->mount.run = mount_run;
    atomic_fetch_add_explicit(&vx->started, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&vx->live, 1, memory_order_relaxed);
    echod_exec_submit(vx->carriers, &v->mount);
}

/* --- sleeping --- */

/* Not inlined: a thread-local's address must be taken afresh, never cached across a switch. */
static __attribute__((noinline)) vt_t *current_vt(void)
{
    return mounted;
}

void echod_exec_sleeper_init(echod_exec_sleeper_t *s, const atomic_int *cancelled)
{
    s->cancelled = cancelled;
    atomic_init(&s->exec, NULL);
    s->parked = NULL;
}

int echod_exec_sleep(echod_exec_sleeper_t *s, uint64_t ns)
{
    vt_t *v = current_vt();
    if (v == NULL)
        return -1;
    /* only a shortcut: file_parked's seq_cst read under the timer lock is what no cancel gets past */
    if (ns == 0 || atomic_load_explicit(s->cancelled, memory_order_relaxed))
        return 0;
    atomic_fetch_add_explicit(&v->owner->parks, 1, memory_order_relaxed);
    v->wake_ns = echod_now_ns() + ns;
    v->sleeper = s;
    v->state = VT_PARKING;
    echod_fiber_switch(&v->stack->fiber, v->carrier);
    /* resumed, maybe on another carrier (v->carrier is the new one) */
    v->sleeper = NULL;
    return 0;
}

void echod_exec_interrupt(echod_exec_sleeper_t *s)
{
    echod_exec_t *exec = atomic_load_explicit(&s->exec, memory_order_seq_cst);
    if (exec == NULL)
        return;
    vexec_t *vx = (vexec_t *)exec;
    pthread_mutex_lock(&vx->timer_lock);
    vt_t *v = s->parked;
    if (v != NULL) {
        heap_remove(vx, v);
        s->parked = NULL;
    }
    pthread_mutex_unlock(&vx->timer_lock);
    if (v != NULL)
        resubmit(vx, v);
}

/* --- the unparker --- */

static void *unparker_main(void *arg)
{
    vexec_t *vx = arg;
    (void)pthread_setname_np(pthread_self(), "echod-unparker");
    atomic_fetch_add_explicit(&vx->super.threads, 1, memory_order_relaxed);
    pthread_mutex_lock(&vx->timer_lock);
    while (!vx->unparker_quit) {
        if (vx->nheap == 0) {
            pthread_cond_wait(&vx->timer_wake, &vx->timer_lock);
            continue;
        }
        uint64_t now = echod_now_ns();
        vt_t *due = NULL;
        /* everything due goes in one batch, resubmitted outside the lock */
        while (vx->nheap != 0 && vx->heap[0]->wake_ns <= now) {
            vt_t *v = vx->heap[0];
            heap_remove(vx, v);
            v->sleeper->parked = NULL;
            v->next_due = due;
            due = v;
        }
        if (due != NULL) {
            pthread_mutex_unlock(&vx->timer_lock);
            for (vt_t *v = due, *next; v != NULL; v = next) {
                next = v->next_due;
                resubmit(vx, v);
            }
            pthread_mutex_lock(&vx->timer_lock);
            continue;
        }
        echod_cond_wait_until(&vx->timer_wake, &vx->timer_lock, vx->heap[0]->wake_ns);
    }
    pthread_mutex_unlock(&vx->timer_lock);
    atomic_fetch_sub_explicit(&vx->super.threads, 1, memory_order_relaxed);
    return NULL;
}

/* --- gauges --- */

static unsigned vx_queue_depth(const echod_exec_t *exec)
{
    return echod_exec_queue_depth(((const vexec_t *)exec)->carriers);
}

static unsigned vx_busy_threads(const echod_exec_t *exec)
{
    return echod_exec_busy_threads(((const vexec_t *)exec)->carriers);
}

static unsigned vx_threads(const echod_exec_t *exec)
{
    const vexec_t *vx = (const vexec_t *)exec;
    return echod_exec_threads(vx->carriers) + atomic_load_explicit(&vx->super.threads, memory_order_relaxed);
}

static void vx_vthreads(const echod_exec_t *exec, echod_exec_vthreads_t *out)
{
    vexec_t *vx = (vexec_t *)exec;
    /* idle stacks show how deep the ended ones went; the scan is per scrape, not per call */
    pthread_mutex_lock(&vx->pool_lock);
    for (vstack_t *st = vx->idle; st != NULL; st = st->next_idle)
        note_peak(vx, st);
    pthread_mutex_unlock(&vx->pool_lock);
    out->started = atomic_load_explicit(&vx->started, memory_order_relaxed);
    out->parks = atomic_load_explicit(&vx->parks, memory_order_relaxed);
    out->unparks = atomic_load_explicit(&vx->unparks, memory_order_relaxed);
    out->live = atomic_load_explicit(&vx->live, memory_order_relaxed);
    out->stack_bytes = vx->stack_bytes;
    out->stack_peak_bytes = atomic_load_explicit(&vx->stack_peak, memory_order_relaxed);
}

/* --- life --- */

static void free_vexec(vexec_t *vx)
{
    if (vx->unparker_started) {
        pthread_mutex_lock(&vx->timer_lock);
        vx->unparker_quit = 1;
        pthread_cond_signal(&vx->timer_wake);
        pthread_mutex_unlock(&vx->timer_lock);
        pthread_join(vx->unparker, NULL);
    }
    echod_exec_destroy(vx->carriers);
    for (vstack_t *st = vx->idle, *next; st != NULL; st = next) {
        next = st->next_idle;
        unmap_stack(vx, st);
    }
    free(vx->heap);
    pthread_mutex_destroy(&vx->pool_lock);
    pthread_mutex_destroy(&vx->timer_lock);
    pthread_cond_destroy(&vx->timer_wake);
    pthread_mutex_destroy(&vx->idle_lock);
    pthread_cond_destroy(&vx->idle_cond);
    free(vx);
}

/*
 * Wakes every sleeper now (a parked fiber would otherwise hold shutdown for the rest of its
 * sleep; drain has already cut the calls that were still open), waits for the last virtual
 * thread to end, then stops the unparker and the carriers.
 */
static void vx_destroy(echod_exec_t *exec)
{
    vexec_t *vx = (vexec_t *)exec;
    pthread_mutex_lock(&vx->timer_lock);
    vx->stopping = 1;
    vt_t *due = NULL;
    while (vx->nheap != 0) {
        vt_t *v = vx->heap[0];
        heap_remove(vx, v);
        v->sleeper->parked = NULL;
        v->next_due = due;
        due = v;
    }
    pthread_mutex_unlock(&vx->timer_lock);
    for (vt_t *v = due, *next; v != NULL; v = next) {
        next = v->next_due;
        resubmit(vx, v);
    }
    atomic_exchange_explicit(&vx->draining, 1, memory_order_seq_cst); /* vt_ended's pair */
    pthread_mutex_lock(&vx->idle_lock);
    while (atomic_load_explicit(&vx->live, memory_order_seq_cst) != 0)
        pthread_cond_wait(&vx->idle_cond, &vx->idle_lock);
    pthread_mutex_unlock(&vx->idle_lock);
    free_vexec(vx);
}

static const echod_exec_ops_t vx_ops = {
    .submit = vx_submit,
    .destroy = vx_destroy,
    .queue_depth = vx_queue_depth,
    .busy_threads = vx_busy_threads,
    .threads = vx_threads,
    .vthreads = vx_vthreads,
};

echod_exec_t *echod_exec__virtual_create(const char *name, unsigned threads, size_t stack_bytes, char *err,
                                         size_t errlen)
{
    if (threads == 0) {
        echod_set_err(err, errlen, "executor virtual: threads must be at least 1");
        return NULL;
    }
    vexec_t *vx = echod_exec__alloc_lines(sizeof(*vx));
    echod_exec__init(&vx->super, &vx_ops, ECHOD_EXEC_VIRTUAL, name);
    long page = sysconf(_SC_PAGESIZE);
    vx->page = page > 0 ? (size_t)page : 4096;
    if (stack_bytes == 0)
        stack_bytes = ECHOD_EXEC_STACK_BYTES_DEFAULT;
    vx->stack_bytes = (stack_bytes + vx->page - 1) / vx->page * vx->page;
    /* guard page + stack + a page whose top holds the pool header (the rest is stack too) */
    vx->map_bytes = vx->page + vx->stack_bytes + vx->page;
    pthread_mutex_init(&vx->pool_lock, NULL);
    pthread_mutex_init(&vx->timer_lock, NULL);
    echod_cond_init_monotonic(&vx->timer_wake);
    pthread_mutex_init(&vx->idle_lock, NULL);
    pthread_cond_init(&vx->idle_cond, NULL);

    /* the carriers carry this executor's name: echod-virtual-0, ... */
    if ((vx->carriers = echod_exec__workstealing_create(vx->super.name, threads, err, errlen)) == NULL) {
        free_vexec(vx);
        return NULL;
    }
    int ret = echod_exec__start_thread(&vx->unparker, unparker_main, vx);
    if (ret != 0) {
        echod_set_err(err, errlen, "executor virtual: starting the unparker thread: %s" THREAD_HINT, strerror(ret));
        free_vexec(vx);
        return NULL;
    }
    vx->unparker_started = 1;
    return &vx->super;
}
