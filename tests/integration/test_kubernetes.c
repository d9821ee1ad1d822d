/* test_kubernetes.c — the Kubernetes engine against a real cluster (the
 * testbed, scripts/k8s-testbed.sh): a hardened Pod created, inspected,
 * listed and removed through the engine, with the fields the API server
 * stored checked (a field it does not know it drops in silence); its events
 * seen through the watch; a claim per session in pvc mode; a daemon on
 * engine = kubernetes running `exec` through the runner over the hostPath
 * session directory; and the warm pool: a new session's first exec served
 * by a slot's Pod (the same Pod uid, relabelled, with its claim in pvc
 * mode, on PersistentVolumes the test makes since the testbed has no
 * provisioner), the workspace kept over a recreation, the refill, a daemon
 * killed mid-claim, a slot Pod dying during a claim, and --gc of a lost slot
 * and of a pool no longer configured.
 *
 * Skips with the reason when SANDBOXD_K8S_KUBECONFIG is unset. Everything
 * lives in a namespace of this run and test process (labelled with the run
 * label), deleted at exit even after a failure, which deletes every Pod, claim and policy
 * in it. The images come from dockerd (k8s-testbed.sh import): the Pods use
 * imagePullPolicy Never. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml.h>

#include "fixture.h"
#include "nodeenv.h"
#include "sandboxd/config.h"
#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/engine_kubernetes.h"
#include "sandboxd/exec.h"
#include "sandboxd/gc.h"
#include "sandboxd/pool.h"
#include "sandboxd/hub.h"
#include "sandboxd/node.h"
#include "sandboxd/hub_dir.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/utf8.h"
#include "k8senv.h"
#include "testenv.h"

#define IMAGE "sandboxd/test:latest"

static char ns[64];
static struct k8s_credentials creds;
static bool have_cluster;

/* A raw request with the test's own credentials (the namespace, and the
 * Pod as the server stored it). Returns the HTTP status; body in *ret. */
static long kapi(const char *method, const char *path, const char *body, char **ret)
{
        return k8senv_api(&creds, method, path, body, NULL, ret);
}

static void delete_namespace(void)
{
        char path[128];

        if (!ns[0])
                return;
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s?gracePeriodSeconds=0", ns);
        (void)kapi("DELETE", path, NULL, NULL);
}

/* The run's namespace, once per process; false: no cluster (skip). */
static bool cluster(void)
{
        static int state; /* 0 not tried, 1 up, -1 none */
        const char *kc = getenv("SANDBOXD_K8S_KUBECONFIG");
        struct sbx_error err = {0};
        char body[512];
        long st;
        size_t o = 0;

        if (state)
                return state > 0;
        state = -1;
        if (!kc || !*kc)
                return false;
        (void)testenv_docker(); /* curl_global_init, and the run's atexit cleanup */
        cr_assert_eq(k8s_kubeconfig_load(kc, &creds, &err), 0, "%s", err.msg);
        o = (size_t)snprintf(ns, sizeof(ns), "sbx-t-");
        for (const char *p = testenv_run_id(); *p && o < 40; p++)
                ns[o++] = isalnum((unsigned char)*p) ? (char)tolower((unsigned char)*p) : '-';
        /* one per test process (Criterion forks each test, and each deletes its own at exit) */
        snprintf(ns + o, sizeof(ns) - o, "-%d", (int)getpid());
        snprintf(
                body, sizeof(body),
                "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"%s\",\"labels\":{\"%s\":\"%s\"}}}",
                ns, TESTENV_RUN_LABEL, testenv_run_id());
        st = kapi("POST", "/api/v1/namespaces", body, NULL);
        cr_assert(st == 201 || st == 409, "creating namespace %s: HTTP %ld", ns, st);
        atexit(delete_namespace);
        /* the service-account admission refuses Pods until the controller made "default" */
        snprintf(body, sizeof(body), "/api/v1/namespaces/%s/serviceaccounts/default", ns);
        cr_assert(TESTENV_WAIT_UNTIL(kapi("GET", body, NULL, NULL) == 200, 30000),
                  "namespace %s has its default "
                  "service account",
                  ns);
        have_cluster = true;
        state = 1;
        return true;
}

#define NEED_CLUSTER()                                                                                                 \
        do {                                                                                                           \
                if (!cluster())                                                                                        \
                        cr_skip_test(                                                                                  \
                                "no Kubernetes testbed: SANDBOXD_K8S_KUBECONFIG is unset "                             \
                                "(bash scripts/k8s-testbed.sh start prints one)");                                     \
        } while (0)

static struct engine *k8s_engine(const char *mode)
{
        const char *kc = getenv("SANDBOXD_K8S_KUBECONFIG");
        struct engine_k8s_config cfg = {.kubeconfig = kc,
                                        .namespace = ns,
                                        .workspace_mode = mode,
                                        .workspace_bytes = 64 << 20,
                                        .image_pull_policy = "Never",
                                        .timeout_ms = 30000,
                                        .start_timeout_ms = 120000};
        struct engine *e = NULL;
        struct sbx_error err = {0};

