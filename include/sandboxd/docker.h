/* docker.h — Docker Engine API client (the only code that speaks HTTP to dockerd).
 *
 * libcurl over the engine's Unix socket. One `struct docker` is shared by all
 * threads; each thread lazily gets its own keep-alive CURL handle (thread-local,
 * freed when the thread exits). The API version is negotiated once by
 * docker_negotiate(): the lower of the engine's and DOCKER_API_VERSION_MAX.
 *
 * Every call takes an optional `struct sbx_error *`; on failure it carries the
 * HTTP status (0 for transport errors) and the engine's own message. Every call
 * is bounded by the client's timeout (events and attached exec streams are
 * bounded by their own arguments instead). Returns 0 or a negative errno:
 *   -ENOENT  404 (no such container / image / exec)
 *   -EEXIST  409 conflict on create/rename
 *   -EBUSY   409 conflict otherwise (e.g. container not running)
 *   -EIO     other HTTP errors (and transport failures not listed here)
 *   -ETIMEDOUT  no complete reply within the bound
 *   -ECONNREFUSED / -ENOENT  the socket refuses connections / does not exist
 *   -EFBIG   a reply larger than the call's cap
 *   -EPROTO  unparseable reply.
 * A missing or dead socket fails fast with "cannot reach Docker at <path>: <why>".
 * The caller calls docker_global_init() once (main, before any thread starts).
 * Low module: it logs at debug level only. */
#ifndef SANDBOXD_DOCKER_H
#define SANDBOXD_DOCKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/common.h"

#define DOCKER_API_VERSION_MAX "1.43"

struct docker;

/* The transport's process-wide set-up (libcurl's global init): once, in main,
 * before any thread starts. 0 or -EIO. Cleanup after the last client is freed. */
int docker_global_init(void);
void docker_global_cleanup(void);

/* Engine API calls that failed for a reason other than the engine's ordinary
 * answers (transport, timeout, a 5xx), since the process started (metrics.c). */
uint64_t docker_api_errors(void);

/* Create a client for the given socket. timeout_ms bounds every ordinary call
 * (<= 0: 30 s). Does no I/O. Returns NULL on OOM or an empty path. Several
 * clients may coexist; each has its own per-thread handles. */
struct docker *docker_new(const char *socket_path, long timeout_ms);
/* Free the client and every thread's handle for it. No other thread may be
 * using it any more. Accepts NULL. */
void docker_free(struct docker *d);

/* The errno for an HTTP status, as listed above (0 for 2xx). conflict_is_exists
 * picks -EEXIST over -EBUSY for 409 (create, rename). */
int docker_status_to_errno(long status, bool conflict_is_exists);

/* GET /_ping (unversioned before negotiation). */
int docker_ping(struct docker *d, struct sbx_error *err);

/* GET /version, then pin the API version used in every later path ("/v1.43/...").
 * Safe to call more than once. Before it, calls use the unversioned paths. */
int docker_negotiate(struct docker *d, struct sbx_error *err);
/* The negotiated API version ("1.43"), or NULL before docker_negotiate().
 * The pointer stays valid until docker_free(). */
const char *docker_api_version(struct docker *d);

struct docker_version {
        char version[64];     /* engine version, e.g. "20.10.24+dfsg1" */
        char api_version[16]; /* engine's max API version */
        char min_api_version[16];
        char os[32];
        char arch[32];
};
/* GET /version. */
int docker_version(struct docker *d, struct docker_version *ret, struct sbx_error *err);

struct docker_image_info {
        char id[80];      /* "sha256:..." */
        char digest[160]; /* first RepoDigests entry, "" for local-only images */
        char recipe[80];  /* label sandboxd.recipe, "" if absent */
};
/* GET /images/{name}/json. -ENOENT when the image does not exist locally. */
int docker_image_inspect(struct docker *d, const char *image, struct docker_image_info *ret, struct sbx_error *err);

/* ---- containers ---- */

struct docker_label {
        const char *key;
        const char *value;
};

