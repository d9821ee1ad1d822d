/* daemon.c — opening and closing the whole daemon in dependency order.
 * No state of its own beyond the struct; no threads but the monitor's. */
#include "sandboxd/daemon.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "sandboxd/engine.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/engine_qemu.h"
#include "sandboxd/egress.h"
#include "sandboxd/events.h"
#include "sandboxd/exec.h"
#include "sandboxd/gateway.h"
#include "sandboxd/log.h"
#include "sandboxd/monitor.h"
#include "sandboxd/node.h"
#include "sandboxd/audit.h"
#include "sandboxd/portpool.h"
#include "sandboxd/cells.h"
#include "sandboxd/privacy.h"
#include "sandboxd/runtime.h"
#include "sandboxd/scripts.h"
#include "sandboxd/secrets.h"
#include "sandboxd/secrets_ca.h"
#include "sandboxd/quota.h"
#include "sandboxd/hub.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/pool.h"
#include "sandboxd/webhook.h"
#include "sandboxd/wsquota.h"

/* A destroyed session's runner socket and directory go with it; any other
 * failure keeps them for the next container of the session. */
static void drop_runner(const char *user, const char *session, const char *container_id, const char *cause,
                        void *userdata)
{
        if (strcmp(cause, "destroyed") == 0)
                hub_drop(userdata, user, session);
}

/* The gateway follows the port block: it stops serving a session whose
 * block was released (destroyed, idle or TTL expiry, the ratchet, the fair
 * share's eviction); a
 * container that died keeps its listeners for its successor. */
static void drop_gateway(const char *user, const char *session, const char *container_id, const char *cause,
                         void *userdata)
{
        if (strcmp(cause, "destroyed") == 0 || strcmp(cause, "idle_expired") == 0 ||
            strcmp(cause, "ttl_expired") == 0 || strcmp(cause, "privacy_ratchet") == 0 || strcmp(cause, "evicted") == 0)
                gateway_drop(userdata, user, session);
}

static bool gateway_private(const char *user, const char *session, void *userdata)
{
        return privacy_is_private(userdata, user, session);
}

/* A runner that broke the protocol or stopped answering: its container
 * counts as failed, and the next request recreates it. */
static void runner_lost(const char *user, const char *session, const char *cause, void *userdata)
{
        struct session_manager *m = userdata;
        struct session_info info;

        if (session_get_info(m, user, session, &info) < 0)
                return;
        if (info.container_id[0])
                (void)session_mark_failed(m, user, session, info.container_id, cause);
        session_info_done(&info);
}

/* The fair share of limits.sessions stops no session whose work goes on in
 * the background: a running execution (adopted ones included), a running
 * cell, or a service that is starting, running or stopping. */
static bool session_busy(const char *user, const char *session, void *ud)
{
        struct daemon *d = ud;
        struct store_service *rows = NULL;
        size_t n = 0;

        if (exec_running_count(d->exec, user, session) > 0 || cells_session_busy(d->cells, user, session))
                return true;
        if (store_service_list(d->store, user, session, true, &rows, &n) < 0)
                return true; /* unknown: not stopped */
        free(rows);
        return n > 0;
}

/* A host client reached a published port of the session: a paused one is
 * resumed in the background (the gateway's thread must not block), well
 * within the 30 s its forward waits for the runner. */
static void gateway_wake(const char *user, const char *session, void *ud)
{
        session_resume_async(ud, user, session);
}

/* What a freeze would stop mid-way: an execution or a cell running. A
 * service is frozen with its session and thaws with it. */
static bool session_pause_blocked(const char *user, const char *session, void *ud)
{
        struct daemon *d = ud;
        return exec_running_count(d->exec, user, session) > 0 || cells_session_busy(d->cells, user, session);
}

static size_t live_sessions(void *ud)
{
        size_t counts[SESSION_STATE_COUNT] = {0};
        session_counts(ud, counts);
        return counts[SESSION_CREATING] + counts[SESSION_RUNNING] + counts[SESSION_PAUSED];
}

/* ---- the node link (node.h) ---- */

static int session_epoch(const char *user, const char *session, bool bump, uint64_t *ret, void *userdata)
{
        return bump ? store_epoch_bump(userdata, user, session, sbx_wall_ms(), ret)
                    : store_epoch_get(userdata, user, session, ret);
}

