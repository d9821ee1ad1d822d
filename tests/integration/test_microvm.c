/* Integration tests of the microVM runtime (docs/microvm.md) against real QEMU under TCG (KVM
 * where /dev/kvm opens): a user switched to `microvm` gets a QEMU microVM beside another user's
 * Docker session on the same daemon; exec runs in the guest (`uname -r` is the guest kernel's,
 * output and exit codes right), files go both ways through the workspace image, pause and
 * resume are QMP stop/cont, a daemon restart (a stop, or SIGKILL) adopts the running VM: the
 * session stays RUNNING on the same VM, a process started before is still there and an
 * execution started before finishes, and destroying the session leaves no QEMU process and
 * no VM files.
 * Skipped, saying why, where QEMU or the guest (scripts/build-vm.sh) is missing. Every VM
 * carries the per-run label and is removed in the fini, also when a test fails. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/container.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/cells.h"
#include "sandboxd/daemon.h"
#include "sandboxd/engine_qemu.h"
#include "sandboxd/events.h"
#include "sandboxd/exec.h"
#include "sandboxd/files.h"
#include "sandboxd/gc.h"
#include "sandboxd/privacy.h"
#include "sandboxd/runtime.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/snapshot.h"
#include "sandboxd/store_egress.h"
#include "testenv.h"

#define GUEST_DIR ENGINE_QEMU_GUEST_DIR

static struct sbx_config cfg;
static struct daemon *d;

/* Whatever a failed test left: every VM of this run, by the engine's own list and remove. */
static void remove_vms(void)
{
        struct engine_qemu_config qc = {.data_dir = cfg.data_dir, .guest_dir = GUEST_DIR};
        struct engine_container_summary *list = NULL;
        struct engine *e = NULL;
        size_t n = 0;

        if (d) {
                daemon_close(d);
                d = NULL;
        }
        if (!cfg.data_dir[0] || engine_qemu_new(&qc, &e, NULL) < 0)
                return;
        if (engine_list(e, fixture_labels(), true, &list, &n, NULL) == 0)
                for (size_t i = 0; i < n; i++)
                        (void)engine_remove(e, list[i].id, NULL);
        free(list);
        engine_free(e);
}

TestSuite(microvm, .timeout = 600, .fini = remove_vms);

static bool have_qemu(void)
{
        struct stat st;

        if (access("/usr/bin/qemu-system-x86_64", X_OK) < 0) {
                fprintf(stderr, "test_microvm: SKIPPED: no qemu-system-x86_64 (scripts/setup.sh installs it)\n");
                return false;
        }
        if (stat(GUEST_DIR "/vmlinux", &st) < 0 || stat(GUEST_DIR "/initrd.gz", &st) < 0) {
                fprintf(stderr, "test_microvm: SKIPPED: no guest in " GUEST_DIR " (scripts/build-vm.sh)\n");
                return false;
        }
        return true;
}

static int sh(const char *user, const char *session, const char *command, char **ret_out)
{
        struct exec_request req = {
                .user = user, .session = session, .command = command, .actor = "test", .timeout_s = 120};
        struct exec_result res;
        struct sbx_error err = {0};
        int code;

        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "exec %s: %s", command, err.msg);
        code = res.exit_code;
        if (ret_out)
                *ret_out = strdup(res.stdout_head ? res.stdout_head : "");
        exec_result_done(&res);
        return code;
}

/* Whether process pid carries this run's SANDBOXD_TEST_RUN (QEMU inherits the daemon's
 * environment): other suites, and other runs at the same time, boot VMs too. */
static bool this_run(const char *pid)
{
        const char *run = getenv("SANDBOXD_TEST_RUN");
        char path[300], want[160], *buf;
        size_t len;
        FILE *f;
        bool found = false;

        if (!run || !run[0])
                return true;
        snprintf(want, sizeof(want), "SANDBOXD_TEST_RUN=%s", run);
        snprintf(path, sizeof(path), "/proc/%s/environ", pid);
        if (!(f = fopen(path, "r")))
                return false;
        buf = malloc(65536);
        len = buf ? fread(buf, 1, 65535, f) : 0;
        fclose(f);
        for (size_t i = 0; i < len && !found; i += strlen(buf + i) + 1) {
                buf[len] = '\0';
                found = strcmp(buf + i, want) == 0;
        }
        free(buf);
        return found;
}

