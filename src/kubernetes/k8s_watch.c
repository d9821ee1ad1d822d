/* k8s_watch.c — container events from a watch on Pods: list once for a
 * resourceVersion, then watch from it; a watch that ends (the apiserver's
 * timeout, a dropped connection) resumes from the last version seen, so no
 * event is lost or repeated; one that is too old (410 Gone, or an ERROR
 * event with code 410) lists again and compares with the Pods it knew, so
 * what happened in the gap is still told (a Pod gone: destroy; one that
 * ended: die).
 *
 * A Pod's changes become Docker's words: ADDED create, the container
 * running start, terminated oom (OOMKilled) and die with its exit code,
 * destroy once the Pod is removed as engine_remove judges it (being deleted,
 * its container dead: k8s_pod_removed), or DELETED, whichever comes first,
 * so destroy follows engine_remove as promptly as Docker's does, whatever
 * the kubelet takes to let the object go. Each is told once per Pod. A Pod
 * whose node is lost (the Node watch of k8s_nodes.c; without it, the Pod's
 * status) is told "lost" once, with the cause: its container may run on,
 * but nobody can reach it.
 *
 * State: the known Pods, f->lock, taken by the thread that follows and by
 * the Node watch's thread (k8s_nodes.c), each around its changes and the
 * callbacks they make: the callback is never called from both at once. */
#include "k8s_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_SERVER_TIMEOUT_S 240 /* the apiserver ends a watch after this; we resume */
#define KNOWN_MAX 200000

struct known {
        char name[K8S_NAME_MAX];
        char node[K8S_NODE_NAME_MAX]; /* spec.nodeName, once scheduled */
        bool started, died, seen;
        bool destroyed; /* told "destroy" (the object may linger: k8s_pod_removed) */
        bool lost;      /* told "lost" */
        bool pod_lost;  /* its status says the node controller marked it (k8s_pod_node_lost) */
        struct engine_kv labels[ENGINE_MAX_LABELS];
        size_t n_labels;
};

struct follow {
        struct k8s *k;
        const char *const *filters;
        const char *const *actions;
        engine_event_cb cb;
        void *ud;
        char rv[64];
        struct known *pods;
        size_t n, cap;
        bool gone;    /* 410: list again */
        bool stopped; /* the callback asked to stop */
        struct sbx_error *err;
        pthread_mutex_t lock;
};

static bool wanted(const struct follow *f, const char *action)
{
        if (!f->actions)
                return true;
        for (size_t i = 0; f->actions[i]; i++)
                if (strcmp(f->actions[i], action) == 0)
                        return true;
        return false;
}

static int emit(struct follow *f, const struct known *p, const char *action, int exit_code, const char *cause)
{
        struct engine_event ev = {0};

        if (!wanted(f, action))
                return 0;
        sbx_strlcpy(ev.type, "container", sizeof(ev.type));
        sbx_strlcpy(ev.action, action, sizeof(ev.action));
        sbx_strlcpy(ev.id, p->name, sizeof(ev.id));
        ev.exit_code = exit_code;
        sbx_strlcpy(ev.cause, cause ? cause : "", sizeof(ev.cause));
        ev.time_nano = sbx_now_ms() * 1000000;
        memcpy(ev.labels, p->labels, p->n_labels * sizeof(p->labels[0]));
        ev.n_labels = p->n_labels;
        if (f->cb(&ev, f->ud) != 0) {
                __atomic_store_n(&f->stopped, true, __ATOMIC_RELAXED); /* read by the other thread too */
                return 1;
        }
        return 0;
}

static struct known *find(struct follow *f, const char *name)
{
        for (size_t i = 0; i < f->n; i++)
                if (strcmp(f->pods[i].name, name) == 0)
                        return &f->pods[i];
        return NULL;
}

static struct known *add(struct follow *f, const char *name)
{
        struct known *p;

        if (f->n == f->cap) {
                size_t cap = f->cap ? f->cap * 2 : 64;
                struct known *np;
                if (cap > KNOWN_MAX)
                        return NULL;
                np = realloc(f->pods, cap * sizeof(*np));
                if (!np)
                        return NULL;
                f->pods = np;
                f->cap = cap;
        }
        p = &f->pods[f->n++];
        memset(p, 0, sizeof(*p));
        sbx_strlcpy(p->name, name, sizeof(p->name));
        return p;
}

static void drop(struct follow *f, struct known *p)
{
        *p = f->pods[--f->n];
}

static int check_lost(struct follow *f, struct known *p);

/* A Pod as it is now: tell what changed since it was last seen. quiet: only
 * record (the first list: events are from now on). */
