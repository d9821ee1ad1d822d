/* test_kubernetes.c — the Kubernetes engine without a cluster: the Pod, PVC
 * and NetworkPolicy a spec becomes hold every hardening field; kubeconfig
 * and in-cluster credentials are read (and refused when malformed); and an
 * API server that answers badly (a fake one on loopback, port 22000-23999)
 * gives clear errors, while a watch that hears 410 Gone lists again and still
 * tells what happened in the gap. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/engine.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/engine_kubernetes.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/utf8.h"
#include "testenv.h"

static const char *const env[] = {"HOME=/workspace", "HTTP_PROXY=http://127.0.0.1:3128", NULL};

static const char passwd_text[] =
        "root:x:0:0:root:/root:/bin/sh\n"
        "sandbox:x:23456:23456:sandbox:/workspace:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
static const char group_text[] = "root:x:0:\nsandbox:x:23456:\nnogroup:x:65534:\n";
static char passwd_path[512], group_path[512];

static void write_bytes(const char *path, const char *text, size_t n)
{
        FILE *f = fopen(path, "we");
        cr_assert_not_null(f, "%s", path);
        cr_assert_eq(fwrite(text, 1, n, f), n);
        cr_assert_eq(fclose(f), 0);
}

/* The control's identity files of uid 23456, in a temp dir of this process (made once). */
static void identity_files(void)
{
        char *dir;

        if (passwd_path[0])
                return;
        dir = testenv_tmpdir();
        cr_assert_not_null(dir);
        snprintf(passwd_path, sizeof(passwd_path), "%s/23456.passwd", dir);
        snprintf(group_path, sizeof(group_path), "%s/23456.group", dir);
        free(dir);
        write_bytes(passwd_path, passwd_text, strlen(passwd_text));
        write_bytes(group_path, group_text, strlen(group_text));
}

static void spec_of(struct engine_spec *s, struct engine_tmpfs *t, struct engine_label *labels, const char *runtime)
{
        identity_files();
        *t = (struct engine_tmpfs){.path = "/tmp", .size_bytes = 64 << 20, .noexec = true, .nosuid = true};
        labels[0] = (struct engine_label){"sandboxd.managed", "1"};
        labels[1] = (struct engine_label){"sandboxd.user", "alice"};
        labels[2] = (struct engine_label){"sandboxd.session", ".odd-session-name."}; /* no valid label value */
        labels[3] = (struct engine_label){"sandboxd.instance", "inst"};
        labels[4] = (struct engine_label){"sandboxd.test.run", "r1"};
        *s = (struct engine_spec){.image = "sandboxd/python:latest",
                                  .uid = 23456,
                                  .gid = 23456,
                                  .memory_bytes = 512 << 20,
                                  .memory_swap_bytes = 512 << 20,
                                  .nano_cpus = 1500000000,
                                  .cpu_weight = 256,
                                  .pids_limit = 256,
                                  .readonly_rootfs = true,
                                  .tmpfs = t,
                                  .n_tmpfs = 1,
                                  .workspace = "/data/workspaces/alice/s1",
                                  .session_dir = "/run/sandboxd/runner/alice/s1",
                                  .runner_binary = "/usr/lib/sandboxd/sandboxd-runner",
                                  .passwd_file = passwd_path,
                                  .group_file = group_path,
                                  .runtime_class = runtime,
                                  .env = env,
                                  .workdir = "/workspace",
                                  .hostname = "sandbox",
                                  .labels = labels,
                                  .n_labels = 5};
}

static const struct engine_k8s_config kcfg_hostpath = {.namespace = "sbx",
                                                       .workspace_mode = "hostpath",
                                                       .init_binary = "/usr/bin/tini-static",
                                                       .gvisor_class = "gvisor",
                                                       .image_pull_policy = "Never"};
static const struct engine_k8s_config kcfg_pvc = {.namespace = "sbx",
                                                  .workspace_mode = "pvc",
                                                  .storage_class = "fast",
                                                  .workspace_bytes = 2LL << 30,
                                                  .init_binary = "/usr/bin/tini-static",
                                                  .gvisor_class = "gvisor"};

static const cJSON *get(const cJSON *o, const char *path)
{
        char part[64];
        while (o && *path) {
                size_t n = strcspn(path, ".");
                memcpy(part, path, n);
                part[n] = '\0';
                o = cJSON_GetObjectItemCaseSensitive(o, part);
                path += n + (path[n] == '.');
        }
        return o;
}

