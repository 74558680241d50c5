#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "work/spec.h"
#include "util/err.h"

/* How a key's value reads, and where it goes in an echod_work_over_t (and, resolved, in its copy). */
typedef enum { K_BYTES, K_US, K_STATUS, K_FRACTION, K_BOOL, K_DIST, K_SEED } key_kind_t;
typedef enum { CAP_NONE = 0, CAP_CPU, CAP_SLEEP } key_cap_t;

#define AT(member) offsetof(echod_work_over_t, member), sizeof(((echod_work_over_t *)0)->member)

static const struct {
    const char *name;
    key_kind_t kind;
    size_t offset, size;
    key_cap_t cap; /* K_US: the work cap it is under */
} keys[ECHOD_WORK__COUNT] = {
    [ECHOD_WORK_RESPONSE_BYTES] = {"echod-response-bytes", K_BYTES, AT(work.response_bytes), CAP_NONE},
    [ECHOD_WORK_CPU_US] = {"echod-cpu-us", K_US, AT(work.cpu_us), CAP_CPU},
    [ECHOD_WORK_SLEEP_US] = {"echod-sleep-us", K_US, AT(work.sleep_us), CAP_SLEEP},
    [ECHOD_WORK_STATUS] = {"echod-status", K_STATUS, AT(work.status), CAP_NONE},
    [ECHOD_WORK_ERROR_RATE] = {"echod-error-rate", K_FRACTION, AT(work.error_rate), CAP_NONE},
    [ECHOD_WORK_ECHO_METADATA] = {"echod-echo-metadata", K_BOOL, AT(work.echo_metadata), CAP_NONE},
    [ECHOD_WORK_CPU_DIST] = {"echod-cpu-dist", K_DIST, AT(work.cpu_dist.kind), CAP_NONE},
    [ECHOD_WORK_CPU_STALL_FRACTION] = {"echod-cpu-stall-fraction", K_FRACTION, AT(work.cpu_dist.stall_fraction),
                                       CAP_NONE},
    [ECHOD_WORK_CPU_STALL_US] = {"echod-cpu-stall-us", K_US, AT(work.cpu_dist.stall_us), CAP_CPU},
    [ECHOD_WORK_SLEEP_DIST] = {"echod-sleep-dist", K_DIST, AT(work.sleep_dist.kind), CAP_NONE},
    [ECHOD_WORK_SLEEP_STALL_FRACTION] = {"echod-sleep-stall-fraction", K_FRACTION, AT(work.sleep_dist.stall_fraction),
                                         CAP_NONE},
    [ECHOD_WORK_SLEEP_STALL_US] = {"echod-sleep-stall-us", K_US, AT(work.sleep_dist.stall_us), CAP_SLEEP},
    [ECHOD_WORK_SEED] = {"echod-seed", K_SEED, AT(seed), CAP_NONE},
    [ECHOD_WORK_MODEL] = {"echod-model", K_BOOL, AT(model.enabled), CAP_NONE},
    [ECHOD_WORK_MODEL_CALL] = {"echod-model-call-cpu-us", K_US, AT(model.call_cpu_us), CAP_CPU},
    [ECHOD_WORK_MODEL_STEP] = {"echod-model-step-cpu-us", K_US, AT(model.step_cpu_us), CAP_CPU},
    [ECHOD_WORK_MODEL_HANDOFF] = {"echod-model-handoff-cpu-us", K_US, AT(model.handoff_cpu_us), CAP_CPU},
    [ECHOD_WORK_MODEL_HANDOFF_WAKE] = {"echod-model-handoff-wake-cpu-us", K_US, AT(model.handoff_wake_cpu_us), CAP_CPU},
    [ECHOD_WORK_MODEL_MESSAGE] = {"echod-model-message-cpu-us", K_US, AT(model.message_cpu_us), CAP_CPU},
};

_Static_assert(ECHOD_WORK__COUNT <= 32, "every key has a bit of echod_work_over_t.set");

static void set_error(char **error, const char *key, const char *what, const char *value, size_t vlen)
{
    if (*error != NULL)
        return;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s: %s, got \"%.*s\"", key, what, (int)(vlen > 64 ? 64 : vlen), value);
    *error = echod_must(strdup(buf), "echod-* header error");
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

