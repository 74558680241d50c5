/*
 * The per-call serializer: order under contention, coalescing, the re-dispatch race, executor
 * switch mid-stream, pass-through, and the owner's lifetime hooks. Counts come from
 * echod_metrics, the same counters /metrics shows.
 *
 * ECHOD_TEST_STRESS=N multiplies the rounds of the races (CI runs the arm64 build under qemu with
 * it: docs/threads.md).
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "dispatch/exec.h"
#include "dispatch/serializer.h"
#include "metrics/exposition.h"

typedef struct {
    echod_serializer_t s;
    atomic_int refs;
    atomic_long ran;
    long next_expected[8]; /* per producer: steps of one producer must run in its order */
    atomic_int order_errors;
    atomic_int concurrent, max_concurrent;
    echod_exec_t *switch_to;
    echod_exec_metrics_t *switch_metrics;
    atomic_int ran_on_worker_after_switch;
} owner_t;

typedef struct {
    echod_step_t super;
    owner_t *o;
    int producer;
    long seq;
    int do_switch;
} test_step_t;

static void owner_retain(echod_serializer_t *s)
{
    atomic_fetch_add(&((owner_t *)s)->refs, 1);
}

static void owner_release(echod_serializer_t *s)
{
    atomic_fetch_sub(&((owner_t *)s)->refs, 1);
}

static void step_run(echod_step_t *step)
{
    test_step_t *t = (test_step_t *)step;
    owner_t *o = t->o;
    int c = atomic_fetch_add(&o->concurrent, 1) + 1;
    int m = atomic_load(&o->max_concurrent);
    while (c > m && !atomic_compare_exchange_weak(&o->max_concurrent, &m, c))
        ;
    if (o->next_expected[t->producer] != t->seq)
        atomic_fetch_add(&o->order_errors, 1);
    o->next_expected[t->producer] = t->seq + 1;
    if (t->do_switch)
        echod_serializer_switch(&o->s, o->switch_to, o->switch_metrics);
    atomic_fetch_add(&o->ran, 1);
    atomic_fetch_sub(&o->concurrent, 1);
    free(t);
}

static void submit(owner_t *o, int producer, long seq)
{
    test_step_t *t = calloc(1, sizeof(*t));
    t->super.run = step_run;
    t->o = o;
    t->producer = producer;
    t->seq = seq;
    echod_serializer_submit(&o->s, &t->super);
}

static void owner_init(owner_t *o, echod_exec_t *exec, echod_exec_metrics_t *m, echod_ser_mode_t mode)
{
    memset(o, 0, sizeof(*o));
    echod_serializer_init(&o->s, exec, m, mode);
    o->s.owner_retain = owner_retain;
    o->s.owner_release = owner_release;
}

static void wait_ran(owner_t *o, long n)
{
    while (atomic_load(&o->ran) < n || atomic_load(&o->refs) != 0)
        sched_yield();
}

typedef struct {
    owner_t *o;
    int producer;
    long n;
} producer_arg_t;

static void *producer_main(void *arg)
{
    producer_arg_t *a = arg;
    for (long i = 0; i < a->n; i++)
        submit(a->o, a->producer, i);
    return NULL;
}

static echod_exec_t *make_exec(echod_exec_mode_t mode, unsigned threads)
{
    echod_exec_config_t c = {.mode = mode, .threads = threads, .keep_alive_ms = 60000};
    char err[256];
    echod_exec_t *e = echod_exec_create(&c, NULL, err, sizeof(err));
    if (e == NULL)
        fprintf(stderr, "exec: %s\n", err);
    return e;
}

/* Several producers, many steps: never two at once, each producer's steps in order. */
static void test_contention(echod_exec_mode_t mode, long per_producer)
{
    echod_exec_t *exec = make_exec(mode, 2);
    echod_exec_metrics_t *m = echod_metrics_add_exec("contention", exec);
    owner_t *o = malloc(sizeof(*o));
    owner_init(o, exec, m, ECHOD_SER_SERIALIZING);
    enum { P = 4 };
    pthread_t th[P];
    producer_arg_t args[P];
    uint64_t d0 = echod_metrics_value(&m->dispatches);
    for (int i = 0; i < P; i++) {
        args[i] = (producer_arg_t){o, i, per_producer};
        pthread_create(&th[i], NULL, producer_main, &args[i]);
    }
    for (int i = 0; i < P; i++)
        pthread_join(th[i], NULL);
    wait_ran(o, P * per_producer);
    uint64_t dispatches = echod_metrics_value(&m->dispatches) - d0;
    CHECK(atomic_load(&o->ran) == P * per_producer);
    CHECK(atomic_load(&o->order_errors) == 0);
    CHECK(atomic_load(&o->max_concurrent) == 1);
    /* coalescing: far fewer drains than steps under contention */
    CHECK(dispatches >= 1 && dispatches <= (uint64_t)(P * per_producer));
    printf("contention %s: %ld steps, %llu dispatches\n", echod_exec_mode_name(mode), P * per_producer,
           (unsigned long long)dispatches);
    echod_exec_destroy(exec);
    free(o);
}

