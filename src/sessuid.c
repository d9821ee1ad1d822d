/* sessuid.c — the host uid of each session: the range check against host
 * accounts, assignment through the store, and handing a workspace tree to
 * its uid (what and why: sessuid.h).
 *
 * No state, no locks. sessuid_check_host uses getpwent/getgrent, which
 * share one iteration per process: it runs at start and from
 * --check-config, before any thread that could look accounts up. */
#include "sandboxd/sessuid.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/store.h"

int sessuid_check_subid_file(const char *path, int64_t lo, int64_t hi, struct sbx_error *err)
{
        FILE *f = fopen(path, "re");
        char line[512];
        unsigned lineno = 0;

        if (!f)
                return errno == ENOENT ? 0 : sbx_error_set(err, -errno, 0, "cannot read %s: %m", path);
        while (fgets(line, sizeof(line), f)) {
                char name[256];
                long long start, count;

                lineno++;
                if (sscanf(line, " %255[^:#\n]:%lld:%lld", name, &start, &count) != 3 || count <= 0 || start < 0)
                        continue; /* comments and what shadow's tools would not use either */
                if (start <= hi && start + count - 1 >= lo) {
                        fclose(f);
                        return sbx_error_set(err, -EEXIST, 0,
                                             "sandbox_uid_range %" PRId64 "-%" PRId64
                                             " overlaps the subordinate ids %lld-%lld of '%s' (%s line %u): pick a "
                                             "range no account, group or subordinate-id range uses",
                                             lo, hi, start, start + count - 1, name, path, lineno);
                }
        }
        fclose(f);
        return 0;
}

int sessuid_check_host(const struct sbx_config *cfg, struct sbx_error *err)
{
        int64_t lo = cfg->sandbox_uid_lo, hi = cfg->sandbox_uid_hi;
        struct passwd *pw;
        struct group *gr;
        int r = 0;

        setpwent();
        while ((pw = getpwent()))
                if ((int64_t)pw->pw_uid >= lo && (int64_t)pw->pw_uid <= hi) {
                        r = sbx_error_set(err, -EEXIST, 0,
                                          "sandbox_uid_range %" PRId64 "-%" PRId64
                                          " holds uid %u of the host account '%s' (passwd): pick a range no "
                                          "account, group or subordinate-id range uses",
                                          lo, hi, (unsigned)pw->pw_uid, pw->pw_name);
                        break;
                }
        endpwent();
        if (r < 0)
                return r;
        setgrent();
        while ((gr = getgrent()))
                if ((int64_t)gr->gr_gid >= lo && (int64_t)gr->gr_gid <= hi) {
                        r = sbx_error_set(err, -EEXIST, 0,
                                          "sandbox_uid_range %" PRId64 "-%" PRId64
                                          " holds gid %u of the host group '%s' (group): sessions use their uid as "
                                          "their gid too; pick a range no account, group or subordinate-id range "
                                          "uses",
                                          lo, hi, (unsigned)gr->gr_gid, gr->gr_name);
                        break;
                }
        endgrent();
        if (r < 0)
                return r;
        r = sessuid_check_subid_file("/etc/subuid", lo, hi, err);
        if (r == 0)
                r = sessuid_check_subid_file("/etc/subgid", lo, hi, err);
        return r;
}

int sessuid_get_or_assign(struct store *st, const struct sbx_config *cfg, const char *user, const char *session,
                          uid_t *ret_uid, struct sbx_error *err)
{
        int64_t uid;
        int r = store_uid_assign(st, user, session, cfg->sandbox_uid_lo, cfg->sandbox_uid_hi, sbx_wall_ms(), &uid);

        if (r == -ENOSPC)
                return sbx_error_set(err, -ENOSPC, 0,
                                     "every uid of sandbox_uid_range %d-%d is held by a session's workspace: purge "
                                     "sessions (destroy with purge, or --gc with gc.workspace_retention) or widen it",
                                     cfg->sandbox_uid_lo, cfg->sandbox_uid_hi);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the session's uid: %s", strerror(-r));
        /* a row from another range (the config changed) still stands: it owns the workspace */
        if (uid < 1 || uid > INT32_MAX)
                return sbx_error_set(err, -ERANGE, 0, "the recorded uid %" PRId64 " is not a valid uid", uid);
        *ret_uid = (uid_t)uid;
        return 0;
}

