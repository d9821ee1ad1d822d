/* hub_ops.c — workspace files and services over a session's runner
 * connection (see hub_ops.h for the contract, runner_proto.h for the
 * wire format; the hub in hub.c owns sockets and reads frames).
 *
 * A request is a `struct op` with a tag unique in this process, registered
 * before its frame is sent and matched on the reply by (user, session,
 * connection id, tag). Service reports are cached per session (at most
 * CACHE_MAX per session) until the daemon forgets them or the connection
 * closes.
 *
 * The cache is hashed by session, so a report costs the same however many
 * sessions there are.
 *
 * Locks: o->lock guards o->ops, o->svcs and the counters; paired with
 * o->cond (CLOCK_REALTIME), broadcast on every reply, report and close.
 * A leaf: never held across hub_send or the services callback. */
#include "hub_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/common.h"

#define CACHE_MAX (2 * RP_SVC_MAX)
#define BUCKETS 256
#define PID_LIMIT 4194304 /* PID_MAX_LIMIT */
/* Bytes of a file per frame: well under RP_MAX_TO_RUNNER, so one frame
 * never holds the connection's write lock for long, even when the
 * container's CPU quota slows the runner down. */
#define WRITE_FRAME (256 * 1024)
#define MAX_STALLS 200 /* answers without progress ("no room now") before giving up, 5 ms apart */

struct op {
        struct op *next;
        char user[65], session[65];
        uint64_t conn;
        uint32_t tag;
        bool svc; /* answered by RP_SVC_STATE, else RP_FILE_REPLY */
        bool done;
        int err; /* -ECONNRESET when the connection went */
        struct rp_file_reply rep;
        unsigned char *data;
        size_t len;
        struct hub_svc_state st;
};

struct svc_entry {
        struct svc_entry *next;
        char user[65], session[65];
        uint64_t conn;
        struct hub_svc_state st;
};

struct hub_watch {
        struct hub_ops *o;
        struct hub_watch *next; /* o->watches */
        char user[65], session[65];
        uint64_t conn;
        uint32_t tag;
        bool ended, lost;
        struct hub_watch_event q[HUB_WATCH_QUEUE]; /* a ring: head, n */
        size_t head, n, bytes;
};

struct hub_ops {
        struct hub *h;
        struct hub_watch *watches;
        size_t n_watches;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct op *ops;
        struct svc_entry *svcs[BUCKETS]; /* by session_bucket() */
        uint32_t next_tag;
        hub_svc_fn on_svc;
        void *svc_ud;
        int in_callback; /* calls of on_svc under way */
        uint64_t n_files, n_services;
};

struct hub_ops *hub_ops_new(struct hub *h)
{
        struct hub_ops *o = calloc(1, sizeof(*o));

        if (!o)
                return NULL;
        o->h = h;
        pthread_mutex_init(&o->lock, NULL);
        pthread_cond_init(&o->cond, NULL);
        return o;
}

void hub_ops_free(struct hub_ops *o)
{
        if (!o)
                return;
        for (size_t b = 0; b < BUCKETS; b++)
                while (o->svcs[b]) {
                        struct svc_entry *e = o->svcs[b];
                        o->svcs[b] = e->next;
                        free(e);
                }
        /* every op belongs to a caller that has returned by now */
        pthread_mutex_destroy(&o->lock);
        pthread_cond_destroy(&o->cond);
        free(o);
}

static size_t session_bucket(const char *user, const char *session)
{
        uint32_t h = 2166136261u; /* FNV-1a */

        for (const char *p = user; *p; p++)
                h = (h ^ (unsigned char)*p) * 16777619u;
        h = (h ^ ':') * 16777619u;
        for (const char *p = session; *p; p++)
                h = (h ^ (unsigned char)*p) * 16777619u;
        return h % BUCKETS;
}

static bool same_session(const char *u1, const char *s1, const char *u2, const char *s2)
{
        return strcmp(u1, u2) == 0 && strcmp(s1, s2) == 0;
}

/* ---- requests ---- */

static void op_free(struct hub_ops *o, struct op *op)
{
        if (!op)
                return;
        pthread_mutex_lock(&o->lock);
        for (struct op **pp = &o->ops; *pp; pp = &(*pp)->next)
                if (*pp == op) {
                        *pp = op->next;
                        break;
                }
        pthread_mutex_unlock(&o->lock);
        free(op->data);
        free(op);
}

