/* egress_tls.c — secrets at the egress proxy (issue 37; docs/security.md
 * "Secrets"): which connection is intercepted, and the intercepted
 * connection itself.
 *
 * Only a CONNECT to a host that one of the session's attached secrets names
 * (after the allowlist and the execution's narrowing said yes) is
 * intercepted; every other CONNECT is relayed byte for byte
 * (egress_relay.c). An intercepted one: TLS to the upstream first, verified
 * against the system store (OpenSSL's default paths, so SSL_CERT_FILE and
 * SSL_CERT_DIR apply) with the CONNECT's host checked; then the 200 and TLS
 * to the client with a leaf certificate for that host signed by the
 * session's CA (cached per session and host), ALPN http/1.1 only. Each
 * request on it (kept alive: at most ICPT_MAX_REQUESTS, ICPT_KEEPALIVE_IDLE_MS
 * idle between them, while the client and the upstream both keep it; a
 * pipelined request waits for the response before it) is judged on its
 * own: its head is parsed (http_parser), each
 * placeholder replaced by its value where it may go
 * (egress_http_write_swapped), its body scanned for placeholders (one is
 * refused); the response's head and body go back with every value
 * replaced by its placeholder, across reads (a tail of the longest value
 * less one byte is held back), its length then given by chunked encoding
 * (or the close, when the connection ends with it);
 * Accept-Encoding: identity goes upstream; a response in one gzip or
 * deflate layer anyway is decoded (zlib, at most INFLATE_MAX), masked and
 * sent on decoded, any other encoding refused rather than passed unread.
 *
 * Threads and locks: loop thread only, like every struct tunnel; a held
 * index page is filtered on egress_filter.c's workers, and its result comes
 * back to this thread (egress_icpt_filtered). */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "sandboxd/log.h"
#include "sandboxd/secrets.h"
#include "egress_internal.h"

#define LEAF_CACHE 64                      /* leaf certificates kept (sessions x hosts) */
#define LEAF_REFRESH_MS (24 * 3600 * 1000) /* a cached leaf older than this is made again */
#define LEAF_DAYS 7
#define ICPT_HIGH (256 * 1024)         /* bytes buffered per direction before reading pauses */
#define INFLATE_MAX (INT64_C(1) << 30) /* a compressed response's decoded bytes, at most (a zip bomb's end) */
#define INFLATE_CHUNK (64 * 1024)
#define ICPT_MAX_REQUESTS 100        /* requests on one intercepted connection: the last one closes it */
#define ICPT_KEEPALIVE_IDLE_MS 15000 /* idle between two of them, at most */

struct leaf {
        char user[65], session[65], host[EGRESS_HOST_MAX];
        X509 *cert;
        EVP_PKEY *key;
        int64_t made, used;
};

struct egress_tls {
        SSL_CTX *srv, *cli;
        struct leaf leaves[LEAF_CACHE];
};

struct icpt {
        bool up_ready, req_head, req_done, resp_head, resp_done, no_body;
        int req_method;
        int fail_status; /* set by a parser callback: refuse once the parser returned */
        const char *fail_reason;
        char fail_detail[256];
        http_parser rp;
        char scan[64]; /* the request body's last bytes, for a placeholder across reads */
        size_t scan_len;
        char *tail; /* the response's bytes held back (a value may continue) */
        size_t tail_len, max_value;
        char *work; /* tail + one read, for the replacement */
        size_t work_cap;
        z_stream *z; /* a gzip or deflate response being decoded to be masked */
        bool z_end;
        int64_t inflated;
        /* a package's index page, filtered (egress_packages_filter_wanted): held whole, then sent */
        bool filter, held;
        char filter_name[EGRESS_PKG_NAME_MAX];
        struct evbuffer *fhead, *fbody; /* while held */
        bool fjson;
        bool filtering; /* the held page is in the filter's pool (egress_filter.c): the upstream is not read */
        /* keep-alive: the client asked for it (and the bound allows it), the response keeps it (chunked
         * to the client when it has a body: its length changes with a value masked) */
        bool client_keep, keep, chunked;
        int n_requests, served;
        struct evbuffer *cbuf; /* one chunk's bytes, being masked */
};

