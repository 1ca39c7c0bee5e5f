#!/usr/bin/env python3
"""PyTorch peers of our FP8 prefill path: one prefill layer, and whole-model time to first token.

layer  One Llama prefill layer at Llama-3.1-8B shapes (D 4096, 32 / 8 heads, hd 128, FFN 14336, eps 1e-5,
       theta 5e5) on M = 8192 rows = 4 requests x 2048 tokens (--layer-shape RxN), causal attention
       within each request, no prefix. Variants:
         fp8_compiled   torch.compile (--layer-mode, default max-autotune-no-cudagraphs; on failure
                        "default", then repeat_interleave K/V instead of enable_gqa: the row says which) of
                        RMSNorm -> FP8 quant (x / s clamped to +-448 -> e4m3, s from a given amax) -> QKV
                        torch._scaled_mm (E4M3 [N, K] row-major weight passed as w.t(), per-tensor scale_a
                        and scale_b, BF16 out) -> rotate-half RoPE on q, k -> SDPA is_causal + enable_gqa on
                        [R, H, n, hd] -> FP8 quant -> O _scaled_mm + residual -> RMSNorm -> FP8 quant ->
                        gate/up _scaled_mm -> SwiGLU (FP32) with amax(|h|) as an output -> FP8 quant -> down
                        _scaled_mm + residual; BF16 x out.
         bf16_compiled  the same layer with BF16 weights and F.linear (cuBLAS), SwiGLU in BF16.
         bf16_eager     that BF16 layer uncompiled.
       FLOPs = 2 M (D (H + 2 Hkv) hd + H hd D + 3 D I) + 2 * 2 * sum_r n_r (n_r + 1) / 2 * hd * H. Also SDPA
       alone on the layer's attention shape, flash and cuDNN (peer_common.time_sdpa_backends).
ttft   Time to first token of a whole model, random weights, batch 1, one prompt of P tokens: embedding
       gather, all layers (the fp8_compiled or bf16_compiled layer), final RMSNorm, BF16 LM head on the last
       row only, argmax. smollm2-135m (D 576, 9 / 3 heads, hd 64, FFN 1536, 30 layers, V 49152, tied) and
       llama-3.1-8b (32 layers, V 128256). Regional compile: the layer function is compiled (dynamic=False,
       one compile per P, --ttft-mode, default "default": max-autotune per P would not fit the budget) and
       called per layer from Python with that layer's weights as arguments; embedding, head, argmax eager.
       Weights randn * 0.02 (BF16); FP8 weights from those with a per-tensor scale. tokens/s = P / time.
Timing: triton.testing.do_bench medians (L2 cleared between reps) after the compile / warm-up runs (compile
time not timed); rep = max(--rep-ms, 5 x one call). No CUDA graphs anywhere. Every measurement is wrapped
(an error string in its row, never fatal); --budget-s stops starting new ones ("skipped"); the JSON is
rewritten after every row. Checked on CPU (torch 2.11): both layers, eager and compiled, both GQA forms,
match a naive per-head FP32 reference; the GPU paths and timings are not checked there.

JSON: {"device", "torch", "meta", "layer": [{"variant", "M", "requests", "ms", "tflops", "compile_mode", "gqa",
       "error"?}], "sdpa": [...], "ttft": [{"model", "variant", "prompt", "ms", "tokens_per_s", "error"?}],
       "skipped": [...], "errors": [...]}

usage: torch_prefill_model_peer.py --out prefill_model.json [--what layer,ttft] [--rep-ms 200] [--budget-s 420]
         [--models smollm2-135m,llama-3.1-8b] [--prompts 512,2048,8192]
"""
import time

