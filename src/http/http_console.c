/* http_console.c — the browser console's files (console/, embedded at build
 * time as console_gen.c by cmake/embed.cmake) at GET /console/ on the HTTPS
 * front. No token is needed for these bytes: they are the same for everyone
 * and hold no data; the page then calls POST /v1/<method> and GET /v1/events
 * with the token the person types, in an Authorization header (a cross-site
 * page cannot send one without a CORS preflight, which this front never
 * grants, so there is no cookie to ride and no CSRF). Every answer carries a
 * strict Content-Security-Policy (scripts and styles from this origin only,
 * no inline script, no framing) and nosniff. No state, no threads of its own. */
#include <microhttpd.h>
#include <string.h>

#include "http_internal.h"
#include "sandboxd/metrics.h"

extern const char console_index_html[], console_console_css[], console_app_js[], console_api_js[], console_dom_js[],
        console_sessions_js[], console_session_js[], console_terminal_js[], console_ops_js[];

static const struct {
        const char *path; /* after /console/ */
        const char *type;
        const char *body;
} console_files[] = {
        {"", "text/html; charset=utf-8", console_index_html},
        {"index.html", "text/html; charset=utf-8", console_index_html},
        {"console.css", "text/css; charset=utf-8", console_console_css},
        {"app.js", "text/javascript; charset=utf-8", console_app_js},
        {"api.js", "text/javascript; charset=utf-8", console_api_js},
        {"dom.js", "text/javascript; charset=utf-8", console_dom_js},
        {"sessions.js", "text/javascript; charset=utf-8", console_sessions_js},
        {"session.js", "text/javascript; charset=utf-8", console_session_js},
        {"terminal.js", "text/javascript; charset=utf-8", console_terminal_js},
        {"ops.js", "text/javascript; charset=utf-8", console_ops_js},
};

#define CONSOLE_CSP                                                                                                    \
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "    \
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

bool http_console_claims(const char *url)
{
        return strcmp(url, "/console") == 0 || strncmp(url, "/console/", 9) == 0;
}

enum MHD_Result http_console_request(struct MHD_Connection *conn, const char *url, const char *verb)
{
        struct MHD_Response *resp;
        enum MHD_Result r;
        const char *body = NULL, *type = NULL;
        unsigned status = 200;

        if (strcmp(verb, MHD_HTTP_METHOD_GET) != 0 && strcmp(verb, MHD_HTTP_METHOD_HEAD) != 0)
                return http_queue_error(conn, 405, "bad_request", "the console is GET only", false);
        if (strcmp(url, "/console") == 0) {
                status = 308; /* relative module paths need the slash */
                body = "";
                type = "text/plain";
        } else {
                for (size_t i = 0; i < ELEMENTSOF(console_files); i++)
                        if (strcmp(url + 9, console_files[i].path) == 0) {
                                body = console_files[i].body;
                                type = console_files[i].type;
                        }
        }
        if (!body)
                return http_queue_error(conn, 404, "not_found", "no such file in the console", false);
        resp = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        MHD_add_response_header(resp, "Content-Security-Policy", CONSOLE_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "X-Frame-Options", "DENY");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
        MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
        MHD_add_response_header(resp, "Cross-Origin-Resource-Policy", "same-origin");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        if (status == 308)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, "/console/");
        r = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        metrics_http_status((int)status);
        return r;
}
