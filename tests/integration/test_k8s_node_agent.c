/* test_k8s_node_agent.c — the node agent as the DaemonSet of
 * deploy/kubernetes/node-agent.yaml on the testbed (scripts/k8s-testbed.sh):
 * the manifest as written, with only what the loopback testbed needs
 * changed (a namespace of this run, hostNetwork and node.connect to the
 * control daemon on 127.0.0.1, the host paths moved into a directory of
 * this run, imagePullPolicy Never). Per-node certificates (CN = the node
 * name) are made here with openssl and laid out as a node's bootstrap
 * would; the CA and the CRL go into the ConfigMap. A control daemon runs in
 * this process with engine = kubernetes and node.listen on 127.0.0.1; both
 * agents (nodes `localhost` and `127.0.0.2`) must connect and turn Ready
 * through their readiness probe, and execs run in a few sessions, each
 * through the runner of a Pod that mounts {K8S_NODE_DIR}/$(its node)/...:
 * the directory the agent of the node kube-scheduler picked made and
 * listens in.
 *
 * Needs sandboxd/daemon:latest of this build on both nodes
 * (scripts/build-images.sh --only daemon, then k8s-testbed.sh
 * import-docker-image sandboxd/daemon:latest; scripts/test.sh --k8s does
 * both). Skips with the reason when SANDBOXD_K8S_KUBECONFIG is unset.
 * Everything is in a namespace of this run (labelled with the run label),
 * deleted at exit even after a failure, and the host directory (certificates,
 * node directories) is removed once the agents' Pods are gone. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "fixture.h"
#include "sandboxd/config.h"
#include "sandboxd/engine_kubernetes.h"
#include "sandboxd/node.h"
#include "sandboxd/session.h"
#include "k8senv.h"
#include "testenv.h"

#define NODE_A "localhost"
#define NODE_B "127.0.0.2"
#define DAEMON_IMAGE "sandboxd/daemon:latest"

static char ns[64];
static struct k8s_credentials creds;
static char *host_dir; /* this run's: pki/ (the nodes' bootstrap), node/ (K8S_NODE_DIR) */

static long kapi_type(const char *method, const char *path, const char *body, const char *type, char **ret)
{
        return k8senv_api(&creds, method, path, body, type, ret);
}

static long kapi(const char *method, const char *path, const char *body, char **ret)
{
        return kapi_type(method, path, body, "application/json", ret);
}

static const cJSON *jget(const cJSON *o, const char *path)
{
        return k8senv_jget(o, path);
}

static void release_log(void);
static char *pods_status(void);

static int pods_left(void)
{
        char path[256], *raw = NULL;
        int n = -1;

        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
        if (kapi("GET", path, NULL, &raw) == 200) {
                cJSON *j = cJSON_Parse(raw);
                n = cJSON_GetArraySize(jget(j, "items"));
                cJSON_Delete(j);
        } else {
                n = 0; /* the namespace is gone */
        }
        free(raw);
        return n;
}

/* The namespace (and so the DaemonSet, its Pods, the sandbox Pods), then the
 * host directory once no Pod of the run mounts it any more. */
static void cleanup(void)
{
        char path[256];

        release_log();
        if (!ns[0])
                return;
        /* what the agents said (a failure shows it; ctest prints a passing test's output only with -V) */
        char *agents = pods_status();
        if (agents && *agents)
                fprintf(stderr, "---- the Pods ----\n%s---- end ----\n", agents);
        free(agents);
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?gracePeriodSeconds=0", ns);
        (void)kapi("DELETE", path, NULL, NULL);
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s?gracePeriodSeconds=0", ns);
        (void)kapi("DELETE", path, NULL, NULL);
        (void)TESTENV_WAIT_UNTIL(pods_left() == 0, 60000);
        if (host_dir) {
                char cmd[SBX_PATH_MAX + 32];
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", host_dir);
                if (system(cmd) != 0)
                        fprintf(stderr, "cannot remove %s\n", host_dir);
        }
        ns[0] = '\0';
}

