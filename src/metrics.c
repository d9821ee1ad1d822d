/* metrics.c — counters the modules bump and the Prometheus text built from
 * them and from the engines' gauges (include/sandboxd/metrics.h).
 *
 * Locking: none. Counters are relaxed atomics (a scrape may see one counter
 * a moment ahead of another, which Prometheus tolerates); the gauges are
 * asked of their owners (session_counts, exec_running_count, exec_totals,
 * portpool_usage, engine_api_errors) and of /proc/self at render time. */
#include "sandboxd/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/engine.h"
#include "sandboxd/exec.h"
#include "sandboxd/egress.h"
#include "sandboxd/events.h"
#include "sandboxd/node.h"
#include "sandboxd/pool.h"
#include "sandboxd/portpool.h"
#include "sandboxd/session.h"
#include "sandboxd/sessspec.h"
#include "sandboxd/snapshot.h"
#include "sandboxd/store.h"
#include "sandboxd/webhook.h"

static uint64_t auth_failures;
static const int http_codes[] = {200, 400, 401, 403, 404, 405, 409, 413, 429, 431, 500, 503};
#define HTTP_CODES (sizeof(http_codes) / sizeof(http_codes[0]))
static uint64_t http_total[HTTP_CODES + 1]; /* the last one: any other status */

#define BUMP(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

void metrics_auth_failure(void)
{
        BUMP(auth_failures, 1);
}

uint64_t metrics_auth_failures(void)
{
        return LOAD(auth_failures);
}

void metrics_http_status(int status)
{
        size_t i = 0;
        while (i < HTTP_CODES && http_codes[i] != status)
                i++;
        BUMP(http_total[i], 1);
}

/* ---- rendering ---- */

struct text {
        char *buf;
        size_t len, cap;
        bool oom;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
        va_list ap;
        int n;

        if (t->oom)
                return;
        for (;;) {
                va_start(ap, fmt);
                n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
                va_end(ap);
                if (n < 0) {
                        t->oom = true;
                        return;
                }
                if ((size_t)n < t->cap - t->len) {
                        t->len += (size_t)n;
                        return;
                }
                size_t cap = (t->cap + (size_t)n + 1) * 2;
                char *nb = realloc(t->buf, cap);
                if (!nb) {
                        t->oom = true;
                        return;
                }
                t->buf = nb;
                t->cap = cap;
        }
}

static void head(struct text *t, const char *name, const char *type, const char *help)
{
        put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A "Key:   value kB" line of /proc/self/status. */
static long long proc_status(const char *key)
{
        FILE *f = fopen("/proc/self/status", "re");
        char line[256];
        size_t kl = strlen(key);
        long long v = -1;

        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
                        v = strtoll(line + kl + 1, NULL, 10);
                        break;
                }
        fclose(f);
        return v;
}

static long count_fds(void)
{
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *de;
        long n = 0;

        if (!dir)
                return -1;
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n - 1; /* the directory's own fd */
}

/* The final states and the causes each can have (exec.h). */
static const struct {
        enum exec_state state;
        const char *name;
        enum exec_cause cause;
} final_pairs[] = {
        {EXEC_COMPLETED, "completed", EXEC_CAUSE_EXITED},   {EXEC_FAILED, "failed", EXEC_CAUSE_OOM},
        {EXEC_FAILED, "failed", EXEC_CAUSE_CONTAINER_DIED}, {EXEC_FAILED, "failed", EXEC_CAUSE_DAEMON_RESTARTED},
        {EXEC_FAILED, "failed", EXEC_CAUSE_ERROR},          {EXEC_CANCELLED, "cancelled", EXEC_CAUSE_CANCELLED},
        {EXEC_TIMEOUT, "timeout", EXEC_CAUSE_TIMEOUT},
};

#define LABEL_KEYS_MAX 8
#define LABEL_ROWS_MAX 100000 /* sessions looked at per scrape */
/* The bucket of the values past METRICS_LABEL_VALUES_MAX: "(" is outside
 * what label_value ever writes, so no value of anyone's can be it. */
