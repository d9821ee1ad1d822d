/* egress_http.c — the egress proxy's request head (egress_internal.h):
 * http_parser callbacks that copy the target and headers out of the head,
 * the target's host and port, and the head rewritten for upstream. The
 * parsing is Debian's libhttp-parser; only the header filtering is written
 * here. Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sandboxd/secrets.h"
#include "sandboxd/utf8.h"
#include "egress_internal.h"

static int arena_add(struct tunnel *t, const char *at, size_t len, uint32_t *ret_off)
{
        if (t->arena_len + len > t->arena_cap)
                return -1;
        if (ret_off)
                *ret_off = (uint32_t)t->arena_len;
        memcpy(t->arena + t->arena_len, at, len);
        t->arena_len += len;
        return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
        struct tunnel *t = p->data;
        uint32_t off;
        if (arena_add(t, at, len, &off) < 0)
                return -1;
        if (t->url_len == 0)
                t->url = off;
        t->url_len += (uint32_t)len;
        return 0;
}

static int on_field(http_parser *p, const char *at, size_t len)
{
        struct tunnel *t = p->data;
        uint32_t off;

        if (t->in_value || t->n_hdrs == 0) {
                if (t->n_hdrs >= MAX_HEADERS)
                        return -1;
                t->n_hdrs++;
                t->hdrs[t->n_hdrs - 1] = (struct hdr){0};
                t->in_value = false;
        }
        if (arena_add(t, at, len, &off) < 0)
                return -1;
        if (t->hdrs[t->n_hdrs - 1].name_len == 0)
                t->hdrs[t->n_hdrs - 1].name = off;
        t->hdrs[t->n_hdrs - 1].name_len += (uint32_t)len;
        return 0;
}

static int on_value(http_parser *p, const char *at, size_t len)
{
        struct tunnel *t = p->data;
        struct hdr *h;
        uint32_t off;

        if (t->n_hdrs == 0)
                return -1;
        h = &t->hdrs[t->n_hdrs - 1];
        if (arena_add(t, at, len, &off) < 0)
                return -1;
        if (!t->in_value) {
                h->value = off;
                h->value_len = 0;
        }
        h->value_len += (uint32_t)len;
        t->in_value = true;
        return 0;
}

static int on_headers_complete(http_parser *p)
{
        struct tunnel *t = p->data;
        t->head_done = true;
        return 0;
}

static int on_message_complete(http_parser *p)
{
        struct tunnel *t = p->data;
        t->body_done = true;
        http_parser_pause(p, 1); /* the bytes after it are not this request's */
        return 0;
}

const http_parser_settings egress_request_settings = {
        .on_url = on_url,
        .on_header_field = on_field,
        .on_header_value = on_value,
        .on_headers_complete = on_headers_complete,
        .on_message_complete = on_message_complete,
};

static bool name_is(const struct tunnel *t, const struct hdr *h, const char *name)
{
        return h->name_len == strlen(name) && strncasecmp(t->arena + h->name, name, h->name_len) == 0;
}

/* Is header h named as a token in any Connection header (so hop-by-hop)? */
static bool named_by_connection(const struct tunnel *t, const struct hdr *h)
{
        for (int i = 0; i < t->n_hdrs; i++) {
                const struct hdr *c = &t->hdrs[i];
                const char *v = t->arena + c->value, *end = v + c->value_len;
                if (!name_is(t, c, "Connection"))
                        continue;
                while (v < end) {
                        const char *tok;
                        while (v < end && (*v == ' ' || *v == '\t' || *v == ','))
                                v++;
                        tok = v;
                        while (v < end && *v != ',' && *v != ' ' && *v != '\t')
                                v++;
                        if ((size_t)(v - tok) == h->name_len && strncasecmp(tok, t->arena + h->name, h->name_len) == 0)
                                return true;
                }
        }
        return false;
}

static bool hop_by_hop(const struct tunnel *t, const struct hdr *h)
{
        static const char *const names[] = {
                "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "TE",
                "Trailer",    "Upgrade",          "Host"};
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (name_is(t, h, names[i]))
                        return true;
        return named_by_connection(t, h);
}

/* Take host and port from the request target; for plain HTTP also the
 * origin-form path. Returns an error reason, or NULL. */
