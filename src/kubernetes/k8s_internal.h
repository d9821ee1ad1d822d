/* k8s_internal.h — what the files of src/kubernetes/ share: the engine's
 * private state and the one HTTP call every operation goes through. */
#ifndef SANDBOXD_K8S_INTERNAL_H
#define SANDBOXD_K8S_INTERNAL_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/config.h"
#include "sandboxd/engine_kubernetes.h"

#define K8S_REPLY_MAX (16u << 20) /* bytes of one reply at most (a list of many Pods) */
#define K8S_WATCH_LINE_MAX (1u << 20)
#define K8S_PATH_MAX 2048

#define K8S_NODE_NAME_MAX 254 /* a Node's name: a DNS subdomain */

/* A node as the Node watch saw it last (k8s_nodes.c). */
struct k8s_node {
        char name[K8S_NODE_NAME_MAX];
        bool known; /* its state was read at least once */
        bool ready; /* condition Ready is True (or not posted yet) */
        bool gone;  /* deleted */
        bool seen;  /* in the last list */
};

/* The env variable a Pod learns its node from (downward API), for its session directory's subPathExpr. */
#define K8S_NODE_ENV "SBX_NODE_NAME"

struct k8s {
        struct k8s_credentials creds;
        char ns[K8S_NAME_MAX];
        char workspace_mode[16];
        char storage_class[K8S_NAME_MAX * 4];
        int64_t workspace_bytes;
        char init_binary[SBX_PATH_MAX];
        char gvisor_class[K8S_NAME_MAX];
        char pull_policy[16];
        char node_dir[SBX_PATH_MAX];
        long timeout_ms;
        long start_timeout_ms;
        uint64_t api_errors; /* atomic */
        int netpol_done;     /* atomic */
        char version[64];
        /* node health (k8s_nodes.c) */
        pthread_mutex_t nodes_lock; /* guards the table below */
        struct k8s_node *nodes;
        size_t n_nodes, cap_nodes;
        int nodes_mode; /* atomic: 0 not watched yet, 1 watched, -1 not permitted (the Pods' status stands in) */
};

struct k8s_reply {
        long status; /* HTTP status; 0: no reply */
        char *body;  /* NUL-terminated, malloc'd */
        size_t len;
};
void k8s_reply_done(struct k8s_reply *r);

/* One request: method, a path under the server (already escaped), an
 * optional JSON body with its content type. 0 with *ret filled whenever a
 * reply came (any status); -ETIMEDOUT, -EIO (unreachable, TLS), -E2BIG
 * (reply past K8S_REPLY_MAX) otherwise, with err saying which. */
int k8s_request(struct k8s *k, const char *method, const char *path, const char *content_type, const char *body,
                long timeout_ms, struct k8s_reply *ret, struct sbx_error *err);

/* The reply's status as an errno (2xx: 0; 404 -ENOENT, 409 -EEXIST, 401/403
 * -EACCES, 410 -ESTALE, 400/422 -EINVAL, 429/5xx -EIO), err holding the
 * Status object's message ("what: 404 pods \"x\" not found"). */
int k8s_status_error(struct k8s *k, const struct k8s_reply *r, const char *what, struct sbx_error *err);

/* A request whose 2xx reply is JSON: *ret_json the parsed body (may be NULL
 * when the caller wants none). -EPROTO with a clear message for a 2xx body
 * that is not a JSON object. */
int k8s_call(struct k8s *k, const char *method, const char *path, const char *body, const char *what, cJSON **ret_json,
             struct sbx_error *err);

/* Streaming GET (a watch): on_line gets each complete line (NUL-terminated,
 * without the newline); non-zero from it, or *stop, ends the call with 0.
 * A line past K8S_WATCH_LINE_MAX is -E2BIG. ret_status: the HTTP status. */
int k8s_stream(struct k8s *k, const char *path, long timeout_ms, volatile bool *stop,
               int (*on_line)(char *line, size_t len, void *ud), void *ud, long *ret_status, struct sbx_error *err);

/* The same, with on_open (may be NULL) called once the reply is a 2xx and
 * its headers ended: the watch is established. */
int k8s_stream_open(struct k8s *k, const char *path, long timeout_ms, volatile bool *stop, void (*on_open)(void *ud),
                    int (*on_line)(char *line, size_t len, void *ud), void *ud, long *ret_status,
                    struct sbx_error *err);

/* Helpers over cJSON. */
const char *k8s_json_str(const cJSON *o, const char *path); /* "a.b.c" or NULL */
const cJSON *k8s_json_get(const cJSON *o, const char *path);

/* Whether s is a valid label value (<= 63 of [A-Za-z0-9._-], alnum at both ends, or empty). */
bool k8s_label_value_ok(const char *s);
/* Whether s is a valid label key name without a prefix. */
bool k8s_label_key_ok(const char *s);

/* The events watch (k8s_watch.c). */
int k8s_events_follow(struct engine *e, const char *const *label_filters, const char *const *actions,
                      engine_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                      struct sbx_error *err);

/* The sandboxd labels of a Pod (the annotation first, else its labels). */
void k8s_pod_labels(const cJSON *pod, struct engine_kv *ret, size_t *ret_n);
/* Whether a Pod's labels pass every filter ("k" or "k=v"). */
bool k8s_labels_match(const struct engine_kv *kv, size_t n, const char *const *filters);
/* The container state of a Pod as Docker's words: "created", "running",
 * "exited", "removing"; exit code and OOM for "exited". */
void k8s_pod_state(const cJSON *pod, char state[16], int *ret_exit, bool *ret_oom);
/* A Pod being deleted whose container is dead (or that never had a node):
 * removed as far as sandboxd can tell (engine_remove returns, inspect says
 * -ENOENT, the watch tells destroy), though the kubelet may take a while
 * (its sync period, longer on a busy node) to let the object go. */
bool k8s_pod_removed(const cJSON *pod);

/* Node health (k8s_nodes.c). Whether node is known lost (Ready False or
 * Unknown, or deleted), with cause "node_not_ready: <node>" or
 * "node_gone: <node>". */
bool k8s_node_lost(struct k8s *k, const char *node, char *cause, size_t size);
/* Whether the node controller marked this Pod not Ready for its node (the
 * fallback without the Node watch): Ready False (or reason NodeLost) while
 * its container's status, which only the kubelet writes, says running and
 * ready. */
bool k8s_pod_node_lost(const cJSON *pod);
/* The Node watch in a thread of its own; changed(ud) after each list and
 * whenever a node became lost, from that thread. */
typedef void (*k8s_nodes_changed_fn)(void *ud);
struct k8s_nodes_watch;
int k8s_nodes_watch_start(struct k8s *k, k8s_nodes_changed_fn changed, void *ud, struct k8s_nodes_watch **ret);
void k8s_nodes_watch_stop(struct k8s_nodes_watch *w); /* accepts NULL */

#endif
