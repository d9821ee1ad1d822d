/* egress_http.c — the egress proxy's request head (egress_internal.h):
 * http_parser callbacks that copy the target and headers out of the head,
 * the target's host and port, and the head rewritten for upstream. The
 * parsing is Debian's libhttp-parser; only the header filtering is written
 * here. Loop thread only. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

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