/* QEMU processes of this run. */
static int count_qemu(void)
{
        DIR *p = opendir("/proc");
        struct dirent *de;
        int n = 0;

        while (p && (de = readdir(p))) {
                char path[300], buf[4096];
                FILE *f;
                size_t len;

                if (de->d_name[0] < '1' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
                f = fopen(path, "r");
                if (!f)
                        continue;
                len = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                for (size_t i = 0; i < len; i++)
                        if (!buf[i])
                                buf[i] = ' ';
                buf[len] = '\0';
                if (strstr(buf, "qemu-system") && strstr(buf, "sbx.uid=") && strstr(buf, "microvm"))
                        n += this_run(de->d_name);
        }
        if (p)
                closedir(p);
        return n;
}

/* The jail of the QEMU that runs as uid: its real uid, and seccomp and no_new_privs set. */
static void expect_jailed(uid_t uid)
{
        char want[64], path[300], buf[4096];
        DIR *p = opendir("/proc");
        struct dirent *de;
        bool found = false;

        snprintf(want, sizeof(want), "sbx.uid=%u ", (unsigned)uid);
        while (p && (de = readdir(p)) && !found) {
                FILE *f;
                size_t len;

                if (de->d_name[0] < '1' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
                if (!(f = fopen(path, "r")))
                        continue;
                len = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                for (size_t i = 0; i < len; i++)
                        if (!buf[i])
                                buf[i] = ' ';
                buf[len] = '\0';
                if (!strstr(buf, "qemu-system") || !strstr(buf, want))
                        continue;
                found = true;
                snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
                cr_assert_not_null(f = fopen(path, "r"));
                len = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                buf[len] = '\0';
                snprintf(want, sizeof(want), "\nUid:\t%u\t%u\t%u\t%u\n", (unsigned)uid, (unsigned)uid, (unsigned)uid,
                         (unsigned)uid);
                cr_assert_not_null(strstr(buf, want), "QEMU is not the session's uid %u: %s", (unsigned)uid, buf);
                cr_assert_not_null(strstr(buf, "\nNoNewPrivs:\t1\n"), "QEMU may gain privileges: %s", buf);
                cr_assert_not_null(strstr(buf, "\nSeccomp:\t2\n"), "QEMU runs without its seccomp filter: %s", buf);
        }
        if (p)
                closedir(p);
        cr_assert(found, "no QEMU runs as the session's uid %u", (unsigned)uid);
}

/* A file of the VM's cgroup under one controller (cgroup v1, this host); NULL: none. */
static char *cg_read(const char *controller, const char *id, const char *name)
{
        char path[512], buf[256];
        FILE *f;
        size_t n;

        snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/sandboxd-vm/%s/%s", controller, id, name);
        if (!(f = fopen(path, "r")))
                return NULL;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        return strdup(buf);
}

/* QEMU runs in a cgroup of its own with the session's limits, where the host has the
 * controller (docs/microvm.md); a missing one is skipped, saying so. */
static void expect_cgroup(const char *id, int64_t guest_mem, int64_t nano_cpus)
{
        char *v;

        if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0) {
                fprintf(stderr, "test_microvm: cgroup checks SKIPPED: cgroup v2 here, the checks read v1 files\n");
                return;
        }
        if ((v = cg_read("memory", id, "memory.limit_in_bytes"))) {
                cr_assert_eq(strtoll(v, NULL, 10), guest_mem + (256 << 20), "memory limit %s", v);
                free(v);
                v = cg_read("memory", id, "tasks");
                cr_assert(v && v[0], "QEMU is not in its memory cgroup");
                free(v);
        } else {
                fprintf(stderr, "test_microvm: memory cgroup SKIPPED: no memory controller\n");
        }
        if ((v = cg_read("cpu", id, "cpu.cfs_quota_us"))) {
                cr_assert_eq(strtoll(v, NULL, 10), nano_cpus > 0 ? nano_cpus / 10000 : -1, "cpu quota %s", v);
                free(v);
        } else {
                fprintf(stderr, "test_microvm: cpu cgroup SKIPPED: no cpu controller\n");
        }
        if ((v = cg_read("pids", id, "pids.max"))) {
                cr_assert_eq(atoi(v), 64, "pids.max %s", v);
                free(v);
                v = cg_read("pids", id, "tasks");
                cr_assert(v && v[0], "QEMU is not in its pids cgroup");
                free(v);
        } else {
                fprintf(stderr, "test_microvm: pids cgroup SKIPPED: no pids controller\n");
        }
}

static void expect_private_root(const char *id, const char *other);

static int count_vm_dirs(void)
{
        char path[SBX_PATH_MAX];
        DIR *v;
        struct dirent *de;
        int n = 0;

        snprintf(path, sizeof(path), "%s/vm", cfg.data_dir);
        v = opendir(path);
        while (v && (de = readdir(v)))
                n += engine_qemu_id(de->d_name);
        if (v)
                closedir(v);
        return n;
}

Test(microvm, exec_files_pause_destroy)
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        struct session_info info;
        struct files_read_result rd;
        char *out = NULL, path[FILES_PATH_MAX], host_kernel[128] = "";
        int qemu_before;
        cJSON *r;

        if (!have_qemu())
                return;
        fixture_config(&cfg);
        cfg.port_range_lo = 30300; /* a range of this suite's own */
        cfg.port_range_hi = 30399;
        cfg.memory_bytes = 256 << 20;
        d = fixture_open_sockets(&cfg);
        qemu_before = count_qemu();

        r = apic_admin(cfg.admin_socket, "{\"cmd\":\"user.runtime\",\"user\":\"vmuser\",\"runtime\":\"microvm\"}");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* a Docker session beside it on the same daemon */
        cr_assert_eq(session_acquire(d->sessions, "plain", "s", &s, &err), 0, "%s", err.msg);
        session_release(s);
        cr_assert_eq(sh("plain", "s", "uname -r", &out), 0);
        snprintf(host_kernel, sizeof(host_kernel), "%s", out);
        free(out);

        cr_assert_eq(session_acquire(d->sessions, "vmuser", "s", &s, &err), 0, "the microVM session: %s", err.msg);
        session_release(s);
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(info.runtime, "microvm");
        cr_assert_str_eq(info.network_mode, "none");
        cr_assert(engine_qemu_id(info.container_id), "a VM's id: %s", info.container_id);
        cr_assert_neq(info.uid, 0);
        expect_jailed(info.uid);
        cr_assert(strcmp(info.accel, "tcg") == 0 || strcmp(info.accel, "kvm") == 0, "accel '%s'", info.accel);
        char first_vm[ENGINE_ID_STR_MAX];
        snprintf(first_vm, sizeof(first_vm), "%s", info.container_id);
        expect_cgroup(info.container_id, cfg.memory_bytes, cfg.nano_cpus);
        expect_private_root(info.container_id, NULL);
        cr_assert_str_eq(info.rootfs_note, "", "a VM on its image has no rootfs_note: %s", info.rootfs_note);
        session_info_done(&info);
        cr_assert_eq(count_qemu(), qemu_before + 1, "one QEMU for the session");

        /* the guest's kernel answers, not the host's; output and exit codes come back */
        cr_assert_eq(sh("vmuser", "s", "uname -r", &out), 0);
        cr_assert_not_null(strstr(out, "-cloud-amd64"), "the guest kernel: %s", out);
        cr_assert_str_neq(out, host_kernel, "the host's kernel answered: %s", out);
        free(out);
        cr_assert_eq(sh("vmuser", "s", "echo out; echo err >&2; exit 7", &out), 7);
        cr_assert_str_eq(out, "out\n");
        free(out);
        cr_assert_eq(sh("vmuser", "s", "id -u; ls /sys/class/net", &out), 0);
        cr_assert_eq(strstr(out, "eth"), NULL, "a network device in the guest: %s", out);
        cr_assert_neq(atoi(out), 0, "the runner runs as root in the guest: %s", out);
        free(out);

        /* files both ways, through the workspace image on virtio-blk */
        cr_assert_eq(files_write(&d->files, "vmuser", "s", "note.txt", "in the vm", 9, path, &err), 0, "%s", err.msg);
        cr_assert_eq(sh("vmuser", "s", "cat /workspace/note.txt; grep -c ' /workspace ext4' /proc/mounts", &out), 0);
        cr_assert_str_eq(out, "in the vm1\n");
        free(out);
        cr_assert_eq(sh("vmuser", "s", "echo from-exec > /workspace/back.txt", NULL), 0);
        cr_assert_eq(files_read(&d->files, "vmuser", "s", "back.txt", 0, -1, &rd, &err), 0, "%s", err.msg);
        cr_assert_str_eq(rd.data, "from-exec\n");
        files_read_result_done(&rd);

        /* pause and resume: QMP stop and cont; the guest carries on where it was */
        cr_assert_eq(session_pause(d->sessions, "vmuser", "s", "request", NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(session_state_to_string(info.state), "PAUSED");
        session_info_done(&info);
        cr_assert_eq(session_resume(d->sessions, "vmuser", "s", NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(sh("vmuser", "s", "cat /workspace/back.txt", &out), 0);
        cr_assert_str_eq(out, "from-exec\n");
        free(out);

        /* a daemon restart (a stop): the VM keeps running and the new daemon dials its channel
         * again, so the session keeps the same VM */
        char vm_id[ENGINE_ID_STR_MAX];
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        snprintf(vm_id, sizeof(vm_id), "%s", info.container_id);
        session_info_done(&info);
        daemon_close(d);
        d = fixture_open_sockets(&cfg);
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(session_state_to_string(info.state), "RUNNING");
        cr_assert_str_eq(info.container_id, vm_id, "the restart replaced the VM");
        session_info_done(&info);
        cr_assert_eq(sh("vmuser", "s", "cat /workspace/back.txt", &out), 0);
        cr_assert_str_eq(out, "from-exec\n");
        free(out);
        cr_assert_eq(count_qemu(), qemu_before + 1, "one QEMU for the session after the restart");

        /* destroyed: no QEMU, no VM directory, no disk */
        cr_assert_eq(session_destroy(d->sessions, "vmuser", "s", true, &err), 0, "%s", err.msg);
        cr_assert_eq(count_qemu(), qemu_before, "a QEMU outlived its session");
        cr_assert_eq(count_vm_dirs(), 0, "a VM's files outlived its session");
        {
                char cg[512];
                snprintf(cg, sizeof(cg), "/sys/fs/cgroup/memory/sandboxd-vm/%s", first_vm);
                cr_assert_neq(access(cg, F_OK), 0, "the VM's cgroup outlived it");
        }
        {
                char disks[SBX_PATH_MAX];
                DIR *dd;
                struct dirent *de;
                int n = 0;
                snprintf(disks, sizeof(disks), "%s/vm/disks", cfg.data_dir);
                dd = opendir(disks);
                while (dd && (de = readdir(dd)))
                        n += de->d_name[0] != '.';
                if (dd)
                        closedir(dd);
                cr_assert_eq(n, 0, "the session's disk outlived it");
        }
        cr_assert_eq(session_destroy(d->sessions, "plain", "s", true, &err), 0, "%s", err.msg);
}

/* Long-poll until the execution ends. */
static void wait_final(const char *user, const char *id, struct exec_result *res)
{
        for (int i = 0; i < 30; i++) {
                cr_assert_eq(exec_status(d->exec, user, id, -1, -1, 0, 10000, res, NULL), 0, "no execution %s", id);
                if (exec_state_is_final(res->state))
                        return;
                exec_result_done(res);
        }
        cr_assert_fail("execution %s did not end", id);
}

/* The child of adopted_after_sigkill: a daemon that switches the user to microvm, boots the
 * session's VM, starts an execution that waits for /tmp/go in the guest, says its id and
 * the VM's once the execution runs on the runner, and waits to be killed. No assertion. */
static void child_daemon(int fd)
{
        struct exec_request req = {.user = "vmuser",
                                   .session = "s",
                                   .command =
                                           "echo $$ > /tmp/long.pid; while [ ! -e /tmp/go ]; do sleep 0.2; done; "
                                           "echo survived",
                                   .actor = "test",
                                   .timeout_s = 600};
        struct session_info info;
        struct session *s = NULL;
        char ids[2][ENGINE_ID_STR_MAX] = {{0}};
        struct daemon *cd;
        cJSON *r;

        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test, whatever fails there */
        cd = fixture_open_sockets(&cfg);
        r = apic_admin(cfg.admin_socket, "{\"cmd\":\"user.runtime\",\"user\":\"vmuser\",\"runtime\":\"microvm\"}");
        if (!cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")))
                _exit(1);
        cJSON_Delete(r);
        if (session_acquire(cd->sessions, "vmuser", "s", &s, NULL) < 0)
                _exit(2);
        session_release(s);
        if (session_get_info(cd->sessions, "vmuser", "s", &info) < 0)
                _exit(3);
        snprintf(ids[1], sizeof(ids[1]), "%s", info.container_id);
        session_info_done(&info);
        if (exec_start(cd->exec, &req, ids[0], NULL) < 0)
                _exit(4);
        for (int k = 0;; k++) {
                struct exec_result res;
                if (k == 600 || exec_status(cd->exec, "vmuser", ids[0], -1, -1, 0, 100, &res, NULL) < 0)
                        _exit(5);
                bool on_runner = res.state == EXEC_RUNNING && strcmp(res.via, "runner") == 0;
                exec_result_done(&res);
                if (on_runner)
                        break;
        }
        (void)!write(fd, ids, sizeof(ids));
        pause();
        _exit(0);
}

Test(microvm, adopted_after_sigkill)
{
        char ids[2][ENGINE_ID_STR_MAX], *out = NULL;
        struct session_info info;
        struct exec_result res;
        struct sbx_error err = {0};
        int pipefd[2], qemu_before, st = 0;
        pid_t pid;

        if (!have_qemu())
                return;
        fixture_config(&cfg);
        cfg.port_range_lo = 30300;
        cfg.port_range_hi = 30399;
        cfg.memory_bytes = 256 << 20;
        qemu_before = count_qemu();
        cr_assert_eq(pipe(pipefd), 0);
        pid = fork(); /* before this process starts any thread */
        if (pid < 0)
                cr_assert_fail("fork: %m");
        if (pid == 0)
                child_daemon(pipefd[1]);
        close(pipefd[1]);
        ssize_t n = read(pipefd[0], ids, sizeof(ids));
        close(pipefd[0]);
        if (n != (ssize_t)sizeof(ids)) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                cr_assert_fail("the child daemon did not start the execution in its VM (exit %d)",
                               WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
        /* the daemon dies as SIGKILL has it: nothing closed, nothing saved; QEMU runs on */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        cr_assert_eq(count_qemu(), qemu_before + 1, "the VM did not outlive its daemon");

        d = fixture_open_sockets(&cfg); /* the same data_dir: reconciliation adopts the VM */
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(session_state_to_string(info.state), "RUNNING", "cause %s", info.error_cause);
        cr_assert_str_eq(info.container_id, ids[1], "the restart replaced the VM");
        session_info_done(&info);

        /* the process the execution started before the kill is still there, and new exec works */
        cr_assert_eq(sh("vmuser", "s", "kill -0 $(cat /tmp/long.pid) && echo alive", &out), 0);
        cr_assert_str_eq(out, "alive\n");
        free(out);
        /* the execution started before finishes, its output carried to the new daemon */
        cr_assert_eq(sh("vmuser", "s", "touch /tmp/go", NULL), 0);
        wait_final("vmuser", ids[0], &res);
        cr_assert_eq(res.state, EXEC_COMPLETED, "state %s cause %s: %s", exec_state_to_string(res.state),
                     exec_cause_to_string(res.cause), res.error);
        cr_assert_eq(res.exit_code, 0);
        cr_assert_str_eq(res.via, "runner");
        cr_assert(res.stdout_head_len == 9 && memcmp(res.stdout_head, "survived\n", 9) == 0, "stdout: %.*s",
                  (int)res.stdout_head_len, res.stdout_head);
        exec_result_done(&res);
        cr_assert_eq(count_qemu(), qemu_before + 1, "one QEMU for the session after the restart");

        cr_assert_eq(session_destroy(d->sessions, "vmuser", "s", true, &err), 0, "%s", err.msg);
        cr_assert_eq(count_qemu(), qemu_before, "a QEMU outlived its session");
}

/* Whether `echo after` runs in the session (an exec that cannot start is a no, not a failure). */
static bool echo_runs(const char *user, const char *session)
{
        struct exec_request req = {
                .user = user, .session = session, .command = "echo after", .actor = "test", .timeout_s = 60};
        struct exec_result res;
        bool ok;

        if (exec_run(d->exec, &req, &res, NULL) < 0)
                return false;
        ok = res.exit_code == 0 && res.stdout_head && strcmp(res.stdout_head, "after\n") == 0;
        exec_result_done(&res);
        return ok;
}

/* The session's QEMU pid, from its state file. */
static pid_t vm_pid(const char *id)
{
        char path[SBX_PATH_MAX + 64], buf[16384];
        FILE *f;
        size_t n;
        char *p;

        snprintf(path, sizeof(path), "%s/vm/%s/state", cfg.data_dir, id);
        if (!(f = fopen(path, "r")))
                return -1;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        p = strstr(buf, "\"pid\":");
        return p ? (pid_t)atoi(p + 6) : -1;
}

/* QEMU's private mount namespace (qemu_jail.c), seen from the host: its / is the jail's tmpfs,
 * read-only; it has /usr, its kernel and its own VM directory at /vm; nothing else of the host:
 * not /etc's files, not the data directory, so neither another VM's directory (other) nor the
 * disks. */
static void expect_private_root(const char *id, const char *other)
{
        char path[SBX_PATH_MAX + 160], buf[16384];
        struct stat a, b;
        pid_t pid = vm_pid(id);
        FILE *f;
        size_t n;

        cr_assert_gt(pid, 0, "VM %s has no QEMU", id);
        snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
        cr_assert_not_null(f = fopen(path, "r"), "%s", path);
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE ..." */
        bool root = false;
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
                char mroot[512], mpoint[512], opts[256];
                if (sscanf(line, "%*d %*d %*s %511s %511s %255s", mroot, mpoint, opts) != 3)
                        continue;
                if (strcmp(mpoint, "/") == 0) {
                        cr_assert_not_null(strstr(line, " - tmpfs sandboxd-qemu "), "QEMU's / is not its jail: %s",
                                           line);
                        cr_assert_eq(strncmp(opts, "ro", 2), 0, "QEMU's / is writable: %s", line);
                        root = true;
                }
                cr_assert_neq(strncmp(mpoint, cfg.data_dir, strlen(cfg.data_dir)), 0,
                              "the data directory is mounted in QEMU's view: %s", line);
        }
        cr_assert(root, "no / in QEMU's mountinfo");
        snprintf(path, sizeof(path), "/proc/%d/root/usr/bin", (int)pid);
        cr_assert_eq(access(path, F_OK), 0, "no /usr in QEMU's view");
        snprintf(path, sizeof(path), "/proc/%d/root/vmlinux", (int)pid);
        cr_assert_eq(access(path, F_OK), 0, "no kernel in QEMU's view");
        snprintf(path, sizeof(path), "/proc/%d/root/etc/passwd", (int)pid);
        cr_assert_neq(access(path, F_OK), 0, "the host's /etc is in QEMU's view");
        snprintf(path, sizeof(path), "/proc/%d/root/vm", (int)pid);
        cr_assert_eq(stat(path, &a), 0, "no /vm in QEMU's view");
        snprintf(path, sizeof(path), "%s/vm/%s", cfg.data_dir, id);
        cr_assert_eq(stat(path, &b), 0);
        cr_assert(a.st_dev == b.st_dev && a.st_ino == b.st_ino, "QEMU's /vm is not its own VM directory");
        snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, cfg.data_dir);
        cr_assert_neq(access(path, F_OK), 0, "the data directory %s is in QEMU's view", cfg.data_dir);
        snprintf(path, sizeof(path), "/proc/%d/root%s/vm/disks", (int)pid, cfg.data_dir);
        cr_assert_neq(access(path, F_OK), 0, "the disks are in QEMU's view");
        if (other) {
                snprintf(path, sizeof(path), "%s/vm/%s", cfg.data_dir, other);
                cr_assert_eq(access(path, F_OK), 0, "no VM %s on the host", other);
                snprintf(path, sizeof(path), "/proc/%d/root%s/vm/%s", (int)pid, cfg.data_dir, other);
                cr_assert_neq(access(path, F_OK), 0, "VM %s's directory is in VM %s's view", other, id);
        }
}

static bool session_in_error(const char *user, const char *session)
{
        struct session_info info;
        bool r;

        if (session_get_info(d->sessions, user, session, &info) < 0)
                return false;
        r = info.state == SESSION_ERROR;
        session_info_done(&info);
        return r;
}

/* A hostile guest: it floods the channel, cannot reach the channel's port to write frames of
 * its own, fills its disk, forks without end and loses its kernel. Each time the host and
 * another session (Docker, same daemon) carry on, and the session says what happened. */
Test(microvm, hostile_guest)
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        struct session_info info;
        struct exec_result res;
        char id[37], vm_before[ENGINE_ID_STR_MAX], *out = NULL;

        if (!have_qemu())
                return;
        fixture_config(&cfg);
        cfg.port_range_lo = 30300;
        cfg.port_range_hi = 30399;
        cfg.memory_bytes = 256 << 20;
        cfg.pids_limit = 64;
        cfg.workspace_quota_bytes = 64 << 20; /* the VM's disk: quick to fill under TCG */
        d = fixture_open(&cfg, true);         /* with the monitor, which sees a VM die */
        cr_assert_eq(runtime_set_user(d->runtime, "vmuser", "microvm", &err), 0, "%s", err.msg);
        cr_assert_eq(session_acquire(d->sessions, "plain", "s", &s, &err), 0, "%s", err.msg);
        session_release(s);
        cr_assert_eq(session_acquire(d->sessions, "vmuser", "s", &s, &err), 0, "%s", err.msg);
        session_release(s);

        /* a flood: 64 MiB of output as fast as the guest writes it; the other session answers
         * meanwhile, the flood ends with its bytes counted, and the VM still serves */
        struct exec_request flood = {.user = "vmuser",
                                     .session = "s",
                                     .command = "head -c 67108864 /dev/zero",
                                     .actor = "test",
                                     .timeout_s = 300};
        cr_assert_eq(exec_start(d->exec, &flood, id, &err), 0, "%s", err.msg);
        cr_assert_eq(sh("plain", "s", "echo ok", &out), 0);
        cr_assert_str_eq(out, "ok\n");
        free(out);
        for (int i = 0; i < 60; i++) {
                cr_assert_eq(exec_status(d->exec, "vmuser", id, -1, -1, 0, 10000, &res, NULL), 0);
                if (exec_state_is_final(res.state))
                        break;
                exec_result_done(&res);
        }
        cr_assert_eq(res.state, EXEC_COMPLETED, "the flood: %s %s", exec_state_to_string(res.state), res.error);
        cr_assert_eq(res.stdout_bytes, 67108864, "the flood's bytes: %llu", (unsigned long long)res.stdout_bytes);
        exec_result_done(&res);
        cr_assert_eq(sh("vmuser", "s", "echo still", &out), 0);
        cr_assert_str_eq(out, "still\n");
        free(out);

        /* garbage frames: both ports (the runner channel's, the net port's) are the runner's
         * alone (opened once as root, one opener at a time), so the session's uid can neither
         * write a frame to them nor read one; the device names are the guest kernel's */
        cr_assert_eq(sh("vmuser", "s",
                        "n=0; for p in /dev/vport*; do n=$((n+1)); printf garbage > $p 2>/dev/null && echo wrote $p; "
                        "cat $p >/dev/null 2>&1 && echo read $p; done; echo ports=$n",
                        &out),
                     0);
        cr_assert_str_eq(out, "ports=2\n", "the session's uid reached a port: %s", out);
        free(out);

        /* a full disk: the workspace image is a fixed size; the writer gets ENOSPC, the
         * session goes on, the host's file stays that size */
        cr_assert_neq(sh("vmuser", "s",
                         "dd if=/dev/zero of=/workspace/fill bs=1M 2>/tmp/dd.err; rc=$?; cat /tmp/dd.err; exit $rc",
                         &out),
                      0);
        cr_assert_not_null(strstr(out, "No space left"), "filling the disk: %s", out);
        free(out);
        cr_assert_eq(sh("vmuser", "s", "rm /workspace/fill && echo gone", &out), 0);
        cr_assert_str_eq(out, "gone\n");
        free(out);

        /* a fork bomb: the session's PID limit (RLIMIT_NPROC in the guest) stops it; the
         * execution's timeout ends it, and the next one runs, on the same VM: the runner runs
         * at nice -10 in the guest and the tenant's processes at 0, so on one TCG vCPU the
         * bomb does not starve its heartbeat (without that the hub gave the session up) */
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        snprintf(vm_before, sizeof(vm_before), "%s", info.container_id);
        session_info_done(&info);
        struct exec_request bomb = {.user = "vmuser",
                                    .session = "s",
                                    .command = "b() { b | b & }; b; sleep 30",
                                    .actor = "test",
                                    .timeout_s = 10};
        cr_assert_eq(exec_run(d->exec, &bomb, &res, &err), 0, "%s", err.msg);
        cr_assert_eq(res.cause, EXEC_CAUSE_TIMEOUT, "the bomb: %s", exec_cause_to_string(res.cause));
        exec_result_done(&res);
        cr_assert_eq(sh("plain", "s", "echo ok", &out), 0);
        free(out);
        cr_assert(TESTENV_WAIT_UNTIL(echo_runs("vmuser", "s"), 60000), "the VM did not serve after the bomb");
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(info.container_id, vm_before, "the bomb cost the session its VM (%s)", info.error_cause);
        session_info_done(&info);

        /* a kernel panic: /proc/sysrq-trigger is root's and the session's uid is not, so the
         * guest cannot panic its kernel on purpose; its VM dying (QEMU killed from outside, as a
         * panic with panic=-1 and -no-reboot ends it) is seen: the session is ERROR with a cause */
        cr_assert_neq(sh("vmuser", "s", "echo c > /proc/sysrq-trigger", NULL), 0, "the session's uid can panic");
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        pid_t qpid = vm_pid(info.container_id);
        session_info_done(&info);
        cr_assert_gt(qpid, 0);
        cr_assert_eq(kill(qpid, SIGKILL), 0);
        cr_assert(TESTENV_WAIT_UNTIL(session_in_error("vmuser", "s"), 60000), "the VM's death was not seen");
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(info.error_cause, "QEMU ended (killed, or its guest powered off)", "cause: %s",
                         info.error_cause);
        fprintf(stderr, "test_microvm: a dead VM's session: ERROR, cause %s: %s\n", info.error_cause, info.last_error);
        session_info_done(&info);
        cr_assert_eq(sh("plain", "s", "echo ok", &out), 0);
        free(out);
        /* its next use boots a new VM on the same disk */
        cr_assert_eq(sh("vmuser", "s", "echo back", &out), 0);
        cr_assert_str_eq(out, "back\n");
        free(out);

        cr_assert_eq(session_destroy(d->sessions, "vmuser", "s", true, &err), 0, "%s", err.msg);
        cr_assert_eq(session_destroy(d->sessions, "plain", "s", true, &err), 0, "%s", err.msg);
}

/* A daemon with user vmuser switched to microvm, its session s booted. */
static void vm_session(const char *session)
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        cJSON *r;

        fixture_config(&cfg);
        cfg.port_range_lo = 30300;
        cfg.port_range_hi = 30399;
        cfg.memory_bytes = 256 << 20;
        d = fixture_open_sockets(&cfg);
        r = apic_admin(cfg.admin_socket, "{\"cmd\":\"user.runtime\",\"user\":\"vmuser\",\"runtime\":\"microvm\"}");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cr_assert_eq(session_acquire(d->sessions, "vmuser", session, &s, &err), 0, "the microVM session: %s", err.msg);
        session_release(s);
}

/* A process left running in the guest (setsid, so the execution's end does not take it) and a
 * file in the guest's tmpfs /tmp: the memory of this VM, which no disk holds. */
static void guest_state_plant(const char *session, const char *mark)
{
        char cmd[256];

        snprintf(cmd, sizeof(cmd),
                 "setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > /tmp/bg.pid; echo %s > /tmp/mark", mark);
        cr_assert_eq(sh("vmuser", session, cmd, NULL), 0);
}

/* The planted process still runs (the same pid) and /tmp still says mark. */
static void guest_state_expect(const char *session, const char *mark)
{
        char *out = NULL, want[128];

        cr_assert_eq(sh("vmuser", session, "kill -0 $(cat /tmp/bg.pid) && echo alive; cat /tmp/mark", &out), 0,
                     "the guest lost its process or /tmp: %s", out ? out : "");
        snprintf(want, sizeof(want), "alive\n%s\n", mark);
        cr_assert_str_eq(out, want);
        free(out);
}

Test(microvm, pause_keeps_processes)
{
        struct sbx_error err = {0};
        struct session_info info;
        char *before = NULL, *after = NULL;

        if (!have_qemu())
                return;
        vm_session("s");
        guest_state_plant("s", "kept");
        cr_assert_eq(sh("vmuser", "s", "cat /tmp/bg.pid", &before), 0);

        /* QMP stop through the engine seam's pause: the guest's clock and processes stand still */
        cr_assert_eq(session_pause(d->sessions, "vmuser", "s", "request", NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(session_state_to_string(info.state), "PAUSED");
        session_info_done(&info);
        cr_assert_eq(session_resume(d->sessions, "vmuser", "s", NULL, &err), 0, "%s", err.msg);

        guest_state_expect("s", "kept");
        cr_assert_eq(sh("vmuser", "s", "cat /tmp/bg.pid", &after), 0);
        cr_assert_str_eq(after, before, "the background process is another one");
        free(before);
        free(after);
        cr_assert_eq(session_destroy(d->sessions, "vmuser", "s", true, &err), 0, "%s", err.msg);
}

/* The snapshot's directory exists (its files kept) or not. */
static bool snap_dir_exists(const char *id)
{
        char path[SBX_PATH_MAX];
        struct stat st;

        snprintf(path, sizeof(path), "%s/snapshots/vmuser/%s", cfg.data_dir, id);
        return stat(path, &st) == 0;
}

Test(microvm, memory_snapshot_fork_restore)
{
        struct sbx_error err = {0};
        struct store_snapshot snap;
        struct session *s = NULL;
        char id[STORE_SNAPSHOT_ID_MAX + 1], forked[STORE_SNAPSHOT_ID_MAX + 1], *pid = NULL, *out = NULL;

        if (!have_qemu())
                return;
        vm_session("s");
        guest_state_plant("s", "parent");
        cr_assert_eq(sh("vmuser", "s", "cat /tmp/bg.pid", &pid), 0);
        cr_assert_eq(sh("vmuser", "s", "echo on-disk > /workspace/disk.txt", NULL), 0);

        /* a Docker session asking for memory is told why not */
        cr_assert_eq(session_acquire(d->sessions, "plain", "s", &s, &err), 0, "%s", err.msg);
        session_release(s);
        cr_assert_eq(snapshot_take_memory(&d->snapshots, "plain", "s", NULL, true, "test", &snap, &err), -EOPNOTSUPP);
        cr_assert_not_null(strstr(err.msg, "microvm"), "%s", err.msg);

        err = (struct sbx_error){0};
        cr_assert_eq(snapshot_take_memory(&d->snapshots, "vmuser", "s", "mem", true, "test", &snap, &err), 0, "%s",
                     err.msg);
        cr_assert_str_eq(snap.kind, "microvm");
        cr_assert_gt(snap.bytes, 0);
        sbx_strlcpy(id, snap.id, sizeof(id));
        store_snapshot_done(&snap);
        guest_state_expect("s", "parent"); /* the parent ran on */

        /* two forks: both have the parent's process and /tmp, and its disk */
        cr_assert_eq(snapshot_fork(&d->snapshots, "vmuser", NULL, "mem", "f1", "test", forked, &err), 0, "%s", err.msg);
        cr_assert_str_eq(forked, id);
        cr_assert_eq(snapshot_fork(&d->snapshots, "vmuser", NULL, "mem", "f2", "test", forked, &err), 0, "%s", err.msg);
        guest_state_expect("f1", "parent");
        guest_state_expect("f2", "parent");
        {
                /* each fork's QEMU sees its own VM directory and not the other's */
                struct session_info i1, i2;
                cr_assert_eq(session_get_info(d->sessions, "vmuser", "f1", &i1), 0);
                cr_assert_eq(session_get_info(d->sessions, "vmuser", "f2", &i2), 0);
                expect_private_root(i1.container_id, i2.container_id);
                expect_private_root(i2.container_id, i1.container_id);
                session_info_done(&i1);
                session_info_done(&i2);
        }
        cr_assert_eq(sh("vmuser", "f1", "cat /tmp/bg.pid", &out), 0);
        cr_assert_str_eq(out, pid, "the fork's process is not the parent's");
        free(out);
        cr_assert_eq(sh("vmuser", "f2", "cat /workspace/disk.txt", &out), 0);
        cr_assert_str_eq(out, "on-disk\n");
        free(out);

        /* they diverge; the parent is untouched */
        cr_assert_eq(sh("vmuser", "f1", "echo f1 > /tmp/mark", NULL), 0);
        cr_assert_eq(sh("vmuser", "f2", "echo f2 > /tmp/mark; kill $(cat /tmp/bg.pid); echo f2 > /workspace/disk.txt",
                        NULL),
                     0);
        guest_state_expect("f1", "f1");
        cr_assert_eq(sh("vmuser", "f2", "cat /tmp/mark; kill -0 $(cat /tmp/bg.pid) 2>/dev/null || echo gone", &out), 0);
        cr_assert_str_eq(out, "f2\ngone\n");
        free(out);
        guest_state_expect("s", "parent");
        cr_assert_eq(sh("vmuser", "s", "cat /workspace/disk.txt", &out), 0);
        cr_assert_str_eq(out, "on-disk\n");
        free(out);

        /* restore: the parent goes back to the snapshot's instant, its later change gone */
        cr_assert_eq(sh("vmuser", "s", "echo later > /tmp/mark", NULL), 0);
        cr_assert_eq(snapshot_restore(&d->snapshots, "vmuser", "s", "mem", "test", NULL, &err), 0, "%s", err.msg);
        guest_state_expect("s", "parent");

        /* deleted: its files go (the forks run on, their pages their own or still mapped) */
        cr_assert_eq(snapshot_delete(&d->snapshots, "vmuser", "mem", "test", &err), 0, "%s", err.msg);
        cr_assert(!snap_dir_exists(id), "the snapshot's files outlived it");
        guest_state_expect("f1", "f1");
        free(pid);
        for (const char *const *k = (const char *const[]){"s", "f1", "f2", NULL}; *k; k++)
                cr_assert_eq(session_destroy(d->sessions, "vmuser", *k, true, &err), 0, "%s", err.msg);
        cr_assert_eq(session_destroy(d->sessions, "plain", "s", true, &err), 0, "%s", err.msg);
}

/* Whether the QEMU of session's VM runs: the pid in its state file is a live qemu-system (not a
 * count of every QEMU: other suites on this host run VMs too). */
static bool vm_qemu_running(const char *session)
{
        struct session_info info;
        char path[SBX_PATH_MAX + 128], buf[16384];
        FILE *f;
        size_t n;
        int pid = 0;
        cJSON *j;

        cr_assert_eq(session_get_info(d->sessions, "vmuser", session, &info), 0);
        snprintf(path, sizeof(path), "%s/vm/%s/state", cfg.data_dir, info.container_id);
        session_info_done(&info);
        cr_assert_not_null(f = fopen(path, "r"), "no state file %s", path);
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        cr_assert_not_null(j = cJSON_Parse(buf));
        if (cJSON_IsNumber(cJSON_GetObjectItem(j, "pid")))
                pid = cJSON_GetObjectItem(j, "pid")->valueint;
        cJSON_Delete(j);
        if (pid <= 0)
                return false;
        snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
        if (!(f = fopen(path, "r")))
                return false;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        return strstr(buf, "qemu-system") != NULL; /* argv[0] */
}

Test(microvm, pause_to_disk)
{
        struct sbx_error err = {0};
        struct session_info info;
        char *before = NULL, *after = NULL;

        if (!have_qemu())
                return;
        vm_session("s");
        guest_state_plant("s", "saved");
        cr_assert_eq(sh("vmuser", "s", "cat /tmp/bg.pid", &before), 0);
        cr_assert(vm_qemu_running("s"));

        cr_assert_eq(session_pause(d->sessions, "vmuser", "s", "to_disk", NULL, &err), 0, "%s", err.msg);
        cr_assert(!vm_qemu_running("s"), "QEMU outlived a pause to disk");
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(session_state_to_string(info.state), "PAUSED");
        session_info_done(&info);

        cr_assert_eq(session_resume(d->sessions, "vmuser", "s", NULL, &err), 0, "%s", err.msg);
        cr_assert(vm_qemu_running("s"));
        guest_state_expect("s", "saved");
        cr_assert_eq(sh("vmuser", "s", "cat /tmp/bg.pid", &after), 0);
        cr_assert_str_eq(after, before);
        free(before);
        free(after);

        /* any request resumes it too */
        cr_assert_eq(session_pause(d->sessions, "vmuser", "s", "to_disk", NULL, &err), 0, "%s", err.msg);
        cr_assert(!vm_qemu_running("s"));
        guest_state_expect("s", "saved");
        cr_assert_eq(session_destroy(d->sessions, "vmuser", "s", true, &err), 0, "%s", err.msg);
        cr_assert_eq(count_vm_dirs(), 0, "a VM's files outlived its session");
}

/* ---- egress and forwards over the net port (src/qemu/qemu_net.c, runner/vmux.h) ---- */

/* A plain HTTP upstream on the host's loopback (python), answering "hello"; its port. */
static pid_t up_pid;
static int upstream_start(void)
{
        static const char py[] =
                "import http.server, sys\n"
                "class H(http.server.BaseHTTPRequestHandler):\n"
                "    def do_GET(self):\n"
                "        self.send_response(200); self.send_header('Content-Length', '5')\n"
                "        self.end_headers(); self.wfile.write(b'hello')\n"
                "    def log_message(self, *a): pass\n"
                "h = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
                "print(h.server_address[1], flush=True)\n"
                "h.serve_forever()\n";
        int pipefd[2], port = 0;
        FILE *f;

        cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
        up_pid = fork();
        cr_assert_geq(up_pid, 0);
        if (up_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(pipefd[1], 1);
                execlp("python3", "python3", "-c", py, (char *)NULL);
                _exit(127);
        }
        close(pipefd[1]);
        f = fdopen(pipefd[0], "r");
        cr_assert(f && fscanf(f, "%d", &port) == 1, "the upstream did not start");
        fclose(f);
        return port;
}

static void upstream_stop(void)
{
        if (up_pid > 0) {
                kill(up_pid, SIGKILL);
                waitpid(up_pid, NULL, 0);
                up_pid = 0;
        }
}

/* GET / from 127.0.0.1:port on the host; the whole reply (malloc'd), NULL if nothing connects. */
static char *host_get(int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct timeval tv = {60, 0};
        static const char req[] = "GET / HTTP/1.0\r\n\r\n";
        char *buf = calloc(1, 65536);
        size_t len = 0;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        cr_assert(fd >= 0 && buf);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                free(buf);
                return NULL;
        }
        cr_assert_eq(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
        for (;;) {
                ssize_t n = recv(fd, buf + len, 65535 - len, 0);
                if (n <= 0)
                        break;
                len += (size_t)n;
        }
        close(fd);
        return buf;
}

/* Whether the session's audit rows hold a row for host with decision and reason ("": any). */
static bool egress_row(const char *session, const char *host, const char *decision, const char *reason)
{
        struct store_egress_entry *rows = NULL;
        size_t n = 0;
        bool seen = false;

        cr_assert_eq(store_egress_log_list(d->store, "vmuser", session, 200, &rows, &n), 0);
        for (size_t i = 0; i < n; i++)
                seen |= strcmp(rows[i].host, host) == 0 && strcmp(rows[i].decision, decision) == 0 &&
                        (!reason[0] || strcmp(rows[i].reason, reason) == 0);
        free(rows);
        return seen;
}

static bool service_port_seen(void *ud)
{
        struct service_info *list = NULL;
        size_t n = 0;
        bool seen = false;

        (void)ud;
        if (service_list(d->services, "vmuser", "net", &list, &n) < 0)
                return false;
        for (size_t i = 0; i < n; i++)
                for (size_t k = 0; k < list[i].n_ports; k++)
                        seen |= list[i].ports[k].container_port == CONTAINER_PORT_BASE &&
                                list[i].ports[k].host_port > 0;
        free(list);
        return seen;
}

static bool forward_answers(void *ud)
{
        char *out = host_get(*(int *)ud);
        bool ok = out && strstr(out, "from-the-guest");
        free(out);
        return ok;
}

/* A connection to the block's port left open: the request not finished, so the guest's httpd
 * holds it (for its 60 s header timeout). The socket. */
static int host_hold(int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        static const char part[] = "GET / HTTP/1.0\r\n";
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        cr_assert(fd >= 0);
        cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%m");
        cr_assert_eq(send(fd, part, sizeof(part) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(part) - 1);
        return fd;
}

/* The guest's httpd (port 8000) has an established connection (*ud true: the forward's
 * stream is open), or none (*ud false). */
static bool guest_conn_open(void *ud)
{
        char *out = NULL;
        bool open, want = *(bool *)ud;

        if (sh("vmuser", "net",
               "cat /proc/net/tcp /proc/net/tcp6 | awk '$2 ~ /0100007F:1F40$/ && $4 == \"01\"' | wc -l", &out) != 0) {
                free(out);
                return false;
        }
        open = out && atoi(out) >= 1;
        free(out);
        return open == want;
}

/* The newest event id of vmuser's now (where dropped_seen starts). */
static int64_t events_mark(void)
{
        struct event **evs = NULL;
        size_t n = 0;
        bool gap = false;
        int64_t oldest = 0, next = 0;

        cr_assert_eq(events_flush(10000), 0);
        cr_assert_eq(events_read("vmuser", -1, 1, &evs, &n, &gap, &oldest, &next), 0);
        events_free_array(evs, n);
        return next;
}

struct dropped_want {
        int64_t after;
        const char *session;
};

/* A session.connections_dropped event of the session after w->after, cause not_carried, at
 * least one connection. */
static bool dropped_seen(void *ud)
{
        struct dropped_want *w = ud;
        struct event **evs = NULL;
        size_t n = 0;
        bool gap = false, seen = false;
        int64_t oldest = 0, next = 0;

        (void)events_flush(5000);
        if (events_read("vmuser", w->after, 200, &evs, &n, &gap, &oldest, &next) < 0)
                return false;
        for (size_t i = 0; i < n && !seen; i++) {
                cJSON *o = cJSON_Parse(evs[i]->data);
                seen = strcmp(evs[i]->type, EVENT_SESSION_CONNECTIONS_DROPPED) == 0 &&
                       strcmp(evs[i]->session, w->session) == 0 &&
                       cJSON_GetNumberValue(cJSON_GetObjectItem(o, "count")) >= 1 &&
                       strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "cause")) ?: "", "not_carried") == 0;
                cJSON_Delete(o);
        }
        events_free_array(evs, n);
        return seen;
}

/* One boot: egress through the daemon's proxy with the session's policy and audit, an
 * execution's narrowing attributed to it (the runner's RP_EGRESS_FROM over the port), a
 * service in the guest reached through the session's port block on the host's 127.0.0.1, and
 * the ratchet: once private, the VM has no way out and the block is closed. */
Test(microvm, egress_forwards_ratchet)
{
        struct sbx_error err = {0};
        struct session *s = NULL;
        struct session_info info;
        struct exec_request req = {.user = "vmuser", .session = "net", .actor = "test", .timeout_s = 120};
        struct exec_result res;
        struct egress_net none = {.set = true};
        char cmd[512], reason[64], *out = NULL;
        int up, host_port;

        if (!have_qemu())
                return;
        up = upstream_start();
        fixture_config(&cfg);
        cfg.port_range_lo = 30300;
        cfg.port_range_hi = 30399;
        cfg.memory_bytes = 256 << 20;
        cr_assert_eq(config_set(&cfg, "egress.allow", "up.test:*", &err), 0, "%s", err.msg);
        cr_assert_eq(config_set(&cfg, "egress.resolve", "up.test=127.0.0.1, blocked.test=127.0.0.1", &err), 0, "%s",
                     err.msg);
        cr_assert_eq(config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err), 0, "%s", err.msg);
        d = fixture_open(&cfg, true); /* with the monitor: the service's ports are applied by it */
        cr_assert_eq(runtime_set_user(d->runtime, "vmuser", "microvm", &err), 0, "%s", err.msg);
        cr_assert_eq(session_acquire(d->sessions, "vmuser", "net", &s, &err), 0, "the microVM session: %s", err.msg);
        session_release(s);
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "net", &info), 0);
        cr_assert_str_eq(info.runtime, "microvm");
        cr_assert_gt(info.n_ports, 0, "a microVM session has its port block");
        host_port = info.ports[0];
        session_info_done(&info);

        /* still no network device: only the proxy variables and the runner's endpoint */
        cr_assert_eq(sh("vmuser", "net", "ls /sys/class/net; echo $http_proxy", &out), 0);
        cr_assert_str_eq(out, "lo\nhttp://127.0.0.1:3128\n", "the guest's network: %s", out);
        free(out);

        /* egress through the daemon's proxy, by name, with its policy and its audit rows */
        snprintf(cmd, sizeof(cmd), "wget -q -O - http://up.test:%d/", up);
        cr_assert_eq(sh("vmuser", "net", cmd, &out), 0, "wget through the proxy: %s", out);
        cr_assert_str_eq(out, "hello");
        free(out);
        snprintf(cmd, sizeof(cmd), "wget -q -O - http://blocked.test:%d/ 2>&1; echo rc=$?", up);
        cr_assert_eq(sh("vmuser", "net", cmd, &out), 0);
        cr_assert_not_null(strstr(out, "403"), "the blocked name: %s", out);
        free(out);
        cr_assert(egress_row("net", "up.test", "allowed", ""), "the allowed request has its row");
        cr_assert(egress_row("net", "blocked.test", "blocked", "not_allowed"), "the blocked request has its row");
        /* without the proxy there is no way out: no route at all */
        snprintf(cmd, sizeof(cmd), "wget -q -Y off -T 10 -O - http://127.0.0.1:%d/ 2>&1; echo rc=$?", up);
        cr_assert_eq(sh("vmuser", "net", cmd, &out), 0);
        cr_assert_null(strstr(out, "hello"), "reached the host without the proxy: %s", out);
        free(out);

        /* an execution narrowed to nothing: refused, and the row names that execution */
        snprintf(cmd, sizeof(cmd), "http_proxy=http://127.0.0.1:3128 wget -q -O - http://up.test:%d/ 2>&1; echo rc=$?",
                 up);
        req.command = cmd;
        req.network = &none;
        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s", err.msg);
        cr_assert_not_null(strstr(res.stdout_head ? res.stdout_head : "", "403"), "narrowed: %s",
                           res.stdout_head ? res.stdout_head : "");
        snprintf(reason, sizeof(reason), "narrowed:%s", res.id);
        exec_result_done(&res);
        cr_assert(egress_row("net", "up.test", "blocked", reason), "the refusal's row names the execution");

        /* a service in the guest, reached through the session's port block on the host */
        cr_assert_eq(sh("vmuser", "net", "mkdir -p /workspace/www && echo from-the-guest > /workspace/www/index.html",
                        NULL),
                     0);
        cr_assert_eq(service_start(d->services, "vmuser", "net", "web", "httpd -f -p 8000 -h /workspace/www", NULL,
                                   NULL, &err),
                     0, "%s", err.msg);
        /* until httpd listens, a forward finds nothing there and the client is closed */
        if (fixture_wait(forward_answers, &host_port, 60000) < 0) {
                char *ps = NULL;
                (void)sh("vmuser", "net", "ps; cat /proc/net/tcp /proc/net/tcp6", &ps);
                cr_assert_fail("the block's port %d never reached the guest's service; guest: %s", host_port, ps);
        }
        /* and the service says which of its ports the block forwards, as in a container */
        cr_assert_geq(fixture_wait(service_port_seen, NULL, 30000), 0, "the service's port was never detected");
        /* a few at once, each its own stream */
        for (int i = 0; i < 8; i++) {
                out = host_get(host_port);
                cr_assert(out && strstr(out, "from-the-guest"), "forward %d: %s", i, out ? out : "(none)");
                free(out);
        }

        /* what cannot be carried is reported: a connection open through the block when a memory
         * snapshot is taken is counted in it, and its fork, whose guest drops it, says so (the
         * fork's result and a session.connections_dropped event); the parent keeps it */
        bool yes = true, no = false;
        int held = host_hold(host_port);
        cr_assert_geq(fixture_wait(guest_conn_open, &yes, 60000), 0, "the held connection never reached httpd");
        struct store_snapshot snap;
        char forked[STORE_SNAPSHOT_ID_MAX + 1];
        cr_assert_eq(snapshot_take_memory(&d->snapshots, "vmuser", "net", "conn", true, "test", &snap, &err), 0, "%s",
                     err.msg);
        cr_assert_geq(snapshot_dropped_connections(&cfg, "vmuser", snap.id), 1, "the snapshot counts no connection");
        store_snapshot_done(&snap);
        struct dropped_want want = {.after = events_mark(), .session = "netf"};
        cr_assert_eq(snapshot_fork(&d->snapshots, "vmuser", NULL, "conn", "netf", "test", forked, &err), 0, "%s",
                     err.msg);
        cr_assert_geq(fixture_wait(dropped_seen, &want, 60000), 0, "the fork's dropped connection was not reported");
        cr_assert_eq(session_destroy(d->sessions, "vmuser", "netf", true, &err), 0, "%s", err.msg);
        cr_assert_eq(snapshot_delete(&d->snapshots, "vmuser", "conn", "test", &err), 0, "%s", err.msg);
        close(held);
        cr_assert_geq(fixture_wait(guest_conn_open, &no, 60000), 0, "the closed connection stayed in the guest");

        /* a daemon restart: the VM is adopted, its net port dialled again and synced anew (the
         * guest drops the old connection's streams, and says how many: one held open here); the
         * forward and egress work again */
        held = host_hold(host_port);
        cr_assert_geq(fixture_wait(guest_conn_open, &yes, 60000), 0, "the held connection never reached httpd");
        want = (struct dropped_want){.after = events_mark(), .session = "net"};
        daemon_close(d);
        close(held);
        d = fixture_open(&cfg, true);
        cr_assert_geq(fixture_wait(dropped_seen, &want, 90000), 0,
                      "the connection the restart dropped was not reported");
        cr_assert_geq(fixture_wait(forward_answers, &host_port, 90000), 0,
                      "after a restart the block's port %d never reached the guest's service again", host_port);
        snprintf(cmd, sizeof(cmd), "wget -q -O - http://up.test:%d/", up);
        cr_assert_eq(sh("vmuser", "net", cmd, &out), 0, "wget after the restart: %s", out);
        cr_assert_str_eq(out, "hello");
        free(out);
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "net", &info), 0);
        cr_assert_eq(info.ports[0], host_port, "the block moved");
        session_info_done(&info);

        /* the ratchet: private, the session is served nothing */
        cr_assert_eq(privacy_mark(d->privacy, "vmuser", "net", "payroll", "hr", "test", &err), 0, "%s", err.msg);
        int64_t t0 = sbx_now_ms();
        snprintf(cmd, sizeof(cmd), "wget -q -T 60 -O - http://up.test:%d/ 2>&1; echo rc=$?", up);
        cr_assert_eq(sh("vmuser", "net", cmd, &out), 0);
        /* (busybox's wget dies of a proxy connection that ends before any byte of an answer) */
        fprintf(stderr, "test_microvm: private: the proxy refused in %lld ms: %s", (long long)(sbx_now_ms() - t0), out);
        cr_assert_null(strstr(out, "hello"), "a private session reached out: %s", out);
        cr_assert_null(strstr(out, "rc=0"), "a private session's request succeeded: %s", out);
        free(out);
        out = host_get(host_port);
        cr_assert(!out || !strstr(out, "from-the-guest"), "a private session's port still forwards: %s", out);
        free(out);

        cr_assert_eq(session_destroy(d->sessions, "vmuser", "net", true, &err), 0, "%s", err.msg);
        daemon_close(d);
        d = NULL;
        upstream_stop();
}

