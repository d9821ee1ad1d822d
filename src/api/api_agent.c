/* api_agent.c — the API methods agents asked for (issue 17; protocol in
 * include/sandboxd/api.h): run_tests, the script cache (list_scripts,
 * clear_scripts, and run_code's cache and script parameters through the
 * hooks below), and sessions as tools (create_session, destroy_session,
 * list_sessions). Like api_methods.c: type-check, call the modules, format;
 * every method acts for the token's user only. No threads. One piece of
 * state: the user:session keys a create_session is making right now
 * (creating_lock guards them), so two calls for one name cannot both
 * succeed while the first is still making its container. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/audit.h"
#include "sandboxd/daemon.h"
#include "sandboxd/exec.h"
#include "sandboxd/launch.h"
#include "sandboxd/log.h"
#include "sandboxd/scripts.h"
#include "sandboxd/secrets.h"
#include "sandboxd/session.h"
#include "sandboxd/sessenv.h"
#include "sandboxd/store.h"
#include "sandboxd/testrun.h"
#include "sandboxd/utf8.h"

#define ENV_MAX_ENTRIES 64
#define ENV_NAME_MAX 128
#define ENV_VALUE_MAX (32 * 1024)
#define ENV_TOTAL_MAX (64 * 1024)

static const char *lang_name(enum exec_language l)
{
        return l == EXEC_LANG_PYTHON ? "python" : l == EXEC_LANG_NODE ? "node" : "bash";
}

/* ---- the session's default environment ---- */

static bool env_name_ok(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > ENV_NAME_MAX || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
                        return false;
        return true;
}

/* params.env of create_session: an object of at most ENV_MAX_ENTRIES
 * valid names with string values, within the size caps; *ret_json the
 * canonical JSON (NULL when absent). */
static int parse_session_env(struct api_req *q, char **ret_json, struct fronterr *e)
{
        const cJSON *env = cJSON_GetObjectItemCaseSensitive(q->params, "env"), *it;
        size_t n = 0, total = 0;

        *ret_json = NULL;
        if (!env || cJSON_IsNull(env))
                return 0;
        if (!cJSON_IsObject(env))
                return fronterr_set(e, "bad_request", "params.env must be an object of strings");
        cJSON_ArrayForEach(it, env) {
                if (!cJSON_IsString(it) || !it->valuestring)
                        return fronterr_set(e, "bad_request", "params.env values must be strings");
                if (!env_name_ok(it->string))
                        return fronterr_set(e, "invalid",
                                            "params.env names must be 1-%d characters of [A-Za-z0-9_], not starting "
                                            "with a digit",
                                            ENV_NAME_MAX);
                if (strncmp(it->string, "SBX_", 4) == 0)
                        return fronterr_set(e, "invalid", "params.env names starting with SBX_ are reserved");
                if (strlen(it->valuestring) > ENV_VALUE_MAX)
                        return fronterr_set(e, "too_large", "params.env.%s is longer than %d bytes", it->string,
                                            ENV_VALUE_MAX);
                total += strlen(it->string) + strlen(it->valuestring) + 2;
                if (++n > ENV_MAX_ENTRIES || total > ENV_TOTAL_MAX)
                        return fronterr_set(e, "too_large", "params.env has more than %d entries or %d bytes",
                                            ENV_MAX_ENTRIES, ENV_TOTAL_MAX);
        }
        *ret_json = cJSON_PrintUnformatted(env);
        return *ret_json ? 0 : fronterr_set(e, "internal", "out of memory");
}

int api_agent_default_env(struct api_req *q, const char **env, char **env_buf, size_t *n_env, size_t max,
                          struct fronterr *e)
{
        struct sessenv_vec v = {env, env_buf, *n_env, max};
        struct sbx_error err = {0};
        int r = sessenv_add(&q->d->launch.env, q->tok.user, q->session, &v, &err);

        *n_env = v.n;
        return r < 0 ? fronterr_errno(e, r, &err, NULL) : 0;
}

/* ---- the script cache ---- */

