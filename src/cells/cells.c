/* cells.c — run_cell's interpreter contexts: the contexts, their
 * generations, the kernel bridge's JSON-lines protocol on the daemon's side,
 * waiting for a cell with its timeout and interrupt grace, and the honest
 * report of lost state. The contract and the thread and lock rules are in
 * include/sandboxd/cells.h; the bridge's half of the protocol is
 * harness/kernel_bridge.py.
 *
 * Locks (see cells.h): engine lock > context lock; a context's rx lock is
 * never held with its context lock. The hub thread (cell_on_output) takes
 * only a context lock. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cells_spool.h"
#include "sandboxd/cells.h"
#include "sandboxd/audit.h"
#include "sandboxd/sha256.h"
#include "sandboxd/log.h"
#include "sandboxd/pool.h"
#include "sandboxd/runner.h"
#include "sandboxd/session.h"
#include "sandboxd/store_cells.h"
#include "sandboxd/utf8.h"

/* The embedded bridges (harness_gen.c). */
extern const char cells_bridge_python[];
extern const char cells_bridge_node[];

#define CELLS_RUNNER_WAIT_MS 10000
#define CELLS_KILL_WAIT_MS 10000
#define CELLS_REAP_EVERY_MS 5000
#define CELLS_LINE_SLACK (64 * 1024) /* a line may exceed the output cap by this much */
#define CELLS_STDERR_LOG_MAX 512     /* bridge stderr bytes logged per chunk (debug) */
#define CELLS_VARS_TIMEOUT_MS 10000
#define CELLS_MAX_ENV 256
#define CELLS_ADOPT_WAIT_MS 30000     /* for a session's runner to come back after a restart */
#define CELLS_LINE_MAX_CAP (32 << 20) /* the longest bridge line (one output) we assemble */
#define CELLS_MAX_STUBS 256           /* by-reference entries in one result's outputs */
#define CELLS_STUB_VALUE_MAX 1024     /* MIME values a by-reference entry still carries inline */
#define CELLS_RECENT_MAX 64           /* cells whose spool is kept, in all */
#define CELLS_RECENT_PER_SESSION 8    /* ... and per session */
#define CELLS_CANCEL_SLACK_MS 5000
#define CELLS_REPLAY_GRACE_MS 2000 /* a replayed, ended cell frees its context within this */

_Static_assert(CELL_STREAMS == CELLS_STREAMS, "the streams of cells.h are those of cells_spool.h");

/* A pool slot's default context, started ahead (engine lock). */
struct prestart {
        struct prestart *next;
        char slot[65];
        struct cell_ctx *x;
};

/* A recent cell, by its execution_id: its spool stays readable until it
 * is pushed out (oldest first, per session and in all). Engine lock. */
struct cell_record {
        bool used, final;
        uint64_t seq;
        char id[37], user[65], session[65], context[CELLS_NAME_MAX + 1];
        char status[16];
        uint64_t total[CELL_STREAMS];
        bool truncated, lost;
        int64_t created_at, duration_ms;
};

enum ctx_phase {
        CTX_IDLE,     /* no generation runs (never started, or it ended) */
        CTX_STARTING, /* the bridge runs, its kernel not ready yet */
        CTX_READY,
};

struct cell_ctx {
        struct cells *c;
        struct cell_ctx *next; /* engine lock */
        int refs;              /* engine lock */
        char user[65], session[65], name[CELLS_NAME_MAX + 1];
        char language[16];
        int64_t created_at;

        pthread_mutex_t rx_lock; /* the runner handle; never with lock held */
        struct runner_exec *rx;

        pthread_mutex_t lock;
        pthread_cond_t cond; /* any change below */
        enum ctx_phase phase;
        int64_t generation; /* the current (or last) generation; 0 before the first */
        int64_t execution_count;
        char container_id[65];
        uint32_t tag;
        uint64_t oom_at_start; /* the session's OOM kills when this generation started */
        pthread_t waiter;
        bool has_waiter;
        bool waiter_done;      /* the current generation's waiter saw its end */
        char kill_cause[32];   /* why we ended it ourselves ("" when we did not) */
        bool kill_silent;      /* ended on request (restart, delete): nothing to report */
        char strong_cause[32]; /* from the session (privacy_ratchet, container_recreated, idle_stop) */
        char bridge_cause[32]; /* the bridge's "dead" report */
        char lost_cause[32];   /* the loss the next cell reports ("" = none) */
        int64_t lost_generation;
        char start_error[256];
        int kernel_pid;
        int64_t last_used; /* unix ms */
        bool busy;         /* a cell or a variables request holds the context */
        bool interrupt_requested;
        bool cancel_requested, cancel_force; /* cancel_execution of the cell in flight */
        char exec_id[37];                    /* the cell in flight ("" between cells) */
        struct cell_spool *spool;            /* its output by reference (NULL: none) */
        int stubs;                           /* by-reference entries in outputs */
        bool dropped;                        /* output not kept anywhere (a line past line_max) */
        /* after a daemon restart (adopted job): lines are ignored until the
         * bridge's replay_begin; the replayed cell holds the context (busy)
         * until it is done or the interpreter ends */
        bool adopting, adopted_cell, adopt_busy;
        bool adopt_pending; /* the adopter has yet to take its job back */
        bool deleted;       /* no longer listed: its row is gone and stays gone (or not listed yet: a pool slot's) */
        int64_t prestarted_generation; /* started ahead in a pool slot (cells_pool_slot) */
        cJSON *last_result;            /* the last cell's result, for last_cell */
        /* the request in flight */
        uint64_t next_id, cur_id;
        cJSON *outputs;
        size_t out_bytes;
        bool truncated, done;
        int64_t done_count;
        char done_status[16];
        cJSON *vars;
        int64_t rss_kb;
        /* line assembly (hub thread) */
        char *line;
        size_t line_len, line_cap;
        bool line_skip;
};

struct cells {
        const struct sbx_config *cfg;
        struct store *store;
        struct session_manager *sessions;
        struct runner_hub *hub;
        pthread_mutex_t lock;
        pthread_cond_t cond; /* the reaper's sleep */
        struct cell_ctx *list;
        size_t n;
        bool stopping;
        pthread_t reaper;
        bool has_reaper;
        pthread_t adopter;
        bool has_adopter;
        char spool_dir[SBX_PATH_MAX + 16];
        bool spool_ok;
        struct prestart *prestarts; /* pool slots' default contexts, not listed yet */
        struct cell_record recent[CELLS_RECENT_MAX];
        uint64_t recent_seq;
};

bool cells_name_valid(const char *name)
{
        size_t n = name ? strlen(name) : 0;

        if (n == 0 || n > CELLS_NAME_MAX || name[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = name[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                      ch == '-' || ch == '.'))
                        return false;
        }
        return true;
}

static void cond_init_mono(pthread_cond_t *cv)
{
        pthread_condattr_t a;
        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        pthread_cond_init(cv, &a);
        pthread_condattr_destroy(&a);
}

/* Wait on cv until the monotonic deadline (ms); false once it passed. */
static bool wait_until(pthread_cond_t *cv, pthread_mutex_t *m, int64_t deadline)
{
        int64_t left = deadline - sbx_now_ms();
        if (left <= 0)
                return false;
        struct timespec ts = sbx_deadline_after(CLOCK_MONOTONIC, left > 250 ? 250 : left);
        (void)pthread_cond_timedwait(cv, m, &ts);
        return true;
}

/* ---- persistence ---- */

/* Write the context's row. Called with ctx->lock held (the store lock is a leaf). */
static void ctx_persist_locked(struct cell_ctx *x, bool live)
{
        struct store_context row = {0};

        if (x->deleted)
                return;
        sbx_strlcpy(row.user, x->user, sizeof(row.user));
        sbx_strlcpy(row.session, x->session, sizeof(row.session));
        sbx_strlcpy(row.name, x->name, sizeof(row.name));
        sbx_strlcpy(row.language, x->language, sizeof(row.language));
        row.generation = x->generation;
        row.execution_count = x->execution_count;
        row.runner_tag = x->tag;
        sbx_strlcpy(row.container_id, x->container_id, sizeof(row.container_id));
        sbx_strlcpy(row.state, live ? "live" : "lost", sizeof(row.state));
        sbx_strlcpy(row.lost_cause, x->lost_cause, sizeof(row.lost_cause));
        row.created_at = x->created_at;
        row.last_used = x->last_used;
        if (store_context_put(x->c->store, &row) < 0)
                log_warn("cells: cannot record context %s of %s:%s", x->name, x->user, x->session);
}

/* ---- the bridge's lines (hub thread) ---- */

static const char *str_of(const cJSON *o, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool id_is(const cJSON *o, uint64_t id)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "id");
        return cJSON_IsNumber(v) && v->valuedouble == (double)id;
}

static bool cause_known(const char *s)
{
        static const char *const ok[] = {"oom", "killed", "exited"};
        for (size_t i = 0; s && i < ELEMENTSOF(ok); i++)
                if (strcmp(s, ok[i]) == 0)
                        return true;
        return false;
}

/* A MIME bundle as the bridge sent it, keeping string values (and JSON for
 * application/json); NULL if it is not an object. */
static cJSON *mime_bundle(const cJSON *data)
{
        cJSON *out, *it;

        if (!cJSON_IsObject(data))
                return NULL;
        out = cJSON_CreateObject();
        cJSON_ArrayForEach(it, data) {
                if (!it->string || strlen(it->string) > 128)
                        continue;
                if (cJSON_IsString(it) || strcmp(it->string, "application/json") == 0)
                        cJSON_AddItemToObject(out, it->string, cJSON_Duplicate(it, true));
        }
        return out;
}

/* A by-reference entry for an output that does not fit inline: where its
 * bytes are in the cell's spool (get_execution <stream>_offset), and for a
 * bundle the small values (text/plain of a figure) and the omitted types. */
static cJSON *stub_of(const cJSON *o, enum cell_stream st, uint64_t off, size_t len)
{
        cJSON *s = cJSON_CreateObject(), *ref, *it, *data, *omitted;
        const char *type = str_of(o, "type") ?: "";

        cJSON_AddStringToObject(s, "type", type);
        if (st != CELL_OUTPUTS) {
                cJSON_AddStringToObject(s, "name", cell_stream_name(st));
                cJSON_AddStringToObject(s, "text", "");
        } else if (strcmp(type, "error") == 0) {
                cJSON_AddStringToObject(s, "name", str_of(o, "name") ?: "");
                cJSON_AddStringToObject(s, "value", str_of(o, "value") ?: "");
                cJSON_AddArrayToObject(s, "traceback");
        } else {
                data = cJSON_AddObjectToObject(s, "data");
                omitted = cJSON_AddArrayToObject(s, "omitted");
                cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(o, "data")) {
                        if (cJSON_IsString(it) && strlen(it->valuestring) <= CELLS_STUB_VALUE_MAX)
                                cJSON_AddItemToObject(data, it->string, cJSON_Duplicate(it, true));
                        else
                                cJSON_AddItemToArray(omitted, cJSON_CreateString(it->string));
                }
        }
        ref = cJSON_AddObjectToObject(s, "by_reference");
        cJSON_AddStringToObject(ref, "stream", cell_stream_name(st));
        cJSON_AddNumberToObject(ref, "offset", (double)off);
        cJSON_AddNumberToObject(ref, "bytes", (double)len);
        return s;
}

/* Append an output of the cell in flight (ctx->lock held); consecutive
 * stream chunks of one stream are merged. One that does not fit in
 * cells_output_cap goes by reference when it is spooled (st, off, len:
 * where), else it is dropped (truncated either way). */
