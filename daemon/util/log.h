/*
 * Logging to stderr, text or JSON lines. The level and format are set once by main before
 * any thread starts and only read afterwards. Safe from any thread (one write(2) per line).
 */
#ifndef ECHOD_LOG_H
#define ECHOD_LOG_H

typedef enum { ECHOD_LOG_DEBUG = 0, ECHOD_LOG_INFO, ECHOD_LOG_WARN, ECHOD_LOG_ERROR } echod_log_level_t;
typedef enum { ECHOD_LOG_TEXT = 0, ECHOD_LOG_JSON } echod_log_format_t;

void echod_log_setup(echod_log_level_t level, echod_log_format_t format, const char *arm);
void echod_log(echod_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define echod_debug(...) echod_log(ECHOD_LOG_DEBUG, __VA_ARGS__)
#define echod_info(...)  echod_log(ECHOD_LOG_INFO, __VA_ARGS__)
#define echod_warn(...)  echod_log(ECHOD_LOG_WARN, __VA_ARGS__)
#define echod_error(...) echod_log(ECHOD_LOG_ERROR, __VA_ARGS__)

#endif
