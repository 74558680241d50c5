/*
 * Executors: every task runs exactly once under concurrent producers, thread naming and the
 * worker marker, the shape of each pool (cached grows, expires, honours max_threads;
 * workstealing steals; fixed:1 is FIFO), gauges, the queue-wait observer, and shutdown that
 * runs queued work including work submitted while shutting down.
 *
 * ECHOD_TEST_STRESS=N multiplies the rounds of the cancel-while-parking race (CI runs the arm64
 * build under qemu with it: docs/threads.md).
 */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "dispatch/exec.h"
#include "dispatch/exec_internal.h"

/* Sanitizers slow lock-heavy code 5-20x; keep the whole file well inside its time budget. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define PRODUCERS 4

static const char *const mode_names[] = {"direct", "fixed", "cached", "workstealing", "virtual"};

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls until *counter reaches want or timeout_ms passes; returns whether it did. */
static int wait_count(_Atomic unsigned long *counter, unsigned long want, unsigned timeout_ms)
{
    uint64_t deadline = echod_now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (atomic_load(counter) < want) {
        if (echod_now_ns() > deadline)
            return 0;
        sleep_ms(1);
    }
    return 1;
}

static echod_exec_t *make(echod_exec_mode_t mode, unsigned threads, unsigned max_threads, uint64_t keep_alive_ms,
                          const char *name)
{
    echod_exec_config_t cfg = {
        .mode = mode, .threads = threads, .max_threads = max_threads, .keep_alive_ms = keep_alive_ms};
    char err[256] = "";
    echod_exec_t *exec = echod_exec_create(&cfg, name, err, sizeof(err));
    if (exec == NULL)
        fprintf(stderr, "create %s: %s\n", mode_names[mode], err);
    return exec;
}

/* ---- every task exactly once, several producers ---- */

typedef struct {
    echod_task_t task;
    _Atomic unsigned char *runs;
    unsigned idx;
} once_task_t;

static _Atomic unsigned long once_done;
static _Atomic unsigned long once_wrong_marker;
static _Atomic int once_expect_worker;

static void once_run(echod_task_t *t)
{
    once_task_t *ot = (once_task_t *)t;
    atomic_fetch_add_explicit(&ot->runs[ot->idx], 1, memory_order_relaxed);
    if (echod_exec_on_worker() != atomic_load_explicit(&once_expect_worker, memory_order_relaxed))
        atomic_fetch_add(&once_wrong_marker, 1);
    atomic_fetch_add(&once_done, 1);
}

typedef struct {
    echod_exec_t *exec;
    once_task_t *tasks;
    unsigned count;
} producer_t;

static void *producer_main(void *arg)
{
    producer_t *p = arg;
    for (unsigned i = 0; i < p->count; i++)
        echod_exec_submit(p->exec, &p->tasks[i].task);
    return NULL;
}

static void test_exactly_once(echod_exec_mode_t mode, unsigned threads, unsigned per_producer)
{
    uint64_t t0 = echod_now_ns();
    unsigned total = PRODUCERS * per_producer;
    once_task_t *tasks = calloc(total, sizeof(*tasks));
    _Atomic unsigned char *runs = calloc(total, sizeof(*runs));
    echod_exec_t *exec = make(mode, threads, 0, 60000, "once");
    CHECK(exec != NULL && tasks != NULL && runs != NULL);
    if (exec == NULL || tasks == NULL || runs == NULL)
        return;
    atomic_store(&once_done, 0);
    atomic_store(&once_wrong_marker, 0);
    atomic_store(&once_expect_worker, mode != ECHOD_EXEC_DIRECT);
    for (unsigned i = 0; i < total; i++) {
        tasks[i].task.run = once_run;
        tasks[i].runs = runs;
        tasks[i].idx = i;
    }

    pthread_t tids[PRODUCERS];
    producer_t prods[PRODUCERS];
    for (unsigned p = 0; p < PRODUCERS; p++) {
        prods[p] = (producer_t){exec, tasks + p * per_producer, per_producer};
        pthread_create(&tids[p], NULL, producer_main, &prods[p]);
    }
    for (unsigned p = 0; p < PRODUCERS; p++)
        pthread_join(tids[p], NULL);
    CHECK(wait_count(&once_done, total, 60000));
    CHECK(!echod_exec_on_worker());
    echod_exec_destroy(exec);

    unsigned wrong = 0;
    for (unsigned i = 0; i < total; i++)
        wrong += atomic_load(&runs[i]) != 1;
    CHECK(wrong == 0);
    CHECK(atomic_load(&once_done) == total);
    CHECK(atomic_load(&once_wrong_marker) == 0);
    free(runs);
    free(tasks);
    printf("  exactly once: %-12s %u x %u tasks in %.0f ms\n", mode_names[mode], PRODUCERS, per_producer,
           (double)(echod_now_ns() - t0) / 1e6);
}

/* ---- thread names ---- */

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static char names_seen[64][16];
static unsigned names_nseen;
static _Atomic unsigned long names_done;

static void name_run(echod_task_t *t)
{
    char buf[16] = "";
    pthread_getname_np(pthread_self(), buf, sizeof(buf));
    pthread_mutex_lock(&names_lock);
    if (names_nseen < 64)
        memcpy(names_seen[names_nseen++], buf, sizeof(buf));
    pthread_mutex_unlock(&names_lock);
    atomic_fetch_add(&names_done, 1);
    free(t);
}

