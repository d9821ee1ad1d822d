/* startline.h — a start line: at most `max` starts of something costly
 * (a container's create-and-start, an interpreter's kernel) run at once,
 * the others wait their turn. One user has at most `per_user` of them while
 * another user waits (a tenant's burst uses every slot only while nobody
 * else needs one), and a start waits at most `queue_ms`, then is refused as
 * busy with the line's length. Used by container_create_started (container.h)
 * and the cells' kernel starts (cells.h).
 *
 * A line is a static object (STARTLINE_INIT); its lock guards all of it and
 * is a leaf: nothing else is taken while it is held. Thread-safe. */
#ifndef SANDBOXD_STARTLINE_H
#define SANDBOXD_STARTLINE_H

#include <pthread.h>
#include <stdbool.h>

#include "sandboxd/common.h"
#include "sandboxd/utf8.h"

#define STARTLINE_SLOTS_MAX 16 /* the largest max a line may have */

struct startline_waiter;

struct startline {
        const char *what; /* plural, for the busy message: "container starts" */
        int max, per_user, queue_ms;
        pthread_mutex_t lock;
        pthread_cond_t cond; /* monotonic; made on first use */
        bool cond_ready;
        int running;
        struct {
                char user[SBX_ID_MAX + 1];
                int n;
        } users[STARTLINE_SLOTS_MAX]; /* users with starts running; n == 0: free */
        struct startline_waiter *waiters;
};

#define STARTLINE_INIT(what_, max_, per_user_, queue_ms_)                                                              \
        {                                                                                                              \
                .what = (what_), .max = (max_), .per_user = (per_user_), .queue_ms = (queue_ms_),                      \
                .lock = PTHREAD_MUTEX_INITIALIZER                                                                      \
        }

/* Wait for a slot, at most l->queue_ms. 0 (the caller then holds a slot
 * and gives it back with startline_give), or -EBUSY with err saying how
 * many run and wait. ret_waited_ms (optional): how long it waited. */
int startline_take(struct startline *l, const char *user, int64_t *ret_waited_ms, struct sbx_error *err);

/* Give back user's slot taken by startline_take. */
void startline_give(struct startline *l, const char *user);

/* The starts waiting their turn now. */
size_t startline_waiting(struct startline *l);

#endif
