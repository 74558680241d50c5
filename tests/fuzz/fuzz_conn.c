/*
 * libFuzzer: raw bytes into a connection's HTTP/2 + gRPC input path, through the real code.
 *
 * An echod I/O loop (daemon/transport/loop.c, its own thread, as in the daemon) serves a UNIX
 * socket listener; each input is one client connection: the bytes are written (reading
 * whatever echod answers meanwhile), then the client half-closes and reads until echod closes.
 * So every input runs accept, the nghttp2 session, the header checks, the deframer, the call
 * steps and the Echo handlers (direct executor: steps run on the loop, deterministically), and
 * the connection's teardown. An input that does not start with "PRI " gets the client preface
 * in front, so the fuzzer spends its time past it.
 *
 * ECHOD_FUZZ_SET="key=value;key=value" adds --set overrides, e.g. executor.mode=fixed to run the
 * steps on workers (less deterministic, but it exercises the loop tasks and their races).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "config/config.h"
#include "metrics/exposition.h"
#include "transport/loop.h"
#include "transport/server.h"
#include "util/log.h"

static echod_config_t cfg;
static echod_server_t server;
static echod_loop_t *loop;
static struct sockaddr_un addr;
static socklen_t addr_len;

/* Small limits, so that the fuzzer reaches them; cheap work, so that it stays fast. */
static const char *const sets[] = {
    "transport.max_concurrent_streams=16",  "transport.max_receive_message_bytes=4096",
    "transport.max_header_list_bytes=2048", "transport.max_send_buffer_bytes=1024",
    "transport.max_resets_per_second=50",   "work={max_cpu: 0ms, max_sleep: 0ms, max_response_bytes: 2048}",
    "echo.server_streaming_count=3",        "log.level=error",
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[1024];
    signal(SIGPIPE, SIG_IGN);
    echod_config_init(&cfg);
    for (size_t i = 0; i != sizeof(sets) / sizeof(sets[0]); i++)
        if (echod_config_set(&cfg, sets[i], err, sizeof(err)) != 0)
            goto fail;
    static char extra[1024]; /* ECHOD_FUZZ_SET, split in place */
    snprintf(extra, sizeof(extra), "%s", getenv("ECHOD_FUZZ_SET") != NULL ? getenv("ECHOD_FUZZ_SET") : "");
    char *save = NULL;
    for (char *kv = strtok_r(extra, ";", &save); kv != NULL; kv = strtok_r(NULL, ";", &save))
        if (echod_config_set(&cfg, kv, err, sizeof(err)) != 0)
            goto fail;
    if (echod_config_finish(&cfg, err, sizeof(err)) != 0)
        goto fail;
    echod_log_setup(cfg.log.level, cfg.log.format, cfg.arm);
    echod_metrics_init(&cfg);
    server.cfg = &cfg;
    echod_registry_init(&server.registry);
    if (echod_registry_check_config(&server.registry, &cfg, err, sizeof(err)) != 0)
        goto fail;
    if (echod_dispatcher_init(&server.dispatcher, &cfg, &server.registry, err, sizeof(err)) != 0)
        goto fail;

    /* an abstract UNIX socket: nothing on disk, gone with the process */
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    int n = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "echod-fuzz-conn-%d", (int)getpid());
    addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, addr_len) != 0 || listen(lfd, 64) != 0) {
        snprintf(err, sizeof(err), "listen: %s", strerror(errno));
        goto fail;
    }
    if ((loop = echod_loop_start(&server, 0, lfd, -1, err, sizeof(err))) == NULL)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "fuzz_conn: %s\n", err);
    abort();
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Writes all of p (reading and dropping what echod sends meanwhile, so neither side blocks). */
static int feed(int fd, const uint8_t *p, size_t n, uint64_t deadline)
{
    char sink[65536];
    while (n != 0) {
        struct pollfd pfd = {fd, POLLIN | POLLOUT, 0};
        if (poll(&pfd, 1, 100) < 0 && errno != EINTR)
            return -1;
        if (now_ms() > deadline)
            return -2;
        if (pfd.revents & POLLIN) {
            ssize_t r = read(fd, sink, sizeof(sink));
            if (r <= 0)
                return -1; /* echod closed: the rest of the input would not be read anyway */
        }
        if (pfd.revents & POLLOUT) {
            ssize_t w = write(fd, p, n);
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                return -1;
            if (w > 0)
                p += w, n -= (size_t)w;
        }
        if (pfd.revents & (POLLERR | POLLHUP))
            return -1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || (connect(fd, (struct sockaddr *)&addr, addr_len) != 0 && errno != EINPROGRESS)) {
        perror("fuzz_conn: connect");
        abort();
    }
    /* generous: a sanitizer build on a loaded machine; a hang shows as this abort, not a timeout */
    uint64_t deadline = now_ms() + 5000;
    int rv = 0;
    if (size < 4 || memcmp(data, "PRI ", 4) != 0)
        rv = feed(fd, (const uint8_t *)preface, sizeof(preface) - 1, deadline);
    if (rv == 0)
        rv = feed(fd, data, size, deadline);
    if (rv == 0)
        shutdown(fd, SHUT_WR);
    /* echod closes once it has read our end of stream (or earlier, after a protocol error) */
    char sink[65536];
    while (rv != -2) {
        struct pollfd pfd = {fd, POLLIN, 0};
        poll(&pfd, 1, 100);
        if (now_ms() > deadline) {
            rv = -2;
            break;
        }
        ssize_t r = read(fd, sink, sizeof(sink));
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            break;
    }
    if (rv == -2) {
        fprintf(stderr, "fuzz_conn: echod did not close the connection within 5 s of the end of input\n");
        abort();
    }
    close(fd);
    return 0;
}
