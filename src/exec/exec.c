/* exec.c — the execution engine (see exec.h for the contract): its
 * lifecycle, an execution's life (build, references, row, state), and the
 * calls that act on a live one (stdin, cancel, resize). Admission is in
 * exec_admit.c, the worker thread in exec_worker.c, re-adoption after a
 * restart in exec_adopt.c, reading results in exec_results.c; what they
 * share is in exec_internal.h, which also states the lock rules:
 * e->lock (the registry, refs, workers) before x->lock (an execution's
 * state) and x->stdin_lock (its stdin queue); never a Docker call under
 * any of them. */
#include "sandboxd/secrets_ca.h"
#include "sandboxd/exec.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec_internal.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/log.h"
#include "sandboxd/session.h"
#include "sandboxd/sha256.h"
#include "sandboxd/store.h"

_Static_assert(EXEC_TTY_MAX_ROWS == RP_TTY_MAX_ROWS && EXEC_TTY_MAX_COLS == RP_TTY_MAX_COLS, "tty limits");

#define MAX_ENV 128
#define MAX_ENV_BYTES (64 * 1024)
#define STDIN_PENDING_MAX (1024 * 1024) /* send_stdin bytes waiting for a process that does not read */
#define RESIZE_ATTACH_WAIT_MS 2000      /* resize_terminal waiting for a starting execution's terminal */

static const char *const state_names[] = {"PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"};
static const char *const cause_names[] = {"",    "exited",         "timeout",          "cancelled",
                                          "oom", "container_died", "daemon_restarted", "error"};

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

enum exec_cause exec_cause_from_string(const char *s)
{
        for (size_t i = 0; i < ELEMENTSOF(cause_names); i++)
                if (s && strcmp(s, cause_names[i]) == 0)
                        return (enum exec_cause)i;
        return EXEC_CAUSE_NONE;
}