/* "<prefix>-<digits>" */
static int is_worker_name(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0 || s[n] != '-' || s[n + 1] == '\0')
        return 0;
    for (s += n + 1; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* How many threads of this process are named exactly `name`; *state (if not NULL) is the
 * scheduler state of the last one (/proc's R, S, ...), 0 when there is none. */
static unsigned comm_state(const char *name, char *state)
{
    unsigned n = 0;
    if (state != NULL)
        *state = 0;
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[300], comm[32] = "", stat[512] = "";
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *fp = fopen(path, "r");
        if (fp == NULL)
            continue;
        if (fgets(comm, sizeof(comm), fp) != NULL)
            comm[strcspn(comm, "\n")] = '\0';
        fclose(fp);
        if (strcmp(comm, name) != 0)
            continue;
        n++;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        if (state != NULL && (fp = fopen(path, "r")) != NULL) {
            const char *close = fgets(stat, sizeof(stat), fp) != NULL ? strrchr(stat, ')') : NULL;
            *state = close != NULL && close[1] == ' ' ? close[2] : 0;
            fclose(fp);
        }
    }
    closedir(d);
    return n;
}

static unsigned count_comm(const char *name)
{
    return comm_state(name, NULL);
}

static void test_thread_names(void)
{
    char buf[16];
    echod_exec__thread_name(buf, sizeof(buf), "echod-fixed", 3);
    CHECK(strcmp(buf, "echod-fixed-3") == 0);
    echod_exec__thread_name(buf, sizeof(buf), "echod-workstealing", 3);
    CHECK(strcmp(buf, "echod-workste-3") == 0);
    echod_exec__thread_name(buf, sizeof(buf), "echod-workstealing", 12);
    CHECK(strcmp(buf, "echod-workst-12") == 0);

    /* Pooled modes: every worker is named, visible in /proc as soon as threads() counts it. */
    const struct {
        echod_exec_mode_t mode;
        const char *name;
    } cases[] = {{ECHOD_EXEC_FIXED, "tn-fixed"},
                 {ECHOD_EXEC_WORKSTEALING, "echod-workstealing"},
                 {ECHOD_EXEC_CACHED, "tn-cached"}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        echod_exec_t *exec = make(cases[c].mode, 3, 0, 60000, cases[c].name);
        CHECK(exec != NULL);
        if (exec == NULL)
            continue;
        CHECK(strcmp(echod_exec_name(exec), cases[c].name) == 0);
        CHECK(echod_exec_mode(exec) == cases[c].mode);
        if (cases[c].mode != ECHOD_EXEC_CACHED) {
            for (int i = 0; i < 20000 && echod_exec_threads(exec) < 3; i++)
                sleep_ms(1);
            CHECK(echod_exec_threads(exec) == 3);
            for (unsigned i = 0; i < 3; i++) {
                echod_exec__thread_name(buf, sizeof(buf), cases[c].name, i);
                CHECK(count_comm(buf) == 1);
            }
        } else {
            CHECK(echod_exec_threads(exec) == 0); /* no core threads */
        }
        names_nseen = 0;
        atomic_store(&names_done, 0);
        for (int i = 0; i < 20; i++) {
            echod_task_t *t = calloc(1, sizeof(*t));
            t->run = name_run;
            echod_exec_submit(exec, t);
        }
        CHECK(wait_count(&names_done, 20, 10000));
        echod_exec_destroy(exec);
        char prefix[16];
        echod_exec__thread_name(prefix, sizeof(prefix), cases[c].name, 0);
        prefix[strlen(prefix) - 2] = '\0'; /* strip "-0" */
        unsigned good = 0;
        for (unsigned i = 0; i < names_nseen; i++)
            good += is_worker_name(names_seen[i], prefix);
        CHECK(names_nseen == 20 && good == 20);
    }
}

/* ---- sequential executors keep FIFO order ---- */

typedef struct {
    echod_task_t task;
    unsigned seq;
} seq_task_t;

static unsigned *order_log;
static unsigned order_len;

static void order_run(echod_task_t *t)
{
    /* Unsynchronised on purpose: a sequential executor never runs two of these at once (TSan checks). */
    order_log[order_len++] = ((seq_task_t *)t)->seq;
}

static void test_fixed1_fifo(void)
{
    unsigned n = SANITIZED ? 5000 : 50000;
    echod_exec_t *exec = make(ECHOD_EXEC_FIXED, 1, 0, 0, "fifo");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    CHECK(echod_exec_is_sequential(exec));
    CHECK(!echod_exec_is_direct(exec));
    seq_task_t *tasks = calloc(n, sizeof(*tasks));
    order_log = calloc(n, sizeof(*order_log));
    order_len = 0;
    for (unsigned i = 0; i < n; i++) {
        tasks[i].task.run = order_run;
        tasks[i].seq = i;
        echod_exec_submit(exec, &tasks[i].task);
    }
    echod_exec_destroy(exec); /* joins: order_log is ours again */
    CHECK(order_len == n);
    unsigned out_of_order = 0;
    for (unsigned i = 0; i < order_len; i++)
        out_of_order += order_log[i] != i;
    CHECK(out_of_order == 0);
    free(order_log);
    free(tasks);
}

static void test_sequential_flags(void)
{
    const struct {
        echod_exec_mode_t mode;
        unsigned threads;
        int sequential;
    } cases[] = {{ECHOD_EXEC_DIRECT, 0, 1},
                 {ECHOD_EXEC_FIXED, 2, 0},
                 {ECHOD_EXEC_CACHED, 0, 0},
                 {ECHOD_EXEC_WORKSTEALING, 1, 0},
                 {ECHOD_EXEC_VIRTUAL, 1, 0}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        echod_exec_t *exec = make(cases[i].mode, cases[i].threads, 0, 1000, NULL);
        CHECK(exec != NULL);
        if (exec == NULL)
            continue;
        CHECK(echod_exec_is_sequential(exec) == cases[i].sequential);
        CHECK(echod_exec_is_direct(exec) == (cases[i].mode == ECHOD_EXEC_DIRECT));
        CHECK(echod_exec_mode(exec) == cases[i].mode);
        echod_exec_destroy(exec);
    }
}

/* ---- cached: grows under blocking work, reuses parked threads, expires, honours the cap ---- */

static _Atomic unsigned long block_arrived, block_released, block_ok;
static unsigned block_n;

/* Every one of block_n tasks must be running at once for any of them to get past this. */
static void block_run(echod_task_t *t)
{
    atomic_fetch_add(&block_arrived, 1);
    if (wait_count(&block_arrived, block_n, 10000))
        atomic_fetch_add(&block_ok, 1);
    atomic_fetch_add(&block_released, 1);
    free(t);
}

static void submit_blockers(echod_exec_t *exec, unsigned n)
{
    block_n = n;
    atomic_store(&block_arrived, 0);
    atomic_store(&block_released, 0);
    atomic_store(&block_ok, 0);
    for (unsigned i = 0; i < n; i++) {
        echod_task_t *t = calloc(1, sizeof(*t));
        t->run = block_run;
        echod_exec_submit(exec, t);
    }
}

static char reuse_name[16];
static _Atomic unsigned long reuse_done;

static void reuse_run(echod_task_t *t)
{
    pthread_getname_np(pthread_self(), reuse_name, sizeof(reuse_name));
    atomic_fetch_add(&reuse_done, 1);
    free(t);
}

static void test_cached_grows_and_expires(void)
{
    const unsigned n = 8;

    /* Grows to n threads for n tasks that can only finish together, then all n age out. */
    echod_exec_t *exec = make(ECHOD_EXEC_CACHED, 0, 0, 50, "grow");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    submit_blockers(exec, n);
    CHECK(wait_count(&block_released, n, 20000));
    CHECK(atomic_load(&block_ok) == n);
    uint64_t t0 = echod_now_ns();
    int expired = 0;
    while (!expired && echod_now_ns() - t0 < UINT64_C(10000000000)) {
        expired = echod_exec_threads(exec) == 0;
        sleep_ms(2);
    }
    CHECK(expired);
    CHECK(echod_exec_busy_threads(exec) == 0);
    echod_exec_destroy(exec);

    /* A long keep-alive: the next task goes to a parked thread, no new thread is started. */
    exec = make(ECHOD_EXEC_CACHED, 0, 0, 600000, "reuse");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    submit_blockers(exec, n);
    CHECK(wait_count(&block_released, n, 20000));
    for (int i = 0; i < 20000 && echod_exec_busy_threads(exec) > 0; i++)
        sleep_ms(1);
    CHECK(echod_exec_busy_threads(exec) == 0);
    CHECK(echod_exec_threads(exec) == n);
    atomic_store(&reuse_done, 0);
    echod_task_t *t = calloc(1, sizeof(*t));
    t->run = reuse_run;
    echod_exec_submit(exec, t);
    CHECK(wait_count(&reuse_done, 1, 10000));
    unsigned idx = 99;
    CHECK(sscanf(reuse_name, "reuse-%u", &idx) == 1 && idx < n);
    CHECK(echod_exec_threads(exec) == n);
    /* Destroy must not wait out the ten-minute keep-alive of the parked threads. */
    t0 = echod_now_ns();
    echod_exec_destroy(exec);
    CHECK(echod_now_ns() - t0 < UINT64_C(5000000000));
}

static _Atomic unsigned long cap_running, cap_max_running, cap_max_threads, cap_done, cap_gate;
static echod_exec_t *cap_exec;

static void cap_run(echod_task_t *t)
{
    unsigned long now = atomic_fetch_add(&cap_running, 1) + 1;
    for (unsigned long m = atomic_load(&cap_max_running); now > m;)
        if (atomic_compare_exchange_weak(&cap_max_running, &m, now))
            break;
    unsigned long th = echod_exec_threads(cap_exec);
    for (unsigned long m = atomic_load(&cap_max_threads); th > m;)
        if (atomic_compare_exchange_weak(&cap_max_threads, &m, th))
            break;
    wait_count(&cap_gate, 1, 20000);
    sleep_ms(1);
    atomic_fetch_sub(&cap_running, 1);
    atomic_fetch_add(&cap_done, 1);
    free(t);
}

static void test_cached_max_threads(void)
{
    const unsigned n = 20;
    cap_exec = make(ECHOD_EXEC_CACHED, 0, 2, 60000, "cap");
    CHECK(cap_exec != NULL);
    if (cap_exec == NULL)
        return;
    atomic_store(&cap_running, 0);
    atomic_store(&cap_max_running, 0);
    atomic_store(&cap_max_threads, 0);
    atomic_store(&cap_done, 0);
    atomic_store(&cap_gate, 0);
    for (unsigned i = 0; i < n; i++) {
        echod_task_t *t = calloc(1, sizeof(*t));
        t->run = cap_run;
        echod_exec_submit(cap_exec, t);
    }
    /* Two run (held at the gate), the rest wait in the overflow FIFO. */
    CHECK(wait_count(&cap_running, 2, 10000));
    CHECK(echod_exec_queue_depth(cap_exec) == n - 2);
    CHECK(echod_exec_threads(cap_exec) == 2);
    CHECK(echod_exec_busy_threads(cap_exec) == 2);
    atomic_store(&cap_gate, 1);
    CHECK(wait_count(&cap_done, n, 20000));
    CHECK(atomic_load(&cap_max_running) <= 2);
    CHECK(atomic_load(&cap_max_threads) <= 2);
    CHECK(echod_exec_threads(cap_exec) <= 2);
    CHECK(echod_exec_queue_depth(cap_exec) == 0);
    echod_exec_destroy(cap_exec);
    cap_exec = NULL;
}

/* ---- workstealing: work pushed by a blocked carrier is stolen by the others ---- */

#define STEAL_N 200

typedef struct {
    echod_task_t task;
    unsigned idx;
} steal_task_t;

static echod_exec_t *steal_exec;
static steal_task_t steal_tasks[STEAL_N];
static pthread_t steal_ran_on[STEAL_N];
static pthread_t steal_seed_thread;
static _Atomic unsigned long steal_done, steal_seed_ok, steal_seed_finished, steal_first_claimed;

static void steal_run(echod_task_t *t)
{
    steal_ran_on[((steal_task_t *)t)->idx] = pthread_self();
    /* The first thief holds on until some other thread has run one: two thieves, however loaded the box. */
    if (atomic_exchange(&steal_first_claimed, 1) == 0)
        wait_count(&steal_done, 1, 20000);
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
    atomic_fetch_add(&steal_done, 1);
}

static void steal_seed_run(echod_task_t *t)
{
    steal_seed_thread = pthread_self();
    for (unsigned i = 0; i < STEAL_N; i++) {
        steal_tasks[i].task.run = steal_run;
        steal_tasks[i].idx = i;
        echod_exec_submit(steal_exec, &steal_tasks[i].task);
    }
    /* Block this carrier: its own queue can only be emptied by thieves. */
    if (wait_count(&steal_done, STEAL_N, 20000))
        atomic_store(&steal_seed_ok, 1);
    atomic_store(&steal_seed_finished, 1);
    free(t);
}

static void test_workstealing_steals(void)
{
    steal_exec = make(ECHOD_EXEC_WORKSTEALING, 4, 0, 0, "steal");
    CHECK(steal_exec != NULL);
    if (steal_exec == NULL)
        return;
    atomic_store(&steal_done, 0);
    atomic_store(&steal_seed_ok, 0);
    atomic_store(&steal_seed_finished, 0);
    atomic_store(&steal_first_claimed, 0);
    echod_task_t *seed = calloc(1, sizeof(*seed));
    seed->run = steal_seed_run;
    echod_exec_submit(steal_exec, seed);
    CHECK(wait_count(&steal_seed_finished, 1, 30000));
    echod_exec_destroy(steal_exec); /* joins: the arrays are ours again */
    CHECK(atomic_load(&steal_seed_ok) == 1);
    pthread_t distinct[STEAL_N];
    unsigned ndistinct = 0, on_seed = 0;
    for (unsigned i = 0; i < STEAL_N; i++) {
        on_seed += pthread_equal(steal_ran_on[i], steal_seed_thread) != 0;
        unsigned j = 0;
        while (j < ndistinct && !pthread_equal(distinct[j], steal_ran_on[i]))
            j++;
        if (j == ndistinct)
            distinct[ndistinct++] = steal_ran_on[i];
    }
    CHECK(on_seed == 0);
    CHECK(ndistinct >= 2);
    printf("  workstealing: %u tasks pushed by a blocked carrier ran on %u thieves\n", STEAL_N, ndistinct);
}

/* ---- gauges ---- */

static _Atomic unsigned long gate_open, gate_entered, gauge_done;

static void gate_run(echod_task_t *t)
{
    atomic_fetch_add(&gate_entered, 1);
    wait_count(&gate_open, 1, 20000);
    free(t);
}

static void gauge_run(echod_task_t *t)
{
    atomic_fetch_add(&gauge_done, 1);
    free(t);
}

static void test_gauges(echod_exec_mode_t mode)
{
    /* One thread held by a gated task: what follows queues, and the gauges must say so. */
    echod_exec_t *exec = make(mode, 1, 1, 60000, "gauge");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    atomic_store(&gate_open, 0);
    atomic_store(&gate_entered, 0);
    atomic_store(&gauge_done, 0);
    echod_task_t *g = calloc(1, sizeof(*g));
    g->run = gate_run;
    echod_exec_submit(exec, g);
    CHECK(wait_count(&gate_entered, 1, 10000));
    for (int i = 0; i < 10; i++) {
        echod_task_t *t = calloc(1, sizeof(*t));
        t->run = gauge_run;
        echod_exec_submit(exec, t);
    }
    CHECK(echod_exec_queue_depth(exec) == 10);
    /* virtual: the carrier and the unparker (which may still be starting) */
    unsigned want_threads = mode == ECHOD_EXEC_VIRTUAL ? 2u : 1u;
    for (int i = 0; i < 20000 && echod_exec_threads(exec) < want_threads; i++)
        sleep_ms(1);
    CHECK(echod_exec_threads(exec) == want_threads);
    CHECK(echod_exec_busy_threads(exec) == 1);
    atomic_store(&gate_open, 1);
    CHECK(wait_count(&gauge_done, 10, 10000));
    CHECK(echod_exec_queue_depth(exec) == 0);
    for (int i = 0; i < 20000 && echod_exec_busy_threads(exec) != 0; i++)
        sleep_ms(1);
    CHECK(echod_exec_busy_threads(exec) == 0);
    echod_exec_destroy(exec);
}

/* ---- the queue-wait observer ---- */

static _Atomic unsigned long obs_calls, obs_max_wait, obs_done, obs_submitted;
static int obs_ctx;

static void observe(void *ctx, uint64_t wait_ns)
{
    if (ctx == &obs_ctx)
        atomic_fetch_add(&obs_calls, 1);
    for (unsigned long m = atomic_load(&obs_max_wait); wait_ns > m;)
        if (atomic_compare_exchange_weak(&obs_max_wait, &m, wait_ns))
            break;
}

static void obs_slow_run(echod_task_t *t)
{
    wait_count(&obs_submitted, 1, 20000);
    sleep_ms(30);
    atomic_fetch_add(&obs_done, 1);
    free(t);
}

static void obs_run(echod_task_t *t)
{
    atomic_fetch_add(&obs_done, 1);
    free(t);
}

static void test_observer(echod_exec_mode_t mode)
{
    echod_exec_t *exec = make(mode, 1, 1, 60000, "obs");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    echod_exec_set_observer(exec, observe, &obs_ctx);
    atomic_store(&obs_calls, 0);
    atomic_store(&obs_max_wait, 0);
    atomic_store(&obs_done, 0);
    atomic_store(&obs_submitted, 0);
    /* Everything after the first task waits out its 30 ms, which start once all are queued. */
    echod_task_t *t = calloc(1, sizeof(*t));
    t->run = obs_slow_run;
    echod_exec_submit(exec, t);
    for (int i = 0; i < 99; i++) {
        t = calloc(1, sizeof(*t));
        t->run = obs_run;
        echod_exec_submit(exec, t);
    }
    atomic_store(&obs_submitted, 1);
    CHECK(wait_count(&obs_done, 100, 10000));
    echod_exec_destroy(exec);
    CHECK(atomic_load(&obs_calls) == 100);
    CHECK(atomic_load(&obs_max_wait) >= UINT64_C(30000000));
    CHECK(atomic_load(&obs_max_wait) < UINT64_C(10000000000));
}

/* ---- shutdown runs queued work, including work submitted during shutdown ---- */

typedef struct {
    echod_task_t task;
    echod_exec_t *exec;
    unsigned depth;
    int fan; /* 1: submit two children (a tree), 0: one (a chain) */
} spawn_task_t;

static _Atomic unsigned long shut_runs;

static void spawn_run(echod_task_t *t)
{
    spawn_task_t *st = (spawn_task_t *)t;
    atomic_fetch_add(&shut_runs, 1);
    if (st->depth > 0) {
        for (int i = 0; i < 1 + st->fan; i++) {
            spawn_task_t *c = calloc(1, sizeof(*c));
            *c = (spawn_task_t){{NULL, spawn_run, 0}, st->exec, st->depth - 1, st->fan};
            echod_exec_submit(st->exec, &c->task);
        }
    }
    free(st);
}

static void slow_run(echod_task_t *t)
{
    sleep_ms(20);
    atomic_fetch_add(&shut_runs, 1);
    free(t);
}

static void test_shutdown(echod_exec_mode_t mode)
{
    const unsigned quick = 1000, chains = 8, chain_depth = 200, tree_depth = 8;
    /* cached capped at 2 so that work actually queues instead of getting a thread each. */
    echod_exec_t *exec = make(mode, 2, 2, 60000, "shut");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    atomic_store(&shut_runs, 0);
    atomic_store(&gauge_done, 0);
    for (int i = 0; i < 2; i++) {
        echod_task_t *t = calloc(1, sizeof(*t));
        t->run = slow_run;
        echod_exec_submit(exec, t);
    }
    for (unsigned i = 0; i < quick; i++) {
        echod_task_t *t = calloc(1, sizeof(*t));
        t->run = gauge_run;
        echod_exec_submit(exec, t);
    }
    for (unsigned i = 0; i < chains; i++) {
        spawn_task_t *st = calloc(1, sizeof(*st));
        *st = (spawn_task_t){{NULL, spawn_run, 0}, exec, chain_depth, 0};
        echod_exec_submit(exec, &st->task);
    }
    spawn_task_t *tree = calloc(1, sizeof(*tree));
    *tree = (spawn_task_t){{NULL, spawn_run, 0}, exec, tree_depth, 1};
    echod_exec_submit(exec, &tree->task);
    unsigned long want = 2 + chains * (chain_depth + 1) + (2u << tree_depth) - 1;
    /* The slow tasks still hold both threads: nearly everything is queued or not yet spawned. */
    echod_exec_destroy(exec);
    CHECK(atomic_load(&shut_runs) == want);
    CHECK(atomic_load(&gauge_done) == quick);
}

/* ---- virtual: sleeps park, cancels wake early, destroy wakes sleepers, overflows fault ---- */

typedef struct {
    echod_task_t task;
    echod_exec_sleeper_t sleeper;
    atomic_int cancelled;
    uint64_t sleep_ns;
    int slept; /* echod_exec_sleep's result */
} sleep_task_t;

static _Atomic unsigned long sleeps_done;

static void sleep_run(echod_task_t *t)
{
    sleep_task_t *st = (sleep_task_t *)t;
    st->slept = echod_exec_sleep(&st->sleeper, st->sleep_ns);
    atomic_fetch_add(&sleeps_done, 1);
}

static sleep_task_t *sleep_tasks(unsigned n, uint64_t sleep_ns)
{
    sleep_task_t *st = calloc(n, sizeof(*st));
    for (unsigned i = 0; i < n; i++) {
        st[i].task.run = sleep_run;
        atomic_init(&st[i].cancelled, 0);
        echod_exec_sleeper_init(&st[i].sleeper, &st[i].cancelled);
        st[i].sleep_ns = sleep_ns;
        st[i].slept = 99;
    }
    return st;
}

static echod_exec_vthreads_t vthreads(echod_exec_t *exec)
{
    echod_exec_vthreads_t v = {0};
    CHECK(echod_exec_vthreads(exec, &v) == 1);
    return v;
}

/* ---- what a task's hand-off found: its thread parked (woken for it) or running ---- */

typedef struct {
    echod_task_t task;
    atomic_int woke; /* echod_exec_task_woke() as the task began; -1 before it ran */
    atomic_int done;
    atomic_int *hold; /* NULL, or the task keeps its thread busy until *hold is set */
} woke_task_t;

static void woke_run(echod_task_t *t)
{
    woke_task_t *w = (woke_task_t *)t;
    atomic_store(&w->woke, echod_exec_task_woke());
    while (w->hold != NULL && !atomic_load(w->hold))
        sched_yield();
    atomic_store(&w->done, 1);
}

static void woke_init(woke_task_t *w, atomic_int *hold)
{
    memset(w, 0, sizeof(*w));
    w->task.run = woke_run;
    atomic_init(&w->woke, -1);
    w->hold = hold;
}

static int wait_flag(atomic_int *flag, unsigned timeout_ms)
{
    for (unsigned i = 0; i < timeout_ms && !atomic_load(flag); i++)
        sleep_ms(1);
    return atomic_load(flag);
}

/* Until the one thread named `name` sleeps: with nothing queued, that is in its executor's wait. */
static int wait_parked(const char *name)
{
    char state = 0;
    for (int i = 0; i < 20000 && !(comm_state(name, &state) == 1 && state == 'S'); i++)
        sleep_ms(1);
    return state == 'S';
}

/* The task a virtual thread submits after a sleep, from its carrier; and that virtual thread. */
static woke_task_t after_resume;
static echod_exec_t *resume_exec;

static void sleep_then_submit(echod_task_t *t)
{
    sleep_task_t *st = (sleep_task_t *)t;
    echod_exec_sleep(&st->sleeper, st->sleep_ns);
    /* resumed by the unparker: its carrier queue gets the next task, run when this one ends */
    echod_exec_submit(resume_exec, &after_resume.task);
    st->slept = 1;
}

/*
 * One thread per pool: a task submitted to it idle finds it parked (its first, as a new thread,
 * too); tasks queued behind a task that keeps it busy find it running, each of them (the wake-up
 * is taken by the first task it runs, never carried on). `direct` and a thread that is no worker
 * read 0. For `virtual`, a virtual thread resumed after a sleep takes its carrier's wake-up too.
 */
static void test_task_woke(void)
{
    static const echod_exec_mode_t modes[] = {ECHOD_EXEC_FIXED, ECHOD_EXEC_CACHED, ECHOD_EXEC_WORKSTEALING,
                                              ECHOD_EXEC_VIRTUAL};
    CHECK(echod_exec_task_woke() == 0);
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        /* cached with max_threads 1 queues what its one thread cannot take */
        echod_exec_t *exec = make(modes[m], 1, modes[m] == ECHOD_EXEC_CACHED, 60000, "wk");
        CHECK(exec != NULL);
        if (exec == NULL)
            continue;
        enum { QUEUED = 3 };
        woke_task_t first, idle, busy, queued[QUEUED], again;
        atomic_int hold;
        atomic_init(&hold, 0);
        woke_init(&first, NULL);
        echod_exec_submit(exec, &first.task); /* cached: starts its thread with it */
        CHECK(wait_flag(&first.done, 20000) && atomic_load(&first.woke) == 1);

        CHECK(wait_parked("wk-0"));
        woke_init(&idle, NULL);
        echod_exec_submit(exec, &idle.task);
        CHECK(wait_flag(&idle.done, 20000) && atomic_load(&idle.woke) == 1);

        CHECK(wait_parked("wk-0"));
        woke_init(&busy, &hold);
        echod_exec_submit(exec, &busy.task);
        for (int i = 0; i < 20000 && atomic_load(&busy.woke) == -1; i++)
            sleep_ms(1);
        for (int i = 0; i < QUEUED; i++) {
            woke_init(&queued[i], NULL);
            echod_exec_submit(exec, &queued[i].task);
        }
        atomic_store(&hold, 1);
        CHECK(wait_flag(&queued[QUEUED - 1].done, 20000));
        CHECK(atomic_load(&busy.woke) == 1);
        for (int i = 0; i < QUEUED; i++)
            CHECK(atomic_load(&queued[i].woke) == 0);

        CHECK(wait_parked("wk-0"));
        woke_init(&again, NULL);
        echod_exec_submit(exec, &again.task);
        CHECK(wait_flag(&again.done, 20000) && atomic_load(&again.woke) == 1);
        printf("task woke: %s: first %d, idle %d, busy %d, queued %d %d %d, idle again %d\n", mode_names[modes[m]],
               atomic_load(&first.woke), atomic_load(&idle.woke), atomic_load(&busy.woke), atomic_load(&queued[0].woke),
               atomic_load(&queued[1].woke), atomic_load(&queued[2].woke), atomic_load(&again.woke));

        if (modes[m] == ECHOD_EXEC_VIRTUAL) {
            /* the carrier parks while the virtual thread sleeps; the unparker's resubmission wakes it,
             * and the resumed virtual thread's mount takes that wake-up: the task queued behind it finds
             * the carrier running */
            sleep_task_t *st = sleep_tasks(1, 20 * 1000000u);
            st->task.run = sleep_then_submit;
            woke_init(&after_resume, NULL);
            resume_exec = exec;
            echod_exec_submit(exec, &st->task);
            CHECK(wait_flag(&after_resume.done, 20000) && atomic_load(&after_resume.woke) == 0);
            CHECK(vthreads(exec).parks == 1);
            echod_exec_destroy(exec);
            free(st);
            continue;
        }
        echod_exec_destroy(exec);
    }
    /* direct runs the task in submit, on a thread that is no worker */
    echod_exec_t *direct = make(ECHOD_EXEC_DIRECT, 0, 0, 0, "wk-direct");
    woke_task_t d;
    woke_init(&d, NULL);
    echod_exec_submit(direct, &d.task);
    CHECK(atomic_load(&d.woke) == 0);
    echod_exec_destroy(direct);
}

