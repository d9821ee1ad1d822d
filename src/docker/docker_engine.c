/* docker_engine.c — the Docker engine behind the seam (engine.h): the
 * engine-neutral spec mapped onto the Engine API's create body, and every
 * other operation handed to the client (docker.h) one for one.
 *
 * Each operation is the same request the callers made before the seam, in
 * the same order: no request is added. Replies are converted field for field
 * from the client's structs (fixed-size, on the stack); an exec stream is the
 * client's own stream, passed through without a wrapper, so the bytes of the
 * exec fallback are read straight into the caller's buffer.
 *
 * No state beyond the client: `priv` is the struct docker, which is
 * thread-safe (a handle per thread). */
#include "sandboxd/engine_docker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/config.h"
#include "docker_internal.h"
#include "sandboxd/runner_proto.h"

#define CONTAINER_WORKSPACE_PATH "/workspace" /* container.h's CONTAINER_WORKSPACE */
#define BIND_MAX (SBX_PATH_MAX + 32)          /* a host path (config.h), the container path, ":ro" */
#define ICC_OPTION "com.docker.network.bridge.enable_icc"

_Static_assert((int)ENGINE_STREAM_STDOUT == (int)DOCKER_STREAM_STDOUT &&
                       (int)ENGINE_STREAM_STDERR == (int)DOCKER_STREAM_STDERR &&
                       (int)ENGINE_STREAM_STDIN == (int)DOCKER_STREAM_STDIN,
               "stream kinds pass through unchanged");
_Static_assert(sizeof(struct engine_kv) == sizeof(struct docker_kv) && ENGINE_MAX_LABELS == DOCKER_MAX_LABELS,
               "labels copy as one block");

static struct docker *dk(struct engine *e)
{
        return e->priv;
}

/* The client's stream is the engine's stream: the cast is the whole wrapper. */
static struct docker_stream *ds(struct engine_stream *s)
{
        return (struct docker_stream *)(void *)s;
}

#define COPY_STR(dst, src) sbx_strlcpy((dst), (src), sizeof(dst))

static void copy_labels(struct engine_kv *dst, size_t *ret_n, const struct docker_kv *src, size_t n)
{
        memcpy(dst, src, n * sizeof(*src));
        *ret_n = n;
}

static void dk_free(struct engine *e)
{
        docker_free(dk(e));
        free(e);
}

static int dk_connect(struct engine *e, struct sbx_error *err)
{
        struct docker *d = dk(e);
        int r = docker_negotiate(d, err);

        if (r < 0)
                sbx_error_prefix(err, "connecting to Docker at %s", d->socket_path);
        return r;
}

static int dk_version(struct engine *e, struct engine_version *ret, struct sbx_error *err)
{
        struct docker_version v;
        const char *api;
        int r = docker_version(dk(e), &v, err);

        if (r < 0)
                return r;
        memset(ret, 0, sizeof(*ret));
        COPY_STR(ret->engine, "docker");
        COPY_STR(ret->version, v.version);
        api = docker_api_version(dk(e));
        COPY_STR(ret->api_version, api ? api : v.api_version);
        return 0;
}

static uint64_t dk_api_errors(struct engine *e)
{
        (void)e;
        return docker_api_errors();
}

static int dk_image_inspect(struct engine *e, const char *image, struct engine_image_info *ret, struct sbx_error *err)
{
        struct docker_image_info i;
        int r = docker_image_inspect(dk(e), image, &i, err);

        if (r < 0)
                return r;
        COPY_STR(ret->id, i.id);
        COPY_STR(ret->digest, i.digest);
        COPY_STR(ret->recipe, i.recipe);
        return 0;
}

static int dk_has_runtime(struct engine *e, const char *name, bool *ret, struct sbx_error *err)
{
        return docker_has_runtime(dk(e), name, ret, err);
}

/* A create body's strings, kept for the call. */
struct create_body {
        char ws_bind[BIND_MAX], passwd_bind[BIND_MAX], group_bind[BIND_MAX];
        char bin_bind[BIND_MAX], dir_bind[BIND_MAX], user[32];
        char tmpfs_opt[4][BIND_MAX];
        const char *binds[6], *tmpfs[5];
        struct docker_label labels[32];
        struct docker_container_spec spec;
};

