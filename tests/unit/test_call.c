/*
 * dispatch/call.c against a fake stream: the test plays the transport, submitting the steps its
 * pump would through echod_call_submit and answering the call's ops table. Counts come from
 * echod_metrics (echod_call_steps_total, the executor's dispatches), as /metrics shows them.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "config/config.h"
#include "dispatch/call.h"
#include "dispatch/dispatcher.h"
#include "metrics/exposition.h"

typedef struct {
    echod_call_t call; /* first, as in echod_stream_t */
    pthread_t home;
    atomic_uint requested;
    atomic_int sent, closed, close_code, freed;
    int closed_step_on_close; /* close submits the closed step at once, as a stream closing on an immediate flush */
    char log[32]; /* handler callbacks in order: S start, R ready, M message, H/h half-close in/out, C complete */
    atomic_int log_len;
    atomic_int ran_on_home; /* start_call ran on the submitting thread */
} fake_stream_t;

static fake_stream_t *fake_of(echod_call_t *call)
{
    return (fake_stream_t *)call;
}

static void log_step(echod_call_t *call, char c)
{
    fake_stream_t *f = fake_of(call);
    int n = atomic_fetch_add(&f->log_len, 1);
    if (n < (int)sizeof(f->log) - 1)
        f->log[n] = c;
}

/* --- the fake transport's side of the ops table --- */

static int fake_on_home(const echod_call_t *call)
{
    return pthread_equal(pthread_self(), ((const fake_stream_t *)call)->home);
}

static void fake_request(echod_call_t *call, uint32_t n)
{
    atomic_fetch_add(&fake_of(call)->requested, n);
}

static void fake_send(echod_call_t *call, echod_msg_t *msg)
{
    atomic_fetch_sub(&call->out_bytes, echod_msg_frame_len(msg));
    echod_msg_free(msg);
    atomic_fetch_add(&fake_of(call)->sent, 1);
}

static void fake_close(echod_call_t *call, int code, const char *message, const char *timing)
{
    (void)message;
    (void)timing;
    fake_stream_t *f = fake_of(call);
    atomic_store(&f->close_code, code);
    atomic_store(&f->closed, 1);
    if (f->closed_step_on_close && fake_on_home(call)) {
        /* inside the half_close step: the inline runner must queue this, not run it here */
        call->final_code = code;
        echod_call_retain(call);
        echod_call_submit(call, ECHOD_STEP_CLOSED, NULL);
        echod_call_release(call);
    }
}

static void fake_wake_ready(echod_call_t *call)
{
    (void)call;
}

static void fake_free(echod_call_t *call)
{
    atomic_store(&fake_of(call)->freed, 1);
}

static const echod_call_ops_t fake_ops = {.request = fake_request,
                                          .send = fake_send,
                                          .close = fake_close,
                                          .wake_ready = fake_wake_ready,
                                          .on_home = fake_on_home,
                                          .free = fake_free};

/* --- a unary method as a raw listener --- */

static void t_start(echod_call_t *call)
{
    log_step(call, 'S');
    atomic_store(&fake_of(call)->ran_on_home, fake_on_home(call));
    echod_call_request(call, 2);
}

static void t_message(echod_call_t *call, echod_msg_t *msg)
{
    log_step(call, 'M');
    call->h.state = msg;
}

static void t_half_close(echod_call_t *call)
{
    log_step(call, 'H');
    echod_call_send(call, call->h.state);
    call->h.state = NULL;
    echod_call_close(call, ECHOD_OK, NULL);
    log_step(call, 'h');
}

static void t_ready(echod_call_t *call)
{
    log_step(call, 'R');
}

static void t_complete(echod_call_t *call)
{
    log_step(call, 'C');
    echod_msg_free(call->h.state);
    call->h.state = NULL;
}

static echod_method_t unary = {.path = "/echod.test.T/Unary",
                               .service = "echod.test.T",
                               .name = "Unary",
                               .type = ECHOD_GRPC_UNARY,
                               .on_start = t_start,
                               .on_message = t_message,
                               .on_half_close = t_half_close,
                               .on_ready = t_ready,
                               .on_complete = t_complete};
