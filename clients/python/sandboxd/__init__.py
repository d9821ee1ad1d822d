"""sandboxd: a client of sandboxd's HTTPS JSON API (standard library only).

    import sandboxd
    sbx = sandboxd.Sandboxd()          # SANDBOXD_URL, SANDBOXD_TOKEN, SANDBOXD_CA
    s = sbx.create_session()
    print(s.exec("echo hi").stdout)
    for chunk in s.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done"):
        print(chunk.stream, chunk.data, end="")
    s.destroy()

``sandboxd.aio.AsyncSandboxd`` is the asyncio twin.
"""

from .client import (
    CellOutput,
    CellResult,
    Execution,
    ExecResult,
    ExecStream,
    OutputChunk,
    Result,
    Sandboxd,
    Session,
)
from .errors import (
    ERRORS_BY_CODE,
    AlreadyFinishedError,
    BadRequestError,
    BusyError,
    ConflictError,
    ForbiddenError,
    InternalError,
    InvalidError,
    NotFoundError,
    QuotaExceededError,
    SandboxdError,
    TooLargeError,
    TransportError,
    UnauthorizedError,
    UnavailableError,
    error_from,
)

__version__ = "0.1.0"

__all__ = [
    "Sandboxd",
    "Session",
    "Execution",
    "ExecStream",
    "OutputChunk",
    "Result",
    "ExecResult",
    "CellResult",
    "CellOutput",
    "SandboxdError",
    "TransportError",
    "BadRequestError",
    "InvalidError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "AlreadyFinishedError",
    "TooLargeError",
    "BusyError",
    "QuotaExceededError",
    "UnavailableError",
    "InternalError",
    "ERRORS_BY_CODE",
    "error_from",
]
