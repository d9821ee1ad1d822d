/* runner_files.c — workspace files for the daemon (RP_FILE_*; see
 * runner_proto.h).
 *
 * Two layers, because each alone is not enough:
 *   - ws_resolve() walks the path the way the tenant's own tools would
 *     (lstat, readlink) and answers honestly: EPERM as soon as the walk
 *     leads outside /workspace (an absolute symlink elsewhere, `..` above
 *     /workspace, /proc/self/root, a dangling link to /tmp/x). This is what
 *     the old readlink -f scripts answered.
 *   - every open then goes through ws_open(): openat2(RESOLVE_IN_ROOT |
 *     RESOLVE_NO_MAGICLINKS) from an fd of /workspace, so whatever a tenant
 *     plants between the walk and the open resolves inside /workspace at
 *     worst. The walk gives the errors, openat2 is the confinement. Where
 *     the kernel lacks openat2 (ENOSYS) the resolved path, which holds no
 *     symlink, is walked component by component with O_NOFOLLOW.
 * Hand-written: no Debian library resolves a path confined to a directory
 * (libpathrs is not packaged), and the runner must stay libc-only.
 *
 * The runner runs as the sandbox's own uid, so it reaches nothing the
 * tenant cannot already reach; the point is that these calls only ever
 * touch /workspace and say so truthfully. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runner_ext.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef RESOLVE_NO_MAGICLINKS
#define RESOLVE_NO_MAGICLINKS 0x02
#endif
#ifndef RESOLVE_IN_ROOT
#define RESOLVE_IN_ROOT 0x10
#endif

/* musl has no wrapper and no header for it */
struct sbx_open_how {
        uint64_t flags;
        uint64_t mode;
        uint64_t resolve;
};

#define WS "/workspace"
#define WS_LEN (sizeof(WS) - 1)
#define MAX_LINKS 40
#define MAX_WRITES 8

/* ---- resolution ---- */

static bool under_ws(const char *p)
{
        return strncmp(p, WS, WS_LEN) == 0 && (p[WS_LEN] == '\0' || p[WS_LEN] == '/');
}

int ws_resolve(const char *path, bool allow_missing, char *ret, size_t size, int *ret_missing)
{
        char res[PATH_MAX], todo[2 * PATH_MAX], next[2 * PATH_MAX];
        size_t rl = WS_LEN;
        int missing = -1, links = 0;
        char *p;

        if (!under_ws(path) || strlen(path) >= sizeof(todo))
                return -EPERM;
        memcpy(res, WS, WS_LEN + 1);
        strcpy(todo, path + WS_LEN);
        p = todo;
        for (;;) {
                struct stat st;
                size_t n, prev;
                char *e;

                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                e = strchr(p, '/');
                n = e ? (size_t)(e - p) : strlen(p);
                if (n == 1 && p[0] == '.') {
                        p += n;
                        continue;
                }
                if (n == 2 && p[0] == '.' && p[1] == '.') {
                        if (rl == WS_LEN)
                                return -EPERM; /* above /workspace */
                        while (rl > 0 && res[rl] != '/')
                                rl--;
                        res[rl] = '\0';
                        if (missing >= 0 && (int)rl <= missing)
                                missing = -1;
                        p += n;
                        continue;
                }
                if (n > NAME_MAX || rl + 1 + n >= sizeof(res))
                        return -ENAMETOOLONG;
                prev = rl;
                res[rl++] = '/';
                memcpy(res + rl, p, n);
                rl += n;
                res[rl] = '\0';
                p += n;
                if (missing >= 0)
                        continue; /* below a missing directory nothing exists */
                if (lstat(res, &st) < 0) {
                        if (errno != ENOENT || !allow_missing)
                                return -errno;
                        missing = (int)prev;
                        continue;
                }
                if (S_ISLNK(st.st_mode)) {
                        char target[PATH_MAX];
                        const char *t = target;
                        ssize_t k = readlink(res, target, sizeof(target) - 1);
                        if (k < 0)
                                return -errno;
                        if (k == 0)
                                return -ENOENT;
                        target[k] = '\0';
                        if (++links > MAX_LINKS)
                                return -ELOOP;
                        rl = prev;
                        res[rl] = '\0';
                        if (target[0] == '/') {
                                if (!under_ws(target))
                                        return -EPERM; /* /, /etc, /proc/self/root, ... */
                                rl = WS_LEN;
                                res[rl] = '\0';
                                t = target + WS_LEN;
                        }
                        if ((size_t)snprintf(next, sizeof(next), "%s/%s", t, p) >= sizeof(next))
                                return -ENAMETOOLONG;
                        strcpy(todo, next);
                        p = todo;
                        continue;
                }
                if (!S_ISDIR(st.st_mode)) {
                        const char *q = p;
                        while (*q == '/')
                                q++;
                        if (*q)
                                return -ENOTDIR;
                }
        }
        if (rl >= size)
                return -ENAMETOOLONG;
        memcpy(ret, res, rl + 1);
        if (ret_missing)
                *ret_missing = missing;
        return 0;
}

