/* audit.c — the core's audit call (audit.h): actions, the fronts and the
 * collectors record through here, so what an audit row holds and what a
 * failed write does is decided in one place. No state, no threads. */
#include "sandboxd/audit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/log.h"
#include "sandboxd/store.h"

int audit_record(struct store *st, const char *actor, const char *user, const char *session, const char *action,
                 const char *detail_json)
{
        int r = store_audit(st, actor, user, session, action, detail_json);

        if (r < 0)
                log_debug("audit: cannot record %s: %s", action ? action : "(none)", strerror(-r));
        return r;
}

int audit_record_json(struct store *st, const char *actor, const char *user, const char *session, const char *action,
                      cJSON *detail)
{
        char *json = detail ? cJSON_PrintUnformatted(detail) : NULL;
        int r = audit_record(st, actor, user, session, action, json);

        free(json);
        cJSON_Delete(detail);
        return r;
}
