/* The loop's allocator: blocks keep their contents across realloc, are reused by size class,
 * and the freelists never hold more than the cap. A pool bound to a thread takes back only its
 * own blocks, and only on that thread; every other free goes to free(). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "grpc/deframe.h"
#include "util/pool.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

static void fill(unsigned char *p, size_t n, unsigned char seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i);
}

static int same(const unsigned char *p, size_t n, unsigned char seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i))
            return 0;
    return 1;
}

static void test_reuse_and_cap(void)
{
    echod_pool_t pool;
    echod_pool_init(&pool, 4 * 128);
    void *a = echod_pool_malloc(&pool, 100);
    CHECK(a != NULL && ((uintptr_t)a & 15) == 0);
    echod_pool_free(&pool, a);
    if (pool.cached_bytes == 0) {
        printf("an AddressSanitizer build: the pool keeps nothing, reuse not checked\n");
        return;
    }
    CHECK(pool.cached_bytes == 128);
    /* same class (65..128 bytes): the freed block comes back */
    void *b = echod_pool_malloc(&pool, 70);
    CHECK(b == a);
    CHECK(pool.cached_bytes == 0);
    echod_pool_free(&pool, b);

    void *blocks[8];
    for (int i = 0; i < 8; i++)
        blocks[i] = echod_pool_malloc(&pool, 128);
    for (int i = 0; i < 8; i++)
        echod_pool_free(&pool, blocks[i]);
    CHECK(pool.cached_bytes == 4 * 128); /* the other four went back to malloc */
    echod_pool_dispose(&pool);
    CHECK(pool.cached_bytes == 0);
}

static void test_sizes(void)
{
    echod_pool_t pool;
    echod_pool_init(&pool, 1 << 20);
    size_t sizes[] = {0, 1, 63, 64, 65, 4095, 4096, 4097, 100000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *p = echod_pool_malloc(&pool, sizes[i]);
        CHECK(p != NULL);
        fill(p, sizes[i], (unsigned char)i);
        CHECK(same(p, sizes[i], (unsigned char)i));
        echod_pool_free(&pool, p);
    }
    unsigned char *z = echod_pool_calloc(&pool, 10, 30);
    CHECK(z != NULL && z[0] == 0 && z[299] == 0);
    echod_pool_free(&pool, z);
    CHECK(echod_pool_calloc(&pool, SIZE_MAX / 2, 4) == NULL);
    CHECK(echod_pool_malloc(&pool, SIZE_MAX - 4) == NULL);
    echod_pool_free(&pool, NULL);
    echod_pool_dispose(&pool);
}

static void test_realloc(void)
{
    echod_pool_t pool;
    echod_pool_init(&pool, 1 << 20);
    /* grow through the classes into a large block and back: the contents survive */
    unsigned char *p = echod_pool_realloc(&pool, NULL, 10);
    fill(p, 10, 7);
    size_t steps[] = {50, 200, 3000, 9000, 20000, 500, 8};
    size_t have = 10;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        p = echod_pool_realloc(&pool, p, steps[i]);
        CHECK(p != NULL);
        size_t keep = have < steps[i] ? have : steps[i];
        CHECK(same(p, keep, 7));
        fill(p, steps[i], 7);
        have = steps[i];
    }
    echod_pool_free(&pool, p);
    echod_pool_dispose(&pool);
}

static void test_zeroed_pool_keeps_nothing(void)
{
    echod_pool_t pool;
    memset(&pool, 0, sizeof(pool));
    void *a = echod_pool_malloc(&pool, 32);
    echod_pool_free(&pool, a);
    CHECK(pool.cached_bytes == 0);
    /* a block of a pool goes back to malloc from a thread it is not bound to */
    echod_pool_release(echod_pool_malloc(&pool, 500));
    echod_pool_release(NULL);
}

/* --- the thread's pool (echod_pool_bind_thread, _thread_malloc, _release) --- */

/* Runs fn(arg) on a new thread, which has no pool bound, and waits for it. */
static void on_other_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, arg) == 0);
    pthread_join(t, NULL);
}

static int keeps(void)
{
    echod_pool_t probe;
    echod_pool_init(&probe, 1024);
    return probe.cap_bytes != 0; /* 0 in an AddressSanitizer build */
}

static void test_owner_reuses(void)
{
    echod_pool_t pool;
    echod_pool_init(&pool, 1 << 20);
    echod_pool_bind_thread(&pool);
    unsigned char *a = echod_pool_thread_malloc(100);
    CHECK(a != NULL && ((uintptr_t)a & 15) == 0);
    fill(a, 100, 3);
    echod_pool_release(a);
    if (keeps()) {
        CHECK(pool.cached_bytes == 128); /* back on the 128-byte freelist */
        CHECK(echod_pool_thread_malloc(70) == a);
        CHECK(pool.cached_bytes == 0);
        /* echod_pool_malloc's blocks are the pool's too */
        void *b = echod_pool_malloc(&pool, 3000);
        echod_pool_release(b);
        CHECK(pool.cached_bytes == 4096);
        CHECK(echod_pool_thread_malloc(2049) == b);
        echod_pool_release(b);
    } else {
        printf("an AddressSanitizer build: the pool keeps nothing, reuse not checked\n");
        a = echod_pool_thread_malloc(70);
    }
    echod_pool_release(a);
    echod_pool_release(NULL);
    echod_pool_bind_thread(NULL);
    /* unbound: neither allocated from the pool nor kept by it */
    size_t cached = pool.cached_bytes;
    echod_pool_release(echod_pool_thread_malloc(100));
    CHECK(pool.cached_bytes == cached);
    echod_pool_dispose(&pool);
}