static void test_virtual_parks(void)
{
    /* 64 sleeps of 10 ms on one carrier: every one parks, so all of them overlap */
    enum { n = 64 };
    echod_exec_t *exec = make(ECHOD_EXEC_VIRTUAL, 1, 0, 0, "vt-park");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    sleep_task_t *st = sleep_tasks(n, 10 * 1000000u);
    atomic_store(&sleeps_done, 0);
    uint64_t t0 = echod_now_ns();
    for (unsigned i = 0; i < n; i++)
        echod_exec_submit(exec, &st[i].task);
    CHECK(wait_count(&sleeps_done, n, 20000));
    uint64_t wall_ms = (echod_now_ns() - t0) / 1000000u;
    echod_exec_vthreads_t v = vthreads(exec);
    CHECK(v.started == n && v.parks == n && v.unparks == n);
    for (int i = 0; i < 20000 && vthreads(exec).live != 0; i++)
        sleep_ms(1);
    CHECK(vthreads(exec).live == 0);
    for (unsigned i = 0; i < n; i++)
        CHECK(st[i].slept == 0);
    /* a blocking sleep off a virtual thread says so, and the caller sleeps itself */
    CHECK(echod_exec_sleep(&st[0].sleeper, 1000) == -1);
    echod_exec_destroy(exec);
    free(st);
    printf("virtual: %u sleeps of 10 ms on 1 carrier took %llu ms\n", (unsigned)n, (unsigned long long)wall_ms);
}

