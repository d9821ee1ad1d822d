/* Unit tests for the Docker client's pure parts: inspect / list / event
 * parsing, the create body built from a spec, the stream demultiplexer and
 * the HTTP status → errno mapping. No dockerd needed. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/docker.h"

#define ID64 "22479858f6c2722a07b146be9c2ffa55e81896f987aac357c051b73401260450"

static const char inspect_running[] =
        "{\"Id\":\"" ID64
        "\",\"Created\":\"2026-11-21T12:08:34.699637585Z\","
        "\"State\":{\"Status\":\"running\",\"Running\":true,\"Paused\":false,\"Restarting\":false,"
        "\"OOMKilled\":false,\"Dead\":false,\"Pid\":17416,\"ExitCode\":0,\"Error\":\"\","
        "\"StartedAt\":\"2026-11-21T12:08:34.947998822Z\",\"FinishedAt\":\"0001-01-01T00:00:00Z\"},"
        "\"Image\":\"sha256:afa0ae2d1f376df53d303fceb95f513cdd22d4bfb0e4c18ea0cfafe045add225\","
        "\"Name\":\"/sbx-u1-s1\",\"RestartCount\":2,"
        "\"HostConfig\":{\"NetworkMode\":\"bridge\",\"Privileged\":false,\"ReadonlyRootfs\":true,\"Init\":true,"
        "\"Memory\":536870912,\"MemorySwap\":536870912,\"NanoCpus\":1000000000,\"PidsLimit\":256,"
        "\"CpuShares\":256,\"OomScoreAdj\":500},"
        "\"Config\":{\"Image\":\"sandboxd/test:latest\",\"Labels\":{"
        "\"org.opencontainers.image.title\":\"t\",\"a\":\"1\",\"sandboxd.user\":\"u1\","
        "\"sandboxd.session\":\"s1\",\"sandboxd.managed\":\"1\"}},"
        "\"NetworkSettings\":{\"Networks\":{\"bridge\":{\"IPAddress\":\"172.17.0.2\"}}}}";

static const char inspect_exited_oom[] =
        "{\"Id\":\"" ID64
        "\",\"Name\":\"/x\","
        "\"State\":{\"Status\":\"exited\",\"Running\":false,\"Restarting\":false,\"OOMKilled\":true,"
        "\"Dead\":false,\"Pid\":0,\"ExitCode\":137,\"Error\":\"\",\"FinishedAt\":\"2026-11-21T12:09:00Z\"},"
        "\"HostConfig\":{\"NetworkMode\":\"none\",\"ReadonlyRootfs\":false,\"Init\":false,\"Privileged\":true},"
        "\"Config\":{\"Image\":\"img\",\"Labels\":null},"
        "\"NetworkSettings\":{\"Networks\":{\"none\":{\"IPAddress\":\"\"}}}}";

Test(docker_parse, inspect_running)
{
        struct docker_container_info info;

        cr_assert_eq(docker_container_info_parse(inspect_running, &info), 0);
        cr_expect_str_eq(info.id, ID64);
        cr_expect_str_eq(info.name, "sbx-u1-s1");
        cr_expect_str_eq(info.image, "sandboxd/test:latest");
        cr_expect_str_eq(info.image_id, "sha256:afa0ae2d1f376df53d303fceb95f513cdd22d4bfb0e4c18ea0cfafe045add225");
        cr_expect_str_eq(info.status, "running");
        cr_expect(info.running);
        cr_expect_not(info.oom_killed);
        cr_expect_eq(info.pid, 17416);
        cr_expect_eq(info.exit_code, 0);
        cr_expect_eq(info.restart_count, 2);
        cr_expect_str_eq(info.started_at, "2026-11-21T12:08:34.947998822Z");
        cr_expect_str_eq(info.network_mode, "bridge");
        cr_expect(info.has_network);
        cr_expect(info.readonly_rootfs);
        cr_expect(info.init);
        cr_expect_not(info.privileged);
        cr_expect_eq(info.memory, 536870912);
        cr_expect_eq(info.memory_swap, 536870912);
        cr_expect_eq(info.nano_cpus, 1000000000);
        cr_expect_eq(info.pids_limit, 256);
        cr_expect_eq(info.cpu_shares, 256);
        cr_expect_eq(info.oom_score_adj, 500);
        cr_assert_eq(info.n_labels, 5);
        /* sandboxd.* first */
        for (size_t i = 0; i < 3; i++)
                cr_expect(strncmp(info.labels[i].key, "sandboxd.", 9) == 0, "label %zu is %s", i, info.labels[i].key);
        cr_expect_str_eq(docker_kv_get(info.labels, info.n_labels, "sandboxd.session"), "s1");
        cr_expect_str_eq(docker_kv_get(info.labels, info.n_labels, "a"), "1");
        cr_expect_null(docker_kv_get(info.labels, info.n_labels, "missing"));
}