const char *egress_http_target(struct tunnel *t, const char **ret_path, size_t *ret_path_len)
{
        struct http_parser_url u;
        const char *url = t->arena + t->url;

        http_parser_url_init(&u);
        if (t->url_len == 0 || http_parser_parse_url(url, t->url_len, t->is_connect, &u) != 0)
                return "bad_target";
        if (!(u.field_set & (1 << UF_HOST)))
                return "bad_target";
        if (egress_host_normalize(url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len, t->host) < 0)
                return "bad_host";
        if (u.field_set & (1 << UF_USERINFO))
                return "bad_target";
        if (t->is_connect) {
                if (!(u.field_set & (1 << UF_PORT)) || u.port == 0)
                        return "bad_target";
                t->port = u.port;
                return NULL;
        }
        if (!(u.field_set & (1 << UF_SCHEMA)))
                return "not_absolute";
        if (u.field_data[UF_SCHEMA].len != 4 || strncasecmp(url + u.field_data[UF_SCHEMA].off, "http", 4) != 0)
                return "scheme";
        t->port = (u.field_set & (1 << UF_PORT)) ? u.port : 80;
        if (t->port == 0)
                return "bad_target";
        if (u.field_set & (1 << UF_PATH)) {
                /* origin-form: the path and query, as sent (no fragment) */
                size_t end = u.field_data[UF_PATH].off + u.field_data[UF_PATH].len;
                if (u.field_set & (1 << UF_QUERY))
                        end = u.field_data[UF_QUERY].off + u.field_data[UF_QUERY].len;
                *ret_path = url + u.field_data[UF_PATH].off;
                *ret_path_len = end - u.field_data[UF_PATH].off;
        } else {
                *ret_path = "/";
                *ret_path_len = 1;
        }
        return NULL;
}

/* The request head as it goes upstream: origin-form when direct, absolute
 * when through egress_upstream_proxy; Host from the target; hop-by-hop
 * headers dropped; Connection: close. */
void egress_http_write_head(struct tunnel *t, struct evbuffer *out, bool absolute, const char *path, size_t path_len)
{
        bool v6 = strchr(t->host, ':') != NULL;
        char authority[EGRESS_HOST_MAX + 16];

        if (t->port == 80)
                snprintf(authority, sizeof(authority), v6 ? "[%s]" : "%s", t->host);
        else
                snprintf(authority, sizeof(authority), v6 ? "[%s]:%d" : "%s:%d", t->host, t->port);
        if (absolute)
                evbuffer_add_printf(out, "%s http://%s%.*s HTTP/1.%d\r\n", t->method, authority, (int)path_len, path,
                                    t->parser.http_minor ? 1 : 0);
        else
                evbuffer_add_printf(out, "%s %.*s HTTP/1.%d\r\n", t->method, (int)path_len, path,
                                    t->parser.http_minor ? 1 : 0);
        evbuffer_add_printf(out, "Host: %s\r\n", authority);
        for (int i = 0; i < t->n_hdrs; i++) {
                const struct hdr *h = &t->hdrs[i];
                if (hop_by_hop(t, h))
                        continue;
                evbuffer_add(out, t->arena + h->name, h->name_len);
                evbuffer_add(out, ": ", 2);
                evbuffer_add(out, t->arena + h->value, h->value_len);
                evbuffer_add(out, "\r\n", 2);
        }
        evbuffer_add_printf(out, "Connection: close\r\n\r\n");
}

/* ---- secrets (issue 37): placeholders in a request head ---- */

int egress_placeholder_find(const struct tunnel *t, const char *buf, size_t len, size_t *ret_at)
{
        static const char prefix[] = SECRETS_PLACEHOLDER_PREFIX;
        const size_t plen = sizeof(prefix) - 1;
        const char *p = buf, *end = buf + len;

        while ((size_t)(end - p) >= plen && (p = memmem(p, (size_t)(end - p), prefix, plen)) != NULL) {
                for (size_t i = 0; i < t->n_secrets; i++) {
                        size_t n = strlen(t->secrets[i].placeholder);
                        if (n > 0 && (size_t)(end - p) >= n && memcmp(p, t->secrets[i].placeholder, n) == 0) {
                                *ret_at = (size_t)(p - buf);
                                return (int)i;
                        }
                }
                p++;
        }
        return -1;
}

