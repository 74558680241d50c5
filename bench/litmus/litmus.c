/*
 * bench/litmus: what a machine (or an emulator) lets two threads see of each other's memory
 * accesses (docs/threads.md, "What emulation proves"). A benchmark, not a test: it prints how
 * often each test's weak outcome was seen and never fails on it.
 *
 *   litmus [ITERATIONS]     (default 200000 per test)
 *
 * Each test is a classic two-thread litmus test, run ITERATIONS times on fresh variables, the two
 * threads released together by a spin barrier and pinned to different CPUs where there are two.
 * The weak outcome is the one a sequentially consistent machine never shows:
 *   SB  store buffering   T0: x=1; r0=y   T1: y=1; r1=x    weak: r0=0, r1=0
 *   MP  message passing   T0: d=1; f=1    T1: r0=f; r1=d   weak: r0=1, r1=0
 *   LB  load buffering    T0: r0=x; y=1   T1: r1=y; x=1    weak: r0=1, r1=1
 * with the C11 orders named in each row: "allowed" rows may show it, "forbidden" rows must not.
 * x86-64 (TSO) shows SB's with relaxed orders and nothing else; arm64 hardware may show all three
 * with relaxed orders. Under qemu user mode on an x86-64 host every guest access is a host access,
 * so the arm64 binary sees x86-64's orderings: MP and LB stay at zero (docs/threads.md).
 * The "serializer" rows are echod's own store-buffering pair (dispatch/serializer.c): a submit
 * exchanges `head` then CASes `running`, a drain stores (or, as echod does, exchanges) `running`
 * then loads `head`; the weak outcome is a lost dispatch.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
    _Alignas(64) atomic_int a;
    _Alignas(64) atomic_int b;
} pair_t;

typedef struct test test_t;
struct test {
    const char *name;
    const char *orders;
    int c11_allows;
    void (*t0)(pair_t *p, int *r);
    void (*t1)(pair_t *p, int *r);
    int (*weak)(int r0, int r1);
};

/* ---- the tests ---- */

static int sb_weak(int r0, int r1)
{
    return r0 == 0 && r1 == 0;
}
static int mp_weak(int r0, int r1)
{
    return r0 == 1 && r1 == 0;
}
static int lb_weak(int r0, int r1)
{
    return r0 == 1 && r1 == 1;
}

#define SB(tag, st, ld)                                                                                                \
    static void sb_##tag##_0(pair_t *p, int *r)                                                                        \
    {                                                                                                                  \
        atomic_store_explicit(&p->a, 1, st);                                                                           \
        *r = atomic_load_explicit(&p->b, ld);                                                                          \
    }                                                                                                                  \
    static void sb_##tag##_1(pair_t *p, int *r)                                                                        \
    {                                                                                                                  \
        atomic_store_explicit(&p->b, 1, st);                                                                           \
        *r = atomic_load_explicit(&p->a, ld);                                                                          \
    }
SB(relaxed, memory_order_relaxed, memory_order_relaxed)
SB(relacq, memory_order_release, memory_order_acquire)
SB(sc, memory_order_seq_cst, memory_order_seq_cst)

/* SB with each store an exchange: what echod's store-buffering pairs do (docs/threads.md) */
static void sb_xchg_0(pair_t *p, int *r)
{
    atomic_exchange_explicit(&p->a, 1, memory_order_seq_cst);
    *r = atomic_load_explicit(&p->b, memory_order_seq_cst);
}
static void sb_xchg_1(pair_t *p, int *r)
{
    atomic_exchange_explicit(&p->b, 1, memory_order_seq_cst);
    *r = atomic_load_explicit(&p->a, memory_order_seq_cst);
}

/* The serializer: submit exchanges head then CASes running; a drain stores running then loads head. */
static void ser_submit(pair_t *p, int *r, memory_order xchg)
{
    atomic_exchange_explicit(&p->a, 1, xchg);
    int expected = 0;
    *r = atomic_compare_exchange_strong(&p->b, &expected, 0) ? 0 : 1; /* 0: saw STOPPED */
}
static void ser_acqrel_0(pair_t *p, int *r)
{
    ser_submit(p, r, memory_order_acq_rel);
}
static void ser_sc_0(pair_t *p, int *r)
{
    ser_submit(p, r, memory_order_seq_cst);
}
static void ser_drain_1(pair_t *p, int *r)
{
    atomic_store_explicit(&p->b, 0, memory_order_seq_cst);
    *r = atomic_load_explicit(&p->a, memory_order_seq_cst);
}
static void ser_drain_xchg_1(pair_t *p, int *r)
{
    atomic_exchange_explicit(&p->b, 0, memory_order_seq_cst);
    *r = atomic_load_explicit(&p->a, memory_order_seq_cst);
}
/* weak: the submitter saw RUNNING (1) and the drain saw the queue empty (0): a lost dispatch */
static int ser_weak(int r0, int r1)
{
    return r0 == 1 && r1 == 0;
}

#define MP(tag, st, ld)                                                                                                \
    static void mp_##tag##_0(pair_t *p, int *r)                                                                        \
    {                                                                                                                  \
        atomic_store_explicit(&p->a, 1, memory_order_relaxed);                                                         \
        atomic_store_explicit(&p->b, 1, st);                                                                           \
        *r = 0;                                                                                                        \
    }                                                                                                                  \
    static void mp_##tag##_1(pair_t *p, int *r)                                                                        \
    {                                                                                                                  \
        int f = atomic_load_explicit(&p->b, ld);                                                                       \
        int d = atomic_load_explicit(&p->a, memory_order_relaxed);                                                     \
        r[0] = f;                                                                                                      \
        r[1] = d;                                                                                                      \
    }
