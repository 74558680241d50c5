/*
 * The config module: defaults, the shipped files, every class of error with its exact
 * location, --set, and dump round trips. Error checks match substrings that include line:col
 * and the key path, because those are what a user acts on.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config/config.h"
#include "check.h"

#define SRC(rel) ECHOD_SOURCE_ROOT "/" rel

static char tmpdir[] = "/tmp/echod-test-config-XXXXXX";
static int tmp_seq;

/* Writes text to a fresh file and returns its path (static storage, one per call). */
static const char *write_tmp(const char *text)
{
    static char paths[64][128];
    char *path = paths[tmp_seq % 64];
    snprintf(path, sizeof(paths[0]), "%s/c%d.yaml", tmpdir, tmp_seq++);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}

static char *dump_str(const echod_config_t *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    echod_config_dump(cfg, f);
    fclose(f);
    return text;
}

/* dump_str into a static buffer, for handing straight to write_tmp. */
static const char *dump_str_tmp(const echod_config_t *cfg)
{
    static char buf[16384];
    char *text = dump_str(cfg);
    snprintf(buf, sizeof(buf), "%s", text);
    free(text);
    return buf;
}

static int same_dump(const echod_config_t *a, const echod_config_t *b)
{
    char *da = dump_str(a), *db = dump_str(b);
    int same = strcmp(da, db) == 0;
    if (!same)
        fprintf(stderr, "--- dump a:\n%s--- dump b:\n%s", da, db);
    free(da);
    free(db);
    return same;
}

/* Loads text over the defaults; expects failure with `want` in the message (after the file name). */
static int load_fails_with(const char *text, const char *want)
{
    echod_config_t cfg;
    char err[1024] = "";
    echod_config_init(&cfg);
    const char *path = write_tmp(text);
    int rc = echod_config_load_file(&cfg, path, err, sizeof(err));
    echod_config_free(&cfg);
    size_t plen = strlen(path);
    int ok = rc == -1 && strncmp(err, path, plen) == 0 && strstr(err + plen, want) != NULL && strchr(err, '\n') == NULL;
    if (!ok)
        fprintf(stderr, "load of:\n%s\nwanted: %s\n   got: rc=%d %s\n", text, want, rc, err);
    return ok;
}

static int load_ok(const char *text, echod_config_t *cfg)
{
    char err[1024] = "";
    echod_config_init(cfg);
    int rc = echod_config_load_file(cfg, write_tmp(text), err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "load of:\n%s\nfailed: %s\n", text, err);
    return rc == 0;
}

static int set_fails_with(const char *assignment, const char *want)
{
    echod_config_t cfg;
    char err[1024] = "";
    echod_config_init(&cfg);
    int rc = echod_config_set(&cfg, assignment, err, sizeof(err));
    echod_config_free(&cfg);
    int ok = rc == -1 && strstr(err, want) != NULL && strchr(err, '\n') == NULL;
    if (!ok)
        fprintf(stderr, "--set %s\nwanted: %s\n   got: rc=%d %s\n", assignment, want, rc, err);
    return ok;
}

static int finish_fails_with(echod_config_t *cfg, const char *want)
{
    char err[1024] = "";
    int rc = echod_config_finish(cfg, err, sizeof(err));
    int ok = rc == -1 && strstr(err, want) != NULL;
    if (!ok)
        fprintf(stderr, "finish wanted: %s\n   got: rc=%d %s\n", want, rc, err);
    return ok;
}

static int set(echod_config_t *cfg, const char *assignment)
{
    char err[1024] = "";
    int rc = echod_config_set(cfg, assignment, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "--set %s failed: %s\n", assignment, err);
    return rc == 0;
}

static void test_defaults(void)
{
    echod_config_t def, file;
    char err[1024] = "";
    echod_config_init(&def);
    CHECK(strcmp(def.arm, "default") == 0);
    CHECK(strcmp(def.listen.grpc, "0.0.0.0:50051") == 0);
    CHECK(strcmp(def.listen.admin, "0.0.0.0:8080") == 0);
    CHECK(strcmp(def.listen.rest, "") == 0);
    CHECK(strcmp(def.tls.cert, "") == 0 && strcmp(def.tls.key, "") == 0);
    CHECK(def.io.event_loops == 1);
    CHECK(def.transport.max_concurrent_streams == 1000);
    CHECK(def.transport.max_receive_message_bytes == 4194304);
    CHECK(def.transport.initial_window_bytes == 1048576);
    CHECK(def.transport.max_send_buffer_bytes == 32768);
    CHECK(def.transport.flush == ECHOD_FLUSH_LOOP_TAIL);
    CHECK(def.transport.max_header_list_bytes == 16384);
    CHECK(def.transport.max_resets_per_second == 1000);
    CHECK(def.transport.handshake_timeout_ms == 10000);
    CHECK(def.transport.idle_timeout_ms == 0);
    CHECK(def.transport.max_connection_age_ms == 0 && def.transport.max_connection_age_grace_ms == 0);
    CHECK(def.limits.max_calls_in_flight == 0 && def.limits.max_connections == 0);
    CHECK(def.executor.mode == ECHOD_EXEC_DIRECT && def.executor.threads == 0 && def.executor.max_threads == 0);
    CHECK(def.executor.keep_alive_ms == 60000);
    CHECK(def.executor.stack_bytes == ECHOD_EXEC_STACK_BYTES_DEFAULT);
    CHECK(def.dispatch.serialize == ECHOD_SERIALIZE_AUTO && !def.dispatch.unwrap_sequential);
    CHECK(!def.dispatch.merge_lookup_and_start && !def.dispatch.coalesce_end_stream);
    CHECK(def.dispatch.sched_policy == ECHOD_SCHED_OTHER);
    CHECK(def.dispatch.per_method_count == 0 && def.dispatch.per_method == NULL);
    CHECK(def.echo.server_streaming_count == 10);
    CHECK(def.work.allow_metadata_overrides);
    CHECK(def.work.max_cpu_ms == 10000 && def.work.max_sleep_ms == 10000);
    CHECK(def.work.max_response_bytes == 4194304);
    CHECK(def.work.defaults.response_bytes == -1 && def.work.defaults.cpu_us == 0 && def.work.defaults.sleep_us == 0);
    CHECK(def.work.defaults.status == 0 && def.work.defaults.error_rate == 0.0 && !def.work.defaults.echo_metadata);
    CHECK(def.work.per_method_count == 0 && def.work.per_method == NULL);
    CHECK(echod_config_method_work(&def, "/grpc.examples.echo.Echo/UnaryEcho") == &def.work.defaults);
    CHECK(def.telemetry.timing_trailer);
    CHECK(def.shutdown.announce_ms == 0);
    CHECK(def.shutdown.drain_timeout_ms == 10000);
    CHECK(def.log.level == ECHOD_LOG_INFO && def.log.format == ECHOD_LOG_TEXT);
    CHECK(def.source[0] == '\0');

    echod_config_init(&file);
    CHECK(echod_config_load_file(&file, SRC("config/echod.yaml"), err, sizeof(err)) == 0);
    CHECK(strcmp(file.source, SRC("config/echod.yaml")) == 0);
    CHECK(same_dump(&def, &file));
    CHECK(echod_config_finish(&def, err, sizeof(err)) == 0);
    CHECK(echod_config_finish(&file, err, sizeof(err)) == 0);
    CHECK(strlen(def.sha256) == 64 && strcmp(def.sha256, file.sha256) == 0);
    echod_config_free(&def);
    echod_config_free(&file);

    /* Empty documents are the defaults, not errors. */
    const char *empties[] = {"", "\n", "# only a comment\n", "---\n", "~\n"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        echod_config_init(&def);
        CHECK(load_ok(empties[i], &file));
        CHECK(same_dump(&def, &file));
        echod_config_free(&def);
        echod_config_free(&file);
    }
}

static void test_arms(void)
{
    DIR *d = opendir(SRC("config/arms"));
    CHECK(d != NULL);
    if (d == NULL)
        return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml") != 0)
            continue;
        char path[512], err[1024] = "", base[256];
        snprintf(path, sizeof(path), "%s/%s", SRC("config/arms"), e->d_name);
        snprintf(base, sizeof(base), "%.*s", (int)(len - 5), e->d_name);
        echod_config_t cfg;
        echod_config_init(&cfg);
        int rc = echod_config_load_file(&cfg, path, err, sizeof(err));
        if (rc == 0)
            rc = echod_config_finish(&cfg, err, sizeof(err));
        if (rc != 0)
            fprintf(stderr, "%s: %s\n", e->d_name, err);
        CHECK(rc == 0);
        CHECK(strcmp(cfg.arm, base) == 0);
        /* Only the arm shape differs from the defaults; the ports are the same everywhere. */
        CHECK(strcmp(cfg.listen.grpc, "0.0.0.0:50051") == 0 && strcmp(cfg.listen.admin, "0.0.0.0:8080") == 0);
        /* Only the REST control arm opens the REST listener. */
        CHECK(strcmp(cfg.listen.rest, strcmp(base, "rest") == 0 ? "0.0.0.0:8081" : "") == 0);
        echod_config_free(&cfg);
        n++;
    }
    closedir(d);
    CHECK(n == 13);

    /* Spot-check that each arm says what its name promises. */
    echod_config_t cfg;
    char err[1024];
    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/per-method.yaml"), err, sizeof(err)) == 0);
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    CHECK(cfg.executor.mode == ECHOD_EXEC_CACHED);
    const echod_exec_config_t *bidi =
        echod_config_method_exec(&cfg, "/grpc.examples.echo.Echo/BidirectionalStreamingEcho");
    CHECK(bidi != NULL && bidi->mode == ECHOD_EXEC_FIXED && bidi->threads == 2);
    CHECK(echod_config_method_exec(&cfg, "/grpc.examples.echo.Echo/UnaryEcho") == NULL);
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/merged-coalesced.yaml"), err, sizeof(err)) == 0);
    CHECK(cfg.dispatch.merge_lookup_and_start && cfg.dispatch.coalesce_end_stream);
    CHECK(cfg.executor.mode == ECHOD_EXEC_CACHED);
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/virtual.yaml"), err, sizeof(err)) == 0);
    CHECK(cfg.executor.mode == ECHOD_EXEC_VIRTUAL && cfg.executor.threads == 0 && cfg.executor.stack_bytes == 65536);
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/direct-serialized.yaml"), err, sizeof(err)) == 0);
    CHECK(cfg.dispatch.serialize == ECHOD_SERIALIZE_ALWAYS && cfg.executor.mode == ECHOD_EXEC_DIRECT);
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/fixed.yaml"), err, sizeof(err)) == 0);
    CHECK(cfg.executor.mode == ECHOD_EXEC_FIXED && !cfg.dispatch.unwrap_sequential);
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/fixed-unwrapped.yaml"), err, sizeof(err)) == 0);
    CHECK(cfg.executor.mode == ECHOD_EXEC_FIXED && cfg.executor.threads == 1 && cfg.dispatch.unwrap_sequential);
    echod_config_free(&cfg);

    CHECK(load_ok("dispatch: {unwrap_sequential: on}\n", &cfg));
    CHECK(cfg.dispatch.unwrap_sequential);
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/direct-drain.yaml"), err, sizeof(err)) == 0);
    CHECK(cfg.transport.flush == ECHOD_FLUSH_READ_COMPLETE);
    echod_config_free(&cfg);

    /* The REST control arm keeps the gRPC side on the `direct` arm's settings. */
    echod_config_t direct;
    echod_config_init(&cfg);
    echod_config_init(&direct);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/rest.yaml"), err, sizeof(err)) == 0);
    CHECK(echod_config_load_file(&direct, SRC("config/arms/direct.yaml"), err, sizeof(err)) == 0);
    CHECK(strcmp(cfg.listen.rest, "0.0.0.0:8081") == 0);
    CHECK(set(&direct, "arm=rest") && set(&direct, "listen.rest=0.0.0.0:8081"));
    CHECK(same_dump(&cfg, &direct));
    echod_config_free(&cfg);
    echod_config_free(&direct);
}

