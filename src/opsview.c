/* opsview.c — what an operator reads about the daemon (opsview.h), built
 * from the modules' own calls; shared by the admin socket and the API's
 * operator methods so both say the same. No state, no threads. */
#include "sandboxd/opsview.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/container.h"
#include "sandboxd/daemon.h"
#include "sandboxd/egress.h"
#include "sandboxd/engine.h"
#include "sandboxd/events.h"
#include "sandboxd/exec.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/metrics.h"
#include "sandboxd/monitor.h"
#include "sandboxd/node.h"
#include "sandboxd/pool.h"
#include "sandboxd/portpool.h"
#include "sandboxd/quota.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "sandboxd/usage.h"

cJSON *opsview_quota(struct daemon *d, const char *user)
{
        struct quota_limits lim;
        struct store_quota *rows = NULL;
        struct session_info *list = NULL;
        size_t n = 0, live = 0, paused = 0;
        cJSON *o = cJSON_CreateObject(), *l, *ov, *u;

        quota_limits_get(d->quota, &d->cfg, user, &lim);
        cJSON_AddStringToObject(o, "user", user);
        l = cJSON_AddObjectToObject(o, "limits");
        cJSON_AddNumberToObject(l, "max_sessions_per_user", (double)lim.sessions);
        cJSON_AddNumberToObject(l, "max_exec_per_user", (double)lim.execs);
        cJSON_AddNumberToObject(l, "max_services_per_session", (double)lim.services);
        cJSON_AddNumberToObject(l, "max_spool_per_session", (double)lim.spool_bytes);
        cJSON_AddNumberToObject(l, "max_scripts_per_user", (double)lim.scripts);
        cJSON_AddNumberToObject(l, "max_script_bytes_per_user", (double)lim.script_bytes);
        cJSON_AddNumberToObject(l, "max_paused_sessions_per_user", (double)lim.paused_sessions);
        /* what one session may ask for (sessspec.h) */
        cJSON_AddNumberToObject(l, "max_session_cpus", (double)lim.session_nano_cpus / 1e9);
        cJSON_AddNumberToObject(l, "max_session_memory", (double)lim.session_memory);
        cJSON_AddNumberToObject(l, "max_session_disk", (double)lim.session_disk);
        ov = cJSON_AddObjectToObject(o, "overrides");
        if (d->quota && quota_overrides(d->quota, user, &rows, &n) == 0)
                for (size_t i = 0; i < n; i++)
                        cJSON_AddNumberToObject(ov, rows[i].key, (double)rows[i].value);
        free(rows);
        u = cJSON_AddObjectToObject(o, "usage");
        n = 0;
        if (session_list(d->sessions, user, NULL, &list, &n) == 0)
                for (size_t i = 0; i < n; i++) {
                        /* a paused session holds its memory: live for max_sessions_per_user */
                        live += list[i].state == SESSION_RUNNING || list[i].state == SESSION_CREATING ||
                                list[i].state == SESSION_PAUSED;
                        paused += list[i].state == SESSION_PAUSED;
                }
        cJSON_AddNumberToObject(u, "sessions", (double)n);
        cJSON_AddNumberToObject(u, "live_sessions", (double)live);
        cJSON_AddNumberToObject(u, "paused_sessions", (double)paused);
        cJSON_AddNumberToObject(u, "executions_running", (double)exec_running_count(d->exec, user, NULL));
        session_info_list_free(list, n);
        return o;
}

#define OPSVIEW_USAGE_MAX 1000 /* containers sampled per list_users, as sandboxctl top */

struct user_name {
        char name[65];
};

static int user_name_cmp(const void *a, const void *b)
{
        return strcmp(((const struct user_name *)a)->name, ((const struct user_name *)b)->name);
}

static int user_names_add(struct user_name **v, size_t *n, size_t *cap, const char *name)
{
        if (*n == *cap) {
                size_t nc = *cap ? *cap * 2 : 16;
                struct user_name *nv = realloc(*v, nc * sizeof(**v));
                if (!nv)
                        return -ENOMEM;
                *v = nv;
                *cap = nc;
        }
        sbx_strlcpy((*v)[(*n)++].name, name, sizeof((*v)[0].name));
        return 0;
}

