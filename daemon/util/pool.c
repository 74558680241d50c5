#include "util/pool.h"

#include <stdlib.h>
#include <string.h>

/*
 * 16 bytes ahead of every block keep malloc's alignment and say which class it came from and,
 * while it is allocated, which pool it came from. Any pool may keep any block of a class (each
 * is a malloc'd HEADER + class size): the owner only decides who keeps it in echod_pool_release.
 */
#define HEADER      16
#define CLASS_LARGE 0xff
#define MIN_SHIFT   6

struct echod_pool_block {
    union {
        echod_pool_block_t *next;  /* while on a freelist */
        const echod_pool_t *owner; /* while allocated: its pool, NULL from malloc; compared, never read */
    };
    uint8_t cls;
};
_Static_assert(sizeof(echod_pool_block_t) <= HEADER, "the block header fits in HEADER bytes");

/*
 * The pool bound to this thread (echod_pool_bind_thread), NULL on a thread with none. gRPC
 * messages are made and freed on I/O loops and on workers alike, by code that does not know
 * which thread it is on: like echod_loop_current() for the loop (loop.c), this thread-local says
 * which pool, if any, the thread may use. An I/O loop binds its own pool in loop_main before it
 * serves anything and unbinds it before disposing of it, so a block freed after that goes to
 * free(); no other thread binds one.
 */
static __thread echod_pool_t *thread_pool;

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

/*
 * A freelist hides use-after-free from AddressSanitizer: under it, nothing is kept. A class
 * block is bigger than asked for, so the bytes past the size asked for are poisoned: an overflow
 * is reported where a malloc of that size would have it reported.
 */
#if defined(__SANITIZE_ADDRESS__)
#define POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_ASAN 1
#endif
#endif
#ifdef POOL_ASAN
#include <sanitizer/asan_interface.h>
#define POOL_KEEPS 0
/* [p, p + size) usable, [p + size, p + room) poisoned */
static void mark_usable(void *p, size_t size, size_t room)
{
    ASAN_UNPOISON_MEMORY_REGION(p, size);
    ASAN_POISON_MEMORY_REGION((char *)p + size, room - size);
}
#else
#define POOL_KEEPS 1
static void mark_usable(void *p, size_t size, size_t room)
{
    (void)p, (void)size, (void)room;
}
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
    } else {
        /* a class's size even without a pool: a pool may keep the block (echod_pool_free), and
         * glibc's thread cache hands blocks of the same size round between loops and workers */
        unsigned cls = class_of(size);
        if (pool != NULL && (b = pool->free[cls]) != NULL) {
            pool->free[cls] = b->next;
            pool->cached_bytes -= class_size(cls);
        } else if ((b = malloc(HEADER + class_size(cls))) == NULL) {
            return NULL;
        }
        b->cls = (uint8_t)cls;
        mark_usable((char *)b + HEADER, size, class_size(cls));
    }
    b->owner = pool;
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
        mark_usable(ptr, size, class_size(b->cls));
        return ptr;
    }
    /* between a class and a large block: the old size is unknown for a large one, but it was
     * larger than any class, so copying `size` (a class size at most) bytes stays inside it */
    void *p = echod_pool_malloc(pool, size);
    if (p == NULL)
        return NULL;
    size_t old = usable(b, size);
    if (b->cls != CLASS_LARGE)
        mark_usable(ptr, old, old); /* its whole class is copied: the bytes past the old size too */
    memcpy(p, ptr, old < size ? old : size);
    echod_pool_free(pool, ptr);
    return p;
}

static inline void block_free(echod_pool_t *pool, echod_pool_block_t *b)
{
    unsigned cls = b->cls;
    if (cls == CLASS_LARGE || pool->cached_bytes + class_size(cls) > pool->cap_bytes) {
        free(b);
        return;
    }
    b->next = pool->free[cls];
    pool->free[cls] = b;
    pool->cached_bytes += class_size(cls);
}

void echod_pool_free(echod_pool_t *pool, void *ptr)
{
    if (ptr != NULL)
        block_free(pool, (echod_pool_block_t *)((char *)ptr - HEADER));
}

void echod_pool_bind_thread(echod_pool_t *pool)
{
    thread_pool = pool;
}

void *echod_pool_thread_malloc(size_t size)
{
    return echod_pool_malloc(thread_pool, size);
}

void echod_pool_release(void *ptr)
{
    if (ptr == NULL)
        return;
    echod_pool_block_t *b = (echod_pool_block_t *)((char *)ptr - HEADER);
    echod_pool_t *pool = thread_pool;
    /* only this thread pushes on its own pool; a block of any other (maybe disposed) pool, or of
     * none, goes to free(). Were a pool made later at a disposed one's address, it may keep the
     * disposed pool's blocks: any pool can keep any class block. */
    if (pool != NULL && b->owner == pool)
        block_free(pool, b);
    else
        free(b);
}
