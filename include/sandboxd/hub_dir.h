/* hub_dir.h — a session's runner directory on the host beside its
 * container: {root}/<32 hex of sha256(user:session)>, root 0755 in a root
 * 0700 parent, bind-mounted read-only into that container, holding the
 * listening runner.sock (0666). Used by the in-process runner hub and by the
 * node agent (node.h) alike. Sockets are bound through the directory fd,
 * never a path a container could have changed. Plain libc; no threads. */
#ifndef SANDBOXD_HUB_DIR_H
#define SANDBOXD_HUB_DIR_H

#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h" /* SBX_PATH_MAX */

/* The directory's name for user:session (32 hex digits). 0 or -ENOMEM. */
int hub_dir_key(const char *user, const char *session, char ret[33]);
/* Make (create true) or open the session's directory under root, replace
 * a stale runner.sock and listen on it: *ret_dirfd, *ret_lfd (non-blocking,
 * O_CLOEXEC) and its path. -ENOENT when create is false and it does not
 * exist. */
int hub_dir_listen(const char *root, const char *user, const char *session, bool create, int *ret_dirfd, int *ret_lfd,
                   char ret_path[SBX_PATH_MAX], struct sbx_error *err);
/* Listen on another socket name in the session's open directory (the
 * gateway's egress.sock, fwd.sock), replacing a stale one; mode 0666. */
int hub_dir_listen_name(int dirfd, const char *name, int *ret_lfd);
/* The session's CA bundle (secrets_ca.h), RP_SOCKET_DIR "/" this inside. */
#define RUNNER_DIR_CA_BUNDLE "ca-bundle.pem"
/* Write name (mode 0644) into the directory at dir, atomically (a
 * temporary file renamed over it), opened without following links. 0, or
 * -EEXIST when it is there already and replace is false. */
int hub_dir_put_file(const char *dir, const char *name, const void *data, size_t len, bool replace);
/* Whether the directory at dir holds name (not following links). */
bool hub_dir_has(const char *dir, const char *name);
/* Remove the directory and what sandboxd put in it. */
void hub_dir_remove(const char *root, const char *user, const char *session);
/* Rename the directory of (from) to that of (to), replacing a stale one of
 * (to). Done (0) when from is gone and to exists. */
int hub_dir_rename(const char *root, const char *from_user, const char *from_session, const char *to_user,
                   const char *to_session, char ret_path[SBX_PATH_MAX], struct sbx_error *err);

#endif
