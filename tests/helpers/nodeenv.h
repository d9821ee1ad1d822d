/* nodeenv.h — a separate node agent (`sandboxd node`) for integration
 * tests: a throwaway PKI made with the openssl CLI, a control daemon
 * config that listens for node agents on a loopback port of 20000-21999,
 * and node agent processes started and killed by pid.
 *
 * SANDBOXD_TEST_NODE=1 makes fixture_open() and fixture_open_sockets() run
 * every daemon over a node agent (one per test process, started with the
 * first daemon and killed at exit), so existing suites run over the TLS
 * link unchanged (scripts/test.sh --node). */
#ifndef SANDBOXD_NODEENV_H
#define SANDBOXD_NODEENV_H

#include <stdbool.h>
#include <sys/types.h>

#include "sandboxd/config.h"

/* Whether SANDBOXD_TEST_NODE asks for a node agent under every daemon. */
bool nodeenv_wanted(void);
/* A PKI in a fresh directory (returned, malloc'd): ca.pem, sandboxd-control
 * (the control daemon's), node1 and node3 (good), node2 (revoked in
 * crl.pem). Asserts. */
char *nodeenv_pki(void);
/* Revoke name's certificate too and write crl.pem again (a new file
 * renamed over the old one). Asserts. */
void nodeenv_revoke(const char *pki, const char *name);
/* Point cfg (a control daemon's) at the node link: node.listen on a free
 * loopback port of 20000-21999, the control's certificate of pki. */
void nodeenv_config_control(struct sbx_config *cfg, const char *pki);
/* Fill cfg as a node agent named name dialling control's node.listen, with
 * data_dir: for node_client_connect, or nodeenv_start. */
void nodeenv_config_node(struct sbx_config *cfg, const struct sbx_config *control, const char *pki, const char *name,
                         const char *data_dir);
/* Start `sandboxd node` (next to the test binary) as name: its pid.
 * Asserts. The process is killed at exit if still running. */
pid_t nodeenv_start(const struct sbx_config *control, const char *pki, const char *name, const char *data_dir);
/* The same, with extra lines appended to the agent's config file
 * ("publish_ip = 127.0.0.3\n", say). */
pid_t nodeenv_start_conf(const struct sbx_config *control, const char *pki, const char *name, const char *data_dir,
                         const char *extra);
/* A certificate (name.pem, name.key) of pki's CA with the common name name
 * (a node's name: "localhost", "127.0.0.2"). Asserts. */
void nodeenv_cert(const char *pki, const char *name);
/* Start n agents, names[i] with data_dir base/names[i] (made): pids in
 * ret_pids. Asserts. */
void nodeenv_start_n(const struct sbx_config *control, const char *pki, const char *const *names, size_t n,
                     const char *base, pid_t *ret_pids);
/* Send sig and, for SIGKILL/SIGTERM, reap it. */
void nodeenv_kill(pid_t pid, int sig);
/* For fixture.c: the control config gets a node agent (started once per
 * process) when nodeenv_wanted(). */
void nodeenv_fixture(struct sbx_config *cfg);

#endif
