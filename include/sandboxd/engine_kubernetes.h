/* engine_kubernetes.h — the Kubernetes engine behind the seam (engine.h):
 * each container is a Pod in one namespace, reached through the REST API of
 * kube-apiserver (v1.20) with libcurl and cJSON, and no client library.
 *
 * What a Pod keeps of the hardened spec (engine_kubernetes_pod_body):
 * runAsUser/runAsGroup = the session's uid with runAsNonRoot; capabilities
 * drop ALL; allowPrivilegeEscalation false; never privileged; seccompProfile
 * RuntimeDefault (pod and container); readOnlyRootFilesystem; /tmp as an
 * emptyDir of medium Memory with a sizeLimit; no service-account token;
 * enableServiceLinks false; no host namespaces; CPU and memory limits (a
 * memory request equal to the limit, a CPU request from the CPU weight, which
 * is how the kubelet sets cpu.shares); runtimeClassName from the runtime
 * policy; restartPolicy Never; the static init (Docker's own docker-init,
 * tini) as PID 1 with the runner as its first child, as Docker's Init gives.
 * Everything is labelled for list-by-label, and every sandboxd label is also
 * kept verbatim in one annotation (a Kubernetes label value is at most 63
 * characters of [A-Za-z0-9._-]).
 *
 * What it cannot (capabilities cleared, so container.c says so): a PID
 * limit, swap apart from memory, an OOM score, pausing, the exec fallback
 * (exec needs SPDY/WebSocket), an isolated network of our own (the default-
 * deny NetworkPolicy stands in; bridge sessions are refused), a tmpfs size
 * as a mount option (an emptyDir's sizeLimit is enforced by eviction), stats
 * unless metrics.k8s.io answers.
 *
 * Workspaces: "hostpath" mounts spec.workspace from the node (single-node
 * clusters, the testbed); "pvc" gives each session one PersistentVolumeClaim
 * (storage class and size from config: the size is the quota), created on
 * the session's first Pod and never deleted with a Pod, so it outlives them
 * all. A warm pool slot's Pod has its own claim, named after the slot; a
 * claim hands both to the session by relabelling them (a JSON merge patch of
 * the labels and the annotation), and the session's later Pods mount that
 * claim (engine_spec.workspace_claim, recorded by the store). The session
 * directory, the runner and the init come from the node by hostPath,
 * read-only (the node agent provides them). The identity files
 * (spec.passwd_file, group_file: the control's own) travel in the Pod: their
 * bytes (K8S_IDENTITY_MAX each at most) in two annotations, a downwardAPI
 * volume (mode 0444) of them mounted read-only with subPath on /etc/passwd
 * and /etc/group, so the Pod finds them on whichever node it lands.
 *
 * Node health: an events watch that names the action "lost" also watches
 * the cluster's Nodes (k8s_nodes.c): a Pod whose node turns NotReady or is
 * deleted is told "lost" with the cause "node_not_ready: <node>" or
 * "node_gone: <node>" (without list/watch on nodes: judged from the Pods'
 * status, said once in the log), and is deleted with a grace of 0.
 *
 * Threads: the engine is shared; each call makes its own curl handle. The
 * shared state, the NetworkPolicy done-flag and the error counter, is
 * atomic; the table of nodes has its own lock. */
#ifndef SANDBOXD_ENGINE_KUBERNETES_H
#define SANDBOXD_ENGINE_KUBERNETES_H

#include <stddef.h>
#include <stdint.h>

#include "sandboxd/engine.h"

#define K8S_NAME_MAX 64 /* a Pod or PVC name we make (DNS label) */
#define K8S_LABELS_ANNOTATION "sandboxd/labels"
#define K8S_PASSWD_ANNOTATION "sandboxd/passwd" /* the identity files' bytes, in the Pod itself */
#define K8S_GROUP_ANNOTATION "sandboxd/group"
#define K8S_IDENTITY_MAX (64 * 1024) /* bytes of one identity file at most */
#define K8S_CONTAINER_NAME "sandbox"
#define K8S_INIT_PATH "/run/sandboxd-init" /* where the init binary is mounted */
/* The host directory holding each node agent's data_dir, K8S_NODE_DIR/<node
 * name>: the hostPath deploy/kubernetes/node-agent.yaml mounts. */
#define K8S_NODE_DIR "/var/lib/sandboxd-node"
#define K8S_NETPOL_NAME "sandboxd-sandbox-default-deny"
#define K8S_FIELD_MANAGER "sandboxd"

