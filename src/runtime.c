/* runtime.c — which OCI runtime a session's containers get (runtime.h).
 *
 * runc is Docker's default. runsc is gVisor: Debian's `runsc`, registered with dockerd by
 * scripts/setup.sh (daemon.json "runtimes", reloaded with SIGHUP) with --network=none and
 * --host-uds=open. --network=none because sandbox networking fails under this Docker and
 * gVisor release here ("cannot run with network enabled in root network namespace"), and
 * a high-risk tenant is better sealed anyway; --host-uds=open so a container may connect to
 * a unix socket the daemon listens on in a bind mount. So a runsc session always has network
 * "none" and no published ports. It also runs without the in-container runner (session_container.c):
 * with the runner as main process this runsc's sandbox died within seconds in 3 of 4 test
 * runs ("shim disconnected"), without it 7 of 7 runs passed; executions use docker exec.
 *
 * microvm is a QEMU microVM per session (engine_qemu.h, docs/microvm.md), offered only when
 * scripts/build-vm.sh's guest and QEMU are installed; its sessions are sealed too.
 *
 * Locking: rt->lock guards runsc_ok, a cache of dockerd listing runsc (a positive answer is
 * kept; a negative one is asked again at the next container creation, after the operator may
 * have registered it). No lock is held across the Docker or store calls. */
#include "sandboxd/runtime.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/engine.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"

struct runtime {
        const struct sbx_config *cfg;
        struct engine *engine;
        struct store *store;
        pthread_mutex_t lock;
        bool runsc_ok;
};

bool runtime_name_valid(const char *name)
{
        return name && (!strcmp(name, "runc") || !strcmp(name, "runsc") || !strcmp(name, "microvm"));
}

int runtime_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct runtime **ret,
                struct sbx_error *err)
{
        struct runtime *rt = calloc(1, sizeof(*rt));

        if (!rt)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        rt->cfg = cfg;
        rt->engine = d;
        rt->store = st;
        pthread_mutex_init(&rt->lock, NULL);
        *ret = rt;
        return 0;
}

void runtime_free(struct runtime *rt)
{
        if (!rt)
                return;
        pthread_mutex_destroy(&rt->lock);
        free(rt);
}

int runtime_for_user(struct runtime *rt, const char *user, char ret[RUNTIME_NAME_MAX],
                     char ret_override[RUNTIME_NAME_MAX])
{
        char over[16];
        int r = store_user_runtime_get(rt->store, user, over);

        if (r < 0)
                return r;
        sbx_strlcpy(ret, over[0] ? over : rt->cfg->runtime, RUNTIME_NAME_MAX);
        if (ret_override)
                sbx_strlcpy(ret_override, over, RUNTIME_NAME_MAX);
        return 0;
}

int runtime_check(struct runtime *rt, const char *name, struct sbx_error *err)
{
        bool ok;
        int r;

        if (!runtime_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "unknown runtime '%s' (runc, runsc or microvm)",
                                     name ? name : "");
        if (strcmp(name, "runc") == 0)
                return 0;
        if (strcmp(name, "microvm") == 0) {
                /* the router answers itself (engine_select.c): no Docker call */
                if (engine_has_runtime(rt->engine, "microvm", &ok, err) < 0 || !ok)
                        return sbx_error_set(err, -ENOTSUP, 0,
                                             "runtime microvm is unavailable: it needs qemu-system-x86 and "
                                             "the guest scripts/build-vm.sh builds (docs/microvm.md)");
                return 0;
        }
        pthread_mutex_lock(&rt->lock);
        ok = rt->runsc_ok;
        pthread_mutex_unlock(&rt->lock);
        if (ok)
                return 0;
        r = engine_has_runtime(rt->engine, "runsc", &ok, err);
        if (r < 0) {
                sbx_error_prefix(err, "asking Docker for its runtimes");
                return r;
        }
        if (!ok)
                return sbx_error_set(err, -ENOTSUP, 0,
                                     "runtime runsc (gVisor) is not registered with dockerd: install Debian's "
                                     "runsc and register it (scripts/setup.sh does both)");
        pthread_mutex_lock(&rt->lock);
        rt->runsc_ok = true;
        pthread_mutex_unlock(&rt->lock);
        return 0;
}

int runtime_set_user(struct runtime *rt, const char *user, const char *name, struct sbx_error *err)
{
        int r;

        if (name && strcmp(name, "default") == 0)
                name = NULL;
        if (name && !runtime_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "runtime must be runc, runsc, microvm or default");
        if (!session_id_valid(user))
                return sbx_error_set(err, -EINVAL, 0, "user must be 1-64 characters of [A-Za-z0-9_.-]");
        r = store_user_runtime_set(rt->store, user, name, sbx_wall_ms());
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot store the runtime of %s: %s", user, strerror(-r));
        return 0;
}

static int session_policy(const char *user, char ret[16], struct sbx_error *err, void *ud)
{
        struct runtime *rt = ud;
        int r = runtime_for_user(rt, user, ret, NULL);

        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot read the runtime policy of %s: %s", user, strerror(-r));
        return runtime_check(rt, ret, err);
}

void runtime_attach(struct runtime *rt, struct session_manager *sm)
{
        session_set_runtime_policy(sm, rt ? session_policy : NULL, rt);
}
