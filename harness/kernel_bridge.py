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
#                      {"ev": "variables", "id", "vars": [{"name", "type", "repr"}]}
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

PROTO_IN = os.fdopen(os.dup(0), "rb", buffering=0)
PROTO_OUT = os.fdopen(os.dup(1), "wb", buffering=0)
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)
_wlock = threading.Lock()
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
    try:
        with open("/sys/fs/cgroup/memory.events") as f:
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


VARS_EXPR = (
    "__import__('json').dumps([[k, type(v).__name__, __import__('reprlib').repr(v)[:160],"
    " str(getattr(v, 'shape', ''))[:40]]"
    " for k, v in list(globals().items()) if not k.startswith('_')"
    " and k not in ('In', 'Out', 'get_ipython', 'exit', 'quit', 'open')][:500])"
)


def main():
    kernel_name = sys.argv[1] if len(sys.argv) > 1 else "python3"
    tmp = os.environ.get("SBX_CELL_DIR") or "/tmp/sbx-cells"
    os.makedirs(tmp, mode=0o700, exist_ok=True)
    for k, sub in (("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                   ("MPLCONFIGDIR", "matplotlib"), ("JUPYTER_CONFIG_DIR", "jupyter")):
        os.environ[k] = os.path.join(tmp, sub)
        os.makedirs(os.environ[k], mode=0o700, exist_ok=True)
    # tracebacks as plain text: an agent reads them, no terminal does
    prof = os.path.join(os.environ["IPYTHONDIR"], "profile_default")
    os.makedirs(prof, mode=0o700, exist_ok=True)
    with open(os.path.join(prof, "ipython_kernel_config.py"), "w") as f:
        f.write("c.InteractiveShell.colors = 'NoColor'\n")
    # the image's MPLBACKEND=Agg would keep figures from coming back inline
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    # %pip install out of the box as the session's user on a read-only root:
    # into the user site under HOME (the workspace: it outlives containers,
    # and unlike /tmp it is not noexec), past Debian's externally-managed
    # marker (only the user site is writable anyway); the user site exists
    # before the kernel starts, so what pip puts there imports at once.
    os.environ.setdefault("PIP_USER", "1")
    os.environ.setdefault("PIP_BREAK_SYSTEM_PACKAGES", "1")
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    os.environ.setdefault("PIP_NO_INPUT", "1")
    os.environ.setdefault("PIP_CACHE_DIR", os.path.join(tmp, "pip-cache"))
    try:
        import site
        os.makedirs(site.getusersitepackages(), mode=0o755, exist_ok=True)
    except Exception:  # noqa: BLE001 - no user site: pip says why when asked
        pass
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
    cell = {"running": False, "started": False, "pending": False}
    cell_lock = threading.Lock()

    def interrupt():
        with cell_lock:
            if cell["running"] and not cell["started"]:
                cell["pending"] = True
                return
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
                if op in ("execute", "variables"):
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
                cell.update(running=False, started=False, pending=False)

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
                    emit({"ev": "stream", "id": cid, "name": c.get("name"), "text": text[i:i + STREAM_CHUNK]}, True)
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
        while True:
            try:
                r = kc.get_shell_msg(timeout=0.25)
            except queue.Empty:
                if dead():
                    return None
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
                for name, typ, rep, shape in json.loads(ast.literal_eval(v["data"]["text/plain"])):
                    e = {"name": name, "type": typ, "repr": rep}
                    if shape:
                        e["shape"] = shape
                    out.append(e)
            except Exception:  # noqa: BLE001 - an odd namespace gives an empty list
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
