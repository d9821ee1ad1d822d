/* util.c — sandboxd-bench helpers: clocks, the line-JSON socket clients,
 * child processes, sample series and the report. A series has its own
 * mutex (concurrent phases add from many threads); nothing else here is
 * shared between threads. */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REPLY_MAX (32 * 1024 * 1024) /* API_MAX_REPLY */

extern char **environ;

double bench_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t bench_wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void say(const char *fmt, ...)
{
        va_list ap;
        fputs("bench: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        fflush(stderr);
}

/* ---- line-JSON clients ---- */

int conn_open(struct conn *c, const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};

        memset(c, 0, sizeof(*c));
        c->fd = -1;
        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                return -errno;
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(c->fd);
                c->fd = -1;
                return r;
        }
        return 0;
}

void conn_close(struct conn *c)
{
        if (c->fd >= 0)
                close(c->fd);
        free(c->buf);
        memset(c, 0, sizeof(*c));
        c->fd = -1;
}

static int write_all(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

/* The next line, NUL-terminated in c->buf (consumed by the next call). */
static char *read_line(struct conn *c, int timeout_ms, size_t *consumed)
{
        double deadline = bench_now_ms() + timeout_ms;

        for (;;) {
                char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
                if (nl) {
                        *nl = '\0';
                        *consumed = (size_t)(nl - c->buf) + 1;
                        return c->buf;
                }
                if (c->len + 65536 > c->cap) {
                        size_t cap = c->cap ? c->cap * 2 : 131072;
                        char *b;
                        if (cap > REPLY_MAX + 65536)
                                return NULL;
                        b = realloc(c->buf, cap);
                        if (!b)
                                return NULL;
                        c->buf = b;
                        c->cap = cap;
                }
                int left = (int)(deadline - bench_now_ms());
                struct pollfd p = {.fd = c->fd, .events = POLLIN};
                if (left <= 0 || poll(&p, 1, left) <= 0)
                        return NULL;
                ssize_t k = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return NULL;
                c->len += (size_t)k;
        }
}

cJSON *conn_call(struct conn *c, const cJSON *req, int timeout_ms)
{
        char *line = cJSON_PrintUnformatted(req);
        size_t n;
        int r;

        if (!line || c->fd < 0) {
                free(line);
                return NULL;
        }
        n = strlen(line);
        line[n] = '\n'; /* replaces the NUL; the length is known */
        r = write_all(c->fd, line, n + 1);
        free(line);
        if (r < 0)
                return NULL;
        for (;;) {
                size_t used;
                char *l = read_line(c, timeout_ms, &used);
                cJSON *reply;
                if (!l)
                        return NULL;
                reply = cJSON_Parse(l);
                memmove(c->buf, c->buf + used, c->len - used);
                c->len -= used;
                if (!reply)
                        return NULL;
                if (cJSON_GetObjectItemCaseSensitive(reply, "event")) {
                        cJSON_Delete(reply);
                        continue;
                }
                return reply;
        }
}

cJSON *api_call(struct conn *c, const char *token, const char *method, cJSON *params, int timeout_ms)
{
        static int next_id;
        cJSON *req = cJSON_CreateObject(), *reply;

        cJSON_AddNumberToObject(req, "id", __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED));
        if (token)
                cJSON_AddStringToObject(req, "token", token);
        cJSON_AddStringToObject(req, "method", method);
        cJSON_AddItemToObject(req, "params", params ? params : cJSON_CreateObject());
        reply = conn_call(c, req, timeout_ms);
        cJSON_Delete(req);
        return reply;
}

cJSON *api_exec(struct conn *c, const char *token, const char *session, const char *command, int timeout_ms)
{
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", session);
        cJSON_AddStringToObject(p, "command", command);
        return api_call(c, token, "exec", p, timeout_ms);
}

cJSON *admin_call(const char *path, cJSON *req, int timeout_ms)
{
        struct conn c;
        cJSON *reply = NULL;

        if (conn_open(&c, path) == 0)
                reply = conn_call(&c, req, timeout_ms);
        conn_close(&c);
        cJSON_Delete(req);
        return reply;
}

bool reply_ok(const cJSON *reply)
{
        return reply && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok"));
}

const cJSON *reply_result(const cJSON *reply)
{
        return reply_ok(reply) ? cJSON_GetObjectItemCaseSensitive(reply, "result") : NULL;
}

void reply_error(const cJSON *reply, char *buf, size_t size)
{
        const cJSON *e = reply ? cJSON_GetObjectItemCaseSensitive(reply, "error") : NULL;
        if (!reply)
                snprintf(buf, size, "no reply (connection closed or timed out)");
        else if (e)
                snprintf(buf, size, "%s: %s", json_str(e, "code") ? json_str(e, "code") : "?",
                         json_str(e, "message") ? json_str(e, "message") : "");
        else
                snprintf(buf, size, "unexpected reply");
}

