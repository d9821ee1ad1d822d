# run_tests.py — sandboxd's python test harness (run_tests, issue 17).
#
# Embedded into the daemon at build time (cmake/embed.cmake) and run
# inside the session's container as tenant code, through the ordinary
# execution path. The daemon appends one line calling _sbx_main(marker,
# code_b64, tests_b64).
#
# Channels: the harness keeps the execution's stdout for itself, as the
# machine-readable result channel: one line per record, "<marker> <json>".
# Everything the code and the tests print (fd 1 and fd 2, subprocesses
# included) goes to stderr, which the daemon returns as `output`. The marker
# is random per run, so printed text cannot pass for a record by accident.
#
# Tests: plain functions named test_* (assert; unittest.skip / raising
# unittest.SkipTest skips), and unittest.TestCase classes, in the order the
# tests text defines them. The code runs first as module `solution` (tests
# may import from it); the tests see its names directly too.
import base64
import json
import linecache
import os
import sys
import time
import traceback
import types
import unittest

_ERROR_MAX = 4000


_FILES = ("solution.py", "test_solution.py")


def _short_error(exc_type, exc, tb):
    # the frames of the tenant's two files only, then the exception
    frames = [f for f in traceback.extract_tb(tb) if f.filename in _FILES]
    text = "".join(traceback.format_list(frames[-4:])) + "".join(traceback.format_exception_only(exc_type, exc))
    return text.strip()[-_ERROR_MAX:]


def _source(name, text):
    # so tracebacks show the tenant's lines (a bare assert says nothing else)
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)


class _Result(unittest.TestResult):
    def __init__(self, emit, cls_name):
        super().__init__()
        self._emit = emit
        self._cls = cls_name
        self._t0 = 0.0

    def _name(self, test):
        return "%s.%s" % (self._cls, getattr(test, "_testMethodName", str(test)))

    def startTest(self, test):
        super().startTest(test)
        self._t0 = time.monotonic()

    def _record(self, test, passed, skipped=False, error=None):
        ms = int((time.monotonic() - self._t0) * 1000)
        self._emit({"t": "test", "name": self._name(test), "passed": passed, "skipped": skipped,
                    "error": error, "duration_ms": ms})

    def addSuccess(self, test):
        self._record(test, True)

    def addFailure(self, test, err):
        self._record(test, False, error=_short_error(*err))

    def addError(self, test, err):
        self._record(test, False, error=_short_error(*err))

    def addSkip(self, test, reason):
        self._record(test, True, skipped=True, error=None if not reason else "skipped: %s" % reason)

    def addExpectedFailure(self, test, err):
        self._record(test, True)

    def addUnexpectedSuccess(self, test):
        self._record(test, False, error="unexpected success")

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self._record(test, False, error=_short_error(*err))


def _run_function(emit, name, fn):
    t0 = time.monotonic()
    passed, skipped, error = True, False, None
    try:
        fn()
    except unittest.SkipTest as e:
        skipped = True
        error = "skipped: %s" % e if str(e) else None
    except BaseException:  # noqa: a test that exits or is interrupted fails, the run goes on
        passed = False
        error = _short_error(*sys.exc_info())
    emit({"t": "test", "name": name, "passed": passed, "skipped": skipped, "error": error,
          "duration_ms": int((time.monotonic() - t0) * 1000)})


def _sbx_main(marker, code_b64, tests_b64):
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
    os.dup2(2, 1)  # what the tests print goes to stderr

    def emit(rec):
        out.write(marker + " " + json.dumps(rec) + "\n")
        out.flush()

    emit({"t": "start"})
    try:
        code = base64.b64decode(code_b64).decode("utf-8")
        tests = base64.b64decode(tests_b64).decode("utf-8")
        _source("solution.py", code)
        _source("test_solution.py", tests)
        sol = types.ModuleType("solution")
        sol.__file__ = "solution.py"
        sys.modules["solution"] = sol
        exec(compile(code, "solution.py", "exec"), sol.__dict__)
        ns = dict(sol.__dict__)
        ns["__name__"] = "test_solution"
        ns["__file__"] = "test_solution.py"
        exec(compile(tests, "test_solution.py", "exec"), ns)
    except BaseException:  # noqa: a crash before any test ran
        emit({"t": "error", "error": _short_error(*sys.exc_info())})
        out.close()
        sys.exit(1)

    defined_here = {k for k in ns if k not in sol.__dict__ or ns[k] is not sol.__dict__[k]}
    for name in list(ns):
        obj = ns[name]
        if name not in defined_here:
            continue
        if isinstance(obj, type) and issubclass(obj, unittest.TestCase) and obj is not unittest.TestCase:
            suite = unittest.defaultTestLoader.loadTestsFromTestCase(obj)
            suite.run(_Result(emit, obj.__name__))
        elif name.startswith("test") and callable(obj) and isinstance(obj, types.FunctionType):
            _run_function(emit, name, obj)
    emit({"t": "end"})
    out.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
