/* engine_select.c — the one place that knows every engine: the engine the
 * config names (engine.h, engine_new_from_config). Apart from engine.c, the
 * seam's shared part, so that the engines sit between the two and the seam
 * knows none of them. No state, no locks. */
#include "sandboxd/engine.h"

#include <string.h>

#include "sandboxd/config.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/engine_kubernetes.h"

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

        if (strcmp(cfg->engine, "kubernetes") == 0)
                return engine_kubernetes_new(&k, ret, err);
        return engine_docker_new(cfg->docker_socket, cfg->docker_timeout_ms, ret, err);
}
