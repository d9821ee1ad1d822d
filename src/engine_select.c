/* engine_select.c — the one place that knows every engine: the engine the
 * config names (engine.h, engine_new_from_config). Apart from engine.c, the
 * seam's shared part, so that the engines sit between the two and the seam
 * knows none of them.
 *
 * Where QEMU and scripts/build-vm.sh's guest (ENGINE_QEMU_GUEST_DIR) are
 * installed, the Docker engine is wrapped in a router: a spec
 * whose runtime_class is "microvm" is created by the qemu engine
 * (engine_qemu.h), and every later call goes to the engine whose id it is
 * (a VM's id has its own prefix); everything else, and every call without
 * an id (events, networks, images, the exec fallback's streams), is
 * Docker's; the memory ops (pause to disk, a memory capture, a boot from
 * one: ENGINE_CAP_MEMORY_CAPTURE) are the VMs'. So microVM sessions and
 * Docker sessions share one daemon, and callers still see one engine. No state beyond the two engines, no locks. */
#include "sandboxd/engine.h"

#include <stdlib.h>
#include <string.h>

#include "sandboxd/config.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/engine_kubernetes.h"
#include "sandboxd/engine_qemu.h"
#include "sandboxd/log.h"

struct router {
        struct engine *docker, *vm;
        struct engine_ops ops;
};

static struct router *R(struct engine *e)
{
        return e->priv;
}

static struct engine *by_id(struct engine *e, const char *id)
{
        return engine_qemu_id(id) ? R(e)->vm : R(e)->docker;
}

static void r_free(struct engine *e)
{
        engine_free(R(e)->docker);
        engine_free(R(e)->vm);
        free(R(e));
        free(e);
}

static int r_connect(struct engine *e, struct sbx_error *err)
{
        return engine_connect(R(e)->docker, err);
}

static int r_version(struct engine *e, struct engine_version *ret, struct sbx_error *err)
{
        return engine_version(R(e)->docker, ret, err);
}

static uint64_t r_api_errors(struct engine *e)
{
        return engine_api_errors(R(e)->docker);
}

static int r_image_inspect(struct engine *e, const char *image, struct engine_image_info *ret, struct sbx_error *err)
{
        return engine_image_inspect(R(e)->docker, image, ret, err);
}

static int r_has_runtime(struct engine *e, const char *name, bool *ret, struct sbx_error *err)
{
        if (name && strcmp(name, ENGINE_QEMU_RUNTIME) == 0)
                return engine_has_runtime(R(e)->vm, name, ret, err);
        return engine_has_runtime(R(e)->docker, name, ret, err);
}

static int r_create(struct engine *e, const struct engine_spec *spec, char ret_id[ENGINE_ID_STR_MAX],
                    struct sbx_error *err)
{
        bool vm = spec->runtime_class && strcmp(spec->runtime_class, ENGINE_QEMU_RUNTIME) == 0;
        return engine_create(vm ? R(e)->vm : R(e)->docker, spec, ret_id, err);
}

static int r_start(struct engine *e, const char *id, struct sbx_error *err)
{
        return engine_start(by_id(e, id), id, err);
}

static int r_inspect(struct engine *e, const char *id, struct engine_container_info *ret, struct sbx_error *err)
{
        return engine_inspect(by_id(e, id), id, ret, err);
}

static int r_stop(struct engine *e, const char *id, int timeout_s, struct sbx_error *err)
{
        return engine_stop(by_id(e, id), id, timeout_s, err);
}

static int r_remove(struct engine *e, const char *id, struct sbx_error *err)
{
        return engine_remove(by_id(e, id), id, err);
}

static int r_list(struct engine *e, const char *const *label_filters, bool all,
                  struct engine_container_summary **ret_list, size_t *ret_n, struct sbx_error *err)
{
        struct engine_container_summary *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        int r = engine_list(R(e)->docker, label_filters, all, &a, &na, err);

        if (r < 0)
                return r;
        r = engine_list(R(e)->vm, label_filters, all, &b, &nb, err);
        if (r < 0) {
                free(a);
                return r;
        }
        if (nb > 0) {
                struct engine_container_summary *p = realloc(a, (na + nb) * sizeof(*a));
                if (!p) {
                        free(a);
                        free(b);
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                }
                memcpy(p + na, b, nb * sizeof(*b));
                a = p;
        }
        free(b);
        *ret_list = a;
        *ret_n = na + nb;
        return 0;
}

static int r_logs(struct engine *e, const char *id, int tail_lines, char **ret_text, struct sbx_error *err)
{
        return engine_logs(by_id(e, id), id, tail_lines, ret_text, err);
}

