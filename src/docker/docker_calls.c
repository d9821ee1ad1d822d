/* docker_calls.c — the Docker client's plain request/reply calls: images,
 * containers (create, start, stop, kill, remove, rename, inspect, list),
 * logs, stats, archive and networks. Each is one docker_http or
 * docker_call (docker.c) and a JSON shape from docker_json.c.
 *
 * No state and no locks of its own: everything runs on the calling
 * thread's handle. Low module: failures are returned with an sbx_error,
 * logged at debug at most. */
#include "docker_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "sandboxd/log.h"

static inline void curl_freep(char **p)
{
        curl_free(*p);
}
#define _cleanup_curl_free_ _cleanup_(curl_freep)

#define CHECK_PATH(p, err)                                                                                             \
        do {                                                                                                           \
                if (!(p))                                                                                              \
                        return sbx_error_set(err, -EINVAL, 0, "missing or invalid id");                                \
        } while (0)

/* "/containers/<escaped id><query><escaped value>" into *ret: a call whose
 * query parameter is tenant-chosen text (a name, a path; `missing` is the
 * error when it is empty). */
static int container_path_param(const char *id, const char *query, const char *value, const char *missing, char **ret,
                                struct sbx_error *err)
{
        _cleanup_free_ char *suffix = NULL;
        char *ev;

        if (!value || !*value)
                return sbx_error_set(err, -EINVAL, 0, "%s", missing);
        ev = curl_easy_escape(NULL, value, 0);
        if (!ev)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (asprintf(&suffix, "%s%s", query, ev) < 0)
                suffix = NULL;
        curl_free(ev);
        if (!suffix)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        *ret = docker_path_with_id("/containers", id, suffix, false);
        CHECK_PATH(*ret, err);
        return 0;
}

/* ---- images ---- */

int docker_image_inspect(struct docker *d, const char *image, struct docker_image_info *ret, struct sbx_error *err)
{
        _cleanup_free_ char *path = docker_path_with_id("/images", image, "/json", true);
        struct docker_image_info info = {0};
        const cJSON *digests, *labels;
        cJSON *j = NULL;
        int r;

        CHECK_PATH(path, err);
        r = docker_call(d, "GET", path, NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        sbx_strlcpy(info.id, docker_json_str(j, "Id"), sizeof(info.id));
        digests = cJSON_GetObjectItemCaseSensitive(j, "RepoDigests");
        if (cJSON_IsArray(digests) && cJSON_IsString(cJSON_GetArrayItem(digests, 0)))
                sbx_strlcpy(info.digest, cJSON_GetArrayItem(digests, 0)->valuestring, sizeof(info.digest));
        labels = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "Config"), "Labels");
        sbx_strlcpy(info.recipe, docker_json_str(labels, "sandboxd.recipe"), sizeof(info.recipe));
        cJSON_Delete(j);
        *ret = info;
        return 0;
}

/* ---- containers ---- */

int docker_container_create(struct docker *d, const struct docker_container_spec *spec, char ret_id[65],
                            struct sbx_error *err)
{
        _cleanup_free_ char *body = NULL, *path = NULL;
        _cleanup_curl_free_ char *ename = NULL;
        cJSON *j = NULL;
        const char *id;
        int r;

        if (!spec || !spec->image || !*spec->image)
                return sbx_error_set(err, -EINVAL, 0, "container spec without an image");
        body = docker_container_spec_to_json(spec);
        if (!body)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (spec->name && *spec->name) {
                ename = curl_easy_escape(NULL, spec->name, 0);
                if (!ename || asprintf(&path, "/containers/create?name=%s", ename) < 0)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        } else if (!(path = strdup("/containers/create")))
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        r = docker_call(d, "POST", path, body, true, 0, 0, &j, err);
        if (r < 0)
                return r;
        id = docker_json_str(j, "Id");
        if (!id || strlen(id) != 64) {
                cJSON_Delete(j);
                return sbx_error_set(err, -EPROTO, 201, "Docker create reply has no container Id");
        }
        memcpy(ret_id, id, 65);
        cJSON_Delete(j);
        return 0;
}

int docker_container_start(struct docker *d, const char *id, struct sbx_error *err)
{
        _cleanup_free_ char *path = docker_path_with_id("/containers", id, "/start", false);

        CHECK_PATH(path, err);
        /* 304: already running — the caller's goal is met */
        return docker_call(d, "POST", path, NULL, false, 304, 0, NULL, err);
}

