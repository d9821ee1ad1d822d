/* stress_engine.c — the session state machine, restart reconciliation and
 * the monitor against the fake engine (tests/helpers/fake_engine.h), for the
 * faults dockerd cannot produce on demand:
 *   - a create that fails halfway (the engine made the container, the reply
 *     is a 500): the session goes ERROR, the next request makes it RUNNING,
 *     and the container nobody knows is an orphan the restart removes;
 *   - a start that fails: ERROR, and the half-made container is removed;
 *   - a container that dies while the daemon is down: ERROR on reconcile;
 *   - a die event that is lost: the poll catches it;
 *   - a die event that comes late, for a container the session no longer
 *     uses (out of order with the recreation): the session stays RUNNING;
 *   - then many threads asking for sessions while containers die under them,
 *     with and without events: at the end each session has exactly one
 *     running container, the one it names.
 * Plain main() so it runs under TSan (scripts/test.sh --tsan); no dockerd. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_engine.h"
#include "sandboxd/config.h"
#include "sandboxd/log.h"
#include "sandboxd/monitor.h"
#include "sandboxd/portpool.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "stress.h"

#define THREADS 4
#define USERS 2
#define SESSIONS 3

/* TSan sees session_admit hold its own s->lock while live_count_locked takes
 * each other session's, in both orders across threads, and calls it a
 * lock-order inversion. Every such nesting happens under m->lock (the gate:
 * session_internal.h's order is m->lock, then s->lock), so no two threads can
 * interleave them; TSan does not model a gate lock. Only that site is waived. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
        return "deadlock:live_count_locked\n";
}

static struct sbx_config cfg;
static struct store *st;
static struct portpool *pp;
static struct engine *fe;
static struct session_manager *m;
static volatile bool stop_killer;

static enum session_state state_of(const char *user, const char *session, char cid[65], char cause[64])
{
        struct session_info info;
        enum session_state s;

        if (session_get_info(m, user, session, &info) < 0)
                return (enum session_state) - 1;
        s = info.state;
        if (cid)
                memcpy(cid, info.container_id, 65);
        if (cause)
                memcpy(cause, info.error_cause, 64);
        session_info_done(&info);
        return s;
}

static int get(const char *user, const char *session, char cid[65], struct sbx_error *err)
{
        struct session *s = NULL;
        int r = session_acquire(m, user, session, &s, err);

        if (r < 0)
                return r;
        if (cid)
                session_container_id(s, cid);
        session_release(s);
        return 0;
}

/* Wait up to ms for user:session to leave RUNNING (a deadline, never a bare sleep). */
static bool wait_not_running(const char *user, const char *session, int64_t ms)
{
        int64_t until = sbx_now_ms() + ms;

        while (state_of(user, session, NULL, NULL) == SESSION_RUNNING && sbx_now_ms() < until)
                sbx_sleep_ms(5);
        return state_of(user, session, NULL, NULL) != SESSION_RUNNING;
}

static bool wait_events(size_t at_least, int64_t ms)
{
        struct fake_engine_counts c;
        int64_t until = sbx_now_ms() + ms;

        for (;;) {
                fake_engine_counts(fe, &c);
                if (c.events_sent >= at_least || sbx_now_ms() >= until)
                        return c.events_sent >= at_least;
                sbx_sleep_ms(5);
        }
}

static int open_manager(void)
{
        struct sbx_error err = {0};
        int r = session_manager_new(&cfg, fe, st, pp, NULL, &m, &err);

        if (r < 0)
                fprintf(stderr, "stress_engine: session_manager_new: %s\n", err.msg);
        return r;
}