static void test_virtual_interrupt(void)
{
    echod_exec_t *exec = make(ECHOD_EXEC_VIRTUAL, 1, 0, 0, "vt-intr");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    sleep_task_t *st = sleep_tasks(2, 60ull * 1000000000u);
    atomic_store(&sleeps_done, 0);
    /* cancelled before it sleeps: no park at all */
    atomic_store(&st[1].cancelled, 1);
    echod_exec_submit(exec, &st[1].task);
    CHECK(wait_count(&sleeps_done, 1, 20000));
    CHECK(vthreads(exec).parks == 0);
    /* cancelled while parked (or while parking: the protocol covers both) */
    echod_exec_submit(exec, &st[0].task);
    for (int i = 0; i < 20000 && vthreads(exec).parks != 1; i++)
        sleep_ms(1);
    atomic_store(&st[0].cancelled, 1);
    echod_exec_interrupt(&st[0].sleeper);
    CHECK(wait_count(&sleeps_done, 2, 20000)); /* not 60 s */
    echod_exec_vthreads_t v = vthreads(exec);
    CHECK(v.parks == 1 && v.unparks == 1);
    echod_exec_interrupt(&st[0].sleeper); /* nothing parked: nothing happens */
    CHECK(vthreads(exec).unparks == 1);
    echod_exec_destroy(exec);
    free(st);
}

