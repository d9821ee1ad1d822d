/* harness.h — the state of one sandboxd-bench run and what its phases stand
 * on: the daemon under test, its sockets, the plain-Docker baseline, CPU
 * accounting and the daemon's log. See harness.c. */
#ifndef SANDBOXD_BENCH_HARNESS_H
#define SANDBOXD_BENCH_HARNESS_H

#include "bench.h"
#include "sandboxd/config.h"
#include "sandboxd/docker.h"

#define USER_NAME "bench"
#define CALL_TIMEOUT_MS 120000
#define READY_TIMEOUT_MS 120000

/* Sample counts and session counts of one mode (full or --quick). */
struct sizes {
        int cold, exec, run_code, conc_sessions, conc_execs, rss_sessions, detect, restart_sessions, restart, noisy,
                http;
};

struct bench {
        struct sbx_config cfg; /* loaded from the same SANDBOXD_* environment as the daemon's */
        struct sizes sz;
        bool quick;
        const char *daemon_bin, *log_path, *pid_path, *json_path, *bench_id, *docker;
        const char *http_ca; /* the CA of the daemon's HTTPS certificate; NULL: no HTTPS row */
        pid_t daemon;
        char token[256];
        char ws_root[SBX_PATH_MAX]; /* baseline workspaces */
        int base_port;              /* next baseline port block */
        int sessions_alive;         /* bulk sessions s0..s{n-1} created so far */
        struct docker *engine;      /* the reference Engine API client */
        pid_t dockerd;              /* for CPU accounting; -1 if unknown */
        struct report rep;
};

/* ---- the daemon ---- */

/* Start the daemon (pid written to pid_path) and wait until the admin
 * socket answers health and the API socket answers session_info for
 * probe_session (any reply before a token exists). Returns ms from the
 * spawn to that point, or -1. */
double daemon_start(struct bench *b, const char *probe_session);
/* Send sig and reap. */
void daemon_stop(struct bench *b, int sig);
/* token.create for USER_NAME, role agent, into b->token. */
int create_token(struct bench *b);
/* A "Key: N kB" field of the daemon's /proc status, in MB (10^6 bytes). */
double status_mb(struct bench *b, const char *key);

/* CPU time (ms) consumed so far by the daemon, dockerd and the whole machine. */
struct cpu {
        double daemon, dockerd, machine;
};
struct cpu cpu_now(struct bench *b);
void cpu_add_delta(struct cpu *acc, const struct cpu *t0, const struct cpu *t1);

/* ---- sessions through the sockets ---- */

/* API exec of cmd in session; requires exit code 0. The round trip in ms,
 * or -1 with why filled. */
double timed_exec(struct bench *b, struct conn *c, const char *session, const char *cmd, char *why, size_t why_size);
/* The session's container id (session_info). */
int session_container(struct bench *b, struct conn *c, const char *session, char *ret_id, size_t size);
/* session.show's state ("" if unknown) into buf. */
const char *admin_session_state(struct bench *b, const char *session, char *buf, size_t size);
/* session.destroy with purge. */
int admin_destroy(struct bench *b, const char *session);
/* Bring sessions s{from}..s{upto-1} to life (an exec each), `workers` at a
 * time. Returns the number of failures. */
int grow_sessions(struct bench *b, int from, int upto, int workers);
/* session.destroy (with purge) s{from}..s{upto-1}, `workers` at a time. */
int shrink_sessions(struct bench *b, int from, int upto, int workers);

/* ---- the plain-Docker baseline ---- */

#define BASELINE_NETWORK "bridge" /* docker run --network bridge -p ...: the flags a CLI user has */

/* `docker run -d` with every flag src/container.c gives a session container,
 * on workspace ws and (with publish) the next baseline port block; the id
 * into ret_id and the CLI's duration into *ret_ms. */
int baseline_run(struct bench *b, const char *ws, bool publish, char *ret_id, size_t size, double *ret_ms);
/* `docker exec id true`: ms, or -1. */
double docker_exec_cli(struct bench *b, const char *id);
void docker_rm(struct bench *b, const char *id);
/* A baseline workspace directory owned by the top uid of sandbox_uid_range, mode 0700. */
int make_workspace(struct bench *b, int i, char *ret, size_t size);

/* ---- the daemon's log and other files ---- */

long file_size(const char *path);
/* "2026-11-21T12:39:16.795527650Z" (UTC) as unix ms; -1 if unparsable. */
int64_t rfc3339_ms(const char *s);
/* For each session past offset whose name starts with prefix: ms from
 * "STOPPED -> CREATING" to "CREATING -> RUNNING" in the log. */
void creation_spans(const char *log_path, long offset, const char *prefix, struct series *ret);
/* Unix ms of the first "reconciled:" line past offset (the line into
 * line_out), or -1. */
int64_t find_reconciled(const char *log_path, long offset, char *line_out, size_t size);

/* ---- phases in their own files ---- */

/* noisy.c: the noisy_neighbour measurements. */
int phase_noisy(struct bench *b);
/* http.c: http_exec_roundtrip, POST /v1/exec over HTTPS against the socket. */
int phase_http(struct bench *b);

/* pool.c: first_command_new_session (warm and cold) and pool_refill_rate. */
int phase_pool(struct bench *b);

/* cells.c: run_cell round trip, its baselines, first cell, kernel RSS. */
int phase_cells(struct bench *b);
/* snapshot.c: --only snapshot (issue 28): snapshot and fork of a 100 MB and a 1 GB workspace. */
int phase_snapshot(struct bench *b);

/* pause.c: pause_session, resume_session, the first command after a resume, against plain Docker. */
int phase_pause(struct bench *b);
/* pause_session or resume_session (method) on session: ms, or -1 (why says). */
double timed_session_call(struct bench *b, struct conn *c, const char *method, const char *session, char *why,
                          size_t why_size);
/* The Engine API's pause (or unpause) of container id: ms, or -1. */
double timed_engine(struct bench *b, const char *id, bool pause);
/* microvm.c: the microVM rows (cold first command, pause, resume). */
int phase_microvm(struct bench *b);

/* ---- for the report ---- */

cJSON *machine_info(struct bench *b);
cJSON *config_info(struct bench *b);

#endif
