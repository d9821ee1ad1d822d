/* test_session_state.c — the session lifecycle's table (session_internal.h):
 * every (transition, from, to) the table has is driven through
 * session_change_locked on a session of a real manager (the fake engine, a
 * real sqlite store) and lands, in memory and in the store's row; every one
 * it lacks is refused and changes nothing. The table is written out again
 * here, so a change to it is a change to this test. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/session/session_internal.h"
#include "fake_engine.h"
#include "sandboxd/config.h"
#include "sandboxd/log.h"
#include "sandboxd/portpool.h"
#include "sandboxd/store.h"

#define C SESSION_CREATING
#define R SESSION_RUNNING
#define S SESSION_STOPPED
#define E SESSION_ERROR
#define P SESSION_PAUSED

static const struct {
        enum session_transition t;
        enum session_state from[SESSION_STATE_COUNT];
        size_t n_from;
        enum session_state to[2];
        size_t n_to;
} expected[] = {
        {SESSION_T_CREATE, {S, E, R, P, C}, 5, {C}, 1},
        {SESSION_T_CREATED, {C}, 1, {R}, 1},
        {SESSION_T_CREATE_FAILED, {C}, 1, {E}, 1},
        {SESSION_T_FAIL, {R, P, E}, 3, {E}, 1},
        {SESSION_T_PAUSE, {R}, 1, {P}, 1},
        {SESSION_T_RESUME, {P}, 1, {R}, 1},
        {SESSION_T_RESUME_FAILED, {P}, 1, {E}, 1},
        {SESSION_T_STOP, {C, R, S, E, P}, 5, {S}, 1},
        {SESSION_T_EVICT, {C, R, S, E, P}, 5, {S}, 1},
        {SESSION_T_DESTROY, {C, R, S, E, P}, 5, {S}, 1},
        {SESSION_T_ADOPT, {C, R, S, E, P}, 5, {R, P}, 2},
        {SESSION_T_LOST, {C, R, S, E, P}, 5, {E}, 1},
};

static bool in_expected(enum session_transition t, enum session_state from, enum session_state to)
{
        for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
                bool f = false, o = false;
                if (expected[i].t != t)
                        continue;
                for (size_t k = 0; k < expected[i].n_from; k++)
                        f |= expected[i].from[k] == from;
                for (size_t k = 0; k < expected[i].n_to; k++)
                        o |= expected[i].to[k] == to;
                return f && o;
        }
        return false;
}

static char tmpdir[] = "/tmp/sandboxd-unit-session-state-XXXXXX";
static struct sbx_config cfg;
static struct store *st;
static struct portpool *pp;
static struct engine *eng;
static struct session_manager *mgr;

static void setup(void)
{
        struct sbx_error err = {0};
        char db[SBX_PATH_MAX];

        cr_assert_not_null(mkdtemp(tmpdir));
        config_defaults(&cfg);
        snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", tmpdir);
        cfg.max_sessions = cfg.max_sessions_per_user = 1000; /* live ones are left behind */
        snprintf(db, sizeof(db), "%s/state.db", tmpdir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(portpool_new(st, 41000, 41099, 1, &pp, &err), 0, "%s", err.msg);
        eng = fake_engine_new();
        cr_assert_not_null(eng);
        cr_assert_eq(session_manager_new(&cfg, eng, st, pp, NULL, &mgr, &err), 0, "%s", err.msg);
}

static void teardown(void)
{
        char cmd[SBX_PATH_MAX + 16];

        session_manager_free(mgr);
        engine_free(eng);
        portpool_free(pp);
        store_close(st);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir); /* our own mkdtemp name, no tenant string */
        cr_assert_eq(system(cmd), 0);
}

TestSuite(session_state, .init = setup, .fini = teardown);

Test(session_state, the_table_is_the_documented_one)
{
        for (int t = 0; t < SESSION_T_COUNT; t++) {
                cr_assert_not_null(session_transition_row((enum session_transition)t));
                for (int from = 0; from < SESSION_STATE_COUNT; from++)
                        for (int to = 0; to < SESSION_STATE_COUNT; to++)
                                cr_assert_eq(session_transition_allowed(t, from, to), in_expected(t, from, to),
                                             "%s: %s -> %s", session_transition_row(t)->name,
                                             session_state_to_string(from), session_state_to_string(to));
        }
        cr_assert_null(session_transition_row(SESSION_T_COUNT));
        cr_assert_not(session_transition_allowed(SESSION_T_COUNT, S, S));
        cr_assert_not(session_transition_allowed(SESSION_T_STOP, SESSION_STATE_COUNT, S));
}

