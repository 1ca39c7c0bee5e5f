#!/usr/bin/env python3
"""Load run against `futr serve`: N streaming completions, C at a time.

Starts `futr serve` itself (--futr PATH, extra server flags after --) or uses a
running one (--url). Every request is a streaming /v1/completions with
stream_options.include_usage, sent by one of two clients (--client):

  openai  the official `openai` client (the default where it is importable);
  raw     the standard library only (http.client, one loopback connection per
          request, the server-sent events parsed line by line: each
          "data: {chunk}" with choices[0].text is a text chunk, the usage chunk
          gives the token count, "data: [DONE]" ends it). Chosen automatically,
          with a note on stderr, where `openai` is missing.

Both record the same things:

  TTFT  time from sending the request to its first text chunk,
  TPOT  (time of the last text chunk - time of the first) / (tokens - 1),

and prints one markdown table row (and --json FILE): requests, concurrency,
ok / 4xx / 5xx, wall time, requests/s, generated tokens/s, TTFT and TPOT
p50 / p99, and how many requests the server ran at once (its /metrics gauge
futr_requests_running, polled every 50 ms: the mean while any ran, and the
peak; with a paged KV cache also the preemptions). --prompt-words A B sets the prompts' lengths, --ignore-eos makes
every request generate exactly --max-tokens tokens (the server's ignore_eos):
with both, the requests' sizes are fixed, which is how the concurrent streams a
KV cache holds are compared. Stops launching requests after --time-limit seconds (the ones in
flight finish). Exit status 1 if any request got a 5xx or failed to connect.

  build/venv/bin/python bench/serve_load.py --futr build/bin/futr -- --backend cpu --max-seqs 16
  build/venv/bin/python bench/serve_load.py --url http://127.0.0.1:8080
  python3 bench/serve_load.py --futr build/bin/futr --client raw -n 8 -c 4 -- --backend cpu --max-seqs 4

Used by tests/server/serve_openai_test.py (the same load, smaller) and for
docs/PERF.md ("Server").
"""
import argparse
import concurrent.futures as cf
import http.client
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
import urllib.parse

try:
    import openai
except ImportError:  # no openai package: --client raw
    openai = None

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly "
         "judge boxing matches in the old town square every summer").split()


def start_server(futr, args, timeout=300, log_path=None):
    """Starts `futr serve --port 0 ARGS` (its output to log_path or a temporary file);
    returns (process, base_url, log_path)."""
    log = (open(log_path, "wb") if log_path else
           tempfile.NamedTemporaryFile(prefix="futr-serve-", suffix=".log", delete=False))
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
    if openai is None:
        return raw_model_id(base_url, api_key)
    return openai.OpenAI(base_url=base_url + "/v1", api_key=api_key).models.list().data[0].id


# ---- the standard-library client (--client raw)
class RawClient:
    """POSTs /v1/completions with http.client and reads the SSE stream as it arrives."""

    def __init__(self, base_url, api_key="none", timeout=600):
        u = urllib.parse.urlsplit(base_url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                        "Authorization": f"Bearer {api_key}"}
        self.timeout = timeout

    def connect(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)


def raw_model_id(base_url, api_key="none"):
    c = RawClient(base_url, api_key)
    conn = c.connect()
    try:
        conn.request("GET", "/v1/models", headers=c.headers)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"GET /v1/models: {r.status} {body[:200]!r}")
        return json.loads(body)["data"][0]["id"]
    finally:
        conn.close()


def stream_result(t0, first, last, tokens):
    """One completed stream: TTFT from the request to the first text chunk, TPOT between text chunks."""
    r = {"status": 200, "tokens": tokens}
    if first is not None:
        r["ttft"] = first - t0
        if tokens >= 2:
            r["tpot"] = (last - first) / (tokens - 1)
    return r


def raw_one_request(client, model, prompt, max_tokens, ignore_eos=False):
    """one_request's measurements through RawClient."""
    req = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
           "stream": True, "stream_options": {"include_usage": True}}
    if ignore_eos:
        req["ignore_eos"] = True
    body = json.dumps(req)
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    conn = client.connect()
    try:
        conn.request("POST", "/v1/completions", body=body, headers=client.headers)
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            return {"status": resp.status}
        while True:
            line = resp.readline()  # http.client undoes the chunked encoding
            if not line:
                break  # the server closed the stream without [DONE]
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, ": keep-alive" comments
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:  # an error after the stream started (the openai client raises)
                return {"status": 500}
            choices = chunk.get("choices") or []
            if choices and choices[0].get("text"):
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    except (OSError, http.client.HTTPException, ValueError):
        return {"status": 599}
    finally:
        conn.close()
    return stream_result(t0, first, last, tokens)


def one_request(client, model, prompt, max_tokens, ignore_eos=False):
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    try:
        stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True} if ignore_eos else None)
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
    except openai.APIError:  # an error chunk inside the stream (the raw client counts it as 500 too)
        return {"status": 500}
    return stream_result(t0, first, last, tokens)


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def pick_client(name="auto"):
    """'openai' or 'raw' for --client NAME ('auto': openai where importable)."""
    if name == "auto":
        if openai is not None:
            return "openai"
        print("serve_load: the openai package is not importable: using the standard-library "
              "client (--client raw)", file=sys.stderr)
        return "raw"
    if name == "openai" and openai is None:
        raise RuntimeError("--client openai: the openai package is not importable")
    return name


