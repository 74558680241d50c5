#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "util/clock.h"
#include "util/err.h"
#include "work/background.h"
#include "work/model.h"

enum { SLICE_US = 1000 };

/*
 * A slice that comes late (the CPU was busy with other threads: the thread competes for it) is
 * made up for with slices back to back, so a saturated pod still pays the rate. Up to this much
 * schedule: a process stopped for minutes does not then burn minutes.
 */
#define MAX_DEBT_NS 1000000000ull

struct echod_background {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC: stop, or the next slice's time */
    int stopping;        /* under lock */
    uint64_t period_ns;
};

static void *background_main(void *arg)
{
    echod_background_t *bg = arg;
    (void)pthread_setname_np(pthread_self(), "echod-bg");
    uint64_t next = echod_now_ns();
    pthread_mutex_lock(&bg->lock);
    while (!bg->stopping) {
        uint64_t now = echod_now_ns();
        if (now < next) {
            echod_cond_wait_until(&bg->wake, &bg->lock, next);
            continue;
        }
        pthread_mutex_unlock(&bg->lock);
        echod_model_charge_us(ECHOD_CHARGE_BACKGROUND, ECHOD_CHARGE_ON_BACKGROUND, SLICE_US);
        next += bg->period_ns;
        if (now > next + MAX_DEBT_NS)
            next = now;
        pthread_mutex_lock(&bg->lock);
    }
    pthread_mutex_unlock(&bg->lock);
    return NULL;
}

int echod_background_start(const echod_work_model_t *cfg, echod_background_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg->enabled || cfg->background_millicores == 0)
        return 0;
    echod_background_t *bg = echod_must(calloc(1, sizeof(*bg)), "background thread");
    /* 1 ms of CPU per period: millicores thousandths of a CPU */
    bg->period_ns = (uint64_t)SLICE_US * 1000 * 1000 / cfg->background_millicores;
    pthread_mutex_init(&bg->lock, NULL);
    echod_cond_init_monotonic(&bg->wake);
    int rv = pthread_create(&bg->thread, NULL, background_main, bg);
    if (rv != 0) {
        echod_set_err(err, errlen, "work.model.background_millicores: cannot start its thread: %s", strerror(rv));
        pthread_cond_destroy(&bg->wake);
        pthread_mutex_destroy(&bg->lock);
        free(bg);
        return -1;
    }
    *out = bg;
    return 0;
}

void echod_background_stop(echod_background_t *bg)
{
    if (bg == NULL)
        return;
    pthread_mutex_lock(&bg->lock);
    bg->stopping = 1;
    pthread_cond_signal(&bg->wake);
    pthread_mutex_unlock(&bg->lock);
    pthread_join(bg->thread, NULL);
    pthread_cond_destroy(&bg->wake);
    pthread_mutex_destroy(&bg->lock);
    free(bg);
}
