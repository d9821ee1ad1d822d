/* Integration tests of the warm pool (issue 15) against the real dockerd:
 *   - a new session's first command runs in a pool container: session_info
 *     says pooled, the workspace is the session's own (its uid, its path,
 *     nothing of another session), its port block, forwards and egress
 *     socket are bound at claim, and the pool refills; the claimed container
 *     keeps the pool's labels in Docker, yet --gc and the admin listing go
 *     by the store and give it to the session;
 *   - every image sessions may use has a pool of its own size;
 *   - workspace.quota_mode loop: the claimed workspace is the slot's image,
 *     now the session's, and its quota holds inside the container;
 *   - a burst of new sessions larger than the pool: every one is served
 *     (some cold), and the pool comes back;
 *   - a dry pool: claimants wait in line and the refill serves them in
 *     arrival order; one past the line's length takes the cold path;
 *   - a private session never takes a pool container, also when it is
 *     marked while it waits in line, and slots count against limits.sessions
 *     (one gives way to a cold session);
 *   - SIGKILL at each step of a claim, then a restart: the claimed container
 *     is the session's exactly once, no slot directory or uid is left, no
 *     workspace is shared; when the session's workspace got files meanwhile,
 *     the restart gives the slot up whole and the session comes up cold;
 *   - --gc keeps the slots a pool holds and removes a pool container, slot
 *     directory and uid no slot row names.
 * The pool is enabled only here (fixture.c keeps it off). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "apiclient.h"
#include "fixture.h"
#include "nodeenv.h"
#include "sandboxd/container.h"
#include "sandboxd/gc.h"
#include "sandboxd/pool.h"
#include "sandboxd/privacy.h"
#include "sandboxd/hub.h"
#include "sandboxd/session.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "sandboxd/wsquota.h"
#include "testenv.h"

TestSuite(pool, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;
static char tok[TOKEN_LEN + 1];

static void setup(int size)
{
        fixture_config(&cfg); /* sealed containers (network none) with a port block each */
        cfg.pool_size = size;
}

/* Remove every container of this run (between the restarts of a test). */
static void remove_run_containers(void)
{
        const char *filters[] = {testenv_run_filter(), NULL};
        struct docker_container_summary *list = NULL;
        size_t n = 0;

        cr_assert_eq(docker_container_list(testenv_docker(), filters, true, &list, &n, NULL), 0);
        for (size_t i = 0; i < n; i++)
                (void)container_remove(testenv_engine(), list[i].id, NULL);
        free(list);
}

static bool pool_full(void *ud)
{
        struct pool_stats ps;
        (void)ud;
        pool_stats(d->pool, &ps);
        return ps.ready == (size_t)ps.size;
}

static void wait_full(void)
{
        cr_assert_geq(fixture_wait(pool_full, NULL, 60000), 0, "the pool did not fill");
}

static cJSON *call(const char *method, const char *params_json)
{
        cJSON *r = apic_call(cfg.api_socket, tok, method, apic_json(params_json));
        cr_assert_not_null(r, "no reply to %s", method);
        cr_assert_str_eq(apic_code(r), "", "%s %s: %s", method, params_json, cJSON_PrintUnformatted(r));
        return r;
}

static bool is_pooled(const char *session)
{
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, "u1", session, &info), 0);
        bool pooled = info.pooled;
        session_info_done(&info);
        return pooled;
}

static int count_dir(const char *path)
{
        char cmd[SBX_PATH_MAX + 64];
        snprintf(cmd, sizeof(cmd), "ls -A '%s' 2>/dev/null | wc -l", path);
        FILE *f = popen(cmd, "r");
        int n = -1;
        cr_assert_not_null(f);
        cr_assert_eq(fscanf(f, "%d", &n), 1);
        pclose(f);
        return n;
}

