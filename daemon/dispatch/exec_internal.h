/*
 * What the executor modes share: the common header every executor starts with, the per-mode
 * operations table, and the helpers worker threads use. Private to daemon/dispatch/exec*.c (and
 * the unit test, which pokes at the cpu.max parser).
 *
 * Threading: the fields of echod_exec_t other than the atomics are written by create (and
 * set_observer, before any submit) on the main thread and only read afterwards; every worker
 * reaches them through a happens-before edge (pthread_create, or the queue lock a task passed
 * through).
 */
#ifndef ECHOD_EXEC_INTERNAL_H
#define ECHOD_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "dispatch/exec.h"
#include "util/clock.h"
#include "util/err.h"

/* Appended to a "starting thread" error: the keys that ask for threads, and the system limit. */
#define THREAD_HINT "; lower executor.threads (or per_method threads) or raise the limit (ulimit -u)"

/* Per-mode behaviour behind the public calls; direct has none (it never leaves exec.c). */
typedef struct echod_exec_ops {
    /* enqueued_ns is already stamped; the stop assertion already made. */
    void (*submit)(echod_exec_t *exec, echod_task_t *task);
    /* Stop, run everything queued, join every thread, free the whole executor. */
    void (*destroy)(echod_exec_t *exec);
    unsigned (*queue_depth)(const echod_exec_t *exec);
    unsigned (*busy_threads)(const echod_exec_t *exec);
    /* Optional (NULL: the header's `threads` gauge): for an executor built on another one. */
    unsigned (*threads)(const echod_exec_t *exec);
    /* Optional: virtual threads only (echod_exec_vthreads). */
    void (*vthreads)(const echod_exec_t *exec, echod_exec_vthreads_t *out);
} echod_exec_ops_t;

/* Every mode's struct begins with this, so an echod_exec_t * converts to the mode's type. */
struct echod_exec {
    const echod_exec_ops_t *ops; /* NULL for direct */
    echod_exec_mode_t mode;
    int sequential;
    void (*on_start)(void *ctx, uint64_t wait_ns);
    void *on_start_ctx;
    _Atomic int stopping;     /* set by destroy; only feeds the "submit after destroy" assertion */
    _Atomic unsigned threads; /* workers between worker_enter and worker_leave */
    char name[64];
};

/* Largest thread count create accepts for fixed/workstealing; more is surely a config typo. */
#define ECHOD_EXEC_MAX_THREADS 4096

/* Keeps a lock-guarded queue head and the lines its workers write apart. */
#define ECHOD_EXEC_CACHE_LINE 64

/* Zeroed memory aligned to, and a whole number of, cache lines (for structs with _Alignas members);
 * never NULL (util/err.h). */
void *echod_exec__alloc_lines(size_t size);

/* Fills the common header; name is copied (a NULL name becomes "echod-<mode>"). */
void echod_exec__init(echod_exec_t *exec, const echod_exec_ops_t *ops, echod_exec_mode_t mode, const char *name);

/*
 * pthread_create with every signal blocked in the new thread, so process signals (SIGTERM,
 * SIGINT, SIGPIPE) are only ever handled by the threads that expect them. Returns 0 or an errno.
 */
int echod_exec__start_thread(pthread_t *tid, void *(*fn)(void *), void *arg);

/*
 * First and last calls of every worker thread. enter names the thread "<name>-<index>" and
 * marks it as a worker of exec (for echod_exec_on_worker and the carrier-local submit path of
 * workstealing); both keep the threads gauge.
 */
void echod_exec__worker_enter(echod_exec_t *exec, unsigned index);
void echod_exec__worker_leave(echod_exec_t *exec);

/* The executor the calling thread works for, or NULL. */
echod_exec_t *echod_exec__current(void);

/*
 * Makes the calling thread count as a worker of exec (NULL: of none); returns the previous
 * value. Destroy uses it while it runs stragglers itself, so their own submits stay legal.
 */
echod_exec_t *echod_exec__swap_current(echod_exec_t *exec);

/* "<name>-<index>" fitted into Linux's 15 characters; the name is cut, never the index. */
void echod_exec__thread_name(char *buf, size_t cap, const char *name, unsigned index);

/*
 * The calling worker slept in its executor's wait (set where each mode's threads actually park,
 * and by worker_enter: a new thread was not running), and what the task it runs found
 * (echod_exec_task_woke): echod_exec__run moves the one into the other as each task starts.
 */
extern _Thread_local int echod_exec__woke, echod_exec__task_woke;

/*
 * Runs one dequeued task on a worker: takes the thread's wake-up for it and reports the queue
 * wait to the observer first, then calls run. The task is not touched after run() is called:
 * run may free it or resubmit it.
 */
static inline void echod_exec__run(echod_exec_t *exec, echod_task_t *task)
{
    echod_exec__task_woke = echod_exec__woke;
    echod_exec__woke = 0;
    if (exec->on_start != NULL) {
        uint64_t now = echod_now_ns(), then = task->enqueued_ns;
        exec->on_start(exec->on_start_ctx, now > then ? now - then : 0);
    }
    task->run(task);
}

/* The mode constructors; threads is already resolved (never 0) where it matters. */
echod_exec_t *echod_exec__fixed_create(const char *name, unsigned threads, char *err, size_t errlen);
echod_exec_t *echod_exec__cached_create(const char *name, unsigned max_threads, uint64_t keep_alive_ms, char *err,
                                        size_t errlen);
echod_exec_t *echod_exec__workstealing_create(const char *name, unsigned threads, char *err, size_t errlen);
echod_exec_t *echod_exec__virtual_create(const char *name, unsigned threads, size_t stack_bytes, char *err,
                                         size_t errlen);

#endif