static echod_method_t other = {.path = "/echod.test.T/Other",
                               .service = "echod.test.T",
                               .name = "Other",
                               .type = ECHOD_GRPC_UNARY,
                               .on_start = t_start,
                               .on_message = t_message,
                               .on_half_close = t_half_close,
                               .on_ready = t_ready,
                               .on_complete = t_complete};
static const echod_method_t *methods[] = {&unary, &other};
static echod_registry_t registry = {methods, 2};

/* --- the fake pump: the steps of one unary call in transport order --- */

static uint64_t steps_total(void)
{
    uint64_t n = 0;
    for (int k = 0; k != ECHOD_STEP__COUNT; k++)
        n += echod_metrics_value(&echod_metrics.steps[k]);
    return n;
}

static void wait_for(atomic_int *flag)
{
    for (long i = 0; i < 2000000 && atomic_load(flag) == 0; i++)
        sched_yield();
}

static void wait_requested(fake_stream_t *f)
{
    for (long i = 0; i < 2000000 && atomic_load(&f->requested) == 0; i++)
        sched_yield();
}

/* A new stream on this thread for path whose HEADERS passed, admitted as the transport would. */
static void fake_begin(fake_stream_t *f, const echod_dispatcher_t *d, const char *path, int closed_step_on_close)
{
    memset(f, 0, sizeof(*f));
    f->home = pthread_self();
    f->closed_step_on_close = closed_step_on_close;
    echod_call_init(&f->call, &fake_ops, d);
    f->call.path = path;
    f->call.path_len = strlen(path);
    char *work_error = NULL;
    echod_work_over_t over = {0};
    CHECK(echod_call_admit(&f->call, &over, &work_error) == ECHOD_ADMIT_ACCEPTED);
    free(work_error);
}

/* Runs one unary call; returns the steps it submitted. */
static uint64_t unary_call(const echod_dispatcher_t *d, fake_stream_t *f, const char *path)
{
    const echod_config_t *cfg = d->cfg;
    uint64_t s0 = steps_total();
    fake_begin(f, d, path, 0);

    echod_call_t *call = &f->call;
    echod_call_retain(call); /* the pump holds the call while it submits */
    if (cfg->dispatch.merge_lookup_and_start) {
        echod_call_submit(call, ECHOD_STEP_LOOKUP_AND_START, NULL);
    } else {
        echod_call_submit(call, ECHOD_STEP_METHOD_LOOKUP, NULL);
        echod_call_submit(call, ECHOD_STEP_START_CALL, NULL);
    }
    echod_call_submit(call, ECHOD_STEP_ON_READY, NULL);
    wait_requested(f);
    CHECK(atomic_load(&f->requested) == 2);
    echod_msg_t *msg = echod_msg_from("\x0a\x02hi", 4); /* the request, END_STREAM with it */
    if (cfg->dispatch.coalesce_end_stream) {
        echod_call_submit(call, ECHOD_STEP_MESSAGES_AND_HALF_CLOSE, msg);
    } else {
        echod_call_submit(call, ECHOD_STEP_MESSAGES_AVAILABLE, msg);
        echod_call_submit(call, ECHOD_STEP_HALF_CLOSED, NULL);
    }
    echod_call_release(call);
    wait_for(&f->closed);
    if (!f->closed_step_on_close) {
        /* the trailers went out and the stream closed: the closed step is due */
        f->call.final_code = atomic_load(&f->close_code);
        echod_call_retain(call);
        echod_call_submit(call, ECHOD_STEP_CLOSED, NULL);
        echod_call_release(call);
    }
    echod_call_release(call); /* the transport's reference */
    wait_for(&f->freed);
    CHECK(atomic_load(&f->freed) == 1);
    CHECK(atomic_load(&f->sent) == 1);
    CHECK(atomic_load(&f->close_code) == ECHOD_OK);
    return steps_total() - s0;
}

