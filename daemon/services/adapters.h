/*
 * grpc-java ServerCalls-style adapters: a method's listener callbacks written once, over the
 * call API only, for the three shapes the services share. A method uses one by naming its
 * callbacks with ECHOD_UNARY / ECHOD_SERVER_STREAMING / ECHOD_BIDI_HOLD_ONE and a handler table;
 * the adapter keeps its message in call->h.held and leaves call->h.state to the handler.
 * Every hook runs inside a step of the call (steps of one call never run concurrently).
 */
#ifndef ECHOD_ADAPTERS_H
#define ECHOD_ADAPTERS_H

#include "dispatch/call.h"

/*
 * Unary and server streaming take one request (grpc-java's UnaryServerCallHandler rules):
 * start asks for two messages, so that a second one is seen and refused ("Too many requests");
 * half-close without one ends the call INTERNAL ("Half-closed without a request").
 */
typedef struct {
    void (*start)(echod_call_t *call); /* optional: set up h.state before the first request(n) */
    /* Optional, as a marshaller would at arrival: 0 to keep the request, else the call was closed. */
    int (*check)(echod_call_t *call, echod_msg_t *request); /* request stays the adapter's */
    /* At half-close, with the request (the handler's from here): replies and closes. */
    void (*invoke)(echod_call_t *call, echod_msg_t *request);
    void (*complete)(echod_call_t *call); /* optional: free h.state */
} echod_unary_handler_t;

/*
 * Server streaming: the unary rules for the request, then responses sent while the call is
 * ready (grpc-java's isReady/onReady): invoke sets up what to send, produce sends one response
 * and says whether another may follow; the adapter calls it while ready, after invoke and on
 * every on_ready. A client that does not read holds up the responses, not memory.
 */
typedef struct {
    echod_unary_handler_t unary;
    int (*produce)(echod_call_t *call); /* 1 if it may be called again */
} echod_server_streaming_handler_t;

/*
 * Bidi, one message at a time: each request's reply is sent at once while the call is ready,
 * and the next request is asked for after it; else the reply is held until on_ready (so a
 * client that does not read stops being read). Half-close sends a held reply and ends OK.
 */
typedef struct {
    void (*start)(echod_call_t *call); /* optional */
    /* The reply to a request (ownership of both passes), or NULL once the call is closed. */
    echod_msg_t *(*reply)(echod_call_t *call, echod_msg_t *request);
    void (*complete)(echod_call_t *call); /* optional */
} echod_bidi_handler_t;

void echod_adapter_unary_start(echod_call_t *call);
void echod_adapter_unary_message(echod_call_t *call, echod_msg_t *msg);
void echod_adapter_unary_half_close(echod_call_t *call);
void echod_adapter_unary_complete(echod_call_t *call);
void echod_adapter_server_streaming_half_close(echod_call_t *call);
void echod_adapter_server_streaming_ready(echod_call_t *call);
void echod_adapter_bidi_start(echod_call_t *call);
void echod_adapter_bidi_message(echod_call_t *call, echod_msg_t *msg);
void echod_adapter_bidi_ready(echod_call_t *call);
void echod_adapter_bidi_half_close(echod_call_t *call);
void echod_adapter_bidi_complete(echod_call_t *call);

/* The listener callbacks of an echod_method_t for a handler table `h` (a static const). */
#define ECHOD_UNARY(h)                                                                                                 \
    .on_start = echod_adapter_unary_start, .on_message = echod_adapter_unary_message,                                  \
    .on_half_close = echod_adapter_unary_half_close, .on_complete = echod_adapter_unary_complete, .handler = &(h)
#define ECHOD_SERVER_STREAMING(h)                                                                                      \
    .on_start = echod_adapter_unary_start, .on_message = echod_adapter_unary_message,                                  \
    .on_half_close = echod_adapter_server_streaming_half_close, .on_ready = echod_adapter_server_streaming_ready,      \
    .on_complete = echod_adapter_unary_complete, .handler = &(h)
#define ECHOD_BIDI_HOLD_ONE(h)                                                                                         \
    .on_start = echod_adapter_bidi_start, .on_message = echod_adapter_bidi_message,                                    \
    .on_half_close = echod_adapter_bidi_half_close, .on_ready = echod_adapter_bidi_ready,                              \
    .on_complete = echod_adapter_bidi_complete, .handler = &(h)

#endif
