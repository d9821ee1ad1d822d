#!/usr/bin/env python3
"""exec round trip: POST /v1/exec over HTTPS with keep-alive against the API
socket, sample for sample in turn (A B, B A, ...), on one warm session.
Usage: http_roundtrip.py TOKEN N, against a daemon started with
http.listen=127.0.0.1:47788, http.tls_cert/tls_key signed by /tmp/http-bench/ca.pem
and api_socket=/tmp/http-bench/api.sock (see docs/api.md, "The HTTPS API")."""
import http.client, json, socket, ssl, sys, time, statistics
tok = sys.argv[1]; n = int(sys.argv[2])
ctx = ssl.create_default_context(cafile="/tmp/http-bench/ca.pem")
hc = http.client.HTTPSConnection("127.0.0.1", 47788, context=ctx)
us = socket.socket(socket.AF_UNIX); us.connect("/tmp/http-bench/api.sock"); uf = us.makefile("rb")
body = json.dumps({"session": "b1", "command": "true"})
def via_http():
    hc.request("POST", "/v1/exec", body, {"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
    r = hc.getresponse(); d = r.read(); assert r.status == 200, d
def via_sock(i):
    us.sendall((json.dumps({"id": i, "token": tok, "method": "exec", "params": {"session": "b1", "command": "true"}}) + "\n").encode())
    d = json.loads(uf.readline()); assert d.get("ok"), d
via_http(); via_sock(0)  # warm: container created
H, S = [], []
for i in range(n):
    order = [0, 1] if i % 2 == 0 else [1, 0]   # A B, B A
    for o in order:
        t = time.perf_counter()
        via_http() if o == 0 else via_sock(i)
        (H if o == 0 else S).append((time.perf_counter() - t) * 1000)
q = lambda a, p: sorted(a)[int(p * (len(a) - 1))]
print(f"n={n} https_keepalive p50={statistics.median(H):.1f} p95={q(H,.95):.1f} | socket p50={statistics.median(S):.1f} p95={q(S,.95):.1f} | diff p50={statistics.median(H)-statistics.median(S):+.1f} ms")
