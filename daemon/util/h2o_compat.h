/*
 * Work-arounds for memory libh2o 2.2.x never frees. They depend on how that series allocates,
 * so other releases get none of them: at worst a leak, never a double free.
 */
#ifndef ECHOD_H2O_COMPAT_H
#define ECHOD_H2O_COMPAT_H

#include <h2o/multithread.h>

/* Frees what h2o_multithread_destroy_queue (evloop build) leaves: the queue struct itself. */
void echod_h2o_free_queue(h2o_multithread_queue_t *queue);

/*
 * Hands this thread's h2o free lists (socket buffers, request-pool chunks) back to malloc. They
 * are thread-local and die with the thread. Call on the thread, after its last h2o object went.
 */
void echod_h2o_drain_thread_caches(void);

#endif
