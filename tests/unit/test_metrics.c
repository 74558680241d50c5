/*
 * Metrics rendering (exact lines, histogram shape, build_info labels), the label values (one per
 * enum value), the family tables (names, every label value named) and the admin listener
 * (routes, status codes, draining, bind errors, stop with connections still open).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "admin/admin.h"
#include "check.h"
#include "dispatch/exec.h"
#include "metrics/exposition.h"
#include "metrics/metrics_internal.h"

/* True when text holds line as a whole line. */
static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p += 1) {
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return 1;
    }
    return 0;
}

/* The value of the sample whose line starts with prefix (name and labels), or -1. */
static double sample(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; (p = strstr(p, prefix)) != NULL; p += 1) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return -1;
}

/*
 * Structural checks on the whole exposition: every line ends in '\n', no blank lines, every
 * sample belongs to the family announced by the closest preceding # TYPE, and each family is
 * announced once with HELP right before TYPE.
 */
static void check_exposition(const char *text, size_t len)
{
    CHECK(len > 0 && text[len - 1] == '\n');
    CHECK(strlen(text) == len);
    char family[128] = "", type[32] = "", seen[8192] = " ";
    const char *prev = NULL;
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (end == NULL)
            break;
        CHECK(end != line);
        if (strncmp(line, "# TYPE ", 7) == 0) {
            CHECK(sscanf(line + 7, "%127s %31s", family, type) == 2);
            CHECK(prev != NULL && strncmp(prev, "# HELP ", 7) == 0 && strncmp(prev + 7, family, strlen(family)) == 0);
            char key[140];
            snprintf(key, sizeof(key), " %s ", family);
            CHECK(strstr(seen, key) == NULL);
            if (strlen(seen) + strlen(key) < sizeof(seen))
                strcat(seen, key + 1);
        } else if (line[0] != '#') {
            size_t fl = strlen(family);
            int ok = strncmp(line, family, fl) == 0;
            if (ok && strcmp(type, "histogram") == 0) {
                const char *rest = line + fl;
                ok = strncmp(rest, "_bucket{", 8) == 0 || strncmp(rest, "_sum", 4) == 0 ||
                     strncmp(rest, "_count", 6) == 0;
            } else if (ok) {
                ok = line[fl] == '{' || line[fl] == ' ';
            }
            if (!ok)
                fprintf(stderr, "sample outside its family %s: %.*s\n", family, (int)(end - line), line);
            CHECK(ok);
        }
        prev = line;
        line = end + 1;
    }
}

/* Buckets of one series are cumulative (non-decreasing) and +Inf equals _count. */
static void check_histogram(const char *text, const char *name, const char *labels)
{
    char prefix[256], needle[256];
    snprintf(prefix, sizeof(prefix), "%s_bucket{%s%s", name, labels, labels[0] ? "," : "");
    double prev = -1, inf = -1;
    int buckets = 0;
    for (const char *p = text; (p = strstr(p, prefix)) != NULL; p += 1) {
        if (p != text && p[-1] != '\n')
            continue;
        const char *sp = strchr(p, ' ');
        double v = strtod(sp + 1, NULL);
        CHECK(v >= prev);
        prev = v;
        ++buckets;
        if (strncmp(p + strlen(prefix), "le=\"+Inf\"}", 10) == 0)
            inf = v;
    }
    CHECK(buckets >= 2);
    snprintf(needle, sizeof(needle), "%s_count%s%s%s", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "");
    CHECK(inf >= 0 && sample(text, needle) == inf);
}

/*
 * The count of the bucket whose bound reads back as le, or -1: by value, not text, since the
 * shortest text of 10 is "1e+01" as far as %g goes.
 */
static double bucket(const char *text, const char *name, const char *labels, double le)
{
    char prefix[256];
    int n = snprintf(prefix, sizeof(prefix), "%s_bucket{%s%sle=\"", name, labels, labels[0] ? "," : "");
    for (const char *p = text; (p = strstr(p, prefix)) != NULL; p += 1) {
        if ((p == text || p[-1] == '\n') && strtod(p + n, NULL) == le)
            return strtod(strchr(p, ' ') + 1, NULL);
    }
    return -1;
}

/* A metric or label name: [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no ':'). */
static int valid_name(const char *s, int colon)
{
    if (s == NULL || *s == '\0' || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              (colon && *s == ':')))
            return 0;
    return 1;
}

