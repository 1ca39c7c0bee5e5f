#!/usr/bin/env python3
"""`futr serve` end to end with the official openai client (CPU engine, SmolLM2).

  serve_openai_test.py FUTR_BINARY MODEL

Completions and chat, streaming and not; 16 concurrent greedy streams give
exactly the text each gives alone, in less wall time than one after another;
every kind of bad request; a client leaving mid-stream frees its slot (the
metrics show it); SIGTERM drains; a bounded load run with zero 5xx
(bench/serve_load.py, the same load as the benchmark, smaller).
Each server listens on a free port (--port 0), so ctest may run tests in parallel.
Without the `openai` package or the model it prints "SKIP: <reason>" and exits 0
(ctest reports it as skipped).
"""
import concurrent.futures as cf
import http.client
import json
import os
import re
import signal
import sys
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import serve_load  # noqa: E402

try:
    import openai  # noqa: E402
except ImportError:  # an optional need: the test skips with the reason (ctest: SKIP_REGULAR_EXPRESSION)
    openai = None

FUTR = MODEL = None
SERVER_ARGS = ["--backend", "cpu", "--ctx", "512", "--max-seqs", "16", "--max-queue", "64"]


def client(url, key="none"):
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=300)


def metric(url, name):
    body = urllib.request.urlopen(url + "/metrics").read().decode()
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", body, re.M)
    return float(m.group(1)) if m else None


def raw_post(url, path, body, headers=None):
    """(status, parsed JSON) of a POST with any body (urllib, no client checks)."""
    host, port = url.split("//")[1].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    c.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)