const char *json_str(const cJSON *o, const char *key)
{
        const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

double json_num(const cJSON *o, const char *key, double def)
{
        const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
        return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* ---- child processes ---- */

static void trim(char *s)
{
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
                s[--n] = '\0';
}

int run_cmd(char *const argv[], char *out, size_t out_size, char *errbuf, size_t err_size)
{
        posix_spawn_file_actions_t fa;
        int po[2] = {-1, -1}, pe[2] = {-1, -1}, status, r;
        size_t n_out = 0, n_err = 0;
        pid_t pid;

        if ((out && pipe2(po, O_CLOEXEC) < 0) || (errbuf && pipe2(pe, O_CLOEXEC) < 0))
                return -errno;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        if (out)
                posix_spawn_file_actions_adddup2(&fa, po[1], 1);
        else
                posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        if (errbuf)
                posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
        else
                posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (po[1] >= 0)
                close(po[1]);
        if (pe[1] >= 0)
                close(pe[1]);
        if (r != 0) {
                if (po[0] >= 0)
                        close(po[0]);
                if (pe[0] >= 0)
                        close(pe[0]);
                return -r;
        }
        /* Drain both pipes until both close, so a chatty child never blocks. */
        while (po[0] >= 0 || pe[0] >= 0) {
                struct pollfd p[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                for (int i = 0; i < 2; i++) {
                        int *fd = i == 0 ? &po[0] : &pe[0];
                        char *buf = i == 0 ? out : errbuf;
                        size_t size = i == 0 ? out_size : err_size, *used = i == 0 ? &n_out : &n_err;
                        char sink[4096];
                        ssize_t k;
                        if (*fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                        if (*used + 1 < size)
                                k = read(*fd, buf + *used, size - 1 - *used);
                        else
                                k = read(*fd, sink, sizeof(sink));
                        if (k > 0 && *used + 1 < size)
                                *used += (size_t)k;
                        if (k == 0 || (k < 0 && errno != EINTR)) {
                                close(*fd);
                                *fd = -1;
                        }
                }
        }
        if (out) {
                out[n_out] = '\0';
                trim(out);
        }
        if (errbuf) {
                errbuf[n_err] = '\0';
                trim(errbuf);
        }
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        return -1000 - WTERMSIG(status);
}

pid_t spawn_quiet(char *const argv[])
{
        posix_spawn_file_actions_t fa;
        pid_t pid;
        int r;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        return r == 0 ? pid : -r;
}

int wait_exit(pid_t pid)
{
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1000 - WTERMSIG(status);
}

pid_t daemon_spawn(const char *bin, const char *log_path)
{
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        pid_t parent = getpid(), pid;

        if (fd < 0)
                return -errno;
        pid = fork();
        if (pid < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        if (pid == 0) {
                int null = open("/dev/null", O_RDONLY);
                sigset_t none;
                /* the daemon under test never outlives the benchmark, however it ends */
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                        _exit(127);
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                if (null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
                        _exit(127);
                execl(bin, bin, (char *)NULL);
                _exit(127);
        }
        close(fd);
        return pid;
}

long proc_status_kb(pid_t pid, const char *key)
{
        char path[64], line[256];
        size_t klen = strlen(key);
        long kb = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
                        kb = strtol(line + klen + 1, NULL, 10);
                        break;
                }
        fclose(f);
        return kb;
}

double proc_cpu_ms(pid_t pid)
{
        char path[64], buf[1024], *p;
        unsigned long long ut, st;
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return NAN;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return NAN;
        buf[n] = '\0';
        p = strrchr(buf, ')'); /* comm may contain spaces */
        /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
                return NAN;
        return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

double system_busy_ms(void)
{
        unsigned long long v[8] = {0};
        FILE *f = fopen("/proc/stat", "re");
        int k;

        if (!f)
                return NAN;
        k = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
        fclose(f);
        if (k < 8)
                return NAN;
        /* everything but idle and iowait */
        return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

int procs_by_comm(const char *comm, long *ret_pss_kb)
{
        DIR *d = opendir("/proc");
        struct dirent *de;
        long total = 0;
        int n = 0;

        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                char path[300], name[64] = "";
                FILE *f;
                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (fgets(name, sizeof(name), f))
                        name[strcspn(name, "\n")] = '\0';
                fclose(f);
                if (strcmp(name, comm) == 0) {
                        char line[256];
                        n++;
                        snprintf(path, sizeof(path), "/proc/%s/smaps_rollup", de->d_name);
                        f = fopen(path, "re");
                        while (f && fgets(line, sizeof(line), f))
                                if (strncmp(line, "Pss:", 4) == 0) {
                                        total += strtol(line + 4, NULL, 10);
                                        break;
                                }
                        if (f)
                                fclose(f);
                }
        }
        closedir(d);
        *ret_pss_kb = total;
        return n;
}

pid_t pidfile_read(const char *path)
{
        FILE *f = fopen(path, "re");
        int pid = -1;
        if (!f)
                return -1;
        if (fscanf(f, "%d", &pid) != 1)
                pid = -1;
        fclose(f);
        return pid;
}

/* ---- series ---- */

void series_init(struct series *s)
{
        memset(s, 0, sizeof(*s));
        pthread_mutex_init(&s->lock, NULL);
}

void series_add(struct series *s, double v)
{
        pthread_mutex_lock(&s->lock);
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 64;
                double *nv = realloc(s->v, cap * sizeof(*nv));
                if (!nv) {
                        pthread_mutex_unlock(&s->lock);
                        return;
                }
                s->v = nv;
                s->cap = cap;
        }
        s->v[s->n++] = v;
        pthread_mutex_unlock(&s->lock);
}

void series_done(struct series *s)
{
        free(s->v);
        pthread_mutex_destroy(&s->lock);
        memset(s, 0, sizeof(*s));
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

double series_pct(const struct series *s, double p)
{
        double *v, res;
        size_t rank;

        if (s->n == 0)
                return NAN;
        v = malloc(s->n * sizeof(*v));
        if (!v)
                return NAN;
        memcpy(v, s->v, s->n * sizeof(*v));
        qsort(v, s->n, sizeof(*v), cmp_double);
        rank = (size_t)ceil(p / 100.0 * (double)s->n);
        res = v[rank == 0 ? 0 : rank - 1];
        free(v);
        return res;
}

/* ---- report ---- */

struct measurement *report_add(struct report *r, const char *name, const char *unit)
{
        struct measurement *m;

        if (r->n == r->cap) {
                size_t cap = r->cap ? r->cap * 2 : 16;
                struct measurement *nm = realloc(r->m, cap * sizeof(*nm));
                if (!nm)
                        abort(); /* a benchmark tool, not the daemon: nothing sensible to do */
                r->m = nm;
                r->cap = cap;
        }
        m = &r->m[r->n++];
        memset(m, 0, sizeof(*m));
        snprintf(m->name, sizeof(m->name), "%s", name);
        snprintf(m->unit, sizeof(m->unit), "%s", unit);
        series_init(&m->s);
        series_init(&m->base);
        return m;
}

void measurement_target(struct measurement *m, enum target_kind kind, double limit, const char *desc)
{
        m->target = kind;
        m->limit = limit;
        snprintf(m->target_desc, sizeof(m->target_desc), "%s", desc);
}

double measurement_ratio(const struct measurement *m)
{
        if (!m->has_baseline || m->s.n == 0 || m->base.n == 0)
                return NAN;
        return series_pct(&m->s, 50) / series_pct(&m->base, 50);
}

int measurement_met(const struct measurement *m)
{
        double p50 = series_pct(&m->s, 50);
        if (m->s.n == 0)
                return -1;
        switch (m->target) {
        case TARGET_RATIO_LE: {
                double ratio = measurement_ratio(m);
                return isnan(ratio) ? -1 : ratio <= m->limit;
        }
        case TARGET_P50_LE:
                return p50 <= m->limit;
        case TARGET_EQ:
                return p50 == m->limit;
        case TARGET_DIFF_LE:
                return !m->has_baseline || m->base.n == 0 ? -1 : p50 - series_pct(&m->base, 50) <= m->limit;
        default:
                return -1;
        }
}

static void fmt_num(char *buf, size_t size, double v)
{
        if (isnan(v))
                snprintf(buf, size, "-");
        else if (fabs(v) >= 100 || v == floor(v))
                snprintf(buf, size, "%.0f", v);
        else
                snprintf(buf, size, "%.1f", v);
}

void report_print(const struct report *r, FILE *f)
{
        fprintf(f, "\n%-28s %-7s %5s %9s %9s | %9s %9s %5s | %6s  %-24s %s\n", "measurement", "unit", "n", "p50", "p95",
                "base p50", "base p95", "n", "ratio", "target", "met");
        for (size_t i = 0; i < 120; i++)
                fputc('-', f);
        fputc('\n', f);
        for (size_t i = 0; i < r->n; i++) {
                const struct measurement *m = &r->m[i];
                char p50[32], p95[32], b50[32] = "-", b95[32] = "-", bn[16] = "-", ratio[32] = "-";
                int met = measurement_met(m);
                fmt_num(p50, sizeof(p50), series_pct(&m->s, 50));
                fmt_num(p95, sizeof(p95), series_pct(&m->s, 95));
                if (m->has_baseline) {
                        fmt_num(b50, sizeof(b50), series_pct(&m->base, 50));
                        fmt_num(b95, sizeof(b95), series_pct(&m->base, 95));
                        snprintf(bn, sizeof(bn), "%zu", m->base.n);
                        if (!isnan(measurement_ratio(m)))
                                snprintf(ratio, sizeof(ratio), "%.2f", measurement_ratio(m));
                }
                fprintf(f, "%-28s %-7s %5zu %9s %9s | %9s %9s %5s | %6s  %-24s %s\n", m->name, m->unit, m->s.n, p50,
                        p95, b50, b95, bn, ratio, m->target_desc[0] ? m->target_desc : "-",
                        met < 0 ? "-"
                        : met   ? "yes"
                                : "NO");
        }
        fputc('\n', f);
        for (size_t i = 0; i < r->n; i++) {
                const struct measurement *m = &r->m[i];
                if (m->has_baseline && m->baseline_desc[0])
                        fprintf(f, "  %s baseline: %s\n", m->name, m->baseline_desc);
                if (m->note[0])
                        fprintf(f, "  %s: %s\n", m->name, m->note);
        }
}

static void add_num_or_null(cJSON *o, const char *key, double v)
{
        if (isnan(v))
                cJSON_AddNullToObject(o, key);
        else
                cJSON_AddNumberToObject(o, key, round(v * 1000) / 1000);
}

int report_write_json(const struct report *r, const char *path)
{
        cJSON *root = cJSON_CreateObject(), *arr;
        char *text;
        FILE *f;
        int rc = 0;

        cJSON_AddStringToObject(root, "tool", "sandboxd-bench");
        cJSON_AddStringToObject(root, "mode", r->mode);
        cJSON_AddNumberToObject(root, "generated_at", (double)bench_wall_ms());
        cJSON_AddNumberToObject(root, "wall_seconds", round(r->wall_s * 10) / 10);
        if (r->machine)
                cJSON_AddItemReferenceToObject(root, "machine", r->machine);
        if (r->config)
                cJSON_AddItemReferenceToObject(root, "config", r->config);
        arr = cJSON_AddArrayToObject(root, "measurements");
        for (size_t i = 0; i < r->n; i++) {
                const struct measurement *m = &r->m[i];
                cJSON *o = cJSON_CreateObject();
                int met = measurement_met(m);
                cJSON_AddStringToObject(o, "name", m->name);
                cJSON_AddStringToObject(o, "unit", m->unit);
                cJSON_AddNumberToObject(o, "n", (double)m->s.n);
                add_num_or_null(o, "p50", series_pct(&m->s, 50));
                add_num_or_null(o, "p95", series_pct(&m->s, 95));
                if (m->has_baseline) {
                        cJSON *b = cJSON_AddObjectToObject(o, "baseline");
                        add_num_or_null(b, "p50", series_pct(&m->base, 50));
                        add_num_or_null(b, "p95", series_pct(&m->base, 95));
                        cJSON_AddNumberToObject(b, "n", (double)m->base.n);
                        if (m->baseline_desc[0])
                                cJSON_AddStringToObject(b, "what", m->baseline_desc);
                        add_num_or_null(o, "ratio", measurement_ratio(m));
                } else {
                        cJSON_AddNullToObject(o, "baseline");
                        cJSON_AddNullToObject(o, "ratio");
                }
                if (m->target_desc[0])
                        cJSON_AddStringToObject(o, "target", m->target_desc);
                else
                        cJSON_AddNullToObject(o, "target");
                if (met < 0)
                        cJSON_AddNullToObject(o, "met");
                else
                        cJSON_AddBoolToObject(o, "met", met);
                if (m->note[0])
                        cJSON_AddStringToObject(o, "note", m->note);
                cJSON_AddItemToArray(arr, o);
        }
        text = cJSON_Print(root);
        cJSON_Delete(root);
        if (!text)
                return -ENOMEM;
        f = fopen(path, "we");
        if (!f) {
                rc = -errno;
        } else {
                if (fputs(text, f) < 0 || fputc('\n', f) < 0)
                        rc = -EIO;
                if (fclose(f) != 0 && rc == 0)
                        rc = -errno;
        }
        free(text);
        return rc;
}

void report_done(struct report *r)
{
        for (size_t i = 0; i < r->n; i++) {
                series_done(&r->m[i].s);
                series_done(&r->m[i].base);
        }
        free(r->m);
        cJSON_Delete(r->machine);
        cJSON_Delete(r->config);
        memset(r, 0, sizeof(*r));
}
