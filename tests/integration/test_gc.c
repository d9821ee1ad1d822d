/* Integration tests of `sandboxd --gc` against the real dockerd: each kind of
 * garbage goes and nothing else does, containers without labels or of
 * another instance survive, a dry run changes nothing, gc beside a daemon
 * serving a session breaks nothing, and the binary's --json report and exit
 * status.
 *
 * Garbage is made the way it happens: real sessions through the daemon, then
 * the daemon closed and the store's clocks moved back (as if time passed) or
 * Docker changed behind its back. Each test uses an instance of its own,
 * because gc sweeps a whole instance and other test binaries of the same run
 * share the run id; every container still carries the run label, so the
 * run's cleanup removes whatever a failing test leaves.
 *
 * Over 800 lines: one suite, because its cases share one fixture (a store
 * and a data dir seeded with every kind of garbage); each case is short.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/container.h"
#include "sandboxd/gc.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(gc, .timeout = 300);

#define MIN_MS (60LL * 1000)
#define HOUR_MS (60 * MIN_MS)
#define DAY_MS (24 * HOUR_MS)

/* ---- helpers ---- */

static void gc_config(struct sbx_config *cfg)
{
        fixture_config(cfg);
        snprintf(cfg->instance, sizeof(cfg->instance), "%.40s-gc%d", testenv_run_id(), (int)getpid());
}

static void make_session(struct daemon *d, const char *user, const char *sid, char id[65])
{
        struct session *s = NULL;
        struct sbx_error err = {0};

        cr_assert_eq(session_acquire(d->sessions, user, sid, &s, &err), 0, "%s:%s: %s", user, sid, err.msg);
        session_container_id(s, id);
        session_release(s);
}

static struct store *open_store(const struct sbx_config *cfg)
{
        char db[600];
        struct store *st = NULL;
        struct sbx_error err = {0};

        snprintf(db, sizeof(db), "%s/sandboxd.db", cfg->data_dir);
        cr_assert_eq(store_open(db, &st, &err), 0, "store_open: %s", err.msg);
        return st;
}

/* Rewrite a session row: state (NULL keeps), container ("" clears, NULL
 * keeps), updated_at and last_activity (0 keeps). */
static void row_set(struct store *st, const char *user, const char *sid, const char *state, const char *container,
                    int64_t updated, int64_t activity)
{
        struct store_session row;

        cr_assert_eq(store_session_get(st, user, sid, &row), 0, "no row %s:%s", user, sid);
        if (state)
                snprintf(row.state, sizeof(row.state), "%s", state);
        if (container)
                snprintf(row.container_id, sizeof(row.container_id), "%s", container);
        if (updated)
                row.updated_at = updated;
        if (activity)
                row.last_activity = activity;
        cr_assert_eq(store_session_put(st, &row), 0);
}

static void row_new(struct store *st, const char *user, const char *sid, const char *state, int64_t at)
{
        struct store_session row = {0};

        snprintf(row.user_id, sizeof(row.user_id), "%s", user);
        snprintf(row.session_id, sizeof(row.session_id), "%s", sid);
        snprintf(row.state, sizeof(row.state), "%s", state);
        row.created_at = row.updated_at = row.last_activity = at;
        cr_assert_eq(store_session_put(st, &row), 0);
}

static bool container_exists(const char *id)
{
        struct docker_container_info info;
        return docker_container_inspect(testenv_docker(), id, &info, NULL) == 0;
}

static bool container_running(const char *id)
{
        struct docker_container_info info;
        return docker_container_inspect(testenv_docker(), id, &info, NULL) == 0 && info.running;
}

/* A started busybox container with labels ("k=v", NULL-terminated) and the
 * run label, made outside sandboxd. */
static void raw_container(const char *const *labels, char id[65])
{
        char keys[8][64], vals[8][160];
        struct docker_label l[9];
        size_t n = 0;
        struct sbx_error err = {0};

        for (; labels && labels[n]; n++) {
                const char *eq = strchr(labels[n], '=');
                cr_assert_not_null(eq);
                snprintf(keys[n], sizeof(keys[n]), "%.*s", (int)(eq - labels[n]), labels[n]);
                snprintf(vals[n], sizeof(vals[n]), "%s", eq + 1);
                l[n] = (struct docker_label){keys[n], vals[n]};
        }
        l[n++] = (struct docker_label){TESTENV_RUN_LABEL, testenv_run_id()};
        struct docker_container_spec spec = {.image = TESTENV_TEST_IMAGE,
                                             .user = "1000:1000",
                                             .labels = l,
                                             .n_labels = n};
        cr_assert_eq(docker_container_create(testenv_docker(), &spec, id, &err), 0, "create: %s", err.msg);
        cr_assert_eq(docker_container_start(testenv_docker(), id, &err), 0, "start: %s", err.msg);
}

static void run_gc(const struct sbx_config *cfg, bool dry_run, struct gc_report *rep)
{
        struct gc_options o = {.dry_run = dry_run};
        struct sbx_error err = {0};

        memset(rep, 0, sizeof(*rep));
        cr_assert_eq(gc_run(cfg, &o, rep, &err), 0, "gc_run: %s", err.msg);
}

static bool has_item(const struct gc_report *r, enum gc_kind k, const char *id)
{
        for (size_t i = 0; i < r->n_items; i++)
                if (r->items[i].kind == k && strcmp(r->items[i].id, id) == 0 && !r->items[i].failed)
                        return true;
        return false;
}

/* Assert the count of a kind, naming the items found when it is wrong. */
static void expect_kind(const struct gc_report *r, enum gc_kind k, uint64_t count, uint64_t failed)
{
        char list[4096] = "";
        size_t len = 0;

        for (size_t i = 0; i < r->n_items && len < sizeof(list) - 256; i++)
                if (r->items[i].kind == k)
                        len += (size_t)snprintf(list + len, sizeof(list) - len, " [%s %s: %s%s%s]", r->items[i].id,
                                                r->items[i].failed ? "FAILED" : "ok", r->items[i].reason,
                                                r->items[i].failed ? " / " : "", r->items[i].error);
        cr_assert_eq(r->kinds[k].count, count, "%s: %llu removed, want %llu:%s", gc_kind_name(k),
                     (unsigned long long)r->kinds[k].count, (unsigned long long)count, list);
        cr_assert_eq(r->kinds[k].failed, failed, "%s: %llu failed, want %llu:%s", gc_kind_name(k),
                     (unsigned long long)r->kinds[k].failed, (unsigned long long)failed, list);
}

static void write_file(const char *path, size_t size)
{
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f, "%s: %m", path);
        for (size_t i = 0; i < size; i++)
                fputc('x', f);
        fclose(f);
}

static bool path_exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

static void set_mtime(const char *path, int64_t ms)
{
        struct timespec ts[2] = {{.tv_sec = ms / 1000}, {.tv_sec = ms / 1000}};
        cr_assert_eq(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0, "%s: %m", path);
}

/* Raw SQL for what the store has no writer for yet in this tree (services
 * rows): test set-up only. */
static void sql(const struct sbx_config *cfg, const char *text)
{
        char db[600];
        sqlite3 *h = NULL;
        char *msg = NULL;

        snprintf(db, sizeof(db), "%s/sandboxd.db", cfg->data_dir);
        cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
        sqlite3_busy_timeout(h, 5000);
        cr_assert_eq(sqlite3_exec(h, text, NULL, NULL, &msg), SQLITE_OK, "%s: %s", text, msg ? msg : "");
        sqlite3_close(h);
}

static int64_t sql_count(const struct sbx_config *cfg, const char *text)
{
        char db[600];
        sqlite3 *h = NULL;
        sqlite3_stmt *q = NULL;
        int64_t n = -1;

        snprintf(db, sizeof(db), "%s/sandboxd.db", cfg->data_dir);
        cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(h, text, -1, &q, NULL), SQLITE_OK, "%s", text);
        if (sqlite3_step(q) == SQLITE_ROW)
                n = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
        sqlite3_close(h);
        return n;
}

