/* service_monitor.c — the service manager's monitor (service.c is the
 * rest): the thread "sbx-services" applies the runner's pushed reports of
 * the sessions marked dirty, and every monitor_interval_ms probes, through
 * docker exec, the services no runner reports on (state, exit code,
 * listening ports), writing what changed to the store.
 *
 * Locks (service.c's header has the whole picture): m->wlock guards
 * `stopping` and the dirty sessions, paired with m->wake, and is a leaf (the
 * runner's hub thread takes it in service_on_runner_report); m->lock
 * serialises each row's read-modify-write and is never held across a Docker
 * call. An update applies only if the row still describes the same start. */
#include "sandboxd/service.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandboxd/engine.h"
#include "sandboxd/exec.h"
#include "sandboxd/log.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_ops.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "service_internal.h"

#define APPLY_GAP_MS 20

/* Arguments: triples "marker pid dir". For each: its state and listening ports.
 *   state <marker> running|exited <code>|gone
 *   port <marker> <port> */
static const char probe_script[] =
        "while [ $# -ge 3 ]; do id=$1; pid=$2; dir=$3; shift 3; "
        "if [ -f \"$dir/exit\" ] && ! [ -d /proc/\"$pid\" ]; then echo \"state $id exited $(cat \"$dir/exit\")\"; "
        "elif [ -d /proc/\"$pid\" ]; then echo \"state $id running\"; "
        "inodes=''; for p in /proc/[0-9]*; do "
        "if tr '\\0' '\\n' 2>/dev/null < \"$p/environ\" | grep -qxF \"SBX_SERVICE_ID=$id\"; then "
        "for f in \"$p\"/fd/*; do l=$(readlink \"$f\" 2>/dev/null); case \"$l\" in socket:*) "
        "l=${l#socket:[}; inodes=\"$inodes ${l%]}\";; esac; done; fi; done; "
        "[ -n \"$inodes\" ] && cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | "
        "awk -v id=\"$id\" -v inodes=\"$inodes\" 'BEGIN { n = split(inodes, a, \" \"); for (i = 1; i <= n; i++) want[a[i]] = 1 } "
        "$4 == \"0A\" && ($10 in want) { split($2, la, \":\"); port = 0; h = la[2]; "
        "for (i = 1; i <= length(h); i++) port = port * 16 + index(\"0123456789ABCDEF\", substr(h, i, 1)) - 1; "
        "if (!(port in seen)) { seen[port] = 1; print \"port \" id \" \" port } }'; "
        "else echo \"state $id gone\"; fi; done";

/* {container_port, host_port} for each port: the session's published block
 * starts at CONTAINER_PORT_BASE. malloc'd JSON. */
static char *ports_json(struct service_manager *m, const struct session_info *si, const int *ports, size_t n)
{
        cJSON *arr = cJSON_CreateArray();
        char *json;

        for (size_t i = 0; arr && i < n && i < SERVICE_MAX_PORTS; i++) {
                int idx = ports[i] - m->cfg->container_port_base, host = 0;
                cJSON *p = cJSON_CreateObject();
                if (si && idx >= 0 && (size_t)idx < si->n_ports)
                        host = si->ports[idx];
                cJSON_AddNumberToObject(p, "container_port", ports[i]);
                cJSON_AddNumberToObject(p, "host_port", host);
                cJSON_AddItemToArray(arr, p);
        }
        json = arr ? cJSON_PrintUnformatted(arr) : NULL;
        cJSON_Delete(arr);
        return json;
}

/* Apply what a probe or the runner found about a RUNNING service, unless
 * its row changed meanwhile (stopped, restarted): its ports while it runs;
 * STOPPED (exit 0) or FAILED once it ended (exit_code -1: vanished). */
static bool apply_state(struct service_manager *m, const struct store_service *probed, const struct session_info *si,
                        bool running, int exit_code, const int *ports, size_t n_ports)
{
        struct store_service cur;
        char *json = running ? ports_json(m, si, ports, n_ports) : NULL;
        bool ended = false;

        pthread_mutex_lock(&m->lock);
        if (store_service_get(m->store, probed->user_id, probed->session_id, probed->name, &cur) == 0 &&
            cur.started_at == probed->started_at && strcmp(cur.state, "RUNNING") == 0) {
                if (running) {
                        if (strcmp(cur.ports, json ? json : "[]") != 0) {
                                sbx_strlcpy(cur.ports, json ? json : "[]", sizeof(cur.ports));
                                (void)store_service_put(m->store, &cur);
                        }
                } else {
                        bool ok = exit_code == 0;
                        sbx_strlcpy(cur.state, ok ? "STOPPED" : "FAILED", sizeof(cur.state));
                        cur.exit_code = exit_code;
                        if (!ok)
                                snprintf(cur.last_error, sizeof(cur.last_error), "%s",
                                         cur.exit_code >= 0 ? "exited with a non-zero code"
                                                            : "the process vanished without an exit code");
                        cur.stopped_at = sbx_wall_ms();
                        cur.pid = 0;
                        sbx_strlcpy(cur.ports, "[]", sizeof(cur.ports));
                        (void)store_service_put(m->store, &cur);
                        ended = true;
                        log_ctx(LOG_LEVEL_INFO, cur.user_id, cur.session_id, cur.container_id,
                                "service %s ended: %s (exit %d)", cur.name, cur.state, cur.exit_code);
                }
        }
        pthread_mutex_unlock(&m->lock);
        free(json);
        return ended;
}

