/* container.c — the hardened container spec, workspace directories, the
 * sustained-state start check and the check before each use
 * (container_validate). Every call is a sequence of engine operations
 * (engine.h) made by the calling thread. The one state is the start line:
 * at most CONTAINER_STARTS_MAX creates-and-starts are with the engine at
 * once (CONTAINER_STARTS_PER_USER of one user's while another user waits),
 * the others wait their turn (startline.h). 100 starts handed to dockerd at once on 2 cores took
 * it past 30 s for each of them; in line each takes about a second, and one
 * tenant's burst leaves slots to the others. */
#include "sandboxd/container.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/engine.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/sessspec.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/startline.h"
#include "sandboxd/utf8.h"

/* Open (creating if needed) dir `name` under dirfd without following a
 * symlink, and make it owned by uid with mode. Returns the new fd. */
static int open_or_make_dir(int dirfd, const char *name, uid_t uid, mode_t mode)
{
        int fd;
        struct stat st;

        if (mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
                return -errno;
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || (st.st_uid != uid && fchown(fd, uid, uid) < 0) ||
            ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0)) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

int container_workspace_ensure(const struct sbx_config *cfg, const char *user, const char *session, uid_t uid,
                               char ret_path[SBX_PATH_MAX], struct sbx_error *err)
{
        _cleanup_close_ int root = -1, ws = -1, u = -1, s = -1;
        char path[SBX_PATH_MAX];
        struct sessuid_own_stats own = {0};
        struct stat st;
        int r;

        if (uid == 0)
                return sbx_error_set(err, -EINVAL, 0, "a workspace is never root's");
        if (snprintf(path, sizeof(path), "%s/workspaces/%s/%s", cfg->data_dir, user, session) >= (int)sizeof(path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "workspace path too long");
        if (mkdir(cfg->data_dir, 0711) < 0 && errno != EEXIST)
                return sbx_error_set(err, -errno, 0, "cannot create data_dir %s: %m", cfg->data_dir);
        root = open(cfg->data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open data_dir %s: %m", cfg->data_dir);
        /* Root's and closed: dockerd resolves the bind as root, and no session uid on the
         * host reaches any workspace by path, even one whose tenant opened its mode. */
        ws = open_or_make_dir(root, "workspaces", 0, 0700);
        if (ws >= 0)
                u = open_or_make_dir(ws, user, 0, 0700);
        if (u >= 0) {
                if (mkdirat(u, session, 0700) < 0 && errno != EEXIST)
                        s = -errno;
                else if ((s = openat(u, session, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                        s = -errno;
        }
        if (s < 0) {
                r = ws < 0 ? ws : u < 0 ? u : s;
                return sbx_error_set(err, r, 0, "cannot create workspace %s: %s", path, strerror(-r));
        }
        if (fstat(s, &st) < 0 || ((st.st_mode & 07777) != 0700 && fchmod(s, 0700) < 0))
                return sbx_error_set(err, -errno, 0, "cannot secure workspace %s: %m", path);
        /* A new directory is root's until here; one from before per-session
         * uids (the image's uid 1000) or of an earlier uid moves over whole. */
        r = sessuid_own_tree(s, uid, &own);
        if (own.changed > 0 || own.cut)
                log_ctx(own.cut ? LOG_LEVEL_WARN : LOG_LEVEL_INFO, user, session, NULL,
                        "workspace given to uid %u: %" PRIu64 " of %" PRIu64 " entries changed owner%s", (unsigned)uid,
                        own.changed, own.visited,
                        own.cut ? "; stopped at the walk's bound, the rest keeps its old owner (docs/security.md: A host uid "
                                  "per session)"
                                : "");
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot give workspace %s to uid %u: %s", path, (unsigned)uid,
                                     strerror(-r));
        sbx_strlcpy(ret_path, path, SBX_PATH_MAX);
        return 0;
}

/* ---- the identity files: /etc/passwd and /etc/group naming the session's uid ---- */

#define IDENTITY_DIR "identities"

/* Write {data_dir}/identities/<uid>.<ext> (root's, 0644) unless it already
 * holds text; its path in ret. Written beside and renamed into place. */
static int identity_file(int dfd, const char *dir, uid_t uid, const char *ext, const char *text, char ret[SBX_PATH_MAX])
{
        char name[48], tmp[64], cur[512];
        size_t len = strlen(text);
        _cleanup_close_ int fd = -1;
        ssize_t n;

        snprintf(name, sizeof(name), "%u.%s", (unsigned)uid, ext);
        if (snprintf(ret, SBX_PATH_MAX, "%s/%s", dir, name) >= SBX_PATH_MAX)
                return -ENAMETOOLONG;
        fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && (n = read(fd, cur, sizeof(cur))) == (ssize_t)len && memcmp(cur, text, len) == 0)
                return 0;
        snprintf(tmp, sizeof(tmp), ".%s.new", name);
        (void)unlinkat(dfd, tmp, 0);
        closep(&fd);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (write(fd, text, len) != (ssize_t)len || fchmod(fd, 0644) < 0 || renameat(dfd, tmp, dfd, name) < 0) {
                int r = errno ? -errno : -EIO;
                (void)unlinkat(dfd, tmp, 0);
                return r;
        }
        return 0;
}

int container_identity_ensure(const struct sbx_config *cfg, uid_t uid, char ret_passwd[SBX_PATH_MAX],
                              char ret_group[SBX_PATH_MAX], struct sbx_error *err)
{
        _cleanup_close_ int root = -1, dfd = -1;
        char dir[SBX_PATH_MAX], passwd[256], group[128];
        int r;

        if (snprintf(dir, sizeof(dir), "%s/" IDENTITY_DIR, cfg->data_dir) >= (int)sizeof(dir))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "data_dir too long");
        root = open(cfg->data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open data_dir %s: %m", cfg->data_dir);
        dfd = open_or_make_dir(root, IDENTITY_DIR, 0, 0700);
        if (dfd < 0)
                return sbx_error_set(err, dfd, 0, "cannot create %s: %s", dir, strerror(-dfd));
        /* The image's user is "sandbox" at uid 1000; the session's is the same name at its own uid, so
         * whoami, ~ and the tools that look the user up (getpwuid) keep working. */
        snprintf(passwd, sizeof(passwd),
                 "root:x:0:0:root:/root:/bin/sh\n"
                 "sandbox:x:%u:%u:sandbox:" CONTAINER_WORKSPACE
                 ":/bin/sh\n"
                 "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
                 (unsigned)uid, (unsigned)uid);
        snprintf(group, sizeof(group), "root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n", (unsigned)uid);
        r = identity_file(dfd, dir, uid, "passwd", passwd, ret_passwd);
        if (r == 0)
                r = identity_file(dfd, dir, uid, "group", group, ret_group);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot write the identity files of uid %u in %s: %s", (unsigned)uid,
                                     dir, strerror(-r));
        return 0;
}

void container_identity_drop(const struct sbx_config *cfg, uid_t uid)
{
        char path[SBX_PATH_MAX + 64];

        snprintf(path, sizeof(path), "%s/" IDENTITY_DIR "/%u.passwd", cfg->data_dir, (unsigned)uid);
        (void)unlink(path);
        snprintf(path, sizeof(path), "%s/" IDENTITY_DIR "/%u.group", cfg->data_dir, (unsigned)uid);
        (void)unlink(path);
}

int container_workspace_purge(const struct sbx_config *cfg, const char *user, const char *session,
                              struct sbx_error *err)
{
        char path[SBX_PATH_MAX];
        _cleanup_close_ int u = -1, s = -1;
        struct stat st;
        int r;

        snprintf(path, sizeof(path), "%s/workspaces/%s", cfg->data_dir, user);
        u = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (u < 0)
                return errno == ENOENT ? 0 : sbx_error_set(err, -errno, 0, "cannot open %s: %m", path);
        s = openat(u, session, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (s < 0)
                return errno == ENOENT ? 0 : sbx_error_set(err, -errno, 0, "cannot open workspace: %m");
        r = sbx_remove_tree_at(s);
        if (r >= 0 && unlinkat(u, session, AT_REMOVEDIR) < 0)
                r = -errno;
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot delete workspace %s/%s: %s", path, session, strerror(-r));
        /* Verifiably gone: callers drop what hangs on the workspace (private marks) only after this. */
        if (fstatat(u, session, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
                return sbx_error_set(err, -ENOTEMPTY, 0, "workspace %s/%s is still there after its purge", path,
                                     session);
        return 0;
}

int container_remove(struct engine *e, const char *id, struct sbx_error *err)
{
        int r = engine_remove(e, id, err);
        return r == -ENOENT ? 0 : r;
}

/* Cause from an inspect of a container that is no longer running. */
static void describe_exit(const struct engine_container_info *info, char *buf, size_t size)
{
        if (info->oom_killed)
                snprintf(buf, size, "oom_killed");
        else if (info->error[0]) /* the engine's own reason (a microVM: no exit code to give) */
                snprintf(buf, size, "%s", info->error);
        else
                snprintf(buf, size, "exited with code %d", info->exit_code);
}

int container_validate(struct engine *e, const char *id, const char *network, char *cause, size_t size,
                       char ret_runtime[16], struct sbx_error *err)
{
        struct engine_container_info info;
        int r = engine_inspect(e, id, &info, err);

        if (r == -ENOENT) {
                snprintf(cause, size, "removed");
                return 1;
        }
        if (r < 0)
                return r;
        if (!info.running) {
                describe_exit(&info, cause, size);
                return 1;
        }
        if (strcmp(network, "none") == 0 && info.has_network) {
                snprintf(cause, size, "privacy_ratchet");
                return 1;
        }
        sbx_strlcpy(ret_runtime, info.runtime, 16);
        return 0;
}

/* Startup failed: gather the exit code and log tail into err, then remove. */
static int fail_start(struct engine *e, const char *id, const struct engine_container_info *info, const char *what,
                      struct sbx_error *err)
{
        _cleanup_free_ char *logs = NULL;
        char tail[700] = "";

        if (engine_can(e, ENGINE_CAP_LOGS) && engine_logs(e, id, 20, &logs, NULL) >= 0 && logs) {
                size_t n = strlen(logs);
                /* keep the end: the last lines say why */
                sbx_strlcpy(tail, n > sizeof(tail) - 1 ? logs + n - (sizeof(tail) - 1) : logs, sizeof(tail));
        }
        sbx_error_set(err, -ECHILD, 0, "container %.12s %s (exit code %d%s); last log lines: %s", id, what,
                      info ? info->exit_code : -1, info && info->oom_killed ? ", OOM-killed" : "",
                      tail[0] ? tail : "(none)");
        (void)container_remove(e, id, NULL);
        return -ECHILD;
}

static int sustained_check(struct engine *e, const struct sbx_config *cfg, const char *id, struct sbx_error *err)
{
        struct engine_container_info first = {0}, info;
        int r;

        for (int i = 0; i < cfg->startup_checks; i++) {
                if (i > 0)
                        sbx_sleep_ms(cfg->startup_check_interval_ms);
                r = engine_inspect(e, id, &info, err);
                if (r < 0) {
                        (void)container_remove(e, id, NULL);
                        if (r == -ENOENT)
                                return sbx_error_set(err, -ECHILD, 0, "container %.12s vanished during start", id);
                        sbx_error_prefix(err, "checking container start");
                        return r;
                }
                if (!info.running || info.restarting)
                        return fail_start(e, id, &info, "exited during start", err);
                if (i == 0)
                        first = info;
                else if (info.restart_count != first.restart_count || strcmp(info.started_at, first.started_at) != 0)
                        return fail_start(e, id, &info, "restarted during start", err);
        }
        return 0;
}

/* The limits of the config, as a spec asks for them (the part the engine's
 * capabilities are checked against). */
static void spec_limits(const struct sbx_config *cfg, struct engine_spec *spec, struct engine_tmpfs *tmp)
{
        *tmp = (struct engine_tmpfs){
                .path = "/tmp", .size_bytes = cfg->tmpfs_bytes, .noexec = true, .nosuid = true, .nodev = true};
        spec->tmpfs = tmp;
        spec->n_tmpfs = 1;
        spec->memory_bytes = cfg->memory_bytes;
        spec->memory_swap_bytes = cfg->memory_bytes; /* equal: no swap */
        spec->nano_cpus = cfg->nano_cpus;
        spec->pids_limit = cfg->pids_limit;
        spec->cpu_weight = cfg->cpu_shares;
        spec->oom_score_adj = cfg->oom_score_adj;
        spec->readonly_rootfs = true;
}

unsigned container_unenforced(const struct engine *e, const struct sbx_config *cfg)
{
        struct engine_spec spec = {0};
        struct engine_tmpfs tmp;

        spec_limits(cfg, &spec, &tmp);
        return engine_spec_unenforced(e, &spec);
}

/* What the engine would leave out of this spec: said once per setting, and
 * refused where leaving it out weakens isolation (another runtime than the
 * one asked for, a network shared with other containers). */
static int check_enforced(struct engine *e, const struct engine_spec *spec, struct sbx_error *err)
{
        static unsigned warned; /* the bits said already (atomic) */
        unsigned missing = engine_spec_unenforced(e, spec);
        unsigned refused = missing & (ENGINE_CAP_RUNTIME_CLASS | ENGINE_CAP_ISOLATED_NETWORK);

        if (refused)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine cannot enforce %s", e->name,
                                     engine_cap_name((unsigned)__builtin_ctz(refused)));
        for (unsigned i = 0; i < ENGINE_CAP_COUNT; i++) {
                unsigned bit = 1u << i;
                if ((missing & bit) && !(__atomic_fetch_or(&warned, bit, __ATOMIC_RELAXED) & bit))
                        log_warn("the %s engine cannot enforce %s: containers run without it", e->name,
                                 engine_cap_name(i));
        }
        return 0;
}

/* ---- the start line (startline.h) ---- */

_Static_assert(CONTAINER_STARTS_MAX <= STARTLINE_SLOTS_MAX, "the start line holds CONTAINER_STARTS_MAX");
static struct startline starts =
        STARTLINE_INIT("container starts", CONTAINER_STARTS_MAX, CONTAINER_STARTS_PER_USER, CONTAINER_START_QUEUE_MS);

static int create_and_start(struct engine *e, const struct container_params *p, const struct engine_spec *spec,
                            char id[65], struct sbx_error *err);

int container_create_started(struct engine *e, const struct sbx_config *cfg, const struct container_params *p,
                             char ret_id[65], struct sbx_error *err)
{
        /* HOME is the workspace (what a tenant puts in ~, pip's user site
         * included, is its own and outlives containers); caches (pip,
         * fontconfig, matplotlib's) go to the container's /tmp instead, so
         * the workspace and its snapshots hold only what the tenant wrote */
#define CONTAINER_ENV_HOME "HOME=" CONTAINER_WORKSPACE, "XDG_CACHE_HOME=/tmp/.cache"
        static const char *const env_sealed[] = {CONTAINER_ENV_HOME, NULL};
        /* the runner's egress endpoint; NO_PROXY keeps the container's own loopback direct */
#define PROXY_URL "http://127.0.0.1:3128" /* RP_EGRESS_PORT */
        static const char *const env_proxy[] = {CONTAINER_ENV_HOME,
                                                "HTTP_PROXY=" PROXY_URL,
                                                "HTTPS_PROXY=" PROXY_URL,
                                                "http_proxy=" PROXY_URL,
                                                "https_proxy=" PROXY_URL,
                                                "NO_PROXY=localhost,127.0.0.1",
                                                "no_proxy=localhost,127.0.0.1",
                                                NULL};
#undef CONTAINER_ENV_HOME
#undef PROXY_URL
        _Static_assert(RP_EGRESS_PORT == 3128, "PROXY_URL names the egress port");
        struct engine_label labels[4 + 8 + SESSSPEC_LABELS_MAX];
        char session_label_keys[SESSSPEC_LABELS_MAX][sizeof(CONTAINER_LABEL_PREFIX) + SESSSPEC_LABEL_KEY_MAX];
        _cleanup_(cjson_freep) cJSON *session_labels = NULL;
        char network[160];
        char passwd[SBX_PATH_MAX], group[SBX_PATH_MAX], extra[8][128];
        struct engine_tmpfs tmp;
        struct engine_spec spec = {0};
        size_t n_labels = 0;
        char id[65];
        int r;

        labels[n_labels++] = (struct engine_label){CONTAINER_LABEL_MANAGED, "1"};
        labels[n_labels++] = (struct engine_label){CONTAINER_LABEL_USER, p->user};
        labels[n_labels++] = (struct engine_label){CONTAINER_LABEL_SESSION, p->session};
        labels[n_labels++] = (struct engine_label){CONTAINER_LABEL_INSTANCE, cfg->instance};
        for (size_t i = 0; p->extra_labels && p->extra_labels[i] && i < ELEMENTSOF(extra); i++) {
                char *eq;
                sbx_strlcpy(extra[i], p->extra_labels[i], sizeof(extra[i]));
                eq = strchr(extra[i], '=');
                if (!eq)
                        continue;
                *eq = '\0';
                labels[n_labels++] = (struct engine_label){extra[i], eq + 1};
        }

        /* The session's labels, checked when they were given (sessspec.h): values are
         * [A-Za-z0-9_.-], keys a DNS-style name, so each is a safe Docker label. */
        session_labels = p->labels_json ? cJSON_Parse(p->labels_json) : NULL;
        {
                const cJSON *it;
                size_t k = 0;
                cJSON_ArrayForEach(it, session_labels) {
                        if (k == SESSSPEC_LABELS_MAX || !sessspec_label_key_valid(it->string) || !cJSON_IsString(it) ||
                            !sessspec_label_value_valid(it->valuestring))
                                continue;
                        snprintf(session_label_keys[k], sizeof(session_label_keys[k]), CONTAINER_LABEL_PREFIX "%s",
                                 it->string);
                        labels[n_labels++] = (struct engine_label){session_label_keys[k], it->valuestring};
                        k++;
                }
        }

        /* The session's own uid, never root and never one shared with another session (sessuid.h). */
        if (p->uid == 0)
                return sbx_error_set(err, -EINVAL, 0, "a sandbox container never runs as root");
        spec.image = p->image;
        spec.uid = p->uid;
        spec.gid = p->uid;
        spec_limits(cfg, &spec, &tmp);
        if (p->memory_bytes > 0) /* the session's own (sessspec.h); still no swap */
                spec.memory_bytes = spec.memory_swap_bytes = p->memory_bytes;
        if (p->nano_cpus > 0)
                spec.nano_cpus = p->nano_cpus;
        spec.workspace = p->workspace;
        spec.workspace_claim = p->workspace_claim;
        if (p->runner_binary && p->runner_dir) {
                spec.runner_binary = p->runner_binary;
                spec.session_dir = p->runner_dir;
        }
        spec.runtime_class = p->runtime;
        spec.env = p->egress_proxy ? env_proxy : env_sealed;
        spec.workdir = CONTAINER_WORKSPACE;
        spec.hostname = "sandbox";
        spec.labels = labels;
        spec.n_labels = n_labels;
        /* No port is published: the gateway listens on the session's block
         * and forwards through the runner (gateway.h). "bridge" is never
         * Docker's default bridge but sandboxd's own, inter-container traffic off. */
        if (strcmp(p->network_mode, "bridge") == 0) {
                container_network_name(cfg, network, sizeof(network));
                spec.network = network;
        }
        r = check_enforced(e, &spec, err);
        if (r < 0)
                return r;
        r = container_identity_ensure(cfg, p->uid, passwd, group, err);
        if (r < 0)
                return r;
        spec.passwd_file = passwd;
        spec.group_file = group;
        if (spec.network) {
                r = container_network_ensure(e, cfg, err);
                if (r < 0)
                        return r;
        }

        r = startline_take(&starts, p->user, NULL, err);
        if (r < 0)
                return r;
        r = create_and_start(e, p, &spec, id, err);
        startline_give(&starts, p->user);
        if (r < 0)
                return r;
        r = sustained_check(e, cfg, id, err);
        if (r < 0)
                return r;
        memcpy(ret_id, id, 65);
        return 0;
}

/* The engine's part of container_create_started, in the start line. */
static int create_and_start(struct engine *e, const struct container_params *p, const struct engine_spec *spec,
                            char id[65], struct sbx_error *err)
{
        struct sbx_error er = {0};
        int r = engine_create(e, spec, id, &er);

        if (err)
                *err = er;
        if (r == -ENOENT && er.http_status == 404)
                return sbx_error_set(err, -ENOENT, 404,
                                     "image '%s' does not exist on the %s engine; build it with "
                                     "scripts/build-images.sh",
                                     p->image, e->name);
        if (r < 0) {
                sbx_error_prefix(err, "creating container");
                return r;
        }
        if (p->placed && e->places) {
                r = p->placed(id, p->placed_ud, err);
                if (r < 0) {
                        (void)container_remove(e, id, NULL);
                        return r;
                }
        }
        r = engine_start(e, id, err);
        if (r < 0) {
                sbx_error_prefix(err, "starting container %.12s", id);
                (void)container_remove(e, id, NULL);
                return r;
        }
        return 0;
}

void container_network_name(const struct sbx_config *cfg, char *ret, size_t size)
{
        snprintf(ret, size, "sandboxd-%s", cfg->instance);
}

int container_network_ensure(struct engine *e, const struct sbx_config *cfg, struct sbx_error *err)
{
        const struct engine_label labels[] = {{CONTAINER_LABEL_MANAGED, "1"},
                                              {CONTAINER_LABEL_INSTANCE, cfg->instance}};
        char name[160];

        container_network_name(cfg, name, sizeof(name));
        return engine_network_ensure(e, name, labels, ELEMENTSOF(labels), err);
}