/* names[first..count) each named: a value added to an enum without a name fails here (the arrays
 * are indexed by their enum, so a name left out in the middle is a NULL, not a shorter array). */
static void check_names(const char *what, const char *const *names, size_t first, size_t count)
{
    CHECK(names != NULL && first < count);
    for (size_t i = first; names != NULL && i < count; i++) {
        int ok = names[i] != NULL && names[i][0] != '\0' && strpbrk(names[i], "\"\\\n") == NULL;
        if (!ok)
            fprintf(stderr, "%s: value %zu has no name\n", what, i);
        CHECK(ok);
    }
}

#define CHECK_NAMES(names, count) check_names(#names, names, 0, count)

/* Every enum a label is made of has a name for each of its values (the tables' and those the
 * `series` functions and the registrations use). */
static void test_label_names(void)
{
    CHECK_NAMES(echod_step_names, ECHOD_STEP__COUNT);
    CHECK_NAMES(echod_loop_task_names, ECHOD_LOOP_TASK__COUNT);
    CHECK_NAMES(echod_loop_wake_names, ECHOD_LOOP_WAKE__COUNT);
    CHECK_NAMES(echod_handoff_receiver_names, ECHOD_HANDOFF_RECEIVER__COUNT);
    CHECK_NAMES(echod_handoff_found_names, ECHOD_HANDOFF_FOUND__COUNT);
    CHECK_NAMES(echod_flush_trigger_names, ECHOD_FLUSH_TRIGGER__COUNT);
    CHECK_NAMES(echod_close_reason_names, ECHOD_CLOSE__COUNT);
    CHECK_NAMES(echod_closed_frame_names, ECHOD_CLOSED_FRAME__COUNT);
    CHECK_NAMES(echod_rest_status_names, ECHOD_REST_STATUS_MAX);
    CHECK_NAMES(echod_charge_names, ECHOD_CHARGE__COUNT);
    CHECK_NAMES(echod_charge_thread_names, ECHOD_CHARGE_THREAD__COUNT);
    CHECK_NAMES(echod_drawn_names, ECHOD_DRAWN__COUNT);
    CHECK_NAMES(echod_encoding_names, ECHOD_ENCODING__COUNT);
    CHECK_NAMES(echod_inflate_status_names, ECHOD_INFLATE__COUNT);
    CHECK_NAMES(echod_status_names, ECHOD_STATUS__COUNT);
    CHECK_NAMES(echod_cgroup_version_names, ECHOD_CGROUP__COUNT);
    CHECK_NAMES(echod_direction_names, ECHOD_DIRECTION__COUNT);
    CHECK_NAMES(echod_grpc_type_names, ECHOD_GRPC_TYPE__COUNT);
}

/* Every family of every table: a valid, unique name, a help text, and a name for every value of
 * every label it has. */
static void test_tables(void)
{
    const char *seen[256];
    size_t nseen = 0, families = 0;
    for (size_t t = 0; t < echod_metrics__ntables; t++) {
        for (size_t i = 0; i < echod_metrics__tables[t]->count; i++) {
            const echod_metrics__family_t *f = &echod_metrics__tables[t]->families[i];
            families++;
            CHECK(valid_name(f->name, 1));
            CHECK(f->help != NULL && f->help[0] != '\0' && strchr(f->help, '\n') == NULL);
            for (size_t k = 0; k < nseen; k++)
                CHECK(strcmp(seen[k], f->name) != 0);
            if (nseen < sizeof(seen) / sizeof(seen[0]))
                seen[nseen++] = f->name;
            for (int l = 0; l < 2; l++) {
                const echod_metrics__label_t *label = &f->label[l];
                if (label->name == NULL)
                    continue;
                CHECK(valid_name(label->name, 0));
                check_names(f->name, label->values, label->first, label->count);
            }
            CHECK(f->label[1].name == NULL || f->label[0].name != NULL);
            CHECK(f->series == NULL || f->label[0].name == NULL);
        }
    }
    CHECK(families >= 60);
}

static echod_config_t test_config;