/* An execution row with spool files of the given sizes (< 0: no file). */
static void put_exec(const struct sbx_config *cfg, struct store *st, const char *user, const char *session,
                     const char *state, int64_t finished_at, long out_bytes, long err_bytes, char id[37])
{
        struct store_execution ex = {0};
        char path[700];

        cr_assert_eq(sbx_uuid(id), 0);
        snprintf(ex.id, sizeof(ex.id), "%s", id);
        snprintf(ex.user_id, sizeof(ex.user_id), "%s", user);
        snprintf(ex.session_id, sizeof(ex.session_id), "%s", session);
        snprintf(ex.kind, sizeof(ex.kind), "exec");
        snprintf(ex.state, sizeof(ex.state), "%s", state);
        snprintf(ex.spool_path, sizeof(ex.spool_path), "%s/executions/%s.stdout", cfg->data_dir, id);
        ex.exit_code = finished_at ? 0 : -1;
        ex.created_at = finished_at ? finished_at - 1000 : sbx_wall_ms();
        ex.finished_at = finished_at;
        ex.stdout_bytes = ex.stdout_spooled = out_bytes > 0 ? out_bytes : 0;
        ex.stderr_bytes = ex.stderr_spooled = err_bytes > 0 ? err_bytes : 0;
        cr_assert_eq(store_exec_put(st, &ex), 0);
        if (out_bytes >= 0) {
                snprintf(path, sizeof(path), "%s/executions/%s.stdout", cfg->data_dir, id);
                write_file(path, (size_t)out_bytes);
        }
        if (err_bytes >= 0) {
                snprintf(path, sizeof(path), "%s/executions/%s.stderr", cfg->data_dir, id);
                write_file(path, (size_t)err_bytes);
        }
}

static void spool_path(const struct sbx_config *cfg, const char *id, const char *stream, char *buf, size_t size)
{
        snprintf(buf, size, "%s/executions/%s.%s", cfg->data_dir, id, stream);
}

static void ws_path(const struct sbx_config *cfg, const char *user, const char *sid, const char *rest, char *buf,
                    size_t size)
{
        snprintf(buf, size, "%s/workspaces/%s/%s%s%s", cfg->data_dir, user, sid, rest ? "/" : "", rest ? rest : "");
}

static void mkdirs(const char *path)
{
        char cmd[800];
        snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
        cr_assert_eq(system(cmd), 0);
}

/* ---- each kind goes, and only it ---- */

Test(gc, idle_old_and_orphan_containers_go_foreign_ones_stay)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct store *st;
        struct store_session row;
        struct gc_report rep;
        struct store_port *ports = NULL;
        size_t n_ports = 0;
        char idle[65], active[65], old[65], busy[65], ghost[65], stale[65], nolabel[65], other[65];
        char inst[128], other_inst[128], ex[37];
        int64_t now, audits = 0;

        gc_config(&cfg);
        cfg.max_age_s = 1; /* below the config file's minimum: the library takes what it is given */
        d = fixture_open(&cfg, false);
        make_session(d, "alice", "idle", idle);
        make_session(d, "alice", "active", active);
        make_session(d, "bob", "old", old);
        make_session(d, "bob", "busy", busy);
        daemon_close(d);

        st = open_store(&cfg);
        now = sbx_wall_ms();
        row_set(st, "alice", "idle", NULL, NULL, 0, now - 2 * HOUR_MS); /* idle_timeout is 1h */
        row_set(st, "bob", "old", NULL, NULL, 0, now - 5 * MIN_MS);     /* quiet, not idle */
        row_set(st, "bob", "busy", NULL, NULL, 0, now - 5 * MIN_MS);    /* quiet, but running something: */
        put_exec(&cfg, st, "bob", "busy", "RUNNING", 0, -1, -1, ex);
        store_close(st);

        snprintf(inst, sizeof(inst), CONTAINER_LABEL_INSTANCE "=%s", cfg.instance);
        snprintf(other_inst, sizeof(other_inst), CONTAINER_LABEL_INSTANCE "=%s-other", cfg.instance);
        raw_container((const char *const[]){CONTAINER_LABEL_MANAGED "=1", inst, CONTAINER_LABEL_USER "=carol",
                                            CONTAINER_LABEL_SESSION "=ghost", NULL},
                      ghost);
        /* alice:active's labels, but not the container its row names */
        raw_container((const char *const[]){CONTAINER_LABEL_MANAGED "=1", inst, CONTAINER_LABEL_USER "=alice",
                                            CONTAINER_LABEL_SESSION "=active", NULL},
                      stale);
        raw_container(NULL, nolabel);
        raw_container((const char *const[]){CONTAINER_LABEL_MANAGED "=1", other_inst, CONTAINER_LABEL_USER "=alice",
                                            CONTAINER_LABEL_SESSION "=idle", NULL},
                      other);
        sbx_sleep_ms(2100); /* not a wait: ages them past a max_age_s of 1 s (Docker's Created has whole seconds) */

        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_IDLE_CONTAINERS, 1, 0);
        expect_kind(&rep, GC_OLD_CONTAINERS, 1, 0);
        expect_kind(&rep, GC_ORPHAN_CONTAINERS, 2, 0);
        expect_kind(&rep, GC_ERROR_SESSIONS, 0, 0);
        expect_kind(&rep, GC_PORTS, 6, 0); /* the blocks of the two stopped sessions */
        cr_assert(has_item(&rep, GC_IDLE_CONTAINERS, idle));
        cr_assert(has_item(&rep, GC_OLD_CONTAINERS, old));
        cr_assert(has_item(&rep, GC_ORPHAN_CONTAINERS, ghost));
        cr_assert(has_item(&rep, GC_ORPHAN_CONTAINERS, stale));
        cr_assert_eq(rep.total.failed, 0);
        gc_report_done(&rep);

        cr_assert(!container_exists(idle), "the idle container survived");
        cr_assert(!container_exists(old), "the old container survived");
        cr_assert(!container_exists(ghost), "the orphan survived");
        cr_assert(!container_exists(stale), "the stale container survived");
        cr_assert(container_running(active), "the active session's container was removed");
        cr_assert(container_running(busy), "a container with an execution running was removed for max_age");
        cr_assert(container_running(nolabel), "a container without sandboxd labels was touched");
        cr_assert(container_running(other), "a container of another instance was touched");

        st = open_store(&cfg);
        cr_assert_eq(store_session_get(st, "alice", "idle", &row), 0);
        cr_assert_str_eq(row.state, "STOPPED");
        cr_assert_str_eq(row.error_cause, "gc_idle");
        cr_assert_str_eq(row.container_id, "");
        cr_assert_eq(store_session_get(st, "bob", "old", &row), 0);
        cr_assert_str_eq(row.state, "STOPPED");
        cr_assert_str_eq(row.error_cause, "gc_max_age");
        cr_assert_eq(store_session_get(st, "alice", "active", &row), 0);
        cr_assert_str_eq(row.state, "RUNNING");
        cr_assert_str_eq(row.container_id, active);
        cr_assert_eq(store_session_get(st, "bob", "busy", &row), 0);
        cr_assert_str_eq(row.container_id, busy);
        cr_assert_eq(store_ports_list(st, &ports, &n_ports), 0);
        cr_assert_eq(n_ports, 6);
        for (size_t i = 0; i < n_ports; i++)
                cr_assert((strcmp(ports[i].session_id, "active") == 0 || strcmp(ports[i].session_id, "busy") == 0),
                          "port %d of %s:%s kept", ports[i].port, ports[i].user_id, ports[i].session_id);
        free(ports);
        cr_assert_eq(store_audit_count(st, "alice", "idle", "gc.remove", &audits), 0);
        cr_assert_eq(audits, 1);
        store_close(st);

        /* Nothing is left to collect: a second run removes nothing. */
        run_gc(&cfg, false, &rep);
        cr_assert_eq(rep.total.count - rep.kinds[GC_STORE].count, 0, "a second run removed %llu items",
                     (unsigned long long)(rep.total.count - rep.kinds[GC_STORE].count));
        cr_assert_eq(rep.kinds[GC_STORE].count, 1, "the store is vacuumed every run");
        gc_report_done(&rep);
        cr_assert(container_running(active) && container_running(busy) && container_running(nolabel) &&
                  container_running(other));
}

