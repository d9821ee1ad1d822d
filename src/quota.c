/* quota.c — per-user limits and the execution admission rule (quota.h).
 *
 * Locks: q->lock guards the override table; it is a leaf lock (nothing is
 * called with it held), so the session manager and the exec engine may ask
 * for limits while holding their own locks. */
#include "sandboxd/quota.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

struct quota {
        pthread_mutex_t lock;
};

void quota_limits_get(struct quota *q, const struct sbx_config *cfg, const char *user, struct quota_limits *ret)
{
        *ret = (struct quota_limits){
                .sessions = cfg->max_sessions_per_user,
                .execs = cfg->max_exec_per_user,
                .services = cfg->max_services_per_session,
                .spool_bytes = INT64_MAX,
        };
}

int quota_exec_admit(const struct sbx_config *cfg, const struct quota_limits *lim, const struct quota_exec_load *load,
                     struct sbx_error *err)
{
        size_t users = load->other_users + 1;
        size_t share = ((size_t)cfg->max_exec_global + users - 1) / users;

        if (load->session >= (size_t)cfg->max_exec_per_session)
                return sbx_error_set(err, -EBUSY, 0,
                                     "busy: %zu executions are running in this session (max_exec_per_session=%d); "
                                     "wait for one to finish or cancel one",
                                     load->session, cfg->max_exec_per_session);
        if ((int64_t)load->user >= lim->execs)
                return sbx_error_set(err, -EBUSY, 0,
                                     "busy: %zu executions of this user are running (max_exec_per_user=%" PRId64
                                     "); wait for one to finish or cancel one",
                                     load->user, lim->execs);
        /* Only while others run: a user alone may use the whole pool. */
        if (load->other_users > 0 && load->user >= share)
                return sbx_error_set(err, -EBUSY, 0,
                                     "busy: %zu executions of this user are running, its fair share of "
                                     "max_exec_global=%d among %zu users with executions; wait for one to finish",
                                     load->user, cfg->max_exec_global, users);
        if (load->global >= (size_t)cfg->max_exec_global)
                return sbx_error_set(err, -EBUSY, 0,
                                     "busy: %zu executions are running on this daemon (max_exec_global=%d); retry later",
                                     load->global, cfg->max_exec_global);
        return 0;
}