static int pool_dir_entries(void)
{
        char path[SBX_PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/workspaces/" POOL_USER, cfg.data_dir);
        return count_dir(path);
}

static int pool_uids(struct store *st)
{
        _cleanup_free_ struct store_uid *rows = NULL;
        size_t n = 0;
        int k = 0;
        cr_assert_eq(store_uid_list(st, &rows, &n), 0);
        for (size_t i = 0; i < n; i++)
                k += strcmp(rows[i].user_id, POOL_USER) == 0;
        return k;
}

Test(pool, first_command_runs_in_a_pool_container_with_its_own_workspace_and_the_pool_refills)
{
        struct sbx_error err = {0};
        struct pool_stats ps;
        char ws[SBX_PATH_MAX + 64], want[64];
        struct stat st;
        uid_t uid;
        cJSON *r;

        setup(2);
        d = fixture_open_sockets(&cfg);
        cr_assert_eq(token_create(d->store, "u1", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
        wait_full();

        r = call("exec", "{\"session\": \"s1\", \"command\": \"echo one > /workspace/f; id -u; ls -A /workspace\"}");
        cr_assert(is_pooled("s1"), "the first command did not take a pool container");
        uid = 0;
        cr_assert_eq(sessuid_lookup(d->store, "u1", "s1", &uid), 0, "the slot's uid was not handed to the session");
        snprintf(want, sizeof(want), "%u\nf\n", (unsigned)uid);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), want);
        cJSON_Delete(r);
        snprintf(ws, sizeof(ws), "%s/workspaces/u1/s1/f", cfg.data_dir);
        cr_assert_eq(stat(ws, &st), 0, "the file is not in the session's workspace on the host");
        cr_assert_eq(st.st_uid, uid);
        r = call("session_info", "{\"session\": \"s1\"}");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "pooled")));
        cJSON_Delete(r);

        /* bound at claim: the session's port block with the gateway listening on it, egress.sock and
         * fwd.sock in its runner directory, the proxy variables inside */
        {
                struct session_info info;
                cr_assert_eq(session_get_info(d->sessions, "u1", "s1", &info), 0);
                cr_assert_str_eq(info.network_mode, "none");
                cr_assert_eq(info.n_ports, (size_t)cfg.ports_per_session, "no port block bound at claim");
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_in sa = {.sin_family = AF_INET,
                                         .sin_port = htons((uint16_t)info.ports[0]),
                                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
                cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0,
                             "nothing listens on the claimed session's port %d: %s", info.ports[0], strerror(errno));
                close(fd);
                session_info_done(&info);
        }
        r = call("exec", "{\"session\": \"s1\", \"command\": \"ls /run/sandboxd; echo $HTTP_PROXY\"}");
        {
                const char *out = apic_str(apic_result(r), "stdout");
                cr_assert(strstr(out, "egress.sock") && strstr(out, "fwd.sock") && strstr(out, "http://127.0.0.1:"),
                          "inside the claimed container: %s", out);
        }
        cJSON_Delete(r);

        /* a second session: another container and uid, an empty workspace */
        r = call("exec", "{\"session\": \"s2\", \"command\": \"ls -A /workspace | wc -l\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "0\n", "s2 sees files of another session");
        cJSON_Delete(r);
        cr_assert(is_pooled("s2"));
        uid_t uid2 = 0;
        cr_assert_eq(sessuid_lookup(d->store, "u1", "s2", &uid2), 0);
        cr_assert_neq(uid, uid2);

        wait_full();
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.claims, 2);
        cr_assert_eq(ps.misses, 0);
        cr_assert_geq(ps.created, 4);
        cr_assert_eq(pool_dir_entries(), 2, "slot directories: one per ready slot");
        cr_assert_eq(pool_uids(d->store), 2);
        /* sandboxctl pool prints the table */
        {
                char *out = NULL;
                cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "pool", &out), 0, "%s", out);
                cr_assert_not_null(strstr(out, "READY"), "%s", out);
                free(out);
                out = NULL;
                cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "metrics", &out), 0, "%s", out);
                cr_assert_not_null(strstr(out, "sandboxd_pool_claims_total{outcome=\"claimed\"} 2"), "%s", out);
                free(out);
        }
        /* Docker cannot relabel: the claimed container still says @pool, yet the store is what counts */
        {
                struct docker_container_info ci;
                struct session_info info;
                struct gc_report rep;
                char *out = NULL, want_row[16];

                cr_assert_eq(session_get_info(d->sessions, "u1", "s1", &info), 0);
                cr_assert_eq(docker_container_inspect(testenv_docker(), info.container_id, &ci, NULL), 0);
                cr_assert_str_eq(docker_kv_get(ci.labels, ci.n_labels, CONTAINER_LABEL_USER), POOL_USER);
                cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "sessions", &out), 0, "%s", out);
                snprintf(want_row, sizeof(want_row), "%.12s", info.container_id);
                cr_assert_not_null(strstr(out, want_row), "the admin listing does not give s1 its container: %s", out);
                free(out);
                cr_assert_eq(gc_run(&cfg, &(struct gc_options){.dry_run = true}, &rep, &err), 0, "%s", err.msg);
                cr_assert_eq(rep.kinds[GC_ORPHAN_CONTAINERS].count, 0, "--gc takes a claimed container for an orphan");
                gc_report_done(&rep);
                session_info_done(&info);
        }
        daemon_close(d);
        remove_run_containers();
}

