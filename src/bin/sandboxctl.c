/* sandboxctl — the operators' CLI over the admin socket: parse arguments,
 * send one command, print the reply as a table (or raw JSON with --json).
 * All the work happens in the daemon; see include/sandboxd/admin.h.
 *
 * Over 800 lines: one printer per admin command, each short; the commands
 * and their arguments come from one table.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/jsonl_client.h"

#define REPLY_MAX (64 * 1024 * 1024)
#define REPLY_TIMEOUT_MS (10 * 60 * 1000) /* the slowest command (a destroy with --purge) is far below */

enum { EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: sandboxctl [OPTIONS] COMMAND [ARGS]\n"
                "\n"
                "Administer a running sandboxd through its admin socket.\n"
                "\n"
                "Commands:\n"
                "  health                               is the daemon (and Docker) well?\n"
                "  stats                                sessions by state, executions, ports, monitor\n"
                "  pool                                 the warm pool: size, ready, claims, misses, refill rate\n"
                "  nodes                                the node agents: connected, since, sessions, heartbeat\n"
                "  metrics                              the Prometheus text (as metrics.listen's /metrics)\n"
                "  sessions [--user U] [--state S]      list sessions (S: running, paused, stopped, ...)\n"
                "  show USER SESSION                    one session in detail\n"
                "  pause USER SESSION                   freeze the session (memory kept, no CPU); any\n"
                "                                       request resumes it\n"
                "  resume USER SESSION                  thaw a paused session now\n"
                "  destroy USER SESSION [--purge]       remove its container and forget it\n"
                "                                       (--purge also deletes the workspace)\n"
                "  mark-private USER SESSION DATASET [SOURCE]\n"
                "                                       record private data: network off for good\n"
                "  token create USER [agent|connector|operator] [sbx|e2b]\n"
                "                                       make an API token (shown once; e2b: as E2B_API_KEY;\n"
                "                                       operator: list every user's sessions and events, nothing else)\n"
                "  token revoke ID                      revoke a token\n"
                "  token list                           list tokens (never the secrets)\n"
                "  quota show USER                      a user's limits (defaults and overrides) and usage\n"
                "  quota set USER KEY VALUE             override a default for USER: KEY is max_sessions_per_user,\n"
                "                                       max_exec_per_user, max_services_per_session,\n"
                "                                       max_spool_per_session (VALUE may be 512m, 2g) or\n"
                "                                       max_paused_sessions_per_user\n"
                "  quota unset USER [KEY]               back to the default (one key, or all)\n"
                "  quota list                           defaults and every override\n"
                "  top [--user U] [--interval SEC] [--no-stream]\n"
                "                                       live sessions: CPU, memory, pids, executions,\n"
                "                                       egress, refreshed like docker stats\n"
                "  logs USER SESSION [--limit N]        the session's audit and daemon log lines\n"
                "  egress USER SESSION [--limit N]      the session's egress decisions, newest first\n"
                "  egress-policy USER [SESSION]         the effective egress policy and allowlist\n"
                "  egress-allow USER PATTERN [--session S]\n"
                "                                       allow PATTERN (host, *.suffix, :port or :*) for\n"
                "                                       every session of USER, or one session\n"
                "  egress-deny USER PATTERN [--session S]  take such an addition back\n"
                "  runtime USER [runc|runsc|microvm|default]  show or set the user's container runtime\n"
                "                                       (runsc: gVisor, no network; new containers)\n"
                "  snapshots [USER]                     workspace snapshots (every user's, or one's):\n"
                "                                       size, kind, privacy, age\n"
                "  snapshot delete USER SNAPSHOT        delete a snapshot and its files\n"
                "  secret set USER NAME --host H [--host H2 ...] [--header X]\n"
                "                                       store a secret of USER; the value is read from\n"
                "                                       stdin (one trailing newline dropped), never argv\n"
                "  secret list USER                     USER's secrets: names, hosts, times (never values)\n"
                "  secret delete USER NAME              delete one\n"
                "  secret keygen PATH                   write a new secrets_key_file (0600; no daemon needed)\n"
                "\n"
                "Options:\n"
                "  -s, --socket PATH   the admin socket (default: admin_socket from the config)\n"
                "  -c, --config FILE   read admin_socket from FILE (SANDBOXD_ADMIN_SOCKET overrides)\n"
                "  -j, --json          print the raw JSON result\n"
                "  -h, --help          show this help\n"
                "\n"
                "Exit status: 0 done, 1 the daemon refused or failed, 2 usage, 3 cannot reach the daemon.\n");
}

/* ---- transport ---- */

static const char *str(const cJSON *o, const char *key);

/* Send req and read its reply (jsonl_client.h): 0 with *ret_reply when
 * the daemon says ok, else the exit status, with the reason on stderr. */
static int call(const char *path, cJSON *req, cJSON **ret_reply)
{
        struct sbx_error err = {0};
        cJSON *reply = NULL;
        const cJSON *e;
        int r = jsonl_call(path, req, REPLY_MAX, REPLY_TIMEOUT_MS, &reply, &err);

        if (r < 0) {
                fprintf(stderr, "sandboxctl: %s\n", err.msg);
                if (r == -EACCES)
                        fprintf(stderr,
                                "sandboxctl: the admin socket is for root, the daemon's user and "
                                "admin_group\n");
                return EXIT_UNREACHABLE;
        }
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok"))) {
                *ret_reply = reply;
                return 0;
        }
        e = cJSON_GetObjectItemCaseSensitive(reply, "error");
        fprintf(stderr, "sandboxctl: %s: %s\n", str(e, "code"), str(e, "message"));
        cJSON_Delete(reply);
        return EXIT_FAILED;
}

/* ---- printing ---- */

static const char *str(const cJSON *o, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : "-";
}

