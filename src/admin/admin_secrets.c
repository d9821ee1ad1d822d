/* admin_secrets.c — the admin commands of users' secrets (issue 37):
 * secret.set {user, name, value, hosts, header?}, secret.list {user} and
 * secret.delete {user, name}; `sandboxctl secret` sends them, reading the
 * value from its stdin. Thin: secrets.h validates, seals and audits. No
 * state. */
#include <cjson/cJSON.h>

#include "admin_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/secrets.h"

int admin_c_secret_set(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user;

        if (admin_arg_user(q, &user, e) < 0)
                return -1;
        return secrets_front_set(q->d->secrets, q->d->store, user, &q->argv, q->actor, ret, e);
}

int admin_c_secret_list(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user;

        if (admin_arg_user(q, &user, e) < 0)
                return -1;
        return secrets_front_list(q->d->store, user, ret, e);
}

int admin_c_secret_delete(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user;

        if (admin_arg_user(q, &user, e) < 0)
                return -1;
        return secrets_front_delete(q->d->store, user, &q->argv, q->actor, ret, e);
}
