#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dispatch/call.h"
#include "services/adapters.h"
#include "echo.pb-c.h"
#include "services/echo.h"
#include "services/pb.h"
#include "services/work.h"
#include "util/err.h"

/* --- validation --- */

static int utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + n >= len)
            return 0;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        /* overlong forms, surrogates and values past U+10FFFF are not UTF-8 */
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n + 1;
    }
    return 1;
}

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p == end)
            return -1;
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

int echod_echo_validate(const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    while (p != end) {
        uint64_t key, v;
        if (read_varint(&p, end, &key) != 0 || (key >> 3) == 0)
            return 0;
        switch (key & 7) {
        case 0:
            if (read_varint(&p, end, &v) != 0)
                return 0;
            break;
        case 1:
            if (end - p < 8)
                return 0;
            p += 8;
            break;
        case 2:
            if (read_varint(&p, end, &v) != 0 || v > (uint64_t)(end - p))
                return 0;
            if ((key >> 3) == 1 && !utf8_valid(p, (size_t)v))
                return 0;
            p += v;
            break;
        case 5:
            if (end - p < 4)
                return 0;
            p += 4;
            break;
        default:
            return 0; /* groups (3, 4) and reserved types have no place in proto3 */
        }
    }
    return 1;
}

/*
 * The configured work before a reply: CPU, sleep, then maybe a deliberate failure (the call is
 * closed with that status and 0 is returned), then the response reshaped to response_bytes.
 */
static echod_msg_t *work_then_reply(echod_call_t *call, echod_msg_t *msg)
{
    int status = echod_work_run(call);
    if (status != 0) {
        echod_msg_free(msg);
        echod_call_close(call, status, "echod-status: failing on purpose");
        return NULL;
    }
    int64_t bytes = echod_call_work(call)->response_bytes;
    return bytes >= 0 ? echod_work_reshape_echo(msg, bytes) : msg;
}

/* The marshaller's check: an invalid EchoRequest ends the call (0 to go on). */
static int check_request(echod_call_t *call, echod_msg_t *msg)
{
    if (echod_echo_validate(echod_msg_payload(msg), msg->len))
        return 0;
    echod_call_close(call, ECHOD_INTERNAL, "Invalid protobuf byte sequence");
    return -1;
}

/* --- UnaryEcho: the request's frame is the response's frame --- */

static void unary_invoke(echod_call_t *call, echod_msg_t *req)
{
    if ((req = work_then_reply(call, req)) == NULL)
        return;
    echod_call_send(call, req);
    echod_call_close(call, ECHOD_OK, NULL);
}

/* --- ServerStreamingEcho: the response count times, as fast as the client reads them --- */

typedef struct {
    echod_msg_t *resp; /* the response to repeat, from half-close */
    unsigned left;     /* copies still to send */
} stream_out_t;

static void server_streaming_start(echod_call_t *call)
{
    call->h.state = echod_must(calloc(1, sizeof(stream_out_t)), "ServerStreamingEcho state");
}

static void server_streaming_invoke(echod_call_t *call, echod_msg_t *req)
{
    stream_out_t *s = call->h.state;
    if ((s->resp = work_then_reply(call, req)) == NULL)
        return;
    s->left = echod_call_config(call)->echo.server_streaming_count;
}

static int server_streaming_produce(echod_call_t *call)
{
    stream_out_t *s = call->h.state;
    if (s->left == 0)
        return 0;
    if (--s->left != 0) {
        echod_call_send(call, echod_msg_from(echod_msg_payload(s->resp), s->resp->len));
        return 1;
    }
    echod_call_send(call, s->resp); /* the last copy is the response itself */
    s->resp = NULL;
    echod_call_close(call, ECHOD_OK, NULL);
    return 0;
}

static void server_streaming_complete(echod_call_t *call)
{
    stream_out_t *s = call->h.state;
    if (s != NULL)
        echod_msg_free(s->resp);
    free(s);
    call->h.state = NULL;
}

/* --- ClientStreamingEcho: the concatenation of every request's message --- */

typedef struct {
    char *data;
    size_t len, cap;
} concat_t;

static void client_streaming_start(echod_call_t *call)
{
    call->h.state = echod_must(calloc(1, sizeof(concat_t)), "ClientStreamingEcho state");
    echod_call_request(call, 1);
}