/* ---- contexts and certificates ---- */

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
        static const unsigned char h11[] = "\x08http/1.1";
        unsigned char *sel;

        if (SSL_select_next_proto(&sel, outlen, h11, sizeof(h11) - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
                return SSL_TLSEXT_ERR_NOACK; /* no http/1.1 offered: no ALPN, which means HTTP/1.1 */
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
}

static struct egress_tls *tls_get(struct egress *eg)
{
        struct egress_tls *tls = eg->tls;

        if (tls)
                return tls;
        tls = calloc(1, sizeof(*tls));
        if (!tls)
                return NULL;
        tls->srv = SSL_CTX_new(TLS_server_method());
        tls->cli = SSL_CTX_new(TLS_client_method());
        if (!tls->srv || !tls->cli || !SSL_CTX_set_min_proto_version(tls->srv, TLS1_2_VERSION) ||
            !SSL_CTX_set_min_proto_version(tls->cli, TLS1_2_VERSION) ||
            /* the system store as OpenSSL finds it: SSL_CERT_FILE and SSL_CERT_DIR apply */
            !SSL_CTX_set_default_verify_paths(tls->cli) ||
            SSL_CTX_set_alpn_protos(tls->cli, (const unsigned char *)"\x08http/1.1", 9) != 0) {
                egress_tls_free(tls);
                return NULL;
        }
        SSL_CTX_set_verify(tls->cli, SSL_VERIFY_PEER, NULL);
        SSL_CTX_set_alpn_select_cb(tls->srv, alpn_select, NULL);
        SSL_CTX_set_options(tls->srv, SSL_OP_NO_TICKET);
        eg->tls = tls;
        return tls;
}

void egress_tls_free(struct egress_tls *tls)
{
        if (!tls)
                return;
        for (size_t i = 0; i < LEAF_CACHE; i++) {
                X509_free(tls->leaves[i].cert);
                EVP_PKEY_free(tls->leaves[i].key);
        }
        SSL_CTX_free(tls->srv);
        SSL_CTX_free(tls->cli);
        free(tls);
}

static int add_ext(X509 *issuer, X509 *x, int nid, const char *value)
{
        X509V3_CTX ctx;
        X509_EXTENSION *ext;
        int ok;

        X509V3_set_ctx_nodb(&ctx);
        X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
        ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
        if (!ext)
                return -1;
        ok = X509_add_ext(x, ext, -1);
        X509_EXTENSION_free(ext);
        return ok ? 0 : -1;
}

/* A leaf for host signed by the session's CA. */
static int leaf_make(struct egress *eg, const char *user, const char *session, const char *host, X509 **ret_cert,
                     EVP_PKEY **ret_key)
{
        char *cert_pem = NULL, *key_pem = NULL, san[EGRESS_HOST_MAX + 8];
        BIO *b = NULL;
        X509 *ca = NULL, *x = NULL;
        EVP_PKEY *ca_key = NULL, *key = NULL;
        unsigned char serial[16];
        BIGNUM *bn = NULL;
        X509_NAME *name;
        int r = -EIO;

        if (!eg->sec_ops.ca || eg->sec_ops.ca(user, session, &cert_pem, &key_pem, eg->sec_ud) < 0)
                return -ENOENT;
        b = BIO_new_mem_buf(cert_pem, -1);
        ca = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
        BIO_free(b);
        b = BIO_new_mem_buf(key_pem, -1);
        ca_key = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
        BIO_free(b);
        OPENSSL_cleanse(key_pem, strlen(key_pem));
        free(key_pem);
        free(cert_pem);
        key = EVP_EC_gen("P-256");
        x = X509_new();
        if (!ca || !ca_key || !key || !x || RAND_bytes(serial, sizeof(serial)) != 1)
                goto out;
        serial[0] &= 0x7f;
        bn = BN_bin2bn(serial, sizeof(serial), NULL);
        name = X509_get_subject_name(x);
        snprintf(san, sizeof(san), "DNS:%s", host);
        if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || !X509_set_version(x, 2) ||
            !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)host, -1, -1, 0) ||
            !X509_set_issuer_name(x, X509_get_subject_name(ca)) || !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
            !X509_gmtime_adj(X509_getm_notAfter(x), (long)LEAF_DAYS * 86400) || !X509_set_pubkey(x, key) ||
            add_ext(ca, x, NID_subject_alt_name, san) < 0 ||
            add_ext(ca, x, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
            add_ext(ca, x, NID_key_usage, "critical,digitalSignature") < 0 ||
            add_ext(ca, x, NID_ext_key_usage, "serverAuth") < 0 ||
            add_ext(ca, x, NID_subject_key_identifier, "hash") < 0 ||
            add_ext(ca, x, NID_authority_key_identifier, "keyid:always") < 0 || !X509_sign(x, ca_key, EVP_sha256()))
                goto out;
        *ret_cert = x;
        *ret_key = key;
        x = NULL;
        key = NULL;
        r = 0;
out:
        BN_free(bn);
        X509_free(ca);
        X509_free(x);
        EVP_PKEY_free(ca_key);
        EVP_PKEY_free(key);
        return r;
}

/* The cached leaf for (session, host), made when missing or old; the least
 * recently used one makes room. */
static struct leaf *leaf_get(struct egress *eg, struct egress_tls *tls, const char *user, const char *session,
                             const char *host)
{
        int64_t now = sbx_now_ms();
        struct leaf *l = NULL, *lru = &tls->leaves[0];

        for (size_t i = 0; i < LEAF_CACHE; i++) {
                struct leaf *c = &tls->leaves[i];
                if (c->cert && strcmp(c->user, user) == 0 && strcmp(c->session, session) == 0 &&
                    strcmp(c->host, host) == 0) {
                        l = c;
                        break;
                }
                if (!c->cert || (lru->cert && c->used < lru->used))
                        lru = c;
        }
        if (l && now - l->made < LEAF_REFRESH_MS) {
                l->used = now;
                return l;
        }
        if (!l)
                l = lru;
        X509_free(l->cert);
        EVP_PKEY_free(l->key);
        memset(l, 0, sizeof(*l));
        if (leaf_make(eg, user, session, host, &l->cert, &l->key) < 0) {
                l->cert = NULL;
                l->key = NULL;
                return NULL;
        }
        sbx_strlcpy(l->user, user, sizeof(l->user));
        sbx_strlcpy(l->session, session, sizeof(l->session));
        sbx_strlcpy(l->host, host, sizeof(l->host));
        l->made = l->used = now;
        return l;
}

/* ---- the decision ---- */

const char *egress_secret_find(const struct egress_secret *v, size_t n, const char *buf, size_t len, size_t *ret_i)
{
        const char *best = NULL;

        for (size_t i = 0; i < n; i++) {
                const char *p;
                if (!v[i].value || v[i].value_len == 0 || v[i].value_len > len)
                        continue;
                p = memmem(buf, len, v[i].value, v[i].value_len);
                if (p && (!best || p < best)) {
                        best = p;
                        *ret_i = i;
                }
        }
        return best;
}

void egress_secrets_free(struct egress_secret *v, size_t n)
{
        if (!v)
                return;
        for (size_t i = 0; i < n; i++)
                if (v[i].value) {
                        OPENSSL_cleanse(v[i].value, v[i].value_len);
                        free(v[i].value);
                }
        OPENSSL_cleanse(v, n * sizeof(*v));
        free(v);
}

static bool names_host(const struct egress_secret *s, const char *host)
{
        for (size_t i = 0; i < s->n_hosts; i++)
                if (strcasecmp(s->hosts[i], host) == 0)
                        return true;
        return false;
}

bool egress_secrets_decide(struct tunnel *t)
{
        struct egress *eg = t->eg;

        if (!eg->sec_ops.attached)
                return true;
        if (eg->sec_ops.attached(t->s->user, t->s->session, &t->secrets, &t->n_secrets, eg->sec_ud) < 0) {
                egress_tunnel_refuse(t, 503, "internal", "cannot read the session's secrets");
                return false;
        }
        if (t->n_secrets == 0)
                return true;
        if (egress_http_head_has_placeholder(t)) {
                egress_tunnel_refuse(t, 403, "secret_refused",
                                     "a secret's placeholder goes only in a header of an HTTPS request to one of "
                                     "its hosts");
                return false;
        }
        for (size_t i = 0; t->is_connect && i < t->n_secrets && !t->intercept; i++)
                t->intercept = t->secrets[i].value && names_host(&t->secrets[i], t->host);
        if (!t->intercept) {
                egress_secrets_free(t->secrets, t->n_secrets);
                t->secrets = NULL;
                t->n_secrets = 0;
                return true;
        }
        /* only a value that may go to this host can be sent here, or echoed back: the others go
         * (their placeholders stay, to be refused) */
        for (size_t i = 0; i < t->n_secrets; i++)
                if (t->secrets[i].value && !names_host(&t->secrets[i], t->host)) {
                        OPENSSL_cleanse(t->secrets[i].value, t->secrets[i].value_len);
                        free(t->secrets[i].value);
                        t->secrets[i].value = NULL;
                        t->secrets[i].value_len = 0;
                }
        return true;
}

