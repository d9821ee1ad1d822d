/* api_ops.c — the API methods an operator token reads the daemon with
 * (issue 39): list_users, pool_status, list_nodes and daemon_health. Each
 * refuses any other token and passes opsview.h's answer on: the admin
 * socket's sandboxctl says the same from the same calls. */
#include <cjson/cJSON.h>

#include "api_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/opsview.h"
#include "sandboxd/token.h"

/* Every user's data: an operator's read, not a tenant's. */
static int operator_only(struct api_req *q, struct fronterr *e)
{
        if (q->tok.role == TOKEN_ROLE_OPERATOR)
                return 0;
        return fronterr_set(e, "forbidden", "%s needs an operator token; this token's role is %s", q->method,
                            token_role_to_string(q->tok.role));
}

int api_m_list_users(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        int r;

        if (operator_only(q, e) < 0)
                return -1;
        r = opsview_users(q->d, ret);
        return r < 0 ? fronterr_errno(e, r, NULL, "cannot list the users") : 0;
}

int api_m_pool_status(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        if (operator_only(q, e) < 0)
                return -1;
        *ret = cJSON_CreateObject();
        opsview_add_pool(*ret, q->d->pool);
        return 0;
}

int api_m_list_nodes(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        int r;

        if (operator_only(q, e) < 0)
                return -1;
        r = opsview_nodes(q->d, ret);
        return r < 0 ? fronterr_errno(e, r, NULL, "cannot list the nodes") : 0;
}

/* /healthz's answer, sandboxctl stats' counts and /metrics' error counters. */
int api_m_daemon_health(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        if (operator_only(q, e) < 0)
                return -1;
        *ret = opsview_daemon_health(q->d);
        return 0;
}