/*
 * A cancel racing a fiber that is parking, once per round, as echod_call_cancel does it (an
 * exchange on the call's flag, then echod_exec_interrupt): the carrier files the fiber and reads
 * the flag, the canceller sets the flag and reads which executor it parks on. A lost cancel
 * leaves the fiber asleep for its whole hour; any round slower than 30 s counts as one.
 */
static void test_virtual_cancel_race(long rounds)
{
    echod_exec_t *exec = make(ECHOD_EXEC_VIRTUAL, 2, 0, 0, "vt-race");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    sleep_task_t *st = sleep_tasks((unsigned)rounds, 3600ull * 1000000000u);
    atomic_store(&sleeps_done, 0);
    long lost = 0;
    for (long i = 0; i < rounds && lost == 0; i++) {
        echod_exec_submit(exec, &st[i].task);
        for (volatile long spin = (i * 7) % 61 * 10; spin > 0; spin--)
            ;
        atomic_exchange(&st[i].cancelled, 1);
        echod_exec_interrupt(&st[i].sleeper);
        if (!wait_count(&sleeps_done, (unsigned long)i + 1, 30000))
            lost++;
    }
    CHECK(lost == 0);
    echod_exec_vthreads_t v = vthreads(exec);
    printf("virtual: %ld cancels racing a park, %llu parked first, %ld lost\n", rounds, (unsigned long long)v.parks,
           lost);
    echod_exec_destroy(exec); /* wakes a sleeper a lost cancel left */
    free(st);
}