/* ---- confined opens ---- */

/* Without openat2: the resolved path has no symlink, so refusing every
 * symlink on the way (O_NOFOLLOW) opens exactly it. */
static int walk_open(int root, const char *rel, int flags, mode_t mode)
{
        char buf[PATH_MAX], *save = NULL, *comp, *nextc;
        int cur = dup(root);

        if (cur < 0)
                return -errno;
        if (strlen(rel) >= sizeof(buf)) {
                close(cur);
                return -ENAMETOOLONG;
        }
        strcpy(buf, rel);
        comp = strtok_r(buf, "/", &save);
        if (!comp || strcmp(comp, ".") == 0) {
                int fd = openat(cur, ".", flags | O_CLOEXEC, mode);
                close(cur);
                return fd < 0 ? -errno : fd;
        }
        for (; comp; comp = nextc) {
                int fd;
                nextc = strtok_r(NULL, "/", &save);
                if (strcmp(comp, "..") == 0 || strcmp(comp, ".") == 0) {
                        close(cur);
                        return -EPERM;
                }
                if (nextc)
                        fd = openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                else
                        fd = openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
                close(cur);
                if (fd < 0)
                        return -errno;
                cur = fd;
        }
        return cur;
}

int ws_open(const char *resolved, int flags, mode_t mode)
{
        const char *rel;
        int root, fd = -1;

        if (!under_ws(resolved))
                return -EPERM;
        rel = resolved + WS_LEN;
        while (*rel == '/')
                rel++;
        if (!*rel)
                rel = ".";
        root = open(WS, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return -errno;
        for (int tries = 0; tries < 8; tries++) {
                struct sbx_open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                                           .mode = (flags & O_CREAT) ? mode : 0,
                                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
                fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how));
                if (fd >= 0 || errno != EAGAIN)
                        break; /* EAGAIN: a rename raced the lookup; try again */
        }
        if (fd < 0 && errno == ENOSYS)
                fd = walk_open(root, rel, flags, mode);
        else if (fd < 0)
                fd = -errno;
        close(root);
        return fd;
}

int ws_open_dir(const char *resolved, int missing, mode_t mode)
{
        char prefix[PATH_MAX], rest[PATH_MAX], *save = NULL, *comp;
        int fd;

        if (missing < 0)
                return ws_open(resolved, O_RDONLY | O_DIRECTORY, 0);
        if ((size_t)missing >= sizeof(prefix) || strlen(resolved) >= sizeof(rest))
                return -ENAMETOOLONG;
        memcpy(prefix, resolved, (size_t)missing);
        prefix[missing] = '\0';
        strcpy(rest, resolved + missing);
        fd = ws_open(prefix, O_RDONLY | O_DIRECTORY, 0);
        for (comp = strtok_r(rest, "/", &save); fd >= 0 && comp; comp = strtok_r(NULL, "/", &save)) {
                int sub;
                if (strcmp(comp, "..") == 0 || strcmp(comp, ".") == 0) {
                        close(fd);
                        return -EPERM;
                }
                if (mkdirat(fd, comp, mode) < 0 && errno != EEXIST) {
                        int e = -errno;
                        close(fd);
                        return e;
                }
                sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                close(fd);
                fd = sub < 0 ? -errno : sub;
        }
        return fd;
}

/* ---- replies ---- */

static void reply(uint32_t tag, int err, uint32_t flags, uint64_t size, uint32_t next, const void *data, size_t n)
{
        struct rp_file_reply r = {.err = err < 0 ? -err : err, .flags = flags, .size = size, .next = next};
        send_frame(RP_FILE_REPLY, 0, tag, &r, sizeof(r), data, n);
}