        cr_assert_eq(engine_kubernetes_new(&cfg, &e, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
        return e;
}

static void test_spec(struct engine_spec *s, struct engine_tmpfs *t, struct engine_label *l, const char *session,
                      const char *workspace)
{
        *t = (struct engine_tmpfs){.path = "/tmp", .size_bytes = 16 << 20, .noexec = true};
        l[0] = (struct engine_label){"sandboxd.managed", "1"};
        l[1] = (struct engine_label){"sandboxd.user", "u1"};
        l[2] = (struct engine_label){"sandboxd.session", session};
        l[3] = (struct engine_label){"sandboxd.instance", testenv_run_id()};
        l[4] = (struct engine_label){TESTENV_RUN_LABEL, testenv_run_id()};
        *s = (struct engine_spec){.image = IMAGE,
                                  .uid = 23456,
                                  .gid = 23456,
                                  .memory_bytes = 64 << 20,
                                  .nano_cpus = 500000000,
                                  .cpu_weight = 256,
                                  .readonly_rootfs = true,
                                  .tmpfs = t,
                                  .n_tmpfs = 1,
                                  .workspace = workspace,
                                  .hostname = "sandbox",
                                  .labels = l,
                                  .n_labels = 5};
}

static bool listed(struct engine *e, const char *id)
{
        char f[160];
        const char *const filters[] = {f, NULL};
        struct engine_container_summary *list = NULL;
        size_t n = 0;
        bool found = false;

        snprintf(f, sizeof(f), "%s=%s", TESTENV_RUN_LABEL, testenv_run_id());
        cr_assert_eq(engine_list(e, filters, true, &list, &n, NULL), 0);
        for (size_t i = 0; i < n; i++)
                found |= strcmp(list[i].id, id) == 0;
        free(list);
        return found;
}

static const cJSON *jget(const cJSON *o, const char *path)
{
        return k8senv_jget(o, path);
}

Test(kubernetes, hardened_pod_created_inspected_listed_removed)
{
        NEED_CLUSTER();
        struct engine *e = k8s_engine("hostpath");
        _cleanup_free_ char *ws = testenv_tmpdir();
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        struct engine_container_info info;
        struct sbx_error err = {0};
        char id[ENGINE_ID_STR_MAX], path[256];
        _cleanup_free_ char *raw = NULL;
        cJSON *pod;
        const cJSON *c;

        cr_assert_eq(chown(ws, 23456, 23456), 0);
        test_spec(&s, &t, l, "s1", ws);
        cr_assert_eq(engine_create(e, &s, id, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_start(e, id, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_inspect(e, id, &info, &err), 0, "%s", err.msg);
        cr_expect(info.running, "status %s", info.status);
        cr_expect_str_eq(info.status, "running");
        cr_expect(info.readonly_rootfs);
        cr_expect_not(info.privileged);
        cr_expect_eq(info.memory, 64 << 20);
        cr_expect_eq(info.nano_cpus, 500000000);
        cr_expect_str_eq(engine_label_get(info.labels, info.n_labels, "sandboxd.session"), "s1");
        cr_expect(listed(e, id));

        /* what the API server kept: a field it did not know would be gone */
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, id);
        cr_assert_eq(kapi("GET", path, NULL, &raw), 200);
        pod = cJSON_Parse(raw);
        c = cJSON_GetArrayItem(jget(pod, "spec.containers"), 0);
        cr_expect_str_eq(jget(pod, "spec.securityContext.seccompProfile.type")->valuestring, "RuntimeDefault");
        cr_expect_str_eq(jget(c, "securityContext.seccompProfile.type")->valuestring, "RuntimeDefault");
        cr_expect(cJSON_IsFalse(jget(c, "securityContext.allowPrivilegeEscalation")));
        cr_expect(cJSON_IsTrue(jget(c, "securityContext.readOnlyRootFilesystem")));
        cr_expect(cJSON_IsTrue(jget(c, "securityContext.runAsNonRoot")));
        cr_expect_eq(jget(c, "securityContext.runAsUser")->valueint, 23456);
        cr_expect_str_eq(cJSON_GetArrayItem(jget(c, "securityContext.capabilities.drop"), 0)->valuestring, "ALL");
        cr_expect(cJSON_IsFalse(jget(pod, "spec.automountServiceAccountToken")));
        cr_expect(cJSON_IsFalse(jget(pod, "spec.enableServiceLinks")));
        {
                const cJSON *m;
                bool token = false;
                cJSON_ArrayForEach(m, jget(c, "volumeMounts"))
                        token |= strstr(cJSON_GetObjectItem(m, "mountPath")->valuestring, "serviceaccount") != NULL;
                cr_expect_not(token, "no service-account token is mounted");
        }
        cJSON_Delete(pod);

        /* the default-deny policy of the namespace exists */
        snprintf(path, sizeof(path), "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/%s", ns,
                 K8S_NETPOL_NAME);
        cr_expect_eq(kapi("GET", path, NULL, NULL), 200);

        cr_assert_eq(engine_remove(e, id, &err), 0, "%s", err.msg);
        cr_expect_eq(engine_inspect(e, id, &info, &err), -ENOENT);
        cr_expect_not(listed(e, id));
        engine_free(e);
}

Test(kubernetes, an_image_that_is_not_there_fails_the_start_with_the_reason)
{
        NEED_CLUSTER();
        struct engine *e = k8s_engine("hostpath");
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        struct sbx_error err = {0};
        char id[ENGINE_ID_STR_MAX];

        test_spec(&s, &t, l, "s-noimage", NULL);
        s.image = "sandboxd/not-there:latest";
        cr_assert_eq(engine_create(e, &s, id, &err), 0, "%s", err.msg);
        cr_expect_eq(engine_start(e, id, &err), -ENOENT);
        cr_expect(strstr(err.msg, "ErrImageNeverPull"), "%s", err.msg);
        cr_expect_eq(engine_remove(e, id, NULL), 0);
        engine_free(e);
}

struct watch {
        struct engine *e;
        volatile bool stop;
        pthread_mutex_t lock;
        char session[48];  /* this test's Pods only: other tests' Pods of the run may still be going */
        char seen[64][48]; /* "action id" */
        size_t n;
        bool overflow;
        volatile bool ended; /* engine_events_follow returned (rc) */
        int rc;
};

static int on_ev(const struct engine_event *ev, void *ud)
{
        struct watch *w = ud;
        pthread_mutex_lock(&w->lock);
        if (w->n < 64)
                snprintf(w->seen[w->n++], 48, "%s %s", ev->action, ev->id);
        else
                w->overflow = true;
        pthread_mutex_unlock(&w->lock);
        return 0;
}

static void *watch_main(void *ud)
{
        struct watch *w = ud;
        char f[160], g[96];
        /* the run's Pods; with a session named, that session's alone */
        const char *const filters[] = {f, w->session[0] ? g : NULL, NULL};
        /* every action the engine tells; "lost" named, so node health is watched too */
        const char *const actions[] = {"create", "start", "oom", "die", "destroy", "lost", NULL};

        snprintf(f, sizeof(f), "%s=%s", TESTENV_RUN_LABEL, testenv_run_id());
        snprintf(g, sizeof(g), "sandboxd.session=%s", w->session);
        w->rc = engine_events_follow(w->e, filters, actions, on_ev, w, &w->stop, 0, NULL);
        w->ended = true;
        return NULL;
}

static bool saw(struct watch *w, const char *action, const char *id)
{
        char want[48];
        bool found = false;
        snprintf(want, sizeof(want), "%s %s", action, id);
        pthread_mutex_lock(&w->lock);
        for (size_t i = 0; i < w->n; i++)
                found |= strcmp(w->seen[i], want) == 0;
        pthread_mutex_unlock(&w->lock);
        return found;
}

Test(kubernetes, the_watch_tells_start_die_and_destroy)
{
        NEED_CLUSTER();
        struct watch w = {.e = k8s_engine("hostpath"), .lock = PTHREAD_MUTEX_INITIALIZER};
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        struct sbx_error err = {0};
        char id[ENGINE_ID_STR_MAX];
        pthread_t th;

        snprintf(w.session, sizeof(w.session), "s-watch-%d", (int)getpid());
        cr_assert_eq(pthread_create(&th, NULL, watch_main, &w), 0);
        test_spec(&s, &t, l, w.session, NULL);
        cr_assert_eq(engine_create(w.e, &s, id, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_start(w.e, id, &err), 0, "%s", err.msg);
        cr_expect(TESTENV_WAIT_UNTIL(saw(&w, "start", id), 60000), "start of %s seen", id);
        cr_assert_eq(engine_remove(w.e, id, &err), 0, "%s", err.msg);
        bool destroyed = TESTENV_WAIT_UNTIL(saw(&w, "destroy", id), 60000);
        cr_expect(destroyed, "destroy of %s seen", id);
        if (!destroyed) {
                /* what the watch did tell, for the diagnosis of a watch that loses an event */
                pthread_mutex_lock(&w.lock);
                for (size_t i = 0; i < w.n; i++)
                        cr_log_error("told: %s", w.seen[i]);
                pthread_mutex_unlock(&w.lock);
                cr_log_error("the follow %s (rc %d)", w.ended ? "had returned" : "was still going", w.rc);
        }
        cr_expect(saw(&w, "die", id), "a Pod that goes dies first");
        cr_expect(!w.overflow, "only this test's Pod's events were told");
        w.stop = true;
        pthread_join(th, NULL);
        cr_expect_eq(w.rc, 0);
        engine_free(w.e);
}

Test(kubernetes, pvc_mode_gives_the_session_one_claim_that_outlives_its_pods)
{
        NEED_CLUSTER();
        struct engine *e = k8s_engine("pvc");
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        struct sbx_error err = {0};
        char id1[ENGINE_ID_STR_MAX], id2[ENGINE_ID_STR_MAX], claim[K8S_NAME_MAX], path[256];
        _cleanup_free_ char *raw = NULL;
        cJSON *pvc;

        test_spec(&s, &t, l, "s-pvc", "unused-in-pvc-mode");
        cr_assert_eq(engine_kubernetes_pvc_name(&s, claim), 0);
        cr_assert_eq(engine_create(e, &s, id1, &err), 0, "%s", err.msg);
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, claim);
        cr_assert_eq(kapi("GET", path, NULL, &raw), 200);
        pvc = cJSON_Parse(raw);
        cr_expect_str_eq(jget(pvc, "spec.resources.requests.storage")->valuestring, "67108864",
                         "the size is the quota");
        cJSON_Delete(pvc);
        /* the testbed has no provisioner: the claim stays Pending and the Pod unscheduled; what is
         * checked is that a second Pod of the session uses the same claim, and removing Pods keeps it */
        cr_assert_eq(engine_remove(e, id1, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_create(e, &s, id2, &err), 0, "%s", err.msg);
        cr_expect_eq(kapi("GET", path, NULL, NULL), 200, "the claim outlives the session's first Pod");
        cr_assert_eq(engine_remove(e, id2, &err), 0, "%s", err.msg);
        cr_expect_eq(kapi("GET", path, NULL, NULL), 200, "and its second");
        cr_assert_eq(engine_workspace_drop(e, testenv_run_id(), "u1", "s-pvc", NULL, &err), 0, "%s", err.msg);
        cr_expect(TESTENV_WAIT_UNTIL(kapi("GET", path, NULL, NULL) == 404, 30000), "purged: the claim goes");
        engine_free(e);
}

static cJSON *kget(const char *path);

Test(kubernetes, a_daemon_on_kubernetes_runs_exec_through_the_runner)
{
        NEED_CLUSTER();
        struct sbx_config cfg;
        struct daemon *d;
        struct exec_request req = {.user = "u1", .session = "k1", .command = "id -u; echo hello", .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        char uid[16];

        fixture_config(&cfg);
        snprintf(cfg.engine, sizeof(cfg.engine), "kubernetes");
        snprintf(cfg.kube_config, sizeof(cfg.kube_config), "%s", getenv("SANDBOXD_K8S_KUBECONFIG"));
        snprintf(cfg.kube_namespace, sizeof(cfg.kube_namespace), "%s", ns);
        snprintf(cfg.kube_image_pull_policy, sizeof(cfg.kube_image_pull_policy), "Never");
        d = fixture_open(&cfg, true);
        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s", err.msg);
        cr_expect_str_eq(res.via, "runner");
        cr_expect_eq(res.exit_code, 0);
        cr_expect(strstr(res.stdout_head, "hello"), "%.*s", (int)res.stdout_head_len, res.stdout_head);
        snprintf(uid, sizeof(uid), "%.*s", (int)strcspn(res.stdout_head, "\n"), res.stdout_head);
        cr_expect(atoi(uid) >= cfg.sandbox_uid_lo && atoi(uid) <= cfg.sandbox_uid_hi, "runs as the session's uid: %s",
                  uid);
        exec_result_done(&res);
        /* the session's user, from the identity files the Pod carries (no file of the control's node) */
        {
                char want[128], path[512], control_passwd[SBX_PATH_MAX + 64];
                const cJSON *pod, *vol;
                cJSON *list;
                _cleanup_free_ char *o =
                        fixture_run(d, "k1", "id -un; id -gn; grep \"^[^:]*:[^:]*:$(id -u):\" /etc/passwd", 0, NULL);
                snprintf(want, sizeof(want), "sandbox\nsandbox\nsandbox:x:%s:%s:sandbox:/workspace:/bin/sh\n", uid,
                         uid);
                cr_expect_str_eq(o, want);
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?labelSelector=sandboxd.session%%3Dk1", ns);
                list = kget(path);
                cr_assert_not_null(list);
                pod = cJSON_GetArrayItem(jget(list, "items"), 0);
                cr_assert_not_null(pod, "the session's Pod");
                snprintf(control_passwd, sizeof(control_passwd), "%s/identities/%s.passwd", cfg.data_dir, uid);
                cr_expect_eq(access(control_passwd, R_OK), 0, "the control's file %s", control_passwd);
                cJSON_ArrayForEach(vol, jget(pod, "spec.volumes")) {
                        const cJSON *hp = jget(vol, "hostPath.path");
                        cr_expect(!cJSON_IsString(hp) || !strstr(hp->valuestring, "/identities/"),
                                  "an identity file by hostPath: %s", hp->valuestring);
                }
                cJSON_Delete(list);
        }
        /* what the Pod is, seen from inside: the init as PID 1 (the runner its child), no
         * capabilities, no_new_privs, seccomp filtering, a read-only root, /tmp in memory */
        {
                _cleanup_free_ char *o = fixture_run(
                        d, "k1",
                        "tr '\\0' ' ' < /proc/1/cmdline; echo; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status;"
                        " touch /rootfs-write 2>/dev/null && echo root-writable || echo root-readonly;"
                        " grep ' /tmp ' /proc/mounts | cut -d' ' -f3",
                        0, NULL);
                cr_expect(strstr(o, K8S_INIT_PATH " -- /run/sandboxd-runner"), "PID 1: %s", o);
                cr_expect(strstr(o, "CapEff:\t0000000000000000"), "%s", o);
                cr_expect(strstr(o, "NoNewPrivs:\t1"), "%s", o);
                cr_expect(strstr(o, "Seccomp:\t2"), "%s", o);
                cr_expect(strstr(o, "root-readonly"), "%s", o);
                cr_expect(strstr(o, "tmpfs"), "%s", o);
        }
        cr_expect_eq(session_destroy(d->sessions, "u1", "k1", true, &err), 0, "%s", err.msg);
        daemon_close(d);
}

/* ---- the Role of deploy/kubernetes/rbac.yaml is enough, and each verb is needed ---- */

static cJSON *yaml_to_json(yaml_document_t *d, yaml_node_t *n)
{
        cJSON *o;

        switch (n->type) {
        case YAML_SCALAR_NODE:
                return cJSON_CreateString((const char *)n->data.scalar.value);
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

/* The document of kind `kind` in the deploy file. */
/* The first document of a kind ("Role"), or of a kind and name ("ClusterRole/x"). */
static cJSON *deploy_doc(const char *file, const char *kind)
{
        char path[512];
        FILE *f;
        yaml_parser_t parser;
        cJSON *found = NULL;

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
                cJSON *j = yaml_to_json(&doc, root);
                yaml_document_delete(&doc);
                size_t kl = strcspn(kind, "/");
                bool match = cJSON_IsString(jget(j, "kind")) && strlen(jget(j, "kind")->valuestring) == kl &&
                             strncmp(jget(j, "kind")->valuestring, kind, kl) == 0 &&
                             (!kind[kl] || (cJSON_IsString(jget(j, "metadata.name")) &&
                                            strcmp(jget(j, "metadata.name")->valuestring, kind + kl + 1) == 0));
                if (!found && match)
                        found = j;
                else
                        cJSON_Delete(j);
        }
        yaml_parser_delete(&parser);
        fclose(f);
        cr_assert_not_null(found, "%s holds a %s", file, kind);
        return found;
}

/* A service account `sa` bound to the deploy Role (without `drop_verb` on
 * `resource` when set) in the test namespace; its token (malloc'd). */
static char *account_with_role(const char *sa, const char *resource, const char *drop_verb)
{
        cJSON *role = deploy_doc("rbac.yaml", "Role"), *rule;
        char path[256], body[1024];
        char *text, *raw = NULL, secret[128] = "";
        unsigned char *token = NULL;
        size_t token_len = 0;

        cJSON *meta = cJSON_GetObjectItem(role, "metadata");
        cJSON_ReplaceItemInObject(meta, "namespace", cJSON_CreateString(ns));
        cJSON_ReplaceItemInObject(meta, "name", cJSON_CreateString(sa));
        cJSON_ArrayForEach(rule, jget(role, "rules")) {
                const cJSON *res = cJSON_GetArrayItem(jget(rule, "resources"), 0);
                cJSON *verbs = cJSON_GetObjectItem(rule, "verbs");
                if (!drop_verb || strcmp(res->valuestring, resource) != 0)
                        continue;
                for (int i = 0; i < cJSON_GetArraySize(verbs); i++)
                        if (strcmp(cJSON_GetArrayItem(verbs, i)->valuestring, drop_verb) == 0)
                                cJSON_DeleteItemFromArray(verbs, i--);
        }
        text = cJSON_PrintUnformatted(role);
        cJSON_Delete(role);
        snprintf(path, sizeof(path), "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles", ns);
        cr_assert_eq(kapi("POST", path, text, NULL), 201, "the deploy Role is accepted");
        free(text);
        snprintf(body, sizeof(body), "{\"metadata\":{\"name\":\"%s\"}}", sa);
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/serviceaccounts", ns);
        cr_assert_eq(kapi("POST", path, body, NULL), 201);
        snprintf(body, sizeof(body),
                 "{\"metadata\":{\"name\":\"%s\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"%s\","
                 "\"namespace\":\"%s\"}],\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"Role\","
                 "\"name\":\"%s\"}}",
                 sa, sa, ns, sa);
        snprintf(path, sizeof(path), "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings", ns);
        cr_assert_eq(kapi("POST", path, body, NULL), 201);
        /* Kubernetes 1.20: the token controller makes the account's token secret */
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/serviceaccounts/%s", ns, sa);
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             bool ok = false;
                                             free(raw);
                                             raw = NULL;
                                             if (kapi("GET", path, NULL, &raw) == 200) {
                                                     cJSON *j = cJSON_Parse(raw);
                                                     const cJSON *n =
                                                             jget(cJSON_GetArrayItem(jget(j, "secrets"), 0), "name");
                                                     if (cJSON_IsString(n)) {
                                                             snprintf(secret, sizeof(secret), "%s", n->valuestring);
                                                             ok = true;
                                                     }
                                                     cJSON_Delete(j);
                                             }
                                             ok;
                                     }),
                                     30000),
                  "the token controller made a token for %s", sa);
        free(raw);
        raw = NULL;
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", ns, secret);
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             bool ok = false;
                                             free(raw);
                                             raw = NULL;
                                             if (kapi("GET", path, NULL, &raw) == 200) {
                                                     cJSON *j = cJSON_Parse(raw);
                                                     const cJSON *t = jget(j, "data.token");
                                                     if (cJSON_IsString(t))
                                                             ok = base64_decode(t->valuestring, strlen(t->valuestring),
                                                                                &token, &token_len) == 0;
                                                     cJSON_Delete(j);
                                             }
                                             ok;
                                     }),
                                     30000),
                  "secret %s holds a token", secret);
        free(raw);
        text = strndup((char *)token, token_len);
        free(token);
        return text;
}

