/* Unit tests of the start line (startline.h): a user alone takes every
 * slot, a start past its wait is refused busy with the line's length, and
 * once another user waits, a freed slot goes to that user, not to the one
 * already holding its share. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "sandboxd/startline.h"
#include "testenv.h"

struct taker {
        struct startline *l;
        const char *user;
        int r;
        bool done;
        pthread_mutex_t m;
};

static void *take_main(void *p)
{
        struct taker *t = p;
        int r = startline_take(t->l, t->user, NULL, NULL);

        pthread_mutex_lock(&t->m);
        t->r = r;
        t->done = true;
        pthread_mutex_unlock(&t->m);
        return NULL;
}

static bool taker_done(struct taker *t)
{
        bool d;

        pthread_mutex_lock(&t->m);
        d = t->done;
        pthread_mutex_unlock(&t->m);
        return d;
}

Test(startline, alone_takes_every_slot_then_busy_with_the_line)
{
        static struct startline l = STARTLINE_INIT("test starts", 2, 1, 200);
        struct sbx_error err = {0};
        int64_t waited = -1;

        cr_assert_eq(startline_take(&l, "alice", &waited, NULL), 0);
        cr_assert_geq(waited, 0);
        cr_assert_eq(startline_take(&l, "alice", NULL, NULL), 0, "nobody else waits: past the share");
        cr_assert_eq(startline_take(&l, "alice", NULL, &err), -EBUSY);
        cr_assert(strstr(err.msg, "2 test starts are under way and 0 waiting"), "%s", err.msg);
        cr_assert_eq(startline_waiting(&l), 0, "the refused start left the line");
        startline_give(&l, "alice");
        cr_assert_eq(startline_take(&l, NULL, NULL, NULL), 0, "a start of no user");
        startline_give(&l, NULL);
        startline_give(&l, "alice");
        cr_assert_eq(l.running, 0);
}

Test(startline, a_freed_slot_goes_to_the_user_under_its_share)
{
        static struct startline l = STARTLINE_INIT("test starts", 2, 1, 60000);
        struct taker bob = {.l = &l, .user = "bob", .m = PTHREAD_MUTEX_INITIALIZER};
        struct taker alice = {.l = &l, .user = "alice", .m = PTHREAD_MUTEX_INITIALIZER};
        pthread_t tb, ta;

        cr_assert_eq(startline_take(&l, "alice", NULL, NULL), 0);
        cr_assert_eq(startline_take(&l, "alice", NULL, NULL), 0);
        cr_assert_eq(pthread_create(&tb, NULL, take_main, &bob), 0);
        cr_assert(TESTENV_WAIT_UNTIL(startline_waiting(&l) == 1, 10000));
        cr_assert_eq(pthread_create(&ta, NULL, take_main, &alice), 0);
        cr_assert(TESTENV_WAIT_UNTIL(startline_waiting(&l) == 2, 10000));
        startline_give(&l, "alice"); /* alice holds 1 = her share, bob waits: bob goes */
        pthread_join(tb, NULL);
        cr_assert_eq(bob.r, 0);
        cr_assert_not(taker_done(&alice), "alice waits while her share is used and bob needed a slot");
        cr_assert_eq(startline_waiting(&l), 1);
        startline_give(&l, "bob");
        pthread_join(ta, NULL);
        cr_assert_eq(alice.r, 0);
        startline_give(&l, "alice");
        startline_give(&l, "alice");
        cr_assert_eq(l.running, 0);
}
