/* session_container.c — making a session's container: the runtime the
 * policy picks, the image (the session's choice while allowed, else the
 * config's, resolved once to its id), the session's own uid and workspace,
 * the runner, the port block and the gateway's listeners, then
 * container_create_started. container.c knows nothing of sessions; this is
 * the part that does.
 *
 * Locks: runs inside the session's transition (s->transitioning set by the
 * caller) with no lock held; m->lock is taken only for short copies of the
 * runtime policy and the resolved image id (session_internal.h). */
#include "session_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/gateway.h"
#include "sandboxd/log.h"
#include "sandboxd/portpool.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_dir.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/wsquota.h"

/* Resolve cfg->image to its id once, so every container of this daemon runs
 * the same image even if the tag moves. */
static int resolve_image(struct session_manager *m, char ret[256], struct sbx_error *err)
{
        struct engine_image_info info;
        int r;

        pthread_mutex_lock(&m->lock);
        sbx_strlcpy(ret, m->image_id, 256);
        pthread_mutex_unlock(&m->lock);
        if (ret[0])
                return 0;
        struct sbx_error e = {0};
        r = engine_image_inspect(m->engine, m->cfg->image, &info, &e);
        if (err)
                *err = e;
        if (r == -ENOENT && e.http_status == 404)
                return sbx_error_set(err, -ENOENT, 404,
                                     "image '%s' does not exist on the Docker engine; build it with "
                                     "scripts/build-images.sh",
                                     m->cfg->image);
        if (r < 0) {
                sbx_error_prefix(err, "resolving image %s", m->cfg->image);
                return r;
        }
        pthread_mutex_lock(&m->lock);
        sbx_strlcpy(m->image_id, info.id, sizeof(m->image_id));
        pthread_mutex_unlock(&m->lock);
        sbx_strlcpy(ret, info.id, 256);
        return 0;
}

/* The image of s: the one create_session chose (store_session_options),
 * while the operator still allows it, else the config's. */
static int session_image(struct session_manager *m, struct session *s, char ret[256], struct sbx_error *err)
{
        struct store_session_options o = {0};
        struct engine_image_info info;
        int r;

        if (store_session_options_get(m->store, s->user, s->id, &o) < 0 || !o.image[0] ||
            strcmp(o.image, m->cfg->image) == 0) {
                store_session_options_done(&o);
                return resolve_image(m, ret, err);
        }
        store_session_options_done(&o);
        if (!config_image_allowed(m->cfg, o.image))
                return sbx_error_set(err, -EACCES, 0, "image '%s' is no longer among the allowed images", o.image);
        r = engine_image_inspect(m->engine, o.image, &info, err);
        if (r < 0) {
                sbx_error_prefix(err, "resolving image %s", o.image);
                return r;
        }
        sbx_strlcpy(ret, info.id, 256);
        return 0;
}

/* The container is created: wait (within kubernetes.start_timeout) until the
 * engine has placed it (kube-scheduler bound the Pod), then open its session
 * directory on that node, while the node pulls and starts it. Its runner
 * retries until the node agent listens. container_params.placed. */
static int open_on_node(const char *id, void *userdata, struct sbx_error *err)
{
        struct session *s = userdata;
        struct session_manager *m = s->mgr;
        int64_t deadline = sbx_now_ms() + m->cfg->kube_start_timeout_ms;
        struct engine_container_info info;
        char dir[SBX_PATH_MAX];
        int r;

        for (int64_t pause = 50;; pause = pause < 400 ? pause * 2 : 500) {
                r = engine_inspect(m->engine, id, &info, err);
                if (r < 0)
                        return r;
                if (info.node[0])
                        break;
                if (sbx_now_ms() >= deadline)
                        return sbx_error_set(err, -ETIMEDOUT, 0, "container %.12s was placed on no node in time", id);
                sbx_sleep_ms(pause);
        }
        r = hub_prepare_on(m->runner, s->user, s->id, info.node, dir, err);
        if (r < 0)
                sbx_error_prefix(err, "opening the session on node %s", info.node);
        return r;
}

