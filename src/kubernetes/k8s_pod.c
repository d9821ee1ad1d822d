/* k8s_pod.c — the engine-neutral spec as Kubernetes objects: the hardened
 * Pod, the session's PersistentVolumeClaim and the namespace's default-deny
 * NetworkPolicy, and the way back: a Pod's state and labels in engine.h's
 * words. Pure functions over cJSON: no state, and no I/O but reading the
 * two small identity files a Pod carries in its annotations. */
#include "k8s_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/runner_proto.h"
#include "sandboxd/sha256.h"

#define WORKSPACE_PATH "/workspace" /* container.h's CONTAINER_WORKSPACE */
#define LABEL_MANAGED "sandboxd.managed"
#define LABEL_INSTANCE "sandboxd.instance"
#define LABEL_USER "sandboxd.user"
#define LABEL_SESSION "sandboxd.session"

const cJSON *k8s_json_get(const cJSON *o, const char *path)
{
        char part[128];

        while (o && *path) {
                size_t n = strcspn(path, ".");
                if (n >= sizeof(part))
                        return NULL;
                memcpy(part, path, n);
                part[n] = '\0';
                o = cJSON_GetObjectItemCaseSensitive(o, part);
                path += n;
                if (*path == '.')
                        path++;
        }
        return o;
}

