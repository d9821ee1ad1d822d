/* k8s_engine.c — the Kubernetes engine's operations (engine.h): a container
 * is a Pod named sbx-<random>, its id is that name.
 *
 * Kubernetes has no "created but not started": create POSTs the Pod (and,
 * in pvc mode, the session's claim first), start waits until the container
 * runs or cannot (an image that cannot be pulled, a spec the kubelet
 * refuses), bounded by start_timeout_ms. A Pod cannot be stopped and kept:
 * stop deletes it with the grace asked for, remove with a grace of one
 * second; both wait (bounded) until the apiserver has let the Pod go, which
 * is after the kubelet confirmed its containers dead, so a removed
 * session's runner is gone when remove returns, as with Docker.
 *
 * RBAC (deploy/kubernetes/rbac.yaml lists exactly these): pods get, list,
 * watch, create, delete, patch (a pool claim's relabel); pods/log get;
 * persistentvolumeclaims get, list (leftover pool claims), create, delete,
 * patch (likewise); networkpolicies get, create (namespaced); runtimeclasses
 * get and nodes list, watch (cluster-wide; k8s_nodes.c); metrics.k8s.io pods
 * get (optional).
 *
 * A Pod on a lost node (k8s_nodes.c) is deleted with a grace of 0: its
 * kubelet cannot confirm a kill, and the session's next Pod, under a new
 * name, must not wait for it.
 *
 * State: the immutable settings, the error counter (atomic) and whether the
 * NetworkPolicy exists (atomic). */
#include "k8s_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static struct k8s *kk(struct engine *e)
{
        return e->priv;
}

#define COPY_STR(dst, src) sbx_strlcpy((dst), (src), sizeof(dst))

static void k8s_free_engine(struct engine *e)
{
        struct k8s *k = kk(e);

        if (k) {
                k8s_credentials_done(&k->creds);
                pthread_mutex_destroy(&k->nodes_lock);
                free(k->nodes);
                free(k);
        }
        free(e);
}

