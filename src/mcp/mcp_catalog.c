/* mcp_catalog.c — the MCP tool catalog: schemas/mcp_tools.json (names,
 * titles, descriptions, input and output schemas, annotations), embedded at
 * build time by cmake/embed.cmake, parsed and checked once, then served by
 * tools/list and read by the argument validator (mcp_schema.c) and by the
 * tools that shape replies to their outputSchema (mcp_tools.c).
 *
 * The file is what clients see: tools/list at the newest protocol version
 * serves its tools array as it stands; older versions drop title,
 * outputSchema and annotations. What the adapter does beyond passing a call
 * on to the API method of the same name is the `special` table below, joined
 * to the file by name; the check refuses a table entry the file lacks.
 *
 * Threads: parsed once under pthread_once (mcp_tools_init, which mcp_new
 * calls), read-only afterwards; the parsed catalog lives as long as the
 * process. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sandboxd/log.h"

/* The embedded schemas/mcp_tools.json (mcp_tools_gen.c), NUL-terminated. */
extern const char mcp_tools_json[];

/* Tools the adapter treats specially; every other tool passes through. */
static const struct {
        const char *name;
        bool follow;      /* started in the background and followed to its end (mcp_tools.c) */
        bool user_level;  /* acts on the user: the connection's default session is not added */
        const char *wrap; /* a bare array reply goes under this key */
} special[] = {
        {"exec", .follow = true},
        {"run_code", .follow = true},
        {"list_executions", .wrap = "executions"},
        {"list_services", .wrap = "services"},
        {"list_scripts", .user_level = true},
        {"clear_scripts", .user_level = true},
        {"create_session", .user_level = true},
        {"list_sessions", .user_level = true},
        {"list_snapshots", .user_level = true},
        {"delete_snapshot", .user_level = true},
        {"fork_session", .user_level = true}, /* session names the new one: never the connection's */
};

struct catalog {
        cJSON *doc;
        struct mcp_tool *tools;
        size_t n;
};

static const char *string_of(const cJSON *o, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

        return cJSON_IsString(v) && *v->valuestring ? v->valuestring : NULL;
}

/* Checks one annotations object: the hints are booleans, and openWorldHint
 * says whether the tool reaches the network (the followed runs do, unless
 * the session is private). */
static int check_annotations(const struct mcp_tool *t, struct sbx_error *err)
{
        static const char *const hints[] = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"};
        const cJSON *a = t->annotations, *h;

        if (!cJSON_IsObject(a) || !string_of(a, "title"))
                return sbx_error_set(err, -EINVAL, 0, "%s: annotations must be an object with a title", t->name);
        for (size_t i = 0; i < ELEMENTSOF(hints); i++) {
                h = cJSON_GetObjectItemCaseSensitive(a, hints[i]);
                if (h && !cJSON_IsBool(h))
                        return sbx_error_set(err, -EINVAL, 0, "%s: annotations.%s must be a boolean", t->name,
                                             hints[i]);
        }
        if (!cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(a, "readOnlyHint")) ||
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "openWorldHint")) != t->follow)
                return sbx_error_set(err, -EINVAL, 0, "%s: annotations need readOnlyHint, and openWorldHint %s",
                                     t->name, t->follow ? "true" : "false");
        return 0;
}

/* One tool of the file into t (pointers into the parsed document). */
static int load_tool(const cJSON *o, struct mcp_tool *t, struct sbx_error *err)
{
        char msg[512], where[128];

        if (!cJSON_IsObject(o))
                return sbx_error_set(err, -EINVAL, 0, "every tool must be an object");
        t->name = string_of(o, "name");
        t->title = string_of(o, "title");
        t->description = string_of(o, "description");
        t->input_schema = cJSON_GetObjectItemCaseSensitive(o, "inputSchema");
        t->output_schema = cJSON_GetObjectItemCaseSensitive(o, "outputSchema");
        t->annotations = cJSON_GetObjectItemCaseSensitive(o, "annotations");
        if (!t->name || strlen(t->name) >= MCP_TOOL_NAME_MAX)
                return sbx_error_set(err, -EINVAL, 0, "a tool needs a name of 1-%d bytes", MCP_TOOL_NAME_MAX - 1);
        if (!t->title || !t->description)
                return sbx_error_set(err, -EINVAL, 0, "%s: title and description are required", t->name);
        for (size_t i = 0; i < ELEMENTSOF(special); i++)
                if (strcmp(special[i].name, t->name) == 0) {
                        t->follow = special[i].follow;
                        t->user_level = special[i].user_level;
                        t->wrap = special[i].wrap;
                }
        for (int k = 0; k < 2; k++) {
                const cJSON *s = k ? t->output_schema : t->input_schema;
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
                snprintf(where, sizeof(where), "%s.%s", t->name, k ? "outputSchema" : "inputSchema");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "object") != 0)
                        return sbx_error_set(err, -EINVAL, 0, "%s must be a schema of type object", where);
                if (!mcp_schema_check(s, where, msg, sizeof(msg)))
                        return sbx_error_set(err, -EINVAL, 0, "%s", msg);
        }
        return check_annotations(t, err);
}