int sessuid_lookup(struct store *st, const char *user, const char *session, uid_t *ret_uid)
{
        int64_t uid;
        int r = store_uid_get(st, user, session, &uid);

        if (r < 0)
                return r;
        if (uid < 1 || uid > INT32_MAX)
                return -ERANGE;
        *ret_uid = (uid_t)uid;
        return 0;
}

int sessuid_release(struct store *st, const char *user, const char *session)
{
        int r = store_uid_release(st, user, session);
        return r == -ENOENT ? 0 : r;
}

/* ---- handing a tree over ---- */

struct own_walk {
        uid_t from_uid, to;
        gid_t from_gid;
        dev_t dev;
        struct sessuid_own_stats st;
};

/* Change fd's owner where it is the old one's; fd is O_PATH or a real open. */
static int own_fd(struct own_walk *w, int fd, const struct stat *st)
{
        uid_t u = st->st_uid == w->from_uid ? w->to : (uid_t)-1;
        gid_t g = st->st_gid == w->from_gid && w->from_gid != 0 ? (gid_t)w->to : (gid_t)-1;

        if (u == (uid_t)-1 && g == (gid_t)-1)
                return 0;
        if (fchownat(fd, "", u, g, AT_EMPTY_PATH) < 0)
                return -errno;
        w->st.changed++;
        return 0;
}

static int own_dir(struct own_walk *w, int dfd, int depth)
{
        int r = 0;
        DIR *dir;
        struct dirent *de;

        if (depth >= SESSUID_OWN_MAX_DEPTH) {
                w->st.cut = true;
                return 0;
        }
        dir = sbx_opendir_dup(dfd);
        if (!dir)
                return -errno;
        while ((de = readdir(dir))) {
                _cleanup_close_ int fd = -1;
                struct stat st;
                int k;

                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (w->st.visited >= SESSUID_OWN_MAX_ENTRIES) {
                        w->st.cut = true;
                        break;
                }
                w->st.visited++;
                /* O_PATH|O_NOFOLLOW names the entry itself, a symlink included */
                fd = openat(dfd, de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || fstat(fd, &st) < 0) {
                        if (errno != ENOENT)
                                r = -errno;
                        continue;
                }
                if (S_ISDIR(st.st_mode) && st.st_dev == w->dev) {
                        _cleanup_close_ int sub =
                                openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        struct stat again;
                        /* the same directory as the O_PATH one, or it changed under us: leave it */
                        if (sub < 0 || fstat(sub, &again) < 0 || again.st_ino != st.st_ino || again.st_dev != st.st_dev)
                                continue;
                        k = own_dir(w, sub, depth + 1);
                        if (k < 0)
                                r = k;
                }
                k = own_fd(w, fd, &st);
                if (k < 0)
                        r = k;
        }
        closedir(dir);
        return r;
}

int sessuid_own_tree(int dirfd, uid_t uid, struct sessuid_own_stats *ret_stats)
{
        struct own_walk w = {.to = uid};
        struct stat st;
        int r = 0;

        if (fstat(dirfd, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return -ENOTDIR;
        w.from_uid = st.st_uid;
        w.from_gid = st.st_gid;
        w.dev = st.st_dev;
        /* Root's entries are never given away; a root-owned directory (a loop
         * mount point) has nothing of the old owner below it. */
        if (st.st_uid != uid && st.st_uid != 0)
                r = own_dir(&w, dirfd, 0);
        if ((st.st_uid != uid || st.st_gid != (gid_t)uid) && fchown(dirfd, uid, uid) < 0)
                r = -errno;
        if (ret_stats)
                *ret_stats = w.st;
        return r;
}
