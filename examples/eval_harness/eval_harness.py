#!/usr/bin/env python3
"""An evaluation harness on sandboxd: N candidate solutions (default 50),
each graded in its own session, all in parallel.

For every candidate it creates a session, writes the task (TASK.md and
solution.py) into the workspace, runs the task's tests against the
solution with ``run_tests``, records pass/fail, and destroys the session
(purged), whatever happened. The candidates here are scripted, as a model
would have produced them: every seventh one is deliberately wrong (a wrong
answer, or a solution that does not even import), so the report has both
outcomes and the harness checks that each grade is the expected one.

    SANDBOXD_URL=https://host:8443 SANDBOXD_TOKEN=... SANDBOXD_CA=ca.pem \\
        python3 examples/eval_harness/eval_harness.py [--n 50] [--language python|node]

Exit status 0 when every candidate got its expected grade. Standard
library only, plus the client in clients/python (found from this checkout
when it is not installed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import sandboxd
except ImportError:  # run from the checkout
    sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
    import sandboxd


def candidates(n: int, language: str) -> list[dict]:
    with open(os.path.join(HERE, "tasks.json"), encoding="utf-8") as f:
        problems = json.load(f)["problems"]
    out = []
    for i in range(n):
        p = problems[i % len(problems)]
        good = i % 7 != 3
        out.append(
            {
                "id": i,
                "problem": p["name"],
                "prompt": p["prompt"],
                "tests": p[f"tests_{language}"],
                "solution": p[f"good_{language}" if good else f"bad_{language}"],
                "expect_pass": good,
            }
        )
    return out


def grade(client: sandboxd.Sandboxd, run: str, c: dict, language: str) -> dict:
    """One candidate in its own session; the session is destroyed at the end."""
    name = f"eval-{run}-{c['id']}"
    row = {"id": c["id"], "problem": c["problem"], "expect_pass": c["expect_pass"]}
    try:
        s = client.create_session(name, ttl_seconds=600)
    except sandboxd.SandboxdError as e:
        try:  # a create that failed half-way may still have left the session
            client.destroy_session(name, purge=True)
        except sandboxd.NotFoundError:
            pass
        except sandboxd.SandboxdError as e2:
            print(f"eval: destroying {name}: {e2}", file=sys.stderr)
        return dict(row, passed=None, error=f"create_session: {e}")
    try:
        s.write_file("TASK.md", f"# {c['problem']}\n\n{c['prompt']}\n")
        s.write_file("solution.py" if language == "python" else "solution.js", c["solution"])
        r = s.run_tests(c["tests"], language=language, code=c["solution"], timeout_seconds=60)
        return dict(row, passed=bool(r.success), summary=r.summary, error=r.get("error"))
    except sandboxd.SandboxdError as e:
        return dict(row, passed=None, error=str(e))
    finally:
        try:
            s.destroy(purge=True)
        except sandboxd.SandboxdError as e:
            print(f"eval: destroying {name}: {e}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50, help="candidates (and sessions), default 50")
    ap.add_argument("--language", choices=("python", "node"), default="python")
    ap.add_argument("--parallel", type=int, default=50, help="sessions at once, default 50")
    args = ap.parse_args()

    run = uuid.uuid4().hex[:8]
    cands = candidates(args.n, args.language)
    t0 = time.monotonic()
    # the client shares 8 connections among all threads: the daemon's caps
    # on connections per client, not the number of sessions, bound them
    with sandboxd.Sandboxd() as client:
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            rows = list(pool.map(lambda c: grade(client, run, c, args.language), cands))
        left = [x.session for x in client.list_sessions() if x.session.startswith(f"eval-{run}-")]
    took = time.monotonic() - t0

    wrong = [r for r in rows if r["passed"] is not r["expect_pass"]]
    passed = sum(1 for r in rows if r["passed"])
    failed = sum(1 for r in rows if r["passed"] is False)
    broken = sum(1 for r in rows if r["passed"] is None)
    by_problem: dict[str, list[int]] = {}
    for r in rows:
        by_problem.setdefault(r["problem"], [0, 0])[0 if r["passed"] else 1] += 1
    print(f"eval ({args.language}): {len(rows)} candidates in {took:.1f} s: {passed} passed, {failed} failed, "
          f"{broken} not graded")
    for p, (ok, ko) in sorted(by_problem.items()):
        print(f"  {p:10} {ok:3} passed {ko:3} failed")
    for r in wrong:
        print(f"  UNEXPECTED: candidate {r['id']} ({r['problem']}): expected "
              f"{'pass' if r['expect_pass'] else 'fail'}, got {r['passed']} {r.get('error') or ''}")
    if left:
        print(f"  LEFT BEHIND: {len(left)} session(s) not destroyed: {left[:5]}")
    return 0 if not wrong and not left else 1


if __name__ == "__main__":
    sys.exit(main())
