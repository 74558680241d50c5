#include "util/pool.h"

#include <stdlib.h>
#include <string.h>

/* 16 bytes ahead of every block keep malloc's alignment and say which class it came from. */
#define HEADER      16
#define CLASS_LARGE 0xff
#define MIN_SHIFT   6

struct echod_pool_block {
    echod_pool_block_t *next; /* while on a freelist */
    uint8_t cls;
};
_Static_assert(sizeof(echod_pool_block_t) <= HEADER, "the block header fits in HEADER bytes");

static unsigned class_of(size_t size)
{
    if (size <= ((size_t)1 << MIN_SHIFT))
        return 0;
    return (unsigned)(64 - __builtin_clzll((unsigned long long)size - 1)) - MIN_SHIFT;
}

static size_t class_size(unsigned cls)
{
    return (size_t)1 << (cls + MIN_SHIFT);
}

/* A freelist hides use-after-free from AddressSanitizer: under it, nothing is kept. */
#if defined(__SANITIZE_ADDRESS__)
#define POOL_KEEPS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_KEEPS 0
#endif
#endif
#ifndef POOL_KEEPS
#define POOL_KEEPS 1
#endif

void echod_pool_init(echod_pool_t *pool, size_t cap_bytes)
{
    memset(pool, 0, sizeof(*pool));
    pool->cap_bytes = POOL_KEEPS ? cap_bytes : 0;
}

void echod_pool_dispose(echod_pool_t *pool)
{
    for (unsigned cls = 0; cls < ECHOD_POOL_CLASSES; cls++) {
        while (pool->free[cls] != NULL) {
            echod_pool_block_t *b = pool->free[cls];
            pool->free[cls] = b->next;
            free(b);
        }
    }
    pool->cached_bytes = 0;
}

void *echod_pool_malloc(echod_pool_t *pool, size_t size)
{
    echod_pool_block_t *b;
    if (size > ECHOD_POOL_MAX_BLOCK) {
        if (size > SIZE_MAX - HEADER || (b = malloc(HEADER + size)) == NULL)
            return NULL;
        b->cls = CLASS_LARGE;
        return (char *)b + HEADER;
    }
    unsigned cls = class_of(size);
    if ((b = pool->free[cls]) != NULL) {
        pool->free[cls] = b->next;
        pool->cached_bytes -= class_size(cls);
    } else if ((b = malloc(HEADER + class_size(cls))) == NULL) {
        return NULL;
    }
    b->cls = (uint8_t)cls;
    return (char *)b + HEADER;
}

void *echod_pool_calloc(echod_pool_t *pool, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = echod_pool_malloc(pool, n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

static size_t usable(const echod_pool_block_t *b, size_t large_hint)
{
    return b->cls == CLASS_LARGE ? large_hint : class_size(b->cls);
}

void *echod_pool_realloc(echod_pool_t *pool, void *ptr, size_t size)
{
    if (ptr == NULL)
        return echod_pool_malloc(pool, size);
    echod_pool_block_t *b = (echod_pool_block_t *)((char *)ptr - HEADER);
    if (b->cls == CLASS_LARGE) {
        if (size > ECHOD_POOL_MAX_BLOCK) {
            if (size > SIZE_MAX - HEADER || (b = realloc(b, HEADER + size)) == NULL)
                return NULL;
            return (char *)b + HEADER;
        }
    } else if (size <= class_size(b->cls)) {
        return ptr;
    }
    /* between a class and a large block: the old size is unknown for a large one, but it was
     * larger than any class, so copying `size` (a class size at most) bytes stays inside it */
    void *p = echod_pool_malloc(pool, size);
    if (p == NULL)
        return NULL;
    size_t old = usable(b, size);
    memcpy(p, ptr, old < size ? old : size);
    echod_pool_free(pool, ptr);
    return p;
}

void echod_pool_free(echod_pool_t *pool, void *ptr)
{
    if (ptr == NULL)
        return;
    echod_pool_block_t *b = (echod_pool_block_t *)((char *)ptr - HEADER);
    unsigned cls = b->cls;
    if (cls == CLASS_LARGE || pool->cached_bytes + class_size(cls) > pool->cap_bytes) {
        free(b);
        return;
    }
    b->next = pool->free[cls];
    pool->free[cls] = b;
    pool->cached_bytes += class_size(cls);
}

void echod_pool_free_foreign(void *ptr)
{
    if (ptr != NULL)
        free((char *)ptr - HEADER);
}