/* Register a request on the session's live connection. */
static int op_new(struct hub_ops *o, const char *user, const char *session, bool svc, struct op **ret)
{
        struct op *op;
        uint64_t conn;

        if (!o || hub_conn(o->h, user, session, &conn) < 0)
                return -ENOTCONN;
        op = calloc(1, sizeof(*op));
        if (!op)
                return -ENOMEM;
        sbx_strlcpy(op->user, user, sizeof(op->user));
        sbx_strlcpy(op->session, session, sizeof(op->session));
        op->conn = conn;
        op->svc = svc;
        pthread_mutex_lock(&o->lock);
        if (++o->next_tag == 0)
                o->next_tag = 1;
        op->tag = o->next_tag;
        op->next = o->ops;
        o->ops = op;
        if (svc)
                o->n_services++;
        else
                o->n_files++;
        pthread_mutex_unlock(&o->lock);
        *ret = op;
        return 0;
}

static int op_send(struct hub_ops *o, struct op *op, uint16_t type, uint16_t flags, const void *p1, size_t n1,
                   const void *p2, size_t n2)
{
        int r = hub_send(o->h, op->user, op->session, op->conn, type, flags, op->tag, p1, n1, p2, n2);
        return r < 0 ? -ENOTCONN : 0;
}

/* Wait for the reply: 0, -ECONNRESET, -ETIMEDOUT. */
static int op_wait(struct hub_ops *o, struct op *op, int64_t until_ms)
{
        int r;

        pthread_mutex_lock(&o->lock);
        while (!op->done) {
                int64_t left = until_ms - sbx_now_ms();
                struct timespec ts;
                if (left <= 0)
                        break;
                ts = sbx_deadline_after(CLOCK_REALTIME, left);
                pthread_cond_timedwait(&o->cond, &o->lock, &ts);
        }
        r = !op->done ? -ETIMEDOUT : op->err;
        pthread_mutex_unlock(&o->lock);
        return r;
}

/* A request with the path after a struct rp_file_req; waits for the reply. */
static int file_call(struct hub_ops *o, struct op *op, uint16_t type, uint64_t offset, uint64_t length,
                     const char *path, size_t extra, int64_t until_ms)
{
        struct rp_file_req rq = {.offset = offset, .length = length};
        int r;

        pthread_mutex_lock(&o->lock);
        op->done = false;
        op->err = 0;
        free(op->data);
        op->data = NULL;
        op->len = 0;
        if (++o->next_tag == 0)
                o->next_tag = 1;
        op->tag = o->next_tag; /* a fresh tag per round trip: a late reply cannot be taken for this one */
        pthread_mutex_unlock(&o->lock);
        r = op_send(o, op, type, 0, &rq, sizeof(rq), path, strlen(path) + 1 + extra); /* extra: a second path */
        if (r == 0)
                r = op_wait(o, op, until_ms);
        if (r == -ECONNRESET)
                r = -ENOTCONN;
        if (r == 0 && op->rep.err)
                r = -op->rep.err;
        return r;
}

int hub_file_change(struct hub *h, const char *user, const char *session, uint16_t type, const char *path,
                    const char *path2, int timeout_ms)
{
        struct hub_ops *o = hub_ops(h);
        _cleanup_free_ char *both = NULL;
        struct op *op = NULL;
        int r;

        if (type != RP_FILE_MKDIR && type != RP_FILE_REMOVE && type != RP_FILE_MOVE)
                return -EINVAL;
        if (type == RP_FILE_MOVE) {
                size_t n1 = strlen(path) + 1, n2 = path2 ? strlen(path2) + 1 : 0;
                if (!n2)
                        return -EINVAL;
                both = malloc(n1 + n2);
                if (!both)
                        return -ENOMEM;
                memcpy(both, path, n1);
                memcpy(both + n1, path2, n2);
                path = both; /* file_call sends up to the first NUL: the frame's length says the rest */
        }
        r = op_new(o, user, session, false, &op);
        if (r < 0)
                return r;
        r = file_call(o, op, type, 0, 0, path, path2 && type == RP_FILE_MOVE ? strlen(path2) + 1 : 0,
                      sbx_now_ms() + timeout_ms);
        op_free(o, op);
        return r;
}