struct docker_port_binding {
        int container_port; /* tcp */
        int host_port;
        const char *host_ip; /* NULL means "127.0.0.1" */
};

/* All pointers are borrowed for the duration of the call. String arrays are
 * NULL-terminated and may be NULL. Zero numeric limits are left unset. */
struct docker_container_spec {
        const char *name; /* optional container name */
        const char *image;
        const char *user;              /* "1000:1000" */
        const char *const *cmd;        /* optional argv; NULL keeps the image's */
        const char *const *entrypoint; /* optional */
        const char *const *env;        /* "K=V" */
        const char *workdir;           /* optional */
        const char *hostname;          /* optional */
        const char *const *binds;      /* "host:container:rw" */
        const char *const *tmpfs;      /* "/tmp:rw,noexec,nosuid,size=64m" → Tmpfs map */
        const char *const *cap_drop;   /* e.g. {"ALL", NULL} */
        const char *const *cap_add;
        const char *const *security_opt; /* e.g. {"no-new-privileges:true", NULL} */
        const struct docker_port_binding *ports;
        size_t n_ports;
        const struct docker_label *labels;
        size_t n_labels;
        int64_t memory; /* bytes; memory_swap is set equal (no swap) unless memory_swap != 0 */
        int64_t memory_swap;
        int64_t nano_cpus;
        int64_t pids_limit;
        int64_t cpu_shares; /* relative CPU weight (CpuShares; cgroup v2 cpu.weight); 0: engine default */
        int oom_score_adj;  /* OomScoreAdj; 0 leaves it out */
        bool readonly_rootfs;
        bool init;
        bool privileged;          /* always false from sandboxd; here for tests of the mapper */
        const char *network_mode; /* "bridge" | "none" | NULL (engine default) */
        const char *runtime;      /* HostConfig.Runtime: "runc" | "runsc" | NULL (engine default) */
        bool open_stdin;          /* keep STDIN open (OpenStdin) */
};

/* GET /info: whether the engine lists `name` among its OCI runtimes (daemon.json "runtimes"). */
int docker_has_runtime(struct docker *d, const char *name, bool *ret, struct sbx_error *err);

/* POST /containers/create?name=. *ret_id (64 hex + NUL) is written on success.
 * A missing image is -ENOENT ("No such image: <name>"); a taken name -EEXIST. */
int docker_container_create(struct docker *d, const struct docker_container_spec *spec, char ret_id[65],
                            struct sbx_error *err);
/* Build the create body without sending it (for tests). Caller frees. */
char *docker_container_spec_to_json(const struct docker_container_spec *spec);

/* POST /containers/{id}/start. A container that already runs is success (304). */
int docker_container_start(struct docker *d, const char *id, struct sbx_error *err);
/* POST /containers/{id}/stop?t=timeout_s. A container that was already stopped
 * is success. The call's bound is the client timeout plus timeout_s. */
int docker_container_stop(struct docker *d, const char *id, int timeout_s, struct sbx_error *err);
/* POST /containers/{id}/kill?signal=sig (sig like "SIGKILL", NULL for default).
 * -EBUSY if the container is not running. */
int docker_container_kill(struct docker *d, const char *id, const char *signal, struct sbx_error *err);
/* DELETE /containers/{id}?force=...&v=1. A missing container is -ENOENT. */
int docker_container_remove(struct docker *d, const char *id, bool force, struct sbx_error *err);
/* POST /containers/{id}/pause and /unpause. -EBUSY if it is not running (pause) or not paused. */
int docker_container_pause(struct docker *d, const char *id, struct sbx_error *err);
int docker_container_unpause(struct docker *d, const char *id, struct sbx_error *err);
/* POST /containers/{id}/rename?name=. -EEXIST if the name is taken. */
int docker_container_rename(struct docker *d, const char *id, const char *new_name, struct sbx_error *err);

#define DOCKER_MAX_LABELS 16
struct docker_kv {
        char key[64];
        char value[160];
};