typedef struct {
    void *block;
    echod_pool_t *own; /* bound on the thread first, unless NULL */
    size_t own_kept;   /* what own kept of a block of its own made and freed there: the binding works */
} foreign_t;

static void *release_there(void *arg)
{
    foreign_t *f = arg;
    if (f->own != NULL) {
        echod_pool_bind_thread(f->own);
        echod_pool_release(echod_pool_thread_malloc(64));
        f->own_kept = f->own->cached_bytes;
    }
    echod_pool_release(f->block);
    echod_pool_bind_thread(NULL);
    return NULL;
}

static void test_foreign_thread_frees(void)
{
    echod_pool_t pool, other, before;
    echod_pool_init(&pool, 1 << 20);
    echod_pool_init(&other, 1 << 20);
    echod_pool_bind_thread(&pool);
    /* a block on a freelist, so that any change to the pool shows */
    echod_pool_release(echod_pool_thread_malloc(200));

    /* a thread with no pool: free(), the owning pool untouched */
    foreign_t f = {echod_pool_thread_malloc(100), NULL, 0};
    memcpy(&before, &pool, sizeof(pool));
    on_other_thread(release_there, &f);
    CHECK(memcmp(&before, &pool, sizeof(pool)) == 0);

    /* a thread with a pool of its own (another loop): free(), neither pool keeps it */
    f = (foreign_t){echod_pool_thread_malloc(100), &other, 0};
    memcpy(&before, &pool, sizeof(pool));
    on_other_thread(release_there, &f);
    CHECK(f.own_kept == (keeps() ? 64u : 0u));
    CHECK(memcmp(&before, &pool, sizeof(pool)) == 0);
    CHECK(other.cached_bytes == f.own_kept);

    echod_pool_bind_thread(NULL);
    echod_pool_dispose(&pool);

    /* blocks outlive their pool, even its memory (AddressSanitizer would see the owner read) */
    echod_pool_t *gone = malloc(sizeof(*gone));
    echod_pool_init(gone, 1 << 20);
    echod_pool_bind_thread(gone);
    void *late = echod_pool_thread_malloc(100), *later = echod_pool_thread_malloc(100);
    echod_pool_bind_thread(NULL);
    echod_pool_dispose(gone);
    free(gone);
    echod_pool_release(late); /* the owning thread, after the unbinding */
    f = (foreign_t){later, &other, 0};
    on_other_thread(release_there, &f); /* a thread with another pool */
    CHECK(other.cached_bytes == f.own_kept);
    echod_pool_dispose(&other);
}

typedef struct {
    size_t size;
    unsigned char *block;
} alloc_t;

static void *alloc_there(void *arg)
{
    alloc_t *a = arg;
    a->block = echod_pool_thread_malloc(a->size);
    return NULL;
}

static void test_unbound_thread_mallocs(void)
{
    echod_pool_t pool;
    echod_pool_init(&pool, 1 << 20);
    /* no pool bound: malloc, and no pool owns the block */
    unsigned char *p = echod_pool_thread_malloc(100);
    CHECK(p != NULL && ((uintptr_t)p & 15) == 0);
    fill(p, 100, 9);
    echod_pool_bind_thread(&pool);
    echod_pool_release(p); /* not this pool's: free() */
    CHECK(pool.cached_bytes == 0);

    /* made on another thread, which has no pool, freed here: free() too */
    alloc_t a = {300, NULL};
    on_other_thread(alloc_there, &a);
    CHECK(a.block != NULL);
    fill(a.block, 300, 1);
    echod_pool_release(a.block);
    CHECK(pool.cached_bytes == 0);

    /* such a block is class-sized: a pool may still keep it when told to (echod_pool_free) */
    a.block = NULL;
    on_other_thread(alloc_there, &a);
    fill(a.block, 300, 1);
    echod_pool_free(&pool, a.block);
    if (keeps()) {
        CHECK(pool.cached_bytes == 512);
        CHECK(echod_pool_thread_malloc(512) == a.block);
        echod_pool_release(a.block);
        CHECK(pool.cached_bytes == 512);
    }
    echod_pool_bind_thread(NULL);
    echod_pool_dispose(&pool);
    CHECK(echod_pool_thread_malloc(SIZE_MAX - 4) == NULL);
    echod_pool_release(echod_pool_thread_malloc(0));
}

