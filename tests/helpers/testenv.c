/* testenv.c — shared test fixtures: the per-run id and label, one negotiated
 * Docker client per process, private temp directories, and the cleanup that
 * removes everything labelled with the run id (registered with atexit on
 * first use, so a failing assertion still cleans up; a crash is swept by
 * scripts/test.sh through $SANDBOXD_TEST_RUN).
 *
 * Criterion runs each test in its own forked worker; all state here is
 * created lazily inside the worker, so every worker has its own client and
 * its own atexit cleanup. `lock` guards the tmpdir list and the client. */
#define _XOPEN_SOURCE 700
#include "testenv.h"

#include "sandboxd/engine_docker.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <limits.h>
#include <sys/mount.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char run_id[64];
static char run_filter[128];
static bool registered;
static struct docker *docker;
static bool docker_failed;
static char **tmpdirs;
static size_t n_tmpdirs;

void testenv_wait_pause(int64_t *pause_ms)
{
        sbx_sleep_ms(*pause_ms);
        if (*pause_ms < 100)
                *pause_ms = *pause_ms * 2 > 100 ? 100 : *pause_ms * 2;
}

bool testenv_wait_until(bool (*pred)(void *ud), void *ud, long timeout_ms)
{
        return TESTENV_WAIT_UNTIL(pred(ud), timeout_ms);
}

int testenv_events_probe(const struct docker_label *labels, size_t n)
{
        struct docker_label all[5] = {{TESTENV_RUN_LABEL, testenv_run_id()}};
        struct docker_container_spec spec = {.image = TESTENV_TEST_IMAGE, .labels = all};
        struct docker *d = testenv_docker();
        char id[65];
        int r;

        if (!d || n > 4)
                return -EINVAL;
        memcpy(all + 1, labels, n * sizeof(*labels));
        spec.n_labels = 1 + n;
        r = docker_container_create(d, &spec, id, NULL);
        if (r == 0)
                r = docker_container_remove(d, id, true, NULL);
        return r;
}

static void testenv_atexit(void)
{
        testenv_cleanup();
        pthread_mutex_lock(&lock);
        docker_free(docker);
        docker = NULL;
        pthread_mutex_unlock(&lock);
        docker_global_cleanup();
}

/* Called with lock held. */
static void init_locked(void)
{
        const char *env;

        if (registered)
                return;
        registered = true;
        env = getenv("SANDBOXD_TEST_RUN");
        if (env && *env)
                snprintf(run_id, sizeof(run_id), "%s", env);
        else {
                char hex[9] = "0";
                sbx_random_hex(hex, 4);
                snprintf(run_id, sizeof(run_id), "t%d-%s", (int)getpid(), hex);
        }
        snprintf(run_filter, sizeof(run_filter), "%s=%s", TESTENV_RUN_LABEL, run_id);
        /* once per process, before any test thread uses the Docker client */
        (void)docker_global_init();
        atexit(testenv_atexit);
}

const char *testenv_run_id(void)
{
        pthread_mutex_lock(&lock);
        init_locked();
        pthread_mutex_unlock(&lock);
        return run_id;
}

const char *testenv_run_filter(void)
{
        testenv_run_id();
        return run_filter;
}

const char *testenv_docker_socket(void)
{
        const char *s = getenv("SANDBOXD_DOCKER_SOCKET");
        return s && *s ? s : "/var/run/docker.sock";
}

struct engine *testenv_engine(void)
{
        static struct engine *engine;
        struct engine *e;

        if (!testenv_docker()) /* waits for a starting dockerd; says why once */
                return NULL;
        pthread_mutex_lock(&lock);
        if (!engine && engine_docker_new(testenv_docker_socket(), 60000, &engine, NULL) == 0 &&
            engine_connect(engine, NULL) < 0) {
                engine_free(engine);
                engine = NULL;
        }
        e = engine;
        pthread_mutex_unlock(&lock);
        return e;
}

struct docker *testenv_docker(void)
{
        struct docker *d;

