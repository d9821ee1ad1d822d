/* nodeenv.c — a separate node agent for integration tests (nodeenv.h). */
#include "nodeenv.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testenv.h"

#define MAX_AGENTS 16

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t agents[MAX_AGENTS];
static size_t n_agents;

bool nodeenv_wanted(void)
{
        const char *v = getenv("SANDBOXD_TEST_NODE");
        return v && *v && strcmp(v, "0") != 0;
}

static void run(const char *dir, const char *script)
{
        char *cmd;
        cr_assert(asprintf(&cmd, "cd '%s' && { %s ; } >/dev/null 2>&1", dir, script) > 0);
        int st = system(cmd);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "openssl failed: %s", script);
        free(cmd);
}

#define KEY "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

char *nodeenv_pki(void)
{
        char *dir = testenv_tmpdir();
        FILE *f;
        char path[SBX_PATH_MAX];

        cr_assert_not_null(dir);
        run(dir, "openssl req -x509 " KEY
                 " -keyout ca.key -out ca.pem -days 2 -subj /CN=sandboxd-test-node-ca "
                 "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign");
        static const char *names[] = {"sandboxd-control", "node1", "node2", "node3"};
        for (size_t i = 0; i < 4; i++) {
                char script[1024];
                snprintf(script, sizeof(script),
                         "openssl req " KEY
                         " -keyout %s.key -out %s.csr -subj /CN=%s && "
                         "printf 'subjectAltName=DNS:%s\\n' > %s.ext && "
                         "openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
                         "-extfile %s.ext -out %s.pem",
                         names[i], names[i], names[i], names[i], names[i], names[i], names[i], names[i]);
                run(dir, script);
        }
        snprintf(path, sizeof(path), "%s/ca.cnf", dir);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f,
                "[ ca ]\ndefault_ca = ca_default\n[ ca_default ]\ndatabase = index.txt\ncrlnumber = crlnumber\n"
                "default_md = sha256\ndefault_crl_days = 2\ncertificate = ca.pem\nprivate_key = ca.key\n");
        fclose(f);
        run(dir, "touch index.txt && echo 1000 > crlnumber");
        nodeenv_revoke(dir, "node2");
        return dir;
}

void nodeenv_cert(const char *pki, const char *name)
{
        char script[1024];
        snprintf(script, sizeof(script),
                 "openssl req " KEY
                 " -keyout '%s.key' -out '%s.csr' -subj '/CN=%s' && "
                 "printf 'subjectAltName=DNS:%s\\n' > '%s.ext' && "
                 "openssl x509 -req -in '%s.csr' -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
                 "-extfile '%s.ext' -out '%s.pem'",
                 name, name, name, name, name, name, name, name);
        run(pki, script);
}

void nodeenv_start_n(const struct sbx_config *control, const char *pki, const char *const *names, size_t n,
                     const char *base, pid_t *ret_pids)
{
        for (size_t i = 0; i < n; i++) {
                char dir[SBX_PATH_MAX];
                snprintf(dir, sizeof(dir), "%s/%s", base, names[i]);
                cr_assert(mkdir(dir, 0700) == 0 || errno == EEXIST, "mkdir %s: %m", dir);
                ret_pids[i] = nodeenv_start(control, pki, names[i], dir);
        }
}

void nodeenv_revoke(const char *pki, const char *name)
{
        char script[512];
        snprintf(script, sizeof(script),
                 "openssl ca -config ca.cnf -batch -revoke %s.pem && openssl ca -config ca.cnf -gencrl -out crl.new "
                 "&& mv crl.new crl.pem",
                 name);
        run(pki, script);
}

static int free_port(void)
{
        int base = 20000 + (int)(getpid() % 1000) * 2;
        for (int i = 0; i < 2000; i++) {
                int port = 20000 + (base - 20000 + i) % 2000;
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
                sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
                close(fd);
                if (r == 0)
                        return port;
        }
        cr_assert_fail("no free port in 20000-21999");
        return -1;
}

