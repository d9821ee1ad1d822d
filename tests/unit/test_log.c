/* test_log.c — the ring of recent session log lines behind `sandboxctl logs`: filtered by
 * session, the newest `max` oldest first, bounded when the ring wraps. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/log.h"

static void quiet(void)
{
        int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        cr_assert_geq(fd, 0);
        dup2(fd, STDERR_FILENO);
        close(fd);
}

Test(log, session_lines, .init = quiet)
{
        char **lines = NULL;
        size_t n = 0;

        log_info("no session: not kept");
        for (int i = 0; i < 10; i++) {
                log_ctx(LOG_LEVEL_INFO, "u1", "a", NULL, "a line %d", i);
                log_ctx(LOG_LEVEL_INFO, "u1", "b", NULL, "b line %d", i);
        }
        log_ctx(LOG_LEVEL_DEBUG, "u1", "a", NULL, "below the level: not kept");
        cr_assert_eq(log_session_lines("u1", "a", 3, &lines, &n), 0);
        cr_assert_eq(n, 3);
        cr_assert_not_null(strstr(lines[0], "\"msg\":\"a line 7\""), "%s", lines[0]);
        cr_assert_not_null(strstr(lines[2], "\"msg\":\"a line 9\""), "%s", lines[2]);
        cr_assert_not_null(strstr(lines[2], "\"session_id\":\"a\""), "%s", lines[2]);
        log_lines_free(lines, n);

        cr_assert_eq(log_session_lines("u1", "b", 100, &lines, &n), 0);
        cr_assert_eq(n, 10);
        cr_assert_not_null(strstr(lines[0], "b line 0"));
        log_lines_free(lines, n);
        cr_assert_eq(log_session_lines("u2", "a", 100, &lines, &n), 0);
        cr_assert_eq(n, 0, "another user's session of the same name");
        log_lines_free(lines, n);
        cr_assert_eq(log_session_lines("u1", "a", 0, &lines, &n), -EINVAL);

        /* wrap: 5000 lines of c push a and b out of the 4096-line ring */
        for (int i = 0; i < 5000; i++)
                log_ctx(LOG_LEVEL_INFO, "u1", "c", NULL, "c line %d", i);
        cr_assert_eq(log_session_lines("u1", "a", 100, &lines, &n), 0);
        cr_assert_eq(n, 0);
        log_lines_free(lines, n);
        cr_assert_eq(log_session_lines("u1", "c", 10000, &lines, &n), 0);
        cr_assert_eq(n, 4096);
        cr_assert_not_null(strstr(lines[0], "\"c line 904\""), "%s", lines[0]);
        cr_assert_not_null(strstr(lines[4095], "\"c line 4999\""), "%s", lines[4095]);
        log_lines_free(lines, n);
}