static void node_runner(void *ud, const char *user, const char *session, int fd)
{
        struct daemon *d = ud;
        (void)hub_attach(d->runner, user, session, fd);
}

/* A microVM's runner channel (engine_qemu.h): the daemon's connection to the VM's channel
 * socket. A VM adopted after a restart may come before its session's channel is listed
 * (reconciliation runs before adopt_runners): hub_adopt lists it first. */
static int vm_runner_attach(void *ud, const char *user, const char *session, int fd)
{
        struct daemon *d = ud;
        (void)hub_adopt(d->runner, user, session);
        return hub_attach(d->runner, user, session, fd);
}

static bool vm_runner_wait(void *ud, const char *user, const char *session, int timeout_ms)
{
        struct daemon *d = ud;
        return hub_wait(d->runner, user, session, timeout_ms);
}

/* A stream a microVM's runner opened on its net port: the session's egress.sock or fwd.sock,
 * as a node agent's (the guest's runner alone can open the port, so the peer is the runner). */
static void vm_net_attach(void *ud, const char *user, const char *session, int kind, int fd)
{
        struct daemon *d = ud;
        gateway_attach(d->gateway, user, session, kind == ENGINE_QEMU_NET_EGRESS ? NODE_STREAM_EGRESS : NODE_STREAM_FWD,
                       fd);
}

/* Connections of a VM's net port reset, never carried (engine_qemu_runner.dropped): an event
 * and a log line, so no connection goes silently (issue 38). */
static void vm_net_dropped(void *ud, const char *user, const char *session, size_t count, const char *cause)
{
        cJSON *detail = cJSON_CreateObject();
        char *js;

        (void)ud;
        cJSON_AddNumberToObject(detail, "count", (double)count);
        cJSON_AddStringToObject(detail, "cause", cause);
        js = cJSON_PrintUnformatted(detail);
        cJSON_Delete(detail);
        events_emit(EVENT_SESSION_CONNECTIONS_DROPPED, user, session, js);
        free(js);
        log_ctx(LOG_LEVEL_INFO, user, session, NULL, "microvm: %zu connections through the net port reset (%s)", count,
                cause);
}

static void node_gateway(void *ud, const char *user, const char *session, int kind, int fd)
{
        struct daemon *d = ud;
        gateway_attach(d->gateway, user, session, kind, fd);
}

static int gateway_on_node(const char *user, const char *session, unsigned flags, void *userdata, struct sbx_error *err)
{
        return node_server_gateway(userdata, user, session, flags, err);
}

static int gateway_publish_on_node(const char *user, const char *session, const int *ports, size_t n, void *userdata,
                                   struct sbx_error *err)
{
        return node_server_publish(userdata, user, session, ports, n, err);
}

static void node_published(void *ud, const char *user, const char *session, int port, int fd)
{
        struct daemon *d = ud;
        gateway_attach_published(d->gateway, user, session, port, fd);
}

static int egress_connect_on_node(const char *user, const char *session, const struct sockaddr *sa, socklen_t len,
                                  void *userdata, int *ret_fd)
{
        return node_server_connect(userdata, user, session, sa, len, ret_fd);
}

static void node_suspend(void *ud, const char *user, const char *session)
{
        struct daemon *d = ud;
        hub_suspend(d->runner, user, session);
}

static void adopt_runners(struct daemon *d, const char *node);

/* A claim cut short renames its runner directory on its slot's node: wait
 * for the nodes the pending claims are on, all within node.fence (a node
 * away longer would have its sessions fenced: its claims are given up). */
static void wait_claim_nodes(struct daemon *d)
{
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        size_t n = 0;
        int64_t until = sbx_now_ms() + d->cfg.node_fence_ms;

        if (store_pool_list(d->store, &rows, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                char node[NODE_NAME_MAX + 1] = "";
                if (strcmp(rows[i].state, "claiming") != 0)
                        continue;
                (void)store_node_get(d->store, POOL_USER, rows[i].slot, node, sizeof(node));
                if (!node[0]) /* the claim moved it already (the target's), or a slot of before 0031 */
                        (void)store_node_get(d->store, rows[i].user_id, rows[i].session_id, node, sizeof(node));
                int64_t left = until - sbx_now_ms();
                if (!node_server_wait_node(d->node, node, left > 0 ? (int)left : 0))
                        log_warn("pool: node %s not connected within %d ms: the claim of slot %s is given up",
                                 node[0] ? node : "(any)", d->cfg.node_fence_ms, rows[i].slot);
        }
}

/* A node agent (re)connected: it is told its own sessions again, and serves
 * the gateway's sockets of each running one again. */
static void node_up(void *ud, const char *node, bool ready)
{
        struct daemon *d = ud;
        hub_reopen(d->runner, node);
        if (ready) /* else daemon_open is still on its way, and adopts them itself at its end */
                adopt_runners(d, node);
}

static void node_fence(void *ud, const char *node)
{
        struct daemon *d = ud;
        size_t n = hub_fence(d->runner, node); /* only the sessions placed on it */
        cJSON *detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "node", node);
        cJSON_AddNumberToObject(detail, "sessions", (double)n);
        audit_record_json(d->store, "node", NULL, NULL, "node_fenced", detail);
}

