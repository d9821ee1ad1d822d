/* runner_watch.c — directory watchers over inotify (runner_watch.h).
 *
 * Every directory is opened with O_NOFOLLOW one component at a time from
 * the watched root's fd and watched through /proc/self/fd/N, so the watch
 * is on the very directory opened: a symlink planted in the tree is never
 * followed out of it. Each watch descriptor maps to its path relative to
 * the root; a directory moved away drops its watches (the subtree's paths
 * would be stale), one moved or made inside is walked and watched afresh.
 * inotify's kinds map to E2B's as fsnotify maps them for envd: IN_CREATE
 * and IN_MOVED_TO create, IN_MODIFY write, IN_DELETE remove, IN_MOVED_FROM
 * rename, IN_ATTRIB chmod. */
#include "runner_watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define RWATCH_MASK                                                                                                    \
        (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_ONLYDIR | IN_EXCL_UNLINK)

struct rwatch_dir {
        int wd;
        char *path; /* relative to the root; "" is the root */
};

struct rwatch_item {
        enum rwatch_kind kind;
        char *name;
};

struct rwatch {
        int ifd;
        int rootfd; /* a dup of the caller's */
        bool recursive;
        bool overflow;
        struct rwatch_dir *dirs;
        size_t ndirs;
        struct rwatch_item q[RWATCH_QUEUE_MAX];
        size_t q_head, q_len;
};

static struct rwatch_dir *dir_by_wd(struct rwatch *w, int wd)
{
        for (size_t i = 0; i < w->ndirs; i++)
                if (w->dirs[i].wd == wd)
                        return &w->dirs[i];
        return NULL;
}

static void dir_drop(struct rwatch *w, size_t i)
{
        free(w->dirs[i].path);
        w->dirs[i] = w->dirs[--w->ndirs];
}

