/* files.c — read, write and list files of a session's workspace from
 * inside its container (see files.h for why that is the symlink-safe way).
 * The session's runner does the I/O when it is connected (hub_ops.h:
 * openat2 confined to /workspace); otherwise fixed scripts run through
 * docker exec as the sandbox user, the path always an argv element, resolved
 * with readlink -f and refused outside /workspace. Both answer with the same
 * errors. No state and no threads of its own: every call holds a session
 * reference for its duration so idle expiry leaves the container alone
 * meanwhile. */
#include "sandboxd/files.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/config.h"
#include "sandboxd/exec.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_ops.h"
#include "sandboxd/session.h"
#include "sandboxd/wsquota.h"

#define WORKSPACE "/workspace"
#define SCRIPT_TIMEOUT_MS 120000
#define RUNNER_WAIT_MS 3000 /* a new container's runner connects within milliseconds */
/* exec_internal keeps at most 1 MiB of output; a read chunk and its size
 * line must fit. */
#define READ_CHUNK ((size_t)(1 << 20) - 64)

/* Exit codes the scripts use for refusals (above anything sh itself uses
 * for its own errors, below 126/127). */
enum {
        X_NOENT = 12,
        X_OUTSIDE = 13,
        X_ISDIR = 14,
        X_NOTREG = 15,
        X_ACCES = 16,
        X_MKDIR = 17,
        X_NOTDIR = 18,
        X_IO = 19,
        X_EXIST = 20,
};

/* The shared prelude: `inside P` says whether P is /workspace or below. */
#define PRELUDE "inside() { case \"$1\" in /workspace|/workspace/*) return 0;; esac; return 1; }\n"

/* $1 path, $2 offset, $3 length. Prints the size on one line, then the bytes. */
static const char read_script[] = PRELUDE
        "r=$(readlink -f \"$1\") || exit 12\n"
        "inside \"$r\" || exit 13\n"
        "[ -e \"$r\" ] || exit 12\n"
        "[ -d \"$r\" ] && exit 14\n"
        "[ -f \"$r\" ] || exit 15\n"
        "[ -r \"$r\" ] || exit 16\n"
        "s=$(stat -c %s -- \"$r\") || exit 12\n"
        "echo \"$s\"\n"
        "[ \"$3\" -gt 0 ] && [ \"$2\" -lt \"$s\" ] || exit 0\n"
        "tail -c +$(($2 + 1)) -- \"$r\" | head -c \"$3\"\n";

/* $1 path; the content on stdin. Prints the bytes written. The parent is
 * resolved (deepest existing ancestor first, so mkdir -p cannot be steered
 * outside), then the file goes to a temporary beside the resolved target and
 * is renamed over it: rename(2) replaces a symlink planted meanwhile rather
 * than writing through it. */
static const char write_script[] = PRELUDE
        "p=\"$1\"; d=\"${p%/*}\"; b=\"${p##*/}\"\n"
        "a=\"$d\"; while [ ! -e \"$a\" ] && [ ! -L \"$a\" ]; do a=\"${a%/*}\"; done\n"
        "ra=$(readlink -f \"$a\") || exit 12\n"
        "inside \"$ra\" || exit 13\n"
        "[ -d \"$ra\" ] || exit 18\n"
        "mkdir -p \"$d\" 2>/dev/null || exit 17\n"
        "rd=$(readlink -f \"$d\") || exit 12\n"
        "inside \"$rd\" || exit 13\n"
        "[ -d \"$rd\" ] || exit 18\n"
        "t=\"$rd/$b\"\n"
        "if [ -L \"$t\" ] || [ -e \"$t\" ]; then\n"
        "  rt=$(readlink -f \"$t\") || exit 13\n"
        "  inside \"$rt\" || exit 13\n"
        "  [ \"$rt\" = /workspace ] && exit 14\n"
        "  [ -d \"$rt\" ] && exit 14\n"
        "  t=\"$rt\"\n"
        "fi\n"
        "tmp=$(mktemp \"${t%/*}/.sbx-write.XXXXXX\" 2>/dev/null) || exit 16\n"
        "cat > \"$tmp\" || { rm -f -- \"$tmp\"; exit 19; }\n"
        "chmod 644 -- \"$tmp\"\n"
        "n=$(stat -c %s -- \"$tmp\")\n"
        "mv -f -- \"$tmp\" \"$t\" || { rm -f -- \"$tmp\"; exit 19; }\n"
        "echo \"$n\"\n";

