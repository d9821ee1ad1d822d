/* Integration tests of sessions and containers against the real dockerd:
 * lazy creation, hardening, sustained start, failure detection and
 * recovery, concurrency, the port pool, restart reconciliation, idle expiry
 * and foreign containers. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "sandboxd/container.h"
#include "sandboxd/monitor.h"
#include "sandboxd/portpool.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "testenv.h"

TestSuite(sessions, .timeout = 300);

static struct session *must_get(struct daemon *d, const char *user, const char *sid)
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        int r = session_acquire(d->sessions, user, sid, &s, &err);
        cr_assert_eq(r, 0, "session_acquire %s:%s: %s", user, sid, err.msg);
        return s;
}

static void container_of(struct daemon *d, const char *user, const char *sid, char id[65])
{
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, user, sid, &info), 0);
        memcpy(id, info.container_id, 65);
        session_info_done(&info);
}

static enum session_state state_of(struct daemon *d, const char *user, const char *sid, char *cause, size_t size)
{
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, user, sid, &info), 0);
        if (cause)
                snprintf(cause, size, "%s", info.error_cause);
        session_info_done(&info);
        return info.state;
}

static cJSON *docker_inspect_json(const char *id)
{
        char cmd[256], buf[65536];
        size_t n;
        FILE *p;

        snprintf(cmd, sizeof(cmd), "docker inspect %s", id);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        n = fread(buf, 1, sizeof(buf) - 1, p);
        pclose(p);
        buf[n] = '\0';
        cJSON *arr = cJSON_Parse(buf);
        cr_assert_not_null(arr, "docker inspect output did not parse");
        cJSON *obj = cJSON_DetachItemFromArray(arr, 0);
        cJSON_Delete(arr);
        return obj;
}

static bool json_array_has(const cJSON *arr, const char *value)
{
        const cJSON *it;
        cJSON_ArrayForEach(it, arr)
                if (cJSON_IsString(it) && strcmp(it->valuestring, value) == 0)
                        return true;
        return false;
}

Test(sessions, bad_keys_are_refused_before_anything_happens)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct session *s = NULL;
        struct sbx_error err = {0};
        const char *bad[][2] = {
                {"a/b", "s"},    {"u", ".."},
                {".", "s"},      {"", "s"},
                {"u", "sp ace"}, {"u", "x\n"},
                {"ü", "s"},      {"u", "0123456789012345678901234567890123456789012345678901234567890123456789"}};
        char ws[600];
        struct stat st;

        fixture_config(&cfg);
        d = fixture_open(&cfg, false);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                cr_assert_eq(session_acquire(d->sessions, bad[i][0], bad[i][1], &s, &err), -EINVAL);
                cr_assert_not_null(strstr(err.msg, "invalid"), "%s", err.msg);
        }
        snprintf(ws, sizeof(ws), "%s/workspaces", cfg.data_dir);
        cr_assert_neq(stat(ws, &st), 0, "a workspace directory was created for a bad key");
        cr_assert_eq(fixture_count_containers("u", ".."), 0);
        daemon_close(d);
}

Test(sessions, lazy_creation_and_hardening_flags)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct session_info info;
        struct session *s;
        char id[65], ws[600];
        struct stat st;

        fixture_config(&cfg);
        d = fixture_open(&cfg, false);
        cr_assert_eq(session_get_info(d->sessions, "alice", "lazy", &info), -ENOENT, "exists before first use");
        cr_assert_eq(fixture_count_containers("alice", "lazy"), 0);

        s = must_get(d, "alice", "lazy");
        session_release(s);
        cr_assert_eq(session_get_info(d->sessions, "alice", "lazy", &info), 0);
        cr_assert_eq(info.state, SESSION_RUNNING);
        cr_assert_eq(info.n_ports, 3);
        /* the session's own host uid, from the range */
        cr_assert_geq(info.uid, (uid_t)cfg.sandbox_uid_lo);
        cr_assert_leq(info.uid, (uid_t)cfg.sandbox_uid_hi);
        uid_t uid = info.uid;
        memcpy(id, info.container_id, 65);
        session_info_done(&info);
        cr_assert_eq(fixture_count_containers("alice", "lazy"), 1);

        /* the workspace: owned by the session's uid, closed to other host users */
        snprintf(ws, sizeof(ws), "%s/workspaces/alice/lazy", cfg.data_dir);
        cr_assert_eq(stat(ws, &st), 0);
        cr_assert_eq(st.st_uid, uid);
        cr_assert_eq(st.st_mode & 07777, 0700);

        cJSON *j = docker_inspect_json(id);
        cJSON *hc = cJSON_GetObjectItem(j, "HostConfig"), *conf = cJSON_GetObjectItem(j, "Config");
        cr_assert(json_array_has(cJSON_GetObjectItem(hc, "CapDrop"), "ALL"));
        cr_assert(json_array_has(cJSON_GetObjectItem(hc, "SecurityOpt"), "no-new-privileges:true"));
        cJSON *sec;
        cJSON_ArrayForEach(sec, cJSON_GetObjectItem(hc, "SecurityOpt"))
                cr_assert_null(strstr(sec->valuestring, "unconfined"), "seccomp or apparmor disabled: %s",
                               sec->valuestring);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(hc, "Privileged")));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(hc, "ReadonlyRootfs")));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(hc, "Init")));
        cr_assert_eq((long long)cJSON_GetObjectItem(hc, "PidsLimit")->valuedouble, 128);
        cr_assert_eq((long long)cJSON_GetObjectItem(hc, "Memory")->valuedouble, 128LL << 20);
        cr_assert_eq((long long)cJSON_GetObjectItem(hc, "MemorySwap")->valuedouble, 128LL << 20);
        cr_assert_eq((long long)cJSON_GetObjectItem(hc, "NanoCpus")->valuedouble, cfg.nano_cpus);
        cr_assert_str_eq(cJSON_GetObjectItem(hc, "NetworkMode")->valuestring, "none");
        const char *tmpfs = cJSON_GetObjectItem(cJSON_GetObjectItem(hc, "Tmpfs"), "/tmp")->valuestring;
        cr_assert_not_null(strstr(tmpfs, "noexec"), "%s", tmpfs);
        cr_assert_not_null(strstr(tmpfs, "size="), "%s", tmpfs);
        char bind[700];
        snprintf(bind, sizeof(bind), "%s:/workspace:rw", ws);
        cr_assert(json_array_has(cJSON_GetObjectItem(hc, "Binds"), bind));
        char user[32];
        snprintf(user, sizeof(user), "%u:%u", (unsigned)uid, (unsigned)uid);
        cr_assert_str_eq(cJSON_GetObjectItem(conf, "User")->valuestring, user);
        cJSON *labels = cJSON_GetObjectItem(conf, "Labels");
        cr_assert_str_eq(cJSON_GetObjectItem(labels, "sandboxd.managed")->valuestring, "1");
        cr_assert_str_eq(cJSON_GetObjectItem(labels, "sandboxd.user")->valuestring, "alice");
        cr_assert_str_eq(cJSON_GetObjectItem(labels, "sandboxd.session")->valuestring, "lazy");
        cr_assert_str_eq(cJSON_GetObjectItem(labels, "sandboxd.instance")->valuestring, testenv_run_id());
        /* sealed: no network, nothing published (the gateway listens on the block) */
        cJSON *pb = cJSON_GetObjectItem(hc, "PortBindings");
        cr_assert(!pb || cJSON_IsNull(pb) || cJSON_GetArraySize(pb) == 0, "ports are published");
        cJSON_Delete(j);

        /* inside: non-root, read-only rootfs, noexec /tmp, writable workspace */
        char *out = NULL;
        cr_assert_eq(fixture_sh(id, "id -u", &out), 0);
        cr_assert_eq((uid_t)atoi(out), uid, "id -u says %s, the session's uid is %u", out, (unsigned)uid);
        free(out);
        cr_assert_neq(fixture_sh(id, "touch /etc/x 2>/dev/null", NULL), 0, "rootfs is writable");
        cr_assert_eq(fixture_sh(id, "echo hi > /workspace/f && cat /workspace/f", NULL), 0);
        cr_assert_neq(fixture_sh(id, "cp /bin/busybox /tmp/b && /tmp/b true", NULL), 0, "/tmp allows exec");
        cr_assert_eq(fixture_sh(id, "grep -q '^CapEff:.*0000000000000000' /proc/self/status", NULL), 0,
                     "process has capabilities");
        daemon_close(d);
}

