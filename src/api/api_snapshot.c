/* api_snapshot.c — the API methods of workspace snapshots, restore and
 * fork (issue 28; snapshot.h does the work): snapshot_session,
 * list_snapshots, delete_snapshot, restore_session, fork_session. Like
 * api_methods.c: type-check, call the module, format; every method acts for
 * the token's user only, and a snapshot is found by id or name among that
 * user's own. No state and no threads; fork_session claims its new name as
 * create_session does (api_creating_claim). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/session.h"
#include "sandboxd/snapshot.h"
#include "sandboxd/store_snapshot.h"

#define LIST_MAX 1000

/* params.<name> naming a snapshot: an id or a name, checked for shape only. */
static int param_snapshot(struct api_req *q, const char *name, const char **ret, struct fronterr *e)
{
        const char *s;

        if (jparam_string(&q->args, name, true, &s, e) < 0)
                return -1;
        if (strncmp(s, "snap-", 5) != 0 && !snapshot_name_valid(s))
                return fronterr_set(e, "invalid", "params.%s must be a snapshot id (snap-...) or name", name);
        if (strlen(s) > STORE_SNAPSHOT_ID_MAX)
                return fronterr_set(e, "invalid", "params.%s is too long", name);
        *ret = s;
        return 0;
}

int api_m_snapshot_session(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *name;
        struct store_snapshot snap;
        struct sbx_error err = {0};
        int r;

        bool memory = false;

        if (jparam_string(&q->args, "name", false, &name, e) < 0 ||
            jparam_bool(&q->args, "with_memory", false, &memory, e) < 0)
                return -1;
        if (name && !snapshot_name_valid(name))
                return fronterr_set(e, "invalid",
                                    "params.name must be 1-64 of [A-Za-z0-9._-], not starting with . or - or snap-");
        r = snapshot_take_memory(&q->d->snapshots, q->tok.user, q->session, name, memory, q->actor, &snap, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = snapshot_to_json(&snap);
        store_snapshot_done(&snap);
        return 0;
}

int api_m_list_snapshots(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        int r;

        r = snapshot_list_json(&q->d->snapshots, q->tok.user, q->session, LIST_MAX, ret, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        cJSON_AddNumberToObject(*ret, "max_count", q->d->cfg.max_snapshots_per_user);
        cJSON_AddNumberToObject(*ret, "max_bytes", (double)q->d->cfg.max_snapshot_bytes_per_user);
        return 0;
}

int api_m_delete_snapshot(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *id;
        struct sbx_error err = {0};
        int r;

        if (param_snapshot(q, "snapshot", &id, e) < 0)
                return -1;
        r = snapshot_delete(&q->d->snapshots, q->tok.user, id, q->actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "snapshot", id);
        cJSON_AddBoolToObject(*ret, "deleted", true);
        return 0;
}

int api_m_restore_session(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *id;
        struct store_snapshot snap;
        struct sbx_error err = {0};
        int r;

        if (param_snapshot(q, "snapshot", &id, e) < 0)
                return -1;
        r = snapshot_restore(&q->d->snapshots, q->tok.user, q->session, id, q->actor, &snap, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", q->session);
        cJSON_AddStringToObject(*ret, "snapshot", snap.id);
        cJSON_AddBoolToObject(*ret, "restored", true);
        {
                /* a memory restore whose contexts run on has started the session */
                struct session_info info;
                bool running = false;
                if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) == 0) {
                        running = info.state == SESSION_RUNNING;
                        session_info_done(&info);
                }
                cJSON_AddStringToObject(*ret, "state", running ? "running" : "stopped");
        }
        cJSON_AddBoolToObject(*ret, "private", snap.private_);
        if (strcmp(snap.kind, "microvm") == 0)
                /* connections the snapshot's guest had open: the restored VM does not carry them */
                cJSON_AddNumberToObject(*ret, "dropped_connections",
                                        (double)snapshot_dropped_connections(&q->d->cfg, q->tok.user, snap.id));
        store_snapshot_done(&snap);
        return 0;
}

int api_m_fork_session(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const cJSON *from = q->params ? cJSON_GetObjectItemCaseSensitive(q->params, "from") : NULL;
        const cJSON *fs, *fsnap;
        const char *from_session = NULL, *from_snapshot = NULL;
        char snap_id[STORE_SNAPSHOT_ID_MAX + 1] = "", *key = NULL;
        struct sbx_error err = {0};
        int r;

        if (!cJSON_IsObject(from))
                return fronterr_set(e, "invalid", "params.from must be {session} or {snapshot}");
        fs = cJSON_GetObjectItemCaseSensitive(from, "session");
        fsnap = cJSON_GetObjectItemCaseSensitive(from, "snapshot");
        if ((fs != NULL) == (fsnap != NULL) || cJSON_GetArraySize(from) != 1)
                return fronterr_set(e, "invalid", "params.from must hold exactly one of session and snapshot");
        if (fs) {
                if (!cJSON_IsString(fs) || !session_id_valid(fs->valuestring))
                        return fronterr_set(e, "invalid", "params.from.session must be 1-64 of [A-Za-z0-9_.-]");
                from_session = fs->valuestring;
                if (strcmp(from_session, q->session) == 0)
                        return fronterr_set(e, "invalid", "a session cannot be forked into itself");
        } else {
                if (!cJSON_IsString(fsnap) ||
                    (strncmp(fsnap->valuestring, "snap-", 5) != 0 && !snapshot_name_valid(fsnap->valuestring)) ||
                    strlen(fsnap->valuestring) > STORE_SNAPSHOT_ID_MAX)
                        return fronterr_set(e, "invalid", "params.from.snapshot must be a snapshot id or name");
                from_snapshot = fsnap->valuestring;
        }
        r = api_creating_claim(q->tok.user, q->session, &key);
        if (r == -EEXIST)
                return fronterr_set(e, "conflict", "session %s is being created by another call", q->session);
        if (r < 0)
                return fronterr_set(e, "busy", "too many sessions are being created at once; retry");
        r = snapshot_fork(&q->d->snapshots, q->tok.user, from_session, from_snapshot, q->session, q->actor, snap_id,
                          &err);
        api_creating_release(key);
        if (r == -EEXIST)
                return fronterr_set(e, "conflict", "%s", err.msg);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        r = api_m_session_info(q, ret, e);
        if (r < 0)
                return r;
        cJSON *f = cJSON_AddObjectToObject(*ret, "forked_from");
        if (from_session)
                cJSON_AddStringToObject(f, "session", from_session);
        else
                cJSON_AddStringToObject(f, "snapshot", snap_id);
        {
                /* a memory snapshot's fork keeps its interpreters (cells_mark_carried) */
                struct store_snapshot snap;
                bool memory = false;
                if (store_snapshot_get(q->d->store, q->tok.user, snap_id, &snap) == 0) {
                        memory = strcmp(snap.kind, "microvm") == 0;
                        store_snapshot_done(&snap);
                }
                if (!memory)
                        cJSON_AddStringToObject(*ret, "state_lost", "forked");
                else /* connections its guest had open: the fork does not carry them */
                        cJSON_AddNumberToObject(*ret, "dropped_connections",
                                                (double)snapshot_dropped_connections(&q->d->cfg, q->tok.user, snap_id));
        }
        return 0;
}
