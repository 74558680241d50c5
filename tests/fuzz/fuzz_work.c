/*
 * libFuzzer: request metadata that echod parses itself. The echod-* work headers
 * (daemon/work/spec.c) and their resolution against the config caps, then the same bytes as
 * an EchoRequest: the validator the handlers run (daemon/services/echo.c) and the response
 * reshaping that echod-response-bytes asks for.
 *
 * Input: lines "name: value"; a line without a colon is a name with an empty value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "config/config.h"
#include "echo.pb-c.h"
#include "grpc/deframe.h"
#include "services/echo.h"
#include "services/work.h"
#include "work/spec.h"

static echod_config_t cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[512];
    echod_config_init(&cfg);
    /* small caps, so that values above them are easy to reach */
    if (echod_config_set(&cfg, "work={max_cpu: 5ms, max_sleep: 5ms, max_response_bytes: 4096}", err, sizeof(err)) !=
            0 ||
        echod_config_finish(&cfg, err, sizeof(err)) != 0)
        abort();
    return 0;
}

static void check_utf8_response(echod_msg_t *out, size_t want)
{
    Grpc__Examples__Echo__EchoResponse *r =
        grpc__examples__echo__echo_response__unpack(NULL, out->len, echod_msg_payload(out));
    if (r == NULL || strlen(r->message) != want || !echod_echo_validate(echod_msg_payload(out), out->len))
        abort(); /* not exactly `want` bytes of valid UTF-8 */
    grpc__examples__echo__echo_response__free_unpacked(r, NULL);
    echod_msg_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    echod_work_over_t over;
    memset(&over, 0, sizeof(over));
    char *error = NULL;
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            nl = end;
        const char *colon = memchr(p, ':', (size_t)(nl - p));
        size_t nlen = (size_t)((colon != NULL ? colon : nl) - p);
        const char *value = colon != NULL ? colon + 1 : nl;
        while (value < nl && *value == ' ')
            value++;
        unsigned before = over.set;
        int known = echod_work_parse_header(p, nlen, value, (size_t)(nl - value), &over, &error);
        if (!known && over.set != before)
            abort();
        if (known && (nlen < 6 || memcmp(p, "echod-", 6) != 0))
            abort();
        p = nl + 1;
    }
    if (over.set >= 1u << ECHOD_WORK__COUNT)
        abort(); /* a bit no header owns */

    echod_work_spec_t spec;
    char *why = NULL;
    echod_work_resolve(&cfg, "/grpc.examples.echo.Echo/UnaryEcho", &over, 0, 1, &spec, &why);
    const echod_work_t *out = &spec.work;
    uint64_t max_cpu_us = cfg.work.max_cpu_ms * 1000;
    int model_over = 0;
    for (int k = 0; k != ECHOD_CHARGE__COUNT; k++)
        model_over |= spec.model.us[k] > max_cpu_us;
    if (why == NULL &&
        ((uint64_t)out->cpu_us > max_cpu_us || (uint64_t)out->sleep_us > cfg.work.max_sleep_ms * 1000 ||
         out->cpu_dist.stall_us > max_cpu_us || out->sleep_dist.stall_us > cfg.work.max_sleep_ms * 1000 ||
         out->response_bytes > (int64_t)cfg.work.max_response_bytes || out->response_bytes < -1 || out->status > 16 ||
         !(out->error_rate >= 0.0 && out->error_rate <= 1.0) || model_over))
        abort(); /* accepted work outside the caps */
    if (model_over)
        abort(); /* a call over the caps is priced as the server prices calls */
    echod_drawn_t d;
    echod_draw_work(out, &spec.draws, max_cpu_us, cfg.work.max_sleep_ms * 1000, &d);
    if (why == NULL && (d.cpu_us > max_cpu_us || d.sleep_us > cfg.work.max_sleep_ms * 1000))
        abort(); /* a draw above its cap */
    free(why);
    free(error);

    /* the same bytes as an EchoRequest, reshaped when the validator lets them through */
    if (echod_echo_validate(data, size)) {
        size_t want = size != 0 ? (size_t)data[0] * 7 : 0;
        check_utf8_response(echod_work_reshape_echo(echod_msg_from(data, size), (int64_t)want), want);
    }
    return 0;
}
