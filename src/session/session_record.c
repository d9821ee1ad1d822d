/* session_record.c — what a session was made with, as the store keeps it:
 *   - its labels and requested resources (issue 29), fixed when the session
 *     is made and compared on every later call that names them; the rules
 *     are sessspec.h's (parsing, bounds, equality, the JSON shown), the row
 *     is table session_spec;
 *   - its options (image, default env, TTL), table session_options.
 * The fronts reach those rows only through these functions. No state, no
 * threads. */
#include <errno.h>
#include <string.h>

#include "session_internal.h"
#include "sandboxd/sessspec.h"
#include "sandboxd/store.h"

int session_spec_record(struct session_manager *m, const char *user, const char *id,
                        const struct store_session_spec *want, bool *ret_inserted, struct sbx_error *err)
{
        struct store_session_spec have = {0}, w = *want;
        int r;

        w.created_at = sbx_wall_ms();
        r = store_session_spec_claim(m->store, user, id, &w, &have, ret_inserted);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the session's labels and resources: %s", strerror(-r));
        r = sessspec_equal(&have, want) ? 0
                                        : sbx_error_set(err, -EEXIST, 0,
                                                        "session %s was created with other labels or resources; "
                                                        "they are fixed at creation (destroy_session it to change "
                                                        "them)",
                                                        id);
        store_session_spec_done(&have);
        return r;
}

int session_spec_check(struct session_manager *m, const char *user, const char *id,
                       const struct store_session_spec *want, struct sbx_error *err)
{
        struct store_session_spec have = {0};
        int r;

        /* a session made without a spec has none: asking for one now is asking for another */
        r = store_session_spec_get(m->store, user, id, &have);
        if (r < 0 && r != -ENOENT)
                r = sbx_error_set(err, r, 0, "cannot read the session's labels and resources: %s", strerror(-r));
        else if (!sessspec_equal(&have, want))
                r = sbx_error_set(err, -EEXIST, 0,
                                  "session %s exists with other labels or resources; they are fixed at creation "
                                  "(destroy_session it to change them)",
                                  id);
        else
                r = 0;
        store_session_spec_done(&have);
        return r;
}

int session_spec_get(struct session_manager *m, const char *user, const char *id, struct store_session_spec *ret)
{
        return store_session_spec_get(m->store, user, id, ret);
}

void session_spec_forget(struct session_manager *m, const char *user, const char *id)
{
        (void)store_session_spec_delete(m->store, user, id);
}

int session_options_get(struct session_manager *m, const char *user, const char *id, struct store_session_options *ret)
{
        return store_session_options_get(m->store, user, id, ret);
}

int session_record_made(struct session_manager *m, const char *user, const char *id,
                        const struct store_session_spec *spec, const struct store_session_options *opt,
                        bool *ret_spec_new, struct sbx_error *err)
{
        int r;

        *ret_spec_new = false;
        /* a spec left by an earlier call that made no session is replaced: this call creates it */
        session_spec_forget(m, user, id);
        if (spec) {
                r = session_spec_record(m, user, id, spec, ret_spec_new, err);
                if (r < 0)
                        return r;
        }
        if (!opt->image[0] && !opt->env_json && !opt->expires_at)
                return 0;
        r = store_session_options_set(m->store, user, id, opt);
        if (r < 0) {
                session_spec_forget(m, user, id);
                return sbx_error_set(err, r, 0, "cannot record the session's options: %s", strerror(-r));
        }
        return 0;
}

void session_record_forget(struct session_manager *m, const char *user, const char *id)
{
        (void)store_session_options_delete(m->store, user, id);
        session_spec_forget(m, user, id);
}

int session_set_ttl(struct session_manager *m, const char *user, const char *id, int64_t ttl_s, struct sbx_error *err)
{
        struct store_session_options opt = {0};
        int r;

        r = store_session_options_get(m->store, user, id, &opt);
        if (r < 0 && r != -ENOENT)
                return sbx_error_set(err, r, 0, "cannot read the session's options: %s", strerror(-r));
        opt.expires_at = ttl_s > 0 ? sbx_wall_ms() + ttl_s * 1000 : 0;
        if (!opt.created_at)
                opt.created_at = sbx_wall_ms();
        r = store_session_options_set(m->store, user, id, &opt);
        store_session_options_done(&opt);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the session's TTL: %s", strerror(-r));
        return 0;
}