static void add_output(struct cell_ctx *x, cJSON *o, size_t cost, enum cell_stream st, bool spooled, uint64_t off,
                       size_t len)
{
        cJSON *last;
        const char *type = str_of(o, "type");

        last = x->outputs ? cJSON_GetArrayItem(x->outputs, cJSON_GetArraySize(x->outputs) - 1) : NULL;
        if (x->out_bytes + cost > (size_t)x->c->cfg->cells_output_cap_bytes) {
                cJSON *lref = last ? cJSON_GetObjectItemCaseSensitive(last, "by_reference") : NULL;
                x->truncated = true;
                if (!spooled) {
                        cJSON_Delete(o);
                        return;
                }
                /* stream text by reference: one entry for a run of chunks */
                if (st != CELL_OUTPUTS && lref && strcmp(str_of(lref, "stream") ?: "", cell_stream_name(st)) == 0) {
                        cJSON *b = cJSON_GetObjectItemCaseSensitive(lref, "bytes");
                        cJSON_SetNumberValue(b, b->valuedouble + (double)len);
                        cJSON_Delete(o);
                        return;
                }
                if (x->stubs >= CELLS_MAX_STUBS) {
                        cJSON_Delete(o);
                        return;
                }
                x->stubs++;
                cJSON *s = stub_of(o, st, off, len);
                cJSON_Delete(o);
                o = s;
                if (!x->outputs)
                        x->outputs = cJSON_CreateArray();
                cJSON_AddItemToArray(x->outputs, o);
                return;
        }
        x->out_bytes += cost;
        if (last && type && strcmp(type, "stream") == 0 && strcmp(str_of(last, "type") ?: "", "stream") == 0 &&
            !cJSON_GetObjectItemCaseSensitive(last, "by_reference") &&
            strcmp(str_of(last, "name") ?: "", str_of(o, "name") ?: "") == 0 &&
            !cJSON_IsTrue(cJSON_GetObjectItem(last, "_sent"))) {
                const char *a = str_of(last, "text"), *b = str_of(o, "text");
                size_t la = strlen(a), lb = strlen(b);
                char *joined = malloc(la + lb + 1);
                if (joined) {
                        memcpy(joined, a, la);
                        memcpy(joined + la, b, lb + 1);
                        cJSON_ReplaceItemInObjectCaseSensitive(last, "text", cJSON_CreateString(joined));
                        free(joined);
                        cJSON_Delete(o);
                        return;
                }
        }
        if (!x->outputs)
                x->outputs = cJSON_CreateArray();
        cJSON_AddItemToArray(x->outputs, o);
}

/* Spool an output that is not stream text as one JSON line (ctx->lock
 * held); false when it is not kept. */
static bool spool_output(struct cell_ctx *x, const cJSON *o, uint64_t *ret_off, size_t *ret_len)
{
        char *s;
        size_t n;
        bool ok;

        if (!x->spool)
                return false;
        s = cJSON_PrintUnformatted(o);
        if (!s)
                return false;
        n = strlen(s);
        s[n] = '\n'; /* over the NUL: the length is known */
        ok = cell_spool_append(x->spool, CELL_OUTPUTS, s, n + 1, ret_off) == 0;
        free(s);
        *ret_len = n + 1;
        return ok;
}

static void handle_line(struct cell_ctx *x, const char *line, size_t len)
{
        cJSON *j, *o;
        const char *ev;

        if (!utf8_is_valid(line, len))
                return; /* results are UTF-8: a line that is not is no protocol line */
        j = cJSON_ParseWithLength(line, len);

        if (!cJSON_IsObject(j) || !(ev = str_of(j, "ev"))) {
                cJSON_Delete(j);
                return; /* not a protocol line: ignored */
        }
        pthread_mutex_lock(&x->lock);
        if (x->adopting) {
                if (strcmp(ev, "replay_begin") == 0) {
                        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
                        x->adopting = false;
                        cJSON_Delete(x->outputs);
                        x->outputs = NULL;
                        x->out_bytes = 0;
                        x->truncated = x->done = false;
                        x->done_count = -1;
                        x->done_status[0] = '\0';
                        if (cJSON_IsNumber(id) && id->valuedouble >= 1 && id->valuedouble < 1e15) {
                                x->cur_id = (uint64_t)id->valuedouble;
                                if (x->next_id <= x->cur_id)
                                        x->next_id = x->cur_id + 1;
                                x->adopted_cell = true;
                        } else if (x->adopt_busy) { /* no cell ever ran in it */
                                x->adopt_busy = x->busy = false;
                                x->cur_id = 0;
                        }
                }
                goto out;
        }
        if (strcmp(ev, "ready") == 0 && x->phase == CTX_STARTING) {
                const cJSON *pid = cJSON_GetObjectItemCaseSensitive(j, "kernel_pid");
                x->kernel_pid = cJSON_IsNumber(pid) && pid->valuedouble > 0 && pid->valuedouble < 1 << 30
                                        ? (int)pid->valuedouble
                                        : -1;
                x->phase = CTX_READY;
        } else if (strcmp(ev, "failed") == 0 && x->phase == CTX_STARTING) {
                snprintf(x->start_error, sizeof(x->start_error), "%s", str_of(j, "message") ?: "failed");
        } else if (strcmp(ev, "dead") == 0) {
                if (cause_known(str_of(j, "cause")))
                        sbx_strlcpy(x->bridge_cause, str_of(j, "cause"), sizeof(x->bridge_cause));
        } else if (strcmp(ev, "stats") == 0 && id_is(j, x->cur_id)) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "rss_kb");
                x->rss_kb = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e12 ? (int64_t)v->valuedouble
                                                                                              : -1;
        } else if (x->cur_id && id_is(j, x->cur_id) && !x->done) {
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "clipped")))
                        x->dropped = x->truncated = true; /* the bridge cut a value past its bound */
                if (strcmp(ev, "stream") == 0) {
                        const char *name = str_of(j, "name"), *text = str_of(j, "text");
                        if (name && text && (strcmp(name, "stdout") == 0 || strcmp(name, "stderr") == 0)) {
                                enum cell_stream st = strcmp(name, "stdout") == 0 ? CELL_STDOUT : CELL_STDERR;
                                size_t tl = strlen(text);
                                uint64_t off = 0;
                                bool sp = x->spool && cell_spool_append(x->spool, st, text, tl, &off) == 0;
                                o = cJSON_CreateObject();
                                cJSON_AddStringToObject(o, "type", "stream");
                                cJSON_AddStringToObject(o, "name", name);
                                cJSON_AddStringToObject(o, "text", text);
                                add_output(x, o, len, st, sp, off, tl);
                        }
                } else if (strcmp(ev, "display_data") == 0 || strcmp(ev, "execute_result") == 0) {
                        cJSON *data = mime_bundle(cJSON_GetObjectItemCaseSensitive(j, "data"));
                        const cJSON *md = cJSON_GetObjectItemCaseSensitive(j, "metadata");
                        if (data) {
                                o = cJSON_CreateObject();
                                cJSON_AddStringToObject(o, "type", ev);
                                cJSON_AddItemToObject(o, "data", data);
                                if (cJSON_IsObject(md) && md->child)
                                        cJSON_AddItemToObject(o, "metadata", cJSON_Duplicate(md, true));
                                uint64_t off = 0;
                                size_t ol = 0;
                                bool sp = spool_output(x, o, &off, &ol);
                                add_output(x, o, len, CELL_OUTPUTS, sp, off, ol);
                        }
                } else if (strcmp(ev, "error") == 0) {
                        const cJSON *tb = cJSON_GetObjectItemCaseSensitive(j, "traceback"), *it;
                        o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "type", "error");
                        cJSON_AddStringToObject(o, "name", str_of(j, "ename") ?: "");
                        cJSON_AddStringToObject(o, "value", str_of(j, "evalue") ?: "");
                        cJSON *a = cJSON_AddArrayToObject(o, "traceback");
                        if (cJSON_IsArray(tb))
                                cJSON_ArrayForEach(it, tb)
                                        if (cJSON_IsString(it))
                                                cJSON_AddItemToArray(a, cJSON_CreateString(it->valuestring));
                        uint64_t off = 0;
                        size_t ol = 0;
                        bool sp = spool_output(x, o, &off, &ol);
                        add_output(x, o, len, CELL_OUTPUTS, sp, off, ol);
                } else if (strcmp(ev, "clear_output") == 0) {
                        cJSON_Delete(x->outputs);
                        x->outputs = NULL;
                } else if (strcmp(ev, "done") == 0) {
                        const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "execution_count");
                        if (cJSON_IsNumber(n) && n->valuedouble >= 0 && n->valuedouble < 1e12)
                                x->done_count = (int64_t)n->valuedouble;
                        snprintf(x->done_status, sizeof(x->done_status), "%s",
                                 str_of(j, "status") && strlen(str_of(j, "status")) < 16 ? str_of(j, "status") : "ok");
                        x->done = true;
                        if (x->adopt_busy) { /* the replayed cell ended: the context is free again */
                                x->adopt_busy = x->busy = false;
                                if (x->done_count >= 0)
                                        x->execution_count = x->done_count;
                        }
                } else if (strcmp(ev, "variables") == 0) {
                        const cJSON *vs = cJSON_GetObjectItemCaseSensitive(j, "vars"), *it;
                        cJSON *a = cJSON_CreateArray();
                        int n = 0;
                        if (cJSON_IsArray(vs))
                                cJSON_ArrayForEach(it, vs) {
                                        const char *nm = str_of(it, "name"), *ty = str_of(it, "type"),
                                                   *rp = str_of(it, "repr"), *sh = str_of(it, "shape");
                                        if (!nm || !ty || !rp || ++n > CELLS_MAX_VARS)
                                                continue;
                                        cJSON *v = cJSON_CreateObject();
                                        cJSON_AddStringToObject(v, "name", nm);
                                        cJSON_AddStringToObject(v, "type", ty);
                                        cJSON_AddStringToObject(v, "repr", rp);
                                        if (sh && *sh)
                                                cJSON_AddStringToObject(v, "shape", sh);
                                        cJSON_AddItemToArray(a, v);
                                }
                        cJSON_Delete(x->vars);
                        x->vars = a;
                        x->done = true;
                }
        }
out:
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        cJSON_Delete(j);
}

/* The longest bridge line: one output, whole, so that it can go by
 * reference (bounded: the bridge clips a value past CELLS_LINE_MAX_CAP). */
static size_t line_max(const struct sbx_config *cfg)
{
        int64_t m = cfg->exec_output_cap_bytes > cfg->cells_output_cap_bytes ? cfg->exec_output_cap_bytes
                                                                             : cfg->cells_output_cap_bytes;
        return (size_t)(m < CELLS_LINE_MAX_CAP ? m : CELLS_LINE_MAX_CAP) + CELLS_LINE_SLACK;
}

/* The runner's output callback (hub thread): stdout is the bridge's lines,
 * stderr its diagnostics. Lines past the cap are skipped whole. */
static void cell_on_output(void *ud, int stream, const void *data, size_t len)
{
        struct cell_ctx *x = ud;
        const char *p = data, *end = p + len;
        size_t max = line_max(x->c->cfg);

        if (stream != 0) {
                log_debug("cells: %s:%s/%s bridge: %.*s", x->user, x->session, x->name,
                          (int)(len < CELLS_STDERR_LOG_MAX ? len : CELLS_STDERR_LOG_MAX), p);
                return;
        }
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
                if (!x->line_skip) {
                        if (x->line_len + n > max) {
                                x->line_skip = true;
                                x->line_len = 0;
                                pthread_mutex_lock(&x->lock);
                                x->truncated = x->dropped = true;
                                pthread_mutex_unlock(&x->lock);
                        } else {
                                if (x->line_len + n + 1 > x->line_cap) {
                                        size_t cap = x->line_cap ? x->line_cap : 4096;
                                        while (cap < x->line_len + n + 1)
                                                cap *= 2;
                                        char *nb = realloc(x->line, cap);
                                        if (!nb) {
                                                x->line_skip = true;
                                                x->line_len = 0;
                                                goto next;
                                        }
                                        x->line = nb;
                                        x->line_cap = cap;
                                }
                                memcpy(x->line + x->line_len, p, n);
                                x->line_len += n;
                        }
                }
next:
                if (nl) {
                        if (!x->line_skip && x->line_len)
                                handle_line(x, x->line, x->line_len);
                        x->line_len = 0;
                        x->line_skip = false;
                        p = nl + 1;
                } else
                        p = end;
        }
}

/* ---- generations ---- */

static void ctx_unref(struct cell_ctx *x);