static cJSON *script_json(const struct store_script *s)
{
        cJSON *o = cJSON_CreateObject();

        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddStringToObject(o, "content_hash", s->content_hash);
        cJSON_AddStringToObject(o, "language", s->language);
        if (s->description[0])
                api_add_bytes(o, "description", s->description, strlen(s->description), false);
        else
                cJSON_AddNullToObject(o, "description");
        cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
        cJSON_AddNumberToObject(o, "created_at", (double)s->created_at);
        return o;
}

int api_agent_script_code(struct api_req *q, const char *name, enum exec_language *lang, char **ret_code,
                          struct fronterr *e)
{
        struct sbx_error err = {0};
        char language[16];
        int r = scripts_code(q->d->scripts, q->tok.user, name, language, ret_code, &err);

        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *lang = strcmp(language, "python") == 0 ? EXEC_LANG_PYTHON
                : strcmp(language, "node") == 0 ? EXEC_LANG_NODE
                                                : EXEC_LANG_BASH;
        return 0;
}

void api_agent_note_run(struct api_req *q, const char *exec_id, enum exec_language lang, const char *code)
{
        if (q->d->scripts && lang != EXEC_LANG_NONE)
                scripts_note_run(q->d->scripts, q->tok.user, exec_id, lang_name(lang), code);
}

void api_agent_add_cached(struct api_req *q, const struct exec_result *res, cJSON *o, bool always)
{
        struct store_script s = {0};
        struct sbx_error err = {0};
        int r = -ENOENT;

        if (q->d->scripts && exec_state_is_final(res->state))
                r = scripts_settle(q->d->scripts, q->tok.user, res->id,
                                   res->state == EXEC_COMPLETED && res->exit_code == 0, &s, &err);
        if (r == 0) {
                cJSON_AddItemToObject(o, "cached", script_json(&s));
                return;
        }
        if (r == -EDQUOT || always)
                cJSON_AddNullToObject(o, "cached");
        if (r == -EDQUOT)
                cJSON_AddStringToObject(o, "cache_error", err.msg);
}

int api_m_list_scripts(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *filter;
        int64_t limit, count = 0, bytes = 0;
        struct store_script *list = NULL;
        struct sbx_error err = {0};
        size_t n = 0;
        cJSON *a;
        int r;

        if (jparam_string(&q->args, "filter", false, &filter, e) < 0 ||
            jparam_int(&q->args, "limit", 1, 1000, 100, &limit, e) < 0)
                return -1;
        r = scripts_list(q->d->scripts, q->tok.user, filter, (size_t)limit, &list, &n, &count, &bytes, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "scripts");
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, script_json(&list[i]));
        free(list);
        cJSON_AddNumberToObject(*ret, "count", (double)count);
        cJSON_AddNumberToObject(*ret, "bytes", (double)bytes);
        cJSON_AddNumberToObject(*ret, "max_count", q->d->cfg.max_scripts_per_user);
        cJSON_AddNumberToObject(*ret, "max_bytes", (double)q->d->cfg.max_script_bytes_per_user);
        return 0;
}

int api_m_clear_scripts(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *name;
        int64_t removed = 0;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "name", false, &name, e) < 0)
                return -1;
        r = scripts_delete(q->d->scripts, q->tok.user, name, &removed, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddNumberToObject(*ret, "removed", (double)removed);
        return 0;
}

/* ---- run_tests ---- */

/* The execution's whole stdout (the result channel), at most TESTRUN_RESULTS_MAX. */
static int read_results(struct api_req *q, const char *id, char **ret, size_t *ret_len, struct fronterr *e)
{
        char *buf = NULL;
        size_t len = 0;

        for (;;) {
                struct exec_result res;
                struct sbx_error err = {0};
                int r = exec_status(q->d->exec, q->tok.user, id, (int64_t)len, API_OFFSET_NONE, 0, 0, &res, &err);
                char *b;

                if (r < 0) {
                        free(buf);
                        return fronterr_errno(e, r, &err, NULL);
                }
                if (res.stdout_head_len == 0 || len >= TESTRUN_RESULTS_MAX) {
                        exec_result_done(&res);
                        break;
                }
                b = realloc(buf, len + res.stdout_head_len + 1);
                if (!b) {
                        exec_result_done(&res);
                        free(buf);
                        return fronterr_set(e, "internal", "out of memory");
                }
                buf = b;
                memcpy(buf + len, res.stdout_head, res.stdout_head_len);
                len += res.stdout_head_len;
                buf[len] = '\0';
                exec_result_done(&res);
        }
        *ret = buf;
        *ret_len = len;
        return 0;
}

