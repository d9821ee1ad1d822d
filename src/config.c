/* config.c — the config table and its parser.
 *
 * One table row per key: name, type, range, default, field offset and a
 * one-line description; a second table (old_keys) holds the keys that were
 * renamed or became constants, for the error that names their replacement.
 * The parser, the SANDBOXD_<SECTION>_<KEY> environment overrides,
 * config_dump() and --check-config all walk the same tables, so a key cannot
 * exist in one place and be missing from another. No state, no locks: the
 * result is a plain struct the caller treats as read-only. */
#include "sandboxd/config.h"
#include "sandboxd/api.h"
#include "sandboxd/cells.h"
#include "sandboxd/container.h"
#include "sandboxd/e2b.h"
#include "sandboxd/egress.h"
#include "sandboxd/egress_pkg.h"
#include "sandboxd/egress_policy.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/engine.h"
#include "sandboxd/engine_kubernetes.h"
#include "sandboxd/events.h"
#include "sandboxd/exec.h"
#include "sandboxd/gateway.h"
#include "sandboxd/gc.h"
#include "sandboxd/http.h"
#include "sandboxd/metrics.h"
#include "sandboxd/monitor.h"
#include "sandboxd/node.h"
#include "sandboxd/pool.h"
#include "sandboxd/hub.h"
#include "sandboxd/scripts.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/sessspec.h"
#include "sandboxd/webhook.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum config_type {
        CFG_STRING,   /* copied into a char[] field */
        CFG_PATH,     /* absolute path string */
        CFG_ENUM,     /* one of `choices` */
        CFG_INT,      /* int, plain integer */
        CFG_DURATION, /* int seconds: a duration (see parse_duration); or -1 where min allows */
        CFG_MS,       /* int milliseconds: a duration (see parse_duration) */
        CFG_SIZE,     /* int64 bytes; accepts suffix k, m, g (powers of 1024) */
        CFG_CPUS,     /* int64 nano-CPUs; value is a decimal number of CPUs */
        CFG_RANGE,    /* "lo-hi" into two ints (field, field2) */
};

struct config_key {
        const char *name;
        enum config_type type;
        size_t offset;
        size_t size;    /* for strings */
        size_t offset2; /* for ranges */
        int64_t min, max;
        const char *def;
        const char *choices; /* for enums, '|'-separated */
        const char *doc;
};

#define F(field) offsetof(struct sbx_config, field), sizeof(((struct sbx_config *)0)->field)