static void faults_at_create(void)
{
        struct sbx_error err = {0};
        char cid[65], cause[64];

        /* a create that fails halfway: ERROR, then RUNNING on the next request */
        fake_engine_fault_next_create(fe, FAKE_CREATE_HALFWAY);
        STRESS_CHECK(get("alice", "half", NULL, &err) < 0, "a create that failed halfway succeeded");
        STRESS_CHECK(state_of("alice", "half", NULL, NULL) == SESSION_ERROR, "not ERROR after a failed create");
        STRESS_CHECK(fake_engine_count_session(fe, "alice", "half", false) == 1, "the half-made container is there");
        STRESS_CHECK(get("alice", "half", cid, &err) == 0, "the retry failed: %s", err.msg);
        STRESS_CHECK(state_of("alice", "half", NULL, NULL) == SESSION_RUNNING, "not RUNNING after the retry");
        STRESS_CHECK(fake_engine_is_running(fe, cid), "the session names a container that does not run");
        STRESS_CHECK(fake_engine_count_session(fe, "alice", "half", true) == 1, "one running container");

        /* a start that fails: ERROR, and the created container is removed */
        fake_engine_fault_next_create(fe, FAKE_START_FAIL);
        STRESS_CHECK(get("alice", "start", NULL, &err) < 0, "a failed start succeeded");
        STRESS_CHECK(state_of("alice", "start", NULL, cause) == SESSION_ERROR, "not ERROR after a failed start");
        STRESS_CHECK(fake_engine_count_session(fe, "alice", "start", false) == 0,
                     "the container whose start failed was left behind");
        STRESS_CHECK(get("alice", "start", cid, &err) == 0, "the retry failed: %s", err.msg);
        STRESS_CHECK(state_of("alice", "start", NULL, NULL) == SESSION_RUNNING, "not RUNNING after the retry");

        /* while the daemon is down, this one dies */
        STRESS_CHECK(get("alice", "down", cid, &err) == 0, "%s", err.msg);
        STRESS_CHECK(fake_engine_kill(fe, cid, 1, true) == 0, "kill");
}

static void restart_reconciles(void)
{
        struct session_reconcile_report rep = {0};
        struct sbx_error err = {0};
        char cid[65], cause[64];

        session_manager_free(m);
        m = NULL;
        if (open_manager() < 0)
                return;
        STRESS_CHECK(session_reconcile(m, &rep, &err) == 0, "reconcile: %s", err.msg);
        STRESS_CHECK(rep.removed_orphans >= 1, "the half-made container is an orphan (%zu removed)",
                     rep.removed_orphans);
        STRESS_CHECK(fake_engine_count_session(fe, "alice", "half", false) == 1, "the orphan is still there");
        STRESS_CHECK(state_of("alice", "half", cid, NULL) == SESSION_RUNNING && fake_engine_is_running(fe, cid),
                     "the running container was not adopted");
        STRESS_CHECK(state_of("alice", "down", NULL, cause) == SESSION_ERROR, "died while down, not ERROR");
        STRESS_CHECK(strcmp(cause, "exited while the daemon was down") == 0, "cause %s", cause);
        STRESS_CHECK(rep.adopted >= 2, "%zu adopted", rep.adopted);
}

static void events_lost_and_late(void)
{
        struct sbx_error err = {0};
        struct fake_engine_counts c;
        char c1[65], c2[65], cause[64];

        /* lost: the poll catches the death */
        STRESS_CHECK(get("bob", "lost", c1, &err) == 0, "%s", err.msg);
        fake_engine_drop_events(fe, true);
        STRESS_CHECK(fake_engine_kill(fe, c1, 137, true) == 0, "kill");
        STRESS_CHECK(wait_not_running("bob", "lost", 10000), "a death whose event was lost went unnoticed");
        fake_engine_drop_events(fe, false);
        STRESS_CHECK(state_of("bob", "lost", NULL, cause) == SESSION_ERROR &&
                             strcmp(cause, "exited with code 137") == 0,
                     "cause %s", cause);

        /* late: the old container's die and destroy after the new one runs */
        fake_engine_drop_events(fe, true);
        STRESS_CHECK(get("bob", "late", c1, &err) == 0, "%s", err.msg);
        STRESS_CHECK(fake_engine_kill(fe, c1, 9, true) == 0, "kill");
        STRESS_CHECK(wait_not_running("bob", "late", 10000), "the poll missed the death");
        STRESS_CHECK(get("bob", "late", c2, &err) == 0, "recreate: %s", err.msg);
        fake_engine_drop_events(fe, false);
        STRESS_CHECK(strcmp(c1, c2) != 0, "recreated on the same container");
        fake_engine_counts(fe, &c);
        STRESS_CHECK(fake_engine_inject_event(fe, "die", c1, 9) == 0, "inject");
        STRESS_CHECK(fake_engine_inject_event(fe, "destroy", c1, -1) == 0, "inject");
        STRESS_CHECK(wait_events(c.events_sent + 2, 10000), "the late events were not delivered");
        STRESS_CHECK(state_of("bob", "late", c1, NULL) == SESSION_RUNNING && strcmp(c1, c2) == 0,
                     "a late event for the old container failed the session on its new one");
}

