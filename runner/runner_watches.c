/* runner_watches.c — the runner's directory watches (RP_WATCH_*, issue 36):
 * each is a runner_watch.c watcher over a directory opened confined to
 * /workspace (ws_resolve, ws_open: never through a link that leads
 * outside), keyed by the daemon's tag, at most RP_WATCH_MAX of them. The
 * main loop polls their inotify fds; events go out as RP_WATCH_EVENT only
 * while the outgoing buffer has room, else they wait in the watcher's own
 * bounded queue, which says when it overflowed (RP_WATCH_LOST). A
 * connection that closes drops them all: the daemon's side ends with it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner_ext.h"
#include "runner_watch.h"

#define TAKE_BATCH 16

struct watch {
        uint32_t tag;
        struct rwatch *w;
};

static struct watch watches[RP_WATCH_MAX];
static size_t n_watches;

static void reply(uint32_t tag, int err)
{
        struct rp_file_reply r = {.err = err < 0 ? -err : err};
        send_frame(RP_FILE_REPLY, 0, tag, &r, sizeof(r), NULL, 0);
}

static void drop(size_t i)
{
        rwatch_close(watches[i].w);
        watches[i] = watches[--n_watches];
}

static void watch_start(uint32_t tag, bool recursive, const char *path)
{
        char res[PATH_MAX];
        struct rwatch *w = NULL;
        int fd, r;

        for (size_t i = 0; i < n_watches; i++)
                if (watches[i].tag == tag) {
                        reply(tag, EEXIST);
                        return;
                }
        if (n_watches >= RP_WATCH_MAX) {
                reply(tag, EMFILE);
                return;
        }
        r = ws_resolve(path, false, res, sizeof(res), NULL);
        if (r < 0) {
                reply(tag, r);
                return;
        }
        fd = ws_open(res, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0) {
                reply(tag, fd == -ELOOP || fd == -EXDEV ? -EPERM : fd);
                return;
        }
        r = rwatch_open(fd, recursive, &w);
        close(fd);
        if (r < 0) {
                reply(tag, r);
                return;
        }
        watches[n_watches++] = (struct watch){.tag = tag, .w = w};
        reply(tag, 0);
}

void watch_frame(const struct rp_hdr *h, const unsigned char *p)
{
        if (h->type == RP_WATCH_STOP) {
                for (size_t i = 0; i < n_watches; i++)
                        if (watches[i].tag == h->tag) {
                                drop(i);
                                break;
                        }
                return;
        }
        if (h->tag == 0 || h->len < sizeof(struct rp_file_req) + 2 || p[h->len - 1] != '\0' ||
            memchr(p + sizeof(struct rp_file_req), '\0', h->len - sizeof(struct rp_file_req)) != p + h->len - 1) {
                reply(h->tag, EINVAL);
                return;
        }
        watch_start(h->tag, h->flags & RP_WATCH_RECURSIVE, (const char *)p + sizeof(struct rp_file_req));
}

void watch_disconnected(void)
{
        while (n_watches)
                drop(n_watches - 1);
}

nfds_t watch_poll_fill(struct pollfd *pfd)
{
        for (size_t i = 0; i < n_watches; i++)
                pfd[i] = (struct pollfd){.fd = rwatch_fd(watches[i].w), .events = POLLIN};
        return (nfds_t)n_watches;
}

void watch_poll_ready(const struct pollfd *pfd, nfds_t n)
{
        for (nfds_t k = 0; k < n; k++) {
                if (!pfd[k].revents)
                        continue;
                for (size_t i = 0; i < n_watches; i++)
                        if (rwatch_fd(watches[i].w) == pfd[k].fd) {
                                (void)rwatch_read(watches[i].w);
                                break;
                        }
        }
}

/* Send what the watchers queued while the outgoing buffer has room. */
void watch_tick(void)
{
        static struct rwatch_event ev[TAKE_BATCH];

        if (!connected())
                return;
        for (size_t i = 0; i < n_watches; i++) {
                struct watch *x = &watches[i];
                bool drained = false;
                while (!drained && out_room(TAKE_BATCH * (RP_HDR_LEN + RWATCH_NAME_MAX))) {
                        size_t n = rwatch_take(x->w, ev, TAKE_BATCH);
                        for (size_t k = 0; k < n; k++) {
                                size_t len = strnlen(ev[k].name, sizeof(ev[k].name));
                                if (len == 0 || len > RP_WATCH_NAME_MAX || ev[k].kind < 1 ||
                                    ev[k].kind > RP_WATCH_KIND_MAX)
                                        continue;
                                send_frame(RP_WATCH_EVENT, (uint16_t)ev[k].kind, x->tag, ev[k].name, len, NULL, 0);
                        }
                        drained = n < TAKE_BATCH;
                }
                /* the loss is said after the events queued before it */
                if (drained && rwatch_overflowed(x->w))
                        send_frame(RP_WATCH_EVENT, RP_WATCH_LOST, x->tag, NULL, 0, NULL, 0);
        }
}
