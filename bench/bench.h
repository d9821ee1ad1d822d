/* bench.h — sandboxd-bench's own helpers: line-JSON socket clients for the
 * API and admin sockets, child processes (the docker CLI, the daemon),
 * sample series and the report (table and JSON). Benchmark-only code: it
 * links the core library for the config loader and small utilities, never
 * for the modules it measures. */
#ifndef SANDBOXD_BENCH_H
#define SANDBOXD_BENCH_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* ---- clocks ---- */

/* Monotonic time in milliseconds, with sub-millisecond precision. */
double bench_now_ms(void);
/* Wall clock in unix milliseconds. */
int64_t bench_wall_ms(void);

/* ---- line-JSON clients ---- */

struct conn {
        int fd;
        char *buf;
        size_t len, cap;
};

/* Connect to a Unix stream socket. 0 or -errno. */
int conn_open(struct conn *c, const char *path);
void conn_close(struct conn *c);
/* Send req (not consumed) as one line and return the next reply that is not
 * a progress event, or NULL (transport failure, timeout, bad JSON). */
cJSON *conn_call(struct conn *c, const cJSON *req, int timeout_ms);

/* API request {"id", "token", "method", "params"}; params is consumed. */
cJSON *api_call(struct conn *c, const char *token, const char *method, cJSON *params, int timeout_ms);
/* {"session": s, "command": cmd} convenience for exec. */
cJSON *api_exec(struct conn *c, const char *token, const char *session, const char *command, int timeout_ms);
/* An admin request on a fresh connection; req is consumed. */
cJSON *admin_call(const char *path, cJSON *req, int timeout_ms);

/* reply.ok is true. */
bool reply_ok(const cJSON *reply);
/* The result object of an ok reply, else NULL. */
const cJSON *reply_result(const cJSON *reply);
/* A short description of a failed reply ("code: message" or "no reply"). */
void reply_error(const cJSON *reply, char *buf, size_t size);
/* A string member, or NULL. */
const char *json_str(const cJSON *o, const char *key);
/* A number member, or def. */
double json_num(const cJSON *o, const char *key, double def);

/* ---- child processes ---- */

/* Run argv (PATH lookup), wait, return its exit status (0-255), or -errno /
 * -1000-signal. With out, stdout is captured (trailing whitespace trimmed,
 * truncated to size); with errbuf, stderr likewise; otherwise both go to
 * /dev/null. */
int run_cmd(char *const argv[], char *out, size_t out_size, char *errbuf, size_t err_size);

/* Start argv (PATH lookup) with stdio on /dev/null without waiting; its
 * pid or -errno. wait_exit() reaps it and returns what run_cmd would. */
pid_t spawn_quiet(char *const argv[]);
int wait_exit(pid_t pid);

/* Start the daemon binary with stdout and stderr appended to log_path and
 * stdin from /dev/null; it is SIGKILLed when this process dies. Returns its
 * pid or -errno. */
pid_t daemon_spawn(const char *bin, const char *log_path);

/* A "Key: N kB" field of /proc/<pid>/status (VmRSS, VmHWM, RssAnon,
 * RssFile, Threads), or -1. */
long proc_status_kb(pid_t pid, const char *key);

/* user + system CPU time of pid so far, in ms (NAN if unknown). */
double proc_cpu_ms(pid_t pid);
/* Busy CPU time of the whole machine so far (all CPUs, /proc/stat), in ms. */
double system_busy_ms(void);
/* How many processes are named comm, with their Pss (proportional set
 * size: shared pages divided among their users) summed, in kB. */
int procs_by_comm(const char *comm, long *ret_pss_kb);
/* The pid in a pid file, or -1. */
pid_t pidfile_read(const char *path);

/* ---- samples and the report ---- */

struct series {
        double *v;
        size_t n, cap;
        pthread_mutex_t lock; /* series_add is thread-safe */
};

void series_init(struct series *s);
void series_add(struct series *s, double v);
void series_done(struct series *s);
/* Nearest-rank percentile (p in 0..100) of the samples; NAN when empty. */
double series_pct(const struct series *s, double p);

enum target_kind {
        TARGET_NONE,
        TARGET_RATIO_LE, /* p50 / baseline p50 <= limit */
        TARGET_P50_LE,   /* p50 <= limit (in the measurement's unit) */
        TARGET_EQ,       /* p50 == limit (error counts) */
        TARGET_DIFF_LE,  /* p50 - baseline p50 <= limit (in the measurement's unit) */
};

struct measurement {
        char name[64];
        char unit[16];
        struct series s;
        bool has_baseline;
        struct series base;
        char baseline_desc[160];
        enum target_kind target;
        double limit;
        char target_desc[96];
        char note[512];
};

struct report {
        struct measurement *m;
        size_t n, cap;
        cJSON *machine; /* owned */
        cJSON *config;  /* owned */
        const char *mode;
        double wall_s;
};

/* Append a measurement (zeroed, series initialised) and return it. */
struct measurement *report_add(struct report *r, const char *name, const char *unit);
void measurement_target(struct measurement *m, enum target_kind kind, double limit, const char *desc);
/* ratio, met: NAN / -1 when not applicable. */
double measurement_ratio(const struct measurement *m);
int measurement_met(const struct measurement *m);

void report_print(const struct report *r, FILE *f);
int report_write_json(const struct report *r, const char *path);
void report_done(struct report *r);

/* Print to stderr with a "bench:" prefix and flush. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
