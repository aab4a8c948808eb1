"""N chat requests, one at a time, streaming every other one, to a ggufspec server on PORT.

    .venv/bin/python docs/bench/stall-2026-12-07/serve_client.py PORT N
"""
import sys
import time

import httpx

port, n = sys.argv[1], int(sys.argv[2])
for _ in range(600):  # wait for the server
    try:
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).raise_for_status()
        break
    except httpx.HTTPError:
        time.sleep(0.5)
print("first request at", time.strftime("%H:%M:%S"))
for i in range(n):
    body = {"model": "x", "max_tokens": 64, "stream": i % 2 == 1,
            "messages": [{"role": "user", "content": f"Question {i}: tell me something about the number {i}."}]}
    httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=120).raise_for_status()
print("done", n)
