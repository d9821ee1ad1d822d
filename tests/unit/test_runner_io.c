/* test_runner_io.c — the runner's signal-proof waits (runner/runner_io.c,
 * linked alone): how the runner waits for a service shim's report. SIGCHLD
 * comes whenever any execution ends; here a thread aims a storm of signals
 * at the waiting thread, and the wait must still return the report, give up
 * at its deadline (not restart it with every signal), and see end of file. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner_io.h"
#include "testenv.h"

static atomic_long hits; /* signals the handler took */

static void on_signal(int sig)
{
        (void)sig;
        atomic_fetch_add(&hits, 1);
}

struct storm {
        pthread_t target, thread;
        int sig;
        atomic_bool stop;
};

static void *storm_main(void *ud)
{
        struct storm *s = ud;

        while (!atomic_load(&s->stop))
                (void)pthread_kill(s->target, s->sig);
        return NULL;
}

/* Handle sig as the runner handles SIGCHLD (restart = SA_RESTART, as the
 * runner sets it), then start a storm of it at the calling thread. */
static void storm_start(struct storm *s, int sig, bool restart)
{
        struct sigaction sa = {.sa_handler = on_signal, .sa_flags = restart ? SA_RESTART | SA_NOCLDSTOP : 0};

        sigemptyset(&sa.sa_mask);
        cr_assert_eq(sigaction(sig, &sa, NULL), 0);
        atomic_store(&hits, 0);
        s->target = pthread_self();
        s->sig = sig;
        atomic_store(&s->stop, false);
        cr_assert_eq(pthread_create(&s->thread, NULL, storm_main, s), 0);
}

static void storm_stop(struct storm *s)
{
        atomic_store(&s->stop, true);
        pthread_join(s->thread, NULL);
}

/* The shim's side: the leader's pid in two halves, each once the waiting
 * thread has taken another `per_half` signals (so the storm is on while it
 * waits). */
struct shim {
        int fd;
        long per_half;
        pid_t leader;
        bool wrote; /* no cr_assert off the test's thread */
};

static void *shim_main(void *ud)
{
        struct shim *sh = ud;
        const char *b = (const char *)&sh->leader;
        size_t half = sizeof(sh->leader) / 2;

        sh->wrote = true;
        for (int k = 0; k < 2; k++) {
                long want = (k + 1) * sh->per_half;
                size_t len = k ? sizeof(sh->leader) - half : half;
                (void)TESTENV_WAIT_UNTIL(atomic_load(&hits) >= want, 20000);
                sh->wrote &= write(sh->fd, b + k * half, len) == (ssize_t)len;
        }
        return NULL;
}

static void report_through_storm(int sig, bool restart)
{
        struct storm s;
        struct shim sh = {.per_half = 2000, .leader = 4242};
        pthread_t t;
        pid_t got = 0;
        int rep[2];

        cr_assert_eq(pipe2(rep, O_CLOEXEC), 0);
        sh.fd = rep[1];
        storm_start(&s, sig, restart);
        cr_assert_eq(pthread_create(&t, NULL, shim_main, &sh), 0);
        int r = rio_read_full(rep[0], &got, sizeof(got), 60000);
        storm_stop(&s);
        pthread_join(t, NULL);
        cr_assert(sh.wrote);
        cr_assert_eq(r, 0, "the wait failed: %s after %ld signals", strerror(-r), atomic_load(&hits));
        cr_assert_eq(got, 4242);
        cr_assert_geq(atomic_load(&hits), 2 * sh.per_half, "the storm reached the waiting thread");
        close(rep[0]);
        close(rep[1]);
}

Test(runner_io, report_through_a_sigchld_storm, .timeout = 120)
{
        report_through_storm(SIGCHLD, true); /* the runner's own setting */
}

Test(runner_io, report_through_a_storm_without_sa_restart, .timeout = 120)
{
        report_through_storm(SIGUSR1, false); /* read() itself may now fail with EINTR */
}

/* A storm must not stretch the wait: it ends at its deadline, counted from
 * the call, however many signals arrive (a wait restarted whole on each
 * signal never would). The Criterion timeout catches that. */
Test(runner_io, deadline_holds_through_a_storm, .timeout = 30)
{
        struct storm s;
        pid_t got = 0;
        int rep[2], r;

        cr_assert_eq(pipe2(rep, O_CLOEXEC), 0);
        storm_start(&s, SIGCHLD, true);
        r = rio_read_full(rep[0], &got, sizeof(got), 300);
        storm_stop(&s);
        cr_assert_eq(r, -ETIMEDOUT, "%s", strerror(-r));
        cr_assert_gt(atomic_load(&hits), 0, "signals arrived during the wait");
        close(rep[0]);
        close(rep[1]);
}

/* The shim died before it reported: end of file, at once. */
Test(runner_io, end_of_file_before_the_report)
{
        pid_t got = 0;
        int rep[2];

        cr_assert_eq(pipe2(rep, O_CLOEXEC), 0);
        cr_assert_eq(write(rep[1], "ab", 2), 2);
        close(rep[1]);
        cr_assert_eq(rio_read_full(rep[0], &got, sizeof(got), 60000), -EPIPE);
        close(rep[0]);
}

/* A blocking write of more than the pipe holds, to a slow reader, through a
 * storm without SA_RESTART: every byte arrives once, in order. */
struct drain {
        int fd;
        size_t n;
        bool ok;
};

static void *drain_main(void *ud)
{
        struct drain *d = ud;
        unsigned char buf[4096];
        size_t at = 0;

        d->ok = true;
        while (at < d->n) {
                ssize_t k = read(d->fd, buf, sizeof(buf));
                if (k <= 0) {
                        d->ok = false;
                        return NULL;
                }
                for (ssize_t i = 0; i < k; i++)
                        d->ok &= buf[i] == (unsigned char)((at + (size_t)i) % 251);
                at += (size_t)k;
        }
        return NULL;
}

Test(runner_io, write_full_through_a_storm, .timeout = 120)
{
        struct storm s;
        struct drain d = {.n = 8u << 20};
        unsigned char *buf = malloc(d.n);
        pthread_t t;
        int p[2], r;

        cr_assert_not_null(buf);
        for (size_t i = 0; i < d.n; i++)
                buf[i] = (unsigned char)(i % 251);
        cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
        d.fd = p[0];
        storm_start(&s, SIGUSR1, false);
        cr_assert_eq(pthread_create(&t, NULL, drain_main, &d), 0);
        r = rio_write_full(p[1], buf, d.n);
        storm_stop(&s);
        pthread_join(t, NULL);
        cr_assert_eq(r, 0, "%s", strerror(-r));
        cr_assert(d.ok, "the reader got every byte once, in order");
        free(buf);
        close(p[0]);
        close(p[1]);
}
