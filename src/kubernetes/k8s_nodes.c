/* k8s_nodes.c — node health for the Kubernetes engine: a watch on the
 * cluster's Nodes (list once for a resourceVersion, then watch from it; a
 * watch that ends resumes from the last version, one that is too old (410)
 * lists again) keeps a table of the nodes that are lost: Ready False or
 * Unknown (the node controller's verdict once a kubelet stopped posting, by
 * default after 40 s), or deleted. The events watch (k8s_watch.c) turns
 * every Pod on a lost node into the event "lost" with the cause
 * "node_not_ready: <node>" or "node_gone: <node>", and delete_pod
 * (k8s_engine.c) deletes such a Pod with a grace of 0: its kubelet is not
 * there to confirm anything.
 *
 * Nodes are cluster-scoped: the engine needs get/list/watch on nodes through
 * a ClusterRole (deploy/kubernetes/rbac.yaml). Without it the watch says so
 * once in the log and the engine falls back to the Pods' status: the node
 * controller marks every Pod of a lost node not Ready while its container
 * status still says running and ready, which only it does
 * (k8s_pod_node_lost).
 *
 * Threads: the watch runs in its own thread ("sbx-k8s-nodes") while an
 * events watch runs; k->nodes_lock guards the table, read by any thread
 * (k8s_node_lost); k->nodes_mode is atomic. */
#include "k8s_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/log.h"

#define NODES_MAX 20000
#define WATCH_SERVER_TIMEOUT_S 240

struct k8s_nodes_watch {
        struct k8s *k;
        k8s_nodes_changed_fn changed;
        void *ud;
        pthread_t thread;
        volatile bool stop;
        char rv[64];
        bool gone; /* 410: list again */
};

/* Whether a Node object is Ready; a Node that has no Ready condition yet is
 * not judged (just registered). */
static bool node_ready(const cJSON *node)
{
        const cJSON *c;

        cJSON_ArrayForEach(c, k8s_json_get(node, "status.conditions")) {
                const char *t = k8s_json_str(c, "type"), *s = k8s_json_str(c, "status");
                if (t && s && strcmp(t, "Ready") == 0)
                        return strcmp(s, "True") == 0;
        }
        return true;
}

static struct k8s_node *node_find_locked(struct k8s *k, const char *name)
{
        for (size_t i = 0; i < k->n_nodes; i++)
                if (strcmp(k->nodes[i].name, name) == 0)
                        return &k->nodes[i];
        return NULL;
}

/* Record a node's state; true when it changed into lost. */
static bool node_set(struct k8s *k, const char *name, bool ready, bool gone)
{
        struct k8s_node *n;
        bool was_lost, lost = !ready || gone;

        if (!name || strlen(name) >= sizeof(n->name))
                return false;
        pthread_mutex_lock(&k->nodes_lock);
        n = node_find_locked(k, name);
        if (!n && k->n_nodes == k->cap_nodes) {
                size_t cap = k->cap_nodes ? k->cap_nodes * 2 : 16;
                struct k8s_node *nn = cap <= NODES_MAX ? realloc(k->nodes, cap * sizeof(*nn)) : NULL;
                if (!nn) {
                        pthread_mutex_unlock(&k->nodes_lock);
                        return false;
                }
                k->nodes = nn;
                k->cap_nodes = cap;
        }
        if (!n) {
                n = &k->nodes[k->n_nodes++];
                memset(n, 0, sizeof(*n));
                sbx_strlcpy(n->name, name, sizeof(n->name));
        }
        was_lost = !n->ready || n->gone;
        if (!n->known)
                was_lost = false;
        n->known = true;
        n->ready = ready;
        n->gone = gone;
        n->seen = true;
        pthread_mutex_unlock(&k->nodes_lock);
        return lost && !was_lost;
}