static const struct config_key keys[] = {
        /* no section: the sandboxes and the daemon itself */
        {"data_dir", CFG_PATH, F(data_dir), 0, 0, 0, "/var/lib/sandboxd", NULL,
         "state: sqlite file, workspaces, execution spools"},
        {"api_socket", CFG_PATH, F(api_socket), 0, 0, 0, "/run/sandboxd/api.sock", NULL,
         "Unix socket for agents and connectors (token auth)"},
        {"admin_socket", CFG_PATH, F(admin_socket), 0, 0, 0, "/run/sandboxd/admin.sock", NULL,
         "Unix socket for admins (file permissions + peer credentials)"},
        {"admin_group", CFG_STRING, F(admin_group), 0, 0, 0, "", NULL,
         "empty: admin socket mode 0600; else 0660 owned by this group"},
        {"docker_socket", CFG_PATH, F(docker_socket), 0, 0, 0, "/var/run/docker.sock", NULL,
         "the Docker Engine API socket"},
        {"engine", CFG_ENUM, F(engine), 0, 0, 0, "docker", "docker|kubernetes",
         "what runs the sandboxes: the local dockerd, or Pods of a Kubernetes cluster (docs/operations.md: Run on "
         "Kubernetes)"},
        {"instance", CFG_STRING, F(instance), 0, 0, 0, "default", NULL,
         "label value that keeps several daemons on one engine apart ([A-Za-z0-9_.-])"},
        {"log_level", CFG_ENUM, F(log_level), 0, 0, 0, "info", "debug|info|warn|error", "minimum level logged"},
        {"runner_binary", CFG_STRING, F(runner_binary), 0, 0, 0, "", NULL,
         "in-container runner (root-owned, static); empty: sandboxd-runner next to the daemon; missing: docker exec"},
        {"image", CFG_STRING, F(image), 0, 0, 0, "sandboxd/python:latest", NULL,
         "sandbox image (built by scripts/build-images.sh)"},
        {"images", CFG_STRING, F(images), 0, 0, 0, "", NULL,
         "further images create_session may choose, comma-separated (image is always allowed)"},
        {"secrets_key_file", CFG_STRING, F(secrets_key_file), 0, 0, 0, "", NULL,
         "file of the 256-bit key sealing users' secrets at rest (sandboxctl secret keygen PATH); outside data_dir, "
         "mode 0600; empty: secrets off"},
        {"memory", CFG_SIZE, F(memory_bytes), 0, 16 << 20, INT64_C(1) << 40, "1g", NULL,
         "memory limit per container; swap is disabled (MemorySwap = Memory)"},
        {"cpus", CFG_CPUS, F(nano_cpus), 0, 10000000, INT64_C(256) * 1000000000, "1", NULL,
         "CPU limit per container, in CPUs (decimal)"},
        {"pids_limit", CFG_INT, F(pids_limit), 0, 8, 1 << 20, "256", NULL, "max processes per container"},
        {"runtime", CFG_ENUM, F(runtime), 0, 0, 0, "runc", "runc|runsc|microvm",
         "runtime of sandbox containers (runsc: gVisor, sealed; microvm: a QEMU microVM, needs scripts/build-vm.sh's "
         "guest); per user: sandboxctl runtime"},
        {"network_default", CFG_ENUM, F(network_default), 0, 0, 0, "none", "bridge|none",
         "network of sessions without private data: none = sealed (egress proxy, port forwards by the daemon); "
         "bridge = sandboxd's own bridge network, inter-container traffic off"},
        {"publish_ip", CFG_STRING, F(publish_ip), 0, 0, 0, "127.0.0.1", NULL,
         "host address the daemon listens on for the session port blocks"},
        {"sandbox_uid_range", CFG_RANGE, F(sandbox_uid_lo), offsetof(struct sbx_config, sandbox_uid_hi), 1000,
         2147483646, "200000-299999", NULL,
         "host uids (and gids) handed out one per session: its processes run as it and it owns the workspace; "
         "no host account may hold one"},
        {"port_range", CFG_RANGE, F(port_range_lo), offsetof(struct sbx_config, port_range_hi), 1024, 65535,
         "20000-29999", NULL, "host ports handed out to sessions"},
        {"ports_per_session", CFG_INT, F(ports_per_session), 0, 0, 1000, "5", NULL,
         "fixed block of host ports per session (0: none)"},
        {"idle_timeout", CFG_DURATION, F(idle_timeout_s), 0, 10, 86400 * 365, "2h", NULL,
         "a session unused this long is stopped (workspace kept), counted from its last use whether it runs or is "
         "paused"},
        {"pause_after", CFG_DURATION, F(pause_after_s), 0, 0, 86400 * 365, "10m", NULL,
         "a session unused this long with nothing running is paused (frozen, memory kept) before idle_timeout stops "
         "it; any request resumes it (0: off)"},
        /* [connections] */
        {"connections.max", CFG_INT, F(max_connections), 0, 0, 1000000, "0", NULL,
         "open connections at most, to the API socket and to the HTTPS front each (the admin socket has its own "
         "16); 0: limits.sessions + 64, so every session's agent can hold one"},
        {"connections.max_per_uid", CFG_INT, F(max_connections_per_uid), 0, 0, 1000000, "0", NULL,
         "open connections to the API or admin socket per peer uid (SO_PEERCRED); root is not capped; "
         "0: limits.sessions"},
        {"connections.auth_timeout", CFG_MS, F(auth_timeout_ms), 0, 100, 600000, "5s", NULL,
         "a new API socket or HTTPS connection must send an authenticated request within this"},
        {"connections.idle_timeout", CFG_MS, F(connection_idle_timeout_ms), 0, 1000, 86400000, "5m", NULL,
         "an API or admin connection with no request this long is closed"},
        /* [http] */
        {"http.listen", CFG_STRING, F(http_listen), 0, 0, 0, "", NULL,
         "host:port of the HTTPS API and MCP front (empty: off; plain HTTP only on loopback)"},
        {"http.tls_cert", CFG_STRING, F(tls_cert), 0, 0, 0, "", NULL,
         "PEM certificate (chain) of http.listen; empty: plain HTTP, allowed on loopback only"},
        {"http.tls_key", CFG_STRING, F(tls_key), 0, 0, 0, "", NULL, "PEM private key of http.tls_cert"},
        {"http.tls_client_ca", CFG_STRING, F(tls_client_ca), 0, 0, 0, "", NULL,
         "PEM CA file: when set, HTTPS clients must present a certificate it signed (mTLS)"},
        /* [e2b] */
        {"e2b.templates", CFG_STRING, F(e2b_templates), 0, 0, 0, "", NULL,
         "E2B templates as images, \"name=image,...\" (each image: image or one of images); empty: base and "
         "code-interpreter-v1 to image (docs/e2b.md)"},
        {"e2b.domain", CFG_STRING, F(e2b_domain), 0, 0, 0, "", NULL,
         "E2B's sandbox domain: the front serves getHost(port) host names {port}-{sandboxID}.<domain> "
         "(wildcard DNS to the front); empty: off (docs/e2b.md)"},
        {"e2b.proxy_max_per_user", CFG_INT, F(e2b_proxy_max_per_user), 0, 1, 100000, "64", NULL,
         "getHost(port) requests proxied at once into one user's sandboxes (in all: E2B_PROXY_MAX_TOTAL, e2b.h)"},
        /* [metrics] */
        {"metrics.listen", CFG_STRING, F(metrics_listen), 0, 0, 0, "", NULL,
         "loopback host:port serving /metrics (Prometheus text) and /healthz (empty: off)"},
        {"metrics.label_keys", CFG_STRING, F(metrics_label_keys), 0, 0, 0, "", NULL,
         "session label keys /metrics counts sessions by (comma-separated, at most 8); empty: none"},
        /* [node] */
        {"node.listen", CFG_STRING, F(node_listen), 0, 0, 0, "", NULL,
         "host:port where node agents (sandboxd node) connect over mutual TLS; empty: the node part runs in "
         "this process"},
        {"node.connect", CFG_STRING, F(node_connect), 0, 0, 0, "", NULL,
         "sandboxd node: host:port of the control daemon's node.listen"},
        {"node.cert", CFG_STRING, F(node_cert), 0, 0, 0, "", NULL,
         "node link: PEM certificate of this end (a node agent's common name is its node name; the control "
         "daemon's names sandboxd-control, NODE_CONTROL_NAME in node.h)"},
        {"node.key", CFG_STRING, F(node_key), 0, 0, 0, "", NULL, "node link: PEM private key of node.cert"},
        {"node.ca", CFG_STRING, F(node_ca), 0, 0, 0, "", NULL,
         "node link: PEM CA that signs the control daemon's and every node agent's certificate"},
        {"node.crl", CFG_STRING, F(node_crl), 0, 0, 0, "", NULL,
         "node link: PEM CRL of node.ca, read again on a handshake after it changed; unreadable: every "
         "handshake is refused"},
        {"node.name", CFG_STRING, F(node_name), 0, 0, 0, "", NULL,
         "node link, engine = docker: every session goes to this node (certificate common name); empty: the "
         "connected node with the fewest sessions (a session keeps its node while its container lives)"},
        {"node.fence", CFG_MS, F(node_fence_ms), 0, 100, 86400000, "30s", NULL,
         "a node agent away this long: the sessions placed on it are fenced (failed, new epoch) and their "
         "executions lost"},
        /* [kubernetes] */
        {"kubernetes.config", CFG_STRING, F(kube_config), 0, 0, 0, "", NULL,
         "engine = kubernetes: a kubeconfig (client certificate or token); empty: the Pod's service account"},
        {"kubernetes.namespace", CFG_STRING, F(kube_namespace), 0, 0, 0, "", NULL,
         "engine = kubernetes: the namespace of the sandbox Pods (empty: the kubeconfig context's or the service "
         "account's)"},
        {"kubernetes.workspace", CFG_ENUM, F(kube_workspace), 0, 0, 0, "hostpath", "hostpath|pvc",
         "engine = kubernetes: workspaces as node directories (hostpath: single-node clusters) or one "
         "PersistentVolumeClaim per session of workspace.quota bytes (pvc)"},
        {"kubernetes.storage_class", CFG_STRING, F(kube_storage_class), 0, 0, 0, "", NULL,
         "engine = kubernetes, kubernetes.workspace = pvc: the claims' StorageClass (empty: the cluster's default)"},
        {"kubernetes.init_binary", CFG_STRING, F(kube_init_binary), 0, 0, 0, "/usr/bin/tini-static", NULL,
         "engine = kubernetes: the static init on every node, PID 1 of each sandbox Pod (Docker's docker-init)"},
        {"kubernetes.image_pull_policy", CFG_ENUM, F(kube_image_pull_policy), 0, 0, 0, "IfNotPresent",
         "Always|IfNotPresent|Never", "engine = kubernetes: imagePullPolicy of sandbox Pods"},
        {"kubernetes.start_timeout", CFG_MS, F(kube_start_timeout_ms), 0, 1000, 3600000, "2m", NULL,
         "engine = kubernetes: a sandbox Pod runs within this (scheduling and image pull) or its start fails"},
        /* [workspace] */
        {"workspace.quota_mode", CFG_ENUM, F(workspace_quota_mode), 0, 0, 0, "off", "off|project|loop|measure",
         "workspace disk quota: loop = an ext4 image per workspace; measure = refuse work once over (docs/operations.md)"},
        {"workspace.quota", CFG_SIZE, F(workspace_quota_bytes), 0, 16 << 20, INT64_C(1) << 44, "1g", NULL,
         "bytes per session workspace (loop: the image size, file system metadata included)"},
        {"workspace.inodes", CFG_INT, F(workspace_inodes), 0, 1024, 1 << 26, "65536", NULL,
         "files and directories per session workspace"},
        /* [pool] */
        {"pool.size", CFG_INT, F(pool_size), 0, 0, 1000, "2", NULL,
         "warm pool: containers made ahead for new sessions, per image sessions may use (image and images; "
         "0: off)"},
        {"pool.images", CFG_STRING, F(pool_images), 0, 0, 0, "", NULL,
         "per-image pool sizes overriding pool.size, comma-separated image=N (image: image or one of images)"},
        {"pool.wait", CFG_MS, F(pool_wait_ms), 0, 0, 60000, "1s", NULL,
         "a new session that finds its image's pool empty waits in line this long at most for the refill, "
         "then takes the cold path (0: never waits)"},
        /* [limits] */
        {"limits.sessions", CFG_INT, F(max_sessions), 0, 1, 100000, "1000", NULL,
         "live sessions at most (when full, a user holding two more than the one asking gives up its least "
         "recently active idle session)"},
        {"limits.sessions_per_user", CFG_INT, F(max_sessions_per_user), 0, 1, 100000, "100", NULL,
         "live sessions of one user at most (overridable per user: sandboxctl quota)"},
        {"limits.paused_sessions", CFG_INT, F(max_paused_sessions), 0, 0, 100000, "64", NULL,
         "paused sessions at most; past it the least recently used are stopped (workspace kept, their contexts "
         "report state_lost stopped_while_paused)"},
        {"limits.paused_sessions_per_user", CFG_INT, F(max_paused_sessions_per_user), 0, 0, 100000, "16", NULL,
         "paused sessions of one user at most (overridable per user: sandboxctl quota); past it that user's least "
         "recently used are stopped"},
        {"limits.exec_global", CFG_INT, F(max_exec_global), 0, 1, 10000, "10", NULL,
         "concurrent executions across all sessions"},
        {"limits.exec_per_session", CFG_INT, F(max_exec_per_session), 0, 1, 10000, "5", NULL,
         "concurrent executions per session"},
        {"limits.exec_per_user", CFG_INT, F(max_exec_per_user), 0, 1, 10000, "5", NULL,
         "concurrent executions of one user (overridable per user); past it, and past a fair share "
         "of limits.exec_global while other users run, busy"},
        {"limits.spool_per_session", CFG_SIZE, F(max_spool_per_session_bytes), 0, 0, INT64_C(1) << 40, "1g", NULL,
         "execution output kept on disk per session (overridable per user); past it the oldest goes"},
        {"limits.services_per_session", CFG_INT, F(max_services_per_session), 0, 0, 1000, "8", NULL,
         "long-running services per session"},
        {"limits.file_size", CFG_SIZE, F(max_file_bytes), 0, 1, INT64_C(1) << 32, "16m", NULL,
         "largest file written or read in one call"},
        {"limits.session_cpus", CFG_CPUS, F(max_session_nano_cpus), 0, 0, INT64_C(256) * 1000000000, "0", NULL,
         "most CPUs one session may ask for (create_session's cpu; overridable per user, in milli-CPUs); 0: cpus"},
        {"limits.session_memory", CFG_SIZE, F(max_session_memory_bytes), 0, 0, INT64_C(1) << 40, "0", NULL,
         "most memory one session may ask for (create_session's memory; overridable per user); 0: memory"},
        {"limits.session_disk", CFG_SIZE, F(max_session_disk_bytes), 0, 0, INT64_C(1) << 44, "0", NULL,
         "largest workspace one session may ask for (create_session's disk, loop mode only; overridable per user); "
         "0: workspace.quota"},
        {"limits.snapshots_per_user", CFG_INT, F(max_snapshots_per_user), 0, 0, 100000, "20", NULL,
         "snapshots a user holds at most (snapshot_session, fork_session; 0: none allowed)"},
        {"limits.snapshot_bytes_per_user", CFG_SIZE, F(max_snapshot_bytes_per_user), 0, 0, INT64_C(1) << 44, "20g",
         NULL, "bytes of stored snapshots a user holds at most"},
        /* [exec] */
        {"exec.timeout_default", CFG_DURATION, F(exec_timeout_default_s), 0, 1, 86400, "60s", NULL,
         "timeout of an execution that names none"},
        {"exec.timeout_max", CFG_DURATION, F(exec_timeout_max_s), 0, 1, 86400 * 7, "1h", NULL,
         "largest timeout a caller may ask for"},
        {"exec.kill_grace", CFG_MS, F(exec_kill_grace_ms), 0, 0, 600000, "2s", NULL,
         "SIGTERM to SIGKILL grace period on timeout/cancel"},
        /* [egress] */
        {"egress.allow", CFG_STRING, F(egress_allow), 0, 0, 0, "", NULL,
         "hosts every session may reach through the egress proxy: name, *.suffix, optionally :port or :* "
         "(default ports 80 and 443); empty: none"},
        {"egress.allow_private", CFG_STRING, F(egress_allow_private), 0, 0, 0, "", NULL,
         "CIDR list of loopback/private/link-local addresses the egress proxy may still connect to"},
        {"egress.resolve", CFG_STRING, F(egress_resolve), 0, 0, 0, "", NULL,
         "static name=ip overrides for the egress proxy's resolver (internal mirrors, tests)"},
        {"egress.upstream_proxy", CFG_STRING, F(egress_upstream_proxy), 0, 0, 0, "", NULL,
         "http://host:port: allowed egress goes through this proxy (CONNECT); empty: direct"},
        {"egress.packages_file", CFG_STRING, F(egress_packages_file), 0, 0, 0, "", NULL,
         "JSON file of the package policy (PyPI and npm: index and registry URLs, allow and deny rules, per user "
         "with a default; docs/security.md \"Packages by policy\"); needs secrets_key_file; empty: none"},
        {"egress.max_bytes_per_session", CFG_SIZE, F(egress_max_bytes_per_session), 0, 0, INT64_C(1) << 50, "0", NULL,
         "egress bytes (both ways) per session since the daemon started; 0: no cap"},
        /* [webhook] */
        {"webhook.url", CFG_STRING, F(webhook_url), 0, 0, 0, "", NULL,
         "http:// or https:// URL the daemon POSTs every lifecycle event to, signed (empty: off)"},
        {"webhook.secret_file", CFG_STRING, F(webhook_secret_file), 0, 0, 0, "", NULL,
         "file holding the webhook HMAC key (first line), read at start"},
        {"webhook.events", CFG_STRING, F(webhook_events), 0, 0, 0, "", NULL,
         "event types delivered, comma-separated, 'session.*' for a family (empty: all)"},
        {"webhook.ca", CFG_STRING, F(webhook_ca), 0, 0, 0, "", NULL,
         "PEM CA bundle that signs an https webhook receiver (empty: the system's)"},
        /* [gc] */
        {"gc.execution_retention", CFG_DURATION, F(execution_retention_s), 0, 60, 86400 * 3650, "7d", NULL,
         "gc removes execution output spools older than this"},
        {"gc.audit_retention", CFG_DURATION, F(audit_retention_s), 0, -1, 86400 * 3650, "90d", NULL,
         "gc removes audit rows older than this; -1 keeps them forever"},
        {"gc.workspace_retention", CFG_DURATION, F(workspace_retention_s), 0, -1, 86400 * 3650, "-1", NULL,
         "gc removes workspaces of sessions gone this long; -1 keeps them forever"},
        {"gc.snapshot_retention", CFG_DURATION, F(snapshot_retention_s), 0, -1, 86400 * 3650, "30d", NULL,
         "gc removes snapshots older than this; -1 keeps them forever"},
};

