/* log.h — JSON-lines logging on stderr.
 *
 * Every line is one JSON object: {"ts", "level", "msg"} plus "user_id",
 * "session_id" and "container_id" whenever the caller knows them, and
 * "trace_id" while the thread serves a request (reqctx.h). Thread-safe:
 * each line is formatted into a private buffer and written with one write(2). */
#ifndef SANDBOXD_LOG_H
#define SANDBOXD_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum log_level {
        LOG_LEVEL_DEBUG = 0,
        LOG_LEVEL_INFO,
        LOG_LEVEL_WARN,
        LOG_LEVEL_ERROR,
};

/* Set the minimum level that is written (default INFO). */
void log_set_level(enum log_level level);

/* Parse "debug" | "info" | "warn" | "error". Returns 0 or -EINVAL. */
int log_level_from_string(const char *s, enum log_level *ret_level);
const char *log_level_to_string(enum log_level level);

/* Write one line. user/session/container may be NULL (then omitted). */
void log_ctx(enum log_level level, const char *user, const char *session, const char *container, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
void log_ctxv(enum log_level level, const char *user, const char *session, const char *container, const char *fmt,
              va_list ap);

/* The last `max` lines (of the most recent 4096 that named any session) that
 * named user:session, oldest first, each a JSON object without newline.
 * *ret_lines is malloc'd: free with log_lines_free(). */
int log_session_lines(const char *user, const char *session, size_t max, char ***ret_lines, size_t *ret_n);
void log_lines_free(char **lines, size_t n);

#define log_debug(...) log_ctx(LOG_LEVEL_DEBUG, NULL, NULL, NULL, __VA_ARGS__)
#define log_info(...) log_ctx(LOG_LEVEL_INFO, NULL, NULL, NULL, __VA_ARGS__)
#define log_warn(...) log_ctx(LOG_LEVEL_WARN, NULL, NULL, NULL, __VA_ARGS__)
#define log_error(...) log_ctx(LOG_LEVEL_ERROR, NULL, NULL, NULL, __VA_ARGS__)

#endif