T0 = time.time()  # --budget-s counts from here (torch import included)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton.testing  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import time_sdpa_backends  # noqa: E402

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
BF16 = torch.bfloat16
DEV = "cuda"
EPS = 1e-5
ACT_AMAX = 8.0  # the "given amax" of every activation quantization: s = ACT_AMAX / 448
MODELS = {
    "smollm2-135m": SimpleNamespace(d=576, heads=9, kv=3, hd=64, inter=1536, layers=30, vocab=49152,
                                    tied=True, theta=100000.0),
    "llama-3.1-8b": SimpleNamespace(d=4096, heads=32, kv=8, hd=128, inter=14336, layers=32, vocab=128256,
                                    tied=False, theta=500000.0),
}
errors = []


def bench(fn, rep_ms):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    est = 1e3 * (time.perf_counter() - t)
    return float(triton.testing.do_bench(fn, warmup=max(10.0, 2 * est), rep=max(float(rep_ms), 5 * est),
                                         return_mode="median"))


def err(label, e):
    msg = f"{type(e).__name__}: {e}"[:600]
    errors.append(f"{label}: {msg}")
    print(f"PEER ERROR {label}: {msg}", file=sys.stderr, flush=True)
    return msg


# --------------------------------------------------------------------------- model
def quant(a, s):
    return (a.float() / s).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def fp8_mm(aq, lin):  # lin = (E4M3 weight [N, K] row-major, its scale, the activation scale)
    w, sw, sa = lin
    return torch._scaled_mm(aq, w.t(), scale_a=sa, scale_b=sw, out_dtype=BF16)


def make_layer(c, fp8, gqa):
    """layer(x [M, D] BF16, cos, sin [M, 1, hd], R requests of M / R tokens, params) -> (x, amax or None)."""
    H, Hkv, hd, d = c.heads, c.kv, c.hd, c.d
    nqk, half, g = (H + Hkv) * hd, hd // 2, H // Hkv

    def proj(a, lin):
        return fp8_mm(quant(a, lin[2]), lin) if fp8 else F.linear(a, lin[0])

    def layer(x, cos, sin, R, p):
        n1, wqkv, wo, n2, wgu, wd = p
        M = x.shape[0]
        n = M // R
        qkv = proj(F.rms_norm(x, (d,), n1, EPS), wqkv)
        qk = qkv[:, :nqk].view(M, H + Hkv, hd)
        qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin  # rotate-half RoPE
        q = qk[:, :H].reshape(R, n, H, hd).transpose(1, 2)
        k = qk[:, H:].reshape(R, n, Hkv, hd).transpose(1, 2)
        v = qkv[:, nqk:].reshape(R, n, Hkv, hd).transpose(1, 2)
        if gqa == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1),
                                               is_causal=True)
        x = x + proj(y.transpose(1, 2).reshape(M, H * hd), wo)
        gate, up = proj(F.rms_norm(x, (d,), n2, EPS), wgu).chunk(2, dim=-1)
        if not fp8:
            return x + F.linear(F.silu(gate) * up, wd[0]), None
        h = F.silu(gate.float()) * up.float()
        amax = h.abs().amax()
        return x + fp8_mm(quant(h, wd[2]), wd), amax

    return layer


def build_layer(c, fp8):
    """(attn norm, qkv, o, mlp norm, gate_up, down); a projection is (w,) or (w_e4m3, s_w, s_act)."""
    def lin(n, k):
        w = torch.randn(n, k, device=DEV, dtype=BF16) * 0.02
        if not fp8:
            return (w,)
        sw = w.abs().amax().float() / FP8_MAX
        wq = (w.float() / sw).to(FP8)
        del w
        return (wq, sw, torch.tensor(ACT_AMAX / FP8_MAX, device=DEV, dtype=torch.float32))
    ones = torch.ones(c.d, device=DEV, dtype=BF16)
    return (ones, lin((c.heads + 2 * c.kv) * c.hd, c.d), lin(c.d, c.heads * c.hd), ones.clone(),
            lin(2 * c.inter, c.d), lin(c.d, c.inter))