static void add_run_error(cJSON *o, const struct testrun_report *rep, const struct exec_result *res)
{
        char msg[640];

        if (rep->error) {
                api_add_bytes(o, "error", rep->error, strlen(rep->error), false);
                return;
        }
        if (res->state == EXEC_TIMEOUT)
                snprintf(msg, sizeof(msg), "the tests timed out after %" PRId64 " ms", res->duration_ms);
        else if (res->state == EXEC_CANCELLED)
                snprintf(msg, sizeof(msg), "the test run was cancelled");
        else if (res->state != EXEC_COMPLETED)
                snprintf(msg, sizeof(msg), "the test run failed: %s%s%s", exec_cause_to_string(res->cause),
                         res->error[0] ? ": " : "", res->error);
        else if (!rep->started)
                snprintf(msg, sizeof(msg), "the test harness did not start (exit code %d)", res->exit_code);
        else if (!rep->ended)
                snprintf(msg, sizeof(msg), "the test run ended before its last test (exit code %d)", res->exit_code);
        else {
                cJSON_AddNullToObject(o, "error");
                return;
        }
        cJSON_AddStringToObject(o, "error", msg);
}

int api_m_run_tests(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *language, *tests, *code;
        enum testrun_language tl;
        int64_t timeout;
        _cleanup_free_ char *program = NULL, *out = NULL;
        _cleanup_free_ struct egress_net *net = NULL;
        char marker[TESTRUN_MARKER_MAX], id[37];
        const char *env[ENV_MAX_ENTRIES + 1] = {0};
        char *env_buf[ENV_MAX_ENTRIES] = {0};
        struct launch_request lr = {.env = {env, env_buf, 0, ENV_MAX_ENTRIES}};
        size_t program_len, out_len = 0;
        struct testrun_report rep = {0};
        struct sbx_error err = {0};
        struct exec_result res;
        cJSON *sum;
        int r;

        if (jparam_string(&q->args, "language", true, &language, e) < 0 ||
            jparam_string(&q->args, "tests", true, &tests, e) < 0 ||
            jparam_string(&q->args, "code", false, &code, e) < 0 ||
            jparam_int(&q->args, "timeout_seconds", 0, q->d->cfg.exec_timeout_max_s, 0, &timeout, e) < 0 ||
            api_param_network_parse(q, &net, e) < 0)
                return -1;
        if (testrun_language_from_string(language, &tl) < 0)
                return fronterr_set(e, "invalid", "params.language must be python or node");
        if (!*tests)
                return fronterr_set(e, "invalid", "params.tests is empty");
        if (strlen(tests) + (code ? strlen(code) : 0) > (size_t)q->d->cfg.max_command_bytes / 2)
                return fronterr_set(e, "too_large", "code and tests are more than %" PRId64 " bytes together",
                                    q->d->cfg.max_command_bytes / 2);
        r = testrun_program(tl, code, tests, marker, &program, &program_len, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        lr.exec = (struct exec_request){
                .user = q->tok.user,
                .session = q->session,
                .language = tl == TESTRUN_PYTHON ? EXEC_LANG_PYTHON : EXEC_LANG_NODE,
                .code = program,
                .code_len = program_len,
                .timeout_s = (int)timeout,
                .actor = q->actor,
                .network = net,
        };
        r = launch_exec(&q->d->launch, &lr, id, &err);
        if (r < 0) {
                r = fronterr_errno(e, r, &err, NULL);
                goto out;
        }
        r = api_wait_final(q, id, NULL, -1, e);
        if (r <= 0) {
                if (r == 0) /* nobody is left to read the results: stop the run */
                        (void)exec_cancel(q->d->exec, q->tok.user, id, true, NULL);
                r = r == 0 ? 1 : r;
                goto out;
        }
        r = read_results(q, id, &out, &out_len, e);
        if (r < 0)
                goto out;
        r = exec_status(q->d->exec, q->tok.user, id, -1, -1, 0, 0, &res, &err);
        if (r < 0) {
                r = fronterr_errno(e, r, &err, NULL);
                goto out;
        }
        if (res.state == EXEC_FAILED && res.cause == EXEC_CAUSE_ERROR) {
                r = fronterr_set(e, "unavailable", "the tests could not run: %s", res.error);
                exec_result_done(&res);
                goto out;
        }
        if (testrun_parse(marker, out ? out : "", out_len, &rep) < 0) {
                exec_result_done(&res);
                r = fronterr_set(e, "internal", "out of memory");
                goto out;
        }
        *ret = cJSON_CreateObject();
        cJSON_AddBoolToObject(*ret, "success",
                              rep.started && rep.ended && !rep.error && rep.failed == 0 && res.state == EXEC_COMPLETED);
        sum = cJSON_AddObjectToObject(*ret, "summary");
        cJSON_AddNumberToObject(sum, "total", (double)rep.total);
        cJSON_AddNumberToObject(sum, "passed", (double)rep.passed);
        cJSON_AddNumberToObject(sum, "failed", (double)rep.failed);
        cJSON_AddNumberToObject(sum, "skipped", (double)rep.skipped);
        cJSON_AddItemToObject(*ret, "tests", rep.tests);
        rep.tests = NULL;
        cJSON_AddBoolToObject(*ret, "tests_truncated", rep.truncated);
        api_add_stream(*ret, "output", &res, EXEC_STDERR);
        cJSON_AddNumberToObject(*ret, "duration_ms", (double)res.duration_ms);
        add_run_error(*ret, &rep, &res);
        cJSON_AddStringToObject(*ret, "execution_id", id);
        cJSON_AddStringToObject(*ret, "language", tl == TESTRUN_PYTHON ? "python" : "node");
        exec_result_done(&res);
        r = 0;
out:
        testrun_report_done(&rep);
        launch_request_done(&lr);
        return r;
}

/* ---- sessions as tools ---- */

/* expires_at / image / env names of a session's options into o. */
static void add_options(struct api_req *q, const char *session, cJSON *o)
{
        struct store_session_options opt = {0};

        cJSON_AddItemToObject(o, "secrets", secrets_attached_names(q->d->store, q->tok.user, session));
        if (session_options_get(q->d->sessions, q->tok.user, session, &opt) < 0) {
                cJSON_AddNullToObject(o, "expires_at");
                return;
        }
        if (opt.expires_at > 0)
                cJSON_AddNumberToObject(o, "expires_at", (double)opt.expires_at);
        else
                cJSON_AddNullToObject(o, "expires_at");
        if (opt.env_json) {
                cJSON *env = cJSON_Parse(opt.env_json), *names = cJSON_AddArrayToObject(o, "env_names"), *it;
                cJSON_ArrayForEach(it, env)
                        if (it->string)
                                cJSON_AddItemToArray(names, cJSON_CreateString(it->string));
                cJSON_Delete(env);
        }
        if (opt.image[0])
                cJSON_AddStringToObject(o, "image_name", opt.image);
        store_session_options_done(&opt);
}

/* The names create_session is making: a bounded set, never waited on. */
#define CREATING_MAX 256
static pthread_mutex_t creating_lock = PTHREAD_MUTEX_INITIALIZER;
static char *creating[CREATING_MAX];

/* (api_internal.h) 0 when key was free and is now ours, -EEXIST when another call has it,
 * -EBUSY when CREATING_MAX creations are under way. */
int api_creating_claim(const char *user, const char *session, char **ret_key)
{
        char *key = NULL;
        int free_slot = -1, r = 0;

        if (asprintf(&key, "%s:%s", user, session) < 0)
                return -ENOMEM;
        pthread_mutex_lock(&creating_lock);
        for (int i = 0; i < CREATING_MAX && r == 0; i++) {
                if (!creating[i])
                        free_slot = free_slot < 0 ? i : free_slot;
                else if (strcmp(creating[i], key) == 0)
                        r = -EEXIST;
        }
        if (r == 0 && free_slot < 0)
                r = -EBUSY;
        if (r == 0)
                creating[free_slot] = key;
        pthread_mutex_unlock(&creating_lock);
        if (r < 0) {
                free(key);
                return r;
        }
        *ret_key = key;
        return 0;
}

void api_creating_release(char *key)
{
        pthread_mutex_lock(&creating_lock);
        for (int i = 0; i < CREATING_MAX; i++)
                if (creating[i] == key)
                        creating[i] = NULL;
        pthread_mutex_unlock(&creating_lock);
        free(key);
}

static int create_session_claimed(struct api_req *q, const char *image, int64_t ttl, char *env_json,
                                  const struct store_session_spec *spec, const cJSON *secrets, cJSON **ret,
                                  struct fronterr *e);

/* params.secrets: names of the user's secrets to attach (issue 37), checked before anything is made. */
static int parse_session_secrets(struct api_req *q, const cJSON **ret, struct fronterr *e)
{
        const cJSON *names = cJSON_GetObjectItemCaseSensitive(q->params, "secrets");
        struct sbx_error err = {0};
        int r;

        *ret = NULL;
        if (!names || cJSON_IsNull(names))
                return 0;
        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return fronterr_set(e, "forbidden", "params.secrets needs a connector token; this token's role is %s",
                                    token_role_to_string(q->tok.role));
        if (!cJSON_IsArray(names))
                return fronterr_set(e, "bad_request", "params.secrets must be an array of secret names");
        r = secrets_check_names(q->d->store, q->tok.user, names, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = names;
        return 0;
}

int api_m_create_session(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *image;
        int64_t ttl;
        _cleanup_free_ char *env_json = NULL;
        char generated[24], *key = NULL;
        _cleanup_(store_session_spec_done) struct store_session_spec spec = {0};
        bool spec_given = false;
        const cJSON *secrets;
        int r;

        if (jparam_string(&q->args, "image", false, &image, e) < 0 ||
            jparam_int(&q->args, "ttl_seconds", 1, q->d->cfg.session_ttl_max_s, 0, &ttl, e) < 0 ||
            parse_session_env(q, &env_json, e) < 0 || api_spec_parse(q, &spec, &spec_given, e) < 0 ||
            parse_session_secrets(q, &secrets, e) < 0)
                return -1;
        if (image && !config_image_allowed(&q->d->cfg, image))
                return fronterr_set(e, "invalid",
                                    "params.image is not an allowed image (the operator's image and images)");
        if (!q->session || !*q->session) {
                char hex[13];
                if (sbx_random_hex(hex, 6) < 0)
                        return fronterr_set(e, "internal", "no randomness for a session name");
                snprintf(generated, sizeof(generated), "s-%s", hex);
                q->session = generated;
        }
        r = api_creating_claim(q->tok.user, q->session, &key);
        if (r == -EEXIST)
                return fronterr_set(e, "conflict", "session %s is being created by another call", q->session);
        if (r == -EBUSY)
                return fronterr_set(e, "busy", "too many sessions are being created at once; retry");
        if (r < 0)
                return fronterr_set(e, "internal", "out of memory");
        r = create_session_claimed(q, image, ttl, env_json, spec_given ? &spec : NULL, secrets, ret, e);
        api_creating_release(key);
        return r;
}

static int create_session_claimed(struct api_req *q, const char *image, int64_t ttl, char *env_json,
                                  const struct store_session_spec *spec, const cJSON *secrets, cJSON **ret,
                                  struct fronterr *e)
{
        const cJSON *it;
        bool spec_new = false;
        struct session_info info;
        struct session *s = NULL;
        struct sbx_error err = {0};
        struct store_session_options opt = {0};
        int r;

        if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) == 0) {
                session_info_done(&info);
                return fronterr_set(e, "conflict", "session %s exists: use it, or destroy_session it first",
                                    q->session);
        }
        sbx_strlcpy(opt.image, image && strcmp(image, q->d->cfg.image) != 0 ? image : "", sizeof(opt.image));
        opt.env_json = env_json;
        opt.expires_at = ttl > 0 ? sbx_wall_ms() + ttl * 1000 : 0;
        opt.created_at = sbx_wall_ms();
        r = session_record_made(q->d->sessions, q->tok.user, q->session, spec, &opt, &spec_new, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        r = session_acquire(q->d->sessions, q->tok.user, q->session, &s, &err);
        if (r < 0) {
                if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) == 0)
                        session_info_done(&info);
                else
                        session_record_forget(q->d->sessions, q->tok.user, q->session);
                return fronterr_errno(e, r, &err, "the session's container is not available");
        }
        session_release(s);
        /* a name attached by an earlier session of this name is not this one's */
        secrets_detach_all(q->d->store, q->tok.user, q->session);
        cJSON_ArrayForEach(it, secrets) {
                r = secrets_attach(q->d->store, q->tok.user, q->session, it->valuestring, q->actor, &err);
                if (r < 0) /* deleted since the check: the session stands, without it */
                        return fronterr_set(e, "conflict", "session %s was created without secret %s: %s", q->session,
                                            it->valuestring, err.msg);
        }
        log_ctx(LOG_LEVEL_INFO, q->tok.user, q->session, NULL, "session created (create_session, ttl %" PRId64 " s)",
                ttl);
        r = api_m_session_info(q, ret, e);
        if (r == 0)
                add_options(q, q->session, *ret);
        return r;
}

