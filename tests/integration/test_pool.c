/* Integration tests of the warm pool (issue 15) against the real dockerd:
 *   - a new session's first command runs in a pool container: session_info
 *     says pooled, the workspace is the session's own (its uid, its path,
 *     nothing of another session), its port block, forwards and egress
 *     socket are bound at claim, and the pool refills;
 *   - a burst of new sessions larger than the pool: every one is served
 *     (some cold), and the pool comes back;
 *   - a private session never takes a pool container, and slots count
 *     against max_sessions (one gives way to a cold session);
 *   - SIGKILL at each step of a claim, then a restart: the claimed container
 *     is the session's exactly once, no slot directory or uid is left, no
 *     workspace is shared;
 *   - --gc keeps the slots a pool holds and removes a pool container, slot
 *     directory and uid no slot row names.
 * The pool is enabled only here (fixture.c keeps it off). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
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
#include "sandboxd/container.h"
#include "sandboxd/gc.h"
#include "sandboxd/pool.h"
#include "sandboxd/privacy.h"
#include "sandboxd/session.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
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
                (void)container_remove(testenv_docker(), list[i].id, NULL);
        free(list);
}

static bool pool_full(void *ud)
{
        struct pool_stats ps;
        (void)ud;
        pool_stats(d->pool, &ps);
        return ps.ready == (size_t)cfg.pool_size;
}

static void wait_full(void)
{
        cr_assert_geq(fixture_wait(pool_full, NULL, 60000), 0, "the pool did not fill to %d", cfg.pool_size);
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
                struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)info.ports[0]),
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
        a->rc = session_get_or_create(d->sessions, "u1", a->session, &s, NULL);
        session_release(s);
        return NULL;
}

Test(pool, a_burst_larger_than_the_pool_is_served_and_the_pool_comes_back)
{
        enum { N = 4 };
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
        cr_assert_lt(pooled, N, "more sessions pooled than the pool could hold");
        for (int i = 0; i < N; i++)
                cr_assert_eq(fixture_count_containers("u1", args[i].session) +
                                     (is_pooled(args[i].session) ? 1 : 0),
                             1, "session %s: one container", args[i].session);
        wait_full();
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
        cr_assert_eq(session_get_or_create(d->sessions, "u1", "p1", &s, NULL), 0);
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
        (void)session_get_or_create(d->sessions, "u1", "k1", &s, NULL);
        _exit(3); /* the hook did not fire */
}

Test(pool, sigkill_at_each_step_of_a_claim_leaves_the_container_with_the_session_once)
{
        static const char *const stages[] = {"claiming", "moved", "rekeyed"};

        for (size_t k = 0; k < ELEMENTSOF(stages); k++) {
                char cid[65] = "", path[SBX_PATH_MAX + 64];
                struct session_info info;
                int pipefd[2], status;
                pid_t pid;
                uid_t uid;

                setup(1);
                kill_stage = stages[k];
                cr_assert_eq(pipe(pipefd), 0);
                pid = fork();
                cr_assert_geq(pid, 0);
                if (pid == 0)
                        child_claims(pipefd[1]);
                close(pipefd[1]);
                cr_assert_eq(read(pipefd[0], cid, sizeof(cid)), (ssize_t)sizeof(cid));
                close(pipefd[0]);
                cr_assert_eq(waitpid(pid, &status, 0), pid);
                cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "stage %s: the child was not killed",
                          stages[k]);
                cr_assert(cid[0], "stage %s: the child had no ready slot", stages[k]);

                d = fixture_open(&cfg, false); /* restart on the same data_dir */
                cr_assert_eq(session_get_info(d->sessions, "u1", "k1", &info), 0, "stage %s: no session",
                             stages[k]);
                cr_assert_eq(info.state, SESSION_RUNNING, "stage %s", stages[k]);
                cr_assert_str_eq(info.container_id, cid, "stage %s: the session lost the claimed container",
                                 stages[k]);
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
                cr_assert_eq(session_get_or_create(d->sessions, "u1", "k1", &s, NULL), 0);
                session_release(s);
                cr_assert_eq(session_get_info(d->sessions, "u1", "k1", &info), 0);
                cr_assert_str_eq(info.container_id, cid, "stage %s: recreated instead of adopted", stages[k]);
                session_info_done(&info);
                wait_full();
                cr_assert_eq(pool_dir_entries(), 1, "stage %s: leftover slot directories", stages[k]);
                cr_assert_eq(pool_uids(d->store), 1, "stage %s: leftover slot uids", stages[k]);
                daemon_close(d);
                remove_run_containers();
        }
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