/* Cluster-scoped objects this process made (the namespace's deletion does
 * not take them): deleted at exit. */
static char cluster_objs[8][256];
static size_t n_cluster_objs;

static void delete_cluster_objs(void)
{
        for (size_t i = 0; i < n_cluster_objs; i++)
                (void)kapi("DELETE", cluster_objs[i], NULL, NULL);
}

/* The deploy ClusterRole sandboxd-node-reader (without drop_verb when set)
 * bound to the account sa of the test namespace. */
static void bind_node_reader(const char *sa, const char *drop_verb)
{
        cJSON *role = deploy_doc("rbac.yaml", "ClusterRole/sandboxd-node-reader"), *rule;
        char name[128], path[256], body[1024];
        char *text;

        snprintf(name, sizeof(name), "%s-%s", ns, sa);
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(role, "metadata"), "name", cJSON_CreateString(name));
        cJSON_ArrayForEach(rule, jget(role, "rules")) {
                cJSON *verbs = cJSON_GetObjectItem(rule, "verbs");
                for (int i = 0; drop_verb && i < cJSON_GetArraySize(verbs); i++)
                        if (strcmp(cJSON_GetArrayItem(verbs, i)->valuestring, drop_verb) == 0)
                                cJSON_DeleteItemFromArray(verbs, i--);
        }
        text = cJSON_PrintUnformatted(role);
        cJSON_Delete(role);
        if (n_cluster_objs == 0)
                atexit(delete_cluster_objs);
        cr_assert(n_cluster_objs + 2 <= 8);
        snprintf(cluster_objs[n_cluster_objs++], 256, "/apis/rbac.authorization.k8s.io/v1/clusterroles/%s", name);
        snprintf(cluster_objs[n_cluster_objs++], 256, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/%s",
                 name);
        cr_assert_eq(kapi("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", text, NULL), 201,
                     "the deploy ClusterRole is accepted");
        free(text);
        snprintf(body, sizeof(body),
                 "{\"metadata\":{\"name\":\"%s\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"%s\","
                 "\"namespace\":\"%s\"}],\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":"
                 "\"ClusterRole\",\"name\":\"%s\"}}",
                 name, sa, ns, name);
        snprintf(path, sizeof(path), "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings");
        cr_assert_eq(kapi("POST", path, body, NULL), 201);
}

static struct engine *engine_with_token(char *token, const char *mode)
{
        struct k8s_credentials c = {0};
        struct engine_k8s_config cfg = {.namespace = ns,
                                        .workspace_mode = mode,
                                        .image_pull_policy = "Never",
                                        .timeout_ms = 30000};
        struct engine *e = NULL;
        struct sbx_error err = {0};