int api_m_destroy_session(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        bool purge;
        struct session_info info;
        struct exec_result *list = NULL;
        size_t n = 0, cancelled = 0;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (jparam_bool(&q->args, "purge", false, &purge, e) < 0)
                return -1;
        if (!q->session || !*q->session)
                return fronterr_set(e, "bad_request", "params.session is required");
        if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) < 0)
                return fronterr_set(e, "not_found", "no session %s", q->session);
        session_info_done(&info);
        /* its executions first: cancelled (and their end awaited), not left to die with the container */
        if (exec_list(q->d->exec, q->tok.user, q->session, (1u << EXEC_PENDING) | (1u << EXEC_RUNNING), 1000, &list,
                      &n) == 0) {
                for (size_t i = 0; i < n; i++)
                        if (exec_cancel(q->d->exec, q->tok.user, list[i].id, true, NULL) == 0)
                                cancelled++;
                for (size_t i = 0; i < n; i++) {
                        struct fronterr we = {0};
                        if (api_wait_final(q, list[i].id, NULL, q->d->cfg.exec_kill_grace_ms + 5000, &we) == 0)
                                break; /* the client left: destroy anyway */
                }
                exec_result_list_free(list, n);
        }
        /* the labels go with the session: the audit row keeps them (audit.h) */
        detail = cJSON_CreateObject();
        api_spec_add_labels(q, q->session, detail);
        r = session_destroy(q->d->sessions, q->tok.user, q->session, purge, &err);
        if (r < 0) {
                cJSON_Delete(detail);
                return fronterr_errno(e, r, &err, NULL);
        }
        cJSON_AddBoolToObject(detail, "purge", purge);
        cJSON_AddNumberToObject(detail, "cancelled_executions", (double)cancelled);
        (void)audit_record_json(q->d->store, q->actor, q->tok.user, q->session, "session.destroy", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", q->session);
        cJSON_AddBoolToObject(*ret, "destroyed", true);
        cJSON_AddBoolToObject(*ret, "purged", purge);
        cJSON_AddNumberToObject(*ret, "cancelled_executions", (double)cancelled);
        return 0;
}