void nodeenv_config_control(struct sbx_config *cfg, const char *pki)
{
        snprintf(cfg->node_listen, sizeof(cfg->node_listen), "127.0.0.1:%d", free_port());
        snprintf(cfg->node_cert, sizeof(cfg->node_cert), "%s/sandboxd-control.pem", pki);
        snprintf(cfg->node_key, sizeof(cfg->node_key), "%s/sandboxd-control.key", pki);
        snprintf(cfg->node_ca, sizeof(cfg->node_ca), "%s/ca.pem", pki);
        snprintf(cfg->node_crl, sizeof(cfg->node_crl), "%s/crl.pem", pki);
        cfg->node_heartbeat_ms = 1000;
}

void nodeenv_config_node(struct sbx_config *cfg, const struct sbx_config *control, const char *pki, const char *name,
                         const char *data_dir)
{
        config_defaults(cfg);
        snprintf(cfg->node_connect, sizeof(cfg->node_connect), "%s", control->node_listen);
        snprintf(cfg->node_cert, sizeof(cfg->node_cert), "%s/%s.pem", pki, name);
        snprintf(cfg->node_key, sizeof(cfg->node_key), "%s/%s.key", pki, name);
        snprintf(cfg->node_ca, sizeof(cfg->node_ca), "%s/ca.pem", pki);
        snprintf(cfg->node_crl, sizeof(cfg->node_crl), "%s/crl.pem", pki);
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s", data_dir);
        cfg->node_heartbeat_ms = control->node_heartbeat_ms;
}

static void kill_all(void)
{
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < n_agents; i++)
                if (agents[i] > 0) {
                        kill(agents[i], SIGKILL);
                        (void)waitpid(agents[i], NULL, 0);
                }
        n_agents = 0;
        pthread_mutex_unlock(&lock);
}

pid_t nodeenv_start(const struct sbx_config *control, const char *pki, const char *name, const char *data_dir)
{
        return nodeenv_start_conf(control, pki, name, data_dir, NULL);
}

pid_t nodeenv_start_conf(const struct sbx_config *control, const char *pki, const char *name, const char *data_dir,
                         const char *extra)
{
        char exe[SBX_PATH_MAX], conf[SBX_PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        struct sbx_config node;
        FILE *f;
        pid_t pid;

        cr_assert(n > 0);
        exe[n] = '\0';
        *strrchr(exe, '/') = '\0';
        nodeenv_config_node(&node, control, pki, name, data_dir);
        /* the runner is the node's: this build's (also under an agent of another build, SANDBOXD_TEST_NODE_BIN) */
        char runner[SBX_PATH_MAX + 32];
        snprintf(runner, sizeof(runner), "%s/sandboxd-runner", exe);
        snprintf(conf, sizeof(conf), "%s/%s.conf", pki, name);
        f = fopen(conf, "w");
        cr_assert_not_null(f);
        fprintf(f,
                "data_dir = %s\nlog_level = %s\nrunner_binary = %s\nnode.connect = %s\nnode.cert = %s\n"
                "node.key = %s\nnode.ca = %s\nnode.crl = %s\n",
                node.data_dir, getenv("SANDBOXD_TEST_NODE_LOG") ? getenv("SANDBOXD_TEST_NODE_LOG") : "warn",
                control->runner_binary[0] ? control->runner_binary : runner, node.node_connect, node.node_cert,
                node.node_key, node.node_ca, node.node_crl);
        if (extra)
                fputs(extra, f);
        fclose(f);
        pthread_mutex_lock(&lock);
        static bool registered;
        if (!registered) {
                atexit(kill_all);
                registered = true;
        }
        pthread_mutex_unlock(&lock);
        pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
                char bin[SBX_PATH_MAX + 16];
                prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the daemon's process */
                /* SANDBOXD_TEST_NODE_BIN: another build's sandboxd (a TSan one, say) as the agent */
                const char *other = getenv("SANDBOXD_TEST_NODE_BIN");
                snprintf(bin, sizeof(bin), "%s", other && *other ? other : "");
                if (!bin[0])
                        snprintf(bin, sizeof(bin), "%s/sandboxd", exe);
                /* the daemon's own SANDBOXD_* would override the file */
                for (char **e = environ; *e;)
                        if (strncmp(*e, "SANDBOXD_", 9) == 0 && strncmp(*e, "SANDBOXD_TEST", 13) != 0) {
                                char key[128];
                                size_t k = strcspn(*e, "=");
                                snprintf(key, sizeof(key), "%.*s", (int)k, *e);
                                unsetenv(key);
                        } else {
                                e++;
                        }
                execl(bin, bin, "node", "--config", conf, (char *)NULL);
                _exit(127);
        }
        pthread_mutex_lock(&lock);
        if (n_agents < MAX_AGENTS)
                agents[n_agents++] = pid;
        pthread_mutex_unlock(&lock);
        return pid;
}