static double num(const cJSON *o, const char *key, double def)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static bool flag(const cJSON *o, const char *key)
{
        return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static const char *when(const cJSON *o, const char *key, char buf[32])
{
        double ms = num(o, key, -1);
        time_t t;
        struct tm tm;

        if (ms <= 0)
                return "-";
        t = (time_t)(ms / 1000);
        localtime_r(&t, &tm);
        strftime(buf, 32, "%Y-%m-%d %H:%M:%S", &tm);
        return buf;
}

static void print_ports(const cJSON *ports)
{
        const cJSON *p;
        bool first = true;
        cJSON_ArrayForEach(p, ports) {
                double host = num(p, "host_port", 0);
                if (host > 0)
                        printf("%s%.0f->%.0f", first ? "" : ",", host, num(p, "container_port", 0));
                else
                        printf("%s%.0f", first ? "" : ",", num(p, "container_port", 0));
                first = false;
        }
        if (first)
                printf("-");
}

static void print_health(const cJSON *r)
{
        const cJSON *docker = cJSON_GetObjectItemCaseSensitive(r, "docker");
        printf("status:  %s\n", str(r, "status"));
        printf("version: %s\n", str(r, "version"));
        printf("uptime:  %.0f s\n", num(r, "uptime_s", 0));
        if (flag(docker, "ok"))
                printf("docker:  ok (%s)\n", str(docker, "version"));
        else
                printf("docker:  unreachable: %s\n", str(docker, "error"));
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "microvm")))
                printf("microvm: %s\n", str(r, "microvm"));
}

/* The engine and the settings of the config it cannot enforce (engine.h). */
static void print_engine(const cJSON *en)
{
        const cJSON *missing = cJSON_GetObjectItemCaseSensitive(en, "unenforced"), *it;
        bool any = false;

        if (!cJSON_IsObject(en))
                return;
        printf("engine:              %s, ", str(en, "name"));
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(en, "microvm")))
                printf("microvm: %s, ", str(en, "microvm"));
        printf("unenforced:");
        cJSON_ArrayForEach(it, missing) {
                if (cJSON_IsString(it)) {
                        printf(" %s", it->valuestring);
                        any = true;
                }
        }
        printf("%s\n", any ? "" : " none");
}

static void print_stats(const cJSON *r)
{
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "sessions");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(r, "ports");
        char t[32];
        printf("version:             %s\n", str(r, "version"));
        printf("uptime:              %.0f s\n", num(r, "uptime_s", 0));
        printf("docker:              %s\n", str(r, "docker_version"));
        print_engine(cJSON_GetObjectItemCaseSensitive(r, "engine"));
        printf("sessions:            %.0f (creating %.0f, running %.0f, paused %.0f, stopped %.0f, error %.0f)\n",
               num(s, "total", 0), num(s, "creating", 0), num(s, "running", 0), num(s, "paused", 0),
               num(s, "stopped", 0), num(s, "error", 0));
        printf("executions running:  %.0f\n", num(r, "executions_running", 0));
        printf("ports:               %.0f of %.0f in use\n", num(p, "used", 0), num(p, "total", 0));
        printf("monitor last poll:   %s\n", when(r, "monitor_last_poll", t));
        const cJSON *pl = cJSON_GetObjectItemCaseSensitive(r, "pool");
        if (pl)
                printf("warm pool:           %.0f of %.0f ready, %.0f claims, %.0f misses, %.2f containers/s refill\n",
                       num(pl, "ready", 0), num(pl, "size", 0), num(pl, "claims", 0), num(pl, "misses", 0),
                       num(pl, "refill_per_s", 0));
        {
                const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "egress");
                printf("egress:              %.0f allowed, %.0f blocked, %.0f open\n", num(e, "allowed", 0),
                       num(e, "blocked", 0), num(e, "open", 0));
        }
}

static void print_pool(const cJSON *r)
{
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(r, "pool"), *o;
        printf("%-6s %-6s %-9s %-8s %-8s %-8s %-7s %-8s %-8s %s\n", "SIZE", "READY", "CREATING", "CLAIMS", "MISSES",
               "CREATED", "FAILED", "WAITING", "WAITED", "REFILL/S");
        printf("%-6.0f %-6.0f %-9.0f %-8.0f %-8.0f %-8.0f %-7.0f %-8.0f %-8.0f %.2f\n", num(p, "size", 0),
               num(p, "ready", 0), num(p, "creating", 0), num(p, "claims", 0), num(p, "misses", 0),
               num(p, "created", 0), num(p, "failed", 0), num(p, "waiting", 0), num(p, "waited", 0),
               num(p, "refill_per_s", 0));
        printf("\n%-40s %-6s %-6s %s\n", "IMAGE", "SIZE", "READY", "WAITING");
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(p, "images"))
                printf("%-40.40s %-6.0f %-6.0f %.0f\n", str(o, "image"), num(o, "size", 0), num(o, "ready", 0),
                       num(o, "waiting", 0));
}

static void print_egress_log(const cJSON *r)
{
        const cJSON *o;
        char t[32];

        printf("%-19s %-7s %-8s %-30s %-5s %-20s %-15s %10s %10s %8s\n", "TIME", "METHOD", "DECISION", "HOST", "PORT",
               "REASON", "ADDRESS", "BYTES UP", "BYTES DOWN", "MS");
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "entries")) {
                printf("%-19s %-7.7s %-8s %-30.30s %-5.0f %-20.20s %-15.15s %10.0f %10.0f %8.0f", when(o, "ts", t),
                       str(o, "method"), str(o, "decision"), str(o, "host"), num(o, "port", 0), str(o, "reason"),
                       str(o, "address"), num(o, "bytes_up", 0), num(o, "bytes_down", 0), num(o, "duration_ms", 0));
                if (num(o, "suppressed", 0) > 0)
                        printf("  (+%.0f blocked not recorded before)", num(o, "suppressed", 0));
                printf("\n");
        }
}

static void print_egress_policy(const cJSON *r)
{
        const cJSON *o;

        printf("mode: %s%s\n", str(r, "mode"), flag(r, "upstream_proxy") ? " (through egress.upstream_proxy)" : "");
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "allow"))
                printf("  %-8s %s\n", str(o, "scope"), str(o, "pattern"));
}

static void print_metrics(const cJSON *r)
{
        fputs(str(r, "text"), stdout);
}