static const char *str(const cJSON *o, const char *path)
{
        const cJSON *v = get(o, path);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const cJSON *named_item(const cJSON *arr, const char *key, const char *value)
{
        const cJSON *it;
        cJSON_ArrayForEach(it, arr)
                if (str(it, key) && strcmp(str(it, key), value) == 0)
                        return it;
        return NULL;
}

static cJSON *pod_of(const struct engine_k8s_config *cfg, const char *runtime)
{
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        char *body;
        cJSON *j;

        spec_of(&s, &t, l, runtime);
        body = engine_kubernetes_pod_body(cfg, &s, "sbx-0123456789abcdef01234567");
        cr_assert_not_null(body);
        j = cJSON_Parse(body);
        free(body);
        cr_assert_not_null(j);
        return j;
}

Test(kubernetes, pod_holds_every_hardening_field)
{
        cJSON *pod = pod_of(&kcfg_hostpath, NULL);
        const cJSON *spec = get(pod, "spec"), *c = cJSON_GetArrayItem(get(spec, "containers"), 0);
        const cJSON *sc = get(c, "securityContext"), *vols = get(spec, "volumes"), *mounts = get(c, "volumeMounts");
        const cJSON *tmp, *m, *cmd;

        /* the pod */
        cr_expect(cJSON_IsFalse(get(spec, "automountServiceAccountToken")));
        cr_expect(cJSON_IsFalse(get(spec, "enableServiceLinks")));
        cr_expect(cJSON_IsFalse(get(spec, "hostNetwork")) && cJSON_IsFalse(get(spec, "hostPID")) &&
                  cJSON_IsFalse(get(spec, "hostIPC")));
        cr_expect(cJSON_IsFalse(get(spec, "shareProcessNamespace")));
        cr_expect_str_eq(str(spec, "restartPolicy"), "Never");
        cr_expect_str_eq(str(spec, "securityContext.seccompProfile.type"), "RuntimeDefault");
        cr_expect(cJSON_IsTrue(get(spec, "securityContext.runAsNonRoot")));
        cr_expect_eq(get(spec, "securityContext.runAsUser")->valueint, 23456);
        cr_expect_null(get(spec, "runtimeClassName"), "runc is the nodes' default handler");
        /* the container */
        cr_expect_eq(get(sc, "runAsUser")->valueint, 23456);
        cr_expect_eq(get(sc, "runAsGroup")->valueint, 23456);
        cr_expect(cJSON_IsTrue(get(sc, "runAsNonRoot")));
        cr_expect(cJSON_IsFalse(get(sc, "allowPrivilegeEscalation")));
        cr_expect(cJSON_IsFalse(get(sc, "privileged")));
        cr_expect(cJSON_IsTrue(get(sc, "readOnlyRootFilesystem")));
        cr_expect_str_eq(str(sc, "seccompProfile.type"), "RuntimeDefault");
        cr_expect_eq(cJSON_GetArraySize(get(sc, "capabilities.drop")), 1);
        cr_expect_str_eq(cJSON_GetArrayItem(get(sc, "capabilities.drop"), 0)->valuestring, "ALL");
        cr_expect_null(get(sc, "capabilities.add"));
        cr_expect_str_eq(str(c, "resources.limits.memory"), "536870912");
        cr_expect_str_eq(str(c, "resources.requests.memory"), "536870912");
        cr_expect_str_eq(str(c, "resources.limits.cpu"), "1500m");
        cr_expect_str_eq(str(c, "resources.requests.cpu"), "250m", "cpu weight 256 is cpu.shares 256");
        cr_expect_str_eq(str(c, "imagePullPolicy"), "Never");
        /* /tmp in memory, with its size */
        m = named_item(mounts, "mountPath", "/tmp");
        cr_assert_not_null(m);
        tmp = named_item(vols, "name", str(m, "name"));
        cr_assert_not_null(tmp);
        cr_expect_str_eq(str(tmp, "emptyDir.medium"), "Memory");
        cr_expect_str_eq(str(tmp, "emptyDir.sizeLimit"), "67108864");
        /* the init as PID 1, the runner its first child, on the session directory */
        cmd = get(c, "command");
        cr_assert_eq(cJSON_GetArraySize(cmd), 3);
        cr_expect_str_eq(cJSON_GetArrayItem(cmd, 0)->valuestring, K8S_INIT_PATH);
        cr_expect_str_eq(cJSON_GetArrayItem(cmd, 1)->valuestring, "--");
        cr_expect_str_eq(cJSON_GetArrayItem(cmd, 2)->valuestring, RP_BINARY_PATH);
        cr_expect_str_eq(cJSON_GetArrayItem(get(c, "args"), 0)->valuestring, RP_SOCKET_DIR "/" RP_SOCKET_NAME);
        /* every host path read-only but the workspace */
        static const char *const ro[][2] = {{RP_SOCKET_DIR, "/run/sandboxd/runner/alice/s1"},
                                            {RP_BINARY_PATH, "/usr/lib/sandboxd/sandboxd-runner"},
                                            {K8S_INIT_PATH, "/usr/bin/tini-static"}};
        for (size_t i = 0; i < ELEMENTSOF(ro); i++) {
                m = named_item(mounts, "mountPath", ro[i][0]);
                cr_assert_not_null(m, "%s mounted", ro[i][0]);
                cr_expect(cJSON_IsTrue(get(m, "readOnly")), "%s read-only", ro[i][0]);
                cr_expect_str_eq(str(named_item(vols, "name", str(m, "name")), "hostPath.path"), ro[i][1]);
        }
        m = named_item(mounts, "mountPath", "/workspace");
        cr_assert_not_null(m);
        cr_expect(cJSON_IsFalse(get(m, "readOnly")));
        cr_expect_str_eq(str(named_item(vols, "name", "workspace"), "hostPath.path"), "/data/workspaces/alice/s1");
        cr_expect_str_eq(str(named_item(get(c, "env"), "name", "HTTP_PROXY"), "value"), "http://127.0.0.1:3128");
        /* the identity files travel in the Pod: their bytes in annotations, a downwardAPI volume of them */
        const cJSON *anns = get(pod, "metadata.annotations");
        cr_expect_str_eq(str(anns, K8S_PASSWD_ANNOTATION), passwd_text);
        cr_expect_str_eq(str(anns, K8S_GROUP_ANNOTATION), group_text);
        static const char *const idf[][3] = {{"/etc/passwd", "passwd", "metadata.annotations['sandboxd/passwd']"},
                                             {"/etc/group", "group", "metadata.annotations['sandboxd/group']"}};
        for (size_t i = 0; i < ELEMENTSOF(idf); i++) {
                const cJSON *v, *item;
                m = named_item(mounts, "mountPath", idf[i][0]);
                cr_assert_not_null(m, "%s mounted", idf[i][0]);
                cr_expect(cJSON_IsTrue(get(m, "readOnly")), "%s read-only", idf[i][0]);
                cr_expect_str_eq(str(m, "subPath"), idf[i][1]);
                v = named_item(vols, "name", str(m, "name"));
                cr_assert_not_null(v);
                cr_expect_null(get(v, "hostPath"), "%s is no file of the control's node", idf[i][0]);
                cr_expect_eq(get(v, "downwardAPI.defaultMode")->valueint, 0444);
                item = named_item(get(v, "downwardAPI.items"), "path", idf[i][1]);
                cr_assert_not_null(item);
                cr_expect_str_eq(str(item, "fieldRef.fieldPath"), idf[i][2]);
        }
        const cJSON *vol;
        cJSON_ArrayForEach(vol, vols)
                cr_expect(!str(vol, "hostPath.path") || (strcmp(str(vol, "hostPath.path"), passwd_path) &&
                                                         strcmp(str(vol, "hostPath.path"), group_path)),
                          "no hostPath of the identity files");
        /* labels: the valid ones as labels, all of them in the annotation */
        const cJSON *labels = get(pod, "metadata.labels");
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(labels, "sandboxd.managed")->valuestring, "1");
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(labels, "sandboxd.test.run")->valuestring, "r1");
        cr_expect_null(cJSON_GetObjectItemCaseSensitive(labels, "sandboxd.session"),
                       "'.odd-session-name.' is no label value");
        cJSON *ann = cJSON_Parse(
                cJSON_GetObjectItemCaseSensitive(get(pod, "metadata.annotations"), K8S_LABELS_ANNOTATION)->valuestring);
        cr_assert_not_null(ann);
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(ann, "sandboxd.session")->valuestring, ".odd-session-name.");
        cJSON_Delete(ann);
        cJSON_Delete(pod);
}