static bool name_ok(const char *id)
{
        size_t n = strlen(id);

        if (n == 0 || n >= K8S_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') || id[i] == '-'))
                        return false;
        return true;
}

static int pod_path(struct k8s *k, const char *id, const char *suffix, char *buf, size_t size, struct sbx_error *err)
{
        if (!name_ok(id))
                return sbx_error_set(err, -ENOENT, 404, "no such Pod: %.80s", id);
        snprintf(buf, size, "/api/v1/namespaces/%s/pods/%s%s", k->ns, id, suffix ? suffix : "");
        return 0;
}

static int ensure_netpol(struct k8s *k, struct sbx_error *err)
{
        char path[K8S_PATH_MAX];
        char *body;
        int r;

        if (__atomic_load_n(&k->netpol_done, __ATOMIC_ACQUIRE))
                return 0;
        snprintf(path, sizeof(path), "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/" K8S_NETPOL_NAME,
                 k->ns);
        r = k8s_call(k, "GET", path, NULL, "reading the sandbox NetworkPolicy", NULL, err);
        if (r == -ENOENT) {
                body = engine_kubernetes_netpol_body();
                if (!body)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                snprintf(path, sizeof(path), "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies", k->ns);
                r = k8s_call(k, "POST", path, body, "creating the sandbox NetworkPolicy", NULL, err);
                free(body);
                if (r == -EEXIST) /* made meanwhile by another daemon */
                        r = 0;
        }
        if (r == 0)
                __atomic_store_n(&k->netpol_done, 1, __ATOMIC_RELEASE);
        return r;
}

static int k8s_connect(struct engine *e, struct sbx_error *err)
{
        struct k8s *k = kk(e);
        cJSON *v = NULL;
        char path[K8S_PATH_MAX];
        int r;

        r = k8s_call(k, "GET", "/version", NULL, "asking the API server's version", &v, err);
        if (r < 0) {
                sbx_error_prefix(err, "connecting to Kubernetes at %s", k->creds.server);
                return r;
        }
        COPY_STR(k->version, k8s_json_str(v, "gitVersion") ? k8s_json_str(v, "gitVersion") : "?");
        cJSON_Delete(v);
        /* the credentials' reach, said now rather than at the first session */
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?limit=1", k->ns);
        r = k8s_call(k, "GET", path, NULL, "listing Pods", NULL, err);
        if (r == 0)
                r = ensure_netpol(k, err);
        if (r < 0) {
                sbx_error_prefix(err, "Kubernetes namespace %s", k->ns);
                return r;
        }
        /* stats only where metrics.k8s.io answers */
        if (k8s_call(k, "GET", "/apis/metrics.k8s.io/v1beta1", NULL, "metrics", NULL, NULL) == 0)
                e->capabilities |= ENGINE_CAP_STATS;
        return 0;
}

static int k8s_version(struct engine *e, struct engine_version *ret, struct sbx_error *err)
{
        struct k8s *k = kk(e);
        cJSON *v = NULL;
        int r = k8s_call(k, "GET", "/version", NULL, "asking the API server's version", &v, err);

        if (r < 0)
                return r;
        memset(ret, 0, sizeof(*ret));
        COPY_STR(ret->engine, "kubernetes");
        COPY_STR(ret->version, k8s_json_str(v, "gitVersion") ? k8s_json_str(v, "gitVersion") : "?");
        COPY_STR(ret->api_version, "v1");
        cJSON_Delete(v);
        return 0;
}

static uint64_t k8s_api_errors(struct engine *e)
{
        return __atomic_load_n(&kk(e)->api_errors, __ATOMIC_RELAXED);
}

/* No image API: the kubelet pulls. The reference is its own id; a missing
 * image shows at start (ErrImagePull, ErrImageNeverPull). */
static int k8s_image_inspect(struct engine *e, const char *image, struct engine_image_info *ret, struct sbx_error *err)
{
        (void)e;
        if (!image || !*image || strlen(image) >= sizeof(ret->id) || strpbrk(image, " \t\r\n\"\\"))
                return sbx_error_set(err, -EINVAL, 0, "image reference '%.80s' is not one Kubernetes takes",
                                     image ? image : "");
        memset(ret, 0, sizeof(*ret));
        COPY_STR(ret->id, image);
        if (strstr(image, "@sha256:"))
                COPY_STR(ret->digest, strstr(image, "@") + 1);
        return 0;
}

static int k8s_has_runtime(struct engine *e, const char *name, bool *ret, struct sbx_error *err)
{
        struct k8s *k = kk(e);
        char path[K8S_PATH_MAX];
        int r;

        if (strcmp(name, "runc") == 0) { /* the nodes' default handler */
                *ret = true;
                return 0;
        }
        if (strcmp(name, "runsc") != 0) {
                *ret = false;
                return 0;
        }
        snprintf(path, sizeof(path), "/apis/node.k8s.io/v1/runtimeclasses/%s", k->gvisor_class);
        r = k8s_call(k, "GET", path, NULL, "reading the gVisor RuntimeClass", NULL, err);
        if (r == -ENOENT) {
                *ret = false;
                return 0;
        }
        if (r < 0)
                return r;
        *ret = true;
        return 0;
}

static int make_name(char ret[K8S_NAME_MAX])
{
        uint8_t b[12];

        if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
                return -EIO;
        snprintf(ret, K8S_NAME_MAX, "sbx-");
        for (size_t i = 0; i < sizeof(b); i++)
                snprintf(ret + 4 + 2 * i, 3, "%02x", b[i]);
        return 0;
}

static int ensure_claim(struct k8s *k, const struct engine_spec *s, struct sbx_error *err)
{
        struct engine_k8s_config cfg = {.storage_class = k->storage_class, .workspace_bytes = k->workspace_bytes};
        char path[K8S_PATH_MAX], name[K8S_NAME_MAX];
        char *body;
        int r;

        if (engine_kubernetes_pvc_name(s, name) < 0)
                return sbx_error_set(err, -EINVAL, 0, "a pvc workspace needs the session's instance, user and session");
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", k->ns, name);
        r = k8s_call(k, "GET", path, NULL, "reading the workspace claim", NULL, err);
        if (r != -ENOENT)
                return r; /* it exists (0): the session's earlier Pods used it */
        body = engine_kubernetes_pvc_body(&cfg, s);
        if (!body)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims", k->ns);
        r = k8s_call(k, "POST", path, body, "creating the workspace claim", NULL, err);
        free(body);
        return r == -EEXIST ? 0 : r;
}

static void k8s_settings(struct k8s *k, struct engine_k8s_config *cfg)
{
        *cfg = (struct engine_k8s_config){.namespace = k->ns,
                                          .workspace_mode = k->workspace_mode,
                                          .storage_class = k->storage_class,
                                          .workspace_bytes = k->workspace_bytes,
                                          .init_binary = k->init_binary,
                                          .gvisor_class = k->gvisor_class,
                                          .image_pull_policy = k->pull_policy,
                                          .node_dir = k->node_dir};
}

static int k8s_create(struct engine *e, const struct engine_spec *s, char ret_id[ENGINE_ID_STR_MAX],
                      struct sbx_error *err)
{
        struct k8s *k = kk(e);
        struct engine_k8s_config cfg;
        char name[K8S_NAME_MAX], path[K8S_PATH_MAX];
        char *body;
        int r;

        r = ensure_netpol(k, err); /* no sandbox Pod before its default-deny policy */
        if (r < 0)
                return r;
        if (s->workspace && strcmp(k->workspace_mode, "pvc") == 0) {
                r = ensure_claim(k, s, err);
                if (r < 0)
                        return r;
        }
        if (make_name(name) < 0)
                return sbx_error_set(err, -EIO, 0, "no randomness for a Pod name");
        k8s_settings(k, &cfg);
        r = engine_kubernetes_pod_make(&cfg, s, name, &body, err);
        if (r < 0)
                return r;
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", k->ns);
        r = k8s_call(k, "POST", path, body, "creating a Pod", NULL, err);
        free(body);
        if (r == -ENOENT) /* the namespace: never an image (the kubelet pulls later) */
                sbx_error_set(err, -EIO, 0, "namespace %s does not exist", k->ns);
        if (r < 0)
                return r == -ENOENT ? -EIO : r;
        memcpy(ret_id, name, strlen(name) + 1);
        return 0;
}

static int get_pod(struct k8s *k, const char *id, cJSON **ret, struct sbx_error *err)
{
        char path[K8S_PATH_MAX];
        int r = pod_path(k, id, NULL, path, sizeof(path), err);

        return r < 0 ? r : k8s_call(k, "GET", path, NULL, "reading a Pod", ret, err);
}

/* Waiting reasons that no wait repairs. */
static bool hopeless(const char *reason)
{
        static const char *const bad[] = {"ErrImagePull",
                                          "ImagePullBackOff",
                                          "ErrImageNeverPull",
                                          "InvalidImageName",
                                          "CreateContainerConfigError",
                                          "CreateContainerError",
                                          "RunContainerError",
                                          NULL};
        for (size_t i = 0; reason && bad[i]; i++)
                if (strcmp(reason, bad[i]) == 0)
                        return true;
        return false;
}

static int k8s_start(struct engine *e, const char *id, struct sbx_error *err)
{
        struct k8s *k = kk(e);
        int64_t deadline = sbx_now_ms() + k->start_timeout_ms, pause = 50;
        char why[300] = "not scheduled yet";

        for (;;) {
                cJSON *pod = NULL;
                const cJSON *st, *conds, *c;
                const char *reason, *msg;
                char state[16];
                int code;
                bool oom;
                int r = get_pod(k, id, &pod, err);

                if (r < 0)
                        return r;
                k8s_pod_state(pod, state, &code, &oom);
                if (strcmp(state, "running") == 0 || strcmp(state, "exited") == 0) {
                        cJSON_Delete(pod); /* exited: the sustained check says why, as after Docker's start */
                        return 0;
                }
                st = cJSON_GetArrayItem(k8s_json_get(pod, "status.containerStatuses"), 0);
                reason = k8s_json_str(st, "state.waiting.reason");
                msg = k8s_json_str(st, "state.waiting.message");
                if (hopeless(reason)) {
                        bool image = strstr(reason, "Image") != NULL;
                        r = sbx_error_set(err, image ? -ENOENT : -EIO, image ? 404 : 0, "Pod %s: %s: %.200s", id,
                                          reason, msg ? msg : "");
                        cJSON_Delete(pod);
                        return r;
                }
                if (reason)
                        snprintf(why, sizeof(why), "%s %.200s", reason, msg ? msg : "");
                conds = k8s_json_get(pod, "status.conditions");
                cJSON_ArrayForEach(c, conds) {
                        const char *t = k8s_json_str(c, "type"), *s = k8s_json_str(c, "status");
                        if (t && s && strcmp(t, "PodScheduled") == 0 && strcmp(s, "False") == 0)
                                snprintf(why, sizeof(why), "unschedulable: %.200s",
                                         k8s_json_str(c, "message") ? k8s_json_str(c, "message") : "");
                }
                cJSON_Delete(pod);
                if (sbx_now_ms() >= deadline)
                        return sbx_error_set(err, -ETIMEDOUT, 0, "Pod %s did not start in %ld ms (%s)", id,
                                             k->start_timeout_ms, why);
                sbx_sleep_ms(pause);
                pause = pause < 400 ? pause * 2 : 500;
        }
}

static int64_t parse_quantity(const char *q)
{
        static const struct {
                const char *suf;
                double mul;
        } units[] = {{"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
                     {"k", 1e3},     {"M", 1e6},        {"G", 1e9},           {"T", 1e12},
                     {"m", 1e-3},    {"n", 1e-9},       {"u", 1e-6},          {"", 1.0}};
        char *end;
        double v;

        if (!q)
                return 0;
        v = strtod(q, &end);
        for (size_t i = 0; i < ELEMENTSOF(units); i++)
                if (strcmp(end, units[i].suf) == 0)
                        return (int64_t)(v * units[i].mul + (v >= 0 ? 0.5 : -0.5));
        return 0;
}

/* A CPU quantity ("250m", "2", "1.5") in billionths of a CPU. */
static int64_t cpu_nanos(const char *q)
{
        char *end;
        double v;

        if (!q)
                return 0;
        v = strtod(q, &end);
        return (int64_t)(v * (strcmp(end, "m") == 0 ? 1e6 : 1e9) + 0.5);
}

static int64_t parse_time(const char *t)
{
        struct tm tm = {0};

        if (!t || !strptime(t, "%Y-%m-%dT%H:%M:%S", &tm))
                return 0;
        return (int64_t)timegm(&tm);
}

static int k8s_inspect(struct engine *e, const char *id, struct engine_container_info *ret, struct sbx_error *err)
{
        struct k8s *k = kk(e);
        cJSON *pod = NULL;
        const cJSON *st, *c, *cmd;
        const char *rc, *s;
        int r = get_pod(k, id, &pod, err);

        if (r < 0)
                return r;
        if (k8s_pod_removed(pod)) {
                cJSON_Delete(pod);
                return sbx_error_set(err, -ENOENT, 404, "Pod %s is removed (the kubelet has yet to let it go)", id);
        }
        memset(ret, 0, sizeof(*ret));
        COPY_STR(ret->id, id);
        COPY_STR(ret->name, id);
        c = cJSON_GetArrayItem(k8s_json_get(pod, "spec.containers"), 0);
        st = cJSON_GetArrayItem(k8s_json_get(pod, "status.containerStatuses"), 0);
        COPY_STR(ret->image, k8s_json_str(c, "image") ? k8s_json_str(c, "image") : "");
        COPY_STR(ret->image_id, k8s_json_str(st, "imageID") ? k8s_json_str(st, "imageID") : "");
        k8s_pod_state(pod, ret->status, &ret->exit_code, &ret->oom_killed);
        ret->running = strcmp(ret->status, "running") == 0;
        ret->restart_count =
                cJSON_IsNumber(k8s_json_get(st, "restartCount")) ? k8s_json_get(st, "restartCount")->valueint : 0;
        if ((s = k8s_json_str(st, "state.running.startedAt")) || (s = k8s_json_str(st, "state.terminated.startedAt")))
                COPY_STR(ret->started_at, s);
        if ((s = k8s_json_str(st, "state.terminated.finishedAt")))
                COPY_STR(ret->finished_at, s);
        if ((s = k8s_json_str(st, "state.terminated.message")) || (s = k8s_json_str(pod, "status.message")))
                COPY_STR(ret->error, s);
        COPY_STR(ret->network_mode, "pod");
        s = k8s_json_str(pod, "spec.nodeName"); /* "" until kube-scheduler binds it */
        if (s && strlen(s) < sizeof(ret->node))
                COPY_STR(ret->node, s);
        rc = k8s_json_str(pod, "spec.runtimeClassName");
        COPY_STR(ret->runtime, rc && strcmp(rc, k->gvisor_class) == 0 ? "runsc" : "runc");
        ret->has_network = false; /* sealed by the default-deny NetworkPolicy (docs/operations.md) */
        ret->readonly_rootfs = cJSON_IsTrue(k8s_json_get(c, "securityContext.readOnlyRootFilesystem"));
        ret->privileged = cJSON_IsTrue(k8s_json_get(c, "securityContext.privileged"));
        cmd = k8s_json_get(c, "command");
        ret->init = cJSON_IsString(cJSON_GetArrayItem(cmd, 0)) &&
                    strcmp(cJSON_GetArrayItem(cmd, 0)->valuestring, K8S_INIT_PATH) == 0;
        ret->memory = parse_quantity(k8s_json_str(c, "resources.limits.memory"));
        ret->nano_cpus = cpu_nanos(k8s_json_str(c, "resources.limits.cpu"));
        ret->cpu_shares = cpu_nanos(k8s_json_str(c, "resources.requests.cpu")) * 1024 / 1000000000;
        ret->memory_swap = 0;
        ret->pids_limit = 0; /* a Pod has none */
        k8s_pod_labels(pod, ret->labels, &ret->n_labels);
        cJSON_Delete(pod);
        return 0;
}

/* Wait (bounded) until the Pod is gone or its container dead: the kubelet
 * has killed it. */
static int wait_gone(struct k8s *k, const char *id, long limit_ms)
{
        int64_t deadline = sbx_now_ms() + limit_ms, pause = 50;

        for (;;) {
                cJSON *pod = NULL;
                int r = get_pod(k, id, &pod, NULL);
                bool gone = r == -ENOENT || (r == 0 && k8s_pod_removed(pod));
                cJSON_Delete(pod);
                if (gone)
                        return 0;
                if (sbx_now_ms() >= deadline)
                        return -ETIMEDOUT;
                sbx_sleep_ms(pause);
                pause = pause < 400 ? pause * 2 : 500;
        }
}

static int delete_pod(struct k8s *k, const char *id, int grace_s, struct sbx_error *err)
{
        char path[K8S_PATH_MAX], q[64], state[16] = "";
        cJSON *pod = NULL;
        int code;
        bool oom;
        int r;

        r = get_pod(k, id, &pod, err);
        if (r < 0)
                return r;
        k8s_pod_state(pod, state, &code, &oom);
        /* A Pod on no node, one whose container has not started yet (still
         * being created: a busy kubelet can take a minute to tear down a
         * sandbox it is still setting up), cannot start (an image that cannot
         * be pulled: the kubelet may take a minute to confirm it in back-off)
         * or has ended has nothing to kill: it goes at once. Should its
         * container start after all before the kubelet sees the Pod gone,
         * its runner is refused (the session's epoch, hub_chan.c), as for
         * a lost node below. Any other waits for the kubelet, so its runner
         * is dead when this returns. */
        if (strcmp(state, "exited") == 0 || strcmp(state, "created") == 0 || !k8s_json_str(pod, "spec.nodeName") ||
            hopeless(k8s_json_str(cJSON_GetArrayItem(k8s_json_get(pod, "status.containerStatuses"), 0),
                                  "state.waiting.reason")))
                grace_s = 0;
        /* Nor does one on a lost node: its kubelet is not there to confirm a
         * kill, and a grace would leave the object Terminating until it came
         * back. Its containers may run on; the session's epoch fences its
         * runner (hub_chan.c), and the kubelet kills them once back, when it
         * finds the Pod gone from the API. */
        else if (k8s_node_lost(k, k8s_json_str(pod, "spec.nodeName"), NULL, 0) || k8s_pod_node_lost(pod))
                grace_s = 0;
        cJSON_Delete(pod);
        snprintf(q, sizeof(q), "?gracePeriodSeconds=%d", grace_s);
        r = pod_path(k, id, q, path, sizeof(path), err);
        if (r < 0)
                return r;
        r = k8s_call(k, "DELETE", path, NULL, "deleting a Pod", NULL, err);
        if (r < 0)
                return r;
        if (wait_gone(k, id, (long)grace_s * 1000 + k->timeout_ms) < 0)
                return sbx_error_set(err, -ETIMEDOUT, 0, "Pod %s is still terminating (its node may be lost)", id);
        return 0;
}

static int k8s_stop(struct engine *e, const char *id, int timeout_s, struct sbx_error *err)
{
        return delete_pod(kk(e), id, timeout_s > 0 ? timeout_s : 1, err);
}

static int k8s_remove(struct engine *e, const char *id, struct sbx_error *err)
{
        return delete_pod(kk(e), id, 1, err);
}

/* GET the namespace's objects of resource (pods, persistentvolumeclaims)
 * matching the engine.h label filters: *ret_list to free, *ret_items its
 * array of items. what names the request in errors. */
static int list_labelled(struct k8s *k, const char *resource, const char *what, const char *const *label_filters,
                         cJSON **ret_list, const cJSON **ret_items, struct sbx_error *err)
{
        char sel[1024], path[K8S_PATH_MAX];
        const cJSON *items;
        cJSON *list = NULL;
        char *esc;
        int r;

        if (engine_kubernetes_selector(label_filters, sel, sizeof(sel)) < 0)
                return sbx_error_set(err, -EINVAL, 0, "label filters too long");
        esc = curl_easy_escape(NULL, sel, 0);
        if (!esc)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/%s?labelSelector=%s", k->ns, resource, esc);
        curl_free(esc);
        r = k8s_call(k, "GET", path, NULL, what, &list, err);
        if (r < 0)
                return r;
        items = k8s_json_get(list, "items");
        if (!cJSON_IsArray(items)) {
                cJSON_Delete(list);
                return sbx_error_set(err, -EPROTO, 0, "%s: the reply has no items", what);
        }
        *ret_list = list;
        *ret_items = items;
        return 0;
}

static int k8s_list(struct engine *e, const char *const *label_filters, bool all,
                    struct engine_container_summary **ret_list, size_t *ret_n, struct sbx_error *err)
{
        struct engine_container_summary *out;
        cJSON *list = NULL;
        const cJSON *items, *it;
        size_t n = 0;
        int r;

        r = list_labelled(kk(e), "pods", "listing Pods", label_filters, &list, &items, err);
        if (r < 0)
                return r;
        out = calloc((size_t)cJSON_GetArraySize(items) + 1, sizeof(*out));
        if (!out) {
                cJSON_Delete(list);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        cJSON_ArrayForEach(it, items) {
                struct engine_container_summary *o = &out[n];
                const char *name = k8s_json_str(it, "metadata.name");
                int code;
                bool oom;
                if (!name || !name_ok(name) || k8s_pod_removed(it))
                        continue;
                k8s_pod_labels(it, o->labels, &o->n_labels);
                if (!k8s_labels_match(o->labels, o->n_labels, label_filters))
                        continue;
                k8s_pod_state(it, o->state, &code, &oom);
                if (!all && strcmp(o->state, "running") != 0)
                        continue;
                COPY_STR(o->id, name);
                COPY_STR(o->name, name);
                o->created = parse_time(k8s_json_str(it, "metadata.creationTimestamp"));
                n++;
        }
        cJSON_Delete(list);
        *ret_list = out;
        *ret_n = n;
        return 0;
}

static int k8s_logs(struct engine *e, const char *id, int tail_lines, char **ret_text, struct sbx_error *err)
{
        struct k8s *k = kk(e);
        struct k8s_reply rep = {0};
        char path[K8S_PATH_MAX], q[96];
        int r;

        snprintf(q, sizeof(q), "/log?container=" K8S_CONTAINER_NAME "&tailLines=%d&limitBytes=65536",
                 tail_lines > 0 ? tail_lines : 20);
        r = pod_path(k, id, q, path, sizeof(path), err);
        if (r == 0)
                r = k8s_request(k, "GET", path, NULL, NULL, 0, &rep, err);
        if (r == 0)
                r = k8s_status_error(k, &rep, "reading a Pod's log", err);
        if (r < 0) {
                k8s_reply_done(&rep);
                return r;
        }
        *ret_text = rep.body; /* handed on */
        return 0;
}

static int k8s_stats(struct engine *e, const char *id, struct engine_stats *ret, struct sbx_error *err)
{
        struct k8s *k = kk(e);
        char path[K8S_PATH_MAX];
        cJSON *m = NULL;
        const cJSON *c;
        int r;

        if (!engine_can(e, ENGINE_CAP_STATS))
                return sbx_error_set(err, -EOPNOTSUPP, 0, "metrics.k8s.io is not served");
        if (!name_ok(id))
                return sbx_error_set(err, -ENOENT, 404, "no such Pod");
        snprintf(path, sizeof(path), "/apis/metrics.k8s.io/v1beta1/namespaces/%s/pods/%s", k->ns, id);
        r = k8s_call(k, "GET", path, NULL, "reading a Pod's metrics", &m, err);
        if (r < 0)
                return r;
        c = cJSON_GetArrayItem(k8s_json_get(m, "containers"), 0);
        memset(ret, 0, sizeof(*ret));
        ret->memory_usage = (uint64_t)parse_quantity(k8s_json_str(c, "usage.memory"));
        cJSON_Delete(m); /* CPU is a rate there, not a total: left 0 */
        return 0;
}

/* The session's claim (pvc mode; 0 if it is gone or in hostpath mode). */
static int k8s_workspace_drop(struct engine *e, const char *instance, const char *user, const char *session,
                              const char *claim, struct sbx_error *err)
{
        struct k8s *k;
        struct engine_label l[] = {{"sandboxd.instance", instance},
                                   {"sandboxd.user", user},
                                   {"sandboxd.session", session}};
        struct engine_spec s = {.labels = l, .n_labels = 3, .workspace_claim = claim && *claim ? claim : NULL};
        char name[K8S_NAME_MAX], path[K8S_PATH_MAX];
        int r;

        k = kk(e);
        if (strcmp(k->workspace_mode, "pvc") != 0)
                return 0;
        if (engine_kubernetes_pvc_name(&s, name) < 0)
                return sbx_error_set(err, -EINVAL, 0, "bad session");
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", k->ns, name);
        r = k8s_call(k, "DELETE", path, NULL, "deleting the workspace claim", NULL, err);
        return r == -ENOENT ? 0 : r;
}


/* A merge patch of metadata that sets the labels of set on obj (a NULL
 * value takes the key away): the labels Kubernetes can hold, and the whole
 * set in the annotation, rewritten from obj's own. */
static char *relabel_patch(const cJSON *obj, const struct engine_label *set, size_t n_set)
{
        const char *ann = k8s_json_str(obj, "metadata.annotations." K8S_LABELS_ANNOTATION);
        cJSON *all = ann ? cJSON_Parse(ann) : NULL, *patch = cJSON_CreateObject(), *meta, *labels, *anns;
        char *text = NULL, *out = NULL;

        if (!cJSON_IsObject(all)) {
                const cJSON *it;
                cJSON_Delete(all);
                all = cJSON_CreateObject();
                cJSON_ArrayForEach(it, k8s_json_get(obj, "metadata.labels"))
                        if (cJSON_IsString(it))
                                cJSON_AddStringToObject(all, it->string, it->valuestring);
        }
        meta = cJSON_AddObjectToObject(patch, "metadata");
        labels = cJSON_AddObjectToObject(meta, "labels");
        anns = cJSON_AddObjectToObject(meta, "annotations");
        if (!all || !labels || !anns)
                goto out;
        for (size_t i = 0; i < n_set; i++) {
                const char *key = set[i].key, *v = set[i].value;
                cJSON_DeleteItemFromObjectCaseSensitive(all, key);
                if (v)
                        cJSON_AddStringToObject(all, key, v);
                if (!k8s_label_key_ok(key))
                        continue;
                if (v && k8s_label_value_ok(v))
                        cJSON_AddStringToObject(labels, key, v);
                else /* a value no label holds lives in the annotation alone */
                        cJSON_AddNullToObject(labels, key);
        }
        text = cJSON_PrintUnformatted(all);
        if (!text)
                goto out;
        cJSON_AddStringToObject(anns, K8S_LABELS_ANNOTATION, text);
        out = cJSON_PrintUnformatted(patch);
out:
        free(text);
        cJSON_Delete(all);
        cJSON_Delete(patch);
        return out;
}

static int patch_labels(struct k8s *k, const char *path, const cJSON *obj, const struct engine_label *set, size_t n_set,
                        const char *what, struct sbx_error *err)
{
        char *body = relabel_patch(obj, set, n_set);
        int r;

        if (!body)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        r = k8s_call(k, "PATCH", path, body, what, NULL, err);
        free(body);
        return r;
}

/* The warm pool's claim (engine.h): the claim first, then the Pod, each
 * with a merge patch of its labels; both are idempotent, so a claim a crash
 * cut short is finished by doing it again. */
static int k8s_relabel(struct engine *e, const char *id, const struct engine_label *set, size_t n_set,
                       char ret_claim[ENGINE_CLAIM_MAX], struct sbx_error *err)
{
        struct k8s *k = kk(e);
        char path[K8S_PATH_MAX], state[16], claim[K8S_NAME_MAX] = "";
        cJSON *pod = NULL, *pvc = NULL;
        const cJSON *v;
        int code, r;
        bool oom;

        r = get_pod(k, id, &pod, err);
        if (r < 0)
                return r;
        k8s_pod_state(pod, state, &code, &oom);
        if (strcmp(state, "exited") == 0 || strcmp(state, "removing") == 0) {
                cJSON_Delete(pod);
                return sbx_error_set(err, -ENOENT, 404, "Pod %s is %s", id,
                                     strcmp(state, "exited") == 0 ? "dead" : "being deleted");
        }
        cJSON_ArrayForEach(v, k8s_json_get(pod, "spec.volumes")) {
                const char *n = k8s_json_str(v, "name"), *c = k8s_json_str(v, "persistentVolumeClaim.claimName");
                if (n && c && strcmp(n, "workspace") == 0 && name_ok(c))
                        COPY_STR(claim, c);
        }
        if (claim[0]) {
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", k->ns, claim);
                r = k8s_call(k, "GET", path, NULL, "reading the workspace claim", &pvc, err);
                if (r == 0)
                        r = patch_labels(k, path, pvc, set, n_set, "relabelling the workspace claim", err);
                cJSON_Delete(pvc);
                if (r < 0) {
                        cJSON_Delete(pod);
                        return r;
                }
        }
        r = pod_path(k, id, NULL, path, sizeof(path), err);
        if (r == 0)
                r = patch_labels(k, path, pod, set, n_set, "relabelling a Pod", err);
        cJSON_Delete(pod);
        if (r < 0)
                return r;
        sbx_strlcpy(ret_claim, claim, ENGINE_CLAIM_MAX);
        return 0;
}

static int k8s_claim_list(struct engine *e, const char *const *label_filters, struct engine_claim_summary **ret_list,
                          size_t *ret_n, struct sbx_error *err)
{
        struct engine_claim_summary *out;
        cJSON *list = NULL;
        const cJSON *items, *it;
        size_t n = 0;
        int r;

        r = list_labelled(kk(e), "persistentvolumeclaims", "listing workspace claims", label_filters, &list, &items,
                          err);
        if (r < 0)
                return r;
        out = calloc((size_t)cJSON_GetArraySize(items) + 1, sizeof(*out));
        if (!out) {
                cJSON_Delete(list);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        cJSON_ArrayForEach(it, items) {
                struct engine_claim_summary *o = &out[n];
                const char *name = k8s_json_str(it, "metadata.name");
                if (!name || !name_ok(name) || k8s_json_get(it, "metadata.deletionTimestamp"))
                        continue;
                k8s_pod_labels(it, o->labels, &o->n_labels); /* any object's sandboxd labels */
                if (!k8s_labels_match(o->labels, o->n_labels, label_filters))
                        continue;
                COPY_STR(o->name, name);
                n++;
        }
        cJSON_Delete(list);
        *ret_list = out;
        *ret_n = n;
        return 0;
}

static const struct engine_ops k8s_ops = {
        .free = k8s_free_engine,
        .connect = k8s_connect,
        .version = k8s_version,
        .api_errors = k8s_api_errors,
        .image_inspect = k8s_image_inspect,
        .has_runtime = k8s_has_runtime,
        .create = k8s_create,
        .start = k8s_start,
        .inspect = k8s_inspect,
        .stop = k8s_stop,
        .remove = k8s_remove,
        .list = k8s_list,
        .logs = k8s_logs,
        .stats = k8s_stats,
        .events_follow = k8s_events_follow,
        .workspace_drop = k8s_workspace_drop,
        .relabel = k8s_relabel,
        .claim_list = k8s_claim_list,
};

int engine_kubernetes_new_with(const struct engine_k8s_config *cfg, struct k8s_credentials *creds, struct engine **ret,
                               struct sbx_error *err)
{
        struct engine *e = NULL;
        struct k8s *k = NULL;
        const char *ns = cfg->namespace && *cfg->namespace ? cfg->namespace : creds->namespace;
        const char *mode = cfg->workspace_mode && *cfg->workspace_mode ? cfg->workspace_mode : "hostpath";
        const char *pull = cfg->image_pull_policy && *cfg->image_pull_policy ? cfg->image_pull_policy : "IfNotPresent";
        int r;

        if (!ns || !*ns || !name_ok(ns)) {
                r = sbx_error_set(err, -EINVAL, 0, "Kubernetes namespace '%s' is not a DNS label", ns ? ns : "");
                goto fail;
        }
        if (strcmp(mode, "hostpath") != 0 && strcmp(mode, "pvc") != 0) {
                r = sbx_error_set(err, -EINVAL, 0, "workspace mode '%s' is neither hostpath nor pvc", mode);
                goto fail;
        }
        if (strcmp(pull, "Always") != 0 && strcmp(pull, "IfNotPresent") != 0 && strcmp(pull, "Never") != 0) {
                r = sbx_error_set(err, -EINVAL, 0, "image pull policy '%s' is not Always, IfNotPresent or Never", pull);
                goto fail;
        }
        e = calloc(1, sizeof(*e));
        k = calloc(1, sizeof(*k));
        if (!e || !k) {
                r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                goto fail;
        }
        k->creds = *creds;
        memset(creds, 0, sizeof(*creds));
        pthread_mutex_init(&k->nodes_lock, NULL);
        COPY_STR(k->ns, ns);
        COPY_STR(k->workspace_mode, mode);
        COPY_STR(k->storage_class, cfg->storage_class ? cfg->storage_class : "");
        k->workspace_bytes = cfg->workspace_bytes;
        COPY_STR(k->init_binary, cfg->init_binary && *cfg->init_binary ? cfg->init_binary : "/usr/bin/tini-static");
        COPY_STR(k->gvisor_class, cfg->gvisor_class && *cfg->gvisor_class ? cfg->gvisor_class : "gvisor");
        COPY_STR(k->pull_policy, pull);
        COPY_STR(k->node_dir, cfg->node_dir && *cfg->node_dir ? cfg->node_dir : "/var/lib/sandboxd-node");
        k->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
        k->start_timeout_ms = cfg->start_timeout_ms > 0 ? cfg->start_timeout_ms : 120000;
        e->ops = &k8s_ops;
        e->name = "kubernetes";
        e->priv = k;
        /* What a Pod can hold (engine_kubernetes.h); stats join at connect if metrics answer. */
        e->capabilities = ENGINE_CAP_CPU_WEIGHT | ENGINE_CAP_RUNTIME_CLASS | ENGINE_CAP_EVENTS | ENGINE_CAP_LOGS;
        e->places = true; /* kube-scheduler: inspect says where (spec.nodeName) */
        *ret = e;
        return 0;
fail:
        k8s_credentials_done(creds);
        free(k);
        free(e);
        return r;
}

int engine_kubernetes_new(const struct engine_k8s_config *cfg, struct engine **ret, struct sbx_error *err)
{
        struct k8s_credentials c = {0};
        int r;

        if (cfg->kubeconfig && *cfg->kubeconfig)
                r = k8s_kubeconfig_load(cfg->kubeconfig, &c, err);
        else
                r = k8s_incluster_load(NULL, &c, err);
        if (r < 0)
                return r;
        return engine_kubernetes_new_with(cfg, &c, ret, err);
}