/* $1 directory, $2 max entries. Prints "<type> <size>\0<name>\0" per entry
 * (type f d l o; lstat semantics: a symlink is never followed), then "T\0"
 * if there were more. */
static const char list_script[] = PRELUDE
        "r=$(readlink -f \"$1\") || exit 12\n"
        "inside \"$r\" || exit 13\n"
        "[ -e \"$r\" ] || exit 12\n"
        "[ -d \"$r\" ] || exit 18\n"
        "cd -- \"$r\" 2>/dev/null || exit 16\n"
        "n=0\n"
        "for f in * .[!.]* ..?*; do\n"
        "  [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n"
        "  n=$((n + 1)); if [ \"$n\" -gt \"$2\" ]; then printf 'T\\0'; break; fi\n"
        "  if [ -L \"$f\" ]; then t=l; elif [ -f \"$f\" ]; then t=f; elif [ -d \"$f\" ]; then t=d; else t=o; fi\n"
        "  s=0; case $t in f|l) s=$(stat -c %s -- \"$f\" 2>/dev/null) || s=0;; esac\n"
        "  printf '%s %s\\0%s\\0' \"$t\" \"$s\" \"$f\"\n"
        "done\n";

/* $1 directory: made with its parents; 20 when it exists already. */
static const char mkdir_script[] = PRELUDE
        "p=\"$1\"\n"
        "if [ -e \"$p\" ] || [ -L \"$p\" ]; then exit 20; fi\n"
        "a=\"$p\"; while [ ! -e \"$a\" ] && [ ! -L \"$a\" ]; do a=\"${a%/*}\"; done\n"
        "ra=$(readlink -f \"$a\") || exit 12\n"
        "inside \"$ra\" || exit 13\n"
        "[ -d \"$ra\" ] || exit 18\n"
        "mkdir -p -- \"$p\" 2>/dev/null || exit 17\n"
        "r=$(readlink -f \"$p\") || exit 12\n"
        "inside \"$r\" || exit 13\n";

/* $1 path: removed (a symlink itself, a directory with its content; rm
 * never follows a link below it). The parent is resolved first. */
static const char remove_script[] = PRELUDE
        "p=\"$1\"; d=\"${p%/*}\"; b=\"${p##*/}\"\n"
        "rd=$(readlink -f \"$d\") || exit 12\n"
        "inside \"$rd\" || exit 13\n"
        "[ -d \"$rd\" ] || exit 18\n"
        "t=\"$rd/$b\"\n"
        "[ -e \"$t\" ] || [ -L \"$t\" ] || exit 12\n"
        "rm -rf -- \"$t\" 2>/dev/null || exit 16\n";

/* $1 source, $2 destination: renamed (mv -T: never into a directory), the
 * destination's parents made; both parents resolved inside first. */
static const char move_script[] = PRELUDE
        "s=\"$1\"; sd=\"${s%/*}\"; sb=\"${s##*/}\"\n"
        "rs=$(readlink -f \"$sd\") || exit 12\n"
        "inside \"$rs\" || exit 13\n"
        "[ -e \"$rs/$sb\" ] || [ -L \"$rs/$sb\" ] || exit 12\n"
        "p=\"$2\"; d=\"${p%/*}\"; b=\"${p##*/}\"\n"
        "a=\"$d\"; while [ ! -e \"$a\" ] && [ ! -L \"$a\" ]; do a=\"${a%/*}\"; done\n"
        "ra=$(readlink -f \"$a\") || exit 12\n"
        "inside \"$ra\" || exit 13\n"
        "[ -d \"$ra\" ] || exit 18\n"
        "mkdir -p -- \"$d\" 2>/dev/null || exit 17\n"
        "rd=$(readlink -f \"$d\") || exit 12\n"
        "inside \"$rd\" || exit 13\n"
        "mv -f -T -- \"$rs/$sb\" \"$rd/$b\" 2>/dev/null || exit 16\n";