static int node_epoch(void *ud, const char *user, const char *session, uint64_t *ret)
{
        struct daemon *d = ud;
        return store_epoch_get(d->store, user, session, ret);
}

static void node_refused(void *ud, const char *node, const char *user, const char *session, uint64_t presented,
                         uint64_t current, const char *placed)
{
        struct daemon *d = ud;
        cJSON *detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "node", node);
        cJSON_AddNumberToObject(detail, "presented_epoch", (double)presented);
        cJSON_AddNumberToObject(detail, "epoch", (double)current);
        if (placed)
                cJSON_AddStringToObject(detail, "placed_on", placed);
        audit_record_json(d->store, "node", user, session, placed ? "node_placement_refused" : "node_epoch_refused",
                          detail);
}

static int node_of(void *ud, const char *user, const char *session, char ret[NODE_NAME_MAX + 1])
{
        struct daemon *d = ud;
        return store_node_get(d->store, user, session, ret, NODE_NAME_MAX + 1);
}

static int node_place(void *ud, const char *user, const char *session, const char *node)
{
        struct daemon *d = ud;
        return store_node_set(d->store, user, session, node, sbx_wall_ms());
}

static size_t node_placed(void *ud, const char *node)
{
        struct daemon *d = ud;
        uint64_t n = 0;
        return store_node_count(d->store, node, &n) == 0 ? (size_t)n : 0;
}

/* The same refusal in this process: the runner of a container the session
 * left (a lost Kubernetes node's Pod runs on) dialled its directory. */
static void local_refused(const char *user, const char *session, uint64_t presented, uint64_t current, void *ud)
{
        cJSON *detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "node", "local");
        cJSON_AddNumberToObject(detail, "presented_epoch", (double)presented);
        cJSON_AddNumberToObject(detail, "epoch", (double)current);
        audit_record_json(ud, "node", user, session, "node_epoch_refused", detail);
}

static const struct node_server_hooks node_hooks = {
        .runner = node_runner,
        .gateway = node_gateway,
        .suspend = node_suspend,
        .up = node_up,
        .fence = node_fence,
        .epoch = node_epoch,
        .refused = node_refused,
        .published = node_published,
        .node_of = node_of,
        .place = node_place,
        .placed = node_placed,
};

/* After a restart: listen again for every running (or paused: it
 * reconnects once thawed) session's runner, and
 * serve its channels and port block again. */