int hub_file_read(struct hub *h, const char *user, const char *session, const char *path, uint64_t offset,
                  size_t length, char *buf, size_t *ret_len, uint64_t *ret_size, int timeout_ms)
{
        struct hub_ops *o = hub_ops(h);
        int64_t until = sbx_now_ms() + timeout_ms;
        struct op *op = NULL;
        size_t got = 0;
        uint64_t size = 0;
        int r = op_new(o, user, session, false, &op), stalls = 0;

        if (r < 0)
                return r;
        do {
                size_t want = length - got < RP_CHUNK ? length - got : RP_CHUNK;
                r = file_call(o, op, RP_FILE_READ, offset + got, want, path, 0, until);
                if (r < 0)
                        break;
                if (op->len > want) {
                        r = -EIO; /* more than asked for */
                        break;
                }
                memcpy(buf + got, op->data, op->len);
                got += op->len;
                size = op->rep.size;
                if (op->len == 0 && want > 0 && offset + got < size) {
                        /* the runner had no room: ask again, a bounded number of times */
                        r = sbx_now_ms() < until && ++stalls < MAX_STALLS ? 0 : -ETIMEDOUT;
                        if (r == 0)
                                sbx_sleep_ms(5);
                        continue;
                }
                if (op->len < want || offset + got >= size)
                        break;
        } while (r == 0 && got < length);
        op_free(o, op);
        if (r < 0)
                return r;
        *ret_len = got;
        *ret_size = size;
        return 0;
}

int hub_file_write(struct hub *h, const char *user, const char *session, const char *path, const void *data, size_t len,
                   int timeout_ms)
{
        struct hub_ops *o = hub_ops(h);
        int64_t until = sbx_now_ms() + timeout_ms;
        struct rp_file_req rq = {.length = len};
        const char *p = data;
        size_t plen = strlen(path) + 1, sent = 0;
        struct op *op = NULL;
        int r = op_new(o, user, session, false, &op);
        _cleanup_free_ char *first = NULL;

        if (r < 0)
                return r;
        /* the first frame: request, path and as many bytes as fit */
        {
                size_t n = len < WRITE_FRAME - sizeof(rq) - plen ? len : WRITE_FRAME - sizeof(rq) - plen;
                first = malloc(sizeof(rq) + plen);
                if (!first) {
                        op_free(o, op);
                        return -ENOMEM;
                }
                memcpy(first, &rq, sizeof(rq));
                memcpy(first + sizeof(rq), path, plen);
                r = op_send(o, op, RP_FILE_WRITE, RP_FW_BEGIN | (n == len ? RP_FW_END : 0), first, sizeof(rq) + plen, p,
                            n);
                sent = n;
        }
        while (r == 0 && sent < len) {
                size_t n = len - sent < WRITE_FRAME ? len - sent : WRITE_FRAME;
                bool failed;
                pthread_mutex_lock(&o->lock);
                failed = op->done; /* an early answer is a refusal: stop sending */
                pthread_mutex_unlock(&o->lock);
                if (failed || sbx_now_ms() >= until)
                        break;
                r = op_send(o, op, RP_FILE_WRITE, sent + n == len ? RP_FW_END : 0, p + sent, n, NULL, 0);
                sent += n;
        }
        if (r == 0 && sent < len) {
                bool refused;
                /* stopped early: end it so the runner frees the write and drops its temporary */
                (void)op_send(o, op, RP_FILE_WRITE, RP_FW_END, NULL, 0, NULL, 0);
                pthread_mutex_lock(&o->lock);
                refused = op->done;
                pthread_mutex_unlock(&o->lock);
                if (!refused)
                        r = -ETIMEDOUT;
        }
        if (r == 0)
                r = op_wait(o, op, until);
        if (r == -ECONNRESET)
                r = -ENOTCONN;
        if (r == 0 && op->rep.err)
                r = -op->rep.err;
        if (r == 0 && op->rep.size != len)
                r = -EIO;
        op_free(o, op);
        return r;
}