bool egress_http_head_has_placeholder(const struct tunnel *t)
{
        size_t at;

        if (egress_placeholder_find(t, t->arena + t->url, t->url_len, &at) >= 0)
                return true;
        for (int i = 0; i < t->n_hdrs; i++) {
                const struct hdr *h = &t->hdrs[i];
                if (egress_placeholder_find(t, t->arena + h->name, h->name_len, &at) >= 0 ||
                    egress_placeholder_find(t, t->arena + h->value, h->value_len, &at) >= 0)
                        return true;
        }
        return false;
}

static bool secret_names_host(const struct egress_secret *s, const char *host)
{
        for (size_t i = 0; i < s->n_hosts; i++)
                if (strcasecmp(s->hosts[i], host) == 0)
                        return true;
        return false;
}

/* The Host header names t->host (and t->port, or 443 when it names none). */
static bool host_header_matches(const struct tunnel *t, const struct hdr *h)
{
        const char *v = t->arena + h->value, *colon = memchr(v, ':', h->value_len);
        size_t n = colon ? (size_t)(colon - v) : h->value_len;
        int port = 443;

        if (colon) {
                char digits[8];
                size_t dn = h->value_len - n - 1;
                if (dn == 0 || dn >= sizeof(digits))
                        return false;
                memcpy(digits, colon + 1, dn);
                digits[dn] = '\0';
                if (strspn(digits, "0123456789") != dn)
                        return false;
                port = atoi(digits);
        }
        return n == strlen(t->host) && strncasecmp(v, t->host, n) == 0 && port == t->port;
}

/* Does a rule set s's header on this request (its host is one of the rule's)? */
static bool injects_here(const struct tunnel *t, const struct egress_secret *s)
{
        return s->inject[0] && s->header[0] && s->value && secret_names_host(s, t->host);
}

/* Is h a header a rule sets here (so the sandbox's is dropped)? */
static bool injected(const struct tunnel *t, const struct hdr *h)
{
        for (size_t i = 0; i < t->n_secrets; i++)
                if (injects_here(t, &t->secrets[i]) && name_is(t, h, t->secrets[i].header))
                        return true;
        return false;
}

#define SWAPS_MAX 16 /* values put into one request head, at most (SECRETS_VALUE_MAX each) */

/* Copy v[0, len) to out with each placeholder replaced by its value where it
 * may go; the reason to refuse otherwise. */
static const char *swap_into(struct tunnel *t, struct evbuffer *out, const char *v, size_t len, const char *hname,
                             size_t hname_len, bool host_ok, int *swaps, char *detail, size_t dsize)
{
        size_t at;
        int i;

        while ((i = egress_placeholder_find(t, v, len, &at)) >= 0) {
                const struct egress_secret *s = &t->secrets[i];
                if (!host_ok || !s->value || !secret_names_host(s, t->host) ||
                    (s->header[0] &&
                     (strlen(s->header) != hname_len || strncasecmp(hname, s->header, hname_len) != 0))) {
                        snprintf(detail, dsize,
                                 "secret %s goes only in %s to its hosts, when the TLS name and the Host header "
                                 "agree with the CONNECT",
                                 s->name, s->header[0] ? s->header : "a header");
                        return "secret_refused";
                }
                if (++*swaps > SWAPS_MAX) {
                        snprintf(detail, dsize, "more than %d secret values in one request", SWAPS_MAX);
                        return "secret_refused";
                }
                evbuffer_add(out, v, at);
                evbuffer_add(out, s->value, s->value_len);
                at += strlen(s->placeholder);
                v += at;
                len -= at;
        }
        evbuffer_add(out, v, len);
        return NULL;
}

