/* engine_qemu.h — the microVM engine behind the seam (engine.h): one QEMU
 * `-M microvm` per container, for sessions whose runtime is `microvm`
 * (runtime.h; docs/microvm.md says what works and what does not yet).
 *
 * A "container" here is a VM: the guest kernel and initramfs built by
 * scripts/build-vm.sh (ENGINE_QEMU_GUEST_DIR), the runner appended to
 * the initramfs and started by the guest's /init as PID 1 under the
 * session's uid, the session's workspace as an ext4 image on virtio-blk
 * (kept per session beside the VMs; workspace_drop deletes it), no network
 * device at all, the runner channel a virtio-serial port (egress and port
 * forwards a second one, multiplexed: src/qemu/qemu_net.c), QMP on a unix
 * socket for pause (stop/cont) and quit. KVM when /dev/kvm opens, TCG
 * otherwise.
 *
 * The runner channel is a unix socket the daemon binds in the VM's own
 * directory (root's: no path QEMU's uid could swap) and hands to QEMU
 * listening, as its chardev (fd=3, server=on); the daemon dials it and the
 * connection goes to the runner hub as an accepted one would
 * (engine_qemu_runner.attach, hub_attach), so the hub, its framing,
 * fencing and epochs are the same as for a container. QEMU accepts again
 * after a connection ends, so a restarted daemon dials the same socket and
 * adopts a VM that still runs (its pid, start time and channel are in the
 * state file); the guest's runner says RP_HELLO again when the host side
 * comes back. QEMU runs as the session's uid and cannot reach the
 * root-only runner directories.
 *
 * Jail: QEMU is exec'd after setgroups/setgid/setuid to the session's uid
 * (never -runas, which -sandbox elevateprivileges=deny kills) with
 * no_new_privs, `-sandbox on,obsolete=deny,elevateprivileges=deny,
 * spawn=deny,resourcecontrol=deny`, guest memory and vCPUs from the spec.
 *
 * State: {data_dir}/vm/<id>/state (root's JSON: labels, uid, limits, pid
 * and start time, paused, channel), {data_dir}/vm/<id>/runner.sock (the
 * channel), {data_dir}/vm/<id>/run/ (QEMU's: qmp.sock,
 * console.log), {data_dir}/vm/disks/<sha256 of user/session>.img. list
 * reads the directory, so --gc and restart reconciliation find VMs by their
 * labels as they find containers. Ids are ENGINE_QEMU_ID_PREFIX and 32 hex.
 *
 * Threads: every op may run on any thread; a VM's state file is replaced
 * whole (a temporary renamed over it) under the engine's lock. */
#ifndef SANDBOXD_ENGINE_QEMU_H
#define SANDBOXD_ENGINE_QEMU_H

#include <stdbool.h>

#include "sandboxd/engine.h"

#define ENGINE_QEMU_ID_PREFIX "vm-"
#define ENGINE_QEMU_RUNTIME "microvm" /* engine_spec.runtime_class of a VM */
/* where scripts/build-vm.sh puts the guest: with it and QEMU, runtime microvm is offered (used
 * only by users whose runtime policy says so) */
#define ENGINE_QEMU_GUEST_DIR "/var/cache/sandboxd-vm/current"

/* What the engine needs of the runner hub (hub.h), given by the daemon. */
struct engine_qemu_runner {
        /* hand the daemon's end of a VM's runner channel to the hub (it owns fd from here) */
        int (*attach)(void *ud, const char *user, const char *session, int fd);
        /* whether the session's runner said RP_HELLO within timeout_ms */
        bool (*wait)(void *ud, const char *user, const char *session, int timeout_ms);
        /* a stream the guest's runner opened on the VM's net port (kind ENGINE_QEMU_NET_*): a
         * connection to the session's egress.sock or fwd.sock, as a node agent hands them to the
         * gateway (gateway_attach); it owns fd from here. Called on the VM's net thread. NULL:
         * the VMs have no network. */
        void (*net)(void *ud, const char *user, const char *session, int kind, int fd);
        /* count connections through the VM's net port were reset, never carried (cause: "removed",
         * the VM went; "reconnected", its port dialled anew; "not_carried", the guest dropped
         * them at its first sync: a VM booted from memory or adopted after a restart). Called on
         * the VM's net thread or the remover's. NULL: not reported. */
        void (*dropped)(void *ud, const char *user, const char *session, size_t count, const char *cause);
        void *ud;
};