static void print_paused(const cJSON *r)
{
        printf("%s:%s is paused%s\n", str(r, "user"), str(r, "session"), flag(r, "already_paused") ? " (it was)" : "");
}

static void print_resumed(const cJSON *r)
{
        printf("%s:%s is running%s\n", str(r, "user"), str(r, "session"), flag(r, "resumed") ? " (resumed)" : "");
}

static void print_sessions(const cJSON *r)
{
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(r, "sessions"), *s;
        char t[32];

        printf("%-20s %-20s %-9s %-7s %-8s %-12s %-19s %s\n", "USER", "SESSION", "STATE", "NETWORK", "PRIVATE",
               "CONTAINER", "LAST ACTIVITY", "PORTS");
        cJSON_ArrayForEach(s, list) {
                printf("%-20s %-20s %-9s %-7s %-8s %-12.12s %-19s ", str(s, "user"), str(s, "session"), str(s, "state"),
                       str(s, "network_mode"), flag(s, "private") ? "yes" : "no", str(s, "container_id"),
                       when(s, "last_activity", t));
                print_ports(cJSON_GetObjectItemCaseSensitive(s, "ports"));
                if (num(s, "paused_at", 0) > 0)
                        printf(" (paused since %s)", when(s, "paused_at", t));
                if (str(s, "node")[0] && strcmp(str(s, "node"), "-") != 0)
                        printf(" (node %s)", str(s, "node"));
                printf("\n");
        }
        if (cJSON_GetArraySize(list) == 0)
                printf("(no sessions)\n");
}

static void print_nodes(const cJSON *r)
{
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(r, "nodes"), *o;
        char t[32], h[32];

        printf("%-32s %-10s %-19s %-8s %s\n", "NODE", "STATE", "SINCE", "SESSIONS", "LAST HEARTBEAT");
        cJSON_ArrayForEach(o, list)
                printf("%-32.32s %-10s %-19s %-8.0f %s\n", str(o, "name"),
                       flag(o, "connected") ? "connected"
                       : flag(o, "fenced")  ? "fenced"
                                            : "away",
                       when(o, "since", t), num(o, "sessions", 0), when(o, "last_heartbeat", h));
        if (cJSON_GetArraySize(list) == 0)
                printf("(no node agents: this daemon runs its sessions itself)\n");
}

/* "disk: 12.3 MB of 1073.7 MB, 40 of 65536 files (loop, mounted)" */
static void print_usage(const cJSON *u)
{
        const cJSON *used = cJSON_GetObjectItemCaseSensitive(u, "bytes_used");
        const cJSON *files = cJSON_GetObjectItemCaseSensitive(u, "inodes_used");

        if (!u)
                return;
        printf("disk:          ");
        if (cJSON_IsNumber(used))
                printf("%.1f MB", used->valuedouble / 1e6);
        else
                printf("? (not measured)");
        if (num(u, "bytes_limit", 0) > 0)
                printf(" of %.1f MB", num(u, "bytes_limit", 0) / 1e6);
        if (cJSON_IsNumber(files))
                printf(", %.0f", files->valuedouble);
        else
                printf(", ?");
        if (num(u, "inodes_limit", 0) > 0)
                printf(" of %.0f", num(u, "inodes_limit", 0));
        printf(" files (%s%s%s)\n", str(u, "mode"), flag(u, "mounted") ? ", mounted" : "",
               flag(u, "over") ? ", OVER QUOTA" : "");
}

static void print_show(const cJSON *r)
{
        const cJSON *x;
        char t[32];

        printf("session:       %s:%s\n", str(r, "user"), str(r, "session"));
        printf("state:         %s\n", str(r, "state"));
        printf("container:     %s\n", str(r, "container_id"));
        printf("image:         %s\n", str(r, "image"));
        printf("network:       %s%s\n", str(r, "network_mode"), flag(r, "private") ? " (private)" : "");
        printf("runtime:       %s", str(r, "runtime"));
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "accel")))
                printf(" (%s)", str(r, "accel"));
        printf("\n");
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "rootfs_note")))
                printf("root fs:       busybox guest: %s\n", str(r, "rootfs_note"));
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r, "uid")))
                printf("host uid:      %.0f\n", cJSON_GetObjectItemCaseSensitive(r, "uid")->valuedouble);
        else
                printf("host uid:      -\n");
        printf("workspace:     %s\n", str(r, "workspace"));
        print_usage(cJSON_GetObjectItemCaseSensitive(r, "workspace_usage"));
        printf("ports:         ");
        print_ports(cJSON_GetObjectItemCaseSensitive(r, "ports"));
        printf("\n");
        printf("created:       %s\n", when(r, "created_at", t));
        printf("last activity: %s\n", when(r, "last_activity", t));
        if (num(r, "paused_at", 0) > 0)
                printf("paused since:  %s (frozen; the next request resumes it)\n", when(r, "paused_at", t));
        printf("last error:    %s", str(r, "last_error"));
        if (strcmp(str(r, "error_cause"), "-") != 0)
                printf(" (cause: %s)", str(r, "error_cause"));
        printf("\n");

        printf("\nprivate datasets:\n");
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(r, "datasets"))
                printf("  %-30s source %-20s marked %s\n", str(x, "dataset"), str(x, "source"),
                       when(x, "marked_at", t));
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "datasets")) == 0)
                printf("  (none)\n");

        printf("\nservices:\n");
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(r, "services")) {
                printf("  %-20s %-9s pid %-7.0f ports ", str(x, "name"), str(x, "state"), num(x, "pid", 0));
                print_ports(cJSON_GetObjectItemCaseSensitive(x, "ports"));
                printf("  %s\n", str(x, "command"));
        }
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "services")) == 0)
                printf("  (none)\n");

        printf("\nrecent executions:\n");
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(r, "executions")) {
                const cJSON *code = cJSON_GetObjectItemCaseSensitive(x, "exit_code");
                char codebuf[16] = "-";
                if (cJSON_IsNumber(code))
                        snprintf(codebuf, sizeof(codebuf), "%d", code->valueint);
                printf("  %s %-19s %-10s exit %-4s %6.0f ms  %s\n", str(x, "execution_id"), when(x, "created_at", t),
                       str(x, "state"), codebuf, num(x, "duration_ms", 0), str(x, "command_preview"));
        }
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "executions")) == 0)
                printf("  (none)\n");
}

