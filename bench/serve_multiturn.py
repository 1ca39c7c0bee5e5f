#!/usr/bin/env python3
"""Multi-turn chat TTFT against `futr serve`, with and without prefix caching.

Starts `futr serve` twice (--futr PATH; extra server flags after --): once as
given, once with --no-prefix-cache. Each run plays --users conversations one
after another, each of --turns turns over a shared system prompt: turn t sends
the whole conversation so far (system, every earlier user message and the
server's answers) plus a new user message, streamed (/v1/chat/completions,
temperature 0, --max-tokens), and records TTFT = time from sending to the
first text chunk. With the prefix cache, turn t attaches the blocks of turn
t - 1 and computes only its new tokens.

Prints a markdown table (TTFT p50 per turn, both runs, the ratio) and writes
--json FILE. Standard library only.

  python3 bench/serve_multiturn.py --futr build/bin/futr --json bench/results/serve_multiturn_cpu.json -- --backend cpu
"""
import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import time

SYSTEM_PART = ("You are a helpful assistant for a travel agency. You answer questions about cities, trains, "
               "museums and food. Keep every answer short, friendly and concrete; give one fact per answer. ")
QUESTIONS = ["Which city should I visit in France?", "How do I get there by train?", "What museum is best?",
             "Where do I eat lunch?", "What is a good day trip?", "What should I pack?", "What is the weather like?",
             "Give me one last tip.", "And one more?", "Thanks, anything else?"]


def start(futr, flags):
    p = subprocess.Popen([futr, "serve", "--port", "0", "--served-model-name", "m"] + flags, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if m:
            return p, m.group(1), int(m.group(2))
    raise RuntimeError("futr serve did not start")


def ask(host, port, messages, max_tokens):
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True})
    c = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read().decode()[:300]}")
    ttft, text = None, ""
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        piece = chunk["choices"][0]["delta"].get("content", "") if chunk.get("choices") else ""
        if piece and ttft is None:
            ttft = time.perf_counter() - t0
        text += piece
    c.close()
    return ttft if ttft is not None else time.perf_counter() - t0, text


def run(futr, flags, users, turns, max_tokens, system_repeat=3):
    p, host, port = start(futr, flags)
    try:
        per_turn = [[] for _ in range(turns)]
        for u in range(users):
            messages = [{"role": "system", "content": SYSTEM_PART * system_repeat + f"(Customer {u}.)"}]
            for t in range(turns):
                messages.append({"role": "user", "content": QUESTIONS[t % len(QUESTIONS)]})
                ttft, text = ask(host, port, messages, max_tokens)
                messages.append({"role": "assistant", "content": text})
                per_turn[t].append(ttft)
        return [statistics.median(x) for x in per_turn]
    finally:
        p.terminate()
        p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--futr", required=True)
    ap.add_argument("--users", type=int, default=2)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--system-repeat", type=int, default=3,
                    help="the system prompt is this many copies of a ~35-token paragraph")
    ap.add_argument("--json")
    ap.add_argument("flags", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    flags = [f for f in a.flags if f != "--"]
    on = run(a.futr, flags, a.users, a.turns, a.max_tokens, a.system_repeat)
    off = run(a.futr, flags + ["--no-prefix-cache"], a.users, a.turns, a.max_tokens, a.system_repeat)
    print("| turn | TTFT p50 prefix cache (s) | TTFT p50 no prefix cache (s) | speedup |")
    print("|---|---|---|---|")
    for t in range(a.turns):
        print(f"| {t + 1} | {on[t]:.3f} | {off[t]:.3f} | {off[t] / on[t]:.2f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bench": "serve_multiturn", "server_flags": flags, "users": a.users, "turns": a.turns,
                       "max_tokens": a.max_tokens, "system_repeat": a.system_repeat, "ttft_p50_prefix_cache_s": on,
                       "ttft_p50_no_prefix_cache_s": off,
                       "speedup_by_turn": [off[t] / on[t] for t in range(a.turns)]}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