/* Apply the runner's latest reports on the session's services. Returns
 * how many reports there were. */
size_t service_apply_runner(struct service_manager *m, const char *user, const char *session)
{
        struct hub_svc_state *st = NULL;
        struct store_service *rows = NULL;
        struct session_info si;
        size_t n_st = 0, n_rows = 0;
        bool have_si;

        if (!m->runner || hub_svc_states(m->runner, user, session, &st, &n_st) < 0 || n_st == 0) {
                free(st);
                return 0;
        }
        have_si = session_get_info(m->sessions, user, session, &si) == 0;
        if (store_service_list(m->store, user, session, false, &rows, &n_rows) < 0)
                n_rows = 0;
        for (size_t i = 0; i < n_st; i++) {
                const struct store_service *row = NULL;
                char marker[128];
                for (size_t k = 0; k < n_rows && !row; k++) {
                        service_marker_of(&rows[k], marker, sizeof(marker));
                        if (strcmp(marker, st[i].marker) == 0)
                                row = &rows[k];
                }
                if (!row || !service_is_active(row->state)) {
                        /* a start that failed or was stopped meanwhile, or not ours: the runner may drop it */
                        if (st[i].phase == RP_SVC_EXITED)
                                hub_svc_forget(m->runner, user, session, st[i].marker);
                        continue;
                }
                if (strcmp(row->state, "RUNNING") != 0)
                        continue; /* a start or stop under way applies its own result */
                if (st[i].phase == RP_SVC_RUNNING)
                        (void)apply_state(m, row, have_si ? &si : NULL, true, -1, st[i].ports, st[i].n_ports);
                else if (apply_state(m, row, NULL, false, st[i].exit_code, NULL, 0))
                        hub_svc_forget(m->runner, user, session, st[i].marker);
        }
        if (have_si)
                session_info_done(&si);
        free(rows);
        free(st);
        return n_st;
}

