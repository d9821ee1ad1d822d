"""Typed errors: one exception class per API error code.

The daemon answers a failed call with ``{"error": {"code", "message"}}`` and
the HTTP status for the code (docs/api.md "The HTTPS API"; the
codes are src/fronterr.c's and src/http/http.c's). ``SandboxdError.code``
is always the API's code string, so a caller can match on either the class
or the code; a code this client does not know yet still raises
``SandboxdError`` with that code.
"""

from __future__ import annotations


class SandboxdError(Exception):
    """A call failed. ``code`` is the API's error code, ``status`` the HTTP
    status (0 when the failure came in an SSE ``error`` event without one),
    ``method`` the API method called."""

    code = "error"

    def __init__(self, message: str, *, code: str | None = None, status: int = 0, method: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.status = status
        self.method = method

    def __str__(self) -> str:
        where = f"{self.method}: " if self.method else ""
        return f"{where}{self.code}: {self.message}"


class TransportError(SandboxdError):
    """The daemon could not be reached, or the connection broke mid-call
    (no API code: ``code`` is ``"transport"``). A call that broke after it
    was sent may still have run; retry only calls with an idempotency key."""

    code = "transport"


class BadRequestError(SandboxdError):
    code = "bad_request"


class InvalidError(SandboxdError):
    code = "invalid"


class UnauthorizedError(SandboxdError):
    code = "unauthorized"


class ForbiddenError(SandboxdError):
    code = "forbidden"


class NotFoundError(SandboxdError):
    code = "not_found"


class ConflictError(SandboxdError):
    code = "conflict"


class AlreadyFinishedError(ConflictError):
    """An execution that has already ended (HTTP 409, like conflict)."""

    code = "already_finished"


class TooLargeError(SandboxdError):
    code = "too_large"


class BusyError(SandboxdError):
    """A cap was reached (HTTP 429): wait for something to finish."""

    code = "busy"


class QuotaExceededError(SandboxdError):
    code = "quota_exceeded"


class UnavailableError(SandboxdError):
    code = "unavailable"


class InternalError(SandboxdError):
    code = "internal"


ERRORS_BY_CODE: dict[str, type[SandboxdError]] = {
    cls.code: cls
    for cls in (
        BadRequestError,
        InvalidError,
        UnauthorizedError,
        ForbiddenError,
        NotFoundError,
        ConflictError,
        AlreadyFinishedError,
        TooLargeError,
        BusyError,
        QuotaExceededError,
        UnavailableError,
        InternalError,
    )
}


def error_from(code: str, message: str, status: int = 0, method: str | None = None) -> SandboxdError:
    """The exception for an API error code (SandboxdError for an unknown one)."""
    cls = ERRORS_BY_CODE.get(code, SandboxdError)
    return cls(message, code=code, status=status, method=method)
