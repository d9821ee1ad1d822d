/* admin_snapshots.c — the admin commands of workspace snapshots (issue 28):
 * snapshots.list {user?} (every user's, or one's, with their totals) and
 * snapshot.delete {user, snapshot}. Thin: the store lists, snapshot.h
 * deletes. No state. */
#include <cjson/cJSON.h>
#include <string.h>

#include "admin_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/snapshot.h"
#include "sandboxd/store_snapshot.h"
#include "sandboxd/utf8.h"

#define ADMIN_SNAPSHOTS_MAX 10000

int admin_c_snapshots_list(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user = NULL;
        struct store_snapshot *list = NULL;
        size_t n = 0;
        int64_t bytes = 0;
        cJSON *a;
        int r;

        if (jparam_string(&q->argv, "user", false, &user, e) < 0)
                return -1;
        if (user && !session_id_valid(user))
                return fronterr_set(e, "invalid", "invalid user_id: must be 1-64 characters of [A-Za-z0-9_.-]");
        r = store_snapshot_list(q->d->store, user, ADMIN_SNAPSHOTS_MAX, &list, &n);
        if (r < 0)
                return fronterr_errno(e, r, NULL, "cannot list snapshots");
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "snapshots");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = snapshot_to_json(&list[i]);
                cJSON_AddStringToObject(o, "user", list[i].user);
                cJSON_AddItemToArray(a, o);
                bytes += list[i].bytes;
        }
        store_snapshot_list_free(list, n);
        cJSON_AddNumberToObject(*ret, "count", (double)n);
        cJSON_AddNumberToObject(*ret, "bytes", (double)bytes);
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