const char *k8s_json_str(const cJSON *o, const char *path)
{
        const cJSON *v = k8s_json_get(o, path);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool alnum(char c)
{
        return isascii((unsigned char)c) && isalnum((unsigned char)c);
}

bool k8s_label_value_ok(const char *s)
{
        size_t n = strlen(s);

        if (n == 0)
                return true;
        if (n > 63 || !alnum(s[0]) || !alnum(s[n - 1]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
                        return false;
        return true;
}

bool k8s_label_key_ok(const char *s)
{
        return *s && k8s_label_value_ok(s);
}

static const char *spec_label(const struct engine_spec *s, const char *key)
{
        for (size_t i = 0; i < s->n_labels; i++)
                if (strcmp(s->labels[i].key, key) == 0)
                        return s->labels[i].value;
        return NULL;
}

int engine_kubernetes_pvc_name(const struct engine_spec *spec, char ret[K8S_NAME_MAX])
{
        const char *inst = spec_label(spec, LABEL_INSTANCE), *user = spec_label(spec, LABEL_USER),
                   *sess = spec_label(spec, LABEL_SESSION);
        char buf[1024], hex[65];
        int n;

        if (spec->workspace_claim) { /* recorded: a pool slot's claim the session took over */
                size_t len = strlen(spec->workspace_claim);
                if (len == 0 || len >= K8S_NAME_MAX || !k8s_label_value_ok(spec->workspace_claim) ||
                    strspn(spec->workspace_claim, "abcdefghijklmnopqrstuvwxyz0123456789-") != len)
                        return -EINVAL;
                memcpy(ret, spec->workspace_claim, len + 1);
                return 0;
        }
        if (!inst || !user || !sess)
                return -EINVAL;
        /* NUL-separated: no two triples hash the same text */
        n = snprintf(buf, sizeof(buf), "%s%c%s%c%s", inst, 0, user, 0, sess);
        if (n < 0 || n >= (int)sizeof(buf) || sha256_hex(buf, (size_t)n, hex) < 0)
                return -EINVAL;
        snprintf(ret, K8S_NAME_MAX, "sbx-ws-%.32s", hex);
        return 0;
}

/* The labels (the ones Kubernetes can hold) and the annotation (all of them). */
static int add_metadata(cJSON *meta, const struct engine_spec *s)
{
        cJSON *labels = cJSON_AddObjectToObject(meta, "labels");
        cJSON *ann = cJSON_AddObjectToObject(meta, "annotations");
        cJSON *all = cJSON_CreateObject();
        char *text;

        if (!labels || !ann || !all) {
                cJSON_Delete(all);
                return -ENOMEM;
        }
        for (size_t i = 0; i < s->n_labels; i++) {
                const struct engine_label *l = &s->labels[i];
                cJSON_AddStringToObject(all, l->key, l->value);
                if (k8s_label_key_ok(l->key) && k8s_label_value_ok(l->value))
                        cJSON_AddStringToObject(labels, l->key, l->value);
        }
        text = cJSON_PrintUnformatted(all);
        cJSON_Delete(all);
        if (!text)
                return -ENOMEM;
        cJSON_AddStringToObject(ann, K8S_LABELS_ANNOTATION, text);
        free(text);
        return 0;
}

static cJSON *host_path_volume(cJSON *vols, const char *name, const char *path, const char *type)
{
        cJSON *v = cJSON_CreateObject(), *hp;

        cJSON_AddStringToObject(v, "name", name);
        hp = cJSON_AddObjectToObject(v, "hostPath");
        cJSON_AddStringToObject(hp, "path", path);
        cJSON_AddStringToObject(hp, "type", type);
        cJSON_AddItemToArray(vols, v);
        return v;
}

static void mount(cJSON *mounts, const char *name, const char *path, bool ro)
{
        cJSON *m = cJSON_CreateObject();

        cJSON_AddStringToObject(m, "name", name);
        cJSON_AddStringToObject(m, "mountPath", path);
        cJSON_AddBoolToObject(m, "readOnly", ro);
        cJSON_AddItemToArray(mounts, m);
}

/* The session directory of whichever node kube-scheduler picks: the node
 * agents' directory (node_dir, each agent's data_dir is node_dir/<its node
 * name>) with subPathExpr naming the Pod's own node from the downward API,
 * so the Pod needs no node at create time. kubelet makes the directory if
 * the agent has not yet (root's, empty: the agent accepts it, node.h). */
static int session_dir_on_node(const struct engine_k8s_config *cfg, const char *rel, cJSON *env, cJSON *vols,
                               cJSON *mounts)
{
        char sub[SBX_PATH_MAX];
        cJSON *e, *m;

        /* rel is runner_dir's own ("runner/<hash>"): no "..", no "$(" of another variable */
        if (!rel[0] || strstr(rel, "..") || strchr(rel, '$') ||
            snprintf(sub, sizeof(sub), "$(" K8S_NODE_ENV ")/%s", rel) >= (int)sizeof(sub))
                return -EINVAL;
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", K8S_NODE_ENV);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(e, "valueFrom"), "fieldRef"),
                                "fieldPath", "spec.nodeName");
        cJSON_AddItemToArray(env, e);
        host_path_volume(vols, "session-dir",
                         cfg->node_dir && *cfg->node_dir ? cfg->node_dir : "/var/lib/sandboxd-node", "Directory");
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "name", "session-dir");
        cJSON_AddStringToObject(m, "mountPath", RP_SOCKET_DIR);
        cJSON_AddBoolToObject(m, "readOnly", true);
        cJSON_AddStringToObject(m, "subPathExpr", sub);
        cJSON_AddItemToArray(mounts, m);
        return 0;
}

static void add_quantity(cJSON *o, const char *key, int64_t v)
{
        char buf[32];
        snprintf(buf, sizeof(buf), "%" PRId64, v);
        cJSON_AddStringToObject(o, key, buf);
}

static void add_security(cJSON *sc, const struct engine_spec *s)
{
        cJSON *seccomp;

        cJSON_AddNumberToObject(sc, "runAsUser", (double)s->uid);
        cJSON_AddNumberToObject(sc, "runAsGroup", (double)s->gid);
        cJSON_AddBoolToObject(sc, "runAsNonRoot", true);
        seccomp = cJSON_AddObjectToObject(sc, "seccompProfile");
        cJSON_AddStringToObject(seccomp, "type", "RuntimeDefault");
}

static char *pod_body(const struct engine_k8s_config *cfg, const struct engine_spec *s, const char *name,
                      const char *passwd, const char *group);

/* The whole of a control-written identity file (no symlink, a regular file
 * of at most K8S_IDENTITY_MAX bytes, no NUL), malloc'd and NUL-terminated. */
static int identity_read(const char *path, char **ret, struct sbx_error *err)
{
        struct stat st;
        char *buf = NULL;
        size_t n = 0;
        int fd, r = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "cannot open the identity file %s: %m", path);
        if (fstat(fd, &st) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot stat the identity file %s: %m", path);
                goto out;
        }
        if (!S_ISREG(st.st_mode)) {
                r = sbx_error_set(err, -EINVAL, 0, "the identity file %s is no regular file", path);
                goto out;
        }
        if (st.st_size > K8S_IDENTITY_MAX) {
                r = sbx_error_set(err, -EFBIG, 0,
                                  "the identity file %s has %jd bytes, more than the %d a Pod annotation carries", path,
                                  (intmax_t)st.st_size, K8S_IDENTITY_MAX);
                goto out;
        }
        buf = malloc(K8S_IDENTITY_MAX + 2);
        if (!buf) {
                r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                goto out;
        }
        /* read one byte past the bound: a file grown since fstat is refused too */
        while (n <= K8S_IDENTITY_MAX) {
                ssize_t k = read(fd, buf + n, K8S_IDENTITY_MAX + 1 - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        r = sbx_error_set(err, -errno, 0, "cannot read the identity file %s: %m", path);
                        goto out;
                }
                if (k == 0)
                        break;
                n += (size_t)k;
        }
        if (n > K8S_IDENTITY_MAX) {
                r = sbx_error_set(err, -EFBIG, 0,
                                  "the identity file %s has more than the %d bytes a Pod annotation carries", path,
                                  K8S_IDENTITY_MAX);
                goto out;
        }
        if (memchr(buf, '\0', n)) {
                r = sbx_error_set(err, -EINVAL, 0, "the identity file %s holds a NUL byte", path);
                goto out;
        }
        buf[n] = '\0';
        *ret = buf;
        buf = NULL;
out:
        free(buf);
        close(fd);
        return r;
}

