/* Integration tests for the Docker client against the real dockerd and the
 * sandboxd/test:latest image (busybox, uid 1000, CMD keeps running).
 * Every container carries the run label and is removed by the test itself
 * and, should an assertion fail first, by testenv_cleanup() at exit.
 *
 * Over 800 lines: one suite, one case per Docker client call, sharing the
 * container helpers and the fake-server harness.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/docker.h"
#include "testenv.h"

static struct docker *D;

/* containers this test created, removed in the teardown */
static char made[8][65];
static size_t n_made;

static void setup(void)
{
        D = testenv_docker();
        cr_assert_not_null(D, "no Docker at %s", testenv_docker_socket());
        n_made = 0;
}

static void teardown(void)
{
        for (size_t i = 0; i < n_made; i++)
                docker_container_remove(D, made[i], true, NULL);
        n_made = 0;
}

TestSuite(docker, .init = setup, .fini = teardown, .timeout = 120);

static const char *const keep_running[] = {"sleep", "1000", NULL};

/* Create (and start, if asked) a container of the test image with the run label. */
static void make_container(struct docker_container_spec *spec, bool start, char id[65])
{
        struct docker_label labels[4] = {{TESTENV_RUN_LABEL, testenv_run_id()}, {"sandboxd.test.case", "docker"}};
        struct sbx_error err = {0};
        int r;

        if (!spec->image)
                spec->image = TESTENV_TEST_IMAGE;
        for (size_t i = 0; i < spec->n_labels && i < 2; i++)
                labels[2 + i] = spec->labels[i];
        spec->n_labels = 2 + (spec->n_labels < 2 ? spec->n_labels : 2);
        spec->labels = labels;
        r = docker_container_create(D, spec, id, &err);
        cr_assert_eq(r, 0, "create: %d %s", r, err.msg);
        cr_assert_lt(n_made, ELEMENTSOF(made));
        memcpy(made[n_made++], id, 65);
        if (start) {
                r = docker_container_start(D, id, &err);
                cr_assert_eq(r, 0, "start: %d %s", r, err.msg);
        }
        spec->labels = NULL;
}

static void exec_ok(const char *id, const char *const *cmd, const char *in, size_t in_len, size_t max_output,
                    struct docker_exec_result *res)
{
        struct docker_exec_spec es = {.cmd = cmd};
        struct sbx_error err = {0};
        int r = docker_exec_run(D, id, &es, in, in_len, max_output, 30000, res, &err);
        cr_assert_eq(r, 0, "exec %s: %d %s", cmd[0], r, err.msg);
}

