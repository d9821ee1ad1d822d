/* scripts.h — the script cache (issue 17): a successful run_code is saved
 * for its user under a generated name, script-<UTC time>-<hash12>.<ext>,
 * with a description taken from the code's leading comment, unless the
 * caller says cache: false. The same code (by SHA-256) is never stored
 * twice for a user: a second success points at the first copy. Saved
 * scripts can be run by name, listed and cleared; each user's cache is
 * capped by max_scripts_per_user and max_script_bytes_per_user (overridable
 * per user, quota.h), and no user sees another's.
 *
 * An execution is saved when its end is observed (run_code waiting for it,
 * or get_execution seeing it final): until then its code waits in a
 * bounded table in memory (SCRIPTS_PENDING_MAX runs, SCRIPTS_PENDING_BYTES
 * of code; the oldest goes first). A run whose end is only seen after a
 * daemon restart is not saved.
 *
 * Threads: any; the table has its own lock, never held across the store. */
#ifndef SANDBOXD_SCRIPTS_H
#define SANDBOXD_SCRIPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/store.h"

#define SCRIPTS_PENDING_MAX 512
#define SCRIPTS_PENDING_BYTES (32 << 20)
#define SCRIPTS_DESCRIPTION_MAX 200
#define SCRIPTS_NAME_MAX 80

struct scripts;

/* q: per-user overrides of the caps (quota.h), or NULL for the config's. */
struct quota;
int scripts_new(const struct sbx_config *cfg, struct store *st, struct quota *q, struct scripts **ret);
void scripts_free(struct scripts *s);

/* The description of code: the text of its leading comment (# for python
 * and bash, // or block comments for node; a shebang is skipped), one
 * line, at most SCRIPTS_DESCRIPTION_MAX bytes, "" when there is none. */
void scripts_description(const char *language, const char *code, char ret[SCRIPTS_DESCRIPTION_MAX + 1]);
/* script-<YYYYmmddTHHMMSSZ>-<first 12 hex of hash>.<py|js|sh> */
void scripts_name(const char *language, const char *content_hash, int64_t created_at_ms, char ret[SCRIPTS_NAME_MAX]);
/* A saved name is exactly what scripts_name makes. */
bool scripts_name_valid(const char *name);

/* Save code for user now. 0 with *ret the new script, 1 with *ret the one
 * that already holds this code, -EDQUOT past the user's cap (err says
 * which). ret->code is not set. */
int scripts_save(struct scripts *s, const char *user, const char *language, const char *code, struct store_script *ret,
                 struct sbx_error *err);

/* The fronts' reads and deletes of user's own scripts (so no front reads
 * the store). Each answers 0, or a negative errno with err saying why in
 * the caller's words: -EINVAL a name that scripts_name cannot have made or
 * a filter past SCRIPTS_FILTER_MAX, -ENOENT no such script of user's. */
#define SCRIPTS_FILTER_MAX 256
/* name's language and code (*ret_code malloc'd). */
int scripts_code(struct scripts *s, const char *user, const char *name, char ret_language[16], char **ret_code,
                 struct sbx_error *err);
/* At most limit of user's scripts, newest first, whose name or description
 * holds filter (NULL or "": all; *ret malloc'd, codes not set), and user's
 * totals. */
int scripts_list(struct scripts *s, const char *user, const char *filter, size_t limit, struct store_script **ret,
                 size_t *ret_n, int64_t *ret_count, int64_t *ret_bytes, struct sbx_error *err);
/* Delete user's script name, or all of user's scripts when name is NULL. */
int scripts_delete(struct scripts *s, const char *user, const char *name, int64_t *ret_removed, struct sbx_error *err);

/* A run_code started: keep its code until scripts_settle. */
void scripts_note_run(struct scripts *s, const char *user, const char *exec_id, const char *language, const char *code);
/* The run ended (success: completed with exit code 0). 0 with *ret when it
 * is (or was already) saved, -EDQUOT with err when the cap refused it,
 * -ENOENT when there is nothing to say (not noted, failed, or not user's). */
int scripts_settle(struct scripts *s, const char *user, const char *exec_id, bool success, struct store_script *ret,
                   struct sbx_error *err);

/* The script cache per user: a cache, so its bounds only keep it small. */
#define SCRIPTS_MAX_PER_USER 200
#define SCRIPTS_MAX_BYTES_PER_USER (INT64_C(16) << 20)

#endif