/* Keys that no longer exist, so a file or environment written for an older
 * sandboxd gets an error naming what replaced them rather than "unknown key".
 * A renamed key names its new name; a key that became a constant names the
 * constant and its value (the struct field stays, set from the constant, so
 * tests can still vary it). Keys added on other branches go in `keys`; a key
 * renamed later goes here. */
struct config_old_key {
        const char *name;
        const char *new_name;  /* renamed: the key that replaces it */
        const char *why;       /* removed without a constant: why */
        const char *constant;  /* became this constant of ... */
        const char *header;    /* ... this header */
        enum config_type type; /* of the constant's value */
        size_t offset;         /* the field config_defaults sets from it */
        size_t size;
        int64_t value;   /* numeric constants */
        const char *str; /* string constants */
};

#define RENAMED(old, new)                                                                                              \
        {                                                                                                              \
                old, new, NULL, NULL, NULL, CFG_INT, 0, 0, 0, NULL                                                     \
        }
#define CONSTANT(old, macro, field, type, h)                                                                           \
        {                                                                                                              \
                old, NULL, NULL, #macro, h, type, F(field), (int64_t)(macro), NULL                                     \
        }
#define CONSTANT_STR(old, macro, field, h)                                                                             \
        {                                                                                                              \
                old, NULL, NULL, #macro, h, CFG_STRING, F(field), 0, macro                                             \
        }

