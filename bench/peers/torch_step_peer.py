#!/usr/bin/env python3
"""gpt-fast-style PyTorch peer of one full decode step (the baseline of the decode step row in docs/PERF.md).

One decode step of a Llama decoder with random weights, B sequences each holding
`ctx` positions in a static BF16 KV cache, one new token per sequence at position
`ctx` (the step writes K/V there and attends over positions 0..ctx):

  x   = embed[tok]                                    [B, D]
  per layer l:
    h   = rmsnorm(x) * w_attn_norm
    qkv = h @ Wqkv^T                                  [B, (H + 2 Hkv) hd]   one GEMM (gpt-fast's wqkv)
    q,k = rope(q, k at position ctx)                  rotate-half (HF Llama) form, one op over q and k
    Kc[:, :, ctx] = k ; Vc[:, :, ctx] = v             Kc, Vc [B, Hkv, S, hd], S = --cache-len
    y   = softmax(q K^T / sqrt(hd) + mask) V          F.scaled_dot_product_attention (see --gqa, --attn)
    x   = x + y @ Wo^T
    h   = rmsnorm(x) * w_mlp_norm
    g,u = h @ W13^T                                   [B, 2 I]  one GEMM (gpt-fast keeps w1, w3 apart)
    x   = x + (silu(g) * u) @ W2^T
  logits = rmsnorm(x) @ Whead^T (BF16 always)          [B, V]; next = argmax (greedy, in the step)

Weights (--weights list): bf16 = F.linear (cuBLAS); int4 = torch._weight_int4pack_mm over
torch._convert_weight_to_int4pack'ed nibbles with BF16 (scale, zero) per group: group 128,
and group 64 where K % 128 != 0 (SmolLM2: K = 576 has no g128 form; torch accepts g64 there,
as in bench/peers/torch_decode_peer.py; the row says which group it used). The LM head and the
embedding stay BF16 in both (as in futr: its LM head is a BF16 cuBLASLt GEMM).

GQA (--gqa): `rows` (default) views the G = H/Hkv query heads of a KV head as G query rows of
one attention head ([B, Hkv, G, hd] against Kc [B, Hkv, S, hd]): exact for one query token,
no copy of the cache, any SDPA backend; `sdpa` = SDPA's enable_gqa=True; `repeat` = gpt-fast's
repeat_interleave of K and V (materializes G copies of the cache every step).
Mask (--attn): `mask` (default, gpt-fast) attends over the whole cache with an additive mask
row built once per step from the position tensor (-inf past ctx), so the captured step is valid
at any position; `slice` attends over Kc[:, :, :ctx+1] with no mask (position baked into the
capture; lets SDPA pick flash).

Execution (--mode): `graph` (default) captures one step in a torch.cuda.CUDAGraph after eager
warm-up on a side stream, static token/position buffers (seconds to set up); `compile` is what
gpt-fast does: torch.compile(mode="reduce-overhead", fullgraph=True, dynamic=False) of the step
(inductor fuses norms/RoPE/SwiGLU, CUDA graphs via cudagraph trees; tens of seconds of compile
per case). Timing: CUDA events around each of --reps replays, issued back to back as in a decode
loop (no sync between, L2 not flushed unless --flush-l2), after --warmup replays; median and
sample stdev. Sizes (why the default run is quick): 8B BF16 weights 16 GB, INT4 3.7 GB + 2.1 GB
BF16 embed/head; KV 8B batch 16 at S = 1040: 2.2 GB.
Fairness notes: fused qkv and gate_up GEMMs, F.rms_norm, the rows GQA form and a mask built once
per step are all in the peer's favour over gpt-fast as published; the timed step includes the
embedding gather, the LM head and the greedy argmax, as a decode loop's step does.

Output: a markdown table on stdout, progress and per-case elapsed seconds on stderr, --out JSON
  {"meta": {torch, cuda, gpu, mode, ...},
   "rows": [{"model", "weights", "group", "batch", "ctx", "step_ms", "stdev_ms", "tokens_per_s",
             "weight_bytes", "kv_bytes", "gbps", "error"?}], "errors": ["case: Type: message"]}
Every case is wrapped: a failure is a row with step_ms null plus an errors entry, never fatal;
the JSON is rewritten after each case (a timeout keeps what was measured).

usage:
  torch_step_peer.py --out step.json                                  # SmolLM2 + 8B, bf16 + int4, batch 1,16, graph
  torch_step_peer.py --mode compile --models smollm2 --batch 1 --out c.json
  torch_step_peer.py --models smollm2,llama-3.2-1b,llama-3.1-8b --batch 1,16,32 --ctx 1024,4096
  torch_step_peer.py --dry-run                                        # the plan and byte counts, no torch needed
  torch_step_peer.py --device cpu --mode eager --models tiny --ctx 64     # smoke test of the model code
Runtime (H200, estimated): default graph run ~30-60 s incl. torch start-up; compile mode ~1 min per case.
Checked without a GPU (CPU torch): every --gqa x --attn form gives the logits of a naive per-head
reference (relative error ~5e-3, BF16); --mode compile traces with fullgraph=True and writes the
cache in place (no copy of it). The CUDA graph, the INT4 op and the timings need the GPU.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

from peer_common import cudagraph_skips

try:  # --dry-run and --help work without torch
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - a machine without torch
    torch = F = None

# name: (hidden D, layers L, heads H, kv heads Hkv, head dim hd, intermediate I, vocab V, tied, rope theta)
MODELS = {
    "smollm2": ("SmolLM2-135M", 576, 30, 9, 3, 64, 1536, 49152, True, 100000.0),
    "llama-3.2-1b": ("Llama-3.2-1B", 2048, 16, 32, 8, 64, 8192, 128256, True, 500000.0),
    "llama-3.1-8b": ("Llama-3.1-8B", 4096, 32, 32, 8, 128, 14336, 128256, False, 500000.0),
    "tiny": ("tiny", 256, 2, 4, 2, 64, 512, 1024, False, 10000.0),  # smoke tests (--device cpu)
}
EPS = 1e-5


class Shape:
    def __init__(self, key):
        (self.name, self.d, self.layers, self.heads, self.kv_heads, self.hd, self.inter, self.vocab,
         self.tied, self.theta) = MODELS[key]
        self.key = key

    def projections(self):
        """(name, N, K) of the four projections of a layer."""
        qkv = (self.heads + 2 * self.kv_heads) * self.hd
        return [("qkv", qkv, self.d), ("o", self.d, self.heads * self.hd),
                ("gate_up", 2 * self.inter, self.d), ("down", self.d, self.inter)]

    def group(self, k_dims=None):
        """INT4 group: 128, or 64 when some projection's K is not a multiple of 128."""
        ks = k_dims or [k for _, _, k in self.projections()]
        return 128 if all(k % 128 == 0 for k in ks) else 64

    def weight_bytes(self, weights):
        """Bytes a step reads from weights: layers (BF16 or nibbles + BF16 scale/zero pairs), head, norms."""
        g = self.group()
        per_layer = 0
        for _, n, k in self.projections():
            per_layer += 2 * n * k if weights == "bf16" else n * k // 2 + (k // g) * n * 2 * 2
        per_layer += 2 * 2 * self.d  # two norm vectors
        return self.layers * per_layer + 2 * self.vocab * self.d + 2 * self.d

    def kv_bytes(self, batch, positions):
        """K and V bytes of `positions` positions (BF16) over all layers and sequences."""
        return self.layers * 2 * batch * self.kv_heads * positions * self.hd * 2


