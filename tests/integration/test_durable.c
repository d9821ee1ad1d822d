/* Integration tests of durable executions and terminals on the runner
 * (real dockerd): executions outlive a SIGKILLed daemon with every byte of
 * their output, and tty executions run on a pseudo-terminal. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/hub.h"
#include "sandboxd/session.h"
#include "sandboxd/sha256.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(durable, .timeout = 300);

#define BLOB_BYTES (10 * 1024 * 1024)

static struct sbx_config cfg;
static struct daemon *d;

/* Long-poll until the execution ends (get_execution with wait). */
static void wait_final(const char *id, struct exec_result *res)
{
        for (int i = 0; i < 12; i++) {
                cr_assert_eq(exec_status(d->exec, "u1", id, -1, -1, 0, 10000, res, NULL), 0, "no execution %s", id);
                if (exec_state_is_final(res->state))
                        return;
                exec_result_done(res);
        }
        cr_assert_fail("execution %s did not end", id);
}

/* Until stdout (from offset 0) holds needle (30 s at most). */
static void wait_stdout(const char *id, const char *needle)
{
        for (int i = 0; i < 60; i++) {
                struct exec_result res, more;
                cr_assert_eq(exec_status(d->exec, "u1", id, 0, -1, 1 << 20, 0, &res, NULL), 0);
                bool found = res.stdout_head_len > 0 &&
                             memmem(res.stdout_head, res.stdout_head_len, needle, strlen(needle)) != NULL;
                if (!found && (exec_state_is_final(res.state) || i == 59))
                        cr_assert_fail("stdout of %s never showed '%s' (state %s): %.*s", id, needle,
                                       exec_state_to_string(res.state), (int)res.stdout_head_len, res.stdout_head);
                uint64_t seen = res.stdout_head_len;
                exec_result_done(&res);
                if (found)
                        return;
                /* long-poll for output past what is there */
                cr_assert_eq(exec_status(d->exec, "u1", id, (int64_t)seen, -1, 1, 500, &more, NULL), 0);
                exec_result_done(&more);
        }
}

static void wait_running(const char *id)
{
        cr_assert(TESTENV_WAIT_UNTIL(fixture_exec_running(d, "u1", id), 10000), "execution %s never ran", id);
}

static void send_line(const char *id, const char *text)
{
        struct sbx_error err = {0};
        cr_assert_eq(exec_send_stdin(d->exec, "u1", id, text, strlen(text), false, &err), 0, "send_stdin: %s", err.msg);
}

static int count_in_stdout(const char *id, const char *needle)
{
        struct exec_result res;
        int n = 0;
        cr_assert_eq(exec_status(d->exec, "u1", id, 0, -1, 1 << 20, 0, &res, NULL), 0);
        for (const char *p = res.stdout_head, *end = p + res.stdout_head_len;
             (p = memmem(p, (size_t)(end - p), needle, strlen(needle))); p++)
                n++;
        exec_result_done(&res);
        return n;
}

/* Press Enter until a second prompt shows python reads its terminal (an
 * Enter typed while its readline sets the terminal up could be dropped). */
static void sync_python(const char *id)
{
        for (int i = 0; i < 20 && count_in_stdout(id, ">>> ") < 2; i++) {
                send_line(id, "\n");
                (void)TESTENV_WAIT_UNTIL(count_in_stdout(id, ">>> ") >= 2, 1000);
        }
        cr_assert_geq(count_in_stdout(id, ">>> "), 2, "python never took a line from its terminal");
}

/* The child: a daemon that starts both executions, says their ids once
 * both run on the runner, and waits to be killed. No assertion here. */
static void child_daemon(int fd)
{
        static const char *const commands[2] = {
                "sleep 3; echo done",
                /* 10 MiB written only once the daemon is gone; its checksum on stderr first */
                "head -c 10485760 /dev/urandom > /tmp/blob && sha256sum /tmp/blob >&2 && sleep 1 && "
                "cat /tmp/blob && rm /tmp/blob",
        };
        char ids[2][37];
        struct daemon *cd;

        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test, whatever fails there */
        cd = fixture_open(&cfg, false);
        for (int i = 0; i < 2; i++) {
                struct exec_request req = {.user = "u1", .session = "s1", .command = commands[i], .actor = "test"};
                if (exec_start(cd->exec, &req, ids[i], NULL) < 0)
                        _exit(1);
        }
        for (int i = 0; i < 2; i++)
                for (int k = 0;; k++) {
                        struct exec_result r;
                        if (k == 200 || exec_status(cd->exec, "u1", ids[i], -1, -1, 0, 100, &r, NULL) < 0)
                                _exit(2);
                        bool on_runner = r.state == EXEC_RUNNING && strcmp(r.via, "runner") == 0;
                        exec_result_done(&r);
                        if (on_runner)
                                break;
                }
        (void)!write(fd, ids, sizeof(ids));
        pause();
        _exit(0);
}