/* The ids of the ready slots' containers of image_ref. */
static size_t ready_of(const char *image_ref, char ids[][65], size_t max)
{
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        size_t n = 0, k = 0;
        cr_assert_eq(store_pool_list(d->store, &rows, &n), 0);
        for (size_t i = 0; i < n && k < max; i++)
                if (strcmp(rows[i].state, "ready") == 0 && strcmp(rows[i].image_ref, image_ref) == 0)
                        memcpy(ids[k++], rows[i].container_id, 65);
        return k;
}

static bool among(const char *id, char ids[][65], size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(ids[i], id) == 0)
                        return true;
        return false;
}

Test(pool, every_image_has_a_pool_of_its_own_size)
{
        /* the test image under a second name: another image as far as the config and the pool go */
        static const char *const other = "sandboxd/test";
        char def_ids[4][65], other_ids[4][65];
        struct sbx_error err = {0};
        struct session_info info;
        struct pool_stats ps;
        size_t n_def, n_other;

        setup(1);
        snprintf(cfg.images, sizeof(cfg.images), "%s", other);
        snprintf(cfg.pool_images, sizeof(cfg.pool_images), "%s=2", other);
        d = fixture_open_sockets(&cfg);
        cr_assert_eq(token_create(d->store, "u1", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.size, 3);
        cr_assert_eq(ps.n_images, 2);
        cr_assert_str_eq(ps.images[0].image, TESTENV_TEST_IMAGE);
        cr_assert_eq(ps.images[0].size, 1);
        cr_assert_str_eq(ps.images[1].image, other);
        cr_assert_eq(ps.images[1].size, 2);
        wait_full();
        n_def = ready_of(TESTENV_TEST_IMAGE, def_ids, 4);
        n_other = ready_of(other, other_ids, 4);
        cr_assert_eq(n_def, 1);
        cr_assert_eq(n_other, 2);

        /* a session of the other image takes one of that image's slots */
        cJSON_Delete(call("create_session", "{\"session\": \"i1\", \"image\": \"sandboxd/test\"}"));
        cJSON_Delete(call("exec", "{\"session\": \"i1\", \"command\": \"true\"}"));
        cr_assert(is_pooled("i1"));
        cr_assert_eq(session_get_info(d->sessions, "u1", "i1", &info), 0);
        cr_assert(among(info.container_id, other_ids, n_other), "i1 did not get a slot of its image");
        session_info_done(&info);
        /* one of the default image takes the default image's */
        cJSON_Delete(call("exec", "{\"session\": \"i0\", \"command\": \"true\"}"));
        cr_assert(is_pooled("i0"));
        cr_assert_eq(session_get_info(d->sessions, "u1", "i0", &info), 0);
        cr_assert(among(info.container_id, def_ids, n_def), "i0 did not get the default image's slot");
        session_info_done(&info);
        /* both come back, each to its own size */
        wait_full();
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.images[0].ready, 1);
        cr_assert_eq(ps.images[1].ready, 2);
        daemon_close(d);
        remove_run_containers();
}

