#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dispatch/call.h"
#include "services/adapters.h"
#include "messages.pb-c.h"
#include "services/benchmark.h"
#include "services/pb.h"
#include "util/err.h"

/* What one SimpleRequest asks for. */
typedef struct {
    int code;      /* ECHOD_OK, or the status the call ends with */
    char *message; /* with code */
    uint32_t size; /* zero bytes in payload.body */
} plan_t;

typedef struct {
    plan_t plan;       /* of the last request */
    int have_plan;     /* a request was seen */
    echod_msg_t *tmpl; /* StreamingFromServer, StreamingBothWays: the response sent over and over */
} bench_t;

static void plan_clear(plan_t *p)
{
    free(p->message);
    *p = (plan_t){0};
}

static void plan_fail(plan_t *p, int code, const char *message)
{
    plan_clear(p);
    p->code = code;
    p->message = echod_must(strdup(message), "benchmark status message");
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* SimpleResponse{payload: Payload{body: size zero bytes}}; `type` is COMPRESSABLE, proto3's 0. */
static uint64_t response_len(uint32_t size)
{
    if (size == 0)
        return 0; /* no payload at all, like grpc-java's benchmark server */
    uint64_t payload = 1 + varint_len(size) + size;
    return 1 + varint_len(payload) + payload;
}

/*
 * Encoded by hand rather than by protoc-c, which would need a body buffer of `size` zeros to
 * copy from: here the zeros are written in place.
 */
static echod_msg_t *build_response(uint32_t size)
{
    echod_msg_t *out = echod_msg_new((uint32_t)response_len(size));
    if (size == 0)
        return out;
    uint8_t *p = echod_msg_payload(out);
    *p++ = 0x0a; /* SimpleResponse.payload, length-delimited */
    p = put_varint(p, 1 + varint_len(size) + size);
    *p++ = 0x12; /* Payload.body, length-delimited */
    p = put_varint(p, size);
    memset(p, 0, size);
    return out;
}

/* The interop server's order: the payload is checked first, then response_status decides. */
static void plan_parse(echod_call_t *call, echod_msg_t *msg, plan_t *p)
{
    Grpc__Testing__SimpleRequest *req =
        grpc__testing__simple_request__unpack(&echod_pb_allocator, msg->len, echod_msg_payload(msg));
    plan_clear(p);
    if (req == NULL) {
        plan_fail(p, ECHOD_INTERNAL, "Invalid protobuf byte sequence");
        return;
    }
    char text[160];
    uint32_t cap = echod_call_config(call)->transport.max_receive_message_bytes;
    if (req->response_size < 0) {
        snprintf(text, sizeof(text), "response_size %d is negative", req->response_size);
        plan_fail(p, ECHOD_INVALID_ARGUMENT, text);
    } else if (response_len((uint32_t)req->response_size) > cap) {
        /* what a gRPC server says of a message it may not send; a client would refuse it anyway */
        snprintf(text, sizeof(text),
                 "response_size %d: the response would exceed %u bytes "
                 "(transport.max_receive_message_bytes)",
                 req->response_size, cap);
        plan_fail(p, ECHOD_RESOURCE_EXHAUSTED, text);
    } else if (req->response_size > 0 && req->response_type != GRPC__TESTING__PAYLOAD_TYPE__COMPRESSABLE) {
        snprintf(text, sizeof(text), "response_type %d is not supported", (int)req->response_type);
        plan_fail(p, ECHOD_INVALID_ARGUMENT, text);
    } else if (req->response_status != NULL && req->response_status->code != 0) {
        int code = req->response_status->code;
        /* gRPC's codes end at 16; anything else reads as UNKNOWN on every client */
        plan_fail(p, code > 0 && code <= ECHOD_UNAUTHENTICATED ? code : ECHOD_UNKNOWN, req->response_status->message);
    } else {
        p->size = (uint32_t)req->response_size;
    }
    grpc__testing__simple_request__free_unpacked(req, &echod_pb_allocator);
}

/* Ends the call with the plan's status; 1 if it did. */
static int plan_close(echod_call_t *call, const plan_t *p)
{
    if (p->code == ECHOD_OK)
        return 0;
    echod_call_close(call, p->code, p->message);
    return 1;
}

static void bench_alloc(echod_call_t *call)
{
    call->h.state = echod_must(calloc(1, sizeof(bench_t)), "benchmark call state");
}

static void bench_complete(echod_call_t *call)
{
    bench_t *b = call->h.state;
    if (b == NULL)
        return;
    plan_clear(&b->plan);
    echod_msg_free(b->tmpl);
    free(b);
    call->h.state = NULL;
}

/* --- UnaryCall, StreamingFromServer: one request --- */

/* Plans the response as the request arrives: an unparsable one fails the call at once, as in
 * grpc-java (0 to go on). */
static int single_check(echod_call_t *call, echod_msg_t *msg)
{
    bench_t *b = call->h.state;
    plan_parse(call, msg, &b->plan);
    if (b->plan.code == ECHOD_INTERNAL)
        return plan_close(call, &b->plan) ? -1 : 0;
    return 0;
}

static void unary_invoke(echod_call_t *call, echod_msg_t *req)
{
    bench_t *b = call->h.state;
    echod_msg_free(req); /* planned at arrival */
    if (plan_close(call, &b->plan))
        return;
    echod_call_send(call, build_response(b->plan.size));
    echod_call_close(call, ECHOD_OK, NULL);
}

/*
 * --- StreamingFromServer, StreamingBothWays: responses as fast as the client reads them ---
 * Sent while the call is ready; the on_ready after the client caught up sends the next burst.
 * The stream ends when the client cancels (or, both ways, half-closes).
 */

static int flood_one(echod_call_t *call)
{
    bench_t *b = call->h.state;
    if (b->tmpl == NULL || echod_call_is_cancelled(call))
        return 0;
    echod_call_send(call, echod_msg_from(echod_msg_payload(b->tmpl), b->tmpl->len));
    return 1;
}

static void flood(echod_call_t *call)
{
    while (echod_call_is_ready(call) && flood_one(call))
        ;
}

static void from_server_invoke(echod_call_t *call, echod_msg_t *req)
{
    bench_t *b = call->h.state;
    echod_msg_free(req);
    if (!plan_close(call, &b->plan))
        b->tmpl = build_response(b->plan.size);
}

static void streaming_start(echod_call_t *call)
{
    bench_alloc(call);
    echod_call_request(call, 1);
}

/* The first request says what to send; the ones after are read and dropped. */
static void both_ways_message(echod_call_t *call, echod_msg_t *msg)
{
    bench_t *b = call->h.state;
    if (b->have_plan) {
        echod_msg_free(msg);
        echod_call_request(call, 1);
        return;
    }
    b->have_plan = 1;
    plan_parse(call, msg, &b->plan);
    echod_msg_free(msg);
    if (plan_close(call, &b->plan))
        return;
    b->tmpl = build_response(b->plan.size);
    flood(call);
    echod_call_request(call, 1);
}

static void end_ok(echod_call_t *call)
{
    echod_call_close(call, ECHOD_OK, NULL);
}

/* --- StreamingCall: ping-pong, one response per request --- */

static echod_msg_t *streaming_reply(echod_call_t *call, echod_msg_t *msg)
{
    bench_t *b = call->h.state;
    plan_parse(call, msg, &b->plan);
    echod_msg_free(msg);
    if (plan_close(call, &b->plan))
        return NULL;
    return build_response(b->plan.size);
}

/* --- StreamingFromClient: read them all, answer the last one once the client is done --- */

static void from_client_message(echod_call_t *call, echod_msg_t *msg)
{
    bench_t *b = call->h.state;
    b->have_plan = 1;
    plan_parse(call, msg, &b->plan);
    echod_msg_free(msg);
    if (b->plan.code == ECHOD_INTERNAL) /* unparsable: grpc-java fails the call at once */
        plan_close(call, &b->plan);
    else
        echod_call_request(call, 1);
}

static void from_client_half_close(echod_call_t *call)
{
    bench_t *b = call->h.state;
    if (plan_close(call, &b->plan)) /* no request at all is an empty SimpleRequest */
        return;
    echod_call_send(call, build_response(b->plan.size));
    echod_call_close(call, ECHOD_OK, NULL);
}

/* one method per block */
/* clang-format off */
#define SERVICE "grpc.testing.BenchmarkService"

static const echod_unary_handler_t unary_handler = {
    .start = bench_alloc, .check = single_check, .invoke = unary_invoke, .complete = bench_complete};
static const echod_server_streaming_handler_t from_server_handler = {
    .unary = {.start = bench_alloc, .check = single_check, .invoke = from_server_invoke, .complete = bench_complete},
    .produce = flood_one};
static const echod_bidi_handler_t streaming_handler = {
    .start = bench_alloc, .reply = streaming_reply, .complete = bench_complete};

static const echod_method_t unary_call = {
    ECHOD_METHOD(SERVICE, UnaryCall), .type = ECHOD_GRPC_UNARY, ECHOD_UNARY(unary_handler)};
static const echod_method_t streaming_call = {
    ECHOD_METHOD(SERVICE, StreamingCall), .type = ECHOD_GRPC_BIDI_STREAM, ECHOD_BIDI_HOLD_ONE(streaming_handler)};
static const echod_method_t from_client = {
    ECHOD_METHOD(SERVICE, StreamingFromClient), .type = ECHOD_GRPC_CLIENT_STREAM, .on_start = streaming_start,
    .on_message = from_client_message, .on_half_close = from_client_half_close, .on_complete = bench_complete};
static const echod_method_t from_server = {
    ECHOD_METHOD(SERVICE, StreamingFromServer), .type = ECHOD_GRPC_SERVER_STREAM,
    ECHOD_SERVER_STREAMING(from_server_handler)};
static const echod_method_t both_ways = {
    ECHOD_METHOD(SERVICE, StreamingBothWays), .type = ECHOD_GRPC_BIDI_STREAM, .on_start = streaming_start,
    .on_message = both_ways_message, .on_half_close = end_ok, .on_ready = flood, .on_complete = bench_complete};

const echod_method_t *const echod_benchmark_methods[] = {&unary_call, &streaming_call, &from_client, &from_server,
                                                         &both_ways, NULL};
/* clang-format on */
