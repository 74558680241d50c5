/*
 * A hard limit on a gauge that several threads move (limits.max_connections: every I/O loop
 * accepts; limits.max_calls_in_flight: every loop admits, any thread closes).
 *
 * Checking the gauge and then adding to it lets two loops pass the check together and go over
 * the limit; echod_limit_reserve makes the check and the add one compare-and-swap, so the gauge
 * never holds more than the limit, on any thread's reading. It also keeps the gauge's highest
 * value, so that a scrape can show the limit was held. Any thread.
 *
 * Relaxed throughout: the gauge publishes nothing, and every reservation and release is a
 * read-modify-write of the one variable, so they are totally ordered (its modification order)
 * whatever the memory order; a CAS that succeeds wrote n + 1 over a value n below the limit.
 */
#ifndef ECHOD_LIMIT_H
#define ECHOD_LIMIT_H

#include <stdatomic.h>
#include <stdint.h>

/* One more on *gauge if it is below limit (0: no limit), raising *peak to the new value; 0 if at
 * the limit, leaving both alone. */
static inline int echod_limit_reserve(_Atomic int64_t *gauge, int64_t limit, _Atomic int64_t *peak)
{
    int64_t n = atomic_load_explicit(gauge, memory_order_relaxed);
    do {
        if (limit != 0 && n >= limit)
            return 0;
    } while (!atomic_compare_exchange_weak_explicit(gauge, &n, n + 1, memory_order_relaxed, memory_order_relaxed));
    int64_t p = atomic_load_explicit(peak, memory_order_relaxed);
    while (p < n + 1 &&
           !atomic_compare_exchange_weak_explicit(peak, &p, n + 1, memory_order_relaxed, memory_order_relaxed))
        ;
    return 1;
}

/* Gives back what echod_limit_reserve took. */
static inline void echod_limit_release(_Atomic int64_t *gauge)
{
    atomic_fetch_sub_explicit(gauge, 1, memory_order_relaxed);
}

#endif
