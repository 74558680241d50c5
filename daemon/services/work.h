/*
 * Running a call's synthetic work (README, Synthetic work), for the Echo handlers: the CPU, the
 * sleep and the deliberate failure its spec (work/spec.h) says, drawn per run (work/draw.h), and
 * the reshaped response. What the work is, and where it comes from, is the work layer's
 * (daemon/work/); this file is the part that needs a call.
 */
#ifndef ECHOD_WORK_H
#define ECHOD_WORK_H

#include <stdint.h>
#include "grpc/deframe.h"

struct echod_call;

/*
 * Draws and runs the call's cpu and sleep work (the sleep through echod_call_sleep: it parks a
 * virtual thread); returns the gRPC status to fail with, 0 to go on. Inside the call's steps:
 * once per call for the unary-request methods, once per message for bidi.
 */
int echod_work_run(struct echod_call *call);

/*
 * For response_bytes >= 0: an EchoResponse whose message is the request's, padded with '.' or
 * truncated to exactly that many bytes (truncation keeps UTF-8 whole, then pads). Takes req.
 */
echod_msg_t *echod_work_reshape_echo(echod_msg_t *req, int64_t response_bytes);

#endif
