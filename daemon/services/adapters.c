#include "services/adapters.h"

/* --- unary and server streaming: one request --- */

static const echod_unary_handler_t *unary_of(const echod_call_t *call)
{
    return call->method->handler;
}

void echod_adapter_unary_start(echod_call_t *call)
{
    const echod_unary_handler_t *h = unary_of(call);
    if (h->start != NULL)
        h->start(call);
    if (!call->h.closed) /* two, so that a second message is seen and refused rather than left unread */
        echod_call_request(call, 2);
}

void echod_adapter_unary_message(echod_call_t *call, echod_msg_t *msg)
{
    const echod_unary_handler_t *h = unary_of(call);
    if (call->h.held != NULL) {
        echod_msg_free(msg);
        echod_call_close(call, ECHOD_INTERNAL, "Too many requests");
        return;
    }
    if (h->check != NULL && h->check(call, msg) != 0) {
        echod_msg_free(msg);
        return;
    }
    call->h.held = msg;
}

/* The request at half-close (the caller's from here), or NULL after ending the call. */
static echod_msg_t *take_request(echod_call_t *call)
{
    echod_msg_t *req = call->h.held;
    call->h.held = NULL;
    if (req == NULL)
        echod_call_close(call, ECHOD_INTERNAL, "Half-closed without a request");
    return req;
}

void echod_adapter_unary_half_close(echod_call_t *call)
{
    echod_msg_t *req = take_request(call);
    if (req != NULL)
        unary_of(call)->invoke(call, req);
}

void echod_adapter_unary_complete(echod_call_t *call)
{
    const echod_unary_handler_t *h = unary_of(call);
    echod_msg_free(call->h.held);
    call->h.held = NULL;
    if (h->complete != NULL)
        h->complete(call);
}

/* --- server streaming: send while ready --- */

static void send_while_ready(echod_call_t *call)
{
    const echod_server_streaming_handler_t *h = call->method->handler;
    while (echod_call_is_ready(call) && h->produce(call))
        ;
}

void echod_adapter_server_streaming_half_close(echod_call_t *call)
{
    echod_adapter_unary_half_close(call);
    if (!call->h.closed)
        send_while_ready(call);
}

void echod_adapter_server_streaming_ready(echod_call_t *call)
{
    send_while_ready(call); /* produce sends nothing before invoke set it up */
}

/* --- bidi: hold one reply until ready --- */

static const echod_bidi_handler_t *bidi_of(const echod_call_t *call)
{
    return call->method->handler;
}

void echod_adapter_bidi_start(echod_call_t *call)
{
    const echod_bidi_handler_t *h = bidi_of(call);
    if (h->start != NULL)
        h->start(call);
    if (!call->h.closed)
        echod_call_request(call, 1);
}

void echod_adapter_bidi_message(echod_call_t *call, echod_msg_t *msg)
{
    echod_msg_t *out = bidi_of(call)->reply(call, msg);
    if (out == NULL)
        return;
    if (echod_call_is_ready(call)) {
        echod_call_send(call, out);
        echod_call_request(call, 1);
    } else {
        call->h.held = out; /* the client is not reading: hold this one and stop asking until on_ready */
    }
}

void echod_adapter_bidi_ready(echod_call_t *call)
{
    echod_msg_t *held = call->h.held;
    if (held == NULL || !echod_call_is_ready(call))
        return;
    call->h.held = NULL;
    echod_call_send(call, held);
    echod_call_request(call, 1);
}

void echod_adapter_bidi_half_close(echod_call_t *call)
{
    echod_msg_t *held = call->h.held;
    call->h.held = NULL;
    if (held != NULL)
        echod_call_send(call, held);
    echod_call_close(call, ECHOD_OK, NULL);
}

void echod_adapter_bidi_complete(echod_call_t *call)
{
    const echod_bidi_handler_t *h = bidi_of(call);
    echod_msg_free(call->h.held);
    call->h.held = NULL;
    if (h->complete != NULL)
        h->complete(call);
}
