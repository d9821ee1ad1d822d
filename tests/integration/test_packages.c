/* Integration tests of packages by policy (issue 37 item 2) with real pip
 * and real npm in the python image, over real TLS, against a registry the
 * test serves on 127.0.0.1: a PEP 503 index (wheels it builds) and a static
 * npm registry (packuments and tarballs), both over HTTPS with a CA of the
 * test's own that the daemon trusts (SSL_CERT_FILE), reached by name
 * through egress.resolve. The sandbox trusts its session's CA (the proxy
 * intercepts the registry hosts) through PIP_CERT and NPM_CONFIG_CAFILE.
 * The index pages of packages with a denied version are filtered, so an
 * install with no version picks the newest allowed one.
 * npm is the host's (its self-contained directory and node binary, copied
 * into the session's workspace: the image has node but no npm). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/store_egress.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(packages, .timeout = 600);

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1];

/* The registry: argv cert key hits-file. Prints its port. */
static const char registry_py[] =
        "import base64, hashlib, http.server, io, json, ssl, sys, tarfile, zipfile\n"
        "cert, key, hits = sys.argv[1:4]\n"
        "R = {}\n"
        "def b64(d): return base64.urlsafe_b64encode(d).rstrip(b'=').decode()\n"
        "def wheel(n, v):\n"
        "    di = f'{n}-{v}.dist-info'\n"
        "    files = {f'{n}/__init__.py': f'VERSION = \"{v}\"\\n'.encode(),\n"
        "             f'{di}/METADATA': f'Metadata-Version: 2.1\\nName: {n}\\nVersion: {v}\\n'.encode(),\n"
        "             f'{di}/WHEEL': b'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: "
        "py3-none-any\\n'}\n"
        "    rec = ''.join(f'{p},sha256={b64(hashlib.sha256(c).digest())},{len(c)}\\n' for p, c in files.items())\n"
        "    files[f'{di}/RECORD'] = (rec + f'{di}/RECORD,,\\n').encode()\n"
        "    b = io.BytesIO()\n"
        "    with zipfile.ZipFile(b, 'w') as z:\n"
        "        for p, c in files.items(): z.writestr(p, c)\n"
        "    return b.getvalue()\n"
        "def tgz(n, v):\n"
        "    b = io.BytesIO()\n"
        "    with tarfile.open(fileobj=b, mode='w:gz') as t:\n"
        "        for p, c in {'package/package.json': json.dumps({'name': n, 'version': v, 'main': "
        "'index.js'}).encode(),\n"
        "                     'package/index.js': f'module.exports = {{ v: \"{v}\" }};\\n'.encode()}.items():\n"
        "            i = tarfile.TarInfo(p); i.size = len(c); i.mode = 0o644; t.addfile(i, io.BytesIO(c))\n"
        "    return b.getvalue()\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    protocol_version = 'HTTP/1.1'\n"
        "    def do_GET(self):\n"
        "        p = self.path.split('?')[0]\n"
        "        with open(hits, 'a') as f: f.write(self.headers.get('Host', '') + p + '\\n')\n"
        "        ct, b = R.get(p, ('text/plain', None))\n"
        "        if b is None: self.send_response(404); b = b'not found\\n'\n"
        "        else: self.send_response(200)\n"
        "        self.send_header('Content-Type', ct); self.send_header('Content-Length', str(len(b)))\n"
        "        self.end_headers(); self.wfile.write(b)\n"
        "    def log_message(self, *a): pass\n"
        "s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
        "port = s.server_address[1]\n"
        "py = {'goodpkg': ['1.0', '2.0'], 'evilpkg': ['1.0']}\n"
        "R['/simple/'] = ('text/html', ''.join(f'<a href=\"/simple/{n}/\">{n}</a>' for n in py).encode())\n"
        "for n, vs in py.items():\n"
        "    links = ''\n"
        "    for v in vs:\n"
        "        fn = f'{n}-{v}-py3-none-any.whl'; w = wheel(n, v)\n"
        "        R[f'/packages/{fn}'] = ('application/octet-stream', w)\n"
        "        links += f'<a href=\"/packages/{fn}#sha256={hashlib.sha256(w).hexdigest()}\">{fn}</a>\\n'\n"
        "    R[f'/simple/{n}/'] = ('text/html', f'<html><body>{links}</body></html>'.encode())\n"
        "files = []\n"
        "for v in ['1.0', '2.0']:\n"
        "    fn = f'jsonpkg-{v}-py3-none-any.whl'; w = wheel('jsonpkg', v)\n"
        "    R[f'/packages/{fn}'] = ('application/octet-stream', w)\n"
        "    files.append({'filename': fn, 'url': f'/packages/{fn}', 'hashes': {'sha256': "
        "hashlib.sha256(w).hexdigest()}})\n"
        "R['/simple/jsonpkg/'] = ('application/vnd.pypi.simple.v1+json', json.dumps({'meta': {'api-version': '1.0'}, "
        "'name': 'jsonpkg', 'files': files}).encode())\n"
        "js = {'okpkg': ['1.0.0', '2.0.0'], 'badpkg': ['1.0.0']}\n"
        "for n, vs in js.items():\n"
        "    doc = {'name': n, 'dist-tags': {'latest': vs[-1]}, 'versions': {}}\n"
        "    for v in vs:\n"
        "        t = tgz(n, v); path = f'/{n}/-/{n}-{v}.tgz'\n"
        "        R[path] = ('application/octet-stream', t)\n"
        "        doc['versions'][v] = {'name': n, 'version': v, 'dist': {\n"
        "            'tarball': f'https://npm.test:{port}{path}', 'shasum': hashlib.sha1(t).hexdigest(),\n"
        "            'integrity': 'sha512-' + base64.b64encode(hashlib.sha512(t).digest()).decode()}}\n"
        "    R[f'/{n}'] = ('application/json', json.dumps(doc).encode())\n"
        "c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(cert, key)\n"
        "s.socket = c.wrap_socket(s.socket, server_side=True)\n"
        "print(port, flush=True)\n"
        "s.serve_forever()\n";

