/*
 * A method and the table of methods a server routes. A method is a set of listener callbacks
 * run as call steps (on the loop thread for `direct`, on an executor worker otherwise);
 * handlers talk to the client only through the echod_call_* functions of dispatch/call.h,
 * never to a socket or nghttp2. The table is built by services/registry.c at start-up and
 * read-only while serving.
 */
#ifndef ECHOD_METHOD_H
#define ECHOD_METHOD_H

#include <stddef.h>
#include "grpc/deframe.h"

struct echod_call;

/* The kind of RPC a method is (its grpc_type label in /metrics). */
typedef enum {
    ECHOD_GRPC_UNARY = 0,
    ECHOD_GRPC_CLIENT_STREAM,
    ECHOD_GRPC_SERVER_STREAM,
    ECHOD_GRPC_BIDI_STREAM,
    ECHOD_GRPC_TYPE__COUNT
} echod_grpc_type_t;
/* "unary", "client_stream", ...: label values indexed by the type (method.c asserts one per type). */
extern const char *const echod_grpc_type_names[];

typedef struct echod_method {
    const char *path;    /* "/grpc.examples.echo.Echo/UnaryEcho" */
    const char *service; /* "grpc.examples.echo.Echo" */
    const char *name;    /* "UnaryEcho" */
    echod_grpc_type_t type;
    /* start_call: set up state and request the first message(s) */
    void (*on_start)(struct echod_call *call);
    /* messages_available: exactly one message, owned by the handler from here */
    void (*on_message)(struct echod_call *call, echod_msg_t *msg);
    /* half_closed: the client will send no more messages */
    void (*on_half_close)(struct echod_call *call);
    /* on_ready: the call may write again (outbound bytes below the threshold) */
    void (*on_ready)(struct echod_call *call);
    /* closed: the call is over (completed or cancelled); free handler state */
    void (*on_complete)(struct echod_call *call);
    /* The handler behind an adapter of services/adapters.h (which the callbacks above then are),
     * NULL for a method that implements the listener itself. */
    const void *handler;
    size_t metrics_index; /* into echod_metrics.methods, set by echod_registry_init */
    /* Answered on the I/O loop with the inline runner, never queued behind the executor, and
     * exempt from admission limits: health probes must pass while the executor is saturated. */
    unsigned on_loop : 1;
} echod_method_t;

/* .path, .service and .name of a method from its service's full name and its method name:
 * {ECHOD_METHOD("grpc.examples.echo.Echo", UnaryEcho), .type = ...} */
#define ECHOD_METHOD(svc, m) .path = "/" svc "/" #m, .service = svc, .name = #m

/* The methods a server routes (services/registry.h builds it). */
typedef struct echod_registry {
    const echod_method_t **methods;
    size_t count;
} echod_registry_t;

/* The method for a :path, or NULL (also for a NULL path). Any thread. */
const echod_method_t *echod_method_find(const echod_registry_t *reg, const char *path, size_t len);

#endif