/* A step submitted while a drain runs rides that drain: no second dispatch. */
typedef struct {
    echod_step_t super;
    owner_t *o;
} nested_step_t;

static void nested_inner(echod_step_t *step)
{
    atomic_fetch_add(&((nested_step_t *)step)->o->ran, 1);
    free(step);
}

static void nested_outer(echod_step_t *step)
{
    owner_t *o = ((nested_step_t *)step)->o;
    nested_step_t *inner = calloc(1, sizeof(*inner));
    inner->super.run = nested_inner;
    inner->o = o;
    echod_serializer_submit(&o->s, &inner->super);
    /* inline runner: the inner step must not have run yet (re-entrancy is queued) */
    if (o->s.mode == ECHOD_SER_INLINE)
        CHECK(atomic_load(&o->ran) == 0);
    atomic_fetch_add(&o->ran, 1);
    free(step);
}

static void test_coalescing(echod_exec_mode_t mode, echod_ser_mode_t ser)
{
    echod_exec_t *exec = make_exec(mode, 1);
    echod_exec_metrics_t *m = echod_metrics_add_exec("coalesce", exec);
    owner_t *o = malloc(sizeof(*o));
    owner_init(o, exec, m, ser);
    uint64_t d0 = echod_metrics_value(&m->dispatches), i0 = echod_metrics_value(&echod_metrics.inline_runs);
    nested_step_t *outer = calloc(1, sizeof(*outer));
    outer->super.run = nested_outer;
    outer->o = o;
    echod_serializer_submit(&o->s, &outer->super);
    wait_ran(o, 2);
    uint64_t dispatches = echod_metrics_value(&m->dispatches) - d0,
             inl = echod_metrics_value(&echod_metrics.inline_runs) - i0;
    if (ser == ECHOD_SER_INLINE) {
        CHECK(dispatches == 0);
        CHECK(inl == 2);
    } else if (ser == ECHOD_SER_PASSTHROUGH) {
        CHECK(dispatches == 2); /* one per step: nothing to coalesce into */
    } else {
        /* the inner submit found the drain RUNNING: it only appended. A second dispatch can happen
         * only if the drain had already stopped, which it cannot while the outer step runs. */
        CHECK(dispatches == 1);
    }
    echod_exec_destroy(exec);
    free(o);
}

/* Switching the executor from a step: the rest runs on the new one, in order. */
static void test_switch(void)
{
    echod_exec_t *from = make_exec(ECHOD_EXEC_FIXED, 1), *to = make_exec(ECHOD_EXEC_FIXED, 2);
    echod_exec_metrics_t *mf = echod_metrics_add_exec("from", from), *mt = echod_metrics_add_exec("to", to);
    owner_t *o = malloc(sizeof(*o));
    owner_init(o, from, mf, ECHOD_SER_SERIALIZING);
    o->switch_to = to;
    o->switch_metrics = mt;
    uint64_t f0 = echod_metrics_value(&mf->dispatches), t0 = echod_metrics_value(&mt->dispatches);
    for (long i = 0; i < 1000; i++) {
        test_step_t *t = calloc(1, sizeof(*t));
        t->super.run = step_run;
        t->o = o;
        t->seq = i;
        t->do_switch = (i == 0);
        echod_serializer_submit(&o->s, &t->super);
    }
    wait_ran(o, 1000);
    CHECK(atomic_load(&o->order_errors) == 0);
    CHECK(atomic_load(&o->max_concurrent) == 1);
    CHECK(echod_metrics_value(&mf->dispatches) - f0 == 1);
    CHECK(echod_metrics_value(&mt->dispatches) - t0 >= 1);
    echod_exec_destroy(from);
    echod_exec_destroy(to);
    free(o);
}