#define LABEL_OVERFLOW "(other)"

/* v as a label value that no other string gives: the characters of names
 * and host names ([A-Za-z0-9._:/-]) as they are, every other byte (also
 * '%', '"', '\\', a newline or a byte that is not UTF-8) as %HH. Injective,
 * and what it writes needs no escaping in the text format. */
static void label_value(struct text *t, const char *v)
{
        char buf[256];
        size_t n = 0;

        for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
                if (n + 4 > sizeof(buf)) {
                        put(t, "%.*s", (int)n, buf);
                        n = 0;
                }
                if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                    strchr("._:/-", *c))
                        buf[n++] = (char)*c;
                else
                        n += (size_t)snprintf(buf + n, 4, "%%%02X", *c);
        }
        put(t, "%.*s", (int)n, buf);
}

/* sandboxd_sessions_by_label: sessions by the value of each label key the
 * operator lists (metrics.label_keys, each once), at most
 * METRICS_LABEL_VALUES_MAX values per key (first come in key order), the
 * rest as LABEL_OVERFLOW. */
static void render_labels(struct text *t, const struct metrics_ctx *m)
{
        char keys[LABEL_KEYS_MAX][SESSSPEC_LABEL_KEY_MAX + 1], list[sizeof(m->cfg->metrics_label_keys)];
        struct store_session_labels *rows = NULL;
        size_t n_keys = 0, n_rows = 0, max_values;
        char *save = NULL;

        if (!m->store || !m->cfg || !m->cfg->metrics_label_keys[0])
                return;
        sbx_strlcpy(list, m->cfg->metrics_label_keys, sizeof(list));
        for (char *k = strtok_r(list, ", ", &save); k && n_keys < LABEL_KEYS_MAX; k = strtok_r(NULL, ", ", &save)) {
                size_t i = 0;
                while (i < n_keys && strcmp(keys[i], k) != 0)
                        i++;
                if (i == n_keys && sessspec_label_key_valid(k)) /* a key listed twice: its series once */
                        sbx_strlcpy(keys[n_keys++], k, sizeof(keys[0]));
        }
        if (n_keys == 0 || store_session_labels_list(m->store, LABEL_ROWS_MAX, &rows, &n_rows) < 0)
                return;
        max_values = (size_t)(m->cfg->metrics_label_values_max > 0 ? m->cfg->metrics_label_values_max : 1);
        head(t, "sandboxd_sessions_by_label", "gauge",
             "sessions by the value of each label key in metrics.label_keys (values past METRICS_LABEL_VALUES_MAX "
             "count as \"" LABEL_OVERFLOW "\")");
        for (size_t k = 0; k < n_keys; k++) {
                struct {
                        char value[SESSSPEC_LABEL_VALUE_MAX + 1];
                        size_t count;
                } *vals = calloc(max_values, sizeof(*vals));
                size_t n_vals = 0, other = 0;

                if (!vals)
                        break;
                for (size_t i = 0; i < n_rows; i++) {
                        cJSON *labels = cJSON_Parse(rows[i].labels_json);
                        const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, keys[k]);
                        size_t j = 0;

                        if (cJSON_IsString(v) && sessspec_label_value_valid(v->valuestring)) {
                                while (j < n_vals && strcmp(vals[j].value, v->valuestring) != 0)
                                        j++;
                                if (j == n_vals && n_vals < max_values)
                                        sbx_strlcpy(vals[n_vals++].value, v->valuestring, sizeof(vals[0].value));
                                if (j < n_vals)
                                        vals[j].count++;
                                else
                                        other++;
                        }
                        cJSON_Delete(labels);
                }
                for (size_t j = 0; j <= n_vals; j++) {
                        if (j == n_vals && !other)
                                break;
                        put(t, "sandboxd_sessions_by_label{key=\"");
                        label_value(t, keys[k]);
                        put(t, "\",value=\"");
                        if (j < n_vals)
                                label_value(t, vals[j].value);
                        else
                                put(t, "%s", LABEL_OVERFLOW);
                        put(t, "\"} %zu\n", j < n_vals ? vals[j].count : other);
                }
                free(vals);
        }
        store_session_labels_free(rows, n_rows);
}