static bool cluster(void)
{
        const char *kc = getenv("SANDBOXD_K8S_KUBECONFIG");
        struct sbx_error err = {0};
        char body[512];
        size_t o;
        long st;

        if (!kc || !*kc)
                return false;
        (void)testenv_docker(); /* curl_global_init, and the run's atexit cleanup (which runs after ours) */
        cr_assert_eq(k8s_kubeconfig_load(kc, &creds, &err), 0, "%s", err.msg);
        o = (size_t)snprintf(ns, sizeof(ns), "sbx-na-");
        for (const char *p = testenv_run_id(); *p && o < 40; p++)
                ns[o++] = isalnum((unsigned char)*p) ? (char)tolower((unsigned char)*p) : '-';
        snprintf(ns + o, sizeof(ns) - o, "-%d", (int)getpid());
        snprintf(
                body, sizeof(body),
                "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"%s\",\"labels\":{\"%s\":\"%s\"}}}",
                ns, TESTENV_RUN_LABEL, testenv_run_id());
        /* a host directory of this run, outside testenv's (removed only after the Pods went) */
        char tmpl[160];
        snprintf(tmpl, sizeof(tmpl), "/var/tmp/sandboxd-k8s-node-%s-XXXXXX", ns + 7);
        cr_assert_not_null(mkdtemp(tmpl));
        host_dir = strdup(tmpl);
        atexit(cleanup);
        st = kapi("POST", "/api/v1/namespaces", body, NULL);
        cr_assert(st == 201, "creating namespace %s: HTTP %ld", ns, st);
        snprintf(body, sizeof(body), "/api/v1/namespaces/%s/serviceaccounts/default", ns);
        cr_assert(TESTENV_WAIT_UNTIL(kapi("GET", body, NULL, NULL) == 200, 30000),
                  "namespace %s has its default service account", ns);
        return true;
}

/* ---- the manifests, as cJSON ---- */

/* Plain scalars typed as YAML 1.1 does for what the manifests use: booleans,
 * integers, octal modes; everything quoted stays a string. */
static cJSON *yaml_to_json(yaml_document_t *d, yaml_node_t *n)
{
        cJSON *o;

        switch (n->type) {
        case YAML_SCALAR_NODE: {
                const char *v = (const char *)n->data.scalar.value;
                char *end;
                if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
                        if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0)
                                return cJSON_CreateBool(v[0] == 't');
                        if (v[0] == '0' && v[1]) {
                                long m = strtol(v, &end, 8);
                                if (!*end)
                                        return cJSON_CreateNumber((double)m);
                        } else if (*v) {
                                long m = strtol(v, &end, 10);
                                if (!*end)
                                        return cJSON_CreateNumber((double)m);
                        }
                }
                return cJSON_CreateString(v);
        }
        case YAML_SEQUENCE_NODE:
                o = cJSON_CreateArray();
                for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++)
                        cJSON_AddItemToArray(o, yaml_to_json(d, yaml_document_get_node(d, *i)));
                return o;
        case YAML_MAPPING_NODE:
                o = cJSON_CreateObject();
                for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++)
                        cJSON_AddItemToObject(o, (const char *)yaml_document_get_node(d, p->key)->data.scalar.value,
                                              yaml_to_json(d, yaml_document_get_node(d, p->value)));
                return o;
        default:
                return cJSON_CreateNull();
        }
}

/* Every document of deploy/kubernetes/FILE, as a JSON array. */
static cJSON *deploy_docs(const char *file)
{
        char path[512];
        FILE *f;
        yaml_parser_t parser;
        cJSON *all = cJSON_CreateArray();

        snprintf(path, sizeof(path), "%s/deploy/kubernetes/%s", SANDBOXD_SOURCE_DIR, file);
        f = fopen(path, "r");
        cr_assert_not_null(f, "%s", path);
        yaml_parser_initialize(&parser);
        yaml_parser_set_input_file(&parser, f);
        for (;;) {
                yaml_document_t doc;
                yaml_node_t *root;
                cr_assert(yaml_parser_load(&parser, &doc), "%s is YAML", path);
                root = yaml_document_get_root_node(&doc);
                if (!root) {
                        yaml_document_delete(&doc);
                        break;
                }
                cJSON_AddItemToArray(all, yaml_to_json(&doc, root));
                yaml_document_delete(&doc);
        }
        yaml_parser_delete(&parser);
        fclose(f);
        return all;
}

/* s with every `from` replaced by `to` (malloc'd). */
static char *replace_all(const char *s, const char *from, const char *to)
{
        size_t fl = strlen(from), tl = strlen(to), n = 0;
        for (const char *p = s; (p = strstr(p, from)); p += fl)
                n++;
        char *out = malloc(strlen(s) + n * tl + 1), *w = out;
        cr_assert_not_null(out);
        for (const char *p = s, *q; *p; p = q + fl) {
                q = strstr(p, from);
                if (!q) {
                        strcpy(w, p);
                        return out;
                }
                memcpy(w, p, (size_t)(q - p));
                w += q - p;
                memcpy(w, to, tl);
                w += tl;
        }
        *w = '\0';
        return out;
}

