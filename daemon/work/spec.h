/*
 * A call's work spec: what its handler does besides echoing (README, Synthetic work) and what the
 * cost model charges it (work/model.h), resolved once when its HEADERS are complete from the
 * config for its method and, when work.allow_metadata_overrides is on, its echod-* metadata:
 *
 *   echod-response-bytes: N    response message padded or truncated to N bytes
 *   echod-cpu-us: N            busy loop on the handler thread (thread CPU time, not a sleep)
 *   echod-sleep-us: N          blocking sleep on the handler thread (a virtual thread parks)
 *   echod-status: CODE         fail with this gRPC status ...
 *   echod-error-rate: 0.0-1.0  ... for this fraction of calls
 *   echod-echo-metadata: true  echo the request metadata back as response headers
 *   echod-cpu-dist, echod-cpu-stall-fraction, echod-cpu-stall-us,
 *   echod-sleep-dist, echod-sleep-stall-fraction, echod-sleep-stall-us
 *                              how cpu_us and sleep_us are drawn (work/draw.h)
 *   echod-seed: N              this call's draws come from N (and work.seed) alone
 *   echod-model: true|false, echod-model-{call,step,handoff,handoff-wake,message}-cpu-us: N
 *                              the cost model for this call (a loop's wake-ups and the
 *                              background are the server's: work.model alone)
 *
 * The spec is a layer below dispatch and services: the transport parses headers into an
 * echod_work_over_t, dispatch resolves the spec at admission and charges the model, services run
 * the work. Nothing here knows a call.
 */
#ifndef ECHOD_SPEC_H
#define ECHOD_SPEC_H

#include <stddef.h>
#include <stdint.h>
#include "config/config.h"
#include "work/draw.h"
#include "work/model.h"

/* The echod-* keys, as bits of echod_work_over_t.set. */
enum {
    ECHOD_WORK_RESPONSE_BYTES = 0,
    ECHOD_WORK_CPU_US,
    ECHOD_WORK_SLEEP_US,
    ECHOD_WORK_STATUS,
    ECHOD_WORK_ERROR_RATE,
    ECHOD_WORK_ECHO_METADATA,
    ECHOD_WORK_CPU_DIST,
    ECHOD_WORK_CPU_STALL_FRACTION,
    ECHOD_WORK_CPU_STALL_US,
    ECHOD_WORK_SLEEP_DIST,
    ECHOD_WORK_SLEEP_STALL_FRACTION,
    ECHOD_WORK_SLEEP_STALL_US,
    ECHOD_WORK_SEED,
    ECHOD_WORK_MODEL,
    ECHOD_WORK_MODEL_CALL,
    ECHOD_WORK_MODEL_STEP,
    ECHOD_WORK_MODEL_HANDOFF,
    ECHOD_WORK_MODEL_HANDOFF_WAKE,
    ECHOD_WORK_MODEL_MESSAGE,
    ECHOD_WORK__COUNT
};

/* A request's echod-* values, each valid where `set` has its bit. */
typedef struct {
    echod_work_t work;
    echod_work_model_t model;
    uint64_t seed;
    uint32_t set;
} echod_work_over_t;

/* One call's spec; read-only once resolved, but for `draws`, which the call's steps advance. */
typedef struct {
    echod_work_t work;   /* what the handler does */
    echod_model_t model; /* what the cost model charges (model.on = 0: nothing) */
    echod_draws_t draws; /* where its cpu, sleep and error draws come from */
} echod_work_spec_t;

/*
 * If name is one of the echod-* work headers, parses value into *over and sets its bit, and
 * returns 1 (a malformed value sets *error, malloc'd, naming the key, unless one is set). Else 0.
 * Pure function of its arguments.
 */
int echod_work_parse_header(const char *name, size_t nlen, const char *value, size_t vlen, echod_work_over_t *over,
                            char **error);

/*
 * The call's spec: config for the method, then the overrides, checked against the caps (a value
 * above one sets *error). `seq` is the call's number on its loop (work/draw.h): the draws' key
 * unless echod-seed gave one. `priced` is 0 for calls the cost model leaves alone (health
 * probes run on the loop on every arm: pricing them would put direct's cost into pool arms).
 */
void echod_work_resolve(const echod_config_t *cfg, const char *path, const echod_work_over_t *over, uint64_t seq,
                        int priced, echod_work_spec_t *out, char **error);

#endif
