/* stress.c — the shared kit of the stress programs (see stress.h). The
 * failure counter is atomic; the start barrier releases every thread of a
 * stress_threads() call together, so they overlap as much as possible. */
#include "stress.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static char tmpdir[256];

void stress_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
        va_list ap;

        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        flockfile(stderr);
        fprintf(stderr, "%s:%d: FAILED %s: ", file, line, cond);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        funlockfile(stderr);
}

struct stress_run {
        void (*fn)(int i, void *ud);
        void *ud;
        pthread_barrier_t start;
};

struct stress_arg {
        struct stress_run *run;
        int i;
};

static void *thread_main(void *p)
{
        struct stress_arg *a = p;

        pthread_barrier_wait(&a->run->start);
        a->run->fn(a->i, a->run->ud);
        return NULL;
}

void stress_threads(int n, void (*fn)(int i, void *ud), void *ud)
{
        struct stress_run run = {.fn = fn, .ud = ud};
        pthread_t t[64];
        struct stress_arg args[64];

        if (n > 64)
                n = 64;
        pthread_barrier_init(&run.start, NULL, (unsigned)n);
        for (int i = 0; i < n; i++) {
                args[i] = (struct stress_arg){&run, i};
                if (pthread_create(&t[i], NULL, thread_main, &args[i]) != 0) {
                        fprintf(stderr, "stress: cannot start thread %d\n", i);
                        exit(2);
                }
        }
        for (int i = 0; i < n; i++)
                pthread_join(t[i], NULL);
        pthread_barrier_destroy(&run.start);
}

const char *stress_tmpdir(void)
{
        if (!tmpdir[0]) {
                const char *base = getenv("TMPDIR");
                snprintf(tmpdir, sizeof(tmpdir), "%s/sandboxd-stress-XXXXXX", base && *base ? base : "/tmp");
                if (!mkdtemp(tmpdir)) {
                        perror("stress: mkdtemp");
                        exit(2);
                }
        }
        return tmpdir;
}

int stress_n(int base)
{
        const char *s = getenv("SANDBOXD_STRESS_SCALE");
        long pct = s && *s ? strtol(s, NULL, 10) : 100;

        if (pct < 1)
                pct = 1;
        return (int)((long)base * pct / 100) > 0 ? (int)((long)base * pct / 100) : 1;
}

int stress_done(const char *name)
{
        int n = __atomic_load_n(&failures, __ATOMIC_RELAXED);

        if (tmpdir[0]) {
                char cmd[300];
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir); /* our own mkdtemp path, no quote in it */
                if (system(cmd) != 0)
                        fprintf(stderr, "stress: could not remove %s\n", tmpdir);
        }
        printf("%s: %s (%d failed check%s)\n", name, n ? "FAILED" : "ok", n, n == 1 ? "" : "s");
        return n ? 1 : 0;
}
