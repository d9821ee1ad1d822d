/* api_idem.c — idempotency keys for the API methods (issue 17): one generic
 * layer in the dispatcher, so a method becomes idempotent by joining the
 * table below, by name.
 *
 * A request carrying params.idempotency_key is keyed by (token user, method,
 * key) and fingerprinted by the SHA-256 of its canonical params (keys sorted
 * at every level, the key itself left out; idem.h). The key is claimed
 * (idem_claim: a UNIQUE insert in the store) before the method runs, so of two
 * concurrent duplicates only one runs; the other waits for the first to
 * finish and answers as a retry would. Then, within API_IDEMPOTENCY_WINDOW_S:
 *   - the same key and the same request answer with the first call's
 *     result, without running anything again. For exec and run_code the
 *     execution is the result: the key records its id as soon as it exists,
 *     and a retry answers from that execution, whether it still runs
 *     (background: its id and state; otherwise waiting for its end, as the
 *     first call did) or has ended;
 *   - the same key with a different request is `conflict`;
 *   - a call that fails before anything ran (or before its execution
 *     existed) leaves no key: the retry runs.
 * Keys live in the store (migration 0015), so they survive restarts; a claim
 * left PENDING by a daemon that died is dropped at start-up. Each user holds
 * at most API_IDEMPOTENCY_MAX_KEYS live keys; expired ones are pruned on the
 * user's next claim and by --gc.
 *
 * No threads or locks of its own: the store serialises claims. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/log.h"
#include "sandboxd/idem.h"

#define IDEM_PENDING_SLICE_MS 200

enum idem_kind {
        IDEM_RESULT,    /* the method's JSON result is stored and replayed */
        IDEM_EXECUTION, /* the method starts an execution: its record is the result */
};

/* The methods that accept idempotency_key. Methods not built yet on this
 * branch are listed too: they join by name when they exist. */
static const struct {
        const char *method;
        enum idem_kind kind;
} idem_methods[] = {
        {"exec", IDEM_EXECUTION},       {"run_code", IDEM_EXECUTION}, {"run_tests", IDEM_RESULT},
        {"start_service", IDEM_RESULT}, {"write_file", IDEM_RESULT},  {"create_session", IDEM_RESULT},
};

/* Whether method takes idempotency_key, and how its result is kept. */
static bool idem_method(const char *method, enum idem_kind *ret_kind)
{
        for (size_t i = 0; method && i < ELEMENTSOF(idem_methods); i++)
                if (strcmp(idem_methods[i].method, method) == 0) {
                        *ret_kind = idem_methods[i].kind;
                        return true;
                }
        return false;
}

static struct idem_ref ref_of(const struct api_req *q)
{
        return (struct idem_ref){q->d->store, q->tok.user, q->method, q->idem_key};
}

void api_idem_bind_execution(struct api_req *q, const char *execution_id)
{
        int r;

        if (!q->idem_key)
                return;
        struct idem_ref k = ref_of(q);

        r = idem_bind_execution(&k, execution_id);
        if (r < 0)
                log_ctx(LOG_LEVEL_WARN, q->tok.user, q->session, NULL,
                        "api: cannot record execution %s under its idempotency key: %s", execution_id, strerror(-r));
        else
                q->idem_bound = true;
}

/* Answer a retry from the key's row. */
static int replay(struct api_req *q, enum idem_kind kind, const struct store_idem *row, cJSON **ret, struct fronterr *e)
{
        log_ctx(LOG_LEVEL_INFO, q->tok.user, q->session, NULL, "api: %s: idempotent retry of key %s answered%s%s",
                q->method, q->idem_key, row->execution_id[0] ? " by execution " : "", row->execution_id);
        if (kind == IDEM_EXECUTION && row->execution_id[0])
                return api_execution_reply(q, row->execution_id, ret, e);
        *ret = row->result ? cJSON_Parse(row->result) : NULL;
        if (!*ret)
                return fronterr_set(e, "internal", "the stored result of idempotency_key %s is unreadable",
                                    q->idem_key);
        return 0;
}

