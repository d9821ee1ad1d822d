/* config.h — the daemon's configuration.
 *
 * One table of keys (name, type, range, default, field) drives the parser,
 * the environment overrides, --check-config, --print-config and the
 * documentation in etc/sandboxd.conf. The file format is `key = value` lines
 * and `[section]` lines: a key under [node] is node.key, and a dotted key
 * (node.listen) may be written anywhere; keys without a section come before
 * the first one. `#` starts a comment; values may be double-quoted. The
 * environment variable of a key is SANDBOXD_ and its name in capitals with
 * '.' as '_' (node.listen: SANDBOXD_NODE_LISTEN).
 *
 * Durations are a whole number with a unit, ms, s, m, h or d ("500ms",
 * "30s", "2h"), stored in the unit of the field (_ms or _s); a bare number
 * keeps its old meaning, the field's unit. Sizes take k, m, g, t (powers of
 * 1024).
 *
 * A key that was renamed or became a constant is refused with an error
 * naming its replacement (the old_keys table in config.c). Fields of keys
 * that became constants remain, set from the constant by config_defaults, so
 * tests can vary them. The result is a plain struct that is read-only once
 * loading returns. */
#ifndef SANDBOXD_CONFIG_H
#define SANDBOXD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/common.h"

#define SBX_PATH_MAX 512
#define CONFIG_KEYS_MAX 128

/* Where a key's effective value came from (--print-config). */
enum config_source_kind {
        CONFIG_SOURCE_DEFAULT,
        CONFIG_SOURCE_FILE, /* line of config_file */
        CONFIG_SOURCE_ENV,
};

struct config_source {
        uint8_t kind; /* enum config_source_kind */
        unsigned line;
};

struct sbx_config {
        /* what config_load read: the file ("" = none) and each key's source, by table index */
        char config_file[SBX_PATH_MAX];
        struct config_source source[CONFIG_KEYS_MAX];

        /* paths */
        char data_dir[SBX_PATH_MAX];
        char api_socket[SBX_PATH_MAX];
        char admin_socket[SBX_PATH_MAX];
        char admin_group[64];            /* "" → socket mode 0600, else 0660 with this group */
        int max_connections;             /* API socket, and HTTPS front, in total (0: config_max_connections) */
        int max_connections_per_uid;     /* API and admin sockets, per peer uid (root exempt; 0: max_sessions) */
        int max_unauthenticated_per_uid; /* API socket, per peer uid, before a token (root exempt) */
        int auth_timeout_ms;             /* a new API or HTTPS connection authenticates within this */
        int connection_idle_timeout_ms;  /* no request this long: the connection is closed */
        char docker_socket[SBX_PATH_MAX];
        char instance[64];

        /* engine (engine.h): "docker" | "kubernetes" (engine_kubernetes.h) */
        char engine[16];
        char kube_config[SBX_PATH_MAX];      /* kubeconfig; "" = in-cluster service account */
        char kube_namespace[64];             /* "" = the kubeconfig context's or the service account's */
        char kube_workspace[16];             /* "hostpath" | "pvc" */
        char kube_storage_class[256];        /* pvc: "" = the cluster's default */
        char kube_init_binary[SBX_PATH_MAX]; /* node path of the static init mounted as PID 1 */
        char kube_gvisor_class[64];          /* RuntimeClass of runtime = runsc */
        char kube_image_pull_policy[16];     /* Always | IfNotPresent | Never */
        int kube_start_timeout_ms;           /* a Pod runs within this or its start fails */
        char kube_node_dir[SBX_PATH_MAX];    /* node agents' data_dirs: {kube_node_dir}/<node name> (node.h) */

        /* network fronts (http.c); "" = off */
        char http_listen[128];                    /* host:port of the HTTPS API and MCP front */
        char tls_cert[SBX_PATH_MAX];              /* PEM certificate chain; "" = plain HTTP (loopback only) */
        char tls_key[SBX_PATH_MAX];               /* PEM private key */
        char tls_client_ca[SBX_PATH_MAX];         /* PEM CA: clients must present a certificate it signed */
        int http_timeout_s;                       /* idle limit */
        int http_max_connections_per_address;     /* per client address, IPv6 per /64 (0: max_sessions) */
        int http_max_unauthenticated;             /* connections before their first authenticated request */
        int http_max_unauthenticated_per_address; /* the same per client address (IPv6 per /64) */
        char metrics_listen[128];                 /* host:port (loopback) of /metrics and /healthz */