/* name{node="<node>"} value: a node's name is its certificate's common name, anything. */
static void node_series(struct text *t, const char *metric, const char *node, unsigned long long value)
{
        put(t, "%s{node=\"", metric);
        label_value(t, node);
        put(t, "\"} %llu\n", value);
}

static void render_nodes(struct text *t, const struct metrics_ctx *m)
{
        struct node_status *nodes = NULL;
        struct store_node_count *counts = NULL;
        size_t n = 0, n_counts = 0, up = 0;

        if (!m->node || node_server_list(m->node, &nodes, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++)
                up += nodes[i].connected;
        head(t, "sandboxd_nodes_connected", "gauge", "node agents connected over the node link");
        put(t, "sandboxd_nodes_connected %zu\n", up);
        head(t, "sandboxd_node_up", "gauge", "1 while the node agent is connected");
        for (size_t i = 0; i < n; i++)
                node_series(t, "sandboxd_node_up", nodes[i].name, nodes[i].connected ? 1 : 0);
        if (m->store && store_node_counts(m->store, &counts, &n_counts) == 0) {
                head(t, "sandboxd_node_sessions", "gauge", "sessions placed on each node");
                for (size_t i = 0; i < n_counts; i++)
                        node_series(t, "sandboxd_node_sessions", counts[i].node,
                                    (unsigned long long)counts[i].sessions);
        }
        free(counts);
        free(nodes);
}

int metrics_render(const struct metrics_ctx *m, char **ret)
{
        static const char *const session_states[] = {"creating", "running", "stopped", "error", "paused"};
        _Static_assert(ELEMENTSOF(session_states) == SESSION_STATE_COUNT, "a label for every state");
        struct session_pause_stats pst;
        struct text t = {0};
        size_t counts[SESSION_STATE_COUNT] = {0}, used = 0, total = 0;
        struct exec_totals xt;
        uint64_t cum = 0;

        session_counts(m->sessions, counts);
        if (m->ports)
                portpool_usage(m->ports, &used, &total);

        head(&t, "sandboxd_up", "gauge", "1 while the daemon serves");
        put(&t, "sandboxd_up 1\n");
        head(&t, "sandboxd_build_info", "gauge", "the daemon's version");
        put(&t, "sandboxd_build_info{version=\"%s\"} 1\n", SBX_VERSION);
        head(&t, "sandboxd_start_time_seconds", "gauge", "when the daemon started (unix time)");
        put(&t, "sandboxd_start_time_seconds %.3f\n", (double)m->started_at / 1000.0);

        head(&t, "sandboxd_sessions", "gauge", "sessions by state");
        for (size_t i = 0; i < SESSION_STATE_COUNT; i++)
                put(&t, "sandboxd_sessions{state=\"%s\"} %zu\n", session_states[i], counts[i]);
        head(&t, "sandboxd_session_evictions_total", "counter",
             "sessions stopped (workspace kept) to give another user its fair share of limits.sessions");
        put(&t, "sandboxd_session_evictions_total{reason=\"fair_share\"} %llu\n",
            (unsigned long long)session_evictions(m->sessions));
        session_pause_stats(m->sessions, &pst);
        head(&t, "sandboxd_session_pauses_total", "counter",
             "sessions paused (frozen, memory kept): pause_session or pause_after");
        put(&t, "sandboxd_session_pauses_total %llu\n", (unsigned long long)pst.pauses);
        head(&t, "sandboxd_session_resumes_total", "counter", "paused sessions resumed (by any request)");
        put(&t, "sandboxd_session_resumes_total %llu\n", (unsigned long long)pst.resumes);
        head(&t, "sandboxd_session_pause_evictions_total", "counter",
             "paused sessions stopped (workspace kept) past limits.paused_sessions or under memory pressure");
        put(&t, "sandboxd_session_pause_evictions_total %llu\n", (unsigned long long)pst.evictions);

        head(&t, "sandboxd_executions_running", "gauge", "executions pending or running now");
        put(&t, "sandboxd_executions_running %zu\n", exec_running_count(m->exec, NULL, NULL));
        head(&t, "sandboxd_executions_total", "counter", "finished executions by final state and cause");
        exec_totals(&xt);
        for (size_t i = 0; i < ELEMENTSOF(final_pairs); i++) {
                enum exec_state st = final_pairs[i].state;
                enum exec_cause c = final_pairs[i].cause;
                put(&t, "sandboxd_executions_total{state=\"%s\",cause=\"%s\"} %llu\n", final_pairs[i].name,
                    exec_cause_to_string(c), (unsigned long long)xt.finished[st][c]);
        }

        head(&t, "sandboxd_exec_duration_seconds", "histogram", "run time of finished executions");
        for (size_t b = 0; b <= EXEC_DURATION_BUCKETS; b++) {
                cum += xt.bucket[b];
                if (b < EXEC_DURATION_BUCKETS)
                        put(&t, "sandboxd_exec_duration_seconds_bucket{le=\"%g\"} %llu\n",
                            (double)exec_duration_bucket_ms[b] / 1000.0, (unsigned long long)cum);
                else
                        put(&t, "sandboxd_exec_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
        put(&t, "sandboxd_exec_duration_seconds_sum %.3f\n", (double)xt.sum_ms / 1000.0);
        put(&t, "sandboxd_exec_duration_seconds_count %llu\n", (unsigned long long)cum);

        head(&t, "sandboxd_docker_api_errors_total", "counter",
             "Docker Engine API calls that failed: unreachable, timed out, broken, or a 5xx answer");
        put(&t, "sandboxd_docker_api_errors_total %llu\n",
            (unsigned long long)(m->engine ? engine_api_errors(m->engine) : 0));
        {
                struct snapshot_counters sc;
                snapshot_counters_get(&sc);
                head(&t, "sandboxd_snapshot_operations_total", "counter",
                     "workspace snapshot operations by kind (issue 28): taken, restored, forked, deleted, failed");
                put(&t, "sandboxd_snapshot_operations_total{op=\"snapshot\"} %llu\n", (unsigned long long)sc.taken);
                put(&t, "sandboxd_snapshot_operations_total{op=\"restore\"} %llu\n", (unsigned long long)sc.restored);
                put(&t, "sandboxd_snapshot_operations_total{op=\"fork\"} %llu\n", (unsigned long long)sc.forked);
                put(&t, "sandboxd_snapshot_operations_total{op=\"delete\"} %llu\n", (unsigned long long)sc.deleted);
                put(&t, "sandboxd_snapshot_operations_total{op=\"failed\"} %llu\n", (unsigned long long)sc.failed);
                head(&t, "sandboxd_snapshot_bytes_written_total", "counter", "bytes of snapshot copies written");
                put(&t, "sandboxd_snapshot_bytes_written_total %llu\n", (unsigned long long)sc.bytes_written);
        }
        head(&t, "sandboxd_auth_failures_total", "counter", "failed token authentications (API socket and HTTP)");
        put(&t, "sandboxd_auth_failures_total %llu\n", (unsigned long long)LOAD(auth_failures));
        head(&t, "sandboxd_http_requests_total", "counter", "answers of the HTTP front by status");
        for (size_t i = 0; i <= HTTP_CODES; i++) {
                if (i < HTTP_CODES)
                        put(&t, "sandboxd_http_requests_total{code=\"%d\"} %llu\n", http_codes[i],
                            (unsigned long long)LOAD(http_total[i]));
                else
                        put(&t, "sandboxd_http_requests_total{code=\"other\"} %llu\n",
                            (unsigned long long)LOAD(http_total[i]));
        }

        {
                struct egress_stats es;
                egress_stats(m->egress, &es);
                head(&t, "sandboxd_egress_total", "counter", "egress proxy decisions since the daemon started");
                put(&t, "sandboxd_egress_total{decision=\"allowed\"} %llu\n", (unsigned long long)es.allowed);
                put(&t, "sandboxd_egress_total{decision=\"blocked\"} %llu\n", (unsigned long long)es.blocked);
                head(&t, "sandboxd_egress_open", "gauge", "egress proxy connections open now");
                put(&t, "sandboxd_egress_open %d\n", es.open);
        }

        {
                struct pool_stats ps;
                pool_stats(m->pool, &ps);
                head(&t, "sandboxd_pool_ready", "gauge", "warm pool containers ready to be claimed");
                put(&t, "sandboxd_pool_ready %zu\n", ps.ready);
                head(&t, "sandboxd_pool_waiting", "gauge", "new sessions waiting in line for the warm pool's refill");
                put(&t, "sandboxd_pool_waiting %zu\n", ps.waiting);
                head(&t, "sandboxd_pool_claims_total", "counter", "new sessions by pool outcome (claim or miss)");
                put(&t, "sandboxd_pool_claims_total{outcome=\"claimed\"} %llu\n", (unsigned long long)ps.claims);
                put(&t, "sandboxd_pool_claims_total{outcome=\"missed\"} %llu\n", (unsigned long long)ps.misses);
        }

        render_labels(&t, m);
        render_nodes(&t, m);

        head(&t, "sandboxd_ports_used", "gauge", "host ports handed out to sessions");
        put(&t, "sandboxd_ports_used %zu\n", used);
        head(&t, "sandboxd_ports_total", "gauge", "host ports in the pool");
        put(&t, "sandboxd_ports_total %zu\n", total);

        {
                struct events_stats es;
                struct webhook_stats ws;
                events_stats(&es);
                webhook_stats(&ws);
                head(&t, "sandboxd_events_total", "counter", "lifecycle events written to the event log");
                put(&t, "sandboxd_events_total %llu\n", (unsigned long long)es.written);
                head(&t, "sandboxd_events_dropped_total", "counter",
                     "lifecycle events lost before the log (queue full or the store failing)");
                put(&t, "sandboxd_events_dropped_total %llu\n", (unsigned long long)es.dropped);
                head(&t, "sandboxd_event_subscribers", "gauge", "live event streams (GET /v1/events)");
                put(&t, "sandboxd_event_subscribers %zu\n", es.subscribers);
                head(&t, "sandboxd_event_overflows_total", "counter", "event streams cut off for reading too slowly");
                put(&t, "sandboxd_event_overflows_total %llu\n", (unsigned long long)es.overflowed);
                head(&t, "sandboxd_webhook_inflight", "gauge", "webhook deliveries under way");
                put(&t, "sandboxd_webhook_inflight %lld\n", (long long)ws.inflight);
                head(&t, "sandboxd_webhook_deliveries_total", "counter", "webhook events by outcome");
                put(&t, "sandboxd_webhook_deliveries_total{outcome=\"delivered\"} %llu\n",
                    (unsigned long long)ws.delivered);
                put(&t, "sandboxd_webhook_deliveries_total{outcome=\"failed\"} %llu\n", (unsigned long long)ws.failed);
                put(&t, "sandboxd_webhook_deliveries_total{outcome=\"dropped\"} %llu\n",
                    (unsigned long long)ws.dropped);
                head(&t, "sandboxd_webhook_attempts_total", "counter", "webhook POSTs made (retries included)");
                put(&t, "sandboxd_webhook_attempts_total %llu\n", (unsigned long long)ws.attempts);
        }
        head(&t, "process_resident_memory_bytes", "gauge", "resident set size of the daemon");
        put(&t, "process_resident_memory_bytes %lld\n", proc_status("VmRSS") * 1024);
        head(&t, "process_open_fds", "gauge", "open file descriptors of the daemon");
        put(&t, "process_open_fds %ld\n", count_fds());
        head(&t, "process_threads", "gauge", "threads of the daemon");
        put(&t, "process_threads %lld\n", proc_status("Threads"));

        if (t.oom) {
                free(t.buf);
                return -ENOMEM;
        }
        *ret = t.buf;
        return 0;
}
