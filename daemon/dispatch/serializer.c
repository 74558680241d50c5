#include <assert.h>
#include <sched.h>
#include <stddef.h>
#include "dispatch/serializer.h"
#include "metrics/metrics.h"

enum { STOPPED = 0, RUNNING = 1 };

/*
 * Vyukov's intrusive MPSC queue: push is one exchange, pop is consumer-only.
 *
 * The exchange is seq_cst, not just acq_rel (release publishes the step, acquire orders the link
 * after the previous push): submit's exchange on `head` then CAS on `running`, and drain_run's
 * exchange on `running` then load of `head`, are a store-buffering pair, and C11 forbids both
 * sides reading the other's old value only when all four are seq_cst. x86-64 (xchg) and aarch64
 * (swpal, or ldaxr/stlxr) emit the same instructions for both orders, so it costs nothing.
 */
static void mpsc_push(echod_serializer_t *s, echod_step_t *step)
{
    atomic_store_explicit(&step->next, NULL, memory_order_relaxed);
    echod_step_t *prev = atomic_exchange_explicit(&s->head, step, memory_order_seq_cst);
    atomic_store_explicit(&prev->next, step, memory_order_release);
}

static void set_tail(echod_serializer_t *s, echod_step_t *t)
{
    atomic_store_explicit(&s->tail, t, memory_order_relaxed);
}

static echod_step_t *mpsc_pop(echod_serializer_t *s)
{
    for (;;) {
        echod_step_t *tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
        echod_step_t *next = atomic_load_explicit(&tail->next, memory_order_acquire);
        if (tail == &s->stub) {
            if (next == NULL)
                return NULL;
            set_tail(s, next);
            tail = next;
            next = atomic_load_explicit(&next->next, memory_order_acquire);
        }
        if (next != NULL) {
            set_tail(s, next);
            return tail;
        }
        if (tail == atomic_load_explicit(&s->head, memory_order_acquire)) {
            /* tail is the last step: put the stub behind it so it can be taken */
            mpsc_push(s, &s->stub);
            next = atomic_load_explicit(&tail->next, memory_order_acquire);
            if (next != NULL) {
                set_tail(s, next);
                return tail;
            }
        }
        /* A producer swapped head but has not linked yet: it is a few instructions away. */
        sched_yield();
    }
}

/*
 * Called by a drain after it set STOPPED, when another drain may already be popping (and freeing)
 * steps: it must not touch any step. A drain ends with the stub as its tail and head, so head
 * pointing anywhere else means a producer pushed since.
 */
static int mpsc_empty(echod_serializer_t *s)
{
    return atomic_load_explicit(&s->head, memory_order_seq_cst) == &s->stub;
}

static void dispatch(echod_serializer_t *s)
{
    s->owner_retain(s);
    ECHOD_COUNT(s->exec_metrics->dispatches);
    echod_exec_submit(s->exec, &s->drain);
}

static void drain_run(echod_task_t *task)
{
    echod_serializer_t *s = (echod_serializer_t *)((char *)task - offsetof(echod_serializer_t, drain));
    echod_exec_t *exec = s->exec;
    echod_step_t *step;
    if (s->on_handoff != NULL && !echod_exec_is_direct(exec))
        s->on_handoff(s, echod_exec_task_woke());
    /* like SerializingExecutor.run: stop after a step that switched the executor */
    while (s->exec == exec && (step = mpsc_pop(s)) != NULL)
        step->run(step);
    /* Either the submitter's CAS sees STOPPED and dispatches, or we see its push (mpsc_push).
     * An exchange, not a store: docs/threads.md, "Store-buffering pairs". */
    atomic_exchange_explicit(&s->running, STOPPED, memory_order_seq_cst);
    if (!mpsc_empty(s)) {
        int expected = STOPPED;
        if (atomic_compare_exchange_strong(&s->running, &expected, RUNNING))
            dispatch(s);
    }
    s->owner_release(s);
}

void echod_serializer_init(echod_serializer_t *s, echod_exec_t *exec, echod_exec_metrics_t *exec_metrics,
                           echod_ser_mode_t mode)
{
    s->exec = exec;
    s->exec_metrics = exec_metrics;
    s->mode = mode;
    atomic_init(&s->running, STOPPED);
    atomic_init(&s->stub.next, NULL);
    atomic_init(&s->head, &s->stub);
    atomic_init(&s->tail, &s->stub);
    s->drain.next = NULL;
    s->drain.run = drain_run;
    s->on_handoff = NULL;
    s->inline_busy = 0;
    s->iq_head = s->iq_tail = NULL;
}

static void inline_submit(echod_serializer_t *s, echod_step_t *step)
{
    atomic_store_explicit(&step->next, NULL, memory_order_relaxed);
    if (s->inline_busy) {
        /* re-entrant submit: queue it behind the running step */
        if (s->iq_tail != NULL)
            atomic_store_explicit(&s->iq_tail->next, step, memory_order_relaxed);
        else
            s->iq_head = step;
        s->iq_tail = step;
        return;
    }
    s->inline_busy = 1;
    for (;;) {
        ECHOD_COUNT(echod_metrics.inline_runs);
        step->run(step);
        if ((step = s->iq_head) == NULL)
            break;
        s->iq_head = atomic_load_explicit(&step->next, memory_order_relaxed);
        if (s->iq_head == NULL)
            s->iq_tail = NULL;
    }
    s->inline_busy = 0;
}

static void passthrough_run(echod_task_t *task)
{
    echod_step_t *step = (echod_step_t *)task;
    echod_serializer_t *s = step->owner; /* read before run: the step may free itself */
    if (s->on_handoff != NULL)           /* pass-through is only ever a one-thread pool's */
        s->on_handoff(s, echod_exec_task_woke());
    step->run(step);
    s->owner_release(s);
}

static void passthrough_submit(echod_serializer_t *s, echod_step_t *step)
{
    s->owner_retain(s);
    step->owner = s;
    step->task.run = passthrough_run;
    ECHOD_COUNT(s->exec_metrics->dispatches);
    echod_exec_submit(s->exec, &step->task);
}

void echod_serializer_submit(echod_serializer_t *s, echod_step_t *step)
{
    switch (s->mode) {
    case ECHOD_SER_INLINE:
        inline_submit(s, step);
        return;
    case ECHOD_SER_PASSTHROUGH:
        passthrough_submit(s, step);
        return;
    case ECHOD_SER_SERIALIZING:
        break;
    }
    mpsc_push(s, step);
    int expected = STOPPED;
    if (atomic_compare_exchange_strong(&s->running, &expected, RUNNING))
        dispatch(s);
}

void echod_serializer_switch(echod_serializer_t *s, echod_exec_t *exec, echod_exec_metrics_t *exec_metrics)
{
    assert(s->mode == ECHOD_SER_SERIALIZING);
    s->exec = exec;
    s->exec_metrics = exec_metrics;
}
