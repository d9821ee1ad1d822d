/* cells_spool.h — private to src/cells/: a cell's output by reference. Each
 * cell spools its stdout, its stderr and every other output (one JSON line
 * per output: display data, results, errors) to
 * {data_dir}/cells/<execution_id>.{stdout,stderr,outputs}, each stream
 * capped at EXEC_OUTPUT_CAP_BYTES (bytes past it are counted, not kept). What the
 * result cannot carry inline is read from here by offset (get_execution,
 * the MCP resources), as an execution's spool is.
 *
 * Not thread-safe: the caller serialises appends (the context's lock) and
 * a read opens the file itself. */
#ifndef SANDBOXD_CELLS_SPOOL_H
#define SANDBOXD_CELLS_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cell_stream {
        CELL_STDOUT,
        CELL_STDERR,
        CELL_OUTPUTS,
        CELL_STREAMS,
};

/* A stream's first bytes stay in memory: its file is made only when it
 * outgrows this (bounded: CELLS_RECENT_MAX cells keep at most this much per
 * stream after they end). */
#define CELL_SPOOL_MEM 4096

struct cell_spool;

/* What an ended cell's spool leaves: the streams that never outgrew memory
 * (mem, len) and which streams have a file. */
struct cell_spool_kept {
        char *mem[CELL_STREAMS];
        size_t len[CELL_STREAMS];
        bool file[CELL_STREAMS];
        bool lost;
};

const char *cell_stream_name(enum cell_stream s);

/* A cell's spool; each of its three files is created (O_EXCL, O_NOFOLLOW,
 * 0600) by the append that takes its stream past CELL_SPOOL_MEM. */
int cell_spool_open(const char *dir, const char *id, uint64_t cap, struct cell_spool **ret);
/* Append; *ret_offset is where the bytes start in the stream. -ENOSPC when
 * they are past the cap (counted in the total, not kept). */
int cell_spool_append(struct cell_spool *s, enum cell_stream st, const void *data, size_t len, uint64_t *ret_offset);
/* What an append may still keep in a stream before its cap. A record
 * written in several appends checks this first, to be kept whole or not at
 * all; one that does not fit is counted with cell_spool_skip. */
uint64_t cell_spool_room(const struct cell_spool *s, enum cell_stream st);
/* Count len bytes produced and not kept (past the cap). */
void cell_spool_skip(struct cell_spool *s, enum cell_stream st, uint64_t len);
uint64_t cell_spool_total(const struct cell_spool *s, enum cell_stream st);
/* Whether a stream has outgrown memory into its file. */
bool cell_spool_has_file(const struct cell_spool *s, enum cell_stream st);
/* Bytes produced but not kept (past the cap or a failed write). */
bool cell_spool_lost(const struct cell_spool *s);
/* Close the spool; returns what memory held (NULL: s NULL or out of memory,
 * then every stream is taken to have a file), for cell_spool_read_kept and
 * cell_spool_remove, freed with cell_spool_kept_free. */
struct cell_spool_kept *cell_spool_close(struct cell_spool *s);
void cell_spool_kept_free(struct cell_spool_kept *k);
/* cell_spool_read of a cell in flight (s its open spool, NULL: files only)
 * or ended (k what its spool kept): a stream without a file from memory. */
int cell_spool_read_live(const struct cell_spool *s, const char *dir, const char *id, enum cell_stream st,
                         uint64_t offset, size_t max, char **ret, size_t *ret_len);
int cell_spool_read_kept(const struct cell_spool_kept *k, const char *dir, const char *id, enum cell_stream st,
                         uint64_t offset, size_t max, char **ret, size_t *ret_len);

/* Up to max bytes of a stream from offset (fewer at its end; none for a
 * stream that has no file: it never got a byte). */
int cell_spool_read(const char *dir, const char *id, enum cell_stream st, uint64_t offset, size_t max, char **ret,
                    size_t *ret_len);
/* Remove a cell's files (k NULL: all three names; else those it made). */
void cell_spool_remove(const char *dir, const char *id, const struct cell_spool_kept *k);
/* Remove every spool file in dir (at start: the records are in memory). */
void cell_spool_wipe(const char *dir);

#endif