Test(gc, error_sessions_ports_and_services)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct store *st;
        struct store_session row;
        struct gc_report rep;
        struct store_port *ports = NULL;
        size_t n_ports = 0;
        char gone[65], fresh[65], with[65], live[65], text[2048], ws[700];
        bool marked = false, inserted = false;
        int64_t now;

        gc_config(&cfg);
        d = fixture_open(&cfg, false);
        make_session(d, "bob", "errgone", gone);
        make_session(d, "bob", "errfresh", fresh);
        make_session(d, "bob", "errwith", with);
        make_session(d, "alice", "live", live);
        daemon_close(d);
        cr_assert_eq(container_remove(testenv_engine(), gone, NULL), 0);
        cr_assert_eq(container_remove(testenv_engine(), fresh, NULL), 0);
        cr_assert_eq(docker_container_stop(testenv_docker(), with, 0, NULL), 0);

        st = open_store(&cfg);
        now = sbx_wall_ms();
        /* left in ERROR, its container gone, nobody around for 2 h: goes */
        row_set(st, "bob", "errgone", "ERROR", NULL, now - 2 * HOUR_MS, now - 2 * HOUR_MS);
        cr_assert_eq(store_private_add(st, "bob", "errgone", "patients", "test", now, &inserted), 0);
        /* in ERROR a minute ago: its user may be retrying; stays */
        row_set(st, "bob", "errfresh", "ERROR", "", now - MIN_MS, now - 2 * HOUR_MS);
        /* in ERROR with its (exited) container still there, used 10 min ago: stays */
        row_set(st, "bob", "errwith", "ERROR", NULL, now - 2 * HOUR_MS, now - 10 * MIN_MS);
        /* ports of a session that no longer exists, and of a STOPPED one */
        cr_assert_eq(store_ports_reserve(st, (const int[]){26990, 26991}, 2, "dave", "gone", now), 0);
        row_new(st, "erin", "stopped", "STOPPED", now - DAY_MS);
        cr_assert_eq(store_ports_reserve(st, (const int[]){26993, 26994}, 2, "erin", "stopped", now), 0);
        store_close(st);

        snprintf(text, sizeof(text),
                 "INSERT INTO services (user_id, session_id, name, container_id, command, state) VALUES "
                 "('alice', 'live', 'web', '%s', 'httpd', 'RUNNING'), "
                 "('alice', 'live', 'old', '%s', 'httpd', 'FAILED'), "
                 "('bob', 'errwith', 'svc', '%s', 'sleep', 'RUNNING'), "
                 "('x', 'y', 'done', NULL, 'true', 'STOPPED'), "
                 "('x', 'y', 'starting', NULL, 'true', 'STARTING')",
                 live, gone, with);
        sql(&cfg, text);

        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_ERROR_SESSIONS, 1, 0);
        cr_assert(has_item(&rep, GC_ERROR_SESSIONS, "bob:errgone"));
        expect_kind(&rep, GC_PORTS, 3 + 2 + 2, 0); /* errgone's block, dave's, erin's */
        expect_kind(&rep, GC_SERVICES, 3, 0);
        cr_assert(has_item(&rep, GC_SERVICES, "old"));
        cr_assert(has_item(&rep, GC_SERVICES, "svc"));
        cr_assert(has_item(&rep, GC_SERVICES, "done"));
        expect_kind(&rep, GC_IDLE_CONTAINERS, 0, 0);
        expect_kind(&rep, GC_ORPHAN_CONTAINERS, 0, 0);
        expect_kind(&rep, GC_WORKSPACES, 0, 0);
        cr_assert_eq(rep.total.failed, 0);
        gc_report_done(&rep);

        st = open_store(&cfg);
        cr_assert_eq(store_session_get(st, "bob", "errgone", &row), -ENOENT);
        cr_assert_eq(store_session_get(st, "bob", "errfresh", &row), 0);
        cr_assert_eq(store_session_get(st, "bob", "errwith", &row), 0);
        cr_assert_str_eq(row.container_id, with);
        cr_assert_eq(store_session_get(st, "erin", "stopped", &row), 0, "a STOPPED session's row is not garbage");
        /* The workspace stays (gc.workspace_retention keeps it forever), so the
         * privacy marks stay with it. */
        cr_assert_eq(store_private_any(st, "bob", "errgone", &marked), 0);
        cr_assert(marked, "the private marks of a kept workspace were dropped");
        ws_path(&cfg, "bob", "errgone", NULL, ws, sizeof(ws));
        cr_assert(path_exists(ws));
        cr_assert_eq(store_ports_list(st, &ports, &n_ports), 0);
        cr_assert_eq(n_ports, 9);
        for (size_t i = 0; i < n_ports; i++)
                cr_assert(strcmp(ports[i].session_id, "live") == 0 || strcmp(ports[i].session_id, "errfresh") == 0 ||
                                  strcmp(ports[i].session_id, "errwith") == 0,
                          "port %d of %s:%s kept", ports[i].port, ports[i].user_id, ports[i].session_id);
        free(ports);
        store_close(st);
        cr_assert(container_exists(with), "an ERROR session's container was removed though it is not idle");
        cr_assert(container_running(live));
        cr_assert_eq(sql_count(&cfg, "SELECT COUNT(*) FROM services"), 2);
        cr_assert_eq(sql_count(&cfg, "SELECT COUNT(*) FROM services WHERE name IN ('web', 'starting')"), 2);
}

Test(gc, execution_spools_past_retention)
{
        struct sbx_config cfg;
        struct store *st;
        struct store_execution ex;
        struct gc_report rep;
        char old1[37], old2[37], recent[37], running[37], orphan_old[37], orphan_new[37], p[700];
        int64_t now;

        gc_config(&cfg);
        mkdirs(cfg.data_dir);
        snprintf(p, sizeof(p), "%s/executions", cfg.data_dir);
        cr_assert_eq(mkdir(p, 0700), 0);
        st = open_store(&cfg);
        now = sbx_wall_ms();
        put_exec(&cfg, st, "alice", "s1", "COMPLETED", now - 8 * DAY_MS, 100, 50, old1); /* retention is 7 d */
        put_exec(&cfg, st, "alice", "s1", "FAILED", now - 8 * DAY_MS, 10, -1, old2);
        put_exec(&cfg, st, "alice", "s1", "COMPLETED", now - HOUR_MS, 20, 20, recent);
        put_exec(&cfg, st, "alice", "s1", "RUNNING", 0, 30, 0, running);
        store_close(st);
        cr_assert_eq(sbx_uuid(orphan_old), 0);
        cr_assert_eq(sbx_uuid(orphan_new), 0);
        spool_path(&cfg, orphan_old, "stdout", p, sizeof(p));
        write_file(p, 7);
        set_mtime(p, now - 8 * DAY_MS);
        spool_path(&cfg, orphan_new, "stderr", p, sizeof(p));
        write_file(p, 9);
        snprintf(p, sizeof(p), "%s/executions/notes.txt", cfg.data_dir);
        write_file(p, 5);
        set_mtime(p, now - 8 * DAY_MS);

        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_SPOOLS, 3, 0);
        cr_assert_eq(rep.kinds[GC_SPOOLS].bytes, 100 + 50 + 10 + 7);
        cr_assert(has_item(&rep, GC_SPOOLS, old1));
        cr_assert(has_item(&rep, GC_SPOOLS, old2));
        gc_report_done(&rep);

        spool_path(&cfg, old1, "stdout", p, sizeof(p));
        cr_assert(!path_exists(p));
        spool_path(&cfg, old1, "stderr", p, sizeof(p));
        cr_assert(!path_exists(p));
        spool_path(&cfg, old2, "stdout", p, sizeof(p));
        cr_assert(!path_exists(p));
        spool_path(&cfg, orphan_old, "stdout", p, sizeof(p));
        cr_assert(!path_exists(p));
        spool_path(&cfg, recent, "stdout", p, sizeof(p));
        cr_assert(path_exists(p), "a recent spool was deleted");
        spool_path(&cfg, running, "stdout", p, sizeof(p));
        cr_assert(path_exists(p), "a running execution's spool was deleted");
        spool_path(&cfg, orphan_new, "stderr", p, sizeof(p));
        cr_assert(path_exists(p), "a recent spool file was deleted");
        snprintf(p, sizeof(p), "%s/executions/notes.txt", cfg.data_dir);
        cr_assert(path_exists(p), "a file that is no spool was deleted");

        st = open_store(&cfg);
        cr_assert_eq(store_exec_get(st, old1, &ex), 0, "the execution row is history and stays");
        cr_assert_str_eq(ex.spool_path, "");
        cr_assert_eq(ex.stdout_bytes, 100, "the byte counts stay");
        cr_assert_eq(store_exec_get(st, recent, &ex), 0);
        cr_assert_str_neq(ex.spool_path, "");
        store_close(st);

        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_SPOOLS, 0, 0);
        gc_report_done(&rep);
}

