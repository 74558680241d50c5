#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "metrics/exposition.h"
#include "transport/conn.h"
#include "transport/loop.h"
#include "transport/rest.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/h2o_compat.h"
#include "util/log.h"

#define SAMPLE_MS 100
/*
 * What a loop keeps of freed blocks (class bytes; headers and malloc's overhead not counted):
 * nghttp2's blocks of a few hundred streams, calls, and the gRPC messages of the reads of one
 * loop iteration, which are freed together once the loop tail has written their echoes (a 64
 * KiB read of 1 KiB messages is 64 blocks of 2 KiB, and an iteration may read from many
 * connections). A loop holds on to at most this much after a burst, until it stops.
 */
#define POOL_CAP_BYTES (1024u * 1024u)

_Thread_local echod_loop_t *echod_loop__current;

void echod_loop_link_deadline(echod_loop_t *loop, h2o_timeout_entry_t *entry, uint64_t deadline_ms)
{
    /* A 0 ms list fires an entry once now >= registered_at, and the loop sleeps until its first
     * entry: keeping the list sorted by deadline makes it an exact timer for any duration. */
    h2o_timeout_link(loop->evloop, &loop->deadlines, entry);
    h2o_linklist_unlink(&entry->_link);
    entry->registered_at = deadline_ms;
    h2o_linklist_t *anchor = &loop->deadlines._entries, *pos = anchor->prev;
    while (pos != anchor && H2O_STRUCT_FROM_MEMBER(h2o_timeout_entry_t, _link, pos)->registered_at > deadline_ms)
        pos = pos->prev;
    h2o_linklist_insert(pos->next, &entry->_link);
}

void echod_loop_post(echod_loop_t *loop, echod_loop_msg_t *msg)
{
    h2o_multithread_send_message(&loop->tasks, &msg->super);
}

/* Voluntary context switches of the calling thread: a blocking poll adds one, a busy one none. */
static uint64_t voluntary_switches(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (uint64_t)ru.ru_nvcsw;
}

/*
 * An iteration's first run, whose poll may sleep: whether it did is told by the switches before
 * the poll (docs/threads.md), not by timing, which cannot tell a poll that slept 10 us from one
 * that found work at once. Only the loop's own calls and the poll itself run between the read
 * here and the first callback (loop_iterate's further runs do not wait).
 */
static void run_waiting(echod_loop_t *loop)
{
    loop->poll_switches = voluntary_switches();
    loop->poll_began_ns = echod_now_ns();
    loop->iteration_asked = 0;
    h2o_evloop_run(loop->evloop, INT32_MAX);
}

int echod_loop_woken(echod_loop_t *loop, echod_loop_wake_t cause)
{
    if (loop->iteration_asked)
        return 0;
    loop->iteration_asked = 1;
    if (voluntary_switches() == loop->poll_switches)
        return 0;
    /* the poll's whole wait, the run queue's delay after the wake included: a few µs */
    uint64_t slept_ns = echod_now_ns() - loop->poll_began_ns;
    ECHOD_COUNT(echod_metrics.loop_wakeups[cause]);
    ECHOD_ADD(echod_metrics.loop_wakeup_sleep_ns[cause], slept_ns);
    if (cause == ECHOD_LOOP_WAKE_IO)
        echod_model_charge_wakeup(&loop->model, slept_ns);
    return 1;
}

/*
 * A batch of loop tasks, then one flush per connection they wrote to (every policy). h2o runs the
 * queue's socket (a client socket) before connections' reads, so a batch that woke the loop is
 * its iteration's first callback; its first task is the one whose post woke it (h2o writes the
 * queue's pipe only for a post to an empty queue, and keeps the order of posts).
 */
static void on_tasks(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    echod_loop_t *loop = H2O_STRUCT_FROM_MEMBER(echod_loop_t, tasks, receiver);
    loop->batch_woke = echod_loop_woken(loop, ECHOD_LOOP_WAKE_TASK);
    loop->in_task_batch = 1;
    while (!h2o_linklist_is_empty(messages)) {
        echod_loop_msg_t *msg = H2O_STRUCT_FROM_MEMBER(echod_loop_msg_t, super.link, messages->next);
        h2o_linklist_unlink(&msg->super.link);
        msg->run(msg);
    }
    loop->in_task_batch = 0;
    loop->batch_woke = 0;
    echod_conn_t *conn = loop->batch_dirty;
    loop->batch_dirty = NULL;
    while (conn != NULL)
        conn = echod_conn_flush_batch(conn);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    echod_loop_t *loop = listener->data;
    echod_loop_woken(loop, ECHOD_LOOP_WAKE_IO);
    if (err != NULL)
        return;
    for (int i = 0; i < 64; i++) {
        h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
        if (sock == NULL)
            break;
        echod_conn_accept(loop, sock);
    }
}

