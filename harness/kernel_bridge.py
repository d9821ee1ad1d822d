# kernel_bridge.py — one interpreter context of run_cell (issue 25): started
# by the daemon (src/cells/) as a runner job in the session's container,
# under the session's uid, inside the container's limits. It starts the
# context's Jupyter kernel from its kernelspec (python3 from ipykernel by
# default, so any kernelspec an image installs works) with jupyter_client,
# and speaks JSON lines with the daemon on its stdin and stdout:
#
#   daemon -> bridge   {"op": "execute", "id": N, "code": "..."}
#                      {"op": "interrupt"}          (SIGINT the kernel)
#                      {"op": "variables", "id": N} (names, types, short reprs)
#                      {"op": "stats", "id": N}     (the kernel's RSS)
#                      {"op": "replay"}             (the last cell again, after a daemon restart)
#                      {"op": "shutdown"}
#   bridge -> daemon   {"ev": "ready", "kernel_pid", "language", "implementation"}
#                      {"ev": "stream", "id", "name": "stdout"|"stderr", "text"}
#                      {"ev": "display_data"|"execute_result", "id", "data": {mime: value}, "metadata"}
#                      {"ev": "error", "id", "ename", "evalue", "traceback": [...]}
#                      {"ev": "done", "id", "execution_count", "status"}
#                      {"ev": "variables", "id", "vars": [{"name", "type", "repr", "shape"?, "error"?}]}
#                      {"ev": "stats", "id", "rss_kb"}
#                      {"ev": "dead", "cause": "oom"|"killed"|"exited", "signal", "exit_code"}
#                      {"ev": "failed", "message"}   (the kernel could not start)
#                      {"ev": "replay_begin", "id", "running"} ... {"ev": "replay_end"}
#
# The daemon treats every line as hostile (it bounds and validates them): a
# kernel is the tenant's code and can reach this process. The kernel never
# gets this process's stdin or stdout: it runs with /dev/null for both, so
# nothing it prints can look like a protocol line; fd-level output of the
# kernel comes back through ipykernel's capture as stream messages.
import ast
import json
import os
import queue
import signal
import sys
import threading
import time

# buffered: a line comes in one read (or a few), not a read per byte as an
# unbuffered file's iteration does (45 reads for a `1+1` cell, issue 34)
PROTO_IN = os.fdopen(os.dup(0), "rb")
PROTO_OUT = os.fdopen(os.dup(1), "wb", buffering=0)
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)
_wlock = threading.Lock()
REPLY_AFTER_IDLE_S = 2.0  # an execute_reply comes before its idle status: see interrupt() in main
MAX_TEXT = 1 << 20  # a traceback line, an error's name or value
# One MIME value, whole: what does not fit inline in the result goes by
# reference (the daemon spools it), so a value is cut only past this
# (= CELLS_LINE_MAX_CAP less slack), and the line then says "clipped".
MAX_VALUE = 31 << 20
STREAM_CHUNK = 1 << 20  # stream text goes in lines of at most this, never cut


# The last cell's lines, kept for {"op": "replay"}: a daemon that restarted
# (and adopted this job again) asks for them, and gets "\n" (ending any line
# it may have caught in the middle), replay_begin {id, running}, every line
# of the cell so far, replay_end; a cell still running goes on as usual.
REPLAY_MAX = 8 << 20
_last = {"id": None, "lines": [], "bytes": 0, "running": False}


