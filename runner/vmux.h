/* vmux.h — a microVM's network streams multiplexed over one virtio-serial
 * port (docs/microvm.md, "Egress and port forwards"). The same code runs on
 * both ends: in the guest's runner (runner_net.c opens a stream where a
 * container's runner dials egress.sock or fwd.sock) and in the daemon
 * (src/qemu/qemu_net.c hands each stream the guest opened to the gateway, as
 * a node agent's streams are). Pure libc and pthreads: the runner is a
 * static musl binary.
 *
 * Wire: frames of a 12-byte header (struct vmux_hdr, little-endian, len
 * bytes of payload after it, at most VMUX_DATA_MAX). Only the guest opens
 * streams (VMUX_OPEN, ids strictly increasing, never reused); VMUX_DATA is
 * bounded by a per-stream window the receiver hands back with VMUX_CREDIT
 * as it writes the bytes on, so one stalled stream never blocks another
 * and neither end buffers more than VMUX_WINDOW per stream; VMUX_EOF is a
 * half close, VMUX_CLOSE ends the stream both ways.
 *
 * Sync: a port carries what a previous connection left (QEMU flushes what
 * the guest queued to whichever connection comes next; a forked guest has
 * its parent's half-read frames). On every connection, and after any frame
 * it rejects, the host writes VMUX_BREAK bytes of 0xff (which end any
 * frame the guest was in the middle of and then fail as a header), then
 * VMUX_SYNC with a fresh random nonce; the guest, which skips bytes until
 * it sees a VMUX_SYNC header whenever it is out of step, drops every
 * stream and answers VMUX_SYNC_ACK with the nonce; the host skips
 * everything before that answer (at most VMUX_SCAN_MAX bytes). Nothing is
 * sent on a stream before the sync, so no byte of an earlier connection
 * reaches a stream of this one.
 *
 * Everything the guest sends is tenant input: the host checks every
 * header (type, length, id order, window, the stream cap) and resyncs on
 * the first wrong one, dropping the VM's streams. */
#ifndef SANDBOXD_VMUX_H
#define SANDBOXD_VMUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMUX_PORT_NAME "sandboxd.net" /* the virtio-serial port's name */
#define VMUX_DATA_MAX (16 * 1024)     /* a frame's payload */
#define VMUX_WINDOW (64 * 1024)       /* bytes in flight per stream and direction */
#define VMUX_STREAMS_MAX 512          /* open streams per VM */
#define VMUX_BREAK (VMUX_DATA_MAX + 64)
#define VMUX_SCAN_MAX (16 * 1024 * 1024)

enum vmux_type {
        VMUX_SYNC = 1,     /* host→guest: nonce (8 bytes) */
        VMUX_SYNC_ACK = 2, /* guest→host: the nonce */
        VMUX_OPEN = 3,     /* guest→host: a new stream of `kind` */
        VMUX_DATA = 4,
        VMUX_CREDIT = 5, /* uint32: bytes written on since the last credit */
        VMUX_EOF = 6,
        VMUX_CLOSE = 7,
        VMUX_DROPPED = 8, /* guest→host, right after VMUX_SYNC_ACK, at most one per sync: uint32, the
                           * connections it dropped since the last sync (vmux_connections) */
};

enum vmux_kind {
        VMUX_KIND_EGRESS = 1, /* a client of the guest's 127.0.0.1:RP_EGRESS_PORT (egress.sock) */
        VMUX_KIND_FWD = 2,    /* the runner's fwd.sock connection (control or data) */
};

struct vmux_hdr {
        uint32_t len;
        uint16_t type;
        uint16_t kind; /* VMUX_OPEN: enum vmux_kind; else 0 */
        uint32_t id;
};

struct vmux;

/* Host end: a stream the guest opened; fd is a connected unix socket that
 * the callee owns from here (the other end is the stream). Called on the
 * vmux's thread. */
typedef void (*vmux_opened_fn)(void *ud, uint16_t kind, int fd);
/* Host end: the guest dropped count connections since the sync before (its host went, or a
 * fork or restore of its memory began a new connection): what was not carried. Called on the
 * vmux's thread, at most once per sync. */
typedef void (*vmux_dropped_fn)(void *ud, uint32_t count);

/* A vmux on chan (made nonblocking; the vmux owns it) and its thread. host:
 * the daemon's end (opened is called for each stream, dropped, if not NULL, for the
 * guest's report); else the guest's. */
struct vmux *vmux_start(int chan, bool host, vmux_opened_fn opened, vmux_dropped_fn dropped, void *ud);
/* Guest end: a new stream of kind; the local end of it, or -1 at once
 * when the host is not there (not synced) or the caps are reached. */
int vmux_open(struct vmux *m, uint16_t kind);
/* The connections its streams carry now: every open stream but the runner's forward control
 * stream (egress clients, forwarded connections); what a fork, a restore or a new connection
 * of the port resets. */
size_t vmux_connections(struct vmux *m);
/* Whether its thread ended (the channel closed: the VM is gone). */
bool vmux_ended(struct vmux *m);
/* Stop the thread, close every stream and the channel, free. */
void vmux_stop(struct vmux *m);

#endif