Test(pool, loop_mode_claims_hand_the_slots_image_to_the_session_with_its_quota)
{
        char path[SBX_PATH_MAX + 64], slot_img[SBX_PATH_MAX + 64], slot[65];
        struct sbx_error err = {0};
        struct wsquota_usage u;
        struct stat st;
        cJSON *r;

        setup(1);
        snprintf(cfg.workspace_quota_mode, sizeof(cfg.workspace_quota_mode), "loop");
        cfg.workspace_quota_bytes = 16 << 20;
        cfg.workspace_inodes = 1024;
        d = fixture_open_sockets(&cfg);
        cr_assert_eq(token_create(d->store, "u1", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
        wait_full();
        {
                _cleanup_free_ struct store_pool_slot *rows = NULL;
                size_t n = 0;
                cr_assert_eq(store_pool_list(d->store, &rows, &n), 0);
                cr_assert_eq(n, 1);
                memcpy(slot, rows[0].slot, sizeof(slot));
        }
        cr_assert(wsquota_mounted(&cfg, POOL_USER, slot), "the slot's workspace image is not mounted");
        snprintf(slot_img, sizeof(slot_img), "%s/workspace-images/" POOL_USER "/%s.ext4", cfg.data_dir, slot);
        cr_assert_eq(stat(slot_img, &st), 0);

        r = call("exec",
                 "{\"session\": \"l1\", \"command\": \"echo kept > /workspace/f; "
                 "dd if=/dev/zero of=/workspace/big bs=1M count=40 2>&1; echo rc=$?\"}");
        {
                const char *o = apic_str(apic_result(r), "stdout");
                cr_assert(strstr(o, "No space left") && !strstr(o, "rc=0"),
                          "a 40 MiB write into a 16 MiB workspace: %s", o);
        }
        cJSON_Delete(r);
        cr_assert(is_pooled("l1"));
        /* the slot's image is the session's now, mounted on the session's workspace */
        cr_assert(wsquota_mounted(&cfg, "u1", "l1"));
        cr_assert_neq(stat(slot_img, &st), 0, "the slot's image is still the slot's");
        snprintf(path, sizeof(path), "%s/workspace-images/u1/l1.ext4", cfg.data_dir);
        cr_assert_eq(stat(path, &st), 0, "the session has no image");
        snprintf(path, sizeof(path), "%s/workspaces/u1/l1/f", cfg.data_dir);
        cr_assert_eq(stat(path, &st), 0, "the file is not in the session's workspace on the host");
        wsquota_usage(&cfg, "u1", "l1", &u);
        cr_assert(u.known && u.mounted && u.over);
        cr_assert_leq(u.bytes_limit, (uint64_t)cfg.workspace_quota_bytes);
        /* the pool refills with a fresh image; the session's survives a recreation */
        wait_full();
        cr_assert_eq(pool_dir_entries(), 1);
        {
                char cid[65];
                fixture_container_of(d, "u1", "l1", cid);
                cr_assert_eq(docker_container_remove(testenv_docker(), cid, true, NULL), 0);
        }
        r = call("exec", "{\"session\": \"l1\", \"command\": \"cat /workspace/f\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "kept\n");
        cJSON_Delete(r);
        cr_assert_eq(session_destroy(d->sessions, "u1", "l1", true, &err), 0, "%s", err.msg);
        daemon_close(d);
        remove_run_containers();
}

struct burst_arg {
        char session[16];
        int rc;
};

static void *burst_one(void *ud)
{
        struct burst_arg *a = ud;
        struct session *s = NULL;
        a->rc = session_acquire(d->sessions, "u1", a->session, &s, NULL);
        session_release(s);
        return NULL;
}

Test(pool, a_burst_larger_than_the_pool_is_served_and_the_pool_comes_back)
{
        enum { N = 8 };
        struct burst_arg args[N];
        pthread_t t[N];
        struct pool_stats ps;
        size_t pooled = 0;

        setup(2);
        d = fixture_open(&cfg, false);
        wait_full();
        for (int i = 0; i < N; i++) {
                snprintf(args[i].session, sizeof(args[i].session), "b%d", i);
                cr_assert_eq(pthread_create(&t[i], NULL, burst_one, &args[i]), 0);
        }
        for (int i = 0; i < N; i++) {
                pthread_join(t[i], NULL);
                cr_assert_eq(args[i].rc, 0, "session %s was not served", args[i].session);
                pooled += is_pooled(args[i].session);
        }
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.claims + ps.misses, N);
        cr_assert_eq(ps.claims, pooled);
        cr_assert_geq(pooled, 1);
        /* the ready slots, plus at most a line of pool.size served by the refill */
        cr_assert_leq(pooled, 2 * (size_t)cfg.pool_size, "more sessions pooled than the pool and its line could hold");
        cr_assert_eq(ps.waiting, 0);
        for (int i = 0; i < N; i++)
                cr_assert_eq(fixture_count_containers("u1", args[i].session) + (is_pooled(args[i].session) ? 1 : 0), 1,
                             "session %s: one container", args[i].session);
        wait_full();
        daemon_close(d);
        remove_run_containers();
}

/* ---- a dry pool: the line ---- */

static volatile bool refill_gate_closed;

static void hold_refill(const char *stage)
{
        /* the refill waits while the gate is closed (a minute at most: every wait has a deadline) */
        if (strcmp(stage, "refill") == 0)
                (void)TESTENV_WAIT_UNTIL(!refill_gate_closed, 60000);
}

static bool waiting_is(void *ud)
{
        struct pool_stats ps;
        pool_stats(d->pool, &ps);
        return ps.waiting == (size_t)(uintptr_t)ud;
}

/* Seconds since midnight of the start of a session's container (Docker's RFC 3339 StartedAt). */
static double started_at(const char *session)
{
        struct session_info info;
        struct docker_container_info ci;
        int h, m;
        double sec;

        cr_assert_eq(session_get_info(d->sessions, "u1", session, &info), 0);
        cr_assert_eq(docker_container_inspect(testenv_docker(), info.container_id, &ci, NULL), 0);
        session_info_done(&info);
        const char *t = strchr(ci.started_at, 'T');
        cr_assert(t && sscanf(t + 1, "%d:%d:%lf", &h, &m, &sec) == 3, "StartedAt %s", ci.started_at);
        return h * 3600 + m * 60 + sec;
}

Test(pool, a_dry_pool_serves_its_line_in_arrival_order_and_one_past_the_line_goes_cold)
{
        struct burst_arg args[3];
        pthread_t t[3];
        struct session *s = NULL;
        struct pool_stats ps;

        setup(2);
        cfg.pool_wait_ms = 60000; /* the refill, held back below, reaches the line for sure */
        d = fixture_open(&cfg, false);
        wait_full();
        refill_gate_closed = true;
        pool_set_test_hook(hold_refill);
        /* the pool runs dry; its refill waits at the gate */
        for (int i = 0; i < 2; i++) {
                char name[8];
                snprintf(name, sizeof(name), "a%d", i);
                cr_assert_eq(session_acquire(d->sessions, "u1", name, &s, NULL), 0);
                session_release(s);
                cr_assert(is_pooled(name));
        }
        /* w0, then w1, join the line (pool.size 2 long); w2 finds it full: cold at once */
        for (int i = 0; i < 3; i++) {
                snprintf(args[i].session, sizeof(args[i].session), "w%d", i);
                cr_assert_eq(pthread_create(&t[i], NULL, burst_one, &args[i]), 0);
                if (i < 2)
                        cr_assert_geq(fixture_wait(waiting_is, (void *)(uintptr_t)(i + 1), 30000), 0,
                                      "%s did not join the line", args[i].session);
        }
        pthread_join(t[2], NULL);
        cr_assert_eq(args[2].rc, 0, "the claimant past the line was not served");
        cr_assert_not(is_pooled("w2"), "w2 was served from the pool past a full line");
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.waiting, 2, "the line did not keep its waiters");
        /* the refill goes on: the first slot to w0, the next to w1 */
        refill_gate_closed = false;
        for (int i = 0; i < 2; i++) {
                pthread_join(t[i], NULL);
                cr_assert_eq(args[i].rc, 0, "session %s was not served", args[i].session);
                cr_assert(is_pooled(args[i].session), "%s waited but took the cold path", args[i].session);
        }
        cr_assert_lt(started_at("w0"), started_at("w1"), "w1 got an older slot than w0, who came first");
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.waited, 2);
        cr_assert_eq(ps.waiting, 0);
        cr_assert_eq(ps.claims, 4);
        cr_assert_eq(ps.misses, 1);
        pool_set_test_hook(NULL);
        wait_full();
        daemon_close(d);
        remove_run_containers();
}