/* The session's image is the guest's root file system (qemu_rootfs.c): made once from the
 * python image (docker export into an ext4 image), read-only on a second virtio-blk disk; the
 * runner chroots into it, so python3 and the cell harness's matplotlib are there. */
Test(microvm, image_root_fs_python_cells)
{
        struct sbx_error err = {0};
        struct session_info info;
        struct session *s = NULL;
        char *out = NULL, path[SBX_PATH_MAX + 128];
        cJSON *r, *o;

        if (!have_qemu())
                return;
        fixture_config(&cfg);
        cfg.port_range_lo = 30300;
        cfg.port_range_hi = 30399;
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        cfg.memory_bytes = 768 << 20; /* a kernel with matplotlib */
        cfg.pids_limit = 256;
        if (cfg.exec_timeout_max_s < 600)
                cfg.exec_timeout_max_s = 600; /* the cells' deadline below */
        d = fixture_open_sockets(&cfg);
        r = apic_admin(cfg.admin_socket, "{\"cmd\":\"user.runtime\",\"user\":\"vmuser\",\"runtime\":\"microvm\"}");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cr_assert_eq(session_acquire(d->sessions, "vmuser", "s", &s, &err), 0, "the microVM session: %s", err.msg);
        session_release(s);

        /* the VM has the image's root file system, read-only (its state file names it, no note) */
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        snprintf(path, sizeof(path), "%s/vm/%s/state", cfg.data_dir, info.container_id);
        session_info_done(&info);
        {
                FILE *f = fopen(path, "r");
                char buf[16384];
                size_t n;
                cr_assert_not_null(f, "no state file %s", path);
                n = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                buf[n] = '\0';
                cr_assert_not_null(strstr(buf, "\"rootfs\":"), "no root file system: %s", buf);
                cr_assert_null(strstr(buf, "rootfs_note"), "%s", buf);
        }
        cr_assert_eq(sh("vmuser", "s",
                        "python3 -c 'import sys, matplotlib; print(sys.version_info[0], matplotlib.get_backend())'; "
                        "uname -r; grep -c '^/dev/vdb / ext4 ro,' /proc/mounts; "
                        "grep -c ' /workspace ext4 rw,' /proc/mounts; echo $HOME",
                        &out),
                     0, "%s", out);
        cr_assert(strncmp(out, "3 agg\n", 6) == 0 || strncmp(out, "3 Agg\n", 6) == 0, "%s", out);
        cr_assert_not_null(strstr(out, "-cloud-amd64\n1\n1\n/workspace\n"), "%s", out);
        free(out);
        /* read-only: the uid cannot write the image, and neither could root (ro mount) */
        cr_assert_neq(sh("vmuser", "s", "touch /usr/local/x 2>/dev/null", NULL), 0);
        cr_assert_eq(sh("vmuser", "s", "echo w > /workspace/w.txt && echo t > /tmp/t && cat /workspace/w.txt /tmp/t",
                        &out),
                     0);
        cr_assert_str_eq(out, "w\nt\n");
        free(out);

        /* a cell in the python kernel, then a chart: image/png */
        /* TCG on a shared host: the kernel's first matplotlib import builds its font cache */
        struct cells_request req = {
                .user = "vmuser", .session = "s", .code = "x = 41", .actor = "test", .timeout_s = 600};
        cr_assert_eq(cells_run(d->cells, &req, &r, &err), 0, "%s", err.msg);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "status")), "ok", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        req.code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nprint(x + 1)";
        cr_assert_eq(cells_run(d->cells, &req, &r, &err), 0, "%s", err.msg);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "stdout")), "42\n", "%s",
                         cJSON_PrintUnformatted(r));
        o = NULL;
        {
                cJSON *it;
                cJSON_ArrayForEach(it, cJSON_GetObjectItem(r, "outputs")) {
                        cJSON *data = cJSON_GetObjectItem(it, "data");
                        if (!o && cJSON_GetObjectItem(data, "image/png"))
                                o = it;
                }
        }
        cr_assert_not_null(o, "no image/png: %s", cJSON_PrintUnformatted(r));
        cr_assert_gt(strlen(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), "image/png"))),
                     100);
        cJSON_Delete(r);

        /* a memory snapshot's forks keep the interpreter (its job is in the guest's memory): x is
         * there in both, no state_lost, and they diverge; the parent is untouched */
        struct store_snapshot snap;
        char forked[STORE_SNAPSHOT_ID_MAX + 1];
        cr_assert_eq(snapshot_take_memory(&d->snapshots, "vmuser", "s", "mem", true, "test", &snap, &err), 0, "%s",
                     err.msg);
        store_snapshot_done(&snap);
        cr_assert_eq(snapshot_fork(&d->snapshots, "vmuser", NULL, "mem", "f1", "test", forked, &err), 0, "%s", err.msg);
        cr_assert_eq(snapshot_fork(&d->snapshots, "vmuser", NULL, "mem", "f2", "test", forked, &err), 0, "%s", err.msg);
        static const struct {
                const char *session, *code, *want;
        } steps[] = {
                {"f1", "print(x)\nx = 1", "41\n"}, {"f2", "print(x)\nx = 2", "41\n"}, {"f1", "print(x)", "1\n"},
                {"f2", "print(x)", "2\n"},         {"s", "print(x)", "41\n"},
        };
        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
                req.session = steps[i].session;
                req.code = steps[i].code;
                cr_assert_eq(cells_run(d->cells, &req, &r, &err), 0, "%s", err.msg);
                cr_assert_null(cJSON_GetObjectItem(r, "state_lost"), "%s: %s", steps[i].session,
                               cJSON_PrintUnformatted(r));
                cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "stdout")), steps[i].want, "%s: %s",
                                 steps[i].session, cJSON_PrintUnformatted(r));
                cJSON_Delete(r);
        }
        /* a restore from it brings the parent's interpreter back as it was then: x changed
         * after the snapshot is 41 again, and no state_lost (the session runs at once) */
        req.session = "s";
        req.code = "x = 99";
        cr_assert_eq(cells_run(d->cells, &req, &r, &err), 0, "%s", err.msg);
        cJSON_Delete(r);
        cr_assert_eq(snapshot_restore(&d->snapshots, "vmuser", "s", "mem", "test", NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        cr_assert_str_eq(session_state_to_string(info.state), "RUNNING");
        session_info_done(&info);
        req.code = "print(x)";
        cr_assert_eq(cells_run(d->cells, &req, &r, &err), 0, "%s", err.msg);
        cr_assert_null(cJSON_GetObjectItem(r, "state_lost"), "restored: %s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "stdout")), "41\n", "restored: %s",
                         cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cr_assert_eq(snapshot_delete(&d->snapshots, "vmuser", "mem", "test", &err), 0, "%s", err.msg);
        for (const char *const *k = (const char *const[]){"s", "f1", "f2", NULL}; *k; k++)
                cr_assert_eq(session_destroy(d->sessions, "vmuser", *k, true, &err), 0, "%s", err.msg);
}

/* Where the image's root file system cannot be made the VM boots the busybox guest and its
 * state says why (and the log): here its cache directory's name is taken by a file. */
Test(microvm, busybox_guest_without_image)
{
        struct sbx_error err = {0};
        struct session_info info;
        char *out = NULL, path[SBX_PATH_MAX + 128];
        FILE *f;

        if (!have_qemu())
                return;
        fixture_config(&cfg);
        cr_assert(mkdir(cfg.data_dir, 0711) == 0 || errno == EEXIST, "%s: %s", cfg.data_dir, strerror(errno));
        snprintf(path, sizeof(path), "%s/vm", cfg.data_dir);
        cr_assert(mkdir(path, 0711) == 0 || errno == EEXIST, "%s: %s", path, strerror(errno));
        snprintf(path, sizeof(path), "%s/vm/rootfs", cfg.data_dir);
        cr_assert_not_null(f = fopen(path, "w"));
        fclose(f);
        cfg.port_range_lo = 30300;
        cfg.port_range_hi = 30399;
        cfg.memory_bytes = 256 << 20;
        d = fixture_open_sockets(&cfg);
        {
                cJSON *r = apic_admin(cfg.admin_socket,
                                      "{\"cmd\":\"user.runtime\",\"user\":\"vmuser\",\"runtime\":\"microvm\"}");
                cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "%s", cJSON_PrintUnformatted(r));
                cJSON_Delete(r);
                struct session *s = NULL;
                cr_assert_eq(session_acquire(d->sessions, "vmuser", "s", &s, &err), 0, "%s", err.msg);
                session_release(s);
        }
        cr_assert_eq(sh("vmuser", "s", "grep -c ' / ' /proc/mounts; ls /usr 2>/dev/null | wc -l; uname -r", &out), 0);
        cr_assert_not_null(strstr(out, "-cloud-amd64"), "%s", out);
        cr_assert(strncmp(out, "0\n0\n", 4) == 0 || strncmp(out, "1\n0\n", 4) == 0, "not the busybox guest: %s", out);
        free(out);
        cr_assert_eq(session_get_info(d->sessions, "vmuser", "s", &info), 0);
        snprintf(path, sizeof(path), "%s/vm/%s/state", cfg.data_dir, info.container_id);
        /* session_info says why (issue 38), and so does session.show (sandboxctl show) */
        cr_assert_not_null(strstr(info.rootfs_note, "no root file system from image"), "rootfs_note '%s'",
                           info.rootfs_note);
        cr_assert(strcmp(info.accel, "tcg") == 0 || strcmp(info.accel, "kvm") == 0, "accel '%s'", info.accel);
        session_info_done(&info);
        {
                cJSON *r = apic_admin(cfg.admin_socket,
                                      "{\"cmd\":\"session.show\",\"user\":\"vmuser\",\"session\":\"s\"}");
                cJSON *res = cJSON_GetObjectItem(r, "result"), *note = cJSON_GetObjectItem(res, "rootfs_note");
                cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "%s", cJSON_PrintUnformatted(r));
                cr_assert(cJSON_IsString(note) && strstr(note->valuestring, "no root file system from image"), "%s",
                          cJSON_PrintUnformatted(r));
                cr_assert(cJSON_IsString(cJSON_GetObjectItem(res, "accel")), "%s", cJSON_PrintUnformatted(r));
                cJSON_Delete(r);
        }
        {
                char buf[16384];
                size_t n;
                cr_assert_not_null(f = fopen(path, "r"), "no state file %s", path);
                n = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                buf[n] = '\0';
                cr_assert_not_null(strstr(buf, "\"rootfs_note\":\"no root file system from image"), "%s", buf);
        }
        cr_assert_eq(session_destroy(d->sessions, "vmuser", "s", true, &err), 0, "%s", err.msg);
}

