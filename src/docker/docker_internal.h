/* docker_internal.h — what the docker_*.c files share and nobody else sees:
 * the client struct, the one HTTP request primitive over libcurl, reply and
 * error helpers, and small cJSON accessors. */
#ifndef SANDBOXD_DOCKER_INTERNAL_H
#define SANDBOXD_DOCKER_INTERNAL_H

#include <pthread.h>

#include <cjson/cJSON.h>

#include "sandboxd/docker.h"

struct docker_handle;

struct docker {
        char *socket_path;
        long timeout_ms;
        pthread_key_t key; /* → this thread's struct docker_handle for this client */

        pthread_mutex_t lock;          /* guards the two fields below */
        char api_version[16];          /* "" until docker_negotiate() */
        struct docker_handle *handles; /* every live per-thread handle, so docker_free can reap them */
};

/* A buffered HTTP reply. body is NUL-terminated (len excludes the NUL). */
struct docker_reply {
        long status;
        char *body;
        size_t len;
        char content_type[96];
};

#define DOCKER_REPLY_MAX_DEFAULT (16u << 20)

/* One request on this thread's keep-alive handle. `path` is unversioned
 * ("/containers/json?all=1"); the negotiated "/vX.Y" prefix is added here.
 * extra_timeout_ms is added to the client's timeout (stop ?t=, big archives).
 * max_reply caps the body (-EFBIG beyond it; 0 = DOCKER_REPLY_MAX_DEFAULT).
 * Returns 0 whenever an HTTP reply arrived (whatever its status), or a
 * negative errno for transport failures (err filled). */
int docker_http(struct docker *d, const char *method, const char *path, const char *content_type, const void *body,
                size_t body_len, long extra_timeout_ms, size_t max_reply, struct docker_reply *ret,
                struct sbx_error *err);
void docker_reply_done(struct docker_reply *r);

/* Append n bytes to a growing NUL-terminated buffer (capacity first_cap at
 * first, doubling). 0 or -ENOMEM (the buffer is unchanged). */
int docker_buf_append(char **data, size_t *len, size_t *cap, const void *p, size_t n, size_t first_cap);

/* GET path; a reply other than 200 becomes -errno + err (and is freed),
 * else *ret holds it. */
int docker_get_ok(struct docker *d, const char *path, long extra_timeout_ms, size_t max_reply, struct docker_reply *ret,
                  struct sbx_error *err);

/* Request + "status must be one of 2xx (or `also_ok`)" + optional parsed JSON. */
int docker_call(struct docker *d, const char *method, const char *path, const char *body, bool conflict_is_exists,
                long also_ok, long extra_timeout_ms, cJSON **ret_json, struct sbx_error *err);

/* Build "/prefix/<escaped id>/suffix" into a malloc'd string (NULL: no id, or out of memory). */
char *docker_path_with_id(const char *prefix, const char *id, const char *suffix, bool keep_slash);

/* Options every CURL handle of this client gets: the socket path, NOSIGNAL,
 * close-on-exec sockets, the connect timeout. (CURL is void in curl.h.) */
void docker_curl_common(void *curl, struct docker *d);

/* Turn a non-2xx reply into -errno + err (engine message, status). */
int docker_reply_error(const struct docker_reply *r, bool conflict_is_exists, struct sbx_error *err);

/* Write "/v1.43" (or "" before negotiation) into out. */
void docker_version_prefix(struct docker *d, char out[24]);

/* Fill err for a failure to reach the socket (errno-style code). */
int docker_unreachable(struct docker *d, int errnum, struct sbx_error *err);

/* Percent-encode s for use as one path segment (keeps [A-Za-z0-9-._~:@] and,
 * when keep_slash, '/'). Returns malloc'd string or NULL. */
char *docker_path_escape(const char *s, bool keep_slash);

/* cJSON accessors that tolerate missing / mistyped members. */
const char *docker_json_str(const cJSON *obj, const char *name);
int64_t docker_json_i64(const cJSON *obj, const char *name, int64_t def);
bool docker_json_bool(const cJSON *obj, const char *name);

/* Copy a label map (cJSON object of strings) into kvs: keys starting with
 * "sandboxd." first, then keys in `extra` (NULL-terminated "key" or
 * "key=value", may be NULL), then — if include_rest — the others, as long as
 * they fit. Returns the count. */
size_t docker_labels_collect(const cJSON *map, const char *const *extra, bool include_rest, struct docker_kv *kvs,
                             size_t cap);

/* {"label":["a=b",...]}; the caller may add members. NULL on OOM. */
cJSON *docker_filters_new(const char *const *label_filters);

/* docker_event_parse with the label keys of `filters` kept as well. */
int docker_event_parse_filtered(const char *json, size_t len, const char *const *filters, struct docker_event *ret);

#endif
