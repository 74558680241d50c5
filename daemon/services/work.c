#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "echo.pb-c.h"
#include "dispatch/call.h"
#include "grpc/status.h"
#include "services/work.h"
#include "util/err.h"

static const char *const header_names[] = {
    "echod-response-bytes", "echod-cpu-us", "echod-sleep-us", "echod-status", "echod-error-rate", "echod-echo-metadata",
};

static void set_error(char **error, const char *key, const char *what, const char *value, size_t vlen)
{
    if (*error != NULL)
        return;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s: %s, got \"%.*s\"", key, what, (int)(vlen > 64 ? 64 : vlen), value);
    *error = strdup(buf);
}

static int parse_int(const char *v, size_t len, int64_t min, int64_t max, int64_t *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0' || buf[0] == ' ' || buf[0] == '+' || x < min || x > max)
        return -1;
    *out = x;
    return 0;
}

int echod_work_parse_header(const char *name, size_t nlen, const char *value, size_t vlen, echod_work_t *over,
                            unsigned *set, char **error)
{
    if (nlen < 6 || memcmp(name, "echod-", 6) != 0)
        return 0;
    size_t which;
    for (which = 0; which != sizeof(header_names) / sizeof(header_names[0]); which++)
        if (strlen(header_names[which]) == nlen && memcmp(header_names[which], name, nlen) == 0)
            break;
    if (which == sizeof(header_names) / sizeof(header_names[0]))
        return 0;
    const char *key = header_names[which];
    int64_t x;
    switch (which) {
    case ECHOD_WORK_RESPONSE_BYTES:
        if (parse_int(value, vlen, 0, INT32_MAX, &x) != 0)
            return set_error(error, key, "expected a byte count from 0", value, vlen), 1;
        over->response_bytes = x;
        break;
    case ECHOD_WORK_CPU_US:
    case ECHOD_WORK_SLEEP_US:
        if (parse_int(value, vlen, 0, UINT32_MAX, &x) != 0)
            return set_error(error, key, "expected microseconds, an integer from 0", value, vlen), 1;
        if (which == ECHOD_WORK_CPU_US)
            over->cpu_us = (uint32_t)x;
        else
            over->sleep_us = (uint32_t)x;
        break;
    case ECHOD_WORK_STATUS:
        if (parse_int(value, vlen, 0, 16, &x) != 0)
            return set_error(error, key, "expected a gRPC status code from 0 to 16", value, vlen), 1;
        over->status = (uint32_t)x;
        break;
    case ECHOD_WORK_ERROR_RATE: {
        char buf[32];
        char *end;
        if (vlen == 0 || vlen >= sizeof(buf))
            return set_error(error, key, "expected a fraction from 0.0 to 1.0", value, vlen), 1;
        memcpy(buf, value, vlen);
        buf[vlen] = '\0';
        double r = strtod(buf, &end);
        if (*end != '\0' || !(r >= 0.0 && r <= 1.0))
            return set_error(error, key, "expected a fraction from 0.0 to 1.0", value, vlen), 1;
        over->error_rate = r;
        break;
    }
    case ECHOD_WORK_ECHO_METADATA:
        if (vlen == 4 && memcmp(value, "true", 4) == 0)
            over->echo_metadata = true;
        else if (vlen == 5 && memcmp(value, "false", 5) == 0)
            over->echo_metadata = false;
        else
            return set_error(error, key, "expected true or false", value, vlen), 1;
        break;
    }
    *set |= 1u << which;
    return 1;
}

