/* monitor.h — the health monitor.
 *
 * Two named threads watch the containers of this instance:
 *   sbx-events   follows Docker's events stream (die, oom, stop, destroy,
 *                filtered by this instance's label) and reacts at once;
 *   sbx-monitor  every MONITOR_INTERVAL_MS makes ONE list call for all the
 *                instance's containers, catches whatever the stream missed
 *                (and covers its reconnects), then expires idle sessions.
 * Failures go to session_mark_failed(), which marks the session ERROR with
 * the cause and runs the registered failure handlers. Monitoring never
 * counts as activity and never creates or recreates a container. */
#ifndef SANDBOXD_MONITOR_H
#define SANDBOXD_MONITOR_H

#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct engine;
struct session_manager;
struct monitor;

int monitor_start(const struct sbx_config *cfg, struct engine *d, struct session_manager *m, struct monitor **ret,
                  struct sbx_error *err);
/* Stop both threads, join them, free. NULL is fine. */
void monitor_stop(struct monitor *mon);

/* Wall time (unix ms) of the last completed poll, 0 before the first. */
int64_t monitor_last_poll(struct monitor *mon);
/* Number of events handled (for stats and tests). */
uint64_t monitor_events_seen(struct monitor *mon);

/* Health monitor poll interval: the events stream reacts at once, the poll
 * only catches what the stream missed. */
#define MONITOR_INTERVAL_MS 5000

#endif