static void test_values(void)
{
    echod_config_t cfg;
    CHECK(load_ok(
        "arm: x\n"
        "listen: {grpc: \"[::1]:1\", admin: \"*:65535\"}\n"
        "tls: {cert: /a.pem, key: /b.pem}\n"
        "io: {event_loops: 64}\n"
        "transport:\n"
        "  max_concurrent_streams: 2147483647\n"
        "  max_receive_message_bytes: 1\n"
        "  initial_window_bytes: 65535\n"
        "  max_send_buffer_bytes: 1073741824\n"
        "  flush: immediate\n"
        "executor: {mode: workstealing, threads: 1024, max_threads: 4096, keep_alive: 250}\n"
        "dispatch: {serialize: always, merge_lookup_and_start: yes, coalesce_end_stream: On, sched_policy: batch}\n"
        "echo: {server_streaming_count: 100000}\n"
        "shutdown: {drain_timeout: 1440m}\n"
        "log: {level: error, format: json}\n",
        &cfg));
    CHECK(strcmp(cfg.arm, "x") == 0);
    CHECK(strcmp(cfg.listen.grpc, "[::1]:1") == 0 && strcmp(cfg.listen.admin, "*:65535") == 0);
    CHECK(strcmp(cfg.tls.cert, "/a.pem") == 0 && strcmp(cfg.tls.key, "/b.pem") == 0);
    CHECK(cfg.io.event_loops == 64);
    CHECK(cfg.transport.max_concurrent_streams == 2147483647u);
    CHECK(cfg.transport.max_receive_message_bytes == 1);
    CHECK(cfg.transport.initial_window_bytes == 65535);
    CHECK(cfg.transport.max_send_buffer_bytes == 1073741824u);
    CHECK(cfg.transport.flush == ECHOD_FLUSH_IMMEDIATE);
    CHECK(cfg.executor.mode == ECHOD_EXEC_WORKSTEALING && cfg.executor.threads == 1024);
    CHECK(cfg.executor.max_threads == 4096 && cfg.executor.keep_alive_ms == 250);
    CHECK(cfg.dispatch.serialize == ECHOD_SERIALIZE_ALWAYS);
    CHECK(cfg.dispatch.merge_lookup_and_start && cfg.dispatch.coalesce_end_stream);
    CHECK(cfg.dispatch.sched_policy == ECHOD_SCHED_BATCH);
    CHECK(cfg.echo.server_streaming_count == 100000);
    CHECK(cfg.shutdown.drain_timeout_ms == 86400000);
    CHECK(cfg.log.level == ECHOD_LOG_ERROR && cfg.log.format == ECHOD_LOG_JSON);
    echod_config_free(&cfg);

    /* A file only changes the keys it names; `key:` with no value is an empty string or mapping. */
    CHECK(load_ok("tls:\ndispatch:\n  per_method:\nexecutor:\n  threads: 3\n", &cfg));
    CHECK(cfg.executor.threads == 3 && cfg.executor.mode == ECHOD_EXEC_DIRECT && cfg.executor.keep_alive_ms == 60000);
    CHECK(strcmp(cfg.tls.cert, "") == 0);
    echod_config_free(&cfg);

    /* Booleans in every accepted spelling. */
    const char *truths[] = {"true", "yes", "on", "True", "YES"}, *falsehoods[] = {"false", "no", "off", "False"};
    for (size_t i = 0; i < sizeof(truths) / sizeof(truths[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "dispatch: {coalesce_end_stream: %s}\n", truths[i]);
        CHECK(load_ok(text, &cfg) && cfg.dispatch.coalesce_end_stream);
        echod_config_free(&cfg);
    }
    for (size_t i = 0; i < sizeof(falsehoods) / sizeof(falsehoods[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "dispatch: {coalesce_end_stream: %s}\n", falsehoods[i]);
        CHECK(load_ok(text, &cfg) && !cfg.dispatch.coalesce_end_stream);
        echod_config_free(&cfg);
    }

    /* Every enum value, and the name functions that print them. */
    for (int m = ECHOD_EXEC_DIRECT; m <= ECHOD_EXEC_VIRTUAL; m++) {
        char text[128];
        snprintf(text, sizeof(text), "executor: {mode: %s}\n", echod_exec_mode_name((echod_exec_mode_t)m));
        CHECK(load_ok(text, &cfg) && (int)cfg.executor.mode == m);
        echod_config_free(&cfg);
    }
    CHECK(strcmp(echod_exec_mode_name(ECHOD_EXEC_CACHED), "cached") == 0);
    CHECK(strcmp(echod_flush_name(ECHOD_FLUSH_READ_COMPLETE), "read_complete") == 0);
    CHECK(strcmp(echod_flush_name(ECHOD_FLUSH_LOOP_TAIL), "loop_tail") == 0);
    CHECK(strcmp(echod_serialize_name(ECHOD_SERIALIZE_ALWAYS), "always") == 0);
    CHECK(strcmp(echod_log_level_name(ECHOD_LOG_WARN), "warn") == 0);
    CHECK(strcmp(echod_log_format_name(ECHOD_LOG_JSON), "json") == 0);
    CHECK(strcmp(echod_sched_policy_name(ECHOD_SCHED_BATCH), "batch") == 0);
    CHECK(strcmp(echod_dist_name(ECHOD_DIST_STALL), "stall") == 0);
    echod_dist_kind_t kind = ECHOD_DIST_CONSTANT;
    CHECK(echod_dist_parse("exponential", 11, &kind) == 0 && kind == ECHOD_DIST_EXPONENTIAL);
    CHECK(echod_dist_parse("stalls", 5, &kind) == 0 && kind == ECHOD_DIST_STALL);
    CHECK(echod_dist_parse("stal", 4, &kind) == -1 && kind == ECHOD_DIST_STALL);
    /* a value with no name (a struct written directly) prints as such, never past a table */
    CHECK(strcmp(echod_exec_mode_name((echod_exec_mode_t)42), "unknown") == 0);
    CHECK(strcmp(echod_flush_name((echod_flush_t)3), "unknown") == 0);
    CHECK(strcmp(echod_dist_name((echod_dist_kind_t)-1), "unknown") == 0);
    CHECK(strcmp(echod_log_level_name((echod_log_level_t)4), "unknown") == 0);

    /* per_method entries start from the executor defaults, not from `executor`. */
    CHECK(load_ok("executor: {mode: cached, keep_alive: 5s}\n"
                  "dispatch:\n"
                  "  per_method:\n"
                  "    /grpc.examples.echo.Echo/UnaryEcho: {mode: workstealing, threads: 4}\n"
                  "    /grpc.examples.echo.Echo/BidirectionalStreamingEcho: {mode: fixed, threads: 2}\n",
                  &cfg));
    CHECK(cfg.dispatch.per_method_count == 2);
    char err[1024];
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    /* Sorted by finish. */
    CHECK(strcmp(cfg.dispatch.per_method[0].method, "/grpc.examples.echo.Echo/BidirectionalStreamingEcho") == 0);
    const echod_exec_config_t *ue = echod_config_method_exec(&cfg, "/grpc.examples.echo.Echo/UnaryEcho");
    CHECK(ue != NULL && ue->mode == ECHOD_EXEC_WORKSTEALING && ue->threads == 4 && ue->keep_alive_ms == 60000);
    echod_config_free(&cfg);

    /* A later file's per_method replaces the earlier one's whole. */
    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/per-method.yaml"), err, sizeof(err)) == 0);
    CHECK(echod_config_load_file(&cfg, write_tmp("dispatch: {per_method: {}}\n"), err, sizeof(err)) == 0);
    CHECK(cfg.dispatch.per_method_count == 0);
    CHECK(cfg.executor.mode == ECHOD_EXEC_CACHED);
    echod_config_free(&cfg);
}

/* transport, limits, shutdown and telemetry keys, and listen.rest: good values at the edges, then every error class. */
static void test_service_keys(void)
{
    echod_config_t cfg;
    CHECK(load_ok("listen: {rest: \"127.0.0.1:8081\"}\n"
                  "transport:\n"
                  "  max_header_list_bytes: 16777216\n"
                  "  max_resets_per_second: 0\n"
                  "  handshake_timeout: 0\n"
                  "  idle_timeout: 5m\n"
                  "  max_connection_age: 1440m\n"
                  "  max_connection_age_grace: 250ms\n"
                  "limits: {max_calls_in_flight: 10000000, max_connections: 1000000}\n"
                  "telemetry: {timing_trailer: off}\n"
                  "shutdown: {announce: 2s}\n",
                  &cfg));
    CHECK(strcmp(cfg.listen.rest, "127.0.0.1:8081") == 0);
    CHECK(cfg.transport.max_header_list_bytes == 16777216 && cfg.transport.max_resets_per_second == 0);
    CHECK(cfg.transport.handshake_timeout_ms == 0 && cfg.transport.idle_timeout_ms == 300000);
    CHECK(cfg.transport.max_connection_age_ms == 86400000 && cfg.transport.max_connection_age_grace_ms == 250);
    CHECK(cfg.limits.max_calls_in_flight == 10000000 && cfg.limits.max_connections == 1000000);
    CHECK(!cfg.telemetry.timing_trailer);
    CHECK(cfg.shutdown.announce_ms == 2000 && cfg.shutdown.drain_timeout_ms == 10000);
    /* The rest of transport keeps its values: a mapping merges. */
    CHECK(cfg.transport.max_concurrent_streams == 1000 && cfg.transport.flush == ECHOD_FLUSH_LOOP_TAIL);
    echod_config_free(&cfg);

    CHECK(load_ok("transport: {max_header_list_bytes: 1024, max_resets_per_second: 1000000}\n", &cfg));
    CHECK(cfg.transport.max_header_list_bytes == 1024 && cfg.transport.max_resets_per_second == 1000000);
    echod_config_free(&cfg);

    /* listen.rest: empty, quoted empty and null all mean off. */
    const char *offs[] = {"listen: {rest: \"\"}\n", "listen: {rest: ''}\n", "listen:\n  rest:\n",
                          "listen: {rest: ~}\n"};
    for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
        CHECK(load_ok("listen: {rest: \"*:9\"}\n", &cfg));
        char err[1024];
        CHECK(echod_config_load_file(&cfg, write_tmp(offs[i]), err, sizeof(err)) == 0);
        CHECK(strcmp(cfg.listen.rest, "") == 0);
        echod_config_free(&cfg);
    }

    CHECK(load_fails_with("listen:\n  rest: \"example.com:8081\"\n",
                          ":2:9: listen.rest: expected \"\" (off) or host:port with port 1..65535 and host an IPv4 "
                          "address, [IPv6 address], localhost, * or empty, got \"example.com:8081\""));
    CHECK(load_fails_with("listen: {rest: 8081}\n", ":1:16: listen.rest: expected \"\" (off) or host:port"));
    CHECK(load_fails_with("listen: {rest: [a]}\n", ":1:16: listen.rest: expected \"\" (off) or host:port with port "
                                                   "1..65535 and host an IPv4 address, [IPv6 address], localhost, * or "
                                                   "empty, got a sequence"));
    CHECK(load_fails_with("listen: {rest: \"0.0.0.0:0\"}\n", "listen.rest: expected \"\" (off)"));
    CHECK(load_fails_with("transport:\n  max_header_list_bytes: 1023\n",
                          ":2:26: transport.max_header_list_bytes: expected an integer from 1024 to 16777216, got "
                          "\"1023\""));
    CHECK(load_fails_with("transport: {max_header_list_bytes: 16777217}\n",
                          ":1:36: transport.max_header_list_bytes: expected an integer from 1024 to 16777216"));
    CHECK(load_fails_with("transport: {max_resets_per_second: 1000001}\n",
                          ":1:36: transport.max_resets_per_second: expected an integer from 0 to 1000000, got "
                          "\"1000001\""));
    CHECK(load_fails_with("transport: {max_resets_per_second: -1}\n",
                          "transport.max_resets_per_second: expected an integer from 0 to 1000000, got \"-1\""));
    CHECK(load_fails_with("transport:\n  handshake_timeout: 10 s\n",
                          ":2:22: transport.handshake_timeout: expected a duration up to 1440m (a day) such as 250ms, "
                          "10s or 2m (a bare number is milliseconds), got \"10 s\""));
    CHECK(load_fails_with("transport: {idle_timeout: 1441m}\n",
                          ":1:27: transport.idle_timeout: expected a duration up to 1440m (a day)"));
    CHECK(load_fails_with("transport: {max_connection_age: -1}\n",
                          ":1:33: transport.max_connection_age: expected a duration"));
    CHECK(load_fails_with("transport: {max_connection_age_grace: 1h}\n",
                          ":1:39: transport.max_connection_age_grace: expected a duration"));
    CHECK(load_fails_with("limits:\n  max_calls_in_flight: 10000001\n",
                          ":2:24: limits.max_calls_in_flight: expected an integer from 0 to 10000000, got "
                          "\"10000001\""));
    CHECK(load_fails_with("limits: {max_connections: 1000001}\n",
                          ":1:27: limits.max_connections: expected an integer from 0 to 1000000"));
    CHECK(load_fails_with("limits: {max_conns: 1}\n", ":1:10: limits.max_conns: unknown key \"max_conns\"; valid keys "
                                                      "of limits: max_calls_in_flight, max_connections"));
    CHECK(load_fails_with("limits: 5\n", ":1:9: limits: expected a mapping, got \"5\""));
    CHECK(load_fails_with("telemetry: {timing_trailer: sometimes}\n",
                          ":1:29: telemetry.timing_trailer: expected a boolean (true/false, yes/no, on/off), got "
                          "\"sometimes\""));
    CHECK(load_fails_with("telemetry: {timing: true}\n", ":1:13: telemetry.timing: unknown key \"timing\"; valid keys "
                                                         "of telemetry: timing_trailer"));
    CHECK(load_fails_with("shutdown:\n  announce: 1d\n",
                          ":2:13: shutdown.announce: expected a duration up to 1440m (a day)"));
    CHECK(load_fails_with("shutdown: {anounce: 1s}\n", "shutdown.anounce: unknown key \"anounce\"; valid keys of "
                                                       "shutdown: announce, drain_timeout"));
}

/* KEY_INT (response_bytes) and KEY_RATIO (error_rate): what they take and how they refuse the rest. */
static void test_int_and_ratio(void)
{
    echod_config_t cfg;
    const struct {
        const char *text;
        long long want;
    } ints[] = {{"-1", -1}, {"0", 0}, {"-0", 0}, {"17", 17}, {"2147483647", 2147483647}};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "work: {defaults: {response_bytes: %s}}\n", ints[i].text);
        CHECK(load_ok(text, &cfg) && cfg.work.defaults.response_bytes == ints[i].want);
        echod_config_free(&cfg);
    }
    const char *bad_ints[] = {"-2",
                              "2147483648",
                              "-9223372036854775808",
                              "99999999999999999999",
                              "+1",
                              "1.0",
                              "--1",
                              "'-'",
                              "1e3",
                              "0x10",
                              "ten",
                              "\"\"",
                              "' 1'"};
    for (size_t i = 0; i < sizeof(bad_ints) / sizeof(bad_ints[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "work:\n  defaults:\n    response_bytes: %s\n", bad_ints[i]);
        CHECK(load_fails_with(text, ":3:21: work.defaults.response_bytes: expected an integer from -1 to 2147483647, "
                                    "got \""));
    }
    CHECK(load_fails_with("work: {defaults: {response_bytes: -2}}\n",
                          ":1:35: work.defaults.response_bytes: expected an integer from -1 to 2147483647, got "
                          "\"-2\""));
    CHECK(load_fails_with("work: {defaults: {response_bytes: [1]}}\n",
                          ":1:35: work.defaults.response_bytes: expected an integer from -1 to 2147483647, got a "
                          "sequence"));

    const struct {
        const char *text;
        double want;
    } ratios[] = {{"0", 0.0},
                  {"0.0", 0.0},
                  {"-0.0", 0.0},
                  {"1", 1.0},
                  {"1.0", 1.0},
                  {"0.25", 0.25},
                  {".5", 0.5},
                  {"5e-3", 0.005},
                  {"1E-2", 0.01},
                  {"1e-300", 1e-300},
                  {"\"0.5\"", 0.5},
                  {"0.1", 0.1},
                  {"1.00000000000000000001", 1.0}};
    for (size_t i = 0; i < sizeof(ratios) / sizeof(ratios[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "work: {defaults: {error_rate: %s}}\n", ratios[i].text);
        int ok = load_ok(text, &cfg);
        CHECK(ok && cfg.work.defaults.error_rate == ratios[i].want);
        if (ok && cfg.work.defaults.error_rate != ratios[i].want)
            fprintf(stderr, "error_rate %s read as %.17g\n", ratios[i].text, cfg.work.defaults.error_rate);
        echod_config_free(&cfg);
    }
    /* -0.0 is stored as +0.0, so it dumps as 0.0. */
    CHECK(load_ok("work: {defaults: {error_rate: -0.0}}\n", &cfg));
    char *text = dump_str(&cfg);
    CHECK(strstr(text, "    error_rate: 0.0\n") != NULL);
    free(text);
    echod_config_free(&cfg);

    const char *bad_ratios[] = {".nan", "nan",  "NaN", ".inf",      "-.inf",    "inf",    "infinity", "1e999",
                                "-0.1", "1.01", "2",   "1.0000001", "-1e-300",  "0x1p-1", "abc",      "1e",
                                "0.5.", "50%",  "1/2", "\"\"",      "\" 0.5\"", "true",   "0,5",      "e1"};
    for (size_t i = 0; i < sizeof(bad_ratios) / sizeof(bad_ratios[0]); i++) {
        char text[160];
        snprintf(text, sizeof(text), "work:\n  defaults:\n    error_rate: %s\n", bad_ratios[i]);
        CHECK(load_fails_with(text, ":3:17: work.defaults.error_rate: expected a number from 0.0 to 1.0 such as 0.001 "
                                    "or 0.25 (decimal notation; not NaN or infinity), got \""));
    }
    CHECK(load_fails_with("work: {defaults: {error_rate: .nan}}\n",
                          ":1:31: work.defaults.error_rate: expected a number from 0.0 to 1.0 such as 0.001 or 0.25 "
                          "(decimal notation; not NaN or infinity), got \".nan\""));
    CHECK(load_fails_with("work: {defaults: {error_rate: 1.5}}\n", "got \"1.5\""));
    CHECK(load_fails_with("work: {defaults: {error_rate: {a: 1}}}\n",
                          ":1:31: work.defaults.error_rate: expected a number from 0.0 to 1.0 such as 0.001 or 0.25 "
                          "(decimal notation; not NaN or infinity), got a mapping"));
}

static void test_work(void)
{
    echod_config_t cfg;
    char err[1024];

    /* Every key, at its edges. */
    CHECK(load_ok("work:\n"
                  "  allow_metadata_overrides: false\n"
                  "  max_cpu: 60m\n"
                  "  max_sleep: 0\n"
                  "  max_response_bytes: 2147483647\n"
                  "  defaults:\n"
                  "    response_bytes: 2147483647\n"
                  "    cpu_us: 3600000000\n"
                  "    sleep_us: 0\n"
                  "    status: 16\n"
                  "    error_rate: 1.0\n"
                  "    echo_metadata: yes\n",
                  &cfg));
    CHECK(!cfg.work.allow_metadata_overrides);
    CHECK(cfg.work.max_cpu_ms == 3600000 && cfg.work.max_sleep_ms == 0 && cfg.work.max_response_bytes == 2147483647u);
    CHECK(cfg.work.defaults.response_bytes == 2147483647 && cfg.work.defaults.cpu_us == 3600000000u);
    CHECK(cfg.work.defaults.sleep_us == 0 && cfg.work.defaults.status == 16 && cfg.work.defaults.error_rate == 1.0);
    CHECK(cfg.work.defaults.echo_metadata);
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    echod_config_free(&cfg);

    /*
     * per_method entries start from work.defaults and override what they name. The defaults of
     * the same file count wherever they are written: here after per_method.
     */
    CHECK(load_ok("work:\n"
                  "  per_method:\n"
                  "    /grpc.examples.echo.Echo/UnaryEcho: { cpu_us: 50 }\n"
                  "    /grpc.examples.echo.Echo/ServerStreamingEcho: { response_bytes: 0, echo_metadata: false }\n"
                  "    /grpc.examples.echo.Echo/ClientStreamingEcho: {}\n"
                  "  defaults: { sleep_us: 7, status: 14, error_rate: 0.5, echo_metadata: true }\n",
                  &cfg));
    CHECK(cfg.work.per_method_count == 3);
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    /* Sorted by finish. */
    CHECK(strcmp(cfg.work.per_method[0].method, "/grpc.examples.echo.Echo/ClientStreamingEcho") == 0);
    CHECK(strcmp(cfg.work.per_method[2].method, "/grpc.examples.echo.Echo/UnaryEcho") == 0);
    const echod_work_t *ue = echod_config_method_work(&cfg, "/grpc.examples.echo.Echo/UnaryEcho");
    CHECK(ue != &cfg.work.defaults && ue->cpu_us == 50);
    CHECK(ue->sleep_us == 7 && ue->status == 14 && ue->error_rate == 0.5 && ue->echo_metadata);
    CHECK(ue->response_bytes == -1);
    const echod_work_t *ss = echod_config_method_work(&cfg, "/grpc.examples.echo.Echo/ServerStreamingEcho");
    CHECK(ss->response_bytes == 0 && !ss->echo_metadata && ss->sleep_us == 7 && ss->cpu_us == 0);
    const echod_work_t *cs = echod_config_method_work(&cfg, "/grpc.examples.echo.Echo/ClientStreamingEcho");
    CHECK(cs != &cfg.work.defaults && memcmp(cs, &cfg.work.defaults, sizeof(*cs)) == 0);
    CHECK(echod_config_method_work(&cfg, "/grpc.examples.echo.Echo/BidirectionalStreamingEcho") == &cfg.work.defaults);
    CHECK(echod_config_method_work(&cfg, "/grpc.examples.echo.Echo") == &cfg.work.defaults);
    /* Both dictionaries are independent. */
    CHECK(cfg.dispatch.per_method_count == 0);
    CHECK(echod_config_method_exec(&cfg, "/grpc.examples.echo.Echo/UnaryEcho") == NULL);

    /* A later file's work.per_method replaces the earlier one's whole; its defaults merge. */
    CHECK(echod_config_load_file(&cfg, write_tmp("work:\n  per_method: {/a.B/C: {status: 3}}\n"), err, sizeof(err)) ==
          0);
    CHECK(cfg.work.per_method_count == 1 && strcmp(cfg.work.per_method[0].method, "/a.B/C") == 0);
    CHECK(cfg.work.per_method[0].work.status == 3 && cfg.work.per_method[0].work.sleep_us == 7);
    CHECK(cfg.work.defaults.status == 14);
    /* Entries already read keep what they started from when work.defaults changes later. */
    CHECK(set(&cfg, "work.defaults.sleep_us=9"));
    CHECK(cfg.work.per_method[0].work.sleep_us == 7 && cfg.work.defaults.sleep_us == 9);
    /* A --set field creates an entry from the current defaults; a --set mapping replaces it. */
    CHECK(set(&cfg, "work.per_method./pkg.Svc/M.cpu_us=5"));
    CHECK(cfg.work.per_method_count == 2);
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    const echod_work_t *m = echod_config_method_work(&cfg, "/pkg.Svc/M");
    CHECK(m->cpu_us == 5 && m->sleep_us == 9 && m->status == 14);
    CHECK(set(&cfg, "work.per_method./pkg.Svc/M.echo_metadata=false"));
    CHECK(set(&cfg, "work.per_method./a.B/C={error_rate: 0.125}"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    m = echod_config_method_work(&cfg, "/pkg.Svc/M");
    CHECK(m->cpu_us == 5 && !m->echo_metadata);
    const echod_work_t *c = echod_config_method_work(&cfg, "/a.B/C");
    CHECK(c->error_rate == 0.125 && c->status == 14 && c->sleep_us == 9);
    /* {} (or null) clears them all. */
    CHECK(set(&cfg, "work.per_method={}"));
    CHECK(cfg.work.per_method_count == 0 && cfg.work.per_method == NULL);
    CHECK(set(&cfg, "work={per_method: {/x/y: {}}, defaults: {status: 2}}"));
    CHECK(cfg.work.per_method_count == 1 && cfg.work.per_method[0].work.status == 2);
    CHECK(set(&cfg, "work.per_method="));
    CHECK(cfg.work.per_method_count == 0);
    echod_config_free(&cfg);

    /* --set of the new kinds. */
    echod_config_init(&cfg);
    CHECK(set(&cfg, "work.defaults.response_bytes=-1"));
    CHECK(set(&cfg, "work.defaults.error_rate=0.001"));
    CHECK(set(&cfg, "work.max_cpu=250ms"));
    CHECK(set(&cfg, "listen.rest=\"*:8081\""));
    CHECK(set(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.response_bytes=100"));
    CHECK(cfg.work.defaults.response_bytes == -1 && cfg.work.defaults.error_rate == 0.001);
    CHECK(cfg.work.max_cpu_ms == 250 && strcmp(cfg.listen.rest, "*:8081") == 0);
    CHECK(cfg.work.per_method_count == 1 && cfg.work.per_method[0].work.response_bytes == 100);
    CHECK(set(&cfg, "listen.rest="));
    CHECK(strcmp(cfg.listen.rest, "") == 0);
    echod_config_free(&cfg);

    CHECK(set_fails_with("work.defaults.error_rate=nan",
                         "--set work.defaults.error_rate: expected a number from 0.0 to 1.0 such as 0.001 or 0.25 "
                         "(decimal notation; not NaN or infinity), got \"nan\""));
    CHECK(set_fails_with("work.defaults.error_rate=1.5", "--set work.defaults.error_rate: expected a number from 0.0 "
                                                         "to 1.0"));
    CHECK(set_fails_with("work.defaults.response_bytes=-2", "--set work.defaults.response_bytes: expected an integer "
                                                            "from -1 to 2147483647, got \"-2\""));
    CHECK(set_fails_with("work.per_method./a/b.response_bytes=x",
                         "--set work.per_method./a/b.response_bytes: expected an integer from -1 to 2147483647, got "
                         "\"x\""));
    CHECK(set_fails_with("work.per_method./a/b.cpu_us=3600000001", "--set work.per_method./a/b.cpu_us: expected an "
                                                                   "integer from 0 to 3600000000"));
    CHECK(set_fails_with("work.per_method.UnaryEcho.cpu_us=1",
                         "--set work.per_method.UnaryEcho.cpu_us: expected a method path \"/package.Service/Method\" "
                         "after work.per_method., got \"UnaryEcho\""));
    CHECK(set_fails_with("work.per_method./a/b.cpu=1",
                         "--set work.per_method./a/b.cpu: unknown key \"cpu\"; valid keys of per_method entry: "
                         "response_bytes, cpu_us, cpu_dist, cpu_stall_fraction, cpu_stall_us, sleep_us, sleep_dist, "
                         "sleep_stall_fraction, sleep_stall_us, status, error_rate, echo_metadata"));
    CHECK(set_fails_with("work.per_method./a/b={status: 17}", "--set work.per_method./a/b.status: expected an integer "
                                                              "from 0 to 16, got \"17\""));
    CHECK(set_fails_with("work.per_method={/a/b: 5}", "--set work.per_method./a/b: expected a mapping, got \"5\""));
    CHECK(set_fails_with("work.defaults.cpu_us.x=1", "--set work.defaults.cpu_us.x: work.defaults.cpu_us is not a "
                                                     "mapping"));
    CHECK(set_fails_with("work.max_sleep=61m", "--set work.max_sleep: expected a duration up to 60m (an hour) such as "
                                               "250ms, 10s or 2m"));
    CHECK(set_fails_with("listen.rest=nowhere", "--set listen.rest: expected \"\" (off) or host:port"));
    CHECK(set_fails_with("limits.max_connections=lots", "--set limits.max_connections: expected an integer from 0 to "
                                                        "1000000, got \"lots\""));

    /* File errors below work name the whole path and the place. */
    CHECK(load_fails_with("work:\n  per_method:\n    /a.B/C: {cpu_us: -5}\n",
                          ":3:22: work.per_method./a.B/C.cpu_us: expected an integer from 0 to 3600000000, got "
                          "\"-5\""));
    CHECK(load_fails_with("work:\n  per_method:\n    /a.B/C:\n      error_rate: .inf\n",
                          ":4:19: work.per_method./a.B/C.error_rate: expected a number from 0.0 to 1.0"));
    CHECK(load_fails_with("work:\n  per_method:\n    UnaryEcho: {cpu_us: 1}\n",
                          ":3:5: work.per_method.UnaryEcho: expected a method path \"/package.Service/Method\" as key, "
                          "got \"UnaryEcho\""));
    CHECK(load_fails_with("work: {per_method: {/a/b: {cpu: 1}}}\n",
                          ":1:28: work.per_method./a/b.cpu: unknown key \"cpu\"; valid keys of per_method entry: "
                          "response_bytes, cpu_us, cpu_dist, cpu_stall_fraction, cpu_stall_us, sleep_us, sleep_dist, "
                          "sleep_stall_fraction, sleep_stall_us, status, error_rate, echo_metadata"));
    CHECK(load_fails_with("work: {per_method: [a]}\n", ":1:20: work.per_method: expected a mapping, got a sequence"));
    CHECK(load_fails_with("work: {per_method: {/a/b: {}, /a/b: {}}}\n",
                          ":1:31: work.per_method./a/b: duplicate key \"/a/b\" (first at line 1)"));
    CHECK(load_fails_with("work:\n  defaults: {cpu: 1}\n", ":2:14: work.defaults.cpu: unknown key \"cpu\"; valid keys "
                                                           "of defaults: response_bytes, cpu_us"));
    CHECK(load_fails_with("work:\n  max_cpu: 61m\n", ":2:12: work.max_cpu: expected a duration up to 60m (an hour) "
                                                     "such as 250ms, 10s or 2m (a bare number is milliseconds), got "
                                                     "\"61m\""));
    CHECK(load_fails_with("work: {max_sleep: 3600001}\n", ":1:19: work.max_sleep: expected a duration up to 60m"));
    CHECK(load_fails_with("work: {max_response_bytes: 2147483648}\n",
                          ":1:28: work.max_response_bytes: expected an integer from 0 to 2147483647"));
    CHECK(load_fails_with("work: {allow_metadata_overrides: 1}\n",
                          ":1:34: work.allow_metadata_overrides: expected a boolean"));
    CHECK(load_fails_with("work: {defaults: {status: 17}}\n",
                          ":1:27: work.defaults.status: expected an integer from 0 to 16, got \"17\""));
    CHECK(load_fails_with("work: {defaults: {echo_metadata: maybe}}\n",
                          ":1:34: work.defaults.echo_metadata: expected a boolean"));
    /* An error in an entry is found after the defaults of the same mapping were applied, not before. */
    CHECK(load_fails_with("work:\n  per_method: {/a/b: {status: x}}\n  defaults: {status: y}\n",
                          ":3:22: work.defaults.status: expected an integer from 0 to 16, got \"y\""));
}

/* work.model, work.seed and the distributions of cpu_us and sleep_us: values, errors, caps. */
static void test_work_model(void)
{
    echod_config_t cfg;
    char err[1024];
    CHECK(
        load_ok("work:\n"
                "  seed: 18446744073709551615\n"
                "  defaults: {cpu_us: 400, cpu_dist: stall, cpu_stall_fraction: 0.02, cpu_stall_us: 50000,\n"
                "             sleep_us: 100, sleep_dist: exponential}\n"
                "  per_method: {/a.B/C: {cpu_dist: constant}}\n"
                "  model: {enabled: true, call_cpu_us: 283, step_cpu_us: 14, handoff_cpu_us: 40, message_cpu_us: 24,\n"
                "          handoff_wake_cpu_us: 300, handoff_wake_loop_cpu_us: 45, wakeup_cpu_us: 90,\n"
                "          wakeup_short_cpu_us: 30,\n"
                "          wakeup_full_sleep_us: 20000,"
                "          wakeup_sleep_exponent: 0.25, background_millicores: 57}\n",
                &cfg));
    CHECK(cfg.work.seed == UINT64_MAX);
    CHECK(cfg.work.defaults.cpu_dist.kind == ECHOD_DIST_STALL && cfg.work.defaults.cpu_dist.stall_fraction == 0.02 &&
          cfg.work.defaults.cpu_dist.stall_us == 50000);
    CHECK(cfg.work.defaults.sleep_dist.kind == ECHOD_DIST_EXPONENTIAL);
    CHECK(cfg.work.model.enabled && cfg.work.model.call_cpu_us == 283 && cfg.work.model.step_cpu_us == 14 &&
          cfg.work.model.handoff_cpu_us == 40 && cfg.work.model.message_cpu_us == 24);
    CHECK(cfg.work.model.handoff_wake_cpu_us == 300 && cfg.work.model.handoff_wake_loop_cpu_us == 45 &&
          cfg.work.model.wakeup_cpu_us == 90 && cfg.work.model.background_millicores == 57);
    CHECK(cfg.work.model.wakeup_short_cpu_us == 30 && cfg.work.model.wakeup_full_sleep_us == 20000 &&
          cfg.work.model.wakeup_sleep_exponent == 0.25);
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    /* an entry starts from the defaults: the stall's fraction and size stay, the kind is its own */
    const echod_work_t *c = echod_config_method_work(&cfg, "/a.B/C");
    CHECK(c->cpu_dist.kind == ECHOD_DIST_CONSTANT && c->cpu_dist.stall_us == 50000 && c->cpu_us == 400);
    CHECK(set(&cfg, "work.model.enabled=false"));
    CHECK(set(&cfg, "work.defaults.sleep_dist=stall"));
    CHECK(!cfg.work.model.enabled && cfg.work.model.step_cpu_us == 14);
    CHECK(cfg.work.defaults.sleep_dist.kind == ECHOD_DIST_STALL);
    echod_config_free(&cfg);

    CHECK(
        set_fails_with("work.defaults.cpu_dist=gaussian",
                       "--set work.defaults.cpu_dist: expected one of constant, exponential, stall, got \"gaussian\""));
    CHECK(set_fails_with("work.defaults.sleep_stall_fraction=2", "--set work.defaults.sleep_stall_fraction: expected a "
                                                                 "number from 0.0 to 1.0"));
    CHECK(set_fails_with("work.seed=-1", "--set work.seed: expected an integer from 0 to 18446744073709551615"));
    CHECK(set_fails_with("work.model.bogus=1", "--set work.model.bogus: unknown key \"bogus\"; valid keys of model: "
                                               "enabled, call_cpu_us, step_cpu_us, handoff_cpu_us, "
                                               "handoff_wake_cpu_us, handoff_wake_loop_cpu_us, message_cpu_us, "
                                               "wakeup_cpu_us, "
                                               "wakeup_short_cpu_us, wakeup_full_sleep_us, "
                                               "wakeup_sleep_exponent, background_millicores"));
    /* a sleep, not a unit cost: up to an idle minute, and no cap by work.max_cpu */
    CHECK(set_fails_with("work.model.wakeup_full_sleep_us=60000001",
                         "--set work.model.wakeup_full_sleep_us: expected an integer from 0 to 60000000"));
    CHECK(set_fails_with("work.model.wakeup_sleep_exponent=1.5",
                         "--set work.model.wakeup_sleep_exponent: expected a number from 0.0 to 1.0"));
    /* one thread burns the background: at most a whole CPU */
    CHECK(set_fails_with("work.model.background_millicores=1001",
                         "--set work.model.background_millicores: expected an integer from 0 to 1000"));
    CHECK(load_fails_with("work:\n  model:\n    step_cpu_us: -3\n",
                          ":3:18: work.model.step_cpu_us: expected an integer from 0 to 3600000000, got \"-3\""));

    /* the caps: a stall or a unit cost above work.max_cpu (work.max_sleep) is refused where it was written */
    CHECK(load_ok("work:\n  max_cpu: 1ms\n  model: {handoff_cpu_us: 1001}\n", &cfg));
    char want[512];
    snprintf(want, sizeof(want),
             "%s:3:27: work.model.handoff_cpu_us: 1001 us is more than work.max_cpu allows (1ms = 1000 us); raise "
             "work.max_cpu or lower the value",
             cfg.source);
    CHECK(finish_fails_with(&cfg, want));
    echod_config_free(&cfg);
    /* the new units are CPU a thread burns too: under the same cap */
    static const char *const capped[] = {"handoff_wake_cpu_us", "handoff_wake_loop_cpu_us", "wakeup_cpu_us",
                                         "wakeup_short_cpu_us"};
    for (size_t i = 0; i < sizeof(capped) / sizeof(capped[0]); i++) {
        echod_config_init(&cfg);
        char kv[96];
        CHECK(set(&cfg, "work.max_cpu=1ms"));
        snprintf(kv, sizeof(kv), "work.model.%s=1001", capped[i]);
        CHECK(set(&cfg, kv));
        snprintf(want, sizeof(want),
                 "--set: work.model.%s: 1001 us is more than work.max_cpu allows (1ms = 1000 us); raise work.max_cpu "
                 "or lower the value",
                 capped[i]);
        CHECK(finish_fails_with(&cfg, want));
        echod_config_free(&cfg);
    }
    echod_config_init(&cfg);
    CHECK(set(&cfg, "work.max_sleep=2ms"));
    CHECK(set(&cfg, "work.defaults.sleep_stall_us=2001"));
    CHECK(finish_fails_with(&cfg, "--set: work.defaults.sleep_stall_us: 2001 us is more than work.max_sleep allows "
                                  "(2ms = 2000 us); raise work.max_sleep or lower the value"));
    echod_config_free(&cfg);
}

static void test_durations(void)
{
    uint64_t ms = 7;
    CHECK(echod_config_parse_duration("250ms", &ms) == 0 && ms == 250);
    CHECK(echod_config_parse_duration("10s", &ms) == 0 && ms == 10000);
    CHECK(echod_config_parse_duration("2m", &ms) == 0 && ms == 120000);
    CHECK(echod_config_parse_duration("1500", &ms) == 0 && ms == 1500);
    CHECK(echod_config_parse_duration("0", &ms) == 0 && ms == 0);
    CHECK(echod_config_parse_duration("0s", &ms) == 0 && ms == 0);
    CHECK(echod_config_parse_duration("18446744073709551615", &ms) == 0 && ms == UINT64_MAX);
    ms = 7;
    CHECK(echod_config_parse_duration("18446744073709551616", &ms) == -1 && ms == 7);
    CHECK(echod_config_parse_duration("18446744073709552s", &ms) == -1);
    CHECK(echod_config_parse_duration("", &ms) == -1);
    CHECK(echod_config_parse_duration("s", &ms) == -1);
    CHECK(echod_config_parse_duration("1h", &ms) == -1);
    CHECK(echod_config_parse_duration("1.5s", &ms) == -1);
    CHECK(echod_config_parse_duration("-1s", &ms) == -1);
    CHECK(echod_config_parse_duration(" 1s", &ms) == -1);
    CHECK(echod_config_parse_duration("1 s", &ms) == -1);
    CHECK(echod_config_parse_duration("1S", &ms) == -1);
    CHECK(echod_config_parse_duration("1sec", &ms) == -1);
    CHECK(echod_config_parse_duration(NULL, &ms) == -1);
    CHECK(ms == 7);
}

static void test_hostport(void)
{
    char host[64];
    uint16_t port = 0;
    CHECK(echod_config_parse_hostport("0.0.0.0:50051", host, sizeof(host), &port) == 0);
    CHECK(strcmp(host, "0.0.0.0") == 0 && port == 50051);
    CHECK(echod_config_parse_hostport("[::1]:8080", host, sizeof(host), &port) == 0);
    CHECK(strcmp(host, "::1") == 0 && port == 8080);
    CHECK(echod_config_parse_hostport("*:1", host, sizeof(host), &port) == 0 && host[0] == '\0' && port == 1);
    CHECK(echod_config_parse_hostport(":65535", host, sizeof(host), &port) == 0 && host[0] == '\0' && port == 65535);
    CHECK(echod_config_parse_hostport("localhost:9", host, sizeof(host), &port) == 0);
    CHECK(strcmp(host, "localhost") == 0);
    CHECK(echod_config_parse_hostport("[::]:9", NULL, 0, NULL) == 0);
    const char *bad[] = {"",          "50051",         "0.0.0.0",        "0.0.0.0:0", "0.0.0.0:65536", "0.0.0.0:-1",
                         "0.0.0.0:x", "example.com:1", "::1:80",         "[::1]",     "[::1]80",       "[zz]:80",
                         "[]:80",     "1.2.3:80",      "1.2.3.4:080000", "*:",        "0.0.0.0: 80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = echod_config_parse_hostport(bad[i], host, sizeof(host), &port);
        if (rc != -1)
            fprintf(stderr, "accepted bad address \"%s\"\n", bad[i]);
        CHECK(rc == -1);
    }
    /* The host must fit the caller's buffer. */
    CHECK(echod_config_parse_hostport("localhost:9", host, 4, &port) == -1);
}

static void test_file_errors(void)
{
    /* The example from the contract: line:col of the value, the key path, the rule, the value. */
    CHECK(load_fails_with("executor:\n  threads: many\n",
                          ":2:12: executor.threads: expected an integer from 0 to 1024, got \"many\""));
    /* Unknown keys name the key and list the valid ones of that mapping. */
    CHECK(load_fails_with("foo: 1\n", ":1:1: foo: unknown key \"foo\"; valid keys at the top level: arm, listen, tls, "
                                      "io, transport, limits, executor, dispatch, echo, work, telemetry, shutdown, "
                                      "log"));
    CHECK(load_fails_with(
        "transport:\n  flush: immediate\n  foo: 1\n",
        ":3:3: transport.foo: unknown key \"foo\"; valid keys of transport: max_concurrent_streams, "
        "max_receive_message_bytes, initial_window_bytes, max_send_buffer_bytes, flush, flow_control_pings, "
        "max_header_list_bytes, max_resets_per_second, handshake_timeout, idle_timeout, "
        "max_connection_age, max_connection_age_grace"));
    CHECK(load_fails_with("dispatch:\n  per_method:\n    /a.B/C: {mode: fixed, thread: 2}\n",
                          ":3:27: dispatch.per_method./a.B/C.thread: unknown key \"thread\"; valid keys of per_method "
                          "entry: mode, threads, max_threads, keep_alive"));
    /* Wrong types, both ways round. */
    CHECK(load_fails_with("io: 4\n", ":1:5: io: expected a mapping, got \"4\""));
    CHECK(load_fails_with("io:\n  - 4\n", ":2:3: io: expected a mapping, got a sequence"));
    CHECK(load_fails_with("io:\n  event_loops: {a: 1}\n",
                          ":2:16: io.event_loops: expected an integer from 1 to 64, got a mapping"));
    CHECK(load_fails_with("arm: [a, b]\n", ":1:6: arm: expected a non-empty string, got a sequence"));
    CHECK(load_fails_with("- a\n- b\n", ":1:1: (top level): expected a mapping, got a sequence"));
    CHECK(load_fails_with("just a string\n", ":1:1: (top level): expected a mapping, got \"just a string\""));
    CHECK(load_fails_with("tls:\n  ? [a]\n  : b\n", ":2:5: tls: expected a string as key, got a sequence"));
    CHECK(load_fails_with("dispatch:\n  per_method: [a]\n", ":2:15: dispatch.per_method: expected a mapping, got a "
                                                            "sequence"));
    /* Ranges, at both ends and beyond 64 bits. */
    CHECK(load_fails_with("io: {event_loops: 0}\n",
                          ":1:19: io.event_loops: expected an integer from 1 to 64, got \"0\""));
    CHECK(load_fails_with("io: {event_loops: 65}\n", "io.event_loops: expected an integer from 1 to 64, got \"65\""));
    CHECK(load_fails_with("io: {event_loops: -1}\n", "io.event_loops: expected an integer from 1 to 64, got \"-1\""));
    CHECK(load_fails_with("io: {event_loops: 1.0}\n", "io.event_loops: expected an integer from 1 to 64, got \"1.0\""));
    CHECK(load_fails_with("io: {event_loops: 99999999999999999999999}\n", "io.event_loops: expected an integer from 1 "
                                                                          "to 64, got \"99999999999999999999999\""));
    CHECK(load_fails_with("transport:\n  max_receive_message_bytes: 2147483648\n",
                          ":2:30: transport.max_receive_message_bytes: expected an integer from 1 to 2147483647"));
    CHECK(load_fails_with("transport: {initial_window_bytes: 65534}\n",
                          "transport.initial_window_bytes: expected an integer from 65535 to 2147483647, got "
                          "\"65534\""));
    CHECK(load_fails_with("transport: {max_send_buffer_bytes: 1023}\n",
                          "transport.max_send_buffer_bytes: expected an integer from 1024 to 1073741824"));
    CHECK(load_fails_with("transport: {max_concurrent_streams: 0}\n",
                          "transport.max_concurrent_streams: expected an integer from 1 to 2147483647"));
    CHECK(load_fails_with("executor: {max_threads: 4097}\n", "executor.max_threads: expected an integer from 0 to "
                                                             "4096"));
    CHECK(load_fails_with("echo: {server_streaming_count: 100001}\n",
                          "echo.server_streaming_count: expected an integer from 1 to 100000"));
    /* Enums list what they accept. */
    CHECK(load_fails_with("executor:\n  mode: forkjoin\n", ":2:9: executor.mode: expected one of direct, fixed, "
                                                           "cached, workstealing, virtual, got \"forkjoin\""));
    CHECK(load_fails_with("transport: {flush: later}\n", ":1:20: transport.flush: expected one of loop_tail, "
                                                         "read_complete, immediate, got \"later\""));
    CHECK(load_fails_with("dispatch: {serialize: never}\n", "dispatch.serialize: expected one of auto, always, got "
                                                            "\"never\""));
    CHECK(
        load_fails_with("log: {level: trace}\n", "log.level: expected one of debug, info, warn, error, got \"trace\""));
    CHECK(load_fails_with("log: {format: xml}\n", "log.format: expected one of text, json, got \"xml\""));
    /* Booleans and durations. */
    CHECK(
        load_fails_with("dispatch:\n  merge_lookup_and_start: 1\n",
                        ":2:27: dispatch.merge_lookup_and_start: expected a boolean (true/false, yes/no, on/off), got "
                        "\"1\""));
    CHECK(
        load_fails_with("shutdown:\n  drain_timeout: 10 seconds\n",
                        ":2:18: shutdown.drain_timeout: expected a duration up to 1440m (a day) such as 250ms, 10s or "
                        "2m (a bare number is milliseconds), got \"10 seconds\""));
    CHECK(load_fails_with("executor: {keep_alive: 1441m}\n", ":1:24: executor.keep_alive: expected a duration up to "
                                                             "1440m (a day)"));
    CHECK(load_fails_with("shutdown: {drain_timeout: 86400001}\n", "shutdown.drain_timeout: expected a duration"));
    CHECK(load_fails_with("executor: {keep_alive: 1h}\n", ":1:24: executor.keep_alive: expected a duration"));
    /* Strings that carry rules. */
    CHECK(load_fails_with("arm: \"\"\n", ":1:6: arm: expected a non-empty string, got \"\""));
    CHECK(load_fails_with("arm:\n", ":1:5: arm: expected a non-empty string"));
    CHECK(load_fails_with("listen:\n  grpc: \"example.com:80\"\n",
                          ":2:9: listen.grpc: expected host:port with port 1..65535 and host an IPv4 address, [IPv6 "
                          "address], localhost, * or empty, got \"example.com:80\""));
    CHECK(load_fails_with("listen: {admin: \"0.0.0.0:0\"}\n", ":1:17: listen.admin: expected host:port"));
    /* per_method keys. */
    CHECK(load_fails_with("dispatch:\n  per_method:\n    UnaryEcho: {mode: fixed}\n",
                          ":3:5: dispatch.per_method.UnaryEcho: expected a method path \"/package.Service/Method\" as "
                          "key, got \"UnaryEcho\""));
    CHECK(load_fails_with("dispatch: {per_method: {/grpc.examples.echo.Echo: {mode: fixed}}}\n",
                          ":1:25: dispatch.per_method./grpc.examples.echo.Echo: expected a method path"));
    CHECK(load_fails_with("dispatch: {per_method: {/a/b/c: {mode: fixed}}}\n", "expected a method path"));
    CHECK(load_fails_with("dispatch: {per_method: {/a/b: fixed}}\n",
                          ":1:31: dispatch.per_method./a/b: expected a mapping, got \"fixed\""));
    /* Duplicates would otherwise be resolved silently, last one wins. */
    CHECK(load_fails_with("io:\n  event_loops: 2\n  event_loops: 3\n",
                          ":3:3: io.event_loops: duplicate key \"event_loops\" (first at line 2)"));
    CHECK(load_fails_with("log: {}\nlog: {}\n", ":2:1: log: duplicate key \"log\" (first at line 1)"));
    /* YAML syntax errors keep libyaml's position. */
    CHECK(load_fails_with(
        "io:\n  event_loops: 1\n bad: 2\n",
        ":3:2: YAML syntax error: did not find expected key (while parsing a block mapping at line 1, column 1)"));
    CHECK(load_fails_with("a: b: c\n", ":1:5: YAML syntax error: mapping values are not allowed in this context"));
    CHECK(load_fails_with("tls: {cert: \"x\n", ":2:1: YAML syntax error: found unexpected end of stream (while "
                                               "scanning a quoted scalar at line 1, column 13)"));
    CHECK(load_fails_with("io:\n\tevent_loops: 1\n", ":2:1: YAML syntax error: found character that cannot start "
                                                     "any token"));
    CHECK(load_fails_with("arm: a\nlog: {level: \xff}\n", ":2:14: YAML syntax error: invalid leading UTF-8 octet"));
    CHECK(load_fails_with("arm: a\n---\narm: b\n", ":2:1: only one YAML document is allowed"));
}

static void test_unreadable(void)
{
    echod_config_t cfg;
    char err[1024] = "";
    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, "/nonexistent/echod.yaml", err, sizeof(err)) == -1);
    CHECK(strcmp(err, "cannot read /nonexistent/echod.yaml: No such file or directory") == 0);
    CHECK(echod_config_load_file(&cfg, tmpdir, err, sizeof(err)) == -1);
    CHECK(strstr(err, "cannot read ") == err && strstr(err, ": Is a directory") != NULL);
    CHECK(cfg.source[0] == '\0');
    echod_config_free(&cfg);
}

/* A rejected file or --set must not leave half of itself behind. */
static void test_atomic(void)
{
    echod_config_t cfg, def;
    char err[1024];
    echod_config_init(&cfg);
    echod_config_init(&def);
    CHECK(echod_config_load_file(&cfg,
                                 write_tmp("arm: half\nexecutor: {mode: cached}\n"
                                           "dispatch: {per_method: {/a/b: {mode: fixed}}}\nlog: {level: loud}\n"),
                                 err, sizeof(err)) == -1);
    CHECK(same_dump(&cfg, &def));
    CHECK(cfg.source[0] == '\0');
    CHECK(echod_config_set(&cfg, "dispatch.per_method./a/b.threads=x", err, sizeof(err)) == -1);
    CHECK(echod_config_set(&cfg, "dispatch.per_method./a/b={mode: fixed, threads: x}", err, sizeof(err)) == -1);
    CHECK(echod_config_set(&cfg, "transport={flush: immediate, max_concurrent_streams: 0}", err, sizeof(err)) == -1);
    CHECK(same_dump(&cfg, &def));
    /* The same for the new kinds and the work dictionary. */
    CHECK(echod_config_load_file(&cfg,
                                 write_tmp("listen: {rest: \":9\"}\nwork:\n  defaults: {cpu_us: 5}\n"
                                           "  per_method: {/a/b: {status: 2}, /c/d: {error_rate: 2}}\n"),
                                 err, sizeof(err)) == -1);
    CHECK(same_dump(&cfg, &def));
    CHECK(echod_config_set(&cfg, "work.per_method./a/b.error_rate=.nan", err, sizeof(err)) == -1);
    CHECK(echod_config_set(&cfg, "work.per_method./a/b={response_bytes: 1, status: 99}", err, sizeof(err)) == -1);
    CHECK(echod_config_set(&cfg, "work={defaults: {response_bytes: 7}, per_method: {/a/b: {cpu: 1}}}", err,
                           sizeof(err)) == -1);
    CHECK(cfg.work.per_method_count == 0 && cfg.work.defaults.response_bytes == -1);
    CHECK(same_dump(&cfg, &def));
    echod_config_free(&cfg);
    echod_config_free(&def);
}

static void test_set(void)
{
    echod_config_t cfg;
    char err[1024];
    echod_config_init(&cfg);
    CHECK(set(&cfg, "executor.mode=fixed"));
    CHECK(set(&cfg, "executor.threads=4"));
    CHECK(set(&cfg, "executor.keep_alive=5s"));
    CHECK(set(&cfg, "arm=my arm"));
    CHECK(set(&cfg, "listen.grpc=\"[::1]:50052\""));
    CHECK(set(&cfg, "listen.admin=127.0.0.1:9090"));
    CHECK(set(&cfg, "dispatch.coalesce_end_stream=on"));
    CHECK(set(&cfg, "shutdown.drain_timeout=1500"));
    CHECK(set(&cfg, "transport={flush: read_complete, max_concurrent_streams: 7}"));
    CHECK(set(&cfg, "log.format=json # a YAML comment"));
    CHECK(cfg.executor.mode == ECHOD_EXEC_FIXED && cfg.executor.threads == 4 && cfg.executor.keep_alive_ms == 5000);
    CHECK(strcmp(cfg.arm, "my arm") == 0);
    CHECK(strcmp(cfg.listen.grpc, "[::1]:50052") == 0 && strcmp(cfg.listen.admin, "127.0.0.1:9090") == 0);
    CHECK(cfg.dispatch.coalesce_end_stream);
    CHECK(cfg.shutdown.drain_timeout_ms == 1500);
    /* A mapping value merges into a section: keys it does not name keep their values. */
    CHECK(cfg.transport.flush == ECHOD_FLUSH_READ_COMPLETE && cfg.transport.max_concurrent_streams == 7);
    CHECK(cfg.transport.initial_window_bytes == 1048576);
    CHECK(cfg.log.format == ECHOD_LOG_JSON);
    /* An empty value is null: an empty string for tls. */
    CHECK(set(&cfg, "tls.cert=/c.pem"));
    CHECK(strcmp(cfg.tls.cert, "/c.pem") == 0);
    CHECK(set(&cfg, "tls.cert="));
    CHECK(strcmp(cfg.tls.cert, "") == 0);
    CHECK(cfg.source[0] == '\0');

    /* per_method: a field creates the entry, a mapping replaces it, {} clears them all. */
    CHECK(set(&cfg, "dispatch.per_method./grpc.examples.echo.Echo/UnaryEcho.mode=cached"));
    CHECK(set(&cfg, "dispatch.per_method./grpc.examples.echo.Echo/UnaryEcho.max_threads=8"));
    CHECK(cfg.dispatch.per_method_count == 1);
    CHECK(strcmp(cfg.dispatch.per_method[0].method, "/grpc.examples.echo.Echo/UnaryEcho") == 0);
    CHECK(cfg.dispatch.per_method[0].exec.mode == ECHOD_EXEC_CACHED);
    CHECK(cfg.dispatch.per_method[0].exec.max_threads == 8);
    CHECK(set(&cfg, "dispatch.per_method./grpc.examples.echo.Echo/UnaryEcho={mode: fixed, threads: 2}"));
    CHECK(cfg.dispatch.per_method_count == 1);
    CHECK(cfg.dispatch.per_method[0].exec.mode == ECHOD_EXEC_FIXED && cfg.dispatch.per_method[0].exec.threads == 2);
    CHECK(cfg.dispatch.per_method[0].exec.max_threads == 0);
    CHECK(set(&cfg, "dispatch.per_method./x.Y/Z.threads=3"));
    CHECK(cfg.dispatch.per_method_count == 2);
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    const echod_exec_config_t *z = echod_config_method_exec(&cfg, "/x.Y/Z");
    CHECK(z != NULL && z->mode == ECHOD_EXEC_DIRECT && z->threads == 3);
    CHECK(set(&cfg, "dispatch.per_method={}"));
    CHECK(cfg.dispatch.per_method_count == 0);
    CHECK(set(&cfg, "dispatch.per_method={/a/b: {mode: cached}}"));
    CHECK(cfg.dispatch.per_method_count == 1 && cfg.dispatch.per_method[0].exec.mode == ECHOD_EXEC_CACHED);
    /* --set after a file overrides it. */
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/cached.yaml"), err, sizeof(err)) == 0);
    CHECK(set(&cfg, "executor.mode=workstealing"));
    CHECK(cfg.executor.mode == ECHOD_EXEC_WORKSTEALING && strcmp(cfg.arm, "cached") == 0);
    CHECK(strcmp(cfg.source, SRC("config/arms/cached.yaml")) == 0);
    echod_config_free(&cfg);

    /* Errors: same rules as files, prefixed with --set and the key path, no line numbers. */
    CHECK(set_fails_with("executor.threads=many", "--set executor.threads: expected an integer from 0 to 1024, got "
                                                  "\"many\""));
    CHECK(set_fails_with("executor.stack_bytes=1000",
                         "--set executor.stack_bytes: expected an integer from 16384 to 67108864, got \"1000\""));
    CHECK(set_fails_with(
        "executor.mode=bogus",
        "--set executor.mode: expected one of direct, fixed, cached, workstealing, virtual, got \"bogus\""));
    CHECK(set_fails_with("executor.mode", "--set executor.mode: expected key.path=value"));
    CHECK(set_fails_with("=fixed", "expected key.path=value"));
    CHECK(set_fails_with("executor.moed=fixed", "--set executor.moed: unknown key \"moed\"; valid keys of executor: "
                                                "mode, threads, max_threads, keep_alive"));
    CHECK(set_fails_with("bogus=1", "--set bogus: unknown key \"bogus\"; valid keys at the top level: arm, listen"));
    CHECK(set_fails_with("executor.mode.x=1", "--set executor.mode.x: executor.mode is not a mapping"));
    CHECK(set_fails_with("executor.=1", "--set executor.: unknown key \"\""));
    CHECK(set_fails_with("executor={mode: fixed, thread: 2}", "--set executor.thread: unknown key \"thread\""));
    CHECK(set_fails_with("executor=fixed", "--set executor: expected a mapping, got \"fixed\""));
    CHECK(set_fails_with("io.event_loops=", "--set io.event_loops: expected an integer from 1 to 64, got \"\""));
    CHECK(set_fails_with("io.event_loops=[1]", "--set io.event_loops: expected an integer from 1 to 64, got a "
                                               "sequence"));
    CHECK(set_fails_with("dispatch.coalesce_end_stream=maybe", "--set dispatch.coalesce_end_stream: expected a "
                                                               "boolean"));
    CHECK(set_fails_with("shutdown.drain_timeout=soon", "--set shutdown.drain_timeout: expected a duration"));
    CHECK(set_fails_with("listen.grpc=[::1]:50051", "--set listen.grpc: cannot parse \"[::1]:50051\" as a YAML value"));
    CHECK(set_fails_with("listen.grpc=[::1]:50051", "in double quotes"));
    CHECK(set_fails_with("listen.admin=*:8080", "--set listen.admin: cannot parse \"*:8080\""));
    CHECK(set_fails_with("listen.grpc=nowhere", "--set listen.grpc: expected host:port"));
    CHECK(set_fails_with("dispatch.per_method.UnaryEcho.mode=fixed",
                         "--set dispatch.per_method.UnaryEcho.mode: expected a method path \"/package.Service/Method\" "
                         "after dispatch.per_method., got \"UnaryEcho\""));
    CHECK(set_fails_with("dispatch.per_method./a/b.mood=fixed",
                         "--set dispatch.per_method./a/b.mood: unknown key \"mood\"; valid keys of per_method entry"));
    CHECK(set_fails_with("dispatch.per_method./a/b.mode.x=fixed", "dispatch.per_method./a/b.mode is not a mapping"));
    CHECK(set_fails_with("dispatch.per_method./a/b={mode: slow}", "--set dispatch.per_method./a/b.mode: expected one "
                                                                  "of direct"));
    CHECK(set_fails_with("dispatch.per_method={a: {}}", "--set dispatch.per_method.a: expected a method path"));
}

static void test_finish(void)
{
    echod_config_t cfg;
    char err[1024];

    /* merge_lookup_and_start with per_method: the error names both keys, the file and the reason. */
    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/per-method.yaml"), err, sizeof(err)) == 0);
    CHECK(set(&cfg, "dispatch.merge_lookup_and_start=true"));
    /* named where it was written last: the override */
    CHECK(finish_fails_with(&cfg, "--set: dispatch.merge_lookup_and_start and dispatch.per_method"));
    CHECK(finish_fails_with(&cfg, "method_lookup can switch the call to its per-method executor before start_call"));
    CHECK(finish_fails_with(&cfg, "/grpc.examples.echo.Echo/BidirectionalStreamingEcho"));
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(set(&cfg, "tls.cert=/a.pem"));
    CHECK(finish_fails_with(&cfg, "--set: tls.cert and tls.key: set both"));
    CHECK(finish_fails_with(&cfg, "only tls.cert is set"));
    CHECK(set(&cfg, "tls.key=/b.pem"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    CHECK(set(&cfg, "tls.cert=\"\""));
    CHECK(finish_fails_with(&cfg, "only tls.key is set"));
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(set(&cfg, "listen.admin=\"*:50051\""));
    CHECK(finish_fails_with(&cfg, "listen.grpc and listen.admin: both bind port 50051"));
    CHECK(set(&cfg, "listen={grpc: \"127.0.0.1:1\", admin: \"127.0.0.2:1\"}"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    /* A caller that writes the struct directly still gets the address checked (the key was last
     * written by --set, so that is where the error points). */
    free(cfg.listen.grpc);
    cfg.listen.grpc = strdup("no-port");
    CHECK(finish_fails_with(&cfg, "--set: listen.grpc: expected host:port"));
    echod_config_free(&cfg);

    /* listen.rest, when set, must keep clear of both other listeners, by the same rule. */
    echod_config_init(&cfg);
    CHECK(set(&cfg, "listen.rest=\"*:50051\""));
    CHECK(finish_fails_with(&cfg, "--set: listen.rest and listen.grpc: both bind port 50051 on "
                                  "overlapping addresses (\"*:50051\" and \"0.0.0.0:50051\"); give the REST listener "
                                  "its own port"));
    CHECK(set(&cfg, "listen.rest=127.0.0.1:8080"));
    CHECK(finish_fails_with(&cfg, "listen.rest and listen.admin: both bind port 8080 on overlapping addresses "
                                  "(\"127.0.0.1:8080\" and \"0.0.0.0:8080\")"));
    CHECK(set(&cfg, "listen={grpc: \"127.0.0.1:1\", admin: \"127.0.0.1:2\", rest: \"127.0.0.1:2\"}"));
    CHECK(finish_fails_with(&cfg, "listen.rest and listen.admin: both bind port 2"));
    CHECK(set(&cfg, "listen.rest=\"[::]:1\""));
    CHECK(finish_fails_with(&cfg, "listen.rest and listen.grpc: both bind port 1"));
    CHECK(set(&cfg, "listen.rest=127.0.0.2:1"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    CHECK(set(&cfg, "listen.rest=127.0.0.1:3"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    /* Off never collides, even where the port would. */
    CHECK(set(&cfg, "listen={grpc: \"*:9\", admin: \"*:10\", rest: \"\"}"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    free(cfg.listen.rest);
    cfg.listen.rest = strdup("nowhere");
    CHECK(finish_fails_with(&cfg, "--set: listen.rest: expected host:port with port 1..65535"));
    CHECK(finish_fails_with(&cfg, "or \"\" for no REST listener, got \"nowhere\""));
    echod_config_free(&cfg);

    /* Work caps: defaults and every per_method entry, the message names the key and the cap. */
    echod_config_init(&cfg);
    CHECK(set(&cfg, "work.defaults.cpu_us=10000000") && set(&cfg, "work.defaults.sleep_us=10000000"));
    CHECK(set(&cfg, "work.defaults.response_bytes=4194304"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    CHECK(set(&cfg, "work.defaults.cpu_us=10000001"));
    CHECK(finish_fails_with(&cfg, "--set: work.defaults.cpu_us: 10000001 us is more than work.max_cpu "
                                  "allows (10s = 10000000 us); raise work.max_cpu or lower the value"));
    CHECK(set(&cfg, "work.max_cpu=11s"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    CHECK(set(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.sleep_us=10000001"));
    CHECK(finish_fails_with(&cfg, "--set: work.per_method./grpc.examples.echo.Echo/UnaryEcho.sleep_us: "
                                  "10000001 us is more than work.max_sleep allows (10s = 10000000 us); raise "
                                  "work.max_sleep or lower the value"));
    CHECK(set(&cfg, "work.max_sleep=1500ms"));
    CHECK(finish_fails_with(&cfg, "work.defaults.sleep_us: 10000000 us is more than work.max_sleep allows (1500ms = "
                                  "1500000 us)"));
    CHECK(set(&cfg, "work.max_sleep=60m"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    CHECK(set(&cfg, "work.max_response_bytes=4194303"));
    CHECK(finish_fails_with(&cfg, "--set: work.defaults.response_bytes: 4194304 is outside -1..4194303, "
                                  "where the top is work.max_response_bytes"));
    CHECK(set(&cfg, "work.max_response_bytes=0") && set(&cfg, "work.defaults.response_bytes=-1"));
    CHECK(set(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.response_bytes=1"));
    CHECK(finish_fails_with(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.response_bytes: 1 is outside "
                                  "-1..0"));
    CHECK(set(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.response_bytes=0"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    /* A zero cap allows only zero. The entry took cpu_us 10000001 from the defaults when it was made. */
    CHECK(set(&cfg, "work.max_cpu=0"));
    CHECK(finish_fails_with(&cfg, "work.defaults.cpu_us: 10000001 us is more than work.max_cpu allows (0ms = 0 us)"));
    CHECK(set(&cfg, "work.defaults.cpu_us=0"));
    CHECK(finish_fails_with(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.cpu_us: 10000001 us is more "
                                  "than work.max_cpu allows (0ms = 0 us)"));
    CHECK(set(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.cpu_us=0"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    /* What a caller writes into the struct directly is checked too. */
    cfg.work.defaults.error_rate = 0.0 / 0.0;
    CHECK(finish_fails_with(&cfg, "work.defaults.error_rate: expected a number from 0.0 to 1.0"));
    cfg.work.defaults.error_rate = 1.5;
    CHECK(finish_fails_with(&cfg, "work.defaults.error_rate: expected a number from 0.0 to 1.0, got 1.5"));
    cfg.work.defaults.error_rate = 0.0;
    cfg.work.per_method[0].work.status = 17;
    CHECK(finish_fails_with(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.status: expected a gRPC status "
                                  "code from 0 to 16, got 17"));
    cfg.work.per_method[0].work.status = 0;
    cfg.work.defaults.response_bytes = -2;
    CHECK(finish_fails_with(&cfg, "work.defaults.response_bytes: -2 is outside -1..0"));
    cfg.work.defaults.response_bytes = -1;
    cfg.work.per_method[0].method[0] = 'x';
    CHECK(finish_fails_with(&cfg, "(built-in defaults): work.per_method: expected a method path "
                                  "\"/package.Service/Method\" as key, got \"xgrpc.examples.echo.Echo/UnaryEcho\""));
    echod_config_free(&cfg);

    /* A file's caps error names the file, and the line and column of the value. */
    echod_config_init(&cfg);
    const char *capped = write_tmp("work: {max_cpu: 1ms, per_method: {/a/b: {cpu_us: 1001}}}\n");
    CHECK(echod_config_load_file(&cfg, capped, err, sizeof(err)) == 0);
    char want[512];
    snprintf(want, sizeof(want),
             "%s:1:50: work.per_method./a/b.cpu_us: 1001 us is more than work.max_cpu allows (1ms = "
             "1000 us)",
             capped);
    CHECK(finish_fails_with(&cfg, want));
    echod_config_free(&cfg);

    /*
     * Every error found only once the whole config is known points at a line, as load errors do:
     * at the value, at the entry for a field it inherits, at the key written last of two, and at
     * --set when an override wrote it; a key nobody wrote falls back to the file's name.
     */
    echod_config_init(&cfg);
    const char *lines = write_tmp("work:\n"
                                  "  max_sleep: 10ms\n"
                                  "  defaults:\n"
                                  "    sleep_us: 20000\n"
                                  "listen:\n"
                                  "  grpc: \"127.0.0.1:9000\"\n"
                                  "  admin: \"*:9000\"\n"
                                  "tls:\n"
                                  "  key: /k.pem\n");
    CHECK(echod_config_load_file(&cfg, lines, err, sizeof(err)) == 0);
    snprintf(want, sizeof(want), "%s:9:8: tls.cert and tls.key: set both", lines);
    CHECK(finish_fails_with(&cfg, want));
    CHECK(set(&cfg, "tls.key=\"\""));
    snprintf(want, sizeof(want), "%s:7:10: listen.grpc and listen.admin: both bind port 9000", lines);
    CHECK(finish_fails_with(&cfg, want));
    CHECK(set(&cfg, "listen.admin=\"*:9001\""));
    snprintf(want, sizeof(want), "%s:4:15: work.defaults.sleep_us: 20000 us is more than work.max_sleep", lines);
    CHECK(finish_fails_with(&cfg, want));
    CHECK(set(&cfg, "work.defaults.sleep_us=0"));
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    CHECK(set(&cfg, "listen.rest=\"127.0.0.1:9001\""));
    CHECK(finish_fails_with(&cfg, "--set: listen.rest and listen.admin: both bind port 9001"));
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    const char *entry = write_tmp("work:\n"
                                  "  per_method:\n"
                                  "    /grpc.examples.echo.Echo/UnaryEcho:\n"
                                  "      cpu_us: 1\n"
                                  "  max_sleep: 1ms\n");
    CHECK(echod_config_load_file(&cfg, entry, err, sizeof(err)) == 0);
    CHECK(echod_config_finish(&cfg, err, sizeof(err)) == 0);
    /* the entry inherits work.defaults.sleep_us: the error points at the entry */
    cfg.work.per_method[0].work.sleep_us = 2000;
    snprintf(want, sizeof(want), "%s:3:5: work.per_method./grpc.examples.echo.Echo/UnaryEcho.sleep_us", entry);
    CHECK(finish_fails_with(&cfg, want));
    char at[320];
    snprintf(want, sizeof(want), "%s:4:15", entry);
    CHECK(strcmp(echod_config_where(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.cpu_us", at, sizeof(at)),
                 want) == 0);
    CHECK(strcmp(echod_config_where(&cfg, "transport.flush", at, sizeof(at)), entry) == 0);
    CHECK(set(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.cpu_us=2"));
    CHECK(strcmp(echod_config_where(&cfg, "work.per_method./grpc.examples.echo.Echo/UnaryEcho.cpu_us", at, sizeof(at)),
                 "--set") == 0);
    CHECK(set(&cfg, "dispatch.per_method./a/b.threads=2"));
    CHECK(strcmp(echod_config_where(&cfg, "dispatch.per_method./a/b", at, sizeof(at)), "--set") == 0);
    echod_config_free(&cfg);
    echod_config_init(&cfg);
    CHECK(strcmp(echod_config_where(&cfg, "listen.grpc", at, sizeof(at)), "(built-in defaults)") == 0);
    echod_config_free(&cfg);

    /* The digest follows the effective config, not the order entries were given in. */
    echod_config_t a, b;
    echod_config_init(&a);
    echod_config_init(&b);
    CHECK(set(&a, "dispatch.per_method./a/b.threads=1") && set(&a, "dispatch.per_method./c/d.threads=2"));
    CHECK(set(&b, "dispatch.per_method./c/d.threads=2") && set(&b, "dispatch.per_method./a/b.threads=1"));
    CHECK(set(&a, "work.per_method./a/b.cpu_us=1") && set(&a, "work.per_method./c/d.cpu_us=2"));
    CHECK(set(&b, "work.per_method./c/d.cpu_us=2") && set(&b, "work.per_method./a/b.cpu_us=1"));
    CHECK(echod_config_finish(&a, err, sizeof(err)) == 0 && echod_config_finish(&b, err, sizeof(err)) == 0);
    CHECK(strcmp(a.sha256, b.sha256) == 0);
    CHECK(set(&b, "dispatch.per_method./c/d.threads=3"));
    CHECK(b.sha256[0] == '\0');
    CHECK(echod_config_finish(&b, err, sizeof(err)) == 0);
    CHECK(strlen(b.sha256) == 64 && strcmp(a.sha256, b.sha256) != 0);
    /* Every new key is in the digest, floats to the last bit. */
    CHECK(set(&b, "dispatch.per_method./c/d.threads=2"));
    CHECK(echod_config_finish(&b, err, sizeof(err)) == 0 && strcmp(a.sha256, b.sha256) == 0);
    const char *changes[] = {"listen.rest=:9",
                             "transport.max_header_list_bytes=2048",
                             "transport.max_resets_per_second=0",
                             "transport.handshake_timeout=0",
                             "transport.idle_timeout=1",
                             "transport.max_connection_age=1",
                             "transport.max_connection_age_grace=1",
                             "limits.max_calls_in_flight=1",
                             "limits.max_connections=1",
                             "work.allow_metadata_overrides=false",
                             "work.max_cpu=1",
                             "work.max_sleep=1",
                             "work.max_response_bytes=1",
                             "work.defaults.response_bytes=0",
                             "work.defaults.status=1",
                             "work.defaults.error_rate=0.1",
                             "work.defaults.echo_metadata=true",
                             "work.per_method./c/d.sleep_us=1",
                             "telemetry.timing_trailer=false",
                             "shutdown.announce=1"};
    for (size_t i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
        echod_config_t c;
        echod_config_init(&c);
        CHECK(echod_config_load_file(&c, write_tmp(dump_str_tmp(&a)), err, sizeof(err)) == 0);
        CHECK(set(&c, changes[i]));
        CHECK(echod_config_finish(&c, err, sizeof(err)) == 0);
        if (strcmp(c.sha256, a.sha256) == 0)
            fprintf(stderr, "digest unchanged by %s\n", changes[i]);
        CHECK(strlen(c.sha256) == 64 && strcmp(c.sha256, a.sha256) != 0);
        echod_config_free(&c);
    }
    CHECK(set(&a, "work.defaults.error_rate=0.1") && set(&b, "work.defaults.error_rate=0.10000000000000002"));
    CHECK(echod_config_finish(&a, err, sizeof(err)) == 0 && echod_config_finish(&b, err, sizeof(err)) == 0);
    CHECK(strcmp(a.sha256, b.sha256) != 0);
    echod_config_free(&a);
    echod_config_free(&b);
}

/* dump -> load gives the same config, for the defaults, every arm, and a config with every key changed. */
static void test_round_trip(void)
{
    echod_config_t a, b;
    char err[1024];
    echod_config_init(&a);
    const char *sets[] = {"arm=\"odd \\\"name\\\" \\\\ x\"",
                          "listen.grpc=\"[::1]:1\"",
                          "listen.admin=:2",
                          "tls.cert=/etc/echod/cert.pem",
                          "tls.key=\"/etc/echod/key with space.pem\"",
                          "io.event_loops=3",
                          "transport={max_concurrent_streams: 5, max_receive_message_bytes: 6, "
                          "initial_window_bytes: 70000, max_send_buffer_bytes: 2048, flush: immediate}",
                          "executor={mode: workstealing, threads: 7, max_threads: 9, keep_alive: 1250}",
                          "dispatch.serialize=always",
                          "dispatch.coalesce_end_stream=true",
                          "dispatch.per_method./grpc.examples.echo.Echo/ServerStreamingEcho={mode: cached, "
                          "max_threads: 3, keep_alive: 2m}",
                          "dispatch.per_method./grpc.examples.echo.Echo/BidirectionalStreamingEcho.mode=fixed",
                          "echo.server_streaming_count=3",
                          "shutdown.drain_timeout=0",
                          "log={level: debug, format: json}",
                          "listen.rest=\"[::1]:3\"",
                          "transport={max_header_list_bytes: 1024, max_resets_per_second: 0, handshake_timeout: 0, "
                          "idle_timeout: 90s, max_connection_age: 1500, max_connection_age_grace: 2m}",
                          "limits={max_calls_in_flight: 12, max_connections: 13}",
                          "work={allow_metadata_overrides: off, max_cpu: 60m, max_sleep: 1, max_response_bytes: 99}",
                          "work.defaults={response_bytes: 99, cpu_us: 3600000000, sleep_us: 1000, status: 16, "
                          "error_rate: 0.1, echo_metadata: true}",
                          "work.per_method./grpc.examples.echo.Echo/UnaryEcho={response_bytes: -1, error_rate: 1e-5}",
                          "work.per_method./grpc.examples.echo.Echo/ServerStreamingEcho.error_rate=0.30000000000000004",
                          "work.per_method./a.B/C={error_rate: 0.3333333333333333, status: 0, cpu_us: 0}",
                          "work.per_method./a.B/D={error_rate: 1}",
                          "telemetry.timing_trailer=no",
                          "shutdown.announce=1001"};
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++)
        CHECK(set(&a, sets[i]));
    CHECK(strcmp(a.arm, "odd \"name\" \\ x") == 0);
    CHECK(echod_config_finish(&a, err, sizeof(err)) == 0);

    char *text = dump_str(&a);
    echod_config_init(&b);
    CHECK(echod_config_load_file(&b, write_tmp(text), err, sizeof(err)) == 0);
    CHECK(echod_config_finish(&b, err, sizeof(err)) == 0);
    CHECK(same_dump(&a, &b));
    CHECK(strcmp(a.sha256, b.sha256) == 0);
    CHECK(b.executor.keep_alive_ms == 1250 && b.shutdown.drain_timeout_ms == 0);
    CHECK(b.dispatch.per_method_count == 2);
    CHECK(strcmp(b.listen.rest, "[::1]:3") == 0);
    CHECK(b.transport.max_header_list_bytes == 1024 && b.transport.max_resets_per_second == 0);
    CHECK(b.transport.handshake_timeout_ms == 0 && b.transport.idle_timeout_ms == 90000);
    CHECK(b.transport.max_connection_age_ms == 1500 && b.transport.max_connection_age_grace_ms == 120000);
    CHECK(b.limits.max_calls_in_flight == 12 && b.limits.max_connections == 13);
    CHECK(!b.work.allow_metadata_overrides && b.work.max_cpu_ms == 3600000 && b.work.max_sleep_ms == 1);
    CHECK(b.work.max_response_bytes == 99 && b.work.defaults.response_bytes == 99);
    CHECK(b.work.defaults.cpu_us == 3600000000u && b.work.defaults.sleep_us == 1000 && b.work.defaults.status == 16);
    CHECK(b.work.defaults.error_rate == 0.1 && b.work.defaults.echo_metadata);
    CHECK(!b.telemetry.timing_trailer && b.shutdown.announce_ms == 1001);
    CHECK(b.work.per_method_count == 4);
    for (size_t i = 0; i < b.work.per_method_count && i < a.work.per_method_count; i++) {
        CHECK(strcmp(a.work.per_method[i].method, b.work.per_method[i].method) == 0);
        CHECK(memcmp(&a.work.per_method[i].work.error_rate, &b.work.per_method[i].work.error_rate, sizeof(double)) ==
              0);
    }
    CHECK(echod_config_method_work(&b, "/grpc.examples.echo.Echo/UnaryEcho")->error_rate == 1e-5);
    CHECK(echod_config_method_work(&b, "/grpc.examples.echo.Echo/UnaryEcho")->response_bytes == -1);
    CHECK(echod_config_method_work(&b, "/grpc.examples.echo.Echo/UnaryEcho")->cpu_us == 3600000000u);
    CHECK(echod_config_method_work(&b, "/grpc.examples.echo.Echo/ServerStreamingEcho")->error_rate ==
          0.30000000000000004);
    CHECK(echod_config_method_work(&b, "/a.B/C")->error_rate == 1.0 / 3.0);
    /* Floats: the shortest text that reads back exactly, always with a '.' (a float to YAML 1.1 too). */
    CHECK(strstr(text, "    error_rate: 0.1\n") != NULL);
    CHECK(strstr(text, "      error_rate: 1.0e-05\n") != NULL);
    CHECK(strstr(text, "      error_rate: 0.30000000000000004\n") != NULL);
    CHECK(strstr(text, "      error_rate: 0.3333333333333333\n") != NULL);
    CHECK(strstr(text, "      error_rate: 1.0\n") != NULL);
    CHECK(strstr(text, "    response_bytes: -1\n") != NULL);
    CHECK(strstr(text, "  rest: \"[::1]:3\"\n") != NULL);
    /* Fully explicit: every key is written, including defaults. */
    CHECK(strstr(text, "  coalesce_end_stream: true\n") != NULL);
    CHECK(strstr(text, "  merge_lookup_and_start: false\n") != NULL);
    CHECK(strstr(text, "      keep_alive: 2m") == NULL && strstr(text, "      keep_alive: 120s\n") != NULL);
    free(text);
    echod_config_free(&a);
    echod_config_free(&b);

    echod_config_init(&a);
    text = dump_str(&a);
    CHECK(strstr(text, "per_method: {}\n") != NULL);
    CHECK(strstr(text, "keep_alive: 60s\n") != NULL && strstr(text, "drain_timeout: 10s\n") != NULL);
    CHECK(strstr(text, "  rest: \"\"\n") != NULL && strstr(text, "    error_rate: 0.0\n") != NULL);
    CHECK(strstr(text, "  idle_timeout: 0ms\n") != NULL && strstr(text, "  handshake_timeout: 10s\n") != NULL);
    echod_config_init(&b);
    CHECK(echod_config_load_file(&b, write_tmp(text), err, sizeof(err)) == 0);
    CHECK(same_dump(&a, &b));
    free(text);
    echod_config_free(&a);
    echod_config_free(&b);

    /* Any ratio survives dump -> load bit for bit: awkward values, then a pseudo-random spread. */
    double values[600];
    size_t n = 0;
    const double fixed[] = {0.0,     1.0,
                            0.5,     0.1,
                            0.2,     0.7,
                            1e-300,  4.9406564584124654e-324,
                            1e-17,   0.9999999999999999,
                            1.0 / 3, 2.0 / 3,
                            1.0 / 7, 0.123456789012345678};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        values[n++] = fixed[i];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    while (n < sizeof(values) / sizeof(values[0])) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v = (double)(x >> 11) / 9007199254740992.0; /* [0, 1) with all 53 bits */
        if (n % 3 == 1)
            v /= 1e6; /* small rates, as used for rare failures */
        values[n++] = v;
    }
    int exact = 1;
    for (size_t i = 0; i < n; i++) {
        char assignment[96];
        snprintf(assignment, sizeof(assignment), "work.defaults.error_rate=%.17g", values[i]);
        echod_config_init(&a);
        echod_config_init(&b);
        if (!set(&a, assignment) || a.work.defaults.error_rate != values[i]) {
            exact = 0;
            fprintf(stderr, "%s did not read back exactly\n", assignment);
        }
        text = dump_str(&a);
        if (echod_config_load_file(&b, write_tmp(text), err, sizeof(err)) != 0 ||
            memcmp(&a.work.defaults.error_rate, &b.work.defaults.error_rate, sizeof(double)) != 0) {
            exact = 0;
            fprintf(stderr, "%.17g did not survive dump -> load: %s\n", values[i], err);
        }
        free(text);
        echod_config_free(&a);
        echod_config_free(&b);
    }
    CHECK(exact);
}

int main(void)
{
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_defaults();
    test_arms();
    test_values();
    test_durations();
    test_hostport();
    test_file_errors();
    test_unreadable();
    test_atomic();
    test_service_keys();
    test_int_and_ratio();
    test_work();
    test_work_model();
    test_set();
    test_finish();
    test_round_trip();

    for (int i = 0; i < tmp_seq; i++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/c%d.yaml", tmpdir, i);
        unlink(path);
    }
    rmdir(tmpdir);
    return check_done();
}