static void stop_listening(echod_loop_t *loop)
{
    if (loop->listener != NULL) {
        h2o_socket_read_stop(loop->listener);
        h2o_socket_close(loop->listener);
        loop->listener = NULL;
    }
}

static void on_control(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    echod_loop_t *loop = H2O_STRUCT_FROM_MEMBER(echod_loop_t, control, receiver);
    while (!h2o_linklist_is_empty(messages))
        h2o_linklist_unlink(messages->next);
    if (loop->draining)
        return;
    loop->draining = 1;
    loop->drain_deadline_ms = h2o_now(loop->evloop) + loop->server->cfg->shutdown.drain_timeout_ms;
    stop_listening(loop);
    size_t open = 0;
    for (h2o_linklist_t *n = loop->conns.next, *next; n != &loop->conns; n = next) {
        next = n->next;
        open += echod_conn_begin_drain(echod_conn_from_link(n));
    }
    ECHOD_ADD(echod_metrics.drain_streams_open, open);
    if (loop->rest != NULL && echod_rest_stop(loop->rest))
        loop->rest_done = 1;
    h2o_timeout_link(loop->evloop, &loop->tick, &loop->tick_entry);
}

/* How long cut streams get to carry their UNAVAILABLE out before connections are dropped. */
#define CUT_GRACE_MS 2000

