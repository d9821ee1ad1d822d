"""The Python client against a real sandboxd (tests/daemon.py): every method
the client exposes, over HTTPS (ClientTest) and over mTLS (MTLSTest), with
streaming, errors by type and a 100-way parallel run.

Run: SANDBOXD_BUILD_DIR=build /usr/bin/python3 -m unittest discover -s clients/python/tests -v
The two daemons run one after the other (they share the run's instance
label, and a daemon that starts removes its instance's containers it does
not know)."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sandboxd  # noqa: E402
from sandboxd.aio import AsyncSandboxd  # noqa: E402

from daemon import Daemon  # noqa: E402

DEADLINE_S = 60


def wait_until(pred, what: str, deadline_s: float = DEADLINE_S):
    """Poll pred until it is truthy; fail the test at the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class ClientTest(unittest.TestCase):
    """The whole client over HTTPS (server certificate, no client certificate)."""

    daemon: Daemon
    sbx: sandboxd.Sandboxd

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(
            env={"SANDBOXD_LIMITS_FILE_SIZE": "1m", "SANDBOXD_LIMITS_SERVICES_PER_SESSION": "2"}
        ).start()
        cls.token = cls.daemon.token("alice")
        cls.sbx = sandboxd.Sandboxd(cls.daemon.url, cls.token, ca_file=cls.daemon.ca)
        cls.s = cls.sbx.create_session("main")

    @classmethod
    def tearDownClass(cls):
        cls.sbx.close()
        cls.daemon.stop()

    # ---- construction ----

    def test_url_and_token_come_from_the_environment(self):
        old = {k: os.environ.get(k) for k in ("SANDBOXD_URL", "SANDBOXD_TOKEN", "SANDBOXD_CA")}
        try:
            os.environ.update(SANDBOXD_URL=self.daemon.url, SANDBOXD_TOKEN=self.token, SANDBOXD_CA=self.daemon.ca)
            with sandboxd.Sandboxd() as c:
                self.assertEqual(c.session("main").info().session, "main")
            del os.environ["SANDBOXD_TOKEN"]
            with self.assertRaises(ValueError):
                sandboxd.Sandboxd()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_a_daemon_certificate_from_another_ca_is_refused(self):
        with sandboxd.Sandboxd(self.daemon.url, self.token) as c:  # the system store: no test CA
            with self.assertRaises(sandboxd.TransportError) as cm:
                c.list_sessions()
        self.assertEqual(cm.exception.code, "transport")

    # ---- sessions ----

    def test_sessions_create_info_list_destroy(self):
        s = self.sbx.create_session("life", env={"GREETING": "hello"}, ttl_seconds=3600)
        self.assertEqual(s.created.session, "life")
        self.assertEqual(s.created.env_names, ["GREETING"])
        self.assertIsNotNone(s.created.expires_at)
        self.assertEqual(s.exec("echo $GREETING").stdout, "hello\n")
        info = s.info()
        self.assertEqual((info.session, info.user, info.state), ("life", "alice", "running"))
        self.assertIn("life", [x.session for x in self.sbx.list_sessions()])
        with self.assertRaises(sandboxd.ConflictError):
            self.sbx.create_session("life")
        r = s.destroy(purge=True)
        self.assertEqual((r.session, r.destroyed, r.purged), ("life", True, True))
        self.assertNotIn(
            "life", [x.session for x in self.sbx.list_sessions() if x.state not in ("stopped", "destroyed")]
        )
        named = self.sbx.create_session()
        self.assertRegex(named.name, r"^s-[0-9a-f]{12}$")
        named.destroy()

    def test_snapshot_restore_fork(self):
        s = self.sbx.session("snapper")
        s.exec("mkdir -p d && echo one > d/f && ln -s d/f link")
        snap = s.snapshot("before")
        self.assertTrue(snap.snapshot.startswith("snap-"))
        self.assertEqual((snap.name, snap.session, snap.state), ("before", "snapper", "ready"))
        self.assertIn("before", [x.name for x in self.sbx.list_snapshots("snapper").snapshots])
        s.exec("rm -rf d link && echo two > other")
        r = s.restore("before")
        self.assertEqual((r.restored, r.state), (True, "stopped"))
        self.assertEqual(s.exec("cat d/f; readlink link; ls other 2>/dev/null || echo gone").stdout, "one\nd/f\ngone\n")
        kid = s.fork("snapkid")
        self.assertEqual(kid.created.forked_from, {"session": "snapper"})
        kid.exec("echo kid > d/f")
        self.assertEqual(s.exec("cat d/f").stdout, "one\n")
        self.assertEqual(kid.exec("cat d/f").stdout, "kid\n")
        with self.assertRaises(sandboxd.ConflictError):
            self.sbx.fork_session("snapkid", from_snapshot="before")
        with self.assertRaises(ValueError):
            self.sbx.fork_session("x")
        self.assertTrue(self.sbx.delete_snapshot("before").deleted)
        self.assertNotIn("before", [x.name for x in self.sbx.list_snapshots().snapshots])
        kid.destroy(purge=True)
        s.destroy(purge=True)

    # ---- executions ----

    def test_exec_waits_for_the_end(self):
        r = self.s.exec("echo out; echo err >&2; exit 3")
        self.assertEqual((r.state, r.exit_code, r.stdout, r.stderr), ("completed", 3, "out\n", "err\n"))
        self.assertFalse(r.ok)
        self.s.exec("mkdir -p sub")
        r = self.s.exec("pwd; printf $X; cat", workdir="sub", stdin="piped", env={"X": "x-"})
        self.assertTrue(r.ok)
        self.assertEqual(r.stdout, "/workspace/sub\nx-piped")
        r = self.s.exec("sleep 30", timeout_seconds=1)
        self.assertEqual((r.state, r.cause), ("timeout", "timeout"))

    def test_stream_delivers_output_before_the_execution_ends(self):
        # The command cannot end before the test creates /workspace/go, so a
        # chunk seen while it is still running arrived before the end.
        cmd = "echo first; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo second >&2"
        with self.s.exec_stream(cmd, timeout_seconds=60) as st:
            it = iter(st)
            first = next(it)
            self.assertEqual((first.stream, first.data), ("stdout", "first\n"))
            self.assertIsNone(st.result)
            running = self.s.list_executions(states=["running"])
            self.assertTrue(any("/workspace/go" in (x.get("command_preview") or "") for x in running), running)
            self.s.write_file("go", "")
            rest = list(it)
        self.assertEqual(rest, [("stderr", "second\n")])
        self.assertEqual((st.result.state, st.result.stdout, st.result.stderr), ("completed", "first\n", "second\n"))
        self.s.exec("rm -f /workspace/go")

    def test_a_stream_error_raises_its_type(self):
        with self.assertRaises(sandboxd.InvalidError):
            self.s.run_code_stream("print(1)", language="cobol").finish()

    def test_background_get_wait_list_cancel(self):
        ex = self.s.exec_background("echo started; sleep 120", timeout_seconds=300)
        self.assertIn(ex.started.state, ("pending", "running"))
        wait_until(lambda: ex.get().stdout == "started\n", "the first output")
        self.assertIn(ex.id, [x.execution_id for x in self.s.list_executions(states=["running"])])
        r = ex.cancel()
        self.assertEqual(r.state, "cancelled")
        self.assertEqual(ex.get().state, "cancelled")
        with self.assertRaises(sandboxd.AlreadyFinishedError) as cm:
            ex.send_stdin("late")
        self.assertIsInstance(cm.exception, sandboxd.ConflictError)
        self.assertEqual(cm.exception.status, 409)
        quick = self.s.exec_background("echo done")
        self.assertEqual(quick.wait(60).stdout, "done\n")
        self.assertEqual(self.s.execution(quick.id).get(wait=True).state, "completed")

    def test_stdin_and_terminal(self):
        ex = self.s.exec_background("cat", interactive=True, timeout_seconds=60)
        self.assertEqual(ex.send_stdin("hello ").bytes, 6)
        ex.send_stdin(b"\x00bytes\n", eof=True)
        r = ex.wait(60)
        self.assertEqual((r.state, r.stdout), ("completed", "hello \ufffdbytes\n"))
        tty = self.s.exec_background("read line; stty size; echo got $line", tty=True, rows=10, cols=20)
        wait_until(lambda: self._resized(tty), "a resize of the terminal")
        tty.send_stdin("x\n")
        r = tty.wait(60)
        self.assertIn("33 44", r.stdout)
        self.assertIn("got x", r.stdout)

    @staticmethod
    def _resized(tty):
        try:
            return tty.resize(33, 44).rows == 33
        except sandboxd.BusyError:  # the terminal is not attached yet
            return False

    def test_run_code_and_the_script_cache(self):
        r = self.s.run_code("# sums\nprint(sum(range(10)))")
        self.assertEqual(r.stdout, "45\n")
        self.assertIsNotNone(r.cached)
        self.assertEqual(self.s.run_code("console.log(6*7)", language="node").stdout, "42\n")
        again = self.s.run_code(script=r.cached["name"])
        self.assertEqual(again.stdout, "45\n")
        listed = self.sbx.list_scripts(filter="sums")
        self.assertIn(r.cached["name"], [x.name for x in listed.scripts])
        self.assertGreaterEqual(self.sbx.clear_scripts(r.cached["name"]), 1)
        with self.assertRaises(sandboxd.NotFoundError):
            self.s.run_code(script=r.cached["name"])
        st = self.s.run_code_stream("import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr)")
        chunks = list(st)
        # a stream's chunks are cut wherever its pipe was read: join them
        self.assertEqual("".join(c.data for c in chunks if c.stream == "stdout"), "a\n")
        self.assertEqual("".join(c.data for c in chunks if c.stream == "stderr"), "b\n")
        self.assertEqual((st.result.stdout, st.result.stderr), ("a\n", "b\n"))
        bg = self.s.run_code_background("print('bg')")
        self.assertEqual(bg.wait(60).stdout, "bg\n")

    # ---- files ----

    def test_files(self):
        self.assertEqual(self.s.write_file("dir/a.txt", "héllo").bytes, 6)
        blob = bytes(range(256)) * 4
        self.assertEqual(self.s.write_file("dir/b.bin", blob).bytes, 1024)
        self.assertEqual(self.s.read_file("dir/b.bin"), blob)
        self.assertEqual(self.s.read_text("dir/a.txt"), "héllo")
        part = self.s.read_file_chunk("dir/b.bin", offset=1000, length=100)
        self.assertEqual((part.content, part.size, part.eof), (blob[1000:], 1024, True))
        ls = self.s.list_files("dir")
        self.assertEqual(
            sorted((e.name, e.type, e.size) for e in ls.entries), [("a.txt", "file", 6), ("b.bin", "file", 1024)]
        )
        with self.assertRaises(sandboxd.InvalidError):
            self.s.read_file("../../etc/passwd")
        with self.assertRaises(sandboxd.NotFoundError):
            self.s.read_file("dir/missing")
        with self.assertRaises(sandboxd.TooLargeError) as cm:
            self.s.write_file("big", b"x" * ((1 << 20) + 1))  # limits.file_size=1m here
        self.assertEqual(cm.exception.status, 413)

    # ---- services ----

    def test_services(self):
        s = self.sbx.create_session("svc")
        try:
            started = s.start_service("ticker", "echo svc-up; sleep 300")
            self.assertEqual(started.name, "ticker")
            wait_until(lambda: "svc-up" in s.service_logs("ticker", tail_lines=10).stdout, "the service's log")
            self.assertEqual([x.name for x in s.list_services()], ["ticker"])
            self.assertEqual(s.list_services()[0].state, "running")
            with self.assertRaises(sandboxd.ConflictError):
                s.start_service("ticker", "sleep 1")
            s.start_service("second", "sleep 300")
            with self.assertRaises(sandboxd.BusyError) as cm:  # limits.services_per_session=2 here
                s.start_service("third", "sleep 300")
            self.assertEqual(cm.exception.status, 429)
            stopped = s.stop_service("ticker")
            self.assertIn(stopped.state, ("stopped", "failed"))
            with self.assertRaises(sandboxd.NotFoundError):
                s.stop_service("never-started")
        finally:
            s.destroy()

    # ---- policy: egress additions (connector role) and private marks ----

    def test_egress_allow_needs_a_connector_and_changes_the_policy(self):
        with self.assertRaises(sandboxd.ForbiddenError) as cm:
            self.s.egress_allow("example.com")
        self.assertEqual(cm.exception.status, 403)
        with sandboxd.Sandboxd(self.daemon.url, self.daemon.token("alice", "connector"), ca_file=self.daemon.ca) as c:
            s = c.session("main")
            pol = s.egress_allow("pypi.org")
            self.assertIn("pypi.org", [a.pattern for a in pol.allow])
            self.assertIn("pypi.org", [a.pattern for a in s.info().egress.allow])
            pol = s.egress_allow("pypi.org", remove=True)
            self.assertNotIn("pypi.org", [a.pattern for a in pol.allow])
            with self.assertRaises(sandboxd.InvalidError):
                s.egress_allow("pypi.org", scope="galaxy")
            p = c.session("priv")
            r = p.mark_private("payroll", source="hr-db")
            self.assertEqual(r.network_mode, "none")
            self.assertEqual([d.dataset for d in r.datasets], ["payroll"])
            self.assertTrue(p.info().private)
            p.destroy()

    # ---- idempotency keys, tasks, run_tests ----

    def test_idempotency_keys(self):
        a = self.s.exec("echo once >> idem.log; cat idem.log", idempotency_key="k-exec-1")
        b = self.s.exec("echo once >> idem.log; cat idem.log", idempotency_key="k-exec-1")
        self.assertEqual((a.execution_id, a.stdout), (b.execution_id, b.stdout))
        self.assertEqual(self.s.read_text("idem.log"), "once\n")
        with self.assertRaises(sandboxd.ConflictError):
            self.s.exec("echo other", idempotency_key="k-exec-1")
        w1 = self.s.write_file("idem.txt", "v1", idempotency_key="k-write-1")
        w2 = self.s.write_file("idem.txt", "v1", idempotency_key="k-write-1")
        # the replay is the first answer, but names its own request's trace id
        self.assertNotEqual(w1.pop("trace_id"), w2.pop("trace_id"))
        self.assertEqual(w2, w1)
        with self.assertRaises(sandboxd.InvalidError):
            self.s.call("list_files", {"idempotency_key": "k-list"})

    def test_tasks(self):
        ex = self.s.exec_background("sleep 120", timeout_seconds=300)
        t = self.s.create_task(ex.id, "exec")
        self.assertEqual((t.execution_id, t.status, t.tool), (ex.id, "working", "exec"))
        self.assertEqual(self.sbx.get_task(t.task_id).status, "working")
        self.assertEqual(self.sbx.cancel_task(t.task_id).status, "cancelled")
        wait_until(lambda: ex.get().state == "cancelled", "the task's execution to be cancelled")
        with self.assertRaises(sandboxd.AlreadyFinishedError):
            self.sbx.cancel_task(t.task_id)
        with self.assertRaises(sandboxd.NotFoundError):
            self.sbx.get_task("0" * 32)

    def test_run_tests(self):
        code = "def add(a, b):\n    return a + b\n"
        ok = self.s.run_tests("from solution import add\ndef test_add():\n    assert add(2, 3) == 5\n", code=code)
        self.assertTrue(ok.success)
        self.assertEqual(ok.summary, {"total": 1, "passed": 1, "failed": 0, "skipped": 0})
        bad = self.s.run_tests(
            "from solution import add\ndef test_ok():\n    assert add(1, 1) == 2\n"
            "def test_wrong():\n    assert add(2, 2) == 5\n",
            code=code,
        )
        self.assertFalse(bad.success)
        self.assertEqual((bad.summary["passed"], bad.summary["failed"]), (1, 1))
        self.assertEqual([t.name for t in bad.tests if not t.passed], ["test_wrong"])
        node = self.s.run_tests(
            "import test from 'node:test';\nimport assert from 'node:assert';\n"
            "test('sum', () => assert.equal(1 + 1, 2));\n",
            language="node",
        )
        self.assertTrue(node.success, node)

    # ---- errors ----

    def test_errors_map_to_their_types(self):
        with sandboxd.Sandboxd(self.daemon.url, "not-a-token", ca_file=self.daemon.ca) as c:
            with self.assertRaises(sandboxd.UnauthorizedError) as cm:
                c.list_sessions()
        self.assertEqual((cm.exception.code, cm.exception.status), ("unauthorized", 401))
        with self.assertRaises(sandboxd.InvalidError) as cm:
            self.sbx.session("bad name!").info()
        self.assertEqual((cm.exception.code, cm.exception.status, cm.exception.method), ("invalid", 400, "session_info"))
        with self.assertRaises(sandboxd.NotFoundError):
            self.sbx.call("no_such_method", {})
        with self.assertRaises(sandboxd.BadRequestError):
            self.s.call("exec", {})  # no command
        with self.assertRaises(sandboxd.NotFoundError):
            self.s.get_execution("f" * 32)
        # another user's execution is not_found, exactly like an unknown one
        ex = self.s.exec("true")
        with sandboxd.Sandboxd(self.daemon.url, self.daemon.token("bob"), ca_file=self.daemon.ca) as bob:
            with self.assertRaises(sandboxd.NotFoundError):
                bob.session("main").get_execution(ex.execution_id)
        for code, cls in sandboxd.ERRORS_BY_CODE.items():
            e = sandboxd.error_from(code, "m", 0, "x")
            self.assertIs(type(e), cls)
            self.assertEqual(e.code, code)
        self.assertIs(type(sandboxd.error_from("brand_new", "m")), sandboxd.SandboxdError)

    # ---- concurrency ----

    def test_100_parallel_calls_on_one_client(self):
        sessions = [self.sbx.session(f"par{i}") for i in range(4)]
        for s in sessions:
            s.info()  # containers first: the parallel part measures calls, not creation
        results: list = [None] * 100
        errors: list = []

        def work(i: int):
            try:
                s = sessions[i % len(sessions)]
                if i % 2:
                    results[i] = s.exec(f"echo {i}").stdout
                else:
                    s.write_file(f"f{i}.txt", str(i))
                    results[i] = s.read_text(f"f{i}.txt") + "\n"
            except BaseException as e:  # collected and reported below
                errors.append((i, e))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertFalse(any(t.is_alive() for t in threads), "a call never returned")
        self.assertEqual(errors, [])
        self.assertEqual(results, [f"{i}\n" for i in range(100)])
        for s in sessions:
            s.destroy()

    # ---- asyncio twin ----

    def test_asyncio_twin(self):
        async def main():
            async with AsyncSandboxd(self.daemon.url, self.token, ca_file=self.daemon.ca) as a:
                s = a.session("main")
                r = await s.exec("echo async")
                st = await s.exec_stream("echo x; echo y")
                chunks = [c async for c in st]
                many = await asyncio.gather(*(s.exec(f"echo {i}") for i in range(10)))
                with self.assertRaises(sandboxd.NotFoundError):
                    await s.get_execution("0" * 32)
                return r, chunks, st.result, many

        r, chunks, res, many = asyncio.run(main())
        self.assertEqual(r.stdout, "async\n")
        self.assertEqual("".join(c.data for c in chunks), "x\ny\n")
        self.assertEqual(res.stdout, "x\ny\n")
        self.assertEqual([m.stdout for m in many], [f"{i}\n" for i in range(10)])

    # ---- run_cell (issue 25's stateful interpreters) ----

    def test_run_cell_when_the_daemon_has_it(self):
        try:
            self.s.run_cell("x = 41")
        except sandboxd.NotFoundError as e:
            if "unknown method" in e.message:
                self.skipTest("this daemon has no run_cell (issue 25 not merged)")
            raise
        r = self.s.run_cell("x + 1")
        self.assertEqual(r.text, "42")
        self.assertIsInstance(r.execution_count, int)
        fig = self.s.run_cell(
            "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", timeout_seconds=120
        )
        self.assertTrue(fig.images, fig)
        self.assertEqual(fig.images[0][:8], b"\x89PNG\r\n\x1a\n")
        self.assertIn("default", [c.get("context") or c.get("name") for c in self.s.list_contexts()])

    def test_cell_outputs_decode_images(self):
        png = b"\x89PNG\r\n\x1a\n" + bytes(range(32))
        r = sandboxd.CellResult(
            {
                "context": "default",
                "generation": 1,
                "execution_count": 3,
                "outputs": [
                    {"type": "stream", "name": "stdout", "text": "hi\n"},
                    {"type": "display_data", "data": {"image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"}},
                    {"type": "execute_result", "data": {"text/plain": "42"}},
                ],
                "stdout": "hi\n",
                "stderr": "",
            }
        )
        self.assertEqual(r.outputs[1].png, png)
        self.assertIsNone(r.outputs[0].png)
        self.assertEqual(r.images, [png])
        self.assertEqual(r.text, "42")
        self.assertEqual(r.outputs[0].name, "stdout")


