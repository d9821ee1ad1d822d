/* scripts.c — the script cache (see scripts.h): names, descriptions, the
 * per-user caps, and the table of runs whose end has not been seen yet.
 *
 * Locking: s->lock guards the pending table (entries, bytes). It is never
 * held across a store call: scripts_settle copies the code out first. */
#include "sandboxd/scripts.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandboxd/quota.h"
#include "sandboxd/sha256.h"
#include "sandboxd/utf8.h"

enum pending_state {
        PENDING_EMPTY,
        PENDING_RUNNING, /* code held */
        PENDING_SAVED,   /* info holds the script */
        PENDING_NONE,    /* ended without a script */
};

struct pending {
        enum pending_state state;
        char exec_id[37];
        char user[65];
        char language[16];
        char *code;
        size_t code_len;
        struct store_script info;
        uint64_t seq;
};

struct scripts {
        const struct sbx_config *cfg;
        struct store *store;
        struct quota *quota; /* per-user overrides of the caps; NULL: the config's */
        pthread_mutex_t lock;
        struct pending table[SCRIPTS_PENDING_MAX];
        size_t bytes; /* code held by RUNNING entries */
        uint64_t seq;
};

int scripts_new(const struct sbx_config *cfg, struct store *st, struct quota *q, struct scripts **ret)
{
        struct scripts *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        s->cfg = cfg;
        s->store = st;
        s->quota = q;
        pthread_mutex_init(&s->lock, NULL);
        *ret = s;
        return 0;
}

void scripts_free(struct scripts *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < SCRIPTS_PENDING_MAX; i++)
                free(s->table[i].code);
        pthread_mutex_destroy(&s->lock);
        free(s);
}

static const char *ext_of(const char *language)
{
        if (strcmp(language, "python") == 0)
                return "py";
        if (strcmp(language, "node") == 0)
                return "js";
        return "sh";
}

void scripts_name(const char *language, const char *content_hash, int64_t created_at_ms, char ret[SCRIPTS_NAME_MAX])
{
        time_t t = (time_t)(created_at_ms / 1000);
        struct tm tm;
        char when[32];

        gmtime_r(&t, &tm);
        strftime(when, sizeof(when), "%Y%m%dT%H%M%SZ", &tm);
        snprintf(ret, SCRIPTS_NAME_MAX, "script-%s-%.12s.%s", when, content_hash, ext_of(language));
}

bool scripts_name_valid(const char *name)
{
        /* script-YYYYmmddTHHMMSSZ-<12 hex>.<ext> */
        static const char shape[] = "script-ddddddddTddddddZ-hhhhhhhhhhhh.";
        size_t n = strlen(shape);

        if (!name || strncmp(name, "script-", 7) != 0 || strlen(name) < n + 2)
                return false;
        for (size_t i = 7; i < n; i++) {
                char c = name[i];
                if (shape[i] == 'd'   ? !isdigit((unsigned char)c)
                    : shape[i] == 'h' ? !(isdigit((unsigned char)c) || (c >= 'a' && c <= 'f'))
                                      : c != shape[i])
                        return false;
        }
        return strcmp(name + n, "py") == 0 || strcmp(name + n, "js") == 0 || strcmp(name + n, "sh") == 0;
}

/* Append the text of one comment line to out (a space between lines). */
static void append_text(char *out, size_t *len, const char *p, size_t n)
{
        while (n > 0 && isspace((unsigned char)*p))
                p++, n--;
        while (n > 0 && isspace((unsigned char)p[n - 1]))
                n--;
        if (n == 0)
                return;
        if (*len > 0 && *len < SCRIPTS_DESCRIPTION_MAX)
                out[(*len)++] = ' ';
        for (size_t i = 0; i < n && *len < SCRIPTS_DESCRIPTION_MAX; i++)
                out[(*len)++] = (p[i] == '\t' || p[i] == '\r') ? ' ' : p[i];
        out[*len] = '\0';
}

