/* docker_json.c — the JSON shapes of the Engine API that sandboxd uses: the
 * container create body built from struct docker_container_spec, and the
 * parsers for inspect, list and event objects. Pure functions over cJSON: no
 * I/O, no state, no locks, so the unit tests exercise them without dockerd. */
#include "docker_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- accessors ---- */

const char *docker_json_str(const cJSON *obj, const char *name)
{
        const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
        return cJSON_IsString(it) ? it->valuestring : NULL;
}

int64_t docker_json_i64(const cJSON *obj, const char *name, int64_t def)
{
        const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
        return cJSON_IsNumber(it) ? (int64_t)it->valuedouble : def;
}

bool docker_json_bool(const cJSON *obj, const char *name)
{
        const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
        return cJSON_IsTrue(it);
}

const char *docker_kv_get(const struct docker_kv *kvs, size_t n, const char *key)
{
        for (size_t i = 0; kvs && key && i < n; i++)
                if (strcmp(kvs[i].key, key) == 0)
                        return kvs[i].value;
        return NULL;
}

/* Does `key` appear in filters ("key" or "key=value")? */
static bool key_in_filters(const char *key, const char *const *filters)
{
        size_t kl = strlen(key);

        for (size_t i = 0; filters && filters[i]; i++)
                if (strncmp(filters[i], key, kl) == 0 && (filters[i][kl] == '\0' || filters[i][kl] == '='))
                        return true;
        return false;
}

size_t docker_labels_collect(const cJSON *map, const char *const *extra, bool include_rest, struct docker_kv *kvs,
                             size_t cap)
{
        const cJSON *it;
        size_t n = 0;

        if (!cJSON_IsObject(map))
                return 0;
        /* pass 0: sandboxd.*, pass 1: filtered keys, pass 2: the rest */
        for (int pass = 0; pass < 3; pass++) {
                if (pass == 2 && !include_rest)
                        break;
                cJSON_ArrayForEach(it, map) {
                        bool ours = strncmp(it->string, "sandboxd.", 9) == 0;
                        bool wanted = !ours && key_in_filters(it->string, extra);
                        if (!cJSON_IsString(it))
                                continue;
                        if ((pass == 0 && !ours) || (pass == 1 && !wanted) || (pass == 2 && (ours || wanted)))
                                continue;
                        if (n == cap)
                                return n;
                        /* a key or value that does not fit would be a lie: skip it */
                        if (strlen(it->string) >= sizeof(kvs[n].key) || strlen(it->valuestring) >= sizeof(kvs[n].value))
                                continue;
                        sbx_strlcpy(kvs[n].key, it->string, sizeof(kvs[n].key));
                        sbx_strlcpy(kvs[n].value, it->valuestring, sizeof(kvs[n].value));
                        n++;
                }
        }
        return n;
}

/* ---- create body ---- */

static cJSON *string_array(const char *const *v)
{
        cJSON *a = cJSON_CreateArray();

        for (size_t i = 0; a && v && v[i]; i++)
                cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
        return a;
}

static void add_string_array(cJSON *obj, const char *name, const char *const *v)
{
        if (v)
                cJSON_AddItemToObject(obj, name, string_array(v));
}

static void add_string(cJSON *obj, const char *name, const char *v)
{
        if (v && *v)
                cJSON_AddStringToObject(obj, name, v);
}