Test(docker, lifecycle_hardened)
{
        const char *drop[] = {"ALL", NULL};
        const char *secopt[] = {"no-new-privileges:true", NULL};
        const char *tmpfs[] = {"/tmp:rw,noexec,nosuid,size=16m", NULL};
        const struct docker_label extra[] = {{"sandboxd.session", "s-lifecycle"}};
        struct docker_container_spec spec = {
                .user = "1000:1000",
                .cmd = keep_running,
                .cap_drop = drop,
                .security_opt = secopt,
                .tmpfs = tmpfs,
                .memory = 128 << 20,
                .nano_cpus = 500000000,
                .pids_limit = 64,
                .readonly_rootfs = true,
                .init = true,
                .network_mode = "none",
                .labels = extra,
                .n_labels = 1,
        };
        struct docker_container_info info;
        struct docker_exec_result res;
        struct sbx_error err = {0};
        char id[65];
        int r;

        make_container(&spec, true, id);
        r = docker_container_inspect(D, id, &info, &err);
        cr_assert_eq(r, 0, "inspect: %s", err.msg);
        cr_expect_str_eq(info.id, id);
        cr_expect(info.running);
        cr_expect_str_eq(info.status, "running");
        cr_expect_gt(info.pid, 0);
        cr_expect(info.readonly_rootfs);
        cr_expect(info.init);
        cr_expect_not(info.privileged);
        cr_expect_eq(info.memory, 128 << 20);
        cr_expect_eq(info.memory_swap, 128 << 20);
        cr_expect_eq(info.nano_cpus, 500000000);
        cr_expect_eq(info.pids_limit, 64);
        cr_expect_str_eq(info.network_mode, "none");
        cr_expect_not(info.has_network);
        cr_expect_str_eq(docker_kv_get(info.labels, info.n_labels, TESTENV_RUN_LABEL), testenv_run_id());
        cr_expect_str_eq(docker_kv_get(info.labels, info.n_labels, "sandboxd.session"), "s-lifecycle");

        /* stdout and stderr apart, exit code */
        {
                const char *cmd[] = {"sh", "-c", "echo out; echo err >&2; echo more; exit 3", NULL};
                exec_ok(id, cmd, NULL, 0, 0, &res);
                cr_expect_eq(res.exit_code, 3);
                cr_expect_str_eq(res.out, "out\nmore\n");
                cr_expect_eq(res.out_len, 9);
                cr_expect_str_eq(res.err, "err\n");
                cr_expect_not(res.truncated);
                docker_exec_result_done(&res);
        }
        /* the hardening is really in force inside */
        {
                const char *cmd[] = {"sh", "-c",
                                     "id -u; grep CapEff /proc/self/status; touch /x 2>/dev/null || echo ro; "
                                     "grep NoNewPrivs /proc/self/status",
                                     NULL};
                exec_ok(id, cmd, NULL, 0, 0, &res);
                cr_expect_eq(res.exit_code, 0);
                cr_expect(strstr(res.out, "1000\n") == res.out, "out: %s", res.out);
                cr_expect(strstr(res.out, "CapEff:\t0000000000000000"), "out: %s", res.out);
                cr_expect(strstr(res.out, "ro\n"), "out: %s", res.out);
                cr_expect(strstr(res.out, "NoNewPrivs:\t1"), "out: %s", res.out);
                docker_exec_result_done(&res);
        }
        /* stdin fed and echoed back */
        {
                const char *cmd[] = {"cat", NULL};
                const char in[] = "hello\nworld";
                exec_ok(id, cmd, in, sizeof(in) - 1, 0, &res);
                cr_expect_eq(res.exit_code, 0);
                cr_expect_str_eq(res.out, in);
                cr_expect_eq(res.err_len, 0);
                docker_exec_result_done(&res);
        }
        /* a big stdin while the output flows back: no deadlock, nothing lost */
        {
                const char *cmd[] = {"cat", NULL};
                size_t n = 3 << 20;
                char *in = malloc(n);
                cr_assert_not_null(in);
                for (size_t i = 0; i < n; i++)
                        in[i] = (char)('a' + i % 26);
                exec_ok(id, cmd, in, n, n, &res);
                cr_expect_eq(res.exit_code, 0);
                cr_expect_eq(res.out_len, n);
                cr_expect(memcmp(res.out, in, n) == 0);
                cr_expect_not(res.truncated);
                docker_exec_result_done(&res);
                free(in);
        }
        /* the process ignores (part of) a big stdin and exits: not an error */
        {
                const char *cmd1[] = {"true", NULL};
                const char *cmd2[] = {"head", "-c", "10", NULL};
                size_t n = 4 << 20;
                char *in = malloc(n);
                cr_assert_not_null(in);
                memset(in, 'z', n);
                exec_ok(id, cmd1, in, n, 0, &res);
                cr_expect_eq(res.exit_code, 0);
                cr_expect_eq(res.out_len, 0);
                docker_exec_result_done(&res);
                exec_ok(id, cmd2, in, n, 0, &res);
                cr_expect_eq(res.exit_code, 0);
                cr_expect_str_eq(res.out, "zzzzzzzzzz");
                docker_exec_result_done(&res);
                free(in);
        }
        /* output cap */
        {
                const char *cmd[] = {"sh", "-c", "yes | head -c 100000; echo e >&2", NULL};
                exec_ok(id, cmd, NULL, 0, 1000, &res);
                cr_expect_eq(res.exit_code, 0);
                cr_expect_eq(res.out_len, 1000);
                cr_expect_eq(strlen(res.out), 1000);
                cr_expect_str_eq(res.err, "e\n");
                cr_expect(res.truncated);
                docker_exec_result_done(&res);
        }

        r = docker_container_stop(D, id, 1, &err);
        cr_assert_eq(r, 0, "stop: %s", err.msg);
        r = docker_container_stop(D, id, 1, &err);
        cr_expect_eq(r, 0, "stop again: %s", err.msg);
        r = docker_container_inspect(D, id, &info, &err);
        cr_assert_eq(r, 0);
        cr_expect_not(info.running);
        cr_expect_str_eq(info.status, "exited");
        {
                const char *cmd[] = {"true", NULL};
                struct docker_exec_spec es = {.cmd = cmd};
                r = docker_exec_run(D, id, &es, NULL, 0, 0, 10000, &res, &err);
                cr_expect_eq(r, -EBUSY, "exec in a stopped container: %d %s", r, err.msg);
                cr_expect_eq(err.http_status, 409);
        }
        r = docker_container_remove(D, id, false, &err);
        cr_assert_eq(r, 0, "remove: %s", err.msg);
        r = docker_container_inspect(D, id, &info, &err);
        cr_expect_eq(r, -ENOENT);
        cr_expect_eq(err.http_status, 404);
        cr_expect(strstr(err.msg, "No such container"), "msg: %s", err.msg);
        r = docker_container_remove(D, id, true, &err);
        cr_expect_eq(r, -ENOENT);
}