/* An openat2 refusal means a symlink planted after the walk: outside. */
static int open_err(int e)
{
        return e == -ELOOP || e == -EXDEV ? -EPERM : e;
}

/* ---- read ---- */

/* Open an existing path under /workspace; on failure the reply is sent and -1 returned. */
static int open_existing(uint32_t tag, const char *path, int flags)
{
        char res[PATH_MAX];
        int fd, r;

        r = ws_resolve(path, false, res, sizeof(res), NULL);
        if (r < 0) {
                reply(tag, r, 0, 0, 0, NULL, 0);
                return -1;
        }
        fd = ws_open(res, flags, 0);
        if (fd < 0) {
                reply(tag, open_err(fd), 0, 0, 0, NULL, 0);
                return -1;
        }
        return fd;
}

static void file_read(uint32_t tag, const struct rp_file_req *rq, const char *path)
{
        static char buf[RP_CHUNK];
        struct stat st = {0};
        size_t want, got = 0, room;
        int fd;

        /* O_NONBLOCK: opening a FIFO must not wait for a writer */
        fd = open_existing(tag, path, O_RDONLY | O_NONBLOCK);
        if (fd < 0)
                return;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                reply(tag, S_ISDIR(st.st_mode) ? EISDIR : EINVAL, 0, 0, 0, NULL, 0);
                close(fd);
                return;
        }
        room = out_reply_room();
        room = room > sizeof(struct rp_file_reply) ? room - sizeof(struct rp_file_reply) : 0;
        want = rq->length < RP_CHUNK ? (size_t)rq->length : RP_CHUNK;
        if (want > room)
                want = room; /* the daemon asks again for the rest */
        while (got < want && rq->offset + got < (uint64_t)st.st_size) {
                ssize_t n = pread(fd, buf + got, want - got, (off_t)(rq->offset + got));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        reply(tag, errno, 0, 0, 0, NULL, 0);
                        close(fd);
                        return;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        close(fd);
        reply(tag, 0, 0, (uint64_t)st.st_size, 0, buf, got);
}

/* ---- write ---- */

struct fwrite {
        bool used, failed;
        uint32_t tag;
        int dirfd, fd;
        char tmp[32];
        char base[NAME_MAX + 1];
        uint64_t total, got;
};

static struct fwrite writes[MAX_WRITES];

static void fw_free(struct fwrite *w, bool unlink_tmp)
{
        if (w->fd >= 0)
                close(w->fd);
        if (unlink_tmp && w->tmp[0])
                (void)unlinkat(w->dirfd, w->tmp, 0);
        if (w->dirfd >= 0)
                close(w->dirfd);
        memset(w, 0, sizeof(*w));
        w->fd = w->dirfd = -1;
}

static void fw_fail(struct fwrite *w, int err)
{
        reply(w->tag, err, 0, 0, 0, NULL, 0);
        uint32_t tag = w->tag;
        fw_free(w, true);
        /* keep the slot until RP_FW_END so the rest of its bytes are skipped */
        w->used = w->failed = true;
        w->tag = tag;
}

static void split_path(const char *path, char *dir, size_t dsize, char *base, size_t bsize)
{
        const char *slash = strrchr(path, '/');
        size_t dl = (size_t)(slash - path);

        snprintf(dir, dsize, "%.*s", (int)dl, path);
        snprintf(base, bsize, "%s", slash + 1);
}

/* Where the bytes go: the parent made (0755, never through a symlink),
 * the target resolved when it is a symlink. Returns the directory fd. */
