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
 * Single-threaded: every function is called on the owning thread only. A pool must outlive
 * every block allocated from it (dispose it after the last nghttp2 session using it). A zeroed
 * pool is valid and keeps nothing; so is every pool in an AddressSanitizer build.
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
/* Frees the cached blocks. */
void echod_pool_dispose(echod_pool_t *pool);

void *echod_pool_malloc(echod_pool_t *pool, size_t size);
void *echod_pool_calloc(echod_pool_t *pool, size_t n, size_t size);
void *echod_pool_realloc(echod_pool_t *pool, void *ptr, size_t size);
void echod_pool_free(echod_pool_t *pool, void *ptr);
/* Any thread: gives a block of some pool back to malloc, without touching the pool. */
void echod_pool_free_foreign(void *ptr);

#endif