static void adopt_runners(struct daemon *d, const char *node)
{
        struct session_ref *refs = NULL;
        size_t n = 0, adopted = 0;
        int per = portpool_per_session(d->ports);
        _cleanup_free_ int *ports = per > 0 ? calloc((size_t)per, sizeof(int)) : NULL;

        if (session_running(d->sessions, &refs, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                const char *user = refs[i].user, *session = refs[i].session;
                char dir[SBX_PATH_MAX], placed[NODE_NAME_MAX + 1] = "";
                struct session_info info;
                struct sbx_error e = {0};
                bool has_dir;
                size_t n_ports = 0;

                /* a node that (re)connected: its own sessions (and any placed nowhere yet); at the
                 * start, those whose node is here (the others when theirs connects: node_up) */
                if (d->node && store_node_get(d->store, user, session, placed, sizeof(placed)) == 0 && placed[0] &&
                    (node ? strcmp(placed, node) != 0 : !node_server_node_connected(d->node, placed)))
                        continue;
                if (hub_adopt(d->runner, user, session) == 0)
                        adopted++;
                has_dir = hub_dir(d->runner, user, session, dir) == 0;
                if (ports && portpool_lookup(d->ports, user, session, ports) == 0)
                        n_ports = (size_t)per;
                bool sealed = false;
                if (session_get_info(d->sessions, user, session, &info) == 0) {
                        sealed = strcmp(info.network_mode, "none") == 0;
                        session_info_done(&info);
                }
                if (gateway_open(d->gateway, user, session, has_dir ? dir : NULL, ports, n_ports, sealed, &e) < 0)
                        log_ctx(LOG_LEVEL_WARN, user, session, NULL, "gateway: %s", e.msg);
        }
        free(refs);
        if (adopted)
                log_info("listening again for %zu runners", adopted);
}

/* The quotas and the warm pool, as the session module asks for them
 * (session.h's narrow interfaces). */
static int64_t user_session_cap(const char *user, void *userdata)
{
        struct daemon *d = userdata;
        struct quota_limits lim;

        quota_limits_get(d->quota, &d->cfg, user, &lim); /* q->lock is a leaf */
        return lim.sessions;
}

static int64_t user_paused_cap(const char *user, void *userdata)
{
        struct daemon *d = userdata;
        struct quota_limits lim;

        quota_limits_get(d->quota, &d->cfg, user, &lim);
        return lim.paused_sessions;
}

static bool warm_applies(void *pool, const char *user, const char *session, const char *network)
{
        return pool_applies(pool, user, session, network);
}

static int warm_claim(void *pool, const char *user, const char *session, const char *network, const char *image,
                      struct session_warm_claim *ret, struct sbx_error *err)
{
        struct pool_claim c = {0};
        int r = pool_claim(pool, user, session, network, image, &c, err);

        if (r < 0)
                return r;
        memcpy(ret->container_id, c.container_id, sizeof(ret->container_id));
        sbx_strlcpy(ret->image, c.image, sizeof(ret->image));
        sbx_strlcpy(ret->workspace, c.workspace, sizeof(ret->workspace));
        return 0;
}

static void warm_make_room(void *pool)
{
        pool_make_room(pool);
}

static const struct session_pool_ops warm_pool_ops = {.applies = warm_applies,
                                                      .claim = warm_claim,
                                                      .make_room = warm_make_room};

/* The egress proxy's blocked decisions, as events (the proxy never calls the core). */
/* Secrets at the egress proxy (issue 37): the session's attachments with
 * their values opened, and its CA (secrets_ca.h). On the proxy's loop
 * thread: store reads only. */
static int egress_attached(const char *user, const char *session, struct egress_secret **ret, size_t *ret_n, void *ud)
{
        struct daemon *d = ud;
        return secrets_egress_attached(d->secrets, d->store, user, session, ret, ret_n);
}

static int egress_session_ca(const char *user, const char *session, char **ret_cert, char **ret_key, void *ud)
{
        struct daemon *d = ud;
        return secrets_ca_get(d->secrets, d->store, user, session, ret_cert, ret_key);
}

static void egress_blocked(const char *user, const char *session, const char *host, int port, const char *reason,
                           void *userdata)
{
        (void)userdata;
        events_egress_blocked(user, session, host, port, reason);
}

/* The egress proxy's question about an execution's narrowing: the runner
 * hub's table of the executions this daemon started (issue 37 item 3). */
static bool egress_narrowing(const char *user, const char *session, unsigned int from, uint32_t tag,
                             struct egress_net *ret, char ret_id[40], void *userdata)
{
        return hub_narrowing(userdata, user, session, from, tag, ret, ret_id);
}

/* privacy_mark's second step: the session's tunnels, closed before it returns. */
static void close_tunnels(const char *user, const char *session, void *userdata)
{
        egress_close_session(userdata, user, session);
}

/* Descriptors: a session holds DAEMON_FDS_PER_SESSION in the daemon (its
 * runner, control, egress and forward sockets) plus a listener per port of
 * its block, and each connection to a front holds one. Take what the hard
 * limit allows, and say so when even that is short of the configuration. */
#define DAEMON_FDS_PER_SESSION 7
#define DAEMON_FDS_SPARE 1024
#define DAEMON_MMAP_THRESHOLD (256 * 1024) /* blocks from this size up are mapped (glibc) */

static void raise_nofile(const struct sbx_config *cfg)
{
        int64_t need = (int64_t)cfg->max_sessions * (DAEMON_FDS_PER_SESSION + cfg->ports_per_session) +
                       2 * (int64_t)config_max_connections(cfg) + DAEMON_FDS_SPARE;
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        if (rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
                (void)getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && (int64_t)rl.rlim_cur < need)
                log_warn(
                        "the descriptor limit (RLIMIT_NOFILE) is %llu, short of the %lld that limits.sessions %d with "
                        "%d ports each and connections.max %d may hold: raise LimitNOFILE (ulimit -n)",
                        (unsigned long long)rl.rlim_cur, (long long)need, cfg->max_sessions, cfg->ports_per_session,
                        config_max_connections(cfg));
}

int daemon_open(const struct sbx_config *cfg, const struct daemon_options *opts, struct daemon **ret,
                struct sbx_error *err)
{
        static const struct daemon_options no_opts = {0};
        struct daemon *d = calloc(1, sizeof(*d));
        char db[SBX_PATH_MAX + 32];
        struct engine_version ver;
        int r;

        if (!d)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (!opts)
                opts = &no_opts;
        d->cfg = *cfg;
        d->started_at = sbx_wall_ms();
        raise_nofile(&d->cfg);
#ifdef __GLIBC__
        /* A large block (a 32 MiB bridge line, its parsed value, a page of a
         * spool) is mapped and unmapped, never kept: glibc's default raises
         * its mmap threshold with each large free, up to 32 MiB, after which
         * such blocks come from a thread's heap and stay resident when
         * freed (issue 34: 30 MB kept after one large cell output). A fixed
         * threshold turns that off. */
        (void)mallopt(M_MMAP_THRESHOLD, DAEMON_MMAP_THRESHOLD);
#endif

        r = wsquota_check_config(&d->cfg, err);
        if (r == 0)
                r = sessuid_check_host(&d->cfg, err); /* no host account may share a session's uid */
        if (r < 0)
                goto fail;
        if (mkdir(d->cfg.data_dir, 0711) < 0 && errno != EEXIST) {
                r = sbx_error_set(err, -errno, 0, "cannot create data_dir %s: %m", d->cfg.data_dir);
                goto fail;
        }
        /* a key file that is named but unsafe stops the start: never a silent fallback (issue 37) */
        if (d->cfg.secrets_key_file[0]) {
                r = secrets_open(d->cfg.secrets_key_file, d->cfg.data_dir, &d->secrets, err);
                if (r < 0)
                        goto fail;
        }
        snprintf(db, sizeof(db), "%s/sandboxd.db", d->cfg.data_dir);
        r = store_open(db, &d->store, err);
        if (r < 0) {
                sbx_error_prefix(err, "opening the store %s", db);
                goto fail;
        }
        /* claims whose request died with the previous daemon answer nothing;
         * keys past their window go (each user's also go on their next claim) */
        (void)store_idem_reset_pending(d->store);
        (void)store_idem_prune(d->store, sbx_wall_ms(), false);
        /* the event log before every engine that emits into it; its webhook reads the log */
        r = webhook_start(&d->cfg, d->store, &d->webhook, err);
        if (r == 0)
                r = events_open(&d->cfg, d->store, d->webhook ? webhook_notify : NULL, d->webhook, &d->events, err);
        if (r < 0)
                goto fail;

        r = engine_new_from_config(&d->cfg, &d->engine, err);
        if (r == 0)
                r = engine_connect(d->engine, err);
        if (r < 0)
                goto fail;
        if (engine_version(d->engine, &ver, NULL) == 0)
                log_info("%s engine %s, API %s", ver.engine, ver.version, ver.api_version);

        r = portpool_new(d->store, d->cfg.port_range_lo, d->cfg.port_range_hi, d->cfg.ports_per_session, &d->ports,
                         err);
        if (r < 0)
                goto fail;
        r = quota_new(d->store, &d->quota, err);
        if (r < 0)
                goto fail;
        /* the hub and its node link before the pool's recovery, which re-keys runner directories */
        r = hub_new(&d->cfg, &d->runner, err);
        if (r < 0)
                goto fail;
        hub_set_epoch_fn(d->runner, session_epoch, d->store);
        hub_set_refused_fn(d->runner, local_refused, d->store);
        engine_qemu_set_runner(d->engine, &(struct engine_qemu_runner){.attach = vm_runner_attach,
                                                                       .wait = vm_runner_wait,
                                                                       .net = vm_net_attach,
                                                                       .dropped = vm_net_dropped,
                                                                       .ud = d});
        if (d->cfg.node_listen[0]) {
                r = node_server_new(&d->cfg, &node_hooks, d, &d->node, err);
                if (r < 0)
                        goto fail;
                hub_set_node(d->runner, &node_server_ops, d->node);
                wait_claim_nodes(d);
        }
        /* claims a previous daemon began are finished before the session rows load */
        r = pool_recover_claims(&d->cfg, d->store, d->engine, d->runner, err);
        if (r < 0)
                goto fail;
        r = session_manager_new(&d->cfg, d->engine, d->store, d->ports, opts->extra_labels, &d->sessions, err);
        if (r < 0)
                goto fail;
        session_set_user_cap(d->sessions, user_session_cap, d);
        session_set_paused_cap(d->sessions, user_paused_cap, d);
        /* over a node link the node says, once it is connected (not waited for here) */
        if (!d->node && !hub_binary(d->runner))
                log_warn("the runner binary is missing or not root-owned: containers run without it (docker exec)");
        session_set_hub(d->sessions, d->runner);
        r = pool_new(&d->cfg, d->engine, d->store, d->runner, opts->extra_labels, &d->pool, err);
        if (r < 0)
                goto fail;
        pool_set_load_fn(d->pool, live_sessions, d->sessions);
        session_set_pool(d->sessions, &warm_pool_ops, d->pool);
        (void)session_register_failure_handler(d->sessions, drop_runner, d->runner);
        hub_set_lost_handler(d->runner, runner_lost, d->sessions);
        r = privacy_new(d->store, d->sessions, &d->privacy, err);
        if (r < 0)
                goto fail;
        r = egress_new(&d->cfg, d->store, &d->egress, err);
        if (r == 0)
                privacy_set_tunnel_closer(d->privacy, close_tunnels, d->egress);
        if (r == 0)
                egress_set_blocked_hook(d->egress, egress_blocked, NULL);
        if (r == 0)
                egress_set_narrow_hook(d->egress, egress_narrowing, d->runner);
        if (r == 0) {
                static const struct egress_secrets_ops sec_ops = {.attached = egress_attached, .ca = egress_session_ca};
                egress_set_secrets_ops(d->egress, &sec_ops, d);
        }
        if (r == 0)
                r = gateway_new(&d->cfg, d->egress, &d->gateway, err);
        if (r < 0)
                goto fail;
        gateway_set_private_check(d->gateway, gateway_private, d->privacy);
        gateway_set_wake(d->gateway, gateway_wake, d->sessions);
        if (d->node) { /* the sockets, the published ports and egress's connects are the node's */
                gateway_set_node(d->gateway, gateway_on_node, d->node);
                gateway_set_node_publish(d->gateway, gateway_publish_on_node, d->node);
                egress_set_connect_hook(d->egress, egress_connect_on_node, d->node);
        }
        session_set_gateway(d->sessions, d->gateway);
        (void)session_register_failure_handler(d->sessions, drop_gateway, d->gateway);
        r = runtime_new(&d->cfg, d->engine, d->store, &d->runtime, err);
        if (r < 0)
                goto fail;
        runtime_attach(d->runtime, d->sessions);
        r = exec_registry_new(&d->cfg, d->engine, d->store, d->sessions, &d->exec, err);
        if (r < 0)
                goto fail;
        exec_set_quota(d->exec, d->quota);
        exec_registry_set_runner(d->exec, d->runner);
        exec_registry_set_secrets(d->exec, d->secrets);
        d->files = (struct files_ctx){.cfg = &d->cfg, .sessions = d->sessions, .runner = d->runner, .exec = d->exec};
        d->launch = (struct launch_ctx){.cfg = &d->cfg,
                                        .privacy = d->privacy,
                                        .exec = d->exec,
                                        .env = {d->sessions, d->store, d->secrets, d->runner, d->egress}};
        d->metrics_ctx = (struct metrics_ctx){.started_at = d->started_at,
                                              .sessions = d->sessions,
                                              .exec = d->exec,
                                              .ports = d->ports,
                                              .egress = d->egress,
                                              .pool = d->pool,
                                              .engine = d->engine,
                                              .store = d->store,
                                              .cfg = &d->cfg,
                                              .node = d->node};
        r = scripts_new(&d->cfg, d->store, d->quota, &d->scripts);
        if (r < 0) {
                sbx_error_set(err, r, 0, "out of memory");
                goto fail;
        }
        (void)exec_registry_recover(d->exec, NULL);
        r = cells_new(&d->cfg, d->store, d->sessions, d->runner, &d->cells, err);
        if (r < 0)
                goto fail;
        pool_set_slot_fn(d->pool, cells_pool_slot, d->cells); /* a slot starts its python context ahead */
        d->snapshots = (struct snapshot_ctx){.cfg = &d->cfg,
                                             .engine = d->engine,
                                             .store = d->store,
                                             .sessions = d->sessions,
                                             .privacy = d->privacy,
                                             .cells = d->cells};
        /* before reconciling, so services of containers lost meanwhile are cleared */
        r = service_manager_new(&d->cfg, d->engine, d->store, d->sessions, d->exec, &d->services, err);
        if (r < 0)
                goto fail;
        service_set_quota(d->services, d->quota);
        service_set_runner(d->services, d->runner);
        session_set_busy_check(d->sessions, session_busy, d);
        /* a snapshot cut short by the last stop: its copy goes, the session it froze thaws */
        (void)snapshot_recover(&d->snapshots);
        session_set_pause_check(d->sessions, session_pause_blocked, d);
        r = pool_reconcile(d->pool, err);
        if (r == 0)
                r = session_reconcile(d->sessions, NULL, err);
        if (r == 0)
                r = pool_start(d->pool, err);
        if (r < 0)
                goto fail;
        if (d->node) /* from here a node that (re)connects is served whole, gateway included */
                node_server_gateway_ready(d->node);
        adopt_runners(d, NULL);
        exec_registry_adopt(d->exec); /* executions the runners kept while the daemon was away */
        if (!opts->no_monitor) {
                r = monitor_start(&d->cfg, d->engine, d->sessions, &d->monitor, err);
                if (r == 0)
                        r = service_manager_start(d->services, err);
                if (r < 0)
                        goto fail;
        }
        *ret = d;
        return 0;
fail:
        daemon_close(d);
        return r;
}

void daemon_close(struct daemon *d)
{
        if (!d)
                return;
        /* The fronts first (fronts.c), so no request arrives while the engines go. */
        if (d->fronts_stop)
                d->fronts_stop(d);
        monitor_stop(d->monitor);
        if (d->sessions) {
                session_resume_async_stop(d->sessions); /* resumes use the runner hub */
                session_evictions_stop(d->sessions);    /* evictions too (their handlers) */
        }
        service_manager_free(d->services);
        pool_set_slot_fn(d->pool, NULL, NULL); /* no slot hook reaches the cells from here on */
        cells_free(d->cells);                  /* before the hub: its waiters hold runner jobs */
        exec_registry_free(d->exec);           /* its workers were the last to ask session_busy */
        if (d->sessions) {
                session_set_busy_check(d->sessions, NULL, NULL);
                session_set_pause_check(d->sessions, NULL, NULL);
        }
        scripts_free(d->scripts);
        if (d->runtime && d->sessions)
                runtime_attach(NULL, d->sessions);
        runtime_free(d->runtime);
        node_server_stop(d->node);     /* its links hand connections to the gateway and the hub */
        engine_qemu_unbind(d->engine); /* the VMs' net threads too */
        gateway_free(d->gateway);      /* its thread asks privacy and calls egress */
        egress_free(d->egress);        /* closes every tunnel, writing their rows */
        privacy_free(d->privacy);
        pool_free(d->pool);        /* its thread uses the runner hub */
        node_server_free(d->node); /* stopped above; the pool's calls to the hub reached it until here */
        hub_free(d->runner);       /* its thread calls into the sessions */
        session_manager_free(d->sessions);
        quota_free(d->quota); /* after every engine that asks it */
        portpool_free(d->ports);
        engine_free(d->engine);
        events_close(d->events); /* writes what is queued: after every engine that emits */
        webhook_stop(d->webhook);
        store_close(d->store);
        secrets_free(d->secrets);
        free(d);
}

void daemon_session_node(struct daemon *d, const char *user, const char *session, char *ret, size_t size)
{
        if (size)
                ret[0] = '\0';
        if (d->node && store_node_get(d->store, user, session, ret, size) < 0 && size)
                ret[0] = '\0';
}

int daemon_engine_version(struct daemon *d, char *ret, size_t size, struct sbx_error *err)
{
        struct engine_version v;
        int r = engine_version(d->engine, &v, err);
        if (r < 0)
                return r;
        sbx_strlcpy(ret, v.version, size);
        return 0;
}
