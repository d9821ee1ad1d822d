/* engine.c — what every engine shares behind the seam (engine.h): the
 * capability names, label lookup, the check of a spec against what an
 * engine can enforce, and the engine's destructor. No state, no locks. */
#include "sandboxd/engine.h"

#include <stdlib.h>
#include <string.h>

static const char *const cap_names[ENGINE_CAP_COUNT] = {
        "pids_limit", "memory_swap", "cpu_weight",       "oom_score_adj", "runtime_class", "pause",          "exec",
        "events",     "stats",       "isolated_network", "tmpfs_size",    "logs",          "memory_capture",
};

const char *engine_cap_name(unsigned i)
{
        return i < ENGINE_CAP_COUNT ? cap_names[i] : NULL;
}

const char *engine_label_get(const struct engine_kv *kvs, size_t n, const char *key)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(kvs[i].key, key) == 0)
                        return kvs[i].value;
        return NULL;
}

unsigned engine_spec_unenforced(const struct engine *e, const struct engine_spec *spec)
{
        unsigned want = 0;

        if (spec->pids_limit > 0)
                want |= ENGINE_CAP_PIDS_LIMIT;
        if (spec->memory_swap_bytes > 0)
                want |= ENGINE_CAP_MEMORY_SWAP;
        if (spec->cpu_weight > 0)
                want |= ENGINE_CAP_CPU_WEIGHT;
        if (spec->oom_score_adj != 0)
                want |= ENGINE_CAP_OOM_SCORE_ADJ;
        if (spec->runtime_class && *spec->runtime_class)
                want |= ENGINE_CAP_RUNTIME_CLASS;
        if (spec->network)
                want |= ENGINE_CAP_ISOLATED_NETWORK;
        for (size_t i = 0; i < spec->n_tmpfs; i++)
                if (spec->tmpfs[i].size_bytes > 0)
                        want |= ENGINE_CAP_TMPFS_SIZE;
        return want & ~e->capabilities;
}

void engine_exec_result_done(struct engine_exec_result *r)
{
        if (!r)
                return;
        free(r->out);
        free(r->err);
        r->out = r->err = NULL;
        r->out_len = r->err_len = 0;
}

void engine_free(struct engine *e)
{
        if (e)
                e->ops->free(e);
}
