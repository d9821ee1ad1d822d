/* gc.c — the batch cleanup behind `sandboxd --gc` (what it removes and
 * never touches: gc.h).
 *
 * One pass over a snapshot: first this instance's containers (one list call,
 * labels sandboxd.managed=1 and sandboxd.instance=<instance>), then the
 * session rows. That order matters: the daemon writes a session's CREATING
 * row before it creates the container and names the container in the row
 * once it runs, so a container in the list is either named by its session's
 * row or that row still says CREATING. The snapshot is a model that every
 * decision updates (container gone, session stopped, row deleted), so later
 * kinds see what earlier ones did, and a dry run decides exactly as a real
 * run does — it only skips the changes.
 *
 * Running beside the daemon. The two share the store and Docker. The daemon
 * writes sessions.last_activity on every request and keeps state rows
 * current; gc decides from them and, right before each change, re-checks in
 * one conditional statement (store_gc_*) that the row still says what gc
 * decided on, so the daemon wins every race it can be seen to be in:
 *   - idle and old containers: the row must still name the container, with
 *     the same quiet last_activity (and, for GC_MAX_AGE_S, no execution running).
 *     The session is marked STOPPED (cause gc_idle / gc_max_age) and only
 *     then is the container removed. A request that slips in between finds
 *     its container vanished, which the daemon treats as recoverable: it
 *     recreates the container on the same workspace. A lost race costs a
 *     recreation, never the session. A recently active session's container
 *     is never removed.
 *   - orphans: the labelled session's row is re-read first; CREATING, or
 *     naming the container by now, keeps it.
 *   - ports are released only while the owner's row is not RUNNING,
 *     CREATING or ERROR, in the same statement (the daemon writes CREATING
 *     before it reserves a block).
 *   - workspaces: the row and Docker are re-checked, the directory is moved
 *     into {data_dir}/gc-trash, and both are checked again; if the session
 *     came alive meanwhile it is moved back. Only then is it deleted, by
 *     container_workspace_purge (no symlink is followed).
 * The daemon keeps its own view in memory: a session gc stopped or whose
 * ERROR row it deleted is recreated by the daemon's next request for it.
 *
 * The pieces: gc.c (the snapshot, containers, sessions, ports, services,
 * store rows, the run), gc_fs.c (the filesystem half: execution spools,
 * mounted workspace images, workspaces and the gc-trash, the session uids
 * that hang on workspaces), gc_report.c (the report's output);
 * gc_internal.h is what they share.
 *
 * Threads and locks: none; gc is one thread. {data_dir}/gc.lock (flock)
 * keeps two real runs apart; a dry run writes nothing and does not take it.
 * Failures: an item that fails is logged and counted, and gc goes on. */
#include "sandboxd/gc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/audit.h"
#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/pool.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"
#include "sandboxd/snapshot.h"
#include "sandboxd/store_events.h"

#include "gc_internal.h"

static const char *const kind_names[GC_KIND_COUNT] = {
        "idle_containers",  "old_containers", "orphan_containers", "error_sessions",   "ports",        "services",
        "execution_spools", "workspaces",     "audit_rows",        "idempotency_keys", "session_uids", "store",
        "networks",         "snapshots",      "vm_cgroups",        "vm_rootfs",
};

/* What an item is, in log lines. */
static const char *const kind_items[GC_KIND_COUNT] = {
        "idle container",  "old container", "orphan container", "ERROR session",    "port allocation", "service row",
        "execution spool", "workspace",     "audit rows",       "idempotency keys", "session uid",     "store",
        "network",         "snapshot",      "microVM cgroup",   "root file system",
};

const char *gc_kind_name(enum gc_kind k)
{
        return (unsigned)k < GC_KIND_COUNT ? kind_names[k] : "unknown";
}

/* ---- small helpers ---- */

void gc_fmt_age(int64_t ms, char *buf, size_t size)
{
        int64_t s = ms > 0 ? ms / 1000 : 0;

        if (s >= 86400)
                snprintf(buf, size, "%" PRId64 "d%" PRId64 "h", s / 86400, s % 86400 / 3600);
        else if (s >= 3600)
                snprintf(buf, size, "%" PRId64 "h%" PRId64 "m", s / 3600, s % 3600 / 60);
        else if (s >= 60)
                snprintf(buf, size, "%" PRId64 "m%" PRId64 "s", s / 60, s % 60);
        else
                snprintf(buf, size, "%" PRId64 "s", s);
}

static const char *label(const struct engine_container_summary *c, const char *key)
{
        return engine_label_get(c->labels, c->n_labels, key);
}

static int row_cmp(const void *a, const void *b)
{
        const struct store_session *x = a, *y = b;
        int c = strcmp(x->user_id, y->user_id);
        return c ? c : strcmp(x->session_id, y->session_id);
}