/* ---- leftovers: cgroups without their VM, root file systems nothing uses (qemu_gc.c) ---- */

static void fake_vm_id(char ret[ENGINE_ID_STR_MAX])
{
        static const char hex[] = "0123456789abcdef";
        int n = snprintf(ret, ENGINE_ID_STR_MAX, "%s", ENGINE_QEMU_ID_PREFIX);

        for (int i = 0; i < 32; i++)
                ret[n + i] = hex[(unsigned)rand() % 16];
        ret[n + 32] = '\0';
        cr_assert(engine_qemu_id(ret), "%s", ret);
}

static const char *const cg_ctrls[] = {"cpu", "memory", "pids"};

static bool cg_exists(const char *ctrl, const char *id)
{
        char path[256];
        snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/sandboxd-vm/%s", ctrl, id);
        return access(path, F_OK) == 0;
}

static void cg_mk(const char *id)
{
        char path[256];
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/sandboxd-vm", cg_ctrls[i]);
                cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "%s: %s", path, strerror(errno));
                snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/sandboxd-vm/%s", cg_ctrls[i], id);
                cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "%s: %s", path, strerror(errno));
        }
}

static void cg_rm(const char *id)
{
        char path[256];
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/sandboxd-vm/%s", cg_ctrls[i], id);
                (void)rmdir(path);
        }
}