/* The spec as a create body. Binds, in container.c's order before the seam:
 * the workspace, the identity files, the runner binary, the session directory. */
static int map_spec(const struct engine_spec *s, struct create_body *b, struct sbx_error *err)
{
        static const char *const cap_drop[] = {"ALL", NULL};
        static const char *const security_opt[] = {"no-new-privileges:true", NULL};
        static const char *const runner_entry[] = {RP_BINARY_PATH, NULL};
        static const char *const runner_cmd[] = {RP_SOCKET_DIR "/" RP_SOCKET_NAME, NULL};
        struct docker_container_spec *spec = &b->spec;
        size_t nb = 0;

        memset(b, 0, sizeof(*b));
        if (s->n_labels > ELEMENTSOF(b->labels) || s->n_tmpfs > ELEMENTSOF(b->tmpfs_opt))
                return sbx_error_set(err, -E2BIG, 0, "too many labels or tmpfs mounts for one container");
        for (size_t i = 0; i < s->n_labels; i++)
                b->labels[i] = (struct docker_label){s->labels[i].key, s->labels[i].value};
        if (s->workspace) {
                snprintf(b->ws_bind, sizeof(b->ws_bind), "%s:" CONTAINER_WORKSPACE_PATH ":rw", s->workspace);
                b->binds[nb++] = b->ws_bind;
        }
        if (s->passwd_file && s->group_file) {
                snprintf(b->passwd_bind, sizeof(b->passwd_bind), "%s:/etc/passwd:ro", s->passwd_file);
                snprintf(b->group_bind, sizeof(b->group_bind), "%s:/etc/group:ro", s->group_file);
                b->binds[nb++] = b->passwd_bind;
                b->binds[nb++] = b->group_bind;
        }
        if (s->runner_binary && s->session_dir) {
                snprintf(b->bin_bind, sizeof(b->bin_bind), "%s:" RP_BINARY_PATH ":ro", s->runner_binary);
                snprintf(b->dir_bind, sizeof(b->dir_bind), "%s:" RP_SOCKET_DIR ":ro", s->session_dir);
                b->binds[nb++] = b->bin_bind;
                b->binds[nb++] = b->dir_bind;
                spec->entrypoint = runner_entry;
                spec->cmd = runner_cmd;
        }
        for (size_t i = 0; i < s->n_tmpfs; i++) {
                const struct engine_tmpfs *t = &s->tmpfs[i];
                char *o = b->tmpfs_opt[i];
                int n = snprintf(o, BIND_MAX, "%s:rw%s%s%s", t->path, t->noexec ? ",noexec" : "",
                                 t->nosuid ? ",nosuid" : "", t->nodev ? ",nodev" : "");
                if (t->size_bytes > 0 && n > 0 && n < BIND_MAX)
                        snprintf(o + n, BIND_MAX - (size_t)n, ",size=%" PRId64, t->size_bytes);
                b->tmpfs[i] = o;
        }
        snprintf(b->user, sizeof(b->user), "%u:%u", (unsigned)s->uid, (unsigned)s->gid);

        spec->image = s->image;
        spec->user = b->user;
        spec->env = s->env;
        spec->workdir = s->workdir;
        spec->hostname = s->hostname;
        spec->binds = b->binds;
        spec->tmpfs = b->tmpfs;
        spec->cap_drop = cap_drop;
        spec->security_opt = security_opt; /* Docker's default seccomp profile stays on: we never pass seccomp= */
        spec->labels = b->labels;
        spec->n_labels = s->n_labels;
        spec->memory = s->memory_bytes;
        spec->memory_swap = s->memory_swap_bytes;
        spec->nano_cpus = s->nano_cpus;
        spec->pids_limit = s->pids_limit;
        spec->cpu_shares = s->cpu_weight;
        spec->oom_score_adj = s->oom_score_adj;
        spec->readonly_rootfs = s->readonly_rootfs;
        spec->init = true; /* and the runner as its command: hub_peer.h knows the runner as the init's first child */
        spec->privileged = false;
        spec->network_mode = s->network ? s->network : "none";
        spec->runtime = s->runtime_class;
        return 0;
}

