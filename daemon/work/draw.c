#include <math.h>
#include "metrics/metrics.h"
#include "work/draw.h"

/* SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijection of 64 bits that mixes well. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Keys from echod-seed live apart from sequence numbers: metadata seed N is not the N-th call. */
#define SEEDED_DOMAIN 0xA0761D6478BD642Full

void echod_draws_init(echod_draws_t *d, uint64_t seed, uint64_t key, int seeded)
{
    d->key = mix64(mix64(seed) ^ (seeded ? mix64(key ^ SEEDED_DOMAIN) : key));
    d->next = 0;
}

double echod_draw_uniform(uint64_t key, uint64_t index)
{
    uint64_t h = mix64(key + 0x9E3779B97F4A7C15ull * (index + 1));
    return (double)(h >> 11) * 0x1.0p-53;
}

uint64_t echod_dist_value(const echod_dist_t *dist, uint32_t us, double u, double v)
{
    switch (dist->kind) {
    case ECHOD_DIST_CONSTANT:
        break;
    case ECHOD_DIST_EXPONENTIAL:
        /* inverse CDF; 1 - u is in (0, 1], so the log is finite. Rounded to the nearest us. */
        return (uint64_t)llround(-(double)us * log1p(-u));
    case ECHOD_DIST_STALL:
        return (uint64_t)us + (v < dist->stall_fraction ? dist->stall_us : 0);
    }
    return us;
}

/* A kind is observed only when it can be non-zero: every call would otherwise count a 0. */
static int drawn_active(const echod_dist_t *dist, uint32_t us)
{
    return us != 0 || (dist->kind == ECHOD_DIST_STALL && dist->stall_us != 0 && dist->stall_fraction > 0.0);
}

/* Each handler run takes five indices, whatever the kinds: cpu (value, stall), sleep (value,
 * stall), failure. Changing one knob's distribution leaves every other draw as it was. */
enum { CPU_U = 0, CPU_V, SLEEP_U, SLEEP_V, FAIL, PER_RUN };

static uint64_t draw_one(const echod_dist_t *dist, uint32_t us, const echod_draws_t *d, uint64_t base, uint64_t cap,
                         echod_drawn_kind_t kind)
{
    uint64_t x = us;
    if (dist->kind != ECHOD_DIST_CONSTANT)
        x = echod_dist_value(dist, us, echod_draw_uniform(d->key, base), echod_draw_uniform(d->key, base + 1));
    if (x > cap)
        x = cap;
    if (drawn_active(dist, us))
        echod_histogram_observe(&echod_metrics.work_drawn[kind], x);
    return x;
}

void echod_draw_work(const echod_work_t *w, echod_draws_t *d, uint64_t max_cpu_us, uint64_t max_sleep_us,
                     echod_drawn_t *out)
{
    uint64_t base = d->next;
    d->next += PER_RUN;
    out->cpu_us = draw_one(&w->cpu_dist, w->cpu_us, d, base + CPU_U, max_cpu_us, ECHOD_DRAWN_CPU);
    out->sleep_us = draw_one(&w->sleep_dist, w->sleep_us, d, base + SLEEP_U, max_sleep_us, ECHOD_DRAWN_SLEEP);
    out->fail = w->error_rate > 0.0 && echod_draw_uniform(d->key, base + FAIL) < w->error_rate;
}
