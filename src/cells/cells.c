/* cells.c — run_cell's requests: running a cell in a context and waiting
 * for it with its timeout and interrupt grace, the last cell, interrupt,
 * cancel, the execution view, list, restart, delete and variables, with
 * the honest report of lost state; and the recent cells whose output stays
 * readable. The files of src/cells and their locks: cells_internal.h. */
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
#include "sandboxd/egress_rules.h"
#include "sandboxd/sha256.h"
#include "sandboxd/log.h"
#include "sandboxd/pool.h"
#include "sandboxd/hub.h"
#include "sandboxd/session.h"
#include "sandboxd/store_cells.h"
#include "sandboxd/utf8.h"

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
            cell_spool_read_live(x->spool, x->c->spool_dir, x->exec_id, st, 0, h, &head, &hl) < 0 ||
            cell_spool_read_live(x->spool, x->c->spool_dir, x->exec_id, st, total - h, h, &tail, &tl) < 0) {
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

/* The result of the cell in x->outputs (ctx->lock held); takes lost, and
 * with take the outputs too (the cell has ended: an idle context keeps
 * only its last result). */
static cJSON *result_locked(struct cell_ctx *x, bool timed_out, bool killed, bool take, cJSON *lost)
{
        cJSON *res = cJSON_CreateObject(), *outs, *it, *first_error = NULL;
        size_t so_len = 0, se_len = 0;

        cJSON_AddStringToObject(res, "context", x->name);
        cJSON_AddStringToObject(res, "language", x->language);
        cJSON_AddNumberToObject(res, "generation", (double)x->generation);
        cJSON_AddNumberToObject(res, "execution_count", (double)x->execution_count);
        outs = !x->outputs ? cJSON_CreateArray() : take ? x->outputs : cJSON_Duplicate(x->outputs, true);
        if (take) {
                x->outputs = NULL;
                x->out_bytes = 0;
        }
        cJSON_ArrayForEach(it, outs) {
                const char *type = cells_str_of(it, "type");
                cJSON_DeleteItemFromObjectCaseSensitive(it, "_sent");
                if (type && strcmp(type, "stream") == 0) {
                        size_t *l = strcmp(cells_str_of(it, "name"), "stdout") == 0 ? &so_len : &se_len;
                        *l += strlen(cells_str_of(it, "text"));
                } else if (type && strcmp(type, "error") == 0 && !first_error)
                        first_error = it;
        }
        {
                char *so = calloc(1, so_len + 1), *se = calloc(1, se_len + 1);
                size_t a = 0, b = 0;
                cJSON_ArrayForEach(it, outs) {
                        const char *type = cells_str_of(it, "type"), *t = cells_str_of(it, "text");
                        if (!type || strcmp(type, "stream") != 0 || !t || !so || !se)
                                continue;
                        size_t n = strlen(t);
                        if (strcmp(cells_str_of(it, "name"), "stdout") == 0) {
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
                cJSON_AddStringToObject(e, "name", cells_str_of(first_error, "name"));
                cJSON_AddStringToObject(e, "value", cells_str_of(first_error, "value"));
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
        if (slot->used) {
                cell_spool_remove(c->spool_dir, slot->id, slot->kept);
                cell_spool_kept_free(slot->kept);
        }
        *slot = (struct cell_record){.used = true, .seq = ++c->recent_seq, .created_at = sbx_wall_ms()};
        sbx_strlcpy(slot->id, id, sizeof(slot->id));
        sbx_strlcpy(slot->user, user, sizeof(slot->user));
        sbx_strlcpy(slot->session, session, sizeof(slot->session));
        sbx_strlcpy(slot->context, context, sizeof(slot->context));
        sbx_strlcpy(slot->status, "running", sizeof(slot->status));
        pthread_mutex_unlock(&c->lock);
}

/* The cell ended; takes kept (its spool's memory). */
static void record_end(struct cells *c, const char *user, const char *session, const char *id, const cJSON *res,
                       const uint64_t total[CELL_STREAMS], struct cell_spool_kept *kept)
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
                cell_spool_kept_free(r->kept);
                r->kept = kept;
                kept = NULL;
                if (r->kept && r->kept->lost)
                        r->lost = true;
        }
        pthread_mutex_unlock(&c->lock);
        if (kept) /* evicted meanwhile: its files went with it (all three names) */
                cell_spool_kept_free(kept);
}

/* Drop the records (and spools) of a session's cells, or of one context's. */
void cells_records_drop(struct cells *c, const char *user, const char *session, const char *context)
{
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < CELLS_RECENT_MAX; i++) {
                struct cell_record *r = &c->recent[i];
                if (r->used && r->final && strcmp(r->user, user) == 0 && strcmp(r->session, session) == 0 &&
                    (!context || strcmp(r->context, context) == 0)) {
                        cell_spool_remove(c->spool_dir, r->id, r->kept);
                        cell_spool_kept_free(r->kept);
                        r->kept = NULL;
                        r->used = false;
                }
        }
        pthread_mutex_unlock(&c->lock);
}

/* Narrow the kernel serving a cell while the cell runs (net NULL: stop).
 * The kernel is one process of one execution: everything it runs meanwhile,
 * threads a cell left behind included, is narrowed with it. */
static int cell_narrow(struct cell_ctx *x, const struct egress_net *net, const char *id)
{
        int r = 0;

        pthread_mutex_lock(&x->rx_lock);
        if (x->rx)
                r = hub_exec_set_network(x->rx, net, id);
        else if (net)
                r = -ENOTSUP;
        pthread_mutex_unlock(&x->rx_lock);
        return r;
}

/* The session's environment into the cell's execute message, when this
 * generation's interpreter has not been given it as it is now (the bridge
 * sets it in the interpreter before the code; issue 37: a warm slot's
 * kernel started before its session had any). x is ours (busy). */
static void add_session_env(struct cell_ctx *x, cJSON *msg, const char *const *env)
{
        size_t len = 1;
        char *joined, *p;
        cJSON *o;

        if (!env || !env[0])
                return;
        for (size_t i = 0; env[i]; i++)
                len += strlen(env[i]) + 1;
        joined = malloc(len);
        if (!joined)
                return;
        p = joined;
        for (size_t i = 0; env[i]; i++)
                p += sprintf(p, "%s\n", env[i]);
        *p = '\0';
        if (x->env_sent && x->env_generation == x->generation && strcmp(x->env_sent, joined) == 0) {
                free(joined);
                return;
        }
        o = cJSON_AddObjectToObject(msg, "env");
        for (size_t i = 0; o && env[i]; i++) {
                const char *eq = strchr(env[i], '=');
                char name[256];
                if (!eq || (size_t)(eq - env[i]) >= sizeof(name))
                        continue;
                memcpy(name, env[i], (size_t)(eq - env[i]));
                name[eq - env[i]] = '\0';
                cJSON_AddStringToObject(o, name, eq + 1);
        }
        free(x->env_sent);
        x->env_sent = joined;
        x->env_generation = x->generation;
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
        bool narrowed = false;
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
                bool known = cells_find_locked(c, req->user, req->session, name) != NULL;
                pthread_mutex_unlock(&c->lock);
                if (!known) {
                        struct session *s = NULL;
                        r = session_acquire(c->sessions, req->user, req->session, &s, err);
                        if (r < 0)
                                return r;
                        session_release(s);
                }
        }
        r = cells_ctx_get(c, req->user, req->session, name, req->language, true, &x, err);
        if (r < 0)
                return r;
        r = cells_ctx_acquire(x, err);
        if (r < 0)
                goto out_unref;
        r = cells_ctx_ensure(x, req->env, &lost, err);
        if (r < 0)
                goto out;
        r = sbx_uuid(exec_id);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot name the cell");
                goto out;
        }
        if (req->network && req->network->set) {
                r = cell_narrow(x, req->network, exec_id);
                if (r < 0) {
                        sbx_error_set(err, r, 0,
                                      r == -ENOTSUP ? "params.network needs the session's runner, which does not "
                                                      "serve this context's interpreter"
                                                    : "out of memory");
                        goto out;
                }
                narrowed = true;
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
        x->mask = req->mask;
        x->n_mask = req->mask ? req->n_mask : 0;
        x->mask_max = 0;
        x->mask_tail_len[0] = x->mask_tail_len[1] = 0;
        for (size_t i = 0; i < x->n_mask; i++)
                if (x->mask[i].value && x->mask[i].value_len > x->mask_max)
                        x->mask_max = x->mask[i].value_len;
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
        add_session_env(x, msg, req->session_env);
        deadline = sbx_now_ms() + (int64_t)timeout_s * 1000; /* from when the kernel has it, not from the line */
        r = cells_ctx_send(x, msg, deadline);
        cJSON_Delete(msg);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot hand the cell to its interpreter");
                pthread_mutex_lock(&x->lock);
                x->spool = NULL;
                x->exec_id[0] = '\0';
                pthread_mutex_unlock(&x->lock);
                record_end(c, req->user, req->session, exec_id, NULL, total, cell_spool_close(spool));
                goto out;
        }

        pthread_mutex_lock(&x->lock);
        for (;;) {
                send_progress(x, &sent, req);
                if (x->done || x->waiter_done)
                        break;
                if (x->cancel_force) { /* cancel_execution force: no interrupt, no grace */
                        pthread_mutex_unlock(&x->lock);
                        cells_ctx_kill(x, "cancelled", false);
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
                                (void)cells_ctx_signal(x, SIGINT);
                        } else {
                                cJSON *in = cJSON_CreateObject();
                                cJSON_AddStringToObject(in, "op", "interrupt");
                                (void)cells_ctx_send(x, in, grace_end);
                                cJSON_Delete(in);
                        }
                        pthread_mutex_lock(&x->lock);
                        continue;
                }
                if (grace_end && sbx_now_ms() >= grace_end) {
                        const char *cause = x->cancel_requested ? "cancelled" : "timeout";
                        pthread_mutex_unlock(&x->lock);
                        cells_ctx_kill(x, cause, false);
                        killed = true;
                        pthread_mutex_lock(&x->lock);
                        break;
                }
                (void)cells_wait_until(&x->cond, &x->lock, grace_end ? grace_end : deadline);
        }
        cells_mask_flush_locked(x); /* a cell that ended without its "done" (a timeout, a death) */
        send_progress(x, &sent, req);

        if (x->done && x->done_count >= 0)
                x->execution_count = x->done_count;
        else if (x->done)
                x->execution_count++;
        if (!x->done) {
                /* the interpreter died during the cell: its state is gone (the next cell says so too) */
                cJSON_Delete(lost);
                if (!x->lost_cause[0]) { /* not noticed yet: the waiter, a SIGKILL it has not seen */
                        sbx_strlcpy(x->lost_cause, "killed", sizeof(x->lost_cause));
                        x->lost_generation = x->generation;
                }
                lost = cells_lost_report_locked(x);
        }
        res = result_locked(x, timed_out, killed, true, lost);
        lost = NULL;
        x->adopted_cell = false;
        cJSON_AddNumberToObject(res, "duration_ms", (double)(sbx_now_ms() - start));
        /* the row changes with the generation (start, end: cells_ctx_start, the
         * waiter), not per cell; the cell is audited below */
        cJSON_Delete(x->last_result);
        x->last_result = cJSON_Duplicate(res, true);
        for (int k = 0; k < CELL_STREAMS; k++)
                total[k] = cell_spool_total(x->spool, k);
        x->spool = NULL;
        x->exec_id[0] = '\0';
        pthread_cond_broadcast(&x->cond); /* a cancel_execution waits for this */
        pthread_mutex_unlock(&x->lock);
        record_end(c, req->user, req->session, exec_id, res, total, cell_spool_close(spool));
        *ret = res;
        r = 0;
        audit_cell(x, req, res);