static void dispatcher_for(echod_config_t *cfg, echod_dispatcher_t *d, const char *const *sets)
{
    char err[512];
    echod_config_init(cfg);
    for (; *sets != NULL; sets++)
        if (echod_config_set(cfg, *sets, err, sizeof(err)) != 0)
            fprintf(stderr, "set %s: %s\n", *sets, err);
    CHECK(echod_config_finish(cfg, err, sizeof(err)) == 0);
    CHECK(echod_dispatcher_init(d, cfg, &registry, err, sizeof(err)) == 0);
}

/* direct: 6, 5 and 4 steps per unary call with the merge toggles, all inline, no dispatch. */
static void test_inline_counts(void)
{
    static const char *const variants[][4] = {
        {"executor.mode=direct", NULL},
        {"executor.mode=direct", "dispatch.merge_lookup_and_start=true", NULL},
        {"executor.mode=direct", "dispatch.merge_lookup_and_start=true", "dispatch.coalesce_end_stream=true", NULL},
    };
    for (int v = 0; v != 3; v++) {
        echod_config_t cfg;
        echod_dispatcher_t d;
        dispatcher_for(&cfg, &d, variants[v]);
        CHECK(d.mode == ECHOD_SER_INLINE);
        fake_stream_t *f = calloc(1, sizeof(*f));
        uint64_t loop0 = echod_metrics_value(&echod_metrics.step_runs_loop);
        uint64_t worker0 = echod_metrics_value(&echod_metrics.step_runs_worker);
        uint64_t disp0 = echod_metrics_value(&d.exec_metrics->dispatches);
        uint64_t steps = unary_call(&d, f, unary.path);
        CHECK(steps == (uint64_t)(6 - v));
        CHECK(echod_metrics_value(&echod_metrics.step_runs_loop) - loop0 == steps);
        CHECK(echod_metrics_value(&echod_metrics.step_runs_worker) - worker0 == 0);
        CHECK(echod_metrics_value(&d.exec_metrics->dispatches) - disp0 == 0);
        f->log[f->log_len] = '\0';
        CHECK(strcmp(f->log, "SRMHhC") == 0);
        CHECK(f->ran_on_home == 1);
        printf("inline variant %d: %llu steps, log %s\n", v, (unsigned long long)steps, f->log);
        free(f);
        echod_dispatcher_dispose(&d);
        echod_config_free(&cfg);
    }
}

/* A step submitted while an inline step runs waits for it: the closed step that a close
 * submits from inside half_close runs after half_close has returned. */
static void test_reentrancy_queue(void)
{
    echod_config_t cfg;
    echod_dispatcher_t d;
    dispatcher_for(&cfg, &d, (const char *const[]){"executor.mode=direct", NULL});
    fake_stream_t *f = calloc(1, sizeof(*f));
    uint64_t s0 = steps_total();
    fake_begin(f, &d, unary.path, 1);
    echod_call_t *call = &f->call;
    echod_call_retain(call);
    echod_call_submit(call, ECHOD_STEP_METHOD_LOOKUP, NULL);
    echod_call_submit(call, ECHOD_STEP_START_CALL, NULL);
    echod_call_submit(call, ECHOD_STEP_ON_READY, NULL);
    echod_call_submit(call, ECHOD_STEP_MESSAGES_AVAILABLE, echod_msg_from("\x0a\x02hi", 4));
    echod_call_submit(call, ECHOD_STEP_HALF_CLOSED, NULL);
    echod_call_release(call);
    echod_call_release(call);
    CHECK(atomic_load(&f->freed) == 1);
    f->log[f->log_len] = '\0';
    CHECK(strcmp(f->log, "SRMHhC") == 0); /* not SRMHCh: closed ran after half_close returned */
    CHECK(steps_total() - s0 == 6);
    free(f);
    echod_dispatcher_dispose(&d);
    echod_config_free(&cfg);
}

/* dispatch.per_method: the lookup step switches the rest of the call to the method's executor;
 * another method stays on the default one. Same six steps either way. */