        pthread_mutex_lock(&lock);
        init_locked();
        if (!docker && !docker_failed) {
                struct sbx_error err = {0};
                int r = -ENOMEM;

                docker = docker_new(testenv_docker_socket(), 60000);
                if (docker) /* dockerd may still be starting */
                        (void)TESTENV_WAIT_UNTIL((r = docker_negotiate(docker, &err)) == 0, 20000);
                if (!docker || r < 0) {
                        fprintf(stderr, "testenv: no usable Docker at %s: %s\n", testenv_docker_socket(),
                                docker ? err.msg : "out of memory");
                        docker_free(docker);
                        docker = NULL;
                        docker_failed = true;
                }
        }
        d = docker;
        pthread_mutex_unlock(&lock);
        return d;
}

char *testenv_tmpdir(void)
{
        const char *base = getenv("TMPDIR");
        char *path, **grown;

        testenv_run_id();
        if (asprintf(&path, "%s/sandboxd-test-%s-XXXXXX", base && *base ? base : "/tmp", run_id) < 0)
                return NULL;
        if (!mkdtemp(path)) {
                free(path);
                return NULL;
        }
        pthread_mutex_lock(&lock);
        grown = realloc(tmpdirs, (n_tmpdirs + 1) * sizeof(*tmpdirs));
        if (grown) {
                tmpdirs = grown;
                tmpdirs[n_tmpdirs] = strdup(path);
                if (tmpdirs[n_tmpdirs])
                        n_tmpdirs++;
        }
        pthread_mutex_unlock(&lock);
        return path;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        if (type == FTW_DP)
                rmdir(path);
        else
                unlink(path);
        return 0; /* keep going: remove as much as we can */
}

static void remove_labelled(struct docker *d, const char *filter)
{
        const char *filters[] = {filter, NULL};
        struct docker_container_summary *list = NULL;
        size_t n = 0;

        if (docker_container_list(d, filters, true, &list, &n, NULL) < 0)
                return;
        for (size_t i = 0; i < n; i++)
                docker_container_remove(d, list[i].id, true, NULL);
        free(list);
}

/* The networks sandboxd made for this run's instance (network_default =
 * bridge); after the containers, which would keep them in use. */
static void remove_labelled_networks(struct docker *d, const char *filter)
{
        const char *filters[] = {filter, NULL};
        char(*names)[128] = NULL;
        size_t n = 0;

        if (docker_network_list(d, filters, &names, &n, NULL) < 0)
                return;
        for (size_t i = 0; i < n; i++)
                docker_network_remove(d, names[i], NULL);
        free(names);
}

/* Unmount (lazily) every mount under dir, deepest first: the workspace
 * images a loop-mode test left mounted. Their loop devices were set up with
 * autoclear and go with the mount. */
static void unmount_under(const char *dir)
{
        char real[PATH_MAX], prefix[PATH_MAX + 2], *line = NULL;
        size_t cap = 0, plen;

        if (!realpath(dir, real))
                return;
        plen = (size_t)snprintf(prefix, sizeof(prefix), "%s/", real);
        for (int round = 0; round < 8; round++) {
                FILE *f = fopen("/proc/self/mountinfo", "re");
                char deepest[PATH_MAX] = "";
                if (!f)
                        break;
                while (getline(&line, &cap, f) > 0) {
                        char mp[PATH_MAX];
                        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strncmp(mp, prefix, plen) == 0 &&
                            strlen(mp) > strlen(deepest))
                                snprintf(deepest, sizeof(deepest), "%s", mp);
                }
                fclose(f);
                if (!deepest[0] || umount2(deepest, MNT_DETACH) < 0)
                        break;
        }
        free(line);
}

void testenv_cleanup(void)
{
        char instance_filter[128];
        struct docker *d;
        char **dirs;
        size_t n;

        pthread_mutex_lock(&lock);
        if (!registered) {
                pthread_mutex_unlock(&lock);
                return; /* nothing was ever created */
        }
        dirs = tmpdirs;
        n = n_tmpdirs;
        tmpdirs = NULL;
        n_tmpdirs = 0;
        d = docker;
        pthread_mutex_unlock(&lock);

        /* only talk to Docker if this process used it (the client lives until exit) */
        if (d) {
                remove_labelled(d, run_filter);
                snprintf(instance_filter, sizeof(instance_filter), "sandboxd.instance=%s", run_id);
                remove_labelled(d, instance_filter);
                remove_labelled_networks(d, instance_filter);
        }
        for (size_t i = 0; i < n; i++) {
                unmount_under(dirs[i]);
                nftw(dirs[i], rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
                free(dirs[i]);
        }
        free(dirs);
}
