/* test_engine.c — the engine seam (engine.h) without dockerd: the Docker
 * engine's create body is byte for byte the one container.c sent before the
 * seam; capabilities say what an engine leaves out, and the container code
 * refuses what would weaken isolation (against the fake engine); the memory
 * ops go to an engine only behind ENGINE_CAP_MEMORY_CAPTURE. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_engine.h"
#include "sandboxd/config.h"
#include "sandboxd/container.h"
#include "sandboxd/docker.h"
#include "sandboxd/engine.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/runner_proto.h"
#include "testenv.h"

/* The spec as container.c builds it, with the runner and a network or not. */
static void neutral_spec(struct engine_spec *s, struct engine_tmpfs *t, struct engine_label *labels,
                         const char *network)
{
        static const char *const env[] = {"HOME=/workspace", NULL};

        *t = (struct engine_tmpfs){
                .path = "/tmp", .size_bytes = 64 << 20, .noexec = true, .nosuid = true, .nodev = true};
        labels[0] = (struct engine_label){"sandboxd.managed", "1"};
        labels[1] = (struct engine_label){"sandboxd.user", "alice"};
        labels[2] = (struct engine_label){"sandboxd.session", "s1"};
        labels[3] = (struct engine_label){"sandboxd.instance", "inst"};
        labels[4] = (struct engine_label){"sandboxd.test.run", "r1"};
        *s = (struct engine_spec){.image = "sha256:abc",
                                  .uid = 23456,
                                  .gid = 23456,
                                  .memory_bytes = 512 << 20,
                                  .memory_swap_bytes = 512 << 20,
                                  .nano_cpus = 1000000000,
                                  .cpu_weight = 512,
                                  .pids_limit = 256,
                                  .oom_score_adj = 500,
                                  .readonly_rootfs = true,
                                  .tmpfs = t,
                                  .n_tmpfs = 1,
                                  .workspace = "/data/workspaces/alice/s1",
                                  .session_dir = "/run/sandboxd/runner/alice/s1",
                                  .runner_binary = "/usr/lib/sandboxd/sandboxd-runner",
                                  .passwd_file = "/data/identities/23456.passwd",
                                  .group_file = "/data/identities/23456.group",
                                  .runtime_class = NULL,
                                  .network = network,
                                  .env = env,
                                  .workdir = "/workspace",
                                  .hostname = "sandbox",
                                  .labels = labels,
                                  .n_labels = 5};
}

/* The docker_container_spec container.c filled before the seam, for the same session. */
static char *body_before_the_seam(const char *network)
{
        static const char *const cap_drop[] = {"ALL", NULL};
        static const char *const security_opt[] = {"no-new-privileges:true", NULL};
        static const char *const env[] = {"HOME=/workspace", NULL};
        static const char *const runner_entry[] = {RP_BINARY_PATH, NULL};
        static const char *const runner_cmd[] = {RP_SOCKET_DIR "/" RP_SOCKET_NAME, NULL};
        const char *binds[] = {"/data/workspaces/alice/s1:/workspace:rw",
                               "/data/identities/23456.passwd:/etc/passwd:ro",
                               "/data/identities/23456.group:/etc/group:ro",
                               "/usr/lib/sandboxd/sandboxd-runner:" RP_BINARY_PATH ":ro",
                               "/run/sandboxd/runner/alice/s1:" RP_SOCKET_DIR ":ro",
                               NULL};
        const char *tmpfs[] = {"/tmp:rw,noexec,nosuid,nodev,size=67108864", NULL};
        const struct docker_label labels[] = {{"sandboxd.managed", "1"},
                                              {"sandboxd.user", "alice"},
                                              {"sandboxd.session", "s1"},
                                              {"sandboxd.instance", "inst"},
                                              {"sandboxd.test.run", "r1"}};
        struct docker_container_spec spec = {
                .image = "sha256:abc",
                .user = "23456:23456",
                .cmd = runner_cmd,
                .entrypoint = runner_entry,
                .env = env,
                .workdir = "/workspace",
                .hostname = "sandbox",
                .binds = binds,
                .tmpfs = tmpfs,
                .cap_drop = cap_drop,
                .security_opt = security_opt,
                .labels = labels,
                .n_labels = 5,
                .memory = 512 << 20,
                .memory_swap = 512 << 20,
                .nano_cpus = 1000000000,
                .pids_limit = 256,
                .cpu_shares = 512,
                .oom_score_adj = 500,
                .readonly_rootfs = true,
                .init = true,
                .privileged = false,
                .network_mode = network,
                .runtime = NULL,
        };
        return docker_container_spec_to_json(&spec);
}

