/* test_cells_spool.c — a cell's output by reference (src/cells/cells_spool.c):
 * a stream's first CELL_SPOOL_MEM bytes stay in memory and make no file
 * (issue 34: a warm 1+1 made, wrote, closed and later unlinked a file, a
 * sixth of the daemon's CPU per cell); past that the file holds the stream
 * from its start. Either way a read by offset gives the same bytes, while
 * the cell runs and after it ended, and removal unlinks only files made. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/cells/cells_spool.h"

static char dir[] = "/tmp/sbx-test-spool.XXXXXX";

static void setup(void)
{
        cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
        cell_spool_wipe(dir);
        rmdir(dir);
}

static bool has_file(const char *id, const char *stream)
{
        char path[512];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s.%s", dir, id, stream);
        return stat(path, &st) == 0;
}

TestSuite(cells_spool, .init = setup, .fini = teardown);

Test(cells_spool, small_streams_make_no_file)
{
        struct cell_spool *s;
        uint64_t off = 99;
        char *got;
        size_t n;

        cr_assert_eq(cell_spool_open(dir, "c1", 1 << 20, &s), 0);
        cr_assert_eq(cell_spool_append(s, CELL_OUTPUTS, "{\"a\":1}\n", 8, &off), 0);
        cr_assert_eq(off, 0);
        cr_assert_eq(cell_spool_append(s, CELL_OUTPUTS, "{\"b\":2}\n", 8, &off), 0);
        cr_assert_eq(off, 8);
        cr_assert_not(cell_spool_has_file(s, CELL_OUTPUTS));
        cr_assert_not(has_file("c1", "outputs"), "no file for a stream in memory");
        cr_assert_eq(cell_spool_read_live(s, dir, "c1", CELL_OUTPUTS, 8, 100, &got, &n), 0);
        cr_assert_eq(n, 8);
        cr_assert_str_eq(got, "{\"b\":2}\n");
        free(got);

        struct cell_spool_kept *k = cell_spool_close(s);
        cr_assert_not_null(k);
        cr_assert_not(k->file[CELL_OUTPUTS]);
        cr_assert_eq(cell_spool_read_kept(k, dir, "c1", CELL_OUTPUTS, 0, 100, &got, &n), 0);
        cr_assert_eq(n, 16);
        cr_assert_eq(memcmp(got, "{\"a\":1}\n{\"b\":2}\n", 16), 0);
        free(got);
        cr_assert_eq(cell_spool_read_kept(k, dir, "c1", CELL_STDOUT, 0, 100, &got, &n), 0);
        cr_assert_eq(n, 0, "a stream that never got a byte reads empty");
        free(got);
        cell_spool_remove(dir, "c1", k);
        cell_spool_kept_free(k);
}

Test(cells_spool, a_stream_past_memory_moves_whole_to_its_file)
{
        struct cell_spool *s;
        size_t big = CELL_SPOOL_MEM + 100, n;
        char *data = malloc(big), *got;
        uint64_t off;

        for (size_t i = 0; i < big; i++)
                data[i] = (char)('a' + i % 26);
        cr_assert_eq(cell_spool_open(dir, "c2", 1 << 20, &s), 0);
        cr_assert_eq(cell_spool_append(s, CELL_STDOUT, data, 1000, &off), 0);
        cr_assert_not(has_file("c2", "stdout"));
        cr_assert_eq(cell_spool_append(s, CELL_STDOUT, data + 1000, big - 1000, &off), 0);
        cr_assert_eq(off, 1000);
        cr_assert(cell_spool_has_file(s, CELL_STDOUT));
        cr_assert(has_file("c2", "stdout"));
        /* the file holds the stream from its start: what memory held first */
        cr_assert_eq(cell_spool_read_live(s, dir, "c2", CELL_STDOUT, 0, big, &got, &n), 0);
        cr_assert_eq(n, big);
        cr_assert_eq(memcmp(got, data, big), 0);
        free(got);
        cr_assert_eq(cell_spool_append(s, CELL_STDERR, "e", 1, NULL), 0);

        struct cell_spool_kept *k = cell_spool_close(s);
        cr_assert(k->file[CELL_STDOUT]);
        cr_assert_not(k->file[CELL_STDERR]);
        cr_assert_eq(cell_spool_read_kept(k, dir, "c2", CELL_STDOUT, big - 10, 100, &got, &n), 0);
        cr_assert_eq(n, 10);
        cr_assert_eq(memcmp(got, data + big - 10, 10), 0);
        free(got);
        cr_assert_eq(cell_spool_read_kept(k, dir, "c2", CELL_STDERR, 0, 100, &got, &n), 0);
        cr_assert_str_eq(got, "e");
        free(got);
        cell_spool_remove(dir, "c2", k);
        cr_assert_not(has_file("c2", "stdout"), "removed");
        cell_spool_kept_free(k);
        free(data);
}

Test(cells_spool, the_cap_counts_what_memory_holds)
{
        struct cell_spool *s;

        cr_assert_eq(cell_spool_open(dir, "c3", 10, &s), 0);
        cr_assert_eq(cell_spool_append(s, CELL_STDOUT, "0123456789", 10, NULL), 0);
        cr_assert_eq(cell_spool_append(s, CELL_STDOUT, "x", 1, NULL), -ENOSPC);
        cr_assert_eq(cell_spool_total(s, CELL_STDOUT), 11);
        cr_assert(cell_spool_lost(s));
        cell_spool_kept_free(cell_spool_close(s));
}
