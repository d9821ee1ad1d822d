/* cells_spool.c — a cell's output by reference: three append-only streams
 * per cell, each held in memory up to CELL_SPOOL_MEM bytes and in a file
 * under {data_dir}/cells past that, capped per stream (see cells_spool.h).
 * No threads or locks of its own. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cells_spool.h"

struct cell_spool {
        char path[CELL_STREAMS][4200]; /* each file is made when its stream outgrows mem */
        int fd[CELL_STREAMS];
        char mem[CELL_STREAMS][CELL_SPOOL_MEM]; /* a stream's bytes while it has no file */
        uint64_t total[CELL_STREAMS], kept[CELL_STREAMS];
        uint64_t cap;
        bool lost;
};

static const char *const names[CELL_STREAMS] = {"stdout", "stderr", "outputs"};

const char *cell_stream_name(enum cell_stream s)
{
        return s < CELL_STREAMS ? names[s] : "?";
}

static void path_of(char *buf, size_t size, const char *dir, const char *id, enum cell_stream st)
{
        snprintf(buf, size, "%s/%s.%s", dir, id, names[st]);
}

int cell_spool_open(const char *dir, const char *id, uint64_t cap, struct cell_spool **ret)
{
        struct cell_spool *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        s->cap = cap;
        /* no file yet: a cell's files are made as its streams outgrow
         * CELL_SPOOL_MEM (a warm 1+1 makes none: a file made, written,
         * closed and unlinked later was a sixth of the daemon's CPU per
         * cell, issue 34); a stream without one is in memory */
        for (int i = 0; i < CELL_STREAMS; i++) {
                s->fd[i] = -1;
                path_of(s->path[i], sizeof(s->path[i]), dir, id, i);
        }
        *ret = s;
        return 0;
}