void egress_icpt_free(struct tunnel *t)
{
        struct icpt *ic = t->icpt;

        egress_filter_detach(t);
        if (ic) {
                /* a close_notify to the client: its read until the close is the whole response */
                SSL *ssl = t->cli ? bufferevent_openssl_get_ssl(t->cli) : NULL;
                if (ssl && SSL_is_init_finished(ssl))
                        (void)SSL_shutdown(ssl);
                if (ic->tail)
                        OPENSSL_cleanse(ic->tail, ic->max_value);
                if (ic->work)
                        OPENSSL_cleanse(ic->work, ic->work_cap);
                free(ic->tail);
                free(ic->work);
                if (ic->z) {
                        inflateEnd(ic->z);
                        free(ic->z);
                }
                if (ic->fhead)
                        evbuffer_free(ic->fhead);
                if (ic->fbody)
                        evbuffer_free(ic->fbody);
                if (ic->cbuf)
                        evbuffer_free(ic->cbuf);
                free(ic);
                t->icpt = NULL;
        }
        egress_secrets_free(t->secrets, t->n_secrets);
        t->secrets = NULL;
        t->n_secrets = 0;
}

/* ---- the response: values back to placeholders ---- */

/* Write buf[0, len) (after the held-back tail) to the client with every
 * value replaced by its placeholder; hold back the last max_value-1 bytes
 * unless final. */
static int mask_out(struct tunnel *t, const char *buf, size_t len, bool final)
{
        struct icpt *ic = t->icpt;
        struct evbuffer *cli_out = bufferevent_get_output(t->cli), *out = ic->chunked ? ic->cbuf : cli_out;
        size_t n = ic->tail_len + len, cur = 0, keep;
        char *w;

        if (ic->max_value == 0) { /* no value to mask (a registry's connection): no copy, no scan */
                if (len && evbuffer_add(out, buf, len) < 0)
                        return -1;
                t->bytes_down += (int64_t)len;
                goto framed;
        }
        if (n > ic->work_cap) {
                char *nw = malloc(n);
                if (!nw)
                        return -1;
                if (ic->work) {
                        OPENSSL_cleanse(ic->work, ic->work_cap);
                        free(ic->work);
                }
                ic->work = nw;
                ic->work_cap = n;
        }
        w = ic->work;
        if (ic->tail_len)
                memcpy(w, ic->tail, ic->tail_len);
        if (len)
                memcpy(w + ic->tail_len, buf, len);
        ic->tail_len = 0;
        for (;;) {
                size_t bi = 0;
                const char *best = egress_secret_find(t->secrets, t->n_secrets, w + cur, n - cur, &bi);
                if (!best)
                        break;
                evbuffer_add(out, w + cur, (size_t)(best - (w + cur)));
                evbuffer_add(out, t->secrets[bi].placeholder, strlen(t->secrets[bi].placeholder));
                cur = (size_t)(best - w) + t->secrets[bi].value_len;
        }
        /* a match starting before n-keep would have been found whole */
        keep = final || ic->max_value == 0 ? 0 : ic->max_value - 1;
        if (keep > n - cur)
                keep = n - cur;
        evbuffer_add(out, w + cur, n - cur - keep);
        memcpy(ic->tail, w + n - keep, keep);
        ic->tail_len = keep;
        t->bytes_down += (int64_t)(n - keep); /* close enough: the bytes as the upstream sent them */
framed:
        if (ic->chunked && evbuffer_get_length(out) > 0) {
                evbuffer_add_printf(cli_out, "%zx\r\n", evbuffer_get_length(out));
                evbuffer_add_buffer(cli_out, out);
                evbuffer_add(cli_out, "\r\n", 2);
        }
        return 0;
}

static int fail(struct tunnel *t, int status, const char *reason, const char *detail)
{
        struct icpt *ic = t->icpt;

        ic->fail_status = status;
        ic->fail_reason = reason;
        sbx_strlcpy(ic->fail_detail, detail, sizeof(ic->fail_detail));
        return -1;
}

static bool hdr_is(const struct tunnel *t, const struct hdr *h, const char *name)
{
        return h->name_len == strlen(name) && strncasecmp(t->arena + h->name, name, h->name_len) == 0;
}