static const char *kind_of(const cJSON *doc)
{
        const cJSON *k = jget(doc, "kind");
        return cJSON_IsString(k) ? k->valuestring : "";
}

static const char *name_of(const cJSON *doc)
{
        const cJSON *k = jget(doc, "metadata.name");
        return cJSON_IsString(k) ? k->valuestring : "";
}

static const char *name_of_volume(const cJSON *v)
{
        const cJSON *k = jget(v, "name");
        return cJSON_IsString(k) ? k->valuestring : "";
}

static void set_string(cJSON *o, const char *key, const char *value)
{
        if (cJSON_GetObjectItem(o, key))
                cJSON_ReplaceItemInObject(o, key, cJSON_CreateString(value));
        else
                cJSON_AddStringToObject(o, key, value);
}

static char *slurp(const char *path)
{
        FILE *f = fopen(path, "r");
        char *buf = NULL;
        size_t len = 0;

        cr_assert_not_null(f, "%s", path);
        FILE *out = open_memstream(&buf, &len);
        for (int ch; (ch = fgetc(f)) != EOF;)
                fputc(ch, out);
        fclose(out);
        fclose(f);
        return buf;
}

/* The collection path of a namespaced object of this kind. */
static void collection(const char *kind, char *path, size_t size)
{
        if (strcmp(kind, "ConfigMap") == 0)
                snprintf(path, size, "/api/v1/namespaces/%s/configmaps", ns);
        else if (strcmp(kind, "Service") == 0)
                snprintf(path, size, "/api/v1/namespaces/%s/services", ns);
        else if (strcmp(kind, "PersistentVolumeClaim") == 0)
                snprintf(path, size, "/api/v1/namespaces/%s/persistentvolumeclaims", ns);
        else if (strcmp(kind, "DaemonSet") == 0)
                snprintf(path, size, "/apis/apps/v1/namespaces/%s/daemonsets", ns);
        else if (strcmp(kind, "Deployment") == 0)
                snprintf(path, size, "/apis/apps/v1/namespaces/%s/deployments", ns);
        else if (strcmp(kind, "NetworkPolicy") == 0)
                snprintf(path, size, "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies", ns);
        else
                cr_assert_fail("no collection for a %s", kind);
}

/* Into the run's namespace, with the run label. */
static void own(cJSON *doc)
{
        cJSON *meta = cJSON_GetObjectItem(doc, "metadata"), *labels = cJSON_GetObjectItem(meta, "labels");
        set_string(meta, "namespace", ns);
        if (!labels)
                labels = cJSON_AddObjectToObject(meta, "labels");
        set_string(labels, TESTENV_RUN_LABEL, testenv_run_id());
}

/* ---- certificates: a CA, the control's, one per node (CN = its name), an empty CRL ---- */

static void sh(const char *dir, const char *script)
{
        char *cmd;
        cr_assert(asprintf(&cmd, "cd '%s' && { %s ; } >/dev/null 2>&1", dir, script) > 0);
        int st = system(cmd);
        cr_assert(st == 0, "failed: %s", script);
        free(cmd);
}

#define KEY "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

/* In dir/pki: ca.pem, crl.pem, sandboxd-control.{pem,key}, and, as each node's
 * bootstrap lays them out, <node>/node.{pem,key}. */
static void make_pki(const char *pki)
{
        static const char *names[] = {"sandboxd-control", NODE_A, NODE_B};
        char script[2048];

        sh(pki, "openssl req -x509 " KEY
                " -keyout ca.key -out ca.pem -days 2 -subj /CN=sandboxd-test-node-ca "
                "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign");
        for (size_t i = 0; i < 3; i++) {
                snprintf(script, sizeof(script),
                         "openssl req " KEY
                         " -keyout k.key -out k.csr -subj '/CN=%s' && "
                         "printf 'subjectAltName=DNS:%s\\n' > k.ext && "
                         "openssl x509 -req -in k.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
                         "-extfile k.ext -out k.pem && rm -f k.csr k.ext",
                         names[i], names[i]);
                sh(pki, script);
                if (i == 0)
                        sh(pki, "mv k.pem sandboxd-control.pem && mv k.key sandboxd-control.key");
                else {
                        snprintf(script, sizeof(script),
                                 "install -d -m 0700 '%s' && mv k.pem '%s/node.pem' && mv k.key '%s/node.key' && "
                                 "chmod 0600 '%s/node.key'",
                                 names[i], names[i], names[i], names[i]);
                        sh(pki, script);
                }
        }
        sh(pki,
           "printf '[ ca ]\\ndefault_ca = d\\n[ d ]\\ndatabase = index.txt\\ncrlnumber = crlnumber\\n"
           "default_md = sha256\\ndefault_crl_days = 2\\ncertificate = ca.pem\\nprivate_key = ca.key\\n' > ca.cnf "
           "&& touch index.txt && echo 1000 > crlnumber && openssl ca -config ca.cnf -gencrl -out crl.pem");
}

