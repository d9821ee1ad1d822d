/* admin_snapshots.c — the admin commands of workspace snapshots (issue 28):
 * snapshots.list {user?} (every user's, or one's, with their totals) and
 * snapshot.delete {user, snapshot}. Thin: snapshot.h lists and deletes.
 * No state. */
#include <cjson/cJSON.h>
#include <string.h>

#include "admin_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/snapshot.h"
#include "sandboxd/utf8.h"

#define ADMIN_SNAPSHOTS_MAX 10000

int admin_c_snapshots_list(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user = NULL;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->argv, "user", false, &user, e) < 0)
                return -1;
        if (user && !session_id_valid(user))
                return fronterr_set(e, "invalid", "invalid user_id: must be 1-64 characters of [A-Za-z0-9_.-]");
        r = snapshot_list_json(&q->d->snapshots, user, NULL, ADMIN_SNAPSHOTS_MAX, ret, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        if (user) { /* every entry names its user, as in the list of all */
                cJSON *it;
                cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(*ret, "snapshots"))
                        cJSON_AddStringToObject(it, "user", user);
        }
        cJSON_AddNumberToObject(*ret, "max_per_user", q->d->cfg.max_snapshots_per_user);
        cJSON_AddNumberToObject(*ret, "max_bytes_per_user", (double)q->d->cfg.max_snapshot_bytes_per_user);
        return 0;
}

int admin_c_snapshot_delete(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *id;
        struct sbx_error err = {0};
        int r;

        if (admin_arg_user(q, &user, e) < 0 || jparam_string(&q->argv, "snapshot", true, &id, e) < 0)
                return -1;
        if (strlen(id) > STORE_SNAPSHOT_ID_MAX)
                return fronterr_set(e, "invalid", "snapshot is too long");
        r = snapshot_delete(&q->d->snapshots, user, id, q->actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "snapshot", id);
        cJSON_AddBoolToObject(*ret, "deleted", true);
        return 0;
}
