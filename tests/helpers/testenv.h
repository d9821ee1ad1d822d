/* testenv.h — shared test fixtures.
 *
 * Every container a test creates carries the label
 *   sandboxd.test.run=<run id>
 * and, when created through sandboxd code, sandboxd.instance=<run id>.
 * The run id comes from $SANDBOXD_TEST_RUN (scripts/test.sh exports one per
 * run and sweeps it at the end, even after a crash) or is generated per
 * process. testenv_cleanup() removes every such container; it is registered
 * with atexit() on first use, so a failing test still cleans up. */
#ifndef SANDBOXD_TESTENV_H
#define SANDBOXD_TESTENV_H

#include "sandboxd/docker.h"

#define TESTENV_RUN_LABEL "sandboxd.test.run"
#define TESTENV_TEST_IMAGE "sandboxd/test:latest"
#define TESTENV_PYTHON_IMAGE "sandboxd/python:latest"

const char *testenv_run_id(void);
/* $SANDBOXD_DOCKER_SOCKET or /var/run/docker.sock */
const char *testenv_docker_socket(void);
/* A negotiated client, shared by the process (created once). */
struct docker *testenv_docker(void);
/* A fresh private temp directory (mkdtemp), removed recursively by testenv_cleanup(). malloc'd path. */
char *testenv_tmpdir(void);
/* Remove every container labelled with this run id and every tmpdir made. Idempotent. */
void testenv_cleanup(void);
/* "sandboxd.test.run=<run id>" for label filters (static buffer). */
const char *testenv_run_filter(void);

#endif