int docker_container_stop(struct docker *d, const char *id, int timeout_s, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        char suffix[32];

        if (timeout_s < 0)
                timeout_s = 0;
        snprintf(suffix, sizeof(suffix), "/stop?t=%d", timeout_s);
        path = docker_path_with_id("/containers", id, suffix, false);
        CHECK_PATH(path, err);
        /* the engine waits up to t seconds before SIGKILL: extend our bound */
        return docker_call(d, "POST", path, NULL, false, 304, (long)timeout_s * 1000, NULL, err);
}

int docker_container_kill(struct docker *d, const char *id, const char *signal, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL, *suffix = NULL;
        _cleanup_curl_free_ char *esig = NULL;

        if (signal && *signal) {
                esig = curl_easy_escape(NULL, signal, 0);
                if (!esig || asprintf(&suffix, "/kill?signal=%s", esig) < 0)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        path = docker_path_with_id("/containers", id, suffix ? suffix : "/kill", false);
        CHECK_PATH(path, err);
        return docker_call(d, "POST", path, NULL, false, 0, 0, NULL, err);
}

int docker_container_remove(struct docker *d, const char *id, bool force, struct sbx_error *err)
{
        _cleanup_free_ char *path = docker_path_with_id("/containers", id, force ? "?force=1&v=1" : "?v=1", false);

        CHECK_PATH(path, err);
        return docker_call(d, "DELETE", path, NULL, false, 0, 0, NULL, err);
}

/* POST /containers/{id}/pause | unpause (the cgroup freezer). */
static int pause_call(struct docker *d, const char *id, const char *what, struct sbx_error *err)
{
        _cleanup_free_ char *path = docker_path_with_id("/containers", id, what, false);

        CHECK_PATH(path, err);
        return docker_call(d, "POST", path, NULL, false, 0, 0, NULL, err);
}

int docker_container_pause(struct docker *d, const char *id, struct sbx_error *err)
{
        return pause_call(d, id, "/pause", err);
}

int docker_container_unpause(struct docker *d, const char *id, struct sbx_error *err)
{
        return pause_call(d, id, "/unpause", err);
}

int docker_container_rename(struct docker *d, const char *id, const char *new_name, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        int r = container_path_param(id, "/rename?name=", new_name, "rename without a new name", &path, err);

        return r < 0 ? r : docker_call(d, "POST", path, NULL, true, 0, 0, NULL, err);
}

int docker_container_inspect(struct docker *d, const char *id, struct docker_container_info *ret, struct sbx_error *err)
{
        _cleanup_free_ char *path = docker_path_with_id("/containers", id, "/json", false);
        struct docker_reply rep;
        int r;

        CHECK_PATH(path, err);
        r = docker_http(d, "GET", path, NULL, NULL, 0, 0, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200)
                r = docker_reply_error(&rep, false, err);
        else if (docker_container_info_parse(rep.body, ret) < 0)
                r = sbx_error_set(err, -EPROTO, 200, "unparseable inspect reply for container %s", id);
        docker_reply_done(&rep);
        return r;
}

cJSON *docker_filters_new(const char *const *label_filters)
{
        cJSON *f = cJSON_CreateObject(), *labels;

        if (!f)
                return NULL;
        if (label_filters && label_filters[0]) {
                labels = cJSON_AddArrayToObject(f, "label");
                for (size_t i = 0; labels && label_filters[i]; i++)
                        cJSON_AddItemToArray(labels, cJSON_CreateString(label_filters[i]));
        }
        return f;
}

/* prefix + the escaped JSON filters on labels (a list call's path). */
static int filtered_path(const char *prefix, const char *const *label_filters, char **ret, struct sbx_error *err)
{
        _cleanup_free_ char *fjson = NULL;
        cJSON *f = docker_filters_new(label_filters);
        char *efilters = NULL;
        int r;

        fjson = f ? cJSON_PrintUnformatted(f) : NULL;
        cJSON_Delete(f);
        if (!fjson || !(efilters = curl_easy_escape(NULL, fjson, 0)))
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        r = asprintf(ret, "%s%s", prefix, efilters);
        curl_free(efilters);
        if (r < 0) {
                *ret = NULL;
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        return 0;
}

int docker_container_list(struct docker *d, const char *const *label_filters, bool all,
                          struct docker_container_summary **ret_list, size_t *ret_n, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        struct docker_reply rep;
        int r;

        r = filtered_path(all ? "/containers/json?all=1&filters=" : "/containers/json?all=0&filters=", label_filters,
                          &path, err);
        if (r < 0)
                return r;
        r = docker_http(d, "GET", path, NULL, NULL, 0, 0, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200)
                r = docker_reply_error(&rep, false, err);
        else if ((r = docker_container_list_parse(rep.body, ret_list, ret_n)) < 0)
                r = sbx_error_set(err, r, 200, "unparseable container list reply");
        docker_reply_done(&rep);
        return r;
}

/* ---- logs ---- */

/* Is this body a multiplexed stream? Engines ≥ API 1.42 say so in the
 * Content-Type; older ones send application/vnd.docker.raw-stream for both,
 * so look at the first header: a TTY container's text is very unlikely to
 * start with {0|1|2, 0, 0, 0}. */
static bool body_is_multiplexed(const struct docker_reply *rep)
{
        const unsigned char *b = (const unsigned char *)rep->body;

        if (strstr(rep->content_type, "multiplexed"))
                return true;
        if (rep->len == 0)
                return false;
        return rep->len >= 8 && b[0] <= 3 && b[1] == 0 && b[2] == 0 && b[3] == 0;
}

int docker_container_logs(struct docker *d, const char *id, int tail_lines, char **ret_text, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        char suffix[64];
        struct docker_reply rep;
        char *out;
        size_t n = 0;
        int r;

        if (tail_lines >= 0)
                snprintf(suffix, sizeof(suffix), "/logs?stdout=1&stderr=1&tail=%d", tail_lines);
        else
                snprintf(suffix, sizeof(suffix), "/logs?stdout=1&stderr=1&tail=all");
        path = docker_path_with_id("/containers", id, suffix, false);
        CHECK_PATH(path, err);
        r = docker_http(d, "GET", path, NULL, NULL, 0, 0, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200) {
                r = docker_reply_error(&rep, false, err);
                goto out;
        }
        if (!body_is_multiplexed(&rep)) {
                *ret_text = TAKE_PTR(rep.body);
                goto out;
        }
        /* demultiplex in place: payload never grows */
        out = rep.body;
        {
                struct docker_demux m;
                size_t off = 0;
                docker_demux_init(&m);
                while (off < rep.len) {
                        enum docker_stream_kind kind;
                        const void *payload;
                        size_t plen;
                        ssize_t used =
                                docker_demux_next(&m, rep.body + off, rep.len - off, SIZE_MAX, &kind, &payload, &plen);
                        if (used < 0) {
                                r = sbx_error_set(err, -EPROTO, 200, "malformed log stream of container %s", id);
                                goto out;
                        }
                        if (plen > 0) {
                                memmove(out + n, payload, plen);
                                n += plen;
                        }
                        off += (size_t)used;
                }
        }
        out[n] = '\0';
        *ret_text = TAKE_PTR(rep.body);
out:
        docker_reply_done(&rep);
        return r;
}

/* ---- stats ---- */

int docker_container_stats(struct docker *d, const char *id, struct docker_stats *ret, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        struct docker_stats s = {0};
        const cJSON *mem, *pids, *cpu;
        cJSON *j = NULL;
        int r;

        /* one-shot appeared in API 1.41; older engines ignore it and take
         * ~1 s for a second sample, which the client timeout still bounds */
        path = docker_path_with_id("/containers", id, "/stats?stream=false&one-shot=true", false);
        CHECK_PATH(path, err);
        r = docker_call(d, "GET", path, NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        mem = cJSON_GetObjectItemCaseSensitive(j, "memory_stats");
        pids = cJSON_GetObjectItemCaseSensitive(j, "pids_stats");
        cpu = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "cpu_stats"), "cpu_usage");
        s.memory_usage = (uint64_t)docker_json_i64(mem, "usage", 0);
        s.memory_limit = (uint64_t)docker_json_i64(mem, "limit", 0);
        s.pids = (uint64_t)docker_json_i64(pids, "current", 0);
        s.cpu_total_ns = (uint64_t)docker_json_i64(cpu, "total_usage", 0);
        cJSON_Delete(j);
        *ret = s;
        return 0;
}

/* ---- archive ---- */

int docker_archive_put(struct docker *d, const char *id, const char *dir, const void *tar, size_t len,
                       struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        struct docker_reply rep;
        int r;

        if (!tar && len > 0)
                return sbx_error_set(err, -EINVAL, 0, "archive put needs a directory and a tar");
        r = container_path_param(id, "/archive?path=", dir, "archive put needs a directory and a tar", &path, err);
        if (r < 0)
                return r;
        /* big uploads: give each MiB a second on top of the usual bound */
        r = docker_http(d, "PUT", path, "application/x-tar", tar, len, (long)(len >> 20) * 1000, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200)
                r = docker_reply_error(&rep, false, err);
        docker_reply_done(&rep);
        return r;
}

int docker_archive_get(struct docker *d, const char *id, const char *p, size_t max_bytes, void **ret_tar,
                       size_t *ret_len, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        struct docker_reply rep;
        int r;

        r = container_path_param(id, "/archive?path=", p, "archive get needs a path", &path, err);
        if (r < 0)
                return r;
        r = docker_get_ok(d, path, (long)(max_bytes >> 20) * 1000, max_bytes, &rep, err);
        if (r < 0)
                return r;
        *ret_len = rep.len;
        *ret_tar = TAKE_PTR(rep.body);
        return 0;
}

/* ---- networks ---- */

int docker_network_create(struct docker *d, const char *name, const struct docker_label *labels, size_t n_labels,
                          const struct docker_label *options, size_t n_options, struct sbx_error *err)
{
        _cleanup_free_ char *body = NULL;
        cJSON *j = cJSON_CreateObject(), *l, *o;

        if (!name || !*name)
                return sbx_error_set(err, -EINVAL, 0, "network without a name");
        if (!j)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        cJSON_AddStringToObject(j, "Name", name);
        cJSON_AddStringToObject(j, "Driver", "bridge");
        cJSON_AddBoolToObject(j, "CheckDuplicate", true);
        l = cJSON_AddObjectToObject(j, "Labels");
        o = cJSON_AddObjectToObject(j, "Options");
        for (size_t i = 0; l && i < n_labels; i++)
                cJSON_AddStringToObject(l, labels[i].key, labels[i].value);
        for (size_t i = 0; o && i < n_options; i++)
                cJSON_AddStringToObject(o, options[i].key, options[i].value);
        body = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!body)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        return docker_call(d, "POST", "/networks/create", body, true, 0, 0, NULL, err);
}

