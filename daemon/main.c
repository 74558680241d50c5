/*
 * echod: start-up, signals and shutdown. The config, the server, the loops and the admin
 * listener live here; the other process-wide state (metrics and the stage label, the health
 * serving flag and its watchers, the log settings) is listed in docs/threads.md.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "admin/admin.h"
#include "config/config.h"
#include "metrics/exposition.h"
#include "services/health.h"
#include "transport/loop.h"
#include "transport/server.h"
#include "util/listen.h"
#include "transport/tls.h"
#include "util/log.h"
#include "util/err.h"
#include "work/background.h"

#ifndef ECHOD_VERSION
#define ECHOD_VERSION "dev"
#endif

#define EXIT_CONFIG 2

static void usage(FILE *out)
{
    fprintf(out, "usage: echod [--config FILE]... [--set KEY.PATH=VALUE]...\n"
                 "       echod [--config FILE]... --check-config FILE [--set KEY.PATH=VALUE]...\n"
                 "       echod --version | --help\n"
                 "\n"
                 "A gRPC echo server (grpc.examples.echo.Echo) whose dispatch strategy is chosen by\n"
                 "its YAML config, for capacity tests. With no --config the built-in defaults apply\n"
                 "(identical to config/echod.yaml).\n"
                 "\n"
                 "  -c, --config FILE        read the config from FILE; a further FILE is read over the ones\n"
                 "                           before it (an arm, then config/models/grpc-java-study.yaml)\n"
                 "  -s, --set K=V            override one key after the files (repeatable),\n"
                 "                           e.g. --set executor.mode=fixed --set listen.grpc=127.0.0.1:50061\n"
                 "      --check-config FILE  validate FILE (after any --config; and --set), print the\n"
                 "                           effective config, exit\n"
                 "  -v, --version            print the version\n"
                 "  -h, --help               this text\n"
                 "\n"
                 "Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for a config or start-up error.\n");
}

/* Loads the files in order, overrides and validates; prints the error and returns -1 on failure. */
static int build_config(echod_config_t *cfg, char **paths, size_t npaths, char **sets, size_t nsets)
{
    char err[1024];
    echod_config_init(cfg);
    for (size_t i = 0; i != npaths; i++)
        if (echod_config_load_file(cfg, paths[i], err, sizeof(err)) != 0)
            goto fail;
    for (size_t i = 0; i != nsets; i++)
        if (echod_config_set(cfg, sets[i], err, sizeof(err)) != 0)
            goto fail;
    if (echod_config_finish(cfg, err, sizeof(err)) != 0)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "echod: %s\n", err);
    return -1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"set", required_argument, NULL, 's'},
                                         {"check-config", required_argument, NULL, 'k'},
                                         {"version", no_argument, NULL, 'v'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int check_only = 0;
    char **sets = echod_must(calloc((size_t)argc, sizeof(*sets)), "arguments");
    char **paths = echod_must(calloc((size_t)argc, sizeof(*paths)), "arguments");
    size_t nsets = 0, npaths = 0;
    int c;
    while ((c = getopt_long(argc, argv, "c:s:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            paths[npaths++] = optarg;
            break;
        case 'k':
            paths[npaths++] = optarg;
            check_only = 1;
            break;
        case 's':
            sets[nsets++] = optarg;
            break;
        case 'v':
            printf("echod %s\n", ECHOD_VERSION);
            free(sets);
            free(paths);
            return 0;
        case 'h':
            usage(stdout);
            free(sets);
            free(paths);
            return 0;
        default:
            usage(stderr);
            free(sets);
            free(paths);
            return EXIT_CONFIG;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "echod: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        free(sets);
        free(paths);
        return EXIT_CONFIG;
    }

    static echod_config_t cfg;
    int rv = build_config(&cfg, paths, npaths, sets, nsets);
    free(sets);
    free(paths);
    if (rv != 0) {
        echod_config_free(&cfg);
        return EXIT_CONFIG;
    }
    echod_metrics_set_version(ECHOD_VERSION);
    echod_metrics_init(&cfg); /* before the registry: it registers every method's metrics */
    static echod_server_t server;
    char err[1024];
    echod_registry_init(&server.registry);
    if (echod_registry_check_config(&server.registry, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "echod: %s\n", err);
        echod_registry_dispose(&server.registry);
        echod_config_free(&cfg);
        return EXIT_CONFIG;
    }
    if (check_only) {
        echod_registry_dispose(&server.registry);
        echod_config_dump(&cfg, stdout);
        echod_config_free(&cfg);
        return 0;
    }

    echod_log_setup(cfg.log.level, cfg.log.format, cfg.arm);

    /* Signals go to sigwait below; every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Before the first thread: every thread inherits the main thread's policy. */
    if (cfg.dispatch.sched_policy == ECHOD_SCHED_BATCH) {
        struct sched_param sp = {.sched_priority = 0};
        if (sched_setscheduler(0, SCHED_BATCH, &sp) != 0) {
            fprintf(stderr, "echod: dispatch.sched_policy: batch: sched_setscheduler(SCHED_BATCH): %s\n",
                    strerror(errno));
            return EXIT_CONFIG;
        }
    }

    int grpc_fds[64], rest_fds[64];
    unsigned nloops = cfg.io.event_loops;
    server.cfg = &cfg;
    if (cfg.tls.cert[0] != '\0' &&
        (server.ssl_ctx = echod_tls_create(cfg.tls.cert, cfg.tls.key, err, sizeof(err))) == NULL) {
        fprintf(stderr, "echod: %s\n", err);
        return EXIT_CONFIG;
    }
    for (unsigned i = 0; i != nloops; i++) {
        /* one socket per loop (SO_REUSEPORT); the first checks that no other process holds the port */
        unsigned flags = ECHOD_LISTEN_REUSEPORT | (i == 0 ? ECHOD_LISTEN_CHECK_FREE : 0);
        if ((grpc_fds[i] = echod_listen(cfg.listen.grpc, flags, NULL, err, sizeof(err))) < 0) {
            fprintf(stderr, "echod: listen.grpc: %s\n", err);
            return EXIT_CONFIG;
        }
        rest_fds[i] = -1;
        if (cfg.listen.rest[0] != '\0' &&
            (rest_fds[i] = echod_listen(cfg.listen.rest, flags, NULL, err, sizeof(err))) < 0) {
            fprintf(stderr, "echod: listen.rest: %s\n", err);
            return EXIT_CONFIG;
        }
    }
    echod_admin_t *admin = echod_admin_start(cfg.listen.admin, err, sizeof(err));
    if (admin == NULL) {
        fprintf(stderr, "echod: listen.admin: %s\n", err);
        return EXIT_CONFIG;
    }
    if (echod_dispatcher_init(&server.dispatcher, &cfg, &server.registry, err, sizeof(err)) != 0) {
        fprintf(stderr, "echod: %s\n", err);
        echod_admin_stop(admin);
        return EXIT_CONFIG;
    }
    echod_loop_t *loops[64];
    for (unsigned i = 0; i != nloops; i++) {
        if ((loops[i] = echod_loop_start(&server, i, grpc_fds[i], rest_fds[i], err, sizeof(err))) == NULL) {
            fprintf(stderr, "echod: %s\n", err);
            return EXIT_CONFIG;
        }
    }
    echod_background_t *background;
    if (echod_background_start(&cfg.work.model, &background, err, sizeof(err)) != 0) {
        fprintf(stderr, "echod: %s\n", err);
        return EXIT_CONFIG;
    }
    echod_admin_set_serving(admin); /* every thread runs now: /readyz 200 */
    echod_info("echod %s arm=%s grpc=%s%s admin=%s%s%s executor=%s serialize=%s flush=%s loops=%u", ECHOD_VERSION,
               cfg.arm, cfg.listen.grpc, server.ssl_ctx != NULL ? " (tls)" : "", cfg.listen.admin,
               cfg.listen.rest[0] != '\0' ? " rest=" : "", cfg.listen.rest, echod_exec_mode_name(cfg.executor.mode),
               echod_serialize_name(cfg.dispatch.serialize), echod_flush_name(cfg.transport.flush), nloops);

    int sig = 0;
    sigwait(&sigs, &sig);
    /* Kubernetes removes the pod from endpoints only after readiness fails: keep serving for
     * shutdown.announce while /readyz says 503, then GOAWAY. A second signal cuts it short. */
    echod_admin_set_draining(admin);
    echod_health_set_serving(&server, 0);
    if (cfg.shutdown.announce_ms != 0) {
        echod_info("signal %d: not ready; announcing for %llu ms before GOAWAY", sig,
                   (unsigned long long)cfg.shutdown.announce_ms);
        struct timespec wait = {(time_t)(cfg.shutdown.announce_ms / 1000),
                                (long)(cfg.shutdown.announce_ms % 1000) * 1000000};
        if (sigtimedwait(&sigs, NULL, &wait) > 0)
            echod_info("second signal: skipping the rest of shutdown.announce");
    }
    echod_info("signal %d: draining (up to %llu ms)", sig, (unsigned long long)cfg.shutdown.drain_timeout_ms);
    for (unsigned i = 0; i != nloops; i++)
        echod_loop_shutdown(loops[i]);
    for (unsigned i = 0; i != nloops; i++)
        echod_loop_join(loops[i]);
    echod_background_stop(background);
    /* the admin thread reads executor gauges: stop it before the executors go */
    echod_admin_stop(admin);
    echod_dispatcher_dispose(&server.dispatcher);
    echod_registry_dispose(&server.registry);
    if (server.ssl_ctx != NULL)
        SSL_CTX_free(server.ssl_ctx);
    echod_info("stopped");
    echod_config_free(&cfg);
    return 0;
}