Test(gc, audit_rows_past_retention)
{
        struct sbx_config cfg;
        struct store *st;
        struct gc_report rep;
        char q[512];
        int64_t now;

        gc_config(&cfg);
        cfg.audit_retention_s = 30 * 86400;
        mkdirs(cfg.data_dir);
        st = open_store(&cfg);
        cr_assert_eq(store_audit(st, "test", "alice", "s1", "recent", NULL), 0);
        store_close(st);
        now = sbx_wall_ms();
        for (int i = 0; i < 3; i++) {
                snprintf(q, sizeof(q),
                         "INSERT INTO audit_log (ts, actor, action) VALUES (%lld, 'peer:uid=65534', 'auth.fail')",
                         (long long)(now - 31 * DAY_MS - i));
                sql(&cfg, q);
        }
        snprintf(q, sizeof(q), "INSERT INTO audit_log (ts, actor, action) VALUES (%lld, 'test', 'young')",
                 (long long)(now - 29 * DAY_MS));
        sql(&cfg, q);

        run_gc(&cfg, true, &rep);
        expect_kind(&rep, GC_AUDIT, 3, 0);
        gc_report_done(&rep);
        cr_assert_eq(sql_count(&cfg, "SELECT COUNT(*) FROM audit_log WHERE action = 'auth.fail'"), 3,
                     "a dry run deleted audit rows");

        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_AUDIT, 3, 0);
        cr_assert(has_item(&rep, GC_AUDIT, "audit_log"));
        gc_report_done(&rep);
        cr_assert_eq(sql_count(&cfg, "SELECT COUNT(*) FROM audit_log WHERE action = 'auth.fail'"), 0);
        cr_assert_eq(sql_count(&cfg, "SELECT COUNT(*) FROM audit_log WHERE action IN ('recent', 'young')"), 2,
                     "rows within audit_retention were deleted");

        /* -1 keeps them forever */
        cfg.audit_retention_s = -1;
        sql(&cfg, "INSERT INTO audit_log (ts, actor, action) VALUES (1, 'test', 'ancient')");
        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_AUDIT, 0, 0);
        gc_report_done(&rep);
        cr_assert_eq(sql_count(&cfg, "SELECT COUNT(*) FROM audit_log WHERE action = 'ancient'"), 1);
}

Test(gc, workspaces_of_dead_sessions_past_retention)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct store *st;
        struct store_session row;
        struct gc_report rep;
        char frank[65], hank[65], jack[65], p[700], outside[700], target[700];
        _cleanup_free_ char *tmp = testenv_tmpdir();
        bool inserted = false, marked = true;
        uint64_t frank_bytes;
        int64_t now;

        gc_config(&cfg);
        d = fixture_open(&cfg, false);
        make_session(d, "frank", "stopped", frank);
        make_session(d, "hank", "alive", hank);
        make_session(d, "jack", "recent", jack);
        daemon_close(d);
        cr_assert_eq(container_remove(testenv_engine(), frank, NULL), 0);
        cr_assert_eq(container_remove(testenv_engine(), jack, NULL), 0);

        st = open_store(&cfg);
        now = sbx_wall_ms();
        row_set(st, "frank", "stopped", "STOPPED", "", now - 3 * DAY_MS, now - 3 * DAY_MS);
        row_set(st, "hank", "alive", NULL, NULL, now - 3 * DAY_MS, now - 30 * MIN_MS); /* RUNNING */
        row_set(st, "jack", "recent", "STOPPED", "", now - 10000, now - 10000);
        cr_assert_eq(store_private_add(st, "erin", "destroyed", "payroll", "test", now, &inserted), 0);
        store_close(st);

        /* frank's workspace: files, a subdirectory and a symlink out of it */
        snprintf(outside, sizeof(outside), "%s/outside.txt", tmp);
        write_file(outside, 5);
        ws_path(&cfg, "frank", "stopped", "data.bin", p, sizeof(p));
        write_file(p, 4096);
        ws_path(&cfg, "frank", "stopped", "sub", p, sizeof(p));
        cr_assert_eq(mkdir(p, 0700), 0);
        ws_path(&cfg, "frank", "stopped", "sub/f", p, sizeof(p));
        write_file(p, 100);
        ws_path(&cfg, "frank", "stopped", "escape", p, sizeof(p));
        snprintf(target, sizeof(target), "%s", outside);
        cr_assert_eq(symlink(target, p), 0);
        frank_bytes = 4096 + 100 + strlen(target);
        ws_path(&cfg, "hank", "alive", "keep.txt", p, sizeof(p));
        write_file(p, 3);
        ws_path(&cfg, "jack", "recent", "keep.txt", p, sizeof(p));
        write_file(p, 3);
        /* erin's session was destroyed long ago; its workspace stayed */
        ws_path(&cfg, "erin", "destroyed", NULL, p, sizeof(p));
        mkdirs(p);
        ws_path(&cfg, "erin", "destroyed", "old.txt", p, sizeof(p));
        write_file(p, 1000);
        ws_path(&cfg, "erin", "destroyed", NULL, p, sizeof(p));
        set_mtime(p, now - 3 * DAY_MS);
        /* a workspace an interrupted gc left in its trash */
        snprintf(p, sizeof(p), "%s/gc-trash/run-1-1/workspaces/kim/lost", cfg.data_dir);
        mkdirs(p);
        snprintf(p, sizeof(p), "%s/gc-trash/run-1-1/workspaces/kim/lost/f", cfg.data_dir);
        write_file(p, 11);

        /* The default keeps workspaces forever (but finishes the trash). */
        cr_assert_eq(cfg.workspace_retention_s, -1);
        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_WORKSPACES, 1, 0);
        cr_assert(has_item(&rep, GC_WORKSPACES, "kim/lost"));
        cr_assert_eq(rep.kinds[GC_WORKSPACES].bytes, 11);
        gc_report_done(&rep);
        ws_path(&cfg, "frank", "stopped", "data.bin", p, sizeof(p));
        cr_assert(path_exists(p));

        cfg.workspace_retention_s = 60;
        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_WORKSPACES, 2, 0);
        cr_assert(has_item(&rep, GC_WORKSPACES, "frank/stopped"));
        cr_assert(has_item(&rep, GC_WORKSPACES, "erin/destroyed"));
        cr_assert_eq(rep.kinds[GC_WORKSPACES].bytes, frank_bytes + 1000);
        cr_assert_eq(rep.total.failed, 0);
        gc_report_done(&rep);

        ws_path(&cfg, "frank", "stopped", NULL, p, sizeof(p));
        cr_assert(!path_exists(p));
        ws_path(&cfg, "erin", "destroyed", NULL, p, sizeof(p));
        cr_assert(!path_exists(p));
        cr_assert(path_exists(outside), "the symlink's target outside the workspace was deleted");
        ws_path(&cfg, "hank", "alive", "keep.txt", p, sizeof(p));
        cr_assert(path_exists(p), "a live session's workspace was touched");
        cr_assert(container_running(hank));
        ws_path(&cfg, "jack", "recent", "keep.txt", p, sizeof(p));
        cr_assert(path_exists(p), "a workspace inside its retention was deleted");
        snprintf(p, sizeof(p), "%s/gc-trash", cfg.data_dir);
        cr_assert(!path_exists(p), "gc left its trash behind");

        st = open_store(&cfg);
        cr_assert_eq(store_session_get(st, "frank", "stopped", &row), 0, "the session row stays");
        cr_assert_eq(store_private_any(st, "erin", "destroyed", &marked), 0);
        cr_assert(!marked, "the marks of a destroyed session outlived its workspace");
        store_close(st);
}

