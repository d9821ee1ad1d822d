/* fronterr.c — the fronts' error type and the single errno → code table
 * (fronterr.h). No state, no threads. */
#include "sandboxd/fronterr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int fronterr_set(struct fronterr *e, const char *code, const char *fmt, ...)
{
        va_list ap;
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        return -1;
}

const char *fronterr_code(int r)
{
        switch (-r) {
        case EINVAL:
        case EPERM: /* files.c: a path outside /workspace is a bad argument, not a missing right */
        case ENOTDIR:
        case EISDIR:
        case ERANGE:
        case ENAMETOOLONG:
                return "invalid";
        case ENOENT:
        case ESRCH:
                return "not_found";
        case EACCES:
                return "forbidden";
        case EDQUOT:
                return "quota_exceeded";
        case EBUSY:
        case EUSERS:
        case ENOSPC:
        case EAGAIN:
        case EMFILE:
        case ENFILE:
                return "busy";
        case E2BIG:
        case EFBIG:
        case EMSGSIZE:
                return "too_large";
        case EEXIST:
        case EPIPE:
                return "conflict";
        case EALREADY: /* an execution that has already ended */
                return "already_finished";
        case ECONNREFUSED:
        case ETIMEDOUT:
        case EIO:
        case ESHUTDOWN:
        case EHOSTUNREACH:
        case ENOTCONN:
        case ECONNRESET:
        case EPROTO:
                return "unavailable";
        default:
                return "internal";
        }
}

int fronterr_errno(struct fronterr *e, int r, const struct sbx_error *err, const char *what)
{
        return fronterr_set(e, fronterr_code(r), "%s", err && err->msg[0] ? err->msg : what ? what : strerror(-r));
}