Test(sessions, missing_image_is_a_clear_error)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct session *s = NULL;
        struct sbx_error err = {0};

        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "sandboxd/does-not-exist:never");
        d = fixture_open(&cfg, false);
        cr_assert_eq(session_acquire(d->sessions, "u", "noimg", &s, &err), -ENOENT);
        cr_assert_not_null(strstr(err.msg, "sandboxd/does-not-exist:never"), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "scripts/build-images.sh"), "%s", err.msg);
        cr_assert_eq(state_of(d, "u", "noimg", NULL, 0), SESSION_ERROR);
        cr_assert_eq(fixture_count_containers("u", "noimg"), 0);
        size_t used, total;
        portpool_usage(d->ports, &used, &total);
        cr_assert_eq(used, 0, "ports leaked after a failed creation");
        daemon_close(d);
}

Test(sessions, container_dying_during_start_is_refused_with_its_logs)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct session *s = NULL;
        struct sbx_error err = {0};
        char tag[128], cmd[512];

        /* an image whose command prints a marker and exits 3 at once */
        snprintf(tag, sizeof(tag), "sandboxd/test-crash:%s", testenv_run_id());
        snprintf(cmd, sizeof(cmd),
                 "printf 'FROM %s\\nCMD [\"sh\",\"-c\",\"echo crash-marker-42; exit 3\"]\\n' | "
                 "docker build -q --network none -t %s - >/dev/null 2>&1",
                 TESTENV_TEST_IMAGE, tag);
        cr_assert_eq(system(cmd), 0, "cannot build the crashing image");

        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "%s", tag);
        /* the runner replaces the image's command: this is about the image's own */
        snprintf(cfg.runner_binary, sizeof(cfg.runner_binary), "/nonexistent/sandboxd-runner");
        d = fixture_open(&cfg, false);
        int r = session_acquire(d->sessions, "u", "crash", &s, &err);
        snprintf(cmd, sizeof(cmd), "docker rmi -f %s >/dev/null 2>&1", tag);
        (void)!system(cmd);
        cr_assert_lt(r, 0);
        cr_assert_not_null(strstr(err.msg, "exit code 3"), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "crash-marker-42"), "%s", err.msg);
        cr_assert_eq(state_of(d, "u", "crash", NULL, 0), SESSION_ERROR);
        cr_assert_eq(fixture_count_containers("u", "crash"), 0, "the failed container was not removed");
        size_t used, total;
        portpool_usage(d->ports, &used, &total);
        cr_assert_eq(used, 0, "ports not released after a failed start");
        daemon_close(d);
}

