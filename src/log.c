/* log.c — JSON lines on stderr. The level is a single atomic int; each line
 * is built in a stack buffer and written with one write(2), so lines from
 * different threads never interleave.
 *
 * Lines that name a session are also kept in a ring of the last LOG_RING_LINES
 * (ring_lock guards it) for `sandboxctl logs USER SESSION`; the full history is
 * wherever stderr goes (the journal under systemd). A line written while the
 * thread serves a request carries its "trace_id" (reqctx.h). */
#include "sandboxd/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/reqctx.h"

static volatile int current_level = LOG_LEVEL_INFO;

#define LOG_RING_LINES 4096
#define LOG_KEY_MAX 64

static struct ring_line {
        char user[LOG_KEY_MAX + 1], session[LOG_KEY_MAX + 1];
        char *line; /* the JSON object, no newline; NULL when unused */
} ring[LOG_RING_LINES];
static size_t ring_next; /* slot written next; ring[ring_next - 1] is the newest */
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;

static void ring_add(const char *user, const char *session, const char *line, size_t len)
{
        char *copy = strndup(line, len);
        char *old;

        if (!copy || strlen(user) > LOG_KEY_MAX || strlen(session) > LOG_KEY_MAX) {
                free(copy);
                return;
        }
        pthread_mutex_lock(&ring_lock);
        old = ring[ring_next].line;
        ring[ring_next].line = copy;
        strcpy(ring[ring_next].user, user);
        strcpy(ring[ring_next].session, session);
        ring_next = (ring_next + 1) % LOG_RING_LINES;
        pthread_mutex_unlock(&ring_lock);
        free(old);
}

void log_lines_free(char **lines, size_t n)
{
        for (size_t i = 0; lines && i < n; i++)
                free(lines[i]);
        free(lines);
}

int log_session_lines(const char *user, const char *session, size_t max, char ***ret_lines, size_t *ret_n)
{
        char **out;
        size_t n = 0, start, found = 0;

        if (!user || !session || max == 0)
                return -EINVAL;
        if (max > LOG_RING_LINES)
                max = LOG_RING_LINES;
        out = calloc(max, sizeof(*out));
        if (!out)
                return -ENOMEM;
        pthread_mutex_lock(&ring_lock);
        /* newest first to find the last `max`, then copied oldest first */
        start = ring_next;
        for (size_t k = 1; k <= LOG_RING_LINES && found < max; k++) {
                struct ring_line *l = &ring[(start + LOG_RING_LINES - k) % LOG_RING_LINES];
                if (l->line && strcmp(l->user, user) == 0 && strcmp(l->session, session) == 0)
                        found++;
                if (found == max || k == LOG_RING_LINES)
                        start = (start + LOG_RING_LINES - k) % LOG_RING_LINES;
        }
        for (size_t k = 0; k < LOG_RING_LINES && n < found; k++) {
                struct ring_line *l = &ring[(start + k) % LOG_RING_LINES];
                if (!l->line || strcmp(l->user, user) != 0 || strcmp(l->session, session) != 0)
                        continue;
                if (!(out[n] = strdup(l->line)))
                        break;
                n++;
        }
        pthread_mutex_unlock(&ring_lock);
        if (n < found) {
                log_lines_free(out, n);
                return -ENOMEM;
        }
        *ret_lines = out;
        *ret_n = n;
        return 0;
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level)
{
        __atomic_store_n(&current_level, (int)level, __ATOMIC_RELAXED);
}

int log_level_from_string(const char *s, enum log_level *ret_level)
{
        for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
                if (s && strcmp(s, level_names[i]) == 0) {
                        *ret_level = (enum log_level)i;
                        return 0;
                }
        return -EINVAL;
}

const char *log_level_to_string(enum log_level level)
{
        if ((int)level < 0 || (size_t)level >= sizeof(level_names) / sizeof(level_names[0]))
                return "info";
        return level_names[level];
}

/* Append s as a JSON string body (without quotes), escaping as needed. */
static size_t put_escaped(char *buf, size_t pos, size_t cap, const char *s)
{
        for (; *s && pos + 7 < cap; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\') {
                        buf[pos++] = '\\';
                        buf[pos++] = (char)c;
                } else if (c == '\n') {
                        buf[pos++] = '\\';
                        buf[pos++] = 'n';
                } else if (c < 0x20 || c == 0x7f) {
                        pos += (size_t)snprintf(buf + pos, cap - pos, "\\u%04x", c);
                } else {
                        buf[pos++] = (char)c; /* UTF-8 passes through; invalid bytes are rare in our own messages */
                }
        }
        return pos;
}

static size_t put_field(char *buf, size_t pos, size_t cap, const char *key, const char *value)
{
        if (!value || !*value)
                return pos;
        pos += (size_t)snprintf(buf + pos, cap - pos, ",\"%s\":\"", key);
        if (pos >= cap)
                return cap;
        pos = put_escaped(buf, pos, cap, value);
        if (pos + 1 < cap)
                buf[pos++] = '"';
        return pos;
}

void log_ctxv(enum log_level level, const char *user, const char *session, const char *container, const char *fmt,
              va_list ap)
{
        char msg[2048], line[4096], ts[40];
        struct timeval tv;
        struct tm tm;
        size_t pos;
        int saved = errno;

        if ((int)level < __atomic_load_n(&current_level, __ATOMIC_RELAXED))
                return;
        vsnprintf(msg, sizeof(msg), fmt, ap);
        gettimeofday(&tv, NULL);
        gmtime_r(&tv.tv_sec, &tm);
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

        pos = (size_t)snprintf(line, sizeof(line), "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"msg\":\"", ts,
                               (long)(tv.tv_usec / 1000), log_level_to_string(level));
        pos = put_escaped(line, pos, sizeof(line) - 64, msg);
        line[pos++] = '"';
        pos = put_field(line, pos, sizeof(line) - 8, "user_id", user);
        pos = put_field(line, pos, sizeof(line) - 8, "session_id", session);
        pos = put_field(line, pos, sizeof(line) - 8, "container_id", container);
        pos = put_field(line, pos, sizeof(line) - 8, "trace_id", reqctx_trace_id()); /* "" when none: omitted */
        line[pos++] = '}';
        line[pos++] = '\n';
        (void)!write(STDERR_FILENO, line, pos);
        if (user && *user && session && *session)
                ring_add(user, session, line, pos - 1);
        errno = saved;
}

void log_ctx(enum log_level level, const char *user, const char *session, const char *container, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        log_ctxv(level, user, session, container, fmt, ap);
        va_end(ap);
}
