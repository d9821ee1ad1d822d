"""A real sandboxd for the client tests and the examples, as
tests/js/harness.mjs starts one: a private data dir and sockets, instance =
the test run id ($SANDBOXD_TEST_RUN, so scripts/test.sh's sweep finds every
container it made), the python image, a port block of its own, and the
HTTPS front on a loopback port with a CA, a server certificate and a client
certificate made here with openssl (mTLS when asked). Cleanup (daemon,
containers of its instance, the temp dir) runs from stop(), atexit and
SIGTERM, and is idempotent.

As a program it wraps a command (CI runs the examples this way):

    python3 daemon.py [--mtls] [--user NAME] -- CMD ARGS...

starts a daemon, runs CMD with SANDBOXD_URL, SANDBOXD_TOKEN, SANDBOXD_CA
(and SANDBOXD_CERT, SANDBOXD_KEY) set, stops the daemon and exits with
CMD's status.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("SANDBOXD_BUILD_DIR", "build"))
DAEMON_BIN = os.path.join(BUILD, "sandboxd")
RUN_ID = os.environ.get("SANDBOXD_TEST_RUN") or f"py{int(time.time())}-{random.randrange(10**6)}"

OPENSSL = r"""
set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=sbx-test-ca
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1
printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile server.ext
openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=sbx-test-client
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2
"""


def _die_with_parent() -> None:
    """In the daemon's child before exec: SIGKILL it when this process dies
    (prctl PR_SET_PDEATHSIG), so a test killed outright leaves no daemon."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def admin_request(path: str, obj: dict, timeout: float = 10.0) -> dict:
    """One JSON line on the admin socket; the parsed reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps(obj).encode() + b"\n")
        buf = b""
        while b"\n" not in buf:
            d = s.recv(65536)
            if not d:
                raise ConnectionError(f"{path} closed without a reply")
            buf += d
    return json.loads(buf.split(b"\n", 1)[0])


class Daemon:
    def __init__(self, *, mtls: bool = False, env: dict | None = None):
        self.mtls = mtls
        self.dir = tempfile.mkdtemp(prefix=f"sbx-clients-{RUN_ID}-")
        self.instance = RUN_ID
        self.admin_socket = os.path.join(self.dir, "admin.sock")
        self.log_file = os.path.join(self.dir, "daemon.log")
        self.ca = os.path.join(self.dir, "ca.pem")
        self.client_cert = os.path.join(self.dir, "client.pem")
        self.client_key = os.path.join(self.dir, "client.key")
        # 500 ports: each live session holds a block of 5, the examples keep
        # 50 sessions at once, and ports other processes hold are skipped
        base = 16000 + random.randrange(8) * 500  # below the ephemeral range (32768-60999)
        self.env = dict(os.environ)
        self.env.update(
            SANDBOXD_DATA_DIR=os.path.join(self.dir, "data"),
            SANDBOXD_API_SOCKET=os.path.join(self.dir, "api.sock"),
            SANDBOXD_ADMIN_SOCKET=self.admin_socket,
            SANDBOXD_INSTANCE=self.instance,
            SANDBOXD_IMAGE="sandboxd/python:latest",
            SANDBOXD_PORT_RANGE=f"{base}-{base + 499}",
            SANDBOXD_LOG_LEVEL="info",
            SANDBOXD_POOL_SIZE="0",
            SANDBOXD_HTTP_LISTEN="127.0.0.1:0",
            SANDBOXD_HTTP_TLS_CERT=os.path.join(self.dir, "server.pem"),
            SANDBOXD_HTTP_TLS_KEY=os.path.join(self.dir, "server.key"),
            # the clients keep at most 8 connections each; 100 parallel
            # calls must never meet the default caps of 5 executions
            SANDBOXD_LIMITS_EXEC_PER_USER="24",
            SANDBOXD_LIMITS_EXEC_PER_SESSION="24",
            SANDBOXD_LIMITS_EXEC_GLOBAL="48",
        )
        if mtls:
            self.env["SANDBOXD_HTTP_TLS_CLIENT_CA"] = self.ca
        self.env.update(env or {})
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.cleaned = False
        atexit.register(self.cleanup)

    def start(self) -> "Daemon":
        if not os.path.exists(DAEMON_BIN):
            raise RuntimeError(f"build first: {DAEMON_BIN} (SANDBOXD_BUILD_DIR)")
        subprocess.run(["sh", "-c", OPENSSL], cwd=self.dir, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
        os.makedirs(self.env["SANDBOXD_DATA_DIR"], exist_ok=True)
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen([DAEMON_BIN], env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandboxd exited at start:\n{self.log_tail()}")
            if os.path.exists(self.admin_socket):
                try:
                    if admin_request(self.admin_socket, {"cmd": "health"}, 5).get("ok"):
                        break
                except OSError:
                    pass  # not ready yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"sandboxd did not come up:\n{self.log_tail()}")
            time.sleep(0.1)
        with open(self.log_file, encoding="utf-8", errors="replace") as f:
            m = re.search(r"HTTPS listening on 127\.0\.0\.1:0 \(port (\d+)\)", f.read())
        if not m:
            raise RuntimeError(f"no HTTPS port in the log:\n{self.log_tail()}")
        self.url = f"https://127.0.0.1:{m.group(1)}"
        return self

    def token(self, user: str, role: str = "agent") -> str:
        r = admin_request(self.admin_socket, {"cmd": "token.create", "user": user, "role": role})
        if not r.get("ok"):
            raise RuntimeError(f"token.create: {r.get('error')}")
        return r["result"]["token"]

    def client_env(self, token: str) -> dict:
        env = {"SANDBOXD_URL": self.url, "SANDBOXD_TOKEN": token, "SANDBOXD_CA": self.ca}
        if self.mtls:
            env.update(SANDBOXD_CERT=self.client_cert, SANDBOXD_KEY=self.client_key)
        return env

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_file, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no daemon log)"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        self.cleanup()

    def cleanup(self) -> None:
        """Kill the daemon, remove every container of its instance, delete the temp dir."""
        if self.cleaned:
            return
        self.cleaned = True
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        try:
            ids = subprocess.run(
                ["docker", "ps", "-aq", "--filter", f"label=sandboxd.instance={self.instance}"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout.split()
            if ids:
                subprocess.run(["docker", "rm", "-f", "-v", *ids], capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            print(f"client tests: container cleanup failed: {e}", file=sys.stderr)
        shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    mtls, user = False, "example"
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    opts, cmd = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    while opts:
        o = opts.pop(0)
        if o == "--mtls":
            mtls = True
        elif o == "--user" and opts:
            user = opts.pop(0)
        else:
            print(f"daemon.py: unknown option {o}", file=sys.stderr)
            return 2
    d = Daemon(mtls=mtls)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        d.start()
        env = dict(os.environ, **d.client_env(d.token(user)))
        rc = subprocess.run(cmd, env=env).returncode
        if rc != 0:
            print(f"daemon.py: {cmd[0]} exited {rc}; daemon log tail:\n{d.log_tail()}", file=sys.stderr)
        return rc
    finally:
        d.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
