/*
 * The admin listener: HTTP/1.1 served by libh2o's own server on a thread and loop of its own,
 * so /metrics and /healthz answer even while every I/O loop or executor thread is busy.
 *   GET /metrics  Prometheus text 0.0.4 (echod_metrics_render)
 *   GET /healthz  200 "ok" while the process runs
 *   GET /readyz   200 while serving, 503 once shutdown has begun
 *   POST /admin/mark?stage=NAME  names the ramp stage (admin/stage.h)
 */
#ifndef ECHOD_ADMIN_H
#define ECHOD_ADMIN_H

#include <stddef.h>

typedef struct echod_admin echod_admin_t;

/* Binds "host:port" and starts the admin thread. Returns NULL and fills err on failure. Main thread. */
echod_admin_t *echod_admin_start(const char *listen, char *err, size_t errlen);

/* The port actually bound (useful when "host:0" was asked for). Any thread. */
int echod_admin_port(const echod_admin_t *admin);

/*
 * /readyz: 503 "starting" from echod_admin_start until echod_admin_set_serving (main calls it
 * once every loop and executor thread runs: /metrics is then the whole daemon), 200 "ready"
 * until echod_admin_set_draining, then 503 "draining". Any thread.
 */
void echod_admin_set_serving(echod_admin_t *admin);
void echod_admin_set_draining(echod_admin_t *admin);

/* What /readyz answers, as /metrics shows it (echod_ready, echod_draining): ready 1 once set
 * serving, draining 1 (and ready 0) once set draining; both 0 before. Process-wide (the last
 * admin's), for scrapes only. Any thread. */
void echod_admin_readiness(int *ready, int *draining);

/*
 * Stops the loop, closes the listener and every open admin connection, joins the thread and
 * frees everything. NULL is a no-op. Main thread.
 */
void echod_admin_stop(echod_admin_t *admin);

#endif