Test(kubernetes, an_identity_file_past_the_bound_is_refused_with_the_reason)
{
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        struct sbx_error err = {0};
        char big_path[600], *body = (char *)"unset", *big;

        spec_of(&s, &t, l, NULL);
        snprintf(big_path, sizeof(big_path), "%s.big", passwd_path);
        big = malloc(K8S_IDENTITY_MAX + 1);
        cr_assert_not_null(big);
        memset(big, 'x', K8S_IDENTITY_MAX + 1);
        write_bytes(big_path, big, K8S_IDENTITY_MAX); /* at the bound: carried whole */
        s.passwd_file = big_path;
        cr_assert_eq(engine_kubernetes_pod_make(&kcfg_hostpath, &s, "sbx-0123456789abcdef01234567", &body, &err), 0,
                     "%s", err.msg);
        cJSON *pod = cJSON_Parse(body);
        free(body);
        cr_assert_not_null(pod);
        cr_expect_eq(strlen(str(pod, "metadata.annotations." K8S_PASSWD_ANNOTATION)), (size_t)K8S_IDENTITY_MAX);
        cJSON_Delete(pod);
        write_bytes(big_path, big, K8S_IDENTITY_MAX + 1); /* one byte past it */
        free(big);
        cr_expect_eq(engine_kubernetes_pod_make(&kcfg_hostpath, &s, "sbx-0123456789abcdef01234567", &body, &err),
                     -EFBIG);
        cr_expect_null(body);
        cr_expect(strstr(err.msg, big_path) && strstr(err.msg, "65536"), "%s", err.msg);
        cr_expect_null(engine_kubernetes_pod_body(&kcfg_hostpath, &s, "sbx-0123456789abcdef01234567"));
        s.passwd_file = "/nonexistent/23456.passwd"; /* a missing one is no Pod without /etc/passwd */
        cr_expect_eq(engine_kubernetes_pod_make(&kcfg_hostpath, &s, "sbx-0123456789abcdef01234567", &body, &err),
                     -ENOENT);
}

Test(kubernetes, runsc_is_the_gvisor_runtime_class)
{
        cJSON *pod = pod_of(&kcfg_hostpath, "runsc");

        cr_expect_str_eq(str(pod, "spec.runtimeClassName"), "gvisor");
        cJSON_Delete(pod);
}

