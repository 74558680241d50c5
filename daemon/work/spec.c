#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "work/spec.h"

static const char *const header_names[ECHOD_WORK__COUNT] = {
    "echod-response-bytes",
    "echod-cpu-us",
    "echod-sleep-us",
    "echod-status",
    "echod-error-rate",
    "echod-echo-metadata",
    "echod-cpu-dist",
    "echod-cpu-stall-fraction",
    "echod-cpu-stall-us",
    "echod-sleep-dist",
    "echod-sleep-stall-fraction",
    "echod-sleep-stall-us",
    "echod-seed",
    "echod-model",
    "echod-model-call-cpu-us",
    "echod-model-step-cpu-us",
    "echod-model-handoff-cpu-us",
    "echod-model-message-cpu-us",
};

_Static_assert(ECHOD_WORK__COUNT <= 32, "every key has a bit of echod_work_over_t.set");

static void set_error(char **error, const char *key, const char *what, const char *value, size_t vlen)
{
    if (*error != NULL)
        return;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s: %s, got \"%.*s\"", key, what, (int)(vlen > 64 ? 64 : vlen), value);
    *error = strdup(buf);
}

/* Decimal digits only: no sign, no blanks, no base prefix. */
static int parse_uint(const char *v, size_t len, uint64_t max, uint64_t *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof(buf) || v[0] < '0' || v[0] > '9')
        return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (errno != 0 || *end != '\0' || x > max)
        return -1;
    *out = x;
    return 0;
}

static int parse_fraction(const char *v, size_t len, double *out)
{
    char buf[32];
    char *end;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    double r = strtod(buf, &end);
    if (*end != '\0' || !(r >= 0.0 && r <= 1.0))
        return -1;
    *out = r;
    return 0;
}

static int parse_bool(const char *v, size_t len, bool *out)
{
    if (len == 4 && memcmp(v, "true", 4) == 0)
        *out = true;
    else if (len == 5 && memcmp(v, "false", 5) == 0)
        *out = false;
    else
        return -1;
    return 0;
}

/* The microsecond keys, by echod-* key; NULL for the others. */
static uint32_t *us_field(echod_work_over_t *over, int which)
{
    switch (which) {
    case ECHOD_WORK_CPU_US:
        return &over->work.cpu_us;
    case ECHOD_WORK_SLEEP_US:
        return &over->work.sleep_us;
    case ECHOD_WORK_CPU_STALL_US:
        return &over->work.cpu_dist.stall_us;
    case ECHOD_WORK_SLEEP_STALL_US:
        return &over->work.sleep_dist.stall_us;
    case ECHOD_WORK_MODEL_CALL:
        return &over->model.call_cpu_us;
    case ECHOD_WORK_MODEL_STEP:
        return &over->model.step_cpu_us;
    case ECHOD_WORK_MODEL_HANDOFF:
        return &over->model.handoff_cpu_us;
    case ECHOD_WORK_MODEL_MESSAGE:
        return &over->model.message_cpu_us;
    }
    return NULL;
}

