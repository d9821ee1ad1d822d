/* mcp_internal.h — what the adapter's own files share, not for other
 * modules. The adapter is cut along its seams:
 *   mcp.c           the adapter object, framing, one line's JSON-RPC checks, output
 *   mcp_methods.c   the protocol eras and every method's dispatch
 *   mcp_calls.c     tool calls in flight: workers, cancellation, progress
 *   mcp_catalog.c   the tool catalog (schemas/mcp_tools.json, embedded)
 *   mcp_tools.c     running a tool call on the daemon's API
 *   mcp_tasks.c     the tasks extension
 *   mcp_resources.c execution output by reference
 *   mcp_schema.c    the JSON Schema subset (public: mcp.h)
 *   mcp_api.c, mcp_api_https.c  the API client (socket, HTTPS)
 * Lock rules: struct mcp below, and each file's header. */
#ifndef SANDBOXD_MCP_INTERNAL_H
#define SANDBOXD_MCP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "sandboxd/mcp.h"
#include "sandboxd/reqctx.h"

/* Version ranks: what a protocol version may carry. */
enum {
        MCP_REV_2024_11_05 = 1,
        MCP_REV_2025_03_26, /* tool annotations, progress message */
        MCP_REV_2025_06_18, /* outputSchema, structuredContent, title */
        MCP_REV_2025_11_25,
        MCP_REV_2026_07_28, /* stateless; resultType */
};

/* Client log levels (RFC 5424 names, as MCP uses them). */
enum {
        MCP_LOG_DEBUG,
        MCP_LOG_INFO,
        MCP_LOG_NOTICE,
        MCP_LOG_WARNING,
        MCP_LOG_ERROR,
        MCP_LOG_CRITICAL,
        MCP_LOG_ALERT,
        MCP_LOG_EMERGENCY,
};

#define MCP_SERVER_NAME "sandboxd-mcp"
#define MCP_SERVER_TITLE "sandboxd"
#define MCP_META_SERVER_INFO "io.modelcontextprotocol/serverInfo"

/* The value of expr, read with the mutex l held. */
#define MCP_LOCKED(l, expr)                                                                                            \
        ({                                                                                                             \
                pthread_mutex_lock(l);                                                                                 \
                __typeof__(expr) locked_value_ = (expr);                                                               \
                pthread_mutex_unlock(l);                                                                               \
                locked_value_;                                                                                         \
        })

struct mcp_call;

struct mcp {
        int refs; /* atomic: the owner's, plus one per call in flight */
        char *api_socket;
        char *token;
        char session[65];
        size_t max_inflight;
        int poll_wait_s;

        /* out_lock guards write, output_closed and orphaned: one line at a time. */
        pthread_mutex_t out_lock;
        mcp_write_fn write;
        mcp_write_related_fn write_related; /* used instead of write when set */
        void *write_userdata;
        bool output_closed; /* the write callback failed */
        bool orphaned;      /* mcp_free was called: calls still running write nothing */

        /* lock guards everything below and, in each call, the fields marked so. */
        pthread_mutex_t lock;
        pthread_cond_t idle;
        struct mcp_call *calls;
        size_t inflight;
        int legacy_rank;      /* from the last initialize; 0 before any */
        int client_log_level; /* from logging/setLevel; -1 before any */

        /* the line splitter: the reading thread only */
        char *rbuf;
        size_t rlen, rcap;
        bool discarding;
};

/* One request being dispatched (mcp_methods.c), on the reading thread. */
struct mcp_req {
        const cJSON *id;
        const char *method;
        const cJSON *params; /* an object or NULL */
        bool modern;
        int rank;
        int log_level;    /* modern: the envelope's logLevel; -1 none */
        bool tasks_ok;    /* modern: the client capabilities name the tasks extension; legacy: 2025-11-25 */
        bool legacy_task; /* 2025-11-25 tools/call with params.task */
};