static void spool_sha256(const char *id, char hex[65], size_t *ret_len)
{
        char path[SBX_PATH_MAX + 64], buf[65536];
        struct sha256 c;
        uint8_t dig[32];
        size_t total = 0;
        FILE *f;

        snprintf(path, sizeof(path), "%s/executions/%s.stdout", cfg.data_dir, id);
        f = fopen(path, "rb");
        cr_assert_not_null(f, "no spool %s", path);
        sha256_init(&c);
        for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0; total += n)
                sha256_update(&c, buf, n);
        fclose(f);
        sha256_final(&c, dig);
        for (int i = 0; i < 32; i++)
                snprintf(hex + 2 * i, 3, "%02x", dig[i]);
        *ret_len = total;
}

Test(durable, executions_outlive_a_sigkilled_daemon_with_every_byte)
{
        char ids[2][37], hex[65];
        int pipefd[2];
        size_t len;
        pid_t pid;
        struct exec_result res;

        fixture_config(&cfg);
        cr_assert_eq(pipe(pipefd), 0);
        pid = fork(); /* before this process starts any thread */
        if (pid < 0)
                cr_assert_fail("fork: %m");
        if (pid == 0)
                child_daemon(pipefd[1]);
        close(pipefd[1]);
        cr_assert_eq(read(pipefd[0], ids, sizeof(ids)), (ssize_t)sizeof(ids), "the child daemon did not start both");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        sbx_sleep_ms(4000); /* not a wait: the sleeper ends and the writer fills its buffer while no daemon runs */

        d = fixture_open(&cfg, false); /* the same data_dir: the runner's executions are adopted */

        wait_final(ids[0], &res);
        cr_assert_eq(res.state, EXEC_COMPLETED, "state %s cause %s: %s", exec_state_to_string(res.state),
                     exec_cause_to_string(res.cause), res.error);
        cr_assert_eq(res.exit_code, 0);
        cr_assert_str_eq(res.via, "runner");
        cr_assert_eq(res.stdout_head_len, 5);
        cr_assert(memcmp(res.stdout_head, "done\n", 5) == 0, "stdout: %.*s", (int)res.stdout_head_len, res.stdout_head);
        cr_assert_geq(res.max_rss_kb, 1, "the usage of the adopted tree is known");
        exec_result_done(&res);

        wait_final(ids[1], &res);
        cr_assert_eq(res.state, EXEC_COMPLETED, "state %s cause %s: %s", exec_state_to_string(res.state),
                     exec_cause_to_string(res.cause), res.error);
        cr_assert_eq(res.exit_code, 0);
        cr_assert_eq(res.stdout_bytes, BLOB_BYTES, "stdout_bytes %llu", (unsigned long long)res.stdout_bytes);
        cr_assert_geq(res.stderr_head_len, 64);
        spool_sha256(ids[1], hex, &len);
        cr_assert_eq(len, BLOB_BYTES, "the spool holds %zu bytes", len);
        cr_assert(memcmp(res.stderr_head, hex, 64) == 0, "checksum in the container %.64s, of the spool %s",
                  res.stderr_head, hex);
        exec_result_done(&res);
        /* Read back to the end by offset, truncated says whether a byte is missing: one the spool cap
         * dropped (produced, never spooled) or one past what was read (head and tail alone always are) */
        cr_assert_eq(exec_status(d->exec, "u1", ids[1], BLOB_BYTES - 4096, -1, 4096, 0, &res, NULL), 0);
        cr_assert_eq(res.stdout_offset, BLOB_BYTES - 4096);
        cr_assert_eq(res.stdout_head_len, 4096);
        cr_assert_not(res.truncated, "bytes of the output were dropped");
        exec_result_done(&res);
        daemon_close(d);
}

