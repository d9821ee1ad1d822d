/* fronts.c — starts and stops the fronts around the core daemon
 * (fronts.h): the daemon (daemon.c) opens the engines and knows no front;
 * this module, one layer up, starts the fronts on it and hands the daemon
 * the call that stops them, so daemon_close still stops them first.
 * No state beyond the daemon's front pointers; no threads of its own (each
 * front runs its own). */
#include "sandboxd/fronts.h"

#include "sandboxd/admin.h"
#include "sandboxd/api.h"
#include "sandboxd/http.h"

/* Reverse order of start: admin, the network fronts, then the API, so no
 * request arrives while the engines go. */
static void fronts_stop(struct daemon *d)
{
        admin_server_stop(d->admin);
        d->admin = NULL;
        http_server_stop(d->metrics);
        d->metrics = NULL;
        http_server_stop(d->http);
        d->http = NULL;
        api_server_stop(d->api);
        d->api = NULL;
}

int fronts_open(const struct sbx_config *cfg, const struct daemon_options *opts, struct daemon **ret,
                struct sbx_error *err)
{
        struct daemon *d = NULL;
        int r = daemon_open(cfg, opts, &d, err);

        if (r < 0)
                return r;
        d->fronts_stop = fronts_stop;
        /* The fronts come last: every engine they call exists by now. The
         * admin socket comes last of all: once `health` answers there, every
         * front (the HTTPS port included) is listening. */
        if (opts && opts->sockets) {
                r = api_server_start(d, &d->api, err);
                if (r == 0)
                        r = http_server_start(d, &d->http, err);
                if (r == 0)
                        r = http_metrics_start(d, &d->metrics, err);
                if (r == 0)
                        r = admin_server_start(d, &d->admin, err);
                if (r < 0) {
                        daemon_close(d);
                        return r;
                }
        }
        *ret = d;
        return 0;
}
