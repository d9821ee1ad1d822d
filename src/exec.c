/* exec.c — the execution engine (see exec.h for the contract).
 *
 * Locks:
 *   e->lock   the registry of live executions (e->live), every execution's
 *             refs, and the worker count (paired with e->idle for shutdown).
 *   x->lock   an execution's state, counters and spool offsets; paired with
 *             x->cond, broadcast on every state change and output chunk so
 *             long-polls wake up.
 *   x->stdin_lock  guards the stdin queue (stdin_data/off/len/eof), the
 *             writes to the exec's stdin and the stream's teardown. Stdin
 *             is never written with a wait: the worker pumps the queue
 *             while it reads output, so a process that does not read its
 *             stdin never holds up its timeout, cancel or output.
 * Order: e->lock before x->lock; never a Docker call under either.
 *
 * A live execution stays in e->live until its worker has persisted the
 * final state; after that every read comes from the store and the spool.
 *
 * Durable executions: one the runner runs outlives the daemon. Its row
 * keeps the runner's tag, its deadline and its spool share; a daemon that
 * stops (gracefully or not) leaves it RUNNING, and the next one registers
 * it as live at once (it holds its slots) and re-adopts it from the runner
 * with its output from the last byte of its spool files. The runner forgets
 * an execution only after its end is persisted here. */
#include "sandboxd/exec.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/audit.h"
#include "sandboxd/container.h"
#include "sandboxd/docker.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/quota.h"
#include "sandboxd/runner.h"
#include "sandboxd/session.h"
#include "sandboxd/sha256.h"
#include "sandboxd/store.h"
#include "sandboxd/utf8.h"
#include "sandboxd/wsquota.h"

_Static_assert(EXEC_TTY_MAX_ROWS == RP_TTY_MAX_ROWS && EXEC_TTY_MAX_COLS == RP_TTY_MAX_COLS, "tty limits");

#define MAX_ENV 128
#define MAX_ENV_BYTES (64 * 1024)
#define MAX_WAIT_MS 60000
#define SLICE_MS 100
#define KILL_ROUNDS 10
#define READ_CHUNK (64 * 1024)
#define KILL_EXEC_MS 5000               /* one sweep of kill_script */
#define STDIN_PENDING_MAX (1024 * 1024) /* send_stdin bytes waiting for a process that does not read */
#define RUNNER_CONNECT_WAIT_MS 3000     /* a new container's runner connects within milliseconds */
#define ADOPT_WAIT_MS 30000             /* a running container's runner reconnects within about a second */

/* Signals every process whose environment carries SBX_EXEC_ID=$1 with $2,
 * prints how many. The tree is frozen (SIGSTOP) before the signal and thawed
 * after, so no process can react in between: a shell whose child dies first
 * would otherwise run its next command before its own signal reaches it.
 * The id is an argument, never part of the script text. */
static const char kill_script[] =
        "pids=''; for d in /proc/[0-9]*; do p=${d#/proc/}; [ \"$p\" = \"$$\" ] && continue; "
        "if tr '\\0' '\\n' 2>/dev/null < \"$d/environ\" | grep -qxF \"SBX_EXEC_ID=$1\"; then pids=\"$pids $p\"; fi; "
        "done; [ -z \"$pids\" ] && { echo 0; exit 0; }; "
        "kill -STOP $pids 2>/dev/null; kill -\"$2\" $pids 2>/dev/null; kill -CONT $pids 2>/dev/null; "
        "set -- $pids; echo $#";

/* Writes stdin to the file $1 (a path the daemon chose). */
static const char write_script[] = "umask 077; cat > \"$1\"";

struct execution {
        struct exec_engine *e;
        int refs;               /* e->lock */
        struct execution *next; /* e->live (e->lock) */

        /* fixed at creation */
        char id[37];
        char user[65];
        char session[65];
        char kind[16];
        char actor[96];
        char preview[161];
        char sha[65];
        char workdir[1024];
        char **argv;
        char **env;
        void *stdin_data; /* the stdin queue: [stdin_off, stdin_len) not yet written (stdin_lock) */
        size_t stdin_len;
        size_t stdin_off;
        bool stdin_eof; /* close stdin once the queue is written (stdin_lock) */
        void *code;
        size_t code_len;
        char code_path[96];
        bool interactive;
        int timeout_s;
        int64_t created_at;
        exec_output_fn on_output;
        void *userdata;
        char spool[2][SBX_PATH_MAX + 64];

        pthread_mutex_t lock;
        pthread_cond_t cond;
        enum exec_state state;
        enum exec_cause cause;
        int exit_code;
        int start_error; /* -errno when it never ran */
        char error[512];
        char container_id[65];
        int64_t duration_ms;
        uint64_t total[2];   /* [0] stdout, [1] stderr */
        uint64_t spooled[2];
        uint64_t spool_budget; /* both streams together: its share of the session's spool quota */
        bool cancel;
        bool force;
        bool finished; /* final state persisted and audited */
        char via[16];
        bool have_usage;
        struct runner_exit usage;
        char image[256];
        char runtime[32];
        char runner_version[64];
        /* durable (runner) executions */
        uint32_t runner_tag;        /* 0 until the runner has it */
        int64_t started_wall;       /* unix ms it began running */
        int64_t deadline_wall;      /* unix ms of its timeout */
        bool adopting;              /* registered from the store after a restart */
        bool has_worker;            /* e->lock */
        bool detach;                /* the engine stops: leave it to the runner and the next daemon */
        struct runner_exec *rx_done; /* ended on the runner: forgotten there once the end is persisted */
        bool tty;
        int rows, cols;

        pthread_mutex_t stdin_lock;
        struct docker_stream *stream;
        struct runner_exec *rx; /* set instead of stream when the runner runs it (stdin_lock) */
        bool stdin_closed;
        uint64_t stdin_sent;
        int spool_fd[2];
};

struct exec_engine {
        const struct sbx_config *cfg;
        struct docker *docker;
        struct store *store;
        struct session_manager *sessions;
        struct quota *quota; /* per-user limits; NULL: the config defaults */
        struct runner_hub *runner;
        char spool_dir[SBX_PATH_MAX + 16];

        pthread_mutex_t lock;
        pthread_cond_t idle;
        struct execution *live;
        size_t workers;
        bool closing;
};

static const char *const state_names[] = {"PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"};
static const char *const cause_names[] = {"",          "exited",         "timeout",           "cancelled",
                                          "oom",       "container_died", "daemon_restarted",  "error"};

const char *exec_state_to_string(enum exec_state s)
{
        return (unsigned)s < ELEMENTSOF(state_names) ? state_names[s] : "UNKNOWN";
}

int exec_state_from_string(const char *s, enum exec_state *ret)
{
        for (size_t i = 0; i < ELEMENTSOF(state_names); i++)
                if (s && strcasecmp(s, state_names[i]) == 0) {
                        *ret = (enum exec_state)i;
                        return 0;
                }
        return -EINVAL;
}

const char *exec_cause_to_string(enum exec_cause c)
{
        return (unsigned)c < ELEMENTSOF(cause_names) ? cause_names[c] : "";
}

static enum exec_cause cause_from_string(const char *s)
{
        for (size_t i = 0; i < ELEMENTSOF(cause_names); i++)
                if (s && strcmp(s, cause_names[i]) == 0)
                        return (enum exec_cause)i;
        return EXEC_CAUSE_NONE;
}

bool exec_state_is_final(enum exec_state s) { return s >= EXEC_COMPLETED; }

int exec_language_from_string(const char *s, enum exec_language *ret)
{
        static const struct {
                const char *name;
                enum exec_language lang;
        } langs[] = {{"python", EXEC_LANG_PYTHON}, {"python3", EXEC_LANG_PYTHON}, {"node", EXEC_LANG_NODE},
                     {"javascript", EXEC_LANG_NODE}, {"bash", EXEC_LANG_BASH}};
        for (size_t i = 0; i < ELEMENTSOF(langs); i++)
                if (s && strcmp(s, langs[i].name) == 0) {
                        *ret = langs[i].lang;
                        return 0;
                }
        return -EINVAL;
}

/* ---- validation ---- */

/* Lexically resolve workdir under /workspace; refuse anything that leaves
 * it. (Symlinks inside the container cannot widen what the tenant may do:
 * the command runs with the container's rights wherever it starts.) */
