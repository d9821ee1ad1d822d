/* cells_bridge.c — the kernel bridge's JSON lines on the daemon's side,
 * read on the runner hub's thread: assembling lines, outputs with their MIME
 * bundles, spooling what passes the inline cap, and the bridge's reports
 * (ready, done, variables, dead). Takes only a context lock.
 *
 * Memory: a line is assembled whole (at most line_max, ~32 MiB), parsed,
 * and its buffer is released at once when it grew past CELLS_LINE_KEEP;
 * the output is built from the parsed tree by moving its values (never a
 * copy), and spooled by writing it out in pieces (never printed whole).
 * A large line thus costs two copies while it is parsed and one after;
 * nothing of it stays once its cell has ended (large blocks are mapped and
 * unmapped: daemon.c fixes glibc's mmap threshold; docs/api.md, Limits). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cells_internal.h"
#include "sandboxd/audit.h"
#include "sandboxd/egress.h"
#include "sandboxd/sha256.h"
#include "sandboxd/log.h"
#include "sandboxd/pool.h"
#include "sandboxd/hub.h"
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
 * application/json), moved out of data (a value may be 31 MiB: never
 * copied); NULL if it is not an object. */
static cJSON *mime_bundle(cJSON *data)
{
        cJSON *out, *it, *next;

        if (!cJSON_IsObject(data))
                return NULL;
        out = cJSON_CreateObject();
        for (it = data->child; it; it = next) {
                next = it->next;
                if (!it->string || strlen(it->string) > 128)
                        continue;
                if (cJSON_IsString(it) || strcmp(it->string, "application/json") == 0)
                        cJSON_AddItemToObject(out, it->string, cJSON_DetachItemViaPointer(data, it));
        }
        return out;
}

/* The string j.key moved out of j, or "" when it is not a string. */
static cJSON *take_string(cJSON *j, const char *key)
{
        cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
        return cJSON_IsString(v) ? cJSON_DetachItemViaPointer(j, v) : cJSON_CreateString("");
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
 * CELLS_OUTPUT_CAP_BYTES goes by reference when it is spooled (st, off, len:
 * where), else it is dropped (truncated either way). cost: its line's
 * length, and CELLS_OUTPUT_COST more for a new entry, so that the tree an
 * idle context keeps (its last result) stays near the cap whatever the
 * number of outputs. */
static void add_output(struct cell_ctx *x, cJSON *o, size_t cost, enum cell_stream st, bool spooled, uint64_t off,
                       size_t len)
{
        cJSON *last;
        const char *type = cells_str_of(o, "type");
        bool merge;

        last = x->outputs ? cJSON_GetArrayItem(x->outputs, cJSON_GetArraySize(x->outputs) - 1) : NULL;
        merge = last && type && strcmp(type, "stream") == 0 &&
                strcmp(cells_str_of(last, "type") ?: "", "stream") == 0 &&
                !cJSON_GetObjectItemCaseSensitive(last, "by_reference") &&
                strcmp(cells_str_of(last, "name") ?: "", cells_str_of(o, "name") ?: "") == 0 &&
                !cJSON_IsTrue(cJSON_GetObjectItem(last, "_sent"));
        if (!merge)
                cost += CELLS_OUTPUT_COST;
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
        if (merge) {
                /* grown in place: cJSON allocates with malloc (no hooks are set) */
                cJSON *t = cJSON_GetObjectItemCaseSensitive(last, "text");
                const char *b = cells_str_of(o, "text");
                size_t la = strlen(t->valuestring), lb = strlen(b);
                char *joined = realloc(t->valuestring, la + lb + 1);
                if (joined) {
                        memcpy(joined + la, b, lb + 1);
                        t->valuestring = joined;
                        cJSON_Delete(o);
                        return;
                }
        }
        if (!x->outputs)
                x->outputs = cJSON_CreateArray();
        cJSON_AddItemToArray(x->outputs, o);
}

/* An output written to the spool as JSON in pieces through a small
 * buffer, so that a large value is never printed whole in memory. With
 * s NULL it only counts the bytes. */
struct spool_writer {
        struct cell_spool *s;
        uint64_t len, off;
        bool started;
        int err;
        size_t n;
        char buf[16384];
};

static void sw_flush(struct spool_writer *w)
{
        uint64_t off = 0;

        if (w->s && w->n && !w->err) {
                w->err = cell_spool_append(w->s, CELL_OUTPUTS, w->buf, w->n, &off);
                if (!w->started)
                        w->off = off;
                w->started = true;
        }
        w->n = 0;
}

static void sw_put(struct spool_writer *w, const char *p, size_t n)
{
        w->len += n;
        if (!w->s)
                return;
        while (n > 0) {
                size_t k = n < sizeof(w->buf) - w->n ? n : sizeof(w->buf) - w->n;
                memcpy(w->buf + w->n, p, k);
                w->n += k;
                p += k;
                n -= k;
                if (w->n == sizeof(w->buf))
                        sw_flush(w);
        }
}

/* A JSON string, escaped as cJSON_Print escapes it. */
static void sw_string(struct spool_writer *w, const char *str)
{
        const unsigned char *p = (const unsigned char *)str;

        sw_put(w, "\"", 1);
        for (;;) {
                const unsigned char *q = p;
                char esc[8];
                while (*q >= 0x20 && *q != '"' && *q != '\\')
                        q++;
                sw_put(w, (const char *)p, (size_t)(q - p));
                if (!*q)
                        break;
                switch (*q) {
                case '"':
                        snprintf(esc, sizeof(esc), "\\\"");
                        break;
                case '\\':
                        snprintf(esc, sizeof(esc), "\\\\");
                        break;
                case '\b':
                        snprintf(esc, sizeof(esc), "\\b");
                        break;
                case '\f':
                        snprintf(esc, sizeof(esc), "\\f");
                        break;
                case '\n':
                        snprintf(esc, sizeof(esc), "\\n");
                        break;
                case '\r':
                        snprintf(esc, sizeof(esc), "\\r");
                        break;
                case '\t':
                        snprintf(esc, sizeof(esc), "\\t");
                        break;
                default:
                        snprintf(esc, sizeof(esc), "\\u%04x", *q);
                        break;
                }
                sw_put(w, esc, strlen(esc));
                p = q + 1;
        }
        sw_put(w, "\"", 1);
}

/* Any value: containers and strings in pieces, the rest (numbers, true,
 * false, null: short) printed by cJSON. Depth: cJSON's parse limit. */
static void sw_value(struct spool_writer *w, const cJSON *v)
{
        if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
                bool obj = cJSON_IsObject(v);
                const cJSON *it;
                sw_put(w, obj ? "{" : "[", 1);
                for (it = v->child; it; it = it->next) {
                        if (it != v->child)
                                sw_put(w, ",", 1);
                        if (obj) {
                                sw_string(w, it->string ? it->string : "");
                                sw_put(w, ":", 1);
                        }
                        sw_value(w, it);
                }
                sw_put(w, obj ? "}" : "]", 1);
        } else if (cJSON_IsString(v)) {
                sw_string(w, v->valuestring);
        } else {
                char *p = cJSON_PrintUnformatted(v);
                sw_put(w, p ? p : "null", p ? strlen(p) : 4);
                free(p);
        }
}