ssize_t gc_find_row(struct gc *g, const char *user, const char *session)
{
        struct store_session key;
        const struct store_session *hit;

        if (!user || !session || !sbx_strlcpy(key.user_id, user, sizeof(key.user_id)) ||
            !sbx_strlcpy(key.session_id, session, sizeof(key.session_id)))
                return -1;
        hit = bsearch(&key, g->rows, g->n_rows, sizeof(*g->rows), row_cmp);
        return hit ? hit - g->rows : -1;
}

static ssize_t find_container(struct gc *g, const char *id)
{
        for (size_t j = 0; id && *id && j < g->n_ctrs; j++)
                if (strcmp(g->ctrs[j].id, id) == 0)
                        return (ssize_t)j;
        return -1;
}

/* The session row whose container this is, or -1. */
static ssize_t find_row_naming(struct gc *g, const char *id)
{
        for (size_t i = 0; id && *id && i < g->n_rows; i++)
                if (!g->row_gone[i] && strcmp(g->rows[i].container_id, id) == 0)
                        return (ssize_t)i;
        return -1;
}

/* A container of (user, session) that this run leaves in place: the one its
 * row names (the store decides: a claimed warm pool container keeps the
 * pool's labels for life), or one labelled for it. */
bool gc_has_container(struct gc *g, const char *user, const char *session)
{
        ssize_t i = gc_find_row(g, user, session), k;

        if (i >= 0 && !g->row_gone[i] && (k = find_container(g, g->rows[i].container_id)) >= 0 && !g->ctr_gone[k])
                return true;
        for (size_t j = 0; j < g->n_ctrs; j++)
                if (!g->ctr_gone[j] && streq(label(&g->ctrs[j], CONTAINER_LABEL_USER), user) &&
                    streq(label(&g->ctrs[j], CONTAINER_LABEL_SESSION), session))
                        return true;
        return false;
}

/* ---- the report ---- */

static void push_item(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                      uint64_t bytes, const char *reason, const char *error)
{
        struct gc_report *rep = g->rep;
        struct gc_item *it;

        if (rep->n_items >= GC_MAX_ITEMS) {
                rep->items_truncated = true;
                return;
        }
        if (rep->n_items == 0 || (rep->n_items >= 16 && (rep->n_items & (rep->n_items - 1)) == 0)) {
                size_t cap = rep->n_items ? rep->n_items * 2 : 16;
                struct gc_item *p = realloc(rep->items, cap * sizeof(*p));
                if (!p) {
                        rep->items_truncated = true;
                        return;
                }
                rep->items = p;
        }
        it = &rep->items[rep->n_items++];
        memset(it, 0, sizeof(*it));
        it->kind = kind;
        sbx_strlcpy(it->id, id ? id : "", sizeof(it->id));
        sbx_strlcpy(it->user, user ? user : "", sizeof(it->user));
        sbx_strlcpy(it->session, session ? session : "", sizeof(it->session));
        sbx_strlcpy(it->reason, reason ? reason : "", sizeof(it->reason));
        it->bytes = bytes;
        it->failed = error != NULL;
        sbx_strlcpy(it->error, error ? error : "", sizeof(it->error));
}

static bool is_container_kind(enum gc_kind k)
{
        return k == GC_IDLE_CONTAINERS || k == GC_OLD_CONTAINERS || k == GC_ORPHAN_CONTAINERS;
}

void gc_note_done(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                  uint64_t bytes, const char *reason)
{
        g->rep->kinds[kind].count++;
        g->rep->kinds[kind].bytes += bytes;
        push_item(g, kind, id, user, session, bytes, reason, NULL);
        if (kind == GC_STORE) {
                log_info("gc: %s the store %s: %s", g->dry_run ? "would vacuum" : "vacuumed", id, reason);
                return;
        }
        log_ctx(LOG_LEVEL_INFO, user, session, is_container_kind(kind) ? id : NULL,
                "gc: %s %s %s (%" PRIu64 " bytes): %s", g->dry_run ? "would remove" : "removed", kind_items[kind], id,
                bytes, reason);
}

void gc_note_failed(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                    const char *reason, const char *error)
{
        g->rep->kinds[kind].failed++;
        push_item(g, kind, id, user, session, 0, reason, error);
        log_ctx(LOG_LEVEL_ERROR, user, session, is_container_kind(kind) ? id : NULL, "gc: cannot remove %s %s (%s): %s",
                kind_items[kind], id, reason, error);
}

/* Something the daemon did since the snapshot keeps the item: say so once. */
void gc_note_kept(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                  const char *why)
{
        log_ctx(LOG_LEVEL_INFO, user, session, is_container_kind(kind) ? id : NULL, "gc: kept %s %s: %s",
                kind_items[kind], id, why);
}