char *docker_container_spec_to_json(const struct docker_container_spec *spec)
{
        cJSON *root, *host;
        char *out = NULL;

        if (!spec || !spec->image)
                return NULL;
        root = cJSON_CreateObject();
        if (!root)
                return NULL;
        host = cJSON_AddObjectToObject(root, "HostConfig");
        if (!host)
                goto out;

        cJSON_AddStringToObject(root, "Image", spec->image);
        {
                /* the optional members: absent when unset */
                const struct {
                        cJSON *obj;
                        const char *name, *value;
                } strings[] = {
                        {root, "User", spec->user},         {root, "WorkingDir", spec->workdir},
                        {root, "Hostname", spec->hostname}, {host, "NetworkMode", spec->network_mode},
                        {host, "Runtime", spec->runtime},
                };
                const struct {
                        cJSON *obj;
                        const char *name;
                        const char *const *values;
                } arrays[] = {
                        {root, "Cmd", spec->cmd},
                        {root, "Entrypoint", spec->entrypoint},
                        {root, "Env", spec->env},
                        {host, "Binds", spec->binds},
                        {host, "CapDrop", spec->cap_drop},
                        {host, "CapAdd", spec->cap_add},
                        {host, "SecurityOpt", spec->security_opt},
                };
                for (size_t i = 0; i < ELEMENTSOF(strings); i++)
                        add_string(strings[i].obj, strings[i].name, strings[i].value);
                for (size_t i = 0; i < ELEMENTSOF(arrays); i++)
                        add_string_array(arrays[i].obj, arrays[i].name, arrays[i].values);
        }
        cJSON_AddBoolToObject(root, "Tty", false);
        cJSON_AddBoolToObject(root, "OpenStdin", spec->open_stdin);
        cJSON_AddBoolToObject(root, "AttachStdin", false);
        cJSON_AddBoolToObject(root, "AttachStdout", false);
        cJSON_AddBoolToObject(root, "AttachStderr", false);

        if (spec->n_labels > 0) {
                cJSON *labels = cJSON_AddObjectToObject(root, "Labels");
                for (size_t i = 0; labels && i < spec->n_labels; i++)
                        if (spec->labels[i].key)
                                cJSON_AddStringToObject(labels, spec->labels[i].key,
                                                        spec->labels[i].value ? spec->labels[i].value : "");
        }

        if (spec->n_ports > 0) {
                cJSON *exposed = cJSON_AddObjectToObject(root, "ExposedPorts");
                cJSON *bindings = cJSON_AddObjectToObject(host, "PortBindings");
                for (size_t i = 0; exposed && bindings && i < spec->n_ports; i++) {
                        const struct docker_port_binding *pb = &spec->ports[i];
                        char key[32], hp[16];
                        cJSON *list, *b;

                        snprintf(key, sizeof(key), "%d/tcp", pb->container_port);
                        snprintf(hp, sizeof(hp), "%d", pb->host_port);
                        if (!cJSON_GetObjectItemCaseSensitive(exposed, key))
                                cJSON_AddItemToObject(exposed, key, cJSON_CreateObject());
                        list = cJSON_GetObjectItemCaseSensitive(bindings, key);
                        if (!list)
                                list = cJSON_AddArrayToObject(bindings, key);
                        b = cJSON_CreateObject();
                        if (!list || !b) {
                                cJSON_Delete(b);
                                continue;
                        }
                        cJSON_AddStringToObject(b, "HostIp", pb->host_ip ? pb->host_ip : "127.0.0.1");
                        cJSON_AddStringToObject(b, "HostPort", hp);
                        cJSON_AddItemToArray(list, b);
                }
        }

        if (spec->tmpfs) {
                cJSON *tmpfs = cJSON_AddObjectToObject(host, "Tmpfs");
                for (size_t i = 0; tmpfs && spec->tmpfs[i]; i++) {
                        /* "/tmp:rw,noexec,size=64m" → "/tmp": "rw,noexec,size=64m" */
                        const char *colon = strchr(spec->tmpfs[i], ':');
                        char *p = colon ? strndup(spec->tmpfs[i], (size_t)(colon - spec->tmpfs[i]))
                                        : strdup(spec->tmpfs[i]);
                        if (p)
                                cJSON_AddStringToObject(tmpfs, p, colon ? colon + 1 : "");
                        free(p);
                }
        }
        if (spec->pids_limit)
                cJSON_AddNumberToObject(host, "PidsLimit", (double)spec->pids_limit);
        if (spec->memory) {
                cJSON_AddNumberToObject(host, "Memory", (double)spec->memory);
                cJSON_AddNumberToObject(host, "MemorySwap",
                                        (double)(spec->memory_swap ? spec->memory_swap : spec->memory));
        } else if (spec->memory_swap)
                cJSON_AddNumberToObject(host, "MemorySwap", (double)spec->memory_swap);
        if (spec->nano_cpus)
                cJSON_AddNumberToObject(host, "NanoCpus", (double)spec->nano_cpus);
        if (spec->cpu_shares)
                cJSON_AddNumberToObject(host, "CpuShares", (double)spec->cpu_shares);
        if (spec->oom_score_adj)
                cJSON_AddNumberToObject(host, "OomScoreAdj", spec->oom_score_adj);
        cJSON_AddBoolToObject(host, "ReadonlyRootfs", spec->readonly_rootfs);
        cJSON_AddBoolToObject(host, "Init", spec->init);
        cJSON_AddBoolToObject(host, "Privileged", spec->privileged);

        out = cJSON_PrintUnformatted(root);
out:
        cJSON_Delete(root);
        return out;
}