static void test_per_method_switch(void)
{
    echod_config_t cfg;
    echod_dispatcher_t d;
    dispatcher_for(&cfg, &d,
                   (const char *const[]){"executor.mode=direct",
                                         "dispatch.per_method./echod.test.T/Unary={mode: fixed, threads: 1}", NULL});
    CHECK(d.mode == ECHOD_SER_SERIALIZING);
    CHECK(d.per_method_count == 1);
    if (d.per_method_count != 1)
        return;
    echod_exec_metrics_t *pm = d.per_method[0].metrics;
    fake_stream_t *f = calloc(1, sizeof(*f));
    uint64_t pm0 = echod_metrics_value(&pm->dispatches);
    uint64_t worker0 = echod_metrics_value(&echod_metrics.step_runs_worker);
    CHECK(unary_call(&d, f, unary.path) == 6);
    CHECK(f->ran_on_home == 0); /* start_call ran on the per-method worker */
    CHECK(echod_metrics_value(&pm->dispatches) - pm0 >= 1);
    CHECK(echod_metrics_value(&echod_metrics.step_runs_worker) - worker0 == 5); /* all but the lookup */
    f->log[f->log_len] = '\0';
    CHECK(strcmp(f->log, "SRMHhC") == 0);

    pm0 = echod_metrics_value(&pm->dispatches);
    CHECK(unary_call(&d, f, other.path) == 6);
    CHECK(f->ran_on_home == 1); /* direct: on the submitting thread */
    CHECK(echod_metrics_value(&pm->dispatches) - pm0 == 0);
    free(f);
    echod_dispatcher_dispose(&d);
    echod_config_free(&cfg);
}

/* An unknown path ends UNIMPLEMENTED in the lookup step; the handler never runs. */
static void test_unknown_method(void)
{
    echod_config_t cfg;
    echod_dispatcher_t d;
    dispatcher_for(&cfg, &d, (const char *const[]){"executor.mode=direct", NULL});
    fake_stream_t *f = calloc(1, sizeof(*f));
    fake_begin(f, &d, "/nope/Nope", 0);
    CHECK(f->call.method == NULL);
    echod_call_retain(&f->call);
    echod_call_submit(&f->call, ECHOD_STEP_METHOD_LOOKUP, NULL);
    echod_call_submit(&f->call, ECHOD_STEP_START_CALL, NULL);
    echod_call_release(&f->call);
    CHECK(f->closed == 1 && f->close_code == ECHOD_UNIMPLEMENTED);
    CHECK(f->log_len == 0);
    echod_call_release(&f->call);
    CHECK(f->freed == 1);
    free(f);
    echod_dispatcher_dispose(&d);
    echod_config_free(&cfg);
}

static uint64_t charges(echod_charge_kind_t kind, echod_charge_thread_t thread)
{
    return echod_metrics_value(&echod_metrics.work_model_charges[kind][thread]);
}

/*
 * The cost model (work/model.h) charges where the work happens: every step that runs on the
 * thread that runs it (a merged step once), each message in its step and as it is sent, the
 * request-headers half of the call at admission on the loop, and a hand-off for every dispatch
 * that crossed threads, on the worker that took it (the transport charges its loop tasks).
 */