Test(docker, exec_stream_by_hand)
{
        struct docker_container_spec spec = {.cmd = keep_running};
        const char *cmd[] = {"sh", "-c", "read line; echo got:$line; sleep 2; echo late >&2; exit 7", NULL};
        struct docker_exec_spec es = {.cmd = cmd, .attach_stdin = true};
        struct docker_stream *s = NULL;
        struct docker_exec_info xi;
        struct sbx_error err = {0};
        enum docker_stream_kind kind;
        char exec_id[65], buf[64];
        char id[65];
        ssize_t n;
        int r;

        make_container(&spec, true, id);
        r = docker_exec_create(D, id, &es, exec_id, &err);
        cr_assert_eq(r, 0, "%s", err.msg);
        r = docker_exec_attach(D, exec_id, &s, &err);
        cr_assert_eq(r, 0, "%s", err.msg);
        cr_expect_geq(docker_stream_fd(s), 0);
        /* nothing yet: the read must give up at its timeout */
        n = docker_stream_read(s, &kind, buf, sizeof(buf), 100);
        cr_expect_eq(n, -ETIMEDOUT);
        cr_assert_eq(docker_stream_write(s, "x1\n", 3, 10000), 0);
        n = docker_stream_read(s, &kind, buf, sizeof(buf), 10000);
        cr_assert_gt(n, 0);
        cr_expect_eq(kind, DOCKER_STREAM_STDOUT);
        cr_expect(n == 7 && memcmp(buf, "got:x1\n", 7) == 0, "read %zd: %.*s", n, (int)(n > 0 ? n : 0), buf);
        cr_expect_eq(docker_stream_close_write(s), 0);
        /* dockerd marks an exec running before containerd returns its pid,
         * and the process may answer before that: the pid comes soon after */
        cr_expect(TESTENV_WAIT_UNTIL(docker_exec_inspect(D, exec_id, &xi, &err) == 0 && xi.pid > 0, 10000),
                  "pid %d: %s", xi.pid, err.msg);
        cr_expect(xi.running);
        cr_expect_eq(xi.exit_code, -1);
        /* a small buffer splits the frame */
        n = docker_stream_read(s, &kind, buf, 3, 10000);
        cr_assert_eq(n, 3);
        cr_expect_eq(kind, DOCKER_STREAM_STDERR);
        n = docker_stream_read(s, &kind, buf + 3, 3, 10000);
        cr_assert_eq(n, 2);
        cr_expect(memcmp(buf, "late\n", 5) == 0);
        n = docker_stream_read(s, &kind, buf, sizeof(buf), 10000);
        cr_expect_eq(n, 0, "EOF");
        docker_stream_free(s);
        (void)TESTENV_WAIT_UNTIL((r = docker_exec_inspect(D, exec_id, &xi, &err)) < 0 || !xi.running, 5000);
        cr_expect_eq(r, 0);
        cr_expect_not(xi.running);
        cr_expect_eq(xi.exit_code, 7);

        r = docker_exec_attach(D, "0000000000000000000000000000000000000000000000000000000000000000", &s, &err);
        cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
        cr_expect_eq(err.http_status, 404);
        r = docker_exec_inspect(D, "nosuchexec", &xi, &err);
        cr_expect_eq(r, -ENOENT);
}

/* ---- events ---- */

struct follow {
        const char *want_id;
        volatile bool stop;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool seen_die;
        int exit_code;
        bool label_ok;
        int n_events;
        int result;
        bool done;
        struct sbx_error err;
};

static int on_event(const struct docker_event *ev, void *userdata)
{
        struct follow *f = userdata;

        pthread_mutex_lock(&f->lock);
        f->n_events++;
        if (strcmp(ev->id, f->want_id) == 0 && strcmp(ev->action, "die") == 0) {
                f->seen_die = true;
                f->exit_code = ev->exit_code;
                f->label_ok = docker_kv_get(ev->labels, ev->n_labels, TESTENV_RUN_LABEL) != NULL;
                pthread_cond_broadcast(&f->cond);
        }
        pthread_mutex_unlock(&f->lock);
        return 0; /* keep following: the stop flag ends it */
}

static void *follow_main(void *arg)
{
        struct follow *f = arg;
        const char *filters[] = {testenv_run_filter(), NULL};
        int r = docker_events_follow(D, filters, NULL, on_event, f, &f->stop, 0, &f->err);

        pthread_mutex_lock(&f->lock);
        f->result = r;
        f->done = true;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->lock);
        return NULL;
}

/* The follow is connected once it delivers an event: until then, poke it
 * with a probe container (its filter is the run label, any action). */
static bool follow_delivers(void *ud)
{
        struct follow *f = ud;
        int n;

        pthread_mutex_lock(&f->lock);
        n = f->n_events;
        pthread_mutex_unlock(&f->lock);
        if (n == 0)
                (void)testenv_events_probe(NULL, 0);
        return n > 0;
}

static bool wait_for(struct follow *f, bool *flag, int seconds)
{
        struct timespec until;
        bool ok;

        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += seconds;
        pthread_mutex_lock(&f->lock);
        while (!*flag && pthread_cond_timedwait(&f->cond, &f->lock, &until) == 0)
                ;
        ok = *flag;
        pthread_mutex_unlock(&f->lock);
        return ok;
}

Test(docker, events_die)
{
        struct docker_container_spec spec = {.cmd = keep_running};
        struct follow f = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
        struct sbx_error err = {0};
        pthread_t t;
        char id[65];
        int r;

        make_container(&spec, true, id);
        f.want_id = id;
        cr_assert_eq(pthread_create(&t, NULL, follow_main, &f), 0);
        /* since= is not used on the first connect: kill only once the stream is connected */
        cr_assert(testenv_wait_until(follow_delivers, &f, 30000), "the events stream never connected");
        r = docker_container_kill(D, id, "SIGKILL", &err);
        cr_assert_eq(r, 0, "kill: %s", err.msg);
        cr_expect(wait_for(&f, &f.seen_die, 10), "no die event for %s", id);
        cr_expect_eq(f.exit_code, 137);
        cr_expect(f.label_ok);
        /* kill on a dead container: the engine says 409 */
        r = docker_container_kill(D, id, NULL, &err);
        cr_expect_eq(r, -EBUSY, "%d %s", r, err.msg);

        __atomic_store_n(&f.stop, true, __ATOMIC_RELAXED);
        cr_expect(wait_for(&f, &f.done, 10), "follow did not stop");
        pthread_join(t, NULL);
        cr_expect_eq(f.result, 0, "follow: %s", f.err.msg);
}

static int stop_at_first(const struct docker_event *ev, void *userdata)
{
        int *n = userdata;
        (*n)++;
        return 1;
}

struct starter {
        const char *id;
        bool followed; /* atomic: the follow has returned */
};

static bool follow_returned(void *ud)
{
        return __atomic_load_n(&((struct starter *)ud)->followed, __ATOMIC_ACQUIRE);
}

/* A start the follow sees: one made before its stream connects is missed
 * (since= is not used on the first connect), so stop and start again until
 * the follow has returned. */
