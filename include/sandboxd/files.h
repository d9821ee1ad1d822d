/* files.h — files in a session's workspace, read and written from INSIDE the
 * session's container, never through a host path.
 *
 * When the session's runner is connected it does the I/O (hub_ops.h): it
 * resolves the path as the tenant's tools would, refuses (-EPERM) one that
 * leads outside /workspace (a link to /, /etc, /proc/self/root, `..` above
 * /workspace), and opens only with openat2(RESOLVE_IN_ROOT |
 * RESOLVE_NO_MAGICLINKS) below /workspace, so a link planted meanwhile
 * still resolves inside. The answers below hold on both paths.
 *
 * Otherwise (the docker exec fallback) every operation runs a fixed script
 * in the container as the sandbox user (exec_internal), with the path as an
 * argv element (never spliced into a shell line). A process in the container can plant symlinks anywhere in its
 * workspace; the daemon never follows one on the host, because it never opens
 * workspace paths on the host at all: what the script can reach is exactly
 * what the tenant can reach already, so a symlink to /etc/passwd reads the
 * container's file at most. Still, the script resolves the path (readlink -f)
 * and refuses anything that resolves outside /workspace, so results are
 * honest and the workspace is the only thing these calls ever touch.
 *
 * Paths: relative to /workspace, or absolute under /workspace. They are
 * normalised lexically ("a/./b//c", "a/../b"); a path that climbs out of
 * /workspace ("../x", "/etc/passwd", "/workspace/../etc") is refused with
 * -EPERM before anything runs.
 *
 * Sizes: a write holds at most limits.file_size bytes; a read returns at most
 * min(limits.file_size, FILES_READ_MAX) bytes per call (use offset to go on). */
#ifndef SANDBOXD_FILES_H
#define SANDBOXD_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"

struct exec_registry;
struct hub;
struct sbx_config;
struct session_manager;

/* What the file operations use, all borrowed: the daemon fills one
 * (daemon.h, d->files) once its engines exist. */
struct files_ctx {
        const struct sbx_config *cfg; /* max_file_bytes, workspace quota */
        struct session_manager *sessions;
        struct hub *runner;
        struct exec_registry *exec; /* the docker exec fallback */
};

#define FILES_PATH_MAX 4096
#define FILES_READ_MAX (4 * 1024 * 1024)
#define FILES_LIST_MAX 1000

enum files_type {
        FILES_FILE,
        FILES_DIR,
        FILES_SYMLINK,
        FILES_OTHER,
};
const char *files_type_to_string(enum files_type t);

/* Normalise path (see above) into ret (absolute, under /workspace, no
 * trailing slash). -EPERM for an escape, -EINVAL for an empty or over-long
 * path or one with control characters. */
int files_normalize(const char *path, char ret[FILES_PATH_MAX], struct sbx_error *err);

/* Write data as the whole content of path (created with its missing parent
 * directories, mode 0644; an existing file is replaced atomically through a
 * temporary file and a rename). -EFBIG past limits.file_size, -EPERM if the path
 * resolves outside /workspace (through a symlink), -EISDIR for a directory,
 * -ENOTDIR when a parent is not a directory. */
int files_write(const struct files_ctx *f, const char *user, const char *session, const char *path, const void *data,
                size_t len, char ret_path[FILES_PATH_MAX], struct sbx_error *err);

struct files_read_result {
        char path[FILES_PATH_MAX]; /* normalised */
        char *data;                /* malloc'd, NUL-terminated for convenience; len bytes */
        size_t len;
        uint64_t size; /* the file's size */
        bool eof;      /* offset + len reached the end of the file */
};
void files_read_result_done(struct files_read_result *r);

/* Read up to length bytes (< 0: as much as a call allows) from offset.
 * -ENOENT, -EISDIR, -EINVAL for something that is not a regular file (a
 * FIFO would block), -EACCES, -EPERM as for write. */
int files_read(const struct files_ctx *f, const char *user, const char *session, const char *path, uint64_t offset,
               int64_t length, struct files_read_result *ret, struct sbx_error *err);

struct files_entry {
        char name[256];
        enum files_type type; /* a symlink is reported as such, never followed */
        int64_t size;         /* bytes for files, the link's length for symlinks, 0 otherwise */
};

/* The entries of a directory (NULL or "" = /workspace), sorted by name, at
 * most FILES_LIST_MAX (*ret_truncated says there were more). -ENOTDIR for a
 * non-directory. */
int files_list(const struct files_ctx *f, const char *user, const char *session, const char *path,
               char ret_path[FILES_PATH_MAX], struct files_entry **ret, size_t *ret_n, bool *ret_truncated,
               struct sbx_error *err);

/* Make a directory and its missing parents (0755). -EEXIST when the path
 * exists already (whatever it is), -EPERM, -ENOTDIR as for write. */
struct hub_watch;
/* Watch the directory path (under /workspace; with recursive, everything
 * below it) through the session's runner (hub_ops.h: hub_watch_take,
 * hub_watch_stop). -ENOTSUP without a runner, -EUSERS past a cap (busy:),
 * -ENOENT, -ENOTDIR, -EPERM (outside, through a link) with err. */
int files_watch(const struct files_ctx *f, const char *user, const char *session, const char *path, bool recursive,
                struct hub_watch **ret, struct sbx_error *err);
int files_mkdir(const struct files_ctx *f, const char *user, const char *session, const char *path,
                struct sbx_error *err);
/* Remove a path: a file, a symlink itself (never its target), a directory
 * with everything below it. -ENOENT, -EINVAL for /workspace itself. */
int files_remove(const struct files_ctx *f, const char *user, const char *session, const char *path,
                 struct sbx_error *err);
/* Rename src to dst (dst's missing parents made; an existing file there is
 * replaced, a non-empty directory is -EEXIST; a symlink moves as a link).
 * -ENOENT for a missing src, -EINVAL for /workspace itself. */
int files_move(const struct files_ctx *f, const char *user, const char *session, const char *src, const char *dst,
               struct sbx_error *err);

#endif