static void print_tokens(const cJSON *r)
{
        const cJSON *t;
        char c[32], v[32];

        printf("%-16s %-20s %-9s %-19s %s\n", "ID", "USER", "ROLE", "CREATED", "REVOKED");
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(r, "tokens"))
                printf("%-16s %-20s %-9s %-19s %s\n", str(t, "id"), str(t, "user"), str(t, "role"),
                       when(t, "created_at", c), when(t, "revoked_at", v));
}

static void human_bytes(double b, char buf[16]);

static void print_snapshots(const cJSON *r)
{
        const cJSON *t;
        char c[32], b[16];

        printf("%-22s %-16s %-20s %-20s %-7s %9s %-7s %s\n", "SNAPSHOT", "USER", "SESSION", "NAME", "KIND", "SIZE",
               "PRIVATE", "CREATED");
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(r, "snapshots")) {
                human_bytes(num(t, "bytes", 0), b);
                printf("%-22s %-16s %-20s %-20s %-7s %9s %-7s %s%s\n", str(t, "snapshot"), str(t, "user"),
                       str(t, "session"), str(t, "name"), str(t, "kind"), b,
                       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "private")) ? "yes" : "no",
                       when(t, "created_at", c), strcmp(str(t, "state"), "ready") == 0 ? "" : " (creating)");
        }
        human_bytes(num(r, "bytes", 0), b);
        printf("%d snapshots, %s (at most %d and ", (int)num(r, "count", 0), b, (int)num(r, "max_per_user", 0));
        human_bytes(num(r, "max_bytes_per_user", 0), b);
        printf("%s per user)\n", b);
}

/* ---- top: two samples make CPU % (the delta of CPU time over the delta of wall time) ---- */

struct top_prev {
        char id[65];
        double cpu_ns, at_ms;
};

static void human_bytes(double b, char buf[16])
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        size_t u = 0;
        while (b >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
                b /= 1024;
                u++;
        }
        snprintf(buf, 16, u ? "%.1f%s" : "%.0f%s", b, units[u]);
}

/* Adds cpu_percent to each session of cur (null on the first sight of a container) and
 * remembers cur's samples in *prev for the next frame. */
static void top_cpu(cJSON *cur, struct top_prev **prev, size_t *n_prev)
{
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cur, "sessions"), *o;
        size_t n = (size_t)cJSON_GetArraySize(arr), k = 0;
        struct top_prev *next = calloc(n + 1, sizeof(*next));

        cJSON_ArrayForEach(o, arr) {
                double cpu = num(o, "cpu_total_ns", -1), at = num(o, "sampled_at", 0), pct = -1;
                const char *id = str(o, "container_id");
                for (size_t i = 0; i < *n_prev && cpu >= 0; i++)
                        if (strcmp((*prev)[i].id, id) == 0 && at > (*prev)[i].at_ms && cpu >= (*prev)[i].cpu_ns)
                                pct = (cpu - (*prev)[i].cpu_ns) / ((at - (*prev)[i].at_ms) * 1e6) * 100;
                if (pct >= 0)
                        cJSON_AddNumberToObject((cJSON *)o, "cpu_percent", pct);
                else
                        cJSON_AddNullToObject((cJSON *)o, "cpu_percent");
                if (next && cpu >= 0 && k < n) {
                        snprintf(next[k].id, sizeof(next[k].id), "%s", id);
                        next[k].cpu_ns = cpu;
                        next[k++].at_ms = at;
                }
        }
        free(*prev);
        *prev = next;
        *n_prev = next ? k : 0;
}

static void print_top(const cJSON *r)
{
        const cJSON *o;

        printf("%-16s %-20s %-8s %7s %21s %6s %5s %11s %7s %s\n", "USER", "SESSION", "STATE", "CPU %",
               "MEM USAGE / LIMIT", "MEM %", "PIDS", "EXECS RUN/ALL", "EGRESS", "NETWORK");
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "sessions")) {
                char cpu[16] = "-", mem[48] = "-", memp[16] = "-", pids[16] = "-", used[16], lim[16], execs[32],
                     egress[16] = "-";
                double pct = num(o, "cpu_percent", -1), mu = num(o, "memory_usage", -1),
                       ml = num(o, "memory_limit", -1), eg = num(o, "egress_bytes", -1);

                if (pct >= 0)
                        snprintf(cpu, sizeof(cpu), "%.2f%%", pct);
                if (mu >= 0 && ml > 0) {
                        human_bytes(mu, used);
                        human_bytes(ml, lim);
                        snprintf(mem, sizeof(mem), "%s / %s", used, lim);
                        snprintf(memp, sizeof(memp), "%.2f%%", mu / ml * 100);
                }
                if (num(o, "pids", -1) >= 0)
                        snprintf(pids, sizeof(pids), "%.0f", num(o, "pids", 0));
                snprintf(execs, sizeof(execs), "%.0f/%.0f", num(o, "executions_running", 0),
                         num(o, "executions_total", 0));
                if (eg >= 0)
                        human_bytes(eg, egress);
                printf("%-16s %-20s %-8s %7s %21s %6s %5s %13s %7s %s\n", str(o, "user"), str(o, "session"),
                       str(o, "state"), cpu, mem, memp, pids, execs, egress, str(o, "network_mode"));
        }
}

