/* api_internal.h — what the API front's files share: api.c (the socket,
 * connections, authentication, streaming sinks, waiting), api_methods.c
 * (the method table, shared helpers, files, services, session), and the
 * method files api_executions.c, api_agent.c, api_tasks.c and api_idem.c.
 * Private to src/. */
#ifndef SANDBOXD_API_INTERNAL_H
#define SANDBOXD_API_INTERNAL_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sandboxd/api.h"
#include "sandboxd/api_transport.h"
#include "sandboxd/exec.h"
#include "sandboxd/fronterr.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/reqctx.h"
#include "sandboxd/token.h"

#define API_WAIT_SLICE_MS 1000
#define API_OFFSET_NONE EXEC_OFFSET_NONE /* an offset past any output: cheap status polls */

struct sockserver;

struct api_server {
        struct daemon *d;
        struct sockserver *ss;
};

/* One authenticated request. */
struct api_req {
        struct api_conn *c;
        struct daemon *d;
        const cJSON *id;
        const cJSON *params;
        struct jparams args; /* params, named "params.<x>" in messages */
        const char *method;
        struct token_info tok;
        char actor[48];
        const char *session;
        const char *idem_key; /* params.idempotency_key, once claimed (api_idem.c) */
        bool idem_bound;      /* the key records this request's execution */
};

/* Bytes as a JSON string: base64, or UTF-8 with invalid bytes replaced. */
void api_add_bytes(cJSON *o, const char *key, const void *buf, size_t len, bool base64);

/* A method: 0 with *ret, <0 with e filled, 1 for "send nothing" (the
 * client is gone). */
typedef int (*api_method_fn)(struct api_req *q, cJSON **ret, struct fronterr *e);
api_method_fn api_method_find(const char *name);

/* A row of the method tables (api_methods.c, api_tasks.c): the method and
 * its documentation, from which docs/api.md is generated. params is the
 * shape of params ("?" marks an optional member), returns the result's,
 * description what the method does. None may be NULL or empty: the
 * generator (src/bin/sandboxd-apidoc.c) fails the build if one is. */
struct api_method_doc {
        const char *name;
        api_method_fn fn;
        const char *params;
        const char *returns;
        const char *description;
};
/* The i-th method of every table, in table order; NULL past the last. */
const struct api_method_doc *api_method_doc_at(size_t i);
const struct api_method_doc *api_tasks_method_doc_at(size_t i);

/* Idempotency (api_idem.c). Run fn under params.idempotency_key when the
 * method takes one (a table of method names), else just run fn. Same
 * returns as a method. */
int api_idem_call(struct api_req *q, api_method_fn fn, cJSON **ret, struct fronterr *e);
/* A method that starts an execution names it to the key it runs under (a
 * no-op without one); retries then answer from that execution. */
void api_idem_bind_execution(struct api_req *q, const char *execution_id);
/* The reply exec / run_code give for execution id, as q's params ask
 * (background: its id and state; otherwise wait for the end, then the full
 * result). In api_methods.c. */
int api_execution_reply(struct api_req *q, const char *id, cJSON **ret, struct fronterr *e);

/* api_tasks.c: the MCP tasks methods (create_task, get_task, cancel_task),
 * over exec.h's tasks. */
api_method_fn api_tasks_method_find(const char *name);
/* A method that needs no params.session (it names its object by id alone). */
bool api_tasks_sessionless(const char *name);

/* Streaming: a sink collects an execution's output (api_sink_on_output is
 * the engine's callback; its userdata is (void *)(uintptr_t)sink->handle). */
struct api_sink;
struct api_sink *api_sink_new(void);
uint64_t api_sink_handle(const struct api_sink *s);
void api_sink_free(struct api_sink *s);
void api_sink_on_output(const char *exec_id, enum exec_stream stream, const void *data, size_t len, void *ud);

/* A progress event {"id", "event": event, <each field of fields>} on q's connection. */
void api_send_event(struct api_req *q, const char *event, const cJSON *fields);

