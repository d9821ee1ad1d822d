/* sandboxd-apidoc — writes docs/api.md: the hand-written template
 * (docs/api.md.in) with its @REFERENCE@ line replaced by a reference
 * generated from the API method table (api_method_doc_at, the table the
 * dispatcher itself uses) and the MCP tool catalog (schemas/mcp_tools.json).
 * Run by the build (CMakeLists.txt) into the build directory; the unit test
 * unit_docs_api checks that the copy in docs/ is the same.
 *
 * Exits 1, failing the build, when a method has no params, returns or
 * description, when a tool has no description, or when an input is not
 * readable. A build tool: it writes only the file it is given. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

static char *read_all(const char *path)
{
        FILE *f = fopen(path, "re");
        char *buf = NULL;
        size_t len = 0, cap = 0, n;

        if (!f)
                return NULL;
        for (;;) {
                if (cap - len < 4096) {
                        char *nb = realloc(buf, cap + 65536);
                        if (!nb) {
                                free(buf);
                                fclose(f);
                                return NULL;
                        }
                        buf = nb;
                        cap += 65536;
                }
                n = fread(buf + len, 1, cap - len - 1, f);
                len += n;
                if (n == 0)
                        break;
        }
        buf[len] = '\0';
        fclose(f);
        return buf;
}

static bool blank(const char *s)
{
        return !s || !s[0];
}

/* Markdown table cells: a | or a newline would break the row. */
static void cell(FILE *out, const char *s)
{
        for (; s && *s; s++) {
                if (*s == '|')
                        fputs("\\|", out);
                else if (*s == '\n')
                        fputc(' ', out);
                else
                        fputc(*s, out);
        }
}

static const cJSON *find_tool(const cJSON *tools, const char *name)
{
        const cJSON *t;

        cJSON_ArrayForEach(t, tools) {
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
                if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
                        return t;
        }
        return NULL;
}

/* A schema's type for the table: "type", or the types of anyOf's branches. */
static void schema_type(FILE *out, const cJSON *sch)
{
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(sch, "type");
        const cJSON *any = cJSON_GetObjectItemCaseSensitive(sch, "anyOf");
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(sch, "enum");
        const cJSON *b;
        bool first = true;

        if (cJSON_IsArray(en)) {
                cJSON_ArrayForEach(b, en) {
                        if (cJSON_IsString(b))
                                fprintf(out, "%s`%s`", first ? "" : " \\| ", b->valuestring);
                        first = false;
                }
                return;
        }
        if (cJSON_IsString(type)) {
                fputs(type->valuestring, out);
                return;
        }
        cJSON_ArrayForEach(b, any) {
                fputs(first ? "" : " or ", out);
                schema_type(out, b);
                first = false;
        }
}