struct waiter_arg {
        struct cell_ctx *x;
        struct runner_exec *rx;
        int64_t generation;
};

static void *waiter_main(void *p)
{
        struct waiter_arg a = *(struct waiter_arg *)p;
        struct cell_ctx *x = a.x;
        struct runner_exit ex = {0};
        struct sbx_error err = {0};
        int r;
        bool stopping;

        free(p);
        for (;;) {
                r = runner_exec_wait(a.rx, 1000, &ex, &err);
                if (r != -ETIMEDOUT)
                        break;
                pthread_mutex_lock(&x->c->lock);
                stopping = x->c->stopping;
                pthread_mutex_unlock(&x->c->lock);
                if (stopping) {
                        /* the daemon stops: the job stays with the runner, the row stays live */
                        pthread_mutex_lock(&x->rx_lock);
                        x->rx = NULL;
                        pthread_mutex_unlock(&x->rx_lock);
                        runner_exec_free(a.rx);
                        pthread_mutex_lock(&x->lock);
                        x->waiter_done = true;
                        pthread_cond_broadcast(&x->cond);
                        pthread_mutex_unlock(&x->lock);
                        return NULL;
                }
        }
        pthread_mutex_lock(&x->rx_lock);
        x->rx = NULL;
        pthread_mutex_unlock(&x->rx_lock);
        if (r == 0)
                (void)runner_exec_forget(a.rx);
        runner_exec_free(a.rx);

        pthread_mutex_lock(&x->lock);
        if (x->generation == a.generation) {
                const char *cause;
                if (x->strong_cause[0])
                        cause = x->strong_cause;
                else if (x->kill_cause[0])
                        cause = x->kill_cause;
                else if (x->bridge_cause[0])
                        cause = x->bridge_cause;
                else if (r == 0 && ex.signal == SIGKILL)
                        cause = "killed";
                else if (r == 0)
                        cause = "exited";
                else
                        cause = "runner_lost";
                if (!x->kill_silent) {
                        sbx_strlcpy(x->lost_cause, cause, sizeof(x->lost_cause));
                        x->lost_generation = a.generation;
                }
                if (x->phase == CTX_STARTING && !x->start_error[0])
                        snprintf(x->start_error, sizeof(x->start_error), "the interpreter ended while starting (%s)",
                                 cause);
                x->phase = CTX_IDLE;
                x->waiter_done = true;
                x->adopting = false;
                if (x->adopt_busy)
                        x->adopt_busy = x->busy = false;
                ctx_persist_locked(x, false);
                log_info("cells: %s:%s/%s generation %lld ended (%s)", x->user, x->session, x->name,
                         (long long)a.generation, cause);
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        return NULL;
}

/* Send one JSON line to the bridge (never waits past deadline). */
static int ctx_send(struct cell_ctx *x, const cJSON *msg, int64_t deadline)
{
        char *s = cJSON_PrintUnformatted(msg);
        size_t len, off = 0;
        int r = 0;

        if (!s)
                return -ENOMEM;
        len = strlen(s);
        s[len] = '\0';
        char *line = realloc(s, len + 2);
        if (!line) {
                free(s);
                return -ENOMEM;
        }
        line[len++] = '\n';
        while (off < len) {
                ssize_t n;
                pthread_mutex_lock(&x->rx_lock);
                n = x->rx ? runner_exec_write_stdin(x->rx, line + off, len - off) : -ECONNRESET;
                pthread_mutex_unlock(&x->rx_lock);
                if (n < 0) {
                        r = (int)n;
                        break;
                }
                off += (size_t)n;
                if (off < len) {
                        if (sbx_now_ms() >= deadline) {
                                r = -ETIMEDOUT;
                                break;
                        }
                        sbx_sleep_ms(2);
                }
        }
        free(line);
        return r;
}

static int ctx_signal(struct cell_ctx *x, int sig)
{
        int r;
        pthread_mutex_lock(&x->rx_lock);
        r = x->rx ? runner_exec_signal(x->rx, sig) : -ESRCH;
        pthread_mutex_unlock(&x->rx_lock);
        return r;
}

/* Join the last generation's waiter (it has ended or is about to). */
static void ctx_join_waiter(struct cell_ctx *x)
{
        pthread_t t;
        bool has;

        pthread_mutex_lock(&x->lock);
        has = x->has_waiter;
        t = x->waiter;
        x->has_waiter = false;
        pthread_mutex_unlock(&x->lock);
        if (has)
                pthread_join(t, NULL);
}

/* End the current generation: SIGKILL its tree and wait for its waiter.
 * cause "" with silent: on request, nothing to report. */
static void ctx_kill(struct cell_ctx *x, const char *cause, bool silent)
{
        int64_t deadline = sbx_now_ms() + CELLS_KILL_WAIT_MS;

        pthread_mutex_lock(&x->lock);
        if (x->phase == CTX_IDLE) {
                pthread_mutex_unlock(&x->lock);
                ctx_join_waiter(x);
                return;
        }
        sbx_strlcpy(x->kill_cause, cause, sizeof(x->kill_cause));
        x->kill_silent = silent;
        pthread_mutex_unlock(&x->lock);
        (void)ctx_signal(x, SIGKILL);
        pthread_mutex_lock(&x->lock);
        while (!x->waiter_done && wait_until(&x->cond, &x->lock, deadline))
                ;
        bool ended = x->waiter_done;
        pthread_mutex_unlock(&x->lock);
        if (ended)
                ctx_join_waiter(x);
        else
                log_warn("cells: %s:%s/%s did not end %d ms after SIGKILL", x->user, x->session, x->name,
                         CELLS_KILL_WAIT_MS);
}

static bool env_key_ok(const char *kv)
{
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv || (kv[0] >= '0' && kv[0] <= '9'))
                return false;
        for (const char *p = kv; p < eq; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
                        return false;
        return true;
}

/* Start a new generation (ctx busy, phase IDLE); waits for the kernel. */
static int ctx_start(struct cell_ctx *x, const char *container_id, const char *const *env, struct sbx_error *err)
{
        struct cells *c = x->c;
        bool py = strcmp(x->language, "python") == 0;
        char code_path[128], cell_dir[128], start_to[64];
        const char *argv_py[] = {"python3", "-I", code_path, "python3", NULL};
        const char *argv_node[] = {"node", "--expose-internals", code_path, NULL};
        const char *envv[CELLS_MAX_ENV + 3];
        size_t n_env = 0;
        struct runner_exec *rx = NULL;
        struct waiter_arg *wa;
        int64_t deadline;
        int r;

        for (size_t i = 0; env && env[i]; i++) {
                if (n_env >= CELLS_MAX_ENV)
                        return sbx_error_set(err, -E2BIG, 0, "more than %d environment variables", CELLS_MAX_ENV);
                if (!env_key_ok(env[i]))
                        return sbx_error_set(err, -EINVAL, 0, "environment names must be [A-Za-z_][A-Za-z0-9_]*");
                envv[n_env++] = env[i];
        }
        snprintf(cell_dir, sizeof(cell_dir), "SBX_CELL_DIR=/tmp/sbx-cell-%s", x->name);
        snprintf(start_to, sizeof(start_to), "SBX_CELL_START_TIMEOUT=%d", c->cfg->cells_start_timeout_ms / 1000);
        envv[n_env++] = cell_dir;
        envv[n_env++] = start_to;
        envv[n_env] = NULL;

        (void)runner_hub_adopt(c->hub, x->user, x->session);
        if (!runner_hub_wait(c->hub, x->user, x->session, CELLS_RUNNER_WAIT_MS))
                return sbx_error_set(
                        err, -ENOTCONN, 0,
                        "the session's runner is not connected: run_cell needs it (no docker exec fallback)");
        ctx_join_waiter(x);
        pthread_mutex_lock(&x->lock);
        snprintf(code_path, sizeof(code_path), "/tmp/sbx-cell-%s-%lld.%s", x->name, (long long)x->generation + 1,
                 py ? "py" : "js");
        x->phase = CTX_STARTING;
        x->generation++;
        x->kill_cause[0] = x->strong_cause[0] = x->bridge_cause[0] = x->start_error[0] = '\0';
        x->kill_silent = false;
        x->waiter_done = false;
        x->execution_count = 0;
        x->kernel_pid = -1;
        x->cur_id = 0;
        sbx_strlcpy(x->container_id, container_id, sizeof(x->container_id));
        pthread_mutex_unlock(&x->lock);
        x->line_len = 0; /* no output arrives before the job starts */
        x->line_skip = false;

        const char *src = py ? cells_bridge_python : cells_bridge_node;
        struct runner_exec_spec spec = {
                .workdir = "/workspace",
                .code_path = code_path,
                .code = src,
                .code_len = strlen(src),
                .argv = py ? argv_py : argv_node,
                .env = envv,
                .stdin_pipe = true,
        };
        r = runner_exec_start(c->hub, x->user, x->session, &spec, cell_on_output, x, &rx, err);
        if (r < 0) {
                pthread_mutex_lock(&x->lock);
                x->phase = CTX_IDLE;
                pthread_mutex_unlock(&x->lock);
                return r;
        }
        pthread_mutex_lock(&x->rx_lock);
        x->rx = rx;
        pthread_mutex_unlock(&x->rx_lock);
        wa = malloc(sizeof(*wa));
        if (!wa) {
                r = -ENOMEM;
        } else {
                *wa = (struct waiter_arg){.x = x, .rx = rx, .generation = x->generation};
                pthread_mutex_lock(&x->lock);
                x->tag = runner_exec_tag(rx);
                r = -pthread_create(&x->waiter, NULL, waiter_main, wa);
                x->has_waiter = r == 0;
                pthread_mutex_unlock(&x->lock);
                if (r < 0)
                        free(wa);
        }
        if (r < 0) {
                pthread_mutex_lock(&x->rx_lock);
                x->rx = NULL;
                pthread_mutex_unlock(&x->rx_lock);
                (void)runner_exec_signal(rx, SIGKILL);
                runner_exec_free(rx);
                pthread_mutex_lock(&x->lock);
                x->phase = CTX_IDLE;
                pthread_mutex_unlock(&x->lock);
                return sbx_error_set(err, r, 0, "cannot start the context's waiter");
        }
        pthread_setname_np(x->waiter, "sbx-cellwait");

        deadline = sbx_now_ms() + c->cfg->cells_start_timeout_ms + 5000;
        pthread_mutex_lock(&x->lock);
        ctx_persist_locked(x, true);
        while (x->phase == CTX_STARTING && !x->start_error[0] && wait_until(&x->cond, &x->lock, deadline))
                ;
        if (x->phase == CTX_READY) {
                pthread_mutex_unlock(&x->lock);
                log_info("cells: %s:%s/%s generation %lld ready (%s, kernel pid %d)", x->user, x->session, x->name,
                         (long long)x->generation, x->language, x->kernel_pid);
                return 0;
        }
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", x->start_error[0] ? x->start_error : "the interpreter did not start in time");
        pthread_mutex_unlock(&x->lock);
        ctx_kill(x, "", true);
        return sbx_error_set(err, -EIO, 0, "the %s context could not start: %s", x->language, msg);
}

/* ---- contexts ---- */

static void ctx_unref(struct cell_ctx *x)
{
        struct cells *c;
        bool last;

        if (!x)
                return;
        c = x->c;
        pthread_mutex_lock(&c->lock);
        last = --x->refs == 0;
        pthread_mutex_unlock(&c->lock);
        if (!last)
                return;
        ctx_join_waiter(x);
        cJSON_Delete(x->outputs);
        cJSON_Delete(x->vars);
        cJSON_Delete(x->last_result);
        free(x->line);
        pthread_mutex_destroy(&x->lock);
        pthread_mutex_destroy(&x->rx_lock);
        pthread_cond_destroy(&x->cond);
        free(x);
}

static struct cell_ctx *find_locked(struct cells *c, const char *user, const char *session, const char *name)
{
        for (struct cell_ctx *x = c->list; x; x = x->next)
                if (strcmp(x->user, user) == 0 && strcmp(x->session, session) == 0 && strcmp(x->name, name) == 0)
                        return x;
        return NULL;
}

static struct cell_ctx *ctx_alloc(struct cells *c, const char *user, const char *session, const char *name,
                                  const char *language)
{
        struct cell_ctx *x = calloc(1, sizeof(*x));
        if (!x)
                return NULL;
        x->c = c;
        x->refs = 1; /* the list's */
        sbx_strlcpy(x->user, user, sizeof(x->user));
        sbx_strlcpy(x->session, session, sizeof(x->session));
        sbx_strlcpy(x->name, name, sizeof(x->name));
        sbx_strlcpy(x->language, language, sizeof(x->language));
        x->created_at = x->last_used = sbx_wall_ms();
        x->next_id = 1;
        x->kernel_pid = -1;
        x->rss_kb = -1;
        pthread_mutex_init(&x->lock, NULL);
        pthread_mutex_init(&x->rx_lock, NULL);
        cond_init_mono(&x->cond);
        return x;
}

/* The context, with a reference; created (within the caps) when create. */
static int ctx_get(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                   bool create, struct cell_ctx **ret, struct sbx_error *err)
{
        struct cell_ctx *x;
        size_t in_session = 0;

        if (!cells_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "a context name is 1-%d of [A-Za-z0-9_.-]", CELLS_NAME_MAX);
        pthread_mutex_lock(&c->lock);
        x = find_locked(c, user, session, name);
        if (x) {
                x->refs++;
                pthread_mutex_unlock(&c->lock);
                if (language && strcmp(language, x->language) != 0) {
                        /* the python kernel a warm slot started ahead, never used:
                         * the first cell asks for another language, so it goes */
                        pthread_mutex_lock(&x->lock);
                        bool fresh = x->prestarted_generation && x->generation == x->prestarted_generation &&
                                     x->execution_count == 0 && !x->busy;
                        if (fresh)
                                x->busy = true;
                        pthread_mutex_unlock(&x->lock);
                        if (fresh) {
                                ctx_kill(x, "", true);
                                pthread_mutex_lock(&x->lock);
                                sbx_strlcpy(x->language, language, sizeof(x->language));
                                x->generation = x->prestarted_generation = 0;
                                x->lost_cause[0] = '\0';
                                x->busy = false;
                                ctx_persist_locked(x, false);
                                pthread_mutex_unlock(&x->lock);
                                *ret = x;
                                return 0;
                        }
                        sbx_error_set(err, -EINVAL, 0, "context %s is a %s context (use another context name)", name,
                                      x->language);
                        ctx_unref(x);
                        return -EINVAL;
                }
                *ret = x;
                return 0;
        }
        if (!create) {
                pthread_mutex_unlock(&c->lock);
                return sbx_error_set(err, -ENOENT, 0, "no context %s in this session", name);
        }
        for (struct cell_ctx *y = c->list; y; y = y->next)
                if (strcmp(y->user, user) == 0 && strcmp(y->session, session) == 0)
                        in_session++;
        if (in_session >= (size_t)c->cfg->cells_max_per_session || c->n >= (size_t)c->cfg->cells_max_global) {
                pthread_mutex_unlock(&c->lock);
                return sbx_error_set(err, -EBUSY, 0,
                                     in_session >= (size_t)c->cfg->cells_max_per_session
                                             ? "this session already has %d contexts (cells_max_per_session): "
                                               "delete_context one"
                                             : "the daemon holds its maximum of %d contexts (cells_max_global)",
                                     in_session >= (size_t)c->cfg->cells_max_per_session ? c->cfg->cells_max_per_session
                                                                                         : c->cfg->cells_max_global);
        }
        x = ctx_alloc(c, user, session, name, language ? language : "python");
        if (!x) {
                pthread_mutex_unlock(&c->lock);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        x->next = c->list;
        c->list = x;
        c->n++;
        x->refs++;
        pthread_mutex_unlock(&c->lock);
        *ret = x;
        return 0;
}

static int ctx_acquire(struct cell_ctx *x, struct sbx_error *err)
{
        int64_t deadline = sbx_now_ms() + CELLS_ADOPT_WAIT_MS + 5000;

        /* a paused session is resumed before anything waits on its kernel:
         * a frozen bridge answers nothing, and a job to adopt after a restart
         * waits for the thaw (adopter_main) */
        if (session_is_paused(x->c->sessions, x->user, x->session)) {
                int r = session_resume(x->c->sessions, x->user, x->session, NULL, err);
                if (r < 0)
                        return r;
        }

        pthread_mutex_lock(&x->lock);
        /* after a restart, until the context's job is adopted and its replay in */
        while ((x->adopt_pending || (x->adopting && !x->waiter_done)) && wait_until(&x->cond, &x->lock, deadline))
                ;
        /* the replay of a cell that had ended comes at once: a caller that
         * waited for the adoption should not find it still holding the
         * context (a cell that still runs keeps it: busy, as before) */
        int64_t replay = sbx_now_ms() + CELLS_REPLAY_GRACE_MS;
        while (x->adopted_cell && x->adopt_busy && !x->waiter_done &&
               wait_until(&x->cond, &x->lock, replay < deadline ? replay : deadline))
                ;
        if (x->busy) {
                pthread_mutex_unlock(&x->lock);
                return sbx_error_set(err, -EBUSY, 0, "a cell is already running in context %s%s", x->name,
                                     x->adopt_busy ? " (it outlived a daemon restart: last_cell waits for its end)"
                                                   : "");
        }
        x->busy = true;
        pthread_mutex_unlock(&x->lock);
        return 0;
}

static void ctx_release(struct cell_ctx *x)
{
        pthread_mutex_lock(&x->lock);
        x->busy = false;
        x->interrupt_requested = false;
        x->cur_id = 0;
        x->last_used = sbx_wall_ms();
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* Make sure a generation runs in the session's current container (ctx
 * busy). *ret_lost gets the loss to report (a copy), if any. */
static int ctx_ensure(struct cell_ctx *x, const char *const *env, cJSON **ret_lost, struct sbx_error *err)
{
        struct session *s = NULL;
        char cid[65];
        int r = session_get_or_create(x->c->sessions, x->user, x->session, &s, err);
        bool ready;
        uint64_t ooms;

        if (r < 0)
                return r;
        session_container_id(s, cid);
        ooms = session_oom_events(s);
        session_release(s);

        pthread_mutex_lock(&x->lock);
        /* the OOM killer's SIGKILL looks like any other to the bridge and the
         * runner; the engine's OOM event since the generation started says
         * what it was */
        if (x->lost_cause[0] && x->lost_generation == x->generation && ooms > x->oom_at_start &&
            (strcmp(x->lost_cause, "killed") == 0 || strcmp(x->lost_cause, "exited") == 0 ||
             strcmp(x->lost_cause, "runner_lost") == 0))
                sbx_strlcpy(x->lost_cause, "oom", sizeof(x->lost_cause));
        ready = x->phase == CTX_READY;
        if (ready && strcmp(cid, x->container_id) != 0)
                sbx_strlcpy(x->strong_cause, "container_recreated", sizeof(x->strong_cause));
        pthread_mutex_unlock(&x->lock);
        if (ready && strcmp(cid, x->container_id) != 0) {
                ctx_kill(x, "container_recreated", false);
                ready = false;
        }
        pthread_mutex_lock(&x->lock);
        if (x->lost_cause[0]) {
                cJSON *l = cJSON_CreateObject();
                cJSON_AddStringToObject(l, "cause", x->lost_cause);
                cJSON_AddNumberToObject(l, "generation", (double)x->lost_generation);
                *ret_lost = l;
        }
        pthread_mutex_unlock(&x->lock);
        if (ready)
                return 0;
        pthread_mutex_lock(&x->lock);
        x->oom_at_start = ooms;
        pthread_mutex_unlock(&x->lock);
        r = ctx_start(x, cid, env, err);
        if (r == 0) {
                pthread_mutex_lock(&x->lock);
                x->lost_cause[0] = '\0'; /* reported by this call */
                ctx_persist_locked(x, true);
                pthread_mutex_unlock(&x->lock);
        }
        return r;
}

static cJSON *lost_json(const char *cause, int64_t generation)
{
        cJSON *l = cJSON_CreateObject();
        cJSON_AddStringToObject(l, "cause", cause);
        cJSON_AddNumberToObject(l, "generation", (double)generation);
        return l;
}

/* Send the progress of outputs not sent yet (ctx->lock held; the callback
 * runs with it dropped). */
static void send_progress(struct cell_ctx *x, int *sent, const struct cells_request *req)
{
        while (req->on_output && x->outputs && *sent < cJSON_GetArraySize(x->outputs)) {
                cJSON *o = cJSON_Duplicate(cJSON_GetArrayItem(x->outputs, *sent), true);
                /* a stream chunk already sent is not merged into any more */
                cJSON *orig = cJSON_GetArrayItem(x->outputs, *sent);
                if (!cJSON_GetObjectItem(orig, "_sent"))
                        cJSON_AddTrueToObject(orig, "_sent");
                (*sent)++;
                pthread_mutex_unlock(&x->lock);
                if (o)
                        req->on_output(req->userdata, o);
                cJSON_Delete(o);
                pthread_mutex_lock(&x->lock);
        }
}

/* res.stdout / res.stderr: the inline text, or when the stream was longer
 * (the rest went by reference) its head and tail from the spool around a
 * marker, as exec's results are (ctx->lock held). */
static void add_stream_field(struct cell_ctx *x, cJSON *res, enum cell_stream st, const char *inl, size_t inl_len)
{
        uint64_t total = cell_spool_total(x->spool, st);
        size_t h = (size_t)x->c->cfg->exec_result_head_bytes;
        char *head = NULL, *tail = NULL, *all = NULL, marker[96];
        size_t hl = 0, tl = 0;

        if (!x->spool || total <= inl_len || total <= 2 * (uint64_t)h ||
            cell_spool_read(x->c->spool_dir, x->exec_id, st, 0, h, &head, &hl) < 0 ||
            cell_spool_read(x->c->spool_dir, x->exec_id, st, total - h, h, &tail, &tl) < 0) {
                free(head);
                cJSON_AddStringToObject(res, cell_stream_name(st), inl);
                return;
        }
        snprintf(marker, sizeof(marker), "\n...[%llu bytes omitted: get_execution %s_offset]...\n",
                 (unsigned long long)(total - hl - tl), cell_stream_name(st));
        char *hc = utf8_sanitize(head, hl), *tc = utf8_sanitize(tail, tl);
        if (hc && tc && asprintf(&all, "%s%s%s", hc, marker, tc) < 0)
                all = NULL;
        cJSON_AddStringToObject(res, cell_stream_name(st), all ? all : inl);
        free(all);
        free(hc);
        free(tc);
        free(head);
        free(tail);
}

/* The result of the cell in x->outputs (ctx->lock held); takes lost. */
static cJSON *result_locked(struct cell_ctx *x, bool timed_out, bool killed, cJSON *lost)
{
        cJSON *res = cJSON_CreateObject(), *outs, *it, *first_error = NULL;
        size_t so_len = 0, se_len = 0;

        cJSON_AddStringToObject(res, "context", x->name);
        cJSON_AddStringToObject(res, "language", x->language);
        cJSON_AddNumberToObject(res, "generation", (double)x->generation);
        cJSON_AddNumberToObject(res, "execution_count", (double)x->execution_count);
        outs = x->outputs ? cJSON_Duplicate(x->outputs, true) : cJSON_CreateArray();
        cJSON_ArrayForEach(it, outs) {
                const char *type = str_of(it, "type");
                cJSON_DeleteItemFromObjectCaseSensitive(it, "_sent");
                if (type && strcmp(type, "stream") == 0) {
                        size_t *l = strcmp(str_of(it, "name"), "stdout") == 0 ? &so_len : &se_len;
                        *l += strlen(str_of(it, "text"));
                } else if (type && strcmp(type, "error") == 0 && !first_error)
                        first_error = it;
        }
        {
                char *so = calloc(1, so_len + 1), *se = calloc(1, se_len + 1);
                size_t a = 0, b = 0;
                cJSON_ArrayForEach(it, outs) {
                        const char *type = str_of(it, "type"), *t = str_of(it, "text");
                        if (!type || strcmp(type, "stream") != 0 || !t || !so || !se)
                                continue;
                        size_t n = strlen(t);
                        if (strcmp(str_of(it, "name"), "stdout") == 0) {
                                memcpy(so + a, t, n);
                                a += n;
                        } else {
                                memcpy(se + b, t, n);
                                b += n;
                        }
                }
                add_stream_field(x, res, CELL_STDOUT, so ? so : "", a);
                add_stream_field(x, res, CELL_STDERR, se ? se : "", b);
                free(so);
                free(se);
        }
        if (x->exec_id[0]) {
                cJSON_AddStringToObject(res, "execution_id", x->exec_id);
                for (int k = 0; k < CELL_STREAMS; k++) {
                        char key[32];
                        snprintf(key, sizeof(key), "%s_bytes", cell_stream_name(k));
                        cJSON_AddNumberToObject(res, key, (double)cell_spool_total(x->spool, k));
                }
        }
        cJSON_AddItemToObject(res, "outputs", outs);
        if (first_error) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "name", str_of(first_error, "name"));
                cJSON_AddStringToObject(e, "value", str_of(first_error, "value"));
                cJSON_AddItemToObject(e, "traceback",
                                      cJSON_Duplicate(cJSON_GetObjectItem(first_error, "traceback"), true));
                cJSON_AddItemToObject(res, "error", e);
        }
        const char *status = x->done ? (x->done_status[0] ? x->done_status : "ok") : killed ? "timeout" : "died";
        if (x->done && timed_out)
                status = "timeout"; /* interrupted in time: state kept */
        if (x->cancel_requested && (x->done || killed))
                status = "cancelled";
        cJSON_AddStringToObject(res, "status", status);
        if (timed_out || (killed && !x->cancel_requested))
                cJSON_AddTrueToObject(res, "timed_out");
        if (x->truncated)
                cJSON_AddTrueToObject(res, "truncated");
        if (x->dropped || cell_spool_lost(x->spool))
                cJSON_AddTrueToObject(res, "output_dropped");
        if (x->cancel_requested)
                cJSON_AddTrueToObject(res, "cancelled");
        if (x->prestarted_generation && x->prestarted_generation == x->generation)
                cJSON_AddTrueToObject(res, "prestarted"); /* its interpreter was started in a warm pool slot */
        if (lost)
                cJSON_AddItemToObject(res, "state_lost", lost);
        return res;
}

