/*
 * cni-placeholder.c — the CNI plugin of the Kubernetes testbed: it reports an
 * address and sets nothing up.
 *
 * containerd's CRI plugin refuses to start a Pod sandbox without a network
 * whose result names an interface and an address, and Debian ships no plugin
 * that gives a Pod nothing but loopback. This one answers ADD with interface
 * CNI_IFNAME and a placeholder address in 127.244.0.0/16 (derived from the
 * container id, so Pods differ), and creates no interface, route or rule: the
 * Pod keeps only `lo`, which the standard `loopback` plugin brings up. DEL and
 * CHECK succeed with no output; VERSION lists the spec versions it speaks.
 *
 * The placeholder is a loopback address on purpose: anything that tries to
 * reach a Pod by its IP stays on the host's loopback, never a real network.
 *
 * Input is the network configuration on stdin (read and discarded, bounded)
 * and the CNI_* environment (CNI spec 0.4.0).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#define CNI_VERSION "0.4.0"

static void drain_stdin(void)
{
        char buf[4096];
        size_t total = 0;
        ssize_t n;

        /* The runtime writes the whole config and closes the pipe; stop after 1 MiB anyway. */
        while (total < (1u << 20) && (n = read(STDIN_FILENO, buf, sizeof(buf))) > 0)
                total += (size_t)n;
}

static int fail(unsigned code, const char *msg)
{
        printf("{\"cniVersion\":\"" CNI_VERSION "\",\"code\":%u,\"msg\":\"%s\"}\n", code, msg);
        return 1;
}

/* Printable without escaping in JSON: the runtime's ids and paths are plain. */
static int json_safe(const char *s)
{
        for (; *s; s++)
                if (*s < 0x20 || *s == '"' || *s == '\\')
                        return 0;
        return 1;
}

int main(void)
{
        const char *cmd = getenv("CNI_COMMAND");
        const char *id = getenv("CNI_CONTAINERID");
        const char *ifname = getenv("CNI_IFNAME");
        const char *netns = getenv("CNI_NETNS");
        uint32_t h = 2166136261u; /* FNV-1a of the container id */

        drain_stdin();
        if (!cmd)
                return fail(4, "CNI_COMMAND is not set");
        if (strcmp(cmd, "VERSION") == 0) {
                printf("{\"cniVersion\":\"" CNI_VERSION "\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\"]}\n");
                return 0;
        }
        if (strcmp(cmd, "DEL") == 0 || strcmp(cmd, "CHECK") == 0)
                return 0;
        if (strcmp(cmd, "ADD") != 0)
                return fail(4, "unknown CNI_COMMAND");
        if (!id || !ifname || !netns || !json_safe(ifname) || !json_safe(netns))
                return fail(4, "CNI_CONTAINERID, CNI_IFNAME or CNI_NETNS missing or not printable");
        for (; *id; id++)
                h = (h ^ (uint8_t)*id) * 16777619u;
        /* 127.244.x.y with y in 1..254. */
        printf("{\"cniVersion\":\"" CNI_VERSION
               "\","
               "\"interfaces\":[{\"name\":\"%s\",\"sandbox\":\"%s\"}],"
               "\"ips\":[{\"version\":\"4\",\"address\":\"127.244.%u.%u/32\",\"interface\":0}]}\n",
               ifname, netns, (unsigned)((h >> 8) & 0xff), (unsigned)(h % 254u + 1u));
        return 0;
}