struct wait_state {
        struct daemon *d;
        const char *user, *sid;
        enum session_state want;
};

static bool reached(void *ud)
{
        struct wait_state *w = ud;
        struct session_info info;
        if (session_get_info(w->d->sessions, w->user, w->sid, &info) < 0)
                return false;
        session_info_done(&info);
        return info.state == w->want;
}

/* Break the container from outside with `action`, wait for the monitor to
 * mark the session ERROR with `want_cause`, then check the next request
 * recreates it with the workspace intact. */
static void failure_roundtrip(const char *sid, const char *action, const char *want_cause)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct session *s;
        char id[65], id2[65], cause[64], cli[256];
        char *out = NULL;

        fixture_config(&cfg);
        cfg.memory_bytes = 32 << 20;
        /* the OOM victim must be the container's main process: `sleep` from the
         * image, not the runner (non-dumpable, so its oom_score_adj is not the
         * tenant's to raise) */
        if (strcmp(action, "oom") == 0)
                snprintf(cfg.runner_binary, sizeof(cfg.runner_binary), "/nonexistent/sandboxd-runner");
        d = fixture_open(&cfg, true);
        s = must_get(d, "bob", sid);
        session_release(s);
        container_of(d, "bob", sid, id);
        cr_assert_eq(fixture_sh(id, "echo precious > /workspace/keep.txt", NULL), 0);

        if (strcmp(action, "oom") == 0) {
                /* Make the container's own process the OOM victim, then exhaust
                 * memory in many small pieces, so no hog outscores it. */
                (void)fixture_sh(
                        id,
                        "for p in /proc/[0-9]*; do [ \"$(cat $p/comm)\" = sleep ] && echo 1000 > $p/oom_score_adj; done;"
                        "for i in 1 2 3 4 5 6 7 8; do (x=$(head -c 6000000 /dev/zero | tr '\\0' a); sleep 20) & done; wait",
                        NULL);
        } else {
                snprintf(cli, sizeof(cli), "%s %s", action, id);
                cr_assert_eq(fixture_docker_cli(cli), 0, "docker %s failed", cli);
        }
        struct wait_state w = {d, "bob", sid, SESSION_ERROR};
        cr_assert_geq(fixture_wait(reached, &w, 10000), 0, "%s was not detected", action);
        /* a later event (stop, destroy) or the inspect may refine the cause:
         * wait for it with a deadline (a busy machine delays it) */
        (void)TESTENV_WAIT_UNTIL((state_of(d, "bob", sid, cause, sizeof(cause)), strstr(cause, want_cause)), 5000);
        cr_assert_not_null(strstr(cause, want_cause), "cause '%s', expected '%s'", cause, want_cause);

        s = must_get(d, "bob", sid);
        session_release(s);
        container_of(d, "bob", sid, id2);
        cr_assert_str_neq(id, id2, "the container was not recreated");
        cr_assert_eq(fixture_sh(id2, "cat /workspace/keep.txt", &out), 0);
        cr_assert_str_eq(out, "precious\n");
        free(out);
        cr_assert_eq(fixture_count_containers("bob", sid), 1, "the old container is still there");
        daemon_close(d);
}