/* Every user with a live token, a session or a quota override, sorted, once each. */
static int user_names(struct daemon *d, struct user_name **ret, size_t *ret_n)
{
        _cleanup_free_ struct token_info *toks = NULL;
        _cleanup_free_ struct store_quota *rows = NULL;
        struct session_info *list = NULL;
        struct user_name *v = NULL;
        size_t n_toks = 0, n_rows = 0, n_list = 0, n = 0, cap = 0, k = 0;
        int r = token_list(d->store, &toks, &n_toks);

        if (r == 0 && d->quota)
                r = quota_overrides(d->quota, NULL, &rows, &n_rows);
        if (r == 0)
                r = session_list(d->sessions, NULL, NULL, &list, &n_list);
        for (size_t i = 0; r == 0 && i < n_toks; i++)
                if (toks[i].revoked_at == 0)
                        r = user_names_add(&v, &n, &cap, toks[i].user);
        for (size_t i = 0; r == 0 && i < n_rows; i++)
                r = user_names_add(&v, &n, &cap, rows[i].user_id);
        for (size_t i = 0; r == 0 && i < n_list; i++)
                r = user_names_add(&v, &n, &cap, list[i].user);
        session_info_list_free(list, n_list);
        if (r < 0) {
                free(v);
                return r;
        }
        if (n > 0)
                qsort(v, n, sizeof(*v), user_name_cmp);
        for (size_t i = 0; i < n; i++)
                if (k == 0 || strcmp(v[k - 1].name, v[i].name) != 0)
                        v[k++] = v[i];
        *ret = v;
        *ret_n = k;
        return 0;
}

int opsview_users(struct daemon *d, cJSON **ret)
{
        _cleanup_free_ struct user_name *names = NULL;
        struct usage_row *rows = NULL;
        size_t n = 0, n_rows = 0;
        bool sampled;
        cJSON *a;
        int r = user_names(d, &names, &n);

        if (r < 0)
                return r;
        /* the engine's figures; without them memory and CPU are null */
        sampled = usage_collect(&(struct usage_ctx){.sessions = d->sessions,
                                                    .engine = d->engine,
                                                    .exec = d->exec,
                                                    .store = d->store},
                                NULL, OPSVIEW_USAGE_MAX, &rows, &n_rows) == 0;
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "users");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = opsview_quota(d, names[i].name);
                cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
                uint64_t mem = 0, cpu = 0;

                for (size_t j = 0; sampled && j < n_rows; j++)
                        if (rows[j].has_stats && strcmp(rows[j].user, names[i].name) == 0) {
                                mem += rows[j].memory_usage;
                                cpu += rows[j].cpu_total_ns;
                        }
                if (sampled) {
                        cJSON_AddNumberToObject(u, "memory_bytes", (double)mem);
                        cJSON_AddNumberToObject(u, "cpu_total_ns", (double)cpu);
                } else {
                        cJSON_AddNullToObject(u, "memory_bytes");
                        cJSON_AddNullToObject(u, "cpu_total_ns");
                }
                cJSON_AddItemToArray(a, o);
        }
        /* the same samples per session, for Top's rows per session */
        a = cJSON_AddArrayToObject(*ret, "sessions");
        for (size_t j = 0; sampled && j < n_rows; j++) {
                cJSON *o = cJSON_CreateObject();
                jsonutil_add_text(o, "user", rows[j].user);
                jsonutil_add_text(o, "session", rows[j].session);
                jsonutil_add_lower(o, "state", session_state_to_string(rows[j].state));
                if (rows[j].has_stats) {
                        cJSON_AddNumberToObject(o, "memory_bytes", (double)rows[j].memory_usage);
                        cJSON_AddNumberToObject(o, "memory_limit", (double)rows[j].memory_limit);
                        cJSON_AddNumberToObject(o, "cpu_total_ns", (double)rows[j].cpu_total_ns);
                        cJSON_AddNumberToObject(o, "pids", (double)rows[j].pids);
                } else {
                        cJSON_AddNullToObject(o, "memory_bytes");
                        cJSON_AddNullToObject(o, "memory_limit");
                        cJSON_AddNullToObject(o, "cpu_total_ns");
                        cJSON_AddNullToObject(o, "pids");
                }
                cJSON_AddNumberToObject(o, "executions_running", (double)rows[j].executions_running);
                cJSON_AddItemToArray(a, o);
        }
        if (sampled)
                free(rows);
        return 0;
}

