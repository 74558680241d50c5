/*
 * bench/fiber: what one context switch and one park+resume cost (docs/virtual-threads.md).
 * A benchmark, not a test: it prints figures and never fails on them.
 *
 *   switch  a fiber and its thread switching back and forth N times: ns per switch. Built twice,
 *           echod's own switch (fiber_switch) and glibc's swapcontext (fiber_switch_ucontext),
 *           which also makes an rt_sigprocmask system call per switch.
 *   park    (own switch only) one virtual thread on a one-carrier `virtual` executor sleeping
 *           1 ns M times: each sleep parks, the unparker resubmits, the carrier mounts it again.
 *           Wall and process CPU per park+resume.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include "dispatch/fiber.h"
#ifdef ECHOD_BENCH_PARK
#include "dispatch/exec.h"
#endif

static echod_fiber_t main_ctx, fiber_ctx;
static long rounds;

static void ping(void *arg)
{
    (void)arg;
    for (;;)
        echod_fiber_switch(&fiber_ctx, &main_ctx);
}

static double now_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#ifdef ECHOD_BENCH_PARK
typedef struct {
    echod_task_t task;
    echod_exec_sleeper_t sleeper;
    atomic_int cancelled;
    long n;
    atomic_int done;
} park_task_t;

static void park_run(echod_task_t *t)
{
    park_task_t *p = (park_task_t *)t;
    for (long i = 0; i < p->n; i++)
        echod_exec_sleep(&p->sleeper, 1);
    atomic_store(&p->done, 1);
}

static void bench_park(long n)
{
    echod_exec_config_t cfg = {.mode = ECHOD_EXEC_VIRTUAL, .threads = 1};
    echod_exec_t *exec = echod_exec_create(&cfg, "bench", NULL, 0);
    if (exec == NULL) {
        fprintf(stderr, "no virtual executor\n");
        exit(1);
    }
    park_task_t p = {.n = n};
    atomic_init(&p.cancelled, 0);
    atomic_init(&p.done, 0);
    echod_exec_sleeper_init(&p.sleeper, &p.cancelled);
    p.task.run = park_run;
    double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    echod_exec_submit(exec, &p.task);
    while (!atomic_load(&p.done)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    double w1 = now_s(CLOCK_MONOTONIC), c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    echod_exec_vthreads_t v;
    echod_exec_vthreads(exec, &v);
    echod_exec_destroy(exec);
    printf("park+resume (1 carrier, unparker thread): %ld parks, %.2f us wall and %.2f us CPU each\n", (long)v.parks,
           (w1 - w0) / (double)v.parks * 1e6, (c1 - c0) / (double)v.parks * 1e6);
}
#endif

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 10000000;
    size_t size = 64 * 1024;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    echod_fiber_init_thread(&main_ctx);
    echod_fiber_make(&fiber_ctx, stack, size, ping, NULL);
    echod_fiber_switch(&main_ctx, &fiber_ctx); /* warm */
    double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    for (long i = 0; i < rounds; i++)
        echod_fiber_switch(&main_ctx, &fiber_ctx);
    double w1 = now_s(CLOCK_MONOTONIC), c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    printf("switch (%s): %ld round trips, %.1f ns wall and %.1f ns CPU per switch\n",
#if ECHOD_FIBER_USE_UCONTEXT
           "glibc swapcontext",
#else
           "echod fiber.c",
#endif
           rounds, (w1 - w0) / (double)rounds / 2 * 1e9, (c1 - c0) / (double)rounds / 2 * 1e9);
#ifdef ECHOD_BENCH_PARK
    bench_park(argc > 2 ? atol(argv[2]) : 200000);
#endif
    return 0;
}