static void test_model_charges(void)
{
    static const struct {
        const char *sets[5];
        int steps, crosses; /* steps per call; dispatches are hand-offs */
        echod_charge_thread_t where;
    } variants[] = {
        {{"executor.mode=direct", NULL}, 6, 0, ECHOD_CHARGE_ON_LOOP},
        {{"executor.mode=direct", "dispatch.merge_lookup_and_start=true", "dispatch.coalesce_end_stream=true", NULL},
         4,
         0,
         ECHOD_CHARGE_ON_LOOP},
        /* a SerializingExecutor around direct dispatches, but on the submitting thread: no hand-off */
        {{"executor.mode=direct", "dispatch.serialize=always", NULL}, 6, 0, ECHOD_CHARGE_ON_LOOP},
        {{"executor.mode=fixed", "executor.threads=1", NULL}, 6, 1, ECHOD_CHARGE_ON_WORKER},
        {{"executor.mode=fixed", "executor.threads=1", "dispatch.unwrap_sequential=true", NULL},
         6,
         1,
         ECHOD_CHARGE_ON_WORKER},
    };
    for (size_t v = 0; v != sizeof(variants) / sizeof(variants[0]); v++) {
        const char *sets[8];
        size_t n = 0;
        for (; variants[v].sets[n] != NULL; n++)
            sets[n] = variants[v].sets[n];
        sets[n++] = "work.model={enabled: true, call_cpu_us: 4, step_cpu_us: 1, handoff_cpu_us: 1, message_cpu_us: 1}";
        sets[n] = NULL;
        echod_config_t cfg;
        echod_dispatcher_t d;
        dispatcher_for(&cfg, &d, sets);
        uint64_t step0[2], msg0[2], hand0[2], call0 = charges(ECHOD_CHARGE_CALL, ECHOD_CHARGE_ON_LOOP);
        for (int t = 0; t != 2; t++) {
            step0[t] = charges(ECHOD_CHARGE_STEP, (echod_charge_thread_t)t);
            msg0[t] = charges(ECHOD_CHARGE_MESSAGE, (echod_charge_thread_t)t);
            hand0[t] = charges(ECHOD_CHARGE_HANDOFF, (echod_charge_thread_t)t);
        }
        uint64_t disp0 = echod_metrics_value(&d.exec_metrics->dispatches);
        uint64_t ns0 = echod_metrics_value(&echod_metrics.work_model_cpu_ns[ECHOD_CHARGE_CALL][ECHOD_CHARGE_ON_LOOP]);
        fake_stream_t *f = calloc(1, sizeof(*f));
        enum { CALLS = 20 };
        for (int i = 0; i != CALLS; i++)
            CHECK(unary_call(&d, f, unary.path) == (uint64_t)variants[v].steps);
        echod_charge_thread_t w = variants[v].where,
                              other = w == ECHOD_CHARGE_ON_LOOP ? ECHOD_CHARGE_ON_WORKER : ECHOD_CHARGE_ON_LOOP;
        uint64_t dispatches = echod_metrics_value(&d.exec_metrics->dispatches) - disp0;
        CHECK(charges(ECHOD_CHARGE_STEP, w) - step0[w] == (uint64_t)(CALLS * variants[v].steps));
        CHECK(charges(ECHOD_CHARGE_STEP, other) - step0[other] == 0);
        CHECK(charges(ECHOD_CHARGE_MESSAGE, w) - msg0[w] == 2 * CALLS);
        CHECK(charges(ECHOD_CHARGE_MESSAGE, other) - msg0[other] == 0);
        CHECK(charges(ECHOD_CHARGE_HANDOFF, ECHOD_CHARGE_ON_WORKER) - hand0[ECHOD_CHARGE_ON_WORKER] ==
              (variants[v].crosses ? dispatches : 0));
        CHECK(charges(ECHOD_CHARGE_HANDOFF, ECHOD_CHARGE_ON_LOOP) - hand0[ECHOD_CHARGE_ON_LOOP] == 0);
        if (variants[v].crosses)
            CHECK(dispatches >= CALLS);
        /* the headers' half at admission, counted as the call's one charge; the fake sends no trailers */
        CHECK(charges(ECHOD_CHARGE_CALL, ECHOD_CHARGE_ON_LOOP) - call0 == CALLS);
        CHECK(echod_metrics_value(&echod_metrics.work_model_cpu_ns[ECHOD_CHARGE_CALL][ECHOD_CHARGE_ON_LOOP]) - ns0 ==
              CALLS * 2000);
        printf("model variant %zu: %d steps, %llu dispatches (%s)\n", v, variants[v].steps,
               (unsigned long long)dispatches, w == ECHOD_CHARGE_ON_LOOP ? "loop" : "worker");
        free(f);
        echod_dispatcher_dispose(&d);
        echod_config_free(&cfg);
    }

    /* off (the default), and a health-like on_loop method, charge nothing */
    echod_config_t cfg;
    echod_dispatcher_t d;
    dispatcher_for(&cfg, &d, (const char *const[]){"executor.mode=direct", NULL});
    uint64_t s0 = charges(ECHOD_CHARGE_STEP, ECHOD_CHARGE_ON_LOOP);
    fake_stream_t *f = calloc(1, sizeof(*f));
    CHECK(unary_call(&d, f, unary.path) == 6);
    CHECK(!f->call.spec.model.on && charges(ECHOD_CHARGE_STEP, ECHOD_CHARGE_ON_LOOP) == s0);
    free(f);
    echod_dispatcher_dispose(&d);
    echod_config_free(&cfg);
}

