/* k8s_config.c — the credentials of the Kubernetes engine: a kubeconfig
 * (YAML, read with libyaml's document loader) or the in-cluster service
 * account. Only what the engine uses is read: the current context's
 * cluster and user, and its namespace. Exec plugins and auth providers are
 * refused with a message, never run. No state. */
#include "k8s_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "sandboxd/utf8.h"

#define CRED_FILE_MAX (1u << 20) /* a CA bundle, a key, a token: 1 MiB at most */
#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

void k8s_credentials_done(struct k8s_credentials *c)
{
        if (!c)
                return;
        free(c->ca_pem);
        if (c->key_pem)
                explicit_bzero(c->key_pem, c->key_len);
        free(c->key_pem);
        free(c->cert_pem);
        if (c->token)
                explicit_bzero(c->token, strlen(c->token));
        free(c->token);
        memset(c, 0, sizeof(*c));
}

/* A whole small file, NUL-terminated. */
static int read_file(const char *path, char **ret, size_t *ret_len)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        char *buf;
        ssize_t n;
        size_t len = 0;

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)CRED_FILE_MAX) {
                close(fd);
                return -EINVAL;
        }
        buf = malloc((size_t)st.st_size + 1);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        while (len < (size_t)st.st_size && (n = read(fd, buf + len, (size_t)st.st_size - len)) > 0)
                len += (size_t)n;
        close(fd);
        buf[len] = '\0';
        *ret = buf;
        *ret_len = len;
        return 0;
}

static yaml_node_t *map_get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
        if (!map || map->type != YAML_MAPPING_NODE)
                return NULL;
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
                yaml_node_t *k = yaml_document_get_node(d, p->key);
                if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
                        return yaml_document_get_node(d, p->value);
        }
        return NULL;
}

static const char *scalar(yaml_node_t *n)
{
        return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The entry named `name` of a list of {name:, <field>: {...}} (clusters,
 * users, contexts): its <field> mapping. */
static yaml_node_t *named(yaml_document_t *d, yaml_node_t *root, const char *list, const char *field, const char *name)
{
        yaml_node_t *seq = map_get(d, root, list);

        if (!seq || seq->type != YAML_SEQUENCE_NODE)
                return NULL;
        for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
                yaml_node_t *e = yaml_document_get_node(d, *it);
                const char *n = scalar(map_get(d, e, "name"));
                if (n && strcmp(n, name) == 0)
                        return map_get(d, e, field);
        }
        return NULL;
}

/* field-data (base64) or field (a file, relative to dir): its bytes. */
static int data_or_file(yaml_document_t *d, yaml_node_t *map, const char *field, const char *dir, char **ret,
                        size_t *ret_len, struct sbx_error *err)
{
        char key[64], path[SBX_PATH_MAX];
        const char *b64, *file;
        unsigned char *bytes;
        size_t n;
        int r;

        snprintf(key, sizeof(key), "%s-data", field);
        b64 = scalar(map_get(d, map, key));
        if (b64) {
                r = base64_decode(b64, strlen(b64), &bytes, &n);
                if (r < 0)
                        return sbx_error_set(err, -EINVAL, 0, "kubeconfig: %s is not base64", key);
                *ret = realloc(bytes, n + 1);
                if (!*ret) {
                        free(bytes);
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                }
                (*ret)[n] = '\0';
                *ret_len = n;
                return 1;
        }
        file = scalar(map_get(d, map, field));
        if (!file)
                return 0;
        if (snprintf(path, sizeof(path), "%s%s%s", file[0] == '/' ? "" : dir, file[0] == '/' ? "" : "/", file) >=
            (int)sizeof(path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "kubeconfig: %s path too long", field);
        r = read_file(path, ret, ret_len);
        if (r < 0)
                return sbx_error_set(err, r, 0, "kubeconfig: cannot read %s %s: %s", field, path, strerror(-r));
        return 1;
}

static int server_ok(const char *s, struct sbx_error *err)
{
        if (strncmp(s, "https://", 8) == 0)
                return 0;
        /* plain HTTP only to this host: the tests' fake API server */
        if (strncmp(s, "http://127.", 11) == 0 || strncmp(s, "http://[::1]", 12) == 0 ||
            strncmp(s, "http://localhost", 16) == 0)
                return 0;
        return sbx_error_set(err, -EINVAL, 0, "the API server %s is neither https:// nor on loopback", s);
}

static void strip_slash(char *s)
{
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '/')
                s[--n] = '\0';
}