static int run_top(const char *socket_path, const char *user, double interval_s, bool stream, bool json)
{
        struct top_prev *prev = NULL;
        size_t n_prev = 0;
        bool tty = isatty(STDOUT_FILENO);
        int rc = 0;

        /* The first frame needs two samples; without --no-stream it refreshes until killed. */
        for (int frame = 0;; frame++) {
                cJSON *req = cJSON_CreateObject(), *reply = NULL, *result;

                cJSON_AddStringToObject(req, "cmd", "sessions.top");
                if (user)
                        cJSON_AddStringToObject(req, "user", user);
                rc = call(socket_path, req, &reply);
                cJSON_Delete(req);
                if (rc != 0)
                        break;
                result = cJSON_GetObjectItemCaseSensitive(reply, "result");
                top_cpu(result, &prev, &n_prev);
                if (frame > 0) {
                        if (json) {
                                char *out = cJSON_PrintUnformatted(result);
                                printf("%s\n", out ? out : "null");
                                free(out);
                        } else {
                                if (tty && stream)
                                        printf("\033[H\033[2J"); /* home, clear: one table in place */
                                else if (frame > 1)
                                        printf("\n");
                                print_top(result);
                        }
                        fflush(stdout);
                }
                cJSON_Delete(reply);
                if (frame > 0 && !stream)
                        break;
                struct timespec ts = {(time_t)interval_s, (long)((interval_s - (double)(time_t)interval_s) * 1e9)};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        free(prev);
        return rc;
}

/* ---- logs: audit rows and daemon log lines, merged by time ---- */

struct log_entry {
        char ts[40]; /* ISO 8601 with ms, UTC: sorts as text */
        int source;  /* 0 audit, 1 log: audit first on a tie */
        const cJSON *o;
};

static int log_entry_cmp(const void *a, const void *b)
{
        const struct log_entry *x = a, *y = b;
        int c = strcmp(x->ts, y->ts);
        return c ? c : x->source - y->source;
}

static void print_quota(const cJSON *r)
{
        static const char *const keys[] = {"max_sessions_per_user", "max_exec_per_user", "max_services_per_session",
                                           "max_spool_per_session", "max_paused_sessions_per_user"};
        const cJSON *lim = cJSON_GetObjectItemCaseSensitive(r, "limits");
        const cJSON *ov = cJSON_GetObjectItemCaseSensitive(r, "overrides");
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "usage");

        printf("user:                      %s\n", str(r, "user"));
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
                printf("%-26s %.0f%s\n", keys[i], num(lim, keys[i], 0),
                       cJSON_GetObjectItemCaseSensitive(ov, keys[i]) ? " (override)" : "");
        printf("live sessions:             %.0f (%.0f paused)\n", num(u, "live_sessions", 0),
               num(u, "paused_sessions", 0));
        printf("executions running:        %.0f\n", num(u, "executions_running", 0));
}

static void print_quota_list(const cJSON *r)
{
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(r, "defaults"), *o;
        printf("defaults: max_sessions_per_user=%.0f max_exec_per_user=%.0f max_services_per_session=%.0f "
               "max_spool_per_session=%.0f\n",
               num(d, "max_sessions_per_user", 0), num(d, "max_exec_per_user", 0),
               num(d, "max_services_per_session", 0), num(d, "max_spool_per_session", 0));
        printf("%-20s %-26s %s\n", "USER", "KEY", "VALUE");
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "overrides"))
                printf("%-20s %-26s %.0f\n", str(o, "user"), str(o, "key"), num(o, "value", 0));
}

/* An integer with an optional k, m or g suffix (powers of 1024); -1 if not. */
static double parse_quota_value(const char *s)
{
        char *end = NULL;
        long long x = strtoll(s, &end, 10);
        double mult = 1;

        if (!end || end == s || x < 0)
                return -1;
        if (*end && !end[1])
                mult = *end == 'k' || *end == 'K'   ? 1024.0
                       : *end == 'm' || *end == 'M' ? 1048576.0
                       : *end == 'g' || *end == 'G' ? 1073741824.0
                                                    : 0;
        else if (*end)
                mult = 0;
        return mult > 0 ? (double)x * mult : -1;
}

static void print_logs(const cJSON *r)
{
        const cJSON *audit = cJSON_GetObjectItemCaseSensitive(r, "audit");
        const cJSON *lines = cJSON_GetObjectItemCaseSensitive(r, "log"), *o;
        size_t n = 0, cap = (size_t)cJSON_GetArraySize(audit) + (size_t)cJSON_GetArraySize(lines);
        struct log_entry *v = calloc(cap + 1, sizeof(*v));

        if (!v)
                return;
        cJSON_ArrayForEach(o, audit) {
                double ms = num(o, "ts", 0);
                time_t t = (time_t)(ms / 1000);
                struct tm tm;
                char base[24];
                gmtime_r(&t, &tm);
                strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
                snprintf(v[n].ts, sizeof(v[n].ts), "%s.%03dZ", base, (int)((int64_t)ms % 1000));
                v[n].source = 0;
                v[n++].o = o;
        }
        cJSON_ArrayForEach(o, lines) {
                snprintf(v[n].ts, sizeof(v[n].ts), "%s", str(o, "ts"));
                v[n].source = 1;
                v[n++].o = o;
        }
        qsort(v, n, sizeof(*v), log_entry_cmp);
        for (size_t i = 0; i < n; i++) {
                if (v[i].source == 0) {
                        const cJSON *d = cJSON_GetObjectItemCaseSensitive(v[i].o, "detail");
                        char *dt = d && !cJSON_IsNull(d) ? cJSON_PrintUnformatted(d) : NULL;
                        printf("%s audit %-24s %s%s%s\n", v[i].ts, str(v[i].o, "action"), str(v[i].o, "actor"),
                               dt ? " " : "", dt ? dt : "");
                        free(dt);
                } else {
                        printf("%s %-5s %s\n", v[i].ts, str(v[i].o, "level"), str(v[i].o, "msg"));
                }
        }
        free(v);
}

static void print_runtime(const cJSON *r)
{
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "override");
        printf("user:     %s\nruntime:  %s (%s)\n", str(r, "user"), str(r, "runtime"),
               cJSON_IsString(o) ? "the user's override" : "the config's default");
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "unavailable")))
                printf("warning:  %s\n", str(r, "unavailable"));
        printf("applies:  to %s\n", str(r, "applies_to"));
}

/* ---- main ---- */