/* The downward API volume of the identity annotations, file by file. */
static void identity_volume(cJSON *vols)
{
        static const struct {
                const char *file, *field;
        } items[] = {
                {"passwd", "metadata.annotations['" K8S_PASSWD_ANNOTATION "']"},
                {"group", "metadata.annotations['" K8S_GROUP_ANNOTATION "']"},
        };
        cJSON *v = cJSON_CreateObject(), *dw, *arr;

        cJSON_AddStringToObject(v, "name", "identity");
        dw = cJSON_AddObjectToObject(v, "downwardAPI");
        cJSON_AddNumberToObject(dw, "defaultMode", 0444);
        arr = cJSON_AddArrayToObject(dw, "items");
        for (size_t i = 0; i < ELEMENTSOF(items); i++) {
                cJSON *it = cJSON_CreateObject();
                cJSON_AddStringToObject(it, "path", items[i].file);
                cJSON_AddStringToObject(cJSON_AddObjectToObject(it, "fieldRef"), "fieldPath", items[i].field);
                cJSON_AddNumberToObject(it, "mode", 0444);
                cJSON_AddItemToArray(arr, it);
        }
        cJSON_AddItemToArray(vols, v);
}

static void sub_path_mount(cJSON *mounts, const char *name, const char *path, const char *sub)
{
        cJSON *m = cJSON_CreateObject();

        cJSON_AddStringToObject(m, "name", name);
        cJSON_AddStringToObject(m, "mountPath", path);
        cJSON_AddBoolToObject(m, "readOnly", true);
        cJSON_AddStringToObject(m, "subPath", sub);
        cJSON_AddItemToArray(mounts, m);
}

char *engine_kubernetes_pod_body(const struct engine_k8s_config *cfg, const struct engine_spec *s, const char *name)
{
        char *out = NULL;

        (void)engine_kubernetes_pod_make(cfg, s, name, &out, NULL);
        return out;
}

int engine_kubernetes_pod_make(const struct engine_k8s_config *cfg, const struct engine_spec *s, const char *name,
                               char **ret_body, struct sbx_error *err)
{
        char *passwd = NULL, *group = NULL;
        int r;

        *ret_body = NULL;
        if (s->passwd_file && s->group_file) {
                r = identity_read(s->passwd_file, &passwd, err);
                if (r == 0)
                        r = identity_read(s->group_file, &group, err);
                if (r < 0) {
                        free(passwd);
                        return r;
                }
        }
        *ret_body = pod_body(cfg, s, name, passwd, group);
        free(passwd);
        free(group);
        return *ret_body ? 0 : sbx_error_set(err, -E2BIG, 0, "the spec does not fit a Pod");
}

