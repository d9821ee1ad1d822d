/* store_snapshot.h — the store's rows of workspace snapshots (issue 28;
 * table snapshots, migration 0029). Every query but the gc's is keyed by
 * the user, so one user's snapshots are never visible to another. Only the
 * snapshot module (src/snapshot/) and gc call these. */
#ifndef SANDBOXD_STORE_SNAPSHOT_H
#define SANDBOXD_STORE_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

#define STORE_SNAPSHOT_ID_MAX 40
#define STORE_SNAPSHOT_NAME_MAX 64

struct store_snapshot {
        char id[STORE_SNAPSHOT_ID_MAX + 1];
        char user[65];
        char session[65];
        char name[STORE_SNAPSHOT_NAME_MAX + 1]; /* "" : none */
        char kind[16];                          /* "image" | "archive" */
        char state[16];                         /* "creating" | "ready" */
        int64_t bytes;                          /* on disk */
        int64_t workspace_size;                 /* loop: the image's size; 0: none */
        char *meta_json;                        /* malloc'd */
        char *datasets_json;                    /* malloc'd [{dataset, source}] or NULL */
        bool private_;
        int64_t created_at; /* unix ms */
};
void store_snapshot_done(struct store_snapshot *s);
void store_snapshot_list_free(struct store_snapshot *list, size_t n);

/* Insert row (state "creating") if user then holds fewer than max_count
 * snapshots and fewer than max_bytes bytes of them, in one transaction:
 * -EDQUOT (with *ret_count and *ret_bytes, what the user holds) when not,
 * -EEXIST when the user has a snapshot of that name. */
int store_snapshot_reserve(struct store *s, const struct store_snapshot *row, int64_t max_count, int64_t max_bytes,
                           int64_t *ret_count, int64_t *ret_bytes);
/* The copy is made: state "ready", its bytes, the workspace's size limit and
 * the privacy marks as they are after the copy (marks only ever grow: a mark
 * made during the copy makes the snapshot private). */
int store_snapshot_ready(struct store *s, const char *user, const char *id, int64_t bytes, int64_t workspace_size,
                         const char *datasets_json);
/* -ENOENT when user has no snapshot id (or named id). */
int store_snapshot_get(struct store *s, const char *user, const char *id_or_name, struct store_snapshot *ret);
/* user's snapshots (NULL: everyone's), newest first, at most limit. */
int store_snapshot_list(struct store *s, const char *user, size_t limit, struct store_snapshot **ret, size_t *ret_n);
/* Snapshots created before before_ms (and "creating" ones older than
 * stale_ms), oldest first, at most limit (gc). */
int store_snapshot_list_older(struct store *s, int64_t before_ms, int64_t stale_ms, size_t limit,
                              struct store_snapshot **ret, size_t *ret_n);
/* Record (container_id) or clear (NULL) the container the copy froze. */
int store_snapshot_set_paused(struct store *s, const char *user, const char *id, const char *container_id);
/* Every "creating" row's user, id and paused container ("" none), at most
 * limit (a start's recovery). malloc'd. */
struct store_snapshot_unfinished {
        char user[65];
        char id[STORE_SNAPSHOT_ID_MAX + 1];
        char paused[65];
};
int store_snapshot_unfinished(struct store *s, size_t limit, struct store_snapshot_unfinished **ret, size_t *ret_n);
/* -ENOENT when there was none. */
int store_snapshot_delete(struct store *s, const char *user, const char *id);
/* How many snapshots user holds and their bytes. */
int store_snapshot_usage(struct store *s, const char *user, int64_t *ret_count, int64_t *ret_bytes);

#endif
