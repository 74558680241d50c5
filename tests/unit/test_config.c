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
    CHECK(strcmp(def.tls.cert, "") == 0 && strcmp(def.tls.key, "") == 0);
    CHECK(def.io.event_loops == 1);
    CHECK(def.transport.max_concurrent_streams == 1000);
    CHECK(def.transport.max_receive_message_bytes == 4194304);
    CHECK(def.transport.initial_window_bytes == 1048576);
    CHECK(def.transport.max_send_buffer_bytes == 32768);
    CHECK(def.transport.flush == ECHOD_FLUSH_LOOP_TAIL);
    CHECK(def.executor.mode == ECHOD_EXEC_DIRECT && def.executor.threads == 0 && def.executor.max_threads == 0);
    CHECK(def.executor.keep_alive_ms == 60000);
    CHECK(def.dispatch.serialize == ECHOD_SERIALIZE_AUTO);
    CHECK(!def.dispatch.merge_lookup_and_start && !def.dispatch.coalesce_end_stream);
    CHECK(def.dispatch.per_method_count == 0 && def.dispatch.per_method == NULL);
    CHECK(def.echo.server_streaming_count == 10);
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
        echod_config_free(&cfg);
        n++;
    }
    closedir(d);
    CHECK(n == 10);

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
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/direct-serialized.yaml"), err, sizeof(err)) == 0);
    CHECK(cfg.dispatch.serialize == ECHOD_SERIALIZE_ALWAYS && cfg.executor.mode == ECHOD_EXEC_DIRECT);
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(echod_config_load_file(&cfg, SRC("config/arms/direct-drain.yaml"), err, sizeof(err)) == 0);
    CHECK(cfg.transport.flush == ECHOD_FLUSH_READ_COMPLETE);
    echod_config_free(&cfg);
}

static void test_values(void)
{
    echod_config_t cfg;
    CHECK(load_ok("arm: x\n"
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
                  "dispatch: {serialize: always, merge_lookup_and_start: yes, coalesce_end_stream: On}\n"
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
    for (int m = ECHOD_EXEC_DIRECT; m <= ECHOD_EXEC_WORKSTEALING; m++) {
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
    CHECK(strcmp(echod_exec_mode_name((echod_exec_mode_t)42), "unknown") == 0);

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
                                      "io, transport, executor, dispatch, echo, shutdown, log"));
    CHECK(load_fails_with("transport:\n  flush: immediate\n  foo: 1\n",
                          ":3:3: transport.foo: unknown key \"foo\"; valid keys of transport: max_concurrent_streams, "
                          "max_receive_message_bytes, initial_window_bytes, max_send_buffer_bytes, flush"));
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
                                                           "cached, workstealing, got \"forkjoin\""));
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
    CHECK(set_fails_with("executor.mode=bogus",
                         "--set executor.mode: expected one of direct, fixed, cached, workstealing, got \"bogus\""));
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
    CHECK(finish_fails_with(&cfg, SRC("config/arms/per-method.yaml") ": dispatch.merge_lookup_and_start and "
                                                                     "dispatch.per_method"));
    CHECK(finish_fails_with(&cfg, "method_lookup can switch the call to its per-method executor before start_call"));
    CHECK(finish_fails_with(&cfg, "/grpc.examples.echo.Echo/BidirectionalStreamingEcho"));
    echod_config_free(&cfg);

    echod_config_init(&cfg);
    CHECK(set(&cfg, "tls.cert=/a.pem"));
    CHECK(finish_fails_with(&cfg, "(built-in defaults): tls.cert and tls.key: set both"));
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
    /* A caller that writes the struct directly still gets the address checked. */
    free(cfg.listen.grpc);
    cfg.listen.grpc = strdup("no-port");
    CHECK(finish_fails_with(&cfg, "(built-in defaults): listen.grpc: expected host:port"));
    echod_config_free(&cfg);

    /* The digest follows the effective config, not the order entries were given in. */
    echod_config_t a, b;
    echod_config_init(&a);
    echod_config_init(&b);
    CHECK(set(&a, "dispatch.per_method./a/b.threads=1") && set(&a, "dispatch.per_method./c/d.threads=2"));
    CHECK(set(&b, "dispatch.per_method./c/d.threads=2") && set(&b, "dispatch.per_method./a/b.threads=1"));
    CHECK(echod_config_finish(&a, err, sizeof(err)) == 0 && echod_config_finish(&b, err, sizeof(err)) == 0);
    CHECK(strcmp(a.sha256, b.sha256) == 0);
    CHECK(set(&b, "dispatch.per_method./c/d.threads=3"));
    CHECK(b.sha256[0] == '\0');
    CHECK(echod_config_finish(&b, err, sizeof(err)) == 0);
    CHECK(strlen(b.sha256) == 64 && strcmp(a.sha256, b.sha256) != 0);
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
                          "log={level: debug, format: json}"};
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
    echod_config_init(&b);
    CHECK(echod_config_load_file(&b, write_tmp(text), err, sizeof(err)) == 0);
    CHECK(same_dump(&a, &b));
    free(text);
    echod_config_free(&a);
    echod_config_free(&b);
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