static char *pod_body(const struct engine_k8s_config *cfg, const struct engine_spec *s, const char *name,
                      const char *passwd, const char *group)
{
        cJSON *pod = cJSON_CreateObject(), *meta, *spec, *psc, *c, *csc, *caps, *drop, *res, *lim, *req, *vols, *mounts,
              *cmd, *env;
        char pvc[K8S_NAME_MAX], vname[16];
        bool runner = s->runner_binary && s->session_dir;
        bool pvc_mode = cfg->workspace_mode && strcmp(cfg->workspace_mode, "pvc") == 0;
        char *out = NULL;

        if (!pod || s->uid == 0 || !s->image || s->n_tmpfs > 4)
                goto fail;
        cJSON_AddStringToObject(pod, "apiVersion", "v1");
        cJSON_AddStringToObject(pod, "kind", "Pod");
        meta = cJSON_AddObjectToObject(pod, "metadata");
        cJSON_AddStringToObject(meta, "name", name);
        if (add_metadata(meta, s) < 0)
                goto fail;
        if (passwd && group) { /* on every node alike: no file of the control's own node */
                cJSON *ann = cJSON_GetObjectItemCaseSensitive(meta, "annotations");
                cJSON_AddStringToObject(ann, K8S_PASSWD_ANNOTATION, passwd);
                cJSON_AddStringToObject(ann, K8S_GROUP_ANNOTATION, group);
        }

        spec = cJSON_AddObjectToObject(pod, "spec");
        cJSON_AddStringToObject(spec, "restartPolicy", "Never"); /* a dead container is the monitor's to see */
        cJSON_AddBoolToObject(spec, "automountServiceAccountToken", false);
        cJSON_AddBoolToObject(spec, "enableServiceLinks", false);
        cJSON_AddBoolToObject(spec, "hostNetwork", false);
        cJSON_AddBoolToObject(spec, "hostPID", false);
        cJSON_AddBoolToObject(spec, "hostIPC", false);
        /* each container its own pid namespace: the init below is PID 1 and the runner its first child */
        cJSON_AddBoolToObject(spec, "shareProcessNamespace", false);
        cJSON_AddNumberToObject(spec, "terminationGracePeriodSeconds", 2);
        if (s->hostname)
                cJSON_AddStringToObject(spec, "hostname", s->hostname);
        if (s->runtime_class && strcmp(s->runtime_class, "runsc") == 0)
                cJSON_AddStringToObject(spec, "runtimeClassName", cfg->gvisor_class ? cfg->gvisor_class : "gvisor");
        psc = cJSON_AddObjectToObject(spec, "securityContext");
        add_security(psc, s);
        cJSON_AddItemToObject(psc, "supplementalGroups", cJSON_CreateArray());
        if (pvc_mode && s->workspace) { /* the claim's root becomes the session's group's */
                cJSON_AddNumberToObject(psc, "fsGroup", (double)s->gid);
                cJSON_AddStringToObject(psc, "fsGroupChangePolicy", "OnRootMismatch");
        }

        vols = cJSON_AddArrayToObject(spec, "volumes");
        c = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "containers"), c);
        cJSON_AddStringToObject(c, "name", K8S_CONTAINER_NAME);
        cJSON_AddStringToObject(c, "image", s->image);
        cJSON_AddStringToObject(c, "imagePullPolicy", cfg->image_pull_policy ? cfg->image_pull_policy : "IfNotPresent");
        cJSON_AddStringToObject(c, "terminationMessagePolicy", "FallbackToLogsOnError");
        if (s->workdir)
                cJSON_AddStringToObject(c, "workingDir", s->workdir);
        if (runner) {
                /* Docker's Init: its own init (tini) as PID 1, the runner its first child (hub_peer.h) */
                cmd = cJSON_AddArrayToObject(c, "command");
                cJSON_AddItemToArray(cmd, cJSON_CreateString(K8S_INIT_PATH));
                cJSON_AddItemToArray(cmd, cJSON_CreateString("--"));
                cJSON_AddItemToArray(cmd, cJSON_CreateString(RP_BINARY_PATH));
                cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "args"),
                                     cJSON_CreateString(RP_SOCKET_DIR "/" RP_SOCKET_NAME));
        }
        env = cJSON_AddArrayToObject(c, "env");
        for (size_t i = 0; s->env && s->env[i]; i++) {
                const char *eq = strchr(s->env[i], '=');
                char key[128];
                cJSON *e;
                if (!eq || (size_t)(eq - s->env[i]) >= sizeof(key))
                        goto fail;
                memcpy(key, s->env[i], (size_t)(eq - s->env[i]));
                key[eq - s->env[i]] = '\0';
                e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "name", key);
                cJSON_AddStringToObject(e, "value", eq + 1);
                cJSON_AddItemToArray(env, e);
        }

        csc = cJSON_AddObjectToObject(c, "securityContext");
        add_security(csc, s);
        cJSON_AddBoolToObject(csc, "privileged", false);
        cJSON_AddBoolToObject(csc, "allowPrivilegeEscalation", false); /* no_new_privs */
        cJSON_AddBoolToObject(csc, "readOnlyRootFilesystem", s->readonly_rootfs);
        cJSON_AddStringToObject(csc, "procMount", "Default");
        caps = cJSON_AddObjectToObject(csc, "capabilities");
        drop = cJSON_AddArrayToObject(caps, "drop");
        cJSON_AddItemToArray(drop, cJSON_CreateString("ALL"));

        res = cJSON_AddObjectToObject(c, "resources");
        lim = cJSON_AddObjectToObject(res, "limits");
        req = cJSON_AddObjectToObject(res, "requests");
        if (s->memory_bytes > 0) {
                add_quantity(lim, "memory", s->memory_bytes);
                add_quantity(req, "memory", s->memory_bytes); /* requested whole: no overcommit by the scheduler */
        }
        if (s->nano_cpus > 0) {
                char q[32];
                snprintf(q, sizeof(q), "%" PRId64 "m", s->nano_cpus / 1000000 > 0 ? s->nano_cpus / 1000000 : 1);
                cJSON_AddStringToObject(lim, "cpu", q);
        }
        if (s->cpu_weight > 0) {
                /* the kubelet sets cpu.shares = request(milli) * 1024 / 1000: Docker's CpuShares back */
                char q[32];
                int64_t m = s->cpu_weight * 1000 / 1024;
                if (s->nano_cpus > 0 && m > s->nano_cpus / 1000000)
                        m = s->nano_cpus / 1000000; /* a request above the limit is refused */
                snprintf(q, sizeof(q), "%" PRId64 "m", m > 0 ? m : 1);
                cJSON_AddStringToObject(req, "cpu", q);
        }

        mounts = cJSON_AddArrayToObject(c, "volumeMounts");
        for (size_t i = 0; i < s->n_tmpfs; i++) {
                cJSON *ed, *v = cJSON_CreateObject();
                snprintf(vname, sizeof(vname), "tmpfs-%zu", i);
                cJSON_AddStringToObject(v, "name", vname);
                ed = cJSON_AddObjectToObject(v, "emptyDir");
                cJSON_AddStringToObject(ed, "medium", "Memory");
                if (s->tmpfs[i].size_bytes > 0)
                        add_quantity(ed, "sizeLimit", s->tmpfs[i].size_bytes);
                cJSON_AddItemToArray(vols, v);
                mount(mounts, vname, s->tmpfs[i].path, false);
        }
        if (s->workspace) {
                if (pvc_mode) {
                        cJSON *v = cJSON_CreateObject(), *pv;
                        if (engine_kubernetes_pvc_name(s, pvc) < 0) {
                                cJSON_Delete(v);
                                goto fail;
                        }
                        cJSON_AddStringToObject(v, "name", "workspace");
                        pv = cJSON_AddObjectToObject(v, "persistentVolumeClaim");
                        cJSON_AddStringToObject(pv, "claimName", pvc);
                        cJSON_AddItemToArray(vols, v);
                } else {
                        host_path_volume(vols, "workspace", s->workspace, "Directory");
                }
                mount(mounts, "workspace", WORKSPACE_PATH, false);
        }
        if (passwd && group) {
                /* subPath: one file each over the image's (the kubelet resolves the volume's ..data link) */
                identity_volume(vols);
                sub_path_mount(mounts, "identity", "/etc/passwd", "passwd");
                sub_path_mount(mounts, "identity", "/etc/group", "group");
        }
        if (runner) {
                host_path_volume(vols, "init", cfg->init_binary ? cfg->init_binary : "/usr/bin/tini-static", "File");
                host_path_volume(vols, "runner", s->runner_binary, "File");
                mount(mounts, "init", K8S_INIT_PATH, true);
                mount(mounts, "runner", RP_BINARY_PATH, true);
                if (s->session_dir[0] == '/') {
                        host_path_volume(vols, "session-dir", s->session_dir, "Directory");
                        mount(mounts, "session-dir", RP_SOCKET_DIR, true);
                } else if (session_dir_on_node(cfg, s->session_dir, env, vols, mounts) < 0) {
                        goto fail;
                }
        }
        out = cJSON_PrintUnformatted(pod);