Test(kubernetes, pvc_mode_mounts_the_session_claim)
{
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        char name[K8S_NAME_MAX], other[K8S_NAME_MAX];
        cJSON *pod = pod_of(&kcfg_pvc, NULL), *pvc;
        char *body;

        spec_of(&s, &t, l, NULL);
        cr_assert_eq(engine_kubernetes_pvc_name(&s, name), 0);
        cr_expect_eq(strncmp(name, "sbx-ws-", 7), 0);
        cr_expect_str_eq(str(named_item(get(pod, "spec.volumes"), "name", "workspace"),
                             "persistentVolumeClaim.claimName"),
                         name);
        cr_expect_null(get(named_item(get(pod, "spec.volumes"), "name", "workspace"), "hostPath"));
        cr_expect_eq(get(pod, "spec.securityContext.fsGroup")->valueint, 23456);
        l[2].value = "s2"; /* another session, another claim */
        cr_assert_eq(engine_kubernetes_pvc_name(&s, other), 0);
        cr_expect_str_neq(name, other);
        l[2].value = ".odd-session-name.";
        body = engine_kubernetes_pvc_body(&kcfg_pvc, &s);
        cr_assert_not_null(body);
        pvc = cJSON_Parse(body);
        free(body);
        cr_expect_str_eq(str(pvc, "kind"), "PersistentVolumeClaim");
        cr_expect_str_eq(str(pvc, "metadata.name"), name);
        cr_expect_str_eq(str(pvc, "spec.storageClassName"), "fast");
        cr_expect_str_eq(str(pvc, "spec.resources.requests.storage"), "2147483648", "the size is the quota");
        cr_expect_str_eq(cJSON_GetArrayItem(get(pvc, "spec.accessModes"), 0)->valuestring, "ReadWriteOnce");
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(get(pvc, "metadata.labels"), "sandboxd.test.run")->valuestring,
                         "r1", "a test's claim carries the run label");
        l[3].value = NULL;
        s.n_labels = 2; /* no instance, no session: no claim */
        cr_expect_eq(engine_kubernetes_pvc_name(&s, name), -EINVAL);
        cJSON_Delete(pvc);
        cJSON_Delete(pod);
}

/* A session that took a pool slot's claim over keeps mounting it (its name is no longer its key's). */
Test(kubernetes, pvc_mode_mounts_a_recorded_claim_and_refuses_a_name_that_is_no_dns_label)
{
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        char name[K8S_NAME_MAX];
        char *body;
        cJSON *pod;

        spec_of(&s, &t, l, NULL);
        s.workspace_claim = "sbx-ws-0123456789abcdef0123456789abcdef";
        cr_assert_eq(engine_kubernetes_pvc_name(&s, name), 0);
        cr_expect_str_eq(name, "sbx-ws-0123456789abcdef0123456789abcdef");
        body = engine_kubernetes_pod_body(&kcfg_pvc, &s, "sbx-0123456789abcdef01234567");
        cr_assert_not_null(body);
        pod = cJSON_Parse(body);
        free(body);
        cr_expect_str_eq(str(named_item(get(pod, "spec.volumes"), "name", "workspace"),
                             "persistentVolumeClaim.claimName"),
                         "sbx-ws-0123456789abcdef0123456789abcdef");
        cJSON_Delete(pod);
        s.workspace_claim = "../Not-A-Label";
        cr_expect_eq(engine_kubernetes_pvc_name(&s, name), -EINVAL);
        cr_expect_null(engine_kubernetes_pod_body(&kcfg_pvc, &s, "sbx-0123456789abcdef01234567"));
        s.workspace_claim = "";
        cr_expect_eq(engine_kubernetes_pvc_name(&s, name), -EINVAL);
}

Test(kubernetes, networkpolicy_denies_everything_for_sandbox_pods)
{
        char *body = engine_kubernetes_netpol_body();
        cJSON *np = cJSON_Parse(body);

        free(body);
        cr_assert_not_null(np);
        cr_expect_str_eq(str(np, "apiVersion"), "networking.k8s.io/v1");
        cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(get(np, "spec.podSelector.matchLabels"), "sandboxd.managed")
                                 ->valuestring,
                         "1");
        cr_expect_eq(cJSON_GetArraySize(get(np, "spec.policyTypes")), 2);
        cr_expect_eq(cJSON_GetArraySize(get(np, "spec.ingress")), 0, "no ingress rule: nothing in");
        cr_expect_eq(cJSON_GetArraySize(get(np, "spec.egress")), 0, "no egress rule: nothing out");
        cJSON_Delete(np);
}

Test(kubernetes, selector_holds_what_kubernetes_can)
{
        const char *const f[] = {"sandboxd.managed=1", "sandboxd.session=.odd.", "sandboxd.pool", NULL};
        char sel[256];

        cr_assert_eq(engine_kubernetes_selector(f, sel, sizeof(sel)), 0);
        cr_expect_str_eq(sel, "sandboxd.managed=1,sandboxd.session,sandboxd.pool");
}

/* ---- credentials ---- */

static char *write_file(const char *dir, const char *name, const char *text)
{
        char *p;
        FILE *f;

        cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
        f = fopen(p, "w");
        cr_assert_not_null(f);
        fputs(text, f);
        fclose(f);
        return p;
}