const char *egress_http_write_swapped(struct tunnel *t, struct evbuffer *out, const char *sni, char *ret_detail,
                                      size_t detail_size)
{
        const struct hdr *host = NULL;
        bool host_ok;
        int swaps = 0;
        size_t at;

        if (egress_placeholder_find(t, t->arena + t->url, t->url_len, &at) >= 0) {
                snprintf(ret_detail, detail_size, "a secret's placeholder goes only in a header");
                return "secret_refused";
        }
        for (int i = 0; i < t->n_hdrs; i++) {
                if (egress_placeholder_find(t, t->arena + t->hdrs[i].name, t->hdrs[i].name_len, &at) >= 0) {
                        snprintf(ret_detail, detail_size, "a secret's placeholder goes only in a header's value");
                        return "secret_refused";
                }
                if (name_is(t, &t->hdrs[i], "Host")) {
                        if (host) {
                                snprintf(ret_detail, detail_size, "more than one Host header");
                                return "bad_request";
                        }
                        host = &t->hdrs[i];
                }
        }
        host_ok = sni && strcasecmp(sni, t->host) == 0 && host && host_header_matches(t, host);
        evbuffer_add_printf(out, "%s %.*s HTTP/1.1\r\n", t->method, (int)t->url_len, t->arena + t->url);
        for (int i = 0; i < t->n_hdrs; i++) {
                const struct hdr *h = &t->hdrs[i];
                const char *v = t->arena + h->value, *why;
                if ((hop_by_hop(t, h) && h != host) || name_is(t, h, "Accept-Encoding") || injected(t, h))
                        continue;
                evbuffer_add(out, t->arena + h->name, h->name_len);
                evbuffer_add(out, ": ", 2);
                if (name_is(t, h, "Authorization") && h->value_len > 6 && strncasecmp(v, "Basic ", 6) == 0) {
                        /* Basic auth: the placeholder is inside the base64 */
                        unsigned char *raw = NULL;
                        size_t raw_len = 0;
                        if (base64_decode(v + 6, h->value_len - 6, &raw, &raw_len) == 0) {
                                struct evbuffer *plain = evbuffer_new();
                                char *enc = NULL;
                                why = plain ? swap_into(t, plain, (const char *)raw, raw_len, t->arena + h->name,
                                                        h->name_len, host_ok, &swaps, ret_detail, detail_size)
                                            : "internal";
                                if (!why) {
                                        size_t n = evbuffer_get_length(plain);
                                        enc = base64_encode(evbuffer_pullup(plain, -1), n);
                                        if (enc)
                                                evbuffer_add_printf(out, "Basic %s\r\n", enc);
                                        else
                                                why = "internal";
                                }
                                if (plain) {
                                        evbuffer_pullup(plain, -1);
                                        evbuffer_free(plain);
                                }
                                free(enc);
                                free(raw);
                                if (why)
                                        return why;
                                continue;
                        }
                }
                why = swap_into(t, out, v, h->value_len, t->arena + h->name, h->name_len, host_ok, &swaps, ret_detail,
                                detail_size);
                if (why)
                        return why;
                evbuffer_add(out, "\r\n", 2);
        }
        /* the rules' headers (E2B's network.rules), in place of the sandbox's of those names: through
         * the same swap, so the same checks (TLS name = Host = the rule's host) apply */
        for (size_t i = 0; i < t->n_secrets; i++) {
                const struct egress_secret *s = &t->secrets[i];
                const char *why;
                if (!injects_here(t, s))
                        continue;
                evbuffer_add_printf(out, "%s: ", s->header);
                why = swap_into(t, out, s->inject, strlen(s->inject), s->header, strlen(s->header), host_ok, &swaps,
                                ret_detail, detail_size);
                if (why)
                        return why;
                evbuffer_add(out, "\r\n", 2);
        }
        evbuffer_add_printf(out, "Accept-Encoding: identity\r\n%s\r\n", t->up_keep ? "" : "Connection: close\r\n");
        return NULL;
}

/* The body of an intercepted request: trailers are refused (a header
 * after the body is not looked at). */
static int refuse_trailer(http_parser *p, const char *at, size_t len)
{
        return -1;
}

const http_parser_settings egress_icpt_body_settings = {
        .on_header_field = refuse_trailer,
        .on_header_value = refuse_trailer,
        .on_body = egress_icpt_on_body,
        .on_message_complete = egress_icpt_on_request_done,
};

/* An intercepted response: the status text and headers into t->arena (as a
 * request's target and headers), the rest to egress_tls.c. */
const http_parser_settings egress_icpt_response_settings = {
        .on_status = on_url,
        .on_header_field = on_field,
        .on_header_value = on_value,
        .on_headers_complete = egress_icpt_on_response_head,
        .on_body = egress_icpt_on_response_body,
        .on_message_complete = egress_icpt_on_response_done,
};
