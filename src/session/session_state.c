/* session_state.c — the session lifecycle's table of transitions and the
 * one check every state change passes (session_internal.h draws the
 * machine). No state, no locks: a pure function of its arguments, so the
 * unit test walks every (transition, from, to) there is.
 *
 * A row says which states a transition may start from, which it may end in,
 * and the function that performs it. session_change_locked() (session.c)
 * refuses, and logs, any change no row allows. A new engine or runtime that
 * adds states (a microVM saved to disk, say) adds its states to the masks
 * and its transitions as rows. */
#include <stddef.h>

#include "session_internal.h"

#define ST(x) (1u << (x))
#define ANY_STATE                                                                                                      \
        (ST(SESSION_CREATING) | ST(SESSION_RUNNING) | ST(SESSION_STOPPED) | ST(SESSION_ERROR) | ST(SESSION_PAUSED))

static const struct session_transition_row rows[SESSION_T_COUNT] = {
        [SESSION_T_CREATE] = {"create",
                              ST(SESSION_STOPPED) | ST(SESSION_ERROR) | ST(SESSION_RUNNING) | ST(SESSION_PAUSED) |
                                      ST(SESSION_CREATING),
                              ST(SESSION_CREATING), "session_acquire"},
        [SESSION_T_CREATED] = {"created", ST(SESSION_CREATING), ST(SESSION_RUNNING), "session_acquire"},
        [SESSION_T_CREATE_FAILED] = {"create_failed", ST(SESSION_CREATING), ST(SESSION_ERROR), "session_acquire"},
        [SESSION_T_FAIL] = {"fail", ST(SESSION_RUNNING) | ST(SESSION_PAUSED) | ST(SESSION_ERROR), ST(SESSION_ERROR),
                            "session_mark_failed, session_acquire"},
        [SESSION_T_PAUSE] = {"pause", ST(SESSION_RUNNING), ST(SESSION_PAUSED), "session_pause"},
        [SESSION_T_RESUME] = {"resume", ST(SESSION_PAUSED), ST(SESSION_RUNNING), "session_resume_locked"},
        [SESSION_T_RESUME_FAILED] = {"resume_failed", ST(SESSION_PAUSED), ST(SESSION_ERROR), "session_resume_locked"},
        [SESSION_T_STOP] = {"stop", ANY_STATE, ST(SESSION_STOPPED),
                            "session_hold, session_expire_idle, session_expire_ttl, session_stop_paused, "
                            "session_enforce_network"},
        [SESSION_T_EVICT] = {"evict", ANY_STATE, ST(SESSION_STOPPED), "session_evict"},
        [SESSION_T_DESTROY] = {"destroy", ANY_STATE, ST(SESSION_STOPPED), "session_destroy"},
        [SESSION_T_ADOPT] = {"adopt", ANY_STATE, ST(SESSION_RUNNING) | ST(SESSION_PAUSED), "session_reconcile"},
        [SESSION_T_LOST] = {"lost", ANY_STATE, ST(SESSION_ERROR), "session_reconcile"},
};

const struct session_transition_row *session_transition_row(enum session_transition t)
{
        return (unsigned)t < SESSION_T_COUNT ? &rows[t] : NULL;
}

bool session_transition_allowed(enum session_transition t, enum session_state from, enum session_state to)
{
        const struct session_transition_row *row = session_transition_row(t);

        if (!row || (unsigned)from >= SESSION_STATE_COUNT || (unsigned)to >= SESSION_STATE_COUNT)
                return false;
        return (row->from & ST(from)) && (row->to & ST(to));
}