/* One audit row per cell, as for an execution: the code's hash and a
 * preview, the context, its generation and how the cell ended. */
static void audit_cell(struct cell_ctx *x, const struct cells_request *req, const cJSON *res)
{
        cJSON *d = cJSON_CreateObject();
        char sha[65] = "", preview[161];
        char *json;

        (void)sha256_hex(req->code, strlen(req->code), sha);
        snprintf(preview, sizeof(preview), "%s", req->code);
        char *clean = utf8_sanitize(preview, strlen(preview));
        cJSON_AddStringToObject(d, "context", x->name);
        cJSON_AddStringToObject(d, "language", x->language);
        cJSON_AddItemToObject(d, "generation", cJSON_Duplicate(cJSON_GetObjectItem(res, "generation"), true));
        cJSON_AddItemToObject(d, "status", cJSON_Duplicate(cJSON_GetObjectItem(res, "status"), true));
        cJSON_AddStringToObject(d, "sha256", sha);
        cJSON_AddStringToObject(d, "preview", clean ? clean : "");
        free(clean);
        json = cJSON_PrintUnformatted(d);
        (void)audit_record(x->c->store, req->actor && *req->actor ? req->actor : "unknown", x->user, x->session, "cell",
                           json ? json : "{}");
        free(json);
        cJSON_Delete(d);
}