static void run_gc(bool dry_run, struct gc_report *rep)
{
        struct gc_options o = {.dry_run = dry_run};
        struct sbx_error err = {0};

        memset(rep, 0, sizeof(*rep));
        cr_assert_eq(gc_run(&cfg, &o, rep, &err), 0, "gc_run: %s", err.msg);
}

/* The report has kind's item whose id ends with tail, removed (or, dry, to be). */
static bool gc_has(const struct gc_report *rep, enum gc_kind kind, const char *tail)
{
        for (size_t i = 0; i < rep->n_items; i++) {
                size_t a = strlen(rep->items[i].id), b = strlen(tail);
                if (rep->items[i].kind == kind && !rep->items[i].failed && a >= b &&
                    strcmp(rep->items[i].id + a - b, tail) == 0)
                        return true;
        }
        return false;
}

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f, "%s: %s", path, strerror(errno));
        fputs(text, f);
        fclose(f);
}

/* A VM's removal that cannot take its cgroup (QEMU outlived the wait, or the daemon was killed
 * between the two) keeps the VM's empty directory, without its state: startup reconciliation
 * removes that cgroup and then the directory, and so does --gc (a dry run only names it). A
 * VM still there (its state file) keeps its cgroup until its removal; a cgroup with a task in
 * it (a live QEMU) and one of no VM of this data directory (another daemon's) are never
 * touched. No QEMU boots. */