int hub_file_list(struct hub *h, const char *user, const char *session, const char *path, hub_entry_fn fn, void *ud,
                  bool *ret_truncated, int timeout_ms)
{
        struct hub_ops *o = hub_ops(h);
        int64_t until = sbx_now_ms() + timeout_ms;
        struct op *op = NULL;
        uint32_t start = 0;
        bool truncated = false;
        int r = op_new(o, user, session, false, &op), rounds = 0, stalls = 0;

        if (r < 0)
                return r;
        for (;;) {
                size_t i = 0;
                r = file_call(o, op, RP_FILE_LIST, start, 0, path, 0, until);
                if (r == -EAGAIN && sbx_now_ms() < until && ++stalls < MAX_STALLS) {
                        sbx_sleep_ms(5);
                        continue;
                }
                if (r < 0)
                        break;
                truncated = op->rep.flags & RP_FR_TRUNCATED;
                while (i < op->len) {
                        int64_t size;
                        uint16_t nl;
                        char type;
                        if (op->len - i < 11) {
                                r = -EIO;
                                break;
                        }
                        type = (char)op->data[i];
                        memcpy(&size, op->data + i + 1, 8);
                        memcpy(&nl, op->data + i + 9, 2);
                        i += 11;
                        if (nl == 0 || nl > 255 || nl > op->len - i || memchr(op->data + i, '/', nl) ||
                            memchr(op->data + i, '\0', nl) || !strchr("fdlo", type) || type == '\0' || size < 0) {
                                r = -EIO;
                                break;
                        }
                        fn(ud, type, size, (const char *)op->data + i, nl);
                        i += nl;
                }
                /* each round must move on, and there are at most RP_FILE_LIST_MAX entries */
                if (r < 0 || op->rep.next == 0)
                        break;
                if (op->rep.next <= start || op->rep.next > RP_FILE_LIST_MAX || ++rounds > RP_FILE_LIST_MAX) {
                        r = -EIO;
                        break;
                }
                start = op->rep.next;
        }
        op_free(o, op);
        if (r == 0 && ret_truncated)
                *ret_truncated = truncated;
        return r;
}

/* ---- services ---- */

int hub_svc_start(struct hub *h, const char *user, const char *session, const struct hub_svc_spec *spec, int timeout_ms,
                  struct hub_svc_state *ret)
{
        struct hub_ops *o = hub_ops(h);
        struct rp_svc_start hdr = {0};
        size_t len = sizeof(hdr), envc = 0;
        _cleanup_free_ char *buf = NULL;
        struct op *op = NULL;
        char *p;
        int r;

        while (spec->env && spec->env[envc])
                envc++;
        len += strlen(spec->marker) + 1 + strlen(spec->dir) + 1 + strlen(spec->workdir) + 1 + spec->command_len;
        for (size_t i = 0; i < envc; i++)
                len += strlen(spec->env[i]) + 1;
        if (envc > RP_MAX_ARGS || len > RP_MAX_TO_RUNNER)
                return -E2BIG;
        buf = malloc(len);
        if (!buf)
                return -ENOMEM;
        hdr.envc = (uint32_t)envc;
        hdr.cmd_len = (uint32_t)spec->command_len;
        memcpy(buf, &hdr, sizeof(hdr));
        p = buf + sizeof(hdr);
        p = stpcpy(p, spec->marker) + 1;
        p = stpcpy(p, spec->dir) + 1;
        p = stpcpy(p, spec->workdir) + 1;
        for (size_t i = 0; i < envc; i++)
                p = stpcpy(p, spec->env[i]) + 1;
        memcpy(p, spec->command, spec->command_len);

        r = op_new(o, user, session, true, &op);
        if (r < 0)
                return r;
        r = op_send(o, op, RP_SVC_START, 0, buf, len, NULL, 0);
        if (r == 0)
                r = op_wait(o, op, sbx_now_ms() + timeout_ms);
        if (r == -ECONNRESET)
                r = -ENOTCONN;
        if (r == 0 && strcmp(op->st.marker, spec->marker) != 0 && op->st.phase != RP_SVC_FAILED)
                r = -EIO; /* an answer about another service */
        if (r == 0)
                *ret = op->st;
        op_free(o, op);
        return r;
}

static int send_marker(struct hub *h, const char *user, const char *session, uint16_t type, const void *p1, size_t n1,
                       const char *marker)
{
        uint64_t conn;

        if (!h || hub_conn(h, user, session, &conn) < 0)
                return -ENOTCONN;
        return hub_send(h, user, session, conn, type, 0, 0, p1, n1, marker, strlen(marker));
}

int hub_svc_signal(struct hub *h, const char *user, const char *session, const char *marker, int sig)
{
        uint32_t s = (uint32_t)sig;
        return send_marker(h, user, session, RP_SVC_SIGNAL, &s, sizeof(s), marker);
}

