"""The asyncio twin of ``Sandboxd``: the same methods as coroutines.

It is deliberately thin: every call runs the synchronous client's call in a
worker thread (``asyncio.to_thread``), so both share one implementation,
one connection pool and one set of errors. A stream is an async iterator
whose chunks are read in a thread one at a time, so each arrives as the
daemon sends it.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from .client import ExecStream, OutputChunk, Sandboxd, Session

__all__ = ["AsyncSandboxd", "AsyncSession", "AsyncExecStream"]

_STREAMS = {"exec_stream", "run_code_stream"}


def _wrap(obj: Any, name: str):
    fn = getattr(obj, name)

    @functools.wraps(fn)
    async def call(*args: Any, **kw: Any) -> Any:
        r = await asyncio.to_thread(fn, *args, **kw)
        if isinstance(r, Session):
            return AsyncSession(r)
        if isinstance(r, ExecStream):
            return AsyncExecStream(r)
        return r

    return call


class _Async:
    def __init__(self, sync: Any):
        self.sync = sync

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sync, name)
        if name.startswith("_") or not callable(attr):
            return attr
        return _wrap(self.sync, name)


class AsyncSession(_Async):
    """``Session``'s methods as coroutines (``name``, ``client`` as is)."""

    sync: Session


class AsyncSandboxd(_Async):
    """``Sandboxd(...)``'s methods as coroutines; same arguments."""

    sync: Sandboxd

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(Sandboxd(*args, **kw))

    def session(self, name: str) -> AsyncSession:
        return AsyncSession(self.sync.session(name))

    async def __aenter__(self) -> "AsyncSandboxd":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.sync.close()


class AsyncExecStream:
    """``async for chunk in stream``; then ``stream.result``."""

    def __init__(self, sync: ExecStream):
        self.sync = sync

    @property
    def result(self):
        return self.sync.result

    def __aiter__(self) -> "AsyncExecStream":
        return self

    async def __anext__(self) -> OutputChunk:
        r = await asyncio.to_thread(next, self.sync, None)
        if r is None:
            raise StopAsyncIteration
        return r

    async def finish(self):
        return await asyncio.to_thread(self.sync.finish)

    def close(self) -> None:
        self.sync.close()