        snprintf(c.server, sizeof(c.server), "%s", creds.server);
        c.ca_pem = malloc(creds.ca_len + 1);
        memcpy(c.ca_pem, creds.ca_pem, creds.ca_len);
        c.ca_pem[creds.ca_len] = '\0';
        c.ca_len = creds.ca_len;
        c.token = token; /* handed on */
        cr_assert_eq(engine_kubernetes_new_with(&cfg, &c, &e, &err), 0, "%s", err.msg);
        return e;
}

Test(kubernetes, the_deploy_role_is_enough_and_each_pod_verb_is_needed)
{
        NEED_CLUSTER();
        struct engine *e = engine_with_token(account_with_role("sbx-engine", NULL, NULL), "hostpath");
        struct watch w = {.e = e, .lock = PTHREAD_MUTEX_INITIALIZER};
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        struct sbx_error err = {0};
        char id[ENGINE_ID_STR_MAX], claim[ENGINE_CLAIM_MAX] = "";
        const struct engine_label relabel_set[] = {{"sandboxd.session", "s-rbac-claimed"}, {"sandboxd.pool", NULL}};
        _cleanup_free_ char *logs = NULL;
        pthread_t th;

        /* the engine's whole life on the Role alone, with a service-account token */
        bind_node_reader("sbx-engine", NULL);
        cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
        cr_assert_eq(pthread_create(&th, NULL, watch_main, &w), 0);
        /* and node health on the node ClusterRole */
        cr_expect(TESTENV_WAIT_UNTIL(engine_kubernetes_nodes_watched(e) != 0, 30000), "the Node watch started");
        cr_expect_eq(engine_kubernetes_nodes_watched(e), 1, "the ClusterRole lets the engine watch Nodes");
        test_spec(&s, &t, l, "s-rbac", NULL);
        cr_assert_eq(engine_create(e, &s, id, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_start(e, id, &err), 0, "%s", err.msg);
        cr_expect(listed(e, id));
        cr_expect_eq(engine_logs(e, id, 10, &logs, &err), 0, "%s", err.msg);
        cr_expect(TESTENV_WAIT_UNTIL(saw(&w, "start", id), 60000), "the watch works on the Role");
        /* a warm pool claim relabels the Pod (merge patch) */
        cr_expect_eq(engine_relabel(e, id, relabel_set, ELEMENTSOF(relabel_set), claim, &err), 0, "%s", err.msg);
        cr_expect_str_eq(claim, "", "hostpath: no claim");
        cr_expect_eq(engine_remove(e, id, &err), 0, "%s", err.msg);
        w.stop = true;
        pthread_join(th, NULL);
        engine_free(e);
        /* and in pvc mode the Pod's claim too (a Pod that waits for its volume is relabelled all the same) */
        e = engine_with_token(account_with_role("sbx-engine-pvc", NULL, NULL), "pvc");
        cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
        test_spec(&s, &t, l, "s-rbac-pvc", "unused-in-pvc-mode");
        cr_assert_eq(engine_create(e, &s, id, &err), 0, "%s", err.msg);
        cr_expect_eq(engine_relabel(e, id, relabel_set, ELEMENTSOF(relabel_set), claim, &err), 0, "%s", err.msg);
        cr_expect(strncmp(claim, "sbx-ws-", 7) == 0, "the Pod's claim: %s", claim);
        {
                /* leftover slot claims are found by a list */
                struct engine_claim_summary *claims = NULL;
                size_t n_claims = 0;
                cr_expect_eq(engine_claim_list(e, NULL, &claims, &n_claims, &err), 0, "%s", err.msg);
                cr_expect_geq(n_claims, 1);
                free(claims);
        }
        cr_expect_eq(engine_remove(e, id, &err), 0, "%s", err.msg);
        engine_free(e);
        /* without patch on pods, or on claims, no claim can be relabelled: each verb is needed */
        e = engine_with_token(account_with_role("sbx-nopatch", "pods", "patch"), "hostpath");
        cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
        test_spec(&s, &t, l, "s-rbac-nopatch", NULL);
        cr_assert_eq(engine_create(e, &s, id, &err), 0, "%s", err.msg);
        cr_expect_eq(engine_relabel(e, id, relabel_set, ELEMENTSOF(relabel_set), claim, &err), -EACCES,
                     "no patch on pods: %s", err.msg);
        cr_expect_eq(engine_remove(e, id, &err), 0, "%s", err.msg);
        engine_free(e);
        e = engine_with_token(account_with_role("sbx-nopvcpatch", "persistentvolumeclaims", "patch"), "pvc");
        cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
        test_spec(&s, &t, l, "s-rbac-nopvcpatch", "unused-in-pvc-mode");
        cr_assert_eq(engine_create(e, &s, id, &err), 0, "%s", err.msg);
        cr_expect_eq(engine_relabel(e, id, relabel_set, ELEMENTSOF(relabel_set), claim, &err), -EACCES,
                     "no patch on claims: %s", err.msg);
        cr_expect_eq(engine_remove(e, id, &err), 0, "%s", err.msg);
        engine_free(e);
        e = engine_with_token(account_with_role("sbx-nopvclist", "persistentvolumeclaims", "list"), "pvc");
        cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
        {
                struct engine_claim_summary *claims = NULL;
                size_t n_claims = 0;
                cr_expect_eq(engine_claim_list(e, NULL, &claims, &n_claims, &err), -EACCES,
                             "no list on claims, no sweep of leftover slot claims: %s", err.msg);
                free(claims);
        }
        engine_free(e);
        test_spec(&s, &t, l, "s-rbac", NULL);

        /* without delete on pods, the engine cannot remove: the verb is needed */
        e = engine_with_token(account_with_role("sbx-nodelete", "pods", "delete"), "hostpath");
        cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_create(e, &s, id, &err), 0, "%s", err.msg);
        cr_expect_eq(engine_remove(e, id, &err), -EACCES);
        cr_expect(strstr(err.msg, "forbidden"), "%s", err.msg);
        engine_free(e);
        e = engine_with_token(account_with_role("sbx-nowatch", "pods", "watch"), "hostpath");
        cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
        cr_expect_eq(engine_events_follow(e, NULL, NULL, on_ev, &w, NULL, 5000, &err), -EACCES,
                     "no watch verb, no events: %s", err.msg);
        engine_free(e);

        /* each verb of the node ClusterRole is needed: without it the engine falls back (and says so) */
        static const char *const node_verbs[] = {"list", "watch"};
        for (size_t i = 0; i < ELEMENTSOF(node_verbs); i++) {
                char sa[32];
                struct watch w2 = {.lock = PTHREAD_MUTEX_INITIALIZER};
                snprintf(sa, sizeof(sa), "sbx-nonode%s", node_verbs[i]);
                e = engine_with_token(account_with_role(sa, NULL, NULL), "hostpath");
                bind_node_reader(sa, node_verbs[i]);
                cr_assert_eq(engine_connect(e, &err), 0, "%s", err.msg);
                w2.e = e;
                cr_assert_eq(pthread_create(&th, NULL, watch_main, &w2), 0);
                cr_expect(TESTENV_WAIT_UNTIL(engine_kubernetes_nodes_watched(e) != 0, 30000), "the Node watch ran");
                cr_expect_eq(engine_kubernetes_nodes_watched(e), -1, "without %s on nodes: the fallback",
                             node_verbs[i]);
                w2.stop = true;
                pthread_join(th, NULL);
                engine_free(e);
        }
}

/* ---- a daemon's life on Kubernetes: restart, a Pod lost, recreation on the same workspace ---- */

static void k8s_daemon_config(struct sbx_config *cfg)
{
        fixture_config(cfg);
        snprintf(cfg->engine, sizeof(cfg->engine), "kubernetes");
        snprintf(cfg->kube_config, sizeof(cfg->kube_config), "%s", getenv("SANDBOXD_K8S_KUBECONFIG"));
        snprintf(cfg->kube_namespace, sizeof(cfg->kube_namespace), "%s", ns);
        snprintf(cfg->kube_image_pull_policy, sizeof(cfg->kube_image_pull_policy), "Never");
}

static bool session_not_running(struct daemon *d, const char *session)
{
        struct session_info info;
        bool r;

        if (session_get_info(d->sessions, "u1", session, &info) < 0)
                return true;
        r = info.state != SESSION_RUNNING;
        session_info_done(&info);
        return r;
}

Test(kubernetes, restart_adopts_the_pod_and_a_lost_pod_is_recreated_on_the_same_workspace)
{
        NEED_CLUSTER();
        struct sbx_config cfg;
        struct daemon *d;
        struct sbx_error err = {0};
        char first[65], again[65], third[65], path[256];
        _cleanup_free_ char *o1 = NULL, *o2 = NULL, *o3 = NULL;

        k8s_daemon_config(&cfg);
        d = fixture_open(&cfg, true);
        o1 = fixture_run(d, "k2", "echo kept > /workspace/f && echo ok", 0, NULL);
        cr_expect_str_eq(o1, "ok\n");
        fixture_container_of(d, "u1", "k2", first);
        daemon_close(d);

        /* a restart reconciles with the cluster: the running Pod is adopted, not recreated */
        d = fixture_open(&cfg, true);
        o2 = fixture_run(d, "k2", "cat /workspace/f", 0, NULL);
        cr_expect_str_eq(o2, "kept\n");
        fixture_container_of(d, "u1", "k2", again);
        cr_expect_str_eq(again, first, "adopted after the restart");

        /* the Pod deleted behind the daemon's back: the watch tells the monitor */
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0", ns, first);
        cr_assert_eq(kapi("DELETE", path, NULL, NULL), 200);
        cr_expect(TESTENV_WAIT_UNTIL(session_not_running(d, "k2"), 60000), "the session left RUNNING");
        /* the next request recreates it, on the same workspace */
        o3 = fixture_run(d, "k2", "cat /workspace/f", 0, NULL);
        cr_expect_str_eq(o3, "kept\n");
        fixture_container_of(d, "u1", "k2", third);
        cr_expect_str_neq(third, first, "a new Pod");
        cr_expect_eq(session_destroy(d->sessions, "u1", "k2", true, &err), 0, "%s", err.msg);
        daemon_close(d);
}