/* Remove the old container (if any) and release nothing: the port block
 * stays with the session across a recreation. Runs without locks. */
int session_make_container(struct session *s, const char *old_id, const char **network, char ret_id[65],
                           char ret_image[256], char ret_workspace[SBX_PATH_MAX], char ret_runtime[16],
                           struct sbx_error *err)
{
        struct session_manager *m = s->mgr;
        const struct sbx_config *cfg = m->cfg;
        _cleanup_free_ int *ports = NULL;
        struct container_params p = {0};
        _cleanup_(store_session_spec_done) struct store_session_spec spec = {0}; /* labels, resources (sessspec.h) */
        session_runtime_fn runtime_fn;
        void *runtime_ud;
        char claim[STORE_CLAIM_MAX];
        uid_t uid;
        int r;

        /* The runtime first: a runtime that cannot run refuses the session before anything changes. */
        pthread_mutex_lock(&m->lock);
        runtime_fn = m->runtime_fn;
        runtime_ud = m->runtime_ud;
        pthread_mutex_unlock(&m->lock);
        ret_runtime[0] = '\0';
        if (runtime_fn) {
                r = runtime_fn(s->user, ret_runtime, err, runtime_ud);
                if (r < 0)
                        return r;
        }
        bool microvm = strcmp(ret_runtime, "microvm") == 0;
        if (strcmp(ret_runtime, "runsc") == 0 || microvm)
                *network = "none"; /* gVisor sessions are sealed (runtime.c says why); a microVM has no NIC */