struct docker_container_info {
        char id[65];
        char name[128];    /* without the leading '/' */
        char image[160];   /* Config.Image as given at create */
        char image_id[80]; /* Image ("sha256:...") */
        char status[16];   /* created|running|paused|restarting|removing|exited|dead */
        bool running;
        bool restarting;
        bool oom_killed;
        bool dead;
        int exit_code;
        int pid;
        int restart_count;
        char started_at[40]; /* RFC 3339 as Docker gives it */
        char finished_at[40];
        char error[256];       /* State.Error */
        char network_mode[64]; /* HostConfig.NetworkMode */
        char runtime[32];      /* HostConfig.Runtime */
        bool has_network;      /* NetworkSettings.Networks has any network other than "none" */
        /* selected HostConfig fields, for verification */
        bool readonly_rootfs;
        bool init;
        bool privileged;
        int64_t memory, memory_swap, nano_cpus, pids_limit, cpu_shares;
        int oom_score_adj;
        /* Config.Labels: sandboxd.* first, then the others while they fit;
         * a key or value too long for struct docker_kv is left out. */
        struct docker_kv labels[DOCKER_MAX_LABELS];
        size_t n_labels;
};
/* GET /containers/{id}/json. */
int docker_container_inspect(struct docker *d, const char *id, struct docker_container_info *ret,
                             struct sbx_error *err);
/* Parse an inspect reply body (exposed for unit tests). 0 or -EPROTO. */
int docker_container_info_parse(const char *json, struct docker_container_info *ret);
/* Value of a label in an info/summary, or NULL. */
const char *docker_kv_get(const struct docker_kv *kvs, size_t n, const char *key);

struct docker_container_summary {
        char id[65];
        char name[128];
        char state[16];  /* running, exited, ... */
        int64_t created; /* unix seconds */
        struct docker_kv labels[DOCKER_MAX_LABELS];
        size_t n_labels;
};
/* GET /containers/json?all=...&filters={"label":[...]}. label_filters is a
 * NULL-terminated list of "key" or "key=value". *ret_list is malloc'd (free()). */
int docker_container_list(struct docker *d, const char *const *label_filters, bool all,
                          struct docker_container_summary **ret_list, size_t *ret_n, struct sbx_error *err);
/* Parse a list reply body (exposed for unit tests). 0, -EPROTO or -ENOMEM. */
int docker_container_list_parse(const char *json, struct docker_container_summary **ret_list, size_t *ret_n);

/* GET /containers/{id}/logs?stdout=1&stderr=1&tail=N (N < 0: all), demultiplexed
 * and joined (stdout and stderr interleaved in arrival order; a TTY container's
 * raw log is passed through). *ret_text is malloc'd, NUL-terminated. */
int docker_container_logs(struct docker *d, const char *id, int tail_lines, char **ret_text, struct sbx_error *err);

struct docker_stats {
        uint64_t memory_usage;
        uint64_t memory_limit;
        uint64_t pids;
        uint64_t cpu_total_ns;
};
/* GET /containers/{id}/stats?stream=false&one-shot=true. Fields the engine
 * does not report (e.g. of a stopped container) are 0. */
int docker_container_stats(struct docker *d, const char *id, struct docker_stats *ret, struct sbx_error *err);

/* ---- archive ---- */

/* PUT /containers/{id}/archive?path=dir — extracts a tar into dir. */
int docker_archive_put(struct docker *d, const char *id, const char *dir, const void *tar, size_t len,
                       struct sbx_error *err);
/* GET /containers/{id}/archive?path=p — a tar of p. Fails with -EFBIG if the
 * reply exceeds max_bytes (0: 16 MiB). *ret_tar is malloc'd. -ENOENT if the
 * container or the path does not exist. */
int docker_archive_get(struct docker *d, const char *id, const char *path, size_t max_bytes, void **ret_tar,
                       size_t *ret_len, struct sbx_error *err);

/* ---- exec ---- */

struct docker_exec_spec {
        const char *const *cmd; /* argv, required */
        const char *const *env;
        const char *workdir;
        const char *user;
        bool attach_stdin;
};
/* POST /containers/{id}/exec (stdout and stderr always attached, no TTY).
 * ret_exec_id: 64 hex + NUL. -EBUSY if the container is not running. */
