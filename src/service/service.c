/* service.c — the service manager (see service.h).
 *
 * Two paths. When the session's runner is connected it supervises the
 * service itself (hub_ops.h): exact PID, exit code, stop escalation over
 * the whole tree, and a report within about RP_SVC_PORT_POLL_MS of a new
 * listening port, pushed to this module (on_runner_report marks the session
 * dirty and wakes the monitor thread, which applies the runner's latest
 * reports to the store). Otherwise docker exec, as below; the monitor probes
 * only the services no runner reports on. The monitor is service_monitor.c;
 * this file is start, stop, list and logs, and the manager's life.
 *
 * In the container each service has a directory
 * /workspace/.sandboxd/services/<name>/ holding run.sh (the tenant's
 * command, written as data through stdin), stdout.log, stderr.log and, once
 * it ended, `exit` (its exit code). A fixed launcher script starts
 * `setsid sh -c 'sh run.sh; echo $? > exit'` under nohup in the background
 * and prints its PID, which is also the process group and session id. Every
 * process of the service carries SBX_SERVICE_ID=<name>-<start ms> in its
 * environment: the last-resort kill and the port discovery find them by it.
 *
 * The store is the truth for service rows. m->lock serialises the
 * read-modify-write of rows (never held across a Docker call); a monitor
 * update applies only if the row still describes the same start
 * (started_at), so a stop or restart racing a monitor pass wins.
 *
 * Threads: "sbx-services", the one monitor thread for every session. m->wlock
 * guards `stopping` and the dirty sessions, paired with m->wake; it is a
 * leaf (the runner's hub thread takes it). */
#include "sandboxd/service.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sandboxd/audit.h"
#include "sandboxd/engine.h"
#include "sandboxd/exec.h"
#include "sandboxd/log.h"
#include "sandboxd/quota.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_ops.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/wsquota.h"
#include "service_internal.h"

#define RUNNER_WAIT_MS 3000      /* a new container's runner connects within milliseconds */
#define KILL_WAIT_MS 5000        /* after SIGKILL: the runner freezes and kills the tree */
#define LOG_TAIL_BYTES (1 << 20) /* service_logs reads at most this much of a log's end */

/* $1 dir, $2 workdir. Prints the service's PID. (nohup where the image has
 * it; without a terminal setsid alone already shields it from SIGHUP.) */
static const char launch_script[] =
        "d=\"$1\"; cd \"$2\" || exit 97; rm -f \"$d/exit\"; n=$(command -v nohup); "
        "$n setsid sh -c 'sh \"$1/run.sh\"; echo $? > \"$1/exit\"' sbx-service \"$d\" "
        "> \"$d/stdout.log\" 2> \"$d/stderr.log\" < /dev/null & echo $!";

/* $1 dir: (re)create the service directory and write run.sh from stdin. */
static const char prepare_script[] = "umask 077; mkdir -p \"$1\" && cat > \"$1/run.sh\"";

/* $1 pid, $2 marker id, $3 grace in tenths of a second. */
static const char stop_script[] =
        "pid=$1; kill -TERM -\"$pid\" 2>/dev/null || kill -TERM \"$pid\" 2>/dev/null; i=0; "
        "while [ -d /proc/\"$pid\" ] && [ \"$i\" -lt \"$3\" ]; do sleep 0.1; i=$((i+1)); done; "
        "kill -KILL -\"$pid\" 2>/dev/null; "
        "r=0; while [ \"$r\" -lt 20 ]; do n=0; for d in /proc/[0-9]*; do "
        "if tr '\\0' '\\n' 2>/dev/null < \"$d/environ\" | grep -qxF \"SBX_SERVICE_ID=$2\"; then "
        "kill -KILL \"${d#/proc/}\" 2>/dev/null && n=$((n+1)); fi; done; "
        "[ \"$n\" -eq 0 ] && break; r=$((r+1)); sleep 0.1; done; echo stopped";

static const char *const state_names[] = {"STARTING", "RUNNING", "STOPPING", "STOPPED", "FAILED"};

const char *service_state_to_string(enum service_state s)
{
        return (unsigned)s < ELEMENTSOF(state_names) ? state_names[s] : "UNKNOWN";
}

static enum service_state state_from_string(const char *s)
{
        for (size_t i = 0; i < ELEMENTSOF(state_names); i++)
                if (strcmp(s, state_names[i]) == 0)
                        return (enum service_state)i;
        return SERVICE_FAILED;
}