int echod_work_parse_header(const char *name, size_t nlen, const char *value, size_t vlen, echod_work_over_t *over,
                            char **error)
{
    if (nlen < 6 || memcmp(name, "echod-", 6) != 0)
        return 0;
    int which;
    for (which = 0; which != ECHOD_WORK__COUNT; which++)
        if (strlen(header_names[which]) == nlen && memcmp(header_names[which], name, nlen) == 0)
            break;
    if (which == ECHOD_WORK__COUNT)
        return 0;
    const char *key = header_names[which];
    uint64_t x;
    uint32_t *us = us_field(over, which);
    if (us != NULL) {
        if (parse_uint(value, vlen, UINT32_MAX, &x) != 0)
            return set_error(error, key, "expected microseconds, an integer from 0", value, vlen), 1;
        *us = (uint32_t)x;
        over->set |= 1u << which;
        return 1;
    }
    switch (which) {
    case ECHOD_WORK_RESPONSE_BYTES:
        if (parse_uint(value, vlen, INT32_MAX, &x) != 0)
            return set_error(error, key, "expected a byte count from 0", value, vlen), 1;
        over->work.response_bytes = (int64_t)x;
        break;
    case ECHOD_WORK_STATUS:
        if (parse_uint(value, vlen, 16, &x) != 0)
            return set_error(error, key, "expected a gRPC status code from 0 to 16", value, vlen), 1;
        over->work.status = (uint32_t)x;
        break;
    case ECHOD_WORK_ERROR_RATE:
    case ECHOD_WORK_CPU_STALL_FRACTION:
    case ECHOD_WORK_SLEEP_STALL_FRACTION: {
        double *f = which == ECHOD_WORK_ERROR_RATE           ? &over->work.error_rate
                    : which == ECHOD_WORK_CPU_STALL_FRACTION ? &over->work.cpu_dist.stall_fraction
                                                             : &over->work.sleep_dist.stall_fraction;
        if (parse_fraction(value, vlen, f) != 0)
            return set_error(error, key, "expected a fraction from 0.0 to 1.0", value, vlen), 1;
        break;
    }
    case ECHOD_WORK_ECHO_METADATA:
    case ECHOD_WORK_MODEL:
        if (parse_bool(value, vlen, which == ECHOD_WORK_MODEL ? &over->model.enabled : &over->work.echo_metadata) != 0)
            return set_error(error, key, "expected true or false", value, vlen), 1;
        break;
    case ECHOD_WORK_CPU_DIST:
    case ECHOD_WORK_SLEEP_DIST:
        if (echod_dist_parse(value, vlen,
                             which == ECHOD_WORK_CPU_DIST ? &over->work.cpu_dist.kind : &over->work.sleep_dist.kind) !=
            0)
            return set_error(error, key, "expected constant, exponential or stall", value, vlen), 1;
        break;
    case ECHOD_WORK_SEED:
        if (parse_uint(value, vlen, UINT64_MAX, &over->seed) != 0)
            return set_error(error, key, "expected an integer from 0 to 18446744073709551615", value, vlen), 1;
        break;
    }
    over->set |= 1u << which;
    return 1;
}

static int has(const echod_work_over_t *over, int which)
{
    return (over->set & (1u << which)) != 0;
}

/* The first value above its cap, as an INVALID_ARGUMENT message; 0 when all are within. */
static int check_caps(const echod_config_t *cfg, const echod_work_t *w, const echod_work_model_t *m, char *buf,
                      size_t cap)
{
    const struct {
        int which;
        uint64_t value;
        const char *cap_key;
        uint64_t cap_ms;
    } timed[] = {
        {ECHOD_WORK_CPU_US, w->cpu_us, "work.max_cpu", cfg->work.max_cpu_ms},
        {ECHOD_WORK_SLEEP_US, w->sleep_us, "work.max_sleep", cfg->work.max_sleep_ms},
        {ECHOD_WORK_CPU_STALL_US, w->cpu_dist.stall_us, "work.max_cpu", cfg->work.max_cpu_ms},
        {ECHOD_WORK_SLEEP_STALL_US, w->sleep_dist.stall_us, "work.max_sleep", cfg->work.max_sleep_ms},
        {ECHOD_WORK_MODEL_CALL, m->call_cpu_us, "work.max_cpu", cfg->work.max_cpu_ms},
        {ECHOD_WORK_MODEL_STEP, m->step_cpu_us, "work.max_cpu", cfg->work.max_cpu_ms},
        {ECHOD_WORK_MODEL_HANDOFF, m->handoff_cpu_us, "work.max_cpu", cfg->work.max_cpu_ms},
        {ECHOD_WORK_MODEL_MESSAGE, m->message_cpu_us, "work.max_cpu", cfg->work.max_cpu_ms},
    };
    for (size_t i = 0; i < sizeof(timed) / sizeof(timed[0]); i++) {
        if (timed[i].value > timed[i].cap_ms * 1000) {
            snprintf(buf, cap, "%s: %llu is above the cap %s (%llu ms)", header_names[timed[i].which],
                     (unsigned long long)timed[i].value, timed[i].cap_key, (unsigned long long)timed[i].cap_ms);
            return 1;
        }
    }
    if (w->response_bytes > (int64_t)cfg->work.max_response_bytes) {
        snprintf(buf, cap, "echod-response-bytes: %lld is above the cap work.max_response_bytes (%u)",
                 (long long)w->response_bytes, cfg->work.max_response_bytes);
        return 1;
    }
    return 0;
}