static const char *const type_names[] = {"file", "dir", "symlink", "other"};

const char *files_type_to_string(enum files_type t)
{
        return (unsigned)t < ELEMENTSOF(type_names) ? type_names[t] : "other";
}

int files_normalize(const char *path, char ret[FILES_PATH_MAX], struct sbx_error *err)
{
        char out[FILES_PATH_MAX];
        size_t len = 0, depth = 0;
        const char *p;

        if (!path || !*path)
                return sbx_error_set(err, -EINVAL, 0, "path is empty");
        if (strlen(path) >= FILES_PATH_MAX - sizeof(WORKSPACE))
                return sbx_error_set(err, -EINVAL, 0, "path is longer than %d bytes", FILES_PATH_MAX - 16);
        for (p = path; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        return sbx_error_set(err, -EINVAL, 0, "path contains control characters");

        /* Build the absolute path component by component; depth counts the
         * components kept, so ".." past the root stays at the root. */
        if (path[0] != '/') {
                memcpy(out, WORKSPACE, sizeof(WORKSPACE));
                len = sizeof(WORKSPACE) - 1;
                depth = 1;
        } else {
                out[0] = '\0';
        }
        for (p = path; *p;) {
                const char *end;
                size_t n;

                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                end = strchr(p, '/');
                n = end ? (size_t)(end - p) : strlen(p);
                if (n > 255)
                        return sbx_error_set(err, -EINVAL, 0, "a path component is longer than 255 bytes");
                if (n == 1 && p[0] == '.') {
                        /* nothing */
                } else if (n == 2 && p[0] == '.' && p[1] == '.') {
                        if (depth > 0) {
                                char *slash = strrchr(out, '/');
                                len = (size_t)(slash - out);
                                out[len] = '\0';
                                depth--;
                        }
                } else {
                        out[len++] = '/';
                        memcpy(out + len, p, n);
                        len += n;
                        out[len] = '\0';
                        depth++;
                }
                p += n;
        }
        if (strcmp(out, WORKSPACE) != 0 && strncmp(out, WORKSPACE "/", sizeof(WORKSPACE)) != 0)
                return sbx_error_set(err, -EPERM, 0, "path %s is outside /workspace", path);
        memcpy(ret, out, len + 1);
        return 0;
}

/* The refusal an errno stands for, from the runner or a script's exit code. */
static int errno_error(int r, const char *what, const char *path, struct sbx_error *err)
{
        switch (r) {
        case -ENOENT:
                return sbx_error_set(err, -ENOENT, 0, "%s: %s does not exist", what, path);
        case -EPERM:
        case -ELOOP:
        case -EXDEV:
                return sbx_error_set(err, -EPERM, 0, "%s: %s resolves outside /workspace (through a symlink)", what,
                                     path);
        case -EISDIR:
                return sbx_error_set(err, -EISDIR, 0, "%s: %s is a directory", what, path);
        case -EINVAL:
                return sbx_error_set(err, -EINVAL, 0, "%s: %s is not a regular file", what, path);
        case -EACCES:
                return sbx_error_set(err, -EACCES, 0, "%s: permission denied on %s", what, path);
        case -ENOTDIR:
                return sbx_error_set(err, -ENOTDIR, 0, "%s: %s (or a parent) is not a directory", what, path);
        case -ENOSPC:
        case -EDQUOT: /* the tenant's own bound, not the daemon failing: a client error that names it */
                return sbx_error_set(err, -EDQUOT, 0,
                                     "%s: writing %s failed: the workspace is full (its workspace.quota, or the disk "
                                     "that holds it)",
                                     what, path);
        case -EEXIST:
        case -ENOTEMPTY:
                return sbx_error_set(err, -EEXIST, 0, "%s: %s exists already", what, path);
        case -EFBIG:
                return sbx_error_set(err, -EFBIG, 0, "%s: %s would be larger than the workspace's file system allows",
                                     what, path);
        case -ETIMEDOUT:
                return sbx_error_set(err, -ETIMEDOUT, 0, "%s: %s: the runner did not answer in time", what, path);
        case -EBUSY:
                return sbx_error_set(err, -EBUSY, 0, "busy: too many writes at once in this session (%s %s)", what,
                                     path);
        default:
                return sbx_error_set(err, -EIO, 0, "%s: %s: %s", what, path, strerror(-r));
        }
}

/* The refusal a script's exit code stands for. */
static int script_error(int code, const char *what, const char *path, const char *out, struct sbx_error *err)
{
        static const int map[][2] = {{X_NOENT, -ENOENT}, {X_OUTSIDE, -EPERM},  {X_ISDIR, -EISDIR}, {X_NOTREG, -EINVAL},
                                     {X_ACCES, -EACCES}, {X_NOTDIR, -ENOTDIR}, {X_IO, -ENOSPC},    {X_EXIST, -EEXIST}};

        if (code == X_MKDIR)
                return sbx_error_set(err, -EACCES, 0, "%s: cannot create the parent directories of %s", what, path);
        for (size_t i = 0; i < ELEMENTSOF(map); i++)
                if (map[i][0] == code)
                        return errno_error(map[i][1], what, path, err);
        return sbx_error_set(err, -EIO, 0, "%s: the helper in the container failed with exit code %d%s%.200s", what,
                             code, out && *out ? ": " : "", out ? out : "");
}

/* Is the session's runner there to do it? (After a restart: listen again.) */
static bool via_runner(const struct files_ctx *f, const char *user, const char *session)
{
        (void)hub_adopt(f->runner, user, session);
        return hub_wait(f->runner, user, session, RUNNER_WAIT_MS);
}

/* The session's container, with a reference the caller releases. */
static int open_container(const struct files_ctx *f, const char *user, const char *session, struct session **ret_s,
                          char ret_cid[65], struct sbx_error *err)
{
        int r = session_acquire(f->sessions, user, session, ret_s, err);
        if (r < 0)
                return r;
        session_container_id(*ret_s, ret_cid);
        return 0;
}

int files_write(const struct files_ctx *f, const char *user, const char *session, const char *path, const void *data,
                size_t len, char ret_path[FILES_PATH_MAX], struct sbx_error *err)
{
        char norm[FILES_PATH_MAX], cid[65];
        struct session *s = NULL;
        _cleanup_free_ char *out = NULL;
        int code = -1, r;

        r = files_normalize(path, norm, err);
        if (r < 0)
                return r;
        if (strcmp(norm, WORKSPACE) == 0)
                return sbx_error_set(err, -EISDIR, 0, "write: /workspace is a directory");
        if ((int64_t)len > f->cfg->max_file_bytes)
                return sbx_error_set(err, -EFBIG, 0, "write: %zu bytes is over limits.file_size (%" PRId64 ")", len,
                                     f->cfg->max_file_bytes);
        r = wsquota_admit(f->cfg, user, session, err);
        if (r < 0)
                return r;
        r = open_container(f, user, session, &s, cid, err);
        if (r < 0)
                return r;
        r = via_runner(f, user, session)
                    ? hub_file_write(f->runner, user, session, norm, data ? data : "", len, SCRIPT_TIMEOUT_MS)
                    : -ENOTCONN;
        if (r != -ENOTCONN) {
                session_release(s);
                if (r < 0)
                        return errno_error(r, "write", norm, err);
                if (ret_path)
                        memcpy(ret_path, norm, strlen(norm) + 1);
                return 0;
        }
        {
                const char *argv[] = {"sh", "-c", write_script, "sbx-write", norm, NULL};
                /* a non-NULL pointer attaches stdin even for an empty file */
                r = exec_internal(f->exec, cid, argv, data ? data : "", len, SCRIPT_TIMEOUT_MS, &code, &out, NULL, err);
        }
        session_release(s);
        if (r < 0) {
                sbx_error_prefix(err, "write %s", norm);
                return r;
        }
        if (code != 0)
                return script_error(code, "write", norm, out, err);
        if (!out || strtoull(out, NULL, 10) != len)
                return sbx_error_set(err, -EIO, 0, "write: %s: short write (%s of %zu bytes)", norm, out ? out : "?",
                                     len);
        if (ret_path)
                memcpy(ret_path, norm, strlen(norm) + 1);
        return 0;
}

void files_read_result_done(struct files_read_result *r)
{
        if (!r)
                return;
        free(r->data);
        r->data = NULL;
}

int files_read(const struct files_ctx *f, const char *user, const char *session, const char *path, uint64_t offset,
               int64_t length, struct files_read_result *ret, struct sbx_error *err)
{
        char norm[FILES_PATH_MAX], cid[65];
        struct session *s = NULL;
        _cleanup_free_ char *buf = NULL;
        size_t want, got = 0;
        uint64_t size = 0;
        int r = 0;

        r = files_normalize(path, norm, err);
        if (r < 0)
                return r;
        want = f->cfg->max_file_bytes < FILES_READ_MAX ? (size_t)f->cfg->max_file_bytes : FILES_READ_MAX;
        if (length >= 0 && (uint64_t)length < want)
                want = (size_t)length;
        if (offset > (uint64_t)INT64_MAX / 2)
                return sbx_error_set(err, -EINVAL, 0, "offset is too large");
        buf = malloc(want + 1);
        if (!buf)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        r = open_container(f, user, session, &s, cid, err);
        if (r < 0)
                return r;
        r = via_runner(f, user, session)
                    ? hub_file_read(f->runner, user, session, norm, offset, want, buf, &got, &size, SCRIPT_TIMEOUT_MS)
                    : -ENOTCONN;
        if (r != -ENOTCONN) {
                session_release(s);
                if (r < 0)
                        return errno_error(r, "read", norm, err);
                goto done;
        }
        r = 0;
        /* One script run per chunk: exec_internal bounds its output. The
         * first run also answers for empty reads (it prints the size). */
        do {
                size_t chunk = want - got < READ_CHUNK ? want - got : READ_CHUNK;
                char a_off[24], a_len[24], *nl;
                const char *argv[] = {"sh", "-c", read_script, "sbx-read", norm, a_off, a_len, NULL};
                _cleanup_free_ char *out = NULL;
                size_t out_len = 0, n;
                int code = -1;

                snprintf(a_off, sizeof(a_off), "%" PRIu64, offset + got);
                snprintf(a_len, sizeof(a_len), "%zu", chunk);
                r = exec_internal(f->exec, cid, argv, NULL, 0, SCRIPT_TIMEOUT_MS, &code, &out, &out_len, err);
                if (r < 0) {
                        sbx_error_prefix(err, "read %s", norm);
                        break;
                }
                if (code != 0) {
                        r = script_error(code, "read", norm, NULL, err);
                        break;
                }
                nl = out ? memchr(out, '\n', out_len) : NULL;
                if (!nl) {
                        r = sbx_error_set(err, -EIO, 0, "read %s: malformed helper output", norm);
                        break;
                }
                size = strtoull(out, NULL, 10);
                n = out_len - (size_t)(nl + 1 - out);
                if (n > chunk)
                        n = chunk;
                memcpy(buf + got, nl + 1, n);
                got += n;
                if (n < chunk)
                        break; /* end of file */
        } while (got < want);
        session_release(s);
        if (r < 0)
                return r;
done:
        memset(ret, 0, sizeof(*ret));
        memcpy(ret->path, norm, strlen(norm) + 1);
        buf[got] = '\0';
        ret->data = TAKE_PTR(buf);
        ret->len = got;
        ret->size = size;
        ret->eof = offset + got >= size;
        return 0;
}

struct list_acc {
        struct files_entry *list;
        size_t n;
        bool truncated;
};

static void on_entry(void *ud, char type, int64_t size, const char *name, size_t name_len)
{
        struct list_acc *a = ud;
        struct files_entry *e;

        if (a->n >= FILES_LIST_MAX) {
                a->truncated = true;
                return;
        }
        e = &a->list[a->n++];
        memcpy(e->name, name, name_len);
        e->name[name_len] = '\0';
        e->type = type == 'f' ? FILES_FILE : type == 'd' ? FILES_DIR : type == 'l' ? FILES_SYMLINK : FILES_OTHER;
        e->size = size;
}

static int entry_cmp(const void *a, const void *b)
{
        return strcmp(((const struct files_entry *)a)->name, ((const struct files_entry *)b)->name);
}

int files_list(const struct files_ctx *f, const char *user, const char *session, const char *path,
               char ret_path[FILES_PATH_MAX], struct files_entry **ret, size_t *ret_n, bool *ret_truncated,
               struct sbx_error *err)
{
        char norm[FILES_PATH_MAX], cid[65], max[16];
        struct session *s = NULL;
        _cleanup_free_ char *out = NULL;
        _cleanup_free_ struct files_entry *list = NULL;
        size_t out_len = 0, n = 0;
        bool truncated = false;
        int code = -1, r;

        r = files_normalize(path && *path ? path : WORKSPACE, norm, err);
        if (r < 0)
                return r;
        list = calloc(FILES_LIST_MAX + 1, sizeof(*list));
        if (!list)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        r = open_container(f, user, session, &s, cid, err);
        if (r < 0)
                return r;
        if (via_runner(f, user, session)) {
                struct list_acc acc = {.list = list};
                r = hub_file_list(f->runner, user, session, norm, on_entry, &acc, &truncated, SCRIPT_TIMEOUT_MS);
                if (r != -ENOTCONN) {
                        session_release(s);
                        if (r < 0)
                                return errno_error(r, "list", norm, err);
                        n = acc.n;
                        truncated = truncated || acc.truncated;
                        goto done;
                }
        }
        snprintf(max, sizeof(max), "%d", FILES_LIST_MAX);
        {
                const char *argv[] = {"sh", "-c", list_script, "sbx-list", norm, max, NULL};
                r = exec_internal(f->exec, cid, argv, NULL, 0, SCRIPT_TIMEOUT_MS, &code, &out, &out_len, err);
        }
        session_release(s);
        if (r < 0) {
                sbx_error_prefix(err, "list %s", norm);
                return r;
        }
        if (code != 0)
                return script_error(code, "list", norm, NULL, err);

        /* Records are NUL-separated: names can hold any byte but NUL and '/'. */
        for (size_t i = 0; out && i < out_len;) {
                const char *head = out + i, *name;
                size_t hl = strnlen(head, out_len - i), nl;
                struct files_entry *e;

                if (hl == 1 && head[0] == 'T') {
                        truncated = true;
                        break;
                }
                if (i + hl + 1 >= out_len || hl < 3 || head[1] != ' ')
                        break; /* cut short: keep what parsed */
                name = head + hl + 1;
                nl = strnlen(name, out_len - (i + hl + 1));
                if (i + hl + 1 + nl >= out_len)
                        break;
                i += hl + 1 + nl + 1;
                if (n >= FILES_LIST_MAX || nl == 0 || nl > 255) {
                        truncated = truncated || n >= FILES_LIST_MAX;
                        continue;
                }
                e = &list[n++];
                memcpy(e->name, name, nl + 1);
                e->type = head[0] == 'f'   ? FILES_FILE
                          : head[0] == 'd' ? FILES_DIR
                          : head[0] == 'l' ? FILES_SYMLINK
                                           : FILES_OTHER;
                e->size = strtoll(head + 2, NULL, 10);
        }
done:
        qsort(list, n, sizeof(*list), entry_cmp);
        if (ret_path)
                memcpy(ret_path, norm, strlen(norm) + 1);
        *ret = TAKE_PTR(list);
        *ret_n = n;
        if (ret_truncated)
                *ret_truncated = truncated;
        return 0;
}

/* A change the runner makes (hub_file_change), else its script. */
static int change(const struct files_ctx *f, const char *user, const char *session, uint16_t type, const char *what,
                  const char *path, const char *path2, struct sbx_error *err)
{
        char norm[FILES_PATH_MAX], norm2[FILES_PATH_MAX] = "", cid[65];
        struct session *s = NULL;
        _cleanup_free_ char *out = NULL;
        int code = -1, r;

        r = files_normalize(path, norm, err);
        if (r < 0)
                return r;
        if (path2 && (r = files_normalize(path2, norm2, err)) < 0)
                return r;
        if (type != RP_FILE_MKDIR && (strcmp(norm, WORKSPACE) == 0 || strcmp(norm2, WORKSPACE) == 0))
                return sbx_error_set(err, -EINVAL, 0, "%s: /workspace itself cannot be %s", what,
                                     type == RP_FILE_REMOVE ? "removed" : "moved");
        if (type == RP_FILE_MKDIR && strcmp(norm, WORKSPACE) == 0)
                return errno_error(-EEXIST, what, norm, err);
        r = open_container(f, user, session, &s, cid, err);
        if (r < 0)
                return r;
        r = via_runner(f, user, session)
                    ? hub_file_change(f->runner, user, session, type, norm, path2 ? norm2 : NULL, SCRIPT_TIMEOUT_MS)
                    : -ENOTCONN;
        if (r != -ENOTCONN) {
                session_release(s);
                return r < 0 ? errno_error(r, what, norm, err) : 0;
        }
        {
                const char *script = type == RP_FILE_MKDIR    ? mkdir_script
                                     : type == RP_FILE_REMOVE ? remove_script
                                                              : move_script;
                const char *argv[] = {"sh", "-c", script, "sbx-change", norm, path2 ? norm2 : NULL, NULL};
                r = exec_internal(f->exec, cid, argv, NULL, 0, SCRIPT_TIMEOUT_MS, &code, &out, NULL, err);
        }
        session_release(s);
        if (r < 0) {
                sbx_error_prefix(err, "%s %s", what, norm);
                return r;
        }
        return code != 0 ? script_error(code, what, norm, NULL, err) : 0;
}

int files_mkdir(const struct files_ctx *f, const char *user, const char *session, const char *path,
                struct sbx_error *err)
{
        return change(f, user, session, RP_FILE_MKDIR, "mkdir", path, NULL, err);
}

int files_remove(const struct files_ctx *f, const char *user, const char *session, const char *path,
                 struct sbx_error *err)
{
        return change(f, user, session, RP_FILE_REMOVE, "remove", path, NULL, err);
}

int files_move(const struct files_ctx *f, const char *user, const char *session, const char *src, const char *dst,
               struct sbx_error *err)
{
        return change(f, user, session, RP_FILE_MOVE, "move", src, dst, err);
}

int files_watch(const struct files_ctx *f, const char *user, const char *session, const char *path, bool recursive,
                struct hub_watch **ret, struct sbx_error *err)
{
        char norm[FILES_PATH_MAX], cid[65];
        struct session *s = NULL;
        int r;

        r = files_normalize(path, norm, err);
        if (r < 0)
                return r;
        r = open_container(f, user, session, &s, cid, err);
        if (r < 0)
                return r;
        r = via_runner(f, user, session)
                    ? hub_watch_start(f->runner, user, session, norm, recursive, SCRIPT_TIMEOUT_MS, ret)
                    : -ENOTCONN;
        session_release(s);
        switch (r) {
        case 0:
                return 0;
        case -ENOTCONN:
                return sbx_error_set(err, -ENOTSUP, 0,
                                     "watch: %s: watching needs the session's runner, and this container has none",
                                     norm);
        case -EMFILE:
                return sbx_error_set(err, -EUSERS, 0, "busy: the session has %d directory watches already",
                                     HUB_WATCH_PER_SESSION);
        case -EDQUOT:
                return sbx_error_set(err, -EUSERS, 0, "busy: the user has %d directory watches already",
                                     HUB_WATCH_PER_USER);
        case -ENFILE:
                return sbx_error_set(err, -EUSERS, 0, "busy: the daemon has %d directory watches already",
                                     HUB_WATCH_GLOBAL);
        case -ENOSPC:
                return sbx_error_set(err, -EUSERS, 0,
                                     "busy: watch %s: the container's inotify limits (max_user_watches) are reached",
                                     norm);
        default:
                return errno_error(r, "watch", norm, err);
        }
}