Test(engine, docker_create_body_is_the_one_before_the_seam)
{
        const char *networks[] = {NULL, "sandboxd-inst"};

        for (size_t i = 0; i < 2; i++) {
                struct engine_spec s;
                struct engine_tmpfs t;
                struct engine_label labels[5];
                char *now, *before;

                neutral_spec(&s, &t, labels, networks[i]);
                now = engine_docker_create_body(&s);
                before = body_before_the_seam(networks[i] ? networks[i] : "none");
                cr_assert_not_null(now);
                cr_assert_not_null(before);
                cr_assert_str_eq(now, before);
                free(now);
                free(before);
        }
}

Test(engine, capabilities_name_what_is_left_out)
{
        struct engine none = {.name = "none", .capabilities = 0};
        struct engine all = {.name = "all", .capabilities = (1u << ENGINE_CAP_COUNT) - 1};
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label labels[5];
        unsigned missing;

        neutral_spec(&s, &t, labels, "net");
        s.runtime_class = "runsc";
        cr_assert_eq(engine_spec_unenforced(&all, &s), 0u);
        missing = engine_spec_unenforced(&none, &s);
        cr_assert_eq(missing,
                     ENGINE_CAP_PIDS_LIMIT | ENGINE_CAP_MEMORY_SWAP | ENGINE_CAP_CPU_WEIGHT | ENGINE_CAP_OOM_SCORE_ADJ |
                             ENGINE_CAP_RUNTIME_CLASS | ENGINE_CAP_ISOLATED_NETWORK | ENGINE_CAP_TMPFS_SIZE,
                     "%#x", missing);
        for (unsigned i = 0; i < ENGINE_CAP_COUNT; i++)
                cr_assert_not_null(engine_cap_name(i), "bit %u has no name", i);
        cr_assert_null(engine_cap_name(ENGINE_CAP_COUNT));
        cr_assert_str_eq(engine_cap_name(0), "pids_limit");
}

Test(engine, the_fake_engine_reports_its_missing_pid_limit_and_refuses_a_runtime)
{
        _cleanup_free_ char *dir = testenv_tmpdir();
        struct engine *fe = fake_engine_new();
        struct fake_engine_counts c;
        struct sbx_config cfg;
        struct sbx_error err = {0};
        char ws[SBX_PATH_MAX], id[65];
        struct container_params p = {
                .user = "alice", .session = "s1", .image = "sha256:abc", .network_mode = "none", .uid = 23456};

        cr_assert_not_null(fe);
        config_defaults(&cfg);
        snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s/data", dir);
        snprintf(cfg.instance, sizeof(cfg.instance), "unit");
        cfg.startup_checks = 1;
        cr_assert_eq(container_unenforced(fe, &cfg) & ENGINE_CAP_PIDS_LIMIT, ENGINE_CAP_PIDS_LIMIT,
                     "the missing PID limit is reported");
        cr_assert_eq(container_workspace_ensure(&cfg, "alice", "s1", 23456, ws, &err), 0, "%s", err.msg);
        p.workspace = ws;

        p.runtime = "runsc"; /* another runtime than the one asked for: refused, nothing made */
        cr_assert_eq(container_create_started(fe, &cfg, &p, id, &err), -EOPNOTSUPP);
        cr_assert_not_null(strstr(err.msg, "runtime_class"), "%s", err.msg);
        p.network_mode = "bridge"; /* no isolated network: refused too */
        p.runtime = NULL;
        cr_assert_eq(container_create_started(fe, &cfg, &p, id, &err), -EOPNOTSUPP);
        fake_engine_counts(fe, &c);
        cr_assert_eq(c.creates, 0);

        p.network_mode = "none"; /* a PID limit it cannot set: made without it, said in the log */
        cr_assert_eq(container_create_started(fe, &cfg, &p, id, &err), 0, "%s", err.msg);
        cr_assert(fake_engine_is_running(fe, id));
        engine_free(fe);
}

