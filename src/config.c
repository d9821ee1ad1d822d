/* config.c — the config table and its parser.
 *
 * One table row per key: name, type, range, default, field offset and a
 * one-line description. The parser, the SANDBOXD_<KEY> environment
 * overrides, config_dump() and --check-config all walk the same table, so a
 * key cannot exist in one place and be missing from another. No state, no
 * locks: the result is a plain struct the caller treats as read-only. */
#include "sandboxd/config.h"
#include "sandboxd/egress_policy.h"

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
        CFG_DURATION, /* int seconds; accepts suffix s, m, h, d; or -1 where min allows */
        CFG_MS,       /* int milliseconds; accepts suffix ms, s */
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
        {"data_dir", CFG_PATH, F(data_dir), 0, 0, 0, "/var/lib/sandboxd", NULL,
         "state: sqlite file, workspaces, execution spools"},
        {"api_socket", CFG_PATH, F(api_socket), 0, 0, 0, "/run/sandboxd/api.sock", NULL,
         "Unix socket for agents and connectors (token auth)"},
        {"admin_socket", CFG_PATH, F(admin_socket), 0, 0, 0, "/run/sandboxd/admin.sock", NULL,
         "Unix socket for admins (file permissions + peer credentials)"},
        {"admin_group", CFG_STRING, F(admin_group), 0, 0, 0, "", NULL,
         "empty: admin socket mode 0600; else 0660 owned by this group"},
        {"max_connections", CFG_INT, F(max_connections), 0, 0, 1000000, "0", NULL,
         "open connections at most, to the API socket and to the HTTPS front each (the admin socket has its own "
         "16); 0: max_sessions + 64, so every session's agent can hold one"},
        {"max_connections_per_uid", CFG_INT, F(max_connections_per_uid), 0, 0, 1000000, "0", NULL,
         "open connections to the API or admin socket per peer uid (SO_PEERCRED); root is not capped; "
         "0: max_sessions"},
        {"max_unauthenticated_per_uid", CFG_INT, F(max_unauthenticated_per_uid), 0, 1, 1000000, "32", NULL,
         "open connections to the API socket per peer uid that have not authenticated yet; root is not capped"},
        {"http_max_connections_per_address", CFG_INT, F(http_max_connections_per_address), 0, 0, 1000000, "0", NULL,
         "open HTTPS connections per client address (IPv6: per /64); 0: max_sessions"},
        {"http_max_unauthenticated", CFG_INT, F(http_max_unauthenticated), 0, 1, 1000000, "256", NULL,
         "HTTPS connections that have not authenticated yet, in all (at most half of max_connections); "
         "past it a new one from a less busy address replaces the oldest of the busiest address"},
        {"http_max_unauthenticated_per_address", CFG_INT, F(http_max_unauthenticated_per_address), 0, 1, 1000000, "32",
         NULL, "HTTPS connections not authenticated yet per client address (IPv6: per /64)"},
        {"auth_timeout", CFG_MS, F(auth_timeout_ms), 0, 100, 600000, "5s", NULL,
         "a new API socket or HTTPS connection must send an authenticated request within this"},
        {"connection_idle_timeout", CFG_MS, F(connection_idle_timeout_ms), 0, 1000, 86400000, "300s", NULL,
         "an API or admin connection with no request this long is closed"},
        {"http_listen", CFG_STRING, F(http_listen), 0, 0, 0, "", NULL,
         "host:port of the HTTPS API and MCP front (empty: off; plain HTTP only on loopback)"},
        {"tls_cert", CFG_STRING, F(tls_cert), 0, 0, 0, "", NULL,
         "PEM certificate (chain) of http_listen; empty: plain HTTP, allowed on loopback only"},
        {"tls_key", CFG_STRING, F(tls_key), 0, 0, 0, "", NULL, "PEM private key of tls_cert"},
        {"tls_client_ca", CFG_STRING, F(tls_client_ca), 0, 0, 0, "", NULL,
         "PEM CA file: when set, HTTPS clients must present a certificate it signed (mTLS)"},
        {"http_timeout", CFG_DURATION, F(http_timeout_s), 0, 1, 3600, "30s", NULL,
         "an HTTP connection idle this long (TLS handshake included) is closed"},
        {"metrics_listen", CFG_STRING, F(metrics_listen), 0, 0, 0, "", NULL,
         "loopback host:port serving /metrics (Prometheus text) and /healthz (empty: off)"},
        {"node_listen", CFG_STRING, F(node_listen), 0, 0, 0, "", NULL,
         "host:port where node agents (sandboxd node) connect over mutual TLS; empty: the node part runs in "
         "this process"},
        {"node_connect", CFG_STRING, F(node_connect), 0, 0, 0, "", NULL,
         "sandboxd node: host:port of the control daemon's node_listen"},
        {"node_cert", CFG_STRING, F(node_cert), 0, 0, 0, "", NULL,
         "node link: PEM certificate of this end (a node agent's common name is its node name)"},
        {"node_key", CFG_STRING, F(node_key), 0, 0, 0, "", NULL, "node link: PEM private key of node_cert"},
        {"node_ca", CFG_STRING, F(node_ca), 0, 0, 0, "", NULL,
         "node link: PEM CA that signs the control daemon's and every node agent's certificate"},
        {"node_crl", CFG_STRING, F(node_crl), 0, 0, 0, "", NULL,
         "node link: PEM CRL of node_ca, read again on a handshake after it changed; unreadable: every "
         "handshake is refused"},
        {"node_control_name", CFG_STRING, F(node_control_name), 0, 0, 0, "sandboxd-control", NULL,
         "node link: the name (DNS SAN or common name) a node agent expects in the control daemon's certificate"},
        {"node_name", CFG_STRING, F(node_name), 0, 0, 0, "", NULL,
         "node link, engine = docker: every session goes to this node (certificate common name); empty: the "
         "connected node with the fewest sessions (a session keeps its node while its container lives)"},
        {"node_heartbeat", CFG_MS, F(node_heartbeat_ms), 0, 100, 600000, "2s", NULL,
         "node link ping interval; a link silent for three of them is closed"},
        {"node_fence", CFG_MS, F(node_fence_ms), 0, 100, 86400000, "30s", NULL,
         "a node agent away this long: the sessions placed on it are fenced (failed, new epoch) and their "
         "executions lost"},
        {"docker_socket", CFG_PATH, F(docker_socket), 0, 0, 0, "/var/run/docker.sock", NULL,
         "the Docker Engine API socket"},
        {"engine", CFG_ENUM, F(engine), 0, 0, 0, "docker", "docker|kubernetes",
         "what runs the sandboxes: the local dockerd, or Pods of a Kubernetes cluster (docs/operations.md: Run on "
         "Kubernetes)"},
        {"kube_config", CFG_STRING, F(kube_config), 0, 0, 0, "", NULL,
         "engine = kubernetes: a kubeconfig (client certificate or token); empty: the Pod's service account"},
        {"kube_namespace", CFG_STRING, F(kube_namespace), 0, 0, 0, "", NULL,
         "engine = kubernetes: the namespace of the sandbox Pods (empty: the kubeconfig context's or the service "
         "account's)"},
        {"kube_workspace", CFG_ENUM, F(kube_workspace), 0, 0, 0, "hostpath", "hostpath|pvc",
         "engine = kubernetes: workspaces as node directories (hostpath: single-node clusters) or one "
         "PersistentVolumeClaim per session of workspace_quota bytes (pvc)"},
        {"kube_storage_class", CFG_STRING, F(kube_storage_class), 0, 0, 0, "", NULL,
         "engine = kubernetes, kube_workspace = pvc: the claims' StorageClass (empty: the cluster's default)"},
        {"kube_init_binary", CFG_STRING, F(kube_init_binary), 0, 0, 0, "/usr/bin/tini-static", NULL,
         "engine = kubernetes: the static init on every node, PID 1 of each sandbox Pod (Docker's docker-init)"},
        {"kube_gvisor_class", CFG_STRING, F(kube_gvisor_class), 0, 0, 0, "gvisor", NULL,
         "engine = kubernetes: the RuntimeClass of runtime = runsc"},
        {"kube_image_pull_policy", CFG_ENUM, F(kube_image_pull_policy), 0, 0, 0, "IfNotPresent",
         "Always|IfNotPresent|Never", "engine = kubernetes: imagePullPolicy of sandbox Pods"},
        {"kube_start_timeout", CFG_MS, F(kube_start_timeout_ms), 0, 1000, 3600000, "120s", NULL,
         "engine = kubernetes: a sandbox Pod runs within this (scheduling and image pull) or its start fails"},
        {"kube_node_dir", CFG_STRING, F(kube_node_dir), 0, 0, 0, "/var/lib/sandboxd-node", NULL,
         "engine = kubernetes over node agents (node_listen): the host directory holding each node agent's "
         "data_dir, {kube_node_dir}/<node name>; a Pod mounts its session directory from it by its node's name"},
        {"instance", CFG_STRING, F(instance), 0, 0, 0, "default", NULL,
         "label value that keeps several daemons on one engine apart ([A-Za-z0-9_.-])"},
        {"log_level", CFG_ENUM, F(log_level), 0, 0, 0, "info", "debug|info|warn|error", "minimum level logged"},
        {"image", CFG_STRING, F(image), 0, 0, 0, "sandboxd/python:latest", NULL,
         "sandbox image (built by scripts/build-images.sh)"},
        {"runner_binary", CFG_STRING, F(runner_binary), 0, 0, 0, "", NULL,
         "in-container runner (root-owned, static); empty: sandboxd-runner next to the daemon; missing: docker exec"},
        {"runner_heartbeat", CFG_MS, F(runner_heartbeat_ms), 0, 100, 600000, "2s", NULL,
         "runner ping interval; silent for three of them: treated like a dead container"},
        {"memory", CFG_SIZE, F(memory_bytes), 0, 16 << 20, INT64_C(1) << 40, "1g", NULL,
         "memory limit per container; swap is disabled (MemorySwap = Memory)"},
        {"cpus", CFG_CPUS, F(nano_cpus), 0, 10000000, INT64_C(256) * 1000000000, "1", NULL,
         "CPU limit per container, in CPUs (decimal)"},
        {"pids_limit", CFG_INT, F(pids_limit), 0, 8, 1 << 20, "256", NULL, "max processes per container"},
        {"cpu_shares", CFG_INT, F(cpu_shares), 0, 2, 1024, "256", NULL,
         "CPU weight per container (CpuShares); below the 1024 of the daemon, dockerd and host processes"},
        {"oom_score_adj", CFG_INT, F(oom_score_adj), 0, 0, 1000, "500", NULL,
         "OOM-killer bias of container processes, so host memory pressure takes them before the daemon"},
        {"tmpfs_size", CFG_SIZE, F(tmpfs_bytes), 0, 1 << 20, INT64_C(1) << 36, "64m", NULL,
         "size cap of the noexec tmpfs at /tmp"},
        {"runtime", CFG_ENUM, F(runtime), 0, 0, 0, "runc", "runc|runsc",
         "OCI runtime of sandbox containers (runsc: gVisor, sealed); per user: sandboxctl runtime"},
        {"workspace_quota_mode", CFG_ENUM, F(workspace_quota_mode), 0, 0, 0, "off", "off|project|loop|measure",
         "workspace disk quota: loop = an ext4 image per workspace; measure = refuse work once over (docs/operations.md)"},
        {"workspace_quota", CFG_SIZE, F(workspace_quota_bytes), 0, 16 << 20, INT64_C(1) << 44, "1g", NULL,
         "bytes per session workspace (loop: the image size, file system metadata included)"},
        {"workspace_inodes", CFG_INT, F(workspace_inodes), 0, 1024, 1 << 26, "65536", NULL,
         "files and directories per session workspace"},
        {"network_default", CFG_ENUM, F(network_default), 0, 0, 0, "none", "bridge|none",
         "network of sessions without private data: none = sealed (egress proxy, port forwards by the daemon); "
         "bridge = sandboxd's own bridge network, inter-container traffic off"},
        {"publish_ip", CFG_STRING, F(publish_ip), 0, 0, 0, "127.0.0.1", NULL,
         "host address the daemon listens on for the session port blocks"},
        {"forward_max_per_session", CFG_INT, F(forward_max_per_session), 0, 1, 1000000, "2048", NULL,
         "open port-forwarded connections of one session at most"},
        {"forward_max_per_user", CFG_INT, F(forward_max_per_user), 0, 1, 10000000, "4096", NULL,
         "open port-forwarded connections of one user's sessions at most"},
        {"forward_max_total", CFG_INT, F(forward_max_total), 0, 1, 10000000, "16384", NULL,
         "open port-forwarded connections of all sessions at most"},
        {"sandbox_uid_range", CFG_RANGE, F(sandbox_uid_lo), offsetof(struct sbx_config, sandbox_uid_hi), 1000,
         2147483646, "200000-299999", NULL,
         "host uids (and gids) handed out one per session: its processes run as it and it owns the workspace; "
         "no host account may hold one"},
        {"docker_timeout", CFG_MS, F(docker_timeout_ms), 0, 100, 600000, "30s", NULL, "timeout of one Docker API call"},
        {"port_range", CFG_RANGE, F(port_range_lo), offsetof(struct sbx_config, port_range_hi), 1024, 65535,
         "20000-29999", NULL, "host ports handed out to sessions"},
        {"ports_per_session", CFG_INT, F(ports_per_session), 0, 0, 1000, "5", NULL,
         "fixed block of host ports per session (0: none)"},
        {"container_port_base", CFG_INT, F(container_port_base), 0, 1, 65000, "8000", NULL,
         "the block forwards to container ports base..base+ports_per_session-1"},
        {"max_sessions", CFG_INT, F(max_sessions), 0, 1, 100000, "1000", NULL,
         "live sessions at most (when full, a user holding two more than the one asking gives up its least "
         "recently active idle session)"},
        {"pool_size", CFG_INT, F(pool_size), 0, 0, 1000, "2", NULL,
         "warm pool: containers made ahead for new sessions, per image sessions may use (image and images; "
         "0: off)"},
        {"pool_images", CFG_STRING, F(pool_images), 0, 0, 0, "", NULL,
         "per-image pool sizes overriding pool_size, comma-separated image=N (image: image or one of images)"},
        {"pool_cells_prestart", CFG_ENUM, F(pool_cells_prestart), 0, 0, 0, "python", "python|none",
         "a warm pool slot starts the default run_cell context (a python kernel) ahead, so a new session's first "
         "cell pays no interpreter start-up (skipped where the image has no kernel)"},
        {"pool_wait", CFG_MS, F(pool_wait_ms), 0, 0, 60000, "1s", NULL,
         "a new session that finds its image's pool empty waits in line this long at most for the refill, "
         "then takes the cold path (0: never waits)"},
        {"max_sessions_per_user", CFG_INT, F(max_sessions_per_user), 0, 1, 100000, "100", NULL,
         "live sessions of one user at most (overridable per user: sandboxctl quota)"},
        {"idle_timeout", CFG_DURATION, F(idle_timeout_s), 0, 10, 86400 * 365, "2h", NULL,
         "a session unused this long is stopped (workspace kept), counted from its last use whether it runs or is "
         "paused"},
        {"pause_after", CFG_DURATION, F(pause_after_s), 0, 0, 86400 * 365, "10m", NULL,
         "a session unused this long with nothing running is paused (frozen, memory kept) before idle_timeout stops "
         "it; any request resumes it (0: off)"},
        {"max_paused_sessions", CFG_INT, F(max_paused_sessions), 0, 0, 100000, "64", NULL,
         "paused sessions at most; past it the least recently used are stopped (workspace kept, their contexts "
         "report state_lost stopped_while_paused)"},
        {"max_paused_sessions_per_user", CFG_INT, F(max_paused_sessions_per_user), 0, 0, 100000, "16", NULL,
         "paused sessions of one user at most (overridable per user: sandboxctl quota); past it that user's least "
         "recently used are stopped"},
        {"pause_min_mem_available", CFG_SIZE, F(pause_min_mem_available_bytes), 0, 0, INT64_C(1) << 44, "512m", NULL,
         "memory pressure: while the host's MemAvailable (/proc/meminfo) is below this, the least recently used "
         "paused sessions are stopped, one at a time (0: off)"},
        {"monitor_interval", CFG_MS, F(monitor_interval_ms), 0, 100, 3600000, "5s", NULL,
         "health monitor poll interval (the events stream reacts at once)"},
        {"startup_checks", CFG_INT, F(startup_checks), 0, 1, 100, "3", NULL,
         "consecutive running inspections before a container counts as started"},
        {"startup_check_interval", CFG_MS, F(startup_check_interval_ms), 0, 1, 10000, "25ms", NULL,
         "pause between those inspections"},
        {"exec_timeout_default", CFG_DURATION, F(exec_timeout_default_s), 0, 1, 86400, "60s", NULL,
         "timeout of an execution that names none"},
        {"exec_timeout_max", CFG_DURATION, F(exec_timeout_max_s), 0, 1, 86400 * 7, "1h", NULL,
         "largest timeout a caller may ask for"},
        {"exec_kill_grace", CFG_MS, F(exec_kill_grace_ms), 0, 0, 600000, "2s", NULL,
         "SIGTERM to SIGKILL grace period on timeout/cancel"},
        {"max_exec_global", CFG_INT, F(max_exec_global), 0, 1, 10000, "10", NULL,
         "concurrent executions across all sessions"},
        {"max_exec_per_session", CFG_INT, F(max_exec_per_session), 0, 1, 10000, "5", NULL,
         "concurrent executions per session"},
        {"max_exec_per_user", CFG_INT, F(max_exec_per_user), 0, 1, 10000, "5", NULL,
         "concurrent executions of one user (overridable per user); past it, and past a fair share "
         "of max_exec_global while other users run, busy"},
        {"cells_max_per_session", CFG_INT, F(cells_max_per_session), 0, 1, 64, "4", NULL,
         "interpreter contexts (run_cell) one session may hold at once"},
        {"cells_max_global", CFG_INT, F(cells_max_global), 0, 1, 10000, "64", NULL,
         "interpreter contexts across all sessions"},
        {"cells_idle_timeout", CFG_DURATION, F(cells_idle_timeout_s), 0, 10, 86400 * 7, "2h", NULL,
         "an interpreter context unused this long is stopped (its next cell reports state_lost idle_stop); "
         "a paused session's contexts are left alone while it is paused"},
        {"cells_interrupt_grace", CFG_MS, F(cells_interrupt_grace_ms), 0, 100, 600000, "3s", NULL,
         "after a cell's timeout or cancel interrupts it (SIGINT), how long it may take to come back before "
         "its interpreter is killed and restarted (state_lost timeout)"},
        {"cells_start_timeout", CFG_MS, F(cells_start_timeout_ms), 0, 1000, 600000, "60s", NULL,
         "how long an interpreter context may take to start"},
        {"cells_output_cap", CFG_SIZE, F(cells_output_cap_bytes), 0, 4096, INT64_C(1) << 30, "4m", NULL,
         "output one cell returns inline (MIME bundles, streams); past it the rest goes by reference "
         "(get_execution on the cell's execution_id) and the result says truncated"},
        {"max_spool_per_session", CFG_SIZE, F(max_spool_per_session_bytes), 0, 0, INT64_C(1) << 40, "1g", NULL,
         "execution output kept on disk per session (overridable per user); past it the oldest goes"},
        {"exec_output_cap", CFG_SIZE, F(exec_output_cap_bytes), 0, 1024, INT64_C(1) << 40, "64m", NULL,
         "bytes of each stream spooled per execution; the rest is counted and dropped"},
        {"exec_result_head", CFG_SIZE, F(exec_result_head_bytes), 0, 256, 16 << 20, "32k", NULL,
         "bytes of head and of tail returned inline in a result"},
        {"max_command_size", CFG_SIZE, F(max_command_bytes), 0, 64, 64 << 20, "256k", NULL,
         "largest command or code body accepted"},
        {"images", CFG_STRING, F(images), 0, 0, 0, "", NULL,
         "further images create_session may choose, comma-separated (image is always allowed)"},
        {"e2b_templates", CFG_STRING, F(e2b_templates), 0, 0, 0, "", NULL,
         "E2B templates as images, \"name=image,...\" (each image: image or one of images); empty: base and "
         "code-interpreter-v1 to image (docs/e2b.md)"},
        {"e2b_domain", CFG_STRING, F(e2b_domain), 0, 0, 0, "", NULL,
         "E2B's sandbox domain: the front serves getHost(port) host names {port}-{sandboxID}.<domain> "
         "(wildcard DNS to the front); empty: off (docs/e2b.md)"},
        {"e2b_proxy_max_per_user", CFG_INT, F(e2b_proxy_max_per_user), 0, 1, 100000, "64", NULL,
         "getHost(port) requests proxied at once into one user's sandboxes"},
        {"e2b_proxy_max_total", CFG_INT, F(e2b_proxy_max_total), 0, 1, 1000000, "512", NULL,
         "getHost(port) requests proxied at once in all"},
        {"max_scripts_per_user", CFG_INT, F(max_scripts_per_user), 0, 0, 100000, "200", NULL,
         "scripts a user's script cache holds at most (0: no caching)"},
        {"max_script_bytes_per_user", CFG_SIZE, F(max_script_bytes_per_user), 0, 0, INT64_C(1) << 32, "16m", NULL,
         "bytes of code a user's script cache holds at most"},
        {"session_ttl_max", CFG_DURATION, F(session_ttl_max_s), 0, 1, 86400 * 365, "7d", NULL,
         "largest ttl_seconds create_session accepts"},
        {"max_session_cpus", CFG_CPUS, F(max_session_nano_cpus), 0, 0, INT64_C(256) * 1000000000, "0", NULL,
         "most CPUs one session may ask for (create_session's cpu; overridable per user, in milli-CPUs); 0: cpus"},
        {"max_session_memory", CFG_SIZE, F(max_session_memory_bytes), 0, 0, INT64_C(1) << 40, "0", NULL,
         "most memory one session may ask for (create_session's memory; overridable per user); 0: memory"},
        {"max_session_disk", CFG_SIZE, F(max_session_disk_bytes), 0, 0, INT64_C(1) << 44, "0", NULL,
         "largest workspace one session may ask for (create_session's disk, loop mode only; overridable per user); "
         "0: workspace_quota"},
        {"metrics_label_keys", CFG_STRING, F(metrics_label_keys), 0, 0, 0, "", NULL,
         "session label keys /metrics counts sessions by (comma-separated, at most 8); empty: none"},
        {"metrics_label_values_max", CFG_INT, F(metrics_label_values_max), 0, 1, 1000, "20", NULL,
         "distinct values of each such key /metrics shows; the rest count as \"(other)\""},
        {"max_stdin_size", CFG_SIZE, F(max_stdin_bytes), 0, 0, INT64_C(1) << 32, "16m", NULL,
         "bytes of stdin accepted per execution"},
        {"max_services_per_session", CFG_INT, F(max_services_per_session), 0, 0, 1000, "8", NULL,
         "long-running services per session"},
        {"service_stop_grace", CFG_MS, F(service_stop_grace_ms), 0, 0, 600000, "5s", NULL,
         "SIGTERM to SIGKILL grace period when stopping a service"},
        {"max_file_size", CFG_SIZE, F(max_file_bytes), 0, 1, INT64_C(1) << 32, "16m", NULL,
         "largest file written or read in one call"},
        {"egress_allow", CFG_STRING, F(egress_allow), 0, 0, 0, "", NULL,
         "hosts every session may reach through the egress proxy: name, *.suffix, optionally :port or :* "
         "(default ports 80 and 443); empty: none"},
        {"egress_allow_private", CFG_STRING, F(egress_allow_private), 0, 0, 0, "", NULL,
         "CIDR list of loopback/private/link-local addresses the egress proxy may still connect to"},
        {"egress_resolve", CFG_STRING, F(egress_resolve), 0, 0, 0, "", NULL,
         "static name=ip overrides for the egress proxy's resolver (internal mirrors, tests)"},
        {"egress_upstream_proxy", CFG_STRING, F(egress_upstream_proxy), 0, 0, 0, "", NULL,
         "http://host:port: allowed egress goes through this proxy (CONNECT); empty: direct"},
        {"secrets_key_file", CFG_STRING, F(secrets_key_file), 0, 0, 0, "", NULL,
         "file of the 256-bit key sealing users' secrets at rest (sandboxctl secret keygen PATH); outside data_dir, "
         "mode 0600; empty: secrets off"},
        {"egress_max_tunnels", CFG_INT, F(egress_max_tunnels), 0, 1, 1000000, "4096", NULL,
         "open egress proxy connections across all sessions"},
        {"egress_max_tunnels_per_session", CFG_INT, F(egress_max_tunnels_per_session), 0, 1, 1000000, "256", NULL,
         "open egress proxy connections per session"},
        {"egress_max_tunnels_per_user", CFG_INT, F(egress_max_tunnels_per_user), 0, 1, 1000000, "1024", NULL,
         "open egress proxy connections of one user, all its sessions together"},
        {"egress_conns_per_minute", CFG_INT, F(egress_conns_per_minute), 0, 1, 10000000, "600", NULL,
         "new egress proxy connections per session per minute"},
        {"egress_max_bytes_per_session", CFG_SIZE, F(egress_max_bytes_per_session), 0, 0, INT64_C(1) << 50, "0", NULL,
         "egress bytes (both ways) per session since the daemon started; 0: no cap"},
        {"egress_max_header", CFG_SIZE, F(egress_max_header_bytes), 0, 1024, 1 << 20, "16k", NULL,
         "largest proxy request head (request line and headers)"},
        {"egress_header_timeout", CFG_MS, F(egress_header_timeout_ms), 0, 100, 600000, "10s", NULL,
         "a proxy client must send its whole request head within this"},
        {"egress_connect_timeout", CFG_MS, F(egress_connect_timeout_ms), 0, 100, 600000, "10s", NULL,
         "resolving and connecting upstream (through egress_upstream_proxy too) within this"},
        {"egress_idle_timeout", CFG_MS, F(egress_idle_timeout_ms), 0, 1000, 86400000, "300s", NULL,
         "an egress tunnel with no byte either way this long is closed"},
        {"egress_max_rules", CFG_INT, F(egress_max_rules), 0, 1, 100000, "256", NULL,
         "allowlist additions per user and per session (admin socket and connector API)"},
        {"idempotency_window", CFG_DURATION, F(idempotency_window_s), 0, 60, 86400 * 30, "24h", NULL,
         "how long an idempotency_key answers a retry with the first call's result"},
        {"idempotency_max_keys", CFG_INT, F(idempotency_max_keys), 0, 1, 10000000, "10000", NULL,
         "live idempotency keys one user may hold; past it a call with a new key is quota_exceeded"},
        {"events_max", CFG_INT, F(events_max), 0, 100, 10000000, "100000", NULL,
         "lifecycle events the log keeps (GET /v1/events resumes from it; webhooks read it); the oldest go first"},
        {"events_retention", CFG_DURATION, F(events_retention_s), 0, 60, 86400 * 365, "7d", NULL,
         "lifecycle events older than this are pruned (by the daemon and --gc)"},
        {"webhook_url", CFG_STRING, F(webhook_url), 0, 0, 0, "", NULL,
         "http:// or https:// URL the daemon POSTs every lifecycle event to, signed (empty: off)"},
        {"webhook_secret", CFG_STRING, F(webhook_secret), 0, 0, 0, "", NULL,
         "HMAC-SHA256 key of the webhook signature (or webhook_secret_file)"},
        {"webhook_secret_file", CFG_STRING, F(webhook_secret_file), 0, 0, 0, "", NULL,
         "file holding the webhook HMAC key (first line), read at start"},
        {"webhook_events", CFG_STRING, F(webhook_events), 0, 0, 0, "", NULL,
         "event types delivered, comma-separated, 'session.*' for a family (empty: all)"},
        {"webhook_ca", CFG_STRING, F(webhook_ca), 0, 0, 0, "", NULL,
         "PEM CA bundle that signs an https webhook receiver (empty: the system's)"},
        {"webhook_max_inflight", CFG_INT, F(webhook_max_inflight), 0, 1, 64, "4", NULL,
         "webhook deliveries in flight at most (retries included)"},
        {"webhook_max_retries", CFG_INT, F(webhook_max_retries), 0, 0, 20, "5", NULL,
         "retries of a webhook delivery that failed, then it is counted failed and skipped"},
        {"webhook_timeout", CFG_MS, F(webhook_timeout_ms), 0, 100, 600000, "10s", NULL,
         "one webhook POST (connect and answer) within this"},
        {"webhook_backoff", CFG_MS, F(webhook_backoff_ms), 0, 10, 600000, "1s", NULL,
         "first webhook retry after this, doubling each time, at most 60 s"},
        {"max_age", CFG_DURATION, F(max_age_s), 0, 60, 86400 * 3650, "7d", NULL,
         "gc removes containers older than this"},
        {"execution_retention", CFG_DURATION, F(execution_retention_s), 0, 60, 86400 * 3650, "7d", NULL,
         "gc removes execution output spools older than this"},
        {"audit_retention", CFG_DURATION, F(audit_retention_s), 0, -1, 86400 * 3650, "90d", NULL,
         "gc removes audit rows older than this; -1 keeps them forever"},
        {"workspace_retention", CFG_DURATION, F(workspace_retention_s), 0, -1, 86400 * 3650, "-1", NULL,
         "gc removes workspaces of sessions gone this long; -1 keeps them forever"},
        {"snapshot_retention", CFG_DURATION, F(snapshot_retention_s), 0, -1, 86400 * 3650, "30d", NULL,
         "gc removes snapshots older than this; -1 keeps them forever"},
        {"max_snapshots_per_user", CFG_INT, F(max_snapshots_per_user), 0, 0, 100000, "20", NULL,
         "snapshots a user holds at most (snapshot_session, fork_session; 0: none allowed)"},
        {"max_snapshot_bytes_per_user", CFG_SIZE, F(max_snapshot_bytes_per_user), 0, 0, INT64_C(1) << 44, "20g", NULL,
         "bytes of stored snapshots a user holds at most"},
};

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
        static const struct unit dur_units[] = {{"", 1}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}};
        static const struct unit ms_units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}};
        const struct config_key *k = find_key(key);
        char *field;
        int64_t x;
        int r;

        if (!k)
                return sbx_error_set(err, -EINVAL, 0, "unknown key '%s'", key);
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
                r = parse_scaled(value, dur_units, 1, &x);
                break;
        case CFG_DURATION:
                r = parse_scaled(value, dur_units, ELEMENTSOF(dur_units), &x);
                break;
        case CFG_MS:
                r = parse_scaled(value, ms_units, ELEMENTSOF(ms_units), &x);
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
                                     : k->type == CFG_DURATION ? "duration (e.g. 30m)"
                                     : k->type == CFG_MS       ? "duration (e.g. 500ms, 5s)"
                                     : k->type == CFG_CPUS     ? "CPU count (e.g. 1.5)"
                                                               : "integer");
        return store_int(k, cfg, k->offset, x, err);
}