/* ---- recent cells (engine lock) ---- */

static struct cell_record *record_find_locked(struct cells *c, const char *user, const char *session, const char *id)
{
        for (size_t i = 0; i < CELLS_RECENT_MAX; i++) {
                struct cell_record *r = &c->recent[i];
                if (r->used && strcmp(r->id, id) == 0 && strcmp(r->user, user) == 0 && strcmp(r->session, session) == 0)
                        return r;
        }
        return NULL;
}

/* A slot for a new cell: a free one, else the session's oldest when it
 * holds its share, else the oldest of all; an evicted cell's spool goes. */
static void record_begin(struct cells *c, const char *user, const char *session, const char *context, const char *id)
{
        struct cell_record *slot = NULL, *oldest = NULL, *oldest_s = NULL;
        size_t in_session = 0;

        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < CELLS_RECENT_MAX; i++) {
                struct cell_record *r = &c->recent[i];
                if (!r->used) {
                        if (!slot)
                                slot = r;
                        continue;
                }
                /* an ended cell goes first: a running one is still being spooled */
                if (!oldest || (r->final && !oldest->final) || (r->final == oldest->final && r->seq < oldest->seq))
                        oldest = r;
                if (strcmp(r->user, user) == 0 && strcmp(r->session, session) == 0) {
                        in_session++;
                        if (!oldest_s || (r->final && !oldest_s->final) ||
                            (r->final == oldest_s->final && r->seq < oldest_s->seq))
                                oldest_s = r;
                }
        }
        if (in_session >= CELLS_RECENT_PER_SESSION)
                slot = oldest_s;
        else if (!slot)
                slot = oldest;
        if (slot->used)
                cell_spool_remove(c->spool_dir, slot->id);
        *slot = (struct cell_record){.used = true, .seq = ++c->recent_seq, .created_at = sbx_wall_ms()};
        sbx_strlcpy(slot->id, id, sizeof(slot->id));
        sbx_strlcpy(slot->user, user, sizeof(slot->user));
        sbx_strlcpy(slot->session, session, sizeof(slot->session));
        sbx_strlcpy(slot->context, context, sizeof(slot->context));
        sbx_strlcpy(slot->status, "running", sizeof(slot->status));
        pthread_mutex_unlock(&c->lock);
}

static void record_end(struct cells *c, const char *user, const char *session, const char *id, const cJSON *res,
                       const uint64_t total[CELL_STREAMS])
{
        struct cell_record *r;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(res, "status");
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(res, "duration_ms");

        pthread_mutex_lock(&c->lock);
        r = record_find_locked(c, user, session, id);
        if (r) {
                r->final = true;
                sbx_strlcpy(r->status, cJSON_IsString(st) ? st->valuestring : "failed", sizeof(r->status));
                memcpy(r->total, total, sizeof(r->total));
                r->truncated = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "truncated"));
                r->lost = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "output_dropped"));
                r->duration_ms = cJSON_IsNumber(d) ? (int64_t)d->valuedouble : 0;
        }
        pthread_mutex_unlock(&c->lock);
}

/* Drop the records (and spools) of a session's cells, or of one context's. */
static void records_drop(struct cells *c, const char *user, const char *session, const char *context)
{
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < CELLS_RECENT_MAX; i++) {
                struct cell_record *r = &c->recent[i];
                if (r->used && r->final && strcmp(r->user, user) == 0 && strcmp(r->session, session) == 0 &&
                    (!context || strcmp(r->context, context) == 0)) {
                        cell_spool_remove(c->spool_dir, r->id);
                        r->used = false;
                }
        }
        pthread_mutex_unlock(&c->lock);
}

int cells_run(struct cells *c, const struct cells_request *req, cJSON **ret, struct sbx_error *err)
{
        const char *name = req->context ? req->context : CELLS_DEFAULT;
        struct cell_ctx *x = NULL;
        cJSON *lost = NULL, *res = NULL, *msg;
        int timeout_s = req->timeout_s > 0 ? req->timeout_s : c->cfg->exec_timeout_default_s;
        int64_t start = sbx_now_ms(), deadline, grace_end = 0;
        bool timed_out = false, killed = false;
        int sent = 0, r;
        uint64_t id, total[CELL_STREAMS] = {0};
        char exec_id[37];
        struct cell_spool *spool = NULL;

        if (req->language && strcmp(req->language, "python") != 0 && strcmp(req->language, "node") != 0)
                return sbx_error_set(err, -EINVAL, 0, "language must be python or node");
        if (!req->code)
                return sbx_error_set(err, -EINVAL, 0, "code is required");
        if ((int64_t)strlen(req->code) > c->cfg->max_command_bytes)
                return sbx_error_set(err, -E2BIG, 0, "the cell is longer than max_command_bytes (%lld)",
                                     (long long)c->cfg->max_command_bytes);
        if (timeout_s > c->cfg->exec_timeout_max_s)
                timeout_s = c->cfg->exec_timeout_max_s;
        if (cells_name_valid(name)) {
                /* a new context: the session's container first, so that a warm
                 * pool slot it claims hands over its kernel started ahead
                 * (cells_pool_slot) before a context of that name exists */
                pthread_mutex_lock(&c->lock);
                bool known = find_locked(c, req->user, req->session, name) != NULL;
                pthread_mutex_unlock(&c->lock);
                if (!known) {
                        struct session *s = NULL;
                        r = session_get_or_create(c->sessions, req->user, req->session, &s, err);
                        if (r < 0)
                                return r;
                        session_release(s);
                }
        }
        r = ctx_get(c, req->user, req->session, name, req->language, true, &x, err);
        if (r < 0)
                return r;
        r = ctx_acquire(x, err);
        if (r < 0)
                goto out_unref;
        r = ctx_ensure(x, req->env, &lost, err);
        if (r < 0)
                goto out;
        r = sbx_uuid(exec_id);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot name the cell");
                goto out;
        }
        /* its output by reference; without a spool the cell still runs, and
         * what does not fit inline is dropped (output_dropped) */
        if (c->spool_ok &&
            (r = cell_spool_open(c->spool_dir, exec_id, (uint64_t)c->cfg->exec_output_cap_bytes, &spool)) < 0)
                log_warn("cells: cannot spool cell %s of %s:%s: %s", exec_id, req->user, req->session, strerror(-r));
        record_begin(c, req->user, req->session, x->name, exec_id);

        pthread_mutex_lock(&x->lock);
        id = x->cur_id = x->next_id++;
        cJSON_Delete(x->outputs);
        x->outputs = NULL;
        x->out_bytes = 0;
        x->stubs = 0;
        x->dropped = false;
        x->cancel_requested = x->cancel_force = false;
        sbx_strlcpy(x->exec_id, exec_id, sizeof(x->exec_id));
        x->spool = spool;
        pthread_cond_broadcast(&x->cond);
        x->truncated = x->done = false;
        x->done_count = -1;
        x->done_status[0] = '\0';
        pthread_mutex_unlock(&x->lock);

        if (req->on_start)
                req->on_start(req->userdata, exec_id);
        msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "op", "execute");
        cJSON_AddNumberToObject(msg, "id", (double)id);
        cJSON_AddStringToObject(msg, "code", req->code);
        deadline = start + (int64_t)timeout_s * 1000;
        r = ctx_send(x, msg, deadline);
        cJSON_Delete(msg);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot hand the cell to its interpreter");
                pthread_mutex_lock(&x->lock);
                x->spool = NULL;
                x->exec_id[0] = '\0';
                pthread_mutex_unlock(&x->lock);
                cell_spool_close(spool);
                record_end(c, req->user, req->session, exec_id, NULL, total);
                goto out;
        }

        pthread_mutex_lock(&x->lock);
        for (;;) {
                send_progress(x, &sent, req);
                if (x->done || x->waiter_done)
                        break;
                if (x->cancel_force) { /* cancel_execution force: no interrupt, no grace */
                        pthread_mutex_unlock(&x->lock);
                        ctx_kill(x, "cancelled", false);
                        killed = true;
                        pthread_mutex_lock(&x->lock);
                        break;
                }
                bool interrupt = (x->interrupt_requested || x->cancel_requested) && !grace_end;
                if (!grace_end && (interrupt || sbx_now_ms() >= deadline)) {
                        timed_out = !interrupt;
                        grace_end = sbx_now_ms() + c->cfg->cells_interrupt_grace_ms;
                        pthread_mutex_unlock(&x->lock);
                        if (strcmp(x->language, "node") == 0) {
                                /* node is its own kernel: a busy event loop reads no line,
                                 * but breakOnSigint turns SIGINT into an error in the cell */
                                (void)ctx_signal(x, SIGINT);
                        } else {
                                cJSON *in = cJSON_CreateObject();
                                cJSON_AddStringToObject(in, "op", "interrupt");
                                (void)ctx_send(x, in, grace_end);
                                cJSON_Delete(in);
                        }
                        pthread_mutex_lock(&x->lock);
                        continue;
                }
                if (grace_end && sbx_now_ms() >= grace_end) {
                        const char *cause = x->cancel_requested ? "cancelled" : "timeout";
                        pthread_mutex_unlock(&x->lock);
                        ctx_kill(x, cause, false);
                        killed = true;
                        pthread_mutex_lock(&x->lock);
                        break;
                }
                (void)wait_until(&x->cond, &x->lock, grace_end ? grace_end : deadline);
        }
        send_progress(x, &sent, req);

        if (x->done && x->done_count >= 0)
                x->execution_count = x->done_count;
        else if (x->done)
                x->execution_count++;
        if (!x->done) {
                /* the interpreter died during the cell: its state is gone (the next cell says so too) */
                cJSON_Delete(lost);
                lost = lost_json(x->lost_cause[0] ? x->lost_cause : "killed", x->generation);
        }
        res = result_locked(x, timed_out, killed, lost);
        lost = NULL;
        x->adopted_cell = false;
        cJSON_AddNumberToObject(res, "duration_ms", (double)(sbx_now_ms() - start));
        /* the row changes with the generation (start, end: ctx_start, the
         * waiter), not per cell; the cell is audited below */
        cJSON_Delete(x->last_result);
        x->last_result = cJSON_Duplicate(res, true);
        for (int k = 0; k < CELL_STREAMS; k++)
                total[k] = cell_spool_total(x->spool, k);
        x->spool = NULL;
        x->exec_id[0] = '\0';
        pthread_cond_broadcast(&x->cond); /* a cancel_execution waits for this */
        pthread_mutex_unlock(&x->lock);
        cell_spool_close(spool);
        record_end(c, req->user, req->session, exec_id, res, total);
        *ret = res;
        r = 0;
        audit_cell(x, req, res);