Test(docker_parse, inspect_exited_oom_no_network)
{
        struct docker_container_info info;

        cr_assert_eq(docker_container_info_parse(inspect_exited_oom, &info), 0);
        cr_expect_str_eq(info.status, "exited");
        cr_expect_not(info.running);
        cr_expect(info.oom_killed);
        cr_expect_eq(info.exit_code, 137);
        cr_expect_str_eq(info.network_mode, "none");
        cr_expect_not(info.has_network);
        cr_expect(info.privileged);
        cr_expect_eq(info.n_labels, 0);
        cr_expect_str_eq(info.started_at, "");
}

Test(docker_parse, inspect_no_networks_and_custom_network)
{
        struct docker_container_info info;

        cr_assert_eq(docker_container_info_parse("{\"Id\":\"x\",\"NetworkSettings\":{\"Networks\":{}}}", &info), 0);
        cr_expect_not(info.has_network);
        cr_assert_eq(docker_container_info_parse(
                             "{\"Id\":\"x\",\"NetworkSettings\":{\"Networks\":{\"none\":{},\"mynet\":{}}}}", &info),
                     0);
        cr_expect(info.has_network);
}

Test(docker_parse, inspect_labels_overflow_keeps_ours)
{
        char json[8192];
        size_t off = 0;
        struct docker_container_info info;

        off += (size_t)snprintf(json + off, sizeof(json) - off, "{\"Id\":\"x\",\"Config\":{\"Labels\":{");
        for (int i = 0; i < 30; i++)
                off += (size_t)snprintf(json + off, sizeof(json) - off, "\"other%02d\":\"v\",", i);
        off += (size_t)snprintf(json + off, sizeof(json) - off,
                                "\"sandboxd.user\":\"u\",\"sandboxd.instance\":\"i\"}}}");
        cr_assert_eq(docker_container_info_parse(json, &info), 0);
        cr_expect_eq(info.n_labels, DOCKER_MAX_LABELS);
        cr_expect_str_eq(docker_kv_get(info.labels, info.n_labels, "sandboxd.user"), "u");
        cr_expect_str_eq(docker_kv_get(info.labels, info.n_labels, "sandboxd.instance"), "i");
}

Test(docker_parse, inspect_garbage)
{
        struct docker_container_info info;

        cr_expect_eq(docker_container_info_parse("not json", &info), -EPROTO);
        cr_expect_eq(docker_container_info_parse("[1,2]", &info), -EPROTO);
        cr_expect_eq(docker_container_info_parse("{\"message\":\"x\"}", &info), -EPROTO);
        cr_expect_eq(docker_container_info_parse(NULL, &info), -EPROTO);
}