class MetricsPoller:
    """Polls GET /metrics every `period` s on a thread: the largest futr_requests_running seen,
    and the last futr_preemptions_total."""

    def __init__(self, base_url, period=0.05):
        u = urllib.parse.urlsplit(base_url)
        self.host, self.port, self.period = u.hostname, u.port or 80, period
        self.peak_running, self.preemptions = 0, 0.0
        self.running_sum, self.running_samples = 0.0, 0  # samples with a request running
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            text = r.read().decode("utf-8", "replace")
        finally:
            conn.close()
        for line in text.splitlines():
            if line.startswith("futr_requests_running "):
                running = int(float(line.split()[1]))
                self.peak_running = max(self.peak_running, running)
                if running > 0:
                    self.running_sum += running
                    self.running_samples += 1
            elif line.startswith("futr_preemptions_total "):
                self.preemptions = float(line.split()[1])

    def _run(self):
        while not self._stop.is_set():
            try:
                self.sample()
            except (OSError, http.client.HTTPException, ValueError):
                pass
            self._stop.wait(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        try:
            self.sample()
        except (OSError, http.client.HTTPException, ValueError):
            pass


def run_load(base_url, requests=200, concurrency=32, max_tokens=16, prompt_words=(4, 24),
             time_limit=600.0, seed=0, api_key="none", client="auto", ignore_eos=False):
    """The load run; returns a dict of results."""
    kind = pick_client(client)
    if kind == "raw":
        model = raw_model_id(base_url, api_key)
        client, request = RawClient(base_url, api_key), raw_one_request
    else:
        model = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key).models.list().data[0].id
        client = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0,
                               timeout=600)
        request = one_request
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
        r = request(client, model, p, max_tokens, ignore_eos)
        with lock:
            results.append(r)
        return r

    with MetricsPoller(base_url) as poll, cf.ThreadPoolExecutor(max_workers=concurrency) as pool:
        for f in [pool.submit(work, p) for p in prompts]:
            if f.result() is not None:
                launched += 1
    wall = time.perf_counter() - t0
    ok = [r for r in results if r["status"] == 200]
    ttft = [r["ttft"] for r in ok if "ttft" in r]
    tpot = [r["tpot"] for r in ok if "tpot" in r]
    tokens = sum(r.get("tokens", 0) for r in ok)
    return {
        "client": kind, "requests": launched, "concurrency": concurrency, "max_tokens": max_tokens,
        "ok": len(ok),
        "4xx": sum(1 for r in results if 400 <= r["status"] < 500),
        "5xx": sum(1 for r in results if r["status"] >= 500),
        "wall_s": wall, "requests_per_s": len(ok) / wall, "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "ttft_p50_ms": 1e3 * percentile(ttft, 50), "ttft_p99_ms": 1e3 * percentile(ttft, 99),
        "tpot_p50_ms": 1e3 * percentile(tpot, 50), "tpot_p99_ms": 1e3 * percentile(tpot, 99),
        "prompt_words": list(prompt_words), "ignore_eos": ignore_eos,
        "peak_running": poll.peak_running, "preemptions": int(poll.preemptions),
        "mean_running": poll.running_sum / max(1, poll.running_samples),
    }


HEADER = ("| requests | concurrency | max_tokens | ok | 4xx | 5xx | wall s | req/s | gen tok/s "
          "| TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | mean running | peak running | preemptions |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def table_row(r):
    return ("| {requests} | {concurrency} | {max_tokens} | {ok} | {4xx} | {5xx} | {wall_s:.1f} "
            "| {requests_per_s:.2f} | {tokens_per_s:.1f} | {ttft_p50_ms:.0f} | {ttft_p99_ms:.0f} "
            "| {tpot_p50_ms:.1f} | {tpot_p99_ms:.1f} | {mean_running:.1f} | {peak_running} | {preemptions} |").format(**r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="a running server (else --futr starts one)")
    ap.add_argument("--futr", help="the futr binary to start (`futr serve --port 0 ARGS`)")
    ap.add_argument("-n", "--requests", type=int, default=200)
    ap.add_argument("-c", "--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-words", type=int, nargs=2, default=(4, 24), metavar=("MIN", "MAX"),
                    help="each prompt draws this many words (uniform)")
    ap.add_argument("--ignore-eos", action="store_true",
                    help="every request generates exactly --max-tokens tokens (the server's ignore_eos)")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--client", choices=("auto", "openai", "raw"), default="auto",
                    help="auto: openai where importable, else raw (standard library)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--server-log", help="with --futr: the server's output goes here (default: a temporary file)")
    ap.add_argument("server_args", nargs="*", help="after --: flags for futr serve")
    a = ap.parse_args()
    if not a.url and not a.futr:
        ap.error("give --url or --futr")
    proc = None
    url = a.url
    if not url:
        proc, url, log = start_server(a.futr, a.server_args, log_path=a.server_log)
        print(f"futr serve at {url} (log {log})", file=sys.stderr)
    try:
        r = run_load(url, a.requests, a.concurrency, a.max_tokens, prompt_words=tuple(a.prompt_words),
                     time_limit=a.time_limit, api_key=a.api_key, client=a.client, ignore_eos=a.ignore_eos)
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