void echod_work_resolve(const echod_config_t *cfg, const char *path, const echod_work_t *over, unsigned set,
                        echod_work_t *out, char **error)
{
    *out = *echod_config_method_work(cfg, path);
    if (set == 0 || !cfg->work.allow_metadata_overrides)
        return;
    if (set & (1u << ECHOD_WORK_RESPONSE_BYTES))
        out->response_bytes = over->response_bytes;
    if (set & (1u << ECHOD_WORK_CPU_US))
        out->cpu_us = over->cpu_us;
    if (set & (1u << ECHOD_WORK_SLEEP_US))
        out->sleep_us = over->sleep_us;
    if (set & (1u << ECHOD_WORK_STATUS))
        out->status = over->status;
    if (set & (1u << ECHOD_WORK_ERROR_RATE))
        out->error_rate = over->error_rate;
    if (set & (1u << ECHOD_WORK_ECHO_METADATA))
        out->echo_metadata = over->echo_metadata;

    char buf[160];
    if ((uint64_t)out->cpu_us > cfg->work.max_cpu_ms * 1000) {
        snprintf(buf, sizeof(buf), "echod-cpu-us: %u is above the cap work.max_cpu (%llu ms)", out->cpu_us,
                 (unsigned long long)cfg->work.max_cpu_ms);
    } else if ((uint64_t)out->sleep_us > cfg->work.max_sleep_ms * 1000) {
        snprintf(buf, sizeof(buf), "echod-sleep-us: %u is above the cap work.max_sleep (%llu ms)", out->sleep_us,
                 (unsigned long long)cfg->work.max_sleep_ms);
    } else if (out->response_bytes > (int64_t)cfg->work.max_response_bytes) {
        snprintf(buf, sizeof(buf), "echod-response-bytes: %lld is above the cap work.max_response_bytes (%u)",
                 (long long)out->response_bytes, cfg->work.max_response_bytes);
    } else {
        return;
    }
    if (*error == NULL)
        *error = strdup(buf);
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Measured against the thread's own CPU clock, so time spent preempted does not count: the
 * handler costs `us` of CPU whatever else the machine does. The clock is read every ~2 us. */
void echod_work_burn_cpu(uint32_t us)
{
    if (us == 0)
        return;
    uint64_t until = thread_cpu_ns() + (uint64_t)us * 1000;
    volatile uint64_t sink = 0;
    do {
        for (int i = 0; i < 500; i++)
            sink += (uint64_t)i * 2654435761u;
    } while (thread_cpu_ns() < until);
    (void)sink;
}

/* xorshift per thread: error_rate only needs a fair coin, not a shared generator. */
static double next_fraction(void)
{
    static __thread uint64_t state;
    if (state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)(uintptr_t)&state ^ 0x9E3779B97F4A7C15ull;
    }
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (double)(state >> 11) / (double)(1ull << 53);
}

int echod_work_run(echod_call_t *call, const echod_work_t *work)
{
    echod_work_burn_cpu(work->cpu_us);
    echod_call_sleep(call, work->sleep_us);
    if (work->error_rate > 0.0)
        return next_fraction() < work->error_rate ? (work->status != 0 ? (int)work->status : ECHOD_INTERNAL) : 0;
    return (int)work->status;
}

echod_msg_t *echod_work_reshape_echo(echod_msg_t *req, int64_t response_bytes)
{
    Grpc__Examples__Echo__EchoRequest *in =
        grpc__examples__echo__echo_request__unpack(NULL, req->len, echod_msg_payload(req));
    echod_msg_free(req);
    size_t want = (size_t)response_bytes, have = in != NULL ? strlen(in->message) : 0;
    char *text = echod_must(malloc(want + 1), "echod-response-bytes response"); /* capped by work.max_response_bytes */
    size_t keep = have < want ? have : want;
    /* never cut a UTF-8 sequence: back up to a lead byte, then pad */
    while (keep > 0 && keep < have && ((unsigned char)in->message[keep] & 0xC0) == 0x80)
        keep--;
    if (keep != 0)
        memcpy(text, in->message, keep);
    memset(text + keep, '.', want - keep);
    text[want] = '\0';
    if (in != NULL)
        grpc__examples__echo__echo_request__free_unpacked(in, NULL);
    Grpc__Examples__Echo__EchoResponse resp = GRPC__EXAMPLES__ECHO__ECHO_RESPONSE__INIT;
    resp.message = text;
    size_t size = grpc__examples__echo__echo_response__get_packed_size(&resp);
    echod_msg_t *out = echod_msg_new((uint32_t)size);
    grpc__examples__echo__echo_response__pack(&resp, echod_msg_payload(out));
    free(text);
    return out;
}