static int observe(struct follow *f, const cJSON *pod, bool added, bool quiet)
{
        const char *name = k8s_json_str(pod, "metadata.name");
        struct known *p;
        char state[16];
        int code;
        bool oom;

        if (!name)
                return 0;
        p = find(f, name);
        if (!p) {
                struct engine_kv kv[ENGINE_MAX_LABELS];
                size_t n;
                k8s_pod_labels(pod, kv, &n);
                if (!k8s_labels_match(kv, n, f->filters))
                        return 0;
                p = add(f, name);
                if (!p)
                        return 0; /* past KNOWN_MAX: the monitor's poll still sees it */
                memcpy(p->labels, kv, sizeof(kv));
                p->n_labels = n;
                if (!quiet && added && emit(f, p, "create", -1, NULL))
                        return 1;
        }
        p->seen = true;
        if (k8s_json_str(pod, "spec.nodeName"))
                sbx_strlcpy(p->node, k8s_json_str(pod, "spec.nodeName"), sizeof(p->node));
        p->pod_lost = k8s_pod_node_lost(pod);
        k8s_pod_state(pod, state, &code, &oom);
        if (strcmp(state, "running") == 0 && !p->started) {
                p->started = true;
                if (!quiet && emit(f, p, "start", -1, NULL))
                        return 1;
        }
        if (strcmp(state, "exited") == 0 && !p->died) {
                p->died = p->started = true;
                if (!quiet && oom && emit(f, p, "oom", -1, NULL))
                        return 1;
                if (!quiet && emit(f, p, "die", code, NULL))
                        return 1;
        }
        if (k8s_pod_removed(pod) && !p->destroyed) {
                p->destroyed = p->died = p->started = true;
                if (!quiet && emit(f, p, "destroy", -1, NULL))
                        return 1;
        }
        return check_lost(f, p);
}

/* A Pod on a lost node, told once (k8s_nodes.c says which node is). */
static int check_lost(struct follow *f, struct known *p)
{
        char cause[sizeof(((struct engine_event *)0)->cause)];

        if (p->lost || p->died || !p->node[0])
                return 0;
        if (!k8s_node_lost(f->k, p->node, cause, sizeof(cause))) {
                if (!p->pod_lost || __atomic_load_n(&f->k->nodes_mode, __ATOMIC_ACQUIRE) > 0)
                        return 0; /* the Node watch judges while it runs */
                snprintf(cause, sizeof(cause), "node_not_ready: %s", p->node);
        }
        p->lost = true;
        return emit(f, p, "lost", -1, cause);
}

/* The Node watch's thread: a node became lost, or the nodes were listed. */
static void nodes_changed(void *ud)
{
        struct follow *f = ud;

        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < f->n && !f->stopped; i++)
                if (check_lost(f, &f->pods[i]))
                        break;
        pthread_mutex_unlock(&f->lock);
}

static int gone(struct follow *f, const char *name)
{
        struct known *p = find(f, name);
        struct known copy;

        if (!p)
                return 0;
        copy = *p;
        drop(f, p);
        if (!copy.died && emit(f, &copy, "die", -1, NULL))
                return 1;
        return copy.destroyed ? 0 : emit(f, &copy, "destroy", -1, NULL);
}

static int relist(struct follow *f, const char *sel, bool quiet, struct sbx_error *err)
{
        char path[K8S_PATH_MAX];
        cJSON *list = NULL;
        const cJSON *it;
        const char *rv;
        int r;

        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?labelSelector=%s", f->k->ns, sel);
        r = k8s_call(f->k, "GET", path, NULL, "listing Pods to watch", &list, err);
        if (r < 0)
                return r;
        rv = k8s_json_str(list, "metadata.resourceVersion");
        if (!rv || strlen(rv) >= sizeof(f->rv)) {
                cJSON_Delete(list);
                return sbx_error_set(err, -EPROTO, 0, "listing Pods: the reply has no resourceVersion");
        }
        sbx_strlcpy(f->rv, rv, sizeof(f->rv));
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < f->n; i++)
                f->pods[i].seen = false;
        cJSON_ArrayForEach(it, k8s_json_get(list, "items"))
                if (observe(f, it, true, quiet))
                        break;
        cJSON_Delete(list);
        /* the ones that went while nobody watched */
        for (size_t i = 0; i < f->n && !f->stopped;)
                if (!f->pods[i].seen) {
                        char name[K8S_NAME_MAX];
                        sbx_strlcpy(name, f->pods[i].name, sizeof(name));
                        if (quiet)
                                drop(f, &f->pods[i]);
                        else
                                gone(f, name);
                } else {
                        i++;
                }
        pthread_mutex_unlock(&f->lock);
        return 0;
}