Test(docker_parse, list)
{
        static const char json[] = "[{\"Id\":\"" ID64
                                   "\",\"Names\":[\"/probe1\"],\"Created\":1795262914,\"State\":\"running\","
                                   "\"Labels\":{\"b\":\"2\",\"sandboxd.test.run\":\"probe\"}},"
                                   "{\"Id\":\"abc\",\"Names\":[],\"Created\":5,\"State\":\"exited\",\"Labels\":{}},"
                                   "{\"NoId\":true}]";
        struct docker_container_summary *list = NULL;
        size_t n = 0;

        cr_assert_eq(docker_container_list_parse(json, &list, &n), 0);
        cr_assert_eq(n, 2);
        cr_expect_str_eq(list[0].id, ID64);
        cr_expect_str_eq(list[0].name, "probe1");
        cr_expect_str_eq(list[0].state, "running");
        cr_expect_eq(list[0].created, 1795262914);
        cr_expect_eq(list[0].n_labels, 2);
        cr_expect_str_eq(list[0].labels[0].key, "sandboxd.test.run");
        cr_expect_str_eq(list[1].name, "");
        cr_expect_str_eq(list[1].state, "exited");
        free(list);

        cr_assert_eq(docker_container_list_parse("[]", &list, &n), 0);
        cr_expect_eq(n, 0);
        free(list);
        cr_expect_eq(docker_container_list_parse("{}", &list, &n), -EPROTO);
}

Test(docker_parse, event_die)
{
        static const char json[] =
                "{\"status\":\"die\",\"id\":\"" ID64
                "\",\"from\":\"sandboxd/test:latest\",\"Type\":\"container\","
                "\"Action\":\"die\",\"Actor\":{\"ID\":\"" ID64
                "\",\"Attributes\":{\"exitCode\":\"137\","
                "\"image\":\"sandboxd/test:latest\",\"name\":\"x\",\"sandboxd.session\":\"s1\",\"timeNano\":\"5\","
                "\"other\":\"o\"}},\"scope\":\"local\",\"time\":1795262914,\"timeNano\":1795262914123456789}";
        struct docker_event ev;

        cr_assert_eq(docker_event_parse(json, &ev), 0);
        cr_expect_str_eq(ev.type, "container");
        cr_expect_str_eq(ev.action, "die");
        cr_expect_str_eq(ev.id, ID64);
        cr_expect_eq(ev.exit_code, 137);
        /* exact: a double would round this */
        cr_expect_eq(ev.time_nano, 1795262914123456789LL);
        cr_expect_eq(ev.n_labels, 1);
        cr_expect_str_eq(docker_kv_get(ev.labels, ev.n_labels, "sandboxd.session"), "s1");
        cr_expect_null(docker_kv_get(ev.labels, ev.n_labels, "image"));
}

Test(docker_parse, event_exec_trimmed)
{
        static const char json[] =
                "{\"Type\":\"container\",\"Action\":\"exec_start: sh -c echo hi\",\"Actor\":{\"ID\":\"abc\","
                "\"Attributes\":{\"execID\":\"e\"}},\"time\":10,\"timeNano\":10000000001}";
        struct docker_event ev;

        cr_assert_eq(docker_event_parse(json, &ev), 0);
        cr_expect_str_eq(ev.action, "exec_start");
        cr_expect_str_eq(ev.id, "abc");
        cr_expect_eq(ev.exit_code, -1);
        cr_expect_eq(ev.time_nano, 10000000001LL);
        cr_expect_eq(docker_event_parse("{\"Type\":\"container\"}", &ev), -EPROTO);
        cr_expect_eq(docker_event_parse("{\"Type\":", &ev), -EPROTO);
}

/* ---- spec → create body ---- */

static cJSON *spec_json(const struct docker_container_spec *spec)
{
        char *s = docker_container_spec_to_json(spec);
        cJSON *j;

        cr_assert_not_null(s);
        j = cJSON_Parse(s);
        free(s);
        cr_assert_not_null(j);
        return j;
}

static const cJSON *path(const cJSON *j, const char *a, const char *b)
{
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, a);
        return b ? cJSON_GetObjectItemCaseSensitive(x, b) : x;
}

static void expect_strings(const cJSON *arr, const char *const *want)
{
        size_t n = 0;

        cr_assert(cJSON_IsArray(arr));
        for (; want[n]; n++) {
                const cJSON *it = cJSON_GetArrayItem(arr, (int)n);
                cr_assert(cJSON_IsString(it));
                cr_expect_str_eq(it->valuestring, want[n]);
        }
        cr_expect_eq((size_t)cJSON_GetArraySize(arr), n);
}

