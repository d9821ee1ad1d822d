/* egress.c — the egress proxy (egress.h). STUB: refuses every connection
 * (deny all) until the egress proxy of issue 14 lands. No threads. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "sandboxd/egress.h"

struct egress {
        int unused;
};

int egress_new(const struct sbx_config *cfg, struct store *store, struct egress **ret, struct sbx_error *err)
{
        struct egress *eg = calloc(1, sizeof(*eg));
        if (!eg)
                return -ENOMEM;
        *ret = eg;
        return 0;
}

void egress_free(struct egress *eg) { free(eg); }

void egress_accept(struct egress *eg, const char *user, const char *session, int fd)
{
        if (fd >= 0)
                close(fd);
}

void egress_close_session(struct egress *eg, const char *user, const char *session) {}