static void test_render(echod_exec_t *pool)
{
    memset(&test_config, 0, sizeof(test_config));
    test_config.arm = "a\"rm\\x\ny"; /* every character the label format must escape */
    test_config.executor.mode = ECHOD_EXEC_FIXED;
    test_config.dispatch.serialize = ECHOD_SERIALIZE_ALWAYS;
    test_config.dispatch.merge_lookup_and_start = true;
    test_config.dispatch.coalesce_end_stream = false;
    test_config.transport.flush = ECHOD_FLUSH_READ_COMPLETE;
    strcpy(test_config.sha256, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");

    echod_metrics_init(&test_config);
    echod_metrics_set_version("9.8.7");

    ECHOD_ADD(echod_metrics.steps[ECHOD_STEP_START_CALL], 3);
    ECHOD_COUNT(echod_metrics.steps[ECHOD_STEP_METHOD_LOOKUP]);
    ECHOD_ADD(echod_metrics.inline_runs, 7);
    ECHOD_COUNT(echod_metrics.loop_tasks[ECHOD_LOOP_TASK_WRITE]);
    ECHOD_ADD(echod_metrics.flushes[ECHOD_FLUSH_TRIGGER_LOOP_TASK], 2);
    ECHOD_ADD(echod_metrics.calls_in_flight, 2);
    ECHOD_ADD(echod_metrics.calls_in_flight, -3);
    ECHOD_COUNT(echod_metrics.connections);
    ECHOD_ADD(echod_metrics.connections_total, 4);
    ECHOD_COUNT(echod_metrics.goaways_sent);

    echod_histogram_observe(&echod_metrics.flush_frames, 1);
    echod_histogram_observe(&echod_metrics.flush_frames, 3);
    echod_histogram_observe(&echod_metrics.flush_frames, 3);
    echod_histogram_observe(&echod_metrics.flush_frames, 300);
    echod_histogram_observe(&echod_metrics.flush_bytes, 64);
    echod_histogram_observe(&echod_metrics.flush_bytes, 65);
    echod_histogram_observe(&echod_metrics.flush_bytes, 2000000);

    echod_exec_metrics_t *def = echod_metrics_add_exec("default", NULL);
    echod_exec_metrics_t *pm = echod_metrics_add_exec("pool", pool);
    CHECK(def == &echod_metrics.execs[0] && pm == &echod_metrics.execs[1]);
    ECHOD_ADD(pm->dispatches, 11);
    echod_histogram_observe(&pm->queue_wait, 3);
    echod_histogram_observe(&pm->queue_wait, 700);
    echod_metrics_observe_queue_wait(pm, 5000000999);   /* ns: 5000000 us, on the 5 s bound */
    echod_histogram_observe(&pm->queue_wait, 61000000); /* past the last bound: +Inf only */

    size_t unary = echod_metrics_add_method("grpc.examples.echo.Echo", "UnaryEcho", ECHOD_GRPC_UNARY);
    size_t bidi =
        echod_metrics_add_method("grpc.examples.echo.Echo", "BidirectionalStreamingEcho", ECHOD_GRPC_BIDI_STREAM);
    CHECK(unary == 0 && bidi == 1);
    echod_method_metrics_t *m = &echod_metrics.methods[unary];
    ECHOD_ADD(m->started, 5);
    ECHOD_ADD(m->handled[0], 4);
    ECHOD_COUNT(m->handled[12]);
    ECHOD_ADD(m->msg_received, 5);
    ECHOD_ADD(m->msg_sent, 4);
    echod_histogram_observe(&m->handling, 20);

    size_t len;
    char *text = echod_metrics_render(&len);
    CHECK(text != NULL);
    if (text == NULL)
        return;
    check_exposition(text, len);

    CHECK(has_line(text, "# TYPE echod_call_steps_total counter"));
    CHECK(has_line(text, "echod_call_steps_total{step=\"start_call\"} 3"));
    CHECK(has_line(text, "echod_call_steps_total{step=\"method_lookup\"} 1"));
    for (size_t i = 0; i < ECHOD_STEP__COUNT; ++i) {
        char prefix[128];
        snprintf(prefix, sizeof(prefix), "echod_call_steps_total{step=\"%s\"}", echod_step_names[i]);
        CHECK(sample(text, prefix) >= 0);
    }
    CHECK(has_line(text, "echod_call_steps_total{step=\"messages_and_half_close\"} 0"));
    CHECK(has_line(text, "echod_inline_runs_total 7"));
    CHECK(has_line(text, "echod_loop_tasks_total{kind=\"request\"} 0"));
    CHECK(has_line(text, "echod_loop_tasks_total{kind=\"write\"} 1"));
    CHECK(has_line(text, "echod_loop_tasks_total{kind=\"close\"} 0"));
    CHECK(has_line(text, "echod_flushes_total{trigger=\"loop_tail\"} 0"));
    CHECK(has_line(text, "echod_flushes_total{trigger=\"read_complete\"} 0"));
    CHECK(has_line(text, "echod_flushes_total{trigger=\"immediate\"} 0"));
    CHECK(has_line(text, "echod_flushes_total{trigger=\"loop_task\"} 2"));

    CHECK(has_line(text, "# TYPE echod_flush_frames histogram"));
    CHECK(has_line(text, "echod_flush_frames_bucket{le=\"1\"} 1"));
    CHECK(has_line(text, "echod_flush_frames_bucket{le=\"2\"} 1"));
    CHECK(has_line(text, "echod_flush_frames_bucket{le=\"4\"} 3"));
    CHECK(has_line(text, "echod_flush_frames_bucket{le=\"256\"} 3"));
    CHECK(has_line(text, "echod_flush_frames_bucket{le=\"+Inf\"} 4"));
    CHECK(has_line(text, "echod_flush_frames_sum 307"));
    CHECK(has_line(text, "echod_flush_frames_count 4"));
    check_histogram(text, "echod_flush_frames", "");
    CHECK(has_line(text, "echod_flush_bytes_bucket{le=\"64\"} 1"));
    CHECK(has_line(text, "echod_flush_bytes_bucket{le=\"256\"} 2"));
    CHECK(has_line(text, "echod_flush_bytes_bucket{le=\"1048576\"} 2"));
    CHECK(has_line(text, "echod_flush_bytes_bucket{le=\"+Inf\"} 3"));
    check_histogram(text, "echod_flush_bytes", "");

    CHECK(has_line(text, "echod_executor_dispatches_total{executor=\"default\"} 0"));
    CHECK(has_line(text, "echod_executor_dispatches_total{executor=\"pool\"} 11"));
    /* Present, with whatever the executor says: its workers may still be starting. */
    CHECK(sample(text, "echod_executor_threads{executor=\"pool\"}") >= 0);
    CHECK(sample(text, "echod_executor_queue_depth{executor=\"pool\"}") >= 0);
    CHECK(sample(text, "echod_executor_busy_threads{executor=\"pool\"}") >= 0);
    /* No executor object behind "default": its gauges are skipped, not invented. */
    CHECK(strstr(text, "echod_executor_threads{executor=\"default\"}") == NULL);
    CHECK(strstr(text, "echod_executor_queue_depth{executor=\"default\"}") == NULL);
    /* Queue wait is observed in microseconds and rendered in seconds. */
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_bucket{executor=\"pool\",le=\"1e-06\"} 0"));
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_bucket{executor=\"pool\",le=\"5e-06\"} 1"));
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_bucket{executor=\"pool\",le=\"0.0005\"} 1"));
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_bucket{executor=\"pool\",le=\"0.001\"} 2"));
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_bucket{executor=\"pool\",le=\"1\"} 2"));
    /* Past a second, up to a minute: a saturated pool's waits have a bucket of their own. */
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_bucket{executor=\"pool\",le=\"2.5\"} 2"));
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_bucket{executor=\"pool\",le=\"5\"} 3"));
    CHECK(bucket(text, "echod_executor_queue_wait_seconds", "executor=\"pool\"", 10) == 3);
    CHECK(bucket(text, "echod_executor_queue_wait_seconds", "executor=\"pool\"", 30) == 3);
    CHECK(bucket(text, "echod_executor_queue_wait_seconds", "executor=\"pool\"", 60) == 3);
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_bucket{executor=\"pool\",le=\"+Inf\"} 4"));
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_sum{executor=\"pool\"} 66.000703"));
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_count{executor=\"pool\"} 4"));
    CHECK(has_line(text, "echod_executor_queue_wait_seconds_count{executor=\"default\"} 0"));
    check_histogram(text, "echod_executor_queue_wait_seconds", "executor=\"pool\"");
    check_histogram(text, "echod_executor_queue_wait_seconds", "executor=\"default\"");

    CHECK(has_line(text, "echod_calls_in_flight -1"));
    CHECK(has_line(text, "# TYPE echod_connections gauge"));
    CHECK(has_line(text, "echod_connections 1"));
    CHECK(has_line(text, "echod_connections_total 4"));
    CHECK(has_line(text, "echod_goaways_sent_total 1"));

    const char *ul = "grpc_type=\"unary\",grpc_service=\"grpc.examples.echo.Echo\",grpc_method=\"UnaryEcho\"";
    const char *bl =
        "grpc_type=\"bidi_stream\",grpc_service=\"grpc.examples.echo.Echo\",grpc_method=\"BidirectionalStreamingEcho\"";
    char line[512];
    snprintf(line, sizeof(line), "grpc_server_started_total{%s} 5", ul);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "grpc_server_handled_total{%s,grpc_code=\"OK\"} 4", ul);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "grpc_server_handled_total{%s,grpc_code=\"UNIMPLEMENTED\"} 1", ul);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "grpc_server_handled_total{%s,grpc_code=\"CANCELLED\"}", ul);
    CHECK(strstr(text, line) == NULL);
    snprintf(line, sizeof(line), "grpc_server_handled_total{%s,grpc_code=\"OK\"} 0", bl);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "grpc_server_msg_received_total{%s} 5", ul);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "grpc_server_msg_sent_total{%s} 4", ul);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "grpc_server_msg_sent_total{%s} 0", bl);
    CHECK(has_line(text, line));
    snprintf(line, sizeof(line), "grpc_server_handling_seconds_bucket{%s,le=\"2e-05\"} 1", ul);
    CHECK(has_line(text, line));
    check_histogram(text, "grpc_server_handling_seconds", ul);

    CHECK(sample(text, "process_cpu_seconds_total") >= 0);
    CHECK(sample(text, "process_resident_memory_bytes") > 0);
    CHECK(sample(text, "process_open_fds") >= 3);
    CHECK(sample(text, "echod_threads") >= 1);
    double start = sample(text, "process_start_time_seconds");
    CHECK(start > 1.5e9 && start <= (double)time(NULL) + 1);

    /* the fiber switch is the build's: x86_64 or aarch64 (fiber.c's assembly), or ucontext */
    char info[512];
    snprintf(info, sizeof(info),
             "echod_build_info{version=\"9.8.7\",fiber_switch=\"%s\",arm=\"a\\\"rm\\\\x\\ny\",executor=\"fixed\","
             "serialize=\"always\",unwrap_sequential=\"false\",merge_lookup_and_start=\"true\",coalesce_end_"
             "stream=\"false\","
             "flush=\"read_complete\",read_batch=\"netty\",sched_policy=\"other\",work_model=\"off\","
             "config_sha256=\"0123456789abcdef0123456789abcdef"
             "0123456789abcdef0123456789abcdef\"} 1",
             echod_exec_fiber_switch());
    CHECK(has_line(text, info));
    free(text);
}

