#ifndef ECHOD_POOL_H
#define ECHOD_POOL_H

#include <stddef.h>
#include <stdint.h>

/*
 * A size-class freelist owned by one thread: nghttp2 allocates and frees about eight small
 * blocks per unary call (stream, outbound items, header copies), and glibc's malloc/free cost
 * several times a freelist pop/push. Blocks up to ECHOD_POOL_MAX_BLOCK bytes are kept on a
 * freelist of their power-of-two class when freed, up to `cap_bytes` in all; larger blocks,
 * and blocks freed past the cap, go to malloc/free.
 *
 * Threads: a pool belongs to one thread, its owner. echod_pool_init, _dispose, _malloc,
 * _calloc, _realloc and _free are called on the owner only, and echod_pool_bind_thread binds a
 * pool to its owner (to one thread at most). Callable on any thread: echod_pool_thread_malloc
 * and _release, which touch the calling thread's bound pool only, if it has one.
 * A block may be freed on another thread than the one that allocated it (with
 * echod_pool_release), even after its pool was disposed.
 *
 * A pool must outlive every block allocated from it that is given back with echod_pool_free
 * (dispose it after the last nghttp2 session using it); blocks given back with _release do not
 * need it. A zeroed pool is valid and keeps nothing; so is every pool in an
 * AddressSanitizer build (there, the bytes of a block past the size asked for are poisoned, so
 * an overflow into its class's slack is still reported).
 */

#define ECHOD_POOL_CLASSES   7 /* 64, 128, ..., 4096 */
#define ECHOD_POOL_MAX_BLOCK 4096

typedef struct echod_pool_block echod_pool_block_t;

typedef struct {
    echod_pool_block_t *free[ECHOD_POOL_CLASSES];
    size_t cached_bytes; /* bytes on the freelists */
    size_t cap_bytes;
} echod_pool_t;

void echod_pool_init(echod_pool_t *pool, size_t cap_bytes);
/* Frees the cached blocks. Unbind the pool (echod_pool_bind_thread(NULL)) first if it is bound. */
void echod_pool_dispose(echod_pool_t *pool);

/* A block from pool's freelist, else from malloc; pool NULL (any thread): from malloc, owned by
 * no pool, of a class's size all the same so that a pool may keep it. */
void *echod_pool_malloc(echod_pool_t *pool, size_t size);
void *echod_pool_calloc(echod_pool_t *pool, size_t n, size_t size);
void *echod_pool_realloc(echod_pool_t *pool, void *ptr, size_t size);
/* A block of any pool or of echod_pool_thread_malloc, kept on this pool's freelist up to the cap. */
void echod_pool_free(echod_pool_t *pool, void *ptr);

/*
 * The calling thread's pool, for allocations that do not know which thread they run on (gRPC
 * messages: made on a loop or on a worker, freed on either). An I/O loop thread binds its own
 * pool when it starts and unbinds it (NULL) before disposing of it; every other thread has
 * none. Owning thread of `pool` (or any thread, with NULL).
 */
void echod_pool_bind_thread(echod_pool_t *pool);

/*
 * Any thread: a block from the calling thread's bound pool, or from malloc on a thread with
 * none. The block remembers the pool it came from (NULL for malloc), as an address only.
 */
void *echod_pool_thread_malloc(size_t size);

/*
 * Any thread: gives back a block of echod_pool_thread_malloc or of any pool. When the calling
 * thread's bound pool allocated it, it goes on that pool's freelist (as echod_pool_free); in
 * every other case (another thread's pool, no pool, no pool bound here) to free(), without
 * touching any pool: the owner is compared by address, never read, so it may be gone. NULL is
 * a no-op.
 */
void echod_pool_release(void *ptr);

#endif