/* ---- inspect ---- */

int docker_container_info_parse(const char *json, struct docker_container_info *ret)
{
        struct docker_container_info info = {0};
        const cJSON *state, *config, *host, *nets, *it;
        const char *name;
        cJSON *j;

        if (!json || !(j = cJSON_Parse(json)))
                return -EPROTO;
        if (!cJSON_IsObject(j) || !docker_json_str(j, "Id")) {
                cJSON_Delete(j);
                return -EPROTO;
        }
        state = cJSON_GetObjectItemCaseSensitive(j, "State");
        config = cJSON_GetObjectItemCaseSensitive(j, "Config");
        host = cJSON_GetObjectItemCaseSensitive(j, "HostConfig");
        nets = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "NetworkSettings"), "Networks");

        sbx_strlcpy(info.id, docker_json_str(j, "Id"), sizeof(info.id));
        name = docker_json_str(j, "Name");
        sbx_strlcpy(info.name, name && name[0] == '/' ? name + 1 : name, sizeof(info.name));
        sbx_strlcpy(info.image, docker_json_str(config, "Image"), sizeof(info.image));
        sbx_strlcpy(info.image_id, docker_json_str(j, "Image"), sizeof(info.image_id));
        info.restart_count = (int)docker_json_i64(j, "RestartCount", 0);

        sbx_strlcpy(info.status, docker_json_str(state, "Status"), sizeof(info.status));
        info.running = docker_json_bool(state, "Running");
        info.restarting = docker_json_bool(state, "Restarting");
        info.oom_killed = docker_json_bool(state, "OOMKilled");
        info.dead = docker_json_bool(state, "Dead");
        info.exit_code = (int)docker_json_i64(state, "ExitCode", 0);
        info.pid = (int)docker_json_i64(state, "Pid", 0);
        sbx_strlcpy(info.started_at, docker_json_str(state, "StartedAt"), sizeof(info.started_at));
        sbx_strlcpy(info.finished_at, docker_json_str(state, "FinishedAt"), sizeof(info.finished_at));
        sbx_strlcpy(info.error, docker_json_str(state, "Error"), sizeof(info.error));

        sbx_strlcpy(info.network_mode, docker_json_str(host, "NetworkMode"), sizeof(info.network_mode));
        sbx_strlcpy(info.runtime, docker_json_str(host, "Runtime"), sizeof(info.runtime));
        info.readonly_rootfs = docker_json_bool(host, "ReadonlyRootfs");
        info.init = docker_json_bool(host, "Init");
        info.privileged = docker_json_bool(host, "Privileged");
        info.memory = docker_json_i64(host, "Memory", 0);
        info.memory_swap = docker_json_i64(host, "MemorySwap", 0);
        info.nano_cpus = docker_json_i64(host, "NanoCpus", 0);
        info.pids_limit = docker_json_i64(host, "PidsLimit", 0);
        info.cpu_shares = docker_json_i64(host, "CpuShares", 0);
        info.oom_score_adj = (int)docker_json_i64(host, "OomScoreAdj", 0);

        if (!cJSON_IsObject(nets))
                nets = NULL;
        cJSON_ArrayForEach(it, nets) {
                if (it->string && strcmp(it->string, "none") != 0)
                        info.has_network = true;
        }

        info.n_labels = docker_labels_collect(cJSON_GetObjectItemCaseSensitive(config, "Labels"), NULL, true,
                                              info.labels, DOCKER_MAX_LABELS);
        cJSON_Delete(j);
        *ret = info;
        return 0;
}

/* ---- list ---- */