fail:
        cJSON_Delete(pod);
        return out;
}

char *engine_kubernetes_pvc_body(const struct engine_k8s_config *cfg, const struct engine_spec *s)
{
        cJSON *pvc = cJSON_CreateObject(), *meta, *spec, *modes;
        char name[K8S_NAME_MAX];
        struct engine_spec only = *s;
        struct engine_label kept[8];
        size_t n = 0;
        char *out = NULL;

        if (!pvc || engine_kubernetes_pvc_name(s, name) < 0)
                goto fail;
        /* the session's identity, not the Pod's run-time labels (a test run's label stays) */
        for (size_t i = 0; i < s->n_labels && n < ELEMENTSOF(kept); i++)
                if (strncmp(s->labels[i].key, "sandboxd.", 9) == 0 && strncmp(s->labels[i].key, "sandboxd.label.", 15))
                        kept[n++] = s->labels[i];
        only.labels = kept;
        only.n_labels = n;
        cJSON_AddStringToObject(pvc, "apiVersion", "v1");
        cJSON_AddStringToObject(pvc, "kind", "PersistentVolumeClaim");
        meta = cJSON_AddObjectToObject(pvc, "metadata");
        cJSON_AddStringToObject(meta, "name", name);
        if (add_metadata(meta, &only) < 0)
                goto fail;
        spec = cJSON_AddObjectToObject(pvc, "spec");
        modes = cJSON_AddArrayToObject(spec, "accessModes");
        cJSON_AddItemToArray(modes, cJSON_CreateString("ReadWriteOnce"));
        if (cfg->storage_class && *cfg->storage_class)
                cJSON_AddStringToObject(spec, "storageClassName", cfg->storage_class);
        add_quantity(cJSON_AddObjectToObject(cJSON_AddObjectToObject(spec, "resources"), "requests"), "storage",
                     cfg->workspace_bytes > 0 ? cfg->workspace_bytes : (int64_t)1 << 30);
        out = cJSON_PrintUnformatted(pvc);
fail:
        cJSON_Delete(pvc);
        return out;
}