struct mark_arg {
        const char *session;
        int rc;
};

static void *mark_one(void *ud)
{
        struct mark_arg *a = ud;
        a->rc = privacy_mark(d->privacy, "u1", a->session, "patients", "test", "test", NULL);
        return NULL;
}

static bool marked(void *ud)
{
        bool priv = false;
        return store_private_any(d->store, "u1", ud, &priv) == 0 && priv;
}

Test(pool, a_session_marked_private_while_it_waits_in_line_takes_no_pool_container)
{
        struct burst_arg w = {.session = "w0"};
        struct mark_arg m = {.session = "w0"};
        struct session *s = NULL;
        struct pool_stats ps;
        pthread_t tw, tm;

        setup(1);
        cfg.pool_wait_ms = 60000;
        d = fixture_open(&cfg, false);
        wait_full();
        refill_gate_closed = true;
        pool_set_test_hook(hold_refill);
        cr_assert_eq(session_acquire(d->sessions, "u1", "a0", &s, NULL), 0);
        session_release(s);
        cr_assert(is_pooled("a0"));
        cr_assert_eq(pthread_create(&tw, NULL, burst_one, &w), 0);
        cr_assert_geq(fixture_wait(waiting_is, (void *)(uintptr_t)1, 30000), 0, "w0 did not join the line");
        /* the mark lands while w0 waits (it then waits for w0's creation to end) */
        cr_assert_eq(pthread_create(&tm, NULL, mark_one, &m), 0);
        cr_assert_geq(fixture_wait(marked, (void *)"w0", 30000), 0, "the mark was not recorded");
        refill_gate_closed = false;
        pthread_join(tw, NULL);
        pthread_join(tm, NULL);
        cr_assert_eq(w.rc, 0, "w0 was not served");
        cr_assert_eq(m.rc, 0);
        cr_assert_not(is_pooled("w0"), "a session marked private while it waited took a pool container");
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.claims, 1);
        pool_set_test_hook(NULL);
        wait_full(); /* the slot given back (or a new one) is ready for the next session */
        daemon_close(d);
        remove_run_containers();
}