int docker_network_inspect_option(struct docker *d, const char *name, const char *option, char *ret, size_t size,
                                  struct sbx_error *err)
{
        _cleanup_free_ char *path = docker_path_with_id("/networks", name, NULL, false);
        cJSON *j = NULL;
        const char *v;
        int r;

        CHECK_PATH(path, err);
        r = docker_call(d, "GET", path, NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        v = docker_json_str(cJSON_GetObjectItemCaseSensitive(j, "Options"), option);
        sbx_strlcpy(ret, v ? v : "", size);
        cJSON_Delete(j);
        return 0;
}

int docker_network_remove(struct docker *d, const char *name, struct sbx_error *err)
{
        _cleanup_free_ char *path = docker_path_with_id("/networks", name, NULL, false);

        CHECK_PATH(path, err);
        return docker_call(d, "DELETE", path, NULL, false, 0, 0, NULL, err);
}

int docker_network_list(struct docker *d, const char *const *label_filters, char (**ret_names)[128], size_t *ret_n,
                        struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        char(*names)[128] = NULL;
        cJSON *j = NULL, *it;
        size_t n = 0;
        int r;

        r = filtered_path("/networks?filters=", label_filters, &path, err);
        if (r < 0)
                return r;
        r = docker_call(d, "GET", path, NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        names = calloc((size_t)cJSON_GetArraySize(j) + 1, sizeof(*names));
        if (!names) {
                cJSON_Delete(j);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        cJSON_ArrayForEach(it, j) {
                const char *name = docker_json_str(it, "Name");
                if (name && *name)
                        sbx_strlcpy(names[n++], name, sizeof(names[0]));
        }
        cJSON_Delete(j);
        *ret_names = names;
        *ret_n = n;
        return 0;
}