/* ---- the control daemon's log: which nodes connected ---- */

static int saved_stderr = -1;
static char log_path[SBX_PATH_MAX];

static void capture_log(void)
{
        snprintf(log_path, sizeof(log_path), "%s/control.log", host_dir);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert(fd >= 0);
        saved_stderr = dup(2);
        cr_assert(saved_stderr >= 0 && dup2(fd, 2) == 2);
        close(fd);
}

/* Back to the real stderr, with what was logged meanwhile (a failure shows it). */
static void release_log(void)
{
        if (saved_stderr < 0)
                return;
        dup2(saved_stderr, 2);
        close(saved_stderr);
        saved_stderr = -1;
        char *text = slurp(log_path);
        fprintf(stderr, "---- the control daemon's log ----\n%s---- end ----\n", text);
        free(text);
}

static bool logged(const char *what)
{
        char *text = slurp(log_path);
        bool r = strstr(text, what) != NULL;
        free(text);
        return r;
}

static int free_port(void)
{
        /* 22000-23999: test_kubernetes.c and nodeenv.c take none of them */
        for (int i = 0; i < 2000; i++) {
                int port = 22000 + (int)((getpid() * 7 + i) % 2000);
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
                sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
                close(fd);
                if (r == 0)
                        return port;
        }
        cr_assert_fail("no free port in 22000-23999");
        return -1;
}

/* The DaemonSet's status: both nodes scheduled and Ready (the readiness probe reads the link). */
static bool daemonset_ready(int *ret_ready)
{
        char path[256], *raw = NULL;
        bool ok = false;

        snprintf(path, sizeof(path), "/apis/apps/v1/namespaces/%s/daemonsets/sandboxd-node", ns);
        if (kapi("GET", path, NULL, &raw) == 200) {
                cJSON *j = cJSON_Parse(raw);
                const cJSON *want = jget(j, "status.desiredNumberScheduled"), *ready = jget(j, "status.numberReady");
                *ret_ready = cJSON_IsNumber(ready) ? ready->valueint : 0;
                ok = cJSON_IsNumber(want) && want->valueint == 2 && *ret_ready == 2;
                cJSON_Delete(j);
        }
        free(raw);
        return ok;
}

/* Why the agents' Pods are not running, for a failure message (malloc'd). */
static char *pods_status(void)
{
        char path[256], *raw = NULL, *out = NULL;
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
        (void)kapi("GET", path, NULL, &raw);
        cJSON *j = cJSON_Parse(raw ? raw : "{}"), *pod;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        cJSON_ArrayForEach(pod, jget(j, "items")) {
                char *st = cJSON_PrintUnformatted(jget(pod, "status.containerStatuses")), *log = NULL;
                fprintf(f, "%s on %s: %s\n", name_of(pod),
                        cJSON_IsString(jget(pod, "spec.nodeName")) ? jget(pod, "spec.nodeName")->valuestring : "-",
                        st ? st : "-");
                free(st);
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/log?tailLines=20", ns, name_of(pod));
                if (kapi("GET", path, NULL, &log) == 200)
                        fprintf(f, "%s\n", log);
                free(log);
        }
        fclose(f);
        cJSON_Delete(j);
        free(raw);
        return out;
}

static bool has_image(const char *node)
{
        char path[256], *raw = NULL;
        bool found = false;

        snprintf(path, sizeof(path), "/api/v1/nodes/%s", node);
        if (kapi("GET", path, NULL, &raw) == 200 && strstr(raw, "sandboxd/daemon:latest"))
                found = true;
        free(raw);
        return found;
}