out:
        if (narrowed)
                (void)cell_narrow(x, NULL, NULL);
        pthread_mutex_lock(&x->lock);
        x->mask = NULL; /* the caller's: gone once we return */
        x->n_mask = 0;
        for (int k = 0; k < 2; k++) {
                if (x->mask_tail[k])
                        explicit_bzero(x->mask_tail[k], x->mask_max + 4);
                free(x->mask_tail[k]);
                x->mask_tail[k] = NULL;
                x->mask_tail_len[k] = 0;
        }
        x->mask_max = 0;
        pthread_mutex_unlock(&x->lock);
        cJSON_Delete(lost);
        cells_ctx_release(x);
out_unref:
        cells_ctx_unref(x);
        return r;
}

int cells_last(struct cells *c, const char *user, const char *session, const char *context, int wait_ms, cJSON **ret,
               struct sbx_error *err)
{
        struct cell_ctx *x;
        int64_t deadline = sbx_now_ms() + wait_ms;
        int r = cells_ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);

        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        while ((x->adopt_pending || (x->adopting && !x->waiter_done) ||
                (x->adopted_cell && !x->done && !x->waiter_done)) &&
               cells_wait_until(&x->cond, &x->lock, deadline))
                ;
        if (x->adopted_cell) {
                cJSON *lost = !x->done && x->waiter_done && x->lost_cause[0] ? cells_lost_report_locked(x) : NULL;
                *ret = result_locked(x, false, false, false, lost);
                cJSON_AddBoolToObject(*ret, "complete", x->done || x->waiter_done);
                cJSON_AddTrueToObject(*ret, "adopted");
        } else if (x->last_result) {
                *ret = cJSON_Duplicate(x->last_result, true);
                cJSON_AddTrueToObject(*ret, "complete");
        } else
                r = sbx_error_set(err, -ENOENT, 0, "no cell has run in context %s since the daemon started", x->name);
        pthread_mutex_unlock(&x->lock);
        cells_ctx_unref(x);
        return r;
}