static int dk_create(struct engine *e, const struct engine_spec *s, char ret_id[ENGINE_ID_STR_MAX],
                     struct sbx_error *err)
{
        struct create_body b;
        int r = map_spec(s, &b, err);

        return r < 0 ? r : docker_container_create(dk(e), &b.spec, ret_id, err);
}

char *engine_docker_create_body(const struct engine_spec *s)
{
        struct create_body b;

        return map_spec(s, &b, NULL) < 0 ? NULL : docker_container_spec_to_json(&b.spec);
}

static int dk_start(struct engine *e, const char *id, struct sbx_error *err)
{
        return docker_container_start(dk(e), id, err);
}

static int dk_inspect(struct engine *e, const char *id, struct engine_container_info *ret, struct sbx_error *err)
{
        struct docker_container_info i;
        int r = docker_container_inspect(dk(e), id, &i, err);

        if (r < 0)
                return r;
        COPY_STR(ret->id, i.id);
        COPY_STR(ret->name, i.name);
        COPY_STR(ret->image, i.image);
        COPY_STR(ret->image_id, i.image_id);
        COPY_STR(ret->status, i.status);
        ret->running = i.running;
        ret->restarting = i.restarting;
        ret->oom_killed = i.oom_killed;
        ret->dead = i.dead;
        ret->exit_code = i.exit_code;
        ret->pid = i.pid;
        ret->restart_count = i.restart_count;
        COPY_STR(ret->started_at, i.started_at);
        COPY_STR(ret->finished_at, i.finished_at);
        COPY_STR(ret->error, i.error);
        COPY_STR(ret->network_mode, i.network_mode);
        COPY_STR(ret->runtime, i.runtime);
        ret->has_network = i.has_network;
        ret->readonly_rootfs = i.readonly_rootfs;
        ret->init = i.init;
        ret->privileged = i.privileged;
        ret->memory = i.memory;
        ret->memory_swap = i.memory_swap;
        ret->nano_cpus = i.nano_cpus;
        ret->pids_limit = i.pids_limit;
        ret->cpu_shares = i.cpu_shares;
        ret->oom_score_adj = i.oom_score_adj;
        copy_labels(ret->labels, &ret->n_labels, i.labels, i.n_labels);
        return 0;
}

static int dk_stop(struct engine *e, const char *id, int timeout_s, struct sbx_error *err)
{
        return docker_container_stop(dk(e), id, timeout_s, err);
}

static int dk_remove(struct engine *e, const char *id, struct sbx_error *err)
{
        return docker_container_remove(dk(e), id, true, err);
}

static int dk_list(struct engine *e, const char *const *label_filters, bool all,
                   struct engine_container_summary **ret_list, size_t *ret_n, struct sbx_error *err)
{
        struct docker_container_summary *l = NULL;
        struct engine_container_summary *out;
        size_t n = 0;
        int r = docker_container_list(dk(e), label_filters, all, &l, &n, err);

        if (r < 0)
                return r;
        out = calloc(n ? n : 1, sizeof(*out));
        if (!out) {
                free(l);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
                COPY_STR(out[i].id, l[i].id);
                COPY_STR(out[i].name, l[i].name);
                COPY_STR(out[i].state, l[i].state);
                out[i].created = l[i].created;
                copy_labels(out[i].labels, &out[i].n_labels, l[i].labels, l[i].n_labels);
        }
        free(l);
        *ret_list = out;
        *ret_n = n;
        return 0;
}

static int dk_logs(struct engine *e, const char *id, int tail_lines, char **ret_text, struct sbx_error *err)
{
        return docker_container_logs(dk(e), id, tail_lines, ret_text, err);
}

static int dk_stats(struct engine *e, const char *id, struct engine_stats *ret, struct sbx_error *err)
{
        struct docker_stats st;
        int r = docker_container_stats(dk(e), id, &st, err);

        if (r < 0)
                return r;
        *ret = (struct engine_stats){st.memory_usage, st.memory_limit, st.pids, st.cpu_total_ns};
        return 0;
}