Test(docker_parse, spec_to_json_every_field)
{
        const char *cmd[] = {"sleep", "infinity", NULL};
        const char *entry[] = {"/sbin/tini", "--", NULL};
        const char *env[] = {"A=1", "B=two", NULL};
        const char *binds[] = {"/data/ws/u/s:/workspace:rw", NULL};
        const char *tmpfs[] = {"/tmp:rw,noexec,nosuid,size=64m", "/run", NULL};
        const char *drop[] = {"ALL", NULL};
        const char *add[] = {"NET_BIND_SERVICE", NULL};
        const char *secopt[] = {"no-new-privileges:true", NULL};
        const struct docker_port_binding ports[] = {
                {.container_port = 8000, .host_port = 32000},
                {.container_port = 8001, .host_port = 32001, .host_ip = "0.0.0.0"},
        };
        const struct docker_label labels[] = {{"sandboxd.managed", "1"}, {"sandboxd.user", "u"}};
        struct docker_container_spec spec = {
                .name = "sbx-u-s",
                .image = "sandboxd/test:latest",
                .user = "1000:1000",
                .cmd = cmd,
                .entrypoint = entry,
                .env = env,
                .workdir = "/workspace",
                .hostname = "sandbox",
                .binds = binds,
                .tmpfs = tmpfs,
                .cap_drop = drop,
                .cap_add = add,
                .security_opt = secopt,
                .ports = ports,
                .n_ports = 2,
                .labels = labels,
                .n_labels = 2,
                .memory = 512 << 20,
                .nano_cpus = 1500000000,
                .pids_limit = 128,
                .cpu_shares = 256,
                .oom_score_adj = 500,
                .readonly_rootfs = true,
                .init = true,
                .privileged = false,
                .network_mode = "none",
                .open_stdin = true,
        };
        cJSON *j = spec_json(&spec);
        const cJSON *h = path(j, "HostConfig", NULL), *pb;

        cr_expect_str_eq(path(j, "Image", NULL)->valuestring, "sandboxd/test:latest");
        cr_expect_null(path(j, "name", NULL)); /* the name goes into ?name= */
        cr_expect_null(path(j, "Name", NULL));
        cr_expect_str_eq(path(j, "User", NULL)->valuestring, "1000:1000");
        expect_strings(path(j, "Cmd", NULL), cmd);
        expect_strings(path(j, "Entrypoint", NULL), entry);
        expect_strings(path(j, "Env", NULL), env);
        cr_expect_str_eq(path(j, "WorkingDir", NULL)->valuestring, "/workspace");
        cr_expect_str_eq(path(j, "Hostname", NULL)->valuestring, "sandbox");
        cr_expect(cJSON_IsTrue(path(j, "OpenStdin", NULL)));
        cr_expect(cJSON_IsFalse(path(j, "Tty", NULL)));
        cr_expect_str_eq(path(j, "Labels", "sandboxd.managed")->valuestring, "1");
        cr_expect_str_eq(path(j, "Labels", "sandboxd.user")->valuestring, "u");
        cr_expect(cJSON_IsObject(path(j, "ExposedPorts", "8000/tcp")));
        cr_expect(cJSON_IsObject(path(j, "ExposedPorts", "8001/tcp")));

        expect_strings(path(h, "Binds", NULL), binds);
        cr_expect_str_eq(path(h, "Tmpfs", "/tmp")->valuestring, "rw,noexec,nosuid,size=64m");
        cr_expect_str_eq(path(h, "Tmpfs", "/run")->valuestring, "");
        expect_strings(path(h, "CapDrop", NULL), drop);
        expect_strings(path(h, "CapAdd", NULL), add);
        expect_strings(path(h, "SecurityOpt", NULL), secopt);
        cr_expect_eq(path(h, "PidsLimit", NULL)->valuedouble, 128);
        cr_expect_eq(path(h, "Memory", NULL)->valuedouble, 512 << 20);
        cr_expect_eq(path(h, "MemorySwap", NULL)->valuedouble, 512 << 20);
        cr_expect_eq(path(h, "NanoCpus", NULL)->valuedouble, 1500000000);
        cr_expect_eq(path(h, "CpuShares", NULL)->valuedouble, 256);
        cr_expect_eq(path(h, "OomScoreAdj", NULL)->valuedouble, 500);
        cr_expect(cJSON_IsTrue(path(h, "ReadonlyRootfs", NULL)));
        cr_expect(cJSON_IsTrue(path(h, "Init", NULL)));
        cr_expect(cJSON_IsFalse(path(h, "Privileged", NULL)));
        cr_expect_str_eq(path(h, "NetworkMode", NULL)->valuestring, "none");
        /* hardening lives in HostConfig, not at the top level */
        cr_expect_null(path(j, "CapDrop", NULL));
        cr_expect_null(path(j, "Memory", NULL));

        pb = path(h, "PortBindings", "8000/tcp");
        cr_assert_eq(cJSON_GetArraySize(pb), 1);
        cr_expect_str_eq(path(cJSON_GetArrayItem(pb, 0), "HostIp", NULL)->valuestring, "127.0.0.1");
        cr_expect_str_eq(path(cJSON_GetArrayItem(pb, 0), "HostPort", NULL)->valuestring, "32000");
        pb = path(h, "PortBindings", "8001/tcp");
        cr_expect_str_eq(path(cJSON_GetArrayItem(pb, 0), "HostIp", NULL)->valuestring, "0.0.0.0");
        cJSON_Delete(j);
}