static const struct config_old_key old_keys[] = {
        RENAMED("max_connections", "connections.max"),
        RENAMED("max_connections_per_uid", "connections.max_per_uid"),
        RENAMED("auth_timeout", "connections.auth_timeout"),
        RENAMED("connection_idle_timeout", "connections.idle_timeout"),
        RENAMED("http_listen", "http.listen"),
        RENAMED("tls_cert", "http.tls_cert"),
        RENAMED("tls_key", "http.tls_key"),
        RENAMED("tls_client_ca", "http.tls_client_ca"),
        RENAMED("metrics_listen", "metrics.listen"),
        RENAMED("metrics_label_keys", "metrics.label_keys"),
        RENAMED("node_listen", "node.listen"),
        RENAMED("node_connect", "node.connect"),
        RENAMED("node_cert", "node.cert"),
        RENAMED("node_key", "node.key"),
        RENAMED("node_ca", "node.ca"),
        RENAMED("node_crl", "node.crl"),
        RENAMED("node_name", "node.name"),
        RENAMED("node_fence", "node.fence"),
        RENAMED("kube_config", "kubernetes.config"),
        RENAMED("kube_namespace", "kubernetes.namespace"),
        RENAMED("kube_workspace", "kubernetes.workspace"),
        RENAMED("kube_storage_class", "kubernetes.storage_class"),
        RENAMED("kube_init_binary", "kubernetes.init_binary"),
        RENAMED("kube_image_pull_policy", "kubernetes.image_pull_policy"),
        RENAMED("kube_start_timeout", "kubernetes.start_timeout"),
        RENAMED("workspace_quota_mode", "workspace.quota_mode"),
        RENAMED("workspace_quota", "workspace.quota"),
        RENAMED("workspace_inodes", "workspace.inodes"),
        RENAMED("pool_size", "pool.size"),
        RENAMED("pool_images", "pool.images"),
        RENAMED("pool_wait", "pool.wait"),
        RENAMED("max_sessions", "limits.sessions"),
        RENAMED("max_sessions_per_user", "limits.sessions_per_user"),
        RENAMED("max_paused_sessions", "limits.paused_sessions"),
        RENAMED("max_paused_sessions_per_user", "limits.paused_sessions_per_user"),
        RENAMED("max_exec_global", "limits.exec_global"),
        RENAMED("max_exec_per_session", "limits.exec_per_session"),
        RENAMED("max_exec_per_user", "limits.exec_per_user"),
        RENAMED("max_spool_per_session", "limits.spool_per_session"),
        RENAMED("max_services_per_session", "limits.services_per_session"),
        RENAMED("max_file_size", "limits.file_size"),
        RENAMED("max_session_cpus", "limits.session_cpus"),
        RENAMED("max_session_memory", "limits.session_memory"),
        RENAMED("max_session_disk", "limits.session_disk"),
        RENAMED("max_snapshots_per_user", "limits.snapshots_per_user"),
        RENAMED("max_snapshot_bytes_per_user", "limits.snapshot_bytes_per_user"),
        RENAMED("exec_timeout_default", "exec.timeout_default"),
        RENAMED("exec_timeout_max", "exec.timeout_max"),
        RENAMED("exec_kill_grace", "exec.kill_grace"),
        RENAMED("e2b_templates", "e2b.templates"),
        RENAMED("e2b_domain", "e2b.domain"),
        RENAMED("e2b_proxy_max_per_user", "e2b.proxy_max_per_user"),
        RENAMED("egress_allow", "egress.allow"),
        RENAMED("egress_allow_private", "egress.allow_private"),
        RENAMED("egress_resolve", "egress.resolve"),
        RENAMED("egress_upstream_proxy", "egress.upstream_proxy"),
        RENAMED("egress_max_bytes_per_session", "egress.max_bytes_per_session"),
        RENAMED("webhook_url", "webhook.url"),
        RENAMED("webhook_secret_file", "webhook.secret_file"),
        RENAMED("webhook_events", "webhook.events"),
        RENAMED("webhook_ca", "webhook.ca"),
        CONSTANT("max_age", GC_MAX_AGE_S, max_age_s, CFG_DURATION, "gc.h"),
        CONSTANT("gc.max_age", GC_MAX_AGE_S, max_age_s, CFG_DURATION, "gc.h"),
        RENAMED("execution_retention", "gc.execution_retention"),
        RENAMED("audit_retention", "gc.audit_retention"),
        RENAMED("workspace_retention", "gc.workspace_retention"),
        RENAMED("snapshot_retention", "gc.snapshot_retention"),
        CONSTANT("max_unauthenticated_per_uid", API_MAX_UNAUTHENTICATED_PER_UID, max_unauthenticated_per_uid, CFG_INT,
                 "api.h"),
        CONSTANT("http_max_unauthenticated", HTTP_MAX_UNAUTHENTICATED, http_max_unauthenticated, CFG_INT, "http.h"),
        CONSTANT("http_max_unauthenticated_per_address", HTTP_MAX_UNAUTHENTICATED_PER_ADDRESS,
                 http_max_unauthenticated_per_address, CFG_INT, "http.h"),
        CONSTANT("http_timeout", HTTP_IDLE_TIMEOUT_S, http_timeout_s, CFG_DURATION, "http.h"),
        CONSTANT("runner_heartbeat", RUNNER_HEARTBEAT_MS, runner_heartbeat_ms, CFG_MS, "hub.h"),
        CONSTANT("cpu_shares", CONTAINER_CPU_SHARES, cpu_shares, CFG_INT, "container.h"),
        CONSTANT("oom_score_adj", CONTAINER_OOM_SCORE_ADJ, oom_score_adj, CFG_INT, "container.h"),
        CONSTANT("tmpfs_size", CONTAINER_TMPFS_BYTES, tmpfs_bytes, CFG_SIZE, "container.h"),
        CONSTANT("startup_checks", CONTAINER_STARTUP_CHECKS, startup_checks, CFG_INT, "container.h"),
        CONSTANT("startup_check_interval", CONTAINER_STARTUP_CHECK_INTERVAL_MS, startup_check_interval_ms, CFG_MS,
                 "container.h"),
        CONSTANT("container_port_base", CONTAINER_PORT_BASE, container_port_base, CFG_INT, "container.h"),
        CONSTANT("docker_timeout", ENGINE_CALL_TIMEOUT_MS, docker_timeout_ms, CFG_MS, "engine.h"),
        CONSTANT("monitor_interval", MONITOR_INTERVAL_MS, monitor_interval_ms, CFG_MS, "monitor.h"),
        CONSTANT("exec_result_head", EXEC_RESULT_HEAD_BYTES, exec_result_head_bytes, CFG_SIZE, "exec.h"),
        CONSTANT("max_command_size", EXEC_MAX_COMMAND_BYTES, max_command_bytes, CFG_SIZE, "exec.h"),
        CONSTANT("max_stdin_size", EXEC_MAX_STDIN_BYTES, max_stdin_bytes, CFG_SIZE, "exec.h"),
        CONSTANT("exec_output_cap", EXEC_OUTPUT_CAP_BYTES, exec_output_cap_bytes, CFG_SIZE, "exec.h"),
        CONSTANT("cells_max_per_session", CELLS_MAX_PER_SESSION, cells_max_per_session, CFG_INT, "cells.h"),
        CONSTANT("cells_max_global", CELLS_MAX_GLOBAL, cells_max_global, CFG_INT, "cells.h"),
        CONSTANT("cells_idle_timeout", CELLS_IDLE_TIMEOUT_S, cells_idle_timeout_s, CFG_DURATION, "cells.h"),
        CONSTANT("cells_interrupt_grace", CELLS_INTERRUPT_GRACE_MS, cells_interrupt_grace_ms, CFG_MS, "cells.h"),
        CONSTANT("cells_start_timeout", CELLS_START_TIMEOUT_MS, cells_start_timeout_ms, CFG_MS, "cells.h"),
        CONSTANT("cells_output_cap", CELLS_OUTPUT_CAP_BYTES, cells_output_cap_bytes, CFG_SIZE, "cells.h"),
        CONSTANT("service_stop_grace", SERVICE_STOP_GRACE_MS, service_stop_grace_ms, CFG_MS, "service.h"),
        CONSTANT("egress_max_header", EGRESS_MAX_HEADER_BYTES, egress_max_header_bytes, CFG_SIZE, "egress.h"),
        CONSTANT("egress_header_timeout", EGRESS_HEADER_TIMEOUT_MS, egress_header_timeout_ms, CFG_MS, "egress.h"),
        CONSTANT("egress_connect_timeout", EGRESS_CONNECT_TIMEOUT_MS, egress_connect_timeout_ms, CFG_MS, "egress.h"),
        CONSTANT("egress_idle_timeout", EGRESS_IDLE_TIMEOUT_MS, egress_idle_timeout_ms, CFG_MS, "egress.h"),
        CONSTANT("egress_conns_per_minute", EGRESS_CONNS_PER_MINUTE, egress_conns_per_minute, CFG_INT, "egress.h"),
        CONSTANT("egress_max_tunnels", EGRESS_MAX_TUNNELS, egress_max_tunnels, CFG_INT, "egress.h"),
        CONSTANT("egress_max_tunnels_per_session", EGRESS_MAX_TUNNELS_PER_SESSION, egress_max_tunnels_per_session,
                 CFG_INT, "egress.h"),
        CONSTANT("egress_max_tunnels_per_user", EGRESS_MAX_TUNNELS_PER_USER, egress_max_tunnels_per_user, CFG_INT,
                 "egress.h"),
        CONSTANT("egress_max_rules", EGRESS_MAX_RULES, egress_max_rules, CFG_INT, "egress_rules.h"),
        CONSTANT("idempotency_window", API_IDEMPOTENCY_WINDOW_S, idempotency_window_s, CFG_DURATION, "api.h"),
        CONSTANT("idempotency_max_keys", API_IDEMPOTENCY_MAX_KEYS, idempotency_max_keys, CFG_INT, "api.h"),
        CONSTANT("events_max", EVENTS_MAX, events_max, CFG_INT, "events.h"),
        CONSTANT("events_retention", EVENTS_RETENTION_S, events_retention_s, CFG_DURATION, "events.h"),
        CONSTANT("webhook_max_inflight", WEBHOOK_MAX_INFLIGHT, webhook_max_inflight, CFG_INT, "webhook.h"),
        CONSTANT("webhook_max_retries", WEBHOOK_MAX_RETRIES, webhook_max_retries, CFG_INT, "webhook.h"),
        CONSTANT("webhook_timeout", WEBHOOK_TIMEOUT_MS, webhook_timeout_ms, CFG_MS, "webhook.h"),
        CONSTANT("webhook_backoff", WEBHOOK_BACKOFF_MS, webhook_backoff_ms, CFG_MS, "webhook.h"),
        CONSTANT("metrics_label_values_max", METRICS_LABEL_VALUES_MAX, metrics_label_values_max, CFG_INT, "metrics.h"),
        CONSTANT("max_scripts_per_user", SCRIPTS_MAX_PER_USER, max_scripts_per_user, CFG_INT, "scripts.h"),
        CONSTANT("max_script_bytes_per_user", SCRIPTS_MAX_BYTES_PER_USER, max_script_bytes_per_user, CFG_SIZE,
                 "scripts.h"),
        CONSTANT("forward_max_per_session", GATEWAY_FORWARD_MAX_PER_SESSION, forward_max_per_session, CFG_INT,
                 "gateway.h"),
        CONSTANT("forward_max_per_user", GATEWAY_FORWARD_MAX_PER_USER, forward_max_per_user, CFG_INT, "gateway.h"),
        CONSTANT("forward_max_total", GATEWAY_FORWARD_MAX_TOTAL, forward_max_total, CFG_INT, "gateway.h"),
        CONSTANT("e2b_proxy_max_total", E2B_PROXY_MAX_TOTAL, e2b_proxy_max_total, CFG_INT, "e2b.h"),
        CONSTANT("pause_min_mem_available", SESSION_PAUSE_MIN_MEM_AVAILABLE, pause_min_mem_available_bytes, CFG_SIZE,
                 "session.h"),
        CONSTANT("node_heartbeat", NODE_HEARTBEAT_MS, node_heartbeat_ms, CFG_MS, "node.h"),
        CONSTANT_STR("node_control_name", NODE_CONTROL_NAME, node_control_name, "node.h"),
        CONSTANT_STR("kube_node_dir", K8S_NODE_DIR, kube_node_dir, "engine_kubernetes.h"),
        CONSTANT("session_ttl_max", SESSSPEC_TTL_MAX_S, session_ttl_max_s, CFG_DURATION, "sessspec.h"),
        CONSTANT_STR("kube_gvisor_class", K8S_GVISOR_RUNTIME_CLASS, kube_gvisor_class, "engine_kubernetes.h"),
        CONSTANT_STR("pool_cells_prestart", POOL_CELLS_PRESTART, pool_cells_prestart, "pool.h"),
        /* derived, no constant: 0 means max_sessions, now always */
        {"http_max_connections_per_address", NULL,
         "it is always limits.sessions (every session's agent can hold one connection)", NULL, NULL, CFG_INT, 0, 0, 0,
         NULL},
        {"webhook_secret", NULL,
         "use webhook.secret_file (a signing key does not belong in a config file or the environment)", NULL, NULL,
         CFG_INT, 0, 0, 0, NULL},
};

