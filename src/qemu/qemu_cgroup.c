/* qemu_cgroup.c — QEMU in a cgroup of its own, with the session's CPU,
 * memory and PID limits (issue 38, "QEMU jailed").
 *
 * cgroup v1 (this host: Debian 12 hybrid, Docker's cgroupfs driver puts a
 * container in /sys/fs/cgroup/<controller>/docker/<id>): one directory per
 * controller, /sys/fs/cgroup/{cpu,memory,pids}/sandboxd-vm/<vm id>. cgroup v2
 * (unified, /sys/fs/cgroup/cgroup.controllers): /sys/fs/cgroup/sandboxd-vm/<vm
 * id>, with the controllers enabled in the parent's subtree_control. A
 * controller that is not there is skipped and named in the note the state
 * file and the log carry; the VM still boots (its memory and vCPUs stay
 * bounded by QEMU's own -m and -smp).
 *
 * The limits: memory = guest RAM + QEMU_CG_OVERHEAD (QEMU itself and, under
 * TCG, its translation cache, capped by -accel tcg,tb-size), no swap beyond
 * it; CPU = the session's nano_cpus as a CFS quota; pids = QEMU's own
 * threads (QEMU_CG_PIDS: the guest's processes are not host tasks; the
 * session's PID limit is the guest runner's RLIMIT_NPROC, sbx.nproc on the
 * kernel command line).
 *
 * QEMU enters them itself: the daemon opens each cgroup.procs and the
 * forked child writes "0" (itself) to it before it drops to the session's
 * uid (qemu_vm.c, child_exec), so no QEMU instruction ever runs outside.
 *
 * Left behind: a VM's removal (qemu_vm_dir_remove) keeps the VM's empty
 * directory while its cgroup cannot go (QEMU outlived the wait, or the
 * daemon died before); qemu_cgroup_sweep, at startup reconciliation and by
 * --gc, removes such cgroups and then the directory: only this data
 * directory's VMs, never another daemon's. It runs under a host-wide lock
 * (QEMU_CG_LOCK) that a boot holds shared from the cgroup's making until
 * QEMU is in it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qemu_internal.h"
#include "sandboxd/log.h"

#define CG_ROOT "/sys/fs/cgroup"
#define CG_PARENT "sandboxd-vm"

static const char *const v1_controllers[QEMU_CG_MAX] = {"cpu", "memory", "pids"};

static bool cg_v2(void)
{
        return access(CG_ROOT "/cgroup.controllers", F_OK) == 0;
}

static int write_file(const char *dir, const char *name, const char *value)
{
        char path[SBX_PATH_MAX];
        int fd, r = 0;

        if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        if (write(fd, value, strlen(value)) != (ssize_t)strlen(value))
                r = -errno ? -errno : -EIO;
        close(fd);
        return r;
}

/* dir = base/sandboxd-vm/id, made (the parent too); 0 or -errno */
static int cg_mkdir(const char *base, const char *id, char *dir, size_t size)
{
        char parent[SBX_PATH_MAX];

        if (snprintf(parent, sizeof(parent), "%s/" CG_PARENT, base) >= (int)sizeof(parent) ||
            snprintf(dir, size, "%s/%s", parent, id) >= (int)size)
                return -ENAMETOOLONG;
        if (mkdir(parent, 0755) < 0 && errno != EEXIST)
                return -errno;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static void note_add(char *note, size_t size, const char *what)
{
        size_t n = strlen(note);
        snprintf(note + n, size - n, "%s%s", n ? "; " : "", what);
}

int qemu_cgroup_make(const struct qemu_vm *vm, int64_t mem_bytes, int fds[QEMU_CG_MAX], char *note, size_t note_size)
{
        char dir[SBX_PATH_MAX], val[64], what[160];
        int64_t limit = mem_bytes + QEMU_CG_OVERHEAD;
        int64_t quota = vm->nano_cpus > 0 ? vm->nano_cpus / 10000 : 0; /* of a 100 ms period, in µs */
        int n = 0, r;

        for (int i = 0; i < QEMU_CG_MAX; i++)
                fds[i] = -1;
        note[0] = '\0';
        if (cg_v2()) {
                /* the parent must hand the controllers down; what it cannot is named below */
                char parent[SBX_PATH_MAX];
                snprintf(parent, sizeof(parent), CG_ROOT "/" CG_PARENT);
                r = cg_mkdir(CG_ROOT, vm->id, dir, sizeof(dir));
                if (r < 0) {
                        snprintf(what, sizeof(what), "no cgroup (v2): %s", strerror(-r));
                        note_add(note, note_size, what);
                        return 0;
                }
                (void)write_file(CG_ROOT, "cgroup.subtree_control", "+cpu +memory +pids");
                (void)write_file(parent, "cgroup.subtree_control", "+cpu +memory +pids");
                snprintf(val, sizeof(val), "%" PRId64, limit);
                if (write_file(dir, "memory.max", val) < 0 || write_file(dir, "memory.swap.max", "0") < 0)
                        note_add(note, note_size, "memory: no memory controller (v2)");
                snprintf(val, sizeof(val), quota > 0 ? "%" PRId64 " 100000" : "max 100000", quota);
                if (write_file(dir, "cpu.max", val) < 0)
                        note_add(note, note_size, "cpu: no cpu controller (v2)");
                snprintf(val, sizeof(val), "%d", QEMU_CG_PIDS);
                if (write_file(dir, "pids.max", val) < 0)
                        note_add(note, note_size, "pids: no pids controller (v2)");
                char procs[SBX_PATH_MAX + 16];
                snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
                fds[0] = open(procs, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
                if (fds[0] < 0)
                        note_add(note, note_size, "cannot enter the cgroup (v2)");
                return 0;
        }
        for (int i = 0; i < QEMU_CG_MAX; i++) {
                char base[SBX_PATH_MAX], procs[SBX_PATH_MAX + 16];
                struct stat st;

                snprintf(base, sizeof(base), CG_ROOT "/%s", v1_controllers[i]);
                snprintf(procs, sizeof(procs), "%s/tasks", base);
                if (stat(base, &st) < 0 || !S_ISDIR(st.st_mode) || access(procs, F_OK) < 0) {
                        snprintf(what, sizeof(what), "%s: controller not mounted", v1_controllers[i]);
                        note_add(note, note_size, what);
                        continue;
                }
                r = cg_mkdir(base, vm->id, dir, sizeof(dir));
                if (r == 0) {
                        if (i == 0) {
                                snprintf(val, sizeof(val), "%" PRId64, quota > 0 ? quota : -1);
                                r = write_file(dir, "cpu.cfs_period_us", "100000");
                                if (r == 0)
                                        r = write_file(dir, "cpu.cfs_quota_us", val);
                        } else if (i == 1) {
                                snprintf(val, sizeof(val), "%" PRId64, limit);
                                r = write_file(dir, "memory.limit_in_bytes", val);
                                if (r == 0) /* memory + swap = memory: no swap; absent without swap accounting */
                                        (void)write_file(dir, "memory.memsw.limit_in_bytes", val);
                        } else {
                                snprintf(val, sizeof(val), "%d", QEMU_CG_PIDS);
                                r = write_file(dir, "pids.max", val);
                        }
                }
                if (r == 0) {
                        snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
                        fds[n] = open(procs, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
                        if (fds[n] < 0)
                                r = -errno;
                        else
                                n++;
                }
                if (r < 0) {
                        snprintf(what, sizeof(what), "%s: %s", v1_controllers[i], strerror(-r));
                        note_add(note, note_size, what);
                }
        }
        return 0;
}

bool qemu_cgroup_oom_killed(const char *id)
{
        char path[SBX_PATH_MAX], buf[512];
        int fd;
        ssize_t n;

        if (cg_v2())
                snprintf(path, sizeof(path), CG_ROOT "/" CG_PARENT "/%s/memory.events", id);
        else
                snprintf(path, sizeof(path), CG_ROOT "/memory/" CG_PARENT "/%s/memory.oom_control", id);
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return false;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return false;
        buf[n] = '\0';
        const char *p = strstr(buf, "oom_kill ");
        return p && strtoll(p + strlen("oom_kill "), NULL, 10) > 0;
}

/* rmdir of a cgroup once no task is left in it: QEMU killed is a zombie until its reaper
 * (init: it was forked twice) takes it, which is soon; one that is still there after
 * QEMU_CG_RMDIR_MS stays, and qemu_cgroup_sweep (startup reconciliation, --gc) comes back to it. */
#define QEMU_CG_RMDIR_MS 2000
static void cg_rmdir(const char *dir)
{
        int64_t deadline = sbx_now_ms() + QEMU_CG_RMDIR_MS;

        while (rmdir(dir) < 0 && errno == EBUSY && sbx_now_ms() < deadline)
                sbx_sleep_ms(20);
}

bool qemu_cgroup_remove(const char *id)
{
        char dir[SBX_PATH_MAX];
        bool gone = true;

        if (cg_v2()) {
                snprintf(dir, sizeof(dir), CG_ROOT "/" CG_PARENT "/%s", id);
                cg_rmdir(dir);
                return access(dir, F_OK) < 0;
        }
        for (int i = 0; i < QEMU_CG_MAX; i++) {
                snprintf(dir, sizeof(dir), CG_ROOT "/%s/" CG_PARENT "/%s", v1_controllers[i], id);
                cg_rmdir(dir);
                gone = gone && access(dir, F_OK) < 0;
        }
        return gone;
}

/* The lock that keeps a sweep (exclusive) from removing a cgroup between its making and QEMU
 * entering it (shared, qemu_vm.c's boot): host-wide, as the cgroups are. -1: none (the caller
 * goes on without it; a sweep skips its pass). */
int qemu_cgroup_lock(bool exclusive, int timeout_ms)
{
        int64_t deadline = sbx_now_ms() + timeout_ms;
        int fd = open(QEMU_CG_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

        if (fd < 0)
                return -1;
        while (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) < 0) {
                if ((errno != EWOULDBLOCK && errno != EINTR) || sbx_now_ms() >= deadline) {
                        close(fd);
                        return -1;
                }
                sbx_sleep_ms(10); /* flock has no timed wait; holders keep it for milliseconds */
        }
        return fd;
}

static bool cg_has_task(const char *dir)
{
        char path[SBX_PATH_MAX + 32], c;
        int fd;
        ssize_t n;

        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return false;
        n = read(fd, &c, 1);
        close(fd);
        return n > 0;
}

/* One directory base/sandboxd-vm: each VM cgroup whose VM has no directory under vm_dir. */
struct swept {
        char ids[64][ENGINE_ID_STR_MAX];
        size_t n;
};

static size_t sweep_base(const char *base, const char *vm_dir, bool dry_run, qemu_cg_note note, void *ud,
                         struct swept *sw)
{
        char parent[SBX_PATH_MAX], path[SBX_PATH_MAX + 80];
        size_t n = 0;
        DIR *d;
        struct dirent *de;
        struct stat st;

        snprintf(parent, sizeof(parent), "%s/" CG_PARENT, base);
        d = opendir(parent);
        while (d && (de = readdir(d))) {
                if (!engine_qemu_id(de->d_name))
                        continue;
                /* only this data directory's: a VM directory without its state is a removal that
                 * left the cgroup (qemu_vm_dir_remove); no directory is another daemon's VM, a
                 * state file a VM still there (its removal takes the cgroup) */
                snprintf(path, sizeof(path), "%s/%s", vm_dir, de->d_name);
                if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
                        continue;
                snprintf(path, sizeof(path), "%s/%s/state", vm_dir, de->d_name);
                if (lstat(path, &st) == 0)
                        continue;
                snprintf(path, sizeof(path), "%s/%s", parent, de->d_name);
                /* one with a task in it (a live QEMU's, maybe another daemon's) is never touched:
                 * skipped when its cgroup.procs names one, and rmdir fails (EBUSY) on it anyway */
                if (cg_has_task(path))
                        continue;
                int r = dry_run ? 0 : rmdir(path) < 0 ? -errno : 0;
                if (r == -EBUSY)
                        continue;
                if (note)
                        note(ud, path, r);
                n += r == 0;
                if (r == 0 && !dry_run && sw->n < ELEMENTSOF(sw->ids)) /* its directory goes after the pass */
                        sbx_strlcpy(sw->ids[sw->n++], de->d_name, sizeof(sw->ids[0]));
        }
        if (d)
                closedir(d);
        return n;
}

size_t qemu_cgroup_sweep(const char *vm_dir, bool dry_run, qemu_cg_note note, void *ud)
{
        size_t n = 0;
        int lk = dry_run ? -2 : qemu_cgroup_lock(true, QEMU_CG_LOCK_MS);

        if (lk == -1) {
                log_warn("microvm: cgroup sweep skipped: %s is held", QEMU_CG_LOCK);
                return 0;
        }
        struct swept *sw = calloc(1, sizeof(*sw));
        if (!sw) {
                if (lk >= 0)
                        close(lk);
                return 0;
        }
        if (cg_v2()) {
                n = sweep_base(CG_ROOT, vm_dir, dry_run, note, ud, sw);
        } else {
                for (int i = 0; i < QEMU_CG_MAX; i++) {
                        char base[SBX_PATH_MAX];
                        snprintf(base, sizeof(base), CG_ROOT "/%s", v1_controllers[i]);
                        n += sweep_base(base, vm_dir, dry_run, note, ud, sw);
                }
        }
        /* the VM directories kept for these cgroups, once none of theirs is left */
        for (size_t i = 0; i < sw->n; i++) {
                char vm[SBX_PATH_MAX + 80];
                snprintf(vm, sizeof(vm), "%s/%s", vm_dir, sw->ids[i]);
                if (qemu_cgroup_remove(sw->ids[i]))
                        (void)rmdir(vm);
        }
        free(sw);
        if (lk >= 0)
                close(lk);
        return n;
}