void scripts_description(const char *language, const char *code, char ret[SCRIPTS_DESCRIPTION_MAX + 1])
{
        bool slashes = strcmp(language, "node") == 0;
        char buf[SCRIPTS_DESCRIPTION_MAX + 1] = "";
        size_t len = 0;
        const char *p = code;
        bool in_block = false, first = true;

        while (p && *p && len < SCRIPTS_DESCRIPTION_MAX) {
                const char *nl = strchr(p, '\n');
                size_t n = nl ? (size_t)(nl - p) : strlen(p);
                const char *l = p;
                size_t k = n;

                p = nl ? nl + 1 : p + n;
                while (k > 0 && isspace((unsigned char)*l))
                        l++, k--;
                if (first && k >= 2 && l[0] == '#' && l[1] == '!') {
                        first = false;
                        continue; /* a shebang */
                }
                first = false;
                if (in_block) {
                        const char *end = memmem(l, k, "*/", 2);
                        size_t m = end ? (size_t)(end - l) : k;
                        while (m > 0 && (*l == '*'))
                                l++, m--;
                        append_text(buf, &len, l, m);
                        if (end)
                                break;
                        continue;
                }
                if (k == 0) {
                        if (len > 0)
                                break; /* a blank line ends the leading comment */
                        continue;
                }
                if (!slashes && l[0] == '#') {
                        if (len == 0 && (memmem(l, k, "coding:", 7) || memmem(l, k, "coding=", 7)))
                                continue; /* a PEP 263 line */
                        append_text(buf, &len, l + 1, k - 1);
                } else if (slashes && k >= 2 && l[0] == '/' && l[1] == '/') {
                        append_text(buf, &len, l + 2, k - 2);
                } else if (slashes && k >= 2 && l[0] == '/' && l[1] == '*') {
                        const char *end = memmem(l + 2, k - 2, "*/", 2);
                        const char *t = l + 2;
                        size_t m = end ? (size_t)(end - t) : k - 2;
                        while (m > 0 && *t == '*')
                                t++, m--;
                        append_text(buf, &len, t, m);
                        if (end)
                                break;
                        in_block = true;
                } else {
                        break; /* code: the leading comment is over */
                }
        }
        /* cut on a character boundary, then make it valid UTF-8 */
        while (len > 0 && ((unsigned char)buf[len - 1] & 0xC0) == 0x80 && len == SCRIPTS_DESCRIPTION_MAX)
                len--;
        buf[len] = '\0';
        _cleanup_free_ char *clean = utf8_sanitize(buf, len);
        sbx_strlcpy(ret, clean ? clean : "", SCRIPTS_DESCRIPTION_MAX + 1);
}

int scripts_save(struct scripts *s, const char *user, const char *language, const char *code, struct store_script *ret,
                 struct sbx_error *err)
{
        struct store_script row = {0};
        struct quota_limits lim;
        int r;

        quota_limits_get(s->quota, s->cfg, user, &lim);
        if (sha256_hex(code, strlen(code), row.content_hash) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        row.created_at = sbx_wall_ms();
        sbx_strlcpy(row.language, language, sizeof(row.language));
        scripts_name(language, row.content_hash, row.created_at, row.name);
        scripts_description(language, code, row.description);
        row.code = (char *)code;
        row.bytes = (int64_t)strlen(code);
        r = store_script_add(s->store, user, &row, lim.scripts, lim.script_bytes, ret);
        if (r == -EEXIST)
                return 1;
        if (r == -EDQUOT)
                return sbx_error_set(err, -EDQUOT, 0,
                                     "the script cache is full (at most %" PRId64 " scripts and %" PRId64
                                     " bytes of code for this user): clear_scripts makes room",
                                     lim.scripts, lim.script_bytes);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot save the script: %s", strerror(-r));
        row.code = NULL;
        *ret = row;
        return 0;
}

static void drop_code(struct scripts *s, struct pending *p)
{
        if (p->code) {
                s->bytes -= p->code_len;
                free(p->code);
                p->code = NULL;
        }
}

void scripts_note_run(struct scripts *s, const char *user, const char *exec_id, const char *language, const char *code)
{
        size_t len = strlen(code);
        struct pending *slot = NULL;
        struct quota_limits lim;
        char *copy;

        quota_limits_get(s->quota, s->cfg, user, &lim);
        if (lim.scripts <= 0 || len > SCRIPTS_PENDING_BYTES)
                return;
        copy = strdup(code);
        if (!copy)
                return;
        pthread_mutex_lock(&s->lock);
        /* room: the oldest runs' code goes first (they will not be saved) */
        while (s->bytes + len > SCRIPTS_PENDING_BYTES) {
                struct pending *old = NULL;
                for (size_t i = 0; i < SCRIPTS_PENDING_MAX; i++)
                        if (s->table[i].code && (!old || s->table[i].seq < old->seq))
                                old = &s->table[i];
                if (!old)
                        break;
                drop_code(s, old);
                old->state = PENDING_NONE;
        }
        for (size_t i = 0; i < SCRIPTS_PENDING_MAX; i++)
                if (!slot || s->table[i].seq < slot->seq)
                        slot = &s->table[i];
        drop_code(s, slot);
        memset(slot, 0, sizeof(*slot));
        slot->state = PENDING_RUNNING;
        slot->seq = ++s->seq;
        sbx_strlcpy(slot->exec_id, exec_id, sizeof(slot->exec_id));
        sbx_strlcpy(slot->user, user, sizeof(slot->user));
        sbx_strlcpy(slot->language, language, sizeof(slot->language));
        slot->code = copy;
        slot->code_len = len;
        s->bytes += len;
        pthread_mutex_unlock(&s->lock);
}

static struct pending *find_locked(struct scripts *s, const char *user, const char *exec_id)
{
        for (size_t i = 0; i < SCRIPTS_PENDING_MAX; i++) {
                struct pending *p = &s->table[i];
                if (p->state != PENDING_EMPTY && strcmp(p->exec_id, exec_id) == 0 && strcmp(p->user, user) == 0)
                        return p;
        }
        return NULL;
}

int scripts_settle(struct scripts *s, const char *user, const char *exec_id, bool success, struct store_script *ret,
                   struct sbx_error *err)
{
        struct pending *p;
        char *code = NULL, language[16];
        struct store_script info = {0};
        int r;