/*
 * The end of a drain against the next submit, once per round: one producer submits a step and
 * waits for it to run, so every submit lands while the drain that ran the previous step is
 * stopping (the steps are made beforehand and the delay varies by round, so that some submits
 * land in the few instructions between the drain's exchange on `running` and its load of
 * `head`). A lost dispatch (the submit saw RUNNING, the stopping drain saw no step) leaves a step
 * queued with the serializer STOPPED and no drain holding the owner (refs 0): nobody would ever
 * run it. That state is checked, not a time limit; the next submit then runs it.
 */
typedef struct {
    echod_step_t super;
    owner_t *o;
} race_step_t;

static void race_run(echod_step_t *step)
{
    atomic_fetch_add(&((race_step_t *)step)->o->ran, 1);
}

static long test_drain_race(echod_exec_mode_t mode, unsigned threads, long rounds)
{
    echod_exec_t *exec = make_exec(mode, threads);
    echod_exec_metrics_t *m = echod_metrics_add_exec("race", exec);
    owner_t *o = malloc(sizeof(*o));
    race_step_t *steps = calloc((size_t)rounds + 1, sizeof(*steps));
    owner_init(o, exec, m, ECHOD_SER_SERIALIZING);
    long lost = 0;
    for (long i = 0; i <= rounds; i++) {
        steps[i].super.run = race_run;
        steps[i].o = o;
    }
    for (long i = 0; i < rounds; i++) {
        for (volatile long spin = (i * 7) % 61; spin > 0; spin--)
            ;
        echod_serializer_submit(&o->s, &steps[i].super);
        while (atomic_load(&o->ran) < i + 1) {
            if (atomic_load(&o->s.running) == 0 && atomic_load(&o->refs) == 0 && atomic_load(&o->ran) < i + 1) {
                lost++; /* stuck for good: the next submit's dispatch runs it */
                break;
            }
        }
    }
    echod_serializer_submit(&o->s, &steps[rounds].super); /* runs anything a lost dispatch left */
    wait_ran(o, rounds + 1);
    CHECK(lost == 0);
    printf("drain race %s/%u: %ld rounds, %ld lost dispatches\n", echod_exec_mode_name(mode), threads, rounds, lost);
    echod_exec_destroy(exec);
    free(steps);
    free(o);
    return lost;
}

/* The owner's references balance: every retain has its release once the serializer is idle. */
static void test_refs_balance(void)
{
    echod_exec_t *exec = make_exec(ECHOD_EXEC_WORKSTEALING, 2);
    echod_exec_metrics_t *m = echod_metrics_add_exec("refs", exec);
    owner_t *o = malloc(sizeof(*o));
    owner_init(o, exec, m, ECHOD_SER_SERIALIZING);
    for (long i = 0; i < 20000; i++)
        submit(o, 0, i);
    wait_ran(o, 20000);
    CHECK(atomic_load(&o->refs) == 0);
    CHECK(atomic_load(&o->order_errors) == 0);
    echod_exec_destroy(exec);
    free(o);
}

int main(void)
{
    static echod_config_t cfg;
    echod_config_init(&cfg);
    echod_metrics_init(&cfg);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    long n = 50000;
#else
    long n = 500000;
#endif
    test_contention(ECHOD_EXEC_FIXED, n);
    test_contention(ECHOD_EXEC_CACHED, n / 5);
    test_contention(ECHOD_EXEC_WORKSTEALING, n);
    test_coalescing(ECHOD_EXEC_DIRECT, ECHOD_SER_INLINE);
    test_coalescing(ECHOD_EXEC_DIRECT, ECHOD_SER_SERIALIZING);
    test_coalescing(ECHOD_EXEC_FIXED, ECHOD_SER_SERIALIZING);
    test_coalescing(ECHOD_EXEC_FIXED, ECHOD_SER_PASSTHROUGH);
    test_switch();
    test_refs_balance();
    long rounds = (n / 25) * check_stress();
    test_drain_race(ECHOD_EXEC_FIXED, 1, rounds);
    test_drain_race(ECHOD_EXEC_WORKSTEALING, 2, rounds);
    test_drain_race(ECHOD_EXEC_CACHED, 0, rounds / 5);
    return check_done();
}
