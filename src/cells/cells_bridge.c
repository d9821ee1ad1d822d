/* cells_bridge.c — the kernel bridge's JSON lines on the daemon's side,
 * read on the runner hub's thread: assembling lines, outputs with their MIME
 * bundles, spooling what passes the inline cap, and the bridge's reports
 * (ready, done, variables, dead). Takes only a context lock. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cells_internal.h"
#include "sandboxd/audit.h"
#include "sandboxd/sha256.h"
#include "sandboxd/log.h"
#include "sandboxd/pool.h"
#include "sandboxd/runner.h"
#include "sandboxd/session.h"
#include "sandboxd/store_cells.h"
#include "sandboxd/utf8.h"

/* ---- the bridge's lines (hub thread) ---- */

const char *cells_str_of(const cJSON *o, const char *key)
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
        const char *type = cells_str_of(o, "type") ?: "";

        cJSON_AddStringToObject(s, "type", type);
        if (st != CELL_OUTPUTS) {
                cJSON_AddStringToObject(s, "name", cell_stream_name(st));
                cJSON_AddStringToObject(s, "text", "");
        } else if (strcmp(type, "error") == 0) {
                cJSON_AddStringToObject(s, "name", cells_str_of(o, "name") ?: "");
                cJSON_AddStringToObject(s, "value", cells_str_of(o, "value") ?: "");
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
        const char *type = cells_str_of(o, "type");

        last = x->outputs ? cJSON_GetArrayItem(x->outputs, cJSON_GetArraySize(x->outputs) - 1) : NULL;
        if (x->out_bytes + cost > (size_t)x->c->cfg->cells_output_cap_bytes) {
                cJSON *lref = last ? cJSON_GetObjectItemCaseSensitive(last, "by_reference") : NULL;
                x->truncated = true;
                if (!spooled) {
                        cJSON_Delete(o);
                        return;
                }
                /* stream text by reference: one entry for a run of chunks */
                if (st != CELL_OUTPUTS && lref &&
                    strcmp(cells_str_of(lref, "stream") ?: "", cell_stream_name(st)) == 0) {
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
        if (last && type && strcmp(type, "stream") == 0 && strcmp(cells_str_of(last, "type") ?: "", "stream") == 0 &&
            !cJSON_GetObjectItemCaseSensitive(last, "by_reference") &&
            strcmp(cells_str_of(last, "name") ?: "", cells_str_of(o, "name") ?: "") == 0 &&
            !cJSON_IsTrue(cJSON_GetObjectItem(last, "_sent"))) {
                const char *a = cells_str_of(last, "text"), *b = cells_str_of(o, "text");
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

        if (!cJSON_IsObject(j) || !(ev = cells_str_of(j, "ev"))) {
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
                snprintf(x->start_error, sizeof(x->start_error), "%s", cells_str_of(j, "message") ?: "failed");
        } else if (strcmp(ev, "dead") == 0) {
                if (cause_known(cells_str_of(j, "cause")))
                        sbx_strlcpy(x->bridge_cause, cells_str_of(j, "cause"), sizeof(x->bridge_cause));
        } else if (strcmp(ev, "stats") == 0 && id_is(j, x->cur_id)) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "rss_kb");
                x->rss_kb = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e12 ? (int64_t)v->valuedouble
                                                                                              : -1;
        } else if (x->cur_id && id_is(j, x->cur_id) && !x->done) {
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "clipped")))
                        x->dropped = x->truncated = true; /* the bridge cut a value past its bound */
                if (strcmp(ev, "stream") == 0) {
                        const char *name = cells_str_of(j, "name"), *text = cells_str_of(j, "text");
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
                        cJSON_AddStringToObject(o, "name", cells_str_of(j, "ename") ?: "");
                        cJSON_AddStringToObject(o, "value", cells_str_of(j, "evalue") ?: "");
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
                                 cells_str_of(j, "status") && strlen(cells_str_of(j, "status")) < 16
                                         ? cells_str_of(j, "status")
                                         : "ok");
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
                                        const char *nm = cells_str_of(it, "name"), *ty = cells_str_of(it, "type"),
                                                   *rp = cells_str_of(it, "repr"), *sh = cells_str_of(it, "shape"),
                                                   *er = cells_str_of(it, "error");
                                        if (!nm || !ty || !rp || ++n > CELLS_MAX_VARS)
                                                continue;
                                        cJSON *v = cJSON_CreateObject();
                                        cJSON_AddStringToObject(v, "name", nm);
                                        cJSON_AddStringToObject(v, "type", ty);
                                        cJSON_AddStringToObject(v, "repr", rp);
                                        if (sh && *sh)
                                                cJSON_AddStringToObject(v, "shape", sh);
                                        if (er && *er) /* not described: the type of what it raised */
                                                cJSON_AddStringToObject(v, "error", er);
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
void cells_on_output(void *ud, int stream, const void *data, size_t len)
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