bool service_is_active(const char *state)
{
        return strcmp(state, "STARTING") == 0 || strcmp(state, "RUNNING") == 0 || strcmp(state, "STOPPING") == 0;
}

void service_marker_of(const struct store_service *row, char *buf, size_t size)
{
        snprintf(buf, size, "%s-%" PRId64, row->name, row->started_at);
}

static void info_from_row(const struct store_service *row, struct service_info *info)
{
        cJSON *ports, *it;

        memset(info, 0, sizeof(*info));
        sbx_strlcpy(info->name, row->name, sizeof(info->name));
        info->state = state_from_string(row->state);
        info->pid = row->pid;
        info->exit_code = row->exit_code;
        sbx_strlcpy(info->command, row->command, sizeof(info->command));
        sbx_strlcpy(info->workdir, row->workdir, sizeof(info->workdir));
        sbx_strlcpy(info->last_error, row->last_error, sizeof(info->last_error));
        info->started_at = row->started_at;
        info->stopped_at = row->stopped_at;
        ports = cJSON_Parse(row->ports[0] ? row->ports : "[]");
        cJSON_ArrayForEach(it, ports) {
                if (info->n_ports >= SERVICE_MAX_PORTS)
                        break;
                info->ports[info->n_ports].container_port =
                        (int)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "container_port"));
                info->ports[info->n_ports].host_port = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "host_port"));
                info->n_ports++;
        }
        cJSON_Delete(ports);
}

static bool name_valid(const char *name)
{
        return session_id_valid(name); /* the same rule: 1-64 of [A-Za-z0-9_.-], not . or .. */
}

/* ---- failure handler: the container failed or was replaced ---- */

static void on_session_failure(const char *user, const char *session, const char *container_id, const char *cause,
                               void *ud)
{
        struct service_manager *m = ud;
        struct store_service *rows = NULL;
        size_t n = 0;
        bool clean = strcmp(cause, "idle_expired") == 0 || strcmp(cause, "destroyed") == 0;

        pthread_mutex_lock(&m->lock);
        if (store_service_list(m->store, user, session, true, &rows, &n) == 0)
                for (size_t i = 0; i < n; i++) {
                        if (container_id && *container_id && rows[i].container_id[0] &&
                            strcmp(rows[i].container_id, container_id) != 0)
                                continue; /* belongs to a newer container */
                        sbx_strlcpy(rows[i].state, clean ? "STOPPED" : "FAILED", sizeof(rows[i].state));
                        snprintf(rows[i].last_error, sizeof(rows[i].last_error), "container %s", cause);
                        rows[i].stopped_at = sbx_wall_ms();
                        rows[i].pid = 0;
                        sbx_strlcpy(rows[i].ports, "[]", sizeof(rows[i].ports));
                        (void)store_service_put(m->store, &rows[i]);
                        log_ctx(LOG_LEVEL_INFO, user, session, container_id, "service %s cleared: %s", rows[i].name,
                                cause);
                }
        pthread_mutex_unlock(&m->lock);
        free(rows);
}

/* ---- start / stop / list / logs ---- */

/* The runner path of a start: *row gets the pid. -ENOTCONN when no runner
 * is connected (the caller falls back to docker exec). */
static int start_via_runner(struct service_manager *m, const char *user, const char *session, struct store_service *row,
                            const char *dir, const char *wd, const char *command, const char *const *env,
                            struct sbx_error *err)
{
        struct hub_svc_spec spec = {
                .dir = dir, .workdir = wd, .env = env, .command = command, .command_len = strlen(command)};
        struct hub_svc_state st;
        char marker[128];
        int r;

        if (!m->runner)
                return -ENOTCONN;
        (void)hub_adopt(m->runner, user, session); /* after a restart: listen again */
        if (!hub_wait(m->runner, user, session, RUNNER_WAIT_MS))
                return -ENOTCONN;
        service_marker_of(row, marker, sizeof(marker));
        spec.marker = marker;
        r = hub_svc_start(m->runner, user, session, &spec, m->cfg->docker_timeout_ms, &st);
        if (r == -ENOTCONN || r == -E2BIG)
                return -ENOTCONN; /* E2BIG: a command past one frame still runs through docker exec */
        if (r < 0)
                return sbx_error_set(err, r == -ETIMEDOUT ? -ETIMEDOUT : -EIO, 0,
                                     "the runner did not start the service: %s", strerror(-r));
        if (st.phase == RP_SVC_FAILED)
                return st.err == ENOENT
                               ? sbx_error_set(err, -ENOENT, 0, "workdir %s does not exist in the session", wd)
                               : sbx_error_set(err, -EIO, 0, "the service did not start: %s", strerror(st.err));
        row->pid = st.pid;
        return 0;
}