static void killer(int i, void *ud)
{
        (void)ud;
        if (i != 0)
                return;
        for (unsigned k = 0; !__atomic_load_n(&stop_killer, __ATOMIC_RELAXED); k++) {
                char user[8], session[8], cid[65];
                snprintf(user, sizeof(user), "u%u", k % USERS);
                snprintf(session, sizeof(session), "s%u", (k / USERS) % SESSIONS);
                if (state_of(user, session, cid, NULL) == SESSION_RUNNING && cid[0])
                        (void)fake_engine_kill(fe, cid, 137, k % 2 == 0); /* half of the deaths unannounced */
                sbx_sleep_ms(3);
        }
}

static void asker(int i, void *ud)
{
        int n = *(int *)ud;

        if (i == 0) {
                killer(0, NULL);
                return;
        }
        for (int k = 0; k < n; k++) {
                char user[8], session[8];
                struct sbx_error err = {0};
                snprintf(user, sizeof(user), "u%d", (i + k) % USERS);
                snprintf(session, sizeof(session), "s%d", k % SESSIONS);
                (void)get(user, session, NULL, &err); /* a container may die inside its start check */
        }
        if (__atomic_sub_fetch((int *)ud + 1, 1, __ATOMIC_RELAXED) == 0)
                __atomic_store_n(&stop_killer, true, __ATOMIC_RELAXED);
}

static void concurrent(void)
{
        int args[2] = {stress_n(2000), THREADS};

        stress_threads(THREADS + 1, asker, args);
        for (int u = 0; u < USERS; u++)
                for (int s = 0; s < SESSIONS; s++) {
                        char user[8], session[8], cid[65] = "";
                        struct sbx_error err = {0};
                        snprintf(user, sizeof(user), "u%d", u);
                        snprintf(session, sizeof(session), "s%d", s);
                        STRESS_CHECK(get(user, session, cid, &err) == 0, "%s:%s: %s", user, session, err.msg);
                        STRESS_CHECK(fake_engine_is_running(fe, cid), "%s:%s names a dead container", user, session);
                        STRESS_CHECK(fake_engine_count_session(fe, user, session, true) == 1,
                                     "%s:%s has %zu running containers", user, session,
                                     fake_engine_count_session(fe, user, session, true));
                }
}

int main(void)
{
        struct sbx_error err = {0};
        struct monitor *mon = NULL;

        config_defaults(&cfg);
        snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s/data", stress_tmpdir());
        snprintf(cfg.instance, sizeof(cfg.instance), "stress-engine");
        snprintf(cfg.image, sizeof(cfg.image), "fake/image:latest");
        log_set_level(LOG_LEVEL_ERROR); /* thousands of transitions: their lines say nothing here */
        cfg.startup_checks = 2;
        cfg.startup_check_interval_ms = 1;
        cfg.monitor_interval_ms = 50;
        cfg.pool_size = 0;
        cfg.port_range_lo = 28000;
        cfg.port_range_hi = 28999;
        cfg.ports_per_session = 2;
        {
                char db[SBX_PATH_MAX + 32];
                snprintf(db, sizeof(db), "%s/sandboxd.db", stress_tmpdir());
                fe = fake_engine_new();
                if (!fe || store_open(db, &st, &err) < 0 ||
                    portpool_new(st, cfg.port_range_lo, cfg.port_range_hi, cfg.ports_per_session, &pp, &err) < 0 ||
                    open_manager() < 0) {
                        fprintf(stderr, "stress_engine: set-up: %s\n", err.msg);
                        return 2;
                }
        }
        faults_at_create();
        restart_reconciles();
        if (m && monitor_start(&cfg, fe, m, &mon, &err) < 0)
                STRESS_CHECK(false, "monitor_start: %s", err.msg);
        if (m && mon) {
                events_lost_and_late();
                concurrent();
        }
        monitor_stop(mon);
        session_manager_free(m);
        engine_free(fe);
        portpool_free(pp);
        store_close(st);
        return stress_done("stress_engine");
}