static void on_tick(h2o_timeout_entry_t *entry)
{
    echod_loop_t *loop = H2O_STRUCT_FROM_MEMBER(echod_loop_t, tick_entry, entry);
    uint64_t now = h2o_now(loop->evloop);
    if (loop->rest != NULL && !loop->rest_done && echod_rest_stop(loop->rest))
        loop->rest_done = 1;
    if (!loop->cut && now >= loop->drain_deadline_ms) {
        loop->cut = 1;
        if (loop->rest != NULL && !loop->rest_done)
            echod_rest_abort(loop->rest); /* a reader that stopped reading would hold stop off for ever */
        for (h2o_linklist_t *n = loop->conns.next, *next; n != &loop->conns; n = next) {
            next = n->next;
            echod_conn_cut(echod_conn_from_link(n));
        }
    }
    if (now >= loop->drain_deadline_ms + CUT_GRACE_MS) {
        while (!h2o_linklist_is_empty(&loop->conns))
            echod_conn_abort(echod_conn_from_link(loop->conns.next));
    }
    h2o_timeout_link(loop->evloop, &loop->tick, &loop->tick_entry);
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Every 100 ms: how busy the loop thread was, and how late this timer fired (loop lag). */
static void on_sample(h2o_timeout_entry_t *entry)
{
    echod_loop_t *loop = H2O_STRUCT_FROM_MEMBER(echod_loop_t, sample_entry, entry);
    uint64_t now = echod_now_ns(), cpu = thread_cpu_ns();
    uint64_t wall = now - loop->sample_wall_ns, expected = SAMPLE_MS * 1000000ull;
    uint64_t lag_us = wall > expected ? (wall - expected) / 1000 : 0;
    uint64_t busy = wall != 0 ? (cpu - loop->sample_cpu_ns) * 1000000u / wall : 0;
    atomic_store_explicit(&loop->metrics->busy_ppm, busy > 1000000 ? 1000000 : busy, memory_order_relaxed);
    atomic_store_explicit(&loop->metrics->lag_us, lag_us, memory_order_relaxed);
    atomic_store_explicit(&loop->metrics->cpu_ns, cpu, memory_order_relaxed);
    echod_histogram_observe(&echod_metrics.loop_lag, lag_us);
    loop->sample_wall_ns = now;
    loop->sample_cpu_ns = cpu;
    h2o_timeout_link(loop->evloop, &loop->sample, &loop->sample_entry);
}

/* h2o's epoll backend takes at most this many events per wait (lib/common/socket/evloop/epoll.c.h). */
#define H2O_EVENTS_PER_WAIT 256
/*
 * A wait that brought fewer connection reads than this did not fill h2o's event array (the other
 * events one wait can bring: the loop's task queue, its listener and the REST arm's, and a socket
 * becoming writable, which an echo's small answers rarely wait for), so no ready connection was
 * left behind for the next wait.
 */
#define WAIT_FULL_READS (H2O_EVENTS_PER_WAIT - 8)

/*
 * io.read_batch netty: the read batch, served at the end of the run whose wait brought its last
 * reads (the `reads` list runs before `tail`), oldest first; the loop-tail flushes follow in the
 * same run, as Netty runs its flush task after it has processed every selected key. A full wait
 * may have left connections ready: the batch waits for the next one (loop_iterate).
 */
static void on_reads(h2o_timeout_entry_t *entry)
{
    echod_loop_t *loop = H2O_STRUCT_FROM_MEMBER(echod_loop_t, reads_entry, entry);
    if (echod_conn_take_reads(loop) >= WAIT_FULL_READS) {
        loop->reads_more = 1;
        return;
    }
    size_t served = echod_conn_serve_reads(loop);
    if (served != 0)
        echod_histogram_observe(&echod_metrics.read_batch, served);
}

void echod_loop_reads_queued(echod_loop_t *loop)
{
    if (!h2o_timeout_is_linked(&loop->reads_entry))
        h2o_timeout_link(loop->evloop, &loop->reads, &loop->reads_entry);
}

/*
 * One wait and the work it found. io.read_batch h2o: the reads of a wait newest first, at most
 * H2O_EVENTS_PER_WAIT of them, each served in its callback. netty: every connection ready at
 * the wait, served oldest first (on_reads): after a full wait, waits without a timeout follow
 * until one is not full, and the batch is served at the end of that one.
 */
static void loop_iterate(echod_loop_t *loop)
{
    run_waiting(loop);
    while (loop->reads_more) {
        loop->reads_more = 0;
        echod_loop_reads_queued(loop);
        h2o_evloop_run(loop->evloop, 0);
    }
    if (loop->reads_run_count != 0) { /* h2o: one wait's reads */
        echod_histogram_observe(&echod_metrics.read_batch, loop->reads_run_count);
        loop->reads_run_count = 0;
    }
}

static int loop_finished(echod_loop_t *loop)
{
    return loop->draining && h2o_linklist_is_empty(&loop->conns) && (loop->rest == NULL || loop->rest_done) &&
           atomic_load_explicit(&loop->live_calls, memory_order_acquire) == 0;
}

/*
 * Everything h2o of a loop is created, run and destroyed on the loop's own thread: h2o keeps
 * per-thread buffer caches, and a socket made on another thread would share that thread's.
 */
static int loop_setup(echod_loop_t *loop)
{
    const echod_config_t *cfg = loop->server->cfg;
    echod_model_init(&loop->model, &cfg->work.model);
    loop->evloop = h2o_evloop_create();
    loop->queue = h2o_multithread_create_queue(loop->evloop);
    h2o_multithread_register_receiver(loop->queue, &loop->tasks, on_tasks);
    h2o_multithread_register_receiver(loop->queue, &loop->control, on_control);
    /* timeout lists run in the order they are made: the read batch before the flushes after it */
    h2o_timeout_init(loop->evloop, &loop->reads, 0);
    loop->reads_entry.cb = on_reads;
    h2o_timeout_init(loop->evloop, &loop->tail, 0);
    h2o_timeout_init(loop->evloop, &loop->deadlines, 0);
    h2o_timeout_init(loop->evloop, &loop->tick, 10);
    loop->tick_entry.cb = on_tick;
    h2o_timeout_init(loop->evloop, &loop->handshake, cfg->transport.handshake_timeout_ms);
    h2o_timeout_init(loop->evloop, &loop->idle, cfg->transport.idle_timeout_ms);
    h2o_timeout_init(loop->evloop, &loop->sample, SAMPLE_MS);
    loop->sample_entry.cb = on_sample;
    loop->listener = h2o_evloop_socket_create(loop->evloop, loop->listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    loop->listener->data = loop;
    h2o_socket_read_start(loop->listener, on_accept);
    if (loop->rest_fd >= 0) {
        /* the REST control arm shares this loop but not the dispatch model */
        char err[256];
        if ((loop->rest = echod_rest_start(loop->evloop, loop->rest_fd, err, sizeof(err))) == NULL) {
            echod_error("listen.rest: %s", err);
            close(loop->rest_fd);
        }
    }
    return 0;
}

static void loop_teardown(echod_loop_t *loop)
{
    if (loop->rest != NULL)
        echod_rest_dispose(loop->rest);
    h2o_timeout_unlink(&loop->tick_entry);
    h2o_timeout_unlink(&loop->sample_entry);
    h2o_multithread_unregister_receiver(loop->queue, &loop->tasks);
    h2o_multithread_unregister_receiver(loop->queue, &loop->control);
    h2o_multithread_destroy_queue(loop->queue);
    h2o_evloop_run(loop->evloop, 0); /* runs the deferred close of the queue's socket */
    echod_h2o_free_queue(loop->queue);
    h2o_timeout_dispose(loop->evloop, &loop->reads);
    h2o_timeout_dispose(loop->evloop, &loop->tail);
    h2o_timeout_dispose(loop->evloop, &loop->deadlines);
    h2o_timeout_dispose(loop->evloop, &loop->tick);
    h2o_timeout_dispose(loop->evloop, &loop->sample);
    h2o_timeout_dispose(loop->evloop, &loop->handshake);
    h2o_timeout_dispose(loop->evloop, &loop->idle);
    h2o_evloop_destroy(loop->evloop);
}

static void *loop_main(void *arg)
{
    echod_loop_t *loop = arg;
    char name[16];
    snprintf(name, sizeof(name), "echod-io-%u", loop->index);
    pthread_setname_np(pthread_self(), name);
    echod_loop__current = loop;
    echod_pool_init(&loop->pool, POOL_CAP_BYTES);
    echod_pool_bind_thread(&loop->pool); /* for the gRPC messages made and freed here */
    loop_setup(loop);
    /* from here other threads may post to this loop */
    pthread_mutex_lock(&loop->ready_mutex);
    loop->ready = 1;
    pthread_cond_signal(&loop->ready_cond);
    pthread_mutex_unlock(&loop->ready_mutex);

    loop->sample_wall_ns = echod_now_ns();
    loop->sample_cpu_ns = thread_cpu_ns();
    h2o_timeout_link(loop->evloop, &loop->sample, &loop->sample_entry);
    while (!loop_finished(loop))
        loop_iterate(loop);
    loop_teardown(loop);
    /* every session and call of this loop is gone; messages still held by workers go to free() */
    echod_pool_bind_thread(NULL);
    echod_pool_dispose(&loop->pool);
    echod_loop__current = NULL;
    return NULL;
}

echod_loop_t *echod_loop_start(echod_server_t *server, unsigned index, int listen_fd, int rest_fd, char *err,
                               size_t errlen)
{
    echod_loop_t *loop = echod_must(calloc(1, sizeof(*loop)), "I/O loop");
    loop->server = server;
    loop->index = index;
    loop->listen_fd = listen_fd;
    loop->rest_fd = rest_fd;
    loop->metrics = echod_metrics_add_loop(index);
    h2o_linklist_init_anchor(&loop->conns);
    loop->reads_tail = &loop->reads_head;
    h2o_linklist_init_anchor(&loop->last_batch);
    atomic_init(&loop->live_calls, 0);
    pthread_mutex_init(&loop->ready_mutex, NULL);
    pthread_cond_init(&loop->ready_cond, NULL);
    int rv = pthread_create(&loop->thread, NULL, loop_main, loop);
    if (rv != 0) {
        snprintf(err, errlen, "cannot start I/O thread: %s", strerror(rv));
        free(loop);
        return NULL;
    }
    pthread_mutex_lock(&loop->ready_mutex);
    while (!loop->ready)
        pthread_cond_wait(&loop->ready_cond, &loop->ready_mutex);
    pthread_mutex_unlock(&loop->ready_mutex);
    return loop;
}

void echod_loop_shutdown(echod_loop_t *loop)
{
    /* once per loop: on_control only unlinks it */
    h2o_multithread_send_message(&loop->control, &loop->shutdown_msg);
}

void echod_loop_join(echod_loop_t *loop)
{
    pthread_join(loop->thread, NULL);
    pthread_mutex_destroy(&loop->ready_mutex);
    pthread_cond_destroy(&loop->ready_cond);
    free(loop);
}