static pid_t reg_pid;
static char reg_dir[512];
static int reg_port;

static void registry_stop(void)
{
        if (reg_pid > 0) {
                kill(reg_pid, SIGTERM);
                waitpid(reg_pid, NULL, 0);
                reg_pid = 0;
        }
}

static void registry_start(void)
{
        char ca[600], cert[600], key[600], hits[600];
        char *dir = testenv_tmpdir();

        snprintf(reg_dir, sizeof(reg_dir), "%s", dir);
        free(dir);
        fixture_upstream_cert(reg_dir, "pypi.test,npm.test");
        snprintf(ca, sizeof(ca), "%s/upca.pem", reg_dir);
        snprintf(cert, sizeof(cert), "%s/up.pem", reg_dir);
        snprintf(key, sizeof(key), "%s/up.key", reg_dir);
        snprintf(hits, sizeof(hits), "%s/hits.log", reg_dir);
        reg_pid = fixture_python_upstream(reg_dir, "registry.py", registry_py,
                                          (const char *const[]){cert, key, hits, NULL}, &reg_port, 1);
        /* the daemon trusts the registry's CA as it would a system one */
        setenv("SSL_CERT_FILE", ca, 1);
}

static cJSON *call(const char *token, const char *method, const char *params_json)
{
        return apic_call(cfg.api_socket, token, method, apic_json(params_json));
}

/* stdout and stderr of command in session (the session's environment applies) */
static char *api_sh(const char *session, const char *command)
{
        cJSON *p = cJSON_CreateObject(), *r;
        char *params, *out;

        cJSON_AddStringToObject(p, "session", session);
        cJSON_AddStringToObject(p, "command", command);
        cJSON_AddNumberToObject(p, "timeout", 240);
        params = cJSON_PrintUnformatted(p);
        cJSON_Delete(p);
        r = call(tok_a, "exec", params);
        free(params);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        /* the end state last, so an assertion on the output shows how the command ended */
        if (asprintf(&out, "%s%s[%s %s exit %g%s]", apic_str(apic_result(r), "stdout"),
                     apic_str(apic_result(r), "stderr"), apic_str(apic_result(r), "state"),
                     apic_str(apic_result(r), "cause"), apic_num(apic_result(r), "exit_code"),
                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(apic_result(r), "truncated")) ? " truncated" : "") <
            0)
                out = NULL;
        cr_assert_not_null(out);
        cJSON_Delete(r);
        return out;
}

static bool audited(const char *session, const char *host, const char *reason)
{
        struct store_egress_entry *rows = NULL;
        size_t n = 0;
        bool seen = false;

        cr_assert_eq(store_egress_log_list(d->store, "alice", session, 500, &rows, &n), 0);
        for (size_t i = 0; i < n && !seen; i++)
                seen = strcmp(rows[i].host, host) == 0 && strcmp(rows[i].decision, "blocked") == 0 &&
                       strcmp(rows[i].reason, reason) == 0;
        free(rows);
        return seen;
}