class Served(unittest.TestCase):
    """One server for the tests that do not stop it."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.url, cls.log = serve_load.start_server(FUTR, ["--model", MODEL, *SERVER_ARGS])
        cls.c = client(cls.url)
        cls.model = cls.c.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        code = serve_load.stop_server(cls.proc)
        assert code == 0, f"futr serve exited with {code}"

    def complete(self, prompt, n=12, **kw):
        r = self.c.completions.create(model=self.model, prompt=prompt, max_tokens=n, temperature=0, **kw)
        return r.choices[0].text, r

    def stream_text(self, prompt, n=12):
        out = []
        for ch in self.c.completions.create(model=self.model, prompt=prompt, max_tokens=n,
                                            temperature=0, stream=True):
            if ch.choices:
                out.append(ch.choices[0].text)
        return "".join(out)

    def test_completions(self):
        text, r = self.complete("The capital of France is")
        self.assertTrue(text)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 12)
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertEqual(self.stream_text("The capital of France is"), text)
        # A stop string cuts the text before it.
        words = text.split()
        if len(words) >= 3:
            stop = " " + words[2]
            cut, r2 = self.complete("The capital of France is", stop=[stop])
            self.assertEqual(cut, text[: text.find(stop)])
            self.assertEqual(r2.choices[0].finish_reason, "stop")

    def test_chat(self):
        msgs = [{"role": "user", "content": "Say hello."}]
        r = self.c.chat.completions.create(model=self.model, messages=msgs, max_tokens=16, temperature=0)
        text = r.choices[0].message.content
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertTrue(text)
        parts, role, finish, usage = [], None, None, None
        for ch in self.c.chat.completions.create(model=self.model, messages=msgs, max_tokens=16,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}):
            if ch.usage:
                usage = ch.usage
            if not ch.choices:
                continue
            d = ch.choices[0].delta
            role = role or d.role
            parts.append(d.content or "")
            finish = ch.choices[0].finish_reason or finish
        self.assertEqual(role, "assistant")
        self.assertEqual("".join(parts), text)
        self.assertEqual(finish, r.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, r.usage.completion_tokens)

    def test_concurrent_streams_equal_alone(self):
        """16 greedy streams at once give exactly the text each gives alone.

        Faster together than one after another holds on an engine that batches
        the rows of a step (the GPU engine; FUTR_SERVE_BATCHED_ENGINE=1 checks
        it). The CPU engine runs the sequences of a step one after another
        (src/cpu_engine/engine.h), so there it cannot be faster; the scheduler's
        batching speed-up is checked over a batched fake engine in
        tests/server/http_server_test.cpp (ConcurrentStreamsEqualAloneAndBatch).
        """
        prompts = [f"Story {i}: once upon a time, a {w}" for i, w in
                   enumerate("cat dog bird fish lion bear wolf fox owl frog crab seal deer duck goat mole".split())]
        t0 = time.perf_counter()
        alone = [self.stream_text(p, 12) for p in prompts]
        sequential = time.perf_counter() - t0
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(16) as pool:
            together = list(pool.map(lambda p: self.stream_text(p, 12), prompts))
        concurrent = time.perf_counter() - t0
        for i, (a, b) in enumerate(zip(alone, together)):
            self.assertTrue(a)
            self.assertEqual(b, a, f"prompt {i}")
        print(f"16 streams x 12 tokens: one after another {sequential:.2f} s, together {concurrent:.2f} s",
              file=sys.stderr)
        if os.environ.get("FUTR_SERVE_BATCHED_ENGINE") == "1":
            self.assertLess(concurrent, sequential)

    def test_logprobs_echo_n(self):
        m = self.model
        # lm-evaluation-harness's loglikelihood request (local-completions):
        # echo + logprobs + max_tokens 0, the prompt's log-probabilities back.
        prompt = "The capital of France is Paris"
        r = self.c.completions.create(model=m, prompt=prompt, echo=True, logprobs=1, max_tokens=0, temperature=0)
        ch = r.choices[0]
        self.assertEqual(ch.text, prompt)
        self.assertEqual(ch.finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 0)
        lp = ch.logprobs
        self.assertEqual(len(lp.tokens), r.usage.prompt_tokens)
        self.assertEqual(len(lp.text_offset), len(lp.tokens))
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        for tok, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
            self.assertLess(tok, 0)
            self.assertGreaterEqual(max(top.values()), tok)  # the harness's is_greedy test
        # logprobs 0: the same values, each token's dict holding only itself.
        status, body = raw_post(self.url, "/v1/completions", json.dumps(
            {"model": m, "prompt": prompt, "echo": True, "max_tokens": 0, "logprobs": 0}))
        self.assertEqual(status, 200)
        self.assertEqual(body["choices"][0]["logprobs"]["token_logprobs"], lp.token_logprobs)
        self.assertTrue(all(len(t) == 1 for t in body["choices"][0]["logprobs"]["top_logprobs"][1:]))

        # Generated tokens: logprobs change no token; streamed chunks carry theirs.
        text, _ = self.complete("Once upon a time", 10)
        r = self.c.completions.create(model=m, prompt="Once upon a time", max_tokens=10, temperature=0, logprobs=2)
        self.assertEqual(r.choices[0].text, text)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), r.usage.completion_tokens)
        self.assertEqual("".join(lp.tokens), text)
        self.assertTrue(all(len(t) in (2, 3) for t in lp.top_logprobs))  # k = 2, and the chosen token
        streamed = []
        for c in self.c.completions.create(model=m, prompt="Once upon a time", max_tokens=10, temperature=0,
                                           logprobs=2, stream=True):
            if c.choices and c.choices[0].logprobs:
                streamed += c.choices[0].logprobs.token_logprobs
        self.assertEqual(streamed, lp.token_logprobs)

        # Chat: logprobs true, top_logprobs k, streamed too.
        msgs = [{"role": "user", "content": "Say hello."}]
        r = self.c.chat.completions.create(model=m, messages=msgs, max_tokens=12, temperature=0, logprobs=True,
                                           top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual("".join(e.token for e in content), r.choices[0].message.content)
        for e in content:
            self.assertEqual(len(e.top_logprobs), 3)
            self.assertEqual(e.top_logprobs[0].token, e.token)  # greedy
            self.assertEqual(bytes(e.bytes).decode("utf-8", "replace"), e.token)
        streamed = []
        for c in self.c.chat.completions.create(model=m, messages=msgs, max_tokens=12, temperature=0,
                                                logprobs=True, top_logprobs=3, stream=True):
            if c.choices and c.choices[0].logprobs:
                streamed += [e.logprob for e in c.choices[0].logprobs.content]
        self.assertEqual(streamed, [e.logprob for e in content])
        with self.assertRaises(openai.BadRequestError):
            self.c.chat.completions.create(model=m, messages=msgs, top_logprobs=3)  # needs logprobs=True

        # n: greedy choices are equal; sampled ones follow the seed; usage sums the completions.
        r = self.c.completions.create(model=m, prompt="The capital of France is", max_tokens=6, temperature=0, n=3)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        self.assertEqual(len({c.text for c in r.choices}), 1)
        one = self.c.completions.create(model=m, prompt="The capital of France is", max_tokens=6, temperature=0)
        self.assertEqual(r.choices[0].text, one.choices[0].text)
        self.assertEqual(r.usage.completion_tokens, 3 * one.usage.completion_tokens)
        self.assertEqual(r.usage.prompt_tokens, one.usage.prompt_tokens)
        kw = dict(model=m, messages=msgs, max_tokens=8, temperature=1, seed=4, n=2)
        a = self.c.chat.completions.create(**kw)
        b = self.c.chat.completions.create(**kw)
        self.assertEqual([c.message.content for c in a.choices], [c.message.content for c in b.choices])
        parts = {0: [], 1: []}
        for c in self.c.chat.completions.create(**kw, stream=True):
            for x in c.choices:
                parts[x.index].append(x.delta.content or "")
        self.assertEqual(["".join(parts[0]), "".join(parts[1])], [c.message.content for c in a.choices])

    def test_bad_requests(self):
        m = self.model
        bad = openai.BadRequestError
        cases = [
            (bad, dict(prompt="x", max_tokens=-1)),
            (bad, dict(prompt="x", max_tokens=10**9)),
            (bad, dict(prompt="x", temperature=-0.5)),
            (bad, dict(prompt="x", top_p=2)),
            (bad, dict(prompt="x", n=17)),
            (bad, dict(prompt="x", logprobs=21)),
            (bad, dict(prompt="x", max_tokens=0)),                 # 0 only with echo
            (bad, dict(prompt="word " * 600)),          # longer than the context
            (bad, dict(prompt="x", extra_body={"no_such_field": 1})),
            (bad, dict(prompt="x", extra_body={"max_tokens": "ten"})),
        ]
        for err, kw in cases:
            with self.assertRaises(err, msg=str(kw)[:80]) as e:
                self.c.completions.create(model=m, **kw)
            self.assertIn("message", e.exception.body if isinstance(e.exception.body, dict) else {})
        with self.assertRaises(openai.NotFoundError):
            self.c.completions.create(model="gpt-4o", prompt="x")
        with self.assertRaises(bad):
            self.c.chat.completions.create(model=m, messages=[{"role": "wizard", "content": "x"}])
        with self.assertRaises(bad):
            self.c.chat.completions.create(model=m, messages=[])
        status, body = raw_post(self.url, "/v1/completions", b"{not json")
        self.assertEqual(status, 400)
        self.assertIn("message", body["error"])
        status, body = raw_post(self.url, "/v1/completions",
                                json.dumps({"model": m, "prompt": "x" * (2 << 20)}))
        self.assertEqual(status, 413)
        self.assertIn("message", body["error"])
        # The server is unharmed.
        self.assertTrue(self.complete("Hello")[0])

    def test_disconnect_frees_the_slot(self):
        host, port = self.url.split("//")[1].split(":")
        before = metric(self.url, 'futr_requests_total{finish="cancelled"}') or 0
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        c.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                  body=json.dumps({"model": self.model, "prompt": "Count to a thousand:",
                                   "max_tokens": 400, "temperature": 0, "stream": True}))
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        while b"data: " not in r.readline():
            pass
        self.assertGreaterEqual(metric(self.url, "futr_requests_running"), 1)
        c.sock.close()
        c.close()
        t0 = time.time()
        while time.time() - t0 < 30:
            if (metric(self.url, 'futr_requests_total{finish="cancelled"}') or 0) > before and \
                    metric(self.url, "futr_requests_running") == 0:
                break
            time.sleep(0.1)
        self.assertGreater(metric(self.url, 'futr_requests_total{finish="cancelled"}'), before)
        self.assertEqual(metric(self.url, "futr_requests_running"), 0)
        self.assertEqual(metric(self.url, "futr_kv_positions_used"), 0)

    def test_load(self):
        # 200 requests, 32 at a time; launching stops after 60 s (2 CI cores).
        r = serve_load.run_load(self.url, requests=200, concurrency=32, max_tokens=4,
                                prompt_words=(4, 12), time_limit=60)
        print(serve_load.HEADER, file=sys.stderr)
        print(serve_load.table_row(r), file=sys.stderr)
        self.assertEqual(r["5xx"], 0)
        self.assertEqual(r["4xx"], 0)
        self.assertGreaterEqual(r["ok"], 32)
        self.assertEqual(r["ok"], r["requests"])

    def test_load_raw_client_matches_openai(self):
        # serve_load's standard-library client (the GPU machine has no openai package) counts
        # the same completion tokens as the openai client on the same greedy load.
        kw = dict(requests=8, concurrency=4, max_tokens=6, prompt_words=(4, 12), time_limit=60)
        a = serve_load.run_load(self.url, client="openai", **kw)
        b = serve_load.run_load(self.url, client="raw", **kw)
        self.assertEqual((a["client"], b["client"]), ("openai", "raw"))
        for r in (a, b):
            self.assertEqual((r["ok"], r["4xx"], r["5xx"]), (8, 0, 0))
            self.assertGreater(r["ttft_p50_ms"], 0)
            self.assertGreater(r["tpot_p50_ms"], 0)
        self.assertEqual(a["tokens"], b["tokens"])

    def test_models_health_metrics(self):
        self.assertEqual(json.load(urllib.request.urlopen(self.url + "/health"))["status"], "ok")
        body = urllib.request.urlopen(self.url + "/metrics").read().decode()
        for name in ("futr_requests_running", "futr_requests_waiting", "futr_prompt_tokens_total",
                     "futr_generation_tokens_total", "futr_time_to_first_token_seconds_count",
                     "futr_time_per_output_token_seconds_count", "futr_kv_positions_used"):
            self.assertIn(name, body)


class ApiKey(unittest.TestCase):
    def test_bearer_token_required(self):
        proc, url, _ = serve_load.start_server(FUTR, ["--model", MODEL, *SERVER_ARGS, "--api-key", "k3y"])
        try:
            with self.assertRaises(openai.AuthenticationError):
                client(url, "wrong").models.list()
            c = client(url, "k3y")
            model = c.models.list().data[0].id
            self.assertTrue(c.completions.create(model=model, prompt="Hi", max_tokens=2).choices[0].text is not None)
        finally:
            self.assertEqual(serve_load.stop_server(proc), 0)


class Drain(unittest.TestCase):
    def test_sigterm_drains(self):
        # The drain bound well above the two streams' time: under a sanitizer
        # on a loaded machine 48 tokens each can take longer than the default
        # 30 s, and this test is about finishing them, not about the bound
        # (tests/cli/hostile_cli_test.cpp checks the bound).
        proc, url, log = serve_load.start_server(FUTR, ["--model", MODEL, *SERVER_ARGS, "--drain-timeout", "600"])
        c = client(url)
        model = c.models.list().data[0].id
        started = threading.Event()
        results = []

        def stream():
            text, finish = [], None
            for ch in c.completions.create(model=model, prompt="Once upon a time", max_tokens=48,
                                           temperature=0, stream=True):
                started.set()
                if ch.choices:
                    text.append(ch.choices[0].text)
                    finish = ch.choices[0].finish_reason or finish
            results.append(("".join(text), finish))

        threads = [threading.Thread(target=stream) for _ in range(2)]
        for t in threads:
            t.start()
        self.assertTrue(started.wait(120))
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        refused = None
        try:
            client(url).completions.create(model=model, prompt="late", max_tokens=2)
        except openai.APIStatusError as e:
            refused = e.status_code
        except openai.APIConnectionError:
            refused = "closed"  # already stopped: in-flight ones must still be complete
        for t in threads:
            t.join(120)
        code = proc.wait(120)
        self.assertEqual(code, 0)
        self.assertEqual(len(results), 2)
        for text, finish in results:
            self.assertEqual(finish, "length")
            self.assertTrue(text)
        self.assertIn(refused, (503, "closed"))
        with open(log) as f:
            self.assertIn("drained", f.read())


if __name__ == "__main__":
    FUTR, MODEL = sys.argv[1], sys.argv[2]
    if openai is None:
        print("SKIP: the Python package 'openai' is not installed (scripts/test.sh installs it in the test venv)")
        sys.exit(0)
    if not os.path.exists(MODEL):
        print(f"SKIP: {MODEL} is absent (scripts/fetch-model.sh)")
        sys.exit(0)
    unittest.main(argv=[sys.argv[0], "-v", *sys.argv[3:]])
