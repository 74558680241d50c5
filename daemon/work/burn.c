#include <time.h>
#include "work/burn.h"

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin(uint64_t iterations)
{
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < iterations; i++)
        sink += i * 2654435761u;
    (void)sink;
}

enum { FIX = 1024, PROBE = 256, STRETCH = 16384 };

/* This thread's costs, measured by its burns: one spin iteration in ns * FIX (from the last
 * burn) and one clock read (the least seen: a read that the kernel interrupted is not its cost).
 * A cache, not state anything depends on; 0 until the thread's first burn measured it. */
static _Thread_local uint64_t iter_cost, read_cost;

/*
 * The thread's CPU clock is a system call (no vDSO serves it: 1.2-1.6 us on this VM), so reading
 * it after every few iterations would make a short burn mostly clock reads and overshoot it by one.
 * The burn reads it once per stretch of up to ~6 us, sizes each stretch from the iterations' measured
 * cost so that it ends a clock read before the target, and spins the last stretch, shorter than
 * two reads, without reading at all. A 20 us charge then burns within about a microsecond of
 * 20 us (half a read, its return, and the blind stretch's error: test_work prints it); the model's
 * counters add unit costs, and this is what makes the CPU clocks agree with them
 * (tests/integration/test_work_model.py).
 */
void echod_burn_ns(uint64_t ns)
{
    if (ns == 0)
        return;
    uint64_t t0 = thread_cpu_ns(), now = thread_cpu_ns();
    if (read_cost == 0 || now - t0 < read_cost)
        read_cost = now - t0;
    uint64_t read = read_cost;
    /* the first read's entry half ran before t0; the blind stretch ends where the burn returns */
    uint64_t until = t0 + (ns > read / 2 ? ns - read / 2 : 0);
    while (now < until) {
        uint64_t left = until - now;
        if (iter_cost != 0 && left <= 2 * read) {
            /* another read would cost more than the error it saves; the last one is still returning */
            spin(left > read ? (left - read) * FIX / iter_cost : 0);
            return;
        }
        uint64_t n = iter_cost == 0 ? PROBE : (left - read) * FIX / iter_cost;
        n = n < 1 ? 1 : n > STRETCH ? STRETCH : n;
        spin(n);
        uint64_t then = now;
        now = thread_cpu_ns();
        if (n >= PROBE && now - then > read)
            iter_cost = (now - then - read) * FIX / n + 1;
    }
}