void hub_svc_forget(struct hub *h, const char *user, const char *session, const char *marker)
{
        struct hub_ops *o = hub_ops(h);

        if (!o)
                return;
        pthread_mutex_lock(&o->lock);
        for (struct svc_entry **pp = &o->svcs[session_bucket(user, session)]; *pp; pp = &(*pp)->next)
                if (same_session((*pp)->user, (*pp)->session, user, session) && strcmp((*pp)->st.marker, marker) == 0) {
                        struct svc_entry *e = *pp;
                        *pp = e->next;
                        free(e);
                        break;
                }
        pthread_mutex_unlock(&o->lock);
        (void)send_marker(h, user, session, RP_SVC_FORGET, NULL, 0, marker);
}

static struct svc_entry *entry_find_locked(struct hub_ops *o, const char *user, const char *session, const char *marker)
{
        for (struct svc_entry *e = o->svcs[session_bucket(user, session)]; e; e = e->next)
                if (same_session(e->user, e->session, user, session) && strcmp(e->st.marker, marker) == 0)
                        return e;
        return NULL;
}

bool hub_svc_get(struct hub *h, const char *user, const char *session, const char *marker, struct hub_svc_state *ret)
{
        struct hub_ops *o = hub_ops(h);
        struct svc_entry *e;

        if (!o)
                return false;
        pthread_mutex_lock(&o->lock);
        e = entry_find_locked(o, user, session, marker);
        if (e && ret)
                *ret = e->st;
        pthread_mutex_unlock(&o->lock);
        return e != NULL;
}

int hub_svc_states(struct hub *h, const char *user, const char *session, struct hub_svc_state **ret, size_t *ret_n)
{
        struct hub_ops *o = hub_ops(h);
        struct hub_svc_state *out;
        size_t n = 0;

        out = calloc(CACHE_MAX + 1, sizeof(*out));
        if (!out)
                return -ENOMEM;
        if (o) {
                pthread_mutex_lock(&o->lock);
                for (struct svc_entry *e = o->svcs[session_bucket(user, session)]; e && n < CACHE_MAX; e = e->next)
                        if (same_session(e->user, e->session, user, session))
                                out[n++] = e->st;
                pthread_mutex_unlock(&o->lock);
        }
        *ret = out;
        *ret_n = n;
        return 0;
}

bool hub_svc_wait_end(struct hub *h, const char *user, const char *session, const char *marker, int timeout_ms,
                      struct hub_svc_state *ret)
{
        struct hub_ops *o = hub_ops(h);
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        bool ended = false;

        if (!o)
                return false;
        pthread_mutex_lock(&o->lock);
        for (;;) {
                struct svc_entry *e = entry_find_locked(o, user, session, marker);
                if (!e)
                        break; /* the connection went, or it was forgotten */
                if (e->st.phase == RP_SVC_EXITED) {
                        if (ret)
                                *ret = e->st;
                        ended = true;
                        break;
                }
                if (pthread_cond_timedwait(&o->cond, &o->lock, &until) == ETIMEDOUT)
                        break;
        }
        pthread_mutex_unlock(&o->lock);
        return ended;
}

void hub_svc_set_handler(struct hub *h, hub_svc_fn fn, void *ud)
{
        struct hub_ops *o = hub_ops(h);

        if (!o)
                return;
        pthread_mutex_lock(&o->lock);
        o->on_svc = fn;
        o->svc_ud = ud;
        while (o->in_callback > 0) /* so the old one may be freed on return */
                pthread_cond_wait(&o->cond, &o->lock);
        pthread_mutex_unlock(&o->lock);
}

void hub_ops_counts(struct hub *h, uint64_t *ret_files, uint64_t *ret_services)
{
        struct hub_ops *o = hub_ops(h);

        *ret_files = *ret_services = 0;
        if (!o)
                return;
        pthread_mutex_lock(&o->lock);
        *ret_files = o->n_files;
        *ret_services = o->n_services;
        pthread_mutex_unlock(&o->lock);
}

/* ---- directory watches ---- */

static void watch_unlink_locked(struct hub_ops *o, struct hub_watch *w)
{
        for (struct hub_watch **pp = &o->watches; *pp; pp = &(*pp)->next)
                if (*pp == w) {
                        *pp = w->next;
                        o->n_watches--;
                        break;
                }
}

static void watch_free(struct hub_watch *w)
{
        for (size_t i = 0; i < w->n; i++)
                free(w->q[(w->head + i) % HUB_WATCH_QUEUE].name);
        free(w);
}