int docker_container_list_parse(const char *json, struct docker_container_summary **ret_list, size_t *ret_n)
{
        struct docker_container_summary *list;
        const cJSON *it;
        size_t n = 0;
        cJSON *j;

        if (!json || !(j = cJSON_Parse(json)))
                return -EPROTO;
        if (!cJSON_IsArray(j)) {
                cJSON_Delete(j);
                return -EPROTO;
        }
        /* calloc(0) may return NULL: always ask for at least one slot */
        list = calloc((size_t)cJSON_GetArraySize(j) + 1, sizeof(*list));
        if (!list) {
                cJSON_Delete(j);
                return -ENOMEM;
        }
        cJSON_ArrayForEach(it, j) {
                struct docker_container_summary *s = &list[n];
                const cJSON *names = cJSON_GetObjectItemCaseSensitive(it, "Names");
                const cJSON *first = cJSON_GetArrayItem(names, 0);

                if (!docker_json_str(it, "Id"))
                        continue;
                sbx_strlcpy(s->id, docker_json_str(it, "Id"), sizeof(s->id));
                if (cJSON_IsString(first))
                        sbx_strlcpy(s->name, first->valuestring[0] == '/' ? first->valuestring + 1 : first->valuestring,
                                    sizeof(s->name));
                sbx_strlcpy(s->state, docker_json_str(it, "State"), sizeof(s->state));
                s->created = docker_json_i64(it, "Created", 0);
                s->n_labels = docker_labels_collect(cJSON_GetObjectItemCaseSensitive(it, "Labels"), NULL, true,
                                                    s->labels, DOCKER_MAX_LABELS);
                n++;
        }
        cJSON_Delete(j);
        *ret_list = list;
        *ret_n = n;
        return 0;
}

/* ---- events ---- */

/* cJSON keeps numbers as doubles, which cannot hold a nanosecond Unix time
 * exactly (2^53 ns is ~104 days). Read the top-level "timeNano" digits from
 * the text: the engine writes it after Actor, so take the last occurrence;
 * cross-check it against the double so a label cannot spoof it. */
static int64_t raw_time_nano(const char *json, size_t len, double approx)
{
        static const char key[] = "\"timeNano\":";
        const char *last = NULL, *p = json, *end = json + len;

        while (p < end && (p = memmem(p, (size_t)(end - p), key, sizeof(key) - 1))) {
                last = p;
                p += sizeof(key) - 1;
        }
        if (last) {
                long long v = strtoll(last + sizeof(key) - 1, NULL, 10);
                double diff = (double)v - approx;
                if (diff > -1e4 && diff < 1e4)
                        return (int64_t)v;
        }
        return (int64_t)approx;
}

int docker_event_parse_filtered(const char *json, size_t len, const char *const *filters, struct docker_event *ret)
{
        struct docker_event ev = {.exit_code = -1};
        const cJSON *actor, *attrs, *tn;
        const char *action, *id, *code;
        cJSON *j;

        if (!json || !(j = cJSON_ParseWithLength(json, len)))
                return -EPROTO;
        if (!cJSON_IsObject(j)) {
                cJSON_Delete(j);
                return -EPROTO;
        }
        actor = cJSON_GetObjectItemCaseSensitive(j, "Actor");
        attrs = cJSON_GetObjectItemCaseSensitive(actor, "Attributes");

        sbx_strlcpy(ev.type, docker_json_str(j, "Type"), sizeof(ev.type));
        action = docker_json_str(j, "Action");
        if (!action)
                action = docker_json_str(j, "status"); /* pre-1.22 shape */
        if (action) {
                /* "exec_start: sh -c ...", "health_status: healthy" → the verb */
                size_t n = strcspn(action, ":");
                if (n >= sizeof(ev.action))
                        n = sizeof(ev.action) - 1;
                memcpy(ev.action, action, n);
                ev.action[n] = '\0';
        }
        id = docker_json_str(actor, "ID");
        if (!id)
                id = docker_json_str(j, "id");
        sbx_strlcpy(ev.id, id, sizeof(ev.id));
        code = docker_json_str(attrs, "exitCode");
        if (code)
                ev.exit_code = atoi(code);
        tn = cJSON_GetObjectItemCaseSensitive(j, "timeNano");
        if (cJSON_IsNumber(tn))
                ev.time_nano = raw_time_nano(json, len, tn->valuedouble);
        else
                ev.time_nano = docker_json_i64(j, "time", 0) * 1000000000LL;
        ev.n_labels = docker_labels_collect(attrs, filters, false, ev.labels, DOCKER_MAX_LABELS);
        cJSON_Delete(j);
        if (!ev.action[0]) {
                return -EPROTO;
        }
        *ret = ev;
        return 0;
}

int docker_event_parse(const char *json, struct docker_event *ret)
{
        return json ? docker_event_parse_filtered(json, strlen(json), NULL, ret) : -EPROTO;
}