static void test_large_blocks(void)
{
    echod_pool_t pool;
    echod_pool_init(&pool, 1 << 20);
    size_t sizes[] = {4096, 4097, 100000};
    for (int bound = 0; bound < 2; bound++) {
        echod_pool_bind_thread(bound ? &pool : NULL);
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            unsigned char *p = echod_pool_thread_malloc(sizes[i]);
            CHECK(p != NULL && ((uintptr_t)p & 15) == 0);
            fill(p, sizes[i], (unsigned char)i);
            CHECK(same(p, sizes[i], (unsigned char)i));
            echod_pool_release(p);
        }
        /* above ECHOD_POOL_MAX_BLOCK nothing is kept; the largest class is */
        CHECK(pool.cached_bytes == (bound && keeps() ? 4096u : 0u));
    }
    echod_pool_bind_thread(NULL);
    echod_pool_dispose(&pool);
}

static void *free_msg_there(void *arg)
{
    echod_msg_free(arg);
    return NULL;
}

static void *new_msg_there(void *arg)
{
    *(echod_msg_t **)arg = echod_msg_from("from a worker", 13);
    return NULL;
}

static void test_messages(void)
{
    echod_pool_t pool;
    echod_pool_init(&pool, 1 << 20);
    echod_pool_bind_thread(&pool);
    /* made and freed on the loop: back to its pool, and the next message reuses it */
    echod_msg_t *m = echod_msg_from("hello", 5);
    CHECK(m != NULL && m->len == 5 && memcmp(echod_msg_payload(m), "hello", 5) == 0);
    echod_msg_free(m);
    if (keeps()) {
        CHECK(pool.cached_bytes == 64);
        echod_msg_t *again = echod_msg_new(20);
        CHECK(again == m && pool.cached_bytes == 0);
        echod_msg_free(again);
    }
    /* made on the loop, freed on a worker: free(), the pool untouched */
    echod_pool_t before;
    m = echod_msg_from("to a worker", 11);
    memcpy(&before, &pool, sizeof(pool));
    on_other_thread(free_msg_there, m);
    CHECK(memcmp(&before, &pool, sizeof(pool)) == 0);
    /* made on a worker, freed on the loop: free() */
    m = NULL;
    on_other_thread(new_msg_there, &m);
    CHECK(m != NULL && m->len == 13 && echod_msg_payload(m)[0] == 'f');
    echod_msg_free(m);
    CHECK(memcmp(&before, &pool, sizeof(pool)) == 0);
    /* a message above the largest class, and the deframer's own messages */
    m = echod_msg_new(10000);
    CHECK(m != NULL && echod_msg_frame_len(m) == 10005);
    memset(echod_msg_payload(m), 'x', 10000);
    on_other_thread(free_msg_there, m);
    echod_deframer_t d;
    echod_deframer_init(&d, 1 << 20);
    const uint8_t wire[] = {0, 0, 0, 0, 2, 'h', 'i', 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK(echod_deframer_feed(&d, wire, sizeof(wire)) == ECHOD_DEFRAME_OK);
    echod_msg_t *hi = echod_deframer_pop(&d), *empty = echod_deframer_pop(&d);
    CHECK(hi != NULL && hi->len == 2 && empty != NULL && empty->len == 0);
    on_other_thread(free_msg_there, hi);
    echod_msg_free(empty);
    echod_deframer_dispose(&d); /* frees the partial one */
    echod_msg_free(NULL);
    echod_pool_bind_thread(NULL);
    echod_pool_dispose(&pool);
}

#ifdef TEST_ASAN
/* Under AddressSanitizer a block ends where the size asked for ends, not at its class's end. */
static void test_asan_poisons_slack(void)
{
    echod_pool_t pool;
    echod_pool_init(&pool, 1 << 20);
    unsigned char *p = echod_pool_malloc(&pool, 70);
    CHECK(!__asan_address_is_poisoned(p + 69) && __asan_address_is_poisoned(p + 70));
    CHECK(__asan_address_is_poisoned(p + 127));
    p = echod_pool_realloc(&pool, p, 100); /* in place: the new size is usable */
    CHECK(!__asan_address_is_poisoned(p + 99) && __asan_address_is_poisoned(p + 100));
    p = echod_pool_realloc(&pool, p, 10);
    CHECK(__asan_address_is_poisoned(p + 10));
    p = echod_pool_realloc(&pool, p, 1000); /* moved */
    CHECK(!__asan_address_is_poisoned(p + 999) && __asan_address_is_poisoned(p + 1000));
    echod_pool_free(&pool, p);
    echod_msg_t *m = echod_msg_new(3);
    CHECK(!__asan_address_is_poisoned(echod_msg_payload(m) + 2));
    /* what deframe.c asks for ends past the payload by the struct's tail padding */
    CHECK(__asan_address_is_poisoned((char *)m + sizeof(*m) + ECHOD_GRPC_PREFIX + 3));
    echod_msg_free(m);
    echod_pool_dispose(&pool);
}
#endif

int main(void)
{
    test_sizes();
    test_realloc();
    test_zeroed_pool_keeps_nothing();
    test_reuse_and_cap();
    test_owner_reuses();
    test_foreign_thread_frees();
    test_unbound_thread_mallocs();
    test_large_blocks();
    test_messages();
#ifdef TEST_ASAN
    test_asan_poisons_slack();
#endif
    return check_done();
}