int exec_workdir_resolve(const char *in, char out[1024], struct sbx_error *err)
{
        char buf[2048], *save = NULL, *part;
        size_t len = 0;

        if (!in || !*in)
                in = CONTAINER_WORKSPACE;
        if (snprintf(buf, sizeof(buf), "%s%s", in[0] == '/' ? "" : CONTAINER_WORKSPACE "/", in) >= 1024)
                return sbx_error_set(err, -EINVAL, 0, "workdir is too long");
        out[0] = '\0';
        for (part = strtok_r(buf, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
                if (strcmp(part, ".") == 0)
                        continue;
                if (strcmp(part, "..") == 0) {
                        char *slash = strrchr(out, '/');
                        if (slash)
                                *slash = '\0';
                        len = strlen(out);
                        continue;
                }
                for (const char *c = part; *c; c++)
                        if ((unsigned char)*c < 0x20)
                                return sbx_error_set(err, -EINVAL, 0, "workdir contains control characters");
                len += (size_t)snprintf(out + len, 1024 - len, "/%s", part);
        }
        if (strcmp(out, CONTAINER_WORKSPACE) != 0 && strncmp(out, CONTAINER_WORKSPACE "/", strlen(CONTAINER_WORKSPACE) + 1) != 0)
                return sbx_error_set(err, -EINVAL, 0, "workdir '%s' is outside /workspace", in);
        return 0;
}

static int check_env(const char *const *env, size_t *ret_n, struct sbx_error *err)
{
        size_t n = 0, bytes = 0;

        for (; env && env[n]; n++) {
                const char *kv = env[n], *eq = strchr(kv, '=');
                if (n >= MAX_ENV)
                        return sbx_error_set(err, -E2BIG, 0, "too many environment variables (max %d)", MAX_ENV);
                if (!eq || eq == kv || !((kv[0] >= 'A' && kv[0] <= 'Z') || (kv[0] >= 'a' && kv[0] <= 'z') || kv[0] == '_'))
                        return sbx_error_set(err, -EINVAL, 0, "environment entry %zu is not NAME=value", n);
                for (const char *c = kv; c < eq; c++)
                        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
                                return sbx_error_set(err, -EINVAL, 0, "environment name '%.*s' is not [A-Za-z_][A-Za-z0-9_]*",
                                                     (int)(eq - kv), kv);
                if (strncmp(kv, "SBX_", 4) == 0)
                        return sbx_error_set(err, -EINVAL, 0, "environment names starting with SBX_ are reserved");
                bytes += strlen(kv) + 1;
                if (bytes > MAX_ENV_BYTES)
                        return sbx_error_set(err, -E2BIG, 0, "environment is larger than %d bytes", MAX_ENV_BYTES);
        }
        *ret_n = n;
        return 0;
}

/* ---- executions ---- */

static void strv_free(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

static void execution_free(struct execution *x)
{
        if (!x)
                return;
        strv_free(x->argv);
        strv_free(x->env);
        free(x->stdin_data);
        free(x->code);
        for (int i = 0; i < 2; i++)
                if (x->spool_fd[i] >= 0)
                        close(x->spool_fd[i]);
        docker_stream_free(x->stream);
        pthread_mutex_destroy(&x->lock);
        pthread_cond_destroy(&x->cond);
        pthread_mutex_destroy(&x->stdin_lock);
        free(x);
}

static void unref(struct execution *x)
{
        struct exec_engine *e;
        bool last;

        if (!x)
                return;
        e = x->e;
        pthread_mutex_lock(&e->lock);
        last = --x->refs == 0;
        pthread_mutex_unlock(&e->lock);
        if (last)
                execution_free(x);
}

static void unrefp(struct execution **x) { unref(*x); }

static struct execution *find_ref(struct exec_engine *e, const char *user, const char *id)
{
        struct execution *x;

        pthread_mutex_lock(&e->lock);
        for (x = e->live; x; x = x->next)
                if (strcmp(x->id, id) == 0 && (!user || strcmp(x->user, user) == 0)) {
                        x->refs++;
                        break;
                }
        pthread_mutex_unlock(&e->lock);
        return x;
}

static void persist(struct execution *x)
{
        struct store_execution row = {0};
        int r;

        pthread_mutex_lock(&x->lock);
        sbx_strlcpy(row.id, x->id, sizeof(row.id));
        sbx_strlcpy(row.user_id, x->user, sizeof(row.user_id));
        sbx_strlcpy(row.session_id, x->session, sizeof(row.session_id));
        sbx_strlcpy(row.container_id, x->container_id, sizeof(row.container_id));
        sbx_strlcpy(row.kind, x->kind, sizeof(row.kind));
        sbx_strlcpy(row.command_preview, x->preview, sizeof(row.command_preview));
        sbx_strlcpy(row.command_sha256, x->sha, sizeof(row.command_sha256));
        sbx_strlcpy(row.state, exec_state_to_string(x->state), sizeof(row.state));
        sbx_strlcpy(row.cause, exec_cause_to_string(x->cause), sizeof(row.cause));
        sbx_strlcpy(row.error, x->error, sizeof(row.error));
        sbx_strlcpy(row.spool_path, x->spool[0], sizeof(row.spool_path));
        row.exit_code = x->exit_code;
        row.stdout_bytes = (int64_t)x->total[0];
        row.stderr_bytes = (int64_t)x->total[1];
        row.stdout_spooled = (int64_t)x->spooled[0];
        row.stderr_spooled = (int64_t)x->spooled[1];
        row.truncated = x->total[0] > x->spooled[0] || x->total[1] > x->spooled[1];
        row.created_at = x->created_at;
        row.duration_ms = x->duration_ms;
        row.finished_at = exec_state_is_final(x->state) ? x->created_at + x->duration_ms : 0;
        sbx_strlcpy(row.via, x->via, sizeof(row.via));
        row.cpu_user_ms = x->have_usage ? (int64_t)x->usage.cpu_user_ms : -1;
        row.cpu_system_ms = x->have_usage ? (int64_t)x->usage.cpu_system_ms : -1;
        row.max_rss_kb = x->have_usage ? (int64_t)x->usage.max_rss_kb : -1;
        sbx_strlcpy(row.image, x->image, sizeof(row.image));
        sbx_strlcpy(row.runtime, x->runtime, sizeof(row.runtime));
        sbx_strlcpy(row.runner_version, x->runner_version, sizeof(row.runner_version));
        row.started_at = x->started_wall;
        row.runner_tag = x->runner_tag;
        row.deadline_at = x->deadline_wall;
        row.spool_budget = (int64_t)x->spool_budget;
        sbx_strlcpy(row.actor, x->actor, sizeof(row.actor));
        row.interactive = x->interactive;
        row.tty = x->tty;
        pthread_mutex_unlock(&x->lock);
        r = store_exec_put(x->e->store, &row);
        if (r < 0)
                log_ctx(LOG_LEVEL_ERROR, x->user, x->session, NULL, "cannot record execution %s: %s", x->id,
                        strerror(-r));
}

static void set_state(struct execution *x, enum exec_state st, enum exec_cause cause)
{
        pthread_mutex_lock(&x->lock);
        x->state = st;
        x->cause = cause;
        if (exec_state_is_final(st)) /* counted before anyone can see it final */
                metrics_exec_finished(st, cause, x->duration_ms);
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

static void on_chunk(struct execution *x, int k, const char *buf, size_t n)
{
        uint64_t cap = (uint64_t)x->e->cfg->exec_output_cap_bytes;

        pthread_mutex_lock(&x->lock);
        x->total[k] += n;
        if (x->spool_budget < x->spooled[0] + x->spooled[1] + cap - x->spooled[k]) /* the session's quota is nearer */
                cap = x->spooled[k] + (x->spool_budget > x->spooled[0] + x->spooled[1]
                                               ? x->spool_budget - x->spooled[0] - x->spooled[1]
                                               : 0);
        if (x->spooled[k] < cap && x->spool_fd[k] >= 0) {
                size_t keep = cap - x->spooled[k] < n ? (size_t)(cap - x->spooled[k]) : n;
                ssize_t w = pwrite(x->spool_fd[k], buf, keep, (off_t)x->spooled[k]);
                if (w > 0)
                        x->spooled[k] += (uint64_t)w;
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        if (x->on_output)
                x->on_output(x->id, k == 0 ? EXEC_STDOUT : EXEC_STDERR, buf, n, x->userdata);
}

/* Signal the execution's whole tree; returns how many were signalled. */
static int kill_tree(struct execution *x, const char *sig)
{
        const char *argv[] = {"sh", "-c", kill_script, "sbx-kill", x->id, sig, NULL};
        _cleanup_free_ char *out = NULL;
        int code = -1, r;

        r = exec_internal(x->e, x->container_id, argv, NULL, 0, KILL_EXEC_MS, &code, &out, NULL, NULL);
        if (r < 0 || code != 0)
                return r < 0 ? r : -EIO;
        return out ? atoi(out) : 0;
}

static void kill_until_gone(struct execution *x)
{
        int64_t until = sbx_now_ms() + KILL_EXEC_MS;

        for (int i = 0; i < KILL_ROUNDS && sbx_now_ms() < until; i++)
                if (kill_tree(x, "KILL") <= 0)
                        return;
}

/* Write what the process takes of the stdin queue now, never waiting; close
 * stdin once the queue is written and EOF was asked for. Under stdin_lock.
 * True while bytes are still waiting for the process to read them. */
static bool stdin_pump_locked(struct execution *x)
{
        bool pending = false;

        while ((x->stream || x->rx) && !x->stdin_closed && x->stdin_off < x->stdin_len) {
                const char *p = (char *)x->stdin_data + x->stdin_off;
                size_t left = x->stdin_len - x->stdin_off;
                ssize_t n = x->rx ? runner_exec_write_stdin(x->rx, p, left)
                                  : docker_stream_write_some(x->stream, p, left);
                if (n == 0) {
                        pending = true;
                        break;
                }
                if (n < 0)
                        x->stdin_closed = true; /* it closed its stdin or is gone: the rest can never be read */
                else
                        x->stdin_off += (size_t)n;
        }
        if (!pending) {
                free(x->stdin_data);
                x->stdin_data = NULL;
                x->stdin_off = x->stdin_len = 0;
        }
        if (!pending && x->stdin_eof && (x->stream || x->rx) && !x->stdin_closed) {
                if (x->rx)
                        (void)runner_exec_close_stdin(x->rx);
                else
                        (void)docker_stream_close_write(x->stream);
                x->stdin_closed = true;
        }
        return pending;
}

static bool stdin_pump(struct execution *x)
{
        pthread_mutex_lock(&x->stdin_lock);
        bool pending = stdin_pump_locked(x);
        pthread_mutex_unlock(&x->stdin_lock);
        return pending;
}

/* Open both spool files (O_CLOEXEC, 0600, truncated). */
static int open_spools(struct execution *x)
{
        for (int k = 0; k < 2; k++) {
                if (x->spool_fd[k] >= 0)
                        continue; /* opened by a runner attempt that fell back */
                x->spool_fd[k] = open(x->spool[k], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (x->spool_fd[k] < 0)
                        return -errno;
        }
        return 0;
}

static void audit(struct execution *x)
{
        cJSON *d = cJSON_CreateObject();
        _cleanup_free_ char *preview = utf8_sanitize(x->preview, strlen(x->preview));
        char *json;

        pthread_mutex_lock(&x->lock);
        cJSON_AddStringToObject(d, "execution_id", x->id);
        cJSON_AddStringToObject(d, "kind", x->kind);
        cJSON_AddStringToObject(d, "preview", preview ? preview : "");
        cJSON_AddStringToObject(d, "sha256", x->sha);
        cJSON_AddStringToObject(d, "state", exec_state_to_string(x->state));
        cJSON_AddStringToObject(d, "cause", exec_cause_to_string(x->cause));
        if (x->exit_code >= 0)
                cJSON_AddNumberToObject(d, "exit_code", x->exit_code);
        else
                cJSON_AddNullToObject(d, "exit_code");
        cJSON_AddNumberToObject(d, "duration_ms", (double)x->duration_ms);
        cJSON_AddStringToObject(d, "container_id", x->container_id);
        pthread_mutex_unlock(&x->lock);
        json = cJSON_PrintUnformatted(d);
        (void)audit_record(x->e->store, x->actor[0] ? x->actor : "unknown", x->user, x->session, "exec", json);
        free(json);
        cJSON_Delete(d);
}

/* In the session's container: write the code file (run_code), create the exec. */
static int prepare(struct execution *x, char exec_id[65], struct sbx_error *err)
{
        struct exec_engine *e = x->e;
        struct docker_exec_spec spec = {0};
        int r;

        if (x->code) {
                const char *wargv[] = {"sh", "-c", write_script, "sbx-write", x->code_path, NULL};
                int code = -1;
                r = exec_internal(e, x->container_id, wargv, x->code, x->code_len, e->cfg->docker_timeout_ms, &code,
                                  NULL, NULL, err);
                if (r < 0)
                        return r;
                if (code != 0)
                        return sbx_error_set(err, -EIO, 0, "cannot write the code file in the container (exit %d)",
                                             code);
        }
        spec.cmd = (const char *const *)x->argv;
        spec.env = (const char *const *)x->env;
        spec.workdir = x->workdir;
        spec.attach_stdin = x->interactive || x->stdin_len > 0;
        return docker_exec_create(e->docker, x->container_id, &spec, exec_id, err);
}

static void read_cancel(struct execution *x, bool *ret_cancel, bool *ret_force)
{
        pthread_mutex_lock(&x->lock);
        *ret_cancel = x->cancel;
        *ret_force = x->force;
        pthread_mutex_unlock(&x->lock);
}

static bool read_detach(struct execution *x)
{
        pthread_mutex_lock(&x->lock);
        bool r = x->detach;
        pthread_mutex_unlock(&x->lock);
        return r;
}

/* How it ended, in order of precedence. */
static void set_final_state(struct execution *x, struct session *s, uint64_t oom_before, bool cancelled,
                            bool timed_out, bool container_died, bool sigkilled)
{
        if (cancelled)
                set_state(x, EXEC_CANCELLED, EXEC_CAUSE_CANCELLED);
        else if (timed_out)
                set_state(x, EXEC_TIMEOUT, EXEC_CAUSE_TIMEOUT);
        else if (container_died)
                set_state(x, EXEC_FAILED, EXEC_CAUSE_CONTAINER_DIED);
        else if (sigkilled) {
                /* SIGKILL we did not send: an OOM kill if the engine reported one meanwhile
                 * (an execution adopted after a restart has no count from before: s is NULL) */
                bool oom = false;
                for (int i = 0; s && i < 30 && !oom; i++) {
                        oom = session_oom_events(s) > oom_before;
                        if (!oom)
                                sbx_sleep_ms(10);
                }
                set_state(x, oom ? EXEC_FAILED : EXEC_COMPLETED, oom ? EXEC_CAUSE_OOM : EXEC_CAUSE_EXITED);
        } else
                set_state(x, EXEC_COMPLETED, EXEC_CAUSE_EXITED);
}

/* Where it runs: the session's image (by id) and the container runtime. */
static void provenance(struct execution *x)
{
        struct session_info info;

        if (session_get_info(x->e->sessions, x->user, x->session, &info) < 0)
                return;
        pthread_mutex_lock(&x->lock);
        sbx_strlcpy(x->image, info.image, sizeof(x->image));
        /* the session's container as Docker reports it; "" only before its first use: runc */
        sbx_strlcpy(x->runtime, info.runtime[0] ? info.runtime : "runc", sizeof(x->runtime));
        pthread_mutex_unlock(&x->lock);
        session_info_done(&info);
}

static void on_runner_output(void *ud, int stream, const void *data, size_t len)
{
        on_chunk(ud, stream, data, len);
}

static int runner_loop(struct execution *x, struct session *s, uint64_t oom_before, struct runner_exec *rx,
                       int64_t start, int64_t deadline, struct sbx_error *err);

/* The runner path: the session's runner starts the execution in its own
 * process group and session under a subreaper shim, so a signal reaches
 * its whole tree. -ENOTCONN when no runner is connected (the caller falls
 * back to docker exec); any other result is final and the state is set. */
static int run_via_runner(struct execution *x, struct session *s, uint64_t oom_before, struct sbx_error *err)
{
        struct exec_engine *e = x->e;
        struct runner_exec_spec spec = {
                .workdir = x->workdir,
                .code_path = x->code ? x->code_path : NULL,
                .code = x->code,
                .code_len = x->code_len,
                .argv = (const char *const *)x->argv,
                .env = (const char *const *)x->env + 1, /* no tree marker: the runner's shim is the tree */
                .stdin_pipe = x->interactive || x->stdin_len > 0,
                .tty = x->tty,
                .rows = x->rows,
                .cols = x->cols,
        };
        struct runner_exec *rx = NULL;
        int64_t start;
        int r;

        (void)runner_hub_adopt(e->runner, x->user, x->session); /* after a restart: listen again */
        if (!runner_hub_wait(e->runner, x->user, x->session, RUNNER_CONNECT_WAIT_MS))
                return -ENOTCONN;
        if (open_spools(x) < 0)
                return sbx_error_set(err, -EIO, 0, "cannot open the output spool: %m");
        r = runner_exec_start(e->runner, x->user, x->session, &spec, on_runner_output, x, &rx, err);
        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        (void)runner_hub_version(e->runner, x->user, x->session, x->runner_version, sizeof(x->runner_version));
        pthread_mutex_unlock(&x->lock);
        pthread_mutex_lock(&x->stdin_lock);
        x->rx = rx;
        x->stdin_sent = x->stdin_len;
        x->stdin_eof = !x->interactive && x->stdin_len > 0;
        pthread_mutex_unlock(&x->stdin_lock);
        start = sbx_now_ms();
        pthread_mutex_lock(&x->lock);
        sbx_strlcpy(x->via, "runner", sizeof(x->via));
        x->runner_tag = runner_exec_tag(rx);
        x->started_wall = sbx_wall_ms();
        x->deadline_wall = x->started_wall + (int64_t)x->timeout_s * 1000;
        pthread_mutex_unlock(&x->lock);

        set_state(x, EXEC_RUNNING, EXEC_CAUSE_NONE);
        persist(x); /* with the runner's tag: from now on it survives the daemon */
        return runner_loop(x, s, oom_before, rx, start, start + (int64_t)x->timeout_s * 1000, err);
}

/* Wait for an execution on the runner (new, or adopted after a restart;
 * start and deadline are monotonic ms): stdin, deadline and cancel, then
 * how it ended. -ESHUTDOWN when the engine stops first: the execution is
 * left to the runner, its row RUNNING for the next daemon. */
static int runner_loop(struct execution *x, struct session *s, uint64_t oom_before, struct runner_exec *rx,
                       int64_t start, int64_t deadline, struct sbx_error *err)
{
        const struct sbx_config *cfg = x->e->cfg;
        struct runner_exit ex = {0};
        int64_t kill_at = 0, give_up_at = 0;
        bool killing = false, hard = false, timed_out = false, cancelled = false, lost = false, detached = false;
        int r;

        for (;;) {
                int64_t now = sbx_now_ms();
                bool want_cancel, want_force, stdin_pending;
                struct sbx_error werr = {0};

                if (read_detach(x)) {
                        detached = true;
                        break;
                }
                read_cancel(x, &want_cancel, &want_force);
                if (!killing && (want_cancel || now >= deadline)) {
                        killing = true;
                        cancelled = want_cancel;
                        timed_out = !want_cancel;
                        hard = want_force;
                        (void)runner_exec_signal(rx, hard ? SIGKILL : SIGTERM);
                        kill_at = sbx_now_ms() + cfg->exec_kill_grace_ms;
                        give_up_at = kill_at + 5000;
                } else if (killing && !hard && (want_force || now >= kill_at)) {
                        hard = true;
                        (void)runner_exec_signal(rx, SIGKILL);
                } else if (killing && hard && now >= give_up_at) {
                        lost = true; /* the runner does not answer: treat it like a dead container */
                        break;
                }
                stdin_pending = !killing && stdin_pump(x);
                r = runner_exec_wait(rx, stdin_pending ? 10 : SLICE_MS, &ex, &werr);
                if (r == 0)
                        break;
                if (r == -ETIMEDOUT)
                        continue;
                if (r == -ECONNRESET) {
                        lost = true;
                        break;
                }
                /* the runner could not start it (no such workdir, fork failed, ...) */
                pthread_mutex_lock(&x->stdin_lock);
                x->rx = NULL;
                x->stdin_closed = true;
                pthread_mutex_unlock(&x->stdin_lock);
                runner_exec_free(rx);
                return sbx_error_set(err, r, 0, "%s", werr.msg);
        }

        pthread_mutex_lock(&x->stdin_lock);
        x->rx = NULL;
        x->stdin_closed = true;
        pthread_mutex_unlock(&x->stdin_lock);
        if (detached || lost)
                runner_exec_free(rx);
        else
                x->rx_done = rx; /* forgotten by the runner once its end is persisted */
        if (detached)
                return -ESHUTDOWN;

        pthread_mutex_lock(&x->lock);
        x->exit_code = lost ? -1 : ex.exit_code;
        x->have_usage = !lost;
        x->usage = ex;
        x->duration_ms = sbx_now_ms() - start;
        pthread_mutex_unlock(&x->lock);
        set_final_state(x, s, oom_before, cancelled, timed_out, lost, !lost && ex.signal == SIGKILL);
        return 0;
}

/* The end is persisted: the runner may drop the execution. */
static void forget_on_runner(struct execution *x)
{
        if (!x->rx_done)
                return;
        (void)runner_exec_forget(x->rx_done);
        runner_exec_free(x->rx_done);
        x->rx_done = NULL;
}

static void mark_finished(struct execution *x)
{
        pthread_mutex_lock(&x->lock);
        x->finished = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* The worker: get the session's container, start, pump output, enforce the
 * deadline and cancel, then classify how it ended. */
static void run(struct execution *x)
{
        struct exec_engine *e = x->e;
        const struct sbx_config *cfg = e->cfg;
        struct docker_exec_info info;
        struct session *s = NULL;
        struct sbx_error err = {0};
        char exec_id[65], buf[READ_CHUNK];
        int64_t start = sbx_now_ms(), deadline, kill_at = 0, give_up_at = 0, last_sweep = 0;
        uint64_t oom_before;
        bool killing = false, hard = false, timed_out = false, cancelled = false, container_died = false;
        int r;

        /* A container can vanish between the session check and the exec (the
         * privacy ratchet, an external kill): then check the session again, once. */
        for (int attempt = 0;; attempt++) {
                r = session_get_or_create(e->sessions, x->user, x->session, &s, &err);
                if (r < 0)
                        goto failed;
                session_container_id(s, x->container_id);
                oom_before = session_oom_events(s);
                provenance(x);
                r = run_via_runner(x, s, oom_before, &err);
                if (r == 0)
                        goto done;
                if (r == -ESHUTDOWN)
                        goto detached;
                if (r == -ENOTCONN && x->tty)
                        r = sbx_error_set(&err, -ENOTSUP, 0,
                                          "a terminal (tty) needs the session's runner, which is not connected; "
                                          "docker exec runs no terminal here");
                if (r != -ENOTCONN)
                        goto failed;
                r = prepare(x, exec_id, &err);
                if (r == 0 || attempt > 0 || (r != -ENOENT && r != -EBUSY))
                        break;
                session_release(s);
                s = NULL;
        }
        if (r == 0)
                r = open_spools(x) < 0 ? sbx_error_set(&err, -EIO, 0, "cannot open the output spool: %m") : 0;
        if (r == 0) {
                struct docker_stream *stream = NULL;
                r = docker_exec_attach(e->docker, exec_id, &stream, &err);
                pthread_mutex_lock(&x->stdin_lock);
                x->stream = stream;
                pthread_mutex_unlock(&x->stdin_lock);
        }
        if (r < 0)
                goto failed;

        start = sbx_now_ms();
        deadline = start + (int64_t)x->timeout_s * 1000;
        pthread_mutex_lock(&x->lock);
        sbx_strlcpy(x->via, "docker_exec", sizeof(x->via));
        pthread_mutex_unlock(&x->lock);
        set_state(x, EXEC_RUNNING, EXEC_CAUSE_NONE);
        persist(x);

        pthread_mutex_lock(&x->stdin_lock);
        x->stdin_sent = x->stdin_len;
        x->stdin_eof = !x->interactive && x->stdin_len > 0;
        pthread_mutex_unlock(&x->stdin_lock);

        for (;;) {
                enum docker_stream_kind kind;
                int64_t now = sbx_now_ms();
                ssize_t n;
                bool want_cancel, want_force, stdin_pending;

                read_cancel(x, &want_cancel, &want_force);

                if (!killing && (want_cancel || now >= deadline)) {
                        killing = true;
                        cancelled = want_cancel;
                        timed_out = !want_cancel;
                        hard = want_force;
                        (void)kill_tree(x, hard ? "KILL" : "TERM");
                        last_sweep = sbx_now_ms();
                        kill_at = last_sweep + cfg->exec_kill_grace_ms;
                        give_up_at = kill_at + 5000;
                } else if (killing && !hard && (want_force || now >= kill_at)) {
                        hard = true;
                        kill_until_gone(x);
                        last_sweep = sbx_now_ms();
                } else if (killing && hard) {
                        if (now >= give_up_at)
                                break; /* the stream did not close: stop waiting for it */
                        if (now - last_sweep >= 200) {
                                /* a process that did not exist yet at the last sweep
                                 * (the exec was still starting) is caught now */
                                kill_until_gone(x);
                                last_sweep = sbx_now_ms();
                        }
                }

                /* stdin goes in as the process takes it, between reads */
                stdin_pending = !killing && stdin_pump(x);
                n = docker_stream_read(x->stream, &kind, buf, sizeof(buf), stdin_pending ? 0 : SLICE_MS);
                if (n == -ETIMEDOUT && stdin_pending) {
                        (void)docker_stream_wait(x->stream, true, SLICE_MS);
                        continue;
                }
                if (n > 0) {
                        if (kind == DOCKER_STREAM_STDOUT || kind == DOCKER_STREAM_STDERR)
                                on_chunk(x, kind == DOCKER_STREAM_STDOUT ? 0 : 1, buf, (size_t)n);
                        continue;
                }
                if (n == 0)
                        break;
                if (n != -ETIMEDOUT) {
                        container_died = true; /* the connection broke under us */
                        break;
                }
        }

        if (killing)
                kill_until_gone(x); /* no straggler survives: setsid'd and backgrounded ones included */
        pthread_mutex_lock(&x->stdin_lock);
        docker_stream_free(x->stream);
        x->stream = NULL;
        x->stdin_closed = true;
        pthread_mutex_unlock(&x->stdin_lock);

        for (int i = 0; i < 20; i++) {
                r = docker_exec_inspect(e->docker, exec_id, &info, NULL);
                if (r < 0 || !info.running)
                        break;
                sbx_sleep_ms(10);
        }
        int exit_code = r == 0 && !info.running ? info.exit_code : -1;
        pthread_mutex_lock(&x->lock);
        x->exit_code = exit_code;
        pthread_mutex_unlock(&x->lock);
        if (!killing && (r < 0 || exit_code < 0 || exit_code >= 128)) {
                /* Killed by a signal: was it the whole container? Docker may still
                 * report it running for a moment, but it can no longer run anything. */
                struct docker_container_info ci;
                const char *probe[] = {"true", NULL};
                int code = -1;
                if (docker_container_inspect(e->docker, x->container_id, &ci, NULL) < 0 || !ci.running ||
                    exec_internal(e, x->container_id, probe, NULL, 0, 5000, &code, NULL, NULL, NULL) < 0 || code != 0)
                        container_died = true;
        }

        pthread_mutex_lock(&x->lock);
        x->duration_ms = sbx_now_ms() - start;
        pthread_mutex_unlock(&x->lock);
        set_final_state(x, s, oom_before, cancelled, timed_out, container_died, exit_code == 137);
        if (x->code) {
                const char *rargv[] = {"rm", "-f", x->code_path, NULL};
                (void)exec_internal(e, x->container_id, rargv, NULL, 0, 5000, NULL, NULL, NULL, NULL);
        }
        goto done;

failed:
        pthread_mutex_lock(&x->lock);
        x->start_error = r;
        snprintf(x->error, sizeof(x->error), "%s", err.msg[0] ? err.msg : strerror(-r));
        x->duration_ms = sbx_now_ms() - start;
        pthread_mutex_unlock(&x->lock);
        set_state(x, EXEC_FAILED, EXEC_CAUSE_ERROR);
        log_ctx(LOG_LEVEL_WARN, x->user, x->session, x->container_id[0] ? x->container_id : NULL,
                "execution %s could not run: %s", x->id, x->error);
done:
        persist(x);
        audit(x);
        forget_on_runner(x);
        session_release(s);
        mark_finished(x);
        return;
detached:
        persist(x); /* RUNNING, with what it produced so far: the next daemon adopts it */
        session_release(s);
        mark_finished(x);
}

/* ---- durable executions: re-adoption after a restart ---- */

static void *worker_main(void *ud);

/* A live execution from a row the runner may still run. No worker yet. */
static int adopt_register(struct exec_engine *e, const struct store_execution *row)
{
        struct execution *x = calloc(1, sizeof(*x));

        if (!x)
                return -ENOMEM;
        x->e = e;
        x->refs = 1; /* the registry's */
        x->spool_fd[0] = x->spool_fd[1] = -1;
        pthread_mutex_init(&x->lock, NULL);
        pthread_cond_init(&x->cond, NULL);
        pthread_mutex_init(&x->stdin_lock, NULL);
        sbx_strlcpy(x->id, row->id, sizeof(x->id));
        sbx_strlcpy(x->user, row->user_id, sizeof(x->user));
        sbx_strlcpy(x->session, row->session_id, sizeof(x->session));
        sbx_strlcpy(x->kind, row->kind, sizeof(x->kind));
        sbx_strlcpy(x->actor, row->actor[0] ? row->actor : "unknown", sizeof(x->actor));
        sbx_strlcpy(x->preview, row->command_preview, sizeof(x->preview));
        sbx_strlcpy(x->sha, row->command_sha256, sizeof(x->sha));
        sbx_strlcpy(x->container_id, row->container_id, sizeof(x->container_id));
        sbx_strlcpy(x->via, "runner", sizeof(x->via));
        sbx_strlcpy(x->image, row->image, sizeof(x->image));
        sbx_strlcpy(x->runtime, row->runtime, sizeof(x->runtime));
        sbx_strlcpy(x->runner_version, row->runner_version, sizeof(x->runner_version));
        for (int k = 0; k < 2; k++)
                snprintf(x->spool[k], sizeof(x->spool[k]), "%s/%s.%s", e->spool_dir, x->id, k ? "stderr" : "stdout");
        x->created_at = row->created_at;
        x->started_wall = row->started_at > 0 ? row->started_at : row->created_at;
        x->deadline_wall = row->deadline_at;
        x->spool_budget = row->spool_budget > 0 ? (uint64_t)row->spool_budget : 0;
        x->total[0] = (uint64_t)row->stdout_bytes;
        x->total[1] = (uint64_t)row->stderr_bytes;
        x->spooled[0] = (uint64_t)row->stdout_spooled; /* until its worker reads the files */
        x->spooled[1] = (uint64_t)row->stderr_spooled;
        x->interactive = row->interactive;
        x->tty = row->tty;
        x->runner_tag = row->runner_tag;
        x->exit_code = -1;
        x->state = EXEC_RUNNING;
        x->adopting = true;
        runner_hub_expect(e->runner, x->user, x->session, x->runner_tag);
        pthread_mutex_lock(&e->lock);
        x->next = e->live;
        e->live = x;
        pthread_mutex_unlock(&e->lock);
        return 0;
}

/* The spools as they were left: output goes on after their last byte.
 * have[k]: the bytes of each stream the daemon had (kept or counted past
 * the cap), which the files show when the row lags behind them. */
static int open_spools_append(struct execution *x, uint64_t have[2])
{
        for (int k = 0; k < 2; k++) {
                struct stat st;
                x->spool_fd[k] = open(x->spool[k], O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (x->spool_fd[k] < 0 || fstat(x->spool_fd[k], &st) < 0)
                        return -errno;
                x->spooled[k] = (uint64_t)st.st_size;
                have[k] = x->total[k] > x->spooled[k] ? x->total[k] : x->spooled[k];
        }
        return 0;
}

/* Is the container the execution ran in still the session's, and running? */
static bool adopt_container_alive(struct execution *x)
{
        struct session_info info;
        bool ok;

        if (session_get_info(x->e->sessions, x->user, x->session, &info) < 0)
                return false;
        ok = info.state == SESSION_RUNNING && strcmp(info.container_id, x->container_id) == 0;
        session_info_done(&info);
        return ok;
}

/* The worker of an execution adopted after a restart. */
static void run_adopted(struct execution *x)
{
        struct exec_engine *e = x->e;
        struct runner_exec *rx = NULL;
        struct sbx_error err = {0};
        uint64_t have[2] = {0, 0}, from[2];
        int64_t until = sbx_now_ms() + ADOPT_WAIT_MS, now_wall, now;
        char why[300] = "";
        int r;

        pthread_mutex_lock(&x->lock);
        r = open_spools_append(x, have);
        pthread_mutex_unlock(&x->lock);
        if (r < 0)
                snprintf(why, sizeof(why), "its output spool cannot be opened: %s", strerror(-r));
        while (!why[0]) {
                if (read_detach(x)) {
                        mark_finished(x); /* still RUNNING for the next daemon */
                        return;
                }
                if (!adopt_container_alive(x)) {
                        snprintf(why, sizeof(why), "its container stopped while the daemon was away");
                        break;
                }
                r = runner_exec_adopt(e->runner, x->user, x->session, x->runner_tag, have, on_runner_output, x, 250,
                                      &rx, from, &err);
                if (r == 0)
                        break;
                if (r != -ETIMEDOUT)
                        snprintf(why, sizeof(why), "%s", err.msg);
                else if (sbx_now_ms() >= until)
                        snprintf(why, sizeof(why), "its runner did not come back within %d s", ADOPT_WAIT_MS / 1000);
        }
        if (why[0]) {
                runner_hub_unexpect(e->runner, x->user, x->session, x->runner_tag);
                pthread_mutex_lock(&x->lock);
                snprintf(x->error, sizeof(x->error), "the daemon restarted while it ran and %s", why);
                x->duration_ms = sbx_wall_ms() - x->started_wall;
                x->state = EXEC_FAILED; /* recorded before a waiter wakes: a list by state agrees with it */
                x->cause = EXEC_CAUSE_DAEMON_RESTARTED;
                pthread_mutex_unlock(&x->lock);
                persist(x);
                set_state(x, EXEC_FAILED, EXEC_CAUSE_DAEMON_RESTARTED);
                log_ctx(LOG_LEVEL_WARN, x->user, x->session, x->container_id, "execution %s: %s", x->id, x->error);
                goto done;
        }
        pthread_mutex_lock(&x->lock);
        x->total[0] = from[0]; /* past what the spool holds: bytes counted past the cap */
        x->total[1] = from[1];
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        pthread_mutex_lock(&x->stdin_lock);
        x->rx = rx;
        x->stdin_eof = !x->interactive; /* its stdin queue went with the daemon that had it */
        pthread_mutex_unlock(&x->stdin_lock);
        log_ctx(LOG_LEVEL_INFO, x->user, x->session, x->container_id,
                "execution %s adopted from the runner at stdout %" PRIu64 ", stderr %" PRIu64, x->id, from[0], from[1]);

        now_wall = sbx_wall_ms();
        now = sbx_now_ms();
        r = runner_loop(x, NULL, 0, rx, now - (now_wall - x->started_wall), now + (x->deadline_wall - now_wall), &err);
        if (r == -ESHUTDOWN) {
                persist(x);
                mark_finished(x);
                return;
        }
        if (r < 0) {
                pthread_mutex_lock(&x->lock);
                snprintf(x->error, sizeof(x->error), "the daemon restarted while it ran and %s", err.msg);
                x->duration_ms = sbx_wall_ms() - x->started_wall;
                pthread_mutex_unlock(&x->lock);
                set_state(x, EXEC_FAILED, EXEC_CAUSE_DAEMON_RESTARTED);
        }
done:
        persist(x);
        audit(x);
        forget_on_runner(x);
        mark_finished(x);
}

void exec_engine_adopt(struct exec_engine *e)
{
        for (;;) {
                struct execution *x = NULL;
                pthread_attr_t attr;
                pthread_t t;
                int r;

                pthread_mutex_lock(&e->lock);
                for (struct execution *y = e->live; y && !x; y = y->next)
                        if (y->adopting && !y->has_worker)
                                x = y;
                if (x) {
                        x->has_worker = true;
                        x->refs++; /* the worker's */
                        e->workers++;
                }
                pthread_mutex_unlock(&e->lock);
                if (!x)
                        return;
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = -pthread_create(&t, &attr, worker_main, x);
                pthread_attr_destroy(&attr);
                if (r < 0) {
                        pthread_mutex_lock(&e->lock);
                        x->refs--;
                        e->workers--;
                        pthread_mutex_unlock(&e->lock);
                        log_error("cannot start a worker for execution %s: %s", x->id, strerror(-r));
                }
        }
}

static void *worker_main(void *ud)
{
        struct execution *x = ud;
        struct exec_engine *e = x->e;

        pthread_setname_np(pthread_self(), "sbx-exec");
        if (x->adopting)
                run_adopted(x);
        else
                run(x);

        pthread_mutex_lock(&e->lock);
        for (struct execution **pp = &e->live; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                        *pp = x->next;
                        x->refs--;
                        break;
                }
        e->workers--;
        pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->lock);
        /* wake long-polls that now have to read from the store */
        pthread_mutex_lock(&x->lock);
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        unref(x);
        return NULL;
}

/* ---- engine ---- */

int exec_engine_new(const struct sbx_config *cfg, struct docker *d, struct store *st, struct session_manager *sm,
                    struct exec_engine **ret, struct sbx_error *err)
{
        struct exec_engine *e = calloc(1, sizeof(*e));

        if (!e)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        e->cfg = cfg;
        e->docker = d;
        e->store = st;
        e->sessions = sm;
        snprintf(e->spool_dir, sizeof(e->spool_dir), "%s/executions", cfg->data_dir);
        if (mkdir(e->spool_dir, 0700) < 0 && errno != EEXIST) {
                int r = -errno;
                free(e);
                return sbx_error_set(err, r, 0, "cannot create %s: %s", cfg->data_dir, strerror(-r));
        }
        pthread_mutex_init(&e->lock, NULL);
        pthread_cond_init(&e->idle, NULL);
        *ret = e;
        return 0;
}

void exec_engine_set_runner(struct exec_engine *e, struct runner_hub *h) { e->runner = h; }

int exec_engine_recover(struct exec_engine *e, size_t *ret_failed)
{
        const char *cause = exec_cause_to_string(EXEC_CAUSE_DAEMON_RESTARTED);
        _cleanup_free_ struct store_execution *rows = NULL;
        size_t n = 0, n_rows = 0, adopted = 0;
        int r;

        if (!e->runner) /* nothing can hold an execution across the restart */
                r = store_exec_fail_unfinished(e->store, cause, "the daemon restarted while it ran", sbx_wall_ms(), &n);
        else
                r = store_exec_fail_unadoptable(e->store, cause, "the daemon restarted while it ran (not on the runner)",
                                                sbx_wall_ms(), &n);
        if (r == 0 && n > 0)
                log_info("%zu executions were running when the daemon stopped: marked FAILED (daemon_restarted)", n);
        if (r == 0 && e->runner && store_exec_list_adoptable(e->store, &rows, &n_rows) == 0)
                for (size_t i = 0; i < n_rows; i++)
                        if (adopt_register(e, &rows[i]) == 0)
                                adopted++;
        if (adopted)
                log_info("%zu executions were running on their runners when the daemon stopped: adopting them",
                         adopted);
        if (ret_failed)
                *ret_failed = n;
        return r;
}

void exec_set_quota(struct exec_engine *e, struct quota *q)
{
        pthread_mutex_lock(&e->lock);
        e->quota = q;
        pthread_mutex_unlock(&e->lock);
}

void exec_engine_free(struct exec_engine *e)
{
        if (!e)
                return;
        pthread_mutex_lock(&e->lock);
        e->closing = true;
        for (struct execution *x = e->live; x; x = x->next) {
                pthread_mutex_lock(&x->lock);
                x->cancel = true;
                x->force = true;
                x->detach = true; /* on the runner it runs on: the next daemon adopts it */
                pthread_mutex_unlock(&x->lock);
        }
        while (e->workers > 0)
                pthread_cond_wait(&e->idle, &e->lock);
        /* registered for adoption, never started (exec_engine_adopt not called) */
        while (e->live) {
                struct execution *x = e->live;
                e->live = x->next;
                pthread_mutex_unlock(&e->lock);
                unref(x);
                pthread_mutex_lock(&e->lock);
        }
        pthread_mutex_unlock(&e->lock);
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->idle);
        free(e);
}

/* An execution in e->live whose state is final is only being recorded:
 * it no longer counts against any cap. Under e->lock. */
static bool holds_slot(struct execution *x)
{
        pthread_mutex_lock(&x->lock);
        bool r = !exec_state_is_final(x->state);
        pthread_mutex_unlock(&x->lock);
        return r;
}

size_t exec_running_count(struct exec_engine *e, const char *user, const char *session)
{
        size_t n = 0;
        pthread_mutex_lock(&e->lock);
        for (struct execution *x = e->live; x; x = x->next)
                if ((!user || strcmp(user, x->user) == 0) && (!session || strcmp(session, x->session) == 0) &&
                    holds_slot(x))
                        n++;
        pthread_mutex_unlock(&e->lock);
        return n;
}

static char **strv_dup(const char *const *v, size_t extra_front, size_t *ret_n)
{
        size_t n = 0;
        char **out;

        while (v && v[n])
                n++;
        out = calloc(n + extra_front + 1, sizeof(char *));
        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i++)
                if (!(out[extra_front + i] = strdup(v[i]))) {
                        strv_free(out);
                        return NULL;
                }
        if (ret_n)
                *ret_n = n + extra_front;
        return out;
}

static int build(struct exec_engine *e, const struct exec_request *req, struct execution **ret, struct sbx_error *err)
{
        const struct sbx_config *cfg = e->cfg;
        _cleanup_(unrefp) struct execution *x = NULL;
        const char *text;
        size_t text_len, n_env;
        int r;

        r = session_key_check(req->user, req->session, err);
        if (r < 0)
                return r;
        if (req->language == EXEC_LANG_NONE) {
                if (!req->command || !*req->command)
                        return sbx_error_set(err, -EINVAL, 0, "command is empty");
                text = req->command;
                text_len = strlen(text);
        } else {
                if (!req->code)
                        return sbx_error_set(err, -EINVAL, 0, "code is missing");
                text = req->code;
                text_len = req->code_len ? req->code_len : strlen(req->code);
        }
        if ((int64_t)text_len > cfg->max_command_bytes)
                return sbx_error_set(err, -E2BIG, 0, "%s is %zu bytes; the limit is %" PRId64,
                                     req->language ? "code" : "command", text_len, cfg->max_command_bytes);
        if ((int64_t)req->stdin_len > cfg->max_stdin_bytes)
                return sbx_error_set(err, -E2BIG, 0, "stdin is %zu bytes; the limit is %" PRId64, req->stdin_len,
                                     cfg->max_stdin_bytes);
        if (req->timeout_s < 0 || req->timeout_s > cfg->exec_timeout_max_s)
                return sbx_error_set(err, -EINVAL, 0, "timeout must be between 1 and %d seconds",
                                     cfg->exec_timeout_max_s);
        r = check_env(req->env, &n_env, err);
        if (r < 0)
                return r;

        x = calloc(1, sizeof(*x));
        if (!x)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        x->e = e;
        x->refs = 1;
        x->spool_fd[0] = x->spool_fd[1] = -1;
        pthread_mutex_init(&x->lock, NULL);
        pthread_cond_init(&x->cond, NULL);
        pthread_mutex_init(&x->stdin_lock, NULL);
        r = exec_workdir_resolve(req->workdir, x->workdir, err);
        if (r < 0)
                return r;
        (void)sbx_uuid(x->id);
        sbx_strlcpy(x->user, req->user, sizeof(x->user));
        sbx_strlcpy(x->session, req->session, sizeof(x->session));
        sbx_strlcpy(x->actor, req->actor, sizeof(x->actor));
        x->timeout_s = req->timeout_s > 0 ? req->timeout_s : cfg->exec_timeout_default_s;
        x->interactive = req->interactive || req->tty; /* a terminal's input stays open */
        x->tty = req->tty;
        x->rows = req->rows ? req->rows : 24;
        x->cols = req->cols ? req->cols : 80;
        if (x->tty && (x->rows < 1 || x->rows > RP_TTY_MAX_ROWS || x->cols < 1 || x->cols > RP_TTY_MAX_COLS))
                return sbx_error_set(err, -EINVAL, 0, "a terminal has 1..%d rows and 1..%d columns", RP_TTY_MAX_ROWS,
                                     RP_TTY_MAX_COLS);
        x->on_output = req->on_output;
        x->userdata = req->userdata;
        x->created_at = sbx_wall_ms();
        x->exit_code = -1;
        x->state = EXEC_PENDING;
        sha256_hex(text, text_len, x->sha);
        memcpy(x->preview, text, text_len < sizeof(x->preview) - 1 ? text_len : sizeof(x->preview) - 1);
        for (char *p = x->preview; *p; p++)
                if (*p == '\n' || *p == '\r' || *p == '\t')
                        *p = ' ';
        for (int k = 0; k < 2; k++)
                snprintf(x->spool[k], sizeof(x->spool[k]), "%s/%s.%s", e->spool_dir, x->id, k ? "stderr" : "stdout");

        /* The environment: the caller's entries plus the tree marker. */
        x->env = strv_dup(req->env, 1, NULL);
        if (!x->env || asprintf(&x->env[0], "SBX_EXEC_ID=%s", x->id) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        if (req->language == EXEC_LANG_NONE) {
                const char *argv[] = {"sh", "-c", req->command, NULL};
                sbx_strlcpy(x->kind, "exec", sizeof(x->kind));
                x->argv = strv_dup(argv, 0, NULL);
        } else {
                /* The code travels as data: written to a file the daemon names,
                 * then given to the interpreter as a path. */
                static const char *const interp[] = {[EXEC_LANG_PYTHON] = "python3", [EXEC_LANG_NODE] = "node",
                                                     [EXEC_LANG_BASH] = "bash"};
                static const char *const ext[] = {[EXEC_LANG_PYTHON] = "py", [EXEC_LANG_NODE] = "js",
                                                  [EXEC_LANG_BASH] = "sh"};
                if ((unsigned)req->language >= ELEMENTSOF(interp) || !interp[req->language])
                        return sbx_error_set(err, -EINVAL, 0, "unsupported language");
                snprintf(x->code_path, sizeof(x->code_path), "/tmp/sbx-code-%s.%s", x->id, ext[req->language]);
                const char *argv[] = {interp[req->language], x->code_path, NULL};
                snprintf(x->kind, sizeof(x->kind), "%s", interp[req->language]);
                x->argv = strv_dup(argv, 0, NULL);
                x->code = malloc(text_len ? text_len : 1);
                if (x->code)
                        memcpy(x->code, text, text_len);
                x->code_len = text_len;
                if (!x->code)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        if (!x->argv)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (req->stdin_len > 0) {
                x->stdin_data = malloc(req->stdin_len);
                if (!x->stdin_data)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                memcpy(x->stdin_data, req->stdin_data, req->stdin_len);
                x->stdin_len = req->stdin_len;
        }
        *ret = TAKE_PTR(x);
        return 0;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* What x would join, counted over the executions holding a slot. Under
 * e->lock. -ENOMEM only if the distinct users cannot be counted. */
static int count_load(struct exec_engine *e, const struct execution *x, struct quota_exec_load *ret)
{
        _cleanup_free_ const char **others = NULL;
        size_t n = 0, cap = 0;

        *ret = (struct quota_exec_load){0};
        for (struct execution *y = e->live; y; y = y->next) {
                if (!holds_slot(y))
                        continue;
                ret->global++;
                if (strcmp(y->user, x->user) != 0) {
                        if (n == cap) {
                                const char **p = realloc(others, (cap = cap ? 2 * cap : 16) * sizeof(*p));
                                if (!p)
                                        return -ENOMEM;
                                others = p;
                        }
                        others[n++] = y->user;
                        continue;
                }
                ret->user++;
                if (strcmp(y->session, x->session) == 0)
                        ret->session++;
        }
        if (n > 0) {
                qsort(others, n, sizeof(*others), cmp_str);
                ret->other_users = 1;
                for (size_t i = 1; i < n; i++)
                        if (strcmp(others[i], others[i - 1]) != 0)
                                ret->other_users++;
        }
        return 0;
}

/* The session's spool quota: room for one more execution's full output
 * (both streams at exec_output_cap) is made by removing the spools of the
 * session's oldest ended executions, like a log ring. Returns the bytes the
 * ended executions keep afterwards. No lock held: store and file I/O. */
static int64_t spool_make_room(struct exec_engine *e, const char *user, const char *session, int64_t limit,
                               int64_t want)
{
        int64_t kept = 0;

        for (int i = 0; i < 10000; i++) { /* bounded: each round clears one spool */
                char oldest[37], path[SBX_PATH_MAX + 64];

                if (store_quota_spool_usage(e->store, user, session, &kept, oldest) < 0)
                        return kept;
                if (kept <= limit - want || !oldest[0])
                        return kept;
                for (int k = 0; k < 2; k++) {
                        snprintf(path, sizeof(path), "%s/%s.%s", e->spool_dir, oldest, k ? "stderr" : "stdout");
                        (void)unlink(path);
                }
                if (store_exec_clear_spool(e->store, oldest) < 0)
                        return kept;
                log_ctx(LOG_LEVEL_INFO, user, session, NULL,
                        "output of execution %s removed: the session's spools reached max_spool_per_session", oldest);
        }
        return kept;
}

/* What the session's live executions may still spool. Under e->lock. */
static uint64_t spool_live(struct exec_engine *e, const struct execution *x)
{
        uint64_t sum = 0;
        for (struct execution *y = e->live; y; y = y->next) {
                if (strcmp(y->user, x->user) != 0 || strcmp(y->session, x->session) != 0)
                        continue;
                pthread_mutex_lock(&y->lock);
                /* one that ended counts what it kept (its row may not be final yet) */
                sum += exec_state_is_final(y->state) ? y->spooled[0] + y->spooled[1] : y->spool_budget;
                pthread_mutex_unlock(&y->lock);
        }
        return sum;
}

/* Register and start; with ret_x, also hand back a reference. */
static int start_internal(struct exec_engine *e, const struct exec_request *req, char ret_id[37],
                          struct execution **ret_x, struct sbx_error *err)
{
        struct execution *x = NULL;
        struct quota_limits lim;
        struct quota_exec_load load;
        int64_t want, kept;
        uint64_t live;
        pthread_attr_t attr;
        pthread_t t;
        int r;

        r = build(e, req, &x, err);
        if (r < 0)
                return r;
        r = wsquota_admit(e->cfg, x->user, x->session, err); /* measure mode: a scan, outside the lock */
        if (r < 0) {
                unref(x);
                return r;
        }

        pthread_mutex_lock(&e->lock);
        quota_limits_get(e->quota, e->cfg, x->user, &lim); /* q->lock is a leaf */
        pthread_mutex_unlock(&e->lock);
        want = 2 * e->cfg->exec_output_cap_bytes;
        if (want > lim.spool_bytes)
                want = lim.spool_bytes;
        kept = spool_make_room(e, x->user, x->session, lim.spool_bytes, want);

        pthread_mutex_lock(&e->lock);
        live = spool_live(e, x);
        /* what the quota leaves, at most a full output; 0 spools nothing (counted, truncated) */
        x->spool_budget = lim.spool_bytes - kept > (int64_t)live ? (uint64_t)(lim.spool_bytes - kept) - live : 0;
        if (x->spool_budget > (uint64_t)want)
                x->spool_budget = (uint64_t)want;
        r = count_load(e, x, &load);
        if (r < 0)
                r = sbx_error_set(err, r, 0, "out of memory");
        else if (e->closing)
                r = sbx_error_set(err, -ESHUTDOWN, 0, "the daemon is shutting down");
        else
                r = quota_exec_admit(e->cfg, &lim, &load, err);
        if (r < 0) {
                pthread_mutex_unlock(&e->lock);
                unref(x);
                return r;
        }
        x->next = e->live;
        e->live = x;
        x->refs += 2; /* the registry's and the worker's */
        e->workers++;
        pthread_mutex_unlock(&e->lock);

        persist(x);
        memcpy(ret_id, x->id, 37);

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        r = -pthread_create(&t, &attr, worker_main, x);
        pthread_attr_destroy(&attr);
        if (r < 0) {
                pthread_mutex_lock(&e->lock);
                for (struct execution **pp = &e->live; *pp; pp = &(*pp)->next)
                        if (*pp == x) {
                                *pp = x->next;
                                break;
                        }
                e->workers--;
                x->refs -= 2;
                pthread_mutex_unlock(&e->lock);
                set_state(x, EXEC_FAILED, EXEC_CAUSE_ERROR);
                snprintf(x->error, sizeof(x->error), "cannot start a worker thread: %s", strerror(-r));
                persist(x);
                unref(x);
                return sbx_error_set(err, r, 0, "cannot start a worker thread: %s", strerror(-r));
        }
        if (ret_x)
                *ret_x = x; /* the caller's reference */
        else
                unref(x); /* the registry and the worker keep theirs */
        return 0;
}

int exec_start(struct exec_engine *e, const struct exec_request *req, char ret_id[37], struct sbx_error *err)
{
        return start_internal(e, req, ret_id, NULL, err);
}

/* ---- reading results ---- */

void exec_result_done(struct exec_result *r)
{
        if (!r)
                return;
        free(r->stdout_head);
        free(r->stdout_tail);
        free(r->stderr_head);
        free(r->stderr_tail);
        r->stdout_head = r->stdout_tail = r->stderr_head = r->stderr_tail = NULL;
}

void exec_result_list_free(struct exec_result *list, size_t n)
{
        for (size_t i = 0; list && i < n; i++)
                exec_result_done(&list[i]);
        free(list);
}

/* Read up to len bytes at off from a spool file into a malloc'd buffer. */
static int read_spool(const char *path, uint64_t off, size_t len, char **ret, size_t *ret_len)
{
        _cleanup_close_ int fd = -1;
        char *buf = malloc(len + 1);
        size_t got = 0;

        if (!buf)
                return -ENOMEM;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        while (fd >= 0 && got < len) {
                ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        buf[got] = '\0';
        *ret = buf;
        *ret_len = got;
        return 0;
}

static void fill_output(struct exec_result *res, const char *spool_base_stdout, uint64_t spooled[2],
                        int64_t offsets[2], size_t max_bytes, size_t head_bytes)
{
        char path[2][SBX_PATH_MAX + 64];
        char **head[2] = {&res->stdout_head, &res->stderr_head};
        char **tail[2] = {&res->stdout_tail, &res->stderr_tail};
        size_t *head_len[2] = {&res->stdout_head_len, &res->stderr_head_len};
        size_t *tail_len[2] = {&res->stdout_tail_len, &res->stderr_tail_len};
        uint64_t *off_out[2] = {&res->stdout_offset, &res->stderr_offset};
        uint64_t totals[2] = {res->stdout_bytes, res->stderr_bytes};
        size_t base_len = strlen(spool_base_stdout);

        /* the stderr spool is the stdout path with its suffix swapped */
        snprintf(path[0], sizeof(path[0]), "%s", spool_base_stdout);
        snprintf(path[1], sizeof(path[1]), "%.*sstderr", (int)(base_len > 6 ? base_len - 6 : 0), spool_base_stdout);
        for (int k = 0; k < 2; k++) {
                if (totals[k] > spooled[k])
                        res->truncated = true;
                if (offsets[k] >= 0) {
                        uint64_t off = (uint64_t)offsets[k] < spooled[k] ? (uint64_t)offsets[k] : spooled[k];
                        size_t len = spooled[k] - off < max_bytes ? (size_t)(spooled[k] - off) : max_bytes;
                        *off_out[k] = off;
                        (void)read_spool(path[k], off, len, head[k], head_len[k]);
                        if (off + len < spooled[k])
                                res->truncated = true;
                        *tail[k] = calloc(1, 1);
                } else if (spooled[k] <= 2 * head_bytes) {
                        (void)read_spool(path[k], 0, (size_t)spooled[k], head[k], head_len[k]);
                        *tail[k] = calloc(1, 1);
                } else {
                        (void)read_spool(path[k], 0, head_bytes, head[k], head_len[k]);
                        (void)read_spool(path[k], spooled[k] - head_bytes, head_bytes, tail[k], tail_len[k]);
                        res->truncated = true;
                }
        }
}

static void result_from_live(struct execution *x, struct exec_result *res, uint64_t spooled[2])
{
        memset(res, 0, sizeof(*res));
        memcpy(res->id, x->id, sizeof(res->id));
        sbx_strlcpy(res->user, x->user, sizeof(res->user));
        sbx_strlcpy(res->session, x->session, sizeof(res->session));
        sbx_strlcpy(res->command_preview, x->preview, sizeof(res->command_preview));
        sbx_strlcpy(res->error, x->error, sizeof(res->error));
        res->state = x->state;
        res->cause = x->cause;
        res->exit_code = x->exit_code;
        res->created_at = x->created_at;
        res->duration_ms = exec_state_is_final(x->state) ? x->duration_ms : sbx_wall_ms() - x->created_at;
        res->stdout_bytes = x->total[0];
        res->stderr_bytes = x->total[1];
        spooled[0] = x->spooled[0];
        spooled[1] = x->spooled[1];
        sbx_strlcpy(res->via, x->via, sizeof(res->via));
        res->cpu_user_ms = x->have_usage ? (int64_t)x->usage.cpu_user_ms : -1;
        res->cpu_system_ms = x->have_usage ? (int64_t)x->usage.cpu_system_ms : -1;
        res->max_rss_kb = x->have_usage ? (int64_t)x->usage.max_rss_kb : -1;
        sbx_strlcpy(res->image, x->image, sizeof(res->image));
        sbx_strlcpy(res->runtime, x->runtime, sizeof(res->runtime));
        sbx_strlcpy(res->runner_version, x->runner_version, sizeof(res->runner_version));
}

static void result_from_row(const struct store_execution *row, struct exec_result *res, uint64_t spooled[2])
{
        memset(res, 0, sizeof(*res));
        sbx_strlcpy(res->id, row->id, sizeof(res->id));
        sbx_strlcpy(res->user, row->user_id, sizeof(res->user));
        sbx_strlcpy(res->session, row->session_id, sizeof(res->session));
        sbx_strlcpy(res->command_preview, row->command_preview, sizeof(res->command_preview));
        sbx_strlcpy(res->error, row->error, sizeof(res->error));
        (void)exec_state_from_string(row->state, &res->state);
        res->cause = cause_from_string(row->cause);
        res->exit_code = row->exit_code;
        res->created_at = row->created_at;
        res->duration_ms = row->duration_ms;
        res->stdout_bytes = (uint64_t)row->stdout_bytes;
        res->stderr_bytes = (uint64_t)row->stderr_bytes;
        spooled[0] = (uint64_t)row->stdout_spooled;
        spooled[1] = (uint64_t)row->stderr_spooled;
        sbx_strlcpy(res->via, row->via, sizeof(res->via));
        res->cpu_user_ms = row->cpu_user_ms;
        res->cpu_system_ms = row->cpu_system_ms;
        res->max_rss_kb = row->max_rss_kb;
        sbx_strlcpy(res->image, row->image, sizeof(res->image));
        sbx_strlcpy(res->runtime, row->runtime, sizeof(res->runtime));
        sbx_strlcpy(res->runner_version, row->runner_version, sizeof(res->runner_version));
}

/* A row written before the daemon died may lag behind its spool: the files
 * are the truth for what was kept. */
static void spool_sizes(const char *stdout_spool, struct exec_result *res, uint64_t spooled[2])
{
        size_t n = strlen(stdout_spool);
        char path[SBX_PATH_MAX + 64];
        uint64_t *totals[2] = {&res->stdout_bytes, &res->stderr_bytes};
        struct stat st;

        if (n < 6)
                return;
        for (int k = 0; k < 2; k++) {
                snprintf(path, sizeof(path), "%.*s%s", (int)(n - 6), stdout_spool, k ? "stderr" : "stdout");
                if (stat(path, &st) == 0 && (uint64_t)st.st_size > spooled[k])
                        spooled[k] = (uint64_t)st.st_size;
                if (*totals[k] < spooled[k])
                        *totals[k] = spooled[k];
        }
}

int exec_status(struct exec_engine *e, const char *user, const char *id, int64_t stdout_offset,
                int64_t stderr_offset, size_t max_bytes, int wait_ms, struct exec_result *ret, struct sbx_error *err)
{
        struct execution *x = find_ref(e, user, id);
        int64_t offsets[2] = {stdout_offset, stderr_offset};
        uint64_t spooled[2];
        char spool[SBX_PATH_MAX + 64];

        if (wait_ms > MAX_WAIT_MS)
                wait_ms = MAX_WAIT_MS;
        if (max_bytes == 0 || max_bytes > (size_t)e->cfg->exec_result_head_bytes * 2)
                max_bytes = (size_t)e->cfg->exec_result_head_bytes * 2;
        if (x) {
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, wait_ms);
                pthread_mutex_lock(&x->lock);
                /* long-poll: until it ends, or output past the caller's offsets arrives */
                while (wait_ms > 0 && !exec_state_is_final(x->state) &&
                       !(stdout_offset >= 0 && x->spooled[0] > (uint64_t)stdout_offset) &&
                       !(stderr_offset >= 0 && x->spooled[1] > (uint64_t)stderr_offset))
                        if (pthread_cond_timedwait(&x->cond, &x->lock, &until) == ETIMEDOUT)
                                break;
                result_from_live(x, ret, spooled);
                pthread_mutex_unlock(&x->lock);
                sbx_strlcpy(spool, x->spool[0], sizeof(spool));
                unref(x);
        } else {
                struct store_execution row;
                int r = store_exec_get(e->store, id, &row);
                if (r < 0 || strcmp(row.user_id, user) != 0)
                        return sbx_error_set(err, -ENOENT, 0, "no execution %s", id);
                result_from_row(&row, ret, spooled);
                sbx_strlcpy(spool, row.spool_path, sizeof(spool));
                spool_sizes(spool, ret, spooled);
        }
        fill_output(ret, spool, spooled, offsets, max_bytes, (size_t)e->cfg->exec_result_head_bytes);
        return 0;
}

int exec_run(struct exec_engine *e, const struct exec_request *req, struct exec_result *ret, struct sbx_error *err)
{
        char id[37];
        struct execution *x = NULL;
        int r = start_internal(e, req, id, &x, err);

        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        while (!x->finished)
                pthread_cond_wait(&x->cond, &x->lock);
        r = x->start_error;
        if (r < 0)
                sbx_error_set(err, r, 0, "%s", x->error);
        pthread_mutex_unlock(&x->lock);
        unref(x);
        if (r < 0)
                return r;
        return exec_status(e, req->user, id, -1, -1, 0, 0, ret, err);
}

int exec_list(struct exec_engine *e, const char *user, const char *session, unsigned states_mask, size_t limit,
              struct exec_result **ret, size_t *ret_n)
{
        return exec_list_finished(e, user, session, states_mask, -1, limit, ret, ret_n);
}

int exec_list_finished(struct exec_engine *e, const char *user, const char *session, unsigned states_mask,
                       int64_t finished_since_ms, size_t limit, struct exec_result **ret, size_t *ret_n)
{
        struct store_execution *rows = NULL;
        struct exec_result *out;
        size_t n = 0, k = 0;
        int r;

        const char *states[EXEC_STATE_COUNT + 1] = {0};
        size_t n_states = 0;

        for (int i = 0; i < EXEC_STATE_COUNT; i++)
                if (states_mask & (1u << i))
                        states[n_states++] = state_names[i];
        if (finished_since_ms >= 0)
                r = store_exec_list_finished(e->store, user, session, states_mask ? states : NULL, finished_since_ms,
                                             limit ? limit : 100, &rows, &n);
        else
                r = store_exec_list(e->store, user, session, states_mask ? states : NULL, limit ? limit : 100, &rows,
                                    &n);
        if (r < 0)
                return r;
        out = calloc(n + 1, sizeof(*out));
        if (!out) {
                free(rows);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                uint64_t spooled[2];
                struct execution *x = find_ref(e, user, rows[i].id);
                if (x) {
                        pthread_mutex_lock(&x->lock);
                        result_from_live(x, &out[k], spooled);
                        pthread_mutex_unlock(&x->lock);
                        unref(x);
                } else {
                        result_from_row(&rows[i], &out[k], spooled);
                }
                k++;
        }
        free(rows);
        *ret = out;
        *ret_n = k;
        return 0;
}

/* The error for an id that is not live: unknown, or finished. */
static int finished_error(struct exec_engine *e, const char *user, const char *id, struct sbx_error *err)
{
        struct store_execution row;
        if (store_exec_get(e->store, id, &row) < 0 || strcmp(row.user_id, user) != 0)
                return sbx_error_set(err, -ENOENT, 0, "no execution %s", id);
        return sbx_error_set(err, -EALREADY, 0, "execution %s has already finished: %s", id, row.state);
}

int exec_send_stdin(struct exec_engine *e, const char *user, const char *id, const void *data, size_t len, bool eof,
                    struct sbx_error *err)
{
        struct execution *x = find_ref(e, user, id);
        int r = 0;

        if (!x)
                return finished_error(e, user, id, err);
        pthread_mutex_lock(&x->stdin_lock);
        if (exec_state_is_final(x->state))
                r = sbx_error_set(err, -EALREADY, 0, "execution %s has already finished: %s", id,
                                  exec_state_to_string(x->state));
        else if (!x->interactive)
                r = sbx_error_set(err, -EINVAL, 0, "execution %s was not started with interactive stdin", id);
        else if ((!x->stream && !x->rx) || x->stdin_closed || x->stdin_eof)
                r = sbx_error_set(err, -EPIPE, 0, "stdin of execution %s is closed", id);
        else if (x->stdin_sent + len > (uint64_t)e->cfg->max_stdin_bytes)
                r = sbx_error_set(err, -E2BIG, 0, "stdin would exceed %" PRId64 " bytes", e->cfg->max_stdin_bytes);
        else if (x->stdin_len - x->stdin_off + len > STDIN_PENDING_MAX)
                /* never a wait on a process that does not read: the caller learns it at once */
                r = sbx_error_set(err, -EAGAIN,
                                  0, "busy: execution %s is not reading its stdin (%zu bytes sent earlier are still "
                                  "waiting); retry later",
                                  id, x->stdin_len - x->stdin_off);
        if (r == 0 && len > 0) {
                char *q;
                if (x->stdin_off > 0) {
                        memmove(x->stdin_data, (char *)x->stdin_data + x->stdin_off, x->stdin_len - x->stdin_off);
                        x->stdin_len -= x->stdin_off;
                        x->stdin_off = 0;
                }
                q = realloc(x->stdin_data, x->stdin_len + len);
                if (!q)
                        r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                else {
                        memcpy(q + x->stdin_len, data, len);
                        x->stdin_data = q;
                        x->stdin_len += len;
                        x->stdin_sent += len;
                }
        }
        if (r == 0 && eof)
                x->stdin_eof = true;
        if (r == 0)
                (void)stdin_pump_locked(x); /* what the process takes now; the worker writes the rest */
        pthread_mutex_unlock(&x->stdin_lock);
        unref(x);
        return r;
}

int exec_cancel(struct exec_engine *e, const char *user, const char *id, bool force, struct sbx_error *err)
{
        struct execution *x = find_ref(e, user, id);
        int r = 0;

        if (!x)
                return finished_error(e, user, id, err);
        pthread_mutex_lock(&x->lock);
        if (exec_state_is_final(x->state))
                r = sbx_error_set(err, -EALREADY, 0, "execution %s has already finished: %s", id,
                                  exec_state_to_string(x->state));
        else {
                x->cancel = true;
                x->force = x->force || force;
        }
        pthread_mutex_unlock(&x->lock);
        unref(x);
        return r;
}

int exec_internal(struct exec_engine *e, const char *container_id, const char *const *argv, const void *stdin_data,
                  size_t stdin_len, int timeout_ms, int *ret_exit, char **ret_out, size_t *ret_out_len,
                  struct sbx_error *err)
{
        struct docker_exec_spec spec = {.cmd = argv, .attach_stdin = stdin_data != NULL};
        struct docker_exec_result res = {0};
        int r;

        r = docker_exec_run(e->docker, container_id, &spec, stdin_data, stdin_len, 1 << 20, timeout_ms, &res, err);
        if (r < 0)
                return r;
        if (ret_exit)
                *ret_exit = res.exit_code;
        if (ret_out)
                *ret_out = TAKE_PTR(res.out);
        if (ret_out_len)
                *ret_out_len = res.out_len;
        docker_exec_result_done(&res);
        return 0;
}

int exec_resize(struct exec_engine *e, const char *user, const char *id, int rows, int cols, struct sbx_error *err)
{
        struct execution *x = find_ref(e, user, id);
        int r = 0;

        if (!x)
                return finished_error(e, user, id, err);
        if (rows < 1 || rows > RP_TTY_MAX_ROWS || cols < 1 || cols > RP_TTY_MAX_COLS)
                r = sbx_error_set(err, -EINVAL, 0, "a terminal has 1..%d rows and 1..%d columns", RP_TTY_MAX_ROWS,
                                  RP_TTY_MAX_COLS);
        else if (!x->tty)
                r = sbx_error_set(err, -EINVAL, 0, "execution %s has no terminal (start it with tty)", id);
        pthread_mutex_lock(&x->stdin_lock);
        if (r == 0 && exec_state_is_final(x->state))
                r = sbx_error_set(err, -EALREADY, 0, "execution %s has already finished: %s", id,
                                  exec_state_to_string(x->state));
        else if (r == 0 && !x->rx)
                r = sbx_error_set(err, -EAGAIN, 0, "busy: the terminal of execution %s is not attached yet; retry", id);
        else if (r == 0)
                r = runner_exec_resize(x->rx, rows, cols);
        if (r == 0) {
                x->rows = rows;
                x->cols = cols;
        } else if (err && !err->msg[0])
                sbx_error_set(err, r, 0, "cannot resize the terminal: %s", strerror(-r));
        pthread_mutex_unlock(&x->stdin_lock);
        unref(x);
        return r;
}