void gc_audit_remove(struct gc *g, const char *user, const char *session, enum gc_kind kind, const char *id,
                     const char *reason)
{
        _cleanup_(cjson_freep) cJSON *o = cJSON_CreateObject();
        _cleanup_free_ char *json = NULL;

        if (!session_id_valid(user) || !session_id_valid(session) || !o)
                return;
        cJSON_AddStringToObject(o, "kind", kind_names[kind]);
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "reason", reason);
        json = cJSON_PrintUnformatted(o);
        (void)audit_record(g->st, "gc", user, session, "gc.remove", json);
}

/* A listing's result r: false, noted as a failure of kind, when it failed. */
bool gc_listed(struct gc *g, enum gc_kind kind, const char *what, int r)
{
        if (r >= 0)
                return true;
        gc_note_failed(g, kind, "-", NULL, NULL, what, strerror(-r));
        return false;
}

/* The result r of a conditional store change (store_gc_*): -ESTALE, the
 * daemon changed the row since gc looked (noted as kept, with why); another
 * -errno, a failure. True when the change was made. */
bool gc_store_changed(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                      const char *reason, const char *why, int r)
{
        if (r == -ESTALE) {
                gc_note_kept(g, kind, id, user, session, why);
                return false;
        }
        if (r < 0) {
                gc_note_failed(g, kind, id, user, session, reason, strerror(-r));
                return false;
        }
        return true;
}

/* ---- containers ---- */

static void remove_owned(struct gc *g, size_t j, size_t i, enum gc_kind kind, int64_t before, bool quiet,
                         const char *cause, const char *reason)
{
        struct engine_container_summary *c = &g->ctrs[j];
        struct store_session *row = &g->rows[i];
        struct sbx_error err = {0};
        int64_t stamp = sbx_wall_ms();
        char msg[600];
        int r;

        if (quiet) {
                /* Judged here too so a dry run reports what a real one would; the real
                 * one checks again inside the same statement that changes the row. */
                static const char *const busy[] = {"PENDING", "RUNNING", NULL};
                struct store_execution *ex = NULL;
                size_t n = 0;
                r = store_exec_list(g->st, row->user_id, row->session_id, busy, 1, &ex, &n);
                free(ex);
                if (r == 0 && n > 0)
                        return;
        }
        if (!g->dry_run) {
                r = store_gc_session_take_container(g->st, row->user_id, row->session_id, c->id, before, quiet, cause,
                                                    stamp);
                if (r == -ESTALE) {
                        gc_note_kept(g, kind, c->id, row->user_id, row->session_id, "the session is in use again");
                        return;
                }
                if (r < 0) {
                        snprintf(msg, sizeof(msg), "store: %s", strerror(-r));
                        gc_note_failed(g, kind, c->id, row->user_id, row->session_id, reason, msg);
                        return;
                }
        }
        /* The row no longer names the container, whatever happens next. */
        row->container_id[0] = '\0';
        if (streq(row->state, "RUNNING") || streq(row->state, "PAUSED")) {
                sbx_strlcpy(row->state, "STOPPED", sizeof(row->state));
                sbx_strlcpy(row->error_cause, cause, sizeof(row->error_cause));
                row->updated_at = stamp;
        }
        if (!g->dry_run) {
                r = container_remove(g->engine, c->id, &err);
                if (r < 0) {
                        /* The next run finds it an orphan (no row names it). */
                        gc_note_failed(g, kind, c->id, row->user_id, row->session_id, reason, err.msg);
                        return;
                }
                (void)store_container_removed(g->st, c->id, cause, stamp);
                gc_audit_remove(g, row->user_id, row->session_id, kind, c->id, reason);
        }
        g->ctr_gone[j] = true;
        gc_note_done(g, kind, c->id, row->user_id, row->session_id, 0, reason);
}

static void remove_orphan(struct gc *g, size_t j, const char *reason)
{
        struct engine_container_summary *c = &g->ctrs[j];
        const char *user = label(c, CONTAINER_LABEL_USER), *session = label(c, CONTAINER_LABEL_SESSION);
        struct store_session fresh;
        struct sbx_error err = {0};

        if (!g->dry_run) {
                if (user && session && store_session_get(g->st, user, session, &fresh) == 0 &&
                    (streq(fresh.state, "CREATING") || streq(fresh.container_id, c->id))) {
                        gc_note_kept(g, GC_ORPHAN_CONTAINERS, c->id, user, session, "its session claims it now");
                        return;
                }
                if (container_remove(g->engine, c->id, &err) < 0) {
                        gc_note_failed(g, GC_ORPHAN_CONTAINERS, c->id, user, session, reason, err.msg);
                        return;
                }
                (void)store_container_removed(g->st, c->id, "gc_orphan", sbx_wall_ms());
                gc_audit_remove(g, user, session, GC_ORPHAN_CONTAINERS, c->id, reason);
        }
        g->ctr_gone[j] = true;
        gc_note_done(g, GC_ORPHAN_CONTAINERS, c->id, user, session, 0, reason);
}