#undef RENAMED
#undef CONSTANT
#undef CONSTANT_STR

#undef F

const char *config_key_name(size_t i)
{
        return i < ELEMENTSOF(keys) ? keys[i].name : NULL;
}

static const struct config_key *find_key(const char *name)
{
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (strcmp(keys[i].name, name) == 0)
                        return &keys[i];
        return NULL;
}

/* The environment variable of a key: SANDBOXD_ and its name in capitals with
 * '.' as '_' (node.listen: SANDBOXD_NODE_LISTEN). */
static void env_name(const char *key, char *buf, size_t size)
{
        snprintf(buf, size, "SANDBOXD_%s", key);
        for (char *p = buf; *p; p++)
                *p = *p == '.' ? '_' : (char)toupper((unsigned char)*p);
}

static void format_constant(const struct config_old_key *o, char *buf, size_t size);

static bool is_old_key(const char *name)
{
        for (size_t i = 0; i < ELEMENTSOF(old_keys); i++)
                if (strcmp(old_keys[i].name, name) == 0)
                        return true;
        return false;
}

/* The error for a key that is not in the table: what replaced it, if it
 * existed once. */
static int unknown_key(const char *key, struct sbx_error *err)
{
        char value[64];

        for (size_t i = 0; i < ELEMENTSOF(old_keys); i++) {
                const struct config_old_key *o = &old_keys[i];
                if (strcmp(o->name, key) != 0)
                        continue;
                if (o->new_name) {
                        const char *dot = strchr(o->new_name, '.');
                        char env[128];
                        env_name(o->new_name, env, sizeof(env));
                        if (dot)
                                return sbx_error_set(err, -EINVAL, 0,
                                                     "key '%s' was renamed: write %s (or '%s' under [%.*s]; "
                                                     "environment %s)",
                                                     key, o->new_name, dot + 1, (int)(dot - o->new_name), o->new_name,
                                                     env);
                        return sbx_error_set(err, -EINVAL, 0, "key '%s' was renamed: write %s (environment %s)", key,
                                             o->new_name, env);
                }
                if (o->constant) {
                        format_constant(o, value, sizeof(value));
                        return sbx_error_set(err, -EINVAL, 0,
                                             "key '%s' is no longer a setting: it became the constant %s = %s "
                                             "(include/sandboxd/%s); remove the line",
                                             key, o->constant, value, o->header);
                }
                return sbx_error_set(err, -EINVAL, 0, "key '%s' is no longer a setting: %s; remove the line", key,
                                     o->why);
        }
        return sbx_error_set(err, -EINVAL, 0, "unknown key '%s'", key);
}

/* Parse a decimal integer with an optional unit suffix. units is a list of
 * {suffix, multiplier} pairs; the empty suffix gives the default multiplier. */
struct unit {
        const char *suffix;
        int64_t mult;
};

static int parse_scaled(const char *v, const struct unit *units, size_t n_units, int64_t *ret)
{
        char *end;
        long long x;

        errno = 0;
        x = strtoll(v, &end, 10);
        if (errno != 0 || end == v)
                return -EINVAL;
        for (size_t i = 0; i < n_units; i++) {
                if (strcasecmp(end, units[i].suffix) != 0)
                        continue;
                if (x != 0 && (llabs(x) > INT64_MAX / units[i].mult))
                        return -ERANGE;
                *ret = (int64_t)x * units[i].mult;
                return 0;
        }
        return -EINVAL;
}

static int parse_cpus(const char *v, int64_t *ret)
{
        /* decimal CPUs → nano-CPUs without floating point: "1.5" → 1500000000 */
        int64_t whole = 0, frac = 0, scale = 1000000000;
        const char *p = v;

        if (!isdigit((unsigned char)*p))
                return -EINVAL;
        for (; isdigit((unsigned char)*p); p++) {
                whole = whole * 10 + (*p - '0');
                if (whole > 100000)
                        return -ERANGE;
        }
        if (*p == '.') {
                p++;
                if (!isdigit((unsigned char)*p))
                        return -EINVAL;
                for (; isdigit((unsigned char)*p); p++) {
                        if (scale == 1)
                                return -EINVAL; /* finer than a nano-CPU */
                        scale /= 10;
                        frac += (*p - '0') * scale;
                }
        }
        if (*p)
                return -EINVAL;
        *ret = whole * 1000000000 + frac;
        return 0;
}

int config_parse_duration(const char *v, int64_t unit_ms, int64_t *ret)
{
        static const struct unit units[] = {
                {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 3600 * 1000}, {"d", 86400 * 1000}};
        int64_t ms;
        char *end;
        long long x;

        if (unit_ms != 1 && unit_ms != 1000)
                return -EINVAL;
        errno = 0;
        x = strtoll(v, &end, 10);
        if (errno != 0 || end == v)
                return errno == ERANGE ? -ERANGE : -EINVAL;
        if (*end == '\0') { /* a bare number: the field's own unit, as before units were required */
                *ret = x;
                return 0;
        }
        if (x < 0)
                return -EINVAL; /* only a bare -1 ("forever") is negative */
        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                if (strcasecmp(end, units[i].suffix) != 0)
                        continue;
                if (x > INT64_MAX / units[i].mult)
                        return -ERANGE;
                ms = (int64_t)x * units[i].mult;
                if (ms % unit_ms != 0)
                        return -EINVAL; /* 1500ms in a field of whole seconds */
                *ret = ms / unit_ms;
                return 0;
        }
        return -EINVAL;
}