/* Spool an output that is not stream text as one JSON line (ctx->lock
 * held), whole or not at all; false when it is not kept. */
static bool spool_output(struct cell_ctx *x, const cJSON *o, uint64_t *ret_off, size_t *ret_len)
{
        struct spool_writer *w;
        bool ok;

        if (!x->spool || !(w = calloc(1, sizeof(*w))))
                return false;
        sw_value(w, o); /* counts */
        *ret_len = (size_t)w->len + 1;
        if (w->len + 1 > cell_spool_room(x->spool, CELL_OUTPUTS)) {
                cell_spool_skip(x->spool, CELL_OUTPUTS, w->len + 1);
                free(w);
                return false;
        }
        w->s = x->spool;
        sw_value(w, o);
        sw_put(w, "\n", 1);
        sw_flush(w);
        ok = w->err == 0;
        *ret_off = w->off;
        free(w);
        return ok;
}

/* Forget the line assembled: a buffer grown past CELLS_LINE_KEEP goes
 * (hub thread). */
static void line_release(struct cell_ctx *x)
{
        x->line_len = 0;
        if (x->line_cap > CELLS_LINE_KEEP) {
                free(x->line);
                x->line = NULL;
                x->line_cap = 0;
        }
}

/* Every string in the tree with each secret's value replaced by its
 * placeholder (issue 37 item 4, as exec output is masked): a value inside
 * one protocol line. Stream text is masked again across chunks
 * (stream_masked): the bridge cuts long text, and the kernel's own writes
 * may split a value. */