static int tool_params(FILE *out, const cJSON *tool)
{
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(tool, "inputSchema");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(in, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(in, "required");
        const cJSON *p, *r;

        if (!cJSON_IsObject(props) || !props->child) {
                fputs("No arguments.\n\n", out);
                return 0;
        }
        fputs("| argument | type | required | description |\n| --- | --- | --- | --- |\n", out);
        cJSON_ArrayForEach(p, props) {
                bool required = false;
                const cJSON *d = cJSON_GetObjectItemCaseSensitive(p, "description");

                cJSON_ArrayForEach(r, req) {
                        if (cJSON_IsString(r) && strcmp(r->valuestring, p->string) == 0)
                                required = true;
                }
                fprintf(out, "| `%s` | ", p->string);
                schema_type(out, p);
                fprintf(out, " | %s | ", required ? "yes" : "");
                cell(out, cJSON_IsString(d) ? d->valuestring : "");
                fputs(" |\n", out);
        }
        fputc('\n', out);
        return 0;
}

static int reference(FILE *out, const cJSON *tools)
{
        const struct api_method_doc *m;
        const cJSON *t;
        int bad = 0;

        fputs("## Method reference\n\n"
              "Generated from the method table (`src/api/api_methods.c`, `src/api/api_tasks.c`) by\n"
              "`src/bin/sandboxd-apidoc.c`: do not edit this part by hand. Every method but the\n"
              "user-level ones takes `params.session` (1-64 of `[A-Za-z0-9_.-]`); the session's\n"
              "container is created on first use. Absent values are `null`.\n\n",
              out);
        for (size_t i = 0; (m = api_method_doc_at(i)); i++) {
                if (blank(m->params) || blank(m->returns) || blank(m->description)) {
                        fprintf(stderr, "sandboxd-apidoc: API method %s has no %s: describe it in its table\n", m->name,
                                blank(m->description) ? "description"
                                : blank(m->params)    ? "params"
                                                      : "returns");
                        bad = 1;
                        continue;
                }
                fprintf(out, "### `%s`\n\n%s\n\n", m->name, m->description);
                fprintf(out, "- **Params:** `%s`%s\n", m->params,
                        api_method_user_level(m->name) || api_tasks_sessionless(m->name) ? " (no `params.session`)"
                                                                                         : ", with `session`");
                fprintf(out, "- **Returns:** %s\n", m->returns);
                t = find_tool(tools, m->name);
                if (t)
                        fprintf(out, "- **MCP tool:** [`%s`](#tool-%s)\n", m->name, m->name);
                fputc('\n', out);
        }

        fputs("## MCP tool reference\n\n"
              "Generated from `schemas/mcp_tools.json`, the catalog `tools/list` serves. A tool\n"
              "calls the API method of its name; `session` defaults to the adapter's session.\n\n",
              out);
        cJSON_ArrayForEach(t, tools) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
                const cJSON *title = cJSON_GetObjectItemCaseSensitive(t, "title");
                const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");

                if (!cJSON_IsString(name) || !cJSON_IsString(desc) || blank(desc->valuestring)) {
                        fprintf(stderr,
                                "sandboxd-apidoc: a tool of schemas/mcp_tools.json has no name or description\n");
                        bad = 1;
                        continue;
                }
                fprintf(out, "<a id=\"tool-%s\"></a>\n\n### Tool `%s`%s%s\n\n%s\n\n", name->valuestring,
                        name->valuestring, cJSON_IsString(title) ? ": " : "",
                        cJSON_IsString(title) ? title->valuestring : "", desc->valuestring);
                if (!api_method_find(name->valuestring))
                        fputs("(No API method of this name: the adapter serves it itself.)\n\n", out);
                tool_params(out, t);
        }
        return bad ? -EINVAL : 0;
}

int main(int argc, char **argv)
{
        char *tmpl = NULL, *json = NULL, *mark;
        cJSON *cat = NULL;
        const cJSON *tools;
        FILE *out = NULL;
        int rc = 1;

        if (argc != 4) {
                fprintf(stderr, "usage: sandboxd-apidoc TEMPLATE MCP_TOOLS_JSON OUTPUT\n");
                return 2;
        }
        tmpl = read_all(argv[1]);
        json = read_all(argv[2]);
        if (!tmpl || !json) {
                fprintf(stderr, "sandboxd-apidoc: cannot read %s: %s\n", tmpl ? argv[2] : argv[1], strerror(errno));
                goto out;
        }
        cat = cJSON_Parse(json);
        tools = cJSON_GetObjectItemCaseSensitive(cat, "tools");
        if (!cJSON_IsArray(tools)) {
                fprintf(stderr, "sandboxd-apidoc: %s has no \"tools\" array\n", argv[2]);
                goto out;
        }
        mark = strstr(tmpl, "@REFERENCE@\n");
        if (!mark) {
                fprintf(stderr, "sandboxd-apidoc: %s has no @REFERENCE@ line\n", argv[1]);
                goto out;
        }
        out = fopen(argv[3], "we");
        if (!out) {
                fprintf(stderr, "sandboxd-apidoc: cannot write %s: %s\n", argv[3], strerror(errno));
                goto out;
        }
        fputs("<!-- Generated by the build from docs/api.md.in, the API method table and\n"
              "     schemas/mcp_tools.json. Edit those; then `cmake --build build --target update-api-doc`. -->\n\n",
              out);
        fwrite(tmpl, 1, (size_t)(mark - tmpl), out);
        if (reference(out, tools) < 0)
                goto out;
        fputs(mark + strlen("@REFERENCE@\n"), out);
        if (fclose(out) != 0) {
                out = NULL;
                fprintf(stderr, "sandboxd-apidoc: writing %s failed\n", argv[3]);
                goto out;
        }
        out = NULL;
        rc = 0;
out:
        if (out) {
                fclose(out);
                remove(argv[3]);
        }
        cJSON_Delete(cat);
        free(json);
        free(tmpl);
        return rc;
}