Test(microvm, leftover_cgroups_swept)
{
        char gone[ENGINE_ID_STR_MAX], kept[ENGINE_ID_STR_MAX], busy[ENGINE_ID_STR_MAX], foreign[ENGINE_ID_STR_MAX];
        char path[SBX_PATH_MAX + 64];
        struct gc_report rep;
        pid_t child;

        if (!have_qemu())
                return;
        if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 || access("/sys/fs/cgroup/cpu/tasks", F_OK) < 0 ||
            access("/sys/fs/cgroup/memory/tasks", F_OK) < 0 || access("/sys/fs/cgroup/pids/tasks", F_OK) < 0) {
                fprintf(stderr, "test_microvm: leftover_cgroups_swept SKIPPED: needs cgroup v1 cpu, memory, pids\n");
                return;
        }
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        fixture_config(&cfg);
        d = fixture_open_sockets(&cfg);
        daemon_close(d);
        d = NULL;
        fake_vm_id(gone);
        fake_vm_id(kept);
        fake_vm_id(busy);
        fake_vm_id(foreign);
        cg_mk(gone);
        cg_mk(kept);
        cg_mk(busy);
        cg_mk(foreign);
        snprintf(path, sizeof(path), "%s/vm", cfg.data_dir);
        cr_assert(mkdir(path, 0711) == 0 || errno == EEXIST);
        const char *dirs[] = {gone, kept, busy};
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof(path), "%s/vm/%s", cfg.data_dir, dirs[i]);
                cr_assert_eq(mkdir(path, 0711), 0, "%s: %s", path, strerror(errno));
        }
        snprintf(path, sizeof(path), "%s/vm/%s/state", cfg.data_dir, kept);
        write_text(path, "{\"uid\":1234}");
        child = fork();
        cr_assert_geq(child, 0);
        if (child == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                for (;;)
                        pause();
        }
        for (size_t i = 0; i < 3; i++) {
                char procs[256], pid[32];
                snprintf(procs, sizeof(procs), "/sys/fs/cgroup/%s/sandboxd-vm/%s/cgroup.procs", cg_ctrls[i], busy);
                FILE *f = fopen(procs, "w");
                cr_assert_not_null(f, "%s", procs);
                snprintf(pid, sizeof(pid), "%d", (int)child);
                cr_assert_gt(fputs(pid, f), -1);
                cr_assert_eq(fclose(f), 0, "%s: %s", procs, strerror(errno));
        }

        /* startup reconciliation */
        d = fixture_open_sockets(&cfg);
        for (size_t i = 0; i < 3; i++) {
                cr_expect_not(cg_exists(cg_ctrls[i], gone), "%s: a cgroup without its VM outlived the restart",
                              cg_ctrls[i]);
                cr_expect(cg_exists(cg_ctrls[i], kept), "%s: the cgroup of a VM still there went", cg_ctrls[i]);
                cr_expect(cg_exists(cg_ctrls[i], busy), "%s: a cgroup with a task in it went", cg_ctrls[i]);
                cr_expect(cg_exists(cg_ctrls[i], foreign), "%s: another daemon's cgroup went", cg_ctrls[i]);
        }
        snprintf(path, sizeof(path), "%s/vm/%s", cfg.data_dir, gone);
        cr_expect_neq(access(path, F_OK), 0, "the VM directory kept for its cgroup stayed");
        daemon_close(d);
        d = NULL;

        /* --gc: a dry run names it, a real run removes it */
        cg_mk(gone);
        cr_assert_eq(mkdir(path, 0711), 0);
        run_gc(true, &rep);
        snprintf(path, sizeof(path), "/memory/sandboxd-vm/%s", gone);
        cr_expect(gc_has(&rep, GC_VM_CGROUPS, path), "the dry run does not name %s", path);
        cr_expect_eq(rep.kinds[GC_VM_CGROUPS].count, 3);
        gc_report_done(&rep);
        cr_expect(cg_exists("memory", gone), "a dry run removed a cgroup");
        run_gc(false, &rep);
        cr_expect(gc_has(&rep, GC_VM_CGROUPS, path), "gc does not report %s", path);
        cr_expect_eq(rep.kinds[GC_VM_CGROUPS].count, 3);
        gc_report_done(&rep);
        for (size_t i = 0; i < 3; i++) {
                cr_expect_not(cg_exists(cg_ctrls[i], gone), "%s: gc left a cgroup without its VM", cg_ctrls[i]);
                cr_expect(cg_exists(cg_ctrls[i], kept) && cg_exists(cg_ctrls[i], busy) &&
                                  cg_exists(cg_ctrls[i], foreign),
                          "%s: gc removed one it must keep", cg_ctrls[i]);
        }

        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        cg_rm(gone);
        cg_rm(kept);
        cg_rm(busy);
        cg_rm(foreign);
        snprintf(path, sizeof(path), "%s/vm/%s/state", cfg.data_dir, kept);
        (void)unlink(path);
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof(path), "%s/vm/%s", cfg.data_dir, dirs[i]);
                (void)rmdir(path);
        }
}

