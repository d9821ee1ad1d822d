/* egress_filter.c — package index pages filtered off the egress loop
 * (issue 37 item 2; egress_tls.c holds the page, egress_pkg_filter_page
 * rewrites it). A PEP 503/691 page or an npm packument (at most
 * EGRESS_PKG_PAGE_MAX, 32 MiB) takes long enough to parse and rewrite that
 * doing it on the loop thread would stall every other connection of every
 * tenant; it is done here, on FILTER_WORKERS threads ("sbx-egfilter"),
 * started with the first page.
 *
 * A job holds the page (an evbuffer the worker alone touches from submit to
 * done), the policy (read-only for the proxy's life) and the name; its
 * result goes back on the done list and an event activated across threads
 * (evthread_use_pthreads) hands it to the loop, which writes it to the
 * client. Caps: FILTER_MAX_JOBS pages in the pool at once (queued, being
 * filtered or done but not yet collected), FILTER_PER_USER of one user;
 * past either the page is refused (503, filter_busy), never queued without
 * bound. A tunnel that goes while its page is in the pool (the client left,
 * its idle deadline passed: the only wait a job has) detaches it
 * (job->t = NULL); a detached job is skipped or its result dropped.
 *
 * Threads and locks: struct egress_filter's lock guards the queue, the done
 * list, the slots, each job's t and stopping; everything else in a job is
 * the loop's until submit, the worker's until done, the loop's after. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandboxd/log.h"
#include "egress_internal.h"

#define FILTER_WORKERS 2
#define FILTER_MAX_JOBS 8        /* pages in the pool at once: 8 x 32 MiB in, as much out, at most */
#define FILTER_PER_USER 2        /* of one user: a tenant cannot hold the pool against the others */
#define FILTER_IDLE_WAIT_MS 1000 /* a worker's wait for work, renewed: stopping is seen within it */

struct egress_filter {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        pthread_t threads[FILTER_WORKERS];
        int n_threads;
        bool stopping;
        struct egress_filter_job *queue, **queue_tail;
        struct egress_filter_job *done, **done_tail;
        struct egress_filter_job *slots[FILTER_MAX_JOBS];
        struct event *done_ev;
        egress_filter_hook_fn hook; /* tests: called on the worker before a page is filtered */
        void *hook_ud;
};

static void job_free(struct egress_filter_job *j)
{
        if (!j)
                return;
        if (j->in)
                evbuffer_free(j->in);
        free(j->out);
        free(j);
}

static void *worker_main(void *arg)
{
        struct egress_filter *f = arg;

        (void)pthread_setname_np(pthread_self(), "sbx-egfilter");
        pthread_mutex_lock(&f->lock);
        for (;;) {
                struct egress_filter_job *j;
                bool detached;
                while (!f->stopping && !f->queue) {
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_sec += FILTER_IDLE_WAIT_MS / 1000;
                        (void)pthread_cond_timedwait(&f->cond, &f->lock, &ts);
                }
                if (f->stopping)
                        break;
                j = f->queue;
                f->queue = j->next;
                if (!f->queue)
                        f->queue_tail = &f->queue;
                j->next = NULL;
                detached = j->t == NULL;
                pthread_mutex_unlock(&f->lock);
                if (!detached) { /* a page nobody waits for any more is not filtered */
                        size_t len = evbuffer_get_length(j->in);
                        const char *in = len ? (const char *)evbuffer_pullup(j->in, -1) : "";
                        if (f->hook)
                                f->hook(j->user, j->name, f->hook_ud);
                        j->r = len && !in ? -ENOMEM
                                          : egress_pkg_filter_page(j->ep, j->eco, j->name, j->json, in, len, &j->out,
                                                                   &j->out_len, &j->dropped);
                }
                evbuffer_free(j->in);
                j->in = NULL;
                pthread_mutex_lock(&f->lock);
                *f->done_tail = j;
                f->done_tail = &j->next;
                event_active(f->done_ev, EV_READ, 0);
        }
        pthread_mutex_unlock(&f->lock);
        return NULL;
}

