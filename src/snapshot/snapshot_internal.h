/* snapshot_internal.h — what the snapshot module's files share:
 *   snapshot.c          the operations (take, restore, fork, delete, gc) and their records
 *   snapshot_copy.c     file copies (reflink, else sparse) and the tree removal, fd-relative
 *   snapshot_archive.c  the compressed tar of a workspace tree (the only libarchive user)
 * Private to src/snapshot/. */
#ifndef SANDBOXD_SNAPSHOT_INTERNAL_H
#define SANDBOXD_SNAPSHOT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/common.h"

#define SNAP_MAX_ENTRIES 1000000 /* entries of a tree packed or unpacked */
#define SNAP_MAX_EXTENTS 65536   /* data extents of a file kept as a sparse map */
#define SNAP_MAX_DEPTH 256
#define SNAP_PATH_MAX 4096

/* Copy the regular file srcfd into dstfd (empty, opened for writing):
 * FICLONE when the file system can (*ret_reflinked), else only the data
 * extents (SEEK_DATA / SEEK_HOLE), the holes left as holes; dst ends with
 * src's size. Bytes allocated to dst in *ret_bytes (st_blocks * 512). */
int snapcopy_file(int srcfd, int dstfd, bool *ret_reflinked, int64_t *ret_bytes);

/* Remove name under dirfd and everything below it, at any depth, following
 * no symlink and crossing no mount (a mount point below is an error,
 * -EBUSY; sbx_remove_tree_at). Missing: 0. */
int snapcopy_remove_at(int dirfd, const char *name);
/* Empty the directory dirfd itself the same way. */
int snapcopy_empty_dir(int dirfd);

struct snaparchive_stats {
        uint64_t entries;
        uint64_t bytes;   /* file data */
        uint64_t skipped; /* device nodes, FIFOs, sockets, mount points: not kept */
};

/* Write the tree under dirfd (not dirfd's own entry) to outfd as a
 * zstd-compressed pax tar: regular files (a sparse one as its data extents
 * and a map, GNU sparse 1.0: its holes are neither read nor stored),
 * directories and symlinks, modes and mtimes, no owners. Bounded by
 * max_bytes of file data (holes not counted), SNAP_MAX_ENTRIES entries and
 * SNAP_MAX_DEPTH levels (-EFBIG, the message naming the bound), and by
 * max_out bytes written to outfd (-EDQUOT: the user's snapshot quota
 * left), checked as it goes. */
int snaparchive_pack(int dirfd, int outfd, uint64_t max_bytes, uint64_t max_out, struct snaparchive_stats *ret_stats,
                     struct sbx_error *err);

/* Unpack infd's archive into dirfd (expected empty), every entry owned by
 * uid:uid. Refuses (-EINVAL, nothing followed) absolute paths, "..",
 * hardlinks and any type but files, directories and symlinks; drops setuid
 * and setgid; bounded like pack. A file's holes, and its blocks of zeros,
 * are left as holes. */
int snaparchive_unpack(int infd, int dirfd, uid_t uid, uint64_t max_bytes, struct snaparchive_stats *ret_stats,
                       struct sbx_error *err);

#endif
