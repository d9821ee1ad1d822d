/* runner_io.h — the runner's blocking I/O that signals must not cut short.
 *
 * The runner takes SIGCHLD whenever any execution or service ends, at any
 * rate the tenant likes. poll() is never restarted after a handler (not even
 * with SA_RESTART), and read() and write() are not without it, so every
 * bounded wait here restarts itself with what is left of its deadline,
 * measured on CLOCK_MONOTONIC. Pure: no state of the runner, so a unit test
 * (tests/unit/test_runner_io.c) links runner_io.c alone. */
#ifndef SANDBOXD_RUNNER_IO_H
#define SANDBOXD_RUNNER_IO_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds. */
int64_t rio_now_ms(void);
/* Read exactly n bytes from fd (blocking or not) within timeout_ms of the
 * call, through any number of signals. 0; -ETIMEDOUT once the deadline has
 * passed; -EPIPE at end of file before n bytes; or -errno. What was read
 * before a failure is lost. */
int rio_read_full(int fd, void *buf, size_t n, int64_t timeout_ms);
/* Write all n bytes to a blocking fd, through any number of signals. 0;
 * -EIO when the fd takes nothing; or -errno. */
int rio_write_full(int fd, const void *buf, size_t n);

#endif
