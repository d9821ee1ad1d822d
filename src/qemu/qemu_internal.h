/* qemu_internal.h — what qemu_engine.c (the ops, the state files) and
 * qemu_vm.c (the process, its jail, QMP, the guest's disk and initramfs)
 * share. Not a public header. */
#ifndef SANDBOXD_QEMU_INTERNAL_H
#define SANDBOXD_QEMU_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/engine_qemu.h"

#define QEMU_PENDING_MAX 64
#define QEMU_FROZEN_MAX 64

struct qemu {
        char dir[SBX_PATH_MAX];   /* {data_dir}/vm */
        char disks[SBX_PATH_MAX]; /* {data_dir}/vm/disks */
        char kernel[SBX_PATH_MAX];
        char initrd[SBX_PATH_MAX];
        char binary[SBX_PATH_MAX];
        char docker_socket[SBX_PATH_MAX]; /* qemu_rootfs.c: the Docker that has the sessions' images */
        int64_t disk_bytes;
        int boot_timeout_ms;
        bool kvm;
        pthread_mutex_t lock;
        /* held while a live VM of an earlier daemon is dialled and adopted (qemu_vm_adopt), so
         * that two callers never dial one VM twice; never with lock held */
        pthread_mutex_t adopt_lock;
        struct engine_qemu_runner runner;
        /* qemu_net.c: the VMs' net channels (net_lock; never with lock held) */
        pthread_mutex_t net_lock;
        struct qemu_net *nets;
        bool net_stopped;
        /* the VMs this engine booted: only their runner channels reach this daemon's hub */
        char (*booted)[ENGINE_ID_STR_MAX];
        size_t n_booted, cap_booted;
        /* qemu_mem.c: sessions whose next VM boots from a memory snapshot, and frozen RAM shared */
        struct qemu_pending {
                char user[128], session[128], dir[SBX_PATH_MAX];
        } pending[QEMU_PENDING_MAX];
        size_t n_pending;
        struct qemu_frozen {
                int src, memfd; /* the frozen RAM file (its link count says whether it is kept), its memfd */
                dev_t dev;
                ino_t ino;
        } frozen[QEMU_FROZEN_MAX];
        size_t n_frozen;
};

/* a memory snapshot's files (qemu_mem.c), in the snapshot's directory */
#define QEMU_MEM_STATE "memory.state" /* the devices' state, QEMU's migration stream */
#define QEMU_MEM_RAM "memory.ram"     /* the guest's RAM, frozen */
#define QEMU_MEM_DISK "disk.img"      /* the workspace disk at the same instant */
#define QEMU_MEM_ROOTFS "rootfs"      /* the path of the VM's root file system (qemu_rootfs.c), if it had one */
/* a VM paused to disk: its state and RAM in its own directory */
#define QEMU_MEM_SAVED "memory.state"
#define QEMU_MEM_SAVED_RAM "memory.ram"

/* One VM, as its state file has it. */
struct qemu_vm {
        char id[ENGINE_ID_STR_MAX];
        uid_t uid;
        gid_t gid;
        int64_t memory, nano_cpus, pids_limit;
        pid_t pid;          /* QEMU's, 0: never started */
        uint64_t pid_start; /* its start time (clock ticks), so a reused pid is not it */
        int64_t created;    /* unix seconds */
        bool paused;
        bool listening; /* its runner channel is a listening socket (run.sock): a later daemon can dial it */
        bool net;       /* it has the net port (QEMU_NET_CHANNEL): egress and forwards (qemu_net.c) */
        bool egress;    /* its session has egress: the guest's runner sets the proxy variables */
        char started_at[40], finished_at[40];
        char disk[SBX_PATH_MAX];
        char incoming[SBX_PATH_MAX]; /* boot from this memory snapshot's directory ("": a cold boot) */
        bool ram_private;            /* its RAM is a snapshot's frozen RAM, mapped private */
        bool saved;                  /* paused to disk: QEMU gone, QEMU_MEM_SAVED and _RAM kept */
        char cgroup_note[160];       /* what of its cgroup could not be made ("": all of it) */
        char rootfs[SBX_PATH_MAX];   /* qemu_rootfs.c: the image's root file system, read-only ("": busybox) */
        char rootfs_note[256];       /* why it has none although its spec named an image */
        struct engine_kv labels[ENGINE_MAX_LABELS];
        size_t n_labels;
};

/* qemu_engine.c */
int qemu_vm_path(const struct qemu *q, const char *id, const char *name, char *buf, size_t size);
int qemu_state_load(struct qemu *q, const char *id, struct qemu_vm *ret);
int qemu_state_save(struct qemu *q, const struct qemu_vm *vm);
const char *qemu_vm_label(const struct qemu_vm *vm, const char *key);

/* Whether this engine booted id (its channel is this daemon's); record or forget it. */
bool qemu_booted(struct qemu *q, const char *id);
void qemu_booted_set(struct qemu *q, const char *id, bool on);