void echod_work_resolve(const echod_config_t *cfg, const char *path, const echod_work_over_t *over, uint64_t seq,
                        int priced, echod_work_spec_t *out, char **error)
{
    echod_work_t *w = &out->work;
    echod_work_model_t m = cfg->work.model;
    *w = *echod_config_method_work(cfg, path);
    int overrides = over->set != 0 && cfg->work.allow_metadata_overrides;
    if (overrides) {
        const echod_work_t *o = &over->work;
        /* by key, not by field: one header changes one field */
        if (has(over, ECHOD_WORK_RESPONSE_BYTES))
            w->response_bytes = o->response_bytes;
        if (has(over, ECHOD_WORK_CPU_US))
            w->cpu_us = o->cpu_us;
        if (has(over, ECHOD_WORK_SLEEP_US))
            w->sleep_us = o->sleep_us;
        if (has(over, ECHOD_WORK_STATUS))
            w->status = o->status;
        if (has(over, ECHOD_WORK_ERROR_RATE))
            w->error_rate = o->error_rate;
        if (has(over, ECHOD_WORK_ECHO_METADATA))
            w->echo_metadata = o->echo_metadata;
        if (has(over, ECHOD_WORK_CPU_DIST))
            w->cpu_dist.kind = o->cpu_dist.kind;
        if (has(over, ECHOD_WORK_CPU_STALL_FRACTION))
            w->cpu_dist.stall_fraction = o->cpu_dist.stall_fraction;
        if (has(over, ECHOD_WORK_CPU_STALL_US))
            w->cpu_dist.stall_us = o->cpu_dist.stall_us;
        if (has(over, ECHOD_WORK_SLEEP_DIST))
            w->sleep_dist.kind = o->sleep_dist.kind;
        if (has(over, ECHOD_WORK_SLEEP_STALL_FRACTION))
            w->sleep_dist.stall_fraction = o->sleep_dist.stall_fraction;
        if (has(over, ECHOD_WORK_SLEEP_STALL_US))
            w->sleep_dist.stall_us = o->sleep_dist.stall_us;
        if (has(over, ECHOD_WORK_MODEL))
            m.enabled = over->model.enabled;
        if (has(over, ECHOD_WORK_MODEL_CALL))
            m.call_cpu_us = over->model.call_cpu_us;
        if (has(over, ECHOD_WORK_MODEL_STEP))
            m.step_cpu_us = over->model.step_cpu_us;
        if (has(over, ECHOD_WORK_MODEL_HANDOFF))
            m.handoff_cpu_us = over->model.handoff_cpu_us;
        if (has(over, ECHOD_WORK_MODEL_MESSAGE))
            m.message_cpu_us = over->model.message_cpu_us;
    }
    int seeded = overrides && has(over, ECHOD_WORK_SEED);
    echod_draws_init(&out->draws, cfg->work.seed, seeded ? over->seed : seq, seeded);
    char buf[160];
    if (overrides && check_caps(cfg, w, &m, buf, sizeof(buf))) {
        if (*error == NULL)
            *error = strdup(buf);
        m = cfg->work.model; /* the call fails in start_call, priced as the server prices calls */
    }
    m.enabled = m.enabled && priced;
    echod_model_init(&out->model, &m);
}