int k8s_kubeconfig_load(const char *path, struct k8s_credentials *ret, struct sbx_error *err)
{
        struct k8s_credentials c = {0};
        yaml_parser_t parser;
        yaml_document_t doc;
        yaml_node_t *root, *cluster, *user, *ctx;
        const char *cur, *cname, *uname, *s, *ns;
        char *text = NULL, dir[SBX_PATH_MAX], pathcopy[SBX_PATH_MAX];
        size_t len;
        int r;

        r = read_file(path, &text, &len);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot read the kubeconfig %s: %s", path, strerror(-r));
        sbx_strlcpy(pathcopy, path, sizeof(pathcopy));
        sbx_strlcpy(dir, dirname(pathcopy), sizeof(dir));
        if (!yaml_parser_initialize(&parser)) {
                free(text);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        if (!yaml_parser_load(&parser, &doc)) {
                r = sbx_error_set(err, -EINVAL, 0, "kubeconfig %s: not YAML (line %zu: %s)", path,
                                  parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
                yaml_parser_delete(&parser);
                free(text);
                return r;
        }
        yaml_parser_delete(&parser);
        free(text);
        root = yaml_document_get_root_node(&doc);
        cur = scalar(map_get(&doc, root, "current-context"));
        if (!root || root->type != YAML_MAPPING_NODE) {
                r = sbx_error_set(err, -EINVAL, 0, "kubeconfig %s: not a mapping", path);
                goto out;
        }
        if (!cur || !*cur) {
                r = sbx_error_set(err, -EINVAL, 0, "kubeconfig %s: no current-context", path);
                goto out;
        }
        ctx = named(&doc, root, "contexts", "context", cur);
        cname = scalar(map_get(&doc, ctx, "cluster"));
        uname = scalar(map_get(&doc, ctx, "user"));
        if (!ctx || !cname) {
                r = sbx_error_set(err, -EINVAL, 0, "kubeconfig %s: context '%s' missing or without a cluster", path,
                                  cur);
                goto out;
        }
        ns = scalar(map_get(&doc, ctx, "namespace"));
        if (ns)
                sbx_strlcpy(c.namespace, ns, sizeof(c.namespace));
        cluster = named(&doc, root, "clusters", "cluster", cname);
        s = scalar(map_get(&doc, cluster, "server"));
        if (!s) {
                r = sbx_error_set(err, -EINVAL, 0, "kubeconfig %s: cluster '%s' missing or without a server", path,
                                  cname);
                goto out;
        }
        if (strlen(s) >= sizeof(c.server)) {
                r = sbx_error_set(err, -EINVAL, 0, "kubeconfig %s: server too long", path);
                goto out;
        }
        sbx_strlcpy(c.server, s, sizeof(c.server));
        strip_slash(c.server);
        r = server_ok(c.server, err);
        if (r < 0)
                goto out;
        s = scalar(map_get(&doc, cluster, "insecure-skip-tls-verify"));
        c.insecure = s && strcmp(s, "true") == 0;
        r = data_or_file(&doc, cluster, "certificate-authority", dir, &c.ca_pem, &c.ca_len, err);
        if (r < 0)
                goto out;
        user = uname ? named(&doc, root, "users", "user", uname) : NULL;
        if (uname && !user) {
                r = sbx_error_set(err, -EINVAL, 0, "kubeconfig %s: user '%s' not found", path, uname);
                goto out;
        }
        if (map_get(&doc, user, "exec") || map_get(&doc, user, "auth-provider")) {
                r = sbx_error_set(err, -EOPNOTSUPP, 0,
                                  "kubeconfig %s: user '%s' needs an exec plugin or auth provider; sandboxd runs "
                                  "none: give it a client certificate or a token",
                                  path, uname);
                goto out;
        }
        r = data_or_file(&doc, user, "client-certificate", dir, &c.cert_pem, &c.cert_len, err);
        if (r >= 0)
                r = data_or_file(&doc, user, "client-key", dir, &c.key_pem, &c.key_len, err);
        if (r < 0)
                goto out;
        if (!c.cert_pem != !c.key_pem) {
                r = sbx_error_set(err, -EINVAL, 0,
                                  "kubeconfig %s: a client certificate needs its key, and a key its "
                                  "certificate",
                                  path);
                goto out;
        }
        s = scalar(map_get(&doc, user, "token"));
        if (s) {
                c.token = strdup(s);
                if (!c.token) {
                        r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                        goto out;
                }
        } else if ((s = scalar(map_get(&doc, user, "tokenFile")))) {
                size_t n;
                char p[SBX_PATH_MAX];
                snprintf(p, sizeof(p), "%s%s%s", s[0] == '/' ? "" : dir, s[0] == '/' ? "" : "/", s);
                r = read_file(p, &c.token, &n);
                if (r < 0) {
                        r = sbx_error_set(err, r, 0, "kubeconfig: cannot read tokenFile %s: %s", p, strerror(-r));
                        goto out;
                }
        }
        if (c.token)
                c.token[strcspn(c.token, "\r\n")] = '\0';
        if (c.token && strpbrk(c.token, " \t")) {
                r = sbx_error_set(err, -EINVAL, 0, "kubeconfig %s: the token holds whitespace", path);
                goto out;
        }
        r = 0;
        *ret = c;
        memset(&c, 0, sizeof(c));
out:
        yaml_document_delete(&doc);
        k8s_credentials_done(&c);
        return r;
}

int k8s_incluster_load(const char *dir, struct k8s_credentials *ret, struct sbx_error *err)
{
        struct k8s_credentials c = {0};
        const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
        char path[SBX_PATH_MAX];
        char *ns = NULL;
        size_t n;
        int r;

        if (!dir)
                dir = SA_DIR;
        if (!host || !*host || !port || !*port)
                return sbx_error_set(err, -ENOENT, 0,
                                     "no kubeconfig given and not in a Pod (KUBERNETES_SERVICE_HOST/PORT unset)");
        if (strspn(port, "0123456789") != strlen(port) || strlen(host) > 255 || strpbrk(host, "/@?# "))
                return sbx_error_set(err, -EINVAL, 0, "KUBERNETES_SERVICE_HOST/PORT are malformed");
        snprintf(c.server, sizeof(c.server), strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
        snprintf(path, sizeof(path), "%s/token", dir);
        r = read_file(path, &c.token, &n);
        if (r >= 0) {
                c.token[strcspn(c.token, "\r\n")] = '\0';
                snprintf(path, sizeof(path), "%s/ca.crt", dir);
                r = read_file(path, &c.ca_pem, &c.ca_len);
        }
        if (r < 0) {
                k8s_credentials_done(&c);
                return sbx_error_set(err, r, 0, "cannot read the service account's %s: %s", path, strerror(-r));
        }
        snprintf(path, sizeof(path), "%s/namespace", dir);
        if (read_file(path, &ns, &n) == 0) {
                ns[strcspn(ns, "\r\n")] = '\0';
                sbx_strlcpy(c.namespace, ns, sizeof(c.namespace));
                free(ns);
        }
        *ret = c;
        return 0;
}
