/* mcp_internal.h — what the adapter's own files share: the adapter and call
 * structs (mcp.c), and the tool table (mcp_tools.c). Not for other modules. */
#ifndef SANDBOXD_MCP_INTERNAL_H
#define SANDBOXD_MCP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "sandboxd/mcp.h"

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

struct mcp_tool_result {
        cJSON *structured; /* NULL for a daemon-side error */
        char *text;        /* NULL: the serialized structured content */
        bool is_error;
        bool suppress; /* no response at all (the call was cancelled) */
        cJSON *links;  /* resource_link content items (mcp_resources.c), or NULL */
};

struct mcp_call {
        struct mcp *m;
        cJSON *id;             /* the request id */
        char tool[64];
        cJSON *args;           /* validated against the tool's inputSchema */
        char session[65];      /* args.session or the default */
        cJSON *progress_token; /* NULL unless the request asked for progress */
        int rank;              /* the version governing the request */
        bool modern;
        int log_level; /* the least severe level the client wants for this call; -1 none */

        /* guarded by m->lock */
        bool cancelled;
        int api_fd; /* the connection a cancel shuts down; -1 */
        double progress; /* last value sent */
        bool progress_sent;

        struct mcp_call *next;
};

/* mcp.c, for the tools */
/* Register the connection a cancel must wake; -ECANCELED if already cancelled. */
int mcp_call_attach(struct mcp_call *c, struct mcp_api *a);
void mcp_call_detach(struct mcp_call *c);
bool mcp_call_cancelled(struct mcp_call *c);
/* notifications/progress, only if the request asked for it and progress grew. */
void mcp_call_progress(struct mcp_call *c, double progress, const char *message);
/* notifications/message, if the client wants this level. */
void mcp_call_log(struct mcp_call *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* mcp_tools.c */
struct mcp_tool;
/* Parse every schema once; 0 or -EINVAL (a broken built-in schema). */
int mcp_tools_init(void);
const struct mcp_tool *mcp_tool_find(const char *name);
const cJSON *mcp_tool_input_schema(const struct mcp_tool *t);
/* The tools array of tools/list, shaped for a protocol version rank. */
cJSON *mcp_tools_list(int rank);
/* Run the call on the current (worker) thread. */
void mcp_tool_run(struct mcp_call *c, struct mcp_tool_result *r);

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
