/* sandboxd — the daemon's front: parse arguments, load the config, open the
 * daemon, wait for SIGINT/SIGTERM. All logic lives in the core library. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/cli.h"
#include "sandboxd/config.h"
#include "sandboxd/daemon.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/fronts.h"
#include "sandboxd/gc.h"
#include "sandboxd/log.h"
#include "sandboxd/node.h"
#include "sandboxd/sdnotify.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/wsquota.h"

static volatile sig_atomic_t node_stop;

static void on_node_signal(int sig)
{
        (void)sig;
        node_stop = 1;
}

/* `sandboxd node`: the node agent until SIGINT or SIGTERM. */
static int node_main(const struct sbx_config *cfg)
{
        struct sigaction sa = {.sa_handler = on_node_signal}; /* no SA_RESTART: poll() returns */
        struct sbx_error err = {0};

        signal(SIGPIPE, SIG_IGN);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        if (node_agent_run(cfg, &node_stop, &err) < 0) {
                log_error("sandboxd node: %s", err.msg);
                return 1;
        }
        log_info("sandboxd node: stopped");
        return 0;
}

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: sandboxd [OPTIONS]\n"
                "       sandboxd node [OPTIONS]\n"
                "\n"
                "A multi-tenant Docker sandbox daemon: one hardened container per agent session.\n"
                "`sandboxd node` runs the node part alone (the session directories, their sockets and\n"
                "the runner check, beside the containers) and dials the control daemon's node.listen\n"
                "at node.connect over mutual TLS (node.cert, node.key, node.ca, node.crl;\n"
                "docs/operations.md).\n"
                "\n"
                "  -c, --config FILE    read FILE (key = value lines; see etc/sandboxd.conf)\n"
                "      --check-config   validate the config (file and SANDBOXD_* environment) and exit:\n"
                "                       0 if valid, 1 naming the offending line and why\n"
                "      --print-config   print every key with its effective value and exit\n"
                "      --gc             batch cleanup instead of the daemon: remove what abandoned\n"
                "                       sessions left (idle, old and orphan containers, ERROR sessions,\n"
                "                       ports, services, execution spools, expired workspaces), vacuum\n"
                "                       the store, print a report and exit: 0 if every item went well\n"
                "      --dry-run        with --gc: report what would go, change nothing\n"
                "      --json           with --gc: print the report as JSON\n"
                "  -V, --version        print the version and exit\n"
                "  -h, --help           show this help and exit\n"
                "\n"
                "Without --config the embedded defaults apply. Every key can be overridden\n"
                "by the environment variable SANDBOXD_<KEY> (e.g. SANDBOXD_DATA_DIR).\n");
}

int main(int argc, char **argv)
{
        enum { OPT_CHECK = 256, OPT_PRINT, OPT_GC, OPT_DRY_RUN, OPT_JSON };
        static const struct option opts[] = {
                {"config", required_argument, NULL, 'c'},
                {"check-config", no_argument, NULL, OPT_CHECK},
                {"print-config", no_argument, NULL, OPT_PRINT},
                {"gc", no_argument, NULL, OPT_GC},
                {"dry-run", no_argument, NULL, OPT_DRY_RUN},
                {"json", no_argument, NULL, OPT_JSON},
                {"version", no_argument, NULL, 'V'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        const char *config_path = NULL;
        bool check = false, print = false, gc = false, dry_run = false, json = false;
        struct sbx_config cfg;
        struct sbx_error err = {0};
        struct daemon *d = NULL;
        enum log_level level;
        sigset_t set;
        int c, sig, r;
        bool node = argc > 1 && strcmp(argv[1], "node") == 0;

        if (node) { /* the subcommand: the options follow it */
                argv[1] = argv[0];
                argv++;
                argc--;
        }
        while ((c = getopt_long(argc, argv, "c:Vh", opts, NULL)) != -1) {
                switch (c) {
                case 'c':
                        config_path = optarg;
                        break;
                case OPT_CHECK:
                        check = true;
                        break;
                case OPT_PRINT:
                        print = true;
                        break;
                case OPT_GC:
                        gc = true;
                        break;
                case OPT_DRY_RUN:
                        dry_run = true;
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                default: /* -V, -h, an unknown option */
                        return cli_usual_option(c, "sandboxd", usage);
                }
        }
        if (cli_no_operands(argc, argv, "sandboxd", usage) != 0)
                return 2;
        if ((dry_run || json) && !gc) {
                fprintf(stderr, "sandboxd: --dry-run and --json go with --gc\n");
                return 2;
        }

        r = config_load(config_path, &cfg, &err);
        if (r < 0) {
                fprintf(stderr, "sandboxd: invalid configuration: %s\n", err.msg);
                return 1;
        }
        if (check) {
                /* what the host must offer for the settings (workspace.quota_mode) */
                r = wsquota_check_config(&cfg, &err);
                if (r == 0)
                        r = sessuid_check_host(&cfg, &err); /* sandbox_uid_range against host accounts */
                if (r < 0) {
                        fprintf(stderr, "sandboxd: invalid configuration: %s\n", err.msg);
                        return 1;
                }
                printf("configuration OK%s%s\n", config_path ? ": " : " (embedded defaults)",
                       config_path ? config_path : "");
                return 0;
        }
        if (print) {
                config_dump(&cfg, STDOUT_FILENO);
                return 0;
        }
        if (log_level_from_string(cfg.log_level, &level) == 0)
                log_set_level(level);

        if (node) {
                if (gc) {
                        fprintf(stderr, "sandboxd: --gc is not for sandboxd node\n");
                        return 2;
                }
                return node_main(&cfg);
        }
        if (gc) {
                signal(SIGPIPE, SIG_IGN);
                if (engine_docker_global_init() < 0) {
                        log_error("cannot initialise libcurl");
                        return 1;
                }
                r = gc_main(&cfg, dry_run, json, stdout);
                engine_docker_global_cleanup();
                return r;
        }

        /* Block the signals we wait for before any thread starts, so every
         * thread inherits the mask and only sigwait() below sees them. */
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);

        if (engine_docker_global_init() < 0) {
                log_error("cannot initialise libcurl");
                return 1;
        }
        r = fronts_open(&cfg, &(struct daemon_options){.sockets = true}, &d, &err);
        if (r < 0) {
                log_error("cannot start: %s", err.msg);
                engine_docker_global_cleanup();
                return 1;
        }
        log_info("sandboxd %s running (instance %s, data_dir %s)", SBX_VERSION, cfg.instance, cfg.data_dir);
        /* Both sockets listen by now: a Type=notify unit's dependants may start. */
        r = sdnotify_send("READY=1\nSTATUS=running");
        if (r < 0)
                log_warn("cannot notify the service manager (NOTIFY_SOCKET): %s", strerror(-r));

        while (sigwait(&set, &sig) != 0)
                ;
        log_info("received %s, shutting down", strsignal(sig));
        (void)sdnotify_send("STOPPING=1");
        daemon_close(d);
        engine_docker_global_cleanup();
        return 0;
}
