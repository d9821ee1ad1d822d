/* stress_store.c — the store and the modules that share it across threads:
 * the port pool, the per-session uids, the quota overrides, sessions and the
 * audit log, called from many threads at once on one struct store, as the
 * daemon's workers do.
 *
 * What must hold: no port is in two sessions' blocks at once (a shared
 * owner table, claimed with compare-and-swap, catches a double hand-out); a
 * session's uid and block read back as assigned; a quota override a thread
 * set is what it reads back (no other thread touches its user); every audit
 * row is counted; everything released leaves the pool empty. ThreadSanitizer
 * checks the locking underneath. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/config.h"
#include "sandboxd/portpool.h"
#include "sandboxd/quota.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "stress.h"

#define THREADS 8
#define SESSIONS 4 /* per thread, reused round the loop */
#define PORT_LO 47000
#define PORT_HI 47999
#define PER_SESSION 4

static struct store *st;
static struct portpool *pp;
static struct quota *q;
static struct sbx_config cfg;
static int owner[PORT_HI - PORT_LO + 1]; /* atomic: 0 free, else 1 + the holding session's number */
static int64_t audited;                  /* atomic */

static void claim_ports(const int *ports, int me)
{
        for (int k = 0; k < PER_SESSION; k++) {
                int want = 0;
                int *o = &owner[ports[k] - PORT_LO];
                STRESS_CHECK(__atomic_compare_exchange_n(o, &want, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
                                     want == me,
                             "port %d handed to session %d while session %d holds it", ports[k], me, want);
        }
}

static void free_ports(const int *ports, int me)
{
        for (int k = 0; k < PER_SESSION; k++) {
                int want = me;
                (void)__atomic_compare_exchange_n(&owner[ports[k] - PORT_LO], &want, 0, false, __ATOMIC_ACQ_REL,
                                                  __ATOMIC_ACQUIRE);
        }
}

static void worker(int t, void *ud)
{
        char user[32];
        int rounds = stress_n(200);

        (void)ud;
        snprintf(user, sizeof(user), "user%d", t);
        for (int k = 0; k < rounds; k++) {
                struct sbx_error err = {0};
                struct store_session row = {0}, back;
                struct quota_limits lim;
                char session[32];
                int ports[PER_SESSION], again[PER_SESSION];
                int me = 1 + t * SESSIONS + k % SESSIONS;
                uid_t uid, uid2;
                int r;

                snprintf(session, sizeof(session), "s%d", k % SESSIONS);
                r = portpool_reserve_block(pp, user, session, ports, &err);
                STRESS_CHECK(r == 0, "reserve %s:%s: %d %s", user, session, r, err.msg);
                if (r == 0) {
                        claim_ports(ports, me);
                        STRESS_CHECK(portpool_lookup(pp, user, session, again) == 0 &&
                                             memcmp(again, ports, sizeof(ports)) == 0,
                                     "the block of %s:%s changed", user, session);
                        (void)portpool_set_container(pp, user, session, k % 2 ? "c0ffee" : NULL);
                }

                r = sessuid_get_or_assign(st, &cfg, user, session, &uid, &err);
                STRESS_CHECK(r == 0, "uid of %s:%s: %d %s", user, session, r, err.msg);
                STRESS_CHECK(r < 0 || (sessuid_lookup(st, user, session, &uid2) == 0 && uid2 == uid),
                             "the uid of %s:%s changed", user, session);

                snprintf(row.user_id, sizeof(row.user_id), "%s", user);
                snprintf(row.session_id, sizeof(row.session_id), "%s", session);
                snprintf(row.state, sizeof(row.state), "%s", k % 3 ? "RUNNING" : "CREATING");
                row.created_at = row.updated_at = row.last_activity = sbx_wall_ms();
                STRESS_CHECK(store_session_put(st, &row) == 0, "session_put %s:%s", user, session);
                STRESS_CHECK(store_session_touch(st, user, session, sbx_wall_ms()) == 0, "touch %s:%s", user, session);
                STRESS_CHECK(store_session_get(st, user, session, &back) == 0 && strcmp(back.state, row.state) == 0,
                             "session_get %s:%s", user, session);

                r = quota_set(q, user, quota_key_name(0), 1 + k % 5, &err);
                STRESS_CHECK(r == 0, "quota_set %s: %d %s", user, r, err.msg);
                quota_limits_get(q, &cfg, user, &lim);
                STRESS_CHECK(lim.sessions == 1 + k % 5, "%s reads back %lld sessions, set %d", user,
                             (long long)lim.sessions, 1 + k % 5);

                if (store_audit(st, "stress", user, session, "stress.round", "{\"k\":1}") == 0)
                        __atomic_add_fetch(&audited, 1, __ATOMIC_RELAXED);
                portpool_usage(pp, NULL, NULL);

                if (k % 2) { /* every other round the session goes, its block and uid with it */
                        if (r == 0)
                                free_ports(ports, me);
                        STRESS_CHECK(portpool_release(pp, user, session) == 0, "release %s:%s", user, session);
                        STRESS_CHECK(sessuid_release(st, user, session) == 0, "uid release %s:%s", user, session);
                        (void)store_session_delete(st, user, session, false);
                }
        }
        for (int k = 0; k < SESSIONS; k++) {
                char session[32];
                int ports[PER_SESSION];

                snprintf(session, sizeof(session), "s%d", k);
                if (portpool_lookup(pp, user, session, ports) == 0)
                        free_ports(ports, 1 + t * SESSIONS + k);
                STRESS_CHECK(portpool_release(pp, user, session) == 0, "final release %s:%s", user, session);
        }
        (void)quota_unset(q, user, NULL, NULL);
}

int main(void)
{
        struct sbx_error err = {0};
        char db[512];
        size_t used = 1, total = 0;
        int64_t rows = -1;

        config_defaults(&cfg);
        snprintf(db, sizeof(db), "%s/sandboxd.db", stress_tmpdir());
        if (store_open(db, &st, &err) < 0 || portpool_new(st, PORT_LO, PORT_HI, PER_SESSION, &pp, &err) < 0 ||
            quota_new(st, &q, &err) < 0) {
                fprintf(stderr, "stress_store: set-up: %s\n", err.msg);
                return 2;
        }
        stress_threads(THREADS, worker, NULL);
        portpool_usage(pp, &used, &total);
        STRESS_CHECK(used == 0, "%zu ports still reserved after every release", used);
        STRESS_CHECK(store_audit_count(st, NULL, NULL, "stress.round", &rows) == 0 &&
                             rows == __atomic_load_n(&audited, __ATOMIC_RELAXED),
                     "%lld audit rows, %lld written", (long long)rows, (long long)audited);
        quota_free(q);
        portpool_free(pp);
        store_close(st);
        return stress_done("stress_store");
}
