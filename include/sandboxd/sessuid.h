/* sessuid.h — the host uid of each session (issue 18 item 3).
 *
 * Every session gets a uid of its own from sandbox_uid_range, used as uid
 * and gid alike: its containers run as it (the runner and everything it
 * starts), and it owns the session's workspace on the host. A breakout from
 * one session therefore lands as a uid that owns nothing but that session's
 * workspace (mode 0700) and that the kernel does not let signal or ptrace
 * another session's processes. No host account, group or subordinate-id
 * range may hold a uid of the range: sessuid_check_host refuses the start.
 *
 * The uid is recorded in the store (session_uids) like the port block: the
 * first container of a session assigns it, every later one (recreation,
 * restart, the privacy ratchet) reuses it, and it is released only when the
 * workspace is purged (session_destroy with purge, --gc). Uids are handed
 * out round the range (migration 0016), so a released one is the last to
 * come back.
 *
 * No state of its own and no locks: the store serialises assignments. */
#ifndef SANDBOXD_SESSUID_H
#define SANDBOXD_SESSUID_H

#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct store;

/* Does any host account hold a uid of sandbox_uid_range? Walks the passwd
 * and group databases (getpwent/getgrent: NSS included) and /etc/subuid and
 * /etc/subgid. -EEXIST with err naming the first clash; 0 when none. */
int sessuid_check_host(const struct sbx_config *cfg, struct sbx_error *err);

/* The subordinate-id part alone, on one file of `name:start:count` lines
 * (what names it in the message: "/etc/subuid"). A missing file is 0. */
int sessuid_check_subid_file(const char *path, int64_t lo, int64_t hi, struct sbx_error *err);

/* The uid of user:session, assigned from the range if it has none yet.
 * -ENOSPC (err says so) when every uid of the range is held. */
int sessuid_get_or_assign(struct store *st, const struct sbx_config *cfg, const char *user, const char *session,
                          uid_t *ret_uid, struct sbx_error *err);

/* The recorded uid of user:session; -ENOENT when it has none. */
int sessuid_lookup(struct store *st, const char *user, const char *session, uid_t *ret_uid);

/* Forget the uid of user:session (its workspace is gone). 0 also when it
 * had none. */
int sessuid_release(struct store *st, const char *user, const char *session);

/* Entries sessuid_own_tree looks at, at most, and how deep it goes. */
#define SESSUID_OWN_MAX_ENTRIES 1000000
#define SESSUID_OWN_MAX_DEPTH 256

struct sessuid_own_stats {
        uint64_t visited; /* entries looked at below the root */
        uint64_t changed; /* entries given to the new owner (the root not counted) */
        bool cut;         /* stopped at SESSUID_OWN_MAX_ENTRIES or _DEPTH: some keep the old owner */
};

/* Give the directory dirfd and what was its owner's below it to uid:uid.
 * A workspace made before per-session uids (owned by the image's uid 1000)
 * or under an earlier uid moves over whole on its first use. Nothing is
 * followed: every entry is opened O_NOFOLLOW (O_PATH for non-directories)
 * under its parent's fd and changed through that fd, so a planted symlink
 * is changed itself, never its target; mount points are not crossed; only
 * entries owned by the old uid (gid) change. A root-owned dirfd (a loop
 * mount point) changes alone. Bounded by SESSUID_OWN_MAX_ENTRIES and
 * _DEPTH (stats->cut; docs/security.md, "A host uid per session", says how to finish
 * by hand). dirfd itself changes last. Returns 0 or -errno. */
int sessuid_own_tree(int dirfd, uid_t uid, struct sessuid_own_stats *ret_stats);

#endif