Test(kubernetes, kubeconfig_with_client_certificate_data)
{
        _cleanup_free_ char *dir = testenv_tmpdir(), *ca = base64_encode("CA-PEM", 6),
                            *cert = base64_encode("CERT-PEM", 8), *key = base64_encode("KEY-PEM", 7);
        char text[2048];
        struct k8s_credentials c = {0};
        struct sbx_error err = {0};
        _cleanup_free_ char *p = NULL;

        snprintf(text, sizeof(text),
                 "apiVersion: v1\nkind: Config\ncurrent-context: tb\n"
                 "clusters:\n- name: other\n  cluster: {server: 'https://10.0.0.1:6443'}\n"
                 "- name: local\n  cluster:\n    server: https://127.0.0.1:6443/\n    certificate-authority-data: %s\n"
                 "contexts:\n- name: tb\n  context: {cluster: local, user: admin, namespace: sbx-ns}\n"
                 "users:\n- name: admin\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n",
                 ca, cert, key);
        p = write_file(dir, "kubeconfig", text);
        cr_assert_eq(k8s_kubeconfig_load(p, &c, &err), 0, "%s", err.msg);
        cr_expect_str_eq(c.server, "https://127.0.0.1:6443");
        cr_expect_str_eq(c.namespace, "sbx-ns");
        cr_expect_eq(c.ca_len, 6);
        cr_expect_eq(memcmp(c.ca_pem, "CA-PEM", 6), 0);
        cr_expect_eq(memcmp(c.cert_pem, "CERT-PEM", 8), 0);
        cr_expect_eq(memcmp(c.key_pem, "KEY-PEM", 7), 0);
        cr_expect_null(c.token);
        k8s_credentials_done(&c);
}

Test(kubernetes, kubeconfig_with_files_relative_to_it_and_a_token)
{
        _cleanup_free_ char *dir = testenv_tmpdir();
        _cleanup_free_ char *ca = write_file(dir, "ca.crt", "THE-CA"), *p = NULL;
        struct k8s_credentials c = {0};
        struct sbx_error err = {0};

        p = write_file(dir, "config",
                       "current-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://[::1]:6443\n"
                       "    certificate-authority: ca.crt\ncontexts:\n- name: c\n  context:\n    cluster: k\n"
                       "    user: u\nusers:\n- name: u\n  user:\n    token: abc.def\n");
        cr_assert_eq(k8s_kubeconfig_load(p, &c, &err), 0, "%s", err.msg);
        cr_expect_str_eq(c.token, "abc.def");
        cr_expect_str_eq(c.ca_pem, "THE-CA");
        cr_expect_str_eq(c.namespace, "");
        k8s_credentials_done(&c);
}

static void expect_refused(const char *text, int code, const char *needle)
{
        _cleanup_free_ char *dir = testenv_tmpdir();
        _cleanup_free_ char *p = write_file(dir, "config", text);
        struct k8s_credentials c = {0};
        struct sbx_error err = {0};

        cr_expect_eq(k8s_kubeconfig_load(p, &c, &err), code, "%s", text);
        cr_expect(strstr(err.msg, needle), "'%s' names '%s'", err.msg, needle);
        cr_expect_null(c.token);
}

Test(kubernetes, malformed_kubeconfigs_are_refused_with_the_reason)
{
        expect_refused("current-context: [unclosed\n", -EINVAL, "not YAML");
        expect_refused("clusters: []\n", -EINVAL, "no current-context");
        expect_refused("current-context: x\ncontexts: []\n", -EINVAL, "context 'x'");
        expect_refused(
                "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                "clusters:\n- name: k\n  cluster: {server: 'http://10.1.2.3:8080'}\n",
                -EINVAL, "neither https:// nor on loopback");
        expect_refused(
                "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                "clusters:\n- name: k\n  cluster: {server: 'https://h:1', certificate-authority-data: '!!'}\n",
                -EINVAL, "certificate-authority-data is not base64");
        expect_refused(
                "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                "clusters:\n- name: k\n  cluster: {server: 'https://h:1'}\n"
                "users:\n- name: u\n  user: {exec: {command: aws}}\n",
                -EOPNOTSUPP, "exec plugin");
        expect_refused(
                "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                "clusters:\n- name: k\n  cluster: {server: 'https://h:1'}\n"
                "users:\n- name: u\n  user: {client-certificate: missing.crt, client-key: missing.key}\n",
                -ENOENT, "missing.crt");
        expect_refused(
                "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                "clusters:\n- name: k\n  cluster: {server: 'https://h:1'}\n"
                "users:\n- name: u\n  user: {client-key-data: S0VZ}\n",
                -EINVAL, "needs its key");
}

Test(kubernetes, in_cluster_credentials)
{
        _cleanup_free_ char *dir = testenv_tmpdir();
        struct k8s_credentials c = {0};
        struct sbx_error err = {0};

        free(write_file(dir, "token", "sa-token\n"));
        free(write_file(dir, "ca.crt", "SA-CA"));
        free(write_file(dir, "namespace", "sandboxes"));
        unsetenv("KUBERNETES_SERVICE_HOST");
        cr_expect_eq(k8s_incluster_load(dir, &c, &err), -ENOENT);
        cr_expect(strstr(err.msg, "KUBERNETES_SERVICE_HOST"), "%s", err.msg);
        setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        cr_assert_eq(k8s_incluster_load(dir, &c, &err), 0, "%s", err.msg);
        cr_expect_str_eq(c.server, "https://10.96.0.1:443");
        cr_expect_str_eq(c.token, "sa-token");
        cr_expect_str_eq(c.ca_pem, "SA-CA");
        cr_expect_str_eq(c.namespace, "sandboxes");
        k8s_credentials_done(&c);
        setenv("KUBERNETES_SERVICE_PORT", "443/evil", 1);
        cr_expect_eq(k8s_incluster_load(dir, &c, &err), -EINVAL);
        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
}