int egress_icpt_on_response_head(http_parser *p)
{
        struct tunnel *t = p->data;
        struct icpt *ic = t->icpt;
        bool interim = p->status_code / 100 == 1;
        struct evbuffer *head;
        int r;

        /* no body follows: its length headers stay true */
        ic->no_body = interim || p->status_code == 204 || p->status_code == 304 || ic->req_method == HTTP_HEAD;
        /* a package's index page is held whole and filtered: only a 200 is a page */
        ic->held = ic->filter && !ic->no_body && p->status_code == 200;
        /* (a registry's connection with no value to mask passes an encoded body through, but for a page) */
        for (int i = 0; i < t->n_hdrs && !ic->no_body && (ic->max_value > 0 || ic->held); i++) {
                const struct hdr *h = &t->hdrs[i];
                const char *v = t->arena + h->value;
                size_t n = h->value_len;
                if (!hdr_is(t, h, "Content-Encoding"))
                        continue;
                while (n && (*v == ' ' || *v == '\t'))
                        v++, n--;
                while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
                        n--;
                if (n == 8 && strncasecmp(v, "identity", 8) == 0)
                        continue;
                /* one gzip or deflate layer is decoded here, masked, and sent on decoded */
                if (!ic->z &&
                    ((n == 4 && strncasecmp(v, "gzip", 4) == 0) || (n == 6 && strncasecmp(v, "x-gzip", 6) == 0) ||
                     (n == 7 && strncasecmp(v, "deflate", 7) == 0))) {
                        ic->z = calloc(1, sizeof(*ic->z));
                        /* 15 + 32: a gzip or a zlib header, detected */
                        if (!ic->z || inflateInit2(ic->z, 15 + 32) != Z_OK) {
                                free(ic->z);
                                ic->z = NULL;
                                return fail(t, 503, "internal", "out of memory");
                        }
                        continue;
                }
                return fail(t, 502, "encoded_response",
                            "an encoding other than one gzip or deflate layer, from a host a secret goes to, is "
                            "not passed unread");
        }
        head = evbuffer_new();
        if (!head)
                return fail(t, 503, "internal", "out of memory");
        evbuffer_add_printf(head, "HTTP/1.1 %u %.*s\r\n", p->status_code, (int)t->url_len, t->arena + t->url);
        for (int i = 0; i < t->n_hdrs; i++) {
                const struct hdr *h = &t->hdrs[i];
                if (hdr_is(t, h, "Connection") || hdr_is(t, h, "Keep-Alive") || hdr_is(t, h, "Proxy-Connection"))
                        continue;
                /* the body's length changes with a replaced value: the close ends it */
                if (!ic->no_body && (hdr_is(t, h, "Content-Length") || hdr_is(t, h, "Transfer-Encoding")))
                        continue;
                if (ic->z && hdr_is(t, h, "Content-Encoding")) /* it goes on decoded */
                        continue;
                if (ic->held && hdr_is(t, h, "Content-Type"))
                        ic->fjson =
                                t->pkg_eco == EGRESS_PKG_NPM || memmem(t->arena + h->value, h->value_len, "json", 4);
                if (ic->held && (hdr_is(t, h, "ETag") || hdr_is(t, h, "Content-MD5") || hdr_is(t, h, "Digest")))
                        continue; /* they were of the page before the filter */
                evbuffer_add(head, t->arena + h->name, h->name_len);
                evbuffer_add(head, ": ", 2);
                evbuffer_add(head, t->arena + h->value, h->value_len);
                evbuffer_add(head, "\r\n", 2);
        }
        if (ic->held && t->pkg_eco == EGRESS_PKG_NPM)
                ic->fjson = true;
        /* kept alive when both ends keep it: a body then goes chunked */
        ic->keep = !interim && ic->client_keep && http_should_keep_alive(p);
        if (interim)
                evbuffer_add(head, "\r\n", 2);
        else if (ic->keep)
                evbuffer_add_printf(head, "%sConnection: keep-alive\r\n\r\n",
                                    ic->no_body ? "" : "Transfer-Encoding: chunked\r\n");
        else
                evbuffer_add_printf(head, "Connection: close\r\n\r\n");
        if (ic->held) {
                ic->fbody = evbuffer_new();
                if (!ic->fbody) {
                        evbuffer_free(head);
                        return fail(t, 503, "internal", "out of memory");
                }
                ic->fhead = head; /* sent with the filtered page */
                r = 0;
        } else {
                r = mask_out(t, (const char *)evbuffer_pullup(head, -1), evbuffer_get_length(head), true);
                evbuffer_free(head);
                ic->chunked = ic->keep && !ic->no_body;
        }
        if (r < 0)
                return fail(t, 503, "internal", "out of memory");
        /* the next head (after an interim one) starts afresh */
        t->arena_len = 0;
        t->n_hdrs = 0;
        t->url_len = 0;
        t->in_value = false;
        ic->resp_head = !interim;
        return ic->req_method == HTTP_HEAD ? 1 : 0;
}

/* The response body's (decoded) bytes: masked to the client, or held for the filter. */
static int body_out(struct tunnel *t, const char *buf, size_t len)
{
        struct icpt *ic = t->icpt;

        if (!ic->held)
                return mask_out(t, buf, len, false) < 0 ? fail(t, 503, "internal", "out of memory") : 0;
        if (evbuffer_get_length(ic->fbody) + len > EGRESS_PKG_PAGE_MAX)
                return fail(t, 502, "page_too_large",
                            "a package's index page over 32 MiB, which the proxy filters whole, is not passed");
        return evbuffer_add(ic->fbody, buf, len) < 0 ? fail(t, 503, "internal", "out of memory") : 0;
}

/* The held page to the filter's pool (egress_filter.c): filtered off the
 * loop thread, then written by egress_icpt_filtered. */
static int page_submit(struct tunnel *t)
{
        struct icpt *ic = t->icpt;
        struct egress_filter_job *j = calloc(1, sizeof(*j));
        int r;

        if (!j)
                return fail(t, 503, "internal", "out of memory");
        j->ep = t->pkg_policy;
        j->eco = (enum egress_pkg_eco)t->pkg_eco;
        memcpy(j->name, ic->filter_name, sizeof(j->name));
        j->json = ic->fjson;
        j->in = ic->fbody;
        r = egress_filter_submit(t, j);
        if (r < 0) {
                free(j); /* ic->fbody is still ic's */
                return r == -EBUSY ? fail(t, 503, "filter_busy",
                                          "too many package index pages are being filtered; try again")
                                   : fail(t, 503, "internal", "out of memory");
        }
        ic->fbody = NULL; /* the worker's now */
        ic->filtering = true;
        return 0;
}

/* The filtered page: its head and itself masked to the client. */
static int page_out(struct tunnel *t, const struct egress_filter_job *j)
{
        struct icpt *ic = t->icpt;
        int r;

        if (j->r < 0)
                return fail(t, 502, "bad_response",
                            j->r == -ENOMEM ? "out of memory" : "a package's index page that cannot be read to filter");
        ic->held = false;
        if (j->dropped)
                log_ctx(LOG_LEVEL_INFO, t->s->user, t->s->session, NULL,
                        "egress: %zu refused file(s) or version(s) of %s marked in its index page on %s", j->dropped,
                        ic->filter_name, t->host);
        r = mask_out(t, (const char *)evbuffer_pullup(ic->fhead, -1), evbuffer_get_length(ic->fhead), true);
        ic->chunked = ic->keep;
        if (r == 0)
                r = mask_out(t, j->out, j->out_len, true);
        return r < 0 ? fail(t, 503, "internal", "out of memory") : 0;
}

/* A compressed body's bytes, decoded and masked. */
static int inflate_out(struct tunnel *t, const char *at, size_t len)
{
        struct icpt *ic = t->icpt;
        unsigned char buf[INFLATE_CHUNK];

        if (ic->z_end)
                return 0; /* bytes after the stream's end: not part of it */
        ic->z->next_in = (unsigned char *)(uintptr_t)at;
        ic->z->avail_in = (uInt)len;
        do {
                int zr;
                size_t got;
                ic->z->next_out = buf;
                ic->z->avail_out = sizeof(buf);
                zr = inflate(ic->z, Z_NO_FLUSH);
                if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
                        return fail(t, 502, "bad_response", "the response's encoded body cannot be decoded");
                got = sizeof(buf) - ic->z->avail_out;
                ic->inflated += (int64_t)got;
                if (ic->inflated > INFLATE_MAX)
                        return fail(t, 502, "bad_response", "the response's body decodes to more than 1 GiB");
                if (got && body_out(t, (const char *)buf, got) < 0)
                        return -1;
                if (zr == Z_STREAM_END) {
                        ic->z_end = true;
                        break;
                }
                if (zr == Z_BUF_ERROR && got == 0)
                        break; /* needs more input */
        } while (ic->z->avail_in > 0 || ic->z->avail_out == 0);
        return 0;
}

