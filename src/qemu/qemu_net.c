/* qemu_net.c — a microVM's egress and port forwards (docs/microvm.md): the
 * daemon's end of the VM's second virtio-serial port (VMUX_PORT_NAME), whose
 * streams (runner/vmux.h) are the guest runner's egress.sock and fwd.sock
 * connections. Each stream the guest opens becomes a unix socket handed to
 * the gateway through engine_qemu_runner.net (gateway_attach, as a node
 * agent's are), so the egress proxy's policy, attribution (the runner's
 * RP_EGRESS_FROM header, as in a container) and audit, the ratchet and the
 * session's port block are the gateway's, unchanged. The VM still has no
 * network device.
 *
 * The port's chardev is a socket the daemon binds in the VM's directory
 * (QEMU_NET_CHANNEL, root's) and hands to QEMU listening (fd 7), as the
 * runner channel is; the daemon dials it after each boot or adoption and
 * runs a vmux (its own thread) on the connection until QEMU closes it or
 * the VM is removed.
 *
 * Locks: q->net_lock guards the list; a vmux is stopped (joined) with no
 * lock held, and its thread takes only q->lock (to read q->runner). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qemu_internal.h"
#include "sandboxd/container.h"
#include "../../runner/vmux.h"

_Static_assert(ENGINE_QEMU_NET_EGRESS == VMUX_KIND_EGRESS && ENGINE_QEMU_NET_FWD == VMUX_KIND_FWD,
               "the engine's stream kinds are the wire's");

struct qemu_net {
        struct qemu_net *next;
        struct qemu *q;
        char id[ENGINE_ID_STR_MAX];
        char user[128], session[128];
        struct vmux *m;
};

/* A stream the guest opened (the vmux's thread). */
static void opened(void *ud, uint16_t kind, int fd)
{
        struct qemu_net *n = ud;
        struct engine_qemu_runner runner;

        pthread_mutex_lock(&n->q->lock);
        runner = n->q->runner;
        pthread_mutex_unlock(&n->q->lock);
        if (runner.net)
                runner.net(runner.ud, n->user, n->session, kind, fd); /* takes fd */
        else
                close(fd);
}

/* count connections of n's VM were reset (engine_qemu_runner.dropped). */
static void report_dropped(struct qemu_net *n, size_t count, const char *cause)
{
        struct engine_qemu_runner runner;

        if (count == 0)
                return;
        pthread_mutex_lock(&n->q->lock);
        runner = n->q->runner;
        pthread_mutex_unlock(&n->q->lock);
        if (runner.dropped)
                runner.dropped(runner.ud, n->user, n->session, count, cause);
}

/* The guest's VMUX_DROPPED (the vmux's thread). */
static void guest_dropped(void *ud, uint32_t count)
{
        report_dropped(ud, count, "not_carried");
}

/* Stopped; what its streams still carried is reported with cause (NULL: not reported: the
 * daemon stops, and the next daemon hears it from the guest). */
static void net_free(struct qemu_net *n, const char *cause)
{
        size_t open = vmux_ended(n->m) ? 0 : vmux_connections(n->m);

        vmux_stop(n->m);
        if (cause)
                report_dropped(n, open, cause);
        free(n);
}

/* Take id's entry (and those whose VM ended) off the list; the caller stops them. */
static struct qemu_net *unlink_locked(struct qemu *q, const char *id)
{
        struct qemu_net *out = NULL;

        for (struct qemu_net **pp = &q->nets; *pp;) {
                struct qemu_net *n = *pp;
                if ((id && strcmp(n->id, id) == 0) || vmux_ended(n->m)) {
                        *pp = n->next;
                        n->next = out;
                        out = n;
                } else {
                        pp = &n->next;
                }
        }
        return out;
}

static void free_list(struct qemu_net *n, const char *cause)
{
        while (n) {
                struct qemu_net *next = n->next;
                net_free(n, cause);
                n = next;
        }
}

int qemu_net_attach(struct qemu *q, const struct qemu_vm *vm, int vmfd)
{
        const char *user = qemu_vm_label(vm, CONTAINER_LABEL_USER),
                   *session = qemu_vm_label(vm, CONTAINER_LABEL_SESSION);
        struct qemu_net *n, *old;
        int fd = -1, r;

        if (!vm->net || !user || !session)
                return 0; /* booted without the port (an earlier daemon's VM): no network, as then */
        pthread_mutex_lock(&q->net_lock);
        old = unlink_locked(q, vm->id);
        bool stopped = q->net_stopped;
        pthread_mutex_unlock(&q->net_lock);
        free_list(old, "reconnected");
        if (stopped)
                return -ESHUTDOWN;
        r = qemu_sock_connect(vmfd, QEMU_NET_CHANNEL, &fd);
        if (r < 0)
                return r;
        n = calloc(1, sizeof(*n));
        if (!n) {
                close(fd);
                return -ENOMEM;
        }
        n->q = q;
        sbx_strlcpy(n->id, vm->id, sizeof(n->id));
        sbx_strlcpy(n->user, user, sizeof(n->user));
        sbx_strlcpy(n->session, session, sizeof(n->session));
        n->m = vmux_start(fd, true, opened, guest_dropped, n); /* takes fd */
        if (!n->m) {
                free(n);
                return -ENOMEM;
        }
        pthread_mutex_lock(&q->net_lock);
        if (q->net_stopped) {
                pthread_mutex_unlock(&q->net_lock);
                net_free(n, NULL);
                return -ESHUTDOWN;
        }
        n->next = q->nets;
        q->nets = n;
        pthread_mutex_unlock(&q->net_lock);
        return 0;
}

size_t qemu_net_connections(struct qemu *q, const char *id)
{
        size_t n = 0;

        pthread_mutex_lock(&q->net_lock);
        for (struct qemu_net *x = q->nets; x; x = x->next)
                if (strcmp(x->id, id) == 0 && !vmux_ended(x->m))
                        n = vmux_connections(x->m);
        pthread_mutex_unlock(&q->net_lock);
        return n;
}

void qemu_net_detach(struct qemu *q, const char *id)
{
        pthread_mutex_lock(&q->net_lock);
        struct qemu_net *old = unlink_locked(q, id);
        pthread_mutex_unlock(&q->net_lock);
        free_list(old, "removed");
}

void qemu_net_stop(struct qemu *q)
{
        pthread_mutex_lock(&q->net_lock);
        struct qemu_net *all = q->nets;
        q->nets = NULL;
        q->net_stopped = true;
        pthread_mutex_unlock(&q->net_lock);
        free_list(all, NULL);
}