int docker_exec_create(struct docker *d, const char *container_id, const struct docker_exec_spec *spec,
                       char ret_exec_id[65], struct sbx_error *err);

/* A started exec's hijacked connection (POST /exec/{id}/start, Upgrade: tcp).
 * Not thread-safe: one reader; docker_stream_write/close_write may be called
 * from another thread only with external locking. */
struct docker_stream;

enum docker_stream_kind {
        DOCKER_STREAM_STDIN = 0,
        DOCKER_STREAM_STDOUT = 1,
        DOCKER_STREAM_STDERR = 2,
};

/* Incremental demultiplexer for the non-TTY stream format of exec/attach/logs:
 * frames of an 8-byte header {type, 0, 0, 0, big-endian uint32 length} and
 * the payload. Headers and payloads may be split anywhere across reads.
 * Exposed for unit tests and for callers that demultiplex their own bytes. */
struct docker_demux {
        uint8_t hdr[8];
        size_t hdr_len;   /* header bytes collected so far */
        size_t remaining; /* payload bytes of the current frame still to come */
        enum docker_stream_kind kind;
};
void docker_demux_init(struct docker_demux *m);
/* Consume bytes from data[0, len). Returns how many were consumed, or -EPROTO
 * for a malformed header. When payload is at hand, *ret_payload points into
 * data, *ret_payload_len (1..max_payload) is set with *ret_kind (type 0 and 1
 * → STDOUT, 2 and the engine's 3 "systemerr" → STDERR); otherwise
 * *ret_payload_len is 0. Call again with the unconsumed rest. */
ssize_t docker_demux_next(struct docker_demux *m, const void *data, size_t len, size_t max_payload,
                          enum docker_stream_kind *ret_kind, const void **ret_payload, size_t *ret_payload_len);
/* True between frames (nothing of a frame pending). */
bool docker_demux_idle(const struct docker_demux *m);

/* Start the exec and return the attached stream. Uses its own connection (a
 * plain AF_UNIX socket, SOCK_CLOEXEC); connect and reply headers are bounded
 * by the client timeout. An unknown exec id is -ENOENT. */
int docker_exec_attach(struct docker *d, const char *exec_id, struct docker_stream **ret_stream, struct sbx_error *err);
/* The fd to poll(2) for readability. */
int docker_stream_fd(struct docker_stream *s);
/* Read the next demultiplexed chunk into buf (up to cap bytes). Blocks until
 * data, or up to timeout_ms (-1 forever). Returns >0 bytes read with
 * *ret_kind set, 0 on end of stream, -ETIMEDOUT, or another -errno. */
ssize_t docker_stream_read(struct docker_stream *s, enum docker_stream_kind *ret_kind, void *buf, size_t cap,
                           int timeout_ms);
/* Write to the exec's stdin (all of it), waiting up to timeout_ms (-1
 * forever) while the socket is full: -ETIMEDOUT then (part of buf may have
 * been written). -EPIPE once the process has closed its stdin. */
int docker_stream_write(struct docker_stream *s, const void *buf, size_t len, int timeout_ms);
/* Write what the socket takes now, never waiting: the bytes written (0 when
 * it is full), or -errno (-EPIPE once the process has closed its stdin). */
ssize_t docker_stream_write_some(struct docker_stream *s, const void *buf, size_t len);
/* Wait up to timeout_ms until a read would not block (buffered bytes, data,
 * end of stream) or, with writable, a write would take bytes. 0 when ready,
 * -ETIMEDOUT, or -errno. */
int docker_stream_wait(struct docker_stream *s, bool writable, int timeout_ms);
/* Signal end-of-input (shutdown(SHUT_WR)). */
int docker_stream_close_write(struct docker_stream *s);
/* Close the connection (the process keeps running). Accepts NULL. */
void docker_stream_free(struct docker_stream *s);

struct docker_exec_info {
        bool running;
        int exit_code; /* -1 while running */
        int pid;       /* host pid namespace view */
};
/* GET /exec/{id}/json. */
int docker_exec_inspect(struct docker *d, const char *exec_id, struct docker_exec_info *ret, struct sbx_error *err);