Test(durable, a_graceful_restart_keeps_an_execution_and_its_deadline)
{
        struct exec_request req = {.user = "u1",
                                   .session = "s1",
                                   .command = "echo before; sleep 2; echo after",
                                   .actor = "test"};
        struct exec_request slow = {
                .user = "u1", .session = "s1", .command = "sleep 100", .timeout_s = 3, .actor = "test"};
        struct exec_result res;
        char id[37], slow_id[37];

        fixture_config(&cfg);
        cfg.exec_kill_grace_ms = 500;
        d = fixture_open(&cfg, false);
        cr_assert_eq(exec_start(d->exec, &req, id, NULL), 0);
        cr_assert_eq(exec_start(d->exec, &slow, slow_id, NULL), 0);
        wait_stdout(id, "before");
        daemon_close(d); /* a stop, not a crash: the executions are left to the runner */
        d = fixture_open(&cfg, false);
        /* both hold their slots again at once, before their runner is back */
        cr_assert_eq(exec_running_count(d->exec, "u1", "s1"), 2);

        wait_final(id, &res);
        cr_assert_eq(res.state, EXEC_COMPLETED, "state %s: %s", exec_state_to_string(res.state), res.error);
        cr_assert_eq(res.stdout_head_len, 13);
        cr_assert(memcmp(res.stdout_head, "before\nafter\n", 13) == 0, "stdout: %.*s", (int)res.stdout_head_len,
                  res.stdout_head);
        exec_result_done(&res);
        wait_final(slow_id, &res);
        cr_assert_eq(res.state, EXEC_TIMEOUT, "the persisted deadline was not enforced: %s",
                     exec_state_to_string(res.state));
        exec_result_done(&res);
        daemon_close(d);
}

static void open_python_daemon(void)
{
        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        cfg.memory_bytes = 256 << 20;
        d = fixture_open(&cfg, false);
}

Test(durable, a_tty_exec_of_an_interactive_python_is_driven_by_send_stdin)
{
        struct exec_request req = {.user = "u1", .session = "s1", .command = "python3 -i", .tty = true, .actor = "test"};
        struct exec_result res;
        char id[37];

        open_python_daemon();
        cr_assert_eq(exec_start(d->exec, &req, id, NULL), 0);
        wait_stdout(id, ">>> "); /* python prompts only on a terminal */
        sync_python(id);
        send_line(id, "import os, sys; print('tty', os.isatty(0), os.isatty(1), sys.stdout.isatty())\n");
        wait_stdout(id, "tty True True True");
        send_line(id, "print(6 * 7)\n");
        wait_stdout(id, "42");
        send_line(id, "exit(5)\n");
        wait_final(id, &res);
        cr_assert_eq(res.state, EXEC_COMPLETED);
        cr_assert_eq(res.exit_code, 5);
        cr_assert_str_eq(res.via, "runner");
        cr_assert_eq(res.stderr_bytes, 0, "a terminal has one output stream");
        exec_result_done(&res);
        daemon_close(d);
}