/* Probe one session's active services with one exec, then apply. */
static void probe_session(struct service_manager *m, struct store_service *rows, size_t n)
{
        struct session_info si;
        const char **argv = calloc(3 * n + 5, sizeof(char *));
        char(*markers)[128] = calloc(n, sizeof(*markers));
        char(*pids)[16] = calloc(n, sizeof(*pids));
        char(*dirs)[256] = calloc(n, sizeof(*dirs));
        _cleanup_free_ char *out = NULL;
        size_t k = 0;
        int code = -1;

        if (!argv || !markers || !pids || !dirs)
                goto done;
        argv[k++] = "sh";
        argv[k++] = "-c";
        argv[k++] = probe_script;
        argv[k++] = "sbx-probe";
        for (size_t i = 0; i < n; i++) {
                service_marker_of(&rows[i], markers[i], sizeof(markers[i]));
                snprintf(pids[i], sizeof(pids[i]), "%d", rows[i].pid);
                snprintf(dirs[i], sizeof(dirs[i]), SERVICE_DIR "/%s", rows[i].name);
                argv[k++] = markers[i];
                argv[k++] = pids[i];
                argv[k++] = dirs[i];
        }
        if (exec_internal(m->exec, rows[0].container_id, argv, NULL, 0, m->cfg->docker_timeout_ms, &code, &out, NULL,
                          NULL) < 0 ||
            code != 0 || !out)
                goto done; /* the container may be gone: the health monitor handles that */
        if (session_get_info(m->sessions, rows[0].user_id, rows[0].session_id, &si) < 0)
                goto done;

        for (size_t i = 0; i < n; i++) {
                int found[SERVICE_MAX_PORTS];
                size_t n_found = 0;
                char state[16] = "", *line, *save = NULL, *copy = strdup(out);
                int exit_code = -1;

                for (line = copy ? strtok_r(copy, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
                        char kind[8], id[128], what[16];
                        int v = -1;
                        int f = sscanf(line, "%7s %127s %15s %d", kind, id, what, &v);
                        if (f < 3 || strcmp(id, markers[i]) != 0)
                                continue;
                        if (strcmp(kind, "state") == 0) {
                                snprintf(state, sizeof(state), "%s", what);
                                exit_code = v;
                        } else if (strcmp(kind, "port") == 0 && n_found < SERVICE_MAX_PORTS) {
                                int port = atoi(what);
                                if (port > 0 && port < 65536)
                                        found[n_found++] = port;
                        }
                }
                free(copy);
                if (strcmp(state, "running") == 0)
                        apply_state(m, &rows[i], &si, true, -1, found, n_found);
                else if (state[0])
                        apply_state(m, &rows[i], &si, false, strcmp(state, "exited") == 0 ? exit_code : -1, NULL, 0);
        }
        session_info_done(&si);
done:
        free(argv);
        free(markers);
        free(pids);
        free(dirs);
}

static void monitor_once(struct service_manager *m)
{
        struct store_service *rows = NULL;
        size_t n = 0, i = 0;

        if (store_service_list(m->store, NULL, NULL, true, &rows, &n) < 0)
                return;
        /* rows come ordered by user, session: probe each run of one container */
        while (i < n) {
                size_t j = i;
                while (j < n && strcmp(rows[j].user_id, rows[i].user_id) == 0 &&
                       strcmp(rows[j].session_id, rows[i].session_id) == 0 &&
                       strcmp(rows[j].container_id, rows[i].container_id) == 0)
                        j++;
                /* the runner's reports first (a pass catches any notice missed) */
                bool runner = m->runner && hub_wait(m->runner, rows[i].user_id, rows[i].session_id, 0) &&
                              service_apply_runner(m, rows[i].user_id, rows[i].session_id) > 0;
                /* only RUNNING rows with a pid are probed; STARTING/STOPPING belong to a call in progress */
                size_t k = i;
                for (size_t x = i; x < j; x++) {
                        char marker[128];
                        service_marker_of(&rows[x], marker, sizeof(marker));
                        if (runner && hub_svc_get(m->runner, rows[x].user_id, rows[x].session_id, marker, NULL))
                                continue; /* the runner reports on it */
                        if (strcmp(rows[x].state, "RUNNING") == 0 && rows[x].pid > 0 && rows[x].container_id[0])
                                rows[k++] = rows[x];
                }
                /* a paused session's processes are frozen: nothing to probe (an exec is refused) */
                if (k > i && !session_is_paused(m->sessions, rows[i].user_id, rows[i].session_id))
                        probe_session(m, rows + i, k - i);
                i = j;
        }
        free(rows);
}

/* On the runner hub's thread: hand the session over to the monitor thread. */
void service_on_runner_report(void *ud, const char *user, const char *session)
{
        struct service_manager *m = ud;
        bool known = false;

        pthread_mutex_lock(&m->wlock);
        for (size_t i = 0; i < m->n_dirty && !known; i++)
                known = strcmp(m->dirty[i].user, user) == 0 && strcmp(m->dirty[i].session, session) == 0;
        if (!known && m->n_dirty < MAX_DIRTY) { /* past it, the next pass applies it */
                sbx_strlcpy(m->dirty[m->n_dirty].user, user, sizeof(m->dirty[0].user));
                sbx_strlcpy(m->dirty[m->n_dirty].session, session, sizeof(m->dirty[0].session));
                m->n_dirty++;
        }
        pthread_cond_broadcast(&m->wake);
        pthread_mutex_unlock(&m->wlock);
}

void *service_monitor_main(void *ud)
{
        struct service_manager *m = ud;
        int64_t next_pass = 0;

        pthread_setname_np(pthread_self(), "sbx-services");
        pthread_mutex_lock(&m->wlock);
        while (!m->stopping) {
                struct timespec until;
                size_t n = m->n_dirty;
                struct {
                        char user[65], session[65];
                } dirty[MAX_DIRTY];

                memcpy(dirty, m->dirty, n * sizeof(dirty[0]));
                m->n_dirty = 0;
                pthread_mutex_unlock(&m->wlock);
                for (size_t i = 0; i < n; i++)
                        (void)service_apply_runner(m, dirty[i].user, dirty[i].session);
                if (sbx_now_ms() >= next_pass) {
                        monitor_once(m);
                        next_pass = sbx_now_ms() + m->cfg->monitor_interval_ms;
                }
                pthread_mutex_lock(&m->wlock);
                /* at most one batch of reports per APPLY_GAP_MS: a runner that floods
                 * reports cannot keep this thread from the other sessions */
                until = sbx_deadline_after(CLOCK_MONOTONIC, n ? APPLY_GAP_MS : next_pass - sbx_now_ms());
                while (!m->stopping && (n || m->n_dirty == 0) &&
                       pthread_cond_timedwait(&m->wake, &m->wlock, &until) != ETIMEDOUT)
                        ;
        }
        pthread_mutex_unlock(&m->wlock);
        return NULL;
}