char *engine_kubernetes_netpol_body(void)
{
        cJSON *np = cJSON_CreateObject(), *meta, *spec, *types;
        char *out;

        cJSON_AddStringToObject(np, "apiVersion", "networking.k8s.io/v1");
        cJSON_AddStringToObject(np, "kind", "NetworkPolicy");
        meta = cJSON_AddObjectToObject(np, "metadata");
        cJSON_AddStringToObject(meta, "name", K8S_NETPOL_NAME);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(meta, "labels"), LABEL_MANAGED, "1");
        spec = cJSON_AddObjectToObject(np, "spec");
        /* every sandbox Pod, whatever its instance; no rule: nothing in, nothing out */
        cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(spec, "podSelector"), "matchLabels"),
                                LABEL_MANAGED, "1");
        types = cJSON_AddArrayToObject(spec, "policyTypes");
        cJSON_AddItemToArray(types, cJSON_CreateString("Ingress"));
        cJSON_AddItemToArray(types, cJSON_CreateString("Egress"));
        cJSON_AddArrayToObject(spec, "ingress");
        cJSON_AddArrayToObject(spec, "egress");
        out = cJSON_PrintUnformatted(np);
        cJSON_Delete(np);
        return out;
}

int engine_kubernetes_selector(const char *const *filters, char *ret, size_t size)
{
        size_t o = 0;

        ret[0] = '\0';
        for (size_t i = 0; filters && filters[i]; i++) {
                char key[128];
                const char *eq = strchr(filters[i], '=');
                size_t kn = eq ? (size_t)(eq - filters[i]) : strlen(filters[i]);
                int n;

                if (kn == 0 || kn >= sizeof(key))
                        return -EINVAL;
                memcpy(key, filters[i], kn);
                key[kn] = '\0';
                if (!k8s_label_key_ok(key))
                        continue; /* checked on the annotation */
                if (eq && k8s_label_value_ok(eq + 1))
                        n = snprintf(ret + o, size - o, "%s%s=%s", o ? "," : "", key, eq + 1);
                else
                        n = snprintf(ret + o, size - o, "%s%s", o ? "," : "", key);
                if (n < 0 || (size_t)n >= size - o)
                        return -ENAMETOOLONG;
                o += (size_t)n;
        }
        return 0;
}