int egress_icpt_on_response_body(http_parser *p, const char *at, size_t len)
{
        struct tunnel *t = p->data;
        if (t->icpt->z)
                return inflate_out(t, at, len);
        return body_out(t, at, len);
}

int egress_icpt_on_response_done(http_parser *p)
{
        struct tunnel *t = p->data;
        struct icpt *ic = t->icpt;

        if (p->status_code / 100 == 1)
                return 0;
        if (ic->held) { /* the rest once the pool filtered it (egress_icpt_filtered) */
                http_parser_pause(p, 1);
                return page_submit(t);
        }
        ic->resp_done = true;
        http_parser_pause(p, 1);
        if (mask_out(t, NULL, 0, true) < 0)
                return fail(t, 503, "internal", "out of memory");
        if (ic->chunked)
                evbuffer_add(bufferevent_get_output(t->cli), "0\r\n\r\n", 5);
        return 0;
}

/* ---- the request body: no placeholder in it ---- */

int egress_icpt_on_body(http_parser *p, const char *at, size_t len)
{
        struct tunnel *t = p->data;
        struct icpt *ic = t->icpt;
        const size_t keep = sizeof(SECRETS_PLACEHOLDER_PREFIX) - 1 + 2 * SECRETS_PLACEHOLDER_BYTES - 1;
        char joined[128];
        size_t at_off, n;

        /* across reads: the last bytes before this read and the first of it */
        n = ic->scan_len;
        memcpy(joined, ic->scan, n);
        memcpy(joined + n, at, len < keep ? len : keep);
        n += len < keep ? len : keep;
        if (egress_placeholder_find(t, joined, n, &at_off) >= 0 || egress_placeholder_find(t, at, len, &at_off) >= 0)
                return fail(t, 403, "secret_refused", "a secret's placeholder goes only in a header, never a body");
        if (len >= keep) {
                memcpy(ic->scan, at + len - keep, keep);
                ic->scan_len = keep;
        } else {
                size_t old = ic->scan_len + len > keep ? ic->scan_len + len - keep : 0;
                memmove(ic->scan, ic->scan + old, ic->scan_len - old);
                memcpy(ic->scan + ic->scan_len - old, at, len);
                ic->scan_len = ic->scan_len - old + len;
        }
        return 0;
}

int egress_icpt_on_request_done(http_parser *p)
{
        struct tunnel *t = p->data;
        t->icpt->req_done = true;
        http_parser_pause(p, 1);
        return 0;
}

/* ---- the connection ---- */

static void icpt_cli_read(struct bufferevent *bev, void *arg);
static void icpt_up_read(struct bufferevent *bev, void *arg);
static void icpt_cli_event(struct bufferevent *bev, short what, void *arg);
static void icpt_up_event(struct bufferevent *bev, short what, void *arg);

static void refuse_failed(struct tunnel *t)
{
        struct icpt *ic = t->icpt;
        if (ic->resp_head && !ic->held) /* the client has part of the response: end it */
                egress_tunnel_finish(t, ic->fail_reason);
        else
                egress_tunnel_refuse(t, ic->fail_status, ic->fail_reason, ic->fail_detail);
}

/* The client's output drained: read the upstream again, or end once the
 * response is out. */
static void icpt_cli_write(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        size_t n = evbuffer_get_length(bufferevent_get_output(bev));

        if (t->icpt->resp_done || t->up_eof) {
                if (n == 0)
                        egress_tunnel_finish(t, t->icpt->resp_done ? "intercepted" : "upstream_closed");
                else
                        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
                return;
        }
        if (t->up && n <= ICPT_HIGH / 2)
                bufferevent_enable(t->up, EV_READ);
}

static void icpt_up_write(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;

        if (!t->icpt->req_done && evbuffer_get_length(bufferevent_get_output(bev)) < ICPT_HIGH / 2)
                bufferevent_enable(t->cli, EV_READ);
}

static void moved(struct tunnel *t, int64_t n)
{
        atomic_fetch_add(&t->s->bytes, n);
        t->last_activity = sbx_now_ms();
}

/* The request's head: judged and swapped, then upstream. false: t is gone. */
static bool request_head(struct tunnel *t, struct evbuffer *in)
{
        struct icpt *ic = t->icpt;
        size_t cap = (size_t)t->eg->cfg.egress_max_header_bytes, n;
        struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
        const char *sni, *why;
        char detail[256];
        struct evbuffer *head;
        char *raw;

        if (end.pos < 0) {
                if (evbuffer_get_length(in) > cap) {
                        egress_tunnel_refuse(t, 431, "header_too_large", "the request head exceeds egress_max_header");
                        return false;
                }
                return true;
        }
        n = (size_t)end.pos + 4;
        if (n > cap) {
                egress_tunnel_refuse(t, 431, "header_too_large", "the request head exceeds egress_max_header");
                return false;
        }
        free(t->arena);
        /* the response's head reuses the arena: the larger of the two caps */
        t->arena = malloc(cap);
        t->arena_cap = cap;
        t->arena_len = t->url_len = 0;
        t->n_hdrs = 0;
        t->in_value = t->head_done = t->body_done = false;
        raw = (char *)evbuffer_pullup(in, (ssize_t)n);
        if (!t->arena || !raw) {
                egress_tunnel_refuse(t, 503, "internal", "out of memory");
                return false;
        }
        http_parser_init(&t->parser, HTTP_REQUEST);
        t->parser.data = t;
        (void)http_parser_execute(&t->parser, &egress_request_settings, raw, n);
        if ((HTTP_PARSER_ERRNO(&t->parser) != HPE_OK && HTTP_PARSER_ERRNO(&t->parser) != HPE_PAUSED) || !t->head_done ||
            t->parser.upgrade || t->parser.method == HTTP_CONNECT) {
                egress_tunnel_refuse(t, t->n_hdrs >= MAX_HEADERS ? 431 : 400, "bad_request",
                                     "an intercepted connection carries one HTTP/1.1 request");
                return false;
        }
        evbuffer_drain(in, n);
        t->row_done = false;
        ic->n_requests++;
        ic->client_keep = http_should_keep_alive(&t->parser) && ic->n_requests < ICPT_MAX_REQUESTS;
        t->up_keep = ic->client_keep;
        t->idle_ms = 0;
        ic->req_method = (int)t->parser.method;
        sbx_strlcpy(t->method, http_method_str(t->parser.method), sizeof(t->method));
        if (t->pkg_eco >= 0 && !egress_packages_check(t, t->arena + t->url, t->url_len))
                return false;
        ic->filter = egress_packages_filter_wanted(t, t->arena + t->url, t->url_len, ic->filter_name);
        ic->req_done = t->body_done;
        if (HTTP_PARSER_ERRNO(&t->parser) == HPE_PAUSED)
                http_parser_pause(&t->parser, 0);
        sni = SSL_get_servername(bufferevent_openssl_get_ssl(t->cli), TLSEXT_NAMETYPE_host_name);
        head = evbuffer_new();
        if (!head) {
                egress_tunnel_refuse(t, 503, "internal", "out of memory");
                return false;
        }
        why = egress_http_write_swapped(t, head, sni, detail, sizeof(detail));
        if (why) {
                evbuffer_free(head);
                egress_tunnel_refuse(t, strcmp(why, "bad_request") == 0 ? 400 : 403, why, detail);
                return false;
        }
        t->bytes_up += (int64_t)evbuffer_get_length(head);
        moved(t, (int64_t)evbuffer_get_length(head));
        evbuffer_add_buffer(bufferevent_get_output(t->up), head);
        evbuffer_free(head);
        /* the response's head is parsed into the arena from here */
        t->arena_len = t->url_len = 0;
        t->n_hdrs = 0;
        t->in_value = false;
        ic->req_head = true;
        return true;
}