/* An engine whose memory ops count their calls. */
static int mem_calls;
static int mem_pause_to_disk(struct engine *e, const char *id, struct sbx_error *err)
{
        (void)e, (void)err;
        mem_calls++;
        return strcmp(id, "vm-1") == 0 ? 0 : -ENOENT;
}
static int mem_capture(struct engine *e, const char *id, int dirfd, int64_t room, int64_t *ret_bytes,
                       struct sbx_error *err)
{
        (void)e, (void)id, (void)dirfd, (void)err;
        mem_calls++;
        *ret_bytes = room / 2;
        return 0;
}
static int mem_boot(struct engine *e, const char *user, const char *session, const char *dir, struct sbx_error *err)
{
        (void)e, (void)user, (void)session, (void)dir, (void)err;
        mem_calls++;
        return 0;
}
static void mem_boot_cancel(struct engine *e, const char *user, const char *session)
{
        (void)e, (void)user, (void)session;
        mem_calls++;
}

Test(engine, memory_ops_go_only_to_an_engine_with_the_capability)
{
        static const struct engine_ops ops = {.pause_to_disk = mem_pause_to_disk,
                                              .memory_capture = mem_capture,
                                              .memory_boot = mem_boot,
                                              .memory_boot_cancel = mem_boot_cancel};
        struct engine without = {.ops = &ops, .name = "plain", .capabilities = ENGINE_CAP_PAUSE};
        struct engine with = {.ops = &ops, .name = "vms", .capabilities = ENGINE_CAP_MEMORY_CAPTURE};
        struct engine no_ops = {.ops = &(const struct engine_ops){0},
                                .name = "empty",
                                .capabilities = ENGINE_CAP_MEMORY_CAPTURE};
        struct sbx_error err = {0};
        int64_t bytes = 0;

        mem_calls = 0;
        cr_assert_eq(engine_pause_to_disk(&without, "vm-1", &err), -EOPNOTSUPP);
        cr_assert_not_null(strstr(err.msg, "the plain engine cannot pause to disk"), "%s", err.msg);
        cr_assert_eq(engine_memory_capture(&without, "vm-1", 3, 100, &bytes, &err), -EOPNOTSUPP);
        cr_assert_eq(engine_memory_boot(&without, "alice", "s1", "/x", &err), -EOPNOTSUPP);
        engine_memory_boot_cancel(&without, "alice", "s1");
        cr_assert_eq(mem_calls, 0, "an op ran on an engine without the capability");

        /* the bit without the op is still -EOPNOTSUPP, never a NULL call */
        cr_assert_eq(engine_memory_capture(&no_ops, "vm-1", 3, 100, &bytes, &err), -EOPNOTSUPP);
        engine_memory_boot_cancel(&no_ops, "alice", "s1");

        cr_assert_eq(engine_pause_to_disk(&with, "vm-1", &err), 0);
        cr_assert_eq(engine_pause_to_disk(&with, "vm-2", &err), -ENOENT, "the op's own answer comes back");
        cr_assert_eq(engine_memory_capture(&with, "vm-1", 3, 100, &bytes, &err), 0);
        cr_assert_eq(bytes, 50);
        cr_assert_eq(engine_memory_boot(&with, "alice", "s1", "/x", &err), 0);
        engine_memory_boot_cancel(&with, "alice", "s1");
        cr_assert_eq(mem_calls, 5);
        cr_assert_str_eq(engine_cap_name(12), "memory_capture");
}
