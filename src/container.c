/* container.c — the hardened container spec, workspace directories and the
 * sustained-state start check. Stateless: no locks; every call is a
 * sequence of Docker requests made by the calling thread. */
#include "sandboxd/container.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/docker.h"

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

int container_workspace_ensure(const struct sbx_config *cfg, const char *user, const char *session,
                               char ret_path[SBX_PATH_MAX], struct sbx_error *err)
{
        _cleanup_close_ int root = -1, ws = -1, u = -1, s = -1;
        char path[SBX_PATH_MAX];

        if (snprintf(path, sizeof(path), "%s/workspaces/%s/%s", cfg->data_dir, user, session) >= (int)sizeof(path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "workspace path too long");
        if (mkdir(cfg->data_dir, 0711) < 0 && errno != EEXIST)
                return sbx_error_set(err, -errno, 0, "cannot create data_dir %s: %m", cfg->data_dir);
        root = open(cfg->data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open data_dir %s: %m", cfg->data_dir);
        ws = open_or_make_dir(root, "workspaces", 0, 0711);
        if (ws >= 0)
                u = open_or_make_dir(ws, user, 0, 0711);
        if (u >= 0)
                s = open_or_make_dir(u, session, (uid_t)cfg->sandbox_uid, 0700);
        if (s < 0) {
                int r = ws < 0 ? ws : u < 0 ? u : s;
                return sbx_error_set(err, r, 0, "cannot create workspace %s: %s", path, strerror(-r));
        }
        sbx_strlcpy(ret_path, path, SBX_PATH_MAX);
        return 0;
}

/* Remove everything under dirfd, never following symlinks: entries are
 * unlinked by name relative to an fd opened with O_NOFOLLOW. */
static int remove_tree_at(int dirfd, int depth)
{
        DIR *dir;
        struct dirent *de;
        int r = 0, fd;

        if (depth > 256)
                return -ELOOP;
        fd = dup(dirfd);
        if (fd < 0)
                return -errno;
        dir = fdopendir(fd);
        if (!dir) {
                close(fd);
                return -errno;
        }
        while ((de = readdir(dir))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (unlinkat(dirfd, de->d_name, 0) == 0)
                        continue;
                if (errno == EISDIR || errno == EPERM) {
                        int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0) {
                                r = -errno;
                                continue;
                        }
                        int k = remove_tree_at(sub, depth + 1);
                        close(sub);
                        if (k < 0)
                                r = k;
                        else if (unlinkat(dirfd, de->d_name, AT_REMOVEDIR) < 0)
                                r = -errno;
                } else if (errno != ENOENT) {
                        r = -errno;
                }
        }
        closedir(dir);
        return r;
}

int container_workspace_purge(const struct sbx_config *cfg, const char *user, const char *session,
                              struct sbx_error *err)
{
        char path[SBX_PATH_MAX];
        _cleanup_close_ int u = -1, s = -1;
        int r;

        snprintf(path, sizeof(path), "%s/workspaces/%s", cfg->data_dir, user);
        u = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (u < 0)
                return errno == ENOENT ? 0 : sbx_error_set(err, -errno, 0, "cannot open %s: %m", path);
        s = openat(u, session, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (s < 0)
                return errno == ENOENT ? 0 : sbx_error_set(err, -errno, 0, "cannot open workspace: %m");
        r = remove_tree_at(s, 0);
        if (r >= 0 && unlinkat(u, session, AT_REMOVEDIR) < 0)
                r = -errno;
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot delete workspace %s/%s: %s", path, session, strerror(-r));
        return 0;
}

int container_remove(struct docker *d, const char *id, struct sbx_error *err)
{
        int r = docker_container_remove(d, id, true, err);
        return r == -ENOENT ? 0 : r;
}

/* Startup failed: gather the exit code and log tail into err, then remove. */
static int fail_start(struct docker *d, const char *id, const struct docker_container_info *info,
                      const char *what, struct sbx_error *err)
{
        _cleanup_free_ char *logs = NULL;
        char tail[700] = "";

        if (docker_container_logs(d, id, 20, &logs, NULL) >= 0 && logs) {
                size_t n = strlen(logs);
                /* keep the end: the last lines say why */
                sbx_strlcpy(tail, n > sizeof(tail) - 1 ? logs + n - (sizeof(tail) - 1) : logs, sizeof(tail));
        }
        sbx_error_set(err, -ECHILD, 0, "container %.12s %s (exit code %d%s); last log lines: %s", id, what,
                      info ? info->exit_code : -1, info && info->oom_killed ? ", OOM-killed" : "",
                      tail[0] ? tail : "(none)");
        (void)container_remove(d, id, NULL);
        return -ECHILD;
}

static int sustained_check(struct docker *d, const struct sbx_config *cfg, const char *id, struct sbx_error *err)
{
        struct docker_container_info first = {0}, info;
        int r;

        for (int i = 0; i < cfg->startup_checks; i++) {
                if (i > 0)
                        sbx_sleep_ms(cfg->startup_check_interval_ms);
                r = docker_container_inspect(d, id, &info, err);
                if (r < 0) {
                        (void)container_remove(d, id, NULL);
                        if (r == -ENOENT)
                                return sbx_error_set(err, -ECHILD, 0, "container %.12s vanished during start", id);
                        sbx_error_prefix(err, "checking container start");
                        return r;
                }
                if (!info.running || info.restarting)
                        return fail_start(d, id, &info, "exited during start", err);
                if (i == 0)
                        first = info;
                else if (info.restart_count != first.restart_count || strcmp(info.started_at, first.started_at) != 0)
                        return fail_start(d, id, &info, "restarted during start", err);
        }
        return 0;
}

int container_create_started(struct docker *d, const struct sbx_config *cfg, const struct container_params *p,
                             char ret_id[65], struct sbx_error *err)
{
        static const char *const cap_drop[] = {"ALL", NULL};
        static const char *const security_opt[] = {"no-new-privileges:true", NULL};
        static const char *const env[] = {"HOME=" CONTAINER_WORKSPACE, NULL};
        struct docker_label labels[4 + 8];
        struct docker_port_binding *ports = NULL;
        const char *binds[2] = {NULL, NULL};
        const char *tmpfs[2] = {NULL, NULL};
        char bind[SBX_PATH_MAX + 32], tmpfs_opt[128], user[32], extra[8][128];
        struct docker_container_spec spec = {0};
        bool networked = strcmp(p->network_mode, "none") != 0;
        size_t n_labels = 0;
        char id[65];
        int r;

        labels[n_labels++] = (struct docker_label){CONTAINER_LABEL_MANAGED, "1"};
        labels[n_labels++] = (struct docker_label){CONTAINER_LABEL_USER, p->user};
        labels[n_labels++] = (struct docker_label){CONTAINER_LABEL_SESSION, p->session};
        labels[n_labels++] = (struct docker_label){CONTAINER_LABEL_INSTANCE, cfg->instance};
        for (size_t i = 0; p->extra_labels && p->extra_labels[i] && i < ELEMENTSOF(extra); i++) {
                char *eq;
                sbx_strlcpy(extra[i], p->extra_labels[i], sizeof(extra[i]));
                eq = strchr(extra[i], '=');
                if (!eq)
                        continue;
                *eq = '\0';
                labels[n_labels++] = (struct docker_label){extra[i], eq + 1};
        }

        snprintf(bind, sizeof(bind), "%s:" CONTAINER_WORKSPACE ":rw", p->workspace);
        binds[0] = bind;
        snprintf(tmpfs_opt, sizeof(tmpfs_opt), "/tmp:rw,noexec,nosuid,nodev,size=%" PRId64, cfg->tmpfs_bytes);
        tmpfs[0] = tmpfs_opt;
        snprintf(user, sizeof(user), "%d:%d", cfg->sandbox_uid, cfg->sandbox_uid);

        /* Without a network there is nothing to publish on: the block stays
         * reserved for the session but is not bound (see README, privacy). */
        if (networked && p->n_ports > 0) {
                ports = calloc(p->n_ports, sizeof(*ports));
                if (!ports)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                for (size_t i = 0; i < p->n_ports; i++)
                        ports[i] = (struct docker_port_binding){container_port(cfg, i), p->host_ports[i],
                                                                cfg->publish_ip};
        }

        spec.image = p->image;
        spec.user = user;
        spec.env = env;
        spec.workdir = CONTAINER_WORKSPACE;
        spec.hostname = "sandbox";
        spec.binds = binds;
        spec.tmpfs = tmpfs;
        spec.cap_drop = cap_drop;
        spec.security_opt = security_opt; /* Docker's default seccomp profile stays on: we never pass seccomp= */
        spec.ports = ports;
        spec.n_ports = ports ? p->n_ports : 0;
        spec.labels = labels;
        spec.n_labels = n_labels;
        spec.memory = cfg->memory_bytes;
        spec.memory_swap = cfg->memory_bytes;
        spec.nano_cpus = cfg->nano_cpus;
        spec.pids_limit = cfg->pids_limit;
        spec.cpu_shares = cfg->cpu_shares;
        spec.oom_score_adj = cfg->oom_score_adj;
        spec.readonly_rootfs = true;
        spec.init = true;
        spec.privileged = false;
        spec.network_mode = p->network_mode;

        struct sbx_error e = {0};
        r = docker_container_create(d, &spec, id, &e);
        free(ports);
        if (err)
                *err = e;
        if (r == -ENOENT && e.http_status == 404)
                return sbx_error_set(err, -ENOENT, 404,
                                     "image '%s' does not exist on the Docker engine; build it with "
                                     "scripts/build-images.sh",
                                     p->image);
        if (r < 0) {
                sbx_error_prefix(err, "creating container");
                return r;
        }
        r = docker_container_start(d, id, err);
        if (r < 0) {
                sbx_error_prefix(err, "starting container %.12s", id);
                (void)container_remove(d, id, NULL);
                return r;
        }
        r = sustained_check(d, cfg, id, err);
        if (r < 0)
                return r;
        memcpy(ret_id, id, 65);
        return 0;
}