static void gc_containers(struct gc *g)
{
        int64_t idle_before = g->now - (int64_t)g->cfg->idle_timeout_s * 1000;
        int64_t old_before = g->now - (int64_t)g->cfg->max_age_s * 1000;
        char reason[256], a[32], b[32];

        for (size_t j = 0; j < g->n_ctrs; j++) {
                const struct engine_container_summary *c = &g->ctrs[j];
                const char *user = label(c, CONTAINER_LABEL_USER), *session = label(c, CONTAINER_LABEL_SESSION);
                ssize_t i = find_row_naming(g, c->id), li;
                struct store_session *row = i >= 0 ? &g->rows[i] : NULL;

                if (!row) {
                        struct store_pool_slot slot;
                        if (label(c, POOL_LABEL) && session && store_pool_get(g->st, session, &slot) == 0)
                                continue; /* a warm pool slot the daemon holds (pool.h) */
                        /* The container of no session, as reconciliation judges it: by id. */
                        li = gc_find_row(g, user, session);
                        if (li >= 0 && streq(g->rows[li].state, "CREATING"))
                                continue; /* the daemon is making this session's container */
                        if (!user || !session)
                                snprintf(reason, sizeof(reason), "carries no session labels");
                        else if (li < 0)
                                snprintf(reason, sizeof(reason), "session %s:%s does not exist", user, session);
                        else
                                snprintf(reason, sizeof(reason), "not the container of session %s:%s (%s, %s%.12s)",
                                         user, session, g->rows[li].state,
                                         g->rows[li].container_id[0] ? "container " : "no container",
                                         g->rows[li].container_id);
                        remove_orphan(g, j, reason);
                        continue;
                }
                /* a paused one too: idle_timeout counts from its last use */
                if (!streq(row->state, "RUNNING") && !streq(row->state, "PAUSED") && !streq(row->state, "ERROR"))
                        continue;
                if (row->last_activity < idle_before) {
                        gc_fmt_age(g->now - row->last_activity, a, sizeof(a));
                        gc_fmt_age((int64_t)g->cfg->idle_timeout_s * 1000, b, sizeof(b));
                        snprintf(reason, sizeof(reason), "session idle for %s (idle_timeout %s)", a, b);
                        remove_owned(g, j, (size_t)i, GC_IDLE_CONTAINERS, idle_before, false, "gc_idle", reason);
                } else if (c->created > 0 && c->created * 1000 < old_before &&
                           row->last_activity < g->now - GC_RECENT_MS) {
                        gc_fmt_age(g->now - c->created * 1000, a, sizeof(a));
                        gc_fmt_age((int64_t)g->cfg->max_age_s * 1000, b, sizeof(b));
                        snprintf(reason, sizeof(reason), "created %s ago (GC_MAX_AGE_S %s)", a, b);
                        /* Not used since we looked: last_activity must not have moved. */
                        remove_owned(g, j, (size_t)i, GC_OLD_CONTAINERS, row->last_activity + 1, true, "gc_max_age",
                                     reason);
                }
        }
}

/* ---- sessions left in ERROR ---- */

/* The instance's bridge network: only network_default = bridge uses it
 * (the daemon makes it again on demand). */
static void gc_networks(struct gc *g)
{
        char instance[160];
        const char *filters[] = {CONTAINER_LABEL_MANAGED "=1", instance, NULL};
        char(*names)[128] = NULL;
        size_t n = 0;
        struct sbx_error err = {0};

        snprintf(instance, sizeof(instance), CONTAINER_LABEL_INSTANCE "=%s", g->cfg->instance);
        if (engine_network_list(g->engine, filters, &names, &n, &err) < 0) {
                log_warn("gc: cannot list networks: %s", err.msg);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                const char *reason = "network_default is not bridge";
                if (streq(g->cfg->network_default, "bridge")) {
                        gc_note_kept(g, GC_NETWORKS, names[i], NULL, NULL, "network_default is bridge");
                        continue;
                }
                if (!g->dry_run) {
                        int r = engine_network_remove(g->engine, names[i], &err);
                        if (r < 0 && r != -ENOENT) {
                                if (strstr(err.msg, "active endpoints"))
                                        gc_note_kept(g, GC_NETWORKS, names[i], NULL, NULL, "containers are attached");
                                else
                                        gc_note_failed(g, GC_NETWORKS, names[i], NULL, NULL, reason, err.msg);
                                continue;
                        }
                }
                gc_note_done(g, GC_NETWORKS, names[i], NULL, NULL, 0, reason);
        }
        free(names);
}