def emit(obj, record=False):
    line = (json.dumps(obj, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
    with _wlock:
        if record and _last["bytes"] + len(line) <= REPLAY_MAX:
            _last["lines"].append(line)
            _last["bytes"] += len(line)
        PROTO_OUT.write(line)


def cell_begin(cid):
    with _wlock:
        _last.update(id=cid, lines=[], bytes=0, running=True)


def cell_end(obj):
    emit(obj, record=True)
    with _wlock:
        _last["running"] = False


def replay():
    with _wlock:
        PROTO_OUT.write(b"\n")
        begin = {"ev": "replay_begin", "id": _last["id"], "running": _last["running"]}
        PROTO_OUT.write((json.dumps(begin) + "\n").encode())
        for line in _last["lines"]:
            PROTO_OUT.write(line)
        PROTO_OUT.write(b'{"ev":"replay_end"}\n')


def clip(v):
    if isinstance(v, str) and len(v) > MAX_TEXT:
        return v[:MAX_TEXT]
    return v


def oom_kills():
    # the container's OOM kills so far: cgroup v2's memory.events, else v1's
    # memory.oom_control (the kernel counts a kill before its victim is gone)
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    if k == "oom_kill":
                        return int(v)
        except (OSError, ValueError):
            pass
    return -1


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return -1


# get_variables runs the tenant's code (__repr__, .shape) in the kernel, so
# under deadlines the kernel keeps itself (SIGALRM in its main thread, which
# runs the expression): VARS_EACH_S per object, again every VARS_AGAIN_S
# while it does not return, and after VARS_ALL_S in all the rest is named but
# not read. The deadline is a BaseException, so an object's own "except
# Exception" cannot swallow it. An object that cannot be described is listed
# with "error": the type of what it raised (TimeoutError past its deadline);
# a KeyboardInterrupt (the daemon interrupts the kernel at its own deadline)
# ends the listing with what it has. It runs in a dict of its own: nothing is
# added to the tenant's namespace, and the kernel's SIGALRM handler and timer
# are put back.
VARS_EACH_S, VARS_AGAIN_S, VARS_ALL_S, VARS_MAX = 1.0, 0.1, 5.0, 500
VARS_SRC = """
import json, reprlib, signal, time
TNAME = type.__dict__["__name__"].__get__  # no metaclass of the tenant's runs
HIDE = ("In", "Out", "get_ipython", "exit", "quit", "open")
class Deadline(BaseException):
    pass
st = {"armed": False}
def alarm(_s, _f):
    if st["armed"]:
        raise Deadline()
class R(reprlib.Repr):
    def repr_instance(self, x, level):  # reprlib's hides what __repr__ raises
        s = repr(x)
        if len(s) > self.maxother:
            i = max(0, (self.maxother - 3) // 2)
            s = s[:i] + "..." + s[len(s) - max(0, self.maxother - 3 - i):]
        return s
rp = R()
def describe(v):
    return [TNAME(type(v)), str.__getitem__(rp.repr(v), slice(0, 160)),
            str.__getitem__(str(getattr(v, "shape", "")), slice(0, 40))]
def one(v):
    st["armed"] = True
    signal.setitimer(signal.ITIMER_REAL, each, again)
    try:
        return describe(v), None
    except BaseException as e:
        st["armed"] = False
        return None, e
    finally:
        st["armed"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
old = signal.signal(signal.SIGALRM, alarm)
left = signal.setitimer(signal.ITIMER_REAL, 0)
out, stop, end = [], None, time.monotonic() + total
try:
    for k, v in [kv for kv in list(ns.items()) if type(kv[0]) is str and not kv[0].startswith("_")
                 and kv[0] not in HIDE][:cap]:
        if stop is None and time.monotonic() >= end:
            stop = "TimeoutError"
        d, e = None, None
        if stop is None:
            try:
                d, e = one(v)
            except BaseException as e2:  # the deadline raced one's own way out
                d, e = None, e2
        if d is not None:
            out.append([k] + d + [""])
            continue
        err = stop or ("TimeoutError" if isinstance(e, Deadline) else TNAME(type(e)))
        if isinstance(e, KeyboardInterrupt):
            stop = err
        out.append([k, TNAME(type(v)), "", "", err])
finally:
    signal.signal(signal.SIGALRM, old)
    if left[0] > 0:
        signal.setitimer(signal.ITIMER_REAL, *left)
result = json.dumps(out)
"""
VARS_EXPR = ("(lambda d: (exec(%r, d), d['result'])[1])"
             "({'ns': globals(), 'each': %r, 'again': %r, 'total': %r, 'cap': %d})"
             % (VARS_SRC, VARS_EACH_S, VARS_AGAIN_S, VARS_ALL_S, VARS_MAX))

# The kernel's IPython adds pip's user site (under HOME, the workspace) to
# sys.path after a cell that made it (%pip install): the bridge does not make
# it ahead, so a new session's workspace holds only what its tenant wrote.
USER_SITE_HOOK = """
def _sbx_user_site(*_a):
    import importlib, os, site, sys
    p = site.getusersitepackages()
    if site.ENABLE_USER_SITE and p not in sys.path and os.path.isdir(p):
        i = next((n for n, q in enumerate(sys.path) if q.endswith(("site-packages", "dist-packages"))), len(sys.path))
        sys.path.insert(i, p)
        site.addsitedir(p)  # its .pth files
        importlib.invalidate_caches()
get_ipython().events.register("post_run_cell", _sbx_user_site)
del _sbx_user_site
"""

# Run in the kernel at its start (one of its exec_lines): ipykernel keeps
# what a cell prints in memory until its I/O thread sends it, which a cell
# printing in a tight loop can put off to the cell's end, and what it sends
# waits in zmq's queues while the bridge is behind (a kernel that printed
# 1 GiB was OOM-killed holding it). So past KERNEL_OUT_BUFFER buffered
# characters a write hands them over, and past the cap a cell may print per
# stream (SBX_CELL_OUTPUT_CAP: the daemon's EXEC_OUTPUT_CAP_BYTES, which it keeps
# at most anyway) the rest is counted, not sent; the cell's end says how
# much on stderr (KERNEL_DROP_NOTE, which the bridge marks clipped).
KERNEL_OUT_BUFFER = 4 << 20
KERNEL_DROP_NOTE = "\n[sandboxd: %d characters of %s dropped in the kernel: a cell sends at most %d per stream]\n"
KERNEL_DROP_MARK = " dropped in the kernel: a cell sends at most "
KERNEL_OUTPUT_BOUND = """
def _sbx_bound_output(cap, buffered, note):
    import sys
    from ipykernel.iostream import OutStream
    write = OutStream.write
    sent, dropped = {}, {}

    def bounded_write(self, string):
        if not isinstance(string, str):
            return write(self, string)
        name, n = self.name, len(string)
        room = cap - sent.get(name, 0)
        if n > room:
            dropped[name] = dropped.get(name, 0) + n - max(room, 0)
            string = string[:max(room, 0)]
        sent[name] = sent.get(name, 0) + len(string)
        if string:
            write(self, string)
        if pending(self) > buffered:
            self.flush()
        return n

    def pending(stream):
        # what the stream holds unsent. The I/O thread swaps the buffer for a new one
        # and closes the old (ipykernel 6's _flush_buffer) at any time: read it under
        # the stream's own lock, and a buffer closed meanwhile holds nothing unsent
        # (a tell() on it raised ValueError into the cell, which then ended "error")
        lock = getattr(stream, "_buffer_lock", None)
        try:
            if lock is None:
                buf = getattr(stream, "_buffer", None)
                return buf.tell() if buf is not None else 0
            with lock:
                return stream._buffer.tell()
        except (ValueError, AttributeError):
            return 0

    def begin(*_a):
        sent.clear()
        dropped.clear()

    def end(*_a):
        for name, n in sorted(dropped.items()):
            if n:
                if isinstance(sys.stderr, OutStream):  # past its own cap as well
                    write(sys.stderr, note %% (n, name, cap))
        dropped.clear()

    OutStream.write = bounded_write
    get_ipython().events.register("pre_execute", begin)
    get_ipython().events.register("post_execute", end)


try:
    _sbx_bound_output(%d, %d, %r)
except Exception:  # noqa: BLE001 - another ipykernel: unbounded, as before
    pass
del _sbx_bound_output
"""


def main():
    kernel_name = sys.argv[1] if len(sys.argv) > 1 else "python3"
    tmp = os.environ.get("SBX_CELL_DIR") or "/tmp/sbx-cells"
    os.makedirs(tmp, mode=0o700, exist_ok=True)
    # everything the platform writes goes under the context's /tmp directory,
    # none of it in the workspace (HOME): runtime and connection files,
    # configuration, data and caches
    for k, sub in (("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                   ("MPLCONFIGDIR", "matplotlib"), ("JUPYTER_CONFIG_DIR", "jupyter"),
                   ("JUPYTER_DATA_DIR", "jupyter-data"), ("XDG_CACHE_HOME", "cache")):
        os.environ[k] = os.path.join(tmp, sub)
        os.makedirs(os.environ[k], mode=0o700, exist_ok=True)
    # tracebacks as plain text: an agent reads them, no terminal does
    prof = os.path.join(os.environ["IPYTHONDIR"], "profile_default")
    os.makedirs(prof, mode=0o700, exist_ok=True)
    with open(os.path.join(prof, "ipython_kernel_config.py"), "w") as f:
        f.write("c.InteractiveShell.colors = 'NoColor'\n")
        # the input history in memory: IPython's default history file commits every
        # cell to SQLite with a journal (4 fdatasync a `1+1`, issue 34); In, Out, _i
        # and %history of this interpreter work as before, past generations are not kept
        f.write("c.HistoryManager.hist_file = ':memory:'\n")
        try:
            cap = max(1024, int(os.environ.get("SBX_CELL_OUTPUT_CAP", "")))
        except ValueError:
            cap = 64 << 20
        bound = KERNEL_OUTPUT_BOUND % (cap, KERNEL_OUT_BUFFER, KERNEL_DROP_NOTE)
        f.write("c.InteractiveShellApp.exec_lines = [%r, %r]\n" % (USER_SITE_HOOK, bound))
    # the image's MPLBACKEND=Agg would keep figures from coming back inline
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    # %pip install out of the box as the session's user on a read-only root:
    # into the user site under HOME (the workspace: it outlives containers,
    # and unlike /tmp it is not noexec), past Debian's externally-managed
    # marker (only the user site is writable anyway); pip makes the user site
    # when it first installs, and USER_SITE_HOOK puts it on the kernel's path
    # after that cell, so what pip put there imports in the next.
    os.environ.setdefault("PIP_USER", "1")
    os.environ.setdefault("PIP_BREAK_SYSTEM_PACKAGES", "1")
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    os.environ.setdefault("PIP_NO_INPUT", "1")
    os.environ.setdefault("PIP_CACHE_DIR", os.path.join(tmp, "pip-cache"))
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"

    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name=kernel_name)
    oom0 = oom_kills()
    try:
        km.start_kernel(stdin=_null, stdout=_null, stderr=_null, cwd=os.getcwd())
        kc = km.blocking_client()
        kc.start_channels()
        kc.wait_for_ready(timeout=float(os.environ.get("SBX_CELL_START_TIMEOUT", "60")))
    except Exception as e:  # noqa: BLE001 - every failure goes back as a message
        emit({"ev": "failed", "message": "%s: %s" % (type(e).__name__, e)})
        try:
            km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001
            pass
        return 1
    popen = getattr(km.provisioner, "process", None)
    pid = popen.pid if popen is not None else -1
    info = {}
    try:
        kc.kernel_info()
        reply = kc.get_shell_msg(timeout=10)
        info = reply["content"].get("language_info", {})
        info["implementation"] = reply["content"].get("implementation", "")
    except Exception:  # noqa: BLE001
        pass
    emit({"ev": "ready", "kernel_pid": pid, "language": info.get("name", ""),
          "implementation": info.get("implementation", "")})

    ops = queue.Queue()
    # An interrupt that comes before the kernel runs the cell's code (its
    # execute_input) would be lost, and the cell would then be killed after
    # the grace with its state: it waits for the code to start.
    # An interrupt that lands in ipykernel's own code around the cell (after
    # execute_input, before the code's own try) is swallowed by the kernel
    # ("KeyboardInterrupt caught in kernel"): the cell's handler ends with
    # no execute_reply at all, only its idle status. After an interrupt was
    # delivered, a reply that is not there REPLY_AFTER_IDLE_S after idle is
    # taken as that, and the cell ends interrupted (it may not have run).
    cell = {"running": False, "started": False, "pending": False, "interrupted": False}
    cell_lock = threading.Lock()

    def interrupt():
        with cell_lock:
            if cell["running"] and not cell["started"]:
                cell["pending"] = True
                return
            cell["interrupted"] = cell["running"]
        try:
            km.interrupt_kernel()
        except Exception:  # noqa: BLE001
            pass

    def reader():
        for raw in PROTO_IN:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            op = msg.get("op")
            if op == "interrupt":
                interrupt()
            elif op == "replay":
                replay()
            elif op == "stats":
                emit({"ev": "stats", "id": msg.get("id"), "rss_kb": rss_kb(pid)})
            else:
                if op == "execute":  # a variables op takes an interrupt at once (no code to wait for)
                    with cell_lock:
                        cell.update(running=True, started=False, pending=False)
                ops.put(msg)
        ops.put({"op": "shutdown"})

    threading.Thread(target=reader, daemon=True).start()

    def dead():
        code = popen.poll() if popen is not None else None
        if code is None and km.is_alive():
            return False
        sig = -code if code is not None and code < 0 else 0
        n = oom_kills()
        cause = "oom" if (oom0 >= 0 and n > oom0) else ("killed" if sig else "exited")
        emit({"ev": "dead", "cause": cause, "signal": sig, "exit_code": code if code is not None else -1})
        return True

    def run(code, cid, silent=False, user_expressions=None):
        # running was set when the op was read (an interrupt may follow it at once)
        try:
            return run_cell(code, cid, silent, user_expressions)
        finally:
            with cell_lock:
                cell.update(running=False, started=False, pending=False, interrupted=False)

    def run_cell(code, cid, silent, user_expressions):
        msg_id = kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                            stop_on_error=True, user_expressions=user_expressions or {})
        idle = False
        while not idle:
            try:
                m = kc.get_iopub_msg(timeout=0.25)
            except queue.Empty:
                if dead():
                    return None
                continue
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            t, c = m["msg_type"], m["content"]
            if t == "execute_input" or (t == "status" and c.get("execution_state") == "idle"):
                with cell_lock:
                    cell["started"] = True
                    pending, cell["pending"] = cell["pending"], False
                if pending:
                    interrupt()
            if silent:
                pass
            elif t == "stream":
                text = c.get("text", "")
                for i in range(0, max(len(text), 1), STREAM_CHUNK):
                    ev = {"ev": "stream", "id": cid, "name": c.get("name"), "text": text[i:i + STREAM_CHUNK]}
                    if KERNEL_DROP_MARK in ev["text"]:
                        ev["clipped"] = True  # the kernel's own note (a cell that prints it only marks itself)
                    emit(ev, True)
            elif t in ("display_data", "execute_result"):
                data = c.get("data", {})
                ev = {"ev": t, "id": cid, "data": data, "metadata": c.get("metadata", {})}
                if any(isinstance(v, str) and len(v) > MAX_VALUE for v in data.values()):
                    ev["data"] = {k: (v[:MAX_VALUE] if isinstance(v, str) else v) for k, v in data.items()}
                    ev["clipped"] = True
                emit(ev, True)
            elif t == "error":
                emit({"ev": "error", "id": cid, "ename": clip(c.get("ename", "")),
                      "evalue": clip(c.get("evalue", "")), "traceback": [clip(x) for x in c.get("traceback", [])][:200]},
                     True)
            elif t == "clear_output":
                emit({"ev": "clear_output", "id": cid}, True)
            if t == "status" and c.get("execution_state") == "idle":
                idle = True
        idle_at = time.monotonic()
        while True:
            try:
                r = kc.get_shell_msg(timeout=0.25)
            except queue.Empty:
                if dead():
                    return None
                with cell_lock:
                    swallowed = cell["interrupted"] and time.monotonic() - idle_at > REPLY_AFTER_IDLE_S
                if swallowed and not silent:
                    emit({"ev": "error", "id": cid, "ename": "KeyboardInterrupt",
                          "evalue": "the interrupt reached the kernel outside the cell's code, which may not have run",
                          "traceback": []}, True)
                if swallowed:
                    return {"status": "error", "execution_count": None}
                continue
            if r.get("parent_header", {}).get("msg_id") == msg_id:
                return r["content"]

    while True:
        msg = ops.get()
        op = msg.get("op")
        if op == "shutdown":
            break
        cid = msg.get("id")
        if op == "execute" and isinstance(msg.get("code"), str):
            cell_begin(cid)
            env = msg.get("env")
            if isinstance(env, dict) and env:
                # the session's environment (secrets' placeholders, CA and package variables), which a
                # kernel started ahead of its session lacks: set in the kernel, silently, before the code
                env = {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}
                if run_cell("__import__('os').environ.update(__import__('json').loads(%r))" % json.dumps(env),
                            cid, True, None) is None:
                    return 0
            reply = run(msg["code"], cid)
            if reply is None:
                return 0
            cell_end({"ev": "done", "id": cid, "execution_count": reply.get("execution_count"),
                      "status": reply.get("status")})
        elif op == "variables":
            reply = run("", cid, silent=True, user_expressions={"v": VARS_EXPR})
            if reply is None:
                return 0
            out = []
            try:
                v = reply.get("user_expressions", {}).get("v", {})
                for name, typ, rep, shape, err in json.loads(ast.literal_eval(v["data"]["text/plain"])):
                    e = {"name": name, "type": typ, "repr": rep}
                    if shape:
                        e["shape"] = shape
                    if err:
                        e["error"] = err
                    out.append(e)
            except Exception:  # noqa: BLE001 - the expression failed as a whole (VARS_SRC itself)
                pass
            emit({"ev": "variables", "id": cid, "vars": out})
    try:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    except Exception:  # noqa: BLE001
        pass
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is for the kernel, never the bridge
    sys.exit(main())