/* ---- a fake API server on loopback: canned replies in order ---- */

struct canned {
        const char *match; /* a substring of the request line */
        const char *reply; /* the whole HTTP reply */
};

struct fake {
        int fd, port;
        const struct canned *script;
        size_t n, next;
        char seen[16][256]; /* request lines */
        size_t n_seen;
        pthread_t th;
};

static const struct canned unexpected = {"", "HTTP/1.1 599 Unexpected\r\nContent-Length: 0\r\n\r\n"};

static void *fake_main(void *ud)
{
        struct fake *f = ud;

        while (f->next < f->n) {
                char buf[8192];
                size_t len = 0;
                ssize_t k;
                int c = accept4(f->fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        break;
                while (len < sizeof(buf) - 1 && (k = read(c, buf + len, sizeof(buf) - 1 - len)) > 0) {
                        len += (size_t)k;
                        buf[len] = '\0';
                        if (strstr(buf, "\r\n\r\n"))
                                break;
                }
                buf[len] = '\0';
                buf[strcspn(buf, "\r")] = '\0';
                if (f->n_seen < 16)
                        snprintf(f->seen[f->n_seen++], 256, "%s", buf);
                const struct canned *cn = &f->script[f->next];
                if (strstr(buf, cn->match))
                        f->next++;
                else
                        cn = &unexpected; /* a compound literal here would die with this block */
                (void)!write(c, cn->reply, strlen(cn->reply));
                close(c);
        }
        return NULL;
}

static void fake_start(struct fake *f, const struct canned *script, size_t n)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

        memset(f, 0, sizeof(*f));
        f->script = script;
        f->n = n;
        f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(f->fd >= 0);
        for (int i = 0; i < 2000; i++) {
                f->port = 22000 + (getpid() + i) % 2000;
                a.sin_port = htons((uint16_t)f->port);
                if (bind(f->fd, (struct sockaddr *)&a, sizeof(a)) == 0)
                        break;
                f->port = 0;
        }
        cr_assert(f->port > 0 && listen(f->fd, 8) == 0);
        cr_assert_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
        shutdown(f->fd, SHUT_RDWR);
        pthread_join(f->th, NULL);
        close(f->fd);
}

static struct engine *engine_on(struct fake *f)
{
        struct k8s_credentials c = {0};
        struct engine *e = NULL;
        struct sbx_error err = {0};

        snprintf(c.server, sizeof(c.server), "http://127.0.0.1:%d", f->port);
        c.token = strdup("t0k3n");
        struct engine_k8s_config cfg = kcfg_hostpath;
        cfg.timeout_ms = 5000;
        cr_assert_eq(engine_kubernetes_new_with(&cfg, &c, &e, &err), 0, "%s", err.msg);
        return e;
}

#define JSON_REPLY(status, body)                                                                                       \
        "HTTP/1.1 " status "\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" body