static int store_int(const struct config_key *k, struct sbx_config *cfg, size_t offset, int64_t x,
                     struct sbx_error *err)
{
        if (x < k->min || x > k->max)
                return sbx_error_set(err, -EINVAL, 0, "%s: %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]",
                                     k->name, x, k->min, k->max);
        if (k->size == sizeof(int64_t))
                *(int64_t *)((char *)cfg + offset) = x;
        else
                *(int *)((char *)cfg + offset) = (int)x;
        return 0;
}

static bool valid_label_value(const char *v)
{
        if (!*v || strlen(v) > 63)
                return false;
        for (; *v; v++)
                if (!isalnum((unsigned char)*v) && !strchr("_.-", *v))
                        return false;
        return true;
}

int config_set(struct sbx_config *cfg, const char *key, const char *value, struct sbx_error *err)
{
        static const struct unit size_units[] = {{"", 1},        {"b", 1},        {"k", 1024},
                                                 {"kb", 1024},   {"m", 1 << 20},  {"mb", 1 << 20},
                                                 {"g", 1 << 30}, {"gb", 1 << 30}, {"t", INT64_C(1) << 40}};
        static const struct unit int_units[] = {{"", 1}};
        const struct config_key *k = find_key(key);
        char *field;
        int64_t x;
        int r;

        if (!k)
                return unknown_key(key, err);
        field = (char *)cfg + k->offset;

        switch (k->type) {
        case CFG_PATH:
                if (value[0] != '/')
                        return sbx_error_set(err, -EINVAL, 0, "%s: '%s' is not an absolute path", key, value);
                /* fall through */
        case CFG_STRING:
                if (strlen(value) >= k->size)
                        return sbx_error_set(err, -EINVAL, 0, "%s: value is longer than %zu bytes", key, k->size - 1);
                if (strcmp(key, "instance") == 0 && !valid_label_value(value))
                        return sbx_error_set(err, -EINVAL, 0,
                                             "instance: '%s' must be 1-63 characters of [A-Za-z0-9_.-]", value);
                sbx_strlcpy(field, value, k->size);
                return 0;
        case CFG_ENUM: {
                size_t n = strlen(value);
                for (const char *c = k->choices; c && *c;) {
                        const char *bar = strchrnul(c, '|');
                        if ((size_t)(bar - c) == n && strncmp(c, value, n) == 0) {
                                sbx_strlcpy(field, value, k->size);
                                return 0;
                        }
                        c = *bar ? bar + 1 : bar;
                }
                return sbx_error_set(err, -EINVAL, 0, "%s: '%s' is not one of %s", key, value, k->choices);
        }
        case CFG_INT:
                r = parse_scaled(value, int_units, 1, &x);
                break;
        case CFG_DURATION:
                r = config_parse_duration(value, 1000, &x);
                break;
        case CFG_MS:
                r = config_parse_duration(value, 1, &x);
                break;
        case CFG_SIZE:
                r = parse_scaled(value, size_units, ELEMENTSOF(size_units), &x);
                break;
        case CFG_CPUS:
                r = parse_cpus(value, &x);
                break;
        case CFG_RANGE: {
                int lo, hi, used = 0;
                if (sscanf(value, "%d-%d%n", &lo, &hi, &used) != 2 || value[used] != '\0')
                        return sbx_error_set(err, -EINVAL, 0, "%s: '%s' is not of the form LOW-HIGH", key, value);
                if (lo < k->min || hi > k->max || lo > hi)
                        return sbx_error_set(err, -EINVAL, 0,
                                             "%s: '%s' must satisfy %" PRId64 " <= LOW <= HIGH <= %" PRId64, key, value,
                                             k->min, k->max);
                *(int *)field = lo;
                *(int *)((char *)cfg + k->offset2) = hi;
                return 0;
        }
        default:
                return sbx_error_set(err, -EINVAL, 0, "%s: unsupported type", key);
        }
        if (r == -ERANGE)
                return sbx_error_set(err, -EINVAL, 0, "%s: '%s' is out of range", key, value);
        if (r < 0)
                return sbx_error_set(err, -EINVAL, 0, "%s: '%s' is not a valid %s", key, value,
                                     k->type == CFG_SIZE       ? "size (e.g. 512m)"
                                     : k->type == CFG_DURATION ? "duration in whole seconds (e.g. 30s, 5m, 2h, 7d)"
                                     : k->type == CFG_MS       ? "duration (e.g. 500ms, 5s, 2m)"
                                     : k->type == CFG_CPUS     ? "CPU count (e.g. 1.5)"
                                                               : "integer");
        return store_int(k, cfg, k->offset, x, err);
}

void config_defaults(struct sbx_config *cfg)
{
        static_assert(ELEMENTSOF(keys) <= CONFIG_KEYS_MAX, "raise CONFIG_KEYS_MAX");
        memset(cfg, 0, sizeof(*cfg));
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                int r = config_set(cfg, keys[i].name, keys[i].def, NULL);
                assert(r == 0); /* a bad default is a bug in the table */
                (void)r;
        }
        for (size_t i = 0; i < ELEMENTSOF(old_keys); i++) {
                const struct config_old_key *o = &old_keys[i];
                char *field = (char *)cfg + o->offset;
                if (!o->constant)
                        continue;
                if (o->str)
                        sbx_strlcpy(field, o->str, o->size);
                else if (o->size == sizeof(int64_t))
                        *(int64_t *)field = o->value;
                else
                        *(int *)field = (int)o->value;
        }
}

static char *trim(char *s)
{
        char *e;
        while (isspace((unsigned char)*s))
                s++;
        e = s + strlen(s);
        while (e > s && isspace((unsigned char)e[-1]))
                *--e = '\0';
        return s;
}

/* One line: `key = value` (value may be "double-quoted"), or `[section]`,
 * which makes the keys after it section.key until the next one. A dotted
 * key is taken as written anywhere. Comments start at # outside quotes.
 * ret_key: the key set (NULL for a blank, comment or section line). */
static int parse_line(struct sbx_config *cfg, char *line, char *section, size_t section_size,
                      const struct config_key **ret_key, struct sbx_error *err)
{
        char *eq, *key, *value, full[128];
        bool quoted = false;
        int r;

        *ret_key = NULL;
        for (char *p = line; *p; p++) {
                if (*p == '"')
                        quoted = !quoted;
                else if (*p == '#' && !quoted) {
                        *p = '\0';
                        break;
                }
        }
        line = trim(line);
        if (!*line)
                return 0;
        if (*line == '[') {
                size_t n = strlen(line);
                if (line[n - 1] != ']' || n < 3 || n - 2 >= section_size)
                        return sbx_error_set(err, -EINVAL, 0, "expected '[section]'");
                line[n - 1] = '\0';
                sbx_strlcpy(section, trim(line + 1), section_size);
                for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                        const char *dot = strchr(keys[i].name, '.');
                        if (dot && (size_t)(dot - keys[i].name) == strlen(section) &&
                            strncmp(keys[i].name, section, strlen(section)) == 0)
                                return 0;
                }
                return sbx_error_set(err, -EINVAL, 0, "unknown section [%s]", section);
        }
        eq = strchr(line, '=');
        if (!eq)
                return sbx_error_set(err, -EINVAL, 0, "expected 'key = value'");
        *eq = '\0';
        key = trim(line);
        value = trim(eq + 1);
        if (*value == '"') {
                size_t n = strlen(value);
                if (n < 2 || value[n - 1] != '"')
                        return sbx_error_set(err, -EINVAL, 0, "%s: unterminated quoted value", key);
                value[n - 1] = '\0';
                value++;
        }
        if (!*key)
                return sbx_error_set(err, -EINVAL, 0, "missing key before '='");
        if (section[0] && !strchr(key, '.')) {
                if ((size_t)snprintf(full, sizeof(full), "%s.%s", section, key) >= sizeof(full))
                        return sbx_error_set(err, -EINVAL, 0, "unknown key '%s' in [%s]", key, section);
                if (!find_key(full) && find_key(key))
                        return sbx_error_set(err, -EINVAL, 0,
                                             "key '%s' is not in [%s]: it belongs before the first section", key,
                                             section);
                if (!find_key(full) && !is_old_key(full) && is_old_key(key))
                        return unknown_key(key, err); /* an old flat name under a section */
                key = full;
        }
        r = config_set(cfg, key, value, err);
        if (r == 0)
                *ret_key = find_key(key);
        return r;
}

