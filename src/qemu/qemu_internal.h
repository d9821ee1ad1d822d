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

struct qemu {
        char dir[SBX_PATH_MAX];   /* {data_dir}/vm */
        char disks[SBX_PATH_MAX]; /* {data_dir}/vm/disks */
        char kernel[SBX_PATH_MAX];
        char initrd[SBX_PATH_MAX];
        char binary[SBX_PATH_MAX];
        int64_t disk_bytes;
        int boot_timeout_ms;
        bool kvm;
        pthread_mutex_t lock;
        /* held while a live VM of an earlier daemon is dialled and adopted (qemu_vm_adopt), so
         * that two callers never dial one VM twice; never with lock held */
        pthread_mutex_t adopt_lock;
        struct engine_qemu_runner runner;
        /* the VMs this engine booted: only their runner channels reach this daemon's hub */
        char (*booted)[ENGINE_ID_STR_MAX];
        size_t n_booted, cap_booted;
};

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
        char started_at[40], finished_at[40];
        char disk[SBX_PATH_MAX];
        char cgroup_note[160]; /* what of its cgroup could not be made ("": all of it) */
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

/* qemu_cgroup.c: QEMU's cgroup (cpu, memory, pids) with the VM's limits, guest RAM mem_bytes;
 * fds: each controller's cgroup.procs to write "0" to before the uid drops (-1: none); note:
 * what could not be made. */
#define QEMU_CG_MAX 3
#define QEMU_CG_OVERHEAD (INT64_C(256) << 20) /* QEMU's own memory beside guest RAM; TCG's cache is capped below it */
#define QEMU_CG_TB_MIB "128"                  /* -accel tcg,tb-size (MiB), inside QEMU_CG_OVERHEAD */
#define QEMU_CG_PIDS 64                       /* QEMU's threads (vCPUs, main loop, RCU, I/O workers) */
int qemu_cgroup_make(const struct qemu_vm *vm, int64_t mem_bytes, int fds[QEMU_CG_MAX], char *note, size_t note_size);
void qemu_cgroup_remove(const char *id);
/* Whether the memory cgroup's OOM killer killed a task of QEMU's cgroup (cgroup v1 oom_kill). */
bool qemu_cgroup_oom_killed(const char *id);

#endif