Test(durable, a_tty_resize_is_seen_by_stty)
{
        struct exec_request req = {.user = "u1",
                                   .session = "s1",
                                   .command = "echo T=$TERM; stty size; read x; stty size",
                                   .tty = true,
                                   .rows = 30,
                                   .cols = 100,
                                   .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        char id[37];

        fixture_config(&cfg);
        d = fixture_open(&cfg, false);
        cr_assert_eq(exec_start(d->exec, &req, id, NULL), 0);
        wait_stdout(id, "30 100");
        cr_assert_eq(exec_resize(d->exec, "u1", id, 40, 120, &err), 0, "resize: %s", err.msg);
        cr_assert_eq(exec_resize(d->exec, "u1", id, 0, 120, &err), -EINVAL, "a zero-row terminal was accepted");
        send_line(id, "\n");
        wait_final(id, &res);
        cr_assert_eq(res.exit_code, 0);
        cr_assert(memmem(res.stdout_head, res.stdout_head_len, "40 120", 6) != NULL, "stdout: %.*s",
                  (int)res.stdout_head_len, res.stdout_head);
        cr_assert(memmem(res.stdout_head, res.stdout_head_len, "T=xterm-256color\r\n", 18) != NULL,
                  "a terminal's TERM: %.*s", (int)res.stdout_head_len, res.stdout_head);
        exec_result_done(&res);

        /* a plain execution has no terminal to resize, and sees none */
        struct exec_request plain = {.user = "u1",
                                     .session = "s1",
                                     .command = "read x; test -t 0 || test -t 1 || echo no-tty",
                                     .interactive = true,
                                     .actor = "test"};
        cr_assert_eq(exec_start(d->exec, &plain, id, NULL), 0);
        wait_running(id);
        cr_assert_eq(exec_resize(d->exec, "u1", id, 40, 120, &err), -EINVAL);
        cr_assert_eq(exec_send_stdin(d->exec, "u1", id, NULL, 0, true, NULL), 0);
        wait_final(id, &res);
        cr_assert(res.stdout_head_len == 7 && memcmp(res.stdout_head, "no-tty\n", 7) == 0);
        exec_result_done(&res);
        daemon_close(d);
}


Test(durable, without_a_runner_a_tty_is_refused_clearly)
{
        struct exec_request req = {.user = "u1", .session = "s1", .command = "tty", .tty = true, .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};

        fixture_config(&cfg);
        snprintf(cfg.runner_binary, sizeof(cfg.runner_binary), "/nonexistent/sandboxd-runner");
        d = fixture_open(&cfg, false);
        cr_assert_eq(exec_run(d->exec, &req, &res, &err), -ENOTSUP, "a tty ran without the runner");
        cr_assert(strstr(err.msg, "needs the session's runner") != NULL, "error: %s", err.msg);
        req.rows = 1001; /* and a size out of range is refused before anything runs */
        cr_assert_eq(exec_run(d->exec, &req, &res, &err), -EINVAL);
        daemon_close(d);
}

/* The same through the API: exec with tty, resize_terminal, send_stdin. */
__attribute__((format(printf, 3, 4))) static cJSON *api(const char *token, const char *method, const char *fmt, ...)
{
        va_list ap;
        char params[512];
        va_start(ap, fmt);
        vsnprintf(params, sizeof(params), fmt, ap);
        va_end(ap);
        return apic_call(cfg.api_socket, token, method, apic_json(params));
}

static char *api_stdout_until(const char *token, const char *id, const char *needle)
{
        for (int i = 0; i < 30; i++) {
                cJSON *r = api(token, "get_execution", "{\"session\":\"t1\",\"execution_id\":\"%s\",\"wait\":1}", id);
                const char *out = apic_str(apic_result(r), "stdout");
                if (out && strstr(out, needle)) {
                        char *copy = strdup(out);
                        cJSON_Delete(r);
                        return copy;
                }
                cJSON_Delete(r);
        }
        cr_assert_fail("stdout of %s never showed '%s'", id, needle);
        return NULL;
}

Test(durable, the_api_runs_a_tty_and_resizes_it)
{
        char tok[TOKEN_LEN + 1], other[TOKEN_LEN + 1], id[64];
        struct sbx_error err = {0};
        cJSON *r;

        fixture_config(&cfg);
        d = fixture_open_sockets(&cfg);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, other, NULL, &err), 0, "%s", err.msg);
        r = api(tok, "exec",
                "{\"session\":\"t1\",\"command\":\"%s\",\"tty\":true,\"rows\":5,\"cols\":7,"
                "\"background\":true}",
                "stty size; read x; stty size");
        cr_assert_str_eq(apic_code(r), "", "exec: %s", cJSON_PrintUnformatted(r));
        snprintf(id, sizeof(id), "%s", apic_str(apic_result(r), "execution_id"));
        cJSON_Delete(r);
        free(api_stdout_until(tok, id, "5 7"));

        r = api(tok, "resize_terminal", "{\"session\":\"t1\",\"execution_id\":\"%s\",\"rows\":0,\"cols\":11}", id);
        cr_assert_str_neq(apic_code(r), "", "a zero-row terminal was accepted");
        cJSON_Delete(r);
        r = api(other, "resize_terminal", "{\"session\":\"t1\",\"execution_id\":\"%s\",\"rows\":9,\"cols\":11}", id);
        cr_assert_str_eq(apic_code(r), "not_found", "another user resized it");
        cJSON_Delete(r);
        r = api(tok, "resize_terminal", "{\"session\":\"t1\",\"execution_id\":\"%s\",\"rows\":9,\"cols\":11}", id);
        cr_assert_str_eq(apic_code(r), "", "resize_terminal: %s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(apic_result(r), "rows"), 9);
        cJSON_Delete(r);
        r = api(tok, "send_stdin", "{\"session\":\"t1\",\"execution_id\":\"%s\",\"data\":\"\\n\"}", id);
        cr_assert_str_eq(apic_code(r), "", "send_stdin: %s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        free(api_stdout_until(tok, id, "9 11"));
        daemon_close(d);
}
