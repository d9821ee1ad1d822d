/* gc_report.c — the report of a gc run: freeing it, the table, the JSON,
 * and the `sandboxd --gc` front that prints one (gc.c does the work). */
#include "sandboxd/gc.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"

void gc_report_done(struct gc_report *r)
{
        if (!r)
                return;
        free(r->items);
        r->items = NULL;
        r->n_items = 0;
}

/* ---- output ---- */

static void human_bytes(uint64_t n, char *buf, size_t size)
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        double v = (double)n;
        size_t u = 0;

        while (v >= 1024 && u + 1 < ELEMENTSOF(units)) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, size, "%" PRIu64 " B", n);
        else
                snprintf(buf, size, "%.1f %s", v, units[u]);
}

static void print_row(FILE *f, const char *name, const struct gc_count *c)
{
        char h[32];
        human_bytes(c->bytes, h, sizeof(h));
        fprintf(f, "%-18s %8" PRIu64 " %14" PRIu64 " %10s %7" PRIu64 "\n", name, c->count, c->bytes, h, c->failed);
}

void gc_report_print_table(const struct gc_report *r, FILE *f)
{
        fprintf(f, "sandboxd gc, instance %s%s\n", r->instance,
                r->dry_run ? ": DRY RUN, nothing was changed (counts are what a real run would remove)" : "");
        fprintf(f, "%-18s %8s %14s %10s %7s\n", "KIND", "COUNT", "BYTES", "SIZE", "FAILED");
        for (size_t k = 0; k < GC_KIND_COUNT; k++)
                print_row(f, gc_kind_name((enum gc_kind)k), &r->kinds[k]);
        print_row(f, "total", &r->total);
        if (r->total.failed) {
                fprintf(f, "\nfailed:\n");
                for (size_t i = 0; i < r->n_items; i++)
                        if (r->items[i].failed)
                                fprintf(f, "  %s %s: %s\n", gc_kind_name(r->items[i].kind), r->items[i].id,
                                        r->items[i].error);
        }
        if (r->items_truncated)
                fprintf(f, "(only the first %d items are listed in the report; the log has all)\n", GC_MAX_ITEMS);
}

static cJSON *count_json(const struct gc_count *c)
{
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        cJSON_AddNumberToObject(o, "count", (double)c->count);
        cJSON_AddNumberToObject(o, "bytes", (double)c->bytes);
        cJSON_AddNumberToObject(o, "failed", (double)c->failed);
        return o;
}

char *gc_report_json(const struct gc_report *r)
{
        _cleanup_(cjson_freep) cJSON *o = cJSON_CreateObject();
        cJSON *kinds, *items;

        if (!o)
                return NULL;
        cJSON_AddBoolToObject(o, "dry_run", r->dry_run);
        cJSON_AddStringToObject(o, "instance", r->instance);
        cJSON_AddNumberToObject(o, "started_at", (double)r->started_at);
        cJSON_AddNumberToObject(o, "duration_ms", (double)r->duration_ms);
        kinds = cJSON_AddObjectToObject(o, "kinds");
        for (size_t k = 0; kinds && k < GC_KIND_COUNT; k++)
                cJSON_AddItemToObject(kinds, gc_kind_name((enum gc_kind)k), count_json(&r->kinds[k]));
        cJSON_AddItemToObject(o, "total", count_json(&r->total));
        items = cJSON_AddArrayToObject(o, "items");
        for (size_t i = 0; items && i < r->n_items; i++) {
                const struct gc_item *it = &r->items[i];
                cJSON *j = cJSON_CreateObject();
                if (!j)
                        return NULL;
                cJSON_AddStringToObject(j, "kind", gc_kind_name(it->kind));
                cJSON_AddStringToObject(j, "id", it->id);
                cJSON_AddStringToObject(j, "user", it->user);
                cJSON_AddStringToObject(j, "session", it->session);
                cJSON_AddStringToObject(j, "reason", it->reason);
                cJSON_AddNumberToObject(j, "bytes", (double)it->bytes);
                cJSON_AddBoolToObject(j, "failed", it->failed);
                if (it->failed)
                        cJSON_AddStringToObject(j, "error", it->error);
                cJSON_AddItemToArray(items, j);
        }
        cJSON_AddBoolToObject(o, "items_truncated", r->items_truncated);
        return cJSON_PrintUnformatted(o);
}

int gc_main(const struct sbx_config *cfg, bool dry_run, bool json, FILE *out)
{
        struct gc_options opts = {.dry_run = dry_run};
        struct gc_report rep = {0};
        struct sbx_error err = {0};
        int r = gc_run(cfg, &opts, &rep, &err);

        if (r < 0) {
                log_error("gc: %s", err.msg);
                if (json) {
                        _cleanup_(cjson_freep) cJSON *o = cJSON_CreateObject();
                        _cleanup_free_ char *s = NULL;
                        if (o) {
                                cJSON_AddBoolToObject(o, "dry_run", dry_run);
                                cJSON_AddStringToObject(o, "instance", cfg->instance);
                                cJSON_AddStringToObject(o, "error", err.msg);
                                s = cJSON_PrintUnformatted(o);
                        }
                        if (s)
                                fprintf(out, "%s\n", s);
                }
                return 1;
        }
        if (json) {
                _cleanup_free_ char *s = gc_report_json(&rep);
                if (!s) {
                        fprintf(stderr, "sandboxd --gc: out of memory\n");
                        gc_report_done(&rep);
                        return 1;
                }
                fprintf(out, "%s\n", s);
        } else {
                gc_report_print_table(&rep, out);
        }
        fflush(out);
        r = rep.total.failed ? 1 : 0;
        gc_report_done(&rep);
        return r;
}