Test(sessions, external_kill_is_detected_and_recovered)
{
        failure_roundtrip("kill", "kill", "exited with code 137");
}
Test(sessions, external_stop_is_detected_and_recovered)
{
        failure_roundtrip("stop", "stop -t 1", "stopped");
}
Test(sessions, external_rm_is_detected_and_recovered)
{
        failure_roundtrip("rm", "rm -f", "removed");
}
Test(sessions, oom_is_detected_and_recovered)
{
        failure_roundtrip("oom", "oom", "oom_killed");
}

/* With the periodic poll an hour away, only the events stream can mark the
 * killed session ERROR within the wait. How fast it does is measured by
 * scripts/bench.sh (detection_latency), not asserted here. */
Test(sessions, events_detect_a_kill_without_the_poll)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct session *s;
        char id[65], cli[128];
        uint64_t seen;

        fixture_config(&cfg);
        cfg.monitor_interval_ms = 3600000; /* the poll cannot help: only the events stream can */
        d = fixture_open(&cfg, true);
        s = must_get(d, "carol", "events");
        session_release(s);
        container_of(d, "carol", "events", id);
        fixture_wait_monitor_events(d);
        seen = monitor_events_seen(d->monitor);
        snprintf(cli, sizeof(cli), "kill %s", id);
        cr_assert_eq(fixture_docker_cli(cli), 0);
        struct wait_state w = {d, "carol", "events", SESSION_ERROR};
        cr_assert_geq(fixture_wait(reached, &w, 5000), 0, "the kill was never detected");
        cr_assert_gt(monitor_events_seen(d->monitor), seen);
        daemon_close(d);
}

struct race {
        struct daemon *d;
        int rc;
};

