#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "dispatch/call.h"
#include "services/adapters.h"
#include "health.pb-c.h"
#include "services/health.h"
#include "services/pb.h"
#include "util/err.h"

#define SERVING_STATUS(x) GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__##x

/*
 * Process-wide: every Check reads the flag on its own loop, and the watcher list is walked by
 * whichever thread flips the flag (main, on SIGTERM) while Watch calls join and leave it from
 * their own steps.
 */
static atomic_int serving = 1;
static pthread_mutex_t watchers_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct watcher *watchers;

/* --- which names are known --- */

static int known_service(const echod_registry_t *reg, const char *name)
{
    if (name[0] == '\0')
        return 1;
    for (size_t i = 0; i != reg->count; i++)
        if (strcmp(reg->methods[i]->service, name) == 0)
            return 1;
    return 0;
}

static int status_of(const echod_registry_t *reg, const char *name)
{
    if (!known_service(reg, name))
        return SERVING_STATUS(SERVICE_UNKNOWN);
    return atomic_load_explicit(&serving, memory_order_acquire) ? SERVING_STATUS(SERVING) : SERVING_STATUS(NOT_SERVING);
}

static echod_msg_t *pack_response(int status)
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = status;
    size_t size = grpc__health__v1__health_check_response__get_packed_size(&resp);
    echod_msg_t *out = echod_msg_new((uint32_t)size);
    grpc__health__v1__health_check_response__pack(&resp, echod_msg_payload(out));
    return out;
}

/* NULL after closing the call: grpc-java answers a request it cannot parse with INTERNAL. */
static Grpc__Health__V1__HealthCheckRequest *unpack_request(echod_call_t *call, echod_msg_t *msg)
{
    Grpc__Health__V1__HealthCheckRequest *req =
        grpc__health__v1__health_check_request__unpack(&echod_pb_allocator, msg->len, echod_msg_payload(msg));
    echod_msg_free(msg);
    if (req == NULL)
        echod_call_close(call, ECHOD_INTERNAL, "Invalid protobuf byte sequence");
    return req;
}

/* --- Check: one request --- */

static void check_invoke(echod_call_t *call, echod_msg_t *msg)
{
    Grpc__Health__V1__HealthCheckRequest *req = unpack_request(call, msg);
    if (req == NULL)
        return;
    int status = status_of(echod_call_registry(call), req->service);
    if (status == SERVING_STATUS(SERVICE_UNKNOWN)) {
        char text[160];
        snprintf(text, sizeof(text), "unknown service %.120s", req->service);
        echod_call_close(call, ECHOD_NOT_FOUND, text);
    } else {
        echod_call_send(call, pack_response(status));
        echod_call_close(call, ECHOD_OK, NULL);
    }
    grpc__health__v1__health_check_request__free_unpacked(req, &echod_pb_allocator);
}

/*
 * --- Watch: one request, then the status now and at every change until the client cancels ---
 *
 * A change can come from any thread, but only the call's steps may touch `h` and send. So the
 * notifier only wakes each watcher (echod_call_wake_ready), which the transport turns into an
 * on_ready step: from there the handler compares the status with the last one it sent, like any
 * on_ready (grpc-java's onReady may also come when nothing changed). Steps run in submission
 * order, and the transport submits the closed step itself, so a wake-up it submits before seeing
 * the stream closed always runs before on_complete.
 */

typedef struct watcher {
    struct watcher *prev, *next; /* under watchers_mutex, while `listed` */
    echod_call_t *call;          /* retained while listed: the notifier wakes it */
    char *service;               /* set at half-close */
    int sent;                    /* the status last sent, -1 before the first */
    int listed;
} watcher_t;

/* Sends the status if it changed since the last one sent (the adapter calls it while ready). */
static int watch_produce(echod_call_t *call)
{
    watcher_t *w = call->h.state;
    if (w->service == NULL) /* before half-close */
        return 0;
    int status = status_of(echod_call_registry(call), w->service);
    if (status != w->sent) {
        w->sent = status;
        echod_call_send(call, pack_response(status));
    }
    return 0;
}

static void watch_start(echod_call_t *call)
{
    watcher_t *w = echod_must(calloc(1, sizeof(*w)), "health watcher");
    w->call = call;
    w->sent = -1;
    call->h.state = w;
}

static void watch_invoke(echod_call_t *call, echod_msg_t *msg)
{
    watcher_t *w = call->h.state;
    Grpc__Health__V1__HealthCheckRequest *req = unpack_request(call, msg);
    if (req == NULL)
        return;
    w->service = echod_must(strdup(req->service), "health watch service");
    grpc__health__v1__health_check_request__free_unpacked(req, &echod_pb_allocator);

    /* listed before the status is read (by produce, next): a flip after the read then finds us
     * and wakes us */
    echod_call_retain(call);
    pthread_mutex_lock(&watchers_mutex);
    w->listed = 1;
    w->next = watchers;
    if (watchers != NULL)
        watchers->prev = w;
    watchers = w;
    pthread_mutex_unlock(&watchers_mutex);
}

static void watch_complete(echod_call_t *call)
{
    watcher_t *w = call->h.state;
    if (w == NULL)
        return;
    call->h.state = NULL;
    if (w->listed) {
        pthread_mutex_lock(&watchers_mutex);
        if (w->prev != NULL)
            w->prev->next = w->next;
        else
            watchers = w->next;
        if (w->next != NULL)
            w->next->prev = w->prev;
        pthread_mutex_unlock(&watchers_mutex);
        echod_call_release(call);
    }
    free(w->service);
    free(w);
}

/* --- the serving state --- */

void echod_health_set_serving(struct echod_server *server, int serving_now)
{
    (void)server;
    int value = serving_now != 0;
    if (atomic_exchange_explicit(&serving, value, memory_order_acq_rel) == value)
        return;
    pthread_mutex_lock(&watchers_mutex);
    for (watcher_t *w = watchers; w != NULL; w = w->next)
        echod_call_wake_ready(w->call);
    pthread_mutex_unlock(&watchers_mutex);
}

int echod_health_is_serving(const struct echod_server *server)
{
    (void)server;
    return atomic_load_explicit(&serving, memory_order_acquire);
}

/* one method per block */
/* clang-format off */
#define SERVICE "grpc.health.v1.Health"

static const echod_unary_handler_t check_handler = {.invoke = check_invoke};
static const echod_server_streaming_handler_t watch_handler = {
    .unary = {.start = watch_start, .invoke = watch_invoke, .complete = watch_complete}, .produce = watch_produce};

static const echod_method_t check = {
    ECHOD_METHOD(SERVICE, Check), .type = ECHOD_GRPC_UNARY, ECHOD_UNARY(check_handler), .on_loop = 1};
static const echod_method_t watch = {
    ECHOD_METHOD(SERVICE, Watch), .type = ECHOD_GRPC_SERVER_STREAM, ECHOD_SERVER_STREAMING(watch_handler),
    .on_loop = 1};
/* clang-format on */

const echod_method_t *const echod_health_methods[] = {&check, &watch, NULL};
