/* fixture.c — see fixture.h. */
#include "fixture.h"
#include "nodeenv.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "sandboxd/container.h"
#include "sandboxd/exec.h"
#include "sandboxd/monitor.h"
#include "sandboxd/session.h"
#include "testenv.h"

void fixture_config(struct sbx_config *cfg)
{
        _cleanup_free_ char *dir = testenv_tmpdir();
        config_defaults(cfg);
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/data", dir);
        snprintf(cfg->docker_socket, sizeof(cfg->docker_socket), "%s", testenv_docker_socket());
        snprintf(cfg->instance, sizeof(cfg->instance), "%s", testenv_run_id());
        snprintf(cfg->image, sizeof(cfg->image), "%s", TESTENV_TEST_IMAGE);
        cfg->memory_bytes = 128 << 20;
        cfg->pids_limit = 128;
        cfg->port_range_lo = 26000; /* below the ephemeral range: no client socket takes one */
        cfg->port_range_hi = 26999;
        cfg->ports_per_session = 3;
        cfg->pool_size = 0; /* the warm pool is off: tests count containers and expect lazy creation */
        cfg->monitor_interval_ms = 500;
        cfg->idle_timeout_s = 3600;
        snprintf(cfg->log_level, sizeof(cfg->log_level), "warn");
}

const char *const *fixture_labels(void)
{
        static char label[128];
        static const char *labels[2];
        snprintf(label, sizeof(label), "%s=%s", TESTENV_RUN_LABEL, testenv_run_id());
        labels[0] = label;
        labels[1] = NULL;
        return labels;
}

