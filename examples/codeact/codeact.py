#!/usr/bin/env python3
"""A CodeAct-style agent loop on sandboxd, with the model scripted.

A CodeAct agent's action is a code cell: the model writes code, the sandbox
runs it in a long-lived interpreter, and what comes back (text, a table, a
chart) is the next observation. Here the "model" is a fixed list of cells,
so the loop runs without an LLM; each step checks the observation a model
would read:

  1. load data into a DataFrame (state that must survive to later turns);
  2. use it in the next cell (no reload: the interpreter kept it);
  3. draw a chart and get it back as a PNG (what a model with vision sees);
  4. make a mistake and get a structured traceback;
  5. recover, in the same namespace.

    SANDBOXD_URL=https://host:8443 SANDBOXD_TOKEN=... SANDBOXD_CA=ca.pem \\
        python3 examples/codeact/codeact.py

Exit status 0 when every observation is what the step expects. Standard
library only, plus the client in clients/python (found from this checkout
when it is not installed).
"""

from __future__ import annotations

import os
import struct
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import sandboxd
except ImportError:  # run from the checkout
    sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
    import sandboxd

# The scripted model: (cell, check of the observation, what it shows).
STEPS = [
    (
        "import pandas as pd\n"
        "df = pd.DataFrame({'day': range(1, 8), 'sales': [3, 5, 4, 8, 9, 7, 12]})\n"
        "df.shape",
        lambda r: r.text == "(7, 2)",
        "a DataFrame of 7 rows, kept for the next turns",
    ),
    (
        "df['sales'].sum()",
        lambda r: r.text == "48",
        "the same df, one turn later",
    ),
    (
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots(figsize=(4, 3), dpi=100)\n"
        "ax.plot(df['day'], df['sales'])\n"
        "ax.set_title('sales')",
        lambda r: fits(png_size(r), 400, 300),
        "a PNG chart of the figure's 4x3 in at 100 dpi (cropped tight, as Jupyter's inline backend does)",
    ),
    (
        "df['revenue'].sum()",
        lambda r: bool(r.get("error")) and r["error"]["name"] == "KeyError" and len(r["error"]["traceback"]) > 0,
        "a KeyError with its traceback",
    ),
    (
        "df['revenue'] = df['sales'] * 10\nint(df['revenue'].sum())",
        lambda r: not r.get("error") and r.text == "480",
        "the fix, in the same namespace",
    ),
]


def fits(size: tuple[int, int] | None, w: int, h: int) -> bool:
    """size is at most w x h and more than half of it."""
    return size is not None and w // 2 < size[0] <= w and h // 2 < size[1] <= h


def png_size(r: "sandboxd.CellResult") -> tuple[int, int] | None:
    """Width and height of the cell's first PNG (its IHDR chunk)."""
    for o in r.outputs:
        png = o.png
        if png:
            if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
                return None
            return struct.unpack(">II", png[16:24])
    return None


def main() -> int:
    client = sandboxd.Sandboxd()
    session = client.create_session(f"codeact-{uuid.uuid4().hex[:8]}")
    failures = 0
    try:
        for i, (code, check, what) in enumerate(STEPS, 1):
            r = session.run_cell(code, timeout_seconds=120)
            ok = check(r)
            failures += not ok
            err = r.get("error")
            seen = f"error {err['name']}" if err else (f"{len(r.images)} image(s) {png_size(r)}" if r.images else repr(r.text))
            print(f"step {i}: {'ok ' if ok else 'BAD'} {what} (generation {r.generation}, count {r.execution_count}: {seen})")
            if r.get("state_lost"):  # a CodeAct loop must never lose its namespace silently
                print(f"step {i}: state lost: {r['state_lost']}")
                failures += 1
    finally:
        session.destroy(purge=True)
    print(f"{len(STEPS) - failures} of {len(STEPS)} observations as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