int service_start(struct service_manager *m, const char *user, const char *session, const char *name,
                  const char *command, const char *workdir, struct service_info *ret, struct sbx_error *err)
{
        char wd[1024], dir[256], cid[65], *out = NULL;
        struct store_service row = {0}, old;
        struct store_service *rows = NULL;
        struct session *s = NULL;
        const char *check_argv[] = {"test", "-d", wd, NULL};
        const char *prep_argv[] = {"sh", "-c", prepare_script, "sbx-prepare", dir, NULL};
        const char *launch_argv[] = {"sh", "-c", launch_script, "sbx-launch", dir, wd, NULL};
        char marker_env[128];
        const char *env[] = {marker_env, NULL};
        struct quota_limits lim;
        size_t n = 0, active = 0;
        int code = -1, r;

        r = session_key_check(user, session, err);
        if (r < 0)
                return r;
        if (!name_valid(name))
                return sbx_error_set(err, -EINVAL, 0,
                                     "invalid service name: must be 1-64 characters of "
                                     "[A-Za-z0-9_.-] and not '.' or '..'");
        if (!command || !*command)
                return sbx_error_set(err, -EINVAL, 0, "command is empty");
        r = wsquota_admit(m->cfg, user, session, err);
        if (r < 0)
                return r;
        if ((int64_t)strlen(command) > m->cfg->max_command_bytes)
                return sbx_error_set(err, -E2BIG, 0, "command is %zu bytes; the limit is %" PRId64, strlen(command),
                                     m->cfg->max_command_bytes);
        r = exec_workdir_resolve(workdir, wd, err);
        if (r < 0)
                return r;
        snprintf(dir, sizeof(dir), SERVICE_DIR "/%s", name);

        /* Reserve the name: a STARTING row, so a second start of the same name fails at once. */
        pthread_mutex_lock(&m->lock);
        if (store_service_get(m->store, user, session, name, &old) == 0 && service_is_active(old.state)) {
                pthread_mutex_unlock(&m->lock);
                return sbx_error_set(err, -EEXIST, 0, "service %s is already %s (pid %d); stop it first", name,
                                     old.state, old.pid);
        }
        if (store_service_list(m->store, user, session, true, &rows, &n) == 0)
                active = n;
        free(rows);
        quota_limits_get(m->quota, m->cfg, user, &lim); /* q->lock is a leaf */
        if ((int64_t)active >= lim.services) {
                pthread_mutex_unlock(&m->lock);
                return sbx_error_set(err, -EUSERS, 0,
                                     "busy: too many services in this session (max_services_per_session=%" PRId64 ")",
                                     lim.services);
        }
        sbx_strlcpy(row.user_id, user, sizeof(row.user_id));
        sbx_strlcpy(row.session_id, session, sizeof(row.session_id));
        sbx_strlcpy(row.name, name, sizeof(row.name));
        sbx_strlcpy(row.command, command, sizeof(row.command));
        sbx_strlcpy(row.workdir, wd, sizeof(row.workdir));
        sbx_strlcpy(row.state, "STARTING", sizeof(row.state));
        sbx_strlcpy(row.ports, "[]", sizeof(row.ports));
        row.exit_code = -1;
        row.started_at = sbx_wall_ms();
        r = store_service_put(m->store, &row);
        pthread_mutex_unlock(&m->lock);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the service: %s", strerror(-r));

        r = session_acquire(m->sessions, user, session, &s, err);
        if (r < 0)
                goto fail;
        session_container_id(s, cid);
        sbx_strlcpy(row.container_id, cid, sizeof(row.container_id));
        /* The marker rides in every process's environment (the docker exec
         * fallback's stop and probe find them by it). */
        service_marker_of(&row, marker_env + snprintf(marker_env, sizeof(marker_env), "SBX_SERVICE_ID="),
                          sizeof(marker_env) - 15);

        r = start_via_runner(m, user, session, &row, dir, wd, command, env, err);
        if (r == 0)
                goto started;
        if (r != -ENOTCONN)
                goto fail;
        r = exec_internal(m->exec, cid, check_argv, NULL, 0, m->cfg->docker_timeout_ms, &code, NULL, NULL, err);
        if (r == 0 && code != 0)
                r = sbx_error_set(err, -ENOENT, 0, "workdir %s does not exist in the session", wd);
        if (r == 0)
                r = exec_internal(m->exec, cid, prep_argv, command, strlen(command), m->cfg->docker_timeout_ms, &code,
                                  NULL, NULL, err);
        if (r == 0 && code != 0)
                r = sbx_error_set(err, -EIO, 0, "cannot write the start script (exit %d)", code);
        if (r < 0)
                goto fail;

        /* The launcher runs with the marker in its environment, so every process
         * of the service inherits it. */
        {
                struct engine_exec_spec spec = {.cmd = launch_argv, .env = env};
                struct engine_exec_result res = {0};
                r = engine_exec_run(m->engine, cid, &spec, NULL, 0, 4096, m->cfg->docker_timeout_ms, &res, err);
                code = res.exit_code;
                out = TAKE_PTR(res.out);
                engine_exec_result_done(&res);
        }
        if (r == 0 && (code != 0 || !out || atoi(out) <= 0))
                r = sbx_error_set(err, code == 97 ? -ENOENT : -EIO, 0, "the service did not start (exit %d)", code);
        if (r < 0)
                goto fail;

        row.pid = atoi(out);
started:
        pthread_mutex_lock(&m->lock);
        sbx_strlcpy(row.state, "RUNNING", sizeof(row.state));
        r = store_service_put(m->store, &row);
        pthread_mutex_unlock(&m->lock);
        free(out);
        session_release(s);
        (void)service_apply_runner(m, user, session); /* a report that came before the row said RUNNING */
        (void)audit_record(m->store, "api", user, session, "service.start", NULL);
        log_ctx(LOG_LEVEL_INFO, user, session, cid, "service %s started (pid %d)", name, row.pid);
        if (ret)
                info_from_row(&row, ret);
        return r;

fail:
        free(out);
        session_release(s);
        /* nothing half-started: the row goes back to FAILED with the reason */
        pthread_mutex_lock(&m->lock);
        sbx_strlcpy(row.state, "FAILED", sizeof(row.state));
        snprintf(row.last_error, sizeof(row.last_error), "%s", err ? err->msg : strerror(-r));
        row.stopped_at = sbx_wall_ms();
        (void)store_service_put(m->store, &row);
        pthread_mutex_unlock(&m->lock);
        return r;
}