struct engine_qemu_config {
        const char *data_dir;      /* VMs under {data_dir}/vm */
        const char *guest_dir;     /* vmlinux and initrd.gz (scripts/build-vm.sh) */
        const char *qemu_binary;   /* NULL: /usr/bin/qemu-system-x86_64 */
        int64_t disk_bytes;        /* a new workspace image's size; 0: 1 GiB */
        int boot_timeout_ms;       /* start waits this long for the runner; 0: 120 s */
        const char *docker_socket; /* the Docker the sessions' images are exported from (their root
                                    * file systems, qemu_rootfs.c); NULL: the busybox guest only */
};

/* A qemu engine; -ENOENT naming what is missing (QEMU, the guest's files). */
int engine_qemu_new(const struct engine_qemu_config *cfg, struct engine **ret, struct sbx_error *err);

/* Set the hub calls on e: a qemu engine, or the router of engine_select.c
 * that holds one; any other engine: nothing. Before the first create. */
void engine_qemu_set_runner(struct engine *e, const struct engine_qemu_runner *r);
/* The same, for the qemu engine itself (engine_select.c). */
void engine_qemu_bind(struct engine *qemu, const struct engine_qemu_runner *r);

/* The kinds of engine_qemu_runner.net's streams. */
#define ENGINE_QEMU_NET_EGRESS 1 /* a client of the guest's proxy endpoint: egress.sock */
#define ENGINE_QEMU_NET_FWD 2    /* the runner's fwd.sock connection (control or data) */

/* Stop every VM's net channel (joined: no net call runs after this) and make none from here
 * on: the daemon, before it frees what engine_qemu_runner.net reaches. e: a qemu engine,
 * or the router of engine_select.c that holds one (engine_qemu_unbind); another: nothing. */
void engine_qemu_net_stop(struct engine *e);
void engine_qemu_unbind(struct engine *e);

/* Whether id names a VM of this engine. */
bool engine_qemu_id(const char *id);

/* "kvm" or "tcg": how this engine's VMs run. */
const char *engine_qemu_accel(const struct engine *qemu);

/* ---- memory (src/qemu/qemu_mem.c, docs/microvm.md) ----
 * Guest RAM is a file (the VM's run/ram, mapped shared), so a save is QMP
 * stop and a migration of the devices' state (x-ignore-shared) to an fd.
 * These are the qemu engine's memory ops (engine.h: pause_to_disk,
 * memory_capture, memory_boot, memory_boot_cancel), which the rest of the
 * daemon calls through the seam. e: the qemu engine (another: -EOPNOTSUPP). */

/* Stop VM id, write its memory snapshot into dirfd (memory.state, the
 * frozen RAM memory.ram, the workspace disk disk.img; root's files), run it
 * on unless it was paused. -EDQUOT when its RAM and disk hold more than
 * room bytes; *ret_bytes what the files take. */
int engine_qemu_mem_snapshot(struct engine *e, const char *id, int dirfd, int64_t room, int64_t *ret_bytes,
                             struct sbx_error *err);
/* The next VM made for user/session boots from the memory snapshot in dir
 * (a root-owned directory that engine_qemu_mem_snapshot filled): the disk
 * copied in as the session's, the frozen RAM mapped private (shared
 * copy-on-write by every VM booted from it), every process where it was. */
int engine_qemu_mem_expect(struct engine *e, const char *user, const char *session, const char *dir,
                           struct sbx_error *err);
/* Pause VM id (paused already: QMP stop) to disk: its device state saved
 * beside its RAM file, QEMU gone. It reads as paused (inspect, list, also
 * to a restarted daemon); unpause boots it again from the save, every
 * process where it was; stop forgets the save. */
int engine_qemu_pause_to_disk(struct engine *e, const char *id, struct sbx_error *err);
/* Forget an expectation nobody claimed (a fork that failed before its VM). */
void engine_qemu_mem_unexpect(struct engine *e, const char *user, const char *session);

/* ---- leftovers (src/qemu/qemu_gc.c; engine.h: engine_microvm_gc, engine_microvm_rootfs_note,
 * which the router of engine_select.c forwards here). qemu: the qemu engine; another:
 * -EOPNOTSUPP. */
int engine_qemu_gc_run(struct engine *qemu, const struct engine_microvm_gc *o);
int engine_qemu_rootfs_note(struct engine *qemu, const char *id, char *buf, size_t size);

#endif