/* ---- run_cell and the contexts (api_cells.c) ---- */
int api_m_run_cell(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_list_contexts(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_restart_context(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_delete_context(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_get_variables(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_interrupt_cell(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_last_cell(struct api_req *q, cJSON **ret, struct fronterr *e);

/* The client left or the server stops: stop waiting. */
bool api_should_abandon(struct api_req *q);
/* Wait for the execution to end (at most max_ms, -1 = no limit), streaming
 * its output if s. 1 ended (or the wait is over), 0 abandoned, <0 error. */
int api_wait_final(struct api_req *q, const char *id, struct api_sink *s, int64_t max_ms, struct fronterr *e);

/* ---- agent tools (issue 17): api_agent.c, and the helpers of
 * api_methods.c it shares ---- */
/* ---- what the method files share (api_methods.c) ---- */
/* params.network of exec, run_code, run_cell and run_tests: 0 and *ret
 * NULL when absent or null, else *ret the narrowing (malloc'd); a bad shape
 * is bad_request (400). _parse only reads it (launch_exec refuses it for a
 * bridge session); api_param_network refuses that here (unavailable). */
struct egress_net;
int api_param_network_parse(struct api_req *q, struct egress_net **ret, struct fronterr *e);
int api_param_network(struct api_req *q, struct egress_net **ret, struct fronterr *e);
/* params.<name>: "utf8" (default) or "base64". */
int api_param_encoding(struct api_req *q, const char *name, bool *ret_base64, struct fronterr *e);
/* A string param as bytes (malloc'd): decoded from base64 when base64. */
int api_param_bytes(struct api_req *q, const char *name, bool required, bool base64, unsigned char **ret,
                    size_t *ret_len, struct fronterr *e);
/* The session's container exists (created now if needed) before a method
 * that needs it runs. */
int api_preflight_session(struct api_req *q, struct fronterr *e);

/* ---- the execution methods (api_executions.c) ---- */
int api_m_exec(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_run_code(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_get_execution(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_send_stdin(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_resize_terminal(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_cancel_execution(struct api_req *q, cJSON **ret, struct fronterr *e);
/* get_execution and cancel_execution of a run_cell cell (api_cells.c): 1
 * when id is no cell of the session (an execution's, maybe), else as a
 * method (0 with *ret, or -1 with e). offsets: stdout, stderr, outputs. */
int api_cell_execution(struct api_req *q, const char *id, const int64_t offsets[3], bool base64, int64_t wait_s,
                       cJSON **ret, struct fronterr *e);
int api_cell_cancel(struct api_req *q, const char *id, bool force, cJSON **ret, struct fronterr *e);
int api_m_list_executions(struct api_req *q, cJSON **ret, struct fronterr *e);

/* A stream of r as text: head, the omitted-bytes note, tail. */
void api_add_stream(cJSON *o, const char *key, const struct exec_result *r, enum exec_stream stream);
int api_m_session_info(struct api_req *q, cJSON **ret, struct fronterr *e);
/* Methods that act on the user, not one session: params.session optional. */
bool api_method_user_level(const char *name);

/* Append the session's default environment (create_session's env, its
 * secrets' placeholders, the CA bundle's variables: sessenv.h) to
 * env/env_buf, skipping names env already has. Call it after
 * api_preflight_session (or another session_acquire): it makes no container.
 * run_cell's: exec, run_code and run_tests get it from launch_exec. */
int api_agent_default_env(struct api_req *q, const char **env, char **env_buf, size_t *n_env, size_t max,
                          struct fronterr *e);
/* run_code {script}: the saved script's language and code (malloc'd). */
int api_agent_script_code(struct api_req *q, const char *name, enum exec_language *lang, char **ret_code,
                          struct fronterr *e);
/* run_code started exec_id: keep its code for the cache. */
void api_agent_note_run(struct api_req *q, const char *exec_id, enum exec_language lang, const char *code);
/* A final run's "cached" (the script it saved; null when none, if always). */
void api_agent_add_cached(struct api_req *q, const struct exec_result *res, cJSON *o, bool always);
int api_m_run_tests(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_list_scripts(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_clear_scripts(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_create_session(struct api_req *q, cJSON **ret, struct fronterr *e);
/* The user:session names being made now (create_session, fork_session):
 * 0 and *ret_key when the name was free, -EEXIST when another call has it,
 * -EBUSY when too many are; give it back with api_creating_release. */
int api_creating_claim(const char *user, const char *session, char **ret_key);
void api_creating_release(char *key);
/* ---- snapshots, restore and fork (api_snapshot.c, issue 28) ---- */
int api_m_snapshot_session(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_list_snapshots(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_delete_snapshot(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_restore_session(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_fork_session(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_destroy_session(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_list_sessions(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_set_session_ttl(struct api_req *q, cJSON **ret, struct fronterr *e);
/* api_pause.c: pause_session, resume_session */
int api_m_pause_session(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_resume_session(struct api_req *q, cJSON **ret, struct fronterr *e);
/* api_events.c: the caller's lifecycle events by polling (events.h) */
int api_m_events(struct api_req *q, cJSON **ret, struct fronterr *e);
/* api_ops.c: what an operator token reads about the daemon (opsview.h) */
int api_m_list_users(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_pool_status(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_list_nodes(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_daemon_health(struct api_req *q, cJSON **ret, struct fronterr *e);
int api_m_whoami(struct api_req *q, cJSON **ret, struct fronterr *e);
/* The methods an operator token may call: these four, list_sessions and events. */
bool api_method_operator(const char *name);

/* ---- labels and requested resources (api_spec.c, issue 29) ---- */
struct store_session_spec;
/* params.labels / cpu / memory / disk, checked against the user's maxima:
 * 0 with *ret (store_session_spec_done) and *ret_given, or -1 with e
 * (invalid, naming the member or the limit). */
int api_spec_parse(struct api_req *q, struct store_session_spec *ret, bool *ret_given, struct fronterr *e);
/* Record want for q->session unless it has a spec (*ret_inserted); a
 * different spec in force is conflict. */
int api_spec_record(struct api_req *q, const struct store_session_spec *want, bool *ret_inserted, struct fronterr *e);
/* Before a session method: a session the call will create gets the spec
 * its params name (*ret_recorded); an existing one must have the same
 * (else conflict). Params without any: nothing. */
int api_spec_first_use(struct api_req *q, bool *ret_recorded, struct fronterr *e);
/* The call recorded a spec but made no session (refused, failed): drop it. */
void api_spec_forget_unmade(struct api_req *q);
/* "labels" and "resources" of session into o. */
void api_spec_add(struct api_req *q, const char *session, cJSON *o);
/* Only "labels", and only when the session has some. */
void api_spec_add_labels(struct api_req *q, const char *session, cJSON *o);
/* list_sessions' params.labels (checked as labels are): *ret_filter, NULL for none. */
int api_spec_filter(struct api_req *q, cJSON **ret_filter, struct fronterr *e);
bool api_spec_matches(struct api_req *q, const char *session, const cJSON *filter);

#endif