static void gc_error_sessions(struct gc *g)
{
        int64_t idle_before = g->now - (int64_t)g->cfg->idle_timeout_s * 1000;
        char reason[256], a[32];
        int r;

        for (size_t i = 0; i < g->n_rows; i++) {
                struct store_session *row = &g->rows[i];
                ssize_t j;

                if (g->row_gone[i] || !streq(row->state, "ERROR"))
                        continue;
                j = find_container(g, row->container_id);
                if (j >= 0 && !g->ctr_gone[j])
                        continue; /* it still has its (failed) container */
                if (gc_has_container(g, row->user_id, row->session_id))
                        continue;
                /* "Left": nobody has used it, nor has the daemon retried it, for idle_timeout. */
                if (row->updated_at >= idle_before || row->last_activity >= idle_before)
                        continue;
                gc_fmt_age(g->now - (row->updated_at > row->last_activity ? row->updated_at : row->last_activity), a,
                           sizeof(a));
                snprintf(reason, sizeof(reason), "in ERROR (%s) with no container, untouched for %s",
                         row->error_cause[0] ? row->error_cause : "no cause", a);
                if (!g->dry_run) {
                        r = store_gc_session_forget(g->st, row->user_id, row->session_id, row->container_id,
                                                    row->updated_at);
                        if (!gc_store_changed(g, GC_ERROR_SESSIONS, row->session_id, row->user_id, row->session_id,
                                              reason, "the session changed since gc looked", r))
                                continue;
                        gc_audit_remove(g, row->user_id, row->session_id, GC_ERROR_SESSIONS, row->session_id, reason);
                }
                g->row_gone[i] = true;
                char id[160];
                snprintf(id, sizeof(id), "%s:%s", row->user_id, row->session_id);
                gc_note_done(g, GC_ERROR_SESSIONS, id, row->user_id, row->session_id, 0, reason);
        }
}

/* ---- port allocations ---- */

static void gc_ports(struct gc *g)
{
        _cleanup_free_ struct store_port *ports = NULL;
        size_t n = 0;
        char reason[256], id[16];

        if (!gc_listed(g, GC_PORTS, "listing port allocations", store_ports_list(g->st, &ports, &n)))
                return;
        for (size_t k = 0; k < n; k++) {
                const struct store_port *p = &ports[k];
                ssize_t i = gc_find_row(g, p->user_id, p->session_id);
                const struct store_session *row = i >= 0 && !g->row_gone[i] ? &g->rows[i] : NULL;

                if (row && (state_live(row->state) || streq(row->state, "ERROR")))
                        continue;
                if (gc_has_container(g, p->user_id, p->session_id))
                        continue;
                if (row)
                        snprintf(reason, sizeof(reason), "session %s:%s is %s with no container", p->user_id,
                                 p->session_id, row->state);
                else
                        snprintf(reason, sizeof(reason), "session %s:%s does not exist", p->user_id, p->session_id);
                snprintf(id, sizeof(id), "%d", p->port);
                if (!g->dry_run && !gc_store_changed(g, GC_PORTS, id, p->user_id, p->session_id, reason,
                                                     "its session holds it again (RUNNING, CREATING or ERROR)",
                                                     store_gc_port_release(g->st, p->port, p->user_id, p->session_id)))
                        continue;
                gc_note_done(g, GC_PORTS, id, p->user_id, p->session_id, 0, reason);
        }
}

/* ---- services ---- */

static void gc_services(struct gc *g)
{
        _cleanup_free_ struct store_gc_service *rows = NULL;
        size_t n = 0;
        char reason[256];
        int r;

        if (!gc_listed(g, GC_SERVICES, "listing services", store_gc_services_list(g->st, &rows, &n)))
                return;
        for (size_t k = 0; k < n; k++) {
                const struct store_gc_service *sv = &rows[k];
                ssize_t j;

                if (!sv->container_id[0]) {
                        if (!streq(sv->state, "STOPPED") && !streq(sv->state, "FAILED"))
                                continue; /* being started */
                        snprintf(reason, sizeof(reason), "%s, no container", sv->state);
                } else if ((j = find_container(g, sv->container_id)) >= 0) {
                        if (!g->ctr_gone[j] &&
                            (streq(g->ctrs[j].state, "running") || streq(g->ctrs[j].state, "paused")))
                                continue;
                        snprintf(reason, sizeof(reason), "container %.12s is %s", sv->container_id,
                                 g->ctr_gone[j] ? "removed by gc" : g->ctrs[j].state);
                } else {
                        /* Not in the snapshot: maybe created since. Ask. */
                        struct engine_container_info info;
                        struct sbx_error err = {0};
                        r = engine_inspect(g->engine, sv->container_id, &info, &err);
                        if (r == 0 && info.running)
                                continue;
                        if (r < 0 && r != -ENOENT) {
                                gc_note_failed(g, GC_SERVICES, sv->name, sv->user_id, sv->session_id,
                                               "checking its container", err.msg);
                                continue;
                        }
                        snprintf(reason, sizeof(reason), "container %.12s %s", sv->container_id,
                                 r == 0 ? "is not running" : "no longer exists");
                }
                if (!g->dry_run && !gc_store_changed(g, GC_SERVICES, sv->name, sv->user_id, sv->session_id, reason,
                                                     "the service changed since gc looked",
                                                     store_gc_service_delete(g->st, sv->user_id, sv->session_id,
                                                                             sv->name, sv->container_id, sv->state)))
                        continue;
                gc_note_done(g, GC_SERVICES, sv->name, sv->user_id, sv->session_id, 0, reason);
        }
}

