/* hub_exec.c — executions carried over a session's runner connection:
 * starting one (RP_EXEC), its output, stdin with its window, signals, the
 * terminal size, its end, and the frames the hub thread hands over for it
 * (see hub.h for the contract, runner_proto.h for the wire format).
 *
 * A handle (struct hub_exec) is on its channel's list (c->execs) from
 * start or adoption until hub_exec_free; the hub thread takes a
 * reference while it delivers a frame. Output is acknowledged (RP_ACK)
 * once on_output has persisted it: by the hub thread right after, with a
 * write that never waits, else (the frame could not go at once) by the
 * thread that waits for the execution.
 *
 * Locks: h->lock for the channel's list and every handle's refs; x->lock
 * for a handle's state, paired with x->cond. h->lock before x->lock; no
 * lock is held across a write, nor across on_output. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/egress_rules.h"
#include "hub_internal.h"

#define ACK_EVERY (64 * 1024) /* unacknowledged bytes that wake the waiter to acknowledge them */

void hub_exec_end(struct hub_exec *x, bool lost, int fail, const char *msg, const struct runner_exit *ex)
{
        pthread_mutex_lock(&x->lock);
        if (!x->ended) {
                x->ended = true;
                x->lost = lost;
                x->fail = fail;
                if (msg)
                        sbx_strlcpy(x->error, msg, sizeof(x->error));
                if (ex)
                        x->exit = *ex;
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

struct hub_exec *hub_exec_new(hub_output_fn on_output, void *userdata)
{
        struct hub_exec *x = calloc(1, sizeof(*x));

        if (!x)
                return NULL;
        pthread_mutex_init(&x->lock, NULL);
        pthread_cond_init(&x->cond, NULL);
        x->on_output = on_output;
        x->userdata = userdata;
        x->refs = 1;
        return x;
}

static void exec_destroy(struct hub_exec *x)
{
        free(x->net);
        pthread_mutex_destroy(&x->lock);
        pthread_cond_destroy(&x->cond);
        free(x);
}

void hub_exec_link_locked(struct hub_chan *c, struct hub_exec *x, uint32_t tag)
{
        x->c = c;
        hub_exec_set_cfd(x, c->cfd);
        x->tag = tag;
        x->next = c->execs;
        c->execs = x;
        c->refs++;
}

/* ---- frames from the runner (hub thread) ---- */

static struct hub_exec *exec_find_ref(struct hub *h, struct hub_chan *c, uint32_t tag)
{
        struct hub_exec *x;

        pthread_mutex_lock(&h->lock);
        for (x = c->execs; x; x = x->next)
                if (x->tag == tag && x->cfd == c->cfd) {
                        x->refs++;
                        break;
                }
        pthread_mutex_unlock(&h->lock);
        return x;
}

static void exec_unref(struct hub_exec *x)
{
        struct hub *h;
        bool last;

        if (!x)
                return;
        h = x->c->h;
        pthread_mutex_lock(&h->lock);
        last = --x->refs == 0;
        pthread_mutex_unlock(&h->lock);
        if (last)
                exec_destroy(x);
}

/* Acknowledge output up to o from the hub thread, at once: a flood of
 * output then costs no wake-up of the thread that waits for the execution
 * (nor its write and the locks it takes) per ACK_EVERY bytes, which on a
 * busy machine were a neighbour's CPU. If the frame cannot go now (a writer
 * holds the connection, or its socket is full), the waiter is woken to
 * acknowledge it as before. Offsets only grow: the runner ignores an older
 * acknowledgement that arrives after a newer one. */
static void exec_ack_nowait(struct hub_exec *x, struct hub_chan *c, const struct rp_offsets *o)
{
        bool sent = hub_send_frame_nowait(c, c->cfd, RP_ACK, x->tag, o, sizeof(*o)) == 0;

        pthread_mutex_lock(&x->lock);
        if (sent) {
                for (int k = 0; k < 2; k++)
                        if (x->acked[k] < o->off[k])
                                x->acked[k] = o->off[k];
        } else {
                pthread_cond_broadcast(&x->cond);
        }
        pthread_mutex_unlock(&x->lock);
}

/* A frame about one execution (RP_STARTED, RP_OUTPUT, RP_STDIN_ACK,
 * RP_EXIT, RP_FAILED). Returns false on a protocol error. */
bool hub_exec_on_frame(struct hub *h, struct hub_chan *c, const struct rp_hdr *hdr, const unsigned char *p)
{
        struct hub_exec *x;

        if (hdr->tag == 0)
                return false;
        x = exec_find_ref(h, c, hdr->tag);
        if (!x)
                return true; /* an execution we forgot (freed or from before): its bytes go nowhere */
        bool ok = true;
        switch (hdr->type) {
        case RP_STARTED:
                ok = hdr->len == 4;
                break;
        case RP_OUTPUT:
                ok = hdr->len <= RP_CHUNK && (hdr->flags & ~RP_OUT_STDERR) == 0;
                if (ok && hdr->len > 0 && !x->ended) {
                        int k = (hdr->flags & RP_OUT_STDERR) ? 1 : 0;
                        hub_output_fn fn;
                        pthread_mutex_lock(&x->lock);
                        fn = x->on_output; /* NULL once freed: its userdata may be gone */
                        x->in_callback += fn != NULL;
                        pthread_mutex_unlock(&x->lock);
                        if (fn)
                                fn(x->userdata, k, p, hdr->len);
                        pthread_mutex_lock(&x->lock);
                        /* only hub_exec_free waits for the count (it cleared
                         * on_output): the waiter is not woken for every frame */
                        if (fn && --x->in_callback == 0 && !x->on_output)
                                pthread_cond_broadcast(&x->cond);
                        x->recv[k] += hdr->len; /* on_output has persisted it: it may be acknowledged */
                        bool due = x->recv[k] - x->acked[k] >= ACK_EVERY;
                        struct rp_offsets o = {{x->recv[0], x->recv[1]}};
                        pthread_mutex_unlock(&x->lock);
                        if (due)
                                exec_ack_nowait(x, c, &o);
                }
                break;
        case RP_STDIN_ACK: {
                uint32_t n;
                ok = hdr->len == 4;
                if (!ok)
                        break;
                memcpy(&n, p, 4);
                pthread_mutex_lock(&x->lock);
                ok = x->stdin_acked + n <= x->stdin_sent;
                if (ok)
                        x->stdin_acked += n;
                pthread_cond_broadcast(&x->cond);
                pthread_mutex_unlock(&x->lock);
                break;
        }
        case RP_EXIT: {
                struct rp_exit e;
                struct runner_exit ex;
                ok = hdr->len == sizeof(e);
                if (!ok)
                        break;
                memcpy(&e, p, sizeof(e));
                ok = e.exit_code >= 0 && e.exit_code <= 255 && e.signal >= 0 && e.signal < 65;
                if (!ok)
                        break;
                ex = (struct runner_exit){.exit_code = e.exit_code,
                                          .signal = e.signal,
                                          .cpu_user_ms = e.utime_us / 1000,
                                          .cpu_system_ms = e.stime_us / 1000,
                                          .max_rss_kb = e.maxrss_kb};
                hub_exec_end(x, false, 0, NULL, &ex);
                break;
        }
        case RP_FAILED: {
                char msg[200];
                uint32_t e;
                size_t n;
                ok = hdr->len >= 4;
                if (!ok)
                        break;
                memcpy(&e, p, 4);
                n = hdr->len - 4 < sizeof(msg) - 1 ? hdr->len - 4 : sizeof(msg) - 1;
                for (size_t i = 0; i < n; i++)
                        msg[i] = p[4 + i] >= 0x20 && p[4 + i] < 0x7f ? (char)p[4 + i] : '?';
                msg[n] = '\0';
                hub_exec_end(x, false, e > 0 && e < 4096 ? -(int)e : -EIO, msg, NULL);
                break;
        }
        default:
                ok = false;
        }
        exec_unref(x);
        return ok;
}

static bool tag_in_use_locked(struct hub *h, struct hub_chan *c, uint32_t tag)
{
        for (struct hub_exec *x = c->execs; x; x = x->next)
                if (x->tag == tag)
                        return true;
        for (size_t i = 0; i < c->n_jobs; i++)
                if (c->jobs[i].tag == tag)
                        return true;
        return hub_expected_locked(h, c->user, c->session, tag);
}

/* The RP_EXEC payload; malloc'd. */
static int build_exec_payload(const struct hub_exec_spec *spec, char **ret, size_t *ret_len)
{
        struct rp_exec hdr = {0};
        size_t len = sizeof(hdr), argc = 0, envc = 0;
        char *buf, *p;

        while (spec->argv[argc])
                argc++;
        while (spec->env && spec->env[envc])
                envc++;
        if (argc == 0 || argc > RP_MAX_ARGS || envc > RP_MAX_ARGS || spec->code_len > RP_MAX_TO_RUNNER)
                return -E2BIG;
        len += strlen(spec->workdir) + 1 + strlen(spec->code_path ? spec->code_path : "") + 1 + spec->code_len;
        for (size_t i = 0; i < argc; i++)
                len += strlen(spec->argv[i]) + 1;
        for (size_t i = 0; i < envc; i++)
                len += strlen(spec->env[i]) + 1;
        if (len > RP_MAX_TO_RUNNER)
                return -E2BIG;
        buf = malloc(len);
        if (!buf)
                return -ENOMEM;
        hdr.argc = (uint32_t)argc;
        hdr.envc = (uint32_t)envc;
        hdr.code_len = (uint32_t)spec->code_len;
        if (spec->tty) {
                if (spec->rows < 1 || spec->rows > RP_TTY_MAX_ROWS || spec->cols < 1 || spec->cols > RP_TTY_MAX_COLS) {
                        free(buf);
                        return -EINVAL;
                }
                hdr.winsize = (uint32_t)spec->rows << 16 | (uint32_t)spec->cols;
        }
        memcpy(buf, &hdr, sizeof(hdr));
        p = buf + sizeof(hdr);
        p = stpcpy(p, spec->workdir) + 1;
        p = stpcpy(p, spec->code_path ? spec->code_path : "") + 1;
        for (size_t i = 0; i < argc; i++)
                p = stpcpy(p, spec->argv[i]) + 1;
        for (size_t i = 0; i < envc; i++)
                p = stpcpy(p, spec->env[i]) + 1;
        if (spec->code_len)
                memcpy(p, spec->code, spec->code_len);
        *ret = buf;
        *ret_len = len;
        return 0;
}

int hub_exec_start(struct hub *h, const char *user, const char *session, const struct hub_exec_spec *spec,
                   hub_output_fn on_output, void *userdata, struct hub_exec **ret, struct sbx_error *err)
{
        _cleanup_free_ char *payload = NULL;
        struct hub_exec *x;
        struct hub_chan *c;
        size_t len;
        int r;

        if (!h)
                return sbx_error_set(err, -ENOTCONN, 0, "no runner");
        r = build_exec_payload(spec, &payload, &len);
        if (r == -EINVAL)
                return sbx_error_set(err, r, 0, "the terminal size must be 1..%d rows and 1..%d columns",
                                     RP_TTY_MAX_ROWS, RP_TTY_MAX_COLS);
        if (r < 0)
                return sbx_error_set(err, r, 0, "the request does not fit a runner frame");
        x = hub_exec_new(on_output, userdata);
        if (!x || (spec->network && spec->network->set && !(x->net = malloc(sizeof(*x->net))))) {
                if (x)
                        exec_destroy(x);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        if (x->net) { /* in the table before the runner hears of it: no connection of it goes unnarrowed */
                *x->net = *spec->network;
                sbx_strlcpy(x->net_id, spec->network_id ? spec->network_id : "", sizeof(x->net_id));
        }

        pthread_mutex_lock(&h->lock);
        c = hub_chan_find_locked(h, user, session);
        if (!c || c->cfd < 0 || !c->hello) {
                pthread_mutex_unlock(&h->lock);
                exec_destroy(x);
                return sbx_error_set(err, -ENOTCONN, 0, "the session's runner is not connected");
        }
        do /* never a tag the runner may still hold from an earlier daemon */
                if (++c->next_tag == 0)
                        c->next_tag = 1;
        while (tag_in_use_locked(h, c, c->next_tag));
        hub_exec_link_locked(c, x, c->next_tag);
        pthread_mutex_unlock(&h->lock);

        r = hub_send_frame(c, hub_exec_cfd(x), RP_EXEC,
                           (spec->stdin_pipe ? RP_EXEC_STDIN : 0) | (spec->tty ? RP_EXEC_TTY : 0) |
                                   (x->net ? RP_EXEC_NARROWED : 0),
                           x->tag, payload, len, NULL, 0);
        if (r < 0) {
                hub_exec_free(x);
                return sbx_error_set(err, -ENOTCONN, 0, "cannot send the execution to the runner: %s", strerror(-r));
        }
        *ret = x;
        return 0;
}

/* Acknowledge what on_output has persisted. Caller holds x->lock; drops it
 * around the write. */
static void exec_ack_locked(struct hub_exec *x)
{
        struct rp_offsets o = {{x->recv[0], x->recv[1]}};

        x->acked[0] = x->recv[0];
        x->acked[1] = x->recv[1];
        pthread_mutex_unlock(&x->lock);
        (void)hub_send_frame(x->c, hub_exec_cfd(x), RP_ACK, 0, x->tag, &o, sizeof(o), NULL, 0);
        pthread_mutex_lock(&x->lock);
}

int hub_exec_wait(struct hub_exec *x, int timeout_ms, struct runner_exit *ret, struct sbx_error *err)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        int r;

        pthread_mutex_lock(&x->lock);
        while (!x->ended) {
                if (x->recv[0] - x->acked[0] >= ACK_EVERY || x->recv[1] - x->acked[1] >= ACK_EVERY) {
                        exec_ack_locked(x); /* the runner frees it and reads on */
                        continue;
                }
                if (timeout_ms <= 0 || pthread_cond_timedwait(&x->cond, &x->lock, &until) == ETIMEDOUT)
                        break;
        }
        /* an end needs no acknowledgement: RP_FORGET frees everything */
        if (!x->ended && (x->recv[0] != x->acked[0] || x->recv[1] != x->acked[1]))
                exec_ack_locked(x);
        if (!x->ended)
                r = -ETIMEDOUT;
        else if (x->lost)
                r = sbx_error_set(err, -ECONNRESET, 0, "%s", x->error);
        else if (x->fail < 0)
                r = sbx_error_set(err, x->fail, 0, "the runner could not start it: %s", x->error);
        else {
                *ret = x->exit;
                r = 0;
        }
        pthread_mutex_unlock(&x->lock);
        return r;
}

ssize_t hub_exec_write_stdin(struct hub_exec *x, const void *data, size_t len)
{
        size_t room;
        int r;

        pthread_mutex_lock(&x->lock);
        if (x->ended) {
                pthread_mutex_unlock(&x->lock);
                return -EPIPE;
        }
        room = RP_STDIN_WINDOW - (size_t)(x->stdin_sent - x->stdin_acked);
        if (len > room)
                len = room;
        if (len > RP_CHUNK)
                len = RP_CHUNK;
        x->stdin_sent += len;
        pthread_mutex_unlock(&x->lock);
        if (len == 0)
                return 0;
        r = hub_send_frame(x->c, hub_exec_cfd(x), RP_STDIN, 0, x->tag, data, len, NULL, 0);
        return r < 0 ? r : (ssize_t)len;
}

int hub_exec_close_stdin(struct hub_exec *x)
{
        return hub_send_frame(x->c, hub_exec_cfd(x), RP_STDIN_EOF, 0, x->tag, NULL, 0, NULL, 0);
}

int hub_exec_signal(struct hub_exec *x, int sig)
{
        uint32_t s = (uint32_t)sig;
        return hub_send_frame(x->c, hub_exec_cfd(x), RP_SIGNAL, 0, x->tag, &s, sizeof(s), NULL, 0);
}

void hub_exec_free(struct hub_exec *x)
{
        struct hub *h;
        struct hub_chan *c;

        if (!x)
                return;
        c = x->c;
        h = c->h;
        pthread_mutex_lock(&h->lock);
        for (struct hub_exec **pp = &c->execs; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                        *pp = x->next;
                        break;
                }
        c->refs--;
        pthread_mutex_unlock(&h->lock);
        /* an execution left running (the daemon stops) still sends output:
         * no callback may run once the caller frees its userdata */
        pthread_mutex_lock(&x->lock);
        x->on_output = NULL;
        while (x->in_callback > 0)
                pthread_cond_wait(&x->cond, &x->lock);
        pthread_mutex_unlock(&x->lock);
        exec_unref(x);
}

int hub_exec_set_network(struct hub_exec *x, const struct egress_net *net, const char *id)
{
        struct egress_net *copy = NULL, *old;
        struct hub *h = x->c->h;

        if (net && net->set) {
                copy = malloc(sizeof(*copy));
                if (!copy)
                        return -ENOMEM;
                *copy = *net;
        }
        pthread_mutex_lock(&h->lock);
        old = x->net;
        x->net = copy;
        sbx_strlcpy(x->net_id, copy && id ? id : "", sizeof(x->net_id));
        pthread_mutex_unlock(&h->lock);
        free(old);
        return 0;
}

bool hub_narrowing(struct hub *h, const char *user, const char *session, unsigned int from, uint32_t tag,
                   struct egress_net *ret, char ret_id[40])
{
        struct hub_chan *c;
        bool found = false;

        if (!h || (from != RP_FROM_EXEC && from != RP_FROM_UNKNOWN))
                return false;
        pthread_mutex_lock(&h->lock);
        c = hub_chan_find_locked(h, user, session);
        for (struct hub_exec *x = c ? c->execs : NULL; x && !found; x = x->next) {
                if (!x->net || (from == RP_FROM_EXEC && x->tag != tag))
                        continue;
                found = true;
                sbx_strlcpy(ret_id, x->net_id, 40);
                if (from == RP_FROM_EXEC) {
                        *ret = *x->net;
                } else { /* unattributed while a narrowed execution runs: refused */
                        ret->set = true;
                        ret->n_allow = 0;
                }
        }
        pthread_mutex_unlock(&h->lock);
        return found;
}

uint32_t hub_exec_tag(const struct hub_exec *x)
{
        return x ? x->tag : 0;
}

int hub_exec_forget(struct hub_exec *x)
{
        return hub_send_frame(x->c, hub_exec_cfd(x), RP_FORGET, 0, x->tag, NULL, 0, NULL, 0);
}

int hub_exec_resize(struct hub_exec *x, int rows, int cols)
{
        struct rp_winsize w = {.rows = (uint16_t)rows, .cols = (uint16_t)cols};

        if (rows < 1 || rows > RP_TTY_MAX_ROWS || cols < 1 || cols > RP_TTY_MAX_COLS)
                return -EINVAL;
        return hub_send_frame(x->c, hub_exec_cfd(x), RP_RESIZE, 0, x->tag, &w, sizeof(w), NULL, 0);
}

void hub_exec_unref(struct hub_exec *x)
{
        exec_unref(x);
}
