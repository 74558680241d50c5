#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util/log.h"

/* Written once by echod_log_setup before threads start; read-only afterwards. */
static struct {
    echod_log_level_t level;
    echod_log_format_t format;
    char arm[64];
} settings = {ECHOD_LOG_INFO, ECHOD_LOG_TEXT, ""};

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void echod_log_setup(echod_log_level_t level, echod_log_format_t format, const char *arm)
{
    settings.level = level;
    settings.format = format;
    snprintf(settings.arm, sizeof(settings.arm), "%s", arm != NULL ? arm : "");
}

/* JSON-escapes src into dst (always terminated). */
static void json_escape(char *dst, size_t cap, const char *src)
{
    size_t o = 0;
    for (; *src != '\0' && o + 7 < cap; src++) {
        unsigned char c = (unsigned char)*src;
        if (c == '"' || c == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(dst + o, cap - o, "\\u%04x", c);
        } else {
            dst[o++] = (char)c;
        }
    }
    dst[o] = '\0';
}

void echod_log(echod_log_level_t level, const char *fmt, ...)
{
    if (level < settings.level)
        return;
    char msg[1024], line[2400], ts[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", now.tv_nsec / 1000000);

    int len;
    if (settings.format == ECHOD_LOG_JSON) {
        char esc[2100];
        json_escape(esc, sizeof(esc), msg);
        len = snprintf(line, sizeof(line), "{\"ts\":\"%s\",\"level\":\"%s\",\"arm\":\"%s\",\"msg\":\"%s\"}\n", ts,
                       level_names[level], settings.arm, esc);
    } else {
        len = snprintf(line, sizeof(line), "%s %-5s %s\n", ts, level_names[level], msg);
    }
    if (len > (int)sizeof(line) - 1)
        len = (int)sizeof(line) - 1;
    ssize_t r = write(STDERR_FILENO, line, (size_t)len);
    (void)r;
}