Test(kubernetes, gc_removes_an_orphan_pod_and_keeps_a_sessions_pod)
{
        NEED_CLUSTER();
        struct sbx_config cfg;
        struct daemon *d;
        struct engine *e;
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        struct gc_options opts = {0};
        struct gc_report rep = {0};
        struct engine_container_info info;
        struct sbx_error err = {0};
        char orphan[ENGINE_ID_STR_MAX], owned[65];
        _cleanup_free_ char *o = NULL;

        k8s_daemon_config(&cfg);
        d = fixture_open(&cfg, false);
        o = fixture_run(d, "k4", "true", 0, NULL);
        fixture_container_of(d, "u1", "k4", owned);
        daemon_close(d);
        e = k8s_engine("hostpath");
        /* a Pod of this instance that no session names */
        test_spec(&s, &t, l, "ghost", NULL);
        cr_assert_eq(engine_create(e, &s, orphan, &err), 0, "%s", err.msg);

        cr_assert_eq(gc_run(&cfg, &opts, &rep, &err), 0, "%s", err.msg);
        cr_expect_eq(rep.kinds[GC_ORPHAN_CONTAINERS].count, 1, "one orphan");
        cr_expect_eq(rep.kinds[GC_ORPHAN_CONTAINERS].failed, 0);
        gc_report_done(&rep);
        cr_expect_eq(engine_inspect(e, orphan, &info, NULL), -ENOENT, "the orphan Pod is gone");
        cr_expect_eq(engine_inspect(e, owned, &info, &err), 0, "the session's Pod stays: %s", err.msg);
        cr_expect(info.running);
        engine_free(e);
}

/* kube-scheduler places them, sandboxd never picks a node: on the two-node
 * testbed, Pods that each request memory land on both nodes. */
Test(kubernetes, pods_spread_over_the_nodes)
{
        NEED_CLUSTER();
        struct engine *e = k8s_engine("hostpath");
        struct engine_spec s;
        struct engine_tmpfs t;
        struct engine_label l[5];
        struct sbx_error err = {0};
        char ids[4][ENGINE_ID_STR_MAX], nodes[4][128], path[256], sess[16];

        for (int i = 0; i < 4; i++) {
                snprintf(sess, sizeof(sess), "spread%d", i);
                test_spec(&s, &t, l, sess, NULL);
                cr_assert_eq(engine_create(e, &s, ids[i], &err), 0, "%s", err.msg);
        }
        for (int i = 0; i < 4; i++) {
                _cleanup_free_ char *raw = NULL;
                cJSON *pod;
                cr_assert_eq(engine_start(e, ids[i], &err), 0, "%s", err.msg);
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, ids[i]);
                cr_assert_eq(kapi("GET", path, NULL, &raw), 200);
                pod = cJSON_Parse(raw);
                snprintf(nodes[i], sizeof(nodes[i]), "%s", jget(pod, "spec.nodeName")->valuestring);
                cJSON_Delete(pod);
        }
        bool two = false;
        for (int i = 1; i < 4; i++)
                two |= strcmp(nodes[i], nodes[0]) != 0;
        cr_expect(two, "all four on %s", nodes[0]);
        for (int i = 0; i < 4; i++)
                cr_expect_eq(engine_remove(e, ids[i], &err), 0, "%s", err.msg);
        engine_free(e);
}

/* ---- the warm pool on Kubernetes: slot Pods (and, in pvc mode, their claims) made ahead ---- */

static cJSON *kget(const char *path)
{
        _cleanup_free_ char *raw = NULL;
        long st = kapi("GET", path, NULL, &raw);
        return st == 200 ? cJSON_Parse(raw) : NULL;
}

/* The names of the namespace's `kind` ("pods", "persistentvolumeclaims")
 * matching selector, those being deleted left out. */
static size_t list_names(const char *kind, const char *selector, char names[][64], size_t max)
{
        char path[512];
        char *esc = curl_easy_escape(NULL, selector, 0);
        const cJSON *it;
        size_t n = 0;
        cJSON *list;

        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/%s?labelSelector=%s", ns, kind, esc);
        curl_free(esc);
        list = kget(path);
        cr_assert_not_null(list, "listing %s", kind);
        cJSON_ArrayForEach(it, jget(list, "items")) {
                if (jget(it, "metadata.deletionTimestamp"))
                        continue;
                cr_assert_lt(n, max);
                snprintf(names[n++], 64, "%s", jget(it, "metadata.name")->valuestring);
        }
        cJSON_Delete(list);
        return n;
}

/* Whether the object at path is deleted: gone, or being deleted (its
 * deletionTimestamp set). sandboxd's part ends there (a Pod's removal has
 * waited for its container to exit); the object itself goes once the kubelet
 * confirms (a Pod) or no Pod uses it any more (a claim's protection), which
 * on a busy testbed took over a minute once. */
static bool deleted(const char *path)
{
        _cleanup_free_ char *raw = NULL;
        long st = kapi("GET", path, NULL, &raw);
        cJSON *o;
        bool d;

        if (st == 404)
                return true;
        if (st != 200)
                return false;
        o = cJSON_Parse(raw);
        d = o && jget(o, "metadata.deletionTimestamp");
        cJSON_Delete(o);
        return d;
}

/* How many of the namespace's `kind` match selector, those being deleted left out. */
static size_t count_live(const char *kind, const char *selector)
{
        char names[16][64];
        return list_names(kind, selector, names, 16);
}

static bool has(char names[][64], size_t n, const char *name)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(names[i], name) == 0)
                        return true;
        return false;
}

/* A Pod's uid, its claim (pvc mode, "" otherwise) and a label's value ("" when absent). */
static void pod_facts(const char *name, const char *label, char uid[64], char claim[64], char value[64])
{
        char path[256];
        const cJSON *v, *lv;
        cJSON *pod;

        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
        pod = kget(path);
        cr_assert_not_null(pod, "Pod %s", name);
        snprintf(uid, 64, "%s", jget(pod, "metadata.uid")->valuestring);
        claim[0] = '\0';
        cJSON_ArrayForEach(v, jget(pod, "spec.volumes"))
                if (jget(v, "persistentVolumeClaim.claimName"))
                        snprintf(claim, 64, "%s", jget(v, "persistentVolumeClaim.claimName")->valuestring);
        lv = cJSON_GetObjectItemCaseSensitive(jget(pod, "metadata.labels"), label);
        snprintf(value, 64, "%s", cJSON_IsString(lv) ? lv->valuestring : "");
        cJSON_Delete(pod);
}

static char pvs[8][64];
static size_t n_pvs;

static void delete_pvs(void)
{
        char path[256];
        for (size_t i = 0; i < n_pvs; i++) {
                snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", pvs[i]);
                (void)kapi("DELETE", path, NULL, NULL);
        }
}

/* The testbed has no provisioner: n hostPath volumes of storage class `ns`
 * (this test's alone), writable by any uid (a hostPath volume gets no fsGroup). */
static void make_pvs(size_t n)
{
        char body[1024];

        atexit(delete_pvs);
        for (size_t i = 0; i < n && i < ELEMENTSOF(pvs); i++) {
                _cleanup_free_ char *dir = testenv_tmpdir();
                cr_assert_eq(chmod(dir, 0777), 0);
                snprintf(pvs[i], sizeof(pvs[i]), "%.50s-pv%zu", ns, i);
                snprintf(body, sizeof(body),
                         "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{\"name\":\"%s\","
                         "\"labels\":{\"%s\":\"%s\"}},\"spec\":{\"capacity\":{\"storage\":\"2Gi\"},"
                         "\"accessModes\":[\"ReadWriteOnce\"],\"persistentVolumeReclaimPolicy\":\"Retain\","
                         "\"storageClassName\":\"%s\",\"hostPath\":{\"path\":\"%s\",\"type\":\"Directory\"}}}",
                         pvs[i], TESTENV_RUN_LABEL, testenv_run_id(), ns, dir);
                cr_assert_eq(kapi("POST", "/api/v1/persistentvolumes", body, NULL), 201, "PersistentVolume %s", pvs[i]);
                n_pvs = i + 1;
        }
}

static struct daemon *pool_daemon; /* for pool_is_full */

static bool pool_is_full(void *ud)
{
        struct pool_stats ps;
        (void)ud;
        pool_stats(pool_daemon->pool, &ps);
        return ps.size > 0 && ps.ready == (size_t)ps.size;
}

static void wait_pool_full(struct daemon *d)
{
        pool_daemon = d;
        cr_assert_geq(fixture_wait(pool_is_full, NULL, 180000), 0, "the pool did not fill");
}