/* ---- dry run ---- */

static FILE *listing;
static size_t data_prefix;

static int list_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        /* Directory times move when sqlite creates and drops its -wal/-shm
         * files beside the database; what a directory holds is listed. */
        if (S_ISDIR(st->st_mode))
                fprintf(listing, "d %s %o\n", path + data_prefix, st->st_mode & 07777);
        else
                fprintf(listing, "%c %s %o %lld %lld.%09ld\n", S_ISLNK(st->st_mode) ? 'l' : 'f', path + data_prefix,
                        st->st_mode & 07777, (long long)st->st_size, (long long)st->st_mtim.tv_sec,
                        st->st_mtim.tv_nsec);
        return 0;
}

static char *disk_snapshot(const char *dir)
{
        char *buf = NULL;
        size_t len = 0;

        listing = open_memstream(&buf, &len);
        data_prefix = strlen(dir);
        cr_assert_eq(nftw(dir, list_one, 16, FTW_PHYS), 0);
        fclose(listing);
        return buf; /* nftw walks in directory order, stable for an unchanged tree */
}

/* This instance's containers plus the given foreign ones (other test
 * binaries of the run may be creating containers meanwhile). */
static char *docker_snapshot(const struct sbx_config *cfg, const char *const *extra)
{
        char filter[128];
        const char *filters[] = {filter, NULL};
        struct docker_container_summary *list = NULL;
        struct docker_container_info info;
        char *buf = NULL;
        size_t n = 0, len = 0;
        FILE *f;

        snprintf(filter, sizeof(filter), CONTAINER_LABEL_INSTANCE "=%s", cfg->instance);
        cr_assert_eq(docker_container_list(testenv_docker(), filters, true, &list, &n, NULL), 0);
        f = open_memstream(&buf, &len);
        for (size_t i = 0; i < n; i++)
                fprintf(f, "%s %s\n", list[i].id, list[i].state);
        for (size_t i = 0; extra && extra[i]; i++)
                if (docker_container_inspect(testenv_docker(), extra[i], &info, NULL) == 0)
                        fprintf(f, "%s %s\n", info.id, info.status);
        fclose(f);
        free(list);
        return buf;
}

static char *store_snapshot(const struct sbx_config *cfg)
{
        struct store *st = open_store(cfg);
        struct store_gc_stats s;
        struct store_session *rows = NULL;
        struct store_port *ports = NULL;
        size_t n = 0, n_ports = 0;
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        cr_assert_eq(store_gc_stats(st, &s), 0);
        fprintf(f,
                "sessions %lld ports %lld services %lld executions %lld spools %lld private %lld containers %lld "
                "audit %lld pages %lld free %lld\n",
                (long long)s.sessions, (long long)s.ports, (long long)s.services, (long long)s.executions,
                (long long)s.spools, (long long)s.private_datasets, (long long)s.containers, (long long)s.audit,
                (long long)s.page_count, (long long)s.freelist_count);
        cr_assert_eq(store_session_list(st, NULL, NULL, &rows, &n), 0);
        for (size_t i = 0; i < n; i++)
                fprintf(f, "%s:%s %s %s %s %lld %lld\n", rows[i].user_id, rows[i].session_id, rows[i].state,
                        rows[i].container_id, rows[i].error_cause, (long long)rows[i].updated_at,
                        (long long)rows[i].last_activity);
        cr_assert_eq(store_ports_list(st, &ports, &n_ports), 0);
        for (size_t i = 0; i < n_ports; i++)
                fprintf(f, "port %d %s:%s %s\n", ports[i].port, ports[i].user_id, ports[i].session_id,
                        ports[i].container_id);
        fclose(f);
        free(rows);
        free(ports);
        store_close(st);
        return buf;
}

