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

#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/docker.h"
#include "sandboxd/engine.h"

#define TESTENV_RUN_LABEL "sandboxd.test.run"
#define TESTENV_TEST_IMAGE "sandboxd/test:latest"
#define TESTENV_PYTHON_IMAGE "sandboxd/python:latest"

const char *testenv_run_id(void);
/* $SANDBOXD_DOCKER_SOCKET or /var/run/docker.sock */
const char *testenv_docker_socket(void);
/* A negotiated client, shared by the process (created once). */
struct docker *testenv_docker(void);
/* The Docker engine (engine.h) on the same socket, for the calls of sandboxd's
 * own modules that take one (created once, lives until exit); NULL when
 * Docker is unusable. */
struct engine *testenv_engine(void);
/* A fresh private temp directory (mkdtemp), removed recursively by testenv_cleanup(). malloc'd path. */
char *testenv_tmpdir(void);
/* Remove every container labelled with this run id and every tmpdir made. Idempotent. */
void testenv_cleanup(void);
/* "sandboxd.test.run=<run id>" for label filters (static buffer). */
const char *testenv_run_filter(void);

/* Waiting in tests: every wait is a predicate with a deadline, never a bare
 * sleep. testenv_wait_until polls pred(ud) until it holds or timeout_ms
 * passes and returns whether it became true; it is evaluated once more at
 * the deadline, so a slow machine only makes the wait longer. The pause
 * between polls grows from 5 ms to 100 ms (a predicate may ask Docker).
 * TESTENV_WAIT_UNTIL(cond, timeout_ms) does the same for an expression
 * evaluated in place (a GNU statement expression yielding the bool).
 * A sleep that is not a wait (it lets time pass on purpose, to show that
 * something does NOT happen or to age something) stays a plain
 * sbx_sleep_ms() with a comment saying why. */
bool testenv_wait_until(bool (*pred)(void *ud), void *ud, long timeout_ms);
/* One pause of the poll: sleeps *pause_ms, then doubles it up to 100 ms. */
void testenv_wait_pause(int64_t *pause_ms);
/* One poke for waits on "the events stream is connected", which has no other
 * sign: make and remove a container (never started) of the test image carrying
 * the run label and `labels` (n of them, at most 4), so a stream filtered on
 * them sees its create and destroy events. Returns 0 or a negative errno. */
int testenv_events_probe(const struct docker_label *labels, size_t n);
#define TESTENV_WAIT_UNTIL(cond, timeout_ms)                                                                           \
        ({                                                                                                             \
                int64_t testenv_deadline_ = sbx_now_ms() + (int64_t)(timeout_ms);                                      \
                int64_t testenv_pause_ = 5;                                                                            \
                bool testenv_ok_;                                                                                      \
                while (!(testenv_ok_ = (cond)) && sbx_now_ms() < testenv_deadline_)                                    \
                        testenv_wait_pause(&testenv_pause_);                                                           \
                testenv_ok_;                                                                                           \
        })

#endif