static void client_streaming_message(echod_call_t *call, echod_msg_t *msg)
{
    concat_t *c = call->h.state;
    Grpc__Examples__Echo__EchoRequest *req =
        echod_echo_validate(echod_msg_payload(msg), msg->len)
            ? grpc__examples__echo__echo_request__unpack(&echod_pb_allocator, msg->len, echod_msg_payload(msg))
            : NULL;
    echod_msg_free(msg);
    if (req == NULL) {
        echod_call_close(call, ECHOD_INTERNAL, "Invalid protobuf byte sequence");
        return;
    }
    size_t n = strlen(req->message);
    /* the response is one message: bound it as echod bounds requests, or a client that streams
     * long enough would grow this without limit (and past the 32-bit gRPC length) */
    uint32_t max = echod_call_config(call)->transport.max_receive_message_bytes;
    if (c->len + n > max) {
        grpc__examples__echo__echo_request__free_unpacked(req, &echod_pb_allocator);
        char text[160];
        snprintf(text, sizeof(text), "Concatenation larger than max (transport.max_receive_message_bytes %u)", max);
        echod_call_close(call, ECHOD_RESOURCE_EXHAUSTED, text);
        return;
    }
    if (c->len + n > c->cap) {
        size_t cap = c->cap == 0 ? 256 : c->cap;
        while (cap < c->len + n)
            cap *= 2;
        c->data = echod_must(realloc(c->data, cap), "ClientStreamingEcho concatenation");
        c->cap = cap;
    }
    if (n != 0) /* an empty message before any text: c->data is still NULL, and memcpy(NULL, .., 0) is UB */
        memcpy(c->data + c->len, req->message, n);
    c->len += n;
    grpc__examples__echo__echo_request__free_unpacked(req, &echod_pb_allocator);
    echod_call_request(call, 1);
}

static void client_streaming_half_close(echod_call_t *call)
{
    concat_t *c = call->h.state;
    Grpc__Examples__Echo__EchoResponse resp = GRPC__EXAMPLES__ECHO__ECHO_RESPONSE__INIT;
    char *text = echod_must(malloc(c->len + 1), "ClientStreamingEcho response");
    memcpy(text, c->data != NULL ? c->data : "", c->len);
    text[c->len] = '\0';
    resp.message = text;
    size_t size = grpc__examples__echo__echo_response__get_packed_size(&resp);
    echod_msg_t *out = echod_msg_new((uint32_t)size);
    grpc__examples__echo__echo_response__pack(&resp, echod_msg_payload(out));
    free(text);
    if ((out = work_then_reply(call, out)) == NULL)
        return;
    echod_call_send(call, out);
    echod_call_close(call, ECHOD_OK, NULL);
}

static void client_streaming_complete(echod_call_t *call)
{
    concat_t *c = call->h.state;
    if (c != NULL)
        free(c->data);
    free(c);
    call->h.state = NULL;
}

/* --- BidirectionalStreamingEcho: echo each message --- */

static echod_msg_t *bidi_reply(echod_call_t *call, echod_msg_t *msg)
{
    if (check_request(call, msg) != 0) {
        echod_msg_free(msg);
        return NULL;
    }
    return work_then_reply(call, msg);
}

/* one method per block */
/* clang-format off */
#define SERVICE "grpc.examples.echo.Echo"

static const echod_unary_handler_t unary_handler = {.check = check_request, .invoke = unary_invoke};
static const echod_server_streaming_handler_t server_streaming_handler = {
    .unary = {.start = server_streaming_start, .check = check_request, .invoke = server_streaming_invoke,
              .complete = server_streaming_complete},
    .produce = server_streaming_produce};
static const echod_bidi_handler_t bidi_handler = {.reply = bidi_reply};

static const echod_method_t unary = {
    ECHOD_METHOD(SERVICE, UnaryEcho), .type = ECHOD_GRPC_UNARY, ECHOD_UNARY(unary_handler)};
static const echod_method_t server_streaming = {
    ECHOD_METHOD(SERVICE, ServerStreamingEcho), .type = ECHOD_GRPC_SERVER_STREAM,
    ECHOD_SERVER_STREAMING(server_streaming_handler)};
static const echod_method_t client_streaming = {
    ECHOD_METHOD(SERVICE, ClientStreamingEcho), .type = ECHOD_GRPC_CLIENT_STREAM,
    .on_start = client_streaming_start, .on_message = client_streaming_message,
    .on_half_close = client_streaming_half_close, .on_complete = client_streaming_complete};
static const echod_method_t bidi = {
    ECHOD_METHOD(SERVICE, BidirectionalStreamingEcho), .type = ECHOD_GRPC_BIDI_STREAM,
    ECHOD_BIDI_HOLD_ONE(bidi_handler)};
/* clang-format on */

const echod_method_t *const echod_echo_methods[] = {&unary, &server_streaming, &client_streaming, &bidi, NULL};