/* The first line a shell command prints (a fragment of test constants and ids only), malloc'd. */
static char *first_line(const char *cmd)
{
        FILE *p = popen(cmd, "r");
        char buf[256] = "";

        cr_assert_not_null(p, "%s", cmd);
        if (!fgets(buf, sizeof(buf), p))
                buf[0] = '\0';
        pclose(p);
        buf[strcspn(buf, "\n")] = '\0';
        return strdup(buf);
}

/* The agent the nodes run is this build's: dockerd's sandboxd/daemon holds this
 * build's sandboxd, and the image the agents' Pods run is that one. */
static void agents_are_this_build(void)
{
        char cmd[1024], path[256], *raw = NULL, *built, *in_image, *image_id;
        cJSON *j, *pod;
        int n = 0;

        snprintf(cmd, sizeof(cmd), "sha256sum '%s/sandboxd' | cut -d' ' -f1", SANDBOXD_BINARY_DIR);
        built = first_line(cmd);
        snprintf(cmd, sizeof(cmd),
                 "docker run --rm --network none --label %s=%s --entrypoint sha256sum %s /usr/bin/sandboxd "
                 "2>/dev/null | cut -d' ' -f1",
                 TESTENV_RUN_LABEL, testenv_run_id(), DAEMON_IMAGE);
        in_image = first_line(cmd);
        image_id = first_line("docker image inspect -f '{{.Id}}' " DAEMON_IMAGE " 2>/dev/null");
        cr_assert_str_eq(in_image, built,
                         "dockerd's %s is not this build's sandboxd: scripts/build-images.sh --only daemon "
                         "(SANDBOXD_BUILD_DIR=%s), then k8s-testbed.sh import-docker-image %s",
                         DAEMON_IMAGE, SANDBOXD_BINARY_DIR, DAEMON_IMAGE);
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io/component%%3Dnode",
                 ns);
        cr_assert_eq(kapi("GET", path, NULL, &raw), 200);
        j = cJSON_Parse(raw);
        cJSON_ArrayForEach(pod, jget(j, "items")) {
                const cJSON *id = jget(cJSON_GetArrayItem(jget(pod, "status.containerStatuses"), 0), "imageID");
                cr_expect(cJSON_IsString(id) && strcmp(id->valuestring, image_id) == 0,
                          "the agent on %s runs %s, dockerd's %s is %s: k8s-testbed.sh import-docker-image %s",
                          jget(pod, "spec.nodeName")->valuestring, cJSON_IsString(id) ? id->valuestring : "-",
                          DAEMON_IMAGE, image_id, DAEMON_IMAGE);
                n++;
        }
        cr_expect_eq(n, 2, "two agents");
        cJSON_Delete(j);
        free(raw);
        free(built);
        free(in_image);
        free(image_id);
}