/*
 * limits.max_calls_in_flight with threads admitting at once, as the I/O loops do: every admission
 * reserves (util/limit.h), so the gauge is never read above the limit, and its peak says so. With
 * a check, then an add, two threads could both pass the check at 0 and hold two calls under a
 * limit of one.
 */
typedef struct {
    const echod_dispatcher_t *d;
    pthread_barrier_t *start;
    long rounds, admitted, shed;
    int64_t seen; /* the highest calls_admitted this thread read while holding a call */
} admit_racer_t;

static void *admit_racer(void *arg)
{
    admit_racer_t *r = arg;
    fake_stream_t *f = malloc(sizeof(*f));
    pthread_barrier_wait(r->start);
    for (long i = 0; i != r->rounds; i++) {
        memset(f, 0, sizeof(*f));
        f->home = pthread_self();
        echod_call_init(&f->call, &fake_ops, r->d);
        f->call.path = unary.path;
        f->call.path_len = strlen(unary.path);
        char *work_error = NULL;
        echod_work_over_t over = {0};
        if (echod_call_admit(&f->call, &over, &work_error) == ECHOD_ADMIT_ACCEPTED) {
            r->admitted++;
            int64_t now = atomic_load_explicit(&echod_metrics.calls_admitted, memory_order_relaxed);
            r->seen = now > r->seen ? now : r->seen;
            sched_yield(); /* hold it a moment: the other threads find the limit reached */
        } else {
            r->shed++;
        }
        free(work_error);
        echod_call_release(&f->call); /* the last reference: gives the admission back */
    }
    free(f);
    return NULL;
}

static void test_admit_limit_race(void)
{
    enum { THREADS = 4, LIMIT = 1 };
    echod_config_t cfg;
    echod_dispatcher_t d;
    dispatcher_for(&cfg, &d, (const char *const[]){"executor.mode=direct", "limits.max_calls_in_flight=1", NULL});
    atomic_store(&echod_metrics.calls_admitted_peak, 0);
    uint64_t shed0 = echod_metrics_value(&echod_metrics.calls_shed);
    admit_racer_t r[THREADS];
    pthread_t t[THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i != THREADS; i++) {
        r[i] = (admit_racer_t){.d = &d, .start = &start, .rounds = 50000 * check_stress()};
        CHECK(pthread_create(&t[i], NULL, admit_racer, &r[i]) == 0);
    }
    long admitted = 0, shed = 0;
    int64_t seen = 0;
    for (int i = 0; i != THREADS; i++) {
        pthread_join(t[i], NULL);
        admitted += r[i].admitted;
        shed += r[i].shed;
        seen = r[i].seen > seen ? r[i].seen : seen;
    }
    pthread_barrier_destroy(&start);
    int64_t peak = atomic_load(&echod_metrics.calls_admitted_peak);
    printf("admit race: %ld admitted, %ld shed, highest gauge read %lld, peak %lld (limit %d)\n", admitted, shed,
           (long long)seen, (long long)peak, LIMIT);
    CHECK(seen == LIMIT);
    CHECK(peak == LIMIT);
    CHECK(shed > 0); /* the threads did contend */
    CHECK(echod_metrics_value(&echod_metrics.calls_shed) - shed0 == (uint64_t)shed);
    CHECK(atomic_load(&echod_metrics.calls_admitted) == 0);
    echod_dispatcher_dispose(&d);
    echod_config_free(&cfg);
}

int main(void)
{
    echod_config_t cfg;
    echod_config_init(&cfg);
    echod_metrics_init(&cfg);
    unary.metrics_index = echod_metrics_add_method(unary.service, unary.name, unary.type);
    other.metrics_index = echod_metrics_add_method(other.service, other.name, other.type);
    test_inline_counts();
    test_reentrancy_queue();
    test_per_method_switch();
    test_unknown_method();
    test_model_charges();
    test_admit_limit_race();
    echod_config_free(&cfg);
    return check_done();
}