Test(gc, dry_run_changes_nothing_and_reports_what_a_real_run_does)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct store *st;
        struct gc_report dry, real;
        char idle[65], gone[65], live[65], ghost[65], nolabel[65], inst[128], p[700], ex[37];
        _cleanup_free_ char *disk0 = NULL, *docker0 = NULL, *store0 = NULL;
        _cleanup_free_ char *disk1 = NULL, *docker1 = NULL, *store1 = NULL;
        int64_t now;

        gc_config(&cfg);
        cfg.workspace_retention_s = 60;
        d = fixture_open(&cfg, false);
        make_session(d, "alice", "idle", idle);
        make_session(d, "bob", "errgone", gone);
        make_session(d, "carl", "live", live);
        daemon_close(d);
        cr_assert_eq(container_remove(testenv_engine(), gone, NULL), 0);
        st = open_store(&cfg);
        now = sbx_wall_ms();
        row_set(st, "alice", "idle", NULL, NULL, 0, now - 2 * HOUR_MS);
        row_set(st, "bob", "errgone", "ERROR", NULL, now - 2 * HOUR_MS, now - 2 * HOUR_MS);
        cr_assert_eq(store_ports_reserve(st, (const int[]){26990}, 1, "dave", "gone", now), 0);
        snprintf(p, sizeof(p), "%s/executions", cfg.data_dir);
        put_exec(&cfg, st, "alice", "s1", "COMPLETED", now - 8 * DAY_MS, 64, 0, ex);
        store_close(st);
        sql(&cfg,
            "INSERT INTO services (user_id, session_id, name, container_id, command, state) "
            "VALUES ('x', 'y', 'done', NULL, 'true', 'STOPPED')");
        ws_path(&cfg, "erin", "destroyed", NULL, p, sizeof(p));
        mkdirs(p);
        ws_path(&cfg, "erin", "destroyed", "f", p, sizeof(p));
        write_file(p, 500);
        ws_path(&cfg, "erin", "destroyed", NULL, p, sizeof(p));
        set_mtime(p, now - 3 * DAY_MS);
        snprintf(inst, sizeof(inst), CONTAINER_LABEL_INSTANCE "=%s", cfg.instance);
        raw_container((const char *const[]){CONTAINER_LABEL_MANAGED "=1", inst, CONTAINER_LABEL_USER "=carol",
                                            CONTAINER_LABEL_SESSION "=ghost", NULL},
                      ghost);
        raw_container(NULL, nolabel);

        disk0 = disk_snapshot(cfg.data_dir);
        docker0 = docker_snapshot(&cfg, (const char *const[]){nolabel, NULL});
        store0 = store_snapshot(&cfg);
        free(disk_snapshot(cfg.data_dir)); /* the store snapshot itself leaves no trace */
        {
                _cleanup_free_ char *again = disk_snapshot(cfg.data_dir);
                cr_assert_str_eq(again, disk0, "opening the store changed the disk: the comparison means nothing");
        }

        run_gc(&cfg, true, &dry);
        cr_assert(dry.dry_run);
        expect_kind(&dry, GC_IDLE_CONTAINERS, 1, 0);
        expect_kind(&dry, GC_ORPHAN_CONTAINERS, 1, 0);
        expect_kind(&dry, GC_ERROR_SESSIONS, 1, 0);
        expect_kind(&dry, GC_PORTS, 3 + 3 + 1, 0); /* alice:idle's block (stopped), bob's (deleted), dave's */
        expect_kind(&dry, GC_SERVICES, 1, 0);
        expect_kind(&dry, GC_SPOOLS, 1, 0);
        expect_kind(&dry, GC_WORKSPACES, 2, 0); /* erin's, and bob's: ERROR for 2 h > 60 s */
        cr_assert(has_item(&dry, GC_WORKSPACES, "erin/destroyed"));
        cr_assert(has_item(&dry, GC_WORKSPACES, "bob/errgone"));

        disk1 = disk_snapshot(cfg.data_dir);
        docker1 = docker_snapshot(&cfg, (const char *const[]){nolabel, NULL});
        store1 = store_snapshot(&cfg);
        cr_assert_str_eq(docker1, docker0, "a dry run changed Docker");
        cr_assert_str_eq(store1, store0, "a dry run changed the store");
        cr_assert_str_eq(disk1, disk0, "a dry run changed the disk");

        run_gc(&cfg, false, &real);
        cr_assert(!real.dry_run);
        for (size_t k = 0; k < GC_KIND_COUNT; k++) {
                cr_assert_eq(real.kinds[k].count, dry.kinds[k].count, "%s: real %llu, dry %llu", gc_kind_name(k),
                             (unsigned long long)real.kinds[k].count, (unsigned long long)dry.kinds[k].count);
                if (k != GC_STORE)
                        cr_assert_eq(real.kinds[k].bytes, dry.kinds[k].bytes, "%s bytes", gc_kind_name(k));
        }
        cr_assert_eq(real.total.failed, 0);
        for (size_t i = 0; i < dry.n_items; i++)
                cr_assert(has_item(&real, dry.items[i].kind, dry.items[i].id), "dry run named %s %s, real did not",
                          gc_kind_name(dry.items[i].kind), dry.items[i].id);
        gc_report_done(&dry);
        gc_report_done(&real);
        cr_assert(!container_exists(ghost) && !container_exists(idle));
        cr_assert(container_running(nolabel) && container_running(live));
}

/* ---- beside a serving daemon ---- */

struct loop {
        struct daemon *d;
        volatile bool stop;
        int ok, failed; /* atomic: the test waits on them */
        char first_id[65];
        bool id_changed;
        char error[512];
};

static int loop_ok(struct loop *l)
{
        return __atomic_load_n(&l->ok, __ATOMIC_RELAXED);
}
static int loop_failed(struct loop *l)
{
        return __atomic_load_n(&l->failed, __ATOMIC_RELAXED);
}

static void *exec_loop(void *p)
{
        struct loop *l = p;
        const char *cmd[] = {"sh", "-c", "echo tick >> /workspace/ticks && cat /workspace/marker", NULL};
        struct docker_exec_spec spec = {.cmd = cmd};

        while (!l->stop) {
                struct session *s = NULL;
                struct sbx_error err = {0};
                struct docker_exec_result res = {0};
                char id[65];

                if (session_acquire(l->d->sessions, "alice", "busy", &s, &err) < 0) {
                        __atomic_add_fetch(&l->failed, 1, __ATOMIC_RELAXED);
                        snprintf(l->error, sizeof(l->error), "session_acquire: %s", err.msg);
                        continue;
                }
                session_container_id(s, id);
                if (!l->first_id[0])
                        memcpy(l->first_id, id, 65);
                else if (strcmp(id, l->first_id) != 0)
                        l->id_changed = true;
                if (docker_exec_run(testenv_docker(), id, &spec, NULL, 0, 4096, 30000, &res, &err) == 0 &&
                    res.exit_code == 0 && res.out && strcmp(res.out, "hello\n") == 0)
                        __atomic_add_fetch(&l->ok, 1, __ATOMIC_RELAXED);
                else {
                        __atomic_add_fetch(&l->failed, 1, __ATOMIC_RELAXED);
                        snprintf(l->error, sizeof(l->error), "exec: %s (exit %d, out %s)", err.msg, res.exit_code,
                                 res.out ? res.out : "");
                }
                docker_exec_result_done(&res);
                session_release(s);
                sbx_sleep_ms(20); /* not a wait: paces the load */
        }
        return NULL;
}

Test(gc, gc_beside_a_serving_daemon_breaks_no_session)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct gc_report rep;
        struct loop l = {0};
        pthread_t t;
        char busy[65], carl[65], again[65];
        _cleanup_free_ char *out = NULL;
        int before;

        gc_config(&cfg);
        d = fixture_open(&cfg, true);
        make_session(d, "alice", "busy", busy);
        cr_assert_eq(fixture_sh(busy, "echo hello > /workspace/marker", NULL), 0);
        make_session(d, "carl", "away", carl);
        cr_assert_eq(fixture_sh(carl, "echo kept > /workspace/note", NULL), 0);
        /* The store says carl has been away for 2 h (as it would after a long
         * pause); the daemon's memory says otherwise. gc goes by the store. */
        row_set(d->store, "carl", "away", NULL, NULL, 0, sbx_wall_ms() - 2 * HOUR_MS);

        l.d = d;
        cr_assert_eq(pthread_create(&t, NULL, exec_loop, &l), 0);
        cr_assert(TESTENV_WAIT_UNTIL(loop_ok(&l) + loop_failed(&l) >= 3, 60000), "the exec loop never got going");
        before = loop_ok(&l);
        run_gc(&cfg, false, &rep);
        cr_assert(TESTENV_WAIT_UNTIL(loop_ok(&l) >= before + 5 || loop_failed(&l) != 0, 60000),
                  "the exec loop stalled after gc");
        l.stop = true;
        pthread_join(t, NULL);

        cr_assert_eq(l.failed, 0, "the active session broke while gc ran: %s", l.error);
        cr_assert(!l.id_changed, "the active session's container was recreated");
        cr_assert_str_eq(l.first_id, busy);
        expect_kind(&rep, GC_IDLE_CONTAINERS, 1, 0);
        cr_assert(has_item(&rep, GC_IDLE_CONTAINERS, carl));
        expect_kind(&rep, GC_ORPHAN_CONTAINERS, 0, 0);
        expect_kind(&rep, GC_OLD_CONTAINERS, 0, 0);
        expect_kind(&rep, GC_ERROR_SESSIONS, 0, 0);
        expect_kind(&rep, GC_WORKSPACES, 0, 0);
        cr_assert_eq(rep.total.failed, 0, "an item failed beside the daemon");
        gc_report_done(&rep);

        /* The active session: same container, still working. */
        make_session(d, "alice", "busy", again);
        cr_assert_str_eq(again, busy);
        cr_assert_eq(fixture_sh(again, "cat /workspace/marker", &out), 0);
        cr_assert_str_eq(out, "hello\n");
        free(out);
        out = NULL;

        /* The session gc stopped under the daemon: its next request recreates
         * the container on the same workspace. */
        cr_assert(!container_exists(carl));
        make_session(d, "carl", "away", again);
        cr_assert_str_neq(again, carl);
        cr_assert(container_running(again));
        cr_assert_eq(fixture_sh(again, "cat /workspace/note", &out), 0);
        cr_assert_str_eq(out, "kept\n");
        daemon_close(d);
}