static int fw_target(const char *path, char base[NAME_MAX + 1])
{
        char dir[PATH_MAX], rd[PATH_MAX], full[PATH_MAX + NAME_MAX + 2];
        struct stat st;
        int missing, dfd, r;

        if (strcmp(path, WS) == 0)
                return -EISDIR;
        split_path(path, dir, sizeof(dir), base, NAME_MAX + 1);
        if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
                return -EINVAL;
        r = ws_resolve(dir, true, rd, sizeof(rd), &missing);
        if (r < 0)
                return r;
        dfd = ws_open_dir(rd, missing, 0755);
        if (dfd < 0)
                return open_err(dfd);
        if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                int e = errno;
                if (e == ENOENT)
                        return dfd;
                close(dfd);
                return -e;
        }
        if (S_ISDIR(st.st_mode)) {
                close(dfd);
                return -EISDIR;
        }
        if (!S_ISLNK(st.st_mode))
                return dfd;
        /* a symlink: write its target (inside /workspace), replaced by rename */
        close(dfd);
        snprintf(full, sizeof(full), "%s/%s", rd, base);
        r = ws_resolve(full, true, rd, sizeof(rd), &missing);
        if (r < 0)
                return r;
        if (strcmp(rd, WS) == 0)
                return -EISDIR;
        if (missing >= 0 && strchr(rd + missing + 1, '/'))
                return -ENOENT; /* the link's directory does not exist */
        split_path(rd, dir, sizeof(dir), base, NAME_MAX + 1);
        dfd = ws_open(dir, O_RDONLY | O_DIRECTORY, 0);
        if (dfd < 0)
                return open_err(dfd);
        if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
                close(dfd);
                return -EISDIR;
        }
        return dfd;
}

static void fw_data(struct fwrite *w, const unsigned char *p, size_t n)
{
        if (w->got + n > w->total) {
                fw_fail(w, EINVAL);
                return;
        }
        while (n > 0) {
                ssize_t k = write(w->fd, p, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        fw_fail(w, k < 0 ? errno : EIO);
                        return;
                }
                p += k;
                n -= (size_t)k;
                w->got += (uint64_t)k;
        }
}

static void file_write(const struct rp_hdr *h, const unsigned char *p)
{
        struct fwrite *w = NULL;
        size_t off = 0;

        for (int i = 0; i < MAX_WRITES; i++)
                if (writes[i].used && writes[i].tag == h->tag)
                        w = &writes[i];
        if (h->flags & RP_FW_BEGIN) {
                struct rp_file_req rq;
                const char *path = (const char *)p + sizeof(rq), *z;
                int dfd;

                if (w)
                        fw_free(w, true);
                for (int i = 0; i < MAX_WRITES && !w; i++)
                        if (!writes[i].used)
                                w = &writes[i];
                if (!w) {
                        reply(h->tag, EBUSY, 0, 0, 0, NULL, 0);
                        return;
                }
                memset(w, 0, sizeof(*w));
                w->used = true;
                w->tag = h->tag;
                w->fd = w->dirfd = -1;
                if (h->len < sizeof(rq) + 2 || !(z = memchr(path, '\0', h->len - sizeof(rq)))) {
                        fw_fail(w, EINVAL);
                        goto end;
                }
                memcpy(&rq, p, sizeof(rq));
                w->total = rq.length;
                off = (size_t)(z + 1 - (const char *)p);
                dfd = fw_target(path, w->base);
                if (dfd < 0) {
                        fw_fail(w, -dfd);
                        goto end;
                }
                w->dirfd = dfd;
                for (int tries = 0; tries < 16 && w->fd < 0; tries++) {
                        uint64_t rnd = (uint64_t)now_ms() * 2654435761u + (uint64_t)tries;
                        if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) < 0) {
                                /* keep the clock's: O_EXCL below still refuses a clash */
                        }
                        snprintf(w->tmp, sizeof(w->tmp), ".sbx-write.%012llx",
                                 (unsigned long long)(rnd & 0xffffffffffffull));
                        w->fd = openat(dfd, w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                        if (w->fd < 0 && errno != EEXIST)
                                break;
                }
                if (w->fd < 0) {
                        w->tmp[0] = '\0';
                        fw_fail(w, errno == EEXIST ? EIO : errno);
                        goto end;
                }
                (void)fchmod(w->fd, 0644);
        }
        if (!w)
                return; /* bytes of a write that was dropped (disconnect): nothing to say */
        if (!w->failed && h->len > off)
                fw_data(w, p + off, h->len - off);