Test(kubernetes, bad_replies_give_clear_errors)
{
        static const struct canned script[] = {
                {"GET /api/v1/namespaces/sbx/pods/sbx-aa ", JSON_REPLY("200 OK", "<html>not json</html>")},
                {"GET /api/v1/namespaces/sbx/pods/sbx-bb ",
                 JSON_REPLY("404 Not Found",
                            "{\"kind\":\"Status\",\"code\":404,\"message\":\"pods \\\"sbx-bb\\\" not "
                            "found\"}")},
                {"GET /api/v1/namespaces/sbx/pods/sbx-cc ",
                 JSON_REPLY("500 Internal Server Error", "{\"kind\":\"Status\",\"message\":\"etcdserver: timeout\"}")},
                {"GET /api/v1/namespaces/sbx/pods/sbx-dd ",
                 JSON_REPLY("403 Forbidden",
                            "{\"kind\":\"Status\",\"message\":\"pods is forbidden: User cannot get\"}")},
                {"GET /api/v1/namespaces/sbx/pods?labelSelector=", JSON_REPLY("200 OK", "{\"kind\":\"PodList\"}")},
                {"GET /api/v1/namespaces/sbx/pods/sbx-ee ", "HTTP/1.1 502 Bad Gateway\r\n\r\nupstream\x01 gone"},
                /* being deleted, its container dead: removed, though the object lingers */
                {"GET /api/v1/namespaces/sbx/pods/sbx-ff ",
                 JSON_REPLY("200 OK",
                            "{\"metadata\":{\"name\":\"sbx-ff\",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
                            "\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"containerStatuses\":[{\"state\":"
                            "{\"terminated\":{\"exitCode\":0}}}]}}")},
                /* being deleted, still running (its node lost, say): there, and not running */
                {"GET /api/v1/namespaces/sbx/pods/sbx-gg ",
                 JSON_REPLY("200 OK",
                            "{\"metadata\":{\"name\":\"sbx-gg\",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
                            "\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"containerStatuses\":[{\"state\":"
                            "{\"running\":{}}}]}}")},
                /* deleted, as kubelet 1.20 reports a container it killed and removed (the
                 * testbed, test_k8s_flows.c): waiting, lastState ContainerStatusUnknown, phase
                 * Failed; ended, so removed: the phase says so */
                {"GET /api/v1/namespaces/sbx/pods/sbx-hh ",
                 JSON_REPLY("200 OK",
                            "{\"metadata\":{\"name\":\"sbx-hh\",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
                            "\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Failed\",\"containerStatuses\":"
                            "[{\"state\":{\"waiting\":{\"reason\":\"ContainerCreating\"}},\"lastState\":{\"terminated\":"
                            "{\"exitCode\":137,\"reason\":\"ContainerStatusUnknown\"}}}]}}")},
        };
        struct fake f;
        struct engine *e;
        struct engine_container_info info;
        struct engine_container_summary *list = NULL;
        size_t n = 0;
        const char *const filt[] = {"sandboxd.managed=1", NULL};
        struct sbx_error err = {0};

        fake_start(&f, script, ELEMENTSOF(script));
        e = engine_on(&f);
        cr_expect_eq(engine_inspect(e, "sbx-aa", &info, &err), -EPROTO);
        cr_expect(strstr(err.msg, "not a JSON object"), "%s", err.msg);
        cr_expect_eq(engine_inspect(e, "sbx-bb", &info, &err), -ENOENT);
        cr_expect(strstr(err.msg, "404") && strstr(err.msg, "not found"), "%s", err.msg);
        cr_expect_eq(engine_inspect(e, "sbx-cc", &info, &err), -EIO);
        cr_expect(strstr(err.msg, "etcdserver: timeout"), "%s", err.msg);
        cr_expect_eq(engine_inspect(e, "sbx-dd", &info, &err), -EACCES);
        cr_expect(strstr(err.msg, "forbidden"), "%s", err.msg);
        cr_expect_eq(engine_list(e, filt, true, &list, &n, &err), -EPROTO);
        cr_expect(strstr(err.msg, "no items"), "%s", err.msg);
        cr_expect_eq(engine_inspect(e, "sbx-ee", &info, &err), -EIO);
        cr_expect(strstr(err.msg, "502") && strstr(err.msg, "upstream  gone"), "%s", err.msg);
        cr_expect_eq(engine_inspect(e, "sbx-ff", &info, &err), -ENOENT, "%s", err.msg);
        cr_expect_eq(engine_inspect(e, "sbx-gg", &info, &err), 0, "%s", err.msg);
        cr_expect_str_eq(info.status, "removing");
        cr_expect_not(info.running);
        cr_expect_eq(engine_inspect(e, "sbx-hh", &info, &err), -ENOENT, "a deleted Pod whose phase is Failed: %s",
                     err.msg);
        cr_expect_eq(engine_inspect(e, "../../secrets/x", &info, &err), -ENOENT, "no path is built from a bad id");
        cr_expect(strstr(f.seen[0], "GET /api/v1/namespaces/sbx/pods/sbx-aa"), "%s", f.seen[0]);
        cr_expect_eq(engine_api_errors(e) >= 3, true);
        fake_stop(&f);
        engine_free(e);
}

struct got {
        char actions[16][32];
        char ids[16][64];
        int codes[16];
        size_t n;
};

static int collect(const struct engine_event *ev, void *ud)
{
        struct got *g = ud;
        if (g->n < 16) {
                snprintf(g->actions[g->n], 32, "%s", ev->action);
                snprintf(g->ids[g->n], 64, "%s", ev->id);
                g->codes[g->n] = ev->exit_code;
                g->n++;
        }
        return strcmp(ev->action, "destroy") == 0 && strcmp(ev->id, "sbx-two") == 0; /* the last one: stop */
}

#define POD(name, state)                                                                                               \
        "{\"metadata\":{\"name\":\"" name                                                                              \
        "\",\"resourceVersion\":\"7\",\"labels\":{\"sandboxd.managed\":\"1\"}},"                                       \
        "\"status\":{\"containerStatuses\":[{\"state\":" state "}]}}"

Test(kubernetes, watch_resumes_and_relists_after_410)
{
        static const struct canned script[] = {
                /* the first list: two running Pods, version 5 */
                {"GET /api/v1/namespaces/sbx/pods?labelSelector=sandboxd.managed%3D1 ",
                 JSON_REPLY("200 OK",
                            "{\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[" POD(
                                    "sbx-one", "{\"running\":{}}") "," POD("sbx-two", "{\"running\":{}}") "]}")},
                /* a watch from 5: sbx-one dies (137), then the connection drops */
                {"resourceVersion=5&",
                 JSON_REPLY("200 OK", "{\"type\":\"MODIFIED\",\"object\":" POD("sbx-one",
                                                                               "{\"terminated\":{\"exitCode\":137,"
                                                                               "\"reason\":\"OOMKilled\"}}") "}\n")},
                /* resumed from 7, the version it last saw: too old */
                {"resourceVersion=7&", JSON_REPLY("200 OK",
                                                  "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                                                  "\"message\":\"too old resource version\"}}\n")},
                /* listed again: sbx-two went meanwhile */
                {"GET /api/v1/namespaces/sbx/pods?labelSelector=sandboxd.managed%3D1 ",
                 JSON_REPLY("200 OK", "{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[" POD(
                                              "sbx-one", "{\"terminated\":{\"exitCode\":137}}") "]}")},
        };
        const char *const filt[] = {"sandboxd.managed=1", NULL};
        struct fake f;
        struct engine *e;
        struct got g = {0};
        struct sbx_error err = {0};
        volatile bool stop = false;

        fake_start(&f, script, ELEMENTSOF(script));
        e = engine_on(&f);
        cr_assert_eq(engine_events_follow(e, filt, NULL, collect, &g, &stop, 10000, &err), 0, "%s", err.msg);
        cr_assert_eq(g.n, 4, "oom, die, then after the relist die and destroy of sbx-two (got %zu)", g.n);
        cr_expect_str_eq(g.actions[0], "oom");
        cr_expect_str_eq(g.actions[1], "die");
        cr_expect_str_eq(g.ids[1], "sbx-one");
        cr_expect_eq(g.codes[1], 137);
        cr_expect_str_eq(g.actions[2], "die");
        cr_expect_str_eq(g.ids[2], "sbx-two");
        cr_expect_str_eq(g.actions[3], "destroy");
        cr_expect_str_eq(g.ids[3], "sbx-two");
        cr_expect_eq(f.n_seen, 4, "one list, two watches, one list: nothing repeated");
        fake_stop(&f);
        engine_free(e);
}