Test(docker_parse, spec_to_json_minimal_and_swap)
{
        struct docker_container_spec spec = {.image = "img", .memory = 100, .memory_swap = 300, .privileged = true};
        cJSON *j = spec_json(&spec);
        const cJSON *h = path(j, "HostConfig", NULL);

        cr_expect_eq(path(h, "Memory", NULL)->valuedouble, 100);
        cr_expect_eq(path(h, "MemorySwap", NULL)->valuedouble, 300);
        cr_expect(cJSON_IsTrue(path(h, "Privileged", NULL)));
        /* zero limits and NULL arrays stay unset: the engine's defaults apply */
        cr_expect_null(path(h, "PidsLimit", NULL));
        cr_expect_null(path(h, "NanoCpus", NULL));
        cr_expect_null(path(h, "CpuShares", NULL));
        cr_expect_null(path(h, "OomScoreAdj", NULL));
        cr_expect_null(path(h, "CapDrop", NULL));
        cr_expect_null(path(h, "NetworkMode", NULL));
        cr_expect_null(path(j, "Cmd", NULL));
        cr_expect_null(path(j, "Labels", NULL));
        cJSON_Delete(j);

        cr_expect_null(docker_container_spec_to_json(&(struct docker_container_spec){0}));
}

/* ---- demultiplexer ---- */

static size_t frame(uint8_t *out, uint8_t type, const char *payload)
{
        size_t n = strlen(payload);
        out[0] = type;
        out[1] = out[2] = out[3] = 0;
        out[4] = (uint8_t)(n >> 24);
        out[5] = (uint8_t)(n >> 16);
        out[6] = (uint8_t)(n >> 8);
        out[7] = (uint8_t)n;
        memcpy(out + 8, payload, n);
        return n + 8;
}