class MTLSTest(unittest.TestCase):
    """A daemon that asks for client certificates (http.tls_client_ca)."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(mtls=True).start()
        cls.token = cls.daemon.token("carol")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_calls_and_streams_with_a_client_certificate(self):
        with sandboxd.Sandboxd(
            self.daemon.url,
            self.token,
            ca_file=self.daemon.ca,
            cert_file=self.daemon.client_cert,
            key_file=self.daemon.client_key,
        ) as c:
            s = c.create_session("m1")
            self.assertEqual(s.exec("echo mtls").stdout, "mtls\n")
            st = s.exec_stream("echo a; echo b")
            self.assertEqual("".join(ch.data for ch in st), "a\nb\n")
            self.assertEqual(st.result.state, "completed")
            s.write_file("x", b"\x01\x02")
            self.assertEqual(s.read_file("x"), b"\x01\x02")
            self.assertIn("m1", [x.session for x in c.list_sessions()])
            s.destroy()

    def test_client_certificate_from_the_environment(self):
        env = self.daemon.client_env(self.token)
        old = {k: os.environ.get(k) for k in env}
        try:
            os.environ.update(env)
            with sandboxd.Sandboxd() as c:
                self.assertEqual(c.session("m2").exec("echo env").stdout, "env\n")
                c.destroy_session("m2")
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_without_a_client_certificate_the_call_is_refused(self):
        with sandboxd.Sandboxd(self.daemon.url, self.token, ca_file=self.daemon.ca) as c:
            with self.assertRaises(sandboxd.ForbiddenError) as cm:
                c.list_sessions()
        self.assertEqual(cm.exception.status, 403)
        self.assertIn("client certificate", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