/* ---- node health: a NotReady node and a deleted one, told as "lost" with the cause ---- */

struct lost_got {
        pthread_mutex_t lock;
        char ids[4][64], causes[4][160];
        size_t n;
        volatile bool *stop;
};

static int collect_lost(const struct engine_event *ev, void *ud)
{
        struct lost_got *g = ud;
        bool done;

        pthread_mutex_lock(&g->lock);
        if (strcmp(ev->action, "lost") == 0 && g->n < 4) {
                snprintf(g->ids[g->n], 64, "%s", ev->id);
                snprintf(g->causes[g->n], 160, "%s", ev->cause);
                g->n++;
        }
        done = g->n == 2;
        pthread_mutex_unlock(&g->lock);
        if (done)
                __atomic_store_n(g->stop, true,
                                 __ATOMIC_RELAXED); /* the fake answers nothing more: the watch ends on it */
        return done;
}

#define POD_ON(name, node)                                                                                             \
        "{\"metadata\":{\"name\":\"" name                                                                              \
        "\",\"resourceVersion\":\"5\",\"labels\":{\"sandboxd.managed\":\"1\"}},"                                       \
        "\"spec\":{\"nodeName\":\"" node                                                                               \
        "\"},\"status\":{\"containerStatuses\":[{\"ready\":true,\"state\":"                                            \
        "{\"running\":{}}}]}}"
#define NODE(name, ready)                                                                                              \
        "{\"metadata\":{\"name\":\"" name                                                                              \
        "\",\"resourceVersion\":\"11\"},\"status\":{\"conditions\":[{\"type\":"                                        \
        "\"Ready\",\"status\":\"" ready "\"}]}}"

Test(kubernetes, a_notready_and_a_deleted_node_make_their_pods_lost)
{
        /* in order; a request that comes out of turn (the Pod watch, from the other thread) gets a 599 and
         * retries, so the Node watch's requests are the ones that move the script */
        static const struct canned script[] = {
                {"GET /api/v1/namespaces/sbx/pods?labelSelector=sandboxd.managed%3D1 ",
                 JSON_REPLY("200 OK", "{\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[" POD_ON(
                                              "sbx-one", "n1") "," POD_ON("sbx-two", "n2") "]}")},
                {"GET /api/v1/nodes ",
                 JSON_REPLY("200 OK", "{\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[" NODE(
                                              "n1", "True") "," NODE("n2", "True") "]}")},
                {"GET /api/v1/nodes?watch=1&allowWatchBookmarks=true&timeoutSeconds=240&resourceVersion=10 ",
                 JSON_REPLY("200 OK",
                            "{\"type\":\"MODIFIED\",\"object\":" NODE(
                                    "n1", "Unknown") "}\n{\"type\":\"DELETED\",\"object\":" NODE("n2", "True") "}\n")},
        };
        const char *const filt[] = {"sandboxd.managed=1", NULL};
        const char *const acts[] = {"die", "destroy", "lost", NULL};
        volatile bool stop = false;
        struct lost_got g = {.lock = PTHREAD_MUTEX_INITIALIZER, .stop = &stop};
        struct sbx_error err = {0};
        struct fake f;
        struct engine *e;

        cr_assert_eq(engine_docker_global_init(), 0); /* main's, before two threads use curl */
        fake_start(&f, script, ELEMENTSOF(script));
        e = engine_on(&f);
        cr_assert_eq(engine_events_follow(e, filt, acts, collect_lost, &g, &stop, 10000, &err), 0, "%s", err.msg);
        cr_assert_eq(g.n, 2, "both Pods lost (got %zu)", g.n);
        cr_expect_str_eq(g.ids[0], "sbx-one");
        cr_expect_str_eq(g.causes[0], "node_not_ready: n1");
        cr_expect_str_eq(g.ids[1], "sbx-two");
        cr_expect_str_eq(g.causes[1], "node_gone: n2");
        cr_expect_eq(engine_kubernetes_nodes_watched(e), 1);
        fake_stop(&f);
        engine_free(e);
}