errors = []


def note(what, e):
    msg = f"{what}: {type(e).__name__}: {e}"
    errors.append(msg)
    print("PEER ERROR", msg, file=sys.stderr, flush=True)
    return msg


# --------------------------------------------------------------------------- model (torch only)
_Module = torch.nn.Module if torch is not None else object


class Linear(_Module):
    """y = x @ W^T: BF16 F.linear, or torch._weight_int4pack_mm over random packed nibbles."""

    def __init__(self, n, k, weights, group, dev):
        super().__init__()
        self.kind, self.group = weights, group
        if weights == "bf16":
            self.register_buffer("w", torch.empty((n, k), dtype=torch.bfloat16, device=dev).uniform_(-0.02, 0.02))
        else:
            if k % group:
                raise ValueError(f"K = {k} has no group-{group} INT4 form")
            packed, sz = int4_weight(n, k, group)
            self.register_buffer("w", packed)   # torch's tiled int4 layout (int32)
            self.register_buffer("sz", sz)      # [K/group, N, 2] BF16 (scale, zero)

    def forward(self, x):  # x [M, K] BF16
        if self.kind == "bf16":
            return F.linear(x, self.w)
        return torch._weight_int4pack_mm(x.contiguous(), self.w, self.group, self.sz)


class Layer(_Module):
    def __init__(self, s, weights, group, dev):
        super().__init__()
        self.s = s
        self.qkv = Linear((s.heads + 2 * s.kv_heads) * s.hd, s.d, weights, group, dev)
        self.o = Linear(s.d, s.heads * s.hd, weights, group, dev)
        self.gate_up = Linear(2 * s.inter, s.d, weights, group, dev)
        self.down = Linear(s.d, s.inter, weights, group, dev)
        self.register_buffer("attn_norm", torch.ones(s.d, dtype=torch.bfloat16, device=dev))
        self.register_buffer("mlp_norm", torch.ones(s.d, dtype=torch.bfloat16, device=dev))
        self.register_buffer("kc", None)  # set_cache: [B, Hkv, S, hd] BF16
        self.register_buffer("vc", None)

    def set_cache(self, batch, cache_len, ctx, dev):
        """Kc, Vc [B, Hkv, S, hd] BF16; positions < ctx hold random values (the filled context)."""
        s = self.s
        self.kc = torch.zeros((batch, s.kv_heads, cache_len, s.hd), dtype=torch.bfloat16, device=dev)
        self.vc = torch.zeros_like(self.kc)
        self.kc[:, :, :ctx].normal_(0, 1)
        self.vc[:, :, :ctx].normal_(0, 1)

    def forward(self, x, cos, sin, pos, mask, gqa, attn_len):
        s = self.s
        b = x.shape[0]
        h = F.rms_norm(x, (s.d,), self.attn_norm, EPS)
        qkv = self.qkv(h)
        nqk = (s.heads + s.kv_heads) * s.hd
        qk = qkv[:, :nqk].view(b, s.heads + s.kv_heads, s.hd)
        v = qkv[:, nqk:].view(b, s.kv_heads, 1, s.hd)
        half = s.hd // 2
        qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin  # rotate-half RoPE
        q = qk[:, :s.heads]
        k = qk[:, s.heads:].unsqueeze(2)                     # [B, Hkv, 1, hd]
        self.kc[:, :, pos] = k                               # gpt-fast's KVCache.update (index_put_)
        self.vc[:, :, pos] = v
        kc, vc = (self.kc, self.vc) if attn_len is None else (self.kc[:, :, :attn_len], self.vc[:, :, :attn_len])
        g = s.heads // s.kv_heads
        if gqa == "rows":      # G query heads of a KV head = G query rows of one head
            y = F.scaled_dot_product_attention(q.reshape(b, s.kv_heads, g, s.hd), kc, vc, attn_mask=mask)
        elif gqa == "sdpa":
            y = F.scaled_dot_product_attention(q.unsqueeze(2), kc, vc, attn_mask=mask, enable_gqa=True)
        else:                  # gpt-fast: repeat_interleave the cache
            y = F.scaled_dot_product_attention(q.unsqueeze(2), kc.repeat_interleave(g, dim=1),
                                               vc.repeat_interleave(g, dim=1), attn_mask=mask)
        x = x + self.o(y.reshape(b, s.heads * s.hd))
        h = F.rms_norm(x, (s.d,), self.mlp_norm, EPS)
        gu = self.gate_up(h)
        x = x + self.down(F.silu(gu[:, :s.inter]) * gu[:, s.inter:])
        return x