static void mask_tree(cJSON *n, const struct egress_secret *m, size_t n_mask)
{
        for (; n; n = n->next) {
                if (n->child)
                        mask_tree(n->child, m, n_mask);
                if (!cJSON_IsString(n) || !n->valuestring)
                        continue;
                for (size_t i = 0; i < n_mask; i++) {
                        const char *v = (const char *)m[i].value, *s = n->valuestring, *at;
                        size_t vl = m[i].value_len, pl = strlen(m[i].placeholder), out = 0, cap;
                        char *w;
                        if (!v || vl == 0 || !(at = memmem(s, strlen(s), v, vl)))
                                continue;
                        cap = strlen(s) / vl * pl + strlen(s) + 1;
                        w = malloc(cap);
                        if (!w) { /* no memory to mask: the string goes rather than pass a value */
                                cJSON_SetValuestring(n, "");
                                break;
                        }
                        while (at) {
                                memcpy(w + out, s, (size_t)(at - s));
                                out += (size_t)(at - s);
                                memcpy(w + out, m[i].placeholder, pl);
                                out += pl;
                                s = at + vl;
                                at = memmem(s, strlen(s), v, vl);
                        }
                        memcpy(w + out, s, strlen(s) + 1);
                        if (!cJSON_SetValuestring(n, w))
                                cJSON_SetValuestring(n, "");
                        explicit_bzero(w, cap);
                        free(w);
                }
        }
}

/* Stream k's text (0 stdout, 1 stderr) after its held-back tail, with
 * every value replaced by its placeholder; the last mask_max-1 bytes (to a
 * UTF-8 boundary) are held back for the next chunk unless final, as an
 * execution's output is (exec_worker.c). What goes out now (malloc'd,
 * *ret_len bytes), or NULL out of memory (the text is dropped rather than
 * pass a value). Under x->lock. */
static char *stream_masked(struct cell_ctx *x, int k, const char *text, size_t tl, bool final, size_t *ret_len)
{
        size_t total = x->mask_tail_len[k] + tl, cur = 0, keep, o = 0, cap = 0, min_len = SIZE_MAX;
        char *w = malloc(total + 1), *out = NULL;

        for (size_t i = 0; i < x->n_mask; i++) {
                if (!x->mask[i].value || x->mask[i].value_len == 0)
                        continue;
                if (strlen(x->mask[i].placeholder) > cap)
                        cap = strlen(x->mask[i].placeholder);
                if (x->mask[i].value_len < min_len)
                        min_len = x->mask[i].value_len;
        }
        /* at most total/min_len values, each replaced by at most cap bytes */
        cap = total + (min_len == SIZE_MAX ? 0 : total / min_len + 1) * cap + 1;
        out = w ? malloc(cap) : NULL;
        if (!out) {
                free(w);
                if (x->mask_tail[k])
                        explicit_bzero(x->mask_tail[k], x->mask_tail_len[k]);
                x->mask_tail_len[k] = 0;
                return NULL;
        }
        if (x->mask_tail_len[k]) /* (never memcpy from NULL: the compiler would take the tail as allocated) */
                memcpy(w, x->mask_tail[k], x->mask_tail_len[k]);
        if (tl)
                memcpy(w + x->mask_tail_len[k], text, tl);
        for (;;) {
                size_t bi = 0;
                const char *best = egress_secret_find(x->mask, x->n_mask, w + cur, total - cur, &bi);
                if (!best)
                        break;
                memcpy(out + o, w + cur, (size_t)(best - (w + cur)));
                o += (size_t)(best - (w + cur));
                memcpy(out + o, x->mask[bi].placeholder, strlen(x->mask[bi].placeholder));
                o += strlen(x->mask[bi].placeholder);
                cur = (size_t)(best - w) + x->mask[bi].value_len;
        }
        /* a value starting before total-keep would have been found whole */
        keep = final ? 0 : x->mask_max - 1;
        if (keep > total - cur)
                keep = total - cur;
        while (keep < total - cur && ((unsigned char)w[total - keep] & 0xc0) == 0x80)
                keep++; /* not inside a character: each output is UTF-8 */
        memcpy(out + o, w + cur, total - cur - keep);
        o += total - cur - keep;
        out[o] = '\0';
        if (keep && !x->mask_tail[k])
                x->mask_tail[k] = malloc(x->mask_max + 4);
        if (keep && x->mask_tail[k] && keep <= x->mask_max + 3) {
                memcpy(x->mask_tail[k], w + total - keep, keep);
                x->mask_tail_len[k] = keep;
        } else {
                x->mask_tail_len[k] = 0; /* no memory to hold it: dropped rather than pass a value's start */
        }
        explicit_bzero(w, total + 1);
        free(w);
        *ret_len = o;
        return out;
}

/* Stream text (st's, NUL-terminated, tl bytes) as the cell's output: the spool, then outputs. */
static void stream_out(struct cell_ctx *x, enum cell_stream st, cJSON *text, size_t tl, size_t cost)
{
        uint64_t off = 0;
        bool sp = x->spool && cell_spool_append(x->spool, st, text->valuestring, tl, &off) == 0;
        cJSON *o = cJSON_CreateObject();

        cJSON_AddStringToObject(o, "type", "stream");
        cJSON_AddStringToObject(o, "name", cell_stream_name(st));
        cJSON_AddItemToObject(o, "text", text);
        add_output(x, o, cost, st, sp, off, tl);
}

