/* sdnotify.h — readiness and status for a service manager (systemd's
 * Type=notify protocol). */
#pragma once

/* Send STATE (e.g. "READY=1\nSTATUS=running") as one datagram to the socket
 * named by $NOTIFY_SOCKET. Returns 0 when sent, 0 too when NOTIFY_SOCKET is
 * unset or empty (not run by a service manager), or -errno. Blocking but
 * bounded: a datagram to a unix socket either queues or fails at once. */
int sdnotify_send(const char *state);