static int r_stats(struct engine *e, const char *id, struct engine_stats *ret, struct sbx_error *err)
{
        return engine_stats(by_id(e, id), id, ret, err);
}

static int r_pause(struct engine *e, const char *id, struct sbx_error *err)
{
        return engine_pause(by_id(e, id), id, err);
}

static int r_unpause(struct engine *e, const char *id, struct sbx_error *err)
{
        return engine_unpause(by_id(e, id), id, err);
}

/* The memory ops: a VM's id goes to the qemu engine, a container's to Docker, which has none
 * (-EOPNOTSUPP); a boot from a capture makes a VM, so it is the qemu engine's. */
static int r_pause_to_disk(struct engine *e, const char *id, struct sbx_error *err)
{
        return engine_pause_to_disk(by_id(e, id), id, err);
}

static int r_memory_capture(struct engine *e, const char *id, int dirfd, int64_t room, int64_t *ret_bytes,
                            struct sbx_error *err)
{
        return engine_memory_capture(by_id(e, id), id, dirfd, room, ret_bytes, err);
}

static int r_memory_boot(struct engine *e, const char *user, const char *session, const char *dir,
                         struct sbx_error *err)
{
        return engine_memory_boot(R(e)->vm, user, session, dir, err);
}

static void r_memory_boot_cancel(struct engine *e, const char *user, const char *session)
{
        engine_memory_boot_cancel(R(e)->vm, user, session);
}

static int r_events_follow(struct engine *e, const char *const *label_filters, const char *const *actions,
                           engine_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                           struct sbx_error *err)
{
        return engine_events_follow(R(e)->docker, label_filters, actions, cb, userdata, stop, reconnect_limit_ms, err);
}

static int r_network_ensure(struct engine *e, const char *name, const struct engine_label *labels, size_t n_labels,
                            struct sbx_error *err)
{
        return engine_network_ensure(R(e)->docker, name, labels, n_labels, err);
}

static int r_network_list(struct engine *e, const char *const *label_filters, char (**ret_names)[128], size_t *ret_n,
                          struct sbx_error *err)
{
        return engine_network_list(R(e)->docker, label_filters, ret_names, ret_n, err);
}

static int r_network_remove(struct engine *e, const char *name, struct sbx_error *err)
{
        return engine_network_remove(R(e)->docker, name, err);
}

static int r_workspace_drop(struct engine *e, const char *instance, const char *user, const char *session,
                            const char *claim, struct sbx_error *err)
{
        int r = engine_workspace_drop(R(e)->vm, instance, user, session, claim, err);
        return r < 0 ? r : engine_workspace_drop(R(e)->docker, instance, user, session, claim, err);
}

static int r_fallback_create(struct engine *e, const char *container_id, const struct engine_exec_spec *spec,
                             char ret_exec_id[ENGINE_ID_STR_MAX], struct sbx_error *err)
{
        return engine_exec_create(by_id(e, container_id), container_id, spec, ret_exec_id, err);
}

static int r_fallback_attach(struct engine *e, const char *exec_id, struct engine_stream **ret_stream,
                             struct sbx_error *err)
{
        return engine_exec_attach(R(e)->docker, exec_id, ret_stream, err);
}

static int r_fallback_inspect(struct engine *e, const char *exec_id, struct engine_exec_info *ret,
                              struct sbx_error *err)
{
        return engine_exec_inspect(R(e)->docker, exec_id, ret, err);
}

static int r_fallback_run(struct engine *e, const char *container_id, const struct engine_exec_spec *spec,
                          const void *stdin_data, size_t stdin_len, size_t max_output, int timeout_ms,
                          struct engine_exec_result *ret, struct sbx_error *err)
{
        return engine_exec_run(by_id(e, container_id), container_id, spec, stdin_data, stdin_len, max_output,
                               timeout_ms, ret, err);
}

