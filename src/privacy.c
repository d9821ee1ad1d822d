/* privacy.c — PrivateData marks and the network policy behind the ratchet.
 * No state of its own beyond the handles: the store is the truth for marks
 * (read on every policy question, an indexed lookup), so a restart, --gc or
 * a changed network_default can never hand a marked session its network
 * back. No locks. */
#include "sandboxd/privacy.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/audit.h"
#include "sandboxd/log.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"

struct privacy {
        struct store *store;
        struct session_manager *sessions;
        const char *fallback;      /* network for unmarked sessions */
        privacy_close_fn close_fn; /* set once at start-up, before any front */
        void *close_ud;
};

static const char *policy(const char *user, const char *session, void *ud)
{
        return privacy_required_network(ud, user, session);
}

int privacy_new(struct store *st, struct session_manager *sm, struct privacy **ret, struct sbx_error *err)
{
        struct privacy *p = calloc(1, sizeof(*p));

        if (!p)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        p->store = st;
        p->sessions = sm;
        session_set_network_policy(sm, policy, p);
        *ret = p;
        return 0;
}

void privacy_set_tunnel_closer(struct privacy *p, privacy_close_fn fn, void *userdata)
{
        if (p) {
                p->close_fn = fn;
                p->close_ud = userdata;
        }
}

void privacy_free(struct privacy *p)
{
        if (!p)
                return;
        session_set_network_policy(p->sessions, NULL, NULL);
        free(p);
}

bool privacy_is_private(struct privacy *p, const char *user, const char *session)
{
        bool any = true; /* if the store cannot answer, assume private: fail closed */
        (void)store_private_any(p->store, user, session, &any);
        return any;
}

const char *privacy_required_network(struct privacy *p, const char *user, const char *session)
{
        return privacy_is_private(p, user, session) ? "none" : session_default_network(p->sessions);
}

static bool printable(const char *s, size_t max, bool allow_empty)
{
        size_t n = 0;
        if (!s)
                return allow_empty;
        for (; s[n]; n++)
                if ((unsigned char)s[n] < 0x20 || s[n] == 0x7f || n >= max)
                        return false;
        return allow_empty || n > 0;
}

int privacy_mark(struct privacy *p, const char *user, const char *session, const char *dataset, const char *source,
                 const char *actor, struct sbx_error *err)
{
        bool inserted = false;
        int r;

        r = session_key_check(user, session, err);
        if (r < 0)
                return r;
        if (!printable(dataset, 256, false))
                return sbx_error_set(err, -EINVAL, 0, "dataset must be 1-256 printable characters");
        if (!printable(source, 256, true))
                return sbx_error_set(err, -EINVAL, 0, "source must be at most 256 printable characters");

        /* 1. durable first: from here on every session_acquire requires "none" */
        r = store_private_add(p->store, user, session, dataset, source, sbx_wall_ms(), &inserted);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the mark: %s", strerror(-r));
        if (inserted) {
                cJSON *d = cJSON_CreateObject();
                char *detail;
                cJSON_AddStringToObject(d, "dataset", dataset);
                cJSON_AddStringToObject(d, "source", source ? source : "");
                detail = cJSON_PrintUnformatted(d);
                (void)audit_record(p->store, actor ? actor : "unknown", user, session, "privacy.mark", detail);
                free(detail);
                cJSON_Delete(d);
                log_ctx(LOG_LEVEL_INFO, user, session, NULL, "session marked private (dataset %s)", dataset);
        }
        /* 2. close the session's egress tunnels (the proxy refuses new ones:
         * the mark is durable), 3. then take any networked container away
         * before returning: the ordering guarantee in privacy.h rests on this */
        if (p->close_fn)
                p->close_fn(user, session, p->close_ud);
        r = session_enforce_network(p->sessions, user, session, err);
        if (r < 0)
                sbx_error_prefix(err, "the mark is recorded, but the networked container could not be removed");
        return r;
}

static void dataset_from_row(const void *row, void *dataset)
{
        const struct store_private *r = row;
        struct privacy_dataset *d = dataset;

        sbx_strlcpy(d->dataset, r->dataset, sizeof(d->dataset));
        sbx_strlcpy(d->source, r->source, sizeof(d->source));
        d->marked_at = r->marked_at;
}

int privacy_list(struct privacy *p, const char *user, const char *session, struct privacy_dataset **ret, size_t *ret_n)
{
        struct store_private *rows = NULL;
        size_t n = 0;
        int r = store_private_list(p->store, user, session, &rows, &n);

        return r < 0 ? r : sbx_rows_convert(rows, n, sizeof(*rows), sizeof(**ret), dataset_from_row, ret, ret_n);
}