        if (old_id && old_id[0]) {
                r = container_remove(m->engine, old_id, err);
                if (r < 0) {
                        sbx_error_prefix(err, "removing the old container %.12s", old_id);
                        return r;
                }
                (void)store_container_removed(m->store, old_id, "replaced", sbx_wall_ms());
                /* removed, as far as its engine can tell: whatever still runs of it (a lost node's Pod)
                 * no longer serves the session */
                hub_fence_runner(m->runner, s->user, s->id);
        }
        r = session_image(m, s, ret_image, err);
        if (r < 0)
                return r;
        /* what create_session (or the first use) asked for, the same for every container of the session */
        r = store_session_spec_get(m->store, s->user, s->id, &spec);
        if (r < 0 && r != -ENOENT)
                return sbx_error_set(err, r, 0, "cannot read the session's labels and resources: %s", strerror(-r));
        /* The session's own host uid: recorded at its first container, the same for every later one. */
        r = sessuid_get_or_assign(m->store, cfg, s->user, s->id, &uid, err);
        if (r < 0)
                return r;
        if (store_uid_claim_get(m->store, s->user, s->id, claim) < 0)
                claim[0] = '\0';
        r = container_workspace_ensure(cfg, s->user, s->id, uid, ret_workspace, err);
        if (r == 0)
                r = wsquota_attach_sized(cfg, s->user, s->id, spec.disk, err);
        if (r < 0)
                return r;
        /* Without a usable runner binary the container runs the image's own
         * command and executions fall back to docker exec. */
        char runner_dir[SBX_PATH_MAX];
        /* Not under gVisor: with the runner as its main process the gVisor sandbox of Debian 12's
         * runsc dies within seconds ("shim disconnected"), so runsc sessions use docker exec. */
        const char *runner_bin = strcmp(ret_runtime, "runsc") == 0 ? NULL : hub_binary(m->runner);
        /* An engine that places containers itself (kube-scheduler) over node agents: the node is
         * known once the container is placed, so the directory is opened there afterwards and the
         * spec names it relative to whichever agent's data_dir (node.h). */
        bool on_node = runner_bin && m->engine->places && hub_remote(m->runner);
        if (on_node) {
                char hash[33];
                hub_drop(m->runner, s->user, s->id); /* an earlier container's node: its directory goes */
                if (hub_dir_key(s->user, s->id, hash) < 0)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                snprintf(runner_dir, sizeof(runner_dir), "runner/%s", hash);
        } else if (runner_bin) {
                struct sbx_error re = {0};
                if (hub_prepare(m->runner, s->user, s->id, runner_dir, &re) < 0) {
                        log_ctx(LOG_LEVEL_WARN, s->user, s->id, NULL, "no runner for this container: %s", re.msg);
                        runner_bin = NULL;
                }
        }
        /* A private session is served nothing: no listeners, no egress, and
         * its block goes back to the pool. Anyone else keeps a fixed block,
         * on which the gateway listens (no PortBindings). A port can be taken
         * by something else between the pool's probe and the gateway's bind:
         * then the next block is tried (the pool moves on). */
        bool priv = gateway_is_private(m->gateway, s->user, s->id);
        bool sealed = strcmp(*network, "none") == 0;
        /* a sealed container without a runner (gVisor, no binary) cannot be reached at all */
        /* a microVM's runner reaches the gateway over its net port (src/qemu/qemu_net.c) */
        bool no_block = priv || (sealed && !runner_bin);
        for (int attempt = 0;; attempt++) {
                struct sbx_error e = {0};

                if (no_block) {
                        (void)portpool_release(m->ports, s->user, s->id);
                } else if (cfg->ports_per_session > 0) {
                        if (!ports)
                                ports = calloc((size_t)cfg->ports_per_session, sizeof(int));
                        if (!ports)
                                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                        r = portpool_reserve_block(m->ports, s->user, s->id, ports, err);
                        if (r < 0)
                                return r;
                }
                size_t n_ports = !no_block && ports ? (size_t)cfg->ports_per_session : 0;
                r = gateway_open(m->gateway, s->user, s->id, runner_bin ? runner_dir : NULL, ports, n_ports,
                                 sealed && !priv, &e);
                if (r == -EADDRINUSE && attempt < 2) {
                        log_ctx(LOG_LEVEL_WARN, s->user, s->id, NULL, "a port was taken meanwhile, retrying: %s",
                                e.msg);
                        (void)portpool_release(m->ports, s->user, s->id);
                        continue;
                }
                if (r < 0) {
                        if (err)
                                *err = e;
                        (void)portpool_release(m->ports, s->user, s->id);
                        gateway_drop(m->gateway, s->user, s->id);
                        return r;
                }
                p.user = s->user;
                p.session = s->id;
                p.image = ret_image;
                p.network_mode = *network;
                /* the proxy variables only where something answers on the endpoint */
                p.egress_proxy = sealed && !priv && runner_bin;
                p.runtime = ret_runtime[0] ? ret_runtime : NULL;
                p.workspace = ret_workspace;
                p.workspace_claim = claim[0] ? claim : NULL; /* a pool slot's claim it took over */
                p.uid = uid;
                p.extra_labels = (const char *const *)m->extra_labels;
                p.runner_binary = runner_bin;
                p.runner_dir = runner_bin ? runner_dir : NULL;
                p.memory_bytes = spec.memory;
                p.nano_cpus = spec.nano_cpus;
                p.labels_json = spec.labels_json;
                if (on_node) {
                        p.placed = open_on_node;
                        p.placed_ud = s;
                }
                r = container_create_started(m->engine, cfg, &p, ret_id, &e);
                if (r < 0 && p.runtime && strcmp(p.runtime, "runsc") == 0)
                        sbx_error_prefix(&e, "under gVisor (runsc)");
                if (err)
                        *err = e;
                if (r == 0)
                        break;
                (void)portpool_release(m->ports, s->user, s->id);
                gateway_drop(m->gateway, s->user, s->id);
                return r;
        }
        (void)portpool_set_container(m->ports, s->user, s->id, ret_id);
        (void)store_container_add(m->store, ret_id, s->user, s->id, ret_image, *network, sbx_wall_ms());
        return 0;
}