Test(k8s_node_agent, the_daemonset_agents_connect_and_a_runner_reaches_the_control_through_one, .timeout = 600)
{
        const char *kc = getenv("SANDBOXD_K8S_KUBECONFIG");
        char pki[SBX_PATH_MAX], node_dir[SBX_PATH_MAX], path[SBX_PATH_MAX], connect[64], prefix[SBX_PATH_MAX];
        struct sbx_config cfg;
        struct sbx_error err = {0};
        struct daemon *d;
        cJSON *docs, *doc;
        int ready = 0;

        if (!kc || !*kc)
                cr_skip_test(
                        "no Kubernetes testbed: SANDBOXD_K8S_KUBECONFIG is unset "
                        "(bash scripts/k8s-testbed.sh start prints one)");
        cr_assert(cluster());
        cr_assert(has_image(NODE_A) && has_image(NODE_B),
                  "%s is on both nodes (scripts/build-images.sh --only daemon; k8s-testbed.sh import-docker-image %s)",
                  DAEMON_IMAGE, DAEMON_IMAGE);
        snprintf(pki, sizeof(pki), "%s/pki", host_dir);
        snprintf(node_dir, sizeof(node_dir), "%s/node", host_dir);
        cr_assert_eq(mkdir(pki, 0700), 0);
        make_pki(pki);

        /* the control daemon: engine = kubernetes, the node link on loopback, serving both nodes */
        fixture_config(&cfg);
        snprintf(cfg.engine, sizeof(cfg.engine), "kubernetes");
        snprintf(cfg.kube_config, sizeof(cfg.kube_config), "%s", kc);
        snprintf(cfg.kube_namespace, sizeof(cfg.kube_namespace), "%s", ns);
        snprintf(cfg.kube_image_pull_policy, sizeof(cfg.kube_image_pull_policy), "Never");
        /* installed on the node by the DaemonSet's init container */
        snprintf(cfg.kube_init_binary, sizeof(cfg.kube_init_binary), "%s/bin/tini-static", node_dir);
        snprintf(cfg.node_listen, sizeof(cfg.node_listen), "127.0.0.1:%d", free_port());
        snprintf(cfg.node_cert, sizeof(cfg.node_cert), "%s/sandboxd-control.pem", pki);
        snprintf(cfg.node_key, sizeof(cfg.node_key), "%s/sandboxd-control.key", pki);
        snprintf(cfg.node_ca, sizeof(cfg.node_ca), "%s/ca.pem", pki);
        snprintf(cfg.node_crl, sizeof(cfg.node_crl), "%s/crl.pem", pki);
        snprintf(cfg.kube_node_dir, sizeof(cfg.kube_node_dir), "%s", node_dir);
        cfg.node_heartbeat_ms = 1000;
        snprintf(connect, sizeof(connect), "%s", cfg.node_listen);
        capture_log();
        d = fixture_open(&cfg, true);

        /* deploy/kubernetes/node-agent.yaml, moved onto the testbed */
        {
                char *text = cJSON_PrintUnformatted(docs = deploy_docs("node-agent.yaml")), *a, *b, *c;
                cJSON_Delete(docs);
                a = replace_all(text, "sandboxd-node-link.sandboxd.svc:7443", connect);
                b = replace_all(a, "/var/lib/sandboxd-node", node_dir);
                c = replace_all(b, "/etc/sandboxd/node-link", pki); /* the nodes' bootstrap dir; -ca stays in the Pod */
                docs = cJSON_Parse(c);
                free(text);
                free(a);
                free(b);
                free(c);
        }
        cr_assert_eq(cJSON_GetArraySize(docs), 3, "node-agent.yaml: two ConfigMaps and the DaemonSet");
        cJSON_ArrayForEach(doc, docs) {
                own(doc);
                if (strcmp(name_of(doc), "sandboxd-node-link-ca") == 0) {
                        cJSON *data = cJSON_GetObjectItem(doc, "data");
                        snprintf(path, sizeof(path), "%s/ca.pem", pki);
                        char *ca = slurp(path);
                        snprintf(path, sizeof(path), "%s/crl.pem", pki);
                        char *crl = slurp(path);
                        set_string(data, "ca.pem", ca);
                        set_string(data, "crl.pem", crl);
                        free(ca);
                        free(crl);
                } else if (strcmp(kind_of(doc), "DaemonSet") == 0) {
                        cJSON *spec = (cJSON *)jget(doc, "spec.template.spec"), *ct;
                        /* Pods here have only lo: the control is on the host's loopback */
                        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(spec, "hostNetwork")));
                        cJSON_ReplaceItemInObject(spec, "hostNetwork", cJSON_CreateTrue());
                        cJSON_AddStringToObject(spec, "dnsPolicy", "ClusterFirstWithHostNet");
                        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(spec, "hostPID")));
                        cJSON_ArrayForEach(ct, cJSON_GetObjectItem(spec, "initContainers"))
                                set_string(ct, "imagePullPolicy", "Never");
                        cJSON_ArrayForEach(ct, cJSON_GetObjectItem(spec, "containers"))
                                set_string(ct, "imagePullPolicy", "Never");
                        cJSON *labels = (cJSON *)jget(doc, "spec.template.metadata.labels");
                        set_string(labels, TESTENV_RUN_LABEL, testenv_run_id());
                }
                char *body = cJSON_PrintUnformatted(doc), *raw = NULL;
                collection(kind_of(doc), path, sizeof(path));
                long st = kapi("POST", path, body, &raw);
                cr_assert_eq(st, 201, "%s %s: HTTP %ld: %s", kind_of(doc), name_of(doc), st, raw ? raw : "");
                free(raw);
                free(body);
        }
        cJSON_Delete(docs);

        /* both agents up: the DaemonSet Ready on both nodes, and the control saw both */
        bool up = TESTENV_WAIT_UNTIL(daemonset_ready(&ready), 180000);
        if (!up) {
                char *why = pods_status();
                release_log();
                cr_assert_fail("the DaemonSet is Ready on both nodes (%d ready): %s", ready, why);
        }
        agents_are_this_build();
        cr_expect(TESTENV_WAIT_UNTIL(logged("node link: node " NODE_A " connected"), 30000), "node %s connected",
                  NODE_A);
        cr_expect(TESTENV_WAIT_UNTIL(logged("node link: node " NODE_B " connected"), 30000), "node %s connected",
                  NODE_B);
        cr_expect(node_server_node_connected(d->node, NODE_A) && node_server_node_connected(d->node, NODE_B),
                  "the control serves both nodes");
        /* each agent's data_dir is {K8S_NODE_DIR}/<node name> on the host */
        snprintf(path, sizeof(path), "%s/" NODE_A "/link", node_dir);
        char *state = slurp(path);
        cr_expect_str_eq(state, "up sandboxd-control\n", "%s", path);
        free(state);
        snprintf(path, sizeof(path), "%s/" NODE_B "/link", node_dir);
        state = slurp(path);
        cr_expect_str_eq(state, "up sandboxd-control\n", "%s", path);
        free(state);

        /* execs through runners that reached the control through the agent of the node their Pod
         * landed on (kube-scheduler places them; a few sessions, so both nodes are likely used) */
        for (int i = 0; i < 3; i++) {
                char sess[16], id[65], *raw = NULL, where[256];
                snprintf(sess, sizeof(sess), "na%d", i + 1);
                _cleanup_free_ char *out = fixture_run(d, sess, "echo through-the-agent", 0, NULL);
                if (strcmp(out, "through-the-agent\n") != 0) {
                        char *why = pods_status();
                        cr_expect_fail("the exec ran through the agent's runner, got '%s'; the Pods:\n%s", out, why);
                        free(why);
                }
                fixture_container_of(d, "u1", sess, id);
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, id);
                cr_assert_eq(kapi("GET", path, NULL, &raw), 200);
                cJSON *pod = cJSON_Parse(raw), *v;
                const char *session_dir = NULL, *runner = NULL, *sub = NULL;
                const cJSON *nn = jget(pod, "spec.nodeName");
                cr_assert(cJSON_IsString(nn), "the Pod is bound");
                cJSON_ArrayForEach(v, (cJSON *)jget(pod, "spec.volumes")) {
                        const cJSON *hp = jget(v, "hostPath.path");
                        if (strcmp(name_of_volume(v), "session-dir") == 0 && cJSON_IsString(hp))
                                session_dir = hp->valuestring;
                        if (strcmp(name_of_volume(v), "runner") == 0 && cJSON_IsString(hp))
                                runner = hp->valuestring;
                }
                cJSON_ArrayForEach(v,
                                   (cJSON *)jget(cJSON_GetArrayItem(jget(pod, "spec.containers"), 0), "volumeMounts")) {
                        const cJSON *se = jget(v, "subPathExpr");
                        if (strcmp(name_of_volume(v), "session-dir") == 0 && cJSON_IsString(se))
                                sub = se->valuestring;
                }
                cr_log_info("session %s: Pod on node %s", sess, nn->valuestring);
                /* the Pod mounts {K8S_NODE_DIR}/$(its node)/runner/<hash>: the agent of its node made it */
                cr_expect(session_dir && strcmp(session_dir, node_dir) == 0, "the session directory's root is %s: %s",
                          node_dir, session_dir ? session_dir : "-");
                cr_expect(sub && strncmp(sub, "$(SBX_NODE_NAME)/runner/", 24) == 0, "subPathExpr %s", sub ? sub : "-");
                if (sub) {
                        struct stat st;
                        snprintf(where, sizeof(where), "%s/%s/%s/runner.sock", node_dir, nn->valuestring, sub + 17);
                        cr_expect(lstat(where, &st) == 0 && S_ISSOCK(st.st_mode),
                                  "the agent of node %s listens in the Pod's directory: %s", nn->valuestring, where);
                }
                snprintf(prefix, sizeof(prefix), "%s/bin/sandboxd-runner", node_dir);
                cr_expect(runner && strcmp(runner, prefix) == 0,
                          "the runner is the node's, installed by the DaemonSet: %s", runner ? runner : "-");
                cJSON_Delete(pod);
                free(raw);
                cr_expect_eq(session_destroy(d->sessions, "u1", sess, true, &err), 0, "%s", err.msg);
        }

        /* the liveness probe's sign: the loop refreshes the link file's mtime */
        snprintf(path, sizeof(path), "%s/" NODE_B "/link", node_dir);
        struct stat before;
        cr_assert_eq(stat(path, &before), 0);
        cr_expect(TESTENV_WAIT_UNTIL(({
                                             struct stat now;
                                             stat(path, &now) == 0 && now.st_mtim.tv_sec > before.st_mtim.tv_sec;
                                     }),
                                     30000),
                  "the idle agent's loop refreshes %s", path);

        /* the control gone: each agent says so, and the readiness probe takes the Pods out */
        daemon_close(d);
        snprintf(path, sizeof(path), "%s/" NODE_A "/link", node_dir);
        cr_expect(TESTENV_WAIT_UNTIL(({
                                             char *t = slurp(path);
                                             bool down = strcmp(t, "down\n") == 0;
                                             free(t);
                                             down;
                                     }),
                                     30000),
                  "%s says down", path);
        cr_expect(TESTENV_WAIT_UNTIL(!daemonset_ready(&ready) && ready == 0, 90000),
                  "no agent is Ready without its link (%d ready)", ready);
        release_log();
}