static void icpt_cli_read(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        struct icpt *ic = t->icpt;
        struct evbuffer *in = bufferevent_get_input(bev);
        size_t fwd = 0, len;

        if (!ic->req_head && (!request_head(t, in) || !ic->req_head))
                return;
        len = evbuffer_get_length(in);
        if (ic->req_done) {
                /* what follows is the next request: read once this one's response is out */
                bufferevent_disable(bev, EV_READ);
                return;
        }
        while (fwd < len && !ic->req_done) {
                struct evbuffer_ptr pos;
                struct evbuffer_iovec v;
                evbuffer_ptr_set(in, &pos, fwd, EVBUFFER_PTR_SET);
                if (evbuffer_peek(in, -1, &pos, &v, 1) < 1)
                        break;
                fwd += http_parser_execute(&t->parser, &egress_icpt_body_settings, v.iov_base, v.iov_len);
                if (ic->fail_status) {
                        refuse_failed(t);
                        return;
                }
                if (HTTP_PARSER_ERRNO(&t->parser) != HPE_OK && HTTP_PARSER_ERRNO(&t->parser) != HPE_PAUSED) {
                        egress_tunnel_refuse(t, 400, "bad_request",
                                             http_errno_description(HTTP_PARSER_ERRNO(&t->parser)));
                        return;
                }
        }
        evbuffer_remove_buffer(in, bufferevent_get_output(t->up), fwd);
        t->bytes_up += (int64_t)fwd;
        moved(t, (int64_t)fwd);
        if (ic->req_done) {
                bufferevent_disable(bev, EV_READ);
        } else if (evbuffer_get_length(bufferevent_get_output(t->up)) >= ICPT_HIGH) {
                bufferevent_disable(bev, EV_READ);
        }
        if (egress_bytes_over(t))
                egress_tunnel_finish(t, "cap_bytes");
}

/* The response is out and both ends keep the connection: ready for the
 * next request (one the client sent already is read from the loop). */