static void k8s_pool_config(struct sbx_config *cfg, const char *mode)
{
        k8s_daemon_config(cfg);
        cfg->pool_size = 2;
        snprintf(cfg->kube_workspace, sizeof(cfg->kube_workspace), "%s", mode);
        if (strcmp(mode, "pvc") == 0)
                snprintf(cfg->kube_storage_class, sizeof(cfg->kube_storage_class), "%s", ns);
}

/* A new session's first exec runs in a slot's Pod (the same Pod: its uid is
 * the slot's, and no Pod was made for the session), relabelled for it with
 * its claim in pvc mode; the workspace survives a recreation; the pool
 * refills. Returns with the daemon open. */
static struct daemon *warm_claim_flow(struct sbx_config *cfg, const char *mode)
{
        struct daemon *d;
        char slots[4][64], uids[4][64], claims[4][64], uid[64], claim[64], value[64], cid[65], cid2[65], path[256];
        char names[8][64];
        struct session_info info;
        size_t n, k;

        d = fixture_open(cfg, true);
        wait_pool_full(d);
        n = list_names("pods", "sandboxd.pool=1", slots, 4);
        cr_assert_eq(n, 2, "two slot Pods");
        for (size_t i = 0; i < n; i++) {
                pod_facts(slots[i], "sandboxd.session", uids[i], claims[i], value);
                cr_assert_eq(strcmp(mode, "pvc") == 0, claims[i][0] != '\0', "%s: a slot's own claim: %s", mode,
                             claims[i]);
        }
        {
                _cleanup_free_ char *o = fixture_run(d, "w1", "echo warm > /workspace/f && echo ok", 0, NULL);
                cr_assert_str_eq(o, "ok\n");
        }
        fixture_container_of(d, "u1", "w1", cid);
        for (k = 0; k < n && strcmp(slots[k], cid) != 0; k++)
                ;
        cr_assert_lt(k, n, "%s: the first exec ran in Pod %s, no slot's", mode, cid);
        cr_assert_eq(session_get_info(d->sessions, "u1", "w1", &info), 0);
        cr_expect(info.pooled, "session_info says pooled");
        session_info_done(&info);
        pod_facts(cid, "sandboxd.session", uid, claim, value);
        cr_expect_str_eq(uid, uids[k], "the same Pod, not one recreated under its name");
        cr_expect_str_eq(value, "w1", "the Pod is relabelled for the session");
        pod_facts(cid, "sandboxd.pool", uid, claim, value);
        cr_expect_str_eq(value, "", "and is no slot any more");
        cr_expect_eq(list_names("pods", "sandboxd.session=w1", names, 8), 1, "no Pod was made for the session");
        cr_expect_str_eq(names[0], cid);
        if (strcmp(mode, "hostpath") == 0) {
                /* the Pod's bind mount followed the slot's directory renamed to the session's */
                char host[SBX_PATH_MAX + 64], buf[16] = "";
                FILE *f;
                snprintf(host, sizeof(host), "%s/workspaces/u1/w1/f", cfg->data_dir);
                f = fopen(host, "r");
                cr_assert_not_null(f, "what the claimed Pod wrote is in the session's workspace on the host");
                cr_expect_not_null(fgets(buf, sizeof(buf), f));
                fclose(f);
                cr_expect_str_eq(buf, "warm\n");
        }
        if (strcmp(mode, "pvc") == 0) {
                char stored[STORE_CLAIM_MAX];
                cJSON *pvc;
                const cJSON *l;
                cr_expect_str_eq(claim, claims[k], "the slot's claim is the session's workspace");
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, claims[k]);
                pvc = kget(path);
                cr_assert_not_null(pvc);
                l = jget(pvc, "metadata.labels");
                cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(l, "sandboxd.session")->valuestring, "w1",
                                 "the claim is relabelled for the session");
                cr_expect_null(cJSON_GetObjectItemCaseSensitive(l, "sandboxd.pool"));
                cJSON_Delete(pvc);
                cr_assert_eq(store_uid_claim_get(d->store, "u1", "w1", stored), 0);
                cr_expect_str_eq(stored, claims[k], "the store records the session's claim");
        }
        /* the pool refills */
        wait_pool_full(d);
        cr_expect_eq(list_names("pods", "sandboxd.pool=1", names, 8), 2);

        /* the Pod lost behind the daemon's back: the next request recreates it on the same workspace */
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0", ns, cid);
        cr_assert_eq(kapi("DELETE", path, NULL, NULL), 200);
        cr_expect(TESTENV_WAIT_UNTIL(session_not_running(d, "w1"), 60000), "the session left RUNNING");
        {
                _cleanup_free_ char *o = fixture_run(d, "w1", "cat /workspace/f", 0, NULL);
                cr_expect_str_eq(o, "warm\n", "the workspace survived the recreation");
        }
        fixture_container_of(d, "u1", "w1", cid2);
        cr_expect_str_neq(cid2, cid, "a new Pod");
        pod_facts(cid2, "sandboxd.session", uid, claim, value);
        if (strcmp(mode, "pvc") == 0)
                cr_expect_str_eq(claim, claims[k], "the new Pod mounts the slot's claim");
        return d;
}

Test(kubernetes, the_warm_pool_serves_a_first_exec_from_a_slot_pod_hostpath)
{
        NEED_CLUSTER();
        struct sbx_config cfg;
        struct daemon *d;

        k8s_pool_config(&cfg, "hostpath");
        d = warm_claim_flow(&cfg, "hostpath");
        daemon_close(d);
}

static const char *kill_stage;

static void kill_at(const char *stage)
{
        if (kill_stage && strcmp(stage, kill_stage) == 0)
                raise(SIGKILL);
}

/* A daemon in a child claims a slot for u1:w3 and is SIGKILLed right after
 * the relabel, before the claim is recorded. */
static void claim_killed_after_relabel(const struct sbx_config *cfg)
{
        int status;
        pid_t pid = fork();

        cr_assert_geq(pid, 0);
        if (pid == 0) {
                _cleanup_free_ struct store_pool_slot *rows = NULL;
                struct session *s = NULL;
                struct daemon *d;
                size_t n = 0;

                prctl(PR_SET_PDEATHSIG, SIGKILL);
                d = fixture_open(cfg, false);
                pool_daemon = d;
                if (fixture_wait(pool_is_full, NULL, 180000) < 0 || store_pool_list(d->store, &rows, &n) < 0)
                        _exit(4);
                for (size_t i = 0; i < n; i++) /* adopted slots: their runners connect again */
                        if (!hub_wait(d->runner, POOL_USER, rows[i].slot, 30000))
                                _exit(5);
                kill_stage = "relabelled";
                pool_set_test_hook(kill_at);
                (void)session_acquire(d->sessions, "u1", "w3", &s, NULL);
                _exit(3); /* the hook did not fire */
        }
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child was not killed mid-claim (status %d)",
                  status);
}