end:
        if (!(h->flags & RP_FW_END))
                return;
        if (w->failed) {
                memset(w, 0, sizeof(*w));
                w->fd = w->dirfd = -1;
                return;
        }
        if (w->got != w->total) {
                fw_fail(w, EIO);
                memset(w, 0, sizeof(*w));
                w->fd = w->dirfd = -1;
                return;
        }
        if (close(w->fd) < 0) {
                w->fd = -1;
                fw_fail(w, errno);
                memset(w, 0, sizeof(*w));
                w->fd = w->dirfd = -1;
                return;
        }
        w->fd = -1;
        /* rename replaces a symlink planted meanwhile instead of writing through it */
        if (renameat(w->dirfd, w->tmp, w->dirfd, w->base) < 0) {
                int e = errno;
                fw_fail(w, e == EISDIR ? EISDIR : e);
                memset(w, 0, sizeof(*w));
                w->fd = w->dirfd = -1;
                return;
        }
        w->tmp[0] = '\0';
        reply(w->tag, 0, 0, w->got, 0, NULL, 0);
        fw_free(w, false);
}

void files_disconnected(void)
{
        for (int i = 0; i < MAX_WRITES; i++)
                if (writes[i].used)
                        fw_free(&writes[i], true);
}

/* ---- list ---- */

struct lent {
        char name[NAME_MAX + 1];
};

static int lent_cmp(const void *a, const void *b)
{
        return strcmp(((const struct lent *)a)->name, ((const struct lent *)b)->name);
}

static void file_list(uint32_t tag, const struct rp_file_req *rq, const char *path)
{
        static struct lent ents[RP_FILE_LIST_MAX + 1];
        static unsigned char buf[RP_CHUNK];
        size_t n = 0, len = 0, i, room;
        bool truncated = false;
        struct dirent *de;
        DIR *d;
        int fd, dfd;

        fd = open_existing(tag, path, O_RDONLY | O_DIRECTORY);
        if (fd < 0)
                return;
        dfd = dup(fd);
        d = fdopendir(fd);
        if (!d || dfd < 0) {
                reply(tag, errno, 0, 0, 0, NULL, 0);
                if (d)
                        closedir(d);
                else
                        close(fd);
                if (dfd >= 0)
                        close(dfd);
                return;
        }
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (n == RP_FILE_LIST_MAX) {
                        truncated = true;
                        break;
                }
                snprintf(ents[n++].name, sizeof(ents[0].name), "%s", de->d_name);
        }
        closedir(d);
        qsort(ents, n, sizeof(ents[0]), lent_cmp);
        room = out_reply_room();
        room = room > sizeof(struct rp_file_reply) ? room - sizeof(struct rp_file_reply) : 0;
        if (room > sizeof(buf))
                room = sizeof(buf);
        for (i = rq->offset < n ? (size_t)rq->offset : n; i < n; i++) {
                struct stat st;
                size_t nl = strlen(ents[i].name);
                int64_t size = 0;
                uint16_t l16 = (uint16_t)nl;
                char type = 'o';

                if (len + 1 + 8 + 2 + nl > room)
                        break;
                if (fstatat(dfd, ents[i].name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                        type = S_ISLNK(st.st_mode) ? 'l' : S_ISREG(st.st_mode) ? 'f' : S_ISDIR(st.st_mode) ? 'd' : 'o';
                        if (type == 'l' || type == 'f')
                                size = (int64_t)st.st_size;
                }
                buf[len++] = (unsigned char)type;
                memcpy(buf + len, &size, 8);
                len += 8;
                memcpy(buf + len, &l16, 2);
                len += 2;
                memcpy(buf + len, ents[i].name, nl);
                len += nl;
        }
        close(dfd);
        if (i < n && i == (rq->offset < n ? (size_t)rq->offset : n)) {
                reply(tag, EAGAIN, 0, 0, 0, NULL, 0); /* no room for one entry now: ask again */
                return;
        }
        reply(tag, 0, truncated ? RP_FR_TRUNCATED : 0, n, i < n ? (uint32_t)i : 0, buf, len);
}

/* ---- mkdir, remove, move ---- */

/* The parent of path opened (it must exist; resolved inside /workspace),
 * its last component in base. /workspace itself has no parent: EINVAL. */
static int open_parent(const char *path, char base[NAME_MAX + 1], bool make)
{
        char dir[PATH_MAX], rd[PATH_MAX];
        int missing = -1, r;

        if (!under_ws(path) || strcmp(path, WS) == 0)
                return -EINVAL;
        split_path(path, dir, sizeof(dir), base, NAME_MAX + 1);
        if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
                return -EINVAL;
        r = ws_resolve(dir, make, rd, sizeof(rd), &missing);
        if (r < 0)
                return r;
        r = ws_open_dir(rd, make ? missing : -1, 0755);
        return r < 0 ? open_err(r) : r;
}