static int dk_pause(struct engine *e, const char *id, struct sbx_error *err)
{
        return docker_container_pause(dk(e), id, err);
}

static int dk_unpause(struct engine *e, const char *id, struct sbx_error *err)
{
        return docker_container_unpause(dk(e), id, err);
}

struct event_relay {
        engine_event_cb cb;
        void *userdata;
};

static int relay_event(const struct docker_event *ev, void *ud)
{
        struct event_relay *rl = ud;
        struct engine_event out;

        COPY_STR(out.type, ev->type);
        COPY_STR(out.action, ev->action);
        COPY_STR(out.id, ev->id);
        out.exit_code = ev->exit_code;
        out.time_nano = ev->time_nano;
        copy_labels(out.labels, &out.n_labels, ev->labels, ev->n_labels);
        return rl->cb(&out, rl->userdata);
}

static int dk_events_follow(struct engine *e, const char *const *label_filters, const char *const *actions,
                            engine_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                            struct sbx_error *err)
{
        struct event_relay rl = {cb, userdata};

        return docker_events_follow(dk(e), label_filters, actions, relay_event, &rl, stop, reconnect_limit_ms, err);
}

static int dk_network_ensure(struct engine *e, const char *name, const struct engine_label *labels, size_t n_labels,
                             struct sbx_error *err)
{
        const struct docker_label options[] = {{ICC_OPTION, "false"}};
        struct docker_label dl[8];
        char icc[16];
        int r;

        if (n_labels > ELEMENTSOF(dl))
                return sbx_error_set(err, -E2BIG, 0, "too many network labels");
        for (size_t i = 0; i < n_labels; i++)
                dl[i] = (struct docker_label){labels[i].key, labels[i].value};
        r = docker_network_inspect_option(dk(e), name, ICC_OPTION, icc, sizeof(icc), err);
        if (r == -ENOENT) {
                r = docker_network_create(dk(e), name, dl, n_labels, options, ELEMENTSOF(options), err);
                if (r == -EEXIST) /* made by another thread meanwhile */
                        r = 0;
                if (r < 0)
                        sbx_error_prefix(err, "creating the network %s", name);
                return r;
        }
        if (r < 0)
                return r;
        /* someone else's network of that name, or one with inter-container traffic on: never join it */
        if (strcmp(icc, "false") != 0)
                return sbx_error_set(err, -EPERM, 0,
                                     "network %s exists with inter-container traffic allowed; remove it (sandboxd "
                                     "--gc) so sandboxd can make its own",
                                     name);
        return 0;
}

static int dk_network_list(struct engine *e, const char *const *label_filters, char (**ret_names)[128], size_t *ret_n,
                           struct sbx_error *err)
{
        return docker_network_list(dk(e), label_filters, ret_names, ret_n, err);
}

static int dk_network_remove(struct engine *e, const char *name, struct sbx_error *err)
{
        return docker_network_remove(dk(e), name, err);
}

static void exec_spec(const struct engine_exec_spec *in, struct docker_exec_spec *out)
{
        *out = (struct docker_exec_spec){.cmd = in->cmd,
                                         .env = in->env,
                                         .workdir = in->workdir,
                                         .user = in->user,
                                         .attach_stdin = in->attach_stdin};
}

static int dk_exec_create(struct engine *e, const char *cid, const struct engine_exec_spec *spec,
                          char ret_exec_id[ENGINE_ID_STR_MAX], struct sbx_error *err)
{
        struct docker_exec_spec s;

        exec_spec(spec, &s);
        return docker_exec_create(dk(e), cid, &s, ret_exec_id, err);
}

static int dk_exec_attach(struct engine *e, const char *exec_id, struct engine_stream **ret_stream,
                          struct sbx_error *err)
{
        struct docker_stream *s = NULL;
        int r = docker_exec_attach(dk(e), exec_id, &s, err);

        if (r < 0)
                return r;
        *ret_stream = (struct engine_stream *)(void *)s;
        return 0;
}