out:
        cJSON_Delete(lost);
        ctx_release(x);
out_unref:
        ctx_unref(x);
        return r;
}

int cells_last(struct cells *c, const char *user, const char *session, const char *context, int wait_ms, cJSON **ret,
               struct sbx_error *err)
{
        struct cell_ctx *x;
        int64_t deadline = sbx_now_ms() + wait_ms;
        int r = ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);

        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        while ((x->adopt_pending || (x->adopting && !x->waiter_done) ||
                (x->adopted_cell && !x->done && !x->waiter_done)) &&
               wait_until(&x->cond, &x->lock, deadline))
                ;
        if (x->adopted_cell) {
                cJSON *lost = !x->done && x->waiter_done
                                      ? lost_json(x->lost_cause[0] ? x->lost_cause : "killed", x->generation)
                                      : NULL;
                *ret = result_locked(x, false, false, lost);
                cJSON_AddBoolToObject(*ret, "complete", x->done || x->waiter_done);
                cJSON_AddTrueToObject(*ret, "adopted");
        } else if (x->last_result) {
                *ret = cJSON_Duplicate(x->last_result, true);
                cJSON_AddTrueToObject(*ret, "complete");
        } else
                r = sbx_error_set(err, -ENOENT, 0, "no cell has run in context %s since the daemon started", x->name);
        pthread_mutex_unlock(&x->lock);
        ctx_unref(x);
        return r;
}

int cells_interrupt(struct cells *c, const char *user, const char *session, const char *context, struct sbx_error *err)
{
        struct cell_ctx *x;
        int r = ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);
        bool running;

        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        running = x->busy && x->cur_id != 0 && !x->done;
        if (running)
                x->interrupt_requested = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        ctx_unref(x);
        return running ? 0 : sbx_error_set(err, -EALREADY, 0, "no cell is running in context %s", context);
}

int cells_cancel(struct cells *c, const char *user, const char *session, const char *execution_id, bool force,
                 int wait_ms, cJSON **ret, struct sbx_error *err)
{
        struct cell_ctx *x = NULL;
        struct cell_record *rec;
        int64_t deadline;
        cJSON *res = NULL;

        if (!c || !execution_id)
                return -ENOENT;
        pthread_mutex_lock(&c->lock);
        for (struct cell_ctx *y = c->list; y && !x; y = y->next) {
                if (strcmp(y->user, user) != 0 || strcmp(y->session, session) != 0)
                        continue;
                pthread_mutex_lock(&y->lock);
                if (strcmp(y->exec_id, execution_id) == 0) {
                        y->cancel_requested = true;
                        y->cancel_force = y->cancel_force || force;
                        pthread_cond_broadcast(&y->cond);
                        y->refs++;
                        x = y;
                }
                pthread_mutex_unlock(&y->lock);
        }
        rec = x ? NULL : record_find_locked(c, user, session, execution_id);
        if (!x) {
                int r = rec ? sbx_error_set(err, -EALREADY, 0, "cell %s already finished (%s)", execution_id,
                                            rec->final ? rec->status : "running")
                            : -ENOENT; /* not a cell: the caller tries the executions */
                pthread_mutex_unlock(&c->lock);
                return r;
        }
        pthread_mutex_unlock(&c->lock);
        log_info("cells: %s:%s/%s cell %s cancelled%s", user, session, x->name, execution_id, force ? " (force)" : "");
        /* the interrupt, its grace and a kill, then the result */
        deadline = sbx_now_ms() + wait_ms;
        pthread_mutex_lock(&x->lock);
        while (strcmp(x->exec_id, execution_id) == 0 && wait_until(&x->cond, &x->lock, deadline))
                ;
        if (x->last_result && strcmp(str_of(x->last_result, "execution_id") ?: "", execution_id) == 0)
                res = cJSON_Duplicate(x->last_result, true);
        pthread_mutex_unlock(&x->lock);
        ctx_unref(x);
        if (!res) {
                res = cJSON_CreateObject();
                cJSON_AddStringToObject(res, "execution_id", execution_id);
                cJSON_AddStringToObject(res, "status", "running");
                cJSON_AddTrueToObject(res, "cancelled");
        }
        *ret = res;
        return 0;
}

int cells_execution(struct cells *c, const char *user, const char *session, const char *execution_id,
                    const int64_t offsets[CELLS_STREAMS], size_t max, struct cells_execution_view *ret,
                    struct sbx_error *err)
{
        struct cell_record *rec;
        struct cells_execution_view v = {0};

        if (!c || !execution_id)
                return -ENOENT;
        pthread_mutex_lock(&c->lock);
        rec = record_find_locked(c, user, session, execution_id);
        if (!rec) {
                pthread_mutex_unlock(&c->lock);
                return -ENOENT;
        }
        sbx_strlcpy(v.id, rec->id, sizeof(v.id));
        sbx_strlcpy(v.context, rec->context, sizeof(v.context));
        sbx_strlcpy(v.status, rec->status, sizeof(v.status));
        v.final = rec->final;
        v.truncated = rec->truncated;
        v.dropped = rec->lost;
        v.created_at = rec->created_at;
        v.duration_ms = rec->final ? rec->duration_ms : sbx_wall_ms() - rec->created_at;
        memcpy(v.total, rec->total, sizeof(v.total));
        if (!rec->final)
                for (struct cell_ctx *y = c->list; y; y = y->next) {
                        pthread_mutex_lock(&y->lock);
                        if (strcmp(y->exec_id, execution_id) == 0)
                                for (int k = 0; k < CELLS_STREAMS; k++)
                                        v.total[k] = cell_spool_total(y->spool, k);
                        pthread_mutex_unlock(&y->lock);
                }
        pthread_mutex_unlock(&c->lock);
        for (int k = 0; k < CELLS_STREAMS; k++) {
                v.offset[k] = offsets[k] > 0 ? (uint64_t)offsets[k] : 0;
                if (offsets[k] < 0 || v.offset[k] >= v.total[k])
                        continue;
                int r = cell_spool_read(c->spool_dir, execution_id, k, v.offset[k], max, &v.data[k], &v.len[k]);
                if (r < 0 && r != -ENOENT) {
                        cells_execution_view_done(&v);
                        return sbx_error_set(err, r, 0, "cannot read the output of cell %s", execution_id);
                }
        }
        *ret = v;
        return 0;
}

void cells_execution_view_done(struct cells_execution_view *v)
{
        for (int k = 0; v && k < CELLS_STREAMS; k++) {
                free(v->data[k]);
                v->data[k] = NULL;
        }
}

static cJSON *ctx_summary_locked(struct cell_ctx *x)
{
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "context", x->name);
        cJSON_AddStringToObject(o, "language", x->language);
        cJSON_AddNumberToObject(o, "generation", (double)x->generation);
        cJSON_AddNumberToObject(o, "execution_count", (double)x->execution_count);
        cJSON_AddStringToObject(o, "state", x->phase == CTX_READY ? (x->busy ? "busy" : "idle") : "stopped");
        cJSON_AddNumberToObject(o, "last_used", (double)x->last_used);
        if (x->prestarted_generation && x->prestarted_generation == x->generation)
                cJSON_AddTrueToObject(o, "prestarted");
        if (x->lost_cause[0])
                cJSON_AddItemToObject(o, "pending_state_lost", lost_json(x->lost_cause, x->lost_generation));
        return o;
}

/* The kernel's RSS from the bridge, asked without holding the context (a
 * busy one answers too: the bridge reads /proc itself). */
static int64_t ctx_rss(struct cell_ctx *x)
{
        cJSON *m = cJSON_CreateObject();
        int64_t deadline = sbx_now_ms() + 2000, rss;
        uint64_t id;

        pthread_mutex_lock(&x->lock);
        if (x->phase != CTX_READY || x->busy) {
                pthread_mutex_unlock(&x->lock);
                cJSON_Delete(m);
                return -1;
        }
        x->busy = true;
        id = x->cur_id = x->next_id++;
        x->rss_kb = -2;
        pthread_mutex_unlock(&x->lock);
        cJSON_AddStringToObject(m, "op", "stats");
        cJSON_AddNumberToObject(m, "id", (double)id);
        if (ctx_send(x, m, deadline) == 0) {
                pthread_mutex_lock(&x->lock);
                while (x->rss_kb == -2 && !x->waiter_done && wait_until(&x->cond, &x->lock, deadline))
                        ;
                pthread_mutex_unlock(&x->lock);
        }
        cJSON_Delete(m);
        pthread_mutex_lock(&x->lock);
        rss = x->rss_kb >= 0 ? x->rss_kb : -1;
        pthread_mutex_unlock(&x->lock);
        ctx_release(x);
        return rss;
}

int cells_list(struct cells *c, const char *user, const char *session, cJSON **ret, struct sbx_error *err)
{
        struct cell_ctx **v = NULL;
        size_t n = 0;
        cJSON *a;

        pthread_mutex_lock(&c->lock);
        v = calloc(c->n ? c->n : 1, sizeof(*v));
        if (!v) {
                pthread_mutex_unlock(&c->lock);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        for (struct cell_ctx *x = c->list; x; x = x->next)
                if (strcmp(x->user, user) == 0 && strcmp(x->session, session) == 0) {
                        x->refs++;
                        v[n++] = x;
                }
        pthread_mutex_unlock(&c->lock);
        a = cJSON_CreateArray();
        /* listing never resumes a paused session: its kernels are there, frozen, and cannot answer */
        bool paused = session_is_paused(c->sessions, user, session);
        for (size_t i = 0; i < n; i++) {
                int64_t rss = paused ? -1 : ctx_rss(v[i]);
                pthread_mutex_lock(&v[i]->lock);
                cJSON *o = ctx_summary_locked(v[i]);
                pthread_mutex_unlock(&v[i]->lock);
                if (paused)
                        cJSON_AddTrueToObject(o, "session_paused");
                if (rss >= 0)
                        cJSON_AddNumberToObject(o, "rss_kb", (double)rss);
                else
                        cJSON_AddNullToObject(o, "rss_kb");
                cJSON_AddItemToArray(a, o);
                ctx_unref(v[i]);
        }
        free(v);
        *ret = a;
        return 0;
}

int cells_restart(struct cells *c, const char *user, const char *session, const char *context, cJSON **ret,
                  struct sbx_error *err)
{
        struct cell_ctx *x;
        cJSON *lost = NULL;
        int r = ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);

        if (r < 0)
                return r;
        r = ctx_acquire(x, err);
        if (r < 0) {
                ctx_unref(x);
                return r;
        }
        ctx_kill(x, "", true);
        pthread_mutex_lock(&x->lock);
        x->lost_cause[0] = '\0'; /* a restart on request is no loss to report */
        pthread_mutex_unlock(&x->lock);
        r = ctx_ensure(x, NULL, &lost, err);
        cJSON_Delete(lost);
        if (r == 0) {
                pthread_mutex_lock(&x->lock);
                *ret = ctx_summary_locked(x);
                pthread_mutex_unlock(&x->lock);
        }
        ctx_release(x);
        ctx_unref(x);
        return r;
}