int hub_watch_start(struct hub *h, const char *user, const char *session, const char *path, bool recursive,
                    int timeout_ms, struct hub_watch **ret)
{
        struct hub_ops *o = hub_ops(h);
        struct rp_file_req rq = {0};
        struct hub_watch *w;
        struct op *op = NULL;
        size_t mine = 0, users = 0;
        int r;

        r = op_new(o, user, session, false, &op);
        if (r < 0)
                return r;
        w = calloc(1, sizeof(*w));
        if (!w) {
                op_free(o, op);
                return -ENOMEM;
        }
        w->o = o;
        sbx_strlcpy(w->user, user, sizeof(w->user));
        sbx_strlcpy(w->session, session, sizeof(w->session));
        w->conn = op->conn;
        w->tag = op->tag; /* unique in the process: the watch keeps its start's tag */
        pthread_mutex_lock(&o->lock);
        for (struct hub_watch *x = o->watches; x; x = x->next) {
                mine += same_session(x->user, x->session, user, session);
                users += strcmp(x->user, user) == 0;
        }
        r = mine >= HUB_WATCH_PER_SESSION      ? -EMFILE
            : users >= HUB_WATCH_PER_USER      ? -EDQUOT
            : o->n_watches >= HUB_WATCH_GLOBAL ? -ENFILE
                                               : 0;
        if (r == 0) { /* listed before the start goes out: the first events may follow its reply at once */
                w->next = o->watches;
                o->watches = w;
                o->n_watches++;
        }
        pthread_mutex_unlock(&o->lock);
        if (r == 0)
                r = op_send(o, op, RP_WATCH_START, recursive ? RP_WATCH_RECURSIVE : 0, &rq, sizeof(rq), path,
                            strlen(path) + 1);
        if (r == 0)
                r = op_wait(o, op, sbx_now_ms() + timeout_ms);
        if (r == -ECONNRESET)
                r = -ENOTCONN;
        if (r == 0 && op->rep.err)
                r = -op->rep.err;
        if (r == -ETIMEDOUT) /* it may start late: the runner drops it */
                (void)hub_send(o->h, user, session, w->conn, RP_WATCH_STOP, 0, w->tag, NULL, 0, NULL, 0);
        op_free(o, op);
        if (r < 0) {
                pthread_mutex_lock(&o->lock);
                watch_unlink_locked(o, w);
                pthread_mutex_unlock(&o->lock);
                watch_free(w);
                return r;
        }
        *ret = w;
        return 0;
}

int hub_watch_take(struct hub_watch *w, struct hub_watch_event *out, size_t max, int timeout_ms, bool *ret_lost)
{
        struct hub_ops *o = w->o;
        int64_t until = sbx_now_ms() + timeout_ms;
        size_t k = 0;
        int r;

        pthread_mutex_lock(&o->lock);
        while (!w->n && !w->lost && !w->ended) {
                int64_t left = until - sbx_now_ms();
                struct timespec ts;
                if (left <= 0)
                        break;
                ts = sbx_deadline_after(CLOCK_REALTIME, left);
                pthread_cond_timedwait(&o->cond, &o->lock, &ts);
        }
        for (; k < max && w->n; k++) {
                out[k] = w->q[w->head];
                w->q[w->head].name = NULL;
                w->bytes -= strlen(out[k].name);
                w->head = (w->head + 1) % HUB_WATCH_QUEUE;
                w->n--;
        }
        *ret_lost = w->lost;
        w->lost = false;
        r = k == 0 && !*ret_lost && w->ended ? -ECONNRESET : (int)k;
        pthread_mutex_unlock(&o->lock);
        return r;
}

bool hub_watch_ended(struct hub_watch *w)
{
        bool ended;

        pthread_mutex_lock(&w->o->lock);
        ended = w->ended;
        pthread_mutex_unlock(&w->o->lock);
        return ended;
}

void hub_watch_events_free(struct hub_watch_event *ev, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(ev[i].name);
                ev[i].name = NULL;
        }
}

void hub_watch_stop(struct hub_watch *w)
{
        struct hub_ops *o;
        bool ended;

        if (!w)
                return;
        o = w->o;
        pthread_mutex_lock(&o->lock);
        watch_unlink_locked(o, w);
        ended = w->ended;
        pthread_mutex_unlock(&o->lock);
        if (!ended)
                (void)hub_send(o->h, w->user, w->session, w->conn, RP_WATCH_STOP, 0, w->tag, NULL, 0, NULL, 0);
        watch_free(w);
}