/* The runner path of a stop: SIGTERM to the whole tree, SERVICE_STOP_GRACE_MS,
 * then SIGKILL (the runner freezes and kills until none is left). False
 * when the runner does not hold the service (the caller uses docker exec);
 * else *ret_r is the result. */
static bool stop_via_runner(struct service_manager *m, const char *user, const char *session, const char *marker,
                            struct sbx_error *err, int *ret_r)
{
        struct hub_svc_state st;

        if (!m->runner || !hub_svc_get(m->runner, user, session, marker, &st))
                return false;
        *ret_r = 0;
        if (st.phase == RP_SVC_EXITED) {
                hub_svc_forget(m->runner, user, session, marker);
                return true;
        }
        if (hub_svc_signal(m->runner, user, session, marker, SIGTERM) < 0)
                return false;
        if (hub_svc_wait_end(m->runner, user, session, marker, m->cfg->service_stop_grace_ms, NULL)) {
                hub_svc_forget(m->runner, user, session, marker);
                return true;
        }
        if (!hub_svc_get(m->runner, user, session, marker, NULL) ||
            hub_svc_signal(m->runner, user, session, marker, SIGKILL) < 0)
                return false; /* the connection went meanwhile */
        if (hub_svc_wait_end(m->runner, user, session, marker, KILL_WAIT_MS, NULL))
                hub_svc_forget(m->runner, user, session, marker);
        else if (hub_svc_get(m->runner, user, session, marker, NULL))
                *ret_r = sbx_error_set(err, -EIO, 0, "the service's processes did not end after SIGKILL");
        else
                return false;
        return true;
}

int service_stop(struct service_manager *m, const char *user, const char *session, const char *name,
                 struct service_info *ret, struct sbx_error *err)
{
        struct store_service row;
        struct session *s = NULL;
        char cid[65], pid[16], marker[128], grace[16];
        const char *argv[] = {"sh", "-c", stop_script, "sbx-stop", pid, marker, grace, NULL};
        int code = -1, r;