Test(pool, a_private_session_never_takes_a_pool_container)
{
        struct session *s = NULL;
        struct pool_stats ps;

        setup(1);
        cfg.max_sessions = 1; /* the slot counts against it: the cold session makes it give way */
        d = fixture_open(&cfg, false);
        wait_full();
        cr_assert_eq(privacy_mark(d->privacy, "u1", "p1", "patients", "test", "test", NULL), 0);
        cr_assert_eq(session_acquire(d->sessions, "u1", "p1", &s, NULL), 0);
        session_release(s);
        cr_assert_not(is_pooled("p1"));
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.claims, 0);
        cr_assert_eq(ps.ready, 0, "the slot did not give way to the session under max_sessions 1");
        cr_assert_eq(pool_dir_entries(), 0);
        sbx_sleep_ms(1500); /* not a wait: the refill thread's next look, which must not make one back */
        pool_stats(d->pool, &ps);
        cr_assert_eq(ps.ready + ps.creating, 0, "the pool refilled past max_sessions");
        daemon_close(d);
        remove_run_containers();
}

/* ---- SIGKILL during a claim ---- */

static const char *kill_stage;

static void kill_at(const char *stage)
{
        if (kill_stage && strcmp(stage, kill_stage) == 0)
                raise(SIGKILL);
}

static void child_claims(int fd)
{
        struct session *s = NULL;
        struct pool_stats ps;
        char cid[65] = "";

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        d = fixture_open(&cfg, false);
        (void)TESTENV_WAIT_UNTIL((pool_stats(d->pool, &ps), ps.ready == 1), 60000);
        {
                _cleanup_free_ struct store_pool_slot *rows = NULL;
                size_t n = 0;
                if (store_pool_list(d->store, &rows, &n) == 0 && n == 1)
                        memcpy(cid, rows[0].container_id, sizeof(cid));
        }
        (void)!write(fd, cid, sizeof(cid));
        pool_set_test_hook(kill_at);
        (void)session_acquire(d->sessions, "u1", "k1", &s, NULL);
        _exit(3); /* the hook did not fire */
}