/* USER SESSION [--limit N] into req as cmd: 0, or -1 after a usage message. */
static int session_args(cJSON *req, const char *cmd, const char *name, char **args, int n_args)
{
        int pos = 0;
        const char *pa[2] = {0};

        for (int i = 0; i < n_args; i++) {
                if (strcmp(args[i], "--limit") == 0 && i + 1 < n_args) {
                        char *end = NULL;
                        long lim = strtol(args[++i], &end, 10);
                        if (!end || *end || lim < 1 || lim > 4096) {
                                fprintf(stderr, "sandboxctl: --limit takes 1 to 4096\n");
                                return -1;
                        }
                        cJSON_AddNumberToObject(req, "limit", (double)lim);
                } else if (pos < 2) {
                        pa[pos++] = args[i];
                } else {
                        pos = 3;
                }
        }
        if (pos != 2) {
                fprintf(stderr, "sandboxctl: %s USER SESSION [--limit N]\n", name);
                return -1;
        }
        cJSON_AddStringToObject(req, "cmd", cmd);
        cJSON_AddStringToObject(req, "user", pa[0]);
        cJSON_AddStringToObject(req, "session", pa[1]);
        return 0;
}

/* ---- secrets (issue 37) ---- */

static void print_secrets(const cJSON *r)
{
        const cJSON *t, *h;

        printf("%-24s %-8s %-14s %s\n", "NAME", "HEADER", "UPDATED", "HOSTS");
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(r, "secrets")) {
                printf("%-24s %-8s %-14.0f", str(t, "name"), str(t, "header"), num(t, "updated_at", 0));
                cJSON_ArrayForEach(h, cJSON_GetObjectItemCaseSensitive(t, "hosts"))
                        printf(" %s", h->valuestring);
                printf("\n");
        }
        printf("%d secrets (at most %d)\n", (int)num(r, "count", 0), (int)num(r, "max_count", 0));
}

/* The value, from stdin: at most SECRET_STDIN_MAX bytes, one trailing
 * newline dropped (echo's, a here-string's). Never from argv, where ps and
 * shell history would see it. */
#define SECRET_STDIN_MAX 8192
static int secret_read_value(char *buf, size_t size, size_t *ret_len)
{
        size_t n = fread(buf, 1, size, stdin);

        if (ferror(stdin) || n == size)
                return -1;
        if (n > 0 && buf[n - 1] == '\n')
                n--;
        if (n > 0 && buf[n - 1] == '\r')
                n--;
        buf[n] = '\0';
        *ret_len = n;
        return 0;
}

/* sandboxctl secret set USER NAME --host H... [--header X] into req. */
static int secret_set_args(cJSON *req, char **args, int n_args)
{
        char value[SECRET_STDIN_MAX + 2];
        cJSON *hosts = cJSON_AddArrayToObject(req, "hosts");
        const char *pa[2] = {0};
        int pos = 0;
        size_t len;

        for (int i = 0; i < n_args; i++) {
                if (strcmp(args[i], "--host") == 0 && i + 1 < n_args)
                        cJSON_AddItemToArray(hosts, cJSON_CreateString(args[++i]));
                else if (strcmp(args[i], "--header") == 0 && i + 1 < n_args)
                        cJSON_AddStringToObject(req, "header", args[++i]);
                else if (pos < 2)
                        pa[pos++] = args[i];
                else
                        pos = 3;
        }
        if (pos != 2 || cJSON_GetArraySize(hosts) == 0) {
                fprintf(stderr, "sandboxctl: secret set USER NAME --host H [--host H2 ...] [--header X] < value\n");
                return -1;
        }
        if (secret_read_value(value, SECRET_STDIN_MAX + 1, &len) < 0) {
                fprintf(stderr, "sandboxctl: secret set: the value on stdin must be at most %d bytes\n",
                        SECRET_STDIN_MAX);
                return -1;
        }
        cJSON_AddStringToObject(req, "cmd", "secret.set");
        cJSON_AddStringToObject(req, "user", pa[0]);
        cJSON_AddStringToObject(req, "name", pa[1]);
        cJSON_AddStringToObject(req, "value", value);
        explicit_bzero(value, sizeof(value));
        return 0;
}

/* sandboxctl secret keygen PATH: 256 random bits as 64 hex digits, in a
 * new file of mode 0600 (never over an existing one). Local: no daemon. */
static int secret_keygen(const char *path)
{
        char hex[65];
        ssize_t w;
        int fd;

        if (sbx_random_hex(hex, 32) < 0) {
                fprintf(stderr, "sandboxctl: no randomness for a key\n");
                return EXIT_FAILED;
        }
        hex[64] = '\n';
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                fprintf(stderr, "sandboxctl: %s: %s\n", path, strerror(errno));
                explicit_bzero(hex, sizeof(hex));
                return EXIT_FAILED;
        }
        w = write(fd, hex, sizeof(hex));
        explicit_bzero(hex, sizeof(hex));
        if (w != (ssize_t)sizeof(hex) || fsync(fd) < 0 || close(fd) < 0) {
                fprintf(stderr, "sandboxctl: %s: cannot write the key\n", path);
                unlink(path);
                return EXIT_FAILED;
        }
        printf("wrote a new secrets key to %s (mode 0600); set secrets_key_file = %s\n", path, path);
        return 0;
}

/* ---- the commands whose arguments are the request's keys, in order ---- */