/* The control daemon's objects of deploy/kubernetes/daemon.yaml, and the
 * NetworkPolicies, are what the API server accepts (a server-side dry run in
 * the run's namespace: a wrong type or field name is refused); the Service
 * for the node link points at the port node.listen names, and the daemon's
 * policy lets the node agents in on it. */
Test(k8s_node_agent, the_control_manifests_are_accepted_and_expose_the_node_link)
{
        const char *kc = getenv("SANDBOXD_K8S_KUBECONFIG");
        char path[SBX_PATH_MAX];
        cJSON *docs, *doc;
        bool link_service = false, listen = false;

        if (!kc || !*kc)
                cr_skip_test(
                        "no Kubernetes testbed: SANDBOXD_K8S_KUBECONFIG is unset "
                        "(bash scripts/k8s-testbed.sh start prints one)");
        cr_assert(cluster());
        docs = deploy_docs("daemon.yaml");
        cJSON_ArrayForEach(doc, docs) {
                own(doc);
                if (strcmp(kind_of(doc), "Service") == 0 && strcmp(name_of(doc), "sandboxd-node-link") == 0) {
                        const cJSON *port = cJSON_GetArrayItem(jget(doc, "spec.ports"), 0);
                        link_service =
                                cJSON_IsNumber(jget(port, "targetPort")) && jget(port, "targetPort")->valueint == 7443;
                }
                if (strcmp(kind_of(doc), "ConfigMap") == 0) {
                        /* not jget: the key holds a '.' */
                        const cJSON *conf = cJSON_GetObjectItem(jget(doc, "data"), "sandboxd.conf");
                        listen = cJSON_IsString(conf) && strstr(conf->valuestring, "[node]\nlisten = 0.0.0.0:7443");
                }
                char *body = cJSON_PrintUnformatted(doc), *raw = NULL;
                collection(kind_of(doc), path, sizeof(path));
                strncat(path, "?dryRun=All", sizeof(path) - strlen(path) - 1);
                long st = kapi("POST", path, body, &raw);
                cr_expect_eq(st, 201, "%s %s: HTTP %ld: %s", kind_of(doc), name_of(doc), st, raw ? raw : "");
                free(raw);
                free(body);
        }
        cJSON_Delete(docs);
        /* and the policies that let the agents (and only them) reach the node link */
        bool agents_in = false;
        docs = deploy_docs("networkpolicies.yaml");
        cJSON_ArrayForEach(doc, docs) {
                own(doc);
                if (strcmp(name_of(doc), "sandboxd-daemon") == 0) {
                        char *text = cJSON_PrintUnformatted(jget(doc, "spec.ingress"));
                        agents_in = strstr(text, "component\":\"node\"") && strstr(text, "7443");
                        free(text);
                }
                char *body = cJSON_PrintUnformatted(doc), *raw = NULL;
                collection(kind_of(doc), path, sizeof(path));
                strncat(path, "?dryRun=All", sizeof(path) - strlen(path) - 1);
                long st = kapi("POST", path, body, &raw);
                cr_expect_eq(st, 201, "%s %s: HTTP %ld: %s", kind_of(doc), name_of(doc), st, raw ? raw : "");
                free(raw);
                free(body);
        }
        cJSON_Delete(docs);
        cr_expect(agents_in, "the control daemon's NetworkPolicy lets the node agents reach 7443");
        cr_expect(link_service, "daemon.yaml has the Service sandboxd-node-link to port 7443");
        cr_expect(listen, "the control daemon's config listens for node agents on 7443");
}