int api_m_set_session_ttl(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        struct session_info info;
        int64_t ttl;
        cJSON *detail;
        int r;

        if (jparam_int(&q->args, "ttl_seconds", 0, q->d->cfg.session_ttl_max_s, -1, &ttl, e) < 0)
                return -1;
        if (ttl < 0)
                return fronterr_set(e, "bad_request", "params.ttl_seconds is required (0: no TTL)");
        if (!q->session || !*q->session)
                return fronterr_set(e, "bad_request", "params.session is required");
        if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) < 0)
                return fronterr_set(e, "not_found", "no session %s", q->session);
        session_info_done(&info);
        r = session_set_ttl(q->d->sessions, q->tok.user, q->session, ttl, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        detail = cJSON_CreateObject();
        cJSON_AddNumberToObject(detail, "ttl_seconds", (double)ttl);
        (void)audit_record_json(q->d->store, q->actor, q->tok.user, q->session, "session.ttl", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", q->session);
        add_options(q, q->session, *ret);
        return 0;
}

/* list_sessions' row of one session, read as its owner's; NULL when filter leaves it out. */
static cJSON *session_row(const struct api_req *q, const struct session_info *s, const cJSON *filter)
{
        struct api_req owner = *q; /* labels, limits and options are per user */
        cJSON *o;
        char state[16], node[65];
        size_t k = 0;
        int64_t execs;

        sbx_strlcpy(owner.tok.user, s->user, sizeof(owner.tok.user));
        if (!api_spec_matches(&owner, s->session, filter))
                return NULL;
        for (const char *p = session_state_to_string(s->state); *p && k + 1 < sizeof(state); p++)
                state[k++] = (char)tolower((unsigned char)*p);
        state[k] = '\0';
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "session", s->session);
        cJSON_AddStringToObject(o, "user", s->user); /* the token's: the console's column */
        cJSON_AddStringToObject(o, "state", state);
        cJSON_AddStringToObject(o, "image", s->image);
        jsonutil_add_text(o, "runtime", s->runtime); /* null: none yet, or the engine's default */
        if (exec_count_recorded(q->d->exec, s->user, s->session, &execs) == 0)
                cJSON_AddNumberToObject(o, "executions", (double)execs);
        cJSON_AddNumberToObject(o, "executions_running", (double)exec_running_count(q->d->exec, s->user, s->session));
        daemon_session_node(q->d, s->user, s->session, node, sizeof(node));
        jsonutil_add_text(o, "node", node); /* null in one process */
        cJSON_AddNumberToObject(o, "created_at", (double)s->created_at);
        cJSON_AddNumberToObject(o, "last_activity", (double)s->last_activity);
        if (s->paused_at)
                cJSON_AddNumberToObject(o, "paused_at", (double)s->paused_at);
        add_options(&owner, s->session, o);
        api_spec_add(&owner, s->session, o);
        return o;
}

