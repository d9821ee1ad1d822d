#!/usr/bin/env python3
"""k8s_bench.py — the Kubernetes engine's rows of scripts/bench.sh --only k8s
(issue 27), each beside the Docker engine's figure from the same run: two
sandboxd daemons of this build, one on engine = docker and one on engine =
kubernetes (the testbed, or any cluster a kubeconfig names), the same image
and settings, driven over their API sockets with samples interleaved.

Rows:
  first_command_cold   a new session's first command (exec `true`), no pool
  first_command_warm   the same with pool.size 2 (a claimed slot); on an
                       engine where the pool never fills, the reason instead
  exec_roundtrip       exec `true` in a running session: median and p95 of N
  sessions_per_node    Kubernetes: sessions made (memory 64m, the default
                       cpu_shares) until kube-scheduler leaves a Pod Pending;
                       Running Pods per node and the scheduler's reason
  daemon_rss           the control daemon's VmRSS growth over R sessions with
                       real containers/Pods, per thousand sessions (linear)

Everything it makes carries its instance label (bench-<id>-docker,
bench-<id>-k8s) in a namespace of its own (sbx-bench-<id>), removed at exit.
Standard library only; traffic to loopback only (the API server is the
kubeconfig's). Prints a table to stderr and JSON to stdout.
"""
import argparse
import base64
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def log(msg):
    print(f"k8s-bench: {msg}", file=sys.stderr, flush=True)


# ---- the cluster, with the kubeconfig's own credentials ----