struct mcp_tool_result {
        cJSON *structured; /* NULL for a daemon-side error */
        char *text;        /* NULL: the serialized structured content */
        bool is_error;
        bool suppress;  /* no response at all (the call was cancelled) */
        cJSON *links;   /* resource_link content items (mcp_resources.c), or NULL */
        cJSON *content; /* more content items after the text (run_cell's images, mcp_cells.c), or NULL */
        /* Instead of a CallToolResult (mcp_tasks.c): a whole result object of
         * resultType raw_type (a CreateTaskResult, a tasks/get result), or a
         * JSON-RPC error when rpc_code is set. */
        cJSON *raw;
        const char *raw_type;
        int rpc_code;
        char rpc_message[256];
        cJSON *rpc_data;
};

enum mcp_call_kind {
        MCP_CALL_TOOL, /* tools/call */
        MCP_CALL_TASK, /* tasks/get, tasks/cancel, tasks/update (mcp_tasks.c) */
};

#define MCP_TOOL_NAME_MAX 64 /* with its NUL */

struct mcp_call {
        struct mcp *m;
        cJSON *id; /* the request id */
        char tool[MCP_TOOL_NAME_MAX];
        cJSON *args;           /* validated against the tool's inputSchema */
        char session[65];      /* args.session or the default */
        cJSON *progress_token; /* NULL unless the request asked for progress */
        int rank;              /* the version governing the request */
        bool modern;
        int log_level; /* the least severe level the client wants for this call; -1 none */
        enum mcp_call_kind kind;
        bool tasks_ok;    /* the request declared the io.modelcontextprotocol/tasks extension */
        bool legacy_task; /* 2025-11-25: the request asked for a task (params.task) */
        char traceparent[REQCTX_TRACEPARENT_LEN + 1]; /* _meta.traceparent when valid, else "" (reqctx.h) */

        /* guarded by m->lock */
        bool cancelled;
        int api_fd;      /* the connection a cancel shuts down; -1 */
        double progress; /* last value sent */
        bool progress_sent;

        struct mcp_call *next;
};

/* mcp.c: the adapter's references, and output. Each send takes the message
 * it is given (result, params, data) and writes one line under out_lock. */