        /* the node link (node.h): "" = the node part runs in this process */
        char node_listen[128];        /* control: host:port node agents dial (TLS) */
        char node_connect[128];       /* node agent: host:port of the control daemon */
        char node_cert[SBX_PATH_MAX]; /* PEM certificate of this end (a node's: CN = its name) */
        char node_key[SBX_PATH_MAX];  /* its PEM private key */
        char node_ca[SBX_PATH_MAX];   /* PEM CA both ends' certificates chain to */
        char node_crl[SBX_PATH_MAX];  /* PEM CRL of node_ca, checked on every handshake ("" = none) */
        char node_control_name[64];   /* the name in the control daemon's certificate */
        char node_name[65];           /* control: the node whose sessions this daemon serves ("" = any one) */
        int node_heartbeat_ms;        /* link ping interval; silent for three: closed */
        int node_fence_ms;            /* a node away this long has its sessions fenced */
        char log_level[16];

        /* container */
        char image[256];
        char images[1024];          /* further images create_session may choose, comma-separated */
        char e2b_domain[254];       /* getHost(port) host names {port}-{id}.<domain>; "": off (e2b.h) */
        int e2b_proxy_max_per_user; /* getHost requests proxied at once, per user and in all */
        int e2b_proxy_max_total;
        char e2b_templates[1024];         /* E2B templates: "name=image,..." (e2b.h); "": base, code-interpreter-v1 */
        char runner_binary[SBX_PATH_MAX]; /* "" → sandboxd-runner next to the executable */
        int runner_heartbeat_ms;
        int64_t memory_bytes;
        int64_t nano_cpus;
        int64_t pids_limit;
        int cpu_shares;
        char workspace_quota_mode[16];
        int64_t workspace_quota_bytes;
        int workspace_inodes;
        int oom_score_adj;
        int64_t tmpfs_bytes;
        char runtime[16];         /* "runc" | "runsc" (gVisor) | "microvm"; per-user overrides in the store */
        char network_default[16]; /* "bridge" | "none" */
        char publish_ip[64];
        int forward_max_per_session;
        int forward_max_per_user;
        int forward_max_total;
        int sandbox_uid_lo; /* sandbox_uid_range: one host uid (and gid) per session (sessuid.h) */
        int sandbox_uid_hi;
        int docker_timeout_ms;

        /* ports */
        int port_range_lo;
        int port_range_hi;
        int ports_per_session;
        int container_port_base; /* block maps to container ports base..base+n-1 */

        /* sessions and monitoring */
        int max_sessions;
        int pool_size;                /* warm pool (pool.h): slots per image; 0: off */
        char pool_images[1024];       /* per-image overrides of pool_size: "image=N,..." */
        int pool_wait_ms;             /* a claim on a dry pool waits this long for the refill at most */
        char pool_cells_prestart[16]; /* "python": a slot starts its default run_cell context ahead; "none" */
        int max_sessions_per_user;    /* default of the per-user quota (quota.h) */
        int idle_timeout_s;           /* from the last use, running or paused */
        int pause_after_s;            /* unused this long: paused (0: off) */
        int max_paused_sessions;      /* past it the least recently used paused sessions are stopped */
        int max_paused_sessions_per_user;
        int64_t pause_min_mem_available_bytes; /* host MemAvailable below it: paused sessions stopped (0: off) */
        int monitor_interval_ms;
        int startup_checks;
        int startup_check_interval_ms;

        /* exec */
        int exec_timeout_default_s;
        int exec_timeout_max_s;
        int exec_kill_grace_ms;
        int max_exec_global;
        int max_exec_per_session;
        int max_exec_per_user;               /* default of the per-user quota (quota.h) */
        int64_t exec_output_cap_bytes;       /* spooled per stream per execution */
        int64_t max_spool_per_session_bytes; /* default of the per-user quota (quota.h) */
        int64_t exec_result_head_bytes;      /* head and tail returned inline */
        int64_t max_command_bytes;
        int max_scripts_per_user; /* the script cache (issue 17) */
        int64_t max_script_bytes_per_user;
        int session_ttl_max_s;
        int64_t max_stdin_bytes;
        /* what one session may ask for (sessspec.h); 0: the global setting (cpus, memory, workspace_quota) */
        int64_t max_session_nano_cpus;
        int64_t max_session_memory_bytes;
        int64_t max_session_disk_bytes;
        /* metrics: session labels counted by these keys (comma-separated), at most this many values each */
        char metrics_label_keys[512];
        int metrics_label_values_max;

        /* interpreter contexts (run_cell, issue 25) */
        int cells_max_per_session;
        int cells_max_global;
        int cells_idle_timeout_s;
        int cells_interrupt_grace_ms;
        int cells_start_timeout_ms;
        int64_t cells_output_cap_bytes;

        /* services */
        int max_services_per_session;
        int service_stop_grace_ms;

        /* files */
        int64_t max_file_bytes;