/* params.session: that one session (by index, session_owner for an
 * operator), no list of every session. */
static int list_one_session(struct api_req *q, const cJSON *filter, cJSON *a, struct fronterr *e)
{
        char user[SESSION_KEY_MAX + 1];
        struct session_info info;
        cJSON *o;
        int r;

        sbx_strlcpy(user, q->tok.user, sizeof(user));
        if (q->tok.role == TOKEN_ROLE_OPERATOR && session_owner(q->d->sessions, q->session, user, sizeof(user)) < 0)
                return 0;
        r = session_get_info(q->d->sessions, user, q->session, &info);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return fronterr_errno(e, r, NULL, "cannot read the session");
        if ((o = session_row(q, &info, filter)))
                cJSON_AddItemToArray(a, o);
        session_info_done(&info);
        return 0;
}

int api_m_list_sessions(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct session_info *list = NULL;
        _cleanup_(cjson_freep) cJSON *filter = NULL;
        size_t n = 0;
        cJSON *a;
        int r;

        if (api_spec_filter(q, &filter, e) < 0)
                return -1;
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "sessions");
        if (q->session[0])
                return list_one_session(q, filter, a, e);
        /* an operator lists every user's (token.h); each row is read as its owner's */
        r = session_list(q->d->sessions, q->tok.role == TOKEN_ROLE_OPERATOR ? NULL : q->tok.user, NULL, &list, &n);
        if (r < 0)
                return fronterr_errno(e, r, NULL, "cannot list sessions");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = session_row(q, &list[i], filter);
                if (o)
                        cJSON_AddItemToArray(a, o);
        }
        session_info_list_free(list, n);
        return 0;
}