/* ---- a tiny HTTP/1.1 client ------------------------------------------------------------------ */

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends one request with "Connection: close" and reads the reply to EOF. Returns malloc'd text. */
static char *http(int port, const char *method, const char *path)
{
    int fd = connect_to(port);
    if (fd == -1)
        return NULL;
    char req[256];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", method, path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1024 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    close(fd);
    return buf;
}

static const char *body_of(const char *resp)
{
    const char *p = strstr(resp, "\r\n\r\n");
    return p != NULL ? p + 4 : "";
}

static int status_of(const char *resp)
{
    int status = 0;
    return resp != NULL && sscanf(resp, "HTTP/1.%*d %d", &status) == 1 ? status : -1;
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static atomic_int hammer_stop;

/* Updates counters and histograms the way I/O and executor threads do, while scrapes run. */
static void *hammer(void *arg)
{
    (void)arg;
    uint64_t i = 0;
    while (!atomic_load(&hammer_stop)) {
        ECHOD_COUNT(echod_metrics.steps[ECHOD_STEP_CLOSED]);
        ECHOD_COUNT(echod_metrics.flushes[ECHOD_FLUSH_TRIGGER_LOOP_TAIL]);
        echod_histogram_observe(&echod_metrics.flush_frames, i % 300);
        echod_histogram_observe(&echod_metrics.execs[1].queue_wait, i % 2000000);
        ECHOD_COUNT(echod_metrics.methods[0].handled[i % ECHOD_GRPC_CODES]);
        ++i;
    }
    return NULL;
}

/* Scrapes while another thread writes: every scrape is well-formed and histograms stay coherent. */
/* Shards: counts from many threads add up exactly in a render, while the threads run and after
 * they exit; more threads than shards fall back to the shared atomics; exited threads' shards are
 * reused, so the count of shards follows the most threads alive at once, not every thread ever. */
#define SHARD_THREADS (ECHOD_METRICS_MAX_SHARDS + 6)
#define SHARD_ADDS    2000

static pthread_barrier_t shard_barrier;

static void *shard_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < SHARD_ADDS; i++) {
        ECHOD_COUNT(echod_metrics.inline_runs);
        ECHOD_ADD(echod_metrics.calls_in_flight, -1);
        echod_histogram_observe(&echod_metrics.flush_frames, 3);
    }
    pthread_barrier_wait(&shard_barrier); /* every thread alive at once: some have no shard */
    pthread_barrier_wait(&shard_barrier); /* the main thread has rendered */
    return NULL;
}