/* Whether the registry was asked for a path holding needle. */
static bool registry_saw(const char *needle)
{
        char p[600], line[1024];
        bool seen = false;
        FILE *f;

        snprintf(p, sizeof(p), "%s/hits.log", reg_dir);
        f = fopen(p, "r");
        while (f && !seen && fgets(line, sizeof(line), f))
                seen = strstr(line, needle) != NULL;
        if (f)
                fclose(f);
        return seen;
}

Test(packages, pip_and_npm_install_by_policy, .fini = registry_stop)
{
        char path[SBX_PATH_MAX], cmd[4096], dir[SBX_PATH_MAX], id[65], want[160], *out;
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        cJSON *r;
        FILE *f;
        int fd;

        registry_start();
        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "none");
        cfg.memory_bytes = 512 << 20;
        cr_assert_eq(config_set(&cfg, "egress.allow", "pypi.test:*, npm.test:*", &err), 0);
        cr_assert_eq(config_set(&cfg, "egress.resolve", "pypi.test=127.0.0.1, npm.test=127.0.0.1", &err), 0);
        cr_assert_eq(config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err), 0);
        /* the policy: a denied package and a denied version of an allowed one, in each ecosystem */
        snprintf(path, sizeof(path), "%s/packages.json", reg_dir);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f,
                "{\"default\": {\"pypi\": {\"index\": \"https://pypi.test:%d/simple/\", "
                "\"deny\": [\"evilpkg\", \"goodpkg >=2\", \"jsonpkg >=2\"]},"
                " \"npm\": {\"registry\": \"https://npm.test:%d/\", \"deny\": [\"badpkg\", \"okpkg >=2\"]}}}\n",
                reg_port, reg_port);
        fclose(f);
        cr_assert_eq(config_set(&cfg, "egress.packages_file", path, &err), 0, "%s", err.msg);
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        snprintf(cfg.secrets_key_file, sizeof(cfg.secrets_key_file), "%s/secrets.key", reg_dir);
        fd = open(cfg.secrets_key_file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        cr_assert_geq(fd, 0);
        cr_assert_eq(write(fd, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", 65), 65);
        close(fd);
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0);

        r = call(tok_a, "create_session", "{\"session\":\"pk\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* pip and npm are pointed at the policy's index and registry, trusting the session's CA */
        out = api_sh("pk", "echo \"$PIP_INDEX_URL $npm_config_registry $PIP_CERT $NPM_CONFIG_CAFILE\"");
        snprintf(cmd, sizeof(cmd),
                 "https://pypi.test:%d/simple/ https://npm.test:%d/ /run/sandboxd/ca-bundle.pem "
                 "/run/sandboxd/ca-bundle.pem\n[completed exited exit 0]",
                 reg_port, reg_port);
        cr_assert_str_eq(out, cmd);
        free(out);

        /* pip: with no version asked, the newest allowed one installs (the index page marks 2.0 yanked, PEP 503
         * HTML and PEP 691 JSON alike); a denied version asked for, and a denied package, do not */
        out = api_sh("pk",
                     "pip install --no-cache-dir goodpkg jsonpkg 2>&1; echo rc=$?; "
                     "python3 -c 'import goodpkg, jsonpkg; print(\"have\", goodpkg.VERSION, jsonpkg.VERSION)'");
        cr_assert(strstr(out, "rc=0\nhave 1.0 1.0\n"), "%s", out);
        free(out);
        out = api_sh("pk", "pip install --no-cache-dir goodpkg==2.0 2>&1; echo rc=$?");
        cr_assert(strstr(out, "blocked by sandboxd package policy: goodpkg 2.0"), "%s", out);
        cr_assert(strstr(out, "rc=1\n"), "%s", out);
        free(out);
        /* a package denied whole: pip's default level names the policy (a page of another type is a warning) */
        out = api_sh("pk", "pip install --no-cache-dir evilpkg 2>&1; echo rc=$?");
        cr_assert(strstr(out, "blocked by sandboxd package policy: evilpkg"), "%s", out);
        cr_assert(strstr(out, "No matching distribution found for evilpkg"), "%s", out);
        cr_assert(strstr(out, "rc=1\n"), "%s", out);
        free(out);
        cr_assert(audited("pk", "pypi.test", "package_blocked:goodpkg@2.0"));
        cr_assert(audited("pk", "pypi.test", "package_blocked:evilpkg"));
        cr_assert(registry_saw("/packages/goodpkg-1.0-"), "the allowed wheel came from the registry");
        cr_assert_not(registry_saw("evilpkg"), "the registry was asked for the denied package");
        cr_assert_not(registry_saw("goodpkg-2.0"), "the registry was asked for the denied version");
        cr_assert(registry_saw("/packages/jsonpkg-1.0-"));
        cr_assert_not(registry_saw("jsonpkg-2.0"));

        /* npm: the host's npm and node in the workspace */
        fixture_container_of(d, "alice", "pk", id);
        snprintf(cmd, sizeof(cmd),
                 "docker cp /usr/lib/node_modules/npm %s:/workspace/npm >/dev/null && "
                 "docker cp /usr/bin/node %s:/workspace/npm/node >/dev/null",
                 id, id);
        cr_assert_eq(system(cmd), 0, "docker cp");
        out = api_sh("pk",
                     "mkdir -p /workspace/app && cd /workspace/app && export PATH=/workspace/npm:$PATH && "
                     "node /workspace/npm/bin/npm-cli.js install --no-audit --no-fund --no-update-notifier "
                     "okpkg 2>&1; echo rc=$?; node -e 'console.log(\"have\", require(\"okpkg\").v)'");
        cr_assert(strstr(out, "rc=0\nhave 1.0.0\n"), "%s", out);
        free(out);
        out = api_sh("pk",
                     "cd /workspace/app && export PATH=/workspace/npm:$PATH && "
                     "node /workspace/npm/bin/npm-cli.js install --no-audit --no-fund --no-update-notifier "
                     "okpkg@2.0.0 2>&1; echo rc=$?");
        cr_assert(strstr(out, "blocked by sandboxd package policy: okpkg 2.0.0"), "%s", out);
        cr_assert_null(strstr(out, "rc=0\n"), "%s", out);
        free(out);
        out = api_sh("pk",
                     "cd /workspace/app && export PATH=/workspace/npm:$PATH && "
                     "node /workspace/npm/bin/npm-cli.js install --no-audit --no-fund --no-update-notifier "
                     "badpkg 2>&1; echo rc=$?");
        cr_assert(strstr(out, "blocked by sandboxd package policy: badpkg"), "%s", out);
        cr_assert_null(strstr(out, "rc=0\n"), "%s", out);
        free(out);
        /* npm refused 2.0.0 from the packument (policyRestrictions): the tarball itself is still refused */
        snprintf(cmd, sizeof(cmd), "curl -s -w ' %%{http_code}' https://npm.test:%d/okpkg/-/okpkg-2.0.0.tgz", reg_port);
        out = api_sh("pk", cmd);
        cr_assert(strstr(out, "blocked by sandboxd package policy: okpkg 2.0.0"), "%s", out);
        cr_assert(strstr(out, " 403"), "%s", out);
        free(out);
        cr_assert(audited("pk", "npm.test", "package_blocked:okpkg@2.0.0"));
        cr_assert(audited("pk", "npm.test", "package_blocked:badpkg"));

        /* an intercepted connection is kept alive (curl reuses it: no new connect), each request judged on its
         * own (a refused one ends it), at most 100 requests on one */
        snprintf(cmd, sizeof(cmd),
                 "curl -s -w '%%{http_code}:%%{num_connects} ' -o /dev/null https://npm.test:%d/okpkg "
                 "-o /dev/null https://npm.test:%d/okpkg/-/okpkg-1.0.0.tgz "
                 "-o /dev/null https://npm.test:%d/okpkg/-/okpkg-2.0.0.tgz -o /dev/null https://npm.test:%d/okpkg",
                 reg_port, reg_port, reg_port, reg_port);
        out = api_sh("pk", cmd);
        cr_assert_str_eq(out, "200:1 200:0 403:0 200:1 [completed exited exit 0]");
        free(out);
        snprintf(cmd, sizeof(cmd), "curl -s -o /dev/null -w '%%{num_connects}' 'https://npm.test:%d/okpkg?[1-101]'",
                 reg_port);
        out = api_sh("pk", cmd);
        want[0] = '1';
        memset(want + 1, '0', 99);
        want[100] = '1';
        snprintf(want + 101, sizeof(want) - 101, "[completed exited exit 0]");
        cr_assert_str_eq(out, want, "a new connection for the 101st request only");
        free(out);
        cr_assert(registry_saw("/okpkg/-/okpkg-1.0.0.tgz"));
        cr_assert_not(registry_saw("badpkg"));
        cr_assert_not(registry_saw("okpkg-2.0.0"));

        cJSON_Delete(call(tok_a, "destroy_session", "{\"session\":\"pk\",\"purge\":true}"));
        daemon_close(d);
}