/* ---- audit rows ---- */

/* A bulk delete of r rows (one statement) as one report item counting them:
 * a row is not worth an item of its own. */
static void note_rows(struct gc *g, enum gc_kind kind, const char *item, const char *reason, int r)
{
        if (r < 0) {
                gc_note_failed(g, kind, item, NULL, NULL, reason, strerror(-r));
                return;
        }
        if (r == 0)
                return;
        gc_note_done(g, kind, item, NULL, NULL, 0, reason);
        g->rep->kinds[kind].count += (uint64_t)r - 1;
}

/* Rows of table (audit_log, egress_log) older than gc.audit_retention. */
static void gc_retention(struct gc *g, const char *table, const char *what, int (*prune)(struct store *, int64_t, bool))
{
        char reason[128], b[32];

        if (g->cfg->audit_retention_s < 0)
                return;
        gc_fmt_age((int64_t)g->cfg->audit_retention_s * 1000, b, sizeof(b));
        snprintf(reason, sizeof(reason), "%s more than %s ago (gc.audit_retention)", what, b);
        note_rows(g, GC_AUDIT, table, reason,
                  prune(g->st, g->now - (int64_t)g->cfg->audit_retention_s * 1000, g->dry_run));
}

static void gc_audit(struct gc *g)
{
        gc_retention(g, "audit_log", "written", store_gc_audit_prune);
}

/* ---- snapshots (issue 28) ---- */

/* Snapshots older than gc.snapshot_retention, and "creating" ones a day old
 * (a copy a crash cut short): files, then row, each one an item. */
static void gc_snapshots(struct gc *g)
{
        struct store_snapshot *list = NULL;
        size_t n = 0;
        int64_t before =
                g->cfg->snapshot_retention_s < 0 ? INT64_MIN : g->now - (int64_t)g->cfg->snapshot_retention_s * 1000;
        char reason[128], b[32];

        if (!gc_listed(g, GC_SNAPSHOTS, "snapshots",
                       store_snapshot_list_older(g->st, before, g->now - SNAPSHOT_STALE_MS, 100000, &list, &n)))
                return;
        gc_fmt_age((int64_t)g->cfg->snapshot_retention_s * 1000, b, sizeof(b));
        for (size_t i = 0; i < n; i++) {
                struct store_snapshot *x = &list[i];
                int r = 0;
                if (strcmp(x->state, "ready") == 0)
                        snprintf(reason, sizeof(reason), "taken more than %s ago (gc.snapshot_retention)", b);
                else
                        snprintf(reason, sizeof(reason), "a copy left unfinished (state %s)", x->state);
                if (!g->dry_run)
                        r = snapshot_purge(g->cfg, g->st, x->user, x->id);
                if (r < 0) {
                        gc_note_failed(g, GC_SNAPSHOTS, x->id, x->user, x->session, reason, strerror(-r));
                        continue;
                }
                gc_note_done(g, GC_SNAPSHOTS, x->id, x->user, x->session, (uint64_t)x->bytes, reason);
                if (!g->dry_run)
                        gc_audit_remove(g, x->user, x->session, GC_SNAPSHOTS, x->id, reason);
        }
        store_snapshot_list_free(list, n);
}

/* The microVM engine's leftovers: cgroups without their VM, root file systems nothing uses
 * (engine_qemu.h). A daemon without the microVM runtime has none. */
static void vm_note(void *ud, int kind, const char *what, uint64_t bytes, const char *reason, int r)
{
        struct gc *g = ud;
        enum gc_kind k = kind == ENGINE_MICROVM_GC_ROOTFS ? GC_VM_ROOTFS : GC_VM_CGROUPS;

        if (r == -EBUSY)
                gc_note_kept(g, k, what, NULL, NULL, reason);
        else if (r < 0)
                gc_note_failed(g, k, what, NULL, NULL, reason, strerror(-r));
        else
                gc_note_done(g, k, what, NULL, NULL, bytes, reason);
}