void config_defaults(struct sbx_config *cfg)
{
        memset(cfg, 0, sizeof(*cfg));
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                int r = config_set(cfg, keys[i].name, keys[i].def, NULL);
                assert(r == 0); /* a bad default is a bug in the table */
                (void)r;
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

/* One `key = value` line; value may be "double-quoted". Comments start at #
 * outside quotes. */
static int parse_line(struct sbx_config *cfg, char *line, struct sbx_error *err)
{
        char *eq, *key, *value;
        bool quoted = false;

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
        return config_set(cfg, key, value, err);
}

static int check_pool_images(const struct sbx_config *cfg, struct sbx_error *err);

/* e2b_domain: dot-separated labels of [a-z0-9-], 1-63 each, no '-' at either
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
                return sbx_error_set(err, -EINVAL, 0, "tls_cert and tls_key go together: set both or neither");
        if ((cfg->node_listen[0] || cfg->node_connect[0]) &&
            (!cfg->node_cert[0] || !cfg->node_key[0] || !cfg->node_ca[0]))
                return sbx_error_set(err, -EINVAL, 0,
                                     "node_listen and node_connect need node_cert, node_key and node_ca");
        if (cfg->tls_client_ca[0] && !cfg->tls_cert[0])
                return sbx_error_set(err, -EINVAL, 0, "tls_client_ca needs tls_cert and tls_key (mTLS is TLS)");
        if (strcmp(cfg->engine, "kubernetes") == 0 && strcmp(cfg->network_default, "bridge") == 0)
                return sbx_error_set(err, -EINVAL, 0,
                                     "network_default = bridge needs an isolated network, which the kubernetes engine "
                                     "does not make (its sandbox Pods are sealed by a default-deny NetworkPolicy)");

        if (cfg->e2b_domain[0] && !e2b_domain_valid(cfg->e2b_domain))
                return sbx_error_set(err, -EINVAL, 0,
                                     "e2b_domain must be a DNS name: labels of [a-z0-9-] (1-63, no '-' at either "
                                     "end), dot-separated, at most 200 characters");
        if (cfg->ports_per_session > span)
                return sbx_error_set(err, -EINVAL, 0,
                                     "ports_per_session (%d) is larger than port_range %d-%d (%d ports)",
                                     cfg->ports_per_session, cfg->port_range_lo, cfg->port_range_hi, span);
        if (cfg->container_port_base + cfg->ports_per_session - 1 > 65535)
                return sbx_error_set(err, -EINVAL, 0, "container_port_base + ports_per_session exceeds 65535");
        if ((int64_t)cfg->sandbox_uid_hi - cfg->sandbox_uid_lo + 1 < cfg->max_sessions)
                return sbx_error_set(err, -EINVAL, 0,
                                     "sandbox_uid_range %d-%d holds fewer uids than max_sessions (%d): every session "
                                     "needs one of its own",
                                     cfg->sandbox_uid_lo, cfg->sandbox_uid_hi, cfg->max_sessions);
        if ((r0 = check_pool_images(cfg, err)) < 0)
                return r0;
        if (cfg->exec_timeout_default_s > cfg->exec_timeout_max_s)
                return sbx_error_set(err, -EINVAL, 0, "exec_timeout_default (%ds) exceeds exec_timeout_max (%ds)",
                                     cfg->exec_timeout_default_s, cfg->exec_timeout_max_s);
        if (cfg->max_exec_per_session > cfg->max_exec_global)
                return sbx_error_set(err, -EINVAL, 0, "max_exec_per_session (%d) exceeds max_exec_global (%d)",
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
                if (r < 0)
                        return r;
        }
        if (cfg->webhook_url[0] && strncmp(cfg->webhook_url, "http://", 7) != 0 &&
            strncmp(cfg->webhook_url, "https://", 8) != 0)
                return sbx_error_set(err, -EINVAL, 0, "webhook_url must start with http:// or https://");
        if (cfg->webhook_url[0] && !cfg->webhook_secret[0] && !cfg->webhook_secret_file[0])
                return sbx_error_set(err, -EINVAL, 0,
                                     "webhook_url needs webhook_secret or webhook_secret_file (deliveries are signed)");
        if (cfg->egress_max_tunnels_per_session > cfg->egress_max_tunnels_per_user ||
            cfg->egress_max_tunnels_per_user > cfg->egress_max_tunnels)
                return sbx_error_set(err, -EINVAL, 0,
                                     "egress_max_tunnels_per_session <= egress_max_tunnels_per_user <= "
                                     "egress_max_tunnels is required");
        return 0;
}

int config_load(const char *path, struct sbx_config *ret, struct sbx_error *err)
{
        struct sbx_config cfg;
        char line[4096];
        unsigned lineno = 0;
        int r;

        config_defaults(&cfg);
        if (path) {
                FILE *f = fopen(path, "re");
                if (!f)
                        return sbx_error_set(err, -errno, 0, "%s: cannot open: %s", path, strerror(errno));
                while (fgets(line, sizeof(line), f)) {
                        lineno++;
                        if (!strchr(line, '\n') && !feof(f)) {
                                fclose(f);
                                return sbx_error_set(err, -EINVAL, 0, "%s:%u: line too long", path, lineno);
                        }
                        r = parse_line(&cfg, line, err);
                        if (r < 0) {
                                fclose(f);
                                sbx_error_prefix(err, "%s:%u", path, lineno);
                                return r;
                        }
                }
                fclose(f);
        }

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                char env[128], *p;
                const char *v;

                snprintf(env, sizeof(env), "SANDBOXD_%s", keys[i].name);
                for (p = env; *p; p++)
                        *p = (char)toupper((unsigned char)*p);
                v = getenv(env);
                if (!v)
                        continue;
                r = config_set(&cfg, keys[i].name, v, err);
                if (r < 0) {
                        sbx_error_prefix(err, "environment %s", env);
                        return r;
                }
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
        case CFG_CPUS: {
                int64_t n = *(const int64_t *)field;
                snprintf(buf, size, "%" PRId64 ".%09" PRId64, n / 1000000000, n % 1000000000);
                break;
        }
        case CFG_SIZE:
                snprintf(buf, size, "%" PRId64, *(const int64_t *)field);
                break;
        case CFG_MS:
                snprintf(buf, size, "%dms", *(const int *)field);
                break;
        case CFG_DURATION:
                snprintf(buf, size, "%d", *(const int *)field);
                break;
        default:
                snprintf(buf, size, "%d", *(const int *)field);
        }
}

void config_dump(const struct sbx_config *cfg, int fd)
{
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                char value[SBX_PATH_MAX + 8];
                format_value(cfg, &keys[i], value, sizeof(value));
                if (strcmp(keys[i].name, "webhook_secret") == 0 && value[0])
                        snprintf(value, sizeof(value), "(set, not shown)"); /* a key, never printed */
                dprintf(fd, "# %s (default: %s)\n%s = %s\n", keys[i].doc, keys[i].def, keys[i].name, value);
        }
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