static void shard_round(int round)
{
    pthread_t tids[SHARD_THREADS];
    pthread_barrier_init(&shard_barrier, NULL, SHARD_THREADS + 1);
    for (int i = 0; i < SHARD_THREADS; i++)
        CHECK(pthread_create(&tids[i], NULL, shard_worker, NULL) == 0);
    pthread_barrier_wait(&shard_barrier);
    char line[128];
    size_t len;
    char *text = echod_metrics_render(&len);
    uint64_t total = (uint64_t)round * SHARD_THREADS * SHARD_ADDS;
    snprintf(line, sizeof(line), "echod_inline_runs_total %" PRIu64, total);
    CHECK(text != NULL && has_line(text, line));
    snprintf(line, sizeof(line), "echod_calls_in_flight -%" PRIu64, total);
    CHECK(text != NULL && has_line(text, line));
    snprintf(line, sizeof(line), "echod_flush_frames_bucket{le=\"4\"} %" PRIu64, total);
    CHECK(text != NULL && has_line(text, line));
    snprintf(line, sizeof(line), "echod_flush_frames_sum %" PRIu64, 3 * total);
    CHECK(text != NULL && has_line(text, line));
    free(text);
    CHECK(echod_metrics_shard_count() == ECHOD_METRICS_MAX_SHARDS);
    pthread_barrier_wait(&shard_barrier);
    for (int i = 0; i < SHARD_THREADS; i++)
        pthread_join(tids[i], NULL);
    pthread_barrier_destroy(&shard_barrier);
}