int cell_spool_append(struct cell_spool *s, enum cell_stream st, const void *data, size_t len, uint64_t *ret_offset)
{
        const char *p = data;
        size_t left = len;

        if (!s || st >= CELL_STREAMS)
                return -EINVAL;
        s->total[st] += len;
        if (s->kept[st] + len > s->cap) {
                s->lost = true;
                return -ENOSPC;
        }
        if (ret_offset)
                *ret_offset = s->kept[st];
        if (s->fd[st] < 0 && s->kept[st] + len <= CELL_SPOOL_MEM) {
                memcpy(s->mem[st] + s->kept[st], data, len);
                s->kept[st] += len;
                return 0;
        }
        if (s->fd[st] < 0) {
                if ((s->fd[st] = open(s->path[st], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0) {
                        s->lost = true;
                        return -errno;
                }
                /* what memory held goes first: the file is the stream from its start */
                for (size_t off = 0; off < s->kept[st];) {
                        ssize_t n = write(s->fd[st], s->mem[st] + off, s->kept[st] - off);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0) {
                                int r = n < 0 ? -errno : -EIO;
                                s->kept[st] = off;
                                s->lost = true;
                                return r;
                        }
                        off += (size_t)n;
                }
        }
        while (left > 0) {
                ssize_t n = write(s->fd[st], p, left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        /* keep offsets true: what was written stays, the rest is lost */
                        s->kept[st] += len - left;
                        s->lost = true;
                        return n < 0 ? -errno : -EIO;
                }
                p += n;
                left -= (size_t)n;
        }
        s->kept[st] += len;
        return 0;
}

uint64_t cell_spool_room(const struct cell_spool *s, enum cell_stream st)
{
        return s && st < CELL_STREAMS && s->kept[st] < s->cap ? s->cap - s->kept[st] : 0;
}

void cell_spool_skip(struct cell_spool *s, enum cell_stream st, uint64_t len)
{
        if (!s || st >= CELL_STREAMS)
                return;
        s->total[st] += len;
        s->lost = true;
}

bool cell_spool_has_file(const struct cell_spool *s, enum cell_stream st)
{
        return s && st < CELL_STREAMS && s->fd[st] >= 0;
}

uint64_t cell_spool_total(const struct cell_spool *s, enum cell_stream st)
{
        return s && st < CELL_STREAMS ? s->total[st] : 0;
}

bool cell_spool_lost(const struct cell_spool *s)
{
        return s && s->lost;
}

struct cell_spool_kept *cell_spool_close(struct cell_spool *s)
{
        struct cell_spool_kept *k;

        if (!s)
                return NULL;
        k = calloc(1, sizeof(*k));
        for (int i = 0; i < CELL_STREAMS; i++) {
                if (s->fd[i] >= 0)
                        close(s->fd[i]);
                if (!k)
                        continue;
                k->file[i] = s->fd[i] >= 0;
                if (s->fd[i] < 0 && s->kept[i] && (k->mem[i] = malloc(s->kept[i]))) {
                        memcpy(k->mem[i], s->mem[i], s->kept[i]);
                        k->len[i] = s->kept[i];
                } else if (s->fd[i] < 0 && s->kept[i]) {
                        k->lost = true; /* out of memory: read as empty */
                }
        }
        free(s);
        return k;
}

void cell_spool_kept_free(struct cell_spool_kept *k)
{
        if (!k)
                return;
        for (int i = 0; i < CELL_STREAMS; i++)
                free(k->mem[i]);
        free(k);
}

/* Up to max bytes of buf (len long) from offset, as a read of a file. */
static int mem_read(const char *buf, size_t len, uint64_t offset, size_t max, char **ret, size_t *ret_len)
{
        size_t n = offset < len ? len - (size_t)offset : 0;

        if (n > max)
                n = max;
        *ret = malloc(n + 1);
        if (!*ret)
                return -ENOMEM;
        if (n)
                memcpy(*ret, buf + offset, n);
        (*ret)[n] = '\0';
        *ret_len = n;
        return 0;
}

int cell_spool_read_live(const struct cell_spool *s, const char *dir, const char *id, enum cell_stream st,
                         uint64_t offset, size_t max, char **ret, size_t *ret_len)
{
        if (st >= CELL_STREAMS)
                return -EINVAL;
        if (s && s->fd[st] < 0)
                return mem_read(s->mem[st], (size_t)s->kept[st], offset, max, ret, ret_len);
        return cell_spool_read(dir, id, st, offset, max, ret, ret_len);
}

int cell_spool_read_kept(const struct cell_spool_kept *k, const char *dir, const char *id, enum cell_stream st,
                         uint64_t offset, size_t max, char **ret, size_t *ret_len)
{
        if (st >= CELL_STREAMS)
                return -EINVAL;
        if (k && !k->file[st])
                return mem_read(k->mem[st] ? k->mem[st] : "", k->len[st], offset, max, ret, ret_len);
        return cell_spool_read(dir, id, st, offset, max, ret, ret_len);
}

int cell_spool_read(const char *dir, const char *id, enum cell_stream st, uint64_t offset, size_t max, char **ret,
                    size_t *ret_len)
{
        char path[4200], *buf;
        size_t got = 0;
        int fd, r = 0;

        if (st >= CELL_STREAMS)
                return -EINVAL;
        path_of(path, sizeof(path), dir, id, st);
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 && errno == ENOENT) { /* a stream that never got a byte */
                *ret = calloc(1, 1);
                *ret_len = 0;
                return *ret ? 0 : -ENOMEM;
        }
        if (fd < 0)
                return -errno;
        buf = malloc(max + 1);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        while (got < max) {
                ssize_t n = pread(fd, buf + got, max - got, (off_t)(offset + got));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        break;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        close(fd);
        if (r < 0) {
                free(buf);
                return r;
        }
        buf[got] = '\0';
        *ret = buf;
        *ret_len = got;
        return 0;
}

void cell_spool_remove(const char *dir, const char *id, const struct cell_spool_kept *k)
{
        char path[4200];

        for (int i = 0; i < CELL_STREAMS; i++) {
                if (k && !k->file[i])
                        continue; /* in memory only: no file was made */
                path_of(path, sizeof(path), dir, id, i);
                (void)unlink(path);
        }
}

void cell_spool_wipe(const char *dir)
{
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        DIR *d;
        struct dirent *de;

        if (dfd < 0)
                return;
        d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return;
        }
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        (void)unlinkat(dfd, de->d_name, 0);
        closedir(d);
}