struct engine_k8s_config {
        const char *kubeconfig;        /* a kubeconfig file; NULL or "": in-cluster service-account credentials */
        const char *namespace;         /* required */
        const char *workspace_mode;    /* "hostpath" (default) | "pvc" */
        const char *storage_class;     /* pvc: "" the cluster's default */
        int64_t workspace_bytes;       /* pvc: the claim's size (the quota) */
        const char *init_binary;       /* node path of a static init (tini), mounted at K8S_INIT_PATH */
        const char *gvisor_class;      /* the RuntimeClass of runtime "runsc" */
        const char *image_pull_policy; /* Always | IfNotPresent | Never */
        long timeout_ms;               /* one request (<= 0: 30 s) */
        long start_timeout_ms;         /* start: until the container runs (<= 0: 120 s) */
        const char *node_dir;          /* a relative session_dir is under {node_dir}/<the Pod's node> (node.h) */
};

/* Where and how to reach the API server. */
struct k8s_credentials {
        char server[512]; /* https://host:port (http:// only to loopback, for tests) */
        char *ca_pem;     /* the cluster CA (PEM), or NULL: the system's */
        size_t ca_len;
        char *cert_pem, *key_pem; /* a client certificate and key (PEM), or NULL */
        size_t cert_len, key_len;
        char *token;                  /* a bearer token, or NULL */
        bool insecure;                /* insecure-skip-tls-verify */
        char namespace[K8S_NAME_MAX]; /* the context's (kubeconfig) or the pod's (in-cluster), or "" */
};
void k8s_credentials_done(struct k8s_credentials *c);

/* Read a kubeconfig (libyaml): its current-context's cluster (server,
 * certificate-authority[-data], insecure-skip-tls-verify) and user
 * (client-certificate[-data] + client-key[-data], token, tokenFile).
 * Relative file names are relative to the kubeconfig's directory. Errors
 * name the field: -EINVAL for a malformed file, -ENOENT for a missing one. */
int k8s_kubeconfig_load(const char *path, struct k8s_credentials *ret, struct sbx_error *err);

/* The in-cluster credentials under dir (NULL: the service account's
 * /var/run/secrets/kubernetes.io/serviceaccount: token, ca.crt, namespace)
 * and $KUBERNETES_SERVICE_HOST/_PORT. */
int k8s_incluster_load(const char *dir, struct k8s_credentials *ret, struct sbx_error *err);

/* A Kubernetes engine with these credentials (taken over, also on failure)
 * and settings (copied). No I/O: engine_connect() asks /version, makes the
 * NetworkPolicy and learns whether metrics answer. */
int engine_kubernetes_new_with(const struct engine_k8s_config *cfg, struct k8s_credentials *creds, struct engine **ret,
                               struct sbx_error *err);
/* The same from cfg->kubeconfig, or in-cluster credentials. */
int engine_kubernetes_new(const struct engine_k8s_config *cfg, struct engine **ret, struct sbx_error *err);

/* The bodies this engine POSTs (malloc'd JSON, NULL on a spec past its
 * bounds). For tests: the whole of what a spec becomes. name is the Pod's;
 * the PVC's name comes from the spec's instance, user and session labels. */
char *engine_kubernetes_pod_body(const struct engine_k8s_config *cfg, const struct engine_spec *spec, const char *name);
/* The same with the reason of a refusal: the identity files are read here
 * (-EFBIG past K8S_IDENTITY_MAX, -EINVAL for a NUL byte or no regular file,
 * -E2BIG for a spec past the bounds). */
int engine_kubernetes_pod_make(const struct engine_k8s_config *cfg, const struct engine_spec *spec, const char *name,
                               char **ret_body, struct sbx_error *err);
char *engine_kubernetes_pvc_body(const struct engine_k8s_config *cfg, const struct engine_spec *spec);
char *engine_kubernetes_netpol_body(void);
/* Whether the engine watches Nodes (node health, while an events watch
 * that wants "lost" runs): 1 yes, -1 not permitted (the Pods' status stands
 * in; the log said so once), 0 not yet. */
int engine_kubernetes_nodes_watched(struct engine *e);
/* The claim of the spec: its workspace_claim when set (a pool slot's claim
 * the session took over), else the one of the session labelled in spec
 * ("sbx-ws-<hash>"); -EINVAL without the instance, user and session labels
 * or for a workspace_claim that is no DNS label. */
int engine_kubernetes_pvc_name(const struct engine_spec *spec, char ret[K8S_NAME_MAX]);

/* The label selector for engine.h's filters ("k", "k=v"): the ones a
 * Kubernetes selector can hold, URL-ready after escaping; values it cannot
 * hold are checked on the annotation instead. */
int engine_kubernetes_selector(const char *const *filters, char *ret, size_t size);

/* The RuntimeClass of runtime = runsc: deploy/kubernetes/runtimeclass-gvisor.yaml
 * names it so. */
#define K8S_GVISOR_RUNTIME_CLASS "gvisor"

#endif