struct daemon *fixture_open(const struct sbx_config *cfg, bool monitor)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = !monitor};
        struct daemon *d = NULL;
        struct sbx_error err = {0};

        struct sbx_config c = *cfg; /* the daemon keeps its own copy */

        (void)testenv_docker(); /* docker_global_init and the atexit cleanup */
        nodeenv_fixture(&c);    /* SANDBOXD_TEST_NODE: over a separate node agent */
        cr_assert_eq(fronts_open(&c, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        return d;
}

struct daemon *fixture_open_sockets(struct sbx_config *cfg)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct daemon *d = NULL;
        struct sbx_error err = {0};
        char dir[SBX_PATH_MAX], *slash;

        snprintf(dir, sizeof(dir), "%s", cfg->data_dir);
        slash = strrchr(dir, '/');
        cr_assert_not_null(slash);
        *slash = '\0';
        snprintf(cfg->api_socket, sizeof(cfg->api_socket), "%s/run/api.sock", dir);
        snprintf(cfg->admin_socket, sizeof(cfg->admin_socket), "%s/run/admin.sock", dir);
        (void)testenv_docker();
        nodeenv_fixture(cfg); /* SANDBOXD_TEST_NODE: over a separate node agent */
        cr_assert_eq(fronts_open(cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        return d;
}

int fixture_count_containers(const char *user, const char *session)
{
        char f1[128], f2[128], f3[128];
        const char *filters[] = {f1, f2, f3, NULL};
        struct docker_container_summary *list = NULL;
        size_t n = 0;

        snprintf(f1, sizeof(f1), CONTAINER_LABEL_INSTANCE "=%s", testenv_run_id());
        snprintf(f2, sizeof(f2), CONTAINER_LABEL_USER "=%s", user);
        snprintf(f3, sizeof(f3), CONTAINER_LABEL_SESSION "=%s", session);
        cr_assert_eq(docker_container_list(testenv_docker(), filters, true, &list, &n, NULL), 0);
        free(list);
        return (int)n;
}

int fixture_sh(const char *container_id, const char *script, char **ret_out)
{
        const char *cmd[] = {"sh", "-c", script, NULL};
        struct docker_exec_spec spec = {.cmd = cmd};
        struct docker_exec_result res = {0};
        struct sbx_error err = {0};
        int r = docker_exec_run(testenv_docker(), container_id, &spec, NULL, 0, 1 << 20, 60000, &res, &err);

        cr_assert_eq(r, 0, "exec %s: %s", script, err.msg);
        r = res.exit_code;
        if (ret_out)
                *ret_out = TAKE_PTR(res.out);
        docker_exec_result_done(&res);
        return r;
}

int fixture_docker_cli(const char *args)
{
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "docker %s >/dev/null 2>&1", args);
        return system(cmd);
}

long fixture_wait(bool (*pred)(void *ud), void *ud, long timeout_ms)
{
        return testenv_wait_until(pred, ud, timeout_ms) ? 0 : -1;
}

static bool monitor_counts_events(void *ud)
{
        struct daemon *d = ud;
        const struct docker_label labels[] = {{CONTAINER_LABEL_MANAGED, "1"},
                                              {CONTAINER_LABEL_INSTANCE, d->cfg.instance}};

        if (monitor_events_seen(d->monitor) > 0)
                return true;
        /* managed and of this instance, but of no session: counted, then ignored */
        (void)testenv_events_probe(labels, ELEMENTSOF(labels));
        return false;
}

void fixture_wait_monitor_events(struct daemon *d)
{
        cr_assert_not_null(d->monitor, "the daemon runs no monitor");
        cr_assert(testenv_wait_until(monitor_counts_events, d, 30000), "the monitor's events stream never connected");
}

bool fixture_exec_running(struct daemon *d, const char *user, const char *id)
{
        struct exec_result res;
        bool running;

        cr_assert_eq(exec_status(d->exec, user, id, -1, -1, 0, 0, &res, NULL), 0, "no execution %s", id);
        running = res.state == EXEC_RUNNING;
        exec_result_done(&res);
        return running;
}

int fixture_count_threads(const char *name)
{
        DIR *dir = opendir("/proc/self/task");
        struct dirent *e;
        int n = 0;

        cr_assert_not_null(dir);
        while ((e = readdir(dir))) {
                char path[300], comm[32] = "";
                FILE *f;

                if (e->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue; /* the thread just ended */
                if (fgets(comm, sizeof(comm), f))
                        comm[strcspn(comm, "\n")] = '\0';
                fclose(f);
                n += strcmp(comm, name) == 0;
        }
        closedir(dir);
        return n;
}

int fixture_sandboxctl(const char *bin_dir, const char *admin_socket, const char *args, char **ret_out)
{
        char cmd[2048];
        size_t n = 0, cap = 1 << 20;
        char *out = malloc(cap);
        FILE *p;
        int status;

        cr_assert_not_null(out);
        snprintf(cmd, sizeof(cmd), "%s/sandboxctl --socket '%s' %s 2>&1", bin_dir, admin_socket, args);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        for (size_t k; (k = fread(out + n, 1, cap - 1 - n, p)) > 0;)
                n += k;
        out[n] = '\0';
        status = pclose(p);
        *ret_out = out;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void fixture_container_of(struct daemon *d, const char *user, const char *session, char ret_id[65])
{
        struct session_info info;

        cr_assert_eq(session_get_info(d->sessions, user, session, &info), 0, "no session %s:%s", user, session);
        memcpy(ret_id, info.container_id, 65);
        session_info_done(&info);
}

char *fixture_run(struct daemon *d, const char *session, const char *command, int timeout_s, int *ret_code)
{
        struct exec_request req = {
                .user = "u1", .session = session, .command = command, .actor = "test", .timeout_s = timeout_s};
        struct exec_result res;
        struct sbx_error err = {0};
        char *out;

        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s: %s", command, err.msg);
        out = strndup(res.stdout_head, res.stdout_head_len);
        if (ret_code)
                *ret_code = res.exit_code;
        exec_result_done(&res);
        return out;
}

void fixture_upstream_cert(const char *dir, const char *dns_names)
{
        char cmd[4096], san[1024], cn[256];
        size_t o = 0;

        snprintf(cn, sizeof(cn), "%.*s", (int)strcspn(dns_names, ","), dns_names);
        for (const char *p = dns_names; *p && o < sizeof(san) - 8;) {
                size_t n = strcspn(p, ",");
                o += (size_t)snprintf(san + o, sizeof(san) - o, "%sDNS:%.*s", o ? "," : "", (int)n, p);
                p += n + (p[n] == ',');
        }
        snprintf(cmd, sizeof(cmd),
                 "cd %s && { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                 "-subj '/CN=Test Upstream CA' -keyout upca.key -out upca.pem && "
                 "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=%s "
                 "-keyout up.key -out up.csr && printf 'subjectAltName=%s\\n' > ext && "
                 "openssl x509 -req -in up.csr -CA upca.pem -CAkey upca.key -CAcreateserial -days 1 -extfile ext "
                 "-out up.pem; } >/dev/null 2>&1",
                 dir, cn, san);
        cr_assert_eq(system(cmd), 0, "openssl");
}

pid_t fixture_python_upstream(const char *dir, const char *name, const char *script, const char *const *args,
                              int *ret_ports, int n_ports)
{
        char path[1024];
        const char *argv[16];
        int pipefd[2], argc = 0;
        pid_t pid;
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(script, f);
        fclose(f);
        argv[argc++] = "python3";
        argv[argc++] = path;
        for (size_t i = 0; args && args[i] && argc < 15; i++)
                argv[argc++] = args[i];
        argv[argc] = NULL;
        cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
                dup2(pipefd[1], 1);
                dup2(null, 2); /* the refused requests' broken pipes are not news */
                execvp("python3", (char *const *)argv);
                _exit(127);
        }
        close(pipefd[1]);
        f = fdopen(pipefd[0], "r");
        for (int i = 0; i < n_ports; i++)
                cr_assert(fscanf(f, "%d", &ret_ports[i]) == 1, "%s did not start", name);
        fclose(f);
        return pid;
}
