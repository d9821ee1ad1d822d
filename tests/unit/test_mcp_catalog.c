/* test_mcp_catalog.c — the MCP tool catalog as data: schemas/mcp_tools.json
 * is what the adapter embeds and serves (tools/list at the newest version is
 * its tools array), it passes the check the adapter runs at start, and that
 * check refuses a broken catalog (so a bad edit of the file fails here, not
 * in a client); mcp_schema_check refuses keywords the validator does not
 * enforce. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sandboxd/mcp.h"

static char *read_catalog_file(void)
{
        FILE *f = fopen(SANDBOXD_SOURCE_DIR "/schemas/mcp_tools.json", "re");
        char *buf;
        long n;

        cr_assert_not_null(f, "schemas/mcp_tools.json opens");
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        rewind(f);
        buf = calloc(1, (size_t)n + 1);
        cr_assert_not_null(buf);
        cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
        fclose(f);
        return buf;
}

/* The one reply line a synchronous request writes. */
static char *reply;

static int keep_line(const char *line, size_t len, void *ud)
{
        (void)ud;
        free(reply);
        reply = strndup(line, len);
        return 0;
}

Test(mcp_catalog, embedded_catalog_passes_the_check)
{
        struct sbx_error err = {0};

        cr_assert_eq(mcp_tools_check(NULL, &err), 0, "%s", err.msg);
        cr_assert_geq(mcp_tool_count(), 21);
        cr_assert_str_eq(mcp_tool_name(0), "exec");
        cr_assert_null(mcp_tool_name(mcp_tool_count()));
}

/* The file in the tree is the one built in, and tools/list serves it. */
Test(mcp_catalog, tools_list_serves_the_file)
{
        static const char list[] =
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                "\"io.modelcontextprotocol/clientCapabilities\":{}}}}";
        struct mcp_options o = {.api_socket = "/nonexistent.sock", .session = "unit", .write = keep_line};
        struct sbx_error err = {0};
        char *text = read_catalog_file();
        cJSON *file = cJSON_Parse(text), *r;
        struct mcp *m = NULL;

        cr_assert_not_null(file, "the file is JSON");
        cr_assert_eq(mcp_tools_check(text, &err), 0, "%s", err.msg);
        cr_assert_eq(mcp_new(&o, &m, &err), 0, "%s", err.msg);
        mcp_handle_line(m, list, strlen(list));
        cr_assert_not_null(reply, "tools/list answers");
        r = cJSON_Parse(reply);
        cr_assert(cJSON_Compare(cJSON_GetObjectItem(file, "tools"),
                                cJSON_GetObjectItem(cJSON_GetObjectItem(r, "result"), "tools"), true),
                  "tools/list serves schemas/mcp_tools.json as it stands");
        cr_assert_eq((size_t)cJSON_GetArraySize(cJSON_GetObjectItem(file, "tools")), mcp_tool_count());
        cJSON_Delete(r);
        cJSON_Delete(file);
        free(text);
        free(reply);
        reply = NULL;
        mcp_free(m);
}

/* The catalog with one edit applied; the check's verdict on it. */
static int check_edited(void (*edit)(cJSON *doc, cJSON *exec), char *why, size_t why_size)
{
        char *text = read_catalog_file(), *out;
        cJSON *doc = cJSON_Parse(text);
        struct sbx_error err = {0};
        int r;

        edit(doc, cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "tools"), 0));
        out = cJSON_PrintUnformatted(doc);
        r = mcp_tools_check(out, &err);
        snprintf(why, why_size, "%s", err.msg);
        free(out);
        free(text);
        cJSON_Delete(doc);
        return r;
}

static void no_tools(cJSON *doc, cJSON *exec)
{
        cJSON_DeleteItemFromObject(doc, "tools");
}
static void no_input_schema(cJSON *doc, cJSON *exec)
{
        cJSON_DeleteItemFromObject(exec, "inputSchema");
}
static void no_title(cJSON *doc, cJSON *exec)
{
        cJSON_DeleteItemFromObject(exec, "title");
}
static void no_exec(cJSON *doc, cJSON *exec)
{
        cJSON_DeleteItemFromArray(cJSON_GetObjectItem(doc, "tools"), 0);
}
static void twice(cJSON *doc, cJSON *exec)
{
        cJSON_AddItemToArray(cJSON_GetObjectItem(doc, "tools"), cJSON_Duplicate(exec, true));
}
static void long_name(cJSON *doc, cJSON *exec)
{
        char name[80];
        memset(name, 'x', sizeof(name) - 1);
        name[sizeof(name) - 1] = '\0';
        cJSON_ReplaceItemInObject(exec, "name", cJSON_CreateString(name));
}
static void unknown_keyword(cJSON *doc, cJSON *exec)
{
        cJSON *cmd = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(exec, "inputSchema"), "properties"),
                                         "command");
        cJSON_AddStringToObject(cmd, "format", "uri");
}
static void bad_pattern(cJSON *doc, cJSON *exec)
{
        cJSON *s = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(exec, "inputSchema"), "properties"),
                                       "session");
        cJSON_ReplaceItemInObject(s, "pattern", cJSON_CreateString("^[a-z"));
}
static void output_not_object(cJSON *doc, cJSON *exec)
{
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(exec, "outputSchema"), "type", cJSON_CreateString("array"));
}
static void closed_world(cJSON *doc, cJSON *exec)
{
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(exec, "annotations"), "openWorldHint", cJSON_CreateFalse());
}