/* Issue 24: the daemon stamped idempotency keys and MCP tasks with
 * CLOCK_MONOTONIC (the host's uptime) while gc judges them by the wall
 * clock, so gc beside a daemon deleted every live key, and a retry ran its
 * command a second time, and every live task. */
static const cJSON *api_ok(const cJSON *reply)
{
        const cJSON *res = apic_result(reply);
        char *text = res ? NULL : cJSON_PrintUnformatted(reply);
        cr_assert_not_null(res, "%s", text);
        return res;
}

Test(gc, live_idempotency_keys_and_tasks_survive_gc_beside_the_daemon)
{
        static const char exec_params[] =
                "{\"session\": \"s\", \"command\": \"echo once >> /workspace/runs\", \"idempotency_key\": \"k-1\"}";
        struct sbx_config cfg;
        struct sbx_error err = {0};
        struct daemon *d;
        struct gc_report rep;
        char tok[TOKEN_LEN + 1], id[64], task[80], params[256], cid[65];
        _cleanup_free_ char *out = NULL;
        cJSON *r;

        gc_config(&cfg);
        d = fixture_open_sockets(&cfg);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
        r = apic_call(cfg.api_socket, tok, "exec", apic_json(exec_params));
        snprintf(id, sizeof(id), "%s", apic_str(api_ok(r), "execution_id"));
        cJSON_Delete(r);
        snprintf(params, sizeof(params), "{\"session\": \"s\", \"execution_id\": \"%s\", \"tool\": \"exec\"}", id);
        r = apic_call(cfg.api_socket, tok, "create_task", apic_json(params));
        snprintf(task, sizeof(task), "%s", apic_str(api_ok(r), "task_id"));
        cJSON_Delete(r);

        run_gc(&cfg, false, &rep);
        expect_kind(&rep, GC_IDEMPOTENCY_KEYS, 0, 0);
        gc_report_done(&rep);

        /* the retry answers from the first call; the command ran once */
        r = apic_call(cfg.api_socket, tok, "exec", apic_json(exec_params));
        cr_assert_str_eq(apic_str(api_ok(r), "execution_id"), id, "the key was gone: the retry ran again");
        cJSON_Delete(r);
        fixture_container_of(d, "alice", "s", cid);
        cr_assert_eq(fixture_sh(cid, "cat /workspace/runs", &out), 0);
        cr_assert_str_eq(out, "once\n");
        snprintf(params, sizeof(params), "{\"session\": \"s\", \"task_id\": \"%s\"}", task);
        r = apic_call(cfg.api_socket, tok, "get_task", apic_json(params));
        cr_assert_str_eq(apic_str(api_ok(r), "task_id"), task, "the live task was deleted");
        cJSON_Delete(r);
        daemon_close(d);
}

/* ---- the binary ---- */

static int run_binary(const struct sbx_config *cfg, const char *args, char **ret_out)
{
        char cmd[2048], buf[65536];
        size_t n;
        FILE *p;
        int status;

        snprintf(cmd, sizeof(cmd),
                 "SANDBOXD_DATA_DIR='%s' SANDBOXD_INSTANCE='%s' SANDBOXD_DOCKER_SOCKET='%s' SANDBOXD_IMAGE='%s' "
                 "SANDBOXD_LOG_LEVEL=error '%s/sandboxd' %s 2>/dev/null",
                 cfg->data_dir, cfg->instance, cfg->docker_socket, cfg->image, SANDBOXD_BINARY_DIR, args);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        n = fread(buf, 1, sizeof(buf) - 1, p);
        buf[n] = '\0';
        status = pclose(p);
        cr_assert(WIFEXITED(status), "sandboxd %s did not exit", args);
        if (ret_out)
                *ret_out = strdup(buf);
        return WEXITSTATUS(status);
}

static double json_num(cJSON *o, const char *kind, const char *field)
{
        cJSON *k = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "kinds"), kind);
        cJSON *v = cJSON_GetObjectItem(k ? k : cJSON_GetObjectItem(o, kind), field);
        cr_assert(cJSON_IsNumber(v), "no %s.%s in the report", kind, field);
        return v->valuedouble;
}

Test(gc, the_binary_reports_json_and_exits_non_zero_when_an_item_fails)
{
        struct sbx_config cfg;
        struct daemon *d;
        struct store *st;
        char idle[65], ghost[65], inst[128], bad[37], good[37], p[700];
        _cleanup_free_ char *out = NULL;
        cJSON *o, *items, *it;
        bool saw_failed = false;
        int64_t now;

        gc_config(&cfg);
        d = fixture_open(&cfg, false);
        make_session(d, "alice", "idle", idle);
        daemon_close(d);
        st = open_store(&cfg);
        now = sbx_wall_ms();
        row_set(st, "alice", "idle", NULL, NULL, 0, now - 2 * HOUR_MS); /* the default idle_timeout is 30 min */
        /* Two old spools; the first cannot be deleted (its "file" is a non-empty
         * directory), the second can: gc logs the first and goes on. */
        put_exec(&cfg, st, "alice", "s1", "COMPLETED", now - 9 * DAY_MS, -1, -1, bad);
        put_exec(&cfg, st, "alice", "s1", "COMPLETED", now - 8 * DAY_MS, 42, -1, good);
        store_close(st);
        spool_path(&cfg, bad, "stdout", p, sizeof(p));
        mkdirs(p);
        snprintf(p + strlen(p), sizeof(p) - strlen(p), "/x");
        write_file(p, 1);
        snprintf(inst, sizeof(inst), CONTAINER_LABEL_INSTANCE "=%s", cfg.instance);
        raw_container((const char *const[]){CONTAINER_LABEL_MANAGED "=1", inst, CONTAINER_LABEL_USER "=carol",
                                            CONTAINER_LABEL_SESSION "=ghost", NULL},
                      ghost);

        cr_assert_eq(run_binary(&cfg, "--dry-run", NULL), 2, "--dry-run without --gc is a usage error");

        cr_assert_eq(run_binary(&cfg, "--gc --dry-run --json", &out), 0);
        o = cJSON_Parse(out);
        cr_assert_not_null(o, "not JSON: %s", out);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "dry_run")));
        cr_assert_eq(json_num(o, "idle_containers", "count"), 1);
        cr_assert_eq(json_num(o, "orphan_containers", "count"), 1);
        cr_assert_eq(json_num(o, "execution_spools", "count"), 2);
        cr_assert_eq(json_num(o, "total", "failed"), 0);
        cJSON_Delete(o);
        free(out);
        cr_assert(container_running(idle) && container_running(ghost), "the dry run removed a container");

        cr_assert_eq(run_binary(&cfg, "--gc --json", &out), 1, "a failed item must fail the exit status");
        o = cJSON_Parse(out);
        cr_assert_not_null(o, "not JSON: %s", out);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(o, "dry_run")));
        cr_assert_str_eq(cJSON_GetObjectItem(o, "instance")->valuestring, cfg.instance);
        cr_assert_eq(json_num(o, "idle_containers", "count"), 1);
        cr_assert_eq(json_num(o, "orphan_containers", "count"), 1);
        cr_assert_eq(json_num(o, "execution_spools", "count"), 1);
        cr_assert_eq(json_num(o, "execution_spools", "bytes"), 42);
        cr_assert_eq(json_num(o, "execution_spools", "failed"), 1);
        cr_assert_eq(json_num(o, "total", "failed"), 1);
        items = cJSON_GetObjectItem(o, "items");
        cJSON_ArrayForEach(it, items) {
                if (!cJSON_IsTrue(cJSON_GetObjectItem(it, "failed")))
                        continue;
                saw_failed = true;
                cr_assert_str_eq(cJSON_GetObjectItem(it, "id")->valuestring, bad);
                cr_assert_not_null(strstr(cJSON_GetObjectItem(it, "error")->valuestring, "unlink"));
        }
        cr_assert(saw_failed);
        cJSON_Delete(o);
        free(out);
        cr_assert(!container_exists(idle) && !container_exists(ghost));
        spool_path(&cfg, good, "stdout", p, sizeof(p));
        cr_assert(!path_exists(p), "gc stopped at the failed item");

        /* The table, still failing on the same item. */
        cr_assert_eq(run_binary(&cfg, "--gc", &out), 1);
        cr_assert_not_null(strstr(out, "KIND"), "%s", out);
        cr_assert_not_null(strstr(out, "execution_spools"), "%s", out);
        cr_assert_not_null(strstr(out, "failed:"), "%s", out);
        free(out);
        out = NULL;

        /* Fixed, it succeeds. */
        spool_path(&cfg, bad, "stdout", p, sizeof(p));
        {
                char cmd[800];
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p);
                cr_assert_eq(system(cmd), 0);
        }
        cr_assert_eq(run_binary(&cfg, "--gc", &out), 0, "%s", out);
}