static void icpt_next(struct tunnel *t)
{
        struct icpt *ic = t->icpt;
        int64_t idle = t->eg->cfg.egress_idle_timeout_ms;

        /* each request on the connection has its row, as the first one has: the next starts afresh, and
         * the connection's end between two requests writes none (egress_tunnel_finish) */
        egress_tunnel_record(t, true, "intercepted");
        t->row_done = true;
        t->bytes_up = t->bytes_down = 0;
        t->started = sbx_now_ms();
        t->started_wall = sbx_wall_ms();
        ic->req_head = ic->req_done = ic->resp_head = ic->resp_done = ic->no_body = false;
        ic->keep = ic->chunked = ic->filter = ic->held = ic->fjson = ic->client_keep = false;
        ic->fail_status = 0;
        ic->fail_reason = NULL;
        ic->scan_len = 0;
        ic->tail_len = 0; /* flushed with the response's end */
        if (ic->z) {
                inflateEnd(ic->z);
                free(ic->z);
                ic->z = NULL;
        }
        ic->z_end = false;
        ic->inflated = 0;
        if (ic->fhead)
                evbuffer_free(ic->fhead);
        if (ic->fbody)
                evbuffer_free(ic->fbody);
        ic->fhead = ic->fbody = NULL;
        http_parser_init(&ic->rp, HTTP_RESPONSE);
        ic->rp.data = t;
        t->arena_len = t->url_len = 0;
        t->n_hdrs = 0;
        t->in_value = false;
        t->up_keep = false;
        ic->served++;
        t->idle_ms = (int)(idle < ICPT_KEEPALIVE_IDLE_MS ? idle : ICPT_KEEPALIVE_IDLE_MS);
        t->last_activity = sbx_now_ms();
        event_del(t->timer);
        egress_tunnel_arm(t, t->idle_ms);
        bufferevent_enable(t->cli, EV_READ);
        bufferevent_trigger(t->cli, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* The upstream's bytes through the response parser. false: t is gone. */
static bool up_move(struct tunnel *t, struct bufferevent *bev)
{
        struct icpt *ic = t->icpt;
        struct evbuffer *in = bufferevent_get_input(bev);
        size_t len = evbuffer_get_length(in), done = 0;

        if (!ic->req_head && ic->served > 0) { /* between two requests: not HTTP either, end it */
                egress_tunnel_finish(t, "bad_response");
                return false;
        }
        if (!ic->req_head) { /* nothing asked yet: an upstream that speaks first is not HTTP */
                egress_tunnel_refuse(t, 502, "bad_response", "the upstream spoke before the request");
                return false;
        }
        while (done < len && !ic->resp_done && !ic->filtering) {
                struct evbuffer_ptr pos;
                struct evbuffer_iovec v;
                evbuffer_ptr_set(in, &pos, done, EVBUFFER_PTR_SET);
                if (evbuffer_peek(in, -1, &pos, &v, 1) < 1)
                        break;
                done += http_parser_execute(&ic->rp, &egress_icpt_response_settings, v.iov_base, v.iov_len);
                if (ic->fail_status) {
                        refuse_failed(t);
                        return false;
                }
                if (HTTP_PARSER_ERRNO(&ic->rp) != HPE_OK && HTTP_PARSER_ERRNO(&ic->rp) != HPE_PAUSED) {
                        if (ic->resp_head && !ic->held)
                                egress_tunnel_finish(t, "bad_response");
                        else /* a callback refused: the arena (egress_max_header) or MAX_HEADERS is full */
                                egress_tunnel_refuse(t, 502, "bad_response",
                                                     HTTP_PARSER_ERRNO(&ic->rp) == HPE_CB_status ||
                                                                     HTTP_PARSER_ERRNO(&ic->rp) ==
                                                                             HPE_CB_header_field ||
                                                                     HTTP_PARSER_ERRNO(&ic->rp) == HPE_CB_header_value
                                                             ? "the response head is larger than the proxy takes"
                                                             : http_errno_description(HTTP_PARSER_ERRNO(&ic->rp)));
                        return false;
                }
        }
        moved(t, (int64_t)done);
        evbuffer_drain(in, ic->resp_done || ic->filtering ? len : done);
        if (egress_bytes_over(t)) {
                egress_tunnel_finish(t, "cap_bytes");
                return false;
        }
        if (ic->filtering) { /* nothing more of this response: read again with the next request */
                bufferevent_disable(bev, EV_READ);
                return true;
        }
        if (ic->resp_done && ic->keep) {
                icpt_next(t);
                return true;
        }
        if (ic->resp_done) {
                bufferevent_disable(bev, EV_READ);
                if (evbuffer_get_length(bufferevent_get_output(t->cli)) == 0) {
                        egress_tunnel_finish(t, "intercepted");
                        return false;
                }
                bufferevent_setwatermark(t->cli, EV_WRITE, 0, 0);
                return true;
        }
        if (evbuffer_get_length(bufferevent_get_output(t->cli)) >= ICPT_HIGH) {
                bufferevent_setwatermark(t->cli, EV_WRITE, ICPT_HIGH / 2, 0);
                bufferevent_disable(bev, EV_READ);
        }
        return true;
}

void egress_icpt_filtered(struct tunnel *t, struct egress_filter_job *j)
{
        struct icpt *ic = t->icpt;

        if (t->finished) /* refused meanwhile: its answer is being written */
                return;
        ic->filtering = false;
        if (page_out(t, j) < 0) {
                refuse_failed(t);
                return;
        }
        ic->resp_done = true;
        if (mask_out(t, NULL, 0, true) < 0) {
                egress_tunnel_finish(t, "internal");
                return;
        }
        if (ic->chunked)
                evbuffer_add(bufferevent_get_output(t->cli), "0\r\n\r\n", 5);
        t->last_activity = sbx_now_ms();
        if (ic->keep && !t->up_eof && !t->cli_eof) {
                bufferevent_enable(t->up, EV_READ);
                icpt_next(t);
                return;
        }
        if (evbuffer_get_length(bufferevent_get_output(t->cli)) == 0) {
                egress_tunnel_finish(t, "intercepted");
                return;
        }
        bufferevent_setwatermark(t->cli, EV_WRITE, 0, 0);
}

static void icpt_up_read(struct bufferevent *bev, void *arg)
{
        (void)up_move(arg, bev);
}


static void icpt_up_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;
        struct icpt *ic = t->icpt;

        if (what & BEV_EVENT_CONNECTED)
                return;
        if (ic->filtering) { /* the response is whole: its page goes out, then the connection ends */
                t->up_eof = true;
                bufferevent_disable(bev, EV_READ | EV_WRITE);
                return;
        }
        if (!ic->req_head && ic->served > 0) { /* it closed between two requests: so does the client's */
                if ((what & BEV_EVENT_EOF) && evbuffer_get_length(bufferevent_get_output(t->cli)) > 0) {
                        /* once the last response is out (icpt_cli_write) */
                        t->up_eof = true;
                        bufferevent_disable(bev, EV_READ);
                        bufferevent_disable(t->cli, EV_READ);
                        bufferevent_setwatermark(t->cli, EV_WRITE, 0, 0);
                        return;
                }
                egress_tunnel_finish(t, (what & BEV_EVENT_EOF) ? "intercepted" : "upstream_error");
                return;
        }
        if (what & BEV_EVENT_EOF) {
                if (ic->resp_done)
                        return;
                /* what is still in its input goes first */
                if (!up_move(t, bev) || ic->resp_done)
                        return;
                /* a body that ends with the close */
                if (!ic->filtering)
                        (void)http_parser_execute(&ic->rp, &egress_icpt_response_settings, NULL, 0);
                if (ic->fail_status) {
                        refuse_failed(t);
                        return;
                }
                if (ic->filtering) { /* the page is whole: it goes out once filtered, then the end */
                        t->up_eof = true;
                        bufferevent_disable(bev, EV_READ);
                        return;
                }
                if (!ic->resp_head) {
                        egress_tunnel_refuse(t, 502, "upstream_closed", "the upstream closed before its response");
                        return;
                }
                if (ic->held) {
                        egress_tunnel_refuse(t, 502, "upstream_closed", "the upstream closed within an index page");
                        return;
                }
                t->up_eof = true;
                if (!ic->resp_done && mask_out(t, NULL, 0, true) < 0) {
                        egress_tunnel_finish(t, "internal");
                        return;
                }
                bufferevent_disable(bev, EV_READ);
                bufferevent_setwatermark(t->cli, EV_WRITE, 0, 0);
                icpt_cli_write(t->cli, t);
                return;
        }
        if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
                if (ic->resp_head && !ic->held)
                        egress_tunnel_finish(t, "upstream_error");
                else
                        egress_tunnel_refuse(t, 502, "upstream_error", "the upstream's connection failed");
        }
}