/* Docker behind a router, with vm beside it; both are the router's from here. */
static int router_new(struct engine *docker, struct engine *vm, struct engine **ret, struct sbx_error *err)
{
        struct engine *e = calloc(1, sizeof(*e));
        struct router *r = calloc(1, sizeof(*r));

        if (!e || !r) {
                free(e);
                free(r);
                engine_free(docker);
                engine_free(vm);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        r->docker = docker;
        r->vm = vm;
        r->ops = *docker->ops; /* the streams are Docker's own, with no engine to route by */
        r->ops.free = r_free;
        r->ops.connect = r_connect;
        r->ops.version = r_version;
        r->ops.api_errors = r_api_errors;
        r->ops.image_inspect = r_image_inspect;
        r->ops.has_runtime = r_has_runtime;
        r->ops.create = r_create;
        r->ops.start = r_start;
        r->ops.inspect = r_inspect;
        r->ops.stop = r_stop;
        r->ops.remove = r_remove;
        r->ops.list = r_list;
        r->ops.logs = r_logs;
        r->ops.stats = r_stats;
        r->ops.pause = r_pause;
        r->ops.unpause = r_unpause;
        r->ops.pause_to_disk = r_pause_to_disk;
        r->ops.memory_capture = r_memory_capture;
        r->ops.memory_boot = r_memory_boot;
        r->ops.memory_boot_cancel = r_memory_boot_cancel;
        r->ops.events_follow = docker->ops->events_follow ? r_events_follow : NULL;
        r->ops.network_ensure = docker->ops->network_ensure ? r_network_ensure : NULL;
        r->ops.network_list = docker->ops->network_list ? r_network_list : NULL;
        r->ops.network_remove = docker->ops->network_remove ? r_network_remove : NULL;
        r->ops.workspace_drop = r_workspace_drop;
        r->ops.relabel = NULL; /* Docker cannot (engine.h); a VM is never a pool slot */
        r->ops.fallback_create = docker->ops->fallback_create ? r_fallback_create : NULL;
        r->ops.fallback_attach = r_fallback_attach;
        r->ops.fallback_inspect = r_fallback_inspect;
        r->ops.fallback_run = docker->ops->fallback_run ? r_fallback_run : NULL;
        e->ops = &r->ops;
        e->name = docker->name;
        /* Docker's, and the memory ops where the VMs have them (engine.h: ENGINE_CAP_MEMORY_CAPTURE) */
        e->capabilities = docker->capabilities | (vm->capabilities & ENGINE_CAP_MEMORY_CAPTURE);
        e->places = docker->places;
        e->priv = r;
        *ret = e;
        return 0;
}

void engine_qemu_set_runner(struct engine *e, const struct engine_qemu_runner *runner)
{
        if (e && e->ops->free == r_free)
                engine_qemu_bind(R(e)->vm, runner);
}

void engine_qemu_unbind(struct engine *e)
{
        if (e && e->ops->free == r_free)
                engine_qemu_net_stop(R(e)->vm);
        else
                engine_qemu_net_stop(e);
}

bool engine_microvm_id(const char *id)
{
        return engine_qemu_id(id);
}

const char *engine_microvm_accel(const struct engine *e)
{
        return e && e->ops->free == r_free ? engine_qemu_accel(((const struct router *)e->priv)->vm) : NULL;
}

int engine_microvm_gc(struct engine *e, const struct engine_microvm_gc *o)
{
        if (e && e->ops->free == r_free)
                return engine_qemu_gc_run(R(e)->vm, o);
        return engine_qemu_gc_run(e, o);
}

int engine_microvm_rootfs_note(struct engine *e, const char *id, char *buf, size_t size)
{
        if (e && e->ops->free == r_free)
                return engine_qemu_rootfs_note(R(e)->vm, id, buf, size);
        return engine_qemu_rootfs_note(e, id, buf, size);
}

int engine_new_from_config(const struct sbx_config *cfg, struct engine **ret, struct sbx_error *err)
{
        struct engine_k8s_config k = {
                .kubeconfig = cfg->kube_config,
                .namespace = cfg->kube_namespace,
                .workspace_mode = cfg->kube_workspace,
                .storage_class = cfg->kube_storage_class,
                .workspace_bytes = cfg->workspace_quota_bytes,
                .init_binary = cfg->kube_init_binary,
                .gvisor_class = cfg->kube_gvisor_class,
                .image_pull_policy = cfg->kube_image_pull_policy,
                .timeout_ms = cfg->docker_timeout_ms,
                .start_timeout_ms = cfg->kube_start_timeout_ms,
                .node_dir = cfg->kube_node_dir,
        };
        struct engine_qemu_config q = {
                .data_dir = cfg->data_dir,
                .guest_dir = ENGINE_QEMU_GUEST_DIR,
                .disk_bytes = cfg->workspace_quota_bytes,
                .docker_socket = cfg->docker_socket,
        };
        struct engine *docker, *vm;
        struct sbx_error qerr = {0};
        int r;

        if (strcmp(cfg->engine, "kubernetes") == 0)
                return engine_kubernetes_new(&k, ret, err);
        r = engine_docker_new(cfg->docker_socket, cfg->docker_timeout_ms, &docker, err);
        if (r < 0)
                return r;
        if (engine_qemu_new(&q, &vm, &qerr) < 0) {
                /* the Docker sessions run as ever; runtime microvm is refused (runtime_check) */
                log_info("runtime microvm is unavailable: %s", qerr.msg);
                *ret = docker;
                return 0;
        }
        return router_new(docker, vm, ret, err);
}