/* Loop thread: the finished jobs to their tunnels. */
static void done_cb(evutil_socket_t fd, short what, void *arg)
{
        struct egress *eg = arg;
        struct egress_filter *f = eg->filter;
        struct egress_filter_job *list;

        (void)fd;
        (void)what;
        pthread_mutex_lock(&f->lock);
        list = f->done;
        f->done = NULL;
        f->done_tail = &f->done;
        for (struct egress_filter_job *j = list; j; j = j->next)
                for (size_t i = 0; i < FILTER_MAX_JOBS; i++)
                        if (f->slots[i] == j)
                                f->slots[i] = NULL;
        pthread_mutex_unlock(&f->lock);
        /* t is the loop's: a tunnel freed meanwhile detached its job on this thread, under the lock, above */
        while (list) {
                struct egress_filter_job *j = list;
                list = j->next;
                if (j->t) {
                        j->t->icpt_job = NULL;
                        egress_icpt_filtered(j->t, j);
                }
                job_free(j);
        }
}

static struct egress_filter *filter_get(struct egress *eg)
{
        struct egress_filter *f = eg->filter;

        if (f)
                return f->n_threads ? f : NULL;
        f = calloc(1, sizeof(*f));
        if (!f)
                return NULL;
        pthread_mutex_init(&f->lock, NULL);
        pthread_cond_init(&f->cond, NULL);
        f->queue_tail = &f->queue;
        f->done_tail = &f->done;
        f->done_ev = event_new(eg->base, -1, 0, done_cb, eg);
        f->hook = eg->filter_hook;
        f->hook_ud = eg->filter_hook_ud;
        if (f->done_ev)
                for (int i = 0; i < FILTER_WORKERS; i++) {
                        if (pthread_create(&f->threads[i], NULL, worker_main, f) != 0)
                                break;
                        f->n_threads++;
                }
        eg->filter = f;
        if (f->n_threads == 0) {
                log_ctx(LOG_LEVEL_WARN, NULL, NULL, NULL, "egress: cannot start the index page filter's threads");
                return NULL;
        }
        return f;
}

int egress_filter_submit(struct tunnel *t, struct egress_filter_job *j)
{
        struct egress_filter *f = filter_get(t->eg);
        size_t free_slot = FILTER_MAX_JOBS, mine = 0;

        if (!f)
                return -ENOMEM;
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < FILTER_MAX_JOBS; i++) {
                if (!f->slots[i])
                        free_slot = free_slot < FILTER_MAX_JOBS ? free_slot : i;
                else if (strcmp(f->slots[i]->user, t->s->user) == 0)
                        mine++;
        }
        if (free_slot == FILTER_MAX_JOBS || mine >= FILTER_PER_USER) {
                pthread_mutex_unlock(&f->lock);
                return -EBUSY;
        }
        sbx_strlcpy(j->user, t->s->user, sizeof(j->user));
        j->t = t;
        j->next = NULL;
        f->slots[free_slot] = j;
        *f->queue_tail = j;
        f->queue_tail = &j->next;
        pthread_cond_signal(&f->cond);
        pthread_mutex_unlock(&f->lock);
        t->icpt_job = j;
        return 0;
}

void egress_filter_detach(struct tunnel *t)
{
        struct egress_filter *f = t->eg->filter;

        if (!t->icpt_job || !f)
                return;
        pthread_mutex_lock(&f->lock);
        t->icpt_job->t = NULL;
        pthread_mutex_unlock(&f->lock);
        t->icpt_job = NULL;
}

void egress_filter_free(struct egress *eg)
{
        struct egress_filter *f = eg->filter;

        if (!f)
                return;
        pthread_mutex_lock(&f->lock);
        f->stopping = true;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->lock);
        /* a worker ends once its page is done: egress_pkg_filter_page is bounded by EGRESS_PKG_PAGE_MAX */
        for (int i = 0; i < f->n_threads; i++)
                pthread_join(f->threads[i], NULL);
        for (size_t i = 0; i < FILTER_MAX_JOBS; i++)
                job_free(f->slots[i]); /* queued, done or both: each job is in exactly one slot */
        if (f->done_ev)
                event_free(f->done_ev);
        pthread_cond_destroy(&f->cond);
        pthread_mutex_destroy(&f->lock);
        free(f);
        eg->filter = NULL;
}

void egress_set_filter_hook(struct egress *eg, egress_filter_hook_fn fn, void *userdata)
{
        eg->filter_hook = fn;
        eg->filter_hook_ud = userdata;
}