static void icpt_cli_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;

        if (what & BEV_EVENT_CONNECTED)
                return;
        if (!t->icpt->req_head && t->icpt->served > 0) { /* the client left between two requests */
                egress_tunnel_finish(t, "intercepted");
                return;
        }
        if (!t->icpt->req_head) {
                /* the client's handshake failed (it does not trust the session's CA) or it left */
                t->finished = true;
                egress_tunnel_record(t, false, (what & BEV_EVENT_ERROR) ? "client_tls" : "client_gone");
                egress_tunnel_free(t);
                return;
        }
        if (what & BEV_EVENT_EOF) {
                t->cli_eof = true;
                bufferevent_disable(bev, EV_READ);
                if (!t->icpt->req_done)
                        egress_tunnel_finish(t, "client_gone");
                return;
        }
        egress_tunnel_finish(t, "client_error");
}

/* bev's socket under TLS (the caller checked that bev holds no byte read
 * or unwritten); bev is freed, never its fd. NULL when out of memory. */
static struct bufferevent *ssl_over(struct tunnel *t, struct bufferevent *bev, SSL *ssl,
                                    enum bufferevent_ssl_state state)
{
        evutil_socket_t fd = bufferevent_getfd(bev);
        struct bufferevent *b;
        int one = 1;

        if (fd < 0) {
                SSL_free(ssl);
                bufferevent_free(bev);
                return NULL;
        }
        /* each message goes out whole, in a record or a few: Nagle would hold the last small one for the
         * peer's delayed ACK, 40 ms a request on a kept-alive connection (not TCP, a unix socket: no-op) */
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        bufferevent_setfd(bev, -1);
        bufferevent_free(bev);
        b = bufferevent_openssl_socket_new(t->eg->base, fd, ssl, state, BEV_OPT_CLOSE_ON_FREE);
        if (!b)
                close(fd);
        else
                bufferevent_openssl_set_allow_dirty_shutdown(b, 1);
        return b;
}

/* The upstream's TLS is up and verified: answer the CONNECT and take the
 * client's TLS with the host's leaf. */
static void client_start(struct tunnel *t)
{
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        struct egress_tls *tls = t->eg->tls;
        struct leaf *l = leaf_get(t->eg, tls, t->s->user, t->s->session, t->host);
        SSL *ssl;
        struct bufferevent *raw = t->cli;

        if (!l) {
                egress_tunnel_refuse(t, 503, "internal", "cannot make a certificate for this host");
                return;
        }
        if (evbuffer_get_length(bufferevent_get_input(raw)) > 0) {
                /* bytes before our answer: not a TLS client waiting for it */
                egress_tunnel_refuse(t, 400, "bad_request", "bytes before the CONNECT's answer");
                return;
        }
        ssl = SSL_new(tls->srv);
        if (!ssl || !SSL_use_certificate(ssl, l->cert) || !SSL_use_PrivateKey(ssl, l->key)) {
                SSL_free(ssl);
                egress_tunnel_refuse(t, 503, "internal", "out of memory");
                return;
        }
        /* 39 bytes into a fresh socket's buffer: written whole, before the handshake owns the socket */
        if (send(bufferevent_getfd(raw), ok, sizeof(ok) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(ok) - 1) {
                SSL_free(ssl);
                t->finished = true;
                egress_tunnel_record(t, false, "client_gone");
                egress_tunnel_free(t);
                return;
        }
        t->cli = ssl_over(t, raw, ssl, BUFFEREVENT_SSL_ACCEPTING);
        if (!t->cli) {
                t->finished = true;
                egress_tunnel_record(t, false, "internal");
                egress_tunnel_free(t);
                return;
        }
        t->state = T_RELAY;
        t->last_activity = sbx_now_ms();
        event_del(t->timer);
        egress_tunnel_arm(t, t->eg->cfg.egress_idle_timeout_ms);
        bufferevent_setwatermark(t->cli, EV_READ, 0, ICPT_HIGH);
        bufferevent_setcb(t->cli, icpt_cli_read, icpt_cli_write, icpt_cli_event, t);
        bufferevent_setcb(t->up, icpt_up_read, icpt_up_write, icpt_up_event, t);
        bufferevent_enable(t->cli, EV_READ | EV_WRITE);
        bufferevent_enable(t->up, EV_READ | EV_WRITE);
}

static void up_handshake_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;
        SSL *ssl = bufferevent_openssl_get_ssl(bev);
        char detail[256];
        long v;

        if (what & BEV_EVENT_CONNECTED) {
                t->icpt->up_ready = true;
                client_start(t);
                return;
        }
        v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
        if (v != X509_V_OK)
                snprintf(detail, sizeof(detail), "%s: certificate not trusted: %s", t->host,
                         X509_verify_cert_error_string(v));
        else
                snprintf(detail, sizeof(detail), "%s: TLS handshake failed", t->host);
        egress_tunnel_refuse(t, 502, "upstream_tls", detail);
}

void egress_icpt_start(struct tunnel *t)
{
        struct egress_tls *tls = tls_get(t->eg);
        SSL *ssl;

        t->icpt = calloc(1, sizeof(*t->icpt));
        if (!tls || !t->icpt) {
                egress_tunnel_refuse(t, 503, "internal", "cannot start TLS");
                return;
        }
        for (size_t i = 0; i < t->n_secrets; i++)
                if (t->secrets[i].value && t->secrets[i].value_len > t->icpt->max_value)
                        t->icpt->max_value = t->secrets[i].value_len;
        t->icpt->tail = malloc(t->icpt->max_value + 1);
        t->icpt->cbuf = evbuffer_new();
        http_parser_init(&t->icpt->rp, HTTP_RESPONSE);
        t->icpt->rp.data = t;
        ssl = SSL_new(tls->cli);
        if (!t->icpt->tail || !t->icpt->cbuf || !ssl || !SSL_set_tlsext_host_name(ssl, t->host) ||
            !SSL_set1_host(ssl, t->host)) {
                SSL_free(ssl);
                egress_tunnel_refuse(t, 503, "internal", "cannot start TLS");
                return;
        }
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        if (evbuffer_get_length(bufferevent_get_input(t->up)) > 0) {
                SSL_free(ssl);
                egress_tunnel_refuse(t, 502, "bad_response", "the upstream spoke before TLS");
                return;
        }
        t->up = ssl_over(t, t->up, ssl, BUFFEREVENT_SSL_CONNECTING);
        if (!t->up) {
                egress_tunnel_refuse(t, 502, "upstream_tls", "cannot start TLS to the upstream");
                return;
        }
        bufferevent_setcb(t->up, NULL, NULL, up_handshake_event, t);
        bufferevent_enable(t->up, EV_READ | EV_WRITE);
}

void egress_set_secrets_ops(struct egress *eg, const struct egress_secrets_ops *ops, void *userdata)
{
        eg->sec_ops = *ops;
        eg->sec_ud = userdata;
}