static const struct simple_cmd {
        const char *name, *sub; /* sub: the second word, or NULL */
        const char *cmd;        /* the admin command */
        int lo;                 /* arguments required; the keys past lo are optional */
        const char *keys[4];
        void (*printer)(const cJSON *result);
} simple_cmds[] = {
        {"health", NULL, "health", 0, {NULL}, print_health},
        {"stats", NULL, "stats", 0, {NULL}, print_stats},
        {"pool", NULL, "pool", 0, {NULL}, print_pool},
        {"nodes", NULL, "nodes.list", 0, {NULL}, print_nodes},
        {"metrics", NULL, "metrics", 0, {NULL}, print_metrics},
        {"show", NULL, "session.show", 2, {"user", "session"}, print_show},
        {"pause", NULL, "session.pause", 2, {"user", "session"}, print_paused},
        {"resume", NULL, "session.resume", 2, {"user", "session"}, print_resumed},
        {"mark-private", NULL, "session.mark_private", 3, {"user", "session", "dataset", "source"}, NULL},
        {"egress-policy", NULL, "egress.policy", 1, {"user", "session"}, print_egress_policy},
        {"runtime", NULL, "user.runtime", 1, {"user", "runtime"}, print_runtime},
        {"quota", "show", "quota.show", 1, {"user"}, print_quota},
        {"quota", "unset", "quota.unset", 1, {"user", "key"}, print_quota},
        {"quota", "list", "quota.list", 0, {NULL}, print_quota_list},
        {"token", "create", "token.create", 1, {"user", "role", "format"}, NULL},
        {"token", "revoke", "token.revoke", 1, {"id"}, NULL},
        {"token", "list", "token.list", 0, {NULL}, print_tokens},
        {"snapshots", NULL, "snapshots.list", 0, {"user"}, print_snapshots},
        {"snapshot", "delete", "snapshot.delete", 2, {"user", "snapshot"}, NULL},
        {"secret", "list", "secret.list", 1, {"user"}, print_secrets},
        {"secret", "delete", "secret.delete", 2, {"user", "name"}, NULL},
};

static const struct simple_cmd *simple_find(const char *name, const char *first_arg)
{
        for (size_t i = 0; i < sizeof(simple_cmds) / sizeof(simple_cmds[0]); i++) {
                const struct simple_cmd *c = &simple_cmds[i];
                if (strcmp(c->name, name) == 0 && (!c->sub || (first_arg && strcmp(c->sub, first_arg) == 0)))
                        return c;
        }
        return NULL;
}