void mcp_unref(struct mcp *m);
bool mcp_valid_id(const cJSON *id); /* a string or an integer */
cJSON *mcp_server_info(void);
void mcp_send_error(struct mcp *m, const cJSON *id, int code, cJSON *data, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
/* Modern results carry resultType (type, else "complete") and serverInfo. */
void mcp_send_result(struct mcp *m, const cJSON *id, cJSON *result, bool modern, const char *type);
/* related: the id of the request the notification belongs to, or NULL. */
void mcp_send_notification(struct mcp *m, const char *method, cJSON *params, const cJSON *related);

/* mcp_methods.c: what mcp_handle_line hands over once a message is valid. */
void mcp_methods_request(struct mcp *m, const cJSON *id, const char *method, const cJSON *params);
void mcp_methods_notification(struct mcp *m, const char *method, const cJSON *params);
const char *mcp_log_level_name(int level);

/* mcp_calls.c: calls in flight */
/* Register a call and start its worker thread, which answers it (or refuse
 * it: busy, duplicate id). args, session and token are copied. */
void mcp_call_start(struct mcp *m, const struct mcp_req *q, enum mcp_call_kind kind, const char *name,
                    const cJSON *args, const char *session, const cJSON *token);
/* notifications/cancelled: cancel the call params.requestId names, if any. */
void mcp_call_cancel_request(struct mcp *m, const cJSON *params);
/* An input validation error: a tool result the model can read and correct. */
void mcp_send_tool_error(struct mcp *m, const struct mcp_req *q, const char *text);
/* Register the connection a cancel must wake; -ECANCELED if already cancelled. */
int mcp_call_attach(struct mcp_call *c, struct mcp_api *a);
void mcp_call_detach(struct mcp_call *c);
bool mcp_call_cancelled(struct mcp_call *c);
/* notifications/progress, only if the request asked for it and progress grew. */
void mcp_call_progress(struct mcp_call *c, double progress, const char *message);
/* notifications/message, if the client wants this level. */
void mcp_call_log(struct mcp_call *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The CallToolResult for r, cut down to fit one output line. */
cJSON *mcp_tool_result_json(const struct mcp_tool_result *r, int rank);

/* mcp_cells.c: a run_cell result's text and image content from its
 * structured result (images for PNG and SVG outputs). */
void mcp_cell_content(struct mcp_tool_result *r);

/* mcp_tasks.c: the tasks extension (io.modelcontextprotocol/tasks), on the
 * API's create_task / get_task / cancel_task. */
#define MCP_TASKS_EXTENSION "io.modelcontextprotocol/tasks"
/* An exec or run_code still running after this long becomes a task, when
 * the request declared the extension. */
#define MCP_TASK_AFTER_S 1
/* Record execution exec_id as a task and make r its CreateTaskResult: 0, or
 * -errno (r untouched: the caller follows the execution itself). */
int mcp_task_create(struct mcp_call *c, struct mcp_api *a, const char *exec_id, struct mcp_tool_result *r);
/* Run a tasks/ request (c->tool is the method, c->args its params): the
 * extension's tasks/get, tasks/cancel, tasks/update when c->modern, else
 * 2025-11-25's tasks/get, tasks/result, tasks/cancel. */
void mcp_task_run(struct mcp_call *c, struct mcp_tool_result *r);

/* mcp_api_https.c: the API client over HTTPS (POST <url>/v1/<method>). */
struct mcp_https;
bool mcp_https_is_url(const char *s);
int mcp_https_open(const char *url, struct mcp_https **ret, struct sbx_error *err);
void mcp_https_close(struct mcp_https *h);
int mcp_https_fd(struct mcp_https *h);
int mcp_https_request(struct mcp_https *h, const char *token, const char *method, const cJSON *params, int timeout_ms,
                      cJSON **ret_result, struct mcp_api_error *err);

/* mcp_catalog.c: the tools, from schemas/mcp_tools.json (pointers into the
 * parsed file, which lives as long as the process). */
struct mcp_tool {
        const char *name, *title, *description;
        const cJSON *input_schema, *output_schema, *annotations;
        bool follow;      /* exec, run_code: started in the background and followed to the end */
        bool user_level;  /* acts on the user: the connection's default session is not added */
        const char *wrap; /* a bare array reply goes under this key, or NULL */
};
/* Parse and check the catalog, once; 0 or -EINVAL (logged). */
int mcp_tools_init(void);
const struct mcp_tool *mcp_tool_find(const char *name);
/* The tools array of tools/list, shaped for a protocol version rank. */
cJSON *mcp_tools_list(int rank);

/* mcp_tools.c */
/* Run the call on the current (worker) thread. */
void mcp_tool_run(struct mcp_call *c, struct mcp_tool_result *r);
/* The tool result of a finished execution (a get_execution reply; takes res),
 * as the tool itself would have answered. */
void mcp_tool_execution_result(const char *tool, cJSON *res, struct mcp_tool_result *r);
/* True if an execution (a get_execution reply) has ended. */
bool mcp_execution_final(const cJSON *res);

/* mcp_resources.c */
/* resource_link items to the whole stdout and stderr of a result whose
 * output was cut (truncated: true), else NULL. */
cJSON *mcp_resource_links(const char *session, const cJSON *structured);
/* The resourceTemplates array of resources/templates/list. */
cJSON *mcp_resource_templates(void);
/* resources/read: 0 with *ret_result, or -1 with a JSON-RPC error code and
 * message. Blocks on the API socket (bounded). */
int mcp_resource_read(struct mcp *m, const cJSON *params, cJSON **ret_result, int *ret_code, char *msg,
                      size_t msg_size);

#endif