/* Unlink x from the list (if still there) and drop the list's reference. */
static void ctx_unlist(struct cells *c, struct cell_ctx *x)
{
        bool found = false;
        pthread_mutex_lock(&c->lock);
        for (struct cell_ctx **pp = &c->list; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                        *pp = x->next;
                        c->n--;
                        found = true;
                        break;
                }
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_lock(&x->lock);
        x->deleted = true;
        pthread_mutex_unlock(&x->lock);
        if (found)
                ctx_unref(x);
}

int cells_delete(struct cells *c, const char *user, const char *session, const char *context, struct sbx_error *err)
{
        struct cell_ctx *x;
        int r = ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);

        if (r < 0)
                return r;
        r = ctx_acquire(x, err);
        if (r < 0) {
                ctx_unref(x);
                return r;
        }
        ctx_kill(x, "", true);
        (void)store_context_delete(c->store, user, session, x->name);
        records_drop(c, user, session, x->name);
        ctx_unlist(c, x);
        ctx_release(x);
        ctx_unref(x);
        return 0;
}

int cells_variables(struct cells *c, const char *user, const char *session, const char *context, cJSON **ret,
                    struct sbx_error *err)
{
        struct cell_ctx *x;
        cJSON *m, *res;
        int64_t deadline = sbx_now_ms() + CELLS_VARS_TIMEOUT_MS;
        uint64_t id;
        int r = ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);

        if (r < 0)
                return r;
        r = ctx_acquire(x, err);
        if (r < 0)
                goto out_unref;
        pthread_mutex_lock(&x->lock);
        if (x->phase != CTX_READY) {
                pthread_mutex_unlock(&x->lock);
                r = sbx_error_set(err, -ESRCH, 0, "context %s has no running interpreter%s%s", x->name,
                                  x->lost_cause[0] ? ": lost, " : "", x->lost_cause);
                goto out;
        }
        if (strcmp(x->language, "python") != 0) {
                pthread_mutex_unlock(&x->lock);
                r = sbx_error_set(err, -EOPNOTSUPP, 0, "get_variables is for python contexts");
                goto out;
        }
        id = x->cur_id = x->next_id++;
        x->done = false;
        cJSON_Delete(x->vars);
        x->vars = NULL;
        pthread_mutex_unlock(&x->lock);
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "op", "variables");
        cJSON_AddNumberToObject(m, "id", (double)id);
        r = ctx_send(x, m, deadline);
        cJSON_Delete(m);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot reach the context's interpreter");
                goto out;
        }
        pthread_mutex_lock(&x->lock);
        while (!x->done && !x->waiter_done && wait_until(&x->cond, &x->lock, deadline))
                ;
        if (!x->vars) {
                pthread_mutex_unlock(&x->lock);
                r = sbx_error_set(err, -ETIMEDOUT, 0, "the interpreter did not list its variables in time");
                goto out;
        }
        res = cJSON_CreateObject();
        cJSON_AddStringToObject(res, "context", x->name);
        cJSON_AddNumberToObject(res, "generation", (double)x->generation);
        cJSON_AddItemToObject(res, "variables", x->vars);
        x->vars = NULL;
        pthread_mutex_unlock(&x->lock);
        *ret = res;
        r = 0;
out:
        ctx_release(x);
out_unref:
        ctx_unref(x);
        return r;
}

/* ---- the session's fate, idle reaping ---- */

static const char *cause_from_session(const char *cause)
{
        if (strcmp(cause, "privacy_ratchet") == 0)
                return "privacy_ratchet";
        if (strcmp(cause, "idle_expired") == 0 || strcmp(cause, "ttl_expired") == 0)
                return "idle_stop";
        if (strcmp(cause, "oom_killed") == 0)
                return "oom";
        if (strcmp(cause, "evicted") == 0) /* the fair share of max_sessions (session_share.c) */
                return "evicted";
        if (strcmp(cause, "restored") == 0) /* restore_session put the workspace back (snapshot.h) */
                return "restored";
        if (strcmp(cause, "stopped_while_paused") == 0) /* past max_paused_sessions, or memory pressure */
                return "stopped_while_paused";
        return "container_recreated";
}

bool cells_session_busy(struct cells *c, const char *user, const char *session)
{
        bool busy = false;

        if (!c)
                return false;
        pthread_mutex_lock(&c->lock);
        for (struct cell_ctx *x = c->list; x && !busy; x = x->next)
                if (strcmp(x->user, user) == 0 && strcmp(x->session, session) == 0) {
                        pthread_mutex_lock(&x->lock);
                        busy = x->busy;
                        pthread_mutex_unlock(&x->lock);
                }
        pthread_mutex_unlock(&c->lock);
        return busy;
}

static void on_session_failure(const char *user, const char *session, const char *container_id, const char *cause,
                               void *ud)
{
        struct cells *c = ud;
        struct cell_ctx *v[64];
        size_t n = 0;
        bool destroyed = strcmp(cause, "destroyed") == 0;

        (void)container_id;
        pthread_mutex_lock(&c->lock);
        for (struct cell_ctx *x = c->list; x && n < ELEMENTSOF(v); x = x->next)
                if (strcmp(x->user, user) == 0 && strcmp(x->session, session) == 0) {
                        x->refs++;
                        v[n++] = x;
                }
        pthread_mutex_unlock(&c->lock);
        for (size_t i = 0; i < n; i++) {
                struct cell_ctx *x = v[i];
                pthread_mutex_lock(&x->lock);
                /* adopt_pending: a job kept across a restart, not taken back yet
                 * (its session paused meanwhile): it is lost with the container */
                if (x->phase != CTX_IDLE || x->waiter_done || x->adopt_pending) {
                        const char *k = cause_from_session(cause);
                        sbx_strlcpy(x->strong_cause, k, sizeof(x->strong_cause));
                        /* the generation may already have ended as merely killed */
                        if (x->phase == CTX_IDLE && x->lost_cause[0] && x->lost_generation == x->generation)
                                sbx_strlcpy(x->lost_cause, k, sizeof(x->lost_cause));
                        ctx_persist_locked(x, x->phase != CTX_IDLE);
                }
                pthread_mutex_unlock(&x->lock);
                if (destroyed)
                        ctx_unlist(c, x);
                ctx_unref(x);
        }
        if (destroyed) {
                (void)store_context_delete_session(c->store, user, session);
                records_drop(c, user, session, NULL);
        }
}