/* The warm pool's numbers (pool.h): stats and sandboxctl pool. */
void opsview_add_pool(cJSON *o, struct pool *pl)
{
        struct pool_stats ps;
        cJSON *p = cJSON_AddObjectToObject(o, "pool");

        pool_stats(pl, &ps);
        cJSON_AddNumberToObject(p, "size", ps.size);
        cJSON_AddNumberToObject(p, "ready", (double)ps.ready);
        cJSON_AddNumberToObject(p, "creating", (double)ps.creating);
        cJSON_AddNumberToObject(p, "claims", (double)ps.claims);
        cJSON_AddNumberToObject(p, "misses", (double)ps.misses);
        cJSON_AddNumberToObject(p, "created", (double)ps.created);
        cJSON_AddNumberToObject(p, "failed", (double)ps.failed);
        cJSON_AddNumberToObject(p, "refill_per_s", ps.refill_per_s);
        cJSON_AddNumberToObject(p, "waiting", (double)ps.waiting);
        cJSON_AddNumberToObject(p, "waited", (double)ps.waited);
        cJSON_AddNumberToObject(p, "wait_expired", (double)ps.wait_expired);
        cJSON *imgs = cJSON_AddArrayToObject(p, "images");
        for (size_t i = 0; imgs && i < ps.n_images; i++) {
                cJSON *io = cJSON_CreateObject();
                cJSON_AddStringToObject(io, "image", ps.images[i].image);
                cJSON_AddNumberToObject(io, "size", ps.images[i].size);
                cJSON_AddNumberToObject(io, "ready", (double)ps.images[i].ready);
                cJSON_AddNumberToObject(io, "waiting", (double)ps.images[i].waiting);
                cJSON_AddItemToArray(imgs, io);
        }
}

int opsview_nodes(struct daemon *d, cJSON **ret)
{
        _cleanup_free_ struct node_status *nodes = NULL;
        _cleanup_free_ struct store_node_count *counts = NULL;
        size_t n = 0, n_counts = 0;
        int r;

        *ret = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(*ret, "nodes");
        if (!d->node) /* one process: no node link */
                return 0;
        r = node_server_list(d->node, &nodes, &n);
        if (r == 0)
                r = store_node_counts(d->store, &counts, &n_counts);
        if (r < 0) {
                cJSON_Delete(*ret);
                *ret = NULL;
                return r;
        }
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                uint64_t placed = 0;
                for (size_t j = 0; j < n_counts; j++)
                        if (strcmp(counts[j].node, nodes[i].name) == 0)
                                placed = counts[j].sessions;
                cJSON_AddStringToObject(o, "name", nodes[i].name);
                cJSON_AddBoolToObject(o, "connected", nodes[i].connected);
                cJSON_AddBoolToObject(o, "fenced", nodes[i].fenced);
                jsonutil_add_time(o, "since", nodes[i].since_ms);
                cJSON_AddNumberToObject(o, "sessions", (double)placed);
                if (nodes[i].connected)
                        jsonutil_add_time(o, "last_heartbeat", nodes[i].heartbeat_ms);
                else
                        cJSON_AddNullToObject(o, "last_heartbeat");
                cJSON_AddItemToArray(a, o);
        }
        /* sessions placed on a node not seen since this daemon started */
        for (size_t j = 0; j < n_counts; j++) {
                bool seen = false;
                for (size_t i = 0; i < n && !seen; i++)
                        seen = strcmp(counts[j].node, nodes[i].name) == 0;
                if (seen)
                        continue;
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "name", counts[j].node);
                cJSON_AddBoolToObject(o, "connected", false);
                cJSON_AddBoolToObject(o, "fenced", false);
                cJSON_AddNullToObject(o, "since");
                cJSON_AddNumberToObject(o, "sessions", (double)counts[j].sessions);
                cJSON_AddNullToObject(o, "last_heartbeat");
                cJSON_AddItemToArray(a, o);
        }
        return 0;
}

cJSON *opsview_health(struct daemon *d)
{
        char version[64];
        struct sbx_error err = {0};
        int r = daemon_engine_version(d, version, sizeof(version), &err);
        cJSON *o = cJSON_CreateObject(), *docker;

        cJSON_AddStringToObject(o, "status", r == 0 ? "ok" : "degraded");
        cJSON_AddStringToObject(o, "version", SBX_VERSION);
        cJSON_AddNumberToObject(o, "uptime_s", (double)((sbx_wall_ms() - d->started_at) / 1000));
        docker = cJSON_AddObjectToObject(o, "docker");
        cJSON_AddBoolToObject(docker, "ok", r == 0);
        if (engine_microvm_accel(d->engine))
                cJSON_AddStringToObject(o, "microvm", engine_microvm_accel(d->engine));
        if (r == 0)
                cJSON_AddStringToObject(docker, "version", version);
        else
                jsonutil_add_text(docker, "error", err.msg[0] ? err.msg : strerror(-r));
        return o;
}

/* The container engine (engine.h): what it can enforce, and which of the
 * config's settings it leaves out (logged once at the first create too). */