        r = session_key_check(user, session, err);
        if (r < 0)
                return r;
        if (!name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "invalid service name");
        pthread_mutex_lock(&m->lock);
        r = store_service_get(m->store, user, session, name, &row);
        if (r == 0 && service_is_active(row.state)) {
                sbx_strlcpy(row.state, "STOPPING", sizeof(row.state));
                (void)store_service_put(m->store, &row);
        }
        pthread_mutex_unlock(&m->lock);
        if (r < 0)
                return sbx_error_set(err, -ENOENT, 0, "no service named %s in this session", name);
        if (strcmp(row.state, "STOPPING") != 0) {
                if (ret)
                        info_from_row(&row, ret);
                return 0; /* already stopped or failed: nothing to do */
        }

        r = session_acquire(m->sessions, user, session, &s, err);
        if (r == 0) {
                session_container_id(s, cid);
                service_marker_of(&row, marker, sizeof(marker));
                bool here = strcmp(cid, row.container_id) == 0 && row.pid > 0;
                if (here && stop_via_runner(m, user, session, marker, err, &r)) {
                        /* done: the runner ended its whole tree (or said why not) */
                } else if (here) {
                        snprintf(pid, sizeof(pid), "%d", row.pid);
                        snprintf(grace, sizeof(grace), "%d", m->cfg->service_stop_grace_ms / 100);
                        r = exec_internal(m->exec, cid, argv, NULL, 0,
                                          m->cfg->service_stop_grace_ms + m->cfg->docker_timeout_ms, &code, NULL, NULL,
                                          err);
                }
                /* else the container it ran in is gone: so is the service */
                session_release(s);
        }

        pthread_mutex_lock(&m->lock);
        if (store_service_get(m->store, user, session, name, &row) == 0 && strcmp(row.state, "STOPPING") == 0) {
                sbx_strlcpy(row.state, r < 0 ? "FAILED" : "STOPPED", sizeof(row.state));
                if (r < 0)
                        snprintf(row.last_error, sizeof(row.last_error), "stop failed: %s", err ? err->msg : "");
                row.stopped_at = sbx_wall_ms();
                sbx_strlcpy(row.ports, "[]", sizeof(row.ports));
                (void)store_service_put(m->store, &row);
        }
        pthread_mutex_unlock(&m->lock);
        if (ret)
                info_from_row(&row, ret);
        return r;
}

static void info_from_row_v(const void *row, void *info)
{
        info_from_row(row, info);
}

int service_list(struct service_manager *m, const char *user, const char *session, struct service_info **ret,
                 size_t *ret_n)
{
        struct store_service *rows = NULL;
        size_t n = 0;
        int r = store_service_list(m->store, user, session, false, &rows, &n);

        return r < 0 ? r : sbx_rows_convert(rows, n, sizeof(*rows), sizeof(**ret), info_from_row_v, ret, ret_n);
}

/* The last `lines` lines of a log, read through the runner from its last
 * LOG_TAIL_BYTES (what `tail -n` printed through docker exec, within the
 * same bound). A log not written yet reads as empty. */
static int tail_via_runner(struct service_manager *m, const char *user, const char *session, const char *path,
                           int lines, char **ret)
{
        uint64_t size = 0;
        size_t len = 0, start;
        char *buf = malloc(LOG_TAIL_BYTES + 1);
        int r;

        if (!buf)
                return -ENOMEM;
        r = hub_file_read(m->runner, user, session, path, 0, 0, buf, &len, &size, m->cfg->docker_timeout_ms);
        if (r == 0 && size > 0)
                r = hub_file_read(m->runner, user, session, path, size > LOG_TAIL_BYTES ? size - LOG_TAIL_BYTES : 0,
                                  LOG_TAIL_BYTES, buf, &len, &size, m->cfg->docker_timeout_ms);
        if (r == -ENOENT) {
                r = 0;
                len = 0;
        }
        if (r < 0) {
                free(buf);
                return r;
        }
        /* from the end: a last line without its newline counts as a line */
        start = len;
        if (start > 0 && buf[start - 1] == '\n')
                start--;
        for (int n = 0; start > 0; start--)
                if (buf[start - 1] == '\n' && ++n == lines)
                        break;
        memmove(buf, buf + start, len - start);
        buf[len - start] = '\0';
        *ret = buf;
        return 0;
}