Test(mcp_catalog, broken_catalogs_are_refused)
{
        static const struct {
                void (*edit)(cJSON *doc, cJSON *exec);
                const char *says;
        } cases[] = {
                {no_tools, "tools must be a non-empty array"},
                {no_input_schema, "exec.inputSchema must be a schema of type object"},
                {no_title, "exec: title and description are required"},
                {no_exec, "tool exec (src/mcp/mcp_catalog.c) is missing"},
                {twice, "tool exec is listed twice"},
                {long_name, "a tool needs a name of 1-63 bytes"},
                {unknown_keyword,
                 "exec.inputSchema.properties.command: keyword format is not one the validator enforces"},
                {bad_pattern, "exec.inputSchema.properties.session: pattern is malformed"},
                {output_not_object, "exec.outputSchema must be a schema of type object"},
                {closed_world, "exec: annotations need readOnlyHint, and openWorldHint true"},
        };
        struct sbx_error err = {0};
        char why[1024];

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                cr_assert_eq(check_edited(cases[i].edit, why, sizeof(why)), -EINVAL, "case %zu refused", i);
                cr_assert_str_eq(why, cases[i].says);
        }
        cr_assert_eq(mcp_tools_check("{\"tools\": [", &err), -EINVAL, "not JSON");
        cr_assert_eq(mcp_tools_check("", &err), -EINVAL, "empty");
}

Test(mcp_catalog, schema_check_knows_the_validator_keywords)
{
        static const struct {
                const char *schema;
                const char *says; /* NULL: accepted */
        } cases[] = {
                {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":-1},"
                 "{\"type\":\"null\"}]},\"b\":{\"type\":[\"string\",\"null\"],\"maxLength\":3,\"pattern\":\"^a+$\"},"
                 "\"c\":{\"type\":\"array\",\"items\":{\"enum\":[1,2]},\"minItems\":1}},\"required\":[\"a\"],"
                 "\"additionalProperties\":{\"type\":\"string\"},\"title\":\"t\",\"description\":\"d\"}",
                 NULL},
                {"{\"type\":\"object\",\"additionalProperties\":false}", NULL},
                {"{\"type\":\"object\",\"oneOf\":[]}", "s: keyword oneOf is not one the validator enforces"},
                {"{\"type\":\"strin\"}", "s: type is malformed"},
                {"{\"type\":[]}", "s: type is malformed"},
                {"{\"maxLength\":-1}", "s: maxLength is malformed"},
                {"{\"minItems\":1.5}", "s: minItems is malformed"},
                {"{\"required\":[1]}", "s: required is malformed"},
                {"{\"enum\":[]}", "s: enum is malformed"},
                {"{\"anyOf\":[]}", "s: anyOf must be a non-empty array"},
                {"{\"properties\":{\"x\":{\"items\":{\"const\":1}}}}",
                 "s.properties.x.items: keyword const is not one the validator enforces"},
                {"{\"properties\":{\"x\":3}}", "s.properties.x: a schema must be an object"},
                {"{\"description\":1}", "s: description is malformed"},
                {"[]", "s: a schema must be an object"},
        };
        char msg[256];

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                cJSON *s = cJSON_Parse(cases[i].schema);
                bool ok;
                cr_assert_not_null(s, "case %zu parses", i);
                msg[0] = '\0';
                ok = mcp_schema_check(s, "s", msg, sizeof(msg));
                if (cases[i].says) {
                        cr_assert_not(ok, "case %zu refused", i);
                        cr_assert_str_eq(msg, cases[i].says, "case %zu", i);
                } else {
                        cr_assert(ok, "case %zu: %s", i, msg);
                }
                cJSON_Delete(s);
        }
}
