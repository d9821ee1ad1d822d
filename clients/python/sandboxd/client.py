"""The synchronous client: ``Sandboxd`` (the connection and the user-level
methods) and ``Session`` (everything that acts in one session).

Every method is one ``POST /v1/<method>`` with the params as the JSON body
(docs/api.md "The HTTPS API"; the method table is
src/api/api_methods.c, the parameters include/sandboxd/api.h). Results are
``Result`` dicts whose keys read as attributes, so fields the daemon adds
later show up without a new client.

Threads: one ``Sandboxd`` may be shared by any number of threads. It keeps
at most ``max_connections`` kept-alive connections (the daemon takes 16 per
client address, 64 in all); a call waits for a free one. A connection idle
for more than ``idle_seconds`` is closed rather than reused, well inside
the daemon's idle limit (``HTTP_IDLE_TIMEOUT_S``, 30 s), so a reused connection is
rarely one the daemon has just closed; if it is, the call is sent again
once on a new connection only when sending it twice cannot run anything
twice (a read-only method, or one with an ``idempotency_key``).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Iterator, Mapping

from .errors import TransportError, error_from

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
]

# Methods that change nothing: safe to send again on a fresh connection.
_READ_ONLY = frozenset(
    {
        "session_info",
        "get_execution",
        "list_executions",
        "read_file",
        "list_files",
        "list_services",
        "service_logs",
        "list_sessions",
        "list_scripts",
        "get_task",
        "list_contexts",
        "get_variables",
    }
)

_MAX_SSE_LINE = 64 << 20  # one SSE data line (the final result carries the output)


class Result(dict):
    """A JSON object from the API; keys read as attributes (``r.state``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class ExecResult(Result):
    """An execution's result: execution_id, session, state (pending running
    completed failed cancelled timeout), exit_code, cause, error, stdout,
    stderr, encoding, stdout_bytes, stderr_bytes, truncated, duration_ms,
    created_at, ..."""

    @property
    def ok(self) -> bool:
        """Completed with exit code 0."""
        return self.get("state") == "completed" and self.get("exit_code") == 0

    @property
    def done(self) -> bool:
        return self.get("state") not in ("pending", "running")


class CellOutput(Result):
    """One output of a cell, in order: type (stream, display_data,
    execute_result, error, ...), name (stdout/stderr for a stream), text,
    data (a MIME bundle: {"text/plain": ..., "image/png": base64, ...})."""

    @property
    def png(self) -> bytes | None:
        """The ``image/png`` of the bundle, decoded; None when there is none."""
        b64 = (self.get("data") or {}).get("image/png")
        if b64 is None:
            return None
        if isinstance(b64, list):  # Jupyter may split a string into lines
            b64 = "".join(b64)
        return base64.b64decode(b64)

    def mime(self, mime_type: str) -> Any:
        """One MIME type of the bundle (None when absent)."""
        return (self.get("data") or {}).get(mime_type)


class CellResult(Result):
    """run_cell's result: context, generation, execution_count, outputs
    (CellOutput), stdout, stderr, error {name, value, traceback} or null,
    state_lost {cause} or null."""

    def __init__(self, raw: Mapping[str, Any]):
        super().__init__(raw)
        self["outputs"] = [CellOutput(o) for o in (raw.get("outputs") or [])]

    @property
    def images(self) -> list[bytes]:
        """Every PNG output, decoded, in order."""
        return [o.png for o in self["outputs"] if o.png is not None]

    @property
    def text(self) -> str:
        """The text/plain of the last result or display output ('' if none)."""
        for o in reversed(self["outputs"]):
            t = o.mime("text/plain")
            if t is not None:
                return "".join(t) if isinstance(t, list) else t
        return ""


class OutputChunk(tuple):
    """(stream, data): a piece of output as it arrived (stdout or stderr)."""

    __slots__ = ()

    def __new__(cls, stream: str, data: str):
        return super().__new__(cls, (stream, data))

    @property
    def stream(self) -> str:
        return self[0]

    @property
    def data(self) -> str:
        return self[1]


def _clean(params: Mapping[str, Any]) -> dict:
    """Drop absent (None) params: the daemon applies its defaults."""
    return {k: v for k, v in params.items() if v is not None}


def _env(name: str) -> str | None:
    v = os.environ.get(name)
    return v if v else None


class _Conn:
    __slots__ = ("http", "idle_since")

    def __init__(self, conn: http.client.HTTPConnection):
        self.http = conn
        self.idle_since = 0.0


class Sandboxd:
    """A client of one sandboxd daemon's HTTPS JSON API.

    ``url`` (else ``SANDBOXD_URL``) is ``https://host:port``, or
    ``http://`` to a loopback address; ``token`` (else ``SANDBOXD_TOKEN``)
    an API token of ``sandboxctl token create``. ``ca_file`` (else
    ``SANDBOXD_CA``) is the CA that signed the daemon's certificate (else
    the system's store); ``cert_file``/``key_file`` (else ``SANDBOXD_CERT``
    / ``SANDBOXD_KEY``) the client certificate when the daemon asks for one
    (mTLS). ``ssl_context`` replaces all three. ``timeout`` bounds each
    call's socket waits in seconds; calls that wait on the daemon
    (exec's ``timeout_seconds``, get_execution's ``wait``) add their own.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 60.0,
        max_connections: int = 8,
        idle_seconds: float = 5.0,
    ):
        url = url or _env("SANDBOXD_URL")
        token = token or _env("SANDBOXD_TOKEN")
        if not url:
            raise ValueError("no daemon URL: pass url= or set SANDBOXD_URL")
        if not token:
            raise ValueError("no API token: pass token= or set SANDBOXD_TOKEN")
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("https", "http") or not u.hostname:
            raise ValueError(f"url must be https://host:port (or http:// on loopback): {url!r}")
        if u.path not in ("", "/"):
            raise ValueError(f"url must not have a path: {url!r}")
        if not 1 <= max_connections <= 64:
            raise ValueError("max_connections must be 1-64 (the daemon takes 16 per client address)")
        self.url = f"{u.scheme}://{u.netloc}"
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._token = token
        self.timeout = timeout
        self.idle_seconds = idle_seconds
        self._ssl = None
        if self._https:
            if ssl_context is None:
                ca_file = ca_file or _env("SANDBOXD_CA")
                cert_file = cert_file or _env("SANDBOXD_CERT")
                key_file = key_file or _env("SANDBOXD_KEY")
                ssl_context = ssl.create_default_context(cafile=ca_file)
                if cert_file:
                    ssl_context.load_cert_chain(cert_file, key_file)
            self._ssl = ssl_context
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._idle: list[_Conn] = []
        self._closed = False

    # ---- connections ----

    def _new_conn(self, timeout: float) -> _Conn:
        if self._https:
            c = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        else:
            c = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        return _Conn(c)

    def _take(self, timeout: float) -> tuple[_Conn, bool]:
        """A connection (reused or new) with a slot held; True when reused."""
        if self._closed:
            raise TransportError("the client is closed")
        self._slots.acquire()
        now = time.monotonic()
        stale = []
        conn = None
        with self._lock:
            while self._idle:
                c = self._idle.pop()
                if now - c.idle_since < self.idle_seconds:
                    conn = c
                    break
                stale.append(c)
        for c in stale:
            c.http.close()
        if conn is not None:
            conn.http.timeout = timeout
            if conn.http.sock is not None:
                conn.http.sock.settimeout(timeout)
            return conn, True
        return self._new_conn(timeout), False

    def _give(self, conn: _Conn | None, keep: bool) -> None:
        try:
            if conn is not None:
                if keep and not self._closed:
                    conn.idle_since = time.monotonic()
                    with self._lock:
                        self._idle.append(conn)
                else:
                    conn.http.close()
        finally:
            self._slots.release()

    def close(self) -> None:
        """Close the idle connections; the client cannot be used afterwards."""
        self._closed = True
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.http.close()

    def __enter__(self) -> "Sandboxd":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- calls ----

    def _headers(self, accept: str) -> dict:
        return {
            "Authorization": f"Bearer {self._token}",
            "Content-Type": "application/json",
            "Accept": accept,
            "User-Agent": "sandboxd-python/0.1",
        }

    def _send(self, method: str, body: bytes, accept: str, timeout: float, retry_ok: bool):
        """Send one request; (conn, response) with the slot held by conn."""
        for attempt in (0, 1):
            conn, reused = self._take(timeout)
            try:
                conn.http.request("POST", f"/v1/{method}", body=body, headers=self._headers(accept))
                return conn, conn.http.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                self._give(conn, False)
                if reused and retry_ok and attempt == 0:
                    continue
                raise TransportError(f"connection to {self.url} broke: {e}", method=method) from e
            except ssl.SSLError as e:
                self._give(conn, False)
                raise TransportError(f"TLS with {self.url} failed: {e}", method=method) from e
            except (OSError, http.client.HTTPException) as e:
                self._give(conn, False)
                raise TransportError(f"cannot reach {self.url}: {e}", method=method) from e
        raise AssertionError("unreachable")

    def _raise_for(self, method: str, status: int, raw: bytes) -> None:
        try:
            err = json.loads(raw)["error"]
            code, msg = str(err["code"]), str(err.get("message", ""))
        except (ValueError, KeyError, TypeError):
            code = {401: "unauthorized", 403: "forbidden", 404: "not_found", 413: "too_large", 429: "busy"}.get(
                status, "internal"
            )
            msg = raw[:500].decode("utf-8", "replace") or f"HTTP {status}"
        raise error_from(code, msg, status, method)

    def call(self, method: str, params: Mapping[str, Any] | None = None, *, wait_seconds: float = 0) -> Result:
        """Call any API method with its params; the result as a ``Result``.
        ``wait_seconds`` is how long the daemon may legitimately take beyond
        ``timeout`` (added to the socket timeout)."""
        body = json.dumps(_clean(params or {})).encode()
        retry_ok = method in _READ_ONLY or bool((params or {}).get("idempotency_key"))
        conn, resp = self._send(method, body, "application/json", self.timeout + wait_seconds, retry_ok)
        keep = False
        try:
            raw = resp.read()
            keep = not resp.will_close
        except (OSError, http.client.HTTPException) as e:
            raise TransportError(f"reading the answer of {method} failed: {e}", method=method) from e
        finally:
            self._give(conn, keep)
        if resp.status != 200:
            self._raise_for(method, resp.status, raw)
        try:
            return json.loads(raw, object_hook=Result)
        except ValueError as e:
            raise TransportError(f"{method}: the answer is not JSON: {raw[:200]!r}", method=method) from e

    def stream(self, method: str, params: Mapping[str, Any]) -> "ExecStream":
        """Call exec or run_code as a Server-Sent Events stream."""
        body = json.dumps(_clean(params)).encode()
        # keep-alive comments come every 10 s of silence: a read may wait that long
        conn, resp = self._send(method, body, "text/event-stream", max(self.timeout, 30.0), False)
        if resp.status != 200:
            try:
                raw = resp.read()
            finally:
                self._give(conn, False)
            self._raise_for(method, resp.status, raw)
        return ExecStream(self, method, conn, resp)

    # ---- user-level methods ----

    def session(self, name: str) -> "Session":
        """A handle on a session (no request: the session's container is
        created on its first use, as any call would)."""
        return Session(self, name)

    def create_session(
        self,
        session: str | None = None,
        *,
        ttl_seconds: int | None = None,
        image: str | None = None,
        env: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> "Session":
        """Start a session now (conflict if it exists); without a name the
        daemon makes one. The Session's ``info`` is the creation result."""
        r = self.call(
            "create_session",
            dict(session=session, ttl_seconds=ttl_seconds, image=image, env=env, idempotency_key=idempotency_key, **extra),
            wait_seconds=120,
        )
        s = Session(self, r["session"])
        s.created = r
        return s

    def list_sessions(self, **filters: Any) -> list[Result]:
        """The token's user's sessions."""
        return self.call("list_sessions", filters)["sessions"]

    def destroy_session(self, session: str, *, purge: bool = False) -> Result:
        return self.call("destroy_session", {"session": session, "purge": purge}, wait_seconds=60)

    # ---- snapshots, restore and fork (issue 28) ----

    def list_snapshots(self, session: str | None = None) -> Result:
        """The user's snapshots (newest first) with the quota: {snapshots, count, bytes, max_count, max_bytes}."""
        return self.call("list_snapshots", {"session": session} if session else {})

    def delete_snapshot(self, snapshot: str) -> Result:
        return self.call("delete_snapshot", {"snapshot": snapshot})

    def fork_session(
        self, session: str, *, from_session: str | None = None, from_snapshot: str | None = None
    ) -> "Session":
        """A new session named ``session`` with the files and environment of a
        snapshot or of a live session (exactly one of the two)."""
        if (from_session is None) == (from_snapshot is None):
            raise ValueError("fork_session needs exactly one of from_session and from_snapshot")
        src = {"session": from_session} if from_session is not None else {"snapshot": from_snapshot}
        r = self.call("fork_session", {"session": session, "from": src}, wait_seconds=600)
        s = Session(self, session)
        s.created = r
        return s

    def pause_session(self, session: str) -> Result:
        """Freeze the session (memory kept, no CPU); any later call resumes it."""
        return self.call("pause_session", {"session": session}, wait_seconds=60)

    def resume_session(self, session: str) -> Result:
        return self.call("resume_session", {"session": session}, wait_seconds=60)

    def list_scripts(self, filter: str | None = None, limit: int | None = None) -> Result:
        return self.call("list_scripts", {"filter": filter, "limit": limit})

    def clear_scripts(self, name: str | None = None) -> int:
        return self.call("clear_scripts", {"name": name})["removed"]

    def get_task(self, task_id: str) -> Result:
        return self.call("get_task", {"task_id": task_id})

    def cancel_task(self, task_id: str) -> Result:
        return self.call("cancel_task", {"task_id": task_id}, wait_seconds=60)


class ExecStream:
    """An exec/run_code streamed as it runs. Iterate for ``OutputChunk``s as
    they arrive; after the last one ``result`` is the ``ExecResult`` (which
    carries the whole output, including any chunk a slow reader lost: the
    daemon's output events are best effort, the result is not). An ``error``
    event raises its typed exception. ``finish()`` reads to the end."""

    def __init__(self, client: Sandboxd, method: str, conn: _Conn, resp: http.client.HTTPResponse):
        self._client = client
        self._method = method
        self._conn: _Conn | None = conn
        self._resp = resp
        self.result: ExecResult | None = None

    def __iter__(self) -> Iterator[OutputChunk]:
        return self

    def __next__(self) -> OutputChunk:
        while self._conn is not None:
            ev = self._event()
            if ev is None:
                self._release()
                raise TransportError(f"{self._method}: the stream ended without a result", method=self._method)
            name, data = ev
            if name == "output":
                return OutputChunk(data.get("stream", "stdout"), data.get("data", ""))
            if name == "result":
                self.result = ExecResult(data)
                self._release()
                break
            if name == "error":
                self._release()
                raise error_from(
                    str(data.get("code", "internal")),
                    str(data.get("message", "")),
                    int(data.get("status", 0) or 0),
                    self._method,
                )
        raise StopIteration

    def _event(self) -> tuple[str, dict] | None:
        name, data = "message", []
        try:
            while True:
                line = self._resp.readline(_MAX_SSE_LINE + 2)
                if not line:
                    return None
                line = line.rstrip(b"\r\n")
                if not line:
                    if data:
                        return name, json.loads(b"\n".join(data), object_hook=Result)
                    name = "message"
                    continue
                if line.startswith(b":"):
                    continue  # keep-alive comment
                field, _, value = line.partition(b":")
                if value.startswith(b" "):
                    value = value[1:]
                if field == b"event":
                    name = value.decode()
                elif field == b"data":
                    data.append(value)
        except (OSError, http.client.HTTPException, ValueError) as e:
            self._release()
            raise TransportError(f"{self._method}: the stream broke: {e}", method=self._method) from e

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client._give(conn, False)

    def finish(self) -> ExecResult:
        """Read the rest of the stream; the final result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    def close(self) -> None:
        """Stop reading. The execution runs on (readable by id)."""
        self._release()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Execution:
    """A background execution: ``get``, ``wait``, ``cancel``, ``send_stdin``."""

    def __init__(self, session: "Session", execution_id: str, started: Result | None = None):
        self.session = session
        self.id = execution_id
        self.started = started

    def __repr__(self) -> str:
        return f"Execution({self.session.name!r}, {self.id!r})"

    def get(self, *, wait: float | bool | None = None, **kw: Any) -> ExecResult:
        return self.session.get_execution(self.id, wait=wait, **kw)

    def wait(self, timeout: float = 300) -> ExecResult:
        """Long-poll until the execution ends (at most ``timeout`` seconds;
        then the running state is returned)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            r = self.get(wait=max(0, min(60, int(left))))
            if r.done or left <= 0:
                return r

    def cancel(self, *, force: bool = False) -> ExecResult:
        return self.session.cancel_execution(self.id, force=force)

    def send_stdin(self, data: str | bytes, *, eof: bool = False) -> Result:
        return self.session.send_stdin(self.id, data, eof=eof)

    def resize(self, rows: int, cols: int) -> Result:
        return self.session.resize_terminal(self.id, rows, cols)


def _exec_wait(timeout_seconds: int | None) -> float:
    # the daemon's exec timeout default is minutes; let the socket wait that long
    return float(timeout_seconds) + 30 if timeout_seconds else 600.0


class Session:
    """Everything that acts in one session (``params.session`` = ``name``)."""

    def __init__(self, client: Sandboxd, name: str):
        self.client = client
        self.name = name
        self.created: Result | None = None

    def __repr__(self) -> str:
        return f"Session({self.name!r})"

    def call(self, method: str, params: Mapping[str, Any] | None = None, *, wait_seconds: float = 0) -> Result:
        p = dict(params or {})
        p["session"] = self.name
        return self.client.call(method, p, wait_seconds=wait_seconds)

    # ---- the session ----

    def info(self) -> Result:
        return self.call("session_info", wait_seconds=120)

    def destroy(self, *, purge: bool = False) -> Result:
        return self.client.destroy_session(self.name, purge=purge)

    def snapshot(self, name: str | None = None) -> Result:
        """Save the workspace (frozen for the copy) with its environment; the snapshot's record."""
        return self.call("snapshot_session", {"name": name} if name else {}, wait_seconds=600)

    def restore(self, snapshot: str) -> Result:
        """Stop the session and put its workspace back from a snapshot (id or name)."""
        return self.call("restore_session", {"snapshot": snapshot}, wait_seconds=600)

    def fork(self, session: str) -> "Session":
        """A new session ``session`` with a copy of this one's files and environment."""
        return self.client.fork_session(session, from_session=self.name)

    def pause(self) -> Result:
        return self.client.pause_session(self.name)

    def resume(self) -> Result:
        return self.client.resume_session(self.name)

    # ---- executions ----

    @staticmethod
    def _exec_params(command: str, kw: dict) -> dict:
        p = dict(kw)
        p["command"] = command
        return p

    def exec(self, command: str, **kw: Any) -> ExecResult:
        """Run a shell command and wait for its end. Keywords are exec's
        params: timeout_seconds, workdir, env, stdin, encoding, tty, rows,
        cols, interactive, idempotency_key."""
        return ExecResult(self.call("exec", self._exec_params(command, kw), wait_seconds=_exec_wait(kw.get("timeout_seconds"))))

    def exec_stream(self, command: str, **kw: Any) -> ExecStream:
        """Run a command, yielding its output as it comes (see ExecStream)."""
        p = self._exec_params(command, kw)
        p["session"] = self.name
        return self.client.stream("exec", p)

    def exec_background(self, command: str, **kw: Any) -> Execution:
        """Start a command and return at once with its Execution."""
        p = self._exec_params(command, kw)
        p["background"] = True
        r = self.call("exec", p, wait_seconds=60)
        return Execution(self, r["execution_id"], r)

    @staticmethod
    def _code_params(code: str | None, language: str | None, kw: dict) -> dict:
        p = dict(kw)
        p["code"] = code
        p["language"] = language or ("python" if code is not None else None)
        return p

    def run_code(self, code: str | None = None, language: str | None = None, **kw: Any) -> ExecResult:
        """Run code (python, node or bash) as a fresh process; keywords as
        exec's, plus script (a saved script's name; code then None) and cache."""
        p = self._code_params(code, language, kw)
        return ExecResult(self.call("run_code", p, wait_seconds=_exec_wait(kw.get("timeout_seconds"))))

    def run_code_stream(self, code: str, language: str = "python", **kw: Any) -> ExecStream:
        p = self._code_params(code, language, kw)
        p["session"] = self.name
        return self.client.stream("run_code", p)

    def run_code_background(self, code: str, language: str = "python", **kw: Any) -> Execution:
        p = self._code_params(code, language, kw)
        p["background"] = True
        r = self.call("run_code", p, wait_seconds=60)
        return Execution(self, r["execution_id"], r)

    def execution(self, execution_id: str) -> Execution:
        return Execution(self, execution_id)

    def get_execution(self, execution_id: str, *, wait: float | bool | None = None, **kw: Any) -> ExecResult:
        """An execution's result; ``wait`` long-polls (seconds, at most 60)
        until it ends. Keywords: stdout_offset, stderr_offset, encoding."""
        w = 60 if wait is True else (0 if wait in (None, False) else float(wait))
        return ExecResult(self.call("get_execution", dict(kw, execution_id=execution_id, wait=wait), wait_seconds=w))

    def cancel_execution(self, execution_id: str, *, force: bool = False) -> ExecResult:
        return ExecResult(self.call("cancel_execution", {"execution_id": execution_id, "force": force}, wait_seconds=60))

    def list_executions(
        self, *, states: list[str] | None = None, limit: int | None = None, completed_within_ms: int | None = None
    ) -> list[ExecResult]:
        r = self.call("list_executions", {"states": states, "limit": limit, "completed_within_ms": completed_within_ms})
        return [ExecResult(x) for x in r["executions"]]

    def send_stdin(self, execution_id: str, data: str | bytes, *, eof: bool = False) -> Result:
        p: dict = {"execution_id": execution_id, "eof": eof}
        if isinstance(data, bytes):
            p.update(data=base64.b64encode(data).decode(), encoding="base64")
        else:
            p["data"] = data
        return self.call("send_stdin", p)

    def resize_terminal(self, execution_id: str, rows: int, cols: int) -> Result:
        return self.call("resize_terminal", {"execution_id": execution_id, "rows": rows, "cols": cols})

    # ---- files ----

    def write_file(self, path: str, content: str | bytes, *, idempotency_key: str | None = None) -> Result:
        """Write a file under /workspace (bytes go as base64)."""
        p: dict = {"path": path, "idempotency_key": idempotency_key}
        if isinstance(content, bytes):
            p.update(content=base64.b64encode(content).decode(), encoding="base64")
        else:
            p["content"] = content
        return self.call("write_file", p, wait_seconds=60)

    def read_file(self, path: str, *, offset: int | None = None, length: int | None = None) -> bytes:
        """A file's bytes (at most 4 MiB per call: see read_file_chunk)."""
        r = self.read_file_chunk(path, offset=offset, length=length)
        return r["content"]

    def read_file_chunk(self, path: str, *, offset: int | None = None, length: int | None = None) -> Result:
        """read_file's whole result, content as bytes: path, content, offset,
        bytes, size, eof."""
        r = self.call(
            "read_file", {"path": path, "offset": offset, "length": length, "encoding": "base64"}, wait_seconds=60
        )
        r["content"] = base64.b64decode(r["content"])
        return r

    def read_text(self, path: str) -> str:
        """A file as text (invalid UTF-8 replaced)."""
        return self.read_file(path).decode("utf-8", "replace")

    def list_files(self, path: str | None = None) -> Result:
        """{path, entries: [{name, type, size}], truncated}"""
        return self.call("list_files", {"path": path}, wait_seconds=60)

    # ---- services ----

    def start_service(
        self, name: str, command: str, *, workdir: str | None = None, idempotency_key: str | None = None
    ) -> Result:
        return self.call(
            "start_service",
            {"name": name, "command": command, "workdir": workdir, "idempotency_key": idempotency_key},
            wait_seconds=60,
        )

    def stop_service(self, name: str) -> Result:
        return self.call("stop_service", {"name": name}, wait_seconds=60)

    def list_services(self) -> list[Result]:
        return self.call("list_services")["services"]

    def service_logs(self, name: str, *, tail_lines: int | None = None) -> Result:
        return self.call("service_logs", {"name": name, "tail_lines": tail_lines})

    # ---- policy ----

    def egress_allow(self, pattern: str, *, scope: str | None = None, remove: bool = False) -> Result:
        """Add (or remove) an egress pattern; needs a connector token."""
        return self.call("egress_allow", {"pattern": pattern, "scope": scope, "remove": remove})

    def mark_private(self, dataset: str, *, source: str | None = None) -> Result:
        """Mark the session as holding a private dataset (connector token)."""
        return self.call("mark_private", {"dataset": dataset, "source": source})

    # ---- agent tools ----

    def run_tests(
        self,
        tests: str,
        *,
        language: str = "python",
        code: str | None = None,
        timeout_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> Result:
        """Run a test file (python: test_* functions / unittest; node:
        node:test) with ``code`` as the module under test; {success,
        summary: {total, passed, failed, skipped}, tests, output, ...}."""
        return self.call(
            "run_tests",
            {
                "language": language,
                "tests": tests,
                "code": code,
                "timeout_seconds": timeout_seconds,
                "idempotency_key": idempotency_key,
            },
            wait_seconds=_exec_wait(timeout_seconds),
        )

    def create_task(self, execution_id: str, tool: str = "exec") -> Result:
        """A task handle on an execution (the MCP tasks extension's)."""
        return self.call("create_task", {"execution_id": execution_id, "tool": tool})

    # ---- stateful interpreters (run_cell, issue 25) ----

    def run_cell(
        self,
        code: str,
        *,
        language: str | None = None,
        context: str | None = None,
        timeout_seconds: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CellResult:
        """Run a cell in a long-lived interpreter context (state kept from
        call to call). Image outputs have ``.png`` bytes."""
        r = self.call(
            "run_cell",
            {"code": code, "language": language, "context": context, "timeout_seconds": timeout_seconds, "env": env},
            wait_seconds=_exec_wait(timeout_seconds),
        )
        return CellResult(r)

    def list_contexts(self) -> list[Result]:
        return self.call("list_contexts")["contexts"]

    def restart_context(self, context: str = "default") -> Result:
        return self.call("restart_context", {"context": context}, wait_seconds=60)

    def delete_context(self, context: str) -> Result:
        return self.call("delete_context", {"context": context}, wait_seconds=60)

    def get_variables(self, context: str = "default") -> Result:
        return self.call("get_variables", {"context": context}, wait_seconds=30)