/* Every triple, allowed or not, on a session of the manager: an allowed one
 * lands in memory and in the store's row; a refused one changes neither. */
Test(session_state, every_transition_is_driven_and_every_other_refused)
{
        struct sbx_error err = {0};
        size_t driven = 0, refused = 0;

        for (int t = 0; t < SESSION_T_COUNT; t++) {
                for (int from = 0; from < SESSION_STATE_COUNT; from++) {
                        for (int to = 0; to < SESSION_STATE_COUNT; to++) {
                                struct session *s;
                                struct store_session row;
                                char id[32];
                                int r;

                                snprintf(id, sizeof(id), "t%d-%d-%d", t, from, to);
                                cr_assert_eq(session_lookup_ref(mgr, "alice", id, true, &s, &err), 0, "%s", err.msg);
                                pthread_mutex_lock(&s->lock);
                                s->state = (enum session_state)from; /* where the test starts it */
                                r = session_change_locked(s, t, to, "test", NULL);
                                enum session_state now = s->state;
                                pthread_mutex_unlock(&s->lock);
                                bool have_row = store_session_get(st, "alice", id, &row) == 0;
                                if (in_expected(t, from, to)) {
                                        cr_assert_eq(r, 0, "%s %d -> %d", session_transition_row(t)->name, from, to);
                                        cr_assert_eq(now, (enum session_state)to);
                                        if (t == SESSION_T_DESTROY) {
                                                cr_assert_not(have_row, "a destroyed session writes no row");
                                        } else {
                                                cr_assert(have_row);
                                                cr_assert_str_eq(row.state, session_state_to_string(to));
                                        }
                                        driven++;
                                } else {
                                        cr_assert_eq(r, -EPERM, "%s %d -> %d", session_transition_row(t)->name, from,
                                                     to);
                                        cr_assert_eq(now, (enum session_state)from, "a refused change changes nothing");
                                        cr_assert_not(have_row, "a refused change writes no row");
                                        char **lines = NULL;
                                        size_t n = 0;
                                        cr_assert_eq(log_session_lines("alice", id, 4, &lines, &n), 0);
                                        cr_assert(n > 0 && strstr(lines[n - 1], "refused"), "the refusal is logged");
                                        log_lines_free(lines, n);
                                        refused++;
                                }
                                session_unref(s);
                        }
                }
        }
        cr_assert_eq(driven + refused, (size_t)SESSION_T_COUNT * SESSION_STATE_COUNT * SESSION_STATE_COUNT);
        cr_assert_gt(refused, driven, "the table allows fewer changes than it refuses");
}

/* session_owner: the index by id alone finds the one user of an id, refuses
 * an id two users share or nobody has, and forgets a session unlinked from
 * the table (the E2B proxy's sandbox lookup, which no longer scans). */
Test(session_state, the_owner_of_an_id_comes_from_the_index)
{
        struct sbx_error err = {0};
        struct session *a, *b, *c;
        char user[SESSION_KEY_MAX + 1] = "";

        cr_assert_eq(session_lookup_ref(mgr, "alice", "shared", true, &a, &err), 0, "%s", err.msg);
        cr_assert_eq(session_lookup_ref(mgr, "bob", "shared", true, &b, &err), 0, "%s", err.msg);
        cr_assert_eq(session_lookup_ref(mgr, "alice", "own", true, &c, &err), 0, "%s", err.msg);
        cr_assert_eq(session_owner(mgr, "own", user, sizeof(user)), 0);
        cr_assert_str_eq(user, "alice");
        cr_assert_eq(session_owner(mgr, "shared", user, sizeof(user)), -ENOENT, "two users: nobody's");
        cr_assert_eq(session_owner(mgr, "nobody", user, sizeof(user)), -ENOENT);
        cr_assert_eq(session_owner(mgr, "ow", user, sizeof(user)), -ENOENT, "a prefix is not the id");

        pthread_mutex_lock(&mgr->lock);
        session_unlink_locked(mgr, a);
        pthread_mutex_unlock(&mgr->lock);
        cr_assert_eq(session_owner(mgr, "shared", user, sizeof(user)), 0, "the unlinked one is gone from the index");
        cr_assert_str_eq(user, "bob");
        pthread_mutex_lock(&mgr->lock);
        session_unlink_locked(mgr, c);
        pthread_mutex_unlock(&mgr->lock);
        cr_assert_eq(session_owner(mgr, "own", user, sizeof(user)), -ENOENT);
        session_unref(a);
        session_unref(b);
        session_unref(c);
}