bool k8s_node_lost(struct k8s *k, const char *node, char *cause, size_t size)
{
        const struct k8s_node *n;
        bool lost = false;

        if (!node || !*node)
                return false;
        pthread_mutex_lock(&k->nodes_lock);
        n = node_find_locked(k, node);
        if (n && (n->gone || !n->ready)) {
                lost = true;
                if (cause)
                        snprintf(cause, size, "%s: %s", n->gone ? "node_gone" : "node_not_ready", n->name);
        }
        pthread_mutex_unlock(&k->nodes_lock);
        return lost;
}

bool k8s_pod_node_lost(const cJSON *pod)
{
        const cJSON *c, *st = cJSON_GetArrayItem(k8s_json_get(pod, "status.containerStatuses"), 0);
        bool not_ready = false;

        if (!k8s_json_str(pod, "spec.nodeName") || !k8s_json_get(st, "state.running") ||
            !cJSON_IsTrue(k8s_json_get(st, "ready")))
                return false;
        if (k8s_json_str(pod, "status.reason") && strcmp(k8s_json_str(pod, "status.reason"), "NodeLost") == 0)
                return true;
        cJSON_ArrayForEach(c, k8s_json_get(pod, "status.conditions")) {
                const char *t = k8s_json_str(c, "type"), *s = k8s_json_str(c, "status");
                if (t && s && strcmp(t, "Ready") == 0 && strcmp(s, "True") != 0)
                        not_ready = true;
        }
        return not_ready;
}

static int list_nodes(struct k8s_nodes_watch *w, struct sbx_error *err)
{
        struct k8s *k = w->k;
        cJSON *list = NULL;
        const cJSON *it;
        const char *rv;
        int r = k8s_call(k, "GET", "/api/v1/nodes", NULL, "listing Nodes", &list, err);

        if (r < 0)
                return r;
        rv = k8s_json_str(list, "metadata.resourceVersion");
        if (!rv || strlen(rv) >= sizeof(w->rv)) {
                cJSON_Delete(list);
                return sbx_error_set(err, -EPROTO, 0, "listing Nodes: the reply has no resourceVersion");
        }
        sbx_strlcpy(w->rv, rv, sizeof(w->rv));
        pthread_mutex_lock(&k->nodes_lock);
        for (size_t i = 0; i < k->n_nodes; i++)
                k->nodes[i].seen = false;
        pthread_mutex_unlock(&k->nodes_lock);
        cJSON_ArrayForEach(it, k8s_json_get(list, "items"))
                (void)node_set(k, k8s_json_str(it, "metadata.name"), node_ready(it), false);
        cJSON_Delete(list);
        /* the nodes that went while nobody watched */
        pthread_mutex_lock(&k->nodes_lock);
        for (size_t i = 0; i < k->n_nodes; i++)
                if (!k->nodes[i].seen)
                        k->nodes[i].gone = true;
        pthread_mutex_unlock(&k->nodes_lock);
        /* every list is followed by a judgement: the Pods known before it too */
        w->changed(w->ud);
        return 0;
}

/* The watch is established: nodes are watched (a list alone could be all the role allows). */
static void on_watch_open(void *ud)
{
        struct k8s_nodes_watch *w = ud;
        __atomic_store_n(&w->k->nodes_mode, 1, __ATOMIC_RELEASE);
}

static int on_node_line(char *line, size_t len, void *ud)
{
        struct k8s_nodes_watch *w = ud;
        cJSON *ev = cJSON_ParseWithLength(line, len);
        const char *type = k8s_json_str(ev, "type"), *rv, *name;
        const cJSON *obj = k8s_json_get(ev, "object");
        bool lost = false;

        if (!type || !cJSON_IsObject(obj)) {
                cJSON_Delete(ev);
                return 1;
        }
        if (strcmp(type, "ERROR") == 0) {
                const cJSON *code = k8s_json_get(obj, "code");
                if (cJSON_IsNumber(code) && code->valueint == 410)
                        w->gone = true;
                cJSON_Delete(ev);
                return 1;
        }
        rv = k8s_json_str(obj, "metadata.resourceVersion");
        if (rv && strlen(rv) < sizeof(w->rv))
                sbx_strlcpy(w->rv, rv, sizeof(w->rv));
        name = k8s_json_str(obj, "metadata.name");
        if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0)
                lost = node_set(w->k, name, node_ready(obj), false);
        else if (strcmp(type, "DELETED") == 0)
                lost = node_set(w->k, name, false, true);
        cJSON_Delete(ev);
        if (lost)
                w->changed(w->ud);
        return w->stop;
}