static int check_pool_images(const struct sbx_config *cfg, struct sbx_error *err);

/* e2b.domain: dot-separated labels of [a-z0-9-], 1-63 each, no '-' at either
 * end, at most 200 characters (room for "{port}-{id}." in a DNS name). */
static bool e2b_domain_valid(const char *d)
{
        size_t n = strlen(d), label = 0;

        if (n == 0 || n > 200 || d[0] == '.' || d[n - 1] == '.')
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = d[i];
                if (c == '.') {
                        if (label == 0 || d[i - 1] == '-')
                                return false;
                        label = 0;
                        continue;
                }
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') || (c == '-' && label == 0) ||
                    ++label > 63)
                        return false;
        }
        return d[n - 1] != '-';
}


static int check_cross(const struct sbx_config *cfg, struct sbx_error *err)
{
        int r0;
        int span = cfg->port_range_hi - cfg->port_range_lo + 1;

        if (!cfg->tls_cert[0] != !cfg->tls_key[0])
                return sbx_error_set(err, -EINVAL, 0,
                                     "http.tls_cert and http.tls_key go together: set both or neither");
        if ((cfg->node_listen[0] || cfg->node_connect[0]) &&
            (!cfg->node_cert[0] || !cfg->node_key[0] || !cfg->node_ca[0]))
                return sbx_error_set(err, -EINVAL, 0,
                                     "node.listen and node.connect need node.cert, node.key and node.ca");
        if (cfg->tls_client_ca[0] && !cfg->tls_cert[0])
                return sbx_error_set(err, -EINVAL, 0,
                                     "http.tls_client_ca needs http.tls_cert and http.tls_key (mTLS is TLS)");
        if (strcmp(cfg->engine, "kubernetes") == 0 && strcmp(cfg->network_default, "bridge") == 0)
                return sbx_error_set(err, -EINVAL, 0,
                                     "network_default = bridge needs an isolated network, which the kubernetes engine "
                                     "does not make (its sandbox Pods are sealed by a default-deny NetworkPolicy)");

        if (cfg->e2b_domain[0] && !e2b_domain_valid(cfg->e2b_domain))
                return sbx_error_set(err, -EINVAL, 0,
                                     "e2b.domain must be a DNS name: labels of [a-z0-9-] (1-63, no '-' at either "
                                     "end), dot-separated, at most 200 characters");
        if (cfg->ports_per_session > span)
                return sbx_error_set(err, -EINVAL, 0,
                                     "ports_per_session (%d) is larger than port_range %d-%d (%d ports)",
                                     cfg->ports_per_session, cfg->port_range_lo, cfg->port_range_hi, span);
        if (cfg->container_port_base + cfg->ports_per_session - 1 > 65535)
                return sbx_error_set(err, -EINVAL, 0, "CONTAINER_PORT_BASE + ports_per_session exceeds 65535");
        if ((int64_t)cfg->sandbox_uid_hi - cfg->sandbox_uid_lo + 1 < cfg->max_sessions)
                return sbx_error_set(err, -EINVAL, 0,
                                     "sandbox_uid_range %d-%d holds fewer uids than limits.sessions (%d): every session "
                                     "needs one of its own",
                                     cfg->sandbox_uid_lo, cfg->sandbox_uid_hi, cfg->max_sessions);
        if ((r0 = check_pool_images(cfg, err)) < 0)
                return r0;
        if (cfg->exec_timeout_default_s > cfg->exec_timeout_max_s)
                return sbx_error_set(err, -EINVAL, 0, "exec.timeout_default (%ds) exceeds exec.timeout_max (%ds)",
                                     cfg->exec_timeout_default_s, cfg->exec_timeout_max_s);
        if (cfg->max_exec_per_session > cfg->max_exec_global)
                return sbx_error_set(err, -EINVAL, 0, "limits.exec_per_session (%d) exceeds limits.exec_global (%d)",
                                     cfg->max_exec_per_session, cfg->max_exec_global);
        {
                char **v = NULL, host[EGRESS_HOST_MAX];
                struct egress_cidr *c = NULL;
                struct egress_override *o = NULL;
                size_t n = 0;
                int port, r;

                r = egress_allow_parse(cfg->egress_allow, true, &v, &n, err);
                egress_strv_free(v, n);
                if (r == 0)
                        r = egress_cidrs_parse(cfg->egress_allow_private, &c, &n, err);
                free(c);
                if (r == 0)
                        r = egress_overrides_parse(cfg->egress_resolve, &o, &n, err);
                free(o);
                if (r == 0 && cfg->egress_upstream_proxy[0])
                        r = egress_upstream_parse(cfg->egress_upstream_proxy, host, &port, err);
                if (r == 0 && cfg->egress_packages_file[0]) {
                        struct egress_pkg_policies *pp = NULL;
                        r = egress_pkg_load(cfg->egress_packages_file, &pp, err);
                        egress_pkg_free(pp);
                        if (r == 0 && !cfg->secrets_key_file[0])
                                r = sbx_error_set(err, -EINVAL, 0,
                                                  "egress.packages_file needs secrets_key_file (the sessions' CAs "
                                                  "that intercept the registries are sealed under it)");
                }
                if (r < 0)
                        return r;
        }
        if (cfg->webhook_url[0] && strncmp(cfg->webhook_url, "http://", 7) != 0 &&
            strncmp(cfg->webhook_url, "https://", 8) != 0)
                return sbx_error_set(err, -EINVAL, 0, "webhook.url must start with http:// or https://");
        if (cfg->webhook_url[0] && !cfg->webhook_secret[0] && !cfg->webhook_secret_file[0])
                return sbx_error_set(err, -EINVAL, 0, "webhook.url needs webhook.secret_file (deliveries are signed)");
        return 0;
}

extern char **environ;

int config_load(const char *path, struct sbx_config *ret, struct sbx_error *err)
{
        struct sbx_config cfg;
        char line[4096], section[64] = "";
        const struct config_key *k;
        unsigned lineno = 0;
        int r;

        config_defaults(&cfg);
        if (path) {
                FILE *f = fopen(path, "re");
                if (!f)
                        return sbx_error_set(err, -errno, 0, "%s: cannot open: %s", path, strerror(errno));
                sbx_strlcpy(cfg.config_file, path, sizeof(cfg.config_file));
                while (fgets(line, sizeof(line), f)) {
                        lineno++;
                        if (!strchr(line, '\n') && !feof(f)) {
                                fclose(f);
                                return sbx_error_set(err, -EINVAL, 0, "%s:%u: line too long", path, lineno);
                        }
                        r = parse_line(&cfg, line, section, sizeof(section), &k, err);
                        if (r < 0) {
                                fclose(f);
                                sbx_error_prefix(err, "%s:%u", path, lineno);
                                return r;
                        }
                        if (k)
                                cfg.source[k - keys] = (struct config_source){CONFIG_SOURCE_FILE, lineno};
                }
                fclose(f);
        }

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                char env[128];
                const char *v;

                env_name(keys[i].name, env, sizeof(env));
                v = getenv(env);
                if (!v)
                        continue;
                r = config_set(&cfg, keys[i].name, v, err);
                if (r < 0) {
                        sbx_error_prefix(err, "environment %s", env);
                        return r;
                }
                cfg.source[i] = (struct config_source){CONFIG_SOURCE_ENV, 0};
        }
        /* an old key's variable that no current key shares: say what replaced it */
        for (size_t i = 0; i < ELEMENTSOF(old_keys); i++) {
                char env[128];
                bool current = false;

                env_name(old_keys[i].name, env, sizeof(env));
                if (!getenv(env))
                        continue;
                for (size_t j = 0; j < ELEMENTSOF(keys) && !current; j++) {
                        char e2[128];
                        env_name(keys[j].name, e2, sizeof(e2));
                        current = strcmp(env, e2) == 0;
                }
                if (current)
                        continue; /* node_listen and node.listen share SANDBOXD_NODE_LISTEN */
                r = unknown_key(old_keys[i].name, err);
                sbx_error_prefix(err, "environment %s", env);
                return r;
        }

        r = check_cross(&cfg, err);
        if (r < 0) {
                if (path)
                        sbx_error_prefix(err, "%s", path);
                return r;
        }
        *ret = cfg;
        return 0;
}

