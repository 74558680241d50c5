/*
 * The counters' storage and the update path: the shared instance, the per-thread shards and the
 * histograms (metrics/metrics.h).
 *
 * Writers only ever do relaxed atomic adds, or relaxed loads and stores on their own shard;
 * readers (echod_metrics_value, the renderer) only ever do relaxed loads.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "metrics/metrics.h"
#include "metrics/metrics_internal.h"
#include "util/err.h"

echod_metrics_t echod_metrics;
_Thread_local echod_metrics_t *echod_metrics_shard;
static _Thread_local int shard_tried; /* the thread asked for one: without a shard, it stays shared */

/* Shards are never freed: a thread that exits leaves its counts behind for the next one. */
static pthread_once_t shards_once = PTHREAD_ONCE_INIT;
static pthread_key_t shards_key; /* its destructor gives a thread's shard back */
static pthread_mutex_t shards_mutex = PTHREAD_MUTEX_INITIALIZER;
static echod_metrics_t *_Atomic shards[ECHOD_METRICS_MAX_SHARDS];
static _Atomic size_t nshards;
static unsigned char shard_taken[ECHOD_METRICS_MAX_SHARDS]; /* under shards_mutex */

const char *const echod_direction_names[] = {
    [ECHOD_DIRECTION_RECEIVED] = "received",
    [ECHOD_DIRECTION_SENT] = "sent",
};
_Static_assert(sizeof(echod_direction_names) / sizeof(echod_direction_names[0]) == ECHOD_DIRECTION__COUNT,
               "a name per direction");

/* Set at start-up, before any other thread exists (not copied: it outlives every render). */
static const echod_config_t *metrics_cfg;

void echod_metrics__reset(const echod_config_t *cfg)
{
    /* No other thread exists yet, so plain stores into the atomics are race-free. */
    memset(&echod_metrics, 0, sizeof(echod_metrics));
    for (size_t i = 0; i < atomic_load(&nshards); i++)
        memset(atomic_load(&shards[i]), 0, sizeof(echod_metrics));
    metrics_cfg = cfg;
}

const echod_config_t *echod_metrics__config(void)
{
    return metrics_cfg;
}

static void shard_release(void *value)
{
    echod_metrics_t *shard = value;
    echod_metrics_shard = NULL; /* a later key destructor's update goes to the shared instance */
    pthread_mutex_lock(&shards_mutex);
    size_t n = atomic_load_explicit(&nshards, memory_order_relaxed);
    for (size_t i = 0; i < n; i++)
        if (atomic_load_explicit(&shards[i], memory_order_relaxed) == shard)
            shard_taken[i] = 0; /* the mutex orders this thread's last counts before the next owner's */
    pthread_mutex_unlock(&shards_mutex);
}

static void shards_key_create(void)
{
    if (pthread_key_create(&shards_key, shard_release) != 0) {
        fprintf(stderr, "echod: cannot create the metrics shard key\n");
        abort();
    }
}

/* A free shard (one a thread that exited left, counts kept), else a new one, else none. */
static echod_metrics_t *shard_take(void)
{
    echod_metrics_t *shard = NULL;
    pthread_mutex_lock(&shards_mutex);
    size_t n = atomic_load_explicit(&nshards, memory_order_relaxed);
    for (size_t i = 0; i < n && shard == NULL; i++) {
        if (!shard_taken[i]) {
            shard_taken[i] = 1;
            shard = atomic_load_explicit(&shards[i], memory_order_relaxed);
        }
    }
    if (shard == NULL && n < ECHOD_METRICS_MAX_SHARDS) {
        shard = echod_must(calloc(1, sizeof(*shard)), "metrics shard");
        shard_taken[n] = 1;
        /* release: a renderer that sees the count sees the (zeroed) shard behind it */
        atomic_store_explicit(&shards[n], shard, memory_order_release);
        atomic_store_explicit(&nshards, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&shards_mutex);
    return shard;
}

size_t echod_metrics_shard_count(void)
{
    return atomic_load_explicit(&nshards, memory_order_acquire);
}

void echod_metrics_add_slow(_Atomic uint64_t *field, uint64_t n)
{
    if (!shard_tried) {
        /* this thread's first update: from now on it has a shard, or never will */
        shard_tried = 1;
        pthread_once(&shards_once, shards_key_create);
        echod_metrics_t *shard = shard_take();
        if (shard != NULL && pthread_setspecific(shards_key, shard) != 0) {
            shard_release(shard);
            shard = NULL;
        }
        if ((echod_metrics_shard = shard) != NULL) {
            echod_metrics_add_u64(field, n);
            return;
        }
    }
    atomic_fetch_add_explicit(field, n, memory_order_relaxed);
}

void echod_histogram_observe(echod_histogram_t *h, uint64_t value)
{
    if (h->bounds == NULL)
        return;
    /* Binary search for the first bound >= value; nbounds is the +Inf bucket. */
    size_t lo = 0, hi = h->nbounds;
    double v = (double)value;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v <= h->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    echod_metrics_add_u64(&h->buckets[lo], 1);
    echod_metrics_add_u64(&h->sum, value);
}

void echod_metrics_observe_queue_wait(void *ctx, uint64_t wait_ns)
{
    echod_exec_metrics_t *e = ctx;
    echod_histogram_observe(&e->queue_wait, wait_ns / 1000);
}

/* The shared value plus its twin in every shard. */
uint64_t echod_metrics_value(const _Atomic uint64_t *p)
{
    uint64_t v = atomic_load_explicit(p, memory_order_relaxed);
    uintptr_t off = (uintptr_t)p - (uintptr_t)&echod_metrics;
    size_t n = atomic_load_explicit(&nshards, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        echod_metrics_t *shard = atomic_load_explicit(&shards[i], memory_order_acquire);
        v += atomic_load_explicit((const _Atomic uint64_t *)((uintptr_t)shard + off), memory_order_relaxed);
    }
    return v;
}
