/* startline.c — a start line (startline.h): a count of starts running, the
 * users they belong to, and the starts waiting their turn, each a node on
 * its thread's stack, in a list guarded by the line's lock. A start may go
 * when a slot is free and its user is under per_user, unless no other user
 * waits. Every change broadcasts the line's condition; a waiter rechecks. */
#include "sandboxd/startline.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct startline_waiter {
        const char *user;
        struct startline_waiter *next;
};

/* user's count of running starts (lock held), or NULL. */
static int *user_running(struct startline *l, const char *user)
{
        for (size_t i = 0; i < ELEMENTSOF(l->users); i++)
                if (l->users[i].n > 0 && strcmp(l->users[i].user, user) == 0)
                        return &l->users[i].n;
        return NULL;
}

/* May user's start go now (lock held)? ret_waiting: the starts in line. */
static bool may_go(struct startline *l, const char *user, size_t *ret_waiting)
{
        const int *mine = user_running(l, user);
        bool others = false;

        *ret_waiting = 0;
        for (const struct startline_waiter *w = l->waiters; w; w = w->next) {
                (*ret_waiting)++;
                others = others || strcmp(w->user, user) != 0;
        }
        return l->running < l->max && (!mine || *mine < l->per_user || !others);
}

int startline_take(struct startline *l, const char *user, int64_t *ret_waited_ms, struct sbx_error *err)
{
        int64_t t0 = sbx_now_ms();
        struct timespec until = sbx_deadline_after(CLOCK_MONOTONIC, l->queue_ms);
        struct startline_waiter me = {.user = user ? user : ""};
        struct startline_waiter **pp;
        size_t waiting = 0;
        int r = 0, *mine;

        pthread_mutex_lock(&l->lock);
        if (!l->cond_ready) {
                pthread_condattr_t a;
                pthread_condattr_init(&a);
                pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
                pthread_cond_init(&l->cond, &a);
                pthread_condattr_destroy(&a);
                l->cond_ready = true;
        }
        me.next = l->waiters;
        l->waiters = &me;
        while (!may_go(l, me.user, &waiting)) {
                if (pthread_cond_timedwait(&l->cond, &l->lock, &until) == ETIMEDOUT && !may_go(l, me.user, &waiting)) {
                        r = sbx_error_set(err, -EBUSY, 0,
                                          "%d %s are under way and %zu waiting; this one waited %d s: try again",
                                          l->running, l->what, waiting - 1, l->queue_ms / 1000);
                        break;
                }
        }
        for (pp = &l->waiters; *pp != &me; pp = &(*pp)->next)
                ;
        *pp = me.next;
        if (r == 0) {
                l->running++;
                mine = user_running(l, me.user);
                for (size_t i = 0; !mine && i < ELEMENTSOF(l->users); i++)
                        if (l->users[i].n == 0) {
                                sbx_strlcpy(l->users[i].user, me.user, sizeof(l->users[i].user));
                                mine = &l->users[i].n;
                        }
                (*mine)++; /* a free entry exists: fewer than max (<= STARTLINE_SLOTS_MAX) run */
        } else {
                pthread_cond_broadcast(&l->cond); /* one fewer waiting: another user may go now */
        }
        pthread_mutex_unlock(&l->lock);
        if (r == 0 && ret_waited_ms)
                *ret_waited_ms = sbx_now_ms() - t0;
        return r;
}

void startline_give(struct startline *l, const char *user)
{
        int *mine;

        pthread_mutex_lock(&l->lock);
        l->running--;
        mine = user_running(l, user ? user : "");
        if (mine)
                (*mine)--;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
}

size_t startline_waiting(struct startline *l)
{
        size_t n = 0;

        pthread_mutex_lock(&l->lock);
        for (const struct startline_waiter *w = l->waiters; w; w = w->next)
                n++;
        pthread_mutex_unlock(&l->lock);
        return n;
}