static int dk_exec_inspect(struct engine *e, const char *exec_id, struct engine_exec_info *ret, struct sbx_error *err)
{
        struct docker_exec_info i;
        int r = docker_exec_inspect(dk(e), exec_id, &i, err);

        if (r < 0)
                return r;
        *ret = (struct engine_exec_info){i.running, i.exit_code, i.pid};
        return 0;
}

static int dk_exec_run(struct engine *e, const char *cid, const struct engine_exec_spec *spec, const void *stdin_data,
                       size_t stdin_len, size_t max_output, int timeout_ms, struct engine_exec_result *ret,
                       struct sbx_error *err)
{
        struct docker_exec_spec s;
        struct docker_exec_result res = {0};
        int r;

        exec_spec(spec, &s);
        r = docker_exec_run(dk(e), cid, &s, stdin_data, stdin_len, max_output, timeout_ms, &res, err);
        if (r < 0)
                return r;
        /* the outputs change hands, not bytes */
        *ret = (struct engine_exec_result){res.exit_code, res.out, res.out_len, res.err, res.err_len, res.truncated};
        return 0;
}

static ssize_t dk_stream_read(struct engine_stream *s, enum engine_stream_kind *ret_kind, void *buf, size_t cap,
                              int timeout_ms)
{
        enum docker_stream_kind k = DOCKER_STREAM_STDOUT;
        ssize_t n = docker_stream_read(ds(s), &k, buf, cap, timeout_ms);

        if (n > 0)
                *ret_kind = (enum engine_stream_kind)k;
        return n;
}

static ssize_t dk_stream_write_some(struct engine_stream *s, const void *buf, size_t len)
{
        return docker_stream_write_some(ds(s), buf, len);
}

static int dk_stream_wait(struct engine_stream *s, bool writable, int timeout_ms)
{
        return docker_stream_wait(ds(s), writable, timeout_ms);
}

static int dk_stream_close_write(struct engine_stream *s)
{
        return docker_stream_close_write(ds(s));
}

static void dk_stream_free(struct engine_stream *s)
{
        docker_stream_free(ds(s));
}

static const struct engine_ops docker_ops = {
        .free = dk_free,
        .connect = dk_connect,
        .version = dk_version,
        .api_errors = dk_api_errors,
        .image_inspect = dk_image_inspect,
        .has_runtime = dk_has_runtime,
        .create = dk_create,
        .start = dk_start,
        .inspect = dk_inspect,
        .stop = dk_stop,
        .remove = dk_remove,
        .list = dk_list,
        .logs = dk_logs,
        .stats = dk_stats,
        .pause = dk_pause,
        .unpause = dk_unpause,
        .events_follow = dk_events_follow,
        .network_ensure = dk_network_ensure,
        .network_list = dk_network_list,
        .network_remove = dk_network_remove,
        .fallback_create = dk_exec_create,
        .fallback_attach = dk_exec_attach,
        .fallback_inspect = dk_exec_inspect,
        .fallback_run = dk_exec_run,
        .stream_read = dk_stream_read,
        .stream_write_some = dk_stream_write_some,
        .stream_wait = dk_stream_wait,
        .stream_close_write = dk_stream_close_write,
        .stream_free = dk_stream_free,
};

int engine_docker_global_init(void)
{
        return docker_global_init();
}

void engine_docker_global_cleanup(void)
{
        docker_global_cleanup();
}

int engine_docker_new(const char *socket_path, long timeout_ms, struct engine **ret, struct sbx_error *err)
{
        struct engine *e = calloc(1, sizeof(*e));

        if (!e)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        e->priv = docker_new(socket_path, timeout_ms);
        if (!e->priv) {
                free(e);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        e->ops = &docker_ops;
        e->name = "docker";
        /* Docker enforces the whole spec and has every operation. */
        /* every one but the memory capture: a container's memory lives in the kernel, not in a file */
        e->capabilities = ((1u << ENGINE_CAP_COUNT) - 1) & ~ENGINE_CAP_MEMORY_CAPTURE;
        *ret = e;
        return 0;
}