static void test_virtual_destroy_wakes_sleepers(void)
{
    echod_exec_t *exec = make(ECHOD_EXEC_VIRTUAL, 2, 0, 0, "vt-stop");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    sleep_task_t *st = sleep_tasks(8, 60ull * 1000000000u);
    atomic_store(&sleeps_done, 0);
    for (unsigned i = 0; i < 8; i++)
        echod_exec_submit(exec, &st[i].task);
    for (int i = 0; i < 20000 && vthreads(exec).parks != 8; i++)
        sleep_ms(1);
    uint64_t t0 = echod_now_ns();
    echod_exec_destroy(exec);
    CHECK(atomic_load(&sleeps_done) == 8);
    CHECK(echod_now_ns() - t0 < 30ull * 1000000000u);
    free(st);
}

static _Atomic unsigned long deep_frames;

static __attribute__((noinline)) unsigned long recurse(unsigned long n)
{
    volatile char pad[256];
    pad[0] = (char)n;
    atomic_fetch_add(&deep_frames, 1);
    if (n == 0)
        return pad[0];
    return recurse(n - 1) + pad[0];
}

static void deep_run(echod_task_t *t)
{
    (void)t;
    recurse(1u << 16); /* 16 MiB of frames on a 16 KiB stack */
    _exit(0);          /* the guard page let it through: memory was corrupted */
}