/* An ext4 image stand-in of a root file system: name in {data_dir}/vm/rootfs, last used age_s ago. */
static void rootfs_file(const char *name, int64_t age_s)
{
        char path[SBX_PATH_MAX + 128];
        struct timespec t[2];
        FILE *f;

        snprintf(path, sizeof(path), "%s/vm/rootfs/%s", cfg.data_dir, name);
        cr_assert_not_null(f = fopen(path, "w"), "%s", path);
        fputs("not really ext4", f);
        fclose(f);
        clock_gettime(CLOCK_REALTIME, &t[0]);
        t[0].tv_sec -= age_s;
        t[1] = t[0];
        cr_assert_eq(utimensat(AT_FDCWD, path, t, 0), 0);
}

static bool rootfs_there(const char *name)
{
        char path[SBX_PATH_MAX + 128];
        snprintf(path, sizeof(path), "%s/vm/rootfs/%s", cfg.data_dir, name);
        return access(path, F_OK) == 0;
}


/* `sandboxd --gc` removes the root file systems of image ids that no VM (a live or paused
 * session's) and no memory snapshot names and that were last used more than a day ago, and a
 * make cut short; never one in use, one used lately, or one being made (its lock held). */
Test(microvm, unused_root_fs_swept)
{
        char hex[6][65], name[6][80], vm[ENGINE_ID_STR_MAX], path[SBX_PATH_MAX + 128], text[SBX_PATH_MAX + 128];
        const int64_t old = 2 * 86400;
        struct gc_report rep;
        int lfd;

        if (!have_qemu())
                return;
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        fixture_config(&cfg);
        d = fixture_open_sockets(&cfg);
        daemon_close(d);
        d = NULL;
        for (int i = 0; i < 6; i++) {
                memset(hex[i], "abcdef"[i], 64);
                hex[i][64] = '\0';
                snprintf(name[i], sizeof(name[i]), "%s.img%s", hex[i], i == 5 ? ".new" : "");
        }
        snprintf(path, sizeof(path), "%s/vm", cfg.data_dir);
        cr_assert(mkdir(path, 0711) == 0 || errno == EEXIST);
        snprintf(path, sizeof(path), "%s/vm/rootfs", cfg.data_dir);
        cr_assert(mkdir(path, 0711) == 0 || errno == EEXIST);
        rootfs_file(name[0], old); /* unused: goes */
        rootfs_file(name[1], old); /* a VM's: stays */
        rootfs_file(name[2], old); /* a memory snapshot's: stays */
        rootfs_file(name[3], old); /* being made (its lock held): stays */
        rootfs_file(name[4], 60);  /* used a minute ago: stays */
        rootfs_file(name[5], old); /* a make cut short: goes */
        fake_vm_id(vm);
        snprintf(path, sizeof(path), "%s/vm/%s", cfg.data_dir, vm);
        cr_assert_eq(mkdir(path, 0711), 0);
        snprintf(path, sizeof(path), "%s/vm/%s/state", cfg.data_dir, vm);
        snprintf(text, sizeof(text), "{\"uid\":1234,\"rootfs\":\"%s/vm/rootfs/%s\"}", cfg.data_dir, name[1]);
        write_text(path, text);
        snprintf(path, sizeof(path), "%s/snapshots", cfg.data_dir);
        (void)mkdir(path, 0711);
        snprintf(path, sizeof(path), "%s/snapshots/vmuser", cfg.data_dir);
        (void)mkdir(path, 0711);
        snprintf(path, sizeof(path), "%s/snapshots/vmuser/snap-leftover-test", cfg.data_dir);
        cr_assert_eq(mkdir(path, 0700), 0);
        snprintf(path, sizeof(path), "%s/snapshots/vmuser/snap-leftover-test/rootfs", cfg.data_dir);
        snprintf(text, sizeof(text), "%s/vm/rootfs/%s", cfg.data_dir, name[2]);
        write_text(path, text);
        snprintf(path, sizeof(path), "%s/vm/rootfs/%s.lock", cfg.data_dir, hex[3]);
        lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        cr_assert_geq(lfd, 0);
        cr_assert_eq(flock(lfd, LOCK_EX), 0);

        run_gc(true, &rep);
        cr_expect(gc_has(&rep, GC_VM_ROOTFS, name[0]) && gc_has(&rep, GC_VM_ROOTFS, name[5]),
                  "the dry run does not name the unused ones");
        for (int i = 1; i < 5; i++)
                cr_expect_not(gc_has(&rep, GC_VM_ROOTFS, name[i]), "the dry run names %s", name[i]);
        gc_report_done(&rep);
        for (int i = 0; i < 6; i++)
                cr_expect(rootfs_there(name[i]), "a dry run removed %s", name[i]);

        run_gc(false, &rep);
        cr_expect_eq(rep.kinds[GC_VM_ROOTFS].count, 2);
        gc_report_done(&rep);
        cr_expect_not(rootfs_there(name[0]), "an unused root file system stayed");
        cr_expect_not(rootfs_there(name[5]), "a make cut short stayed");
        cr_expect(rootfs_there(name[1]), "a VM's root file system went");
        cr_expect(rootfs_there(name[2]), "a memory snapshot's root file system went");
        cr_expect(rootfs_there(name[3]), "one being made went");
        cr_expect(rootfs_there(name[4]), "one used lately went");

        /* made: the lock is free, and nobody uses it */
        close(lfd);
        run_gc(false, &rep);
        cr_expect_eq(rep.kinds[GC_VM_ROOTFS].count, 1);
        gc_report_done(&rep);
        cr_expect_not(rootfs_there(name[3]), "an unused one whose lock is free stayed");

        snprintf(path, sizeof(path), "%s/snapshots/vmuser/snap-leftover-test/rootfs", cfg.data_dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/snapshots/vmuser/snap-leftover-test", cfg.data_dir);
        rmdir(path);
        snprintf(path, sizeof(path), "%s/vm/%s/state", cfg.data_dir, vm);
        unlink(path);
        snprintf(path, sizeof(path), "%s/vm/%s", cfg.data_dir, vm);
        rmdir(path);
}