int service_logs(struct service_manager *m, const char *user, const char *session, const char *name, int tail_lines,
                 char **ret_stdout, char **ret_stderr, struct sbx_error *err)
{
        struct store_service row;
        struct session *s = NULL;
        char cid[65], lines[16], path[2][256];
        char *outs[2] = {NULL, NULL};
        int r;

        r = session_key_check(user, session, err);
        if (r < 0)
                return r;
        if (!name_valid(name) || store_service_get(m->store, user, session, name, &row) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no service named %s in this session", name);
        if (tail_lines <= 0)
                tail_lines = 100;
        if (tail_lines > 10000)
                tail_lines = 10000;
        snprintf(lines, sizeof(lines), "%d", tail_lines);
        r = session_acquire(m->sessions, user, session, &s, err);
        if (r < 0)
                return r;
        session_container_id(s, cid);
        if (m->runner && hub_wait(m->runner, user, session, RUNNER_WAIT_MS)) {
                for (int k = 0; k < 2 && r == 0; k++) {
                        snprintf(path[k], sizeof(path[k]), SERVICE_DIR "/%s/%s.log", name, k ? "stderr" : "stdout");
                        r = tail_via_runner(m, user, session, path[k], tail_lines, &outs[k]);
                }
                if (r != -ENOTCONN) {
                        session_release(s);
                        if (r < 0) {
                                free(outs[0]);
                                free(outs[1]);
                                return sbx_error_set(err, r, 0, "cannot read the service's logs: %s", strerror(-r));
                        }
                        *ret_stdout = outs[0];
                        *ret_stderr = outs[1];
                        return 0;
                }
                free(outs[0]);
                free(outs[1]);
                outs[0] = outs[1] = NULL;
                r = 0;
        }
        for (int k = 0; k < 2 && r == 0; k++) {
                snprintf(path[k], sizeof(path[k]), SERVICE_DIR "/%s/%s.log", name, k ? "stderr" : "stdout");
                const char *argv[] = {"tail", "-n", lines, path[k], NULL};
                int code = -1;
                r = exec_internal(m->exec, cid, argv, NULL, 0, m->cfg->docker_timeout_ms, &code, &outs[k], NULL, err);
                if (r == 0 && !outs[k])
                        outs[k] = strdup("");
        }
        session_release(s);
        if (r < 0) {
                free(outs[0]);
                free(outs[1]);
                return r;
        }
        *ret_stdout = outs[0];
        *ret_stderr = outs[1];
        return 0;
}

int service_manager_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct session_manager *sm,
                        struct exec_registry *ex, struct service_manager **ret, struct sbx_error *err)
{
        struct service_manager *m = calloc(1, sizeof(*m));
        pthread_condattr_t ca;
        int r;

        if (!m)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        m->cfg = cfg;
        m->engine = d;
        m->store = st;
        m->sessions = sm;
        m->exec = ex;
        pthread_mutex_init(&m->lock, NULL);
        pthread_mutex_init(&m->wlock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&m->wake, &ca);
        pthread_condattr_destroy(&ca);
        r = session_register_failure_handler(sm, on_session_failure, m);
        if (r < 0) {
                service_manager_free(m);
                return sbx_error_set(err, r, 0, "cannot register the service failure handler");
        }
        *ret = m;
        return 0;
}

int service_manager_start(struct service_manager *m, struct sbx_error *err)
{
        int r = -pthread_create(&m->thread, NULL, service_monitor_main, m);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot start the service monitor: %s", strerror(-r));
        m->started = true;
        return 0;
}

void service_set_runner(struct service_manager *m, struct hub *h)
{
        m->runner = h;
        hub_svc_set_handler(h, service_on_runner_report, m);
}

void service_set_quota(struct service_manager *m, struct quota *q)
{
        pthread_mutex_lock(&m->lock);
        m->quota = q;
        pthread_mutex_unlock(&m->lock);
}

void service_manager_free(struct service_manager *m)
{
        if (!m)
                return;
        if (m->runner)
                hub_svc_set_handler(m->runner, NULL, NULL); /* waits out a call under way */
        pthread_mutex_lock(&m->wlock);
        m->stopping = true;
        pthread_cond_broadcast(&m->wake);
        pthread_mutex_unlock(&m->wlock);
        if (m->started)
                pthread_join(m->thread, NULL);
        pthread_mutex_destroy(&m->lock);
        pthread_mutex_destroy(&m->wlock);
        pthread_cond_destroy(&m->wake);
        free(m);
}
