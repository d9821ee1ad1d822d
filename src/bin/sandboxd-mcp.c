/* sandboxd-mcp — the MCP stdio adapter's front: parse arguments, find the
 * API socket (or, with --url, a remote daemon's HTTPS API) and the token,
 * then pump stdin into the protocol core (mcp.h) and its output onto stdout
 * until stdin closes. All logic lives in the core library. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/cli.h"
#include "sandboxd/config.h"
#include "sandboxd/log.h"
#include "sandboxd/mcp.h"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: sandboxd-mcp [OPTIONS]\n"
                "\n"
                "The MCP stdio server of sandboxd: JSON-RPC on stdin/stdout, one message per line,\n"
                "logs on stderr. An MCP client launches it; every tool call goes to the daemon's\n"
                "API socket. Serves MCP 2024-11-05 to 2025-11-25 (initialize) and 2026-07-28.\n"
                "\n"
                "  -c, --config FILE      read the daemon's config FILE to find api_socket\n"
                "      --url URL          use a remote daemon's HTTPS API instead of the socket:\n"
                "                         https://host:port (its http.listen); $SANDBOXD_URL\n"
                "      --cacert FILE      trust this CA (PEM) for --url instead of the system's\n"
                "      --cert FILE        client certificate (PEM) for an mTLS daemon, with --key\n"
                "      --key FILE         its private key\n"
                "      --token-file FILE  read the API token from FILE (default: $SANDBOXD_TOKEN)\n"
                "  -s, --session NAME     default session for tool calls that name none\n"
                "                         (default: $SANDBOXD_SESSION, else mcp-<random> per process)\n"
                "      --drain-ms MS      on end of input, wait at most MS for calls in flight to\n"
                "                         answer (default 2000); their executions go on regardless\n"
                "  -V, --version          print the version and exit\n"
                "  -h, --help             show this help and exit\n"
                "\n"
                "SANDBOXD_API_SOCKET (and every SANDBOXD_<KEY>) overrides the config as for the daemon.\n");
}

static int write_stdout(const char *line, size_t len, void *userdata)
{
        while (len) {
                ssize_t k = write(STDOUT_FILENO, line, len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                line += k;
                len -= (size_t)k;
        }
        return 0;
}

static int read_token_file(const char *path, char **ret)
{
        char buf[4096];
        size_t n;
        FILE *f = fopen(path, "re");

        if (!f)
                return -errno;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        buf[strcspn(buf, "\r\n")] = '\0';
        /* trim surrounding blanks */
        char *s = buf + strspn(buf, " \t");
        n = strlen(s);
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
                s[--n] = '\0';
        if (!*s)
                return -ENODATA;
        *ret = strdup(s);
        return *ret ? 0 : -ENOMEM;
}