static void *start_until_seen(void *arg)
{
        struct starter *st = arg;

        for (int i = 0; i < 30 && !follow_returned(st); i++) {
                if (i)
                        (void)docker_container_stop(D, st->id, 0, NULL); /* no "start" event */
                (void)docker_container_start(D, st->id, NULL);
                (void)testenv_wait_until(follow_returned, st, 1000);
        }
        return NULL;
}

Test(docker, events_cb_stops_follow)
{
        const char *filters[] = {testenv_run_filter(), NULL};
        const char *actions[] = {"start", NULL};
        struct docker_container_spec spec = {.cmd = keep_running};
        struct sbx_error err = {0};
        pthread_t t;
        char id[65];
        int n = 0, r;

        /* the callback's non-zero return ends the follow, with no stop flag */
        make_container(&spec, false, id);
        struct starter st = {id, false};
        cr_assert_eq(pthread_create(&t, NULL, start_until_seen, &st), 0);
        r = docker_events_follow(D, filters, actions, stop_at_first, &n, NULL, 0, &err);
        __atomic_store_n(&st.followed, true, __ATOMIC_RELEASE);
        pthread_join(t, NULL);
        cr_expect_eq(r, 0, "%s", err.msg);
        cr_expect_eq(n, 1);
}

/* ---- archive ---- */

/* A one-file ustar archive. */
static size_t tar_one(uint8_t *out, size_t cap, const char *name, const char *data, size_t len)
{
        size_t total = 512 + (len + 511) / 512 * 512 + 1024;
        unsigned sum = 0;

        cr_assert_leq(total, cap);
        memset(out, 0, total);
        snprintf((char *)out, 100, "%s", name);
        memcpy(out + 100, "0000644", 8);
        memcpy(out + 108, "0001750", 8); /* uid 1000 */
        memcpy(out + 116, "0001750", 8);
        snprintf((char *)out + 124, 12, "%011o", (unsigned)len);
        snprintf((char *)out + 136, 12, "%011o", 1700000000u);
        memset(out + 148, ' ', 8);
        out[156] = '0';
        memcpy(out + 257, "ustar", 6);
        memcpy(out + 263, "00", 2);
        for (int i = 0; i < 512; i++)
                sum += out[i];
        snprintf((char *)out + 148, 8, "%06o", sum);
        out[155] = ' ';
        memcpy(out + 512, data, len);
        return total;
}

/* Find a regular file whose name ends with `name` in a tar. */
static const uint8_t *tar_find(const uint8_t *tar, size_t len, const char *name, size_t *ret_len)
{
        size_t off = 0;

        while (off + 512 <= len && tar[off]) {
                char fname[101] = {0}, size_s[13] = {0};
                size_t sz, nl = strlen(name);
                memcpy(fname, tar + off, 100);
                memcpy(size_s, tar + off + 124, 12);
                sz = strtoul(size_s, NULL, 8);
                if ((tar[off + 156] == '0' || tar[off + 156] == 0) && strlen(fname) >= nl &&
                    strcmp(fname + strlen(fname) - nl, name) == 0 && off + 512 + sz <= len) {
                        *ret_len = sz;
                        return tar + off + 512;
                }
                off += 512 + (sz + 511) / 512 * 512;
        }
        return NULL;
}

Test(docker, archive_roundtrip)
{
        struct docker_container_spec spec = {.cmd = keep_running};
        static const char content[] = "archive payload\nline two\n";
        static uint8_t tar[8192];
        struct sbx_error err = {0};
        struct docker_exec_result res;
        const uint8_t *found;
        size_t tlen, got_len, flen;
        void *got = NULL;
        char id[65];
        int r;

        make_container(&spec, true, id);
        tlen = tar_one(tar, sizeof(tar), "hello.txt", content, sizeof(content) - 1);
        r = docker_archive_put(D, id, "/workspace", tar, tlen, &err);
        cr_assert_eq(r, 0, "put: %d %s", r, err.msg);
        {
                const char *cmd[] = {"cat", "/workspace/hello.txt", NULL};
                exec_ok(id, cmd, NULL, 0, 0, &res);
                cr_expect_str_eq(res.out, content);
                docker_exec_result_done(&res);
        }
        r = docker_archive_get(D, id, "/workspace/hello.txt", 1 << 20, &got, &got_len, &err);
        cr_assert_eq(r, 0, "get: %d %s", r, err.msg);
        found = tar_find(got, got_len, "hello.txt", &flen);
        cr_assert_not_null(found, "hello.txt not in the %zu-byte tar", got_len);
        cr_expect_eq(flen, sizeof(content) - 1);
        cr_expect(memcmp(found, content, flen) == 0);
        free(got);

        r = docker_archive_get(D, id, "/workspace/hello.txt", 100, &got, &got_len, &err);
        cr_expect_eq(r, -EFBIG, "%d %s", r, err.msg);
        r = docker_archive_get(D, id, "/workspace/nope.txt", 0, &got, &got_len, &err);
        cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
        r = docker_archive_put(D, id, "/no/such/dir", tar, tlen, &err);
        cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
}

/* ---- error paths ---- */

