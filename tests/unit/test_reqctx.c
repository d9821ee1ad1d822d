/* Unit tests of reqctx (the request's trace id): strict traceparent
 * parsing, request ids, the choice between them, the thread-local current
 * id (and that log lines carry it), the response traceparent. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "sandboxd/reqctx.h"

#define TRACE "4bf92f3577b34da6a3ce929d0e0e4736"

Test(reqctx, traceparent_is_parsed_strictly)
{
        static const char *const bad[] = {
                "",
                "00-" TRACE "-00f067aa0ba902b7",                           /* no flags */
                "00-" TRACE "-00f067aa0ba902b7-01-",                       /* version 00 is exactly 55 */
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01", /* zero trace id */
                "00-" TRACE "-0000000000000000-01",                        /* zero parent id */
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", /* upper case */
                "ff-" TRACE "-00f067aa0ba902b7-01",                        /* version ff */
                "0g-" TRACE "-00f067aa0ba902b7-01",
                "00_" TRACE "-00f067aa0ba902b7-01",
                "00-" TRACE "-00f067aa0ba902b7-0x",
                "01-" TRACE "-00f067aa0ba902b7-01x", /* a later version needs '-' after 55 */
        };
        char t[33];

        cr_assert(reqctx_traceparent_parse("00-" TRACE "-00f067aa0ba902b7-01", t));
        cr_assert_str_eq(t, TRACE);
        cr_assert(reqctx_traceparent_parse("01-" TRACE "-00f067aa0ba902b7-00-what-comes-later", t));
        cr_assert_not(reqctx_traceparent_parse(NULL, t));
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                cr_expect_not(reqctx_traceparent_parse(bad[i], t), "accepted %s", bad[i]);
}

Test(reqctx, request_ids_and_the_pick)
{
        char id[REQCTX_ID_MAX + 1], long_id[REQCTX_ID_MAX + 2];

        cr_assert(reqctx_request_id_valid("job-7.a:b_c"));
        cr_assert_not(reqctx_request_id_valid(""));
        cr_assert_not(reqctx_request_id_valid("a b"));
        cr_assert_not(reqctx_request_id_valid("a\"b"));
        memset(long_id, 'a', sizeof(long_id) - 1);
        long_id[sizeof(long_id) - 1] = '\0';
        cr_assert_not(reqctx_request_id_valid(long_id));
        long_id[REQCTX_ID_MAX] = '\0';
        cr_assert(reqctx_request_id_valid(long_id));

        reqctx_pick("00-" TRACE "-00f067aa0ba902b7-01", "job-7", id);
        cr_assert_str_eq(id, TRACE, "a valid traceparent wins");
        reqctx_pick("garbage", "job-7", id);
        cr_assert_str_eq(id, "job-7", "an invalid one is ignored");
        reqctx_pick("garbage", "bad id", id);
        cr_assert_eq(strlen(id), 32, "fresh: %s", id);
        cr_assert_eq(strspn(id, "0123456789abcdef"), 32);
        {
                char other[REQCTX_ID_MAX + 1];
                reqctx_pick(NULL, NULL, other);
                cr_assert_str_neq(id, other, "fresh ids differ");
        }
}

static void *other_thread(void *ud)
{
        return (void *)(strcmp(reqctx_trace_id(), "") == 0 ? ud : NULL);
}

Test(reqctx, current_id_is_per_thread_and_makes_a_traceparent)
{
        char tp[REQCTX_TRACEPARENT_LEN + 1], t[33];
        pthread_t th;
        void *res = NULL;

        cr_assert_str_eq(reqctx_trace_id(), "");
        reqctx_set(TRACE);
        cr_assert_str_eq(reqctx_trace_id(), TRACE);
        cr_assert_eq(pthread_create(&th, NULL, other_thread, (void *)1), 0);
        pthread_join(th, &res);
        cr_assert_eq(res, (void *)1, "another thread serves no request");
        cr_assert_eq(reqctx_traceparent(NULL, tp), 0);
        cr_assert(reqctx_traceparent_parse(tp, t), "%s", tp);
        cr_assert_str_eq(t, TRACE);
        cr_assert_neq(strncmp(tp + 36, "00f067aa0ba902b7", 16), 0, "a span id of its own");
        cr_assert_eq(reqctx_traceparent("job-7", tp), -EINVAL, "a request id is no W3C trace id");
        reqctx_clear();
        cr_assert_str_eq(reqctx_trace_id(), "");
}