static int on_line(char *line, size_t len, void *ud)
{
        struct follow *f = ud;
        cJSON *ev = cJSON_ParseWithLength(line, len);
        const char *type = k8s_json_str(ev, "type"), *rv;
        const cJSON *obj = k8s_json_get(ev, "object");
        int stop = 0;

        if (!type || !cJSON_IsObject(obj)) {
                const char *kind = k8s_json_str(ev, "kind");
                const cJSON *code = k8s_json_get(ev, "code");
                /* a Status instead of a stream: the watch was refused */
                if (kind && strcmp(kind, "Status") == 0 && cJSON_IsNumber(code) && code->valueint == 410)
                        f->gone = true;
                cJSON_Delete(ev);
                return 1;
        }
        if (strcmp(type, "ERROR") == 0) {
                const cJSON *code = k8s_json_get(obj, "code");
                if (cJSON_IsNumber(code) && code->valueint == 410)
                        f->gone = true;
                else
                        sbx_error_set(f->err, -EIO, 0, "watch error: %.200s",
                                      k8s_json_str(obj, "message") ? k8s_json_str(obj, "message") : "?");
                cJSON_Delete(ev);
                return 1;
        }
        rv = k8s_json_str(obj, "metadata.resourceVersion");
        if (rv && strlen(rv) < sizeof(f->rv))
                sbx_strlcpy(f->rv, rv, sizeof(f->rv));
        pthread_mutex_lock(&f->lock);
        if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0)
                stop = observe(f, obj, strcmp(type, "ADDED") == 0, false);
        else if (strcmp(type, "DELETED") == 0 && k8s_json_str(obj, "metadata.name")) {
                observe(f, obj, false, false); /* a last change comes with the deletion */
                if (!f->stopped)
                        stop = gone(f, k8s_json_str(obj, "metadata.name"));
        }
        stop = stop || f->stopped;
        pthread_mutex_unlock(&f->lock);
        cJSON_Delete(ev);
        return stop;
}

int k8s_events_follow(struct engine *e, const char *const *label_filters, const char *const *actions,
                      engine_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                      struct sbx_error *err)
{
        struct follow f = {
                .k = e->priv, .filters = label_filters, .actions = actions, .cb = cb, .ud = userdata, .err = err};
        char sel[1024], path[K8S_PATH_MAX];
        char *esc;
        int64_t failing_since = 0, pause = 100;
        struct k8s_nodes_watch *nodes = NULL;
        int r;

        if (engine_kubernetes_selector(label_filters, sel, sizeof(sel)) < 0)
                return sbx_error_set(err, -EINVAL, 0, "label filters too long");
        esc = curl_easy_escape(NULL, sel, 0);
        if (!esc)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        sbx_strlcpy(sel, esc, sizeof(sel));
        curl_free(esc);
        pthread_mutex_init(&f.lock, NULL);
        r = relist(&f, sel, true, err);
        if (r < 0)
                goto out;
        /* node health beside it, for the watches that name "lost" (the monitor's): a cluster-scoped
         * watch nobody else pays for */
        if (f.actions && wanted(&f, "lost") && k8s_nodes_watch_start(f.k, nodes_changed, &f, &nodes) < 0)
                nodes = NULL; /* no thread: the Pods' status is judged by the fallback */
        while (!__atomic_load_n(&f.stopped, __ATOMIC_RELAXED) && !(stop && __atomic_load_n(stop, __ATOMIC_RELAXED))) {
                long status = 0;
                struct sbx_error e2 = {0};

                if (f.gone) {
                        f.gone = false;
                        r = relist(&f, sel, false, &e2);
                } else {
                        snprintf(path, sizeof(path),
                                 "/api/v1/namespaces/%s/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=%d"
                                 "&resourceVersion=%s&labelSelector=%s",
                                 f.k->ns, WATCH_SERVER_TIMEOUT_S, f.rv, sel);
                        int64_t t0 = sbx_now_ms();
                        r = k8s_stream(f.k, path, (WATCH_SERVER_TIMEOUT_S + 30) * 1000L, stop, on_line, &f, &status,
                                       &e2);
                        if (r == -ESTALE || status == 410)
                                f.gone = true, r = 0;
                        else if (r == 0 && status < 300 && sbx_now_ms() - t0 < 1000)
                                sbx_sleep_ms(100); /* a server that ends every watch at once is not spun on */
                }
                if (r == 0 && status < 300) {
                        failing_since = 0;
                        pause = 100;
                        continue;
                }
                if (r == -EACCES || r == -EINVAL) { /* no retry repairs these */
                        if (err)
                                *err = e2;
                        goto out;
                }
                if (!failing_since)
                        failing_since = sbx_now_ms();
                if (reconnect_limit_ms > 0 && sbx_now_ms() - failing_since > reconnect_limit_ms) {
                        if (err)
                                *err = e2;
                        r = r < 0 ? r : -EIO;
                        goto out;
                }
                for (int64_t slept = 0; slept < pause && !(stop && __atomic_load_n(stop, __ATOMIC_RELAXED));
                     slept += 50)
                        sbx_sleep_ms(50);
                pause = pause < 2000 ? pause * 2 : 2000;
        }
        r = 0;
out:
        k8s_nodes_watch_stop(nodes);
        pthread_mutex_destroy(&f.lock);
        free(f.pods);
        return r;
}