        pthread_mutex_lock(&s->lock);
        p = find_locked(s, user, exec_id);
        if (!p || p->state == PENDING_NONE) {
                pthread_mutex_unlock(&s->lock);
                return -ENOENT;
        }
        if (p->state == PENDING_SAVED) {
                *ret = p->info;
                pthread_mutex_unlock(&s->lock);
                return 0;
        }
        /* RUNNING: take the code out; this caller saves it */
        code = p->code;
        s->bytes -= p->code_len;
        p->code = NULL;
        p->state = PENDING_NONE;
        sbx_strlcpy(language, p->language, sizeof(language));
        pthread_mutex_unlock(&s->lock);
        if (!success) {
                free(code);
                return -ENOENT;
        }
        r = scripts_save(s, user, language, code, &info, err);
        free(code);
        if (r < 0)
                return r;
        pthread_mutex_lock(&s->lock);
        p = find_locked(s, user, exec_id);
        if (p) {
                p->state = PENDING_SAVED;
                p->info = info;
        }
        pthread_mutex_unlock(&s->lock);
        *ret = info;
        return 0;
}

/* ---- the fronts' reads and deletes ---- */

int scripts_code(struct scripts *s, const char *user, const char *name, char ret_language[16], char **ret_code,
                 struct sbx_error *err)
{
        struct store_script row = {0};
        int r;

        if (!scripts_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0,
                                     "params.script is not a script name (script-<time>-<hash>.<ext>)");
        r = store_script_get(s->store, user, name, &row);
        if (r == -ENOENT)
                return sbx_error_set(err, r, 0, "no script %s (list_scripts shows yours)", name);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot read the script: %s", strerror(-r));
        snprintf(ret_language, 16, "%s", row.language);
        *ret_code = row.code;
        return 0;
}

int scripts_list(struct scripts *s, const char *user, const char *filter, size_t limit, struct store_script **ret,
                 size_t *ret_n, int64_t *ret_count, int64_t *ret_bytes, struct sbx_error *err)
{
        int r;

        if (filter && strlen(filter) > SCRIPTS_FILTER_MAX)
                return sbx_error_set(err, -E2BIG, 0, "params.filter is longer than %d bytes", SCRIPTS_FILTER_MAX);
        *ret = NULL;
        *ret_n = 0;
        r = store_script_list(s->store, user, filter && *filter ? filter : NULL, limit, ret, ret_n);
        if (r == 0)
                r = store_script_usage(s->store, user, ret_count, ret_bytes);
        if (r < 0) {
                free(*ret);
                *ret = NULL;
                *ret_n = 0;
                return sbx_error_set(err, r, 0, "cannot list scripts: %s", strerror(-r));
        }
        return 0;
}

int scripts_delete(struct scripts *s, const char *user, const char *name, int64_t *ret_removed, struct sbx_error *err)
{
        int r;

        if (name && !scripts_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "params.name is not a script name (script-<time>-<hash>.<ext>)");
        r = store_script_delete(s->store, user, name, ret_removed);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot clear scripts: %s", strerror(-r));
        if (name && *ret_removed == 0)
                return sbx_error_set(err, -ENOENT, 0, "no script %s", name);
        return 0;
}