static void gc_vm(struct gc *g)
{
        struct engine_microvm_gc o = {.dry_run = g->dry_run, .rootfs = true, .now_ms = g->now, .note = vm_note, .ud = g};

        (void)engine_microvm_gc(g->engine, &o);
}

/* The egress proxy's decisions keep the audit retention too. */
static void gc_egress_log(struct gc *g)
{
        gc_retention(g, "egress_log", "egress decisions recorded", store_gc_egress_prune);
}

/* MCP tasks past their ttl (the daemon also drops them at each new task):
 * bookkeeping rows, logged rather than itemized in the report. */
static void gc_tasks(struct gc *g)
{
        int r;

        if (g->dry_run)
                return;
        r = store_task_purge(g->st, g->now);
        if (r < 0)
                log_warn("gc: expired MCP tasks: %s", strerror(-r));
        else if (r > 0)
                log_info("gc: %d expired MCP tasks deleted", r);
}

/* The lifecycle event log (events.h) past EVENTS_RETENTION_S or EVENTS_MAX
 * rows; the daemon prunes it too, this covers a daemon that is down. */
static void gc_events(struct gc *g)
{
        char reason[128];

        snprintf(reason, sizeof(reason), "past EVENTS_RETENTION_S (%ds) or beyond EVENTS_MAX (%d)",
                 g->cfg->events_retention_s, g->cfg->events_max);
        note_rows(g, GC_AUDIT, "events", reason,
                  store_events_prune(g->st, g->cfg->events_max, g->now - (int64_t)g->cfg->events_retention_s * 1000,
                                     g->dry_run));
}

/* Idempotency keys past API_IDEMPOTENCY_WINDOW_S. */
static void gc_idempotency_keys(struct gc *g)
{
        note_rows(g, GC_IDEMPOTENCY_KEYS, "idempotency_keys", "past API_IDEMPOTENCY_WINDOW_S",
                  store_idem_prune(g->st, g->now, g->dry_run));
}

/* ---- the store ---- */

static uint64_t path_bytes(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
}

static void gc_vacuum(struct gc *g, const char *db)
{
        char wal[SBX_PATH_MAX + 48], reason[256];
        struct store_gc_stats st;
        struct sbx_error err = {0};
        uint64_t before, after;
        int r;

        snprintf(wal, sizeof(wal), "%s-wal", db);
        if (g->dry_run) {
                r = store_gc_stats(g->st, &st);
                if (r < 0) {
                        gc_note_failed(g, GC_STORE, db, NULL, NULL, "vacuum", strerror(-r));
                        return;
                }
                snprintf(reason, sizeof(reason), "vacuum (%" PRId64 " free pages now; more after the removals)",
                         st.freelist_count);
                gc_note_done(g, GC_STORE, db, NULL, NULL, (uint64_t)(st.freelist_count * st.page_size), reason);
                return;
        }
        before = path_bytes(db) + path_bytes(wal);
        r = store_vacuum(g->st, &err);
        if (r < 0) {
                gc_note_failed(g, GC_STORE, db, NULL, NULL, "vacuum", err.msg);
                return;
        }
        after = path_bytes(db) + path_bytes(wal);
        snprintf(reason, sizeof(reason), "vacuum: %" PRIu64 " -> %" PRIu64 " bytes", before, after);
        gc_note_done(g, GC_STORE, db, NULL, NULL, before > after ? before - after : 0, reason);
}

/* ---- the run ---- */

static int snapshot(struct gc *g, struct sbx_error *err)
{
        char filter[128];
        const char *filters[] = {CONTAINER_LABEL_MANAGED "=1", filter, NULL};
        int r;

        /* Containers first, then rows: see the header. */
        snprintf(filter, sizeof(filter), CONTAINER_LABEL_INSTANCE "=%s", g->cfg->instance);
        r = engine_list(g->engine, filters, true, &g->ctrs, &g->n_ctrs, err);
        if (r < 0) {
                sbx_error_prefix(err, "listing the containers of instance %s", g->cfg->instance);
                return r;
        }
        r = store_session_list(g->st, NULL, NULL, &g->rows, &g->n_rows);
        if (r < 0)
                return sbx_error_set(err, r, 0, "listing sessions: %s", strerror(-r));
        if (g->n_rows > 1)
                qsort(g->rows, g->n_rows, sizeof(*g->rows), row_cmp);
        g->ctr_gone = calloc(g->n_ctrs + 1, sizeof(bool));
        g->row_gone = calloc(g->n_rows + 1, sizeof(bool));
        if (!g->ctr_gone || !g->row_gone)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        return 0;
}

