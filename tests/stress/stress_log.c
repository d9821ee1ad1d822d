/* stress_log.c — the process-wide pieces every thread touches: the log (its
 * level, and the ring of session lines that `sandboxctl logs` reads), the
 * request guard's audit limiter, the metrics counters and the executions'
 * totals (exec_totals, read by the metrics page).
 *
 * Writers log lines naming their own session while readers copy the ring
 * and the level flips; the limiter is asked from every thread for a few
 * shared peer uids; the counters are bumped from every thread.
 *
 * What must hold: every line read back names the session asked for, in
 * order of its sequence number; for each uid, at most REQGUARD_AUDIT_BURST
 * failures are allowed within one window (time stands still here: the
 * window never ends); no finished execution counted is lost. Log lines go
 * to stderr: it is pointed at /dev/null while the writers run (set
 * TSAN_OPTIONS=log_path=... to keep reports). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec_internal.h"
#include "sandboxd/docker.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/reqguard.h"
#include "stress.h"

#define THREADS 8
#define UIDS 3

static int allowed[UIDS]; /* atomic */
static uint64_t counted;  /* atomic: executions counted final */
static const int64_t frozen_now = 1000000;

static void writer(int t, void *ud)
{
        char user[16], session[16];
        int rounds = stress_n(20000);

        (void)ud;
        snprintf(user, sizeof(user), "u%d", t % 4);
        snprintf(session, sizeof(session), "s%d", t);
        for (int k = 0; k < rounds; k++) {
                uint64_t suppressed;

                log_ctx(k % 7 ? LOG_LEVEL_WARN : LOG_LEVEL_DEBUG, user, session, NULL, "seq %d of %s", k, session);
                if (k % 100 == 0)
                        log_set_level(k % 200 ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG);
                if (k % 50 == 0) { /* a reader: `sandboxctl logs` of this session */
                        char **lines = NULL;
                        size_t n = 0;
                        int last = -1;

                        STRESS_CHECK(log_session_lines(user, session, 64, &lines, &n) == 0, "log_session_lines");
                        for (size_t i = 0; i < n; i++) {
                                const char *at = strstr(lines[i], "seq ");
                                int seq = at ? atoi(at + 4) : -2;
                                STRESS_CHECK(strstr(lines[i], session) != NULL, "a line of another session: %s",
                                             lines[i]);
                                STRESS_CHECK(seq > last, "out of order: %d after %d", seq, last);
                                last = seq;
                        }
                        log_lines_free(lines, n);
                }
                if (reqguard_audit_allowed((uid_t)(70000 + k % UIDS), frozen_now, &suppressed))
                        __atomic_add_fetch(&allowed[k % UIDS], 1, __ATOMIC_RELAXED);
                metrics_auth_failure();
                metrics_http_status(k % 2 ? 200 : 429);
                exec_count_final(EXEC_COMPLETED, EXEC_CAUSE_EXITED, k % 1000);
                __atomic_add_fetch(&counted, 1, __ATOMIC_RELAXED);
                if (k % 500 == 0) { /* a scrape meanwhile */
                        struct exec_totals xt;
                        exec_totals(&xt);
                        STRESS_CHECK(xt.finished[EXEC_COMPLETED][EXEC_CAUSE_EXITED] > 0, "a count read as 0");
                }
                (void)docker_api_errors(); /* the Docker client counts its failures itself (docker.c) */
                (void)reqguard_scan("{\"a\":[1,2,{\"b\":\"c\"}]}", 21, REQGUARD_MAX_ELEMENTS, REQGUARD_MAX_DEPTH);
        }
}

int main(void)
{
        int saved = dup(2), devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);

        if (saved < 0 || devnull < 0 || dup2(devnull, 2) < 0) {
                perror("stress_log: stderr");
                return 2;
        }
        stress_threads(THREADS, writer, NULL);
        dup2(saved, 2);
        close(saved);
        close(devnull);
        struct exec_totals xt;
        uint64_t in_buckets = 0;
        exec_totals(&xt);
        for (size_t b = 0; b <= EXEC_DURATION_BUCKETS; b++)
                in_buckets += xt.bucket[b];
        STRESS_CHECK(xt.finished[EXEC_COMPLETED][EXEC_CAUSE_EXITED] == counted && in_buckets == counted,
                     "executions counted %llu, in the totals %llu, in the histogram %llu", (unsigned long long)counted,
                     (unsigned long long)xt.finished[EXEC_COMPLETED][EXEC_CAUSE_EXITED],
                     (unsigned long long)in_buckets);
        for (int u = 0; u < UIDS; u++)
                STRESS_CHECK(allowed[u] <= REQGUARD_AUDIT_BURST, "uid %d: %d audit rows allowed in one window", u,
                             allowed[u]);
        return stress_done("stress_log");
}
