#!/usr/bin/env python3
"""Load run against `futr serve`: N streaming completions, C at a time.

Starts `futr serve` itself (--futr PATH, extra server flags after --) or uses a
running one (--url). Every request is a streaming /v1/completions through the
official `openai` client with stream_options.include_usage; it records

  TTFT  time from sending the request to its first text chunk,
  TPOT  (time of the last text chunk - time of the first) / (tokens - 1),

and prints one markdown table row (and --json FILE): requests, concurrency,
ok / 4xx / 5xx, wall time, requests/s, generated tokens/s, TTFT and TPOT
p50 / p99. Stops launching requests after --time-limit seconds (the ones in
flight finish). Exit status 1 if any request got a 5xx or failed to connect.

  build/venv/bin/python bench/serve_load.py --futr build/bin/futr -- --backend cpu --max-seqs 16
  build/venv/bin/python bench/serve_load.py --url http://127.0.0.1:8080

Used by tests/server/serve_openai_test.py (the same load, smaller) and for
docs/PERF.md ("Server").
"""
import argparse
import concurrent.futures as cf
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import openai

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly "
         "judge boxing matches in the old town square every summer").split()


def start_server(futr, args, timeout=300):
    """Starts `futr serve --port 0 ARGS`; returns (process, base_url, log_path)."""
    log = tempfile.NamedTemporaryFile(prefix="futr-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen([futr, "serve", "--port", "0", *args], stdout=log, stderr=log)
    t0 = time.time()
    while time.time() - t0 < timeout:
        with open(log.name, encoding="utf-8", errors="replace") as f:
            m = re.search(r"listening on (http://[\d.]+:\d+)", f.read())
        if m:
            return proc, m.group(1), log.name
        if proc.poll() is not None:
            with open(log.name, encoding="utf-8", errors="replace") as f:
                raise RuntimeError(f"futr serve exited with {proc.returncode}:\n{f.read()}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("futr serve did not start listening in time")


def stop_server(proc, timeout=120):
    """SIGTERM (drain), wait; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def model_id(base_url, api_key="none"):
    return openai.OpenAI(base_url=base_url + "/v1", api_key=api_key).models.list().data[0].id


def one_request(client, model, prompt, max_tokens):
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    try:
        stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
    except openai.APIStatusError as e:
        return {"status": e.status_code}
    except openai.APIConnectionError:
        return {"status": 599}
    r = {"status": 200, "tokens": tokens}
    if first is not None:
        r["ttft"] = first - t0
        if tokens >= 2:
            r["tpot"] = (last - first) / (tokens - 1)
    return r


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_load(base_url, requests=200, concurrency=32, max_tokens=16, prompt_words=(4, 24),
             time_limit=600.0, seed=0, api_key="none"):
    """The load run; returns a dict of results."""
    model = model_id(base_url, api_key)
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0,
                           timeout=600)
    rng = random.Random(seed)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(*prompt_words)))
               for _ in range(requests)]
    results = []
    lock = threading.Lock()
    t0 = time.perf_counter()
    launched = 0

    def work(p):
        if time.perf_counter() - t0 > time_limit:
            return None
        r = one_request(client, model, p, max_tokens)
        with lock:
            results.append(r)
        return r

    with cf.ThreadPoolExecutor(max_workers=concurrency) as pool:
        for f in [pool.submit(work, p) for p in prompts]:
            if f.result() is not None:
                launched += 1
    wall = time.perf_counter() - t0
    ok = [r for r in results if r["status"] == 200]
    ttft = [r["ttft"] for r in ok if "ttft" in r]
    tpot = [r["tpot"] for r in ok if "tpot" in r]
    tokens = sum(r.get("tokens", 0) for r in ok)
    return {
        "requests": launched, "concurrency": concurrency, "max_tokens": max_tokens,
        "ok": len(ok),
        "4xx": sum(1 for r in results if 400 <= r["status"] < 500),
        "5xx": sum(1 for r in results if r["status"] >= 500),
        "wall_s": wall, "requests_per_s": len(ok) / wall, "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "ttft_p50_ms": 1e3 * percentile(ttft, 50), "ttft_p99_ms": 1e3 * percentile(ttft, 99),
        "tpot_p50_ms": 1e3 * percentile(tpot, 50), "tpot_p99_ms": 1e3 * percentile(tpot, 99),
    }


HEADER = ("| requests | concurrency | max_tokens | ok | 4xx | 5xx | wall s | req/s | gen tok/s "
          "| TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def table_row(r):
    return ("| {requests} | {concurrency} | {max_tokens} | {ok} | {4xx} | {5xx} | {wall_s:.1f} "
            "| {requests_per_s:.2f} | {tokens_per_s:.1f} | {ttft_p50_ms:.0f} | {ttft_p99_ms:.0f} "
            "| {tpot_p50_ms:.1f} | {tpot_p99_ms:.1f} |").format(**r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="a running server (else --futr starts one)")
    ap.add_argument("--futr", help="the futr binary to start (`futr serve --port 0 ARGS`)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("server_args", nargs="*", help="after --: flags for futr serve")
    a = ap.parse_args()
    if not a.url and not a.futr:
        ap.error("give --url or --futr")
    proc = None
    url = a.url
    if not url:
        proc, url, log = start_server(a.futr, a.server_args)
        print(f"futr serve at {url} (log {log})", file=sys.stderr)
    try:
        r = run_load(url, a.requests, a.concurrency, a.max_tokens, time_limit=a.time_limit,
                     api_key=a.api_key)
    finally:
        if proc:
            stop_server(proc)
    print(HEADER)
    print(table_row(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 1 if r["5xx"] else 0


if __name__ == "__main__":
    sys.exit(main())