/* Parses one key's value into its field (`field` points into an echod_work_over_t); 0 or the error. */
static const char *parse_value(key_kind_t kind, const char *value, size_t vlen, void *field)
{
    uint64_t x;
    switch (kind) {
    case K_BYTES:
        if (parse_uint(value, vlen, INT32_MAX, &x) != 0)
            return "expected a byte count from 0";
        *(int64_t *)field = (int64_t)x;
        return NULL;
    case K_US:
        if (parse_uint(value, vlen, UINT32_MAX, &x) != 0)
            return "expected microseconds, an integer from 0";
        *(uint32_t *)field = (uint32_t)x;
        return NULL;
    case K_STATUS:
        if (parse_uint(value, vlen, 16, &x) != 0)
            return "expected a gRPC status code from 0 to 16";
        *(uint32_t *)field = (uint32_t)x;
        return NULL;
    case K_FRACTION:
        return parse_fraction(value, vlen, field) != 0 ? "expected a fraction from 0.0 to 1.0" : NULL;
    case K_BOOL:
        return parse_bool(value, vlen, field) != 0 ? "expected true or false" : NULL;
    case K_DIST:
        return echod_dist_parse(value, vlen, field) != 0 ? "expected constant, exponential or stall" : NULL;
    case K_SEED:
        return parse_uint(value, vlen, UINT64_MAX, field) != 0 ? "expected an integer from 0 to 18446744073709551615"
                                                               : NULL;
    }
    return "unknown key";
}

int echod_work_parse_header(const char *name, size_t nlen, const char *value, size_t vlen, echod_work_over_t *over,
                            char **error)
{
    if (nlen < 6 || memcmp(name, "echod-", 6) != 0)
        return 0;
    int which;
    for (which = 0; which != ECHOD_WORK__COUNT; which++)
        if (strlen(keys[which].name) == nlen && memcmp(keys[which].name, name, nlen) == 0)
            break;
    if (which == ECHOD_WORK__COUNT)
        return 0;
    const char *bad = parse_value(keys[which].kind, value, vlen, (char *)over + keys[which].offset);
    if (bad != NULL)
        set_error(error, keys[which].name, bad, value, vlen);
    else
        over->set |= 1u << which;
    return 1;
}

/* The first value above its cap, as an INVALID_ARGUMENT message in buf; 0 when all are within. */
static int check_caps(const echod_config_t *cfg, const echod_work_over_t *r, char *buf, size_t cap)
{
    for (int k = 0; k != ECHOD_WORK__COUNT; k++) {
        if (keys[k].kind != K_US || keys[k].cap == CAP_NONE)
            continue;
        uint32_t us;
        memcpy(&us, (const char *)r + keys[k].offset, sizeof(us));
        uint64_t cap_ms = keys[k].cap == CAP_CPU ? cfg->work.max_cpu_ms : cfg->work.max_sleep_ms;
        if (us > cap_ms * 1000) {
            snprintf(buf, cap, "%s: %u is above the cap %s (%llu ms)", keys[k].name, us,
                     keys[k].cap == CAP_CPU ? "work.max_cpu" : "work.max_sleep", (unsigned long long)cap_ms);
            return 1;
        }
    }
    if (r->work.response_bytes > (int64_t)cfg->work.max_response_bytes) {
        snprintf(buf, cap, "echod-response-bytes: %lld is above the cap work.max_response_bytes (%u)",
                 (long long)r->work.response_bytes, cfg->work.max_response_bytes);
        return 1;
    }
    return 0;
}

void echod_work_resolve(const echod_config_t *cfg, const char *path, const echod_work_over_t *over, uint64_t seq,
                        int priced, echod_work_spec_t *out, char **error)
{
    /* the config's values in the overrides' layout, then each key the request set over them */
    echod_work_over_t r = {.work = *echod_config_method_work(cfg, path), .model = cfg->work.model};
    int overrides = over->set != 0 && cfg->work.allow_metadata_overrides;
    for (int k = 0; overrides && k != ECHOD_WORK__COUNT; k++)
        if (over->set & (1u << k))
            memcpy((char *)&r + keys[k].offset, (const char *)over + keys[k].offset, keys[k].size);
    char buf[160];
    if (overrides && check_caps(cfg, &r, buf, sizeof(buf))) {
        if (*error == NULL)
            *error = echod_must(strdup(buf), "echod-* header error");
        r.model = cfg->work.model; /* the call fails in start_call, priced as the server prices calls */
    }
    int seeded = overrides && (over->set & (1u << ECHOD_WORK_SEED)) != 0;
    out->work = r.work;
    echod_draws_init(&out->draws, cfg->work.seed, seeded ? over->seed : seq, seeded);
    r.model.enabled = r.model.enabled && priced;
    echod_model_init(&out->model, &r.model);
}