int cells_interrupt(struct cells *c, const char *user, const char *session, const char *context, struct sbx_error *err)
{
        struct cell_ctx *x;
        int r = cells_ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);
        bool running;

        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        running = x->busy && x->cur_id != 0 && !x->done;
        if (running)
                x->interrupt_requested = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        cells_ctx_unref(x);
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
        while (strcmp(x->exec_id, execution_id) == 0 && cells_wait_until(&x->cond, &x->lock, deadline))
                ;
        if (x->last_result && strcmp(cells_str_of(x->last_result, "execution_id") ?: "", execution_id) == 0)
                res = cJSON_Duplicate(x->last_result, true);
        pthread_mutex_unlock(&x->lock);
        cells_ctx_unref(x);
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
        for (int k = 0; k < CELLS_STREAMS; k++)
                v.offset[k] = offsets[k] > 0 ? (uint64_t)offsets[k] : 0;
        /* a stream still in memory is read here, under the lock that keeps it;
         * one with a file after the locks are dropped */
        bool in_file[CELLS_STREAMS] = {true, true, true};
        int r = 0;
        if (!rec->final) {
                for (struct cell_ctx *y = c->list; y; y = y->next) {
                        pthread_mutex_lock(&y->lock);
                        if (strcmp(y->exec_id, execution_id) == 0)
                                for (int k = 0; k < CELLS_STREAMS; k++) {
                                        v.total[k] = cell_spool_total(y->spool, k);
                                        if (offsets[k] >= 0 && v.offset[k] < v.total[k] && r == 0 &&
                                            !cell_spool_has_file(y->spool, k)) {
                                                in_file[k] = false;
                                                r = cell_spool_read_live(y->spool, c->spool_dir, execution_id, k,
                                                                         v.offset[k], max, &v.data[k], &v.len[k]);
                                        }
                                }
                        pthread_mutex_unlock(&y->lock);
                }
        } else if (rec->kept) {
                for (int k = 0; k < CELLS_STREAMS; k++)
                        if (offsets[k] >= 0 && v.offset[k] < v.total[k] && r == 0 && !rec->kept->file[k]) {
                                in_file[k] = false;
                                r = cell_spool_read_kept(rec->kept, c->spool_dir, execution_id, k, v.offset[k], max,
                                                         &v.data[k], &v.len[k]);
                        }
        }
        pthread_mutex_unlock(&c->lock);
        if (r < 0) {
                cells_execution_view_done(&v);
                return sbx_error_set(err, r, 0, "cannot read the output of cell %s", execution_id);
        }
        for (int k = 0; k < CELLS_STREAMS; k++) {
                if (offsets[k] < 0 || v.offset[k] >= v.total[k] || !in_file[k])
                        continue;
                r = cell_spool_read(c->spool_dir, execution_id, k, v.offset[k], max, &v.data[k], &v.len[k]);
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
                cJSON_AddItemToObject(o, "pending_state_lost", cells_lost_report_locked(x));
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
        if (cells_ctx_send(x, m, deadline) == 0) {
                pthread_mutex_lock(&x->lock);
                while (x->rss_kb == -2 && !x->waiter_done && cells_wait_until(&x->cond, &x->lock, deadline))
                        ;
                pthread_mutex_unlock(&x->lock);
        }
        cJSON_Delete(m);
        pthread_mutex_lock(&x->lock);
        rss = x->rss_kb >= 0 ? x->rss_kb : -1;
        pthread_mutex_unlock(&x->lock);
        cells_ctx_release(x);
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
                cells_ctx_unref(v[i]);
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
        int r = cells_ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);

        if (r < 0)
                return r;
        r = cells_ctx_acquire(x, err);
        if (r < 0) {
                cells_ctx_unref(x);
                return r;
        }
        cells_ctx_kill(x, "", true);
        pthread_mutex_lock(&x->lock);
        x->lost_cause[0] = '\0'; /* a restart on request is no loss to report */
        pthread_mutex_unlock(&x->lock);
        r = cells_ctx_ensure(x, NULL, &lost, err);
        cJSON_Delete(lost);
        if (r == 0) {
                pthread_mutex_lock(&x->lock);
                *ret = ctx_summary_locked(x);
                pthread_mutex_unlock(&x->lock);
        }
        cells_ctx_release(x);
        cells_ctx_unref(x);
        return r;
}

