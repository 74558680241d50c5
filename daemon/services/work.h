/*
 * Synthetic work (README, Synthetic work): what a handler does besides echoing, so a ramp can give the server
 * realistic cost. Values come from config (work.defaults, work.per_method) and, when
 * work.allow_metadata_overrides is on, from request metadata:
 *
 *   echod-response-bytes: N    response message padded or truncated to N bytes
 *   echod-cpu-us: N            busy loop on the handler thread (thread CPU time, not a sleep)
 *   echod-sleep-us: N          blocking sleep on the handler thread (a virtual thread parks)
 *   echod-status: CODE         fail with this gRPC status ...
 *   echod-error-rate: 0.0-1.0  ... for this fraction of calls
 *   echod-echo-metadata: true  echo the request metadata back as response headers
 */
#ifndef ECHOD_WORK_H
#define ECHOD_WORK_H

#include <stddef.h>
#include <stdint.h>
#include "config/config.h"
#include "grpc/deframe.h"

enum {
    ECHOD_WORK_RESPONSE_BYTES = 0,
    ECHOD_WORK_CPU_US,
    ECHOD_WORK_SLEEP_US,
    ECHOD_WORK_STATUS,
    ECHOD_WORK_ERROR_RATE,
    ECHOD_WORK_ECHO_METADATA,
};

/*
 * If name is one of the echod-* work headers, parses value into *over, sets its bit in *set and
 * returns 1 (a malformed value sets *error, malloc'd, naming the key, unless one is set). Else 0.
 * Loop thread (pure function of its arguments).
 */
int echod_work_parse_header(const char *name, size_t nlen, const char *value, size_t vlen, echod_work_t *over,
                            unsigned *set, char **error);

/* The call's work: config for the method, then the overrides, checked against the caps. */
void echod_work_resolve(const echod_config_t *cfg, const char *path, const echod_work_t *over, unsigned set,
                        echod_work_t *out, char **error);

/* Burns `us` microseconds of this thread's CPU time. */
void echod_work_burn_cpu(uint32_t us);

struct echod_call;

/*
 * Runs cpu and sleep work (the sleep through echod_call_sleep: it parks a virtual thread); returns
 * the gRPC status to fail with, 0 to go on. Inside the call's steps.
 */
int echod_work_run(struct echod_call *call, const echod_work_t *work);

/*
 * For response_bytes >= 0: an EchoResponse whose message is the request's, padded with '.' or
 * truncated to exactly that many bytes (truncation keeps UTF-8 whole, then pads). Takes req.
 */
echod_msg_t *echod_work_reshape_echo(echod_msg_t *req, int64_t response_bytes);

#endif
