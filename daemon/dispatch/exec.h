/*
 * Executors: where a call's steps run (docs/dispatch-model.md, section 4). An executor takes tasks and runs
 * each exactly once, on a thread of its choosing; it knows nothing of calls or steps.
 *
 * Threading: echod_exec_submit is safe from any thread, including the executor's own workers.
 * create/destroy are called on the main thread only. A task struct is owned by the submitter
 * until run() is called; the executor never touches it after calling run().
 */
#ifndef ECHOD_EXEC_H
#define ECHOD_EXEC_H

#include <stdatomic.h>
#include <stdint.h>
#include "config/config.h"

typedef struct echod_task echod_task_t;
struct echod_task {
    echod_task_t *next; /* executor-private link while queued */
    void (*run)(echod_task_t *task);
    uint64_t enqueued_ns; /* set by the executor at submit (not by direct); for the queue-wait histogram */
};

typedef struct echod_exec echod_exec_t;

/*
 * Creates an executor. `name` is used for thread names ("echod-fixed-3": name + index, at most
 * 15 chars as Linux allows; a long name is cut so the index survives; NULL: "echod-<mode>").
 * `direct` creates no threads and runs tasks inside submit.
 * Returns NULL and fills err on failure (thread creation, bad parameters).
 */
echod_exec_t *echod_exec_create(const echod_exec_config_t *cfg, const char *name, char *err, size_t errlen);

/* Runs task->run(task) exactly once, now (direct) or later on a worker thread. */
void echod_exec_submit(echod_exec_t *exec, echod_task_t *task);

/*
 * Optional: on_start(ctx, wait_ns) is called on the worker just before each task runs, with
 * the nanoseconds the task spent queued (now minus enqueued_ns), for the queue-wait histogram.
 * It runs on every task's hot path, so keep it to a few atomics. Set it on the main thread
 * after create and before the first submit; it is never changed afterwards. `direct` never
 * calls it (nothing waits) and does not stamp enqueued_ns either, to keep the floor arm free
 * of clock reads.
 */
void echod_exec_set_observer(echod_exec_t *exec, void (*on_start)(void *ctx, uint64_t wait_ns), void *ctx);

/* True for `direct`: submit runs the task on the calling thread before returning. */
int echod_exec_is_direct(const echod_exec_t *exec);

/*
 * True when tasks run one at a time in FIFO order: direct, or fixed with 1 thread (also when
 * `threads: 0` resolved to 1 CPU).
 */
int echod_exec_is_sequential(const echod_exec_t *exec);

echod_exec_mode_t echod_exec_mode(const echod_exec_t *exec);
const char *echod_exec_name(const echod_exec_t *exec);

/* Tasks queued but not yet started, and threads alive / running a task (for /metrics). */
unsigned echod_exec_queue_depth(const echod_exec_t *exec);
unsigned echod_exec_threads(const echod_exec_t *exec);
unsigned echod_exec_busy_threads(const echod_exec_t *exec);

/*
 * Stops accepting work, runs every task already queued, joins every thread, frees. Tasks
 * submitted during shutdown (by running tasks) are still run. Main thread only; once it has
 * begun, a submit from a thread that is not an executor worker is a programming error (assert).
 */
void echod_exec_destroy(echod_exec_t *exec);

/*
 * CPUs this process may use: the tightest cgroup CPU limit on our path (v2 cpu.max or v1
 * cpu.cfs_quota_us/cpu.cfs_period_us rounded up, or a smaller cpuset; util/cgroup.h), capped by
 * the affinity mask; the mask alone without a limit. At least 1. Any thread; reads files.
 */
unsigned echod_exec_available_cpus(void);

/* True when the calling thread is a worker of any echod executor (for tests and metrics). */
int echod_exec_on_worker(void);

/*
 * Inside a task an executor runs (a virtual thread's included): 1 when the hand-off of this task
 * found the thread that runs it parked, that is, the thread slept in its executor's wait (fixed:
 * its condition wait; cached: its futex; workstealing and virtual: the carrier's wait) since its
 * previous task, or is new; 0 when it went on from task to task without sleeping. Each task
 * consumes what its thread's park left, so a wake-up is never carried to a later task. 0 on any
 * other thread, and under `direct` (it runs the submitter's task at once).
 */
int echod_exec_task_woke(void);

/*
 * `virtual`: every submitted task runs on a virtual thread of its own (a fiber on a stack from
 * the executor's pool) mounted on a carrier; a virtual thread that sleeps parks and frees its
 * carrier (docs/virtual-threads.md). These counters and gauges are what /metrics shows.
 */
typedef struct {
    uint64_t started; /* virtual threads started (one per submitted task) */
    uint64_t parks;   /* sleeps that unmounted a virtual thread */
    uint64_t unparks; /* parked virtual threads resubmitted to a carrier (by the timer or early) */
    unsigned live;    /* started and not yet ended, parked ones included */
    size_t stack_bytes;
    size_t stack_peak_bytes; /* deepest stack use seen so far (page-accurate, from freed stacks) */
} echod_exec_vthreads_t;

/* The virtual threads' context switch in this build (echod_build_info's fiber_switch label):
 * "x86_64" or "aarch64" (dispatch/fiber.c's assembly) or "ucontext" (glibc swapcontext). */
const char *echod_exec_fiber_switch(void);

/* Fills *out and returns 1 for a virtual executor; 0 (out untouched) for every other mode. */
int echod_exec_vthreads(const echod_exec_t *exec, echod_exec_vthreads_t *out);

/*
 * A handler's sleep (echod-sleep-us) that the call's end can cut short. One per call, zeroed by
 * echod_exec_sleeper_init; `cancelled` is the call's flag, read under the parking executor's
 * lock so that a cancel never misses a fiber that is just parking.
 */
typedef struct echod_exec_sleeper {
    const atomic_int *cancelled;
    _Atomic(echod_exec_t *) exec; /* the virtual executor this sleeper last parked on, or NULL */
    void *parked;                 /* the parked virtual thread; guarded by that executor's timer lock */
} echod_exec_sleeper_t;

void echod_exec_sleeper_init(echod_exec_sleeper_t *s, const atomic_int *cancelled);

/*
 * On a virtual thread: parks it for ns nanoseconds or until echod_exec_interrupt (its carrier
 * runs other work meanwhile; a timer resubmits it), and returns 0. Anywhere else returns -1 at
 * once: the caller blocks its thread instead. Steps only (one sleeper is used by one step at a
 * time).
 */
int echod_exec_sleep(echod_exec_sleeper_t *s, uint64_t ns);

/* Any thread, after setting *s->cancelled: a parked sleeper is resubmitted now, not at its time. */
void echod_exec_interrupt(echod_exec_sleeper_t *s);

#endif
