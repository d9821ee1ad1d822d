/* fixture.h — a sandboxd daemon for integration tests: a private data_dir,
 * instance = the test run id (so cleanup finds every container), the tiny
 * sandboxd/test image, and a port range of its own. */
#ifndef SANDBOXD_FIXTURE_H
#define SANDBOXD_FIXTURE_H

#include <stdbool.h>

#include "sandboxd/config.h"
#include "sandboxd/daemon.h"
#include "sandboxd/fronts.h"
#include "sandboxd/docker.h"

/* Defaults tuned for tests; data_dir is a fresh temp dir. */
void fixture_config(struct sbx_config *cfg);
/* daemon_open with the run label on every container; asserts success. */
struct daemon *fixture_open(const struct sbx_config *cfg, bool monitor);
/* The same with both sockets served, under run/ beside data_dir (set in cfg), no monitor. */
struct daemon *fixture_open_sockets(struct sbx_config *cfg);
/* The extra labels every test container carries. */
const char *const *fixture_labels(void);
/* Containers (all states) of this run's instance for user:session. */
int fixture_count_containers(const char *user, const char *session);
/* Run `sh -c script` in a container as the sandbox user; returns the exit
 * code, stdout in *ret_out if non-NULL (malloc'd). */
int fixture_sh(const char *container_id, const char *script, char **ret_out);
/* exec_run `command` as user "u1" in session (timeout_s 0: the default),
 * asserting it ran; its stdout head (malloc'd) and, if ret_code is
 * non-NULL, its exit code. */
char *fixture_run(struct daemon *d, const char *session, const char *command, int timeout_s, int *ret_code);
/* Run the docker CLI with args (a shell fragment built only from test constants and ids). */
int fixture_docker_cli(const char *args);
/* Run bin_dir/sandboxctl on admin_socket with args (a shell fragment built
 * only from test constants); its exit status, stdout and stderr in *ret_out
 * (malloc'd). */
int fixture_sandboxctl(const char *bin_dir, const char *admin_socket, const char *args, char **ret_out);
/* A loopback HTTPS upstream's pieces (issue 37's tests): in dir, a CA of
 * the test's own (upca.pem, upca.key) and a certificate it signs for
 * dns_names (comma-separated; the first is the CN: up.pem, up.key), made
 * with the openssl CLI. Asserts. */
void fixture_upstream_cert(const char *dir, const char *dns_names);
/* script (python3) written to dir/name and started with args (NULL-ended);
 * its first line on stdout holds n_ports port numbers. Its pid (the caller
 * stops it); stderr goes to /dev/null. Asserts. */
pid_t fixture_python_upstream(const char *dir, const char *name, const char *script, const char *const *args,
                              int *ret_ports, int n_ports);
/* The container id of user:session (asserts the session exists). */
void fixture_container_of(struct daemon *d, const char *user, const char *session, char ret_id[65]);
/* Poll until pred(ud) holds (0) or timeout_ms passes first (-1); see
 * testenv_wait_until. No elapsed time: speed belongs in scripts/bench.sh. */
long fixture_wait(bool (*pred)(void *ud), void *ud, long timeout_ms);
/* Wait (asserting, 30 s) until d's monitor is following the events stream,
 * shown by its counting an event (see testenv_events_probe): an event
 * before that is seen only by the periodic poll. */
void fixture_wait_monitor_events(struct daemon *d);
/* Whether execution id of user is RUNNING now (asserts it exists). */
bool fixture_exec_running(struct daemon *d, const char *user, const char *id);
/* Threads of this process whose name (comm) is `name`, e.g. "sbx-exec". */
int fixture_count_threads(const char *name);

#endif