MP(relaxed, memory_order_relaxed, memory_order_relaxed)
MP(relacq, memory_order_release, memory_order_acquire)

#define LB(tag, ld, st)                                                                                                \
    static void lb_##tag##_0(pair_t *p, int *r)                                                                        \
    {                                                                                                                  \
        *r = atomic_load_explicit(&p->a, ld);                                                                          \
        atomic_store_explicit(&p->b, 1, st);                                                                           \
    }                                                                                                                  \
    static void lb_##tag##_1(pair_t *p, int *r)                                                                        \
    {                                                                                                                  \
        *r = atomic_load_explicit(&p->b, ld);                                                                          \
        atomic_store_explicit(&p->a, 1, st);                                                                           \
    }
LB(relaxed, memory_order_relaxed, memory_order_relaxed)
LB(acqrel, memory_order_acquire, memory_order_release)

/* MP's outcome is both of T1's loads: adapt the table's (r0 of T0, r1 of T1) shape */
static int mp_weak_t1(int r0, int r1)
{
    (void)r0;
    return mp_weak(r1 >> 1, r1 & 1);
}
static void mp_relaxed_1p(pair_t *p, int *r)
{
    int rr[2];
    mp_relaxed_1(p, rr);
    *r = rr[0] << 1 | rr[1];
}
static void mp_relacq_1p(pair_t *p, int *r)
{
    int rr[2];
    mp_relacq_1(p, rr);
    *r = rr[0] << 1 | rr[1];
}

static const test_t tests[] = {
    {"SB", "relaxed", 1, sb_relaxed_0, sb_relaxed_1, sb_weak},
    {"SB", "release/acquire", 1, sb_relacq_0, sb_relacq_1, sb_weak},
    {"SB", "seq_cst", 0, sb_sc_0, sb_sc_1, sb_weak},
    {"SB", "seq_cst, stores as exchanges", 0, sb_xchg_0, sb_xchg_1, sb_weak},
    {"serializer", "push acq_rel, rest seq_cst", 1, ser_acqrel_0, ser_drain_1, ser_weak},
    {"serializer", "seq_cst, drain stores", 0, ser_sc_0, ser_drain_1, ser_weak},
    {"serializer", "seq_cst, drain exchanges", 0, ser_sc_0, ser_drain_xchg_1, ser_weak},
    {"MP", "relaxed", 1, mp_relaxed_0, mp_relaxed_1p, mp_weak_t1},
    {"MP", "release/acquire", 0, mp_relacq_0, mp_relacq_1p, mp_weak_t1},
    {"LB", "relaxed", 1, lb_relaxed_0, lb_relaxed_1, lb_weak},
    {"LB", "acquire/release", 0, lb_acqrel_0, lb_acqrel_1, lb_weak},
};

/* ---- the harness ---- */

static long iterations;
static const test_t *current;
static pair_t *pairs;
static int *res[2];
static atomic_long arrive[2];

/* Both threads reach round i, then go: a two-party barrier on counters. */
static void meet(int self, long round)
{
    atomic_store_explicit(&arrive[self], round, memory_order_release);
    while (atomic_load_explicit(&arrive[!self], memory_order_acquire) < round)
        ;
}

static void pin(int cpu)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 2)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % n, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *runner(void *arg)
{
    int self = (int)(intptr_t)arg;
    pin(self);
    void (*fn)(pair_t *, int *) = self == 0 ? current->t0 : current->t1;
    for (long i = 0; i < iterations; i++) {
        meet(self, 2 * i + 1);
        fn(&pairs[i], &res[self][i]);
        meet(self, 2 * i + 2);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    iterations = argc > 1 ? atol(argv[1]) : 200000;
    if (iterations <= 0)
        iterations = 200000;
    pairs = aligned_alloc(64, sizeof(pair_t) * (size_t)iterations);
    res[0] = calloc((size_t)iterations, sizeof(int));
    res[1] = calloc((size_t)iterations, sizeof(int));
    if (pairs == NULL || res[0] == NULL || res[1] == NULL)
        return 1;
    printf("%-11s %-31s %-10s %s\n", "test", "orders", "C11", "weak outcomes seen");
    for (size_t t = 0; t < sizeof(tests) / sizeof(tests[0]); t++) {
        current = &tests[t];
        for (long i = 0; i < iterations; i++) {
            atomic_init(&pairs[i].a, 0);
            /* the serializer's `running` starts RUNNING (1): the drain is the one to stop it */
            atomic_init(&pairs[i].b, current->weak == ser_weak ? 1 : 0);
        }
        atomic_store(&arrive[0], 0);
        atomic_store(&arrive[1], 0);
        pthread_t th[2];
        for (int k = 0; k < 2; k++)
            pthread_create(&th[k], NULL, runner, (void *)(intptr_t)k);
        for (int k = 0; k < 2; k++)
            pthread_join(th[k], NULL);
        long weak = 0;
        for (long i = 0; i < iterations; i++)
            weak += current->weak(res[0][i], res[1][i]);
        printf("%-11s %-31s %-10s %ld of %ld\n", current->name, current->orders,
               current->c11_allows ? "allowed" : "forbidden", weak, iterations);
    }
    return 0;
}