/* Wait for the call holding the key to finish: 1 with *row DONE, 0 when
 * the key was released (claim again), 2 when the client left, <0 with e.
 * *row is freed on every return but 1. */
static int wait_pending(struct api_req *q, struct store_idem *row, struct fronterr *e)
{
        /* the holder runs at most as long as an execution may */
        int64_t until = sbx_now_ms() + (int64_t)q->d->cfg.exec_timeout_max_s * 1000 + 120000;

        for (;;) {
                int r;

                if (strcmp(row->state, "PENDING") != 0)
                        return 1;
                store_idem_done(row);
                if (sbx_now_ms() >= until)
                        return fronterr_set(e, "busy",
                                            "a call with idempotency_key %s is still in progress; retry later",
                                            q->idem_key);
                sbx_sleep_ms(IDEM_PENDING_SLICE_MS);
                if (api_should_abandon(q))
                        return 2;
                struct idem_ref k = ref_of(q);
                r = idem_get(&k, row);
                if (r == -ENOENT)
                        return 0;
                if (r < 0)
                        return fronterr_errno(e, r, NULL, "cannot read the idempotency key");
        }
}

int api_idem_call(struct api_req *q, api_method_fn fn, cJSON **ret, struct fronterr *e)
{
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(q->params, "idempotency_key");
        enum idem_kind kind = IDEM_RESULT;
        bool takes_key = idem_method(q->method, &kind);
        char hash[65];
        int r;

        if (!k || cJSON_IsNull(k))
                return fn(q, ret, e);
        if (!takes_key)
                return fronterr_set(e, "invalid", "%s does not take params.idempotency_key", q->method);
        if (!cJSON_IsString(k))
                return fronterr_set(e, "bad_request", "params.idempotency_key must be a string");
        if (!idem_key_valid(k->valuestring))
                return fronterr_set(e, "invalid", "params.idempotency_key must be 1-%d characters of [A-Za-z0-9._:-]",
                                    IDEM_KEY_MAX);
        r = idem_fingerprint(q->method, q->params, hash);
        if (r < 0)
                return fronterr_set(e, "internal", "out of memory");
        q->idem_key = k->valuestring;

        for (;;) {
                struct store_idem row = {0};
                struct idem_ref ref = ref_of(q);

                r = idem_claim(&ref, hash, q->d->cfg.idempotency_window_s, q->d->cfg.idempotency_max_keys, &row);
                if (r == -EDQUOT)
                        return fronterr_set(
                                e, "quota_exceeded",
                                "this user already holds API_IDEMPOTENCY_MAX_KEYS (%d) live idempotency keys",
                                q->d->cfg.idempotency_max_keys);
                if (r < 0)
                        return fronterr_errno(e, r, NULL, "cannot record the idempotency key");
                if (r == 1)
                        break; /* ours: run it */
                if (strcmp(row.request_hash, hash) != 0) {
                        store_idem_done(&row);
                        return fronterr_set(e, "conflict",
                                            "idempotency_key %s was already used with a different %s request",
                                            q->idem_key, q->method);
                }
                r = wait_pending(q, &row, e);
                if (r == 1)
                        r = replay(q, kind, &row, ret, e);
                store_idem_done(&row);
                if (r == 2)
                        return 1; /* the client left */
                if (r != 0 || *ret)
                        return r;
        }

        struct idem_ref ref = ref_of(q);

        r = fn(q, ret, e);
        if (r == 0 && kind == IDEM_RESULT) {
                char *text = cJSON_PrintUnformatted(*ret);
                int s = text ? idem_finish(&ref, text) : -ENOMEM;
                free(text);
                if (s >= 0)
                        return 0;
                log_ctx(LOG_LEVEL_WARN, q->tok.user, q->session, NULL,
                        "api: %s: cannot record the result of idempotency key %s: %s", q->method, q->idem_key,
                        strerror(-s));
        }
        if (!q->idem_bound || kind != IDEM_EXECUTION)
                idem_release(&ref);
        return r;
}