static void *race_main(void *ud)
{
        struct race *r = ud;
        struct session *s = NULL;
        r->rc = session_acquire(r->d->sessions, "dave", "race", &s, NULL);
        session_release(s);
        return NULL;
}

Test(sessions, twenty_concurrent_get_or_create_make_one_container)
{
        struct sbx_config cfg;
        struct daemon *d;
        pthread_t t[20];
        struct race r[20];

        fixture_config(&cfg);
        d = fixture_open(&cfg, false);
        for (int i = 0; i < 20; i++) {
                r[i] = (struct race){d, -1};
                cr_assert_eq(pthread_create(&t[i], NULL, race_main, &r[i]), 0);
        }
        for (int i = 0; i < 20; i++) {
                pthread_join(t[i], NULL);
                cr_assert_eq(r[i].rc, 0, "thread %d failed: %d", i, r[i].rc);
        }
        cr_assert_eq(fixture_count_containers("dave", "race"), 1);
        daemon_close(d);
}

Test(sessions, port_pool_exhaustion_and_release)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct session *s = NULL;
        struct sbx_error err = {0};

        fixture_config(&cfg);
        cfg.port_range_lo = 27100;
        cfg.port_range_hi = 27105; /* two blocks of three */
        d = fixture_open(&cfg, false);
        session_release(must_get(d, "erin", "p1"));
        session_release(must_get(d, "erin", "p2"));
        cr_assert_eq(session_acquire(d->sessions, "erin", "p3", &s, &err), -ENOSPC);
        cr_assert_not_null(strstr(err.msg, "port pool exhausted"), "%s", err.msg);
        cr_assert_eq(fixture_count_containers("erin", "p3"), 0, "a container was left behind");
        cr_assert_eq(state_of(d, "erin", "p3", NULL, 0), SESSION_ERROR);

        cr_assert_eq(session_destroy(d->sessions, "erin", "p1", false, &err), 0, "%s", err.msg);
        cr_assert_eq(fixture_count_containers("erin", "p1"), 0);
        s = must_get(d, "erin", "p3");
        session_release(s);
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, "erin", "p3", &info), 0);
        cr_assert_eq(info.n_ports, 3);
        cr_assert_geq(info.ports[0], 27100);
        cr_assert_leq(info.ports[2], 27105);
        session_info_done(&info);
        daemon_close(d);
}

Test(sessions, idle_sessions_expire_and_come_back)
{
        struct sbx_config cfg;
        struct daemon *d;
        char id[65], id2[65], *out = NULL;

        fixture_config(&cfg);
        d = fixture_open(&cfg, false);
        session_release(must_get(d, "frank", "idle"));
        container_of(d, "frank", "idle", id);
        cr_assert_eq(fixture_sh(id, "echo still-here > /workspace/a", NULL), 0);
        /* not idle yet */
        cr_assert_eq(session_expire_idle(d->sessions, sbx_wall_ms()), 0);
        /* pretend idle_timeout has passed */
        cr_assert_eq(session_expire_idle(d->sessions, sbx_wall_ms() + (cfg.idle_timeout_s + 1) * 1000LL), 1);
        cr_assert_eq(state_of(d, "frank", "idle", NULL, 0), SESSION_STOPPED);
        cr_assert_eq(fixture_count_containers("frank", "idle"), 0);
        size_t used, total;
        portpool_usage(d->ports, &used, &total);
        cr_assert_eq(used, 0);

        session_release(must_get(d, "frank", "idle"));
        container_of(d, "frank", "idle", id2);
        cr_assert_eq(fixture_sh(id2, "cat /workspace/a", &out), 0);
        cr_assert_str_eq(out, "still-here\n");
        free(out);
        daemon_close(d);
}