void nodeenv_kill(pid_t pid, int sig)
{
        kill(pid, sig);
        if (sig == SIGKILL || sig == SIGTERM) {
                (void)waitpid(pid, NULL, 0);
                pthread_mutex_lock(&lock);
                for (size_t i = 0; i < n_agents; i++)
                        if (agents[i] == pid)
                                agents[i] = 0;
                pthread_mutex_unlock(&lock);
        }
}

/* Beside data_dir, so a daemon opened again on the same data_dir (a
 * restart, in this process or a forked one) gets the same PKI, port and
 * node directory: pki/ (made once), pki/port, node/. */
void nodeenv_fixture(struct sbx_config *cfg)
{
        static pid_t pid, owner;
        static char agent_base[SBX_PATH_MAX];
        char base[SBX_PATH_MAX], pki[SBX_PATH_MAX], path[SBX_PATH_MAX], node_dir[SBX_PATH_MAX];
        struct stat st;
        FILE *f;
        int port = 0;

        if (!nodeenv_wanted() || cfg->node_listen[0])
                return;
        snprintf(base, sizeof(base), "%s", cfg->data_dir);
        cr_assert_not_null(strrchr(base, '/'));
        *strrchr(base, '/') = '\0';
        snprintf(pki, sizeof(pki), "%s/node-pki", base);
        snprintf(node_dir, sizeof(node_dir), "%s/node", base);
        snprintf(path, sizeof(path), "%s/port", pki);
        if (stat(path, &st) < 0) {
                char *made = nodeenv_pki();
                cr_assert_eq(rename(made, pki), 0, "rename %s: %m", made);
                free(made);
                nodeenv_config_control(cfg, pki);
                f = fopen(path, "w");
                cr_assert_not_null(f);
                fprintf(f, "%s\n", cfg->node_listen);
                fclose(f);
        } else {
                nodeenv_config_control(cfg, pki);
                f = fopen(path, "r");
                cr_assert_not_null(f);
                cr_assert_eq(fscanf(f, "127.0.0.1:%d", &port), 1);
                fclose(f);
                snprintf(cfg->node_listen, sizeof(cfg->node_listen), "127.0.0.1:%d", port);
        }
        /* one node agent per process and data_dir (a forked child has its parent's): it dials
         * the daemon listening on that port again whenever one goes */
        if (pid > 0 && kill(pid, 0) == 0 && strcmp(agent_base, base) == 0)
                return;
        if (pid > 0 && owner == getpid()) /* it served another data_dir: it dials a port nobody listens on */
                nodeenv_kill(pid, SIGKILL);
        pid = nodeenv_start(cfg, pki, "node1", node_dir);
        owner = getpid();
        snprintf(agent_base, sizeof(agent_base), "%s", base);
}