/* Unlink x from the list (if still there) and drop the list's reference. */
void cells_ctx_unlist(struct cells *c, struct cell_ctx *x)
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
                cells_ctx_unref(x);
}

int cells_delete(struct cells *c, const char *user, const char *session, const char *context, struct sbx_error *err)
{
        struct cell_ctx *x;
        int r = cells_ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);

        if (r < 0)
                return r;
        r = cells_ctx_acquire(x, err);
        if (r < 0) {
                cells_ctx_unref(x);
                return r;
        }
        cells_ctx_kill(x, "", true);
        (void)store_context_delete(c->store, user, session, x->name);
        cells_records_drop(c, user, session, x->name);
        cells_ctx_unlist(c, x);
        cells_ctx_release(x);
        cells_ctx_unref(x);
        return 0;
}

int cells_variables(struct cells *c, const char *user, const char *session, const char *context, cJSON **ret,
                    struct sbx_error *err)
{
        struct cell_ctx *x;
        cJSON *m, *res;
        int64_t deadline = sbx_now_ms() + CELLS_VARS_TIMEOUT_MS;
        uint64_t id;
        int r = cells_ctx_get(c, user, session, context ? context : CELLS_DEFAULT, NULL, false, &x, err);

        if (r < 0)
                return r;
        r = cells_ctx_acquire(x, err);
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
        r = cells_ctx_send(x, m, deadline);
        cJSON_Delete(m);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot reach the context's interpreter");
                goto out;
        }
        pthread_mutex_lock(&x->lock);
        while (!x->done && !x->waiter_done && cells_wait_until(&x->cond, &x->lock, deadline))
                ;
        if (!x->done && !x->waiter_done) {
                /* still in the tenant's code past the kernel's own deadlines (an
                 * object that turned them off): interrupted as a cell is, so the
                 * kernel is not left busy, and what it listed so far comes back */
                int64_t grace = sbx_now_ms() + c->cfg->cells_interrupt_grace_ms;
                pthread_mutex_unlock(&x->lock);
                m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "op", "interrupt");
                (void)cells_ctx_send(x, m, grace);
                cJSON_Delete(m);
                pthread_mutex_lock(&x->lock);
                while (!x->done && !x->waiter_done && cells_wait_until(&x->cond, &x->lock, grace))
                        ;
        }
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
        cells_ctx_release(x);
out_unref:
        cells_ctx_unref(x);
        return r;
}