def rope_tables(c, lens):
    """cos, sin [M, 1, hd] BF16 for requests of `lens` tokens, positions 0..n-1 each (rotate-half form)."""
    inv = 1.0 / (c.theta ** (torch.arange(0, c.hd, 2, device=DEV, dtype=torch.float32) / c.hd))
    pos = torch.cat([torch.arange(n, device=DEV, dtype=torch.float32) for n in lens])
    ang = torch.outer(pos, inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(BF16)[:, None, :], ang.sin().to(BF16)[:, None, :]


def layer_flops(c, lens):
    M = sum(lens)
    lin = 2 * M * (c.d * (c.heads + 2 * c.kv) * c.hd + c.heads * c.hd * c.d + 3 * c.d * c.inter)
    return lin + 2 * 2 * sum(n * (n + 1) // 2 for n in lens) * c.hd * c.heads


def first_working(c, fp8, attempts, run):
    """Builds the layer for each (mode, gqa) of `attempts` (mode "eager": uncompiled) and runs `run(f)`
    once (the compile happens there) until one works: (f, mode, gqa, errors of the failed attempts)."""
    failed = []
    for i, (mode, gqa) in enumerate(attempts):
        try:
            if i:
                torch._dynamo.reset()
            f = make_layer(c, fp8, gqa)
            if mode != "eager":
                f = torch.compile(f, dynamic=False, **({} if mode == "default" else {"mode": mode}))
            t = time.time()
            run(f)
            torch.cuda.synchronize()
            print(f"  {mode} / gqa {gqa}: first run (compile) {time.time() - t:.1f} s", file=sys.stderr, flush=True)
            return f, mode, gqa, failed
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            failed.append(f"{mode}/{gqa}: {type(e).__name__}: {e}"[:400])
    raise RuntimeError("every attempt failed: " + " | ".join(failed))


def attempts_for(variant, mode):
    if variant.endswith("eager"):
        return [("eager", "sdpa"), ("eager", "repeat")]
    out = [(mode, "sdpa"), ("default", "sdpa"), ("default", "repeat")]
    return [x for i, x in enumerate(out) if x not in out[:i]]


# --------------------------------------------------------------------------- sections
def over_budget(a, label, res):
    if time.time() - T0 <= a.budget_s:
        return False
    res["skipped"].append(label)
    print(f"skipped (budget {a.budget_s} s): {label}", file=sys.stderr, flush=True)
    return True


def run_layer(a, res, dump):
    c = MODELS["llama-3.1-8b"]
    R, n = (int(v) for v in a.layer_shape.split("x"))
    lens, M = [n] * R, R * n
    flops = layer_flops(c, lens)
    for variant in ("fp8_compiled", "bf16_compiled", "bf16_eager"):
        label = f"layer {variant} {R}x{n}"
        if over_budget(a, label, res):
            continue
        row = {"variant": variant, "M": M, "requests": R, "tokens_per_request": n, "ms": None, "tflops": None,
               "compile_mode": None}
        t = time.time()
        print(f"{label} ...", file=sys.stderr, flush=True)
        try:
            torch._dynamo.reset()
            p = build_layer(c, variant.startswith("fp8"))
            x = torch.randn(M, c.d, device=DEV, dtype=BF16)
            cos, sin = rope_tables(c, lens)
            f, mode, gqa, failed = first_working(c, variant.startswith("fp8"), attempts_for(variant, a.layer_mode),
                                                 lambda f: f(x, cos, sin, R, p))
            row.update(compile_mode=mode, gqa=gqa, **({"fallback_from": failed} if failed else {}))
            ms = bench(lambda: f(x, cos, sin, R, p), a.rep_ms)
            row.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            row["error"] = err(label, e)
        finally:
            p = x = f = None
            torch.cuda.empty_cache()
        print(f"{label}: {row['ms']} ms, {row['tflops']} TFLOP/s ({row['compile_mode']}; {time.time() - t:.1f} s)",
              file=sys.stderr, flush=True)
        res["layer"].append(row)
        dump()
    label = f"sdpa {R}x{n}"
    if not over_budget(a, label, res):
        try:
            q = torch.randn(R, c.heads, n, c.hd, device=DEV, dtype=BF16)
            k = torch.randn(R, c.kv, n, c.hd, device=DEV, dtype=BF16)
            v = torch.randn_like(k)
            row = {"requests": R, "len": n, "heads": c.heads, "kv_heads": c.kv, "head_dim": c.hd}
            timer = SimpleNamespace(us=lambda fn: 1e3 * bench(fn, a.rep_ms))  # what time_sdpa_backends calls
            time_sdpa_backends(timer, q, k, v, row, label, errors, is_causal=True)
            res["sdpa"].append(row)
        except Exception as e:  # noqa: BLE001
            err(label, e)
        q = k = v = None
        dump()


def run_ttft(a, res, dump):
    prompts = [int(v) for v in a.prompts.split(",") if v]
    for key in [m for m in a.models.split(",") if m]:
        c = MODELS[key]
        embed = head = fnorm = None
        for variant in ("fp8_compiled", "bf16_compiled"):
            fp8 = variant.startswith("fp8")
            layers = f = mode = gqa = None
            torch._dynamo.reset()
            for P in prompts:
                label = f"ttft {key} {variant} P={P}"
                if over_budget(a, label, res):
                    continue
                row = {"model": key, "variant": variant, "prompt": P, "ms": None, "tokens_per_s": None}
                t = time.time()
                print(f"{label} ...", file=sys.stderr, flush=True)
                try:
                    if embed is None:
                        embed = torch.randn(c.vocab, c.d, device=DEV, dtype=BF16) * 0.02
                        head = embed if c.tied else torch.randn(c.vocab, c.d, device=DEV, dtype=BF16) * 0.02
                        fnorm = torch.ones(c.d, device=DEV, dtype=BF16)
                    if layers is None:
                        layers = [build_layer(c, fp8) for _ in range(c.layers)]
                        torch.cuda.synchronize()
                    toks = torch.randint(0, c.vocab, (P,), device=DEV)
                    cos, sin = rope_tables(c, [P])

                    def forward(lf, toks=toks, cos=cos, sin=sin):
                        x = F.embedding(toks, embed)
                        for p in layers:
                            x = lf(x, cos, sin, 1, p)[0]
                        return F.linear(F.rms_norm(x[-1:], (c.d,), fnorm, EPS), head).argmax(dim=-1)

                    if f is None:
                        f, mode, gqa, failed = first_working(c, fp8, attempts_for(variant, a.ttft_mode), forward)
                        row.update(**({"fallback_from": failed} if failed else {}))
                    else:
                        forward(f)  # the recompile for this P (not timed)
                        torch.cuda.synchronize()
                    row.update(compile_mode=mode, gqa=gqa)
                    ms = bench(lambda: forward(f), a.rep_ms)
                    flops = c.layers * layer_flops(c, [P]) + 2 * c.d * c.vocab
                    row.update(ms=ms, tokens_per_s=P / (ms * 1e-3), tflops=flops / (ms * 1e-3) / 1e12)
                except Exception as e:  # noqa: BLE001
                    traceback.print_exc()
                    row["error"] = err(label, e)
                print(f"{label}: {row['ms']} ms, {row['tokens_per_s']} tok/s ({time.time() - t:.1f} s)",
                      file=sys.stderr, flush=True)
                res["ttft"].append(row)
                dump()
            layers = f = None  # free this variant's weights before building the next
            torch._dynamo.reset()
            torch.cuda.empty_cache()
        embed = head = fnorm = None
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- output
def fmt(v, nd=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def tables(res):
    s = ["| layer variant | M | requests | compile | gqa | ms | TFLOP/s |", "|---|---:|---:|---|---|---:|---:|"]
    for r in res["layer"]:
        ms = fmt(r["ms"]) if r["ms"] is not None else f"n/a ({r.get('error', '')[:80]})"
        s.append(f"| {r['variant']} | {r['M']} | {r['requests']} | {fmt(r.get('compile_mode'))} | "
                 f"{fmt(r.get('gqa'))} | {ms} | {fmt(r['tflops'], 1)} |")
    for r in res["sdpa"]:
        s.append(f"| sdpa alone (flash / cudnn) | {r['requests'] * r['len']} | {r['requests']} | eager | sdpa | "
                 f"{fmt(r.get('flash_us') and r['flash_us'] / 1e3)} / {fmt(r.get('cudnn_us') and r['cudnn_us'] / 1e3)}"
                 " | |")
    s += ["", "| model | ttft variant | prompt | compile | ms | tokens/s | TFLOP/s |", "|---|---|---:|---|---:|---:|---:|"]
    for r in res["ttft"]:
        ms = fmt(r["ms"]) if r["ms"] is not None else f"n/a ({r.get('error', '')[:80]})"
        s.append(f"| {r['model']} | {r['variant']} | {r['prompt']} | {fmt(r.get('compile_mode'))} | {ms} | "
                 f"{fmt(r['tokens_per_s'], 0)} | {fmt(r.get('tflops'), 1)} |")
    if res["skipped"]:
        s += ["", "skipped (budget): " + ", ".join(res["skipped"])]
    return "\n".join(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--what", default="layer,ttft", help="list of layer,ttft")
    ap.add_argument("--models", default="smollm2-135m,llama-3.1-8b", help=f"ttft models: {','.join(MODELS)}")
    ap.add_argument("--prompts", default="512,2048,8192", help="ttft prompt lengths P")
    ap.add_argument("--layer-shape", default="4x2048", help="layer: requests x tokens per request")
    ap.add_argument("--layer-mode", default="max-autotune-no-cudagraphs", help="torch.compile mode of the layer")
    ap.add_argument("--ttft-mode", default="default", help="torch.compile mode of the ttft layer region")
    ap.add_argument("--out", default="", help="JSON output file")
    ap.add_argument("--rep-ms", type=float, default=200.0, help="triton do_bench rep (ms)")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="start no new measurement after this many seconds of wall time")
    a = ap.parse_args()
    what = [w for w in a.what.split(",") if w]
    for w in what + [m for m in a.models.split(",") if m]:
        if w not in ("layer", "ttft", *MODELS):
            ap.error(f"unknown --what / --models entry {w} (models: {', '.join(MODELS)})")
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    for name in ("recompile_limit", "cache_size_limit"):  # every variant shares make_layer's code object
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "meta": {"cuda": torch.version.cuda, "layer_shape": a.layer_shape, "layer_mode": a.layer_mode,
                    "ttft_mode": a.ttft_mode, "rep_ms": a.rep_ms, "budget_s": a.budget_s,
                    "activation_scale": f"amax {ACT_AMAX} / 448 (given), weights per-tensor",
                    "timing": "triton.testing.do_bench median, rep = max(rep_ms, 5 x one call), no CUDA graphs"},
           "layer": [], "sdpa": [], "ttft": [], "skipped": [], "errors": errors}

    def dump():
        res["meta"]["elapsed_s"] = round(time.time() - T0, 1)
        if a.out:
            with open(a.out, "w") as fh:
                json.dump(res, fh, indent=1)

    print(f"torch {torch.__version__} on {res['device']}", file=sys.stderr, flush=True)
    for section, fn in (("layer", run_layer), ("ttft", run_ttft)):
        if section in what:
            try:
                fn(a, res, dump)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                err(section, e)
    dump()
    print(f"torch prefill model peer: {len(res['layer'])} layer rows, {len(res['ttft'])} ttft rows, "
          f"{len(errors)} errors, {len(res['skipped'])} skipped, {time.time() - T0:.0f} s", file=sys.stderr, flush=True)
    print(tables(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