/* Feed `data` in pieces of `step` bytes and collect stdout / stderr. */
static int demux_all(const uint8_t *data, size_t len, size_t step, size_t max_payload, char *out, char *err)
{
        struct docker_demux m;
        size_t off = 0, no = 0, ne = 0;

        docker_demux_init(&m);
        while (off < len) {
                size_t piece = len - off < step ? len - off : step, poff = 0;
                while (poff < piece) {
                        enum docker_stream_kind kind;
                        const void *p;
                        size_t plen;
                        ssize_t used =
                                docker_demux_next(&m, data + off + poff, piece - poff, max_payload, &kind, &p, &plen);
                        if (used < 0)
                                return (int)used;
                        cr_assert(used > 0 || piece - poff == 0);
                        cr_assert_leq(plen, max_payload);
                        if (plen) {
                                char *dst = kind == DOCKER_STREAM_STDERR ? err + ne : out + no;
                                memcpy(dst, p, plen);
                                if (kind == DOCKER_STREAM_STDERR)
                                        ne += plen;
                                else
                                        no += plen;
                        }
                        poff += (size_t)used;
                }
                off += piece;
        }
        out[no] = err[ne] = '\0';
        return docker_demux_idle(&m) ? 0 : 1;
}

Test(docker_parse, demux_split_everywhere)
{
        uint8_t buf[256];
        size_t n = 0;
        char out[256], err[256];

        n += frame(buf + n, 1, "hello ");
        n += frame(buf + n, 2, "oops");
        n += frame(buf + n, 1, ""); /* empty frame */
        n += frame(buf + n, 1, "world\n");
        n += frame(buf + n, 3, "!"); /* engine systemerr → stderr */
        for (size_t step = 1; step <= n; step++)
                for (size_t maxp = 1; maxp <= 8; maxp += 3) {
                        cr_assert_eq(demux_all(buf, n, step, maxp, out, err), 0, "step %zu", step);
                        cr_expect_str_eq(out, "hello world\n", "step %zu max %zu", step, maxp);
                        cr_expect_str_eq(err, "oops!", "step %zu max %zu", step, maxp);
                }
}

Test(docker_parse, demux_partial_and_bad)
{
        uint8_t buf[64];
        size_t n = frame(buf, 1, "abcdef");
        char out[64], err[64];

        /* a frame cut short is reported as not idle */
        cr_expect_eq(demux_all(buf, n - 2, 3, 100, out, err), 1);
        cr_expect_str_eq(out, "abcd");
        cr_expect_eq(demux_all(buf, 5, 1, 100, out, err), 1);
        buf[0] = 7;
        cr_expect_eq(demux_all(buf, n, 100, 100, out, err), -EPROTO);
        buf[0] = 1;
        buf[2] = 1;
        cr_expect_eq(demux_all(buf, n, 100, 100, out, err), -EPROTO);
}

Test(docker_parse, demux_big_frame_length)
{
        /* 0x00010002 = 65538 bytes: the big-endian length is read whole */
        static uint8_t buf[8 + 65538];
        char *out = malloc(70000), err[8];

        buf[0] = 1;
        buf[5] = 1;
        buf[7] = 2;
        memset(buf + 8, 'x', 65538);
        cr_assert_eq(demux_all(buf, sizeof(buf), 4096, 10000, out, err), 0);
        cr_expect_eq(strlen(out), 65538);
        free(out);
}

/* ---- status mapping ---- */

Test(docker_parse, status_to_errno)
{
        cr_expect_eq(docker_status_to_errno(200, false), 0);
        cr_expect_eq(docker_status_to_errno(201, true), 0);
        cr_expect_eq(docker_status_to_errno(204, false), 0);
        cr_expect_eq(docker_status_to_errno(404, false), -ENOENT);
        cr_expect_eq(docker_status_to_errno(409, true), -EEXIST);
        cr_expect_eq(docker_status_to_errno(409, false), -EBUSY);
        cr_expect_eq(docker_status_to_errno(400, false), -EIO);
        cr_expect_eq(docker_status_to_errno(500, false), -EIO);
        cr_expect_eq(docker_status_to_errno(304, false), -EIO);
}

Test(docker_parse, client_without_io)
{
        struct docker *d = docker_new("/nonexistent/docker.sock", 1000);

        cr_assert_not_null(d);
        cr_expect_null(docker_api_version(d));
        docker_free(d);
        docker_free(NULL);
        cr_expect_null(docker_new("", 1000));
}