Test(kubernetes, the_warm_pool_in_pvc_mode_survives_a_kill_mid_claim_and_gc_removes_a_deconfigured_pool, .timeout = 900)
{
        NEED_CLUSTER();
        struct sbx_config cfg;
        struct daemon *d;
        char slots[4][64], pods[16][64], claims[16][64], w1[65], w3[65], uid[64], claim[64], value[64];
        char stored[STORE_CLAIM_MAX], run_sel[160];
        size_t n;

        make_pvs(8);
        k8s_pool_config(&cfg, "pvc");
        d = warm_claim_flow(&cfg, "pvc");
        fixture_container_of(d, "u1", "w1", w1);
        daemon_close(d);

        /* a daemon killed between the relabel and the record: the restart finishes the claim */
        n = list_names("pods", "sandboxd.pool=1", slots, 4);
        cr_assert_eq(n, 2);
        claim_killed_after_relabel(&cfg);
        d = fixture_open(&cfg, true);
        fixture_container_of(d, "u1", "w3", w3);
        cr_assert(has(slots, n, w3), "w3 runs in a slot's Pod (%s), the claim was finished", w3);
        pod_facts(w3, "sandboxd.session", uid, claim, value);
        cr_expect_str_eq(value, "w3");
        cr_assert_eq(store_uid_claim_get(d->store, "u1", "w3", stored), 0);
        cr_expect_str_eq(stored, claim, "the claim recorded is the Pod's");
        {
                _cleanup_free_ char *o = fixture_run(d, "w3", "echo ok", 0, NULL);
                cr_expect_str_eq(o, "ok\n");
        }
        {
                char again[65];
                fixture_container_of(d, "u1", "w3", again);
                cr_expect_str_eq(again, w3, "adopted, not recreated");
        }
        wait_pool_full(d);

        /* nothing leaked: every Pod and claim of the run is a session's or a slot row's */
        snprintf(run_sel, sizeof(run_sel), "%s=%s", TESTENV_RUN_LABEL, testenv_run_id());
        {
                _cleanup_free_ struct store_pool_slot *rows = NULL;
                size_t n_rows = 0, n_pods, n_claims;
                char w1_claim[STORE_CLAIM_MAX];

                cr_assert_eq(store_pool_list(d->store, &rows, &n_rows), 0);
                cr_assert_eq(n_rows, 2);
                cr_assert_eq(store_uid_claim_get(d->store, "u1", "w1", w1_claim), 0);
                n_pods = list_names("pods", run_sel, pods, 16);
                n_claims = list_names("persistentvolumeclaims", run_sel, claims, 16);
                cr_expect_eq(n_pods, 4, "two sessions' Pods and two slots'");
                cr_expect_eq(n_claims, 4, "two sessions' claims and two slots'");
                fixture_container_of(d, "u1", "w1", w1);
                cr_expect(has(pods, n_pods, w1) && has(pods, n_pods, w3));
                cr_expect(has(claims, n_claims, w1_claim) && has(claims, n_claims, stored));
                for (size_t i = 0; i < n_rows; i++) {
                        pod_facts(rows[i].container_id, "sandboxd.pool", uid, claim, value);
                        cr_expect(has(pods, n_pods, rows[i].container_id), "slot %s's Pod", rows[i].slot);
                        cr_expect(has(claims, n_claims, claim), "slot %s's claim %s", rows[i].slot, claim);
                }
        }
        daemon_close(d);

        /* a slot whose row is lost: --gc removes its Pod and its claim, and keeps the other slot */
        {
                _cleanup_free_ struct store_pool_slot *rows = NULL;
                char db[SBX_PATH_MAX + 32], lost_pod[65], kept_pod[65], lost_claim[64], path[256];
                struct gc_report rep = {0};
                struct sbx_error err = {0};
                struct store *st;
                size_t n_rows = 0;

                snprintf(db, sizeof(db), "%s/sandboxd.db", cfg.data_dir);
                cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
                cr_assert_eq(store_pool_list(st, &rows, &n_rows), 0);
                cr_assert_eq(n_rows, 2);
                snprintf(lost_pod, sizeof(lost_pod), "%s", rows[0].container_id);
                snprintf(kept_pod, sizeof(kept_pod), "%s", rows[1].container_id);
                pod_facts(lost_pod, "sandboxd.pool", uid, lost_claim, value);
                cr_assert_eq(store_pool_delete(st, rows[0].slot), 0);
                store_close(st);
                cr_assert_eq(gc_run(&cfg, &(struct gc_options){.dry_run = false}, &rep, &err), 0, "%s", err.msg);
                gc_report_done(&rep);
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, lost_pod);
                cr_expect(TESTENV_WAIT_UNTIL(deleted(path), 60000), "the lost slot's Pod is deleted");
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, lost_claim);
                cr_expect(TESTENV_WAIT_UNTIL(deleted(path), 60000), "the lost slot's claim %s is deleted", lost_claim);
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, kept_pod);
                cr_expect_eq(kapi("GET", path, NULL, NULL), 200, "a held slot stays");
        }

        /* the pool turned off: --gc removes its slots, Pods and claims, and keeps the sessions' */
        cfg.pool_size = 0;
        {
                struct gc_report rep = {0};
                struct sbx_error err = {0};
                cr_assert_eq(gc_run(&cfg, &(struct gc_options){.dry_run = false}, &rep, &err), 0, "%s", err.msg);
                gc_report_done(&rep);
        }
        cr_expect(TESTENV_WAIT_UNTIL(count_live("pods", "sandboxd.pool=1") == 0, 60000), "the slot Pods are deleted");
        cr_expect(TESTENV_WAIT_UNTIL(count_live("persistentvolumeclaims", "sandboxd.pool=1") == 0, 60000),
                  "the slot claims are deleted");
        cr_expect_eq(list_names("pods", run_sel, pods, 16), 2, "the sessions' Pods stay");
        cr_expect_eq(list_names("persistentvolumeclaims", run_sel, claims, 16), 2, "the sessions' claims stay");
}

static struct daemon *racing_daemon;
static char racing_pod[65];

/* The slot being claimed loses its Pod right then (a node lost, an eviction). */
static void delete_claimed_slot_pod(const char *stage)
{
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        char path[256];
        size_t n = 0;

        if (strcmp(stage, "claiming") != 0 || store_pool_list(racing_daemon->store, &rows, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++)
                if (strcmp(rows[i].state, "claiming") == 0)
                        snprintf(racing_pod, sizeof(racing_pod), "%s", rows[i].container_id);
        if (!racing_pod[0])
                return;
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0", ns, racing_pod);
        (void)kapi("DELETE", path, NULL, NULL);
}

Test(kubernetes, a_claim_whose_slot_pod_dies_meanwhile_takes_the_cold_path)
{
        NEED_CLUSTER();
        struct sbx_config cfg;
        struct pool_stats ps;
        struct daemon *d;
        char cid[65], path[256];

        k8s_pool_config(&cfg, "hostpath");
        cfg.pool_size = 1;
        d = fixture_open(&cfg, true);
        wait_pool_full(d);
        racing_daemon = d;
        pool_set_test_hook(delete_claimed_slot_pod);
        {
                _cleanup_free_ char *o = fixture_run(d, "r1", "echo cold", 0, NULL);
                cr_expect_str_eq(o, "cold\n", "the session is served all the same");
        }
        pool_set_test_hook(NULL);
        cr_assert(racing_pod[0], "the hook saw the claim");
        fixture_container_of(d, "u1", "r1", cid);
        cr_expect_str_neq(cid, racing_pod, "not the dead slot's Pod");
        pool_stats(d->pool, &ps);
        cr_expect_eq(ps.claims, 0);
        cr_expect_eq(ps.misses, 1, "the claim fell back to a cold create");
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, racing_pod);
        cr_expect(TESTENV_WAIT_UNTIL(kapi("GET", path, NULL, NULL) == 404, 60000), "the dead slot's Pod is gone");
        wait_pool_full(d); /* and the pool refills */
        daemon_close(d);
}

/* ---- a lost node: its sessions go to ERROR, recover on the other node, and the old runner is fenced ---- */

#define LOST_NODE "127.0.0.2"
#define OTHER_NODE "localhost"

static bool kubelet_stopped, cordoned;

static int testbed(const char *verb, const char *node)
{
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "bash %s/scripts/k8s-testbed.sh %s %s >/dev/null 2>&1", SANDBOXD_SOURCE_DIR, verb,
                 node);
        return system(cmd);
}

static void cordon(const char *node, bool on)
{
        char path[256];
        snprintf(path, sizeof(path), "/api/v1/nodes/%s", node);
        cr_assert_eq(kapi("PATCH", path,
                          on ? "{\"spec\":{\"unschedulable\":true}}" : "{\"spec\":{\"unschedulable\":null}}", NULL),
                     200, "%s %s", on ? "cordoning" : "uncordoning", node);
        cordoned = on;
}

/* Whatever happens to the test, the testbed is given back as it was. */
static void give_testbed_back(void)
{
        if (cordoned)
                (void)kapi("PATCH", "/api/v1/nodes/" OTHER_NODE, "{\"spec\":{\"unschedulable\":null}}", NULL);
        if (kubelet_stopped)
                (void)testbed("kubelet-start", LOST_NODE);
}

/* A field of a Pod as the API server has it ("" when there is none). */
static void pod_field(const char *pod, const char *field, char *ret, size_t size)
{
        char path[256];
        _cleanup_free_ char *raw = NULL;
        cJSON *j;
        const cJSON *v;

        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, pod);
        ret[0] = '\0';
        if (kapi("GET", path, NULL, &raw) != 200)
                return;
        j = cJSON_Parse(raw);
        v = jget(j, field);
        if (cJSON_IsString(v))
                snprintf(ret, size, "%s", v->valuestring);
        cJSON_Delete(j);
}

static bool session_error_cause(struct daemon *d, const char *session, const char *want)
{
        struct session_info info;
        bool r;

        if (session_get_info(d->sessions, "u1", session, &info) < 0)
                return false;
        r = info.state == SESSION_ERROR && strcmp(info.error_cause, want) == 0;
        session_info_done(&info);
        return r;
}

static bool audited(struct daemon *d, const char *session, const char *action)
{
        int64_t n = 0;
        return store_audit_count(d->store, "u1", session, action, &n) == 0 && n > 0;
}

/* Whether a process of the host still runs in the Pod's cgroup (the kubelet's cgroupfs layout: .../pod<uid>/). */
static bool pod_processes_run(const char *uid)
{
        char want[128];
        bool found = false;
        DIR *proc = opendir("/proc");
        struct dirent *de;

        snprintf(want, sizeof(want), "/pod%s/", uid);
        while (proc && !found && (de = readdir(proc))) {
                char path[300], buf[4096];
                FILE *f;
                size_t n;
                if (!isdigit((unsigned char)de->d_name[0]))
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/cgroup", de->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                n = fread(buf, 1, sizeof(buf) - 1, f);
                buf[n] = '\0';
                fclose(f);
                found = strstr(buf, want) != NULL;
        }
        if (proc)
                closedir(proc);
        return found;
}

/* The Pods of the run that remain, named in pods_left (name, phase, and "deleting"
 * once the API server has a deletion timestamp), for the message of a check that
 * fails. A Pod being deleted whose container is dead is removed as sandboxd judges
 * it (k8s_pod_removed: the engine's remove has returned); the kubelet may take
 * long on a busy node to let the object go, and that is not sandboxd's to wait for. */
static char pods_left[1024];