static void catalog_free(struct catalog *c)
{
        cJSON_Delete(c->doc);
        free(c->tools);
        *c = (struct catalog){0};
}

/* Parse and check a catalog text into c: 0, or -EINVAL (-ENOMEM) with err. */
static int catalog_load(const char *json, struct catalog *c, struct sbx_error *err)
{
        const cJSON *list, *o;
        size_t i = 0;
        int r;

        *c = (struct catalog){0};
        c->doc = cJSON_Parse(json);
        if (!c->doc)
                return sbx_error_set(err, -EINVAL, 0, "not JSON (near byte %td)",
                                     cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - json : (ptrdiff_t)0);
        list = cJSON_GetObjectItemCaseSensitive(c->doc, "tools");
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0) {
                catalog_free(c);
                return sbx_error_set(err, -EINVAL, 0, "tools must be a non-empty array");
        }
        c->n = (size_t)cJSON_GetArraySize(list);
        c->tools = calloc(c->n, sizeof(*c->tools));
        if (!c->tools) {
                catalog_free(c);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        cJSON_ArrayForEach(o, list) {
                r = load_tool(o, &c->tools[i], err);
                for (size_t j = 0; r == 0 && j < i; j++)
                        if (strcmp(c->tools[j].name, c->tools[i].name) == 0)
                                r = sbx_error_set(err, -EINVAL, 0, "tool %s is listed twice", c->tools[i].name);
                if (r < 0) {
                        catalog_free(c);
                        return r;
                }
                i++;
        }
        for (size_t k = 0; k < ELEMENTSOF(special); k++) {
                for (i = 0; i < c->n && strcmp(c->tools[i].name, special[k].name) != 0; i++)
                        ;
                if (i == c->n) {
                        catalog_free(c);
                        return sbx_error_set(err, -EINVAL, 0, "tool %s (src/mcp/mcp_catalog.c) is missing",
                                             special[k].name);
                }
        }
        return 0;
}

int mcp_tools_check(const char *json, struct sbx_error *err)
{
        struct catalog c;
        int r = catalog_load(json ? json : mcp_tools_json, &c, err);

        catalog_free(&c);
        return r;
}

static pthread_once_t catalog_once = PTHREAD_ONCE_INIT;
static struct catalog catalog;
static int catalog_result;

static void catalog_init_once(void)
{
        struct sbx_error err = {0};

        catalog_result = catalog_load(mcp_tools_json, &catalog, &err);
        if (catalog_result < 0)
                log_error("mcp: the built-in tool catalog (schemas/mcp_tools.json) is broken: %s", err.msg);
}

int mcp_tools_init(void)
{
        pthread_once(&catalog_once, catalog_init_once);
        return catalog_result;
}

size_t mcp_tool_count(void)
{
        return mcp_tools_init() < 0 ? 0 : catalog.n;
}

const char *mcp_tool_name(size_t i)
{
        return i < mcp_tool_count() ? catalog.tools[i].name : NULL;
}

const struct mcp_tool *mcp_tool_find(const char *name)
{
        for (size_t i = 0; name && i < mcp_tool_count(); i++)
                if (strcmp(catalog.tools[i].name, name) == 0)
                        return &catalog.tools[i];
        return NULL;
}

cJSON *mcp_tools_list(int rank)
{
        cJSON *list = cJSON_CreateArray();

        for (size_t i = 0; i < mcp_tool_count(); i++) {
                const struct mcp_tool *t = &catalog.tools[i];
                cJSON *o = cJSON_CreateObject();

                cJSON_AddStringToObject(o, "name", t->name);
                if (rank >= MCP_REV_2025_06_18)
                        cJSON_AddStringToObject(o, "title", t->title);
                cJSON_AddStringToObject(o, "description", t->description);
                cJSON_AddItemToObject(o, "inputSchema", cJSON_Duplicate(t->input_schema, true));
                if (rank >= MCP_REV_2025_06_18)
                        cJSON_AddItemToObject(o, "outputSchema", cJSON_Duplicate(t->output_schema, true));
                if (rank >= MCP_REV_2025_03_26)
                        cJSON_AddItemToObject(o, "annotations", cJSON_Duplicate(t->annotations, true));
                cJSON_AddItemToArray(list, o);
        }
        return list;
}
