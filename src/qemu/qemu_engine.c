/* qemu_engine.c — the microVM engine (engine_qemu.h): a VM per container,
 * QEMU -M microvm, its state in files under {data_dir}/vm so that any
 * thread, a restarted daemon and --gc find it. The VM's process, its jail
 * and QMP are qemu_vm.c; this file is the ops table and the state.
 *
 * Locks: q->lock guards the state files (each is replaced whole) and
 * q->runner; it is never held across a wait for QEMU or the guest. */
#include "sandboxd/engine_qemu.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qemu_internal.h"
#include "sandboxd/container.h"
#include "sandboxd/log.h"

static struct qemu *Q(struct engine *e)
{
        return e->priv;
}

bool engine_qemu_id(const char *id)
{
        return id && strncmp(id, ENGINE_QEMU_ID_PREFIX, strlen(ENGINE_QEMU_ID_PREFIX)) == 0;
}

/* An id we made: the prefix and 32 lower-case hex digits, nothing a path could use. */
static bool id_valid(const char *id)
{
        size_t n = strlen(ENGINE_QEMU_ID_PREFIX);

        if (!engine_qemu_id(id) || strlen(id) != n + 32)
                return false;
        for (const char *p = id + n; *p; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        return true;
}

int qemu_vm_path(const struct qemu *q, const char *id, const char *name, char *buf, size_t size)
{
        int n = name ? snprintf(buf, size, "%s/%s/%s", q->dir, id, name) : snprintf(buf, size, "%s/%s", q->dir, id);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* ---- the state file ---- */

static int state_load_locked(struct qemu *q, const char *id, struct qemu_vm *ret)
{
        char path[SBX_PATH_MAX], buf[16384];
        _cleanup_close_ int fd = -1;
        ssize_t n;

        if (!id_valid(id))
                return -ENOENT;
        if (qemu_vm_path(q, id, "state", path, sizeof(path)) < 0)
                return -ENOENT;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return errno == ENOENT || errno == ENOTDIR ? -ENOENT : -errno;
        n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return -EPROTO;
        buf[n] = '\0';
        cJSON *j = cJSON_Parse(buf);
        if (!j)
                return -EPROTO;
        *ret = (struct qemu_vm){0};
        sbx_strlcpy(ret->id, id, sizeof(ret->id));
#define NUM(k) (cJSON_IsNumber(cJSON_GetObjectItem(j, k)) ? cJSON_GetObjectItem(j, k)->valuedouble : 0)
#define STR(k) (cJSON_IsString(cJSON_GetObjectItem(j, k)) ? cJSON_GetObjectItem(j, k)->valuestring : "")
        ret->uid = (uid_t)NUM("uid");
        ret->gid = (gid_t)NUM("gid");
        ret->memory = (int64_t)NUM("memory");
        ret->nano_cpus = (int64_t)NUM("nano_cpus");
        ret->pids_limit = (int64_t)NUM("pids_limit");
        ret->pid = (pid_t)NUM("pid");
        ret->pid_start = (uint64_t)NUM("pid_start");
        ret->created = (int64_t)NUM("created");
        ret->paused = cJSON_IsTrue(cJSON_GetObjectItem(j, "paused"));
        ret->ram_private = cJSON_IsTrue(cJSON_GetObjectItem(j, "ram_private"));
        ret->saved = cJSON_IsTrue(cJSON_GetObjectItem(j, "saved"));
        sbx_strlcpy(ret->incoming, STR("incoming"), sizeof(ret->incoming));
        ret->listening = strcmp(STR("channel"), "listen") == 0;
        ret->net = cJSON_IsTrue(cJSON_GetObjectItem(j, "net"));
        ret->egress = cJSON_IsTrue(cJSON_GetObjectItem(j, "egress"));
        sbx_strlcpy(ret->started_at, STR("started_at"), sizeof(ret->started_at));
        sbx_strlcpy(ret->finished_at, STR("finished_at"), sizeof(ret->finished_at));
        sbx_strlcpy(ret->disk, STR("disk"), sizeof(ret->disk));
        sbx_strlcpy(ret->cgroup_note, STR("cgroup_note"), sizeof(ret->cgroup_note));
        sbx_strlcpy(ret->rootfs, STR("rootfs"), sizeof(ret->rootfs));
        sbx_strlcpy(ret->rootfs_note, STR("rootfs_note"), sizeof(ret->rootfs_note));
#undef NUM
#undef STR
        cJSON *l, *labels = cJSON_GetObjectItem(j, "labels");
        cJSON_ArrayForEach(l, labels) {
                if (ret->n_labels == ENGINE_MAX_LABELS || !cJSON_IsString(l))
                        break;
                sbx_strlcpy(ret->labels[ret->n_labels].key, l->string, sizeof(ret->labels[0].key));
                sbx_strlcpy(ret->labels[ret->n_labels].value, l->valuestring, sizeof(ret->labels[0].value));
                ret->n_labels++;
        }
        cJSON_Delete(j);
        return 0;
}

static int state_save_locked(struct qemu *q, const struct qemu_vm *vm)
{
        char path[SBX_PATH_MAX], tmp[SBX_PATH_MAX];
        cJSON *j = cJSON_CreateObject(), *labels = cJSON_AddObjectToObject(j, "labels");
        _cleanup_free_ char *text = NULL;
        int fd, r = 0;

        cJSON_AddNumberToObject(j, "uid", vm->uid);
        cJSON_AddNumberToObject(j, "gid", vm->gid);
        cJSON_AddNumberToObject(j, "memory", (double)vm->memory);
        cJSON_AddNumberToObject(j, "nano_cpus", (double)vm->nano_cpus);
        cJSON_AddNumberToObject(j, "pids_limit", (double)vm->pids_limit);
        cJSON_AddNumberToObject(j, "pid", vm->pid);
        cJSON_AddNumberToObject(j, "pid_start", (double)vm->pid_start);
        cJSON_AddNumberToObject(j, "created", (double)vm->created);
        cJSON_AddBoolToObject(j, "paused", vm->paused);
        cJSON_AddBoolToObject(j, "ram_private", vm->ram_private);
        cJSON_AddBoolToObject(j, "saved", vm->saved);
        cJSON_AddStringToObject(j, "incoming", vm->incoming);
        if (vm->listening) /* runner.sock in the VM's directory, QMP at run/qmp.sock */
                cJSON_AddStringToObject(j, "channel", "listen");
        cJSON_AddBoolToObject(j, "net", vm->net);
        cJSON_AddBoolToObject(j, "egress", vm->egress);
        cJSON_AddStringToObject(j, "started_at", vm->started_at);
        cJSON_AddStringToObject(j, "finished_at", vm->finished_at);
        cJSON_AddStringToObject(j, "disk", vm->disk);
        if (vm->cgroup_note[0])
                cJSON_AddStringToObject(j, "cgroup_note", vm->cgroup_note);
        if (vm->rootfs[0])
                cJSON_AddStringToObject(j, "rootfs", vm->rootfs);
        if (vm->rootfs_note[0])
                cJSON_AddStringToObject(j, "rootfs_note", vm->rootfs_note);
        for (size_t i = 0; i < vm->n_labels; i++)
                cJSON_AddStringToObject(labels, vm->labels[i].key, vm->labels[i].value);
        text = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!text)
                return -ENOMEM;
        if (qemu_vm_path(q, vm->id, "state", path, sizeof(path)) < 0 ||
            qemu_vm_path(q, vm->id, "state.tmp", tmp, sizeof(tmp)) < 0)
                return -ENAMETOOLONG;
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        size_t len = strlen(text);
        if (write(fd, text, len) != (ssize_t)len)
                r = -EIO;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                (void)unlink(tmp);
        return r;
}

int qemu_state_load(struct qemu *q, const char *id, struct qemu_vm *ret)
{
        pthread_mutex_lock(&q->lock);
        int r = state_load_locked(q, id, ret);
        pthread_mutex_unlock(&q->lock);
        return r;
}

int qemu_state_save(struct qemu *q, const struct qemu_vm *vm)
{
        pthread_mutex_lock(&q->lock);
        int r = state_save_locked(q, vm);
        pthread_mutex_unlock(&q->lock);
        return r;
}

const char *qemu_vm_label(const struct qemu_vm *vm, const char *key)
{
        return engine_label_get(vm->labels, vm->n_labels, key);
}

bool qemu_booted(struct qemu *q, const char *id)
{
        bool found = false;

        pthread_mutex_lock(&q->lock);
        for (size_t i = 0; i < q->n_booted && !found; i++)
                found = strcmp(q->booted[i], id) == 0;
        pthread_mutex_unlock(&q->lock);
        return found;
}

void qemu_booted_set(struct qemu *q, const char *id, bool on)
{
        pthread_mutex_lock(&q->lock);
        for (size_t i = 0; i < q->n_booted; i++)
                if (strcmp(q->booted[i], id) == 0) {
                        if (!on)
                                memcpy(q->booted[i], q->booted[--q->n_booted], ENGINE_ID_STR_MAX);
                        goto out;
                }
        if (on && q->n_booted == q->cap_booted) {
                size_t cap = q->cap_booted ? 2 * q->cap_booted : 16;
                void *p = realloc(q->booted, cap * ENGINE_ID_STR_MAX);
                if (!p)
                        goto out; /* then it reads as a VM of an earlier daemon: removed and made again */
                q->booted = p;
                q->cap_booted = cap;
        }
        if (on)
                sbx_strlcpy(q->booted[q->n_booted++], id, ENGINE_ID_STR_MAX);
out:
        pthread_mutex_unlock(&q->lock);
}

/* A VM runs for this daemon when it is alive and its runner channel is this daemon's hub's:
 * one this engine booted, or one an earlier daemon booted whose channel listens
 * (vm->listening), dialled again here (qemu_vm_adopt). A paused one is dialled when it is
 * resumed (its runner cannot answer while the guest is stopped). A live VM booted with a
 * socketpair by an earlier version, or whose runner does not answer, reads as exited, and
 * reconciliation marks its session for a new one (docs/microvm.md). why: the reason then. */
static bool serving(struct qemu *q, const struct qemu_vm *vm, bool *ret_alive, struct sbx_error *why)
{
        *ret_alive = qemu_vm_alive(vm);
        if (!*ret_alive)
                return false;
        if (qemu_booted(q, vm->id))
                return true;
        if (!vm->listening) {
                if (why)
                        sbx_error_set(why, -ENOTCONN, 0, "its runner channel ended with the daemon that booted it");
                return false;
        }
        if (vm->paused)
                return true;
        return qemu_vm_adopt(q, vm, why) == 0;
}

/* ---- the ops ---- */

static void q_free(struct engine *e)
{
        struct qemu *q = Q(e);

        qemu_net_stop(q); /* their threads read q->runner */
        qemu_mem_free(q);
        pthread_mutex_destroy(&q->lock);
        pthread_mutex_destroy(&q->adopt_lock);
        pthread_mutex_destroy(&q->net_lock);
        free(q->booted);
        free(q);
        free(e);
}

static int q_version(struct engine *e, struct engine_version *ret, struct sbx_error *err)
{
        (void)err;
        *ret = (struct engine_version){0};
        sbx_strlcpy(ret->engine, "qemu", sizeof(ret->engine));
        sbx_strlcpy(ret->version, Q(e)->kvm ? "microvm (kvm)" : "microvm (tcg)", sizeof(ret->version));
        return 0;
}

static int q_image_inspect(struct engine *e, const char *image, struct engine_image_info *ret, struct sbx_error *err)
{
        (void)e;
        (void)image;
        (void)ret;
        return sbx_error_set(err, -ENOENT, 0, "a microVM has no images: its guest is scripts/build-vm.sh's");
}

static int q_has_runtime(struct engine *e, const char *name, bool *ret, struct sbx_error *err)
{
        (void)e;
        (void)err;
        *ret = name && strcmp(name, ENGINE_QEMU_RUNTIME) == 0;
        return 0;
}

static int q_create(struct engine *e, const struct engine_spec *spec, char ret_id[ENGINE_ID_STR_MAX],
                    struct sbx_error *err)
{
        struct qemu *q = Q(e);
        struct qemu_vm vm = {0};
        uint8_t rnd[16];
        char path[SBX_PATH_MAX];
        int r;

        if (!spec->runner_binary || !spec->session_dir)
                return sbx_error_set(err, -EINVAL, 0, "a microVM needs the runner (runner_binary)");
        if (spec->uid == 0 || spec->gid == 0)
                return sbx_error_set(err, -EINVAL, 0, "a microVM never runs as root");
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                return sbx_error_set(err, -EIO, 0, "no random id: %m");
        r = snprintf(vm.id, sizeof(vm.id), "%s", ENGINE_QEMU_ID_PREFIX);
        for (size_t i = 0; i < sizeof(rnd); i++)
                r += snprintf(vm.id + r, sizeof(vm.id) - (size_t)r, "%02x", rnd[i]);
        vm.uid = spec->uid;
        vm.gid = spec->gid;
        vm.memory = spec->memory_bytes;
        vm.nano_cpus = spec->nano_cpus;
        vm.pids_limit = spec->pids_limit;
        vm.created = sbx_wall_ms() / 1000;
        /* a session with egress has the proxy variables (container.c): its guest's runner sets them */
        for (size_t i = 0; spec->env && spec->env[i]; i++)
                if (strncmp(spec->env[i], "HTTP_PROXY=", 11) == 0)
                        vm.egress = true;
        for (size_t i = 0; i < spec->n_labels && vm.n_labels < ENGINE_MAX_LABELS; i++) {
                sbx_strlcpy(vm.labels[vm.n_labels].key, spec->labels[i].key, sizeof(vm.labels[0].key));
                sbx_strlcpy(vm.labels[vm.n_labels].value, spec->labels[i].value, sizeof(vm.labels[0].value));
                vm.n_labels++;
        }
        if ((mkdir(q->dir, 0711) < 0 && errno != EEXIST) || (mkdir(q->disks, 0711) < 0 && errno != EEXIST))
                return sbx_error_set(err, -errno, 0, "cannot make %s: %m", q->disks);
        if (qemu_vm_path(q, vm.id, NULL, path, sizeof(path)) < 0 || mkdir(path, 0711) < 0)
                return sbx_error_set(err, -EIO, 0, "cannot make the VM's directory under %s: %m", q->dir);
        r = qemu_mem_claim(q, &vm, err); /* a session made from a memory snapshot: its disk first */
        /* the image's root file system (qemu_rootfs.c; a memory snapshot's VM has the
         * snapshot's); without it the busybox guest, saying why */
        if (r == 0 && !vm.incoming[0] && spec->image && spec->image[0]) {
                struct sbx_error rerr = {0};
                if (qemu_rootfs_get(q, spec->image, qemu_vm_label(&vm, CONTAINER_LABEL_INSTANCE), vm.rootfs, &rerr) <
                    0) {
                        snprintf(vm.rootfs_note, sizeof(vm.rootfs_note), "no root file system from image %s: %s",
                                 spec->image, rerr.msg);
                        log_warn("microvm: VM %s boots the busybox guest: %s", vm.id, vm.rootfs_note);
                }
        }
        if (r == 0)
                r = qemu_vm_prepare(q, &vm, spec, err);
        if (r == 0)
                r = qemu_state_save(q, &vm);
        if (r < 0) {
                qemu_vm_dir_remove(q, vm.id);
                return err && err->msg[0] ? r : sbx_error_set(err, r, 0, "cannot prepare the VM: %s", strerror(-r));
        }
        memcpy(ret_id, vm.id, sizeof(vm.id));
        return 0;
}

static int q_start(struct engine *e, const char *id, struct sbx_error *err)
{
        struct qemu_vm vm;
        int r = qemu_state_load(Q(e), id, &vm);

        if (r < 0)
                return sbx_error_set(err, r, 0, "no VM %s", id);
        if (qemu_vm_alive(&vm)) {
                struct sbx_error why = {0};
                bool alive;
                return serving(Q(e), &vm, &alive, &why) || !alive
                               ? 0
                               : sbx_error_set(err, -EBUSY, 409,
                                               "VM %s was booted by an earlier daemon (%s): remove it", id, why.msg);
        }
        return qemu_vm_boot(Q(e), &vm, err);
}

static int q_inspect(struct engine *e, const char *id, struct engine_container_info *ret, struct sbx_error *err)
{
        struct qemu_vm vm;
        int r = qemu_state_load(Q(e), id, &vm);
        struct sbx_error why = {0};
        bool alive, running;

        if (r < 0)
                return sbx_error_set(err, r, 0, "no VM %s", id);
        running = serving(Q(e), &vm, &alive, &why) || vm.saved; /* paused to disk: QEMU comes back at unpause */
        *ret = (struct engine_container_info){0};
        if (alive && !running)
                sbx_strlcpy(ret->error, why.msg, sizeof(ret->error));
        if (!alive && vm.pid && !vm.saved) {
                /* QEMU is not this daemon's child: no exit status; the cgroup and the console say why */
                _cleanup_free_ char *console = NULL;
                ret->oom_killed = qemu_cgroup_oom_killed(vm.id);
                if (qemu_vm_console(Q(e), &vm, 40, &console, NULL) == 0 && strstr(console, "Kernel panic"))
                        sbx_strlcpy(ret->error, "the guest's kernel panicked", sizeof(ret->error));
                else
                        sbx_strlcpy(ret->error, "QEMU ended (killed, or its guest powered off)", sizeof(ret->error));
        }
        alive = running;
        sbx_strlcpy(ret->id, vm.id, sizeof(ret->id));
        sbx_strlcpy(ret->name, vm.id, sizeof(ret->name));
        sbx_strlcpy(ret->image, "microvm", sizeof(ret->image));
        sbx_strlcpy(ret->status,
                    alive    ? (vm.paused ? "paused" : "running")
                    : vm.pid ? "exited"
                             : "created",
                    sizeof(ret->status));
        ret->running = alive;
        ret->pid = alive && !vm.saved ? vm.pid : 0;
        sbx_strlcpy(ret->started_at, vm.started_at, sizeof(ret->started_at));
        sbx_strlcpy(ret->finished_at, vm.finished_at, sizeof(ret->finished_at));
        sbx_strlcpy(ret->network_mode, "none", sizeof(ret->network_mode));
        sbx_strlcpy(ret->runtime, ENGINE_QEMU_RUNTIME, sizeof(ret->runtime));
        ret->readonly_rootfs = true; /* the initramfs: root's files, the tenant's uid writes none */
        ret->init = true;
        ret->memory = ret->memory_swap = vm.memory;
        ret->nano_cpus = vm.nano_cpus;
        memcpy(ret->labels, vm.labels, sizeof(vm.labels));
        ret->n_labels = vm.n_labels;
        return 0;
}

static int q_stop(struct engine *e, const char *id, int timeout_s, struct sbx_error *err)
{
        struct qemu_vm vm;
        int r = qemu_state_load(Q(e), id, &vm);

        if (r < 0)
                return sbx_error_set(err, r, 0, "no VM %s", id);
        if (vm.saved)
                qemu_mem_saved_drop(Q(e), &vm); /* stopped: its processes end, never to be resumed */
        return qemu_vm_kill(Q(e), &vm, timeout_s * 1000, err);
}

static int q_remove(struct engine *e, const char *id, struct sbx_error *err)
{
        struct qemu_vm vm;
        int r = qemu_state_load(Q(e), id, &vm);

        if (r == -ENOENT)
                return sbx_error_set(err, -ENOENT, 404, "no VM %s", id);
        if (r == 0) {
                r = qemu_vm_kill(Q(e), &vm, 0, err);
                if (r < 0)
                        return r;
        }
        qemu_net_detach(Q(e), id);
        qemu_vm_dir_remove(Q(e), id); /* a state file that does not parse goes too */
        qemu_mem_ram_drop(Q(e), id);
        qemu_booted_set(Q(e), id, false);
        qemu_mem_sweep(Q(e));
        return 0;
}

static bool filters_pass(const struct qemu_vm *vm, const char *const *filters)
{
        for (size_t i = 0; filters && filters[i]; i++) {
                const char *eq = strchr(filters[i], '=');
                char key[64];

                if (!eq) {
                        if (!qemu_vm_label(vm, filters[i]))
                                return false;
                        continue;
                }
                if ((size_t)(eq - filters[i]) >= sizeof(key))
                        return false;
                memcpy(key, filters[i], (size_t)(eq - filters[i]));
                key[eq - filters[i]] = '\0';
                const char *v = qemu_vm_label(vm, key);
                if (!v || strcmp(v, eq + 1) != 0)
                        return false;
        }
        return true;
}

static int q_list(struct engine *e, const char *const *label_filters, bool all,
                  struct engine_container_summary **ret_list, size_t *ret_n, struct sbx_error *err)
{
        struct qemu *q = Q(e);
        struct engine_container_summary *list = NULL;
        size_t n = 0, cap = 0;
        DIR *d = opendir(q->dir);
        struct dirent *de;

        *ret_list = NULL;
        *ret_n = 0;
        qemu_mem_sweep(q);
        if (!d)
                return errno == ENOENT ? 0 : sbx_error_set(err, -errno, 0, "cannot read %s: %m", q->dir);
        while ((de = readdir(d))) {
                struct qemu_vm vm;

                if (!id_valid(de->d_name) || qemu_state_load(q, de->d_name, &vm) < 0)
                        continue;
                bool alive;
                alive = serving(q, &vm, &alive, NULL) || vm.saved;
                if ((!all && !alive) || !filters_pass(&vm, label_filters))
                        continue;
                if (n == cap) {
                        cap = cap ? cap * 2 : 8;
                        void *p = realloc(list, cap * sizeof(*list));
                        if (!p) {
                                closedir(d);
                                free(list);
                                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                        }
                        list = p;
                }
                struct engine_container_summary *s = &list[n++];
                *s = (struct engine_container_summary){0};
                sbx_strlcpy(s->id, vm.id, sizeof(s->id));
                sbx_strlcpy(s->name, vm.id, sizeof(s->name));
                sbx_strlcpy(s->state, alive ? (vm.paused ? "paused" : "running") : "exited", sizeof(s->state));
                s->created = vm.created;
                memcpy(s->labels, vm.labels, sizeof(vm.labels));
                s->n_labels = vm.n_labels;
        }
        closedir(d);
        *ret_list = list;
        *ret_n = n;
        return 0;
}

static int q_logs(struct engine *e, const char *id, int tail_lines, char **ret_text, struct sbx_error *err)
{
        struct qemu_vm vm;
        int r = qemu_state_load(Q(e), id, &vm);

        if (r < 0)
                return sbx_error_set(err, r, 0, "no VM %s", id);
        return qemu_vm_console(Q(e), &vm, tail_lines, ret_text, err);
}

static int q_pause(struct engine *e, const char *id, bool pause, struct sbx_error *err)
{
        struct qemu *q = Q(e);
        struct qemu_vm vm;
        int r = qemu_state_load(q, id, &vm);

        if (r < 0)
                return sbx_error_set(err, r, 0, "no VM %s", id);
        bool alive;
        if (!pause && vm.saved) {
                /* paused to disk (qemu_mem.c): QEMU again, from the save, and the guest runs on */
                r = qemu_vm_boot(q, &vm, err);
                if (r < 0)
                        return r;
                goto record;
        }
        if (!serving(q, &vm, &alive, NULL) || vm.paused == pause)
                return sbx_error_set(err, -EBUSY, 409, "VM %s is not %s", id, pause ? "running" : "paused");
        r = qemu_qmp(q, &vm, pause ? "stop" : "cont", err);
        if (r < 0)
                return r;
        /* paused when an earlier daemon stopped: its runner is dialled now that it can answer */
        if (!pause && !qemu_booted(q, id)) {
                r = qemu_vm_adopt(q, &vm, err);
                if (r < 0)
                        return r;
        }
record:
        pthread_mutex_lock(&q->lock);
        r = state_load_locked(q, id, &vm);
        if (r == 0) {
                vm.paused = pause;
                r = state_save_locked(q, &vm);
        }
        pthread_mutex_unlock(&q->lock);
        return r < 0 ? sbx_error_set(err, r, 0, "cannot record the VM's state: %s", strerror(-r)) : 0;
}

static int q_pause_op(struct engine *e, const char *id, struct sbx_error *err)
{
        return q_pause(e, id, true, err);
}

static int q_unpause_op(struct engine *e, const char *id, struct sbx_error *err)
{
        return q_pause(e, id, false, err);
}

static int q_workspace_drop(struct engine *e, const char *instance, const char *user, const char *session,
                            const char *claim, struct sbx_error *err)
{
        (void)instance;
        (void)claim;
        return qemu_disk_drop(Q(e), user, session, err);
}

static const struct engine_ops qemu_ops = {
        .free = q_free,
        .version = q_version,
        .image_inspect = q_image_inspect,
        .has_runtime = q_has_runtime,
        .create = q_create,
        .start = q_start,
        .inspect = q_inspect,
        .stop = q_stop,
        .remove = q_remove,
        .list = q_list,
        .logs = q_logs,
        .pause = q_pause_op,
        .unpause = q_unpause_op,
        .pause_to_disk = engine_qemu_pause_to_disk,
        .memory_capture = engine_qemu_mem_snapshot,
        .memory_boot = engine_qemu_mem_expect,
        .memory_boot_cancel = engine_qemu_mem_unexpect,
        .workspace_drop = q_workspace_drop,
};

int engine_qemu_new(const struct engine_qemu_config *cfg, struct engine **ret, struct sbx_error *err)
{
        struct engine *e = calloc(1, sizeof(*e));
        struct qemu *q = calloc(1, sizeof(*q));
        int r;

        if (!e || !q) {
                free(e);
                free(q);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        pthread_mutex_init(&q->lock, NULL);
        pthread_mutex_init(&q->adopt_lock, NULL);
        pthread_mutex_init(&q->net_lock, NULL);
        r = qemu_setup(q, cfg, err);
        if (r < 0) {
                pthread_mutex_destroy(&q->lock);
                pthread_mutex_destroy(&q->adopt_lock);
                pthread_mutex_destroy(&q->net_lock);
                free(q);
                free(e);
                return r;
        }
        e->ops = &qemu_ops;
        e->name = "qemu";
        e->capabilities = ENGINE_CAP_PAUSE | ENGINE_CAP_LOGS | ENGINE_CAP_MEMORY_CAPTURE;
        e->priv = q;
        *ret = e;
        return 0;
}

void engine_qemu_bind(struct engine *e, const struct engine_qemu_runner *r)
{
        struct qemu *q = Q(e);

        pthread_mutex_lock(&q->lock);
        q->runner = *r;
        pthread_mutex_unlock(&q->lock);
}

struct qemu *qemu_of(struct engine *e)
{
        return e && e->name && strcmp(e->name, "qemu") == 0 ? e->priv : NULL;
}

void engine_qemu_net_stop(struct engine *e)
{
        struct qemu *q = qemu_of(e);

        if (q)
                qemu_net_stop(q);
}

const char *engine_qemu_accel(const struct engine *e)
{
        return ((const struct qemu *)e->priv)->kvm ? "kvm" : "tcg";
}
