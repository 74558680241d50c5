/* The loop's allocator: blocks keep their contents across realloc, are reused by size class,
 * and the freelists never hold more than the cap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "util/pool.h"

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
    /* a block of a pool may go back to malloc from another thread */
    echod_pool_free_foreign(echod_pool_malloc(&pool, 500));
    echod_pool_free_foreign(NULL);
}

int main(void)
{
    test_sizes();
    test_realloc();
    test_zeroed_pool_keeps_nothing();
    test_reuse_and_cap();
    return check_done();
}
