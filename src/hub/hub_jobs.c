/* hub_jobs.c — durable executions: what a reconnected runner still
 * holds after a daemon restart.
 *
 * The exec engine tells the hub which (session, tag) it will adopt
 * (hub_expect; h->expect). A runner lists what it holds right after
 * its hello (RP_JOB frames into c->jobs, then RP_JOBS_END); on the end of
 * that list the hub forgets every job nobody expects (RP_FORGET, its tree
 * killed if it still runs), and hub_exec_adopt() claims the others,
 * resuming their output from the offsets the daemon has (RP_RESUME).
 *
 * Locks: h->lock for h->expect and a channel's jobs (see hub.c); no
 * frame is written under it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "hub_internal.h"
#include "sandboxd/log.h"

bool hub_expected_locked(struct hub *h, const char *user, const char *session, uint32_t tag)
{
        for (size_t i = 0; i < h->n_expect; i++)
                if (h->expect[i].tag == tag && strcmp(h->expect[i].user, user) == 0 &&
                    strcmp(h->expect[i].session, session) == 0)
                        return true;
        return false;
}

static void unexpect_locked(struct hub *h, const char *user, const char *session, uint32_t tag)
{
        for (size_t i = 0; i < h->n_expect; i++)
                if (h->expect[i].tag == tag && strcmp(h->expect[i].user, user) == 0 &&
                    strcmp(h->expect[i].session, session) == 0) {
                        h->expect[i] = h->expect[--h->n_expect];
                        return;
                }
}

/* RP_JOB: one execution the runner holds. Hub thread. */
bool hub_job_listed(struct hub *h, struct hub_chan *c, const struct rp_hdr *hdr, const unsigned char *p)
{
        struct rp_job r;
        bool ok = true;

        if (hdr->len != sizeof(r) || hdr->tag == 0 || hdr->flags != 0)
                return false;
        memcpy(&r, p, sizeof(r));
        if ((r.flags & ~RP_JOB_EXITED) != 0)
                return false;
        for (int k = 0; k < 2; k++)
                if (r.acked[k] > r.produced[k] || r.produced[k] > (UINT64_C(1) << 62))
                        return false;
        pthread_mutex_lock(&h->lock);
        if (c->jobs_complete || c->n_jobs >= RP_MAX_JOBS)
                ok = false;
        for (size_t i = 0; ok && i < c->n_jobs; i++)
                ok = c->jobs[i].tag != hdr->tag;
        if (ok)
                c->jobs[c->n_jobs++] = (struct hub_job){.tag = hdr->tag, .r = r};
        pthread_mutex_unlock(&h->lock);
        return ok;
}

/* RP_JOBS_END: a job nobody will adopt is forgotten (its tree killed if it
 * still runs); the others wait for hub_exec_adopt(). Hub thread. */
bool hub_jobs_listed(struct hub *h, struct hub_chan *c)
{
        uint32_t forget[RP_MAX_JOBS];
        size_t n = 0;
        int cfd;

        pthread_mutex_lock(&h->lock);
        if (c->jobs_complete) {
                pthread_mutex_unlock(&h->lock);
                return false;
        }
        c->jobs_complete = true;
        cfd = c->cfd;
        for (size_t i = 0; i < c->n_jobs;) {
                if (hub_expected_locked(h, c->user, c->session, c->jobs[i].tag)) {
                        i++;
                        continue;
                }
                forget[n++] = c->jobs[i].tag;
                c->jobs[i] = c->jobs[--c->n_jobs];
        }
        pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->lock);
        for (size_t i = 0; i < n; i++)
                (void)hub_send_frame_nowait(c, cfd, RP_FORGET, forget[i], NULL, 0);
        if (n)
                log_ctx(LOG_LEVEL_INFO, c->user, c->session, NULL,
                        "the runner held %zu executions nobody adopts: dropped", n);
        return true;
}


void hub_expect(struct hub *h, const char *user, const char *session, uint32_t tag)
{
        struct hub_expect *p;

        if (!h || tag == 0)
                return;
        pthread_mutex_lock(&h->lock);
        if (!hub_expected_locked(h, user, session, tag)) {
                p = realloc(h->expect, (h->n_expect + 1) * sizeof(*p));
                if (p) {
                        h->expect = p;
                        p = &h->expect[h->n_expect++];
                        memset(p, 0, sizeof(*p));
                        sbx_strlcpy(p->user, user, sizeof(p->user));
                        sbx_strlcpy(p->session, session, sizeof(p->session));
                        p->tag = tag;
                }
        }
        pthread_mutex_unlock(&h->lock);
}

void hub_unexpect(struct hub *h, const char *user, const char *session, uint32_t tag)
{
        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        unexpect_locked(h, user, session, tag);
        pthread_mutex_unlock(&h->lock);
}