/* A daemon in a child process claims a slot for u1:k1 and is SIGKILLed at
 * stage; ret_cid: the container of the slot it claimed. */
static void claim_killed_at(const char *stage, char ret_cid[65])
{
        int pipefd[2], status;
        pid_t pid;

        kill_stage = stage;
        ret_cid[0] = '\0';
        {
                /* SANDBOXD_TEST_NODE: the node agent is this process's, so it outlives the
                 * daemon killed in the child, as a node agent outlives a control daemon's crash */
                struct sbx_config c = cfg;
                nodeenv_fixture(&c);
        }
        cr_assert_eq(pipe(pipefd), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
                child_claims(pipefd[1]);
        close(pipefd[1]);
        cr_assert_eq(read(pipefd[0], ret_cid, 65), 65);
        close(pipefd[0]);
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "stage %s: the child was not killed", stage);
        cr_assert(ret_cid[0], "stage %s: the child had no ready slot", stage);
}

Test(pool, sigkill_at_each_step_of_a_claim_leaves_the_container_with_the_session_once)
{
        static const char *const stages[] = {"claiming", "moved", "rekeyed"};

        for (size_t k = 0; k < ELEMENTSOF(stages); k++) {
                char cid[65] = "", path[SBX_PATH_MAX + 64];
                struct session_info info;
                uid_t uid;

                setup(1);
                claim_killed_at(stages[k], cid);

                d = fixture_open(&cfg, false); /* restart on the same data_dir */
                cr_assert_eq(session_get_info(d->sessions, "u1", "k1", &info), 0, "stage %s: no session", stages[k]);
                cr_assert_eq(info.state, SESSION_RUNNING, "stage %s", stages[k]);
                cr_assert_str_eq(info.container_id, cid, "stage %s: the session lost the claimed container", stages[k]);
                session_info_done(&info);
                cr_assert_eq(sessuid_lookup(d->store, "u1", "k1", &uid), 0, "stage %s", stages[k]);
                snprintf(path, sizeof(path), "%s/workspaces/u1/k1", cfg.data_dir);
                struct stat st;
                cr_assert_eq(stat(path, &st), 0, "stage %s: no workspace", stages[k]);
                cr_assert_eq(st.st_uid, uid);
                /* the container is no slot's any more, and it works as the session's */
                {
                        struct store_pool_slot row;
                        _cleanup_free_ struct store_pool_slot *rows = NULL;
                        size_t n = 0;
                        cr_assert_eq(store_pool_list(d->store, &rows, &n), 0);
                        for (size_t i = 0; i < n; i++)
                                cr_assert_str_neq(rows[i].container_id, cid, "stage %s: doubled", stages[k]);
                        (void)row;
                }
                struct session *s = NULL;
                cr_assert_eq(session_acquire(d->sessions, "u1", "k1", &s, NULL), 0);
                session_release(s);
                cr_assert_eq(session_get_info(d->sessions, "u1", "k1", &info), 0);
                cr_assert_str_eq(info.container_id, cid, "stage %s: recreated instead of adopted", stages[k]);
                session_info_done(&info);
                /* its runner directory moved with it (on the node, over a node agent): the runner is
                 * the session's */
                cr_assert(hub_wait(d->runner, "u1", "k1", 30000),
                          "stage %s: the claimed container's runner is not connected as the session's", stages[k]);
                wait_full();
                cr_assert_eq(pool_dir_entries(), 1, "stage %s: leftover slot directories", stages[k]);
                cr_assert_eq(pool_uids(d->store), 1, "stage %s: leftover slot uids", stages[k]);
                daemon_close(d);
                remove_run_containers();
        }
}