/* No call may hang on a missing socket: the test's deadline (.timeout) says so. */
Test(docker, missing_socket, .timeout = 60)
{
        struct docker *d = docker_new("/nonexistent/sandboxd-test.sock", 2000);
        struct sbx_error err = {0};
        int r;

        cr_assert_not_null(d);
        r = docker_ping(d, &err);
        cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
        cr_expect(strstr(err.msg, "/nonexistent/sandboxd-test.sock"), "msg: %s", err.msg);
        cr_expect(strstr(err.msg, "cannot reach Docker"), "msg: %s", err.msg);
        cr_expect_eq(err.http_status, 0);
        r = docker_negotiate(d, &err);
        cr_expect_eq(r, -ENOENT);
        {
                const char *cmd[] = {"true", NULL};
                struct docker_exec_spec es = {.cmd = cmd};
                struct docker_stream *s;
                r = docker_exec_attach(d, "abc", &s, &err);
                cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
                cr_expect(strstr(err.msg, "/nonexistent/sandboxd-test.sock"), "msg: %s", err.msg);
                r = docker_exec_create(d, "abc", &es, (char[65]){0}, &err);
                cr_expect_eq(r, -ENOENT);
        }
        {
                volatile bool stop = false;
                r = docker_events_follow(d, NULL, NULL, stop_at_first, &(int){0}, &stop, 500, &err);
                cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
        }
        docker_free(d);
}

/* A socket that accepts connections but never answers: every call ends at
 * the client timeout with -ETIMEDOUT instead of hanging. */