size_t hub_watch_count(struct hub *h)
{
        struct hub_ops *o = hub_ops(h);
        size_t n;

        if (!o)
                return 0;
        pthread_mutex_lock(&o->lock);
        n = o->n_watches;
        pthread_mutex_unlock(&o->lock);
        return n;
}

/* ---- frames from the runner (hub thread) ---- */

static struct op *op_find_locked(struct hub_ops *o, const char *user, const char *session, uint64_t conn, uint32_t tag,
                                 bool svc)
{
        for (struct op *op = o->ops; op; op = op->next)
                if (op->tag == tag && op->conn == conn && op->svc == svc && !op->done &&
                    same_session(op->user, op->session, user, session))
                        return op;
        return NULL;
}

static bool file_reply(struct hub_ops *o, const char *user, const char *session, uint64_t conn,
                       const struct rp_hdr *hdr, const unsigned char *p)
{
        struct rp_file_reply rep;
        struct op *op;
        size_t n;

        if (hdr->len < sizeof(rep) || hdr->tag == 0)
                return false;
        memcpy(&rep, p, sizeof(rep));
        n = hdr->len - sizeof(rep);
        if (rep.err < 0 || rep.err >= 4096 || n > RP_CHUNK || (rep.err && n) || rep.next > RP_FILE_LIST_MAX)
                return false;
        pthread_mutex_lock(&o->lock);
        op = op_find_locked(o, user, session, conn, hdr->tag, false);
        if (op) {
                op->data = n ? malloc(n) : NULL;
                if (n && !op->data) {
                        op->err = -ENOMEM;
                } else {
                        if (n)
                                memcpy(op->data, p + sizeof(rep), n);
                        op->len = n;
                        op->rep = rep;
                }
                op->done = true;
                pthread_cond_broadcast(&o->cond);
        }
        pthread_mutex_unlock(&o->lock);
        return true; /* a reply nobody waits for any more (timed out) goes nowhere */
}

static bool svc_report(struct hub_ops *o, const char *user, const char *session, uint64_t conn,
                       const struct rp_hdr *hdr, const unsigned char *p)
{
        struct rp_svc_state w;
        struct hub_svc_state st = {0};
        size_t mlen;
        bool notify = false;
        hub_svc_fn fn;
        void *ud;

        if (hdr->len < sizeof(w) || hdr->len - sizeof(w) > RP_MARKER_MAX)
                return false;
        memcpy(&w, p, sizeof(w));
        mlen = hdr->len - sizeof(w);
        for (size_t i = 0; i < mlen; i++)
                if (p[sizeof(w) + i] <= 0x20 || p[sizeof(w) + i] >= 0x7f || p[sizeof(w) + i] == '/')
                        return false;
        memcpy(st.marker, p + sizeof(w), mlen);
        st.marker[mlen] = '\0';
        switch (w.phase) {
        case RP_SVC_RUNNING:
        case RP_SVC_EXITED:
                if (w.pid == 0 || w.pid > PID_LIMIT || mlen == 0 || w.n_ports > RP_SVC_MAX_PORTS ||
                    (w.phase == RP_SVC_EXITED && (w.exit_code < 0 || w.exit_code > 255)))
                        return false;
                for (uint32_t i = 0; i < w.n_ports; i++)
                        if (w.ports[i] == 0)
                                return false;
                break;
        case RP_SVC_FAILED:
                if (w.err <= 0 || w.err >= 4096 || hdr->tag == 0)
                        return false;
                break;
        default:
                return false;
        }
        st.pid = (int)w.pid;
        st.phase = (enum rp_svc_phase)w.phase;
        st.exit_code = w.phase == RP_SVC_EXITED ? w.exit_code : -1;
        st.err = w.phase == RP_SVC_FAILED ? w.err : 0;
        st.n_ports = w.phase == RP_SVC_RUNNING ? w.n_ports : 0;
        for (size_t i = 0; i < st.n_ports; i++)
                st.ports[i] = w.ports[i];

        pthread_mutex_lock(&o->lock);
        if (hdr->tag) {
                struct op *op = op_find_locked(o, user, session, conn, hdr->tag, true);
                if (op) {
                        op->st = st;
                        op->done = true;
                }
        }
        if (st.phase != RP_SVC_FAILED) {
                struct svc_entry *e = entry_find_locked(o, user, session, st.marker);
                if (!e) {
                        size_t n = 0;
                        for (struct svc_entry *x = o->svcs[session_bucket(user, session)]; x; x = x->next)
                                n += same_session(x->user, x->session, user, session);
                        if (n < CACHE_MAX && (e = calloc(1, sizeof(*e)))) {
                                sbx_strlcpy(e->user, user, sizeof(e->user));
                                sbx_strlcpy(e->session, session, sizeof(e->session));
                                e->next = o->svcs[session_bucket(user, session)];
                                o->svcs[session_bucket(user, session)] = e;
                        }
                }
                if (e) {
                        e->conn = conn;
                        e->st = st;
                        notify = true;
                }
        }
        fn = notify ? o->on_svc : NULL;
        ud = o->svc_ud;
        if (fn)
                o->in_callback++;
        pthread_cond_broadcast(&o->cond);
        pthread_mutex_unlock(&o->lock);
        if (fn) {
                fn(ud, user, session);
                pthread_mutex_lock(&o->lock);
                o->in_callback--;
                pthread_cond_broadcast(&o->cond);
                pthread_mutex_unlock(&o->lock);
        }
        return true;
}