/* ---- coordination ---- */

/* Each change gc makes re-checks, in one statement, what it decided on: a
 * daemon that touched the row in between wins. */
Test(gc, the_daemon_wins_every_race_in_the_store)
{
        struct sbx_config cfg;
        struct store *st;
        struct store_session row;
        int64_t now;

        gc_config(&cfg);
        mkdirs(cfg.data_dir);
        st = open_store(&cfg);
        now = sbx_wall_ms();
        row_new(st, "alice", "s", "RUNNING", now - 2 * HOUR_MS);
        row_set(st, "alice", "s", NULL, "c1", 0, 0);

        /* gc saw it idle; a request came in since */
        cr_assert_eq(store_session_touch(st, "alice", "s", now), 0);
        cr_assert_eq(store_gc_session_take_container(st, "alice", "s", "c1", now - HOUR_MS, false, "gc_idle", now),
                     -ESTALE);
        /* the daemon replaced the container */
        cr_assert_eq(store_gc_session_take_container(st, "alice", "s", "c0", now + 1, false, "gc_idle", now), -ESTALE);
        /* an execution is running (GC_MAX_AGE_S wants the session quiet) */
        {
                char ex[37];
                put_exec(&cfg, st, "alice", "s", "RUNNING", 0, -1, -1, ex);
        }
        cr_assert_eq(store_gc_session_take_container(st, "alice", "s", "c1", now + 1, true, "gc_max_age", now),
                     -ESTALE);
        cr_assert_eq(store_session_get(st, "alice", "s", &row), 0);
        cr_assert_str_eq(row.state, "RUNNING");
        cr_assert_str_eq(row.container_id, "c1");
        /* and when nothing moved, it goes */
        cr_assert_eq(store_gc_session_take_container(st, "alice", "s", "c1", now + 1, false, "gc_idle", now + 5), 0);
        cr_assert_eq(store_session_get(st, "alice", "s", &row), 0);
        cr_assert_str_eq(row.state, "STOPPED");
        cr_assert_str_eq(row.error_cause, "gc_idle");
        cr_assert_str_eq(row.container_id, "");
        cr_assert_eq(row.updated_at, now + 5);

        /* an ERROR row the daemon retried since gc looked */
        row_new(st, "bob", "e", "ERROR", now - 2 * HOUR_MS);
        cr_assert_eq(store_gc_session_forget(st, "bob", "e", "", now - 3 * HOUR_MS), -ESTALE);
        cr_assert_eq(store_session_get(st, "bob", "e", &row), 0);
        cr_assert_eq(store_gc_session_forget(st, "bob", "e", "", now - 2 * HOUR_MS), 0);
        cr_assert_eq(store_session_get(st, "bob", "e", &row), -ENOENT);

        /* ports of a session that became CREATING (the daemon reserves after writing that) */
        row_new(st, "carl", "p", "STOPPED", now - DAY_MS);
        cr_assert_eq(store_ports_reserve(st, (const int[]){26980, 26981}, 2, "carl", "p", now), 0);
        row_set(st, "carl", "p", "CREATING", NULL, now, 0);
        cr_assert_eq(store_gc_port_release(st, 26980, "carl", "p"), -ESTALE);
        row_set(st, "carl", "p", "STOPPED", NULL, now, 0);
        cr_assert_eq(store_gc_port_release(st, 26980, "carl", "p"), 0);
        cr_assert_eq(store_gc_port_release(st, 26980, "carl", "p"), -ESTALE, "released twice");
        cr_assert_eq(store_gc_port_release(st, 26981, "dave", "p"), -ESTALE, "released another session's port");
        store_close(st);

        /* a service restarted in a new container since gc looked */
        sql(&cfg,
            "INSERT INTO services (user_id, session_id, name, container_id, command, state) "
            "VALUES ('alice', 's', 'web', 'c2', 'httpd', 'RUNNING')");
        st = open_store(&cfg);
        cr_assert_eq(store_gc_service_delete(st, "alice", "s", "web", "c1", "RUNNING"), -ESTALE);
        cr_assert_eq(store_gc_service_delete(st, "alice", "s", "web", "c2", "FAILED"), -ESTALE);
        cr_assert_eq(store_gc_service_delete(st, "alice", "s", "web", "c2", "RUNNING"), 0);
        store_close(st);
}

Test(gc, one_real_run_at_a_time_and_a_dry_run_beside_it)
{
        struct sbx_config cfg;
        struct store *st;
        struct gc_options o = {0};
        struct gc_report rep = {0};
        struct sbx_error err = {0};
        char lock[700];
        int fd;

        gc_config(&cfg);
        mkdirs(cfg.data_dir);
        st = open_store(&cfg);
        store_close(st);
        snprintf(lock, sizeof(lock), "%s/gc.lock", cfg.data_dir);
        fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        cr_assert_geq(fd, 0);
        cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);

        cr_assert_eq(gc_run(&cfg, &o, &rep, &err), -EBUSY);
        cr_assert_not_null(strstr(err.msg, "another gc"), "%s", err.msg);
        o.dry_run = true;
        cr_assert_eq(gc_run(&cfg, &o, &rep, &err), 0, "%s", err.msg);
        gc_report_done(&rep);

        close(fd);
        o.dry_run = false;
        cr_assert_eq(gc_run(&cfg, &o, &rep, &err), 0, "%s", err.msg);
        gc_report_done(&rep);

        /* and without a store there is nothing to run on */
        snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s/nope", lock);
        cr_assert_eq(gc_run(&cfg, &o, &rep, &err), -ENOENT);
}

Test(gc, a_dry_run_never_migrates_the_store)
{
        struct sbx_config cfg;
        struct gc_options o = {.dry_run = true};
        struct gc_report rep = {0};
        struct sbx_error err = {0};
        char db[700];
        struct stat st;

        gc_config(&cfg);
        mkdirs(cfg.data_dir);
        snprintf(db, sizeof(db), "%s/sandboxd.db", cfg.data_dir);
        write_file(db, 0); /* as old as it gets: no migration applied */
        cr_assert_eq(gc_run(&cfg, &o, &rep, &err), -ESTALE);
        cr_assert_not_null(strstr(err.msg, "does not migrate"), "%s", err.msg);
        cr_assert_eq(stat(db, &st), 0);
        cr_assert_eq(st.st_size, 0, "the dry run wrote to the store");
        o.dry_run = false;
        cr_assert_eq(gc_run(&cfg, &o, &rep, &err), 0, "%s", err.msg); /* a real run migrates, as the daemon would */
        gc_report_done(&rep);
        o.dry_run = true;
        cr_assert_eq(gc_run(&cfg, &o, &rep, &err), 0, "%s", err.msg);
        gc_report_done(&rep);
}
