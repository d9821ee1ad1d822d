/* mcp_cells.c — how a run_cell result reads in MCP (issue 25): PNG and SVG
 * outputs become image content blocks, so a model with vision sees the
 * chart; stdout, stderr, text/plain of the other outputs, the error's
 * traceback and any state_lost go in the text block; the whole bundle stays
 * in structuredContent. Runs on the call's worker thread, on its result
 * only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sandboxd/utf8.h"

#define CELL_TEXT_MAX (256 * 1024)

struct text {
        char *buf;
        size_t len;
        bool cut;
};

static void text_add(struct text *t, const char *s)
{
        size_t n = s ? strlen(s) : 0;
        char *b;

        if (!n || t->cut)
                return;
        if (t->len + n > CELL_TEXT_MAX) {
                t->cut = true;
                s = "\n[more output in structuredContent]\n";
                n = strlen(s);
        }
        b = realloc(t->buf, t->len + n + 1);
        if (!b)
                return;
        memcpy(b + t->len, s, n + 1);
        t->buf = b;
        t->len += n;
}

static const char *str_of(const cJSON *o, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void add_image(struct mcp_tool_result *r, const char *data, const char *mime, bool svg)
{
        cJSON *b = cJSON_CreateObject();
        _cleanup_free_ char *enc = NULL;

        cJSON_AddStringToObject(b, "type", "image");
        if (svg) {
                enc = base64_encode((const unsigned char *)data, strlen(data));
                if (!enc) {
                        cJSON_Delete(b);
                        return;
                }
                data = enc;
        }
        cJSON_AddStringToObject(b, "data", data);
        cJSON_AddStringToObject(b, "mimeType", mime);
        if (!r->content)
                r->content = cJSON_CreateArray();
        cJSON_AddItemToArray(r->content, b);
}

void mcp_cell_content(struct mcp_tool_result *r)
{
        const cJSON *res = r->structured, *o, *lost, *err;
        struct text t = {0};
        char line[256];

        if (!res)
                return;
        lost = cJSON_GetObjectItemCaseSensitive(res, "state_lost");
        if (lost) {
                const cJSON *g = cJSON_GetObjectItemCaseSensitive(lost, "generation");
                snprintf(line, sizeof(line),
                         "[state lost: the interpreter's generation %d ended (%s); this cell ran in a fresh "
                         "namespace]\n",
                         cJSON_IsNumber(g) ? g->valueint : 0, str_of(lost, "cause") ?: "unknown");
                text_add(&t, line);
        }
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(res, "outputs")) {
                const char *type = str_of(o, "type") ?: "";
                const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
                if (strcmp(type, "stream") == 0) {
                        text_add(&t, str_of(o, "text"));
                } else if (strcmp(type, "display_data") == 0 || strcmp(type, "execute_result") == 0) {
                        const char *png = str_of(data, "image/png"), *svg = str_of(data, "image/svg+xml");
                        if (png)
                                add_image(r, png, "image/png", false);
                        else if (svg)
                                add_image(r, svg, "image/svg+xml", true);
                        else if (str_of(data, "text/markdown"))
                                text_add(&t, str_of(data, "text/markdown"));
                        else
                                text_add(&t, str_of(data, "text/plain"));
                        if (!png && !svg)
                                text_add(&t, "\n");
                } else if (strcmp(type, "error") == 0) {
                        const cJSON *l;
                        cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(o, "traceback")) {
                                text_add(&t, cJSON_IsString(l) ? l->valuestring : NULL);
                                text_add(&t, "\n");
                        }
                }
        }
        err = cJSON_GetObjectItemCaseSensitive(res, "error");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "timed_out")))
                text_add(&t, "[the cell timed out and was interrupted]\n");
        snprintf(line, sizeof(line), "[context %s, generation %d, cell %d%s]", str_of(res, "context") ?: "default",
                 cJSON_GetObjectItemCaseSensitive(res, "generation")
                         ? cJSON_GetObjectItemCaseSensitive(res, "generation")->valueint
                         : 0,
                 cJSON_GetObjectItemCaseSensitive(res, "execution_count")
                         ? cJSON_GetObjectItemCaseSensitive(res, "execution_count")->valueint
                         : 0,
                 err ? ", error" : "");
        text_add(&t, line);
        r->is_error = err != NULL;
        free(r->text);
        r->text = t.buf ? utf8_sanitize(t.buf, t.len) : NULL;
        free(t.buf);
}