/* Convenience: create, attach, feed stdin_data (may be NULL) then EOF, collect
 * stdout and stderr (each capped at max_output bytes, 0 = 1 MiB; the rest is
 * dropped and `truncated` set), inspect. Three requests: create, start
 * (attached), inspect (repeated briefly while the engine has not yet recorded
 * the exit code). stdin is attached when stdin_data is given or
 * spec->attach_stdin is set; an attached stdin always gets EOF once the data is
 * written. Outputs are malloc'd and NUL-terminated; *ret is written only on
 * success. timeout_ms (-1: none) bounds the whole run (-ETIMEDOUT; the process
 * is not killed). */
struct docker_exec_result {
        int exit_code;
        char *out;
        size_t out_len;
        char *err;
        size_t err_len;
        bool truncated;
};
int docker_exec_run(struct docker *d, const char *container_id, const struct docker_exec_spec *spec,
                    const void *stdin_data, size_t stdin_len, size_t max_output, int timeout_ms,
                    struct docker_exec_result *ret, struct sbx_error *err);
/* Free the outputs of a result (accepts NULL; safe to call twice). */
void docker_exec_result_done(struct docker_exec_result *r);

/* ---- events ---- */

struct docker_event {
        char type[16];   /* "container" */
        char action[32]; /* "die", "oom", "kill", "stop", "destroy", "start", ... (trimmed before ':',
                            so "exec_start: sh -c x" → "exec_start", "health_status: healthy" → "health_status") */
        char id[65];
        int exit_code; /* from Actor.Attributes.exitCode, -1 if absent */
        int64_t time_nano;
        struct docker_kv
                labels[DOCKER_MAX_LABELS]; /* the Actor.Attributes that are labels we filtered on or sandboxd.* */
        size_t n_labels;
};
/* Parse one event object (exposed for unit tests): labels keep sandboxd.* only.
 * 0 or -EPROTO. */
int docker_event_parse(const char *json, struct docker_event *ret);

/* Return non-zero from the callback to stop the stream. */
typedef int (*docker_event_cb)(const struct docker_event *ev, void *userdata);

/* Follow GET /events with filters type=container, the given label filters
 * (NULL-terminated "key=value") and actions (NULL-terminated, or NULL for all).
 * Blocks, calling cb for each event (on the calling thread; cb may call other
 * docker_* functions). After a dropped connection it reconnects with
 * since=<last event time> so nothing is missed (the event already delivered is
 * not repeated), backing off from 100 ms up to 1s. Returns 0 when cb asks to
 * stop or *stop (may be NULL) becomes true (checked at least every 200 ms), the
 * engine's error if it rejects the request (4xx), or -errno if the engine
 * cannot be reached for reconnect_limit_ms (0 = retry forever). */
int docker_events_follow(struct docker *d, const char *const *label_filters, const char *const *actions,
                         docker_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                         struct sbx_error *err);

/* ---- networks (the sandboxd-owned bridge of network_default = bridge) ---- */

/* POST /networks/create: a bridge network with labels and driver options.
 * -EEXIST when one of that name exists. */
int docker_network_create(struct docker *d, const char *name, const struct docker_label *labels, size_t n_labels,
                          const struct docker_label *options, size_t n_options, struct sbx_error *err);
/* GET /networks/{name}: the value of one driver option ("" if unset). -ENOENT if none. */
int docker_network_inspect_option(struct docker *d, const char *name, const char *option, char *ret, size_t size,
                                  struct sbx_error *err);
/* DELETE /networks/{name}. -ENOENT if none; -EEXIST/-EBUSY while containers use it. */
int docker_network_remove(struct docker *d, const char *name, struct sbx_error *err);
/* GET /networks?filters={"label":[...]}: the names (malloc'd array). */
int docker_network_list(struct docker *d, const char *const *label_filters, char (**ret_names)[128], size_t *ret_n,
                        struct sbx_error *err);

#endif