static void add_engine(cJSON *o, struct daemon *d)
{
        cJSON *en = cJSON_AddObjectToObject(o, "engine");
        cJSON *caps = cJSON_AddArrayToObject(en, "capabilities");
        cJSON *missing = cJSON_AddArrayToObject(en, "unenforced");
        unsigned unenforced = container_unenforced(d->engine, &d->cfg);

        cJSON_AddStringToObject(en, "name", d->engine->name);
        if (engine_microvm_accel(d->engine)) /* runtime microvm offered: how its VMs run */
                cJSON_AddStringToObject(en, "microvm", engine_microvm_accel(d->engine));
        for (unsigned i = 0; engine_cap_name(i); i++) {
                if (engine_can(d->engine, 1u << i))
                        cJSON_AddItemToArray(caps, cJSON_CreateString(engine_cap_name(i)));
                if (unenforced & (1u << i))
                        cJSON_AddItemToArray(missing, cJSON_CreateString(engine_cap_name(i)));
        }
}

cJSON *opsview_stats(struct daemon *d)
{
        size_t counts[SESSION_STATE_COUNT] = {0}, used = 0, total = 0;
        char version[64] = "";
        cJSON *ret, *s, *p;
        int64_t last;

        session_counts(d->sessions, counts);
        portpool_usage(d->ports, &used, &total);
        ret = cJSON_CreateObject();
        cJSON_AddStringToObject(ret, "version", SBX_VERSION);
        cJSON_AddNumberToObject(ret, "started_at", (double)d->started_at);
        cJSON_AddNumberToObject(ret, "uptime_s", (double)((sbx_wall_ms() - d->started_at) / 1000));
        if (daemon_engine_version(d, version, sizeof(version), NULL) == 0)
                cJSON_AddStringToObject(ret, "docker_version", version);
        else
                cJSON_AddNullToObject(ret, "docker_version");
        add_engine(ret, d);
        s = cJSON_AddObjectToObject(ret, "sessions");
        cJSON_AddNumberToObject(s, "creating", (double)counts[SESSION_CREATING]);
        cJSON_AddNumberToObject(s, "running", (double)counts[SESSION_RUNNING]);
        cJSON_AddNumberToObject(s, "stopped", (double)counts[SESSION_STOPPED]);
        cJSON_AddNumberToObject(s, "error", (double)counts[SESSION_ERROR]);
        cJSON_AddNumberToObject(s, "paused", (double)counts[SESSION_PAUSED]);
        size_t total_sessions = 0;
        for (size_t i = 0; i < SESSION_STATE_COUNT; i++)
                total_sessions += counts[i];
        cJSON_AddNumberToObject(s, "total", (double)total_sessions);
        cJSON_AddNumberToObject(ret, "executions_running", (double)exec_running_count(d->exec, NULL, NULL));
        p = cJSON_AddObjectToObject(ret, "ports");
        cJSON_AddNumberToObject(p, "used", (double)used);
        cJSON_AddNumberToObject(p, "total", (double)total);
        last = d->monitor ? monitor_last_poll(d->monitor) : 0;
        jsonutil_add_time(ret, "monitor_last_poll", last);
        opsview_add_pool(ret, d->pool);
        {
                struct egress_stats es;
                egress_stats(d->egress, &es);
                p = cJSON_AddObjectToObject(ret, "egress");
                cJSON_AddNumberToObject(p, "allowed", (double)es.allowed);
                cJSON_AddNumberToObject(p, "blocked", (double)es.blocked);
                cJSON_AddNumberToObject(p, "open", es.open);
        }
        return ret;
}

cJSON *opsview_daemon_health(struct daemon *d)
{
        cJSON *o = opsview_health(d), *stats = opsview_stats(d), *c, *it;
        struct events_stats es;

        while (stats && (it = stats->child)) {
                cJSON_DetachItemViaPointer(stats, it);
                if (cJSON_GetObjectItemCaseSensitive(o, it->string))
                        cJSON_Delete(it); /* version, uptime_s: health's */
                else
                        cJSON_AddItemToObject(o, it->string, it);
        }
        cJSON_Delete(stats);
        events_stats(&es);
        c = cJSON_AddObjectToObject(o, "counters");
        cJSON_AddNumberToObject(c, "auth_failures", (double)metrics_auth_failures());
        cJSON_AddNumberToObject(c, "engine_api_errors", (double)(d->engine ? engine_api_errors(d->engine) : 0));
        cJSON_AddNumberToObject(c, "events_written", (double)es.written);
        cJSON_AddNumberToObject(c, "events_dropped", (double)es.dropped);
        cJSON_AddNumberToObject(c, "event_overflows", (double)es.overflowed);
        return o;
}
