/*
 * An I/O loop thread (docs/threads.md): its listener, its connections, the cross-thread
 * queue that workers post loop tasks to, and the timers (loop tail, deadlines, drain).
 */
#ifndef ECHOD_LOOP_H
#define ECHOD_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <h2o/multithread.h>
#include <h2o/socket.h>
#include <h2o/timeout.h>
#include "admin/stage.h"
#include "util/pool.h"
#include "transport/events.h"
#include "transport/server.h"
#include "work/model.h"

struct echod_conn;

/* Work posted to a loop from another thread; run() is called on the loop thread. */
typedef struct echod_loop_msg {
    h2o_multithread_message_t super;
    void (*run)(struct echod_loop_msg *msg);
} echod_loop_msg_t;

typedef struct echod_loop {
    echod_server_t *server;
    unsigned index;
    pthread_t thread;
    h2o_evloop_t *evloop;
    h2o_socket_t *listener;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t tasks;   /* echod_loop_msg_t from workers */
    h2o_multithread_receiver_t control; /* shutdown */
    h2o_timeout_t tail;                 /* 0 ms: fires after every read of the iteration (loop_tail flush) */
    h2o_timeout_t deadlines;            /* 0 ms list kept sorted by deadline, see echod_loop_link_deadline */
    h2o_timeout_t tick;                 /* 10 ms: drain progress checks */
    h2o_timeout_entry_t tick_entry;
    h2o_timeout_t handshake; /* transport.handshake_timeout */
    h2o_timeout_t idle;      /* transport.idle_timeout */
    h2o_timeout_t sample;    /* 100 ms: loop busy ratio and lag */
    h2o_timeout_entry_t sample_entry;
    uint64_t sample_wall_ns, sample_cpu_ns;
    struct echod_loop_metrics *metrics;
    h2o_linklist_t conns;           /* echod_conn_t.link */
    struct echod_conn *batch_dirty; /* connections written to by the current task batch */
    /* io.read_batch netty (conn.c): connections whose read callback came in the current h2o run,
     * and the batch they join, both oldest first (the order they became ready); reads_run_count
     * counts the run's reads under either order (echod_loop_read_batch_connections) */
    struct echod_conn *reads_run, *reads_head, **reads_tail;
    h2o_linklist_t last_batch; /* echod_conn_t.batch_link: the last batch, in the order it was served */
    size_t reads_run_count;
    h2o_timeout_t reads; /* 0 ms, before `tail`: serves the read batch (io.read_batch netty) */
    h2o_timeout_entry_t reads_entry;
    int reads_more; /* the last wait was full: the batch waits for the next one */
    int in_task_batch;
    /* Wake-ups (echod_loop_woken): this thread's voluntary context switches and the monotonic
     * clock as the iteration's poll began, whether a callback has asked yet in this iteration,
     * and whether the running task batch woke the loop (its first task found the loop parked). */
    uint64_t poll_switches, poll_began_ns;
    int iteration_asked;
    int batch_woke;
    echod_model_t model; /* the server's work.model: what a wake-up by I/O burns */
    int draining, cut;
    uint64_t drain_deadline_ms;
    h2o_multithread_message_t shutdown_msg;
    atomic_long live_calls; /* calls of this loop not yet freed (freed on any thread) */
    int listen_fd;
    int rest_fd;                          /* listen.rest, or -1 */
    struct echod_rest *rest;              /* the REST control arm on this loop, or NULL */
    int rest_done;                        /* its stop has finished (drain) */
    char stage[ECHOD_STAGE_NAME_MAX + 1]; /* the last echod-stage request header seen on this loop */
    echod_pool_t pool;                    /* nghttp2 sessions, calls, gRPC messages (thread-bound); loop thread only */
    uint64_t calls_seen;                  /* streams begun on this loop: each call's seq (loop thread only) */
    pthread_mutex_t ready_mutex;          /* start-up: the loop thread has built its evloop and queue */
    pthread_cond_t ready_cond;
    int ready;
} echod_loop_t;

/* Starts the loop thread serving listen_fd (gRPC) and rest_fd (REST control arm, -1 = none). Main thread. */
echod_loop_t *echod_loop_start(echod_server_t *server, unsigned index, int listen_fd, int rest_fd, char *err,
                               size_t errlen);

/* Any thread: queues msg; the loop runs it with the rest of its batch, then flushes. */
void echod_loop_post(echod_loop_t *loop, echod_loop_msg_t *msg);

/* The loop whose thread this is, or NULL: read on every step and handler operation, so inline. */
extern _Thread_local echod_loop_t *echod_loop__current;
static inline echod_loop_t *echod_loop_current(void)
{
    return echod_loop__current;
}

/*
 * Loop thread, as a callback that may have woken the loop begins: a connection's read or an
 * accept (ECHOD_LOOP_WAKE_IO), the batch of loop tasks (ECHOD_LOOP_WAKE_TASK). Returns 1 when it
 * is the first such callback of the loop's iteration and the thread slept in the iteration's
 * poll (its voluntary context switches moved: getrusage, once, lazily): a wake-up, counted in
 * echod_loop_wakeups_total{cause} with the time since the poll began in
 * echod_loop_wakeup_sleep_seconds_total{cause}, and by I/O charged work.model's wake-up, priced
 * by that sleep, on the loop. 0 otherwise: the loop was running, or the callback is not the
 * iteration's first.
 */
int echod_loop_woken(echod_loop_t *loop, echod_loop_wake_t cause);

/* Loop thread, as a loop task runs: 1 for the first task of a batch that woke the loop (it
 * found the loop parked), 0 for every other (it was queued while the loop ran). */
static inline int echod_loop_task_woke(echod_loop_t *loop)
{
    int woke = loop->batch_woke;
    loop->batch_woke = 0;
    return woke;
}

/* Any thread: stop accepting, GOAWAY every connection, drain up to shutdown.drain_timeout. */
void echod_loop_shutdown(echod_loop_t *loop);

/* Main thread: waits for the loop thread to finish draining, then frees it. */
void echod_loop_join(echod_loop_t *loop);

/* Loop thread: a connection joined the read batch (io.read_batch netty): it is served at the end of this run. */
void echod_loop_reads_queued(echod_loop_t *loop);

/* Loop thread: links entry to fire at deadline_ms (h2o_now time); unlink with h2o_timeout_unlink. */
void echod_loop_link_deadline(echod_loop_t *loop, h2o_timeout_entry_t *entry, uint64_t deadline_ms);

#endif