class Decoder(_Module):
    def __init__(self, s, weights, dev):
        super().__init__()
        self.s = s
        self.group = s.group() if weights == "int4" else None
        self.register_buffer("embed", torch.empty((s.vocab, s.d), dtype=torch.bfloat16, device=dev).uniform_(-0.02, 0.02))
        self.register_buffer("head", self.embed if s.tied else
                             torch.empty((s.vocab, s.d), dtype=torch.bfloat16, device=dev).uniform_(-0.02, 0.02))
        self.register_buffer("final_norm", torch.ones(s.d, dtype=torch.bfloat16, device=dev))
        self.layers = torch.nn.ModuleList(Layer(s, weights, self.group, dev) for _ in range(s.layers))

    def set_cache(self, batch, ctx, cache_len, dev):
        """The KV caches of `batch` sequences holding `ctx` positions, S = cache_len, and the tables of S."""
        s = self.s
        for layer in self.layers:
            layer.kc = layer.vc = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        # RoPE tables [S, hd] (rotate-half: both halves carry the same frequencies), BF16
        inv = 1.0 / (s.theta ** (torch.arange(0, s.hd, 2, device=dev, dtype=torch.float32) / s.hd))
        ang = torch.outer(torch.arange(cache_len, device=dev, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().to(torch.bfloat16))
        self.register_buffer("sin", ang.sin().to(torch.bfloat16))
        self.register_buffer("positions", torch.arange(cache_len, device=dev))
        self.register_buffer("mask_zero", torch.zeros(cache_len, dtype=torch.bfloat16, device=dev))
        for layer in self.layers:
            layer.set_cache(batch, cache_len, ctx, dev)


def decode_step(m, tok, pos, gqa, attn_len):
    """One step: tok [B] int64, pos [1] int64 (same position for all rows) -> next tokens [B]."""
    return step_logits(m, tok, pos, gqa, attn_len).argmax(dim=-1)


def step_logits(m, tok, pos, gqa, attn_len):
    """The step's logits [B, V] (BF16)."""
    cos = m.cos.index_select(0, pos).view(1, 1, -1)
    sin = m.sin.index_select(0, pos).view(1, 1, -1)
    mask = None
    if attn_len is None:  # additive row, -inf past pos; built once per step, shared by the layers
        mask = m.mask_zero.masked_fill(m.positions > pos, float("-inf")).view(1, 1, 1, -1)
    x = F.embedding(tok, m.embed)
    for layer in m.layers:
        x = layer(x, cos, sin, pos, mask, gqa, attn_len)
    return F.linear(F.rms_norm(x, (m.s.d,), m.final_norm, EPS), m.head)


def int4_weight(n, k, group):
    """Packed nibbles + [K/group, N, 2] scale/zero (the helper of the projection peer)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_decode_peer import int4_weight as pack  # noqa: E402
    return pack(n, k, group)


# --------------------------------------------------------------------------- timing
def time_fn(fn, reps, warmup, flush):
    """Median and sample stdev (ms) of `reps` back-to-back calls of fn, CUDA events around each."""
    for _ in range(warmup):
        fn()
    if not torch.cuda.is_available():  # --device cpu smoke runs: wall clock
        ms = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ms.append(1e3 * (time.perf_counter() - t))
        return statistics.median(ms), (statistics.stdev(ms) if len(ms) > 1 else 0.0)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush is not None:
            flush.sum()  # read pass over 2x L2
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    ms = [a.elapsed_time(b) for a, b in zip(starts, ends)]
    return statistics.median(ms), (statistics.stdev(ms) if len(ms) > 1 else 0.0)


def make_runner(a, m, tok, pos, attn_len):
    """A zero-argument callable that runs one step: a graph replay, the compiled step, or eager."""
    if a.mode == "eager":
        return lambda: decode_step(m, tok, pos, a.gqa, attn_len)
    if a.mode == "graph":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # eager warm-up off the capture (cuBLAS handles, SDPA selection)
            for _ in range(3):
                decode_step(m, tok, pos, a.gqa, attn_len)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = decode_step(m, tok, pos, a.gqa, attn_len)
        return lambda: (graph.replay(), out)[1]  # holds the graph and its output
    # compile: gpt-fast's recipe; weights and caches marked static (no copies into the graph's pool)
    torch._dynamo.reset()
    torch._inductor.config.coordinate_descent_tuning = a.cdt  # gpt-fast's generate.py sets it
    if tok.is_cuda and hasattr(torch._inductor.config.triton, "cudagraph_or_error"):
        torch._inductor.config.triton.cudagraph_or_error = True  # a skipped CUDA graph raises, with its reason
    for t in m.buffers():  # the caches are buffers too
        torch._dynamo.mark_static_address(t)
    step = torch.compile(decode_step, mode="reduce-overhead", fullgraph=True, dynamic=False)

    def run():
        torch.compiler.cudagraph_mark_step_begin()
        return step(m, tok, pos, a.gqa, attn_len)

    t0 = time.time()
    for _ in range(3):  # compile, cudagraph-trees warm-up, record
        run()
    if tok.is_cuda:
        torch.cuda.synchronize()
    print(f"  compiled in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    return run


# --------------------------------------------------------------------------- table
def table(rows):
    lines = ["| model | weights | batch | ctx | step ms | stdev ms | tok/s | GB/s (weights + KV) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        w = r["weights"] + (f" g{r['group']}" if r.get("group") else "")
        if r.get("step_ms") is None:
            why = r.get("error", "not run")
            lines.append(f"| {r['model']} | {w} | {r['batch']} | {r['ctx']} | n/a ({why[:90]}) | | | |")
        else:
            lines.append(f"| {r['model']} | {w} | {r['batch']} | {r['ctx']} | {r['step_ms']:.3f} | "
                         f"{r['stdev_ms']:.3f} | {r['tokens_per_s']:.0f} | {r['gbps']:.0f} |")
    return "\n".join(lines)


def lists(s, conv=str):
    return [conv(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--out", help="JSON output file")
    ap.add_argument("--models", default="smollm2,llama-3.1-8b", help=f"list of {','.join(MODELS)}")
    ap.add_argument("--weights", default="bf16,int4", help="list of bf16,int4")
    ap.add_argument("--batch", default="1,16", help="list")
    ap.add_argument("--ctx", default="1024", help="list: positions already in the cache; the step runs at this one")
    ap.add_argument("--cache-len", type=int, default=0, help="KV cache positions S (default ctx + 16)")
    ap.add_argument("--mode", choices=("graph", "compile", "eager"), default="graph",
                    help="eager: no graph (debugging, --device cpu smoke runs)")
    ap.add_argument("--device", default="cuda", help="cpu: smoke-test the model code (--mode eager|compile, bf16)")
    ap.add_argument("--gqa", choices=("rows", "sdpa", "repeat"), default="rows")
    ap.add_argument("--attn", choices=("mask", "slice"), default="mask")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-cdt", dest="cdt", action="store_false",
                    help="compile mode: coordinate_descent_tuning off (gpt-fast turns it on)")
    ap.add_argument("--flush-l2", action="store_true", help="read 2x L2 before every rep (default: back to back)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and byte counts; no torch, no GPU")
    a = ap.parse_args()
    models = lists(a.models)
    for k in models:
        if k not in MODELS:
            ap.error(f"unknown model {k}; known: {', '.join(MODELS)}")
    weights = lists(a.weights)
    for w in weights:
        if w not in ("bf16", "int4"):
            ap.error(f"unknown weights {w}")
    batches, ctxs = lists(a.batch, int), lists(a.ctx, int)

    meta = {"mode": a.mode, "gqa": a.gqa, "attn": a.attn, "reps": a.reps, "warmup": a.warmup,
            "flush_l2": a.flush_l2, "cache_len": a.cache_len or "ctx + 16",
            "bf16_op": "F.linear (cuBLAS)",
            "int4_op": "torch._weight_int4pack_mm, group 128 (64 where K % 128 != 0), BF16 head",
            "attention": "F.scaled_dot_product_attention over a static BF16 cache (auto backend)",
            "timing": f"median/stdev of {a.reps} back-to-back replays (CUDA events) after {a.warmup} warm-up"}
    rows = []

    def dump():
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"meta": meta, "rows": rows, "errors": errors}, f, indent=1)

    if a.dry_run:
        meta.update(torch=None, gpu=None, dry_run=True)
        for key in models:
            s = Shape(key)
            print(f"{s.name}: D {s.d}, L {s.layers}, H {s.heads}/{s.kv_heads}, hd {s.hd}, I {s.inter}, "
                  f"V {s.vocab}, tied {s.tied}; projections {s.projections()}; int4 group {s.group()}",
                  file=sys.stderr)
            for w in weights:
                for b in batches:
                    for c in ctxs:
                        rows.append({"model": s.name, "weights": w, "group": s.group() if w == "int4" else None,
                                     "batch": b, "ctx": c, "step_ms": None, "stdev_ms": None,
                                     "weight_bytes": s.weight_bytes(w), "kv_bytes": s.kv_bytes(b, c + 1),
                                     "error": f"dry run: {s.weight_bytes(w) / 1e9:.3f} GB weights + "
                                              f"{s.kv_bytes(b, c + 1) / 1e9:.3f} GB KV, floor "
                                              f"{1e3 * (s.weight_bytes(w) + s.kv_bytes(b, c + 1)) / 4.5e12:.3f} ms"})
        print(table(rows))
        dump()
        return 0

    if torch is None:
        print("torch is not importable (use --dry-run here)", file=sys.stderr)
        return 2
    dev = a.device
    t_start = time.time()
    meta.update(torch=torch.__version__, cuda=torch.version.cuda,
                gpu=torch.cuda.get_device_name(0) if dev.startswith("cuda") else dev)
    if not dev.startswith("cuda") and a.mode == "graph":
        ap.error("--device cpu: --mode eager or compile (which then runs without CUDA graphs)")
    flush = None
    if a.flush_l2:
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        flush = torch.ones(2 * l2 // 4, dtype=torch.float32, device=dev)
    meta["int4_groups"] = {Shape(k).name: Shape(k).group() for k in models}
    if a.mode == "compile":
        meta["coordinate_descent_tuning"] = a.cdt
    torch.manual_seed(0)
    for key in models:
        s = Shape(key)
        for w in weights:
            group = s.group() if w == "int4" else None
            m = None
            t0 = time.time()
            try:
                with torch.no_grad():
                    m = Decoder(s, w, dev)
                if dev.startswith("cuda"):
                    torch.cuda.synchronize()
                print(f"{s.name} {w}: weights built in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001
                msg = note(f"{s.name} {w} build", e)
                for b in batches:
                    for c in ctxs:
                        rows.append({"model": s.name, "weights": w, "group": group, "batch": b, "ctx": c,
                                     "step_ms": None, "stdev_ms": None, "error": msg})
                dump()
                continue
            for b in batches:
                for c in ctxs:
                    t1 = time.time()
                    cache_len = a.cache_len or c + 16
                    r = {"model": s.name, "weights": w, "group": group, "batch": b, "ctx": c,
                         "cache_len": cache_len, "step_ms": None, "stdev_ms": None,
                         "weight_bytes": s.weight_bytes(w), "kv_bytes": s.kv_bytes(b, c + 1)}
                    try:
                        if c + 1 > cache_len:
                            raise ValueError(f"ctx {c} does not fit --cache-len {cache_len}")
                        with torch.no_grad():
                            m.set_cache(b, c, cache_len, dev)
                            tok = torch.randint(0, s.vocab, (b,), device=dev)
                            pos = torch.tensor([c], dtype=torch.long, device=dev)
                            attn_len = c + 1 if a.attn == "slice" else None
                            skips = cudagraph_skips()
                            run = make_runner(a, m, tok, pos, attn_len)
                            med, sd = time_fn(run, a.reps, a.warmup, flush)
                        r.update(step_ms=med, stdev_ms=sd, tokens_per_s=1e3 * b / med,
                                 gbps=(r["weight_bytes"] + r["kv_bytes"]) / (med * 1e-3) / 1e9)
                        if a.mode == "compile":
                            r["cudagraph_skips"] = (cudagraph_skips() or 0) - (skips or 0)
                            if r["cudagraph_skips"]:
                                note(f"{s.name} {w} batch {b} ctx {c}",
                                     RuntimeError("inductor skipped CUDA graphs: the time is not a graph replay"))
                    except Exception as e:  # noqa: BLE001
                        traceback.print_exc()
                        r["error"] = note(f"{s.name} {w} batch {b} ctx {c}", e)
                    finally:
                        run = None
                        if a.mode == "compile":
                            torch._dynamo.reset()
                        if dev.startswith("cuda"):
                            torch.cuda.synchronize()
                    rows.append(r)
                    ms = "failed" if r["step_ms"] is None else f"{r['step_ms']:.3f} ms"
                    print(f"{s.name} {w} batch {b} ctx {c}: {ms} ({time.time() - t1:.1f} s)",
                          file=sys.stderr, flush=True)
                    dump()
            del m
            if dev.startswith("cuda"):
                torch.cuda.empty_cache()
    meta["elapsed_s"] = round(time.time() - t_start, 1)
    dump()
    print(table(rows))
    print(f"torch step peer: {len(rows)} rows, {len(errors)} errors, {meta['elapsed_s']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