        /* egress proxy (egress.h, docs/security.md) */
        char egress_allow[4096];                 /* patterns (egress_policy.h); "" = nothing */
        char egress_allow_private[1024];         /* CIDR list exempt from the SSRF guard */
        char egress_resolve[2048];               /* name=ip,... static resolver overrides */
        char egress_upstream_proxy[300];         /* http://host:port or "" */
        char egress_packages_file[SBX_PATH_MAX]; /* egress_pkg.h: the package policy (JSON); "" = none */
        char secrets_key_file[SBX_PATH_MAX];     /* secrets.h: the key sealing secrets at rest; "" = secrets off */
        int egress_max_tunnels;                  /* open proxy connections, all sessions */
        int egress_max_tunnels_per_session;
        int egress_max_tunnels_per_user;
        int egress_conns_per_minute;          /* new connections per session per minute */
        int64_t egress_max_bytes_per_session; /* both ways, since the daemon started; 0 = no cap */
        int64_t egress_max_header_bytes;
        int egress_header_timeout_ms;
        int egress_connect_timeout_ms;
        int egress_idle_timeout_ms;
        int egress_max_rules; /* additions per user and per session */
        /* idempotency keys (api_idem.c) */
        int idempotency_window_s;
        int idempotency_max_keys; /* per user */
        /* the event log and webhooks (events.h, webhook.h) */
        int events_max;         /* rows the log keeps at most */
        int events_retention_s; /* and for at most this long */
        char webhook_url[1024]; /* http:// or https:// (operator only); "" = no webhook */
        char webhook_secret[256];
        char webhook_secret_file[SBX_PATH_MAX];
        char webhook_events[1024];     /* comma-separated types or "prefix.*"; "" = all */
        char webhook_ca[SBX_PATH_MAX]; /* PEM CA bundle for an https receiver; "" = the system's */
        int webhook_max_inflight;
        int webhook_max_retries;
        int webhook_timeout_ms;
        int webhook_backoff_ms; /* first retry after this, doubling, at most 60 s */

        /* gc */
        int max_age_s;
        int execution_retention_s;
        int workspace_retention_s; /* -1 = keep forever */
        int audit_retention_s;     /* -1 = keep forever */
        int snapshot_retention_s;  /* -1 = keep forever */

        /* workspace snapshots (snapshot.h) */
        int max_snapshots_per_user;
        int64_t max_snapshot_bytes_per_user;
};

/* Fill cfg with every default. */
void config_defaults(struct sbx_config *cfg);

/* Load: defaults, then the file (if path is non-NULL), then SANDBOXD_<KEY>
 * environment overrides (an old key's variable is an error naming its
 * replacement), then cross-key checks. On failure returns -EINVAL
 * (or -errno for an unreadable file) and writes a message naming the file,
 * line and reason into err. path NULL means "no file". */
int config_load(const char *path, struct sbx_config *ret, struct sbx_error *err);

/* Apply one `key = value` (as from the file). Returns 0 or -EINVAL with err
 * explaining why (unknown key, malformed, out of range). */
int config_set(struct sbx_config *cfg, const char *key, const char *value, struct sbx_error *err);

/* Write every key with its current value, a one-line description and where
 * the value came from ("# from: default", "FILE:LINE" or the environment
 * variable's name), grouped in sections, in the format of etc/sandboxd.conf
 * (--print-config). */
void config_dump(const struct sbx_config *cfg, int fd);

/* image is the config's image or one of images (exact names). */
bool config_image_allowed(const struct sbx_config *cfg, const char *image);

/* The images sessions may use: image first, then those of images not equal
 * to it, at most max of them (names longer than 255 bytes are skipped).
 * Returns how many. */
size_t config_image_list(const struct sbx_config *cfg, char (*ret)[256], size_t max);

/* The warm pool's size for image: its pool_images override, else pool_size. */
/* The connection caps with their derived defaults (a key set to 0): every
 * session's agent can hold a connection at once (max_sessions), and the
 * fronts keep 64 more for everyone else. */
int config_max_connections(const struct sbx_config *cfg);
int config_max_connections_per_uid(const struct sbx_config *cfg);
int config_http_max_per_address(const struct sbx_config *cfg);
int config_pool_size_for(const struct sbx_config *cfg, const char *image);

/* Iterate over known key names (NULL past the end). */
const char *config_key_name(size_t i);

/* Iterate over the names of keys that no longer exist (renamed or made
 * constants; NULL past the end). */
const char *config_old_key_name(size_t i);

/* Parse a duration: a whole number with a unit ms, s, m, h or d, into
 * *ret in units of unit_ms (1: milliseconds, 1000: seconds). A bare number is
 * taken in the field's own unit (and may be negative: -1 means forever where
 * a key allows it). Returns 0, -ERANGE, or -EINVAL (malformed, or a value
 * that is not a whole number of the field's unit, like 1500ms in seconds). */
int config_parse_duration(const char *v, int64_t unit_ms, int64_t *ret);

#endif