/* qemu_vm.c */
int qemu_setup(struct qemu *q, const struct engine_qemu_config *cfg, struct sbx_error *err);
/* The VM's run directory, initramfs (with the runner) and the session's disk. */
int qemu_vm_prepare(struct qemu *q, struct qemu_vm *vm, const struct engine_spec *spec, struct sbx_error *err);
/* Exec QEMU jailed, hand its runner channel to the hub and wait for the runner. */
int qemu_vm_boot(struct qemu *q, struct qemu_vm *vm, struct sbx_error *err);
/* A channel's socket `name` in the VM's directory vmfd (root's): bound and listening, for
 * QEMU's chardev; or dialled (nonblocking; -ENOENT unless it is root's socket). */
int qemu_sock_listen(int vmfd, const char *name, struct sbx_error *err);
int qemu_sock_connect(int vmfd, const char *name, int *ret_fd);
bool qemu_vm_alive(const struct qemu_vm *vm);
/* A live VM that an earlier daemon booted: dial its runner channel, wait for the guest
 * runner's RP_HELLO and hand the channel to the hub. 0, or -errno with err saying why. */
int qemu_vm_adopt(struct qemu *q, const struct qemu_vm *vm, struct sbx_error *err);
/* QMP quit, then SIGKILL after timeout_ms (0: at once); gone already is 0. */
int qemu_vm_kill(struct qemu *q, struct qemu_vm *vm, int timeout_ms, struct sbx_error *err);
void qemu_vm_dir_remove(struct qemu *q, const char *id);
int qemu_vm_console(struct qemu *q, const struct qemu_vm *vm, int tail_lines, char **ret_text, struct sbx_error *err);
/* One QMP command without arguments ("stop", "cont", "quit"). */
int qemu_qmp(struct qemu *q, const struct qemu_vm *vm, const char *command, struct sbx_error *err);
void qemu_now_rfc3339(char ret[40]);
int qemu_disk_drop(struct qemu *q, const char *user, const char *session, struct sbx_error *err);
int qemu_disk_path(const struct qemu *q, const char *user, const char *session, char *buf, size_t size);

/* qemu_net.c */
#define QEMU_NET_CHANNEL "net.sock"       /* in the VM's directory (root's): the net port's socket */
#define QEMU_NET_PORT_NAME "sandboxd.net" /* its virtio-serial port (runner/vmux.h: VMUX_PORT_NAME) */
/* Dial the net channel of vm (booted or adopted here) and serve its streams; a VM booted
 * without the port: nothing. 0 or -errno. */
int qemu_net_attach(struct qemu *q, const struct qemu_vm *vm, int vmfd);
/* VM id's net channel goes (removal). */
void qemu_net_detach(struct qemu *q, const char *id);
/* The connections VM id's net port carries now (vmux_connections; 0 without one). */
size_t qemu_net_connections(struct qemu *q, const char *id);
/* Every net channel goes, and none is made from here on (the daemon closes). */
void qemu_net_stop(struct qemu *q);

/* qemu_mem.c */
/* Stop the VM, save its state and copy its RAM and disk into dirfd (the
 * snapshot's directory), run it on unless it was paused. -EDQUOT past room bytes. */
int qemu_mem_snapshot(struct qemu *q, const char *id, int dirfd, int64_t room, int64_t *ret_bytes,
                      struct sbx_error *err);
/* The next VM made for user/session boots from the memory snapshot in dir (root's). */
int qemu_mem_expect(struct qemu *q, const char *user, const char *session, const char *dir, struct sbx_error *err);
void qemu_mem_unexpect(struct qemu *q, const char *user, const char *session, char ret_dir[SBX_PATH_MAX]);
/* q_create: when vm's session is expected, vm boots from that snapshot (its disk put in place). */
int qemu_mem_claim(struct qemu *q, struct qemu_vm *vm, struct sbx_error *err);
/* QEMU's -object for the guest's RAM; *ret_ramfd: the frozen RAM for fd 6, or -1. */
int qemu_mem_args(struct qemu *q, const struct qemu_vm *vm, int64_t mib, char *obj, size_t size, int *ret_ramfd,
                  struct sbx_error *err);
/* After QEMU -incoming defer started: load the state, the guest runs, its runner says hello again on chan. */
int qemu_mem_incoming(struct qemu *q, struct qemu_vm *vm, int chan, int64_t deadline, struct sbx_error *err);
void qemu_mem_free(struct qemu *q);
/* Let go of the frozen RAM of snapshots deleted since (q_remove, q_list call it). */
void qemu_mem_sweep(struct qemu *q);
/* A paused VM's memory saved (QEMU_MEM_SAVED, QEMU_MEM_SAVED_RAM) and QEMU gone; booting it again resumes it. */
int qemu_mem_pause_to_disk(struct qemu *q, const char *id, struct sbx_error *err);
/* A saved VM that will never be resumed (stopped), or was: its saved files go. */
void qemu_mem_saved_drop(struct qemu *q, struct qemu_vm *vm);
/* After a boot from memory: the VM is an ordinary one again (incoming cleared, a save dropped). */
void qemu_mem_booted(struct qemu *q, struct qemu_vm *vm);
/* The VM's RAM file (on tmpfs) goes: q_remove. */
void qemu_mem_ram_drop(struct qemu *q, const char *id);

