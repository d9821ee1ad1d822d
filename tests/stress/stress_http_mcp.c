/* stress_http_mcp.c — the MCP session table of the HTTPS front
 * (src/http/http_mcp.c), driven directly: DELETE races, lookups and the
 * reaper at once, thousands of rounds (issue 24, defect 3).
 *
 * Each round opens one MCP session. Then 2 to 8 threads DELETE it at once,
 * the same call that DELETE /mcp makes. The other threads look it up and
 * let it go, as a POST or GET does, try to DELETE it as another user, and
 * run the reaper. What must hold: exactly one DELETE ends it (the one that
 * answers 200) and every other one gets -ENOENT (404). Afterwards it cannot
 * be found, and the table is empty. A DELETE that drops the list's
 * reference without having unlinked the session frees it under the feet of
 * the others: ASan (scripts/test.sh --asan) reports a heap-use-after-free,
 * and TSan (--tsan) reports a race on freed memory.
 *
 * Then the caps: 8 threads open sessions for one user at once, and no more
 * than HTTP_MCP_SESSIONS_PER_USER are linked. Then a stop with sessions
 * still open.
 *
 * No daemon is needed: the sessions' cores are built but never called, so
 * the API socket they name does not exist. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/log.h"
#include "stress.h"

#define WORKERS 8
#define USER "alice"

static struct http_server *srv;
static pthread_barrier_t start, end;
static char id[33];       /* the round's session: written by main between the barriers */
static int racers;        /* DELETEs this round (2..8): the first racers workers */
static bool over;         /* main: no more rounds */
static int ended, absent; /* atomic: DELETEs that answered 0 and -ENOENT this round */

static void *worker(void *arg)
{
        int w = (int)(intptr_t)arg;

        for (;;) {
                pthread_barrier_wait(&start);
                if (over)
                        return NULL;
                if (w < racers) {
                        int r = http_mcp_delete(srv, id, USER);
                        STRESS_CHECK(r == 0 || r == -ENOENT, "DELETE returned %d", r);
                        __atomic_add_fetch(r == 0 ? &ended : &absent, 1, __ATOMIC_RELAXED);
                } else if (w % 3 == 0) {
                        STRESS_CHECK(http_mcp_delete(srv, id, "mallory") == -ENOENT, "another user's DELETE");
                } else if (w % 3 == 1) {
                        http_mcp_expire(srv); /* the reaper: the session is fresh, it stays */
                } else {
                        /* a POST or GET: it may find the session, or come too late */
                        struct http_mcp_session *s = http_mcp_find(srv, id, USER);
                        if (s)
                                STRESS_CHECK(strcmp(http_mcp_id(s), id) == 0, "found another session");
                        http_mcp_release(srv, s);
                }
                pthread_barrier_wait(&end);
        }
}

static void race_deletes(int rounds)
{
        pthread_t t[WORKERS];
        int doubles = 0;

        pthread_barrier_init(&start, NULL, WORKERS + 1);
        pthread_barrier_init(&end, NULL, WORKERS + 1);
        for (int w = 0; w < WORKERS; w++)
                if (pthread_create(&t[w], NULL, worker, (void *)(intptr_t)w) != 0) {
                        fprintf(stderr, "stress: cannot start a worker\n");
                        exit(2);
                }
        for (int i = 0; i < rounds; i++) {
                struct http_mcp_session *s = NULL;
                struct sbx_error err = {0};
                int r = http_mcp_open(srv, "token", USER, &s, &err);

                STRESS_CHECK(r == 0, "open: %d %s", r, err.msg);
                if (r < 0)
                        break;
                snprintf(id, sizeof(id), "%s", http_mcp_id(s));
                http_mcp_release(srv, s); /* the initialize is answered: only the list holds it */
                racers = 2 + i % 7;
                __atomic_store_n(&ended, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&absent, 0, __ATOMIC_RELAXED);
                pthread_barrier_wait(&start);
                pthread_barrier_wait(&end);
                int e = __atomic_load_n(&ended, __ATOMIC_RELAXED);
                int a = __atomic_load_n(&absent, __ATOMIC_RELAXED);
                if (e != 1 && doubles++ < 5)
                        STRESS_CHECK(e == 1, "round %d: %d of %d DELETEs ended the session (%d got 404)", i, e, racers,
                                     a);
                STRESS_CHECK(e + a == racers, "round %d: %d + %d answers for %d DELETEs", i, e, a, racers);
                STRESS_CHECK(http_mcp_find(srv, id, USER) == NULL, "round %d: the session is still found", i);
                pthread_mutex_lock(&srv->mcp_lock);
                STRESS_CHECK(srv->mcp_count == 0 && !srv->mcp_sessions, "round %d: %zu sessions left", i,
                             srv->mcp_count);
                pthread_mutex_unlock(&srv->mcp_lock);
        }
        over = true;
        pthread_barrier_wait(&start);
        for (int w = 0; w < WORKERS; w++)
                pthread_join(t[w], NULL);
        pthread_barrier_destroy(&start);
        pthread_barrier_destroy(&end);
}

static int opened; /* atomic */

static void open_many(int i, void *ud)
{
        (void)ud;
        (void)i;
        for (int k = 0; k < 4; k++) {
                struct http_mcp_session *s = NULL;
                struct sbx_error err = {0};
                int r = http_mcp_open(srv, "token", USER, &s, &err);

                STRESS_CHECK(r == 0 || r == -EUSERS, "open: %d %s", r, err.msg);
                if (r == 0) {
                        __atomic_add_fetch(&opened, 1, __ATOMIC_RELAXED);
                        http_mcp_release(srv, s);
                }
        }
}

int main(void)
{
        struct daemon *d = calloc(1, sizeof(*d));

        log_set_level(LOG_LEVEL_WARN); /* a line per session otherwise */
        srv = calloc(1, sizeof(*srv));
        if (!d || !srv)
                return 2;
        snprintf(d->cfg.api_socket, sizeof(d->cfg.api_socket), "%s/api.sock", stress_tmpdir());
        srv->d = d;
        pthread_mutex_init(&srv->lock, NULL);
        pthread_mutex_init(&srv->mcp_lock, NULL);
        pthread_cond_init(&srv->cond, NULL);

        race_deletes(stress_n(20000));

        stress_threads(WORKERS, open_many, NULL);
        STRESS_CHECK(opened == HTTP_MCP_SESSIONS_PER_USER, "%d sessions opened for one user (cap %d)", opened,
                     HTTP_MCP_SESSIONS_PER_USER);
        pthread_mutex_lock(&srv->mcp_lock);
        STRESS_CHECK(srv->mcp_count == (size_t)opened, "%zu sessions linked, %d opened", srv->mcp_count, opened);
        pthread_mutex_unlock(&srv->mcp_lock);
        http_mcp_stop(srv); /* ends and frees them: ASan's leak check sees none left */
        STRESS_CHECK(srv->mcp_count == 0 && !srv->mcp_sessions, "%zu sessions after the stop", srv->mcp_count);

        pthread_mutex_destroy(&srv->lock);
        pthread_mutex_destroy(&srv->mcp_lock);
        pthread_cond_destroy(&srv->cond);
        free(srv);
        free(d);
        return stress_done("stress_http_mcp");
}
