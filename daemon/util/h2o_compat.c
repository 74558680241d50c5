#include <stdlib.h>
#include <h2o/memory.h>
#include <h2o/socket.h>
#include <h2o/version.h>
#include "util/h2o_compat.h"

#if H2O_VERSION_MAJOR == 2 && H2O_VERSION_MINOR == 2
#define H2O_22 1
#else
#define H2O_22 0
#endif
/* Size of h2o 2.2's thread-local free list of request-pool chunks (memory.c). */
#define POOL_FREELIST_MAX 16

void echod_h2o_free_queue(h2o_multithread_queue_t *queue)
{
#if H2O_22
    free(queue);
#else
    (void)queue;
#endif
}

void echod_h2o_drain_thread_caches(void)
{
    /* public: h2o_socket_buffer_prototype.allocator */
    h2o_mem_recycle_t *recycle = &h2o_socket_buffer_prototype.allocator;
    while (recycle->cnt != 0)
        free(h2o_mem_alloc_recycle(recycle, 0));
#if H2O_22
    /*
     * Request-pool chunks go to a list h2o keeps static, out of reach. A fresh pool's first
     * allocation takes a chunk from it and records it in pool.chunks (the chunk is the malloc'd
     * block itself), so taking and freeing as many as the list can hold empties it.
     */
    for (int i = 0; i < POOL_FREELIST_MAX; ++i) {
        h2o_mem_pool_t pool;
        h2o_mem_init_pool(&pool);
        h2o_mem_alloc_pool(&pool, 1);
        free(pool.chunks);
    }
#endif
}