int main(int argc, char **argv)
{
        enum { OPT_TOKEN_FILE = 256, OPT_DRAIN, OPT_URL, OPT_CACERT, OPT_CERT, OPT_KEY };
        static const struct option opts[] = {
                {"config", required_argument, NULL, 'c'},
                {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
                {"session", required_argument, NULL, 's'},
                {"drain-ms", required_argument, NULL, OPT_DRAIN},
                {"url", required_argument, NULL, OPT_URL},
                {"cacert", required_argument, NULL, OPT_CACERT},
                {"cert", required_argument, NULL, OPT_CERT},
                {"key", required_argument, NULL, OPT_KEY},
                {"version", no_argument, NULL, 'V'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        const char *config_path = NULL, *token_file = NULL, *session = NULL;
        const char *url = NULL, *cacert = NULL, *cert = NULL, *key = NULL;
        char *token = NULL;
        long drain_ms = 2000;
        struct sbx_config cfg;
        struct sbx_error err = {0};
        struct mcp *m = NULL;
        enum log_level level;
        char buf[65536];
        int c, r;

        while ((c = getopt_long(argc, argv, "c:s:Vh", opts, NULL)) != -1) {
                switch (c) {
                case 'c':
                        config_path = optarg;
                        break;
                case OPT_TOKEN_FILE:
                        token_file = optarg;
                        break;
                case 's':
                        session = optarg;
                        break;
                case OPT_URL:
                        url = optarg;
                        break;
                case OPT_CACERT:
                        cacert = optarg;
                        break;
                case OPT_CERT:
                        cert = optarg;
                        break;
                case OPT_KEY:
                        key = optarg;
                        break;
                case OPT_DRAIN: {
                        char *end;
                        errno = 0;
                        drain_ms = strtol(optarg, &end, 10);
                        if (errno || *end || drain_ms < 0 || drain_ms > 3600000) {
                                fprintf(stderr, "sandboxd-mcp: invalid --drain-ms '%s'\n", optarg);
                                return 2;
                        }
                        break;
                }
                default: /* -V, -h, an unknown option */
                        return cli_usual_option(c, "sandboxd-mcp", usage);
                }
        }
        if (cli_no_operands(argc, argv, "sandboxd-mcp", usage) != 0)
                return 2;

        r = config_load(config_path, &cfg, &err);
        if (r < 0) {
                log_error("sandboxd-mcp: %s", err.msg);
                return 1;
        }
        if (log_level_from_string(cfg.log_level, &level) == 0)
                log_set_level(level);

        if (token_file) {
                r = read_token_file(token_file, &token);
                if (r < 0) {
                        log_error("sandboxd-mcp: cannot read a token from %s: %s", token_file,
                                  r == -ENODATA ? "the file is empty" : strerror(-r));
                        return 1;
                }
        } else if (getenv("SANDBOXD_TOKEN") && *getenv("SANDBOXD_TOKEN")) {
                token = strdup(getenv("SANDBOXD_TOKEN"));
        }
        if (!token)
                log_warn("sandboxd-mcp: no API token (SANDBOXD_TOKEN or --token-file): tool calls will fail");
        if (!session)
                session = getenv("SANDBOXD_SESSION");
        if (!url && getenv("SANDBOXD_URL") && *getenv("SANDBOXD_URL"))
                url = getenv("SANDBOXD_URL");
        if ((cacert || cert || key) && !url) {
                log_error("sandboxd-mcp: --cacert, --cert and --key go with --url");
                free(token);
                return 2;
        }
        if (url) {
                const char *files[] = {cacert, cert, key};
                for (size_t i = 0; i < ELEMENTSOF(files); i++)
                        if (files[i] && access(files[i], R_OK) < 0) {
                                log_error("sandboxd-mcp: cannot read %s: %s", files[i], strerror(errno));
                                free(token);
                                return 1;
                        }
                if (mcp_https_check_url(url, &err) < 0 || mcp_https_configure(cacert, cert, key) < 0) {
                        log_error("sandboxd-mcp: --url %s: %s", url,
                                  err.msg[0] ? err.msg : "--cert and --key go together");
                        free(token);
                        return 2;
                }
                if (mcp_https_global_init() < 0) {
                        log_error("sandboxd-mcp: cannot initialize libcurl");
                        free(token);
                        return 1;
                }
        }

        /* A client that goes away must not kill us mid-write: write() reports it. */
        signal(SIGPIPE, SIG_IGN);

        struct mcp_options o = {
                .api_socket = url ? url : cfg.api_socket,
                .token = token,
                .session = session,
                .write = write_stdout,
        };
        r = mcp_new(&o, &m, &err);
        if (r < 0) {
                log_error("sandboxd-mcp: %s", err.msg);
                free(token);
                return 1;
        }
        log_info("sandboxd-mcp %s: %s %s, default session %s", SBX_VERSION, url ? "remote" : "api socket",
                 url ? url : cfg.api_socket, mcp_default_session(m));

        for (;;) {
                ssize_t k = read(STDIN_FILENO, buf, sizeof(buf));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error("sandboxd-mcp: reading stdin: %s", strerror(errno));
                        break;
                }
                if (k == 0)
                        break;
                mcp_feed(m, buf, (size_t)k);
                if (mcp_output_closed(m))
                        break;
        }
        mcp_feed_eof(m);
        if (!mcp_output_closed(m) && mcp_drain(m, (int)drain_ms) < 0)
                log_info(
                        "sandboxd-mcp: input closed with %zu call(s) in flight; their executions go on in the "
                        "daemon",
                        mcp_inflight(m));
        log_info("sandboxd-mcp: exiting");
        mcp_free(m);
        free(token);
        /* exit, not return-and-join: workers still blocked on the daemon end with the process. */
        fflush(NULL);
        _exit(0);
}