/* qemu_rootfs.c: the root file system of Docker image `image` (a name or an id) as an ext4
 * image, made at its first use (by one caller; the others wait) under {data_dir}/vm/rootfs and
 * never changed; its path. -ETIMEDOUT past QEMU_ROOTFS_TIMEOUT_MS; err says which step failed.
 * instance: the label the export's short-lived container carries. */
#define QEMU_ROOTFS_TIMEOUT_MS (600 * 1000)
#define QEMU_ROOTFS_SERIAL "sbxroot" /* the virtio-blk serial the guest's runner finds it by */
int qemu_rootfs_get(struct qemu *q, const char *image, const char *instance, char ret_path[SBX_PATH_MAX],
                    struct sbx_error *err);

/* qemu_cgroup.c: QEMU's cgroup (cpu, memory, pids) with the VM's limits, guest RAM mem_bytes;
 * fds: each controller's cgroup.procs to write "0" to before the uid drops (-1: none); note:
 * what could not be made. */
#define QEMU_CG_MAX 3
#define QEMU_CG_OVERHEAD (INT64_C(256) << 20) /* QEMU's own memory beside guest RAM; TCG's cache is capped below it */
#define QEMU_CG_TB_MIB "128"                  /* -accel tcg,tb-size (MiB), inside QEMU_CG_OVERHEAD */
#define QEMU_CG_PIDS 64                       /* QEMU's threads (vCPUs, main loop, RCU, I/O workers) */
int qemu_cgroup_make(const struct qemu_vm *vm, int64_t mem_bytes, int fds[QEMU_CG_MAX], char *note, size_t note_size);
/* Every cgroup of id removed (waiting a little for a killed QEMU): whether none is left. */
bool qemu_cgroup_remove(const char *id);
/* Whether the memory cgroup's OOM killer killed a task of QEMU's cgroup (cgroup v1 oom_kill). */
bool qemu_cgroup_oom_killed(const char *id);
/* The host-wide lock between a boot (shared, from qemu_cgroup_make until QEMU is in its
 * cgroup) and a sweep (exclusive): its fd, or -1 past timeout_ms. */
#define QEMU_CG_LOCK "/run/sandboxd-vm-cgroup.lock"
#define QEMU_CG_LOCK_MS 5000
int qemu_cgroup_lock(bool exclusive, int timeout_ms);
/* Remove (dry_run: only name) every VM cgroup left without its VM: a VM directory under vm_dir
 * ({data_dir}/vm) without its state file (a removal that left it), no task in it; then that
 * directory. note(ud, path, 0 or -errno) for each. How many went. */
typedef void (*qemu_cg_note)(void *ud, const char *path, int r);
size_t qemu_cgroup_sweep(const char *vm_dir, bool dry_run, qemu_cg_note note, void *ud);

/* qemu_jail.c: QEMU's private mount namespace, planned by the daemon (qemu_jail_prepare, which
 * makes the VM's empty jail/ directory) and entered by the forked child while still root
 * (qemu_jail_enter: system calls only). Inside: /usr and the lib links read-only, the
 * loader's cache, /proc, a few /dev nodes (and /dev/kvm when used), QEMU_JAIL_KERNEL and the
 * VM's directory at QEMU_JAIL_VM; nothing else of the host. */
#define QEMU_JAIL_DIR "jail"
#define QEMU_JAIL_KERNEL "/vmlinux"
#define QEMU_JAIL_VM "/vm"
#define QEMU_JAIL_STEPS 40
enum { QEMU_JAIL_MKDIR, QEMU_JAIL_FILE, QEMU_JAIL_SYMLINK, QEMU_JAIL_BIND, QEMU_JAIL_BIND_RO, QEMU_JAIL_PROC };
struct qemu_jail {
        char root[SBX_PATH_MAX]; /* {data_dir}/vm/<id>/jail: the tmpfs's mount point */
        struct qemu_jail_step {
                int kind;
                char src[SBX_PATH_MAX], dst[SBX_PATH_MAX];
        } steps[QEMU_JAIL_STEPS];
        size_t n;
};
/* e's QEMU engine, or NULL when e is another engine (the router hands any). */
struct qemu *qemu_of(struct engine *e);

int qemu_jail_prepare(const struct qemu *q, const char *vm_dir, struct qemu_jail *j, struct sbx_error *err);
int qemu_jail_enter(const struct qemu_jail *j);

#endif