bool exec_state_is_final(enum exec_state s)
{
        return s >= EXEC_COMPLETED;
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
        if (strcmp(out, CONTAINER_WORKSPACE) != 0 &&
            strncmp(out, CONTAINER_WORKSPACE "/", strlen(CONTAINER_WORKSPACE) + 1) != 0)
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
                if (!eq || eq == kv ||
                    !((kv[0] >= 'A' && kv[0] <= 'Z') || (kv[0] >= 'a' && kv[0] <= 'z') || kv[0] == '_'))
                        return sbx_error_set(err, -EINVAL, 0, "environment entry %zu is not NAME=value", n);
                for (const char *c = kv; c < eq; c++)
                        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
                              *c == '_'))
                                return sbx_error_set(err, -EINVAL, 0,
                                                     "environment name '%.*s' is not [A-Za-z_][A-Za-z0-9_]*",
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

static int check_winsize(int rows, int cols, struct sbx_error *err)
{
        if (rows < 1 || rows > RP_TTY_MAX_ROWS || cols < 1 || cols > RP_TTY_MAX_COLS)
                return sbx_error_set(err, -EINVAL, 0, "a terminal has 1..%d rows and 1..%d columns", RP_TTY_MAX_ROWS,
                                     RP_TTY_MAX_COLS);
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
        free(x->network);
        egress_secrets_free(x->mask, x->n_mask);
        for (int i = 0; i < 2; i++) {
                free(x->mask_tail[i]);
                x->mask_tail[i] = NULL;
        }
        for (int i = 0; i < 2; i++)
                if (x->spool_fd[i] >= 0)
                        close(x->spool_fd[i]);
        engine_stream_free(x->e->engine, x->stream);
        pthread_mutex_destroy(&x->lock);
        pthread_cond_destroy(&x->cond);
        pthread_mutex_destroy(&x->stdin_lock);
        pthread_mutex_destroy(&x->mask_lock);
        free(x);
}

struct execution *execution_new(struct exec_registry *e, const char *id)
{
        struct execution *x = calloc(1, sizeof(*x));

        if (!x)
                return NULL;
        x->e = e;
        x->refs = 1;
        x->spool_fd[0] = x->spool_fd[1] = -1;
        sbx_strlcpy(x->trace_id, reqctx_trace_id(), sizeof(x->trace_id)); /* the worker serves the same request */
        pthread_mutex_init(&x->lock, NULL);
        pthread_cond_init(&x->cond, NULL);
        pthread_mutex_init(&x->stdin_lock, NULL);
        pthread_mutex_init(&x->mask_lock, NULL);
        sbx_strlcpy(x->id, id, sizeof(x->id));
        for (int k = 0; k < 2; k++)
                snprintf(x->spool[k], sizeof(x->spool[k]), "%s/%s.%s", e->spool_dir, x->id, k ? "stderr" : "stdout");
        return x;
}

void execution_unref(struct execution *x)
{
        struct exec_registry *e;
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

void execution_unrefp(struct execution **x)
{
        execution_unref(*x);
}

struct execution *execution_find_ref(struct exec_registry *e, const char *user, const char *id)
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

void execution_persist(struct execution *x)
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

void execution_set_state(struct execution *x, enum exec_state st, enum exec_cause cause)
{
        pthread_mutex_lock(&x->lock);
        x->state = st;
        x->cause = cause;
        if (exec_state_is_final(st)) {
                exec_count_final(st, cause, x->duration_ms); /* before anyone can see it final */
                exec_note_final(x);
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* ---- engine ---- */

int exec_registry_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct session_manager *sm,
                      struct exec_registry **ret, struct sbx_error *err)
{
        struct exec_registry *e = calloc(1, sizeof(*e));

        if (!e)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        e->cfg = cfg;
        e->engine = d;
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

void exec_registry_set_runner(struct exec_registry *e, struct hub *h)
{
        e->runner = h;
}

void exec_registry_set_secrets(struct exec_registry *e, const struct secrets *s)
{
        e->secrets = s;
}

void exec_set_quota(struct exec_registry *e, struct quota *q)
{
        pthread_mutex_lock(&e->lock);
        e->quota = q;
        pthread_mutex_unlock(&e->lock);
}

void exec_registry_free(struct exec_registry *e)
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
        /* registered for adoption, never started (exec_registry_adopt not called) */
        while (e->live) {
                struct execution *x = e->live;
                e->live = x->next;
                pthread_mutex_unlock(&e->lock);
                execution_unref(x);
                pthread_mutex_lock(&e->lock);
        }
        pthread_mutex_unlock(&e->lock);
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->idle);
        free(e);
}

/* Whether env ("K=V" entries) sets name. */
static bool env_names(const char *const *env, const char *name)
{
        size_t n = strlen(name);

        for (; env && *env; env++)
                if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
                        return true;
        return false;
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

/* An argv's words joined by spaces (its preview and hash only: never run),
 * after checking its count and size. */
static int argv_text(const char *const *argv, int64_t max_bytes, char **ret, struct sbx_error *err)
{
        size_t n = 0, len = 0;
        char *out;

        for (; argv[n]; n++) {
                if (n >= EXEC_ARGV_MAX)
                        return sbx_error_set(err, -E2BIG, 0, "argv has more than %d words", EXEC_ARGV_MAX);
                len += strlen(argv[n]) + 1;
        }
        if (n == 0 || !*argv[0])
                return sbx_error_set(err, -EINVAL, 0, "argv is empty");
        if ((int64_t)len > max_bytes)
                return sbx_error_set(err, -E2BIG, 0, "argv is %zu bytes; the limit is %" PRId64, len, max_bytes);
        out = malloc(len);
        if (!out)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        out[0] = '\0';
        for (size_t i = 0, k = 0; i < n; i++) {
                size_t l = strlen(argv[i]);
                memcpy(out + k, argv[i], l);
                k += l;
                out[k++] = i + 1 < n ? ' ' : '\0';
        }
        *ret = out;
        return 0;
}

static int build(struct exec_registry *e, const struct exec_request *req, struct execution **ret, struct sbx_error *err)
{
        const struct sbx_config *cfg = e->cfg;
        _cleanup_(execution_unrefp) struct execution *x = NULL;
        _cleanup_free_ char *joined = NULL;
        char id[37];
        const char *text;
        size_t text_len, n_env;
        bool term;
        int r;

        r = session_key_check(req->user, req->session, err);
        if (r < 0)
                return r;
        if (req->language == EXEC_LANG_NONE && req->argv && !req->command) {
                r = argv_text(req->argv, cfg->max_command_bytes, &joined, err);
                if (r < 0)
                        return r;
                text = joined;
                text_len = strlen(text);
        } else if (req->language == EXEC_LANG_NONE) {
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
        if (req->tty && (r = check_winsize(req->rows ? req->rows : 24, req->cols ? req->cols : 80, err)) < 0)
                return r;

        (void)sbx_uuid(id);
        x = execution_new(e, id);
        if (!x)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        r = exec_workdir_resolve(req->workdir, x->workdir, err);
        if (r < 0)
                return r;
        if (e->secrets &&
            secrets_egress_attached(e->secrets, e->store, req->user, req->session, &x->mask, &x->n_mask) == 0)
                for (size_t i = 0; i < x->n_mask; i++)
                        if (x->mask[i].value && x->mask[i].value_len > x->mask_max)
                                x->mask_max = x->mask[i].value_len;
        sbx_strlcpy(x->user, req->user, sizeof(x->user));
        sbx_strlcpy(x->session, req->session, sizeof(x->session));
        sbx_strlcpy(x->actor, req->actor, sizeof(x->actor));
        x->timeout_s = req->timeout_s > 0 ? req->timeout_s : cfg->exec_timeout_default_s;
        x->interactive = req->interactive || req->tty; /* a terminal's input stays open */
        x->tty = req->tty;
        x->rows = req->rows ? req->rows : 24;
        x->cols = req->cols ? req->cols : 80;
        if (req->network && req->network->set) {
                x->network = malloc(sizeof(*x->network));
                if (!x->network)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                *x->network = *req->network;
        }
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

        /* The environment: the caller's entries plus the tree marker, and on a terminal TERM
         * (what the console's and E2B's terminals emulate) unless the caller names one. */
        term = x->tty && !env_names(req->env, "TERM");
        x->env = strv_dup(req->env, term ? 2 : 1, NULL);
        if (!x->env || asprintf(&x->env[0], "SBX_EXEC_ID=%s", x->id) < 0 ||
            (term && !(x->env[1] = strdup("TERM=" EXEC_TTY_TERM))))
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        if (req->language == EXEC_LANG_NONE && joined) {
                sbx_strlcpy(x->kind, "exec", sizeof(x->kind));
                x->argv = strv_dup(req->argv, 0, NULL); /* exec'd as given: no shell reads it */
        } else if (req->language == EXEC_LANG_NONE) {
                const char *argv[] = {"sh", "-c", req->command, NULL};
                sbx_strlcpy(x->kind, "exec", sizeof(x->kind));
                x->argv = strv_dup(argv, 0, NULL);
        } else {
                /* The code travels as data: written to a file the daemon names,
                 * then given to the interpreter as a path. */
                static const char *const interp[] = {
                        [EXEC_LANG_PYTHON] = "python3", [EXEC_LANG_NODE] = "node", [EXEC_LANG_BASH] = "bash"};
                static const char *const ext[] = {
                        [EXEC_LANG_PYTHON] = "py", [EXEC_LANG_NODE] = "js", [EXEC_LANG_BASH] = "sh"};
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

/* Build, admit, register and start; with ret_x, also hand back a reference. */
static int start_internal(struct exec_registry *e, const struct exec_request *req, char ret_id[37],
                          struct execution **ret_x, struct sbx_error *err)
{
        struct execution *x = NULL;
        int r;

        r = build(e, req, &x, err);
        if (r < 0)
                return r;
        r = exec_admit(e, x, err);
        if (r < 0) {
                execution_unref(x);
                return r;
        }
        execution_persist(x);
        memcpy(ret_id, x->id, 37);

        r = exec_worker_start(x);
        if (r < 0) {
                exec_admit_undo(e, x);
                execution_set_state(x, EXEC_FAILED, EXEC_CAUSE_ERROR);
                snprintf(x->error, sizeof(x->error), "cannot start a worker thread: %s", strerror(-r));
                execution_persist(x);
                execution_unref(x);
                return sbx_error_set(err, r, 0, "cannot start a worker thread: %s", strerror(-r));
        }
        if (ret_x)
                *ret_x = x; /* the caller's reference */
        else
                execution_unref(x); /* the registry and the worker keep theirs */
        return 0;
}

int exec_start(struct exec_registry *e, const struct exec_request *req, char ret_id[37], struct sbx_error *err)
{
        return start_internal(e, req, ret_id, NULL, err);
}

int exec_run(struct exec_registry *e, const struct exec_request *req, struct exec_result *ret, struct sbx_error *err)
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
        execution_unref(x);
        if (r < 0)
                return r;
        return exec_status(e, req->user, id, -1, -1, 0, 0, ret, err);
}

static int already_finished(const char *id, const char *state, struct sbx_error *err)
{
        return sbx_error_set(err, -EALREADY, 0, "execution %s has already finished: %s", id, state);
}

/* The live execution id of user, with a reference, for a call that acts on
 * it; else the error for an id that is unknown, or finished. */
static int live_ref(struct exec_registry *e, const char *user, const char *id, struct execution **ret,
                    struct sbx_error *err)
{
        struct store_execution row;

        *ret = execution_find_ref(e, user, id);
        if (*ret)
                return 0;
        if (store_exec_get(e->store, id, &row) < 0 || strcmp(row.user_id, user) != 0)
                return sbx_error_set(err, -ENOENT, 0, "no execution %s", id);
        return already_finished(id, row.state, err);
}

int exec_send_stdin(struct exec_registry *e, const char *user, const char *id, const void *data, size_t len, bool eof,
                    struct sbx_error *err)
{
        struct execution *x;
        int r = live_ref(e, user, id, &x, err);

        if (r < 0)
                return r;
        pthread_mutex_lock(&x->stdin_lock);
        if (exec_state_is_final(x->state))
                r = already_finished(id, exec_state_to_string(x->state), err);
        else if (!x->interactive)
                r = sbx_error_set(err, -EINVAL, 0, "execution %s was not started with interactive stdin", id);
        else if ((!x->stream && !x->rx) || x->stdin_closed || x->stdin_eof)
                r = sbx_error_set(err, -EPIPE, 0, "stdin of execution %s is closed", id);
        else if (x->stdin_sent + len > (uint64_t)e->cfg->max_stdin_bytes)
                r = sbx_error_set(err, -E2BIG, 0, "stdin would exceed %" PRId64 " bytes", e->cfg->max_stdin_bytes);
        else if (x->stdin_len - x->stdin_off + len > STDIN_PENDING_MAX)
                /* never a wait on a process that does not read: the caller learns it at once */
                r = sbx_error_set(err, -EAGAIN, 0,
                                  "busy: execution %s is not reading its stdin (%zu bytes sent earlier are still "
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
                (void)exec_stdin_pump_locked(x); /* what the process takes now; the worker writes the rest */
        pthread_mutex_unlock(&x->stdin_lock);
        execution_unref(x);
        return r;
}

int exec_cancel(struct exec_registry *e, const char *user, const char *id, bool force, struct sbx_error *err)
{
        struct execution *x;
        int r = live_ref(e, user, id, &x, err);

        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        if (exec_state_is_final(x->state))
                r = already_finished(id, exec_state_to_string(x->state), err);
        else {
                x->cancel = true;
                x->force = x->force || force;
        }
        pthread_mutex_unlock(&x->lock);
        execution_unref(x);
        return r;
}

int exec_internal(struct exec_registry *e, const char *container_id, const char *const *argv, const void *stdin_data,
                  size_t stdin_len, int timeout_ms, int *ret_exit, char **ret_out, size_t *ret_out_len,
                  struct sbx_error *err)
{
        struct engine_exec_spec spec = {.cmd = argv, .attach_stdin = stdin_data != NULL};
        struct engine_exec_result res = {0};
        int r;

        r = engine_exec_run(e->engine, container_id, &spec, stdin_data, stdin_len, 1 << 20, timeout_ms, &res, err);
        if (r < 0)
                return r;
        if (ret_exit)
                *ret_exit = res.exit_code;
        if (ret_out)
                *ret_out = TAKE_PTR(res.out);
        if (ret_out_len)
                *ret_out_len = res.out_len;
        engine_exec_result_done(&res);
        return 0;
}

int exec_resize(struct exec_registry *e, const char *user, const char *id, int rows, int cols, struct sbx_error *err)
{
        struct execution *x;
        int r = live_ref(e, user, id, &x, err);

        if (r < 0)
                return r;
        r = check_winsize(rows, cols, err);
        if (r == 0 && !x->tty)
                r = sbx_error_set(err, -EINVAL, 0, "execution %s has no terminal (start it with tty)", id);
        if (r == 0) {
                /* Its first output can be read a moment before the worker has
                 * attached the terminal (RUNNING comes after): wait that out. */
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, RESIZE_ATTACH_WAIT_MS);

                pthread_mutex_lock(&x->lock);
                while (x->state == EXEC_PENDING)
                        if (pthread_cond_timedwait(&x->cond, &x->lock, &until) == ETIMEDOUT)
                                break;
                pthread_mutex_unlock(&x->lock);
        }
        pthread_mutex_lock(&x->stdin_lock);
        if (r == 0 && exec_state_is_final(x->state))
                r = already_finished(id, exec_state_to_string(x->state), err);
        else if (r == 0 && !x->rx)
                r = sbx_error_set(err, -EAGAIN, 0, "busy: the terminal of execution %s is not attached yet; retry", id);
        else if (r == 0)
                r = hub_exec_resize(x->rx, rows, cols);
        if (r == 0) {
                x->rows = rows;
                x->cols = cols;
        } else if (err && !err->msg[0])
                sbx_error_set(err, r, 0, "cannot resize the terminal: %s", strerror(-r));
        pthread_mutex_unlock(&x->stdin_lock);
        execution_unref(x);
        return r;
}