int hub_exec_adopt(struct hub *h, const char *user, const char *session, uint32_t tag, const uint64_t have[2],
                   hub_output_fn on_output, void *userdata, int timeout_ms, struct hub_exec **ret,
                   uint64_t ret_start[2], struct sbx_error *err)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        struct rp_offsets o = {{have[0], have[1]}};
        struct hub_chan *c = NULL;
        struct hub_exec *x;
        struct rp_job job;
        size_t i;
        int r;

        if (!h || hub_adopt(h, user, session) < 0)
                return sbx_error_set(err, -ENOENT, 0, "the session has no runner");
        pthread_mutex_lock(&h->lock);
        for (;;) {
                c = hub_chan_find_locked(h, user, session);
                if (c && c->cfd >= 0 && c->hello && c->jobs_complete)
                        break;
                c = NULL;
                if (timeout_ms <= 0 || pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT)
                        break;
        }
        if (!c) {
                pthread_mutex_unlock(&h->lock);
                return sbx_error_set(err, -ETIMEDOUT, 0, "the session's runner has not come back");
        }
        for (i = 0; i < c->n_jobs && c->jobs[i].tag != tag; i++)
                ;
        if (i == c->n_jobs) {
                unexpect_locked(h, user, session, tag);
                pthread_mutex_unlock(&h->lock);
                return sbx_error_set(err, -ENOENT, 0, "the runner no longer holds it");
        }
        x = hub_exec_new(on_output, userdata);
        if (!x) {
                pthread_mutex_unlock(&h->lock);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        job = c->jobs[i].r;
        c->jobs[i] = c->jobs[--c->n_jobs];
        unexpect_locked(h, user, session, tag);
        hub_exec_link_locked(c, x, tag);
        for (int k = 0; k < 2; k++) {
                /* the runner computes the same: it kept [acked, produced) */
                uint64_t at = have[k] < job.acked[k] ? job.acked[k] : have[k];
                x->recv[k] = x->acked[k] = at > job.produced[k] ? job.produced[k] : at;
        }
        pthread_mutex_unlock(&h->lock);

        r = hub_send_frame(c, hub_exec_cfd(x), RP_RESUME, 0, tag, &o, sizeof(o), NULL, 0);
        if (r < 0) {
                hub_exec_free(x);
                return sbx_error_set(err, -ECONNRESET, 0, "the runner connection was lost");
        }
        ret_start[0] = x->recv[0];
        ret_start[1] = x->recv[1];
        *ret = x;
        return 0;
}

/* ---- executions detached by a lost node link (node.h) ---- */

void hub_end_detached_locked(struct hub_chan *c, bool all, int64_t now)
{
        if (!all && (c->resume_until == 0 || now < c->resume_until))
                return;
        for (struct hub_exec *x = c->execs; x; x = x->next)
                if (x->cfd == -1)
                        hub_exec_end(x, true, -ECONNRESET, "the node link was lost and its runner did not come back",
                                     NULL);
        c->resume_until = 0;
}

void hub_jobs_resume_detached(struct hub *h, struct hub_chan *c)
{
        struct {
                struct hub_exec *x;
                struct rp_offsets o;
        } resume[RP_MAX_JOBS];
        size_t n = 0, lost = 0;
        int cfd;

        pthread_mutex_lock(&h->lock);
        cfd = c->cfd;
        for (struct hub_exec *x = c->execs; x; x = x->next) {
                if (x->cfd != -1)
                        continue;
                size_t i;
                for (i = 0; i < c->n_jobs && c->jobs[i].tag != x->tag; i++)
                        ;
                if (i == c->n_jobs || n == RP_MAX_JOBS) {
                        hub_exec_end(x, true, -ECONNRESET, "the runner no longer holds it", NULL);
                        lost++;
                        continue;
                }
                struct rp_job job = c->jobs[i].r;
                c->jobs[i] = c->jobs[--c->n_jobs];
                pthread_mutex_lock(&x->lock);
                for (int k = 0; k < 2; k++) {
                        /* as hub_exec_adopt: the runner kept [acked, produced) */
                        uint64_t at = x->recv[k] < job.acked[k] ? job.acked[k] : x->recv[k];
                        x->recv[k] = x->acked[k] = at > job.produced[k] ? job.produced[k] : at;
                }
                resume[n].o = (struct rp_offsets){{x->recv[0], x->recv[1]}};
                pthread_mutex_unlock(&x->lock);
                hub_exec_set_cfd(x, cfd);
                x->refs++;
                resume[n++].x = x;
        }
        c->resume_until = 0;
        pthread_mutex_unlock(&h->lock);
        for (size_t i = 0; i < n; i++) {
                struct hub_exec *x = resume[i].x;
                if (hub_send_frame(c, cfd, RP_RESUME, 0, x->tag, &resume[i].o, sizeof(resume[i].o), NULL, 0) < 0)
                        hub_exec_end(x, true, -ECONNRESET, "the runner connection was lost", NULL);
                hub_exec_unref(x); /* the reference taken above */
        }
        if (n || lost)
                log_ctx(LOG_LEVEL_INFO, c->user, c->session, NULL,
                        "the runner came back through the node link: %zu executions resumed, %zu lost", n, lost);
}