/* No permission on Nodes: said once per engine; the Pods' status stands in. */
static void not_permitted(struct k8s *k, const char *why)
{
        pthread_mutex_lock(&k->nodes_lock);
        k->n_nodes = 0; /* a table nobody keeps up to date judges nothing */
        pthread_mutex_unlock(&k->nodes_lock);
        if (__atomic_exchange_n(&k->nodes_mode, -1, __ATOMIC_ACQ_REL) != -1)
                log_warn(
                        "kubernetes: cannot list and watch Nodes (%s): a lost node is seen only from its Pods' "
                        "status (the node controller marks them not Ready); grant list and watch on nodes "
                        "(deploy/kubernetes/rbac.yaml, ClusterRole sandboxd-node-reader)",
                        why);
}

int engine_kubernetes_nodes_watched(struct engine *e)
{
        struct k8s *k = e->priv;
        return __atomic_load_n(&k->nodes_mode, __ATOMIC_ACQUIRE);
}

static void *nodes_main(void *ud)
{
        struct k8s_nodes_watch *w = ud;
        struct k8s *k = w->k;
        int64_t pause = 100;
        bool listed = false;

        pthread_setname_np(pthread_self(), "sbx-k8s-nodes");
        while (!__atomic_load_n(&w->stop, __ATOMIC_RELAXED)) {
                struct sbx_error err = {0};
                char path[K8S_PATH_MAX];
                long status = 0;
                int r;

                if (!listed || w->gone) {
                        w->gone = false;
                        r = list_nodes(w, &err);
                        listed |= r == 0;
                } else {
                        int64_t t0 = sbx_now_ms();
                        snprintf(path, sizeof(path),
                                 "/api/v1/nodes?watch=1&allowWatchBookmarks=true&timeoutSeconds=%d&resourceVersion=%s",
                                 WATCH_SERVER_TIMEOUT_S, w->rv);
                        r = k8s_stream_open(k, path, (WATCH_SERVER_TIMEOUT_S + 30) * 1000L, &w->stop, on_watch_open,
                                            on_node_line, w, &status, &err);
                        if (r == -ESTALE || status == 410)
                                w->gone = true, r = 0;
                        else if (r == 0 && status < 300 && sbx_now_ms() - t0 < 1000)
                                sbx_sleep_ms(100);
                }
                if (r == -EACCES || status == 401 || status == 403) {
                        not_permitted(k, r == -EACCES ? err.msg : "the watch is forbidden");
                        return NULL;
                }
                if (r == 0 && status < 300) {
                        pause = 100;
                        continue;
                }
                log_debug("kubernetes: the Node watch failed (%s); again in %" PRId64 " ms", err.msg, pause);
                for (int64_t slept = 0; slept < pause && !__atomic_load_n(&w->stop, __ATOMIC_RELAXED); slept += 50)
                        sbx_sleep_ms(50);
                pause = pause < 2000 ? pause * 2 : 2000;
        }
        return NULL;
}

int k8s_nodes_watch_start(struct k8s *k, k8s_nodes_changed_fn changed, void *ud, struct k8s_nodes_watch **ret)
{
        struct k8s_nodes_watch *w = calloc(1, sizeof(*w));
        int r;

        if (!w)
                return -ENOMEM;
        w->k = k;
        w->changed = changed;
        w->ud = ud;
        r = -pthread_create(&w->thread, NULL, nodes_main, w);
        if (r < 0) {
                free(w);
                return r;
        }
        *ret = w;
        return 0;
}

void k8s_nodes_watch_stop(struct k8s_nodes_watch *w)
{
        if (!w)
                return;
        __atomic_store_n(&w->stop, true, __ATOMIC_SEQ_CST);
        pthread_join(w->thread, NULL);
        free(w);
}