int gc_run(const struct sbx_config *cfg, const struct gc_options *opts, struct gc_report *ret, struct sbx_error *err)
{
        struct gc_report rep = {0};
        struct gc g = {.cfg = cfg, .rep = &rep};
        char db[SBX_PATH_MAX + 32], lock_path[SBX_PATH_MAX + 32];
        _cleanup_close_ int lock = -1;
        struct stat st;
        int r;

        if (!cfg || !ret)
                return sbx_error_set(err, -EINVAL, 0, "gc_run: bad arguments");
        g.dry_run = opts && opts->dry_run;
        g.now = opts && opts->now_ms ? opts->now_ms : sbx_wall_ms();
        rep.dry_run = g.dry_run;
        rep.started_at = sbx_wall_ms();
        sbx_strlcpy(rep.instance, cfg->instance, sizeof(rep.instance));

        if (stat(cfg->data_dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return sbx_error_set(err, -ENOENT, 0, "data_dir %s is not a directory", cfg->data_dir);
        snprintf(db, sizeof(db), "%s/sandboxd.db", cfg->data_dir);
        if (lstat(db, &st) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no store at %s: has sandboxd run with this data_dir?", db);
        if (!g.dry_run) {
                snprintf(lock_path, sizeof(lock_path), "%s/gc.lock", cfg->data_dir);
                lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (lock < 0)
                        return sbx_error_set(err, -errno, 0, "cannot open %s: %m", lock_path);
                if (flock(lock, LOCK_EX | LOCK_NB) < 0)
                        return sbx_error_set(err, errno == EWOULDBLOCK ? -EBUSY : -errno, 0,
                                             "another gc is running on %s (%s is locked)", cfg->data_dir, lock_path);
        }

        if (g.dry_run) {
                int have = 0, want = 0;
                r = store_gc_schema_check(db, &have, &want);
                if (r < 0)
                        return sbx_error_set(err, r, 0, "reading the schema version of %s: %s", db, strerror(-r));
                if (have < want)
                        return sbx_error_set(err, -ESTALE, 0,
                                             "the store %s is at schema version %d and this binary needs %d: a dry "
                                             "run does not migrate it (start the daemon or run a real gc first)",
                                             db, have, want);
        }
        r = store_open(db, &g.st, err);
        if (r < 0) {
                sbx_error_prefix(err, "opening the store");
                goto out;
        }
        r = engine_new_from_config(cfg, &g.engine, err);
        if (r == 0)
                r = engine_connect(g.engine, err);
        if (r < 0)
                goto out;
        r = snapshot(&g, err);
        if (r < 0)
                goto out;
        log_info("gc%s: instance %s, %zu containers, %zu sessions", g.dry_run ? " (dry run)" : "", cfg->instance,
                 g.n_ctrs, g.n_rows);

        gc_containers(&g); /* keeps every slot a row names */
        {
                /* the slots of a pool no longer configured are garbage */
                size_t gone = pool_gc_unconfigured(cfg, g.st, g.engine, g.dry_run);
                if (gone)
                        log_info("gc%s: %zu warm pool slot(s) of images no longer pooled %s",
                                 g.dry_run ? " (dry run)" : "", gone, g.dry_run ? "to remove" : "removed");
        }
        gc_networks(&g); /* after the containers that may have used it */
        gc_error_sessions(&g);
        gc_ports(&g);
        gc_services(&g);
        gc_spools(&g);
        gc_audit(&g);
        gc_snapshots(&g);
        gc_vm(&g); /* after the snapshots: a memory snapshot removed no longer keeps its root file system */
        gc_egress_log(&g);
        gc_idempotency_keys(&g);
        gc_events(&g);
        gc_tasks(&g);
        gc_mounts(&g);
        gc_workspaces(&g);
        gc_uids(&g);
        {
                size_t swept = pool_sweep_leftovers(cfg, g.st, g.engine, g.dry_run);
                if (swept)
                        log_info("gc%s: %zu leftover warm pool slot directories, uids and claims %s",
                                 g.dry_run ? " (dry run)" : "", swept, g.dry_run ? "to remove" : "removed");
        }
        gc_vacuum(&g, db);

        for (size_t k = 0; k < GC_KIND_COUNT; k++) {
                rep.total.count += rep.kinds[k].count;
                rep.total.bytes += rep.kinds[k].bytes;
                rep.total.failed += rep.kinds[k].failed;
        }
        rep.duration_ms = sbx_wall_ms() - rep.started_at;
        log_info("gc%s: %" PRIu64 " items, %" PRIu64 " bytes%s, %" PRIu64 " failed", g.dry_run ? " (dry run)" : "",
                 rep.total.count, rep.total.bytes, g.dry_run ? " reclaimable" : " reclaimed", rep.total.failed);
        *ret = rep;
        memset(&rep, 0, sizeof(rep));
        r = 0;
out:
        gc_report_done(&rep);
        free(g.ctrs);
        free(g.ctr_gone);
        free(g.rows);
        free(g.row_gone);
        engine_free(g.engine);
        store_close(g.st);
        return r;
}