static void file_mkdir(uint32_t tag, const char *path)
{
        char base[NAME_MAX + 1];
        int dfd = open_parent(path, base, true);

        if (dfd >= 0) {
                int r = mkdirat(dfd, base, 0755) < 0 ? errno : 0;
                close(dfd);
                reply(tag, r, 0, 0, 0, NULL, 0);
                return;
        }
        reply(tag, strcmp(path, WS) == 0 ? EEXIST : -dfd, 0, 0, 0, NULL, 0);
}

/* Everything in the directory fd (taken), then nothing follows a link. */
static int remove_tree(int fd, int depth)
{
        DIR *d = fdopendir(fd);
        struct dirent *de;
        int r = 0;

        if (!d) {
                r = -errno;
                close(fd);
                return r;
        }
        while (r == 0 && (de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (unlinkat(dirfd(d), de->d_name, 0) == 0)
                        continue;
                if (errno != EISDIR && errno != EPERM) {
                        r = -errno;
                        break;
                }
                if (depth >= RP_REMOVE_DEPTH) {
                        r = -ELOOP;
                        break;
                }
                int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                r = sub < 0 ? -errno : remove_tree(sub, depth + 1);
                if (r == 0 && unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0)
                        r = -errno;
                if (r == 0)
                        rewinddir(d);
        }
        closedir(d);
        return r;
}

static void file_remove(uint32_t tag, const char *path)
{
        char base[NAME_MAX + 1];
        int dfd = open_parent(path, base, false), r = 0;

        if (dfd < 0) {
                reply(tag, dfd, 0, 0, 0, NULL, 0);
                return;
        }
        if (unlinkat(dfd, base, 0) < 0) {
                r = -errno;
                if (r == -EISDIR || r == -EPERM) {
                        int sub = openat(dfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        r = sub < 0 ? -errno : remove_tree(sub, 1);
                        if (r == 0 && unlinkat(dfd, base, AT_REMOVEDIR) < 0)
                                r = -errno;
                }
        }
        close(dfd);
        reply(tag, r, 0, 0, 0, NULL, 0);
}

static void file_move(uint32_t tag, const char *src, const char *dst)
{
        char sbase[NAME_MAX + 1], dbase[NAME_MAX + 1];
        int sfd = open_parent(src, sbase, false), dfd, r = 0;

        if (sfd < 0) {
                reply(tag, sfd, 0, 0, 0, NULL, 0);
                return;
        }
        dfd = open_parent(dst, dbase, true);
        if (dfd < 0) {
                close(sfd);
                reply(tag, dfd, 0, 0, 0, NULL, 0);
                return;
        }
        if (renameat(sfd, sbase, dfd, dbase) < 0)
                r = errno;
        close(sfd);
        close(dfd);
        reply(tag, r, 0, 0, 0, NULL, 0);
}

/* ---- dispatch ---- */

void files_frame(const struct rp_hdr *h, const unsigned char *p)
{
        struct rp_file_req rq;
        const char *path;

        if (h->type == RP_FILE_WRITE) {
                file_write(h, p);
                return;
        }
        if (h->len < sizeof(rq) + 2 || p[h->len - 1] != '\0') {
                reply(h->tag, EINVAL, 0, 0, 0, NULL, 0);
                return;
        }
        memcpy(&rq, p, sizeof(rq));
        path = (const char *)p + sizeof(rq);
        if (h->type == RP_FILE_READ) {
                file_read(h->tag, &rq, path);
        } else if (h->type == RP_FILE_LIST) {
                file_list(h->tag, &rq, path);
        } else if (h->type == RP_FILE_MKDIR) {
                file_mkdir(h->tag, path);
        } else if (h->type == RP_FILE_REMOVE) {
                file_remove(h->tag, path);
        } else {
                /* MOVE: the source, then the destination */
                const char *z = memchr(path, '\0', h->len - sizeof(rq));
                const char *dst = z + 1;
                if (dst >= (const char *)p + h->len || !memchr(dst, '\0', (size_t)((const char *)p + h->len - dst))) {
                        reply(h->tag, EINVAL, 0, 0, 0, NULL, 0);
                        return;
                }
                file_move(h->tag, path, dst);
        }
}