/* Open rel below the root, one component at a time, never following a link. */
static int open_below(struct rwatch *w, const char *rel)
{
        char buf[RWATCH_NAME_MAX];
        char *save = NULL, *part;
        int fd = fcntl(w->rootfd, F_DUPFD_CLOEXEC, 3);

        if (fd < 0 || !rel[0])
                return fd;
        if (strlen(rel) >= sizeof(buf)) {
                close(fd);
                errno = ENAMETOOLONG;
                return -1;
        }
        strcpy(buf, rel);
        for (part = strtok_r(buf, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
                int next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                close(fd);
                if (next < 0)
                        return -1;
                fd = next;
        }
        return fd;
}

static char *join(const char *dir, const char *name)
{
        size_t a = strlen(dir), b = strlen(name);
        char *s;

        if (a + 1 + b >= RWATCH_NAME_MAX)
                return NULL;
        s = malloc(a + b + 2);
        if (!s)
                return NULL;
        if (a) {
                memcpy(s, dir, a);
                s[a++] = '/';
        }
        memcpy(s + a, name, b + 1);
        return s;
}

/* Watch the directory fd (taken) at rel, and with recursive what is below. */
static int watch_tree(struct rwatch *w, int fd, const char *rel, int depth)
{
        char proc[64];
        struct rwatch_dir *d, *nd;
        int wd;
        DIR *dir;
        struct dirent *de;

        if (w->ndirs >= RWATCH_DIRS_MAX || depth > RWATCH_DEPTH_MAX) {
                w->overflow = true;
                close(fd);
                return 0;
        }
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        wd = inotify_add_watch(w->ifd, proc, RWATCH_MASK);
        if (wd < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        d = dir_by_wd(w, wd);
        if (d) { /* the same directory again (moved back): its newest path */
                char *p = strdup(rel);
                if (p) {
                        free(d->path);
                        d->path = p;
                }
        } else {
                nd = realloc(w->dirs, (w->ndirs + 1) * sizeof(*nd));
                if (!nd) {
                        close(fd);
                        return -ENOMEM;
                }
                w->dirs = nd;
                w->dirs[w->ndirs].wd = wd;
                w->dirs[w->ndirs].path = strdup(rel);
                if (!w->dirs[w->ndirs].path) {
                        close(fd);
                        return -ENOMEM;
                }
                w->ndirs++;
        }
        if (!w->recursive) {
                close(fd);
                return 0;
        }
        dir = fdopendir(fd); /* takes fd */
        if (!dir) {
                close(fd);
                return 0;
        }
        while ((de = readdir(dir))) {
                struct stat st;
                char *sub;
                int cfd;

                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (de->d_type != DT_DIR &&
                    (de->d_type != DT_UNKNOWN || fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                     !S_ISDIR(st.st_mode)))
                        continue;
                cfd = openat(dirfd(dir), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (cfd < 0)
                        continue; /* gone, or a link put in its place: not followed */
                sub = join(rel, de->d_name);
                if (!sub) {
                        close(cfd);
                        w->overflow = true;
                        continue;
                }
                (void)watch_tree(w, cfd, sub, depth + 1);
                free(sub);
        }
        closedir(dir);
        return 0;
}

/* A directory at rel went away or moved: drop the watches of it and below. */
static void unwatch_tree(struct rwatch *w, const char *rel)
{
        size_t n = strlen(rel);

        for (size_t i = 0; i < w->ndirs;) {
                const char *p = w->dirs[i].path;
                if (strncmp(p, rel, n) == 0 && (p[n] == '\0' || p[n] == '/')) {
                        (void)inotify_rm_watch(w->ifd, w->dirs[i].wd);
                        dir_drop(w, i);
                } else {
                        i++;
                }
        }
}

static void enqueue(struct rwatch *w, enum rwatch_kind kind, char *name)
{
        if (w->q_len == RWATCH_QUEUE_MAX) {
                w->overflow = true;
                free(name);
                return;
        }
        w->q[(w->q_head + w->q_len) % RWATCH_QUEUE_MAX] = (struct rwatch_item){kind, name};
        w->q_len++;
}

int rwatch_open(int dirfd, bool recursive, struct rwatch **ret)
{
        struct rwatch *w = calloc(1, sizeof(*w));
        int fd, r;

        if (!w)
                return -ENOMEM;
        w->ifd = w->rootfd = -1;
        w->recursive = recursive;
        w->rootfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (w->rootfd < 0 || w->ifd < 0) {
                r = -errno;
                rwatch_close(w);
                return r;
        }
        fd = fcntl(w->rootfd, F_DUPFD_CLOEXEC, 3);
        r = fd < 0 ? -errno : watch_tree(w, fd, "", 0);
        if (r < 0) {
                rwatch_close(w);
                return r;
        }
        *ret = w;
        return 0;
}

int rwatch_fd(const struct rwatch *w)
{
        return w->ifd;
}

static int depth_of(const char *rel)
{
        int n = 1;
        for (; *rel; rel++)
                n += *rel == '/';
        return n;
}

static void on_event(struct rwatch *w, const struct inotify_event *ev)
{
        struct rwatch_dir *d;
        enum rwatch_kind kind;
        char *name;

        if (ev->mask & IN_Q_OVERFLOW) {
                w->overflow = true;
                return;
        }
        d = dir_by_wd(w, ev->wd);
        if (!d)
                return;
        if (ev->mask & IN_IGNORED) { /* removed, or its filesystem went */
                dir_drop(w, (size_t)(d - w->dirs));
                return;
        }
        if (!ev->len || !ev->name[0])
                return; /* about the directory itself: its parent reports it */
        if (ev->mask & (IN_CREATE | IN_MOVED_TO))
                kind = RWATCH_CREATE;
        else if (ev->mask & IN_MODIFY)
                kind = RWATCH_WRITE;
        else if (ev->mask & IN_DELETE)
                kind = RWATCH_REMOVE;
        else if (ev->mask & IN_MOVED_FROM)
                kind = RWATCH_RENAME;
        else if (ev->mask & IN_ATTRIB)
                kind = RWATCH_CHMOD;
        else
                return;
        name = join(d->path, ev->name);
        if (!name) {
                w->overflow = true;
                return;
        }
        if (w->recursive && (ev->mask & IN_ISDIR)) {
                if (ev->mask & (IN_MOVED_FROM | IN_DELETE))
                        unwatch_tree(w, name);
                if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
                        int fd = open_below(w, name);
                        if (fd >= 0)
                                (void)watch_tree(w, fd, name, depth_of(name));
                }
        }
        enqueue(w, kind, name);
}

int rwatch_read(struct rwatch *w)
{
        _Alignas(struct inotify_event) char buf[64 * 1024];

        for (;;) {
                ssize_t n = read(w->ifd, buf, sizeof(buf));
                if (n < 0)
                        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
                if (n == 0)
                        return 0;
                for (char *p = buf; p < buf + n;) {
                        const struct inotify_event *ev = (const struct inotify_event *)p;
                        on_event(w, ev);
                        p += sizeof(*ev) + ev->len;
                }
        }
}

size_t rwatch_take(struct rwatch *w, struct rwatch_event *out, size_t max)
{
        size_t n = 0;

        while (n < max && w->q_len) {
                struct rwatch_item *it = &w->q[w->q_head];
                out[n].kind = it->kind;
                snprintf(out[n].name, sizeof(out[n].name), "%s", it->name);
                free(it->name);
                w->q_head = (w->q_head + 1) % RWATCH_QUEUE_MAX;
                w->q_len--;
                n++;
        }
        return n;
}

bool rwatch_overflowed(struct rwatch *w)
{
        bool o = w->overflow;
        w->overflow = false;
        return o;
}

size_t rwatch_dirs(const struct rwatch *w)
{
        return w->ndirs;
}

void rwatch_close(struct rwatch *w)
{
        if (!w)
                return;
        for (size_t i = 0; i < w->ndirs; i++)
                free(w->dirs[i].path);
        free(w->dirs);
        while (w->q_len) {
                free(w->q[w->q_head].name);
                w->q_head = (w->q_head + 1) % RWATCH_QUEUE_MAX;
                w->q_len--;
        }
        if (w->ifd >= 0)
                close(w->ifd);
        if (w->rootfd >= 0)
                close(w->rootfd);
        free(w);
}