static int simple_max(const struct simple_cmd *c)
{
        int n = 0;
        while (n < 4 && c->keys[n])
                n++;
        return n;
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
                {"socket", required_argument, NULL, 's'},
                {"config", required_argument, NULL, 'c'},
                {"json", no_argument, NULL, 'j'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        const char *socket_path = NULL, *config_path = NULL, *cmd;
        char sock[SBX_PATH_MAX];
        bool json = false;
        cJSON *req = NULL, *reply = NULL, *result;
        void (*printer)(const cJSON *) = NULL;
        const struct simple_cmd *sc;
        int c, r, n_args;
        char **args;

        /* "+": options stop at the command, so its own flags stay its own */
        while ((c = getopt_long(argc, argv, "+s:c:jh", opts, NULL)) != -1) {
                switch (c) {
                case 's':
                        socket_path = optarg;
                        break;
                case 'c':
                        config_path = optarg;
                        break;
                case 'j':
                        json = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return EXIT_USAGE;
                }
        }
        if (optind >= argc) {
                usage(stderr);
                return EXIT_USAGE;
        }
        if (!socket_path) {
                struct sbx_config cfg;
                struct sbx_error err = {0};
                if (config_load(config_path, &cfg, &err) < 0) {
                        fprintf(stderr, "sandboxctl: invalid configuration: %s\n", err.msg);
                        return EXIT_USAGE;
                }
                snprintf(sock, sizeof(sock), "%s", cfg.admin_socket);
                socket_path = sock;
        }
        cmd = argv[optind];
        args = argv + optind + 1;
        n_args = argc - optind - 1;
        req = cJSON_CreateObject();

#define NEED(lo, hi)                                                                                                   \
        do {                                                                                                           \
                if (n_args < (lo) || n_args > (hi)) {                                                                  \
                        fprintf(stderr, "sandboxctl: wrong number of arguments for %s\n", cmd);                        \
                        usage(stderr);                                                                                 \
                        cJSON_Delete(req);                                                                             \
                        return EXIT_USAGE;                                                                             \
                }                                                                                                      \
        } while (0)

        sc = simple_find(cmd, n_args > 0 ? args[0] : NULL);
        if (sc) {
                if (sc->sub) {
                        args++;
                        n_args--;
                }
                NEED(sc->lo, simple_max(sc));
                cJSON_AddStringToObject(req, "cmd", sc->cmd);
                for (int i = 0; i < n_args; i++)
                        cJSON_AddStringToObject(req, sc->keys[i], args[i]);
                printer = sc->printer;
        } else if (strcmp(cmd, "sessions") == 0) {
                cJSON_AddStringToObject(req, "cmd", "sessions.list");
                for (int i = 0; i < n_args; i++) {
                        if ((strcmp(args[i], "--user") == 0 || strcmp(args[i], "--state") == 0) && i + 1 < n_args) {
                                cJSON_AddStringToObject(req, args[i] + 2, args[i + 1]);
                                i++;
                        } else {
                                fprintf(stderr, "sandboxctl: sessions takes --user U and --state S\n");
                                cJSON_Delete(req);
                                return EXIT_USAGE;
                        }
                }
                printer = print_sessions;
        } else if (strcmp(cmd, "destroy") == 0) {
                bool purge = false;
                int pos = 0;
                const char *pa[2] = {0};
                for (int i = 0; i < n_args; i++) {
                        if (strcmp(args[i], "--purge") == 0)
                                purge = true;
                        else if (pos < 2)
                                pa[pos++] = args[i];
                        else
                                pos = 3;
                }
                if (pos != 2) {
                        fprintf(stderr, "sandboxctl: destroy USER SESSION [--purge]\n");
                        cJSON_Delete(req);
                        return EXIT_USAGE;
                }
                cJSON_AddStringToObject(req, "cmd", "session.destroy");
                cJSON_AddStringToObject(req, "user", pa[0]);
                cJSON_AddStringToObject(req, "session", pa[1]);
                cJSON_AddBoolToObject(req, "purge", purge);
        } else if (strcmp(cmd, "top") == 0) {
                const char *user = NULL;
                double interval = 0; /* 0: 2 s refreshing, 1 s between the two samples of --no-stream */
                bool stream = true;
                for (int i = 0; i < n_args; i++) {
                        char *end = NULL;
                        if (strcmp(args[i], "--user") == 0 && i + 1 < n_args) {
                                user = args[++i];
                        } else if (strcmp(args[i], "--interval") == 0 && i + 1 < n_args) {
                                interval = strtod(args[++i], &end);
                                if (!end || *end || !(interval >= 0.2 && interval <= 3600)) {
                                        fprintf(stderr, "sandboxctl: --interval takes 0.2 to 3600 seconds\n");
                                        cJSON_Delete(req);
                                        return EXIT_USAGE;
                                }
                        } else if (strcmp(args[i], "--no-stream") == 0) {
                                stream = false;
                        } else {
                                fprintf(stderr, "sandboxctl: top [--user U] [--interval SEC] [--no-stream]\n");
                                cJSON_Delete(req);
                                return EXIT_USAGE;
                        }
                }
                cJSON_Delete(req);
                return run_top(socket_path, user, interval > 0 ? interval : stream ? 2 : 1, stream, json);
        } else if (strcmp(cmd, "logs") == 0) {
                if (session_args(req, "session.logs", "logs", args, n_args) < 0) {
                        cJSON_Delete(req);
                        return EXIT_USAGE;
                }
                printer = print_logs;
        } else if (strcmp(cmd, "egress") == 0) {
                if (session_args(req, "egress.log", "egress", args, n_args) < 0) {
                        cJSON_Delete(req);
                        return EXIT_USAGE;
                }
                printer = print_egress_log;
        } else if (strcmp(cmd, "egress-allow") == 0 || strcmp(cmd, "egress-deny") == 0) {
                int pos = 0;
                const char *pa[2] = {0};
                for (int i = 0; i < n_args; i++) {
                        if (strcmp(args[i], "--session") == 0 && i + 1 < n_args)
                                cJSON_AddStringToObject(req, "session", args[++i]);
                        else if (pos < 2)
                                pa[pos++] = args[i];
                        else
                                pos = 3;
                }
                if (pos != 2) {
                        fprintf(stderr, "sandboxctl: %s USER PATTERN [--session S]\n", cmd);
                        cJSON_Delete(req);
                        return EXIT_USAGE;
                }
                cJSON_AddStringToObject(req, "cmd", strcmp(cmd, "egress-allow") == 0 ? "egress.allow" : "egress.deny");
                cJSON_AddStringToObject(req, "user", pa[0]);
                cJSON_AddStringToObject(req, "pattern", pa[1]);
                printer = print_egress_policy;
        } else if (strcmp(cmd, "quota") == 0 && n_args >= 1) {
                const char *sub = args[0];
                args++;
                n_args--;
                printer = print_quota;
                if (strcmp(sub, "set") == 0) {
                        double v;
                        NEED(3, 3);
                        v = parse_quota_value(args[2]);
                        if (v < 0) {
                                fprintf(stderr, "sandboxctl: quota set: '%s' is not a count or a size (512m)\n",
                                        args[2]);
                                cJSON_Delete(req);
                                return EXIT_USAGE;
                        }
                        cJSON_AddStringToObject(req, "cmd", "quota.set");
                        cJSON_AddStringToObject(req, "user", args[0]);
                        cJSON_AddStringToObject(req, "key", args[1]);
                        cJSON_AddNumberToObject(req, "value", v);
                } else {
                        fprintf(stderr, "sandboxctl: quota show|set|unset|list\n");
                        cJSON_Delete(req);
                        return EXIT_USAGE;
                }
        } else if (strcmp(cmd, "secret") == 0 && n_args >= 1 && strcmp(args[0], "keygen") == 0) {
                cJSON_Delete(req);
                if (n_args != 2) {
                        fprintf(stderr, "sandboxctl: secret keygen PATH\n");
                        return EXIT_USAGE;
                }
                return secret_keygen(args[1]);
        } else if (strcmp(cmd, "secret") == 0 && n_args >= 1 && strcmp(args[0], "set") == 0) {
                if (secret_set_args(req, args + 1, n_args - 1) < 0) {
                        cJSON_Delete(req);
                        return EXIT_USAGE;
                }
        } else if (strcmp(cmd, "secret") == 0) {
                fprintf(stderr, "sandboxctl: secret set|list|delete|keygen\n");
                cJSON_Delete(req);
                return EXIT_USAGE;
        } else if (strcmp(cmd, "token") == 0 && n_args >= 1) {
                fprintf(stderr, "sandboxctl: token create|revoke|list\n");
                cJSON_Delete(req);
                return EXIT_USAGE;
        } else {
                fprintf(stderr, "sandboxctl: unknown command '%s'\n", cmd);
                usage(stderr);
                cJSON_Delete(req);
                return EXIT_USAGE;
        }

        r = call(socket_path, req, &reply);
        cJSON_Delete(req);
        if (r != 0)
                return r;
        result = cJSON_GetObjectItemCaseSensitive(reply, "result");
        if (json) {
                char *out = cJSON_Print(result);
                printf("%s\n", out ? out : "null");
                free(out);
        } else if (printer) {
                printer(result);
        } else if (strcmp(cmd, "destroy") == 0) {
                printf("destroyed %s:%s%s\n", str(result, "user"), str(result, "session"),
                       flag(result, "purged") ? " (workspace purged)" : "");
        } else if (strcmp(cmd, "mark-private") == 0) {
                printf("%s:%s is private (network %s)\n", str(result, "user"), str(result, "session"),
                       str(result, "network_mode"));
        } else if (strcmp(cmd, "secret") == 0) {
                printf("secret %s %s\n", str(result, "name"), flag(result, "deleted") ? "deleted" : "stored");
        } else if (strcmp(args[-1], "create") == 0) {
                printf("token:  %s\nid:     %s\nuser:   %s\nrole:   %s\n", str(result, "token"), str(result, "id"),
                       str(result, "user"), str(result, "role"));
                fprintf(stderr, "(the token is shown only now; store it safely)\n");
        } else {
                printf("revoked token %s\n", str(result, "id"));
        }
        cJSON_Delete(reply);
        return 0;
}