static bool no_pod_of_the_run(void)
{
        char path[512];
        _cleanup_free_ char *raw = NULL;
        const cJSON *pod;
        cJSON *j;
        size_t n = 0;

        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?labelSelector=%s%%3D%s", ns, TESTENV_RUN_LABEL,
                 testenv_run_id());
        snprintf(pods_left, sizeof(pods_left), "(the API server did not answer)");
        if (kapi("GET", path, NULL, &raw) != 200)
                return false;
        j = cJSON_Parse(raw);
        pods_left[0] = '\0';
        cJSON_ArrayForEach(pod, jget(j, "items")) {
                const cJSON *gone = jget(pod, "metadata.deletionTimestamp");
                const cJSON *name = jget(pod, "metadata.name"), *phase = jget(pod, "status.phase");
                const cJSON *st = cJSON_GetArrayItem(jget(pod, "status.containerStatuses"), 0);
                bool dead = jget(st, "state.terminated") ||
                            (cJSON_IsString(phase) && (strcmp(phase->valuestring, "Failed") == 0 ||
                                                       strcmp(phase->valuestring, "Succeeded") == 0));
                if (gone && dead)
                        continue;
                if (n < sizeof(pods_left))
                        n += (size_t)snprintf(pods_left + n, sizeof(pods_left) - n, "%s%s (%s%s)", n ? ", " : "",
                                              cJSON_IsString(name) ? name->valuestring : "?",
                                              cJSON_IsString(phase) ? phase->valuestring : "?",
                                              cJSON_IsString(gone) ? ", deleting" : "");
        }
        cJSON_Delete(j);
        return n == 0;
}

Test(kubernetes, a_stopped_kubelet_s_sessions_recover_on_the_other_node_and_the_old_runner_is_refused, .timeout = 300)
{
        NEED_CLUSTER();
        struct sbx_config cfg;
        struct daemon *d;
        struct sbx_error err = {0};
        char old_id[65], new_id[65], node[128], old_uid[64], cause[160];
        _cleanup_free_ char *o1 = NULL, *o2 = NULL, *o3 = NULL;

        atexit(give_testbed_back);
        k8s_daemon_config(&cfg);
        d = fixture_open(&cfg, true);
        /* the session's Pod on 127.0.0.2: the other node is cordoned for the create (kube-scheduler
         * places it; we only leave it one choice), and uncordoned at once */
        cordon(OTHER_NODE, true);
        o1 = fixture_run(d, "lost1", "echo kept > /workspace/f && echo old > /tmp/marker && echo ok", 0, NULL);
        cordon(OTHER_NODE, false);
        cr_assert_str_eq(o1, "ok\n");
        fixture_container_of(d, "u1", "lost1", old_id);
        pod_field(old_id, "spec.nodeName", node, sizeof(node));
        cr_assert_str_eq(node, LOST_NODE, "the Pod landed on %s", node);
        pod_field(old_id, "metadata.uid", old_uid, sizeof(old_uid));
        cr_assert(old_uid[0]);

        /* the kubelet goes; the node controller calls the node NotReady after its grace (~40 s) */
        kubelet_stopped = true;
        cr_assert_eq(testbed("kubelet-stop", LOST_NODE), 0, "k8s-testbed.sh kubelet-stop " LOST_NODE);
        snprintf(cause, sizeof(cause), "node_not_ready: %s", LOST_NODE);
        cr_assert(TESTENV_WAIT_UNTIL(session_error_cause(d, "lost1", cause), 120000),
                  "the session shows ERROR with the cause '%s'", cause);
        /* the row follows the state change (the monitor's thread writes it next) */
        cr_expect(TESTENV_WAIT_UNTIL(audited(d, "lost1", "session.node_lost"), 10000),
                  "the lost node is on the record");
        cr_expect(pod_processes_run(old_uid), "the old Pod's containers run on without their kubelet");

        /* the next request recreates it on the other node, on the same workspace; the old Pod goes */
        o2 = fixture_run(d, "lost1", "cat /workspace/f; cat /tmp/marker 2>/dev/null || echo new-tmp", 0, NULL);
        cr_expect_str_eq(o2, "kept\nnew-tmp\n", "the workspace came along, /tmp is the new Pod's");
        fixture_container_of(d, "u1", "lost1", new_id);
        cr_expect_str_neq(new_id, old_id);
        pod_field(new_id, "spec.nodeName", node, sizeof(node));
        cr_expect_str_eq(node, OTHER_NODE, "kube-scheduler placed the new Pod on %s", node);
        pod_field(old_id, "metadata.name", node, sizeof(node));
        cr_expect_str_eq(node, "", "the old Pod is gone from the API (deleted with grace 0)");
        /* its runner, still alive on the lost node and still dialling the session's directory, is refused */
        cr_expect(TESTENV_WAIT_UNTIL(audited(d, "lost1", "node_epoch_refused"), 30000),
                  "the old runner is refused by its epoch, on the record");
        o3 = fixture_run(d, "lost1", "cat /tmp/marker 2>/dev/null || echo new-tmp", 0, NULL);
        cr_expect_str_eq(o3, "new-tmp\n", "executions still reach the new Pod only");

        /* the kubelet is back: its Pod is gone from the API, so it kills the containers */
        cr_expect_eq(testbed("kubelet-start", LOST_NODE), 0, "k8s-testbed.sh kubelet-start " LOST_NODE);
        kubelet_stopped = false;
        cr_expect(TESTENV_WAIT_UNTIL(!pod_processes_run(old_uid), 90000), "the old Pod's containers are killed");
        {
                _cleanup_free_ char *o4 = fixture_run(d, "lost1", "cat /workspace/f", 0, NULL);
                cr_expect_str_eq(o4, "kept\n", "the workspace still has the session's files");
        }
        cr_expect_eq(session_destroy(d->sessions, "u1", "lost1", true, &err), 0, "%s", err.msg);
        cr_expect(TESTENV_WAIT_UNTIL(no_pod_of_the_run(), 30000), "no Pod of the run remains: %s", pods_left);
        daemon_close(d);
}

/* ---- node agents (issue 26): kube-scheduler places each Pod, and the agent of the node it
 * landed on serves its session directory, mounted by the Pod through subPathExpr ---- */

static bool agents_connected(void *ud)
{
        struct daemon *d = ud;
        return node_server_node_connected(d->node, "localhost") && node_server_node_connected(d->node, "127.0.0.2");
}

Test(kubernetes, sessions_are_served_by_the_node_agent_of_the_node_their_pod_landed_on)
{
        NEED_CLUSTER();
        static const char *const names[] = {"localhost", "127.0.0.2"};
        struct sbx_config cfg;
        struct daemon *d;
        char *pki, *node_dir, sess[16], path[SBX_PATH_MAX], hash[33];
        int on[2] = {0, 0};
        pid_t pids[2];

        k8s_daemon_config(&cfg);
        pki = nodeenv_pki();
        nodeenv_cert(pki, "localhost");
        nodeenv_cert(pki, "127.0.0.2");
        nodeenv_config_control(&cfg, pki);
        node_dir = testenv_tmpdir(); /* {K8S_NODE_DIR}/<node name> is each agent's data_dir */
        cr_assert_not_null(node_dir);
        snprintf(cfg.kube_node_dir, sizeof(cfg.kube_node_dir), "%s", node_dir);
        d = fixture_open(&cfg, true);
        nodeenv_start_n(&cfg, pki, names, 2, node_dir, pids);
        cr_assert(TESTENV_WAIT_UNTIL(agents_connected(d), 30000), "the two node agents never connected");

        for (int i = 0; i < 4; i++) {
                struct exec_result res;
                struct sbx_error err = {0};
                char node[NODE_NAME_MAX + 1] = "", cid[65];
                _cleanup_free_ char *raw = NULL;
                snprintf(sess, sizeof(sess), "agent%d", i);
                struct exec_request req = {.user = "u1", .session = sess, .command = "echo hello", .actor = "test"};
                cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s", err.msg);
                cr_assert_str_eq(res.via, "runner", "%s did not run through the runner", sess);
                cr_assert(res.stdout_head_len == 6 && memcmp(res.stdout_head, "hello\n", 6) == 0);
                exec_result_done(&res);
                /* placed where kube-scheduler bound its Pod */
                cr_assert_eq(store_node_get(d->store, "u1", sess, node, sizeof(node)), 0);
                fixture_container_of(d, "u1", sess, cid);
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, cid);
                cr_assert_eq(kapi("GET", path, NULL, &raw), 200);
                cJSON *pod = cJSON_Parse(raw);
                const cJSON *bound = jget(pod, "spec.nodeName");
                cr_assert(cJSON_IsString(bound));
                cr_assert_str_eq(node, bound->valuestring, "%s placed on %s, its Pod on %s", sess, node,
                                 bound->valuestring);
                /* the Pod's session directory comes from its node's agent (subPathExpr of K8S_NODE_DIR) */
                const cJSON *m = NULL, *it;
                cJSON_ArrayForEach(it, jget(cJSON_GetArrayItem(jget(pod, "spec.containers"), 0), "volumeMounts"))
                        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")), "session-dir") == 0)
                                m = it;
                cr_assert_not_null(m);
                cr_assert_not_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(m, "subPathExpr")),
                                          "$(SBX_NODE_NAME)/runner/"));
                cJSON_Delete(pod);
                cr_assert_eq(hub_dir_key("u1", sess, hash), 0);
                snprintf(path, sizeof(path), "%s/%s/runner/%s/" RP_SOCKET_NAME, node_dir, node, hash);
                cr_assert_eq(access(path, F_OK), 0, "no runner socket at %s", path);
                on[strcmp(node, "localhost") == 0 ? 0 : 1]++;
        }
        cr_expect(on[0] > 0 && on[1] > 0, "kube-scheduler put all four on one node (%d on localhost)", on[0]);
        daemon_close(d);
        for (int i = 0; i < 2; i++)
                nodeenv_kill(pids[i], SIGKILL);
        free(node_dir);
        free(pki);
}