static void test_virtual_guard_page(void)
{
    /*
     * A child overflows its virtual thread's stack: it must die (SIGSEGV, or ASan's report). It
     * never outlives this test: it dies with it (PR_SET_PDEATHSIG), and one that has not ended
     * in 60 s is killed and counted a failure. valgrind under qemu-user cannot end a process
     * whose other threads sit in a system call (its thread-killing signal has no host signal
     * there), and such a child, its parent gone, once spun for 1.5 hours (docs/threads.md).
     */
    fflush(stdout);
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(5);
        echod_exec_config_t cfg = {.mode = ECHOD_EXEC_VIRTUAL, .threads = 1, .stack_bytes = 16384};
        echod_exec_t *exec = echod_exec_create(&cfg, "vt-guard", NULL, 0);
        if (exec == NULL)
            _exit(3);
        static echod_task_t t = {.run = deep_run};
        echod_exec_submit(exec, &t);
        sleep_ms(30000);
        _exit(4);
    }
    int status = 0;
    pid_t got = 0;
    for (int i = 0; i < 6000 && (got = waitpid(pid, &status, WNOHANG)) == 0; i++)
        sleep_ms(10);
    if (got == 0) {
        fprintf(stderr, "guard page: the overflowing child had not ended after 60 s: killed\n");
        kill(pid, SIGKILL);
        got = waitpid(pid, &status, 0);
        CHECK(!"the overflowing child ended by itself");
    }
    CHECK(got == pid);
    CHECK(!(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) >= 3)));
}