static void test_shards(void)
{
    echod_metrics_init(&test_config);
    shard_round(1);
    shard_round(2); /* the exited threads' shards, counts kept, serve the new ones */
    CHECK(echod_metrics_shard_count() == ECHOD_METRICS_MAX_SHARDS);
}

static void test_concurrent_scrapes(int port)
{
    pthread_t tid;
    atomic_store(&hammer_stop, 0);
    CHECK(pthread_create(&tid, NULL, hammer, NULL) == 0);
    double prev_closed = -1;
    for (int i = 0; i < 20; ++i) {
        char *r = http(port, "GET", "/metrics");
        CHECK(status_of(r) == 200);
        if (r == NULL)
            continue;
        const char *body = body_of(r);
        check_exposition(body, strlen(body));
        check_histogram(body, "echod_flush_frames", "");
        check_histogram(body, "echod_executor_queue_wait_seconds", "executor=\"pool\"");
        double closed = sample(body, "echod_call_steps_total{step=\"closed\"}");
        CHECK(closed >= prev_closed);
        prev_closed = closed;
        free(r);
    }
    atomic_store(&hammer_stop, 1);
    pthread_join(tid, NULL);
}

static void test_admin(void)
{
    char err[256] = "";
    echod_admin_t *admin = echod_admin_start("127.0.0.1:0", err, sizeof(err));
    CHECK(admin != NULL);
    if (admin == NULL) {
        fprintf(stderr, "admin start: %s\n", err);
        return;
    }
    int port = echod_admin_port(admin);
    CHECK(port > 0 && port < 65536);

    char *r = http(port, "GET", "/metrics");
    CHECK(status_of(r) == 200);
    CHECK(r != NULL && strstr(r, "\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8\r\n") != NULL);
    CHECK(r != NULL && has_line(body_of(r), "echod_call_steps_total{step=\"start_call\"} 3"));
    CHECK(r != NULL && strncmp(body_of(r), "# HELP ", 7) == 0);
    free(r);

    r = http(port, "GET", "/metrics?name[]=x");
    CHECK(status_of(r) == 200);
    free(r);

    r = http(port, "GET", "/healthz");
    CHECK(status_of(r) == 200);
    CHECK(r != NULL && strcmp(body_of(r), "ok\n") == 0);
    free(r);

    /* not ready until main says every thread runs */
    r = http(port, "GET", "/readyz");
    CHECK(status_of(r) == 503);
    CHECK(r != NULL && strcmp(body_of(r), "starting\n") == 0);
    free(r);
    echod_admin_set_serving(admin);
    r = http(port, "GET", "/readyz");
    CHECK(status_of(r) == 200);
    CHECK(r != NULL && strcmp(body_of(r), "ready\n") == 0);
    free(r);

    r = http(port, "HEAD", "/healthz");
    CHECK(status_of(r) == 200);
    CHECK(r != NULL && strcmp(body_of(r), "") == 0);
    free(r);

    r = http(port, "GET", "/nope");
    CHECK(status_of(r) == 404);
    free(r);
    r = http(port, "GET", "/metrics/extra");
    CHECK(status_of(r) == 404);
    free(r);

    r = http(port, "POST", "/metrics");
    CHECK(status_of(r) == 405);
    CHECK(r != NULL && strstr(r, "\r\nallow: GET, HEAD\r\n") != NULL);
    free(r);

    /* The port is taken: a second listener must fail and say where and why. */
    char addr[64], want[128];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    snprintf(want, sizeof(want), "admin listener %s: Address already in use", addr);
    CHECK(echod_admin_start(addr, err, sizeof(err)) == NULL);
    CHECK(strcmp(err, want) == 0);
    CHECK(echod_admin_start("no-port-here", err, sizeof(err)) == NULL);
    CHECK(strstr(err, "no-port-here") != NULL);

    test_concurrent_scrapes(port);

    echod_admin_set_draining(admin);
    r = http(port, "GET", "/readyz");
    CHECK(status_of(r) == 503);
    CHECK(r != NULL && strcmp(body_of(r), "draining\n") == 0);
    free(r);
    echod_admin_set_serving(admin); /* never back from draining */
    r = http(port, "GET", "/readyz");
    CHECK(status_of(r) == 503);
    free(r);
    r = http(port, "GET", "/healthz");
    CHECK(status_of(r) == 200);
    free(r);

    /*
     * Stop with a keep-alive connection that already had a response and one that never sent a
     * byte: both must be closed by stop, promptly, not left to h2o's 10 s request timeout.
     */
    int keep = connect_to(port), idle = connect_to(port);
    CHECK(keep != -1 && idle != -1);
    const char *req = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
    CHECK(write(keep, req, strlen(req)) == (ssize_t)strlen(req));
    char buf[1024];
    size_t got = 0;
    while (got < sizeof(buf) - 1) {
        ssize_t n = read(keep, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        if (got >= 3 && strcmp(buf + got - 3, "ok\n") == 0)
            break;
    }
    buf[got] = '\0';
    CHECK(strncmp(buf, "HTTP/1.1 200", 12) == 0);

    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    echod_admin_stop(admin);
    CHECK(ms_since(&t0) < 1500); /* well under the 2 s drain limit admin.c gives up at */
    CHECK(read(keep, buf, sizeof(buf)) <= 0);
    CHECK(read(idle, buf, sizeof(buf)) <= 0);
    close(keep);
    close(idle);

    /* The port is free again, and a second start/stop cycle is clean. */
    admin = echod_admin_start(addr, err, sizeof(err));
    CHECK(admin != NULL);
    if (admin != NULL) {
        r = http(port, "GET", "/healthz");
        CHECK(status_of(r) == 200);
        free(r);
        echod_admin_stop(admin);
    }
    echod_admin_stop(NULL);
}

int main(void)
{
    echod_exec_config_t ecfg = {.mode = ECHOD_EXEC_FIXED, .threads = 2};
    char err[256];
    echod_exec_t *pool = echod_exec_create(&ecfg, "mtest", err, sizeof(err));
    CHECK(pool != NULL);
    if (pool == NULL)
        fprintf(stderr, "exec create: %s\n", err);

    test_label_names();
    test_tables();
    test_render(pool);
    test_admin();
    test_shards(); /* last: it starts the metrics over */

    if (pool != NULL)
        echod_exec_destroy(pool);
    return check_done();
}