void cells_mask_flush_locked(struct cell_ctx *x)
{
        for (int k = 0; k < 2; k++) {
                size_t tl = 0;
                char *m;
                if (!x->mask_tail_len[k])
                        continue;
                m = stream_masked(x, k, "", 0, true, &tl);
                if (m && tl)
                        stream_out(x, k == 0 ? CELL_STDOUT : CELL_STDERR, cJSON_CreateString(m), tl, tl);
                if (m)
                        explicit_bzero(m, tl);
                free(m);
        }
}

/* The line in x->line (hub thread); released once it is parsed. */
static void handle_line(struct cell_ctx *x)
{
        cJSON *j, *o;
        const char *ev;
        size_t len = x->line_len;

        if (!utf8_is_valid(x->line, len)) {
                line_release(x);
                return; /* results are UTF-8: a line that is not is no protocol line */
        }
        j = cJSON_ParseWithLength(x->line, len);
        line_release(x); /* the tree holds what is kept: one copy from here on */

        if (!cJSON_IsObject(j) || !(ev = cells_str_of(j, "ev"))) {
                cJSON_Delete(j);
                return; /* not a protocol line: ignored */
        }
        pthread_mutex_lock(&x->lock);
        if (x->n_mask)
                mask_tree(j, x->mask, x->n_mask);
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
                                int k = st == CELL_STDOUT ? 0 : 1;
                                size_t tl = strlen(text);
                                if (x->n_mask && x->mask_max > 1) {
                                        /* each stream on its own, as an execution's: the kernel may
                                         * interleave the other's text within a value's pieces */
                                        char *m;
                                        m = stream_masked(x, k, text, tl, false, &tl);
                                        if (m && tl)
                                                stream_out(x, st, cJSON_CreateString(m), tl, len);
                                        if (m)
                                                explicit_bzero(m, tl);
                                        free(m);
                                } else {
                                        stream_out(x, st, take_string(j, "text"), tl, len);
                                }
                        }
                } else if (strcmp(ev, "display_data") == 0 || strcmp(ev, "execute_result") == 0) {
                        cells_mask_flush_locked(x); /* held stream text goes first, in order */
                        cJSON *data = mime_bundle(cJSON_GetObjectItemCaseSensitive(j, "data"));
                        cJSON *md = cJSON_GetObjectItemCaseSensitive(j, "metadata");
                        if (data) {
                                o = cJSON_CreateObject();
                                cJSON_AddStringToObject(o, "type", ev);
                                cJSON_AddItemToObject(o, "data", data);
                                if (cJSON_IsObject(md) && md->child)
                                        cJSON_AddItemToObject(o, "metadata", cJSON_DetachItemViaPointer(j, md));
                                uint64_t off = 0;
                                size_t ol = 0;
                                bool sp = spool_output(x, o, &off, &ol);
                                add_output(x, o, len, CELL_OUTPUTS, sp, off, ol);
                        }
                } else if (strcmp(ev, "error") == 0) {
                        cells_mask_flush_locked(x);
                        cJSON *tb = cJSON_GetObjectItemCaseSensitive(j, "traceback"), *it, *next;
                        o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "type", "error");
                        cJSON_AddItemToObject(o, "name", take_string(j, "ename"));
                        cJSON_AddItemToObject(o, "value", take_string(j, "evalue"));
                        cJSON *a = cJSON_AddArrayToObject(o, "traceback");
                        for (it = cJSON_IsArray(tb) ? tb->child : NULL; it; it = next) {
                                next = it->next;
                                if (cJSON_IsString(it))
                                        cJSON_AddItemToArray(a, cJSON_DetachItemViaPointer(tb, it));
                        }
                        uint64_t off = 0;
                        size_t ol = 0;
                        bool sp = spool_output(x, o, &off, &ol);
                        add_output(x, o, len, CELL_OUTPUTS, sp, off, ol);
                } else if (strcmp(ev, "clear_output") == 0) {
                        x->mask_tail_len[0] = x->mask_tail_len[1] = 0;
                        cJSON_Delete(x->outputs);
                        x->outputs = NULL;
                } else if (strcmp(ev, "done") == 0) {
                        cells_mask_flush_locked(x);
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
                                line_release(x);
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
                                                line_release(x);
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
                                handle_line(x);
                        line_release(x);
                        x->line_skip = false;
                        p = nl + 1;
                } else
                        p = end;
        }
}