Test(pool, a_claim_cut_short_before_the_sessions_workspace_got_files_is_given_up_at_restart)
{
        char cid[65] = "", path[SBX_PATH_MAX + 64];
        struct docker_container_info ci;
        struct session_info info;
        struct session *s = NULL;
        struct stat st;
        FILE *f;

        setup(1);
        claim_killed_at("claiming", cid);

        /* meanwhile the session's workspace got a file (a recreation after a failure, say) */
        snprintf(path, sizeof(path), "%s/workspaces/u1", cfg.data_dir);
        (void)mkdir(path, 0700);
        snprintf(path, sizeof(path), "%s/workspaces/u1/k1", cfg.data_dir);
        cr_assert_eq(mkdir(path, 0700), 0);
        snprintf(path, sizeof(path), "%s/workspaces/u1/k1/mine", cfg.data_dir);
        cr_assert_not_null(f = fopen(path, "w"));
        fputs("mine\n", f);
        fclose(f);

        d = fixture_open(&cfg, false); /* the restart cannot finish the claim: it gives the slot up */
        cr_assert_eq(docker_container_inspect(testenv_docker(), cid, &ci, NULL), -ENOENT,
                     "the slot's container outlived a claim given up");
        cr_assert_eq(stat(path, &st), 0, "the session's file is gone");
        cr_assert_eq(session_acquire(d->sessions, "u1", "k1", &s, NULL), 0);
        session_release(s);
        cr_assert_not(is_pooled("k1"), "a session with files took a pool container");
        cr_assert_eq(session_get_info(d->sessions, "u1", "k1", &info), 0);
        cr_assert_str_neq(info.container_id, cid);
        session_info_done(&info);
        {
                char *out = NULL, id[65];
                fixture_container_of(d, "u1", "k1", id);
                cr_assert_eq(fixture_sh(id, "cat /workspace/mine", &out), 0, "%s", out);
                cr_assert_str_eq(out, "mine\n");
                free(out);
        }
        wait_full();
        cr_assert_eq(pool_dir_entries(), 1, "leftover slot directories");
        cr_assert_eq(pool_uids(d->store), 1, "leftover slot uids");
        daemon_close(d);
        remove_run_containers();
}

Test(pool, gc_keeps_held_slots_and_removes_what_no_slot_names)
{
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        struct gc_report rep;
        struct sbx_error err = {0};
        struct store *st;
        char db[SBX_PATH_MAX + 32], slot[65];
        size_t n = 0;

        setup(2);
        d = fixture_open(&cfg, false);
        wait_full();
        daemon_close(d); /* the slots stay, as over a restart */
        d = NULL;

        cr_assert_eq(gc_run(&cfg, &(struct gc_options){.dry_run = false}, &rep, &err), 0, "%s", err.msg);
        gc_report_done(&rep);
        snprintf(db, sizeof(db), "%s/sandboxd.db", cfg.data_dir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(store_pool_list(st, &rows, &n), 0);
        cr_assert_eq(n, 2);
        cr_assert_eq(fixture_count_containers(POOL_USER, rows[0].slot), 1, "gc removed a held slot");
        cr_assert_eq(fixture_count_containers(POOL_USER, rows[1].slot), 1, "gc removed a held slot");
        /* one slot loses its row: its container, directory and uid are garbage */
        memcpy(slot, rows[0].slot, sizeof(slot));
        cr_assert_eq(store_pool_delete(st, slot), 0);
        store_close(st);

        cr_assert_eq(gc_run(&cfg, &(struct gc_options){.dry_run = false}, &rep, &err), 0, "%s", err.msg);
        gc_report_done(&rep);
        cr_assert_eq(fixture_count_containers(POOL_USER, slot), 0, "gc kept a pool container no slot names");
        cr_assert_eq(fixture_count_containers(POOL_USER, rows[1].slot), 1, "gc removed a held slot");
        cr_assert_eq(pool_dir_entries(), 1);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(pool_uids(st), 1);
        store_close(st);

        /* the restart adopts the slot that is left (and refills beside it) */
        d = fixture_open(&cfg, false);
        wait_full();
        cr_assert_eq(fixture_count_containers(POOL_USER, rows[1].slot), 1);
        daemon_close(d);
        /* turned off: a restart gives every slot back */
        cfg.pool_size = 0;
        d = fixture_open(&cfg, false);
        cr_assert_eq(fixture_count_containers(POOL_USER, rows[1].slot), 0, "a pool turned off kept its slot");
        cr_assert_eq(pool_dir_entries(), 0);
        cr_assert_eq(pool_uids(d->store), 0);
        daemon_close(d);
        remove_run_containers();
}