Test(sessions, monitor_never_counts_as_activity)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct session_info a, b;

        fixture_config(&cfg);
        cfg.monitor_interval_ms = 100;
        d = fixture_open(&cfg, true);
        session_release(must_get(d, "gina", "quiet"));
        cr_assert_eq(session_get_info(d->sessions, "gina", "quiet", &a), 0);
        sbx_sleep_ms(600); /* not a wait: several polls pass, and none may count as activity */
        cr_assert_eq(session_get_info(d->sessions, "gina", "quiet", &b), 0);
        cr_assert_eq(a.last_activity, b.last_activity);
        cr_assert_eq(b.state, SESSION_RUNNING);
        session_info_done(&a);
        session_info_done(&b);
        daemon_close(d);
}

/* The failure must not hang: the test's deadline (.timeout) says so. */
Test(sessions, docker_unavailable_marks_error_and_next_call_retries, .timeout = 120)
{
        struct sbx_config cfg;
        struct store *st;
        struct portpool *pp;
        struct engine *dk;
        struct session_manager *m;
        struct session *s = NULL;
        struct sbx_error err = {0};
        char db[600], sock[600];

        fixture_config(&cfg);
        mkdir(cfg.data_dir, 0711);
        snprintf(db, sizeof(db), "%s/sandboxd.db", cfg.data_dir);
        snprintf(sock, sizeof(sock), "%s/docker.sock", cfg.data_dir); /* nothing there yet */
        /* the config's timeout, not a short one: a missing socket fails at connect, at once,
         * and the retry below starts a real container, which took over 2 s at load 10 */
        (void)testenv_docker();
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(portpool_new(st, cfg.port_range_lo, cfg.port_range_hi, cfg.ports_per_session, &pp, &err), 0);
        cr_assert_eq(engine_docker_new(sock, cfg.docker_timeout_ms, &dk, &err), 0);
        cr_assert_eq(session_manager_new(&cfg, dk, st, pp, fixture_labels(), &m, &err), 0);

        cr_assert_lt(session_acquire(m, "hank", "nodocker", &s, &err), 0);
        cr_assert_not_null(strstr(err.msg, sock), "%s", err.msg);
        struct session_info info;
        cr_assert_eq(session_get_info(m, "hank", "nodocker", &info), 0);
        cr_assert_eq(info.state, SESSION_ERROR);
        session_info_done(&info);

        cr_assert_eq(symlink(testenv_docker_socket(), sock), 0); /* Docker is back */
        cr_assert_eq(session_acquire(m, "hank", "nodocker", &s, &err), 0, "%s", err.msg);
        session_release(s);
        cr_assert_eq(session_get_info(m, "hank", "nodocker", &info), 0);
        cr_assert_eq(info.state, SESSION_RUNNING);
        session_info_done(&info);
        session_manager_free(m);
        engine_free(dk);
        portpool_free(pp);
        store_close(st);
}

/* A container of another instance and one without sandboxd labels. */
static void make_foreign(char other[65], char plain[65])
{
        const char *cmd[] = {"sleep", "600", NULL};
        char run[128];
        struct docker_label l1[] = {{TESTENV_RUN_LABEL, run},
                                    {"sandboxd.managed", "1"},
                                    {"sandboxd.instance", "someone-else"},
                                    {"sandboxd.user", "ivan"},
                                    {"sandboxd.session", "foreign"}};
        struct docker_label l2[] = {{TESTENV_RUN_LABEL, run}};
        struct docker_container_spec spec = {.image = TESTENV_TEST_IMAGE, .cmd = cmd, .labels = l1, .n_labels = 5};
        struct sbx_error err = {0};

        snprintf(run, sizeof(run), "%s", testenv_run_id());
        cr_assert_eq(docker_container_create(testenv_docker(), &spec, other, &err), 0, "%s", err.msg);
        cr_assert_eq(docker_container_start(testenv_docker(), other, &err), 0, "%s", err.msg);
        spec.labels = l2;
        spec.n_labels = 1;
        cr_assert_eq(docker_container_create(testenv_docker(), &spec, plain, &err), 0, "%s", err.msg);
        cr_assert_eq(docker_container_start(testenv_docker(), plain, &err), 0, "%s", err.msg);
}

