/*
 * The executor front: mode selection, the `direct` executor (which is nothing but a call), and
 * what every pooled mode shares: thread start-up and naming, the worker marker, gauges, and the
 * CPU count that `threads: 0` resolves to.
 */
#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dispatch/exec_internal.h"
#include "dispatch/fiber.h"
#include "util/cgroup.h"

/* Which executor the calling thread works for; NULL on every thread that is not a worker. */
static _Thread_local echod_exec_t *current_exec;

_Thread_local int echod_exec__woke, echod_exec__task_woke;

void *echod_exec__alloc_lines(size_t size)
{
    size_t rounded = (size + ECHOD_EXEC_CACHE_LINE - 1) / ECHOD_EXEC_CACHE_LINE * ECHOD_EXEC_CACHE_LINE;
    void *p = echod_must(aligned_alloc(ECHOD_EXEC_CACHE_LINE, rounded), "executor");
    memset(p, 0, rounded);
    return p;
}

void echod_exec__init(echod_exec_t *exec, const echod_exec_ops_t *ops, echod_exec_mode_t mode, const char *name)
{
    exec->ops = ops;
    exec->mode = mode;
    exec->sequential = 0;
    exec->on_start = NULL;
    exec->on_start_ctx = NULL;
    atomic_init(&exec->stopping, 0);
    atomic_init(&exec->threads, 0);
    if (name != NULL)
        snprintf(exec->name, sizeof(exec->name), "%s", name);
    else
        snprintf(exec->name, sizeof(exec->name), "echod-%s", echod_exec_mode_name(mode));
}

echod_exec_t *echod_exec_create(const echod_exec_config_t *cfg, const char *name, char *err, size_t errlen)
{
    unsigned threads = cfg->threads;
    if (threads == 0 &&
        (cfg->mode == ECHOD_EXEC_FIXED || cfg->mode == ECHOD_EXEC_WORKSTEALING || cfg->mode == ECHOD_EXEC_VIRTUAL))
        threads = echod_exec_available_cpus();

    switch (cfg->mode) {
    case ECHOD_EXEC_DIRECT: {
        echod_exec_t *exec = echod_must(malloc(sizeof(*exec)), "executor");
        echod_exec__init(exec, NULL, ECHOD_EXEC_DIRECT, name);
        exec->sequential = 1;
        return exec;
    }
    case ECHOD_EXEC_FIXED:
    case ECHOD_EXEC_WORKSTEALING:
    case ECHOD_EXEC_VIRTUAL:
        if (threads > ECHOD_EXEC_MAX_THREADS) {
            echod_set_err(err, errlen, "executor: threads %u is above the limit of %u", threads,
                          ECHOD_EXEC_MAX_THREADS);
            return NULL;
        }
        if (cfg->mode == ECHOD_EXEC_VIRTUAL)
            return echod_exec__virtual_create(name, threads, cfg->stack_bytes, err, errlen);
        return cfg->mode == ECHOD_EXEC_FIXED ? echod_exec__fixed_create(name, threads, err, errlen)
                                             : echod_exec__workstealing_create(name, threads, err, errlen);
    case ECHOD_EXEC_CACHED:
        return echod_exec__cached_create(name, cfg->max_threads, cfg->keep_alive_ms, err, errlen);
    }
    echod_set_err(err, errlen, "executor: unknown mode %d", (int)cfg->mode);
    return NULL;
}

void echod_exec_submit(echod_exec_t *exec, echod_task_t *task)
{
    /* direct is the floor every other arm is measured against: no clock read, no indirection. */
    if (exec->ops == NULL) {
        task->run(task);
        return;
    }
    /* Once destroy has begun only running tasks may add work: anyone else would race the free. */
    assert(!atomic_load_explicit(&exec->stopping, memory_order_relaxed) || current_exec != NULL);
    task->enqueued_ns = echod_now_ns();
    exec->ops->submit(exec, task);
}

void echod_exec_set_observer(echod_exec_t *exec, void (*on_start)(void *ctx, uint64_t wait_ns), void *ctx)
{
    exec->on_start = on_start;
    exec->on_start_ctx = ctx;
}

int echod_exec_is_direct(const echod_exec_t *exec)
{
    return exec->mode == ECHOD_EXEC_DIRECT;
}

int echod_exec_is_sequential(const echod_exec_t *exec)
{
    return exec->sequential;
}

echod_exec_mode_t echod_exec_mode(const echod_exec_t *exec)
{
    return exec->mode;
}

const char *echod_exec_name(const echod_exec_t *exec)
{
    return exec->name;
}