/* RP_WATCH_EVENT: checked, then queued on its watch if there is room. */
static bool watch_event(struct hub_ops *o, const char *user, const char *session, uint64_t conn,
                        const struct rp_hdr *hdr, const unsigned char *p)
{
        struct hub_watch *w;

        if (hdr->tag == 0)
                return false;
        if (hdr->flags == RP_WATCH_LOST) {
                if (hdr->len != 0)
                        return false;
        } else if (hdr->flags < 1 || hdr->flags > RP_WATCH_KIND_MAX || hdr->len < 1 || hdr->len > RP_WATCH_NAME_MAX ||
                   memchr(p, '\0', hdr->len) || p[0] == '/') {
                return false;
        }
        pthread_mutex_lock(&o->lock);
        for (w = o->watches; w; w = w->next)
                if (w->tag == hdr->tag && w->conn == conn && !w->ended &&
                    same_session(w->user, w->session, user, session))
                        break;
        if (w && hdr->flags == RP_WATCH_LOST) {
                w->lost = true;
        } else if (w && (w->n >= HUB_WATCH_QUEUE || w->bytes + hdr->len > HUB_WATCH_QUEUE_BYTES)) {
                w->lost = true; /* nobody takes them fast enough: dropped, and said */
        } else if (w) {
                struct hub_watch_event *e = &w->q[(w->head + w->n) % HUB_WATCH_QUEUE];
                e->name = malloc(hdr->len + 1);
                if (!e->name) {
                        w->lost = true;
                } else {
                        memcpy(e->name, p, hdr->len);
                        e->name[hdr->len] = '\0';
                        e->kind = hdr->flags;
                        w->n++;
                        w->bytes += hdr->len;
                }
        }
        if (w)
                pthread_cond_broadcast(&o->cond);
        pthread_mutex_unlock(&o->lock);
        return true; /* a watch just stopped: its last events go nowhere */
}

bool hub_ops_frame(struct hub_ops *o, const char *user, const char *session, uint64_t conn, const struct rp_hdr *hdr,
                   const unsigned char *p)
{
        if (!o)
                return false;
        if (hdr->type == RP_WATCH_EVENT)
                return watch_event(o, user, session, conn, hdr, p);
        if (hdr->type == RP_FILE_REPLY)
                return file_reply(o, user, session, conn, hdr, p);
        if (hdr->type == RP_SVC_STATE)
                return svc_report(o, user, session, conn, hdr, p);
        return false; /* a daemon-to-runner type */
}

void hub_ops_closed(struct hub_ops *o, const char *user, const char *session, uint64_t conn)
{
        if (!o)
                return;
        pthread_mutex_lock(&o->lock);
        for (struct op *op = o->ops; op; op = op->next)
                if (op->conn == conn && !op->done && same_session(op->user, op->session, user, session)) {
                        op->done = true;
                        op->err = -ECONNRESET;
                }
        for (struct hub_watch *w = o->watches; w; w = w->next)
                if (w->conn == conn && same_session(w->user, w->session, user, session))
                        w->ended = true;
        for (struct svc_entry **pp = &o->svcs[session_bucket(user, session)]; *pp;) {
                struct svc_entry *e = *pp;
                if (e->conn == conn && same_session(e->user, e->session, user, session)) {
                        *pp = e->next;
                        free(e);
                } else
                        pp = &e->next;
        }
        pthread_cond_broadcast(&o->cond);
        pthread_mutex_unlock(&o->lock);
}