/* A duration in the largest unit that divides it: 7200 s prints as 2h. */
static void format_duration(int64_t v, int64_t unit_ms, char *buf, size_t size)
{
        static const struct unit units[] = {{"d", 86400 * 1000}, {"h", 3600 * 1000}, {"m", 60 * 1000}, {"s", 1000}};
        int64_t ms = v * unit_ms;

        if (v <= 0) {
                snprintf(buf, size, "%" PRId64, v); /* 0: off, -1: forever */
                return;
        }
        for (size_t i = 0; i < ELEMENTSOF(units); i++)
                if (ms % units[i].mult == 0) {
                        snprintf(buf, size, "%" PRId64 "%s", ms / units[i].mult, units[i].suffix);
                        return;
                }
        snprintf(buf, size, "%" PRId64 "ms", ms);
}

static void format_number(enum config_type type, int64_t v, char *buf, size_t size)
{
        if (type == CFG_DURATION)
                format_duration(v, 1000, buf, size);
        else if (type == CFG_MS)
                format_duration(v, 1, buf, size);
        else if (type == CFG_SIZE && v > 0) {
                static const struct unit units[] = {{"t", INT64_C(1) << 40},
                                                    {"g", 1 << 30},
                                                    {"m", 1 << 20},
                                                    {"k", 1024}};
                for (size_t i = 0; i < ELEMENTSOF(units); i++)
                        if (v % units[i].mult == 0) {
                                snprintf(buf, size, "%" PRId64 "%s", v / units[i].mult, units[i].suffix);
                                return;
                        }
                snprintf(buf, size, "%" PRId64, v);
        } else if (type == CFG_CPUS)
                snprintf(buf, size, "%" PRId64 ".%09" PRId64, v / 1000000000, v % 1000000000);
        else
                snprintf(buf, size, "%" PRId64, v);
}

static void format_constant(const struct config_old_key *o, char *buf, size_t size)
{
        if (o->str)
                snprintf(buf, size, "\"%s\"", o->str);
        else
                format_number(o->type, o->value, buf, size);
}

static void format_value(const struct sbx_config *cfg, const struct config_key *k, char *buf, size_t size)
{
        const char *field = (const char *)cfg + k->offset;

        switch (k->type) {
        case CFG_STRING:
        case CFG_PATH:
        case CFG_ENUM:
                snprintf(buf, size, "%s", field);
                break;
        case CFG_RANGE:
                snprintf(buf, size, "%d-%d", *(const int *)field, *(const int *)((const char *)cfg + k->offset2));
                break;
        default:
                format_number(k->type, k->size == sizeof(int64_t) ? *(const int64_t *)field : *(const int *)field, buf,
                              size);
        }
}

void config_dump(const struct sbx_config *cfg, int fd)
{
        char section[64] = "";

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const char *name = keys[i].name, *dot = strchr(name, '.');
                char value[SBX_PATH_MAX + 8], from[SBX_PATH_MAX + 16];

                if (dot && ((size_t)(dot - name) != strlen(section) || strncmp(name, section, strlen(section)) != 0)) {
                        snprintf(section, sizeof(section), "%.*s", (int)(dot - name), name);
                        dprintf(fd, "\n[%s]\n", section);
                }
                format_value(cfg, &keys[i], value, sizeof(value));
                switch (cfg->source[i].kind) {
                case CONFIG_SOURCE_FILE:
                        snprintf(from, sizeof(from), "%s:%u", cfg->config_file, cfg->source[i].line);
                        break;
                case CONFIG_SOURCE_ENV:
                        env_name(name, from, sizeof(from));
                        break;
                default:
                        snprintf(from, sizeof(from), "default");
                }
                dprintf(fd, "# %s (default: %s)\n%s = \"%s\" # from: %s\n", keys[i].doc, keys[i].def,
                        dot ? dot + 1 : name, value, from);
        }
}

const char *config_old_key_name(size_t i)
{
        return i < ELEMENTSOF(old_keys) ? old_keys[i].name : NULL;
}

/* The next item of a comma-separated list, blanks around it trimmed: false
 * past the end. */
static bool list_next(const char **p, const char **ret, size_t *ret_len)
{
        const char *a, *b, *end;

        if (!*p)
                return false;
        end = strchr(*p, ',');
        a = *p;
        b = end ? end : *p + strlen(*p);
        *p = end ? end + 1 : NULL;
        while (a < b && isspace((unsigned char)*a))
                a++;
        while (b > a && isspace((unsigned char)b[-1]))
                b--;
        *ret = a;
        *ret_len = (size_t)(b - a);
        return true;
}

bool config_image_allowed(const struct sbx_config *cfg, const char *image)
{
        const char *p = cfg->images, *a;
        size_t n, len;

        if (!image || !*image)
                return false;
        if (strcmp(image, cfg->image) == 0)
                return true;
        n = strlen(image);
        while (list_next(&p, &a, &len))
                if (len == n && memcmp(a, image, n) == 0)
                        return true;
        return false;
}

size_t config_image_list(const struct sbx_config *cfg, char (*ret)[256], size_t max)
{
        const char *p = cfg->images, *a;
        size_t n = 0, len;

        if (max == 0)
                return 0;
        sbx_strlcpy(ret[n++], cfg->image, 256);
        while (n < max && list_next(&p, &a, &len)) {
                bool dup = len == 0 || len >= 256;
                for (size_t i = 0; i < n && !dup; i++)
                        dup = strlen(ret[i]) == len && memcmp(ret[i], a, len) == 0;
                if (dup)
                        continue;
                memcpy(ret[n], a, len);
                ret[n++][len] = '\0';
        }
        return n;
}

/* One pool_images entry "image=N": its image (a, len) and N; -EINVAL if malformed. */
static int pool_entry(const char *a, size_t len, size_t *ret_name_len, int *ret_n)
{
        const char *eq = memchr(a, '=', len);
        char num[8];
        size_t k;
        char *end;
        long v;

        if (!eq || eq == a)
                return -EINVAL;
        k = (size_t)(a + len - eq - 1);
        if (k == 0 || k >= sizeof(num))
                return -EINVAL;
        memcpy(num, eq + 1, k);
        num[k] = '\0';
        errno = 0;
        v = strtol(num, &end, 10);
        if (*end || errno || v < 0 || v > 1000)
                return -EINVAL;
        *ret_name_len = (size_t)(eq - a);
        while (*ret_name_len > 0 && isspace((unsigned char)a[*ret_name_len - 1]))
                (*ret_name_len)--;
        *ret_n = (int)v;
        return 0;
}

int config_max_connections(const struct sbx_config *cfg)
{
        return cfg->max_connections > 0 ? cfg->max_connections : cfg->max_sessions + 64;
}

int config_max_connections_per_uid(const struct sbx_config *cfg)
{
        return cfg->max_connections_per_uid > 0 ? cfg->max_connections_per_uid : cfg->max_sessions;
}

int config_http_max_per_address(const struct sbx_config *cfg)
{
        return cfg->http_max_connections_per_address > 0 ? cfg->http_max_connections_per_address : cfg->max_sessions;
}

int config_pool_size_for(const struct sbx_config *cfg, const char *image)
{
        const char *p = cfg->pool_images, *a;
        size_t len, name_len, n = strlen(image);
        int v;

        while (list_next(&p, &a, &len))
                if (pool_entry(a, len, &name_len, &v) == 0 && name_len == n && memcmp(a, image, n) == 0)
                        return v;
        return cfg->pool_size;
}

/* pool_images: every entry image=N with 0 <= N <= 1000, of an image sessions may use. */
static int check_pool_images(const struct sbx_config *cfg, struct sbx_error *err)
{
        const char *p = cfg->pool_images, *a;
        char name[256];
        size_t len, name_len;
        int v;

        while (list_next(&p, &a, &len)) {
                if (len == 0 && !p)
                        break; /* an empty value, or a trailing comma */
                if (pool_entry(a, len, &name_len, &v) < 0 || name_len == 0 || name_len >= sizeof(name))
                        return sbx_error_set(err, -EINVAL, 0, "pool_images: '%.*s' is not image=N (0 to 1000)",
                                             (int)len, a);
                memcpy(name, a, name_len);
                name[name_len] = '\0';
                if (!config_image_allowed(cfg, name))
                        return sbx_error_set(err, -EINVAL, 0, "pool_images: '%s' is neither image nor one of images",
                                             name);
        }
        return 0;
}
