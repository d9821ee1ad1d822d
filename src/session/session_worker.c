/* session_worker.c — the session manager's background threads: a FIFO of
 * jobs for callers that must not wait for a transition (the fair share's
 * evictions, sbx-evict; resumes asked for from the gateway's thread,
 * sbx-resume). One implementation, so a queue, its cap, its duplicate
 * check and its shutdown are written once.
 *
 * The thread starts on the first post. Stopping wakes it and joins it; the
 * jobs still queued are run with stopping set, so each can either finish
 * (an eviction must: its session is claimed) or only let go of what it
 * holds (a resume is dropped).
 *
 * Locks: w->lock guards the queue, started and stop. It is a leaf: a job
 * runs without it, and nothing else is taken under it. */
#include <errno.h>
#include <string.h>

#include "session_internal.h"

void session_worker_init(struct session_worker *w, const char *name, size_t max)
{
        *w = (struct session_worker){.name = name, .max = max};
        w->tail = &w->head;
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
}

void session_worker_destroy(struct session_worker *w)
{
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
}

static void *worker_main(void *p)
{
        struct session_worker *w = p;

        pthread_setname_np(pthread_self(), w->name);
        pthread_mutex_lock(&w->lock);
        for (;;) {
                while (!w->stop && !w->head)
                        pthread_cond_wait(&w->cond, &w->lock);
                struct session_job *job = w->head;
                if (!job) /* stopping, and every queued one run */
                        break;
                w->head = job->next;
                if (!w->head)
                        w->tail = &w->head;
                w->n--;
                bool stopping = w->stop;
                pthread_mutex_unlock(&w->lock);
                job->run(job, stopping); /* frees job */
                pthread_mutex_lock(&w->lock);
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

int session_worker_post(struct session_worker *w, struct session_job *job)
{
        int r = 0;

        job->next = NULL;
        pthread_mutex_lock(&w->lock);
        if (!w->started && !w->stop)
                w->started = pthread_create(&w->thread, NULL, worker_main, w) == 0;
        if (w->stop || !w->started) {
                r = -ESHUTDOWN;
        } else if (w->max && w->n >= w->max) {
                r = -EAGAIN;
        } else {
                for (struct session_job *q = w->head; q && job->key[0] && r == 0; q = q->next)
                        if (strcmp(q->key, job->key) == 0)
                                r = -EEXIST;
                if (r == 0) {
                        *w->tail = job;
                        w->tail = &job->next;
                        w->n++;
                        pthread_cond_signal(&w->cond);
                }
        }
        pthread_mutex_unlock(&w->lock);
        return r;
}

void session_worker_stop(struct session_worker *w)
{
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        bool started = w->started;
        w->started = false; /* joined once */
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        if (started)
                pthread_join(w->thread, NULL); /* it runs what is queued, stopping, first */
}