static bool is_running(const char *id)
{
        struct docker_container_info info;
        return docker_container_inspect(testenv_docker(), id, &info, NULL) == 0 && info.running;
}

Test(sessions, kill9_restart_reconciles_and_foreign_containers_survive)
{
        struct sbx_config cfg;
        struct daemon *d;
        int pipefd[2];
        char other[65], plain[65], orphan[65], ready;
        pid_t pid;

        fixture_config(&cfg);
        cr_assert_eq(pipe(pipefd), 0);
        pid = fork(); /* before this process starts any thread */
        if (pid < 0)  /* no assertion may run in the child: Criterion would block it */
                cr_assert_fail("fork: %m");
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test, whatever fails there */
                struct daemon *cd = fixture_open(&cfg, true);
                struct session *s;
                char id[65];
                for (int i = 0; i < 3; i++) {
                        char sid[16];
                        snprintf(sid, sizeof(sid), "r%d", i);
                        if (session_acquire(cd->sessions, "jane", sid, &s, NULL) < 0)
                                _exit(1);
                        session_release(s);
                }
                container_of(cd, "jane", "r0", id);
                fixture_sh(id, "echo survived > /workspace/file", NULL);
                (void)!write(pipefd[1], "r", 1);
                pause();
                _exit(0);
        }
        close(pipefd[1]);
        cr_assert_eq(read(pipefd[0], &ready, 1), 1, "child daemon did not get ready");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);

        make_foreign(other, plain);
        /* while the daemon is down: one session's container vanishes, and an
         * orphan of this instance appears */
        {
                struct daemon *peek = fixture_open(&cfg, false);
                char id1[65];
                container_of(peek, "jane", "r1", id1);
                daemon_close(peek);
                /* (that open already reconciled; break things again afterwards) */
                cr_assert_eq(docker_container_remove(testenv_docker(), id1, true, NULL), 0);
        }
        {
                const char *cmd[] = {"sleep", "600", NULL};
                char run[128];
                struct docker_label l[] = {{TESTENV_RUN_LABEL, run},
                                           {"sandboxd.managed", "1"},
                                           {"sandboxd.instance", cfg.instance},
                                           {"sandboxd.user", "jane"},
                                           {"sandboxd.session", "nobody"}};
                struct docker_container_spec spec = {.image = TESTENV_TEST_IMAGE,
                                                     .cmd = cmd,
                                                     .labels = l,
                                                     .n_labels = 5};
                snprintf(run, sizeof(run), "%s", testenv_run_id());
                cr_assert_eq(docker_container_create(testenv_docker(), &spec, orphan, NULL), 0);
        }

        d = fixture_open(&cfg, true);
        char id0[65], *out = NULL;
        cr_assert_eq(state_of(d, "jane", "r0", NULL, 0), SESSION_RUNNING, "running container not adopted");
        cr_assert_eq(state_of(d, "jane", "r2", NULL, 0), SESSION_RUNNING);
        char cause[64];
        cr_assert_eq(state_of(d, "jane", "r1", cause, sizeof(cause)), SESSION_ERROR);
        cr_assert_str_eq(cause, "removed");
        container_of(d, "jane", "r0", id0);
        cr_assert_eq(fixture_sh(id0, "cat /workspace/file", &out), 0);
        cr_assert_str_eq(out, "survived\n");
        free(out);
        struct docker_container_info info;
        cr_assert_eq(docker_container_inspect(testenv_docker(), orphan, &info, NULL), -ENOENT, "orphan survived");
        /* ports: r0 and r2 hold blocks; r1's was released */
        size_t used, total;
        portpool_usage(d->ports, &used, &total);
        cr_assert_eq(used, 6, "port blocks after reconciliation: %zu ports", used);
        /* recovery of r1 on the next request, files intact */
        session_release(must_get(d, "jane", "r1"));
        cr_assert_eq(fixture_count_containers("jane", "r1"), 1);

        cr_assert(is_running(other), "a container of another instance was touched");
        cr_assert(is_running(plain), "a container without sandboxd labels was touched");
        daemon_close(d);
}