unsigned echod_exec_queue_depth(const echod_exec_t *exec)
{
    return exec->ops != NULL ? exec->ops->queue_depth(exec) : 0;
}

unsigned echod_exec_threads(const echod_exec_t *exec)
{
    if (exec->ops != NULL && exec->ops->threads != NULL)
        return exec->ops->threads(exec);
    return atomic_load_explicit(&exec->threads, memory_order_relaxed);
}

int echod_exec_vthreads(const echod_exec_t *exec, echod_exec_vthreads_t *out)
{
    if (exec->ops == NULL || exec->ops->vthreads == NULL)
        return 0;
    exec->ops->vthreads(exec, out);
    return 1;
}

const char *echod_exec_fiber_switch(void)
{
    return echod_fiber_switch_name();
}

unsigned echod_exec_busy_threads(const echod_exec_t *exec)
{
    return exec->ops != NULL ? exec->ops->busy_threads(exec) : 0;
}

void echod_exec_destroy(echod_exec_t *exec)
{
    if (exec == NULL)
        return;
    if (exec->ops == NULL) {
        free(exec);
        return;
    }
    atomic_store_explicit(&exec->stopping, 1, memory_order_relaxed);
    exec->ops->destroy(exec);
}

int echod_exec_on_worker(void)
{
    return current_exec != NULL;
}

/* A function, not an inline read: a virtual thread may resume on another carrier, and the
 * thread-local's address must be taken on the thread that runs it now. */
int echod_exec_task_woke(void)
{
    return echod_exec__task_woke;
}

echod_exec_t *echod_exec__current(void)
{
    return current_exec;
}

echod_exec_t *echod_exec__swap_current(echod_exec_t *exec)
{
    echod_exec_t *prev = current_exec;
    current_exec = exec;
    return prev;
}

int echod_exec__start_thread(pthread_t *tid, void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    sigset_t all;
    int ret;

    if ((ret = pthread_attr_init(&attr)) != 0)
        return ret;
    sigfillset(&all);
    if ((ret = pthread_attr_setsigmask_np(&attr, &all)) == 0)
        ret = pthread_create(tid, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return ret;
}

void echod_exec__thread_name(char *buf, size_t cap, const char *name, unsigned index)
{
    char suffix[16];
    int slen = snprintf(suffix, sizeof(suffix), "-%u", index);
    size_t limit = cap - 1 < 15 ? cap - 1 : 15;
    size_t keep = strlen(name);
    if (keep + (size_t)slen > limit)
        keep = limit > (size_t)slen ? limit - (size_t)slen : 0;
    snprintf(buf, cap, "%.*s%s", (int)keep, name, suffix);
}

void echod_exec__worker_enter(echod_exec_t *exec, unsigned index)
{
    char tname[16];
    echod_exec__thread_name(tname, sizeof(tname), exec->name, index);
    /* Naming is cosmetic (top -H, perf); a failure must not stop the worker. */
    (void)pthread_setname_np(pthread_self(), tname);
    current_exec = exec;
    echod_exec__woke = 1; /* its first task found it not yet running: as a parked thread */
    atomic_fetch_add_explicit(&exec->threads, 1, memory_order_relaxed);
}

void echod_exec__worker_leave(echod_exec_t *exec)
{
    atomic_fetch_sub_explicit(&exec->threads, 1, memory_order_relaxed);
    current_exec = NULL;
}

static unsigned affinity_cpus(void)
{
    /* cpu_set_t holds 1024 CPUs; grow until the kernel's mask fits. */
    for (int n = 1024; n <= (1 << 16); n *= 2) {
        cpu_set_t *set = CPU_ALLOC(n);
        if (set == NULL)
            return 0;
        size_t size = CPU_ALLOC_SIZE(n);
        if (sched_getaffinity(0, size, set) == 0) {
            int count = CPU_COUNT_S(size, set);
            CPU_FREE(set);
            return count > 0 ? (unsigned)count : 0;
        }
        CPU_FREE(set);
        if (errno != EINVAL)
            return 0;
    }
    return 0;
}

unsigned echod_exec_available_cpus(void)
{
    /* Like the JVM's container support: a quota never grants more CPUs than we may run on. */
    echod_cgroup_cpu_t cg;
    echod_cgroup_read_cpu("", &cg);
    unsigned limit = echod_cgroup_cpu_limit(&cg), mask = affinity_cpus();
    unsigned n = mask;
    if (limit != 0 && (n == 0 || limit < n))
        n = limit;
    if (n > ECHOD_EXEC_MAX_THREADS)
        n = ECHOD_EXEC_MAX_THREADS;
    return n > 0 ? n : 1;
}