Test(docker, silent_socket_times_out)
{
        char *dir = testenv_tmpdir(), path[256];
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct sbx_error err = {0};
        struct docker *d;
        int fd, r;

        cr_assert_not_null(dir);
        snprintf(path, sizeof(path), "%s/silent.sock", dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(fd, 0);
        cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(listen(fd, 16), 0);

        d = docker_new(path, 500);
        r = docker_ping(d, &err);
        cr_expect_eq(r, -ETIMEDOUT, "%d %s", r, err.msg);
        cr_expect(strstr(err.msg, path), "msg: %s", err.msg);
        {
                struct docker_stream *s;
                r = docker_exec_attach(d, "abc", &s, &err);
                cr_expect_eq(r, -ETIMEDOUT, "%d %s", r, err.msg);
        }
        docker_free(d);
        close(fd);

        /* nobody listening any more: refused */
        d = docker_new(path, 500);
        r = docker_ping(d, &err);
        cr_expect_eq(r, -ECONNREFUSED, "%d %s", r, err.msg);
        docker_free(d);
        free(dir);
}

Test(docker, not_found_and_conflicts)
{
        struct docker_container_spec spec = {.image = "sandboxd/does-not-exist:nope", .cmd = keep_running};
        struct docker_container_info info;
        struct docker_image_info img;
        struct sbx_error err = {0};
        char id[65], name[64], name2[64];
        int r;

        r = docker_container_create(D, &spec, id, &err);
        cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
        cr_expect(strstr(err.msg, "sandboxd/does-not-exist:nope"), "msg: %s", err.msg);
        cr_expect_eq(err.http_status, 404);

        r = docker_container_inspect(D, "sandboxd-no-such-container", &info, &err);
        cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
        r = docker_container_start(D, "sandboxd-no-such-container", &err);
        cr_expect_eq(r, -ENOENT);
        r = docker_image_inspect(D, "sandboxd/does-not-exist:nope", &img, &err);
        cr_expect_eq(r, -ENOENT);

        /* names: create with a taken name → -EEXIST, rename onto it → -EEXIST */
        snprintf(name, sizeof(name), "sbx-test-%s-a", testenv_run_id());
        snprintf(name2, sizeof(name2), "sbx-test-%s-b", testenv_run_id());
        spec = (struct docker_container_spec){.name = name, .cmd = keep_running};
        make_container(&spec, false, id);
        spec = (struct docker_container_spec){.name = name,
                                              .cmd = keep_running,
                                              .labels = (struct docker_label[]){{TESTENV_RUN_LABEL, testenv_run_id()}},
                                              .n_labels = 1,
                                              .image = TESTENV_TEST_IMAGE};
        {
                char id2[65];
                r = docker_container_create(D, &spec, id2, &err);
                cr_expect_eq(r, -EEXIST, "%d %s", r, err.msg);
                cr_expect_eq(err.http_status, 409);
        }
        spec = (struct docker_container_spec){.name = name2, .cmd = keep_running};
        {
                char id2[65];
                make_container(&spec, false, id2);
                r = docker_container_rename(D, id2, name, &err);
                cr_expect_eq(r, -EEXIST, "%d %s", r, err.msg);
        }
        snprintf(name2, sizeof(name2), "sbx-test-%s-c", testenv_run_id());
        r = docker_container_rename(D, id, name2, &err);
        cr_expect_eq(r, 0, "%s", err.msg);
        r = docker_container_inspect(D, name2, &info, &err);
        cr_expect_eq(r, 0, "%s", err.msg);
        cr_expect_str_eq(info.id, id);
        cr_expect_str_eq(info.name, name2);
        /* starting twice is fine */
        cr_expect_eq(docker_container_start(D, id, &err), 0, "%s", err.msg);
        cr_expect_eq(docker_container_start(D, id, &err), 0, "%s", err.msg);
}

/* ---- logs, stats, list, image, version ---- */

struct logs_poll {
        const char *id;
        char *text; /* the last logs read */
};

static bool logs_show_errline(void *ud)
{
        struct logs_poll *lp = ud;
        struct sbx_error err = {0};
        int r;

        free(lp->text);
        lp->text = NULL;
        r = docker_container_logs(D, lp->id, -1, &lp->text, &err);
        cr_assert_eq(r, 0, "%s", err.msg);
        return strstr(lp->text, "errline") != NULL;
}

Test(docker, logs_and_stats)
{
        const char *cmd[] = {"sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done; echo errline >&2; exec sleep 1000",
                             NULL};
        struct docker_container_spec spec = {.cmd = cmd};
        struct docker_stats st;
        struct sbx_error err = {0};
        char *text = NULL, id[65];
        int r;

        make_container(&spec, true, id);
        struct logs_poll lp = {id, NULL};
        (void)testenv_wait_until(logs_show_errline, &lp, 5000);
        text = TAKE_PTR(lp.text);
        /* stdout and stderr reach the log through separate copiers, so
         * errline may land between the stdout lines: check stdout's order
         * only among its own lines */
        {
                const char *at = text;
                for (int i = 1; i <= 5; i++) {
                        char want[16];
                        snprintf(want, sizeof(want), "line%d\n", i);
                        at = at ? strstr(at, want) : NULL;
                        cr_expect(at, "logs lack %s in order: %s", want, text);
                }
        }
        cr_expect(strstr(text, "errline\n"), "logs: %s", text);
        free(text);
        r = docker_container_logs(D, id, 2, &text, &err);
        cr_assert_eq(r, 0, "%s", err.msg);
        /* stdout and stderr reach the log file through separate copiers, so
         * errline may sit anywhere in it: only the count and the end are sure */
        {
                size_t lines = 0;
                for (const char *c = text; *c; c++)
                        lines += *c == '\n';
                cr_expect_eq(lines, 2, "tail: %s", text);
        }
        cr_expect(strstr(text, "line5\n"), "tail: %s", text);
        cr_expect_null(strstr(text, "line3"), "tail: %s", text);
        cr_expect_null(strstr(text, "\x01"), "frame headers leaked: %s", text);
        free(text);

        r = docker_container_stats(D, id, &st, &err);
        cr_assert_eq(r, 0, "%s", err.msg);
        cr_expect_gt(st.memory_usage, 0);
        cr_expect_gt(st.memory_limit, 0);
        cr_expect_geq(st.pids, 1);
}

Test(docker, list_image_version)
{
        struct docker_container_spec spec = {.cmd = keep_running};
        const char *filters[] = {testenv_run_filter(), "sandboxd.test.case=docker", NULL};
        const char *none[] = {"sandboxd.test.case=none-such", NULL};
        struct docker_container_summary *list = NULL;
        struct docker_image_info img;
        struct docker_version v;
        struct sbx_error err = {0};
        char id[65];
        size_t n = 0;
        bool found = false;
        int r;

        cr_expect_str_eq(docker_api_version(D), "1.41" /* the engine's, below our max */);
        r = docker_version(D, &v, &err);
        cr_assert_eq(r, 0, "%s", err.msg);
        cr_expect_neq(v.version[0], '\0');
        cr_expect_str_eq(v.os, "linux");
        cr_expect_eq(docker_ping(D, &err), 0);

        make_container(&spec, false, id);
        r = docker_container_list(D, filters, true, &list, &n, &err);
        cr_assert_eq(r, 0, "%s", err.msg);
        for (size_t i = 0; i < n; i++)
                if (strcmp(list[i].id, id) == 0) {
                        found = true;
                        cr_expect_str_eq(list[i].state, "created");
                        cr_expect_gt(list[i].created, 0);
                        cr_expect_str_eq(docker_kv_get(list[i].labels, list[i].n_labels, TESTENV_RUN_LABEL),
                                         testenv_run_id());
                }
        cr_expect(found);
        free(list);
        /* not running: excluded without all */
        r = docker_container_list(D, filters, false, &list, &n, &err);
        cr_assert_eq(r, 0);
        for (size_t i = 0; i < n; i++)
                cr_expect_str_neq(list[i].id, id);
        free(list);
        r = docker_container_list(D, none, true, &list, &n, &err);
        cr_assert_eq(r, 0);
        cr_expect_eq(n, 0);
        free(list);

        r = docker_image_inspect(D, TESTENV_TEST_IMAGE, &img, &err);
        cr_assert_eq(r, 0, "%s", err.msg);
        cr_expect(strncmp(img.id, "sha256:", 7) == 0, "id %s", img.id);
        cr_expect_neq(img.recipe[0], '\0', "the test image carries sandboxd.recipe");
}

/* Two clients in one process, used from several threads at once: each
 * (thread, client) pair gets its own handle. */
struct pinger {
        struct docker *a, *b;
        int failures;
};

static void *ping_main(void *arg)
{
        struct pinger *p = arg;
        for (int i = 0; i < 20; i++) {
                if (docker_ping(p->a, NULL) < 0)
                        p->failures++;
                if (docker_ping(p->b, NULL) < 0)
                        p->failures++;
        }
        return NULL;
}

Test(docker, two_clients_many_threads)
{
        struct docker *b = docker_new(testenv_docker_socket(), 10000);
        struct pinger p[4];
        pthread_t t[4];

        cr_assert_not_null(b);
        cr_assert_eq(docker_negotiate(b, NULL), 0);
        for (int i = 0; i < 4; i++) {
                p[i] = (struct pinger){.a = D, .b = b};
                cr_assert_eq(pthread_create(&t[i], NULL, ping_main, &p[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
                pthread_join(t[i], NULL);
                cr_expect_eq(p[i].failures, 0);
        }
        cr_expect_eq(docker_ping(b, NULL), 0);
        docker_free(b);
}

/* ---- a fake engine, for faults the real one does not produce on demand:
 * a dropped events stream, replies split at awkward places ---- */

struct fake_conn {
        const void *parts[8]; /* written one by one, 50 ms apart */
        size_t lens[8];
        bool hold; /* keep the connection open until the fake quits */
        char request[4096];
};

struct fake {
        char path[256];
        int lfd;
        struct fake_conn conns[4];
        size_t n_conns;
        volatile bool quit;
        pthread_t thread;
};

static bool fake_quit(struct fake *f)
{
        return __atomic_load_n(&f->quit, __ATOMIC_RELAXED);
}

static void *fake_main(void *arg)
{
        struct fake *f = arg;

        for (size_t i = 0; i < f->n_conns && !fake_quit(f); i++) {
                struct fake_conn *c = &f->conns[i];
                struct pollfd p = {.fd = f->lfd, .events = POLLIN};
                size_t got = 0;
                int fd;

                while (!fake_quit(f) && poll(&p, 1, 50) == 0)
                        ;
                if (fake_quit(f))
                        break;
                fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        break;
                /* the request: headers and, if any, a small body */
                while (got < sizeof(c->request) - 1) {
                        ssize_t n = recv(fd, c->request + got, sizeof(c->request) - 1 - got, 0);
                        const char *end;
                        if (n <= 0)
                                break;
                        got += (size_t)n;
                        c->request[got] = '\0';
                        end = strstr(c->request, "\r\n\r\n");
                        if (end) {
                                const char *cl = strcasestr(c->request, "Content-Length:");
                                size_t body = cl ? strtoul(cl + 15, NULL, 10) : 0;
                                if (got >= (size_t)(end + 4 - c->request) + body)
                                        break;
                        }
                }
                for (size_t k = 0; k < ELEMENTSOF(c->parts) && c->parts[k]; k++) {
                        if (k) /* not a wait: the parts must arrive as separate reads */
                                usleep(50 * 1000);
                        if (send(fd, c->parts[k], c->lens[k], MSG_NOSIGNAL) < 0)
                                break;
                }
                while (c->hold && !fake_quit(f)) {
                        char b[256];
                        struct pollfd q = {.fd = fd, .events = POLLIN};
                        if (poll(&q, 1, 50) > 0 && recv(fd, b, sizeof(b), MSG_DONTWAIT) == 0)
                                break; /* the client hung up */
                }
                close(fd);
        }
        return NULL;
}

static void fake_start(struct fake *f)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        char *dir = testenv_tmpdir();

        cr_assert_not_null(dir);
        snprintf(f->path, sizeof(f->path), "%s/fake.sock", dir);
        free(dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
        f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(f->lfd, 0);
        cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(listen(f->lfd, 8), 0);
        cr_assert_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
        __atomic_store_n(&f->quit, true, __ATOMIC_RELAXED);
        pthread_join(f->thread, NULL);
        close(f->lfd);
}

#define PART(c, k, s) ((c)->parts[k] = (s), (c)->lens[k] = strlen(s))

static void fake_setup(void)
{
        testenv_run_id(); /* registers the cleanup (tmpdirs) and docker_global_init */
}

TestSuite(docker_fake, .init = fake_setup, .timeout = 60);

#define EV_A                                                                                                           \
        "{\"status\":\"start\",\"id\":\"aaa\",\"Type\":\"container\",\"Action\":\"start\",\"Actor\":{\"ID\":\"aaa\","  \
        "\"Attributes\":{\"sandboxd.test.run\":\"x\"}},\"scope\":\"local\",\"time\":1795262914,"                       \
        "\"timeNano\":1795262914000000123}"
#define EV_B                                                                                                           \
        "{\"Type\":\"container\",\"Action\":\"die\",\"Actor\":{\"ID\":\"bbb\",\"Attributes\":{\"exitCode\":\"1\"}},"   \
        "\"time\":1795262915,\"timeNano\":1795262915000000000}"

struct collected {
        char actions[8][32];
        char ids[8][65];
        int n;
        volatile bool *stop;
};

static int collect(const struct docker_event *ev, void *userdata)
{
        struct collected *c = userdata;

        if (c->n < 8) {
                snprintf(c->actions[c->n], sizeof(c->actions[0]), "%s", ev->action);
                snprintf(c->ids[c->n], sizeof(c->ids[0]), "%s", ev->id);
                c->n++;
        }
        if (strcmp(ev->id, "bbb") == 0)
                __atomic_store_n(c->stop, true, __ATOMIC_RELAXED); /* seen by the follow within 200 ms */
        return 0;
}

static char chunk_buf[8][512];

/* HTTP/1.1 chunk framing of s into chunk_buf[slot]. */
static const char *chunk(int slot, const char *s)
{
        snprintf(chunk_buf[slot], sizeof(chunk_buf[slot]), "%zx\r\n%s\r\n", strlen(s), s);
        return chunk_buf[slot];
}

Test(docker_fake, events_reconnect_since_and_dedup)
{
        static const char hdr[] =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nServer: Docker\r\n"
                "Transfer-Encoding: chunked\r\n\r\n";
        static const char ev_a[] = EV_A "\n";
        char first_half[256], second_half[256];
        struct fake f = {0};
        volatile bool stop = false;
        struct collected col = {.stop = &stop};
        struct sbx_error err = {0};
        const char *labels[] = {"sandboxd.test.run=x", NULL};
        struct docker *d;
        int r;

        /* connection 1: event A split in the middle of the object, then a clean end */
        snprintf(first_half, sizeof(first_half), "%.40s", ev_a);
        snprintf(second_half, sizeof(second_half), "%s", ev_a + 40);
        PART(&f.conns[0], 0, hdr);
        PART(&f.conns[0], 1, chunk(0, first_half));
        PART(&f.conns[0], 2, chunk(1, second_half));
        PART(&f.conns[0], 3, "0\r\n\r\n");
        /* connection 2: the replay of A (must not be delivered twice), then B; stays open */
        PART(&f.conns[1], 0, hdr);
        PART(&f.conns[1], 1, chunk(2, EV_A "\n" EV_B "\n"));
        f.conns[1].hold = true;
        f.n_conns = 2;
        fake_start(&f);

        d = docker_new(f.path, 2000);
        r = docker_events_follow(d, labels, NULL, collect, &col, &stop, 0, &err);
        fake_stop(&f);
        docker_free(d);

        cr_expect_eq(r, 0, "%d %s", r, err.msg);
        cr_assert_eq(col.n, 2);
        cr_expect_str_eq(col.ids[0], "aaa");
        cr_expect_str_eq(col.actions[0], "start");
        cr_expect_str_eq(col.ids[1], "bbb");
        cr_expect_str_eq(col.actions[1], "die");
        cr_expect(strstr(f.conns[0].request, "GET /events?filters="), "%s", f.conns[0].request);
        cr_expect_null(strstr(f.conns[0].request, "since="), "%s", f.conns[0].request);
        cr_expect(strstr(f.conns[0].request, "sandboxd.test.run%3Dx"), "%s", f.conns[0].request);
        cr_expect(strstr(f.conns[1].request, "since=1795262914.000000123"), "%s", f.conns[1].request);
}

Test(docker_fake, events_unreachable_limit)
{
        struct collected col = {0};
        struct sbx_error err = {0};
        struct docker *d = docker_new("/nonexistent/fake.sock", 1000);
        int r = docker_events_follow(d, NULL, NULL, collect, &col, NULL, 800, &err);

        cr_expect_eq(r, -ENOENT, "%d %s", r, err.msg);
        cr_expect(strstr(err.msg, "/nonexistent/fake.sock"), "%s", err.msg);
        docker_free(d);
}

static size_t mkframe(uint8_t *out, uint8_t type, const char *payload)
{
        size_t n = strlen(payload);
        out[0] = type;
        out[1] = out[2] = out[3] = 0;
        out[4] = (uint8_t)(n >> 24);
        out[5] = (uint8_t)(n >> 16);
        out[6] = (uint8_t)(n >> 8);
        out[7] = (uint8_t)n;
        memcpy(out + 8, payload, n);
        return n + 8;
}

Test(docker_fake, attach_headers_and_frames_in_one_read)
{
        static const char hdr[] =
                "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
        uint8_t one[512], two[512];
        size_t n1 = 0, n2 = 0;
        struct fake f = {0};
        struct sbx_error err = {0};
        struct docker_stream *s = NULL;
        enum docker_stream_kind kind;
        char out[64] = "", errs[64] = "", buf[64];
        struct docker *d;
        ssize_t n;
        int r;

        /* headers + a whole frame + 5 bytes of the next header in one write */
        memcpy(one, hdr, sizeof(hdr) - 1);
        n1 = sizeof(hdr) - 1;
        n1 += mkframe(one + n1, 1, "hello ");
        n2 = mkframe(two, 2, "err");
        memcpy(one + n1, two, 5);
        n1 += 5;
        memmove(two, two + 5, n2 - 5);
        n2 -= 5;
        n2 += mkframe(two + n2, 1, "world");
        f.conns[0].parts[0] = one;
        f.conns[0].lens[0] = n1;
        f.conns[0].parts[1] = two;
        f.conns[0].lens[1] = n2;
        f.n_conns = 1;
        fake_start(&f);

        d = docker_new(f.path, 2000);
        r = docker_exec_attach(d, "abc123", &s, &err);
        cr_assert_eq(r, 0, "%d %s", r, err.msg);
        while ((n = docker_stream_read(s, &kind, buf, sizeof(buf), 5000)) > 0)
                strncat(kind == DOCKER_STREAM_STDERR ? errs : out, buf, (size_t)n);
        cr_expect_eq(n, 0, "%zd", n);
        cr_expect_str_eq(out, "hello world");
        cr_expect_str_eq(errs, "err");
        docker_stream_free(s);
        fake_stop(&f);
        docker_free(d);
        cr_expect(strstr(f.conns[0].request, "POST /exec/abc123/start HTTP/1.1\r\n"), "%s", f.conns[0].request);
        cr_expect(strcasestr(f.conns[0].request, "\r\nUpgrade: tcp\r\n"), "%s", f.conns[0].request);
        cr_expect(strcasestr(f.conns[0].request, "\r\nConnection: Upgrade\r\n"), "%s", f.conns[0].request);
        cr_expect(strstr(f.conns[0].request, "{\"Detach\":false,\"Tty\":false}"), "%s", f.conns[0].request);
}

Test(docker_fake, attach_chunked_error_reply)
{
        struct fake f = {0};
        struct sbx_error err = {0};
        struct docker_stream *s = NULL;
        struct docker *d;
        int r;

        PART(&f.conns[0], 0,
             "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\n"
             "Transfer-Encoding: chunked\r\n\r\n");
        PART(&f.conns[0], 1, chunk(0, "{\"message\":\"Container abc is not running\"}\n"));
        PART(&f.conns[0], 2, "0\r\n\r\n");
        f.conns[0].hold = true; /* keep-alive: the reply's framing, not EOF, must end the read */
        f.n_conns = 1;
        fake_start(&f);
        d = docker_new(f.path, 3000);
        r = docker_exec_attach(d, "abc", &s, &err);
        cr_expect_eq(r, -EBUSY, "%d %s", r, err.msg);
        cr_expect_eq(err.http_status, 409);
        cr_expect_str_eq(err.msg, "Container abc is not running");
        cr_expect_null(s);
        fake_stop(&f);
        docker_free(d);
}