class Kube:
    def __init__(self, kubeconfig, tmp):
        text = open(kubeconfig).read()

        def field(name):
            m = re.search(rf"^\s*{re.escape(name)}:\s*(\S+)\s*$", text, re.M)
            return m.group(1).strip("\"'") if m else None

        self.server = field("server")
        if not self.server:
            raise SystemExit(f"{kubeconfig}: no server")
        self.ctx = ssl.create_default_context()
        ca = field("certificate-authority-data")
        if ca:
            self.ctx.load_verify_locations(cadata=base64.b64decode(ca).decode())
        cert, key = field("client-certificate-data"), field("client-key-data")
        if cert and key:
            cp, kp = os.path.join(tmp, "client.pem"), os.path.join(tmp, "client.key")
            for p, v in ((cp, cert), (kp, key)):
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.write(fd, base64.b64decode(v))
                os.close(fd)
            self.ctx.load_cert_chain(cp, kp)
        self.token = field("token")
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                  urllib.request.HTTPSHandler(context=self.ctx))

    def call(self, method, path, body=None):
        req = urllib.request.Request(self.server + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with self.opener.open(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, {}


# ---- a daemon of this build, over its API socket ----

def _child_setup():
    os.setpgid(0, 0)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the bench


class Daemon:
    def __init__(self, name, build, tmp, env):
        self.name = name
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.api = os.path.join(self.dir, "api.sock")
        self.admin = os.path.join(self.dir, "admin.sock")
        self.logpath = os.path.join(self.dir, "daemon.log")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXD_")}
        self.env.update({
            "SANDBOXD_DATA_DIR": os.path.join(self.dir, "data"),
            "SANDBOXD_API_SOCKET": self.api,
            "SANDBOXD_ADMIN_SOCKET": self.admin,
            "SANDBOXD_IMAGE": "sandboxd/python:latest",
            "SANDBOXD_MEMORY": "64m",
            "SANDBOXD_POOL_SIZE": "0",
            "SANDBOXD_LIMITS_SESSIONS": "1000",
            "SANDBOXD_LIMITS_SESSIONS_PER_USER": "1000",
            "SANDBOXD_PORTS_PER_SESSION": "1",
            "SANDBOXD_IDLE_TIMEOUT": "1h",
            "SANDBOXD_PAUSE_AFTER": "0",
            "SANDBOXD_LOG_LEVEL": "warn",
        })
        self.env.update(env)
        self.build = build
        self.proc = None
        self.token = None

    def start(self):
        logf = open(self.logpath, "ab")
        self.proc = subprocess.Popen([os.path.join(self.build, "sandboxd")], env=self.env, stdout=logf,
                                     stderr=logf, preexec_fn=_child_setup)
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}: sandboxd exited at start:\n{self.tail()}")
            try:
                if self.admin_cmd({"cmd": "health"}).get("ok"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: sandboxd did not come up:\n{self.tail()}")
            time.sleep(0.1)
        if not self.token:
            self.token = self.admin_cmd({"cmd": "token.create", "user": "bench"})["result"]["token"]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, n=20):
        try:
            return "\n".join(open(self.logpath, errors="replace").read().splitlines()[-n:])
        except OSError:
            return "(no log)"

    def rss_kb(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    @staticmethod
    def _line_call(path, obj, timeout):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(path)
            s.sendall((json.dumps(obj) + "\n").encode())
            buf = b""
            while True:
                while b"\n" not in buf:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise OSError("connection closed")
                    buf += chunk
                line, buf = buf.split(b"\n", 1)
                o = json.loads(line)
                if "ok" in o:
                    return o
        finally:
            s.close()

    def admin_cmd(self, obj):
        return self._line_call(self.admin, obj, 30)

    def call(self, method, params, timeout=300):
        return self._line_call(self.api, {"id": 1, "token": self.token, "method": method, "params": params}, timeout)

    def must(self, method, params, timeout=300):
        r = self.call(method, params, timeout)
        if not r.get("ok"):
            raise RuntimeError(f"{self.name}: {method} {params}: {r.get('error')}\n{self.tail()}")
        return r["result"]

    def timed_exec(self, session, command="true"):
        t0 = time.monotonic()
        r = self.must("exec", {"session": session, "command": command})
        dt = (time.monotonic() - t0) * 1000
        if r.get("exit_code") != 0:
            raise RuntimeError(f"{self.name}: exec {command}: {r}")
        return dt

    def destroy(self, session):
        self.call("destroy_session", {"session": session, "purge": True})

    def pool_ready(self):
        r = self.admin_cmd({"cmd": "pool"})
        return (r.get("result") or {}).get("pool", {}).get("ready", 0)


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def summary(xs):
    return {"n": len(xs), "median_ms": round(statistics.median(xs), 1), "p95_ms": round(pct(xs, 95), 1),
            "min_ms": round(min(xs), 1), "max_ms": round(max(xs), 1)}


def first_command(daemons, n, prefix):
    """n new sessions per daemon, interleaved; each session's first exec."""
    out = {d.name: [] for d in daemons}
    for i in range(n):
        for d in daemons:
            out[d.name].append(d.timed_exec(f"{prefix}{i}"))
    for d in daemons:
        for i in range(n):
            d.destroy(f"{prefix}{i}")
    return {k: summary(v) for k, v in out.items()}


def wait_pool(d, size, limit_s):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if d.pool_ready() >= size:
                return True
        except (OSError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    return False


def warm_first_command(daemons, n, pool_size):
    """The first command of a new session that claims a warm slot; a sample
    counts only when session_info says the session was pooled."""
    out = {}
    for d in daemons:
        if not wait_pool(d, pool_size, 120):
            out[d.name] = {"error": f"the pool never held {pool_size} ready slot(s) within 120 s "
                                    f"(admin pool: {d.admin_cmd({'cmd': 'pool'}).get('result')})"}
            continue
        xs = []
        for i in range(n):
            if not wait_pool(d, pool_size, 120):
                break
            s = f"warm{i}"
            dt = d.timed_exec(s)
            if d.must("session_info", {"session": s}).get("pooled"):
                xs.append(dt)
            d.destroy(s)
        out[d.name] = summary(xs) if xs else {"error": "no sample claimed a warm slot"}
    return out


def roundtrip(daemons, n):
    out = {d.name: [] for d in daemons}
    for d in daemons:
        for _ in range(5):  # the session made, the runner connected
            d.timed_exec("rt")
    for _ in range(n):
        for d in daemons:
            out[d.name].append(d.timed_exec("rt"))
    for d in daemons:
        d.destroy("rt")
    return {k: summary(v) for k, v in out.items()}


def rss(daemons, total, steps, par):
    """VmRSS after a first session, then at each step of `total` sessions
    (made `par` at a time); the least-squares slope, per thousand."""
    res = {}
    for d in daemons:
        d.timed_exec("rss-base")
        pts = [(1, d.rss_kb())]
        made = 1
        for target in steps:
            with ThreadPoolExecutor(par) as ex:
                list(ex.map(lambda i: d.timed_exec(f"rss{i}"), range(made, target)))
            made = target
            time.sleep(2)  # not a wait: the monitor's next pass, so its per-session state is in
            pts.append((made, d.rss_kb()))
            log(f"{d.name}: {made} sessions, VmRSS {pts[-1][1]} kB")
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
        res[d.name] = {"points": [{"sessions": x, "rss_kb": y} for x, y in pts],
                       "kb_per_session": round(slope, 1), "mb_per_1000_sessions": round(slope * 1000 / 1024, 1)}
        with ThreadPoolExecutor(par) as ex:
            list(ex.map(lambda i: d.destroy(f"rss{i}"), range(1, made)))
        d.destroy("rss-base")
    return res


def sessions_per_node(d, kube, ns, instance, par, limit):
    """Sessions until a Pod stays Pending: Running Pods per node, and the
    scheduler's reason. The daemon has kubernetes.start_timeout 20s, so the
    session whose Pod is unschedulable fails after it. A node whose kubelet
    is away (another user of the cluster) fails a session the same way: the
    reason then is not the scheduler's, and the JSON says so."""
    made, failed = 0, 0
    lock = threading.Lock()

    def one(i):
        nonlocal made, failed
        r = d.call("exec", {"session": f"fill{i}", "command": "true"}, timeout=120)
        with lock:
            if r.get("ok"):
                made += 1
            else:
                failed += 1
        return r.get("ok")

    i = 0
    reason = None
    while i < limit and failed == 0:
        batch = range(i, min(i + par, limit))
        with ThreadPoolExecutor(par) as ex:
            list(ex.map(one, batch))
        i = batch.stop
    st, pods = kube.call("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=sandboxd.instance%3D{instance}")
    per_node, pending = {}, 0
    for p in pods.get("items", []):
        node = p.get("spec", {}).get("nodeName")
        if p.get("status", {}).get("phase") == "Running" and node:
            per_node[node] = per_node.get(node, 0) + 1
        elif not node:
            pending += 1
            for c in p.get("status", {}).get("conditions", []):
                if c.get("reason") == "Unschedulable":
                    reason = c.get("message")
    st, ev = kube.call("GET", f"/api/v1/namespaces/{ns}/events?fieldSelector=reason%3DFailedScheduling")
    if not reason:  # the Pending Pod is gone (its session failed): the scheduler's event says why
        msgs = [e.get("message") for e in ev.get("items", []) if "nodes are available" in (e.get("message") or "")]
        reason = msgs[-1] if msgs else None
    # the others' Pods on the nodes: what was left of them when the fill began
    st, nodes = kube.call("GET", "/api/v1/nodes")
    alloc = {n["metadata"]["name"]: n["status"].get("allocatable", {}) for n in nodes.get("items", [])}
    with ThreadPoolExecutor(par) as ex:
        list(ex.map(lambda k: d.destroy(f"fill{k}"), range(i)))
    return {"sessions_made": made, "running_per_node": per_node, "pending_pods": pending,
            "failed_creates": failed, "scheduler_reason": reason, "allocatable": alloc,
            "session_requests": {"memory": d.env["SANDBOXD_MEMORY"],
                                 "cpu_millis": int(d.env.get("SANDBOXD_CPU_SHARES", "256")) * 1000 // 1024}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--id", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--port-base", type=int, default=23100)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below sweeps

    n_first = 5 if a.quick else 10
    n_rt = 30 if a.quick else 100
    rss_steps = [26, 51] if a.quick else [51, 101, 151]
    tmp = tempfile.mkdtemp(prefix="sandboxd-k8s-bench.")
    os.chmod(tmp, 0o711)
    kube = Kube(a.kubeconfig, tmp)
    ns = f"sbx-bench-{a.id}".lower()
    inst_k, inst_d = f"bench-{a.id}-k8s", f"bench-{a.id}-docker"
    st, _ = kube.call("POST", "/api/v1/namespaces",
                      {"metadata": {"name": ns, "labels": {"sandboxd.bench": a.id}}})
    if st not in (201, 409):
        raise SystemExit(f"creating namespace {ns}: HTTP {st}")
    deadline = time.monotonic() + 30
    while kube.call("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] != 200:
        if time.monotonic() > deadline:
            raise SystemExit(f"namespace {ns} has no default service account")
        time.sleep(0.2)

    k8s_env = {"SANDBOXD_ENGINE": "kubernetes", "SANDBOXD_KUBERNETES_CONFIG": a.kubeconfig,
               "SANDBOXD_KUBERNETES_NAMESPACE": ns, "SANDBOXD_KUBERNETES_IMAGE_PULL_POLICY": "Never"}
    daemons = []

    def make(name, inst, env, ports):
        d = Daemon(name, a.build, tmp, {"SANDBOXD_INSTANCE": inst, "SANDBOXD_PORT_RANGE": ports, **env})
        daemons.append(d)
        return d

    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load": os.getloadavg(),
           "nproc": os.cpu_count()}
    try:
        pb = a.port_base
        dk = make("docker", inst_d, {}, f"{pb}-{pb + 199}")
        kk = make("kubernetes", inst_k, k8s_env, f"{pb + 200}-{pb + 399}")
        for d in (dk, kk):
            d.start()
        log("first command of a new session, cold")
        res["first_command_cold"] = first_command([dk, kk], n_first, "cold")
        log("exec round trip")
        res["exec_roundtrip"] = roundtrip([dk, kk], n_rt)
        log("sessions per node until kube-scheduler leaves a Pod Pending (the default cpu_shares)")
        # a Pod left Pending fails its session after kubernetes.start_timeout: 20 s here
        kk.stop()
        kk.env["SANDBOXD_KUBERNETES_START_TIMEOUT"] = "20s"
        kk.start()
        res["sessions_per_node"] = sessions_per_node(kk, kube, ns, inst_k, 8, 400)
        del kk.env["SANDBOXD_KUBERNETES_START_TIMEOUT"]
        # the RSS rows need more Pods than the default CPU request lets the nodes hold:
        # cpu_shares 2 (a request of 1 millicore) on both engines
        for d in (dk, kk):
            d.stop()
            d.env["SANDBOXD_CPU_SHARES"] = "2"
            d.start()
        log(f"daemon RSS over {rss_steps[-1]} sessions (cpu_shares 2)")
        res["daemon_rss"] = rss([dk, kk], rss_steps[-1], rss_steps, 8)
        log("first command of a new session, pool warm (pool.size 2)")
        for d in (dk, kk):
            d.stop()
            del d.env["SANDBOXD_CPU_SHARES"]
            d.env.update({"SANDBOXD_POOL_SIZE": "2", "SANDBOXD_POOL_WAIT": "0"})
            d.start()
        res["first_command_warm"] = warm_first_command([dk, kk], n_first, 2)
    finally:
        for d in daemons:
            try:
                d.stop()
            except Exception as e:  # noqa: BLE001 (the sweep goes on)
                log(f"{d.name}: stop: {e}")
        kube.call("DELETE", f"/api/v1/namespaces/{ns}?gracePeriodSeconds=0")
        subprocess.run(["sh", "-c", f"docker ps -aq --filter label=sandboxd.instance={inst_d} | "
                                    "xargs -r docker rm -f -v >/dev/null"], check=False)
        if os.environ.get("SANDBOXD_BENCH_KEEP_LOG"):
            for d in daemons:
                shutil.copy(d.logpath, f"{os.environ['SANDBOXD_BENCH_KEEP_LOG']}.{d.name}")
        shutil.rmtree(tmp, ignore_errors=True)
    res["load_after"] = os.getloadavg()
    print(json.dumps(res, indent=1))
    # the table
    def row(name, key):
        v = res.get(key, {})
        cells = []
        for e in ("docker", "kubernetes"):
            x = v.get(e, {})
            cells.append(f"{e}: " + (f"median {x['median_ms']} ms, p95 {x['p95_ms']} ms (n={x['n']})"
                                     if "median_ms" in x else x.get("error", "-")))
        log(f"{name:22} " + " | ".join(cells))
    row("first_command_cold", "first_command_cold")
    row("first_command_warm", "first_command_warm")
    row("exec_roundtrip", "exec_roundtrip")
    for e, v in res.get("daemon_rss", {}).items():
        log(f"daemon_rss {e:11} {v['kb_per_session']} kB/session = {v['mb_per_1000_sessions']} MB per 1000 sessions")
    s = res.get("sessions_per_node", {})
    log(f"sessions_per_node      {s.get('running_per_node')} pending {s.get('pending_pods')}: {s.get('scheduler_reason')}")


if __name__ == "__main__":
    main()
