/* api_transport.h — the API's dispatcher as a transport sees it: the API
 * socket (api.c) and the HTTPS front (src/http/) both carry requests to
 * api_call and its progress events back. Everything else of the API front
 * stays private to src/api/ (api_internal.h).
 *
 * Threads: a struct api_conn lives on its worker's stack; send and gone are
 * called on that worker, send under wlock for transports that share a fd. */
#ifndef SANDBOXD_API_TRANSPORT_H
#define SANDBOXD_API_TRANSPORT_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "sandboxd/api.h"
#include "sandboxd/fronterr.h"
#include "sandboxd/reqctx.h"
#include "sandboxd/token.h"

struct daemon;
struct api_server;

/* One connection, on its worker's stack. The API socket fills srv, fd and
 * peer; another transport (http.c) leaves srv NULL, fd -1, names the peer
 * in peer_addr and supplies send (progress events) and gone (the client
 * left: stop waiting). */
struct api_conn {
        struct api_server *srv;
        struct daemon *d;
        int fd;
        const char *peer_addr; /* "ip:port" for network peers, else NULL (peer holds the creds) */
        void (*send)(struct api_conn *c, cJSON *msg);
        bool (*gone)(struct api_conn *c);
        void *transport; /* the transport's own state */
        struct ucred peer;
        pthread_mutex_t wlock;
        bool broken; /* wlock: a write failed, the peer is gone */
        int auth_failures;
        bool authenticated;
        /* The request's trace id (reqctx.h): a transport that read it from
         * headers sets it before api_call; "" lets api_call pick it from
         * params.traceparent / params.request_id (or make one). api_call
         * leaves the id it used here, for the transport's reply. */
        char trace_id[REQCTX_ID_MAX + 1];
};

/* Check a token (counting and auditing failures on c): 0 with *ret, or -1
 * with e (unauthorized, or unavailable when the store cannot answer). */
int api_authenticate(struct api_conn *c, const char *token, const char *method, struct token_info *ret,
                     struct fronterr *e);
/* The dispatcher every transport shares: check method, params and
 * params.session, run the method as tok's user. 0 with *ret_result, -1 with
 * e (code and message always set), 1 when the client left (send nothing).
 * Progress of a streamed exec goes to c->send. The thread serves the
 * request's trace (c->trace_id, reqctx.h) meanwhile, and an object result
 * carries it as "trace_id". */
int api_call(struct api_conn *c, const struct token_info *tok, const cJSON *id, const char *method, const cJSON *params,
             cJSON **ret_result, struct fronterr *e);

/* Whether name is a method of the API (the HTTPS front's 404). */
bool api_method_exists(const char *name);

#endif