static void *reaper_main(void *p)
{
        struct cells *c = p;

        pthread_mutex_lock(&c->lock);
        while (!c->stopping) {
                struct timespec ts = sbx_deadline_after(CLOCK_MONOTONIC, CELLS_REAP_EVERY_MS);
                (void)pthread_cond_timedwait(&c->cond, &c->lock, &ts);
                if (c->stopping)
                        break;
                int64_t cutoff = sbx_wall_ms() - (int64_t)c->cfg->cells_idle_timeout_s * 1000;
                struct cell_ctx *victim = NULL;
                for (struct cell_ctx *x = c->list; x && !victim; x = x->next) {
                        /* a paused session's kernel is frozen: left alone (lock order: cells, then sessions) */
                        if (session_is_paused(c->sessions, x->user, x->session))
                                continue;
                        pthread_mutex_lock(&x->lock);
                        if (x->phase == CTX_READY && !x->busy && x->last_used < cutoff) {
                                x->busy = true;
                                x->refs++;
                                victim = x;
                        }
                        pthread_mutex_unlock(&x->lock);
                }
                if (!victim)
                        continue;
                pthread_mutex_unlock(&c->lock);
                log_info("cells: %s:%s/%s idle past cells_idle_timeout: stopped", victim->user, victim->session,
                         victim->name);
                ctx_kill(victim, "idle_stop", false);
                pthread_mutex_lock(&victim->lock);
                victim->busy = false;
                pthread_mutex_unlock(&victim->lock);
                ctx_unref(victim);
                pthread_mutex_lock(&c->lock);
        }
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

/* Take one context's job back after a restart: 0 when its bridge runs
 * again (its last cell is replayed), else the loss is daemon_restart. */
static void adopt_one(struct cells *c, struct cell_ctx *x)
{
        const uint64_t have[2] = {0, 0};
        uint64_t start[2];
        struct runner_exec *rx = NULL;
        struct sbx_error err = {0};
        struct waiter_arg *wa = NULL;
        int64_t deadline = sbx_now_ms() + CELLS_ADOPT_WAIT_MS;
        int r = -ETIMEDOUT;

        (void)runner_hub_adopt(c->hub, x->user, x->session);
        while (r == -ETIMEDOUT && sbx_now_ms() < deadline) {
                pthread_mutex_lock(&c->lock);
                bool stopping = c->stopping;
                pthread_mutex_unlock(&c->lock);
                if (stopping)
                        return;
                pthread_mutex_lock(&x->lock);
                bool gone = x->strong_cause[0] != '\0'; /* its container went meanwhile */
                pthread_mutex_unlock(&x->lock);
                if (gone)
                        break;
                /* output resumes from the last acknowledgement, maybe inside a
                 * line: everything before the replay is ignored */
                pthread_mutex_lock(&x->lock);
                x->adopting = true;
                pthread_mutex_unlock(&x->lock);
                x->line_len = 0;
                x->line_skip = true;
                r = runner_exec_adopt(c->hub, x->user, x->session, x->tag, have, cell_on_output, x, 1000, &rx, start,
                                      &err);
        }
        if (r == 0) {
                wa = malloc(sizeof(*wa));
                pthread_mutex_lock(&x->rx_lock);
                x->rx = rx;
                pthread_mutex_unlock(&x->rx_lock);
                pthread_mutex_lock(&x->lock);
                x->phase = CTX_READY;
                x->waiter_done = false;
                x->adopt_pending = false;
                if (wa) {
                        *wa = (struct waiter_arg){.x = x, .rx = rx, .generation = x->generation};
                        r = -pthread_create(&x->waiter, NULL, waiter_main, wa);
                        x->has_waiter = r == 0;
                } else
                        r = -ENOMEM;
                pthread_mutex_unlock(&x->lock);
                if (r == 0) {
                        cJSON *m = cJSON_CreateObject();
                        pthread_setname_np(x->waiter, "sbx-cellwait");
                        cJSON_AddStringToObject(m, "op", "replay");
                        (void)ctx_send(x, m, sbx_now_ms() + 5000);
                        cJSON_Delete(m);
                        log_info("cells: %s:%s/%s generation %lld adopted after a restart", x->user, x->session,
                                 x->name, (long long)x->generation);
                        return;
                }
                free(wa);
                pthread_mutex_lock(&x->rx_lock);
                x->rx = NULL;
                pthread_mutex_unlock(&x->rx_lock);
                (void)runner_exec_signal(rx, SIGKILL);
                runner_exec_free(rx);
        } else if (r == -ETIMEDOUT)
                runner_hub_unexpect(c->hub, x->user, x->session, x->tag);
        pthread_mutex_lock(&x->lock);
        x->phase = CTX_IDLE;
        x->adopting = x->adopt_pending = false;
        sbx_strlcpy(x->lost_cause, x->strong_cause[0] ? x->strong_cause : "daemon_restart", sizeof(x->lost_cause));
        char lost[sizeof(x->lost_cause)];
        memcpy(lost, x->lost_cause, sizeof(lost));
        x->lost_generation = x->generation;
        x->adopt_busy = x->busy = false;
        ctx_persist_locked(x, false);
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        log_info("cells: %s:%s/%s could not be adopted after a restart (%s): %s", x->user, x->session, x->name,
                 r == -ETIMEDOUT ? "its runner did not come back" : "its job is gone", lost);
}

static void *adopter_main(void *p)
{
        struct cells *c = p;

        for (;;) {
                struct cell_ctx *x = NULL;
                bool deferred = false;
                pthread_mutex_lock(&c->lock);
                for (struct cell_ctx *y = c->list; y && !c->stopping; y = y->next)
                        if (y->adopt_pending) {
                                /* its runner is frozen with its paused session and reconnects
                                 * only once a request resumes it (ctx_acquire does): not yet */
                                if (session_is_paused(c->sessions, y->user, y->session)) {
                                        deferred = true;
                                        continue;
                                }
                                y->refs++;
                                x = y;
                                break;
                        }
                if (!x && deferred && !c->stopping) {
                        struct timespec ts = sbx_deadline_after(CLOCK_MONOTONIC, 500);
                        (void)pthread_cond_timedwait(&c->cond, &c->lock, &ts);
                        pthread_mutex_unlock(&c->lock);
                        continue;
                }
                pthread_mutex_unlock(&c->lock);
                if (!x)
                        return NULL;
                adopt_one(c, x);
                pthread_mutex_lock(&x->lock);
                bool still = x->adopt_pending; /* stopping: leave it */
                x->adopt_pending = false;
                pthread_mutex_unlock(&x->lock);
                ctx_unref(x);
                if (still)
                        return NULL;
        }
}

/* Contexts the store says were live when the daemon stopped: their
 * interpreters are gone (the runner drops jobs nobody expects), so their
 * next cell reports daemon_restart. */
static void recover(struct cells *c)
{
        struct store_context *rows = NULL;
        size_t n = 0;

        if (store_context_list(c->store, NULL, NULL, &rows, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                struct store_context *r = &rows[i];
                struct cell_ctx *x;
                if (!cells_name_valid(r->name) ||
                    (strcmp(r->language, "python") != 0 && strcmp(r->language, "node") != 0))
                        continue;
                x = ctx_alloc(c, r->user, r->session, r->name, r->language);
                if (!x)
                        break;
                x->generation = r->generation;
                x->execution_count = r->execution_count;
                x->created_at = r->created_at;
                x->last_used = r->last_used;
                sbx_strlcpy(x->container_id, r->container_id, sizeof(x->container_id));
                x->tag = r->runner_tag;
                x->lost_generation = x->generation;
                if (strcmp(r->state, "live") == 0 && r->runner_tag && c->hub) {
                        /* its job may still run: the runner keeps it for us (cells_adopt_main) */
                        runner_hub_expect(c->hub, r->user, r->session, r->runner_tag);
                        x->adopt_pending = x->adopt_busy = x->busy = true;
                } else {
                        sbx_strlcpy(x->lost_cause, strcmp(r->state, "live") == 0 ? "daemon_restart" : r->lost_cause,
                                    sizeof(x->lost_cause));
                        ctx_persist_locked(x, false);
                }
                x->next = c->list;
                c->list = x;
                c->n++;
        }
        free(rows);
}

/* A forked session's copy of a context (snapshot.h): its name, language
 * and counts, no interpreter; the next cell reports state_lost "forked". */
int cells_mark_forked(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                      int64_t generation, int64_t execution_count)
{
        struct cell_ctx *x;

        if (!cells_name_valid(name) || (strcmp(language, "python") != 0 && strcmp(language, "node") != 0))
                return -EINVAL;
        pthread_mutex_lock(&c->lock);
        if (find_locked(c, user, session, name)) {
                pthread_mutex_unlock(&c->lock);
                return -EEXIST;
        }
        x = ctx_alloc(c, user, session, name, language);
        if (!x) {
                pthread_mutex_unlock(&c->lock);
                return -ENOMEM;
        }
        x->generation = x->lost_generation = generation;
        x->execution_count = execution_count;
        sbx_strlcpy(x->lost_cause, "forked", sizeof(x->lost_cause));
        pthread_mutex_lock(&x->lock);
        ctx_persist_locked(x, false);
        pthread_mutex_unlock(&x->lock);
        x->next = c->list;
        c->list = x;
        c->n++;
        pthread_mutex_unlock(&c->lock);
        return 0;
}

/* ---- the warm pool's pre-started contexts ---- */

/* Take the slot's entry off the list (NULL: none). */
static struct cell_ctx *prestart_take(struct cells *c, const char *slot)
{
        struct cell_ctx *x = NULL;

        pthread_mutex_lock(&c->lock);
        for (struct prestart **pp = &c->prestarts; *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->slot, slot) == 0) {
                        struct prestart *e = *pp;
                        *pp = e->next;
                        x = e->x;
                        free(e);
                        break;
                }
        pthread_mutex_unlock(&c->lock);
        return x;
}

/* Entries whose interpreter ended (their slot was discarded: its
 * container went, and the kernel with it). */
static void prestart_prune(struct cells *c)
{
        struct prestart *dead = NULL;

        pthread_mutex_lock(&c->lock);
        for (struct prestart **pp = &c->prestarts; *pp;) {
                struct prestart *e = *pp;
                pthread_mutex_lock(&e->x->lock);
                bool gone = e->x->waiter_done || e->x->phase == CTX_IDLE;
                pthread_mutex_unlock(&e->x->lock);
                if (gone) {
                        *pp = e->next;
                        e->next = dead;
                        dead = e;
                } else
                        pp = &e->next;
        }
        pthread_mutex_unlock(&c->lock);
        while (dead) {
                struct prestart *e = dead;
                dead = e->next;
                ctx_unref(e->x); /* joins its waiter, which has ended */
                free(e);
        }
}

static void prestart_slot(struct cells *c, const char *slot, const char *container_id)
{
        struct sbx_error err = {0};
        struct prestart *e = calloc(1, sizeof(*e));
        struct cell_ctx *x = ctx_alloc(c, POOL_USER, slot, CELLS_DEFAULT, "python");
        int r;

        if (!e || !x) {
                free(e);
                ctx_unref(x);
                return;
        }
        x->deleted = true; /* no row until a session has it */
        x->busy = true;
        r = ctx_start(x, container_id, NULL, &err);
        pthread_mutex_lock(&x->lock);
        x->busy = false;
        x->prestarted_generation = x->generation;
        pthread_mutex_unlock(&x->lock);
        if (r < 0) {
                log_info("cells: pool slot %s starts no interpreter ahead: %s", slot, err.msg);
                free(e);
                ctx_unref(x);
                return;
        }
        sbx_strlcpy(e->slot, slot, sizeof(e->slot));
        e->x = x;
        pthread_mutex_lock(&c->lock);
        e->next = c->prestarts;
        c->prestarts = e;
        pthread_mutex_unlock(&c->lock);
}

/* user:session claimed the slot: its pre-started context becomes the
 * session's default context (generation 1, the same kernel: it runs under
 * the slot's uid, which is now the session's, in the workspace the slot's
 * directory became). A session that has a default context already (one
 * that lost its container) keeps that one and its state_lost; the kernel
 * ahead is killed. */
static void prestart_claimed(struct cells *c, const char *slot, const char *user, const char *session)
{
        struct cell_ctx *x = prestart_take(c, slot);
        size_t in_session = 0;
        bool adopt;

        if (!x)
                return;
        pthread_mutex_lock(&x->lock);
        adopt = x->phase == CTX_READY && !x->waiter_done;
        pthread_mutex_unlock(&x->lock);
        pthread_mutex_lock(&c->lock);
        for (struct cell_ctx *y = c->list; y && adopt; y = y->next)
                if (strcmp(y->user, user) == 0 && strcmp(y->session, session) == 0) {
                        in_session++;
                        adopt = strcmp(y->name, CELLS_DEFAULT) != 0;
                }
        adopt = adopt && !c->stopping && in_session < (size_t)c->cfg->cells_max_per_session &&
                c->n < (size_t)c->cfg->cells_max_global;
        if (adopt) {
                /* not listed until now: only the hub thread's debug log reads these meanwhile */
                pthread_mutex_lock(&x->lock);
                sbx_strlcpy(x->user, user, sizeof(x->user));
                sbx_strlcpy(x->session, session, sizeof(x->session));
                x->deleted = false;
                x->last_used = sbx_wall_ms();
                pthread_mutex_unlock(&x->lock);
                x->next = c->list;
                c->list = x; /* the list takes the entry's reference */
                c->n++;
        }
        pthread_mutex_unlock(&c->lock);
        if (!adopt) {
                ctx_kill(x, "", true);
                ctx_unref(x);
                return;
        }
        pthread_mutex_lock(&x->lock);
        ctx_persist_locked(x, true);
        pthread_mutex_unlock(&x->lock);
        log_info("cells: %s:%s/default takes the python kernel started ahead in pool slot %s", user, session, slot);
}

void cells_pool_slot(void *userdata, const char *slot, const char *container_id, const char *user, const char *session)
{
        struct cells *c = userdata;
        bool stopping;

        pthread_mutex_lock(&c->lock);
        stopping = c->stopping;
        pthread_mutex_unlock(&c->lock);
        if (stopping)
                return;
        prestart_prune(c);
        if (user)
                prestart_claimed(c, slot, user, session);
        else if (strcmp(c->cfg->pool_cells_prestart, "python") == 0 && c->hub)
                prestart_slot(c, slot, container_id);
}

int cells_new(const struct sbx_config *cfg, struct store *st, struct session_manager *sm, struct runner_hub *hub,
              struct cells **ret, struct sbx_error *err)
{
        struct cells *c = calloc(1, sizeof(*c));
        int r;

        if (!c)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        c->cfg = cfg;
        c->store = st;
        c->sessions = sm;
        c->hub = hub;
        pthread_mutex_init(&c->lock, NULL);
        cond_init_mono(&c->cond);
        /* the cells' spools: the records are in memory, so what a previous
         * daemon left cannot be named any more */
        snprintf(c->spool_dir, sizeof(c->spool_dir), "%s/cells", cfg->data_dir);
        if (mkdir(c->spool_dir, 0700) == 0 || errno == EEXIST) {
                cell_spool_wipe(c->spool_dir);
                c->spool_ok = true;
        } else
                log_warn("cells: cannot create %s: %s; large outputs are dropped", c->spool_dir, strerror(errno));
        recover(c);
        (void)session_register_failure_handler(sm, on_session_failure, c);
        r = -pthread_create(&c->reaper, NULL, reaper_main, c);
        if (r < 0) {
                cells_free(c);
                return sbx_error_set(err, r, 0, "cannot start the contexts' reaper");
        }
        c->has_reaper = true;
        pthread_setname_np(c->reaper, "sbx-cellreap");
        if (pthread_create(&c->adopter, NULL, adopter_main, c) == 0) {
                c->has_adopter = true;
                pthread_setname_np(c->adopter, "sbx-celladopt");
        }
        *ret = c;
        return 0;
}

void cells_free(struct cells *c)
{
        struct cell_ctx *x;

        if (!c)
                return;
        pthread_mutex_lock(&c->lock);
        c->stopping = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        if (c->has_reaper)
                pthread_join(c->reaper, NULL);
        if (c->has_adopter)
                pthread_join(c->adopter, NULL);
        while ((x = c->list)) {
                c->list = x->next;
                ctx_join_waiter(x); /* each sees stopping within a second */
                ctx_unref(x);
        }
        while (c->prestarts) { /* their kernels stay with the slots' runners, which drop them on restart */
                struct prestart *e = c->prestarts;
                c->prestarts = e->next;
                ctx_join_waiter(e->x);
                ctx_unref(e->x);
                free(e);
        }
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        free(c);
}