void k8s_pod_labels(const cJSON *pod, struct engine_kv *ret, size_t *ret_n)
{
        const char *ann = k8s_json_str(pod, "metadata.annotations." K8S_LABELS_ANNOTATION);
        cJSON *parsed = ann ? cJSON_Parse(ann) : NULL;
        const cJSON *src = cJSON_IsObject(parsed) ? parsed : k8s_json_get(pod, "metadata.labels"), *it;
        size_t n = 0;

        /* sandboxd.* first (engine.h), then the rest while there is room */
        for (int pass = 0; pass < 2; pass++)
                cJSON_ArrayForEach(it, src) {
                        bool ours = strncmp(it->string, "sandboxd.", 9) == 0;
                        if (n == ENGINE_MAX_LABELS || !cJSON_IsString(it) || ours != (pass == 0))
                                continue;
                        sbx_strlcpy(ret[n].key, it->string, sizeof(ret[n].key));
                        sbx_strlcpy(ret[n].value, it->valuestring, sizeof(ret[n].value));
                        n++;
                }
        cJSON_Delete(parsed);
        *ret_n = n;
}

bool k8s_labels_match(const struct engine_kv *kv, size_t n, const char *const *filters)
{
        for (size_t i = 0; filters && filters[i]; i++) {
                const char *eq = strchr(filters[i], '=');
                size_t kn = eq ? (size_t)(eq - filters[i]) : strlen(filters[i]);
                bool ok = false;
                for (size_t j = 0; j < n && !ok; j++)
                        ok = strlen(kv[j].key) == kn && memcmp(kv[j].key, filters[i], kn) == 0 &&
                             (!eq || strcmp(kv[j].value, eq + 1) == 0);
                if (!ok)
                        return false;
        }
        return true;
}

void k8s_pod_state(const cJSON *pod, char state[16], int *ret_exit, bool *ret_oom)
{
        const cJSON *st = cJSON_GetArrayItem(k8s_json_get(pod, "status.containerStatuses"), 0);
        const char *phase = k8s_json_str(pod, "status.phase");
        const cJSON *term = k8s_json_get(st, "state.terminated");
        const cJSON *code;

        *ret_exit = 0;
        *ret_oom = false;
        if (term) {
                const char *reason = k8s_json_str(term, "reason");
                code = k8s_json_get(term, "exitCode");
                *ret_exit = cJSON_IsNumber(code) ? code->valueint : -1;
                *ret_oom = reason && strcmp(reason, "OOMKilled") == 0;
                sbx_strlcpy(state, "exited", 16);
        } else if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
                /* evicted, or the node lost: no container status; or deleted, when
                 * kubelet 1.20 reports the killed container as waiting with a
                 * lastState of ContainerStatusUnknown: the phase alone says it ended */
                *ret_exit = strcmp(phase, "Failed") == 0 ? -1 : 0;
                sbx_strlcpy(state, "exited", 16);
        } else if (k8s_json_get(pod, "metadata.deletionTimestamp")) {
                sbx_strlcpy(state, "removing", 16);
        } else if (k8s_json_get(st, "state.running")) {
                sbx_strlcpy(state, "running", 16);
        } else {
                sbx_strlcpy(state, "created", 16);
        }
}

bool k8s_pod_removed(const cJSON *pod)
{
        char state[16];
        int code;
        bool oom;

        if (!k8s_json_get(pod, "metadata.deletionTimestamp"))
                return false;
        k8s_pod_state(pod, state, &code, &oom);
        return strcmp(state, "exited") == 0 || !k8s_json_str(pod, "spec.nodeName");
}