/* ---- CPU count ---- */

static void test_cpus(void)
{
    /* the cgroup side of the count: tests/unit/test_cgroup.c */
    CHECK(echod_exec_available_cpus() >= 1);

    /* threads: 0 means the CPUs we may use. */
    echod_exec_t *exec = make(ECHOD_EXEC_FIXED, 0, 0, 0, "cpus");
    CHECK(exec != NULL);
    if (exec == NULL)
        return;
    unsigned want = echod_exec_available_cpus();
    for (int i = 0; i < 20000 && echod_exec_threads(exec) < want; i++)
        sleep_ms(1);
    CHECK(echod_exec_threads(exec) == want);
    CHECK(echod_exec_is_sequential(exec) == (want == 1));
    echod_exec_destroy(exec);
}

static void test_create_errors(void)
{
    char err[256] = "";
    echod_exec_config_t bad_mode = {.mode = (echod_exec_mode_t)42};
    CHECK(echod_exec_create(&bad_mode, "x", err, sizeof(err)) == NULL && err[0] != '\0');
    err[0] = '\0';
    echod_exec_config_t too_many = {.mode = ECHOD_EXEC_FIXED, .threads = 1000000};
    CHECK(echod_exec_create(&too_many, "x", err, sizeof(err)) == NULL && err[0] != '\0');
    err[0] = '\0';
    echod_exec_config_t long_keep = {.mode = ECHOD_EXEC_CACHED, .keep_alive_ms = UINT64_MAX};
    CHECK(echod_exec_create(&long_keep, "x", err, sizeof(err)) == NULL && err[0] != '\0');
    CHECK(echod_exec_create(&bad_mode, "x", NULL, 0) == NULL);
}

int main(void)
{
    uint64_t t0 = echod_now_ns();
    unsigned big = SANITIZED ? 100000 : 250000;
    unsigned cached_n = SANITIZED ? 10000 : 25000;

    CHECK(!echod_exec_on_worker());
    test_exactly_once(ECHOD_EXEC_DIRECT, 0, big);
    test_exactly_once(ECHOD_EXEC_FIXED, 4, big);
    test_exactly_once(ECHOD_EXEC_FIXED, 1, big / 4);
    test_exactly_once(ECHOD_EXEC_CACHED, 0, cached_n);
    test_exactly_once(ECHOD_EXEC_WORKSTEALING, 4, big);
    test_exactly_once(ECHOD_EXEC_WORKSTEALING, 1, big / 4);
    test_exactly_once(ECHOD_EXEC_VIRTUAL, 4, big / 4);
    test_exactly_once(ECHOD_EXEC_VIRTUAL, 1, big / 8);
    test_thread_names();
    test_fixed1_fifo();
    test_sequential_flags();
    test_cached_grows_and_expires();
    test_cached_max_threads();
    test_workstealing_steals();
    for (echod_exec_mode_t m = ECHOD_EXEC_FIXED; m <= ECHOD_EXEC_VIRTUAL; m++) {
        test_gauges(m);
        test_observer(m);
    }
    for (echod_exec_mode_t m = ECHOD_EXEC_DIRECT; m <= ECHOD_EXEC_VIRTUAL; m++)
        test_shutdown(m);
    test_task_woke();
    test_virtual_parks();
    test_virtual_interrupt();
    test_virtual_destroy_wakes_sleepers();
    test_virtual_cancel_race((SANITIZED ? 500 : 2000) * check_stress());
    test_virtual_guard_page();
    test_cpus();
    test_create_errors();
    CHECK(!echod_exec_on_worker());
    printf("test_exec: %.2f s%s\n", (double)(echod_now_ns() - t0) / 1e9, SANITIZED ? " (sanitizer counts)" : "");
    return check_done();
}
