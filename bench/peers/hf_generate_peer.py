#!/usr/bin/env python3
"""Hugging Face transformers generate() peer on SmolLM2-135M shapes (the out-of-the-box baseline of the decode step row in docs/PERF.md).

What a user of the reference implementation gets out of the box: LlamaForCausalLM built from a
LlamaConfig matching SmolLM2-135M-Instruct (hidden 576, 30 layers, 9 heads / 3 KV heads, head dim
64, intermediate 1536, vocab 49152, rope_theta 100000, RMSNorm eps 1e-5, tied embeddings) with
random weights, BF16 on the GPU, the attention implementation transformers picks (sdpa), batch 1,
a 16-token random prompt, greedy, exactly --new-tokens new tokens (EOS disabled, so random
weights cannot stop it early):

  eager           generate() as it comes: DynamicCache, no compile;
  static          cache_implementation="static", disable_compile=True (the static cache alone);
  static-compile  cache_implementation="static": generate() compiles the decoding forward itself
                  (its CompileConfig: torch.compile mode "reduce-overhead" = CUDA graphs), as the
                  transformers docs recommend for fast decoding.

Per path: --warmup untimed generate() calls (the compile happens in the first), then --reps timed
ones (wall clock around generate(), CUDA synchronized); ms/token = time / new tokens (the 16-token
prefill included, as a user sees it), tokens/s its inverse; median and sample stdev over reps.
Every path is wrapped: a failure (e.g. the compiled path, which failed in transformers 5.17 in an
earlier run) is a row with ms_per_token null plus an errors entry with the exception, never fatal;
the JSON is rewritten after every path.

Output: a markdown table on stdout, progress on stderr, --out JSON
  {"meta": {torch, transformers, gpu, attn_implementation, ...},
   "rows": [{"model", "path", "batch", "prompt_tokens", "new_tokens", "reps", "ms_per_token",
             "stdev_ms", "tokens_per_s", "seconds": [...], "cudagraph_skips"?, "error"?}],
   "errors": ["path: Type: message"]}

usage:
  hf_generate_peer.py --out hf.json                       # eager + static-compile
  hf_generate_peer.py --paths eager,static,static-compile --reps 5
  hf_generate_peer.py --device cpu --layers 2 --new-tokens 8 --paths eager,static   # smoke test, no GPU
  hf_generate_peer.py --dry-run                           # the config, no torch needed
Runtime (H200, estimated): ~10 s start-up, eager ~3 s per generate() (the anchor: 41 tokens/s),
so ~12 s for 1 + 3 calls; static-compile: its compile (tens of seconds) + ~1 s; ~60 s in all.
"""
import argparse
import json
import statistics
import sys
import time
import traceback

from peer_common import cudagraph_skips

# SmolLM2-135M-Instruct's config.json (the fields that shape the work)
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, head_dim=64, hidden_act="silu",
               max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
               tie_word_embeddings=True, attention_bias=False, mlp_bias=False)
PATHS = ("eager", "static", "static-compile")

errors = []


def note(what, e):
    msg = f"{what}: {type(e).__name__}: {e}"
    errors.append(msg[:2000])
    print("PEER ERROR", msg[:2000], file=sys.stderr, flush=True)
    return msg[:300]


def table(rows):
    lines = ["| model | path | batch | prompt | new tokens | ms/token | stdev ms | tokens/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("ms_per_token") is None:
            lines.append(f"| {r['model']} | {r['path']} | {r['batch']} | {r['prompt_tokens']} | {r['new_tokens']} "
                         f"| n/a ({r.get('error', 'not run')[:100]}) | | |")
        else:
            lines.append(f"| {r['model']} | {r['path']} | {r['batch']} | {r['prompt_tokens']} | {r['new_tokens']} "
                         f"| {r['ms_per_token']:.2f} | {r['stdev_ms']:.2f} | {r['tokens_per_s']:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--out", help="JSON output file")
    ap.add_argument("--paths", default="eager,static-compile", help=f"list of {','.join(PATHS)}")
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls per path (static-compile: at least 2)")
    ap.add_argument("--layers", type=int, default=0, help="override the layer count (smoke tests)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="print the config and plan; no torch")
    a = ap.parse_args()
    paths = [p for p in a.paths.split(",") if p]
    for p in paths:
        if p not in PATHS:
            ap.error(f"unknown path {p}; known: {', '.join(PATHS)}")
    cfg_kw = dict(SMOLLM2)
    if a.layers:
        cfg_kw["num_hidden_layers"] = a.layers
    model_name = "SmolLM2-135M" + (f" ({a.layers} layers)" if a.layers else "")
    meta = {"config": cfg_kw, "prompt_tokens": a.prompt_tokens, "new_tokens": a.new_tokens, "reps": a.reps,
            "warmup": a.warmup, "dtype": "bfloat16", "greedy": True,
            "timing": "wall clock around generate() (CUDA synchronized), median/stdev over reps; "
                      "ms/token = time / new tokens, prefill included"}
    rows = []

    def dump():
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"meta": meta, "rows": rows, "errors": errors}, f, indent=1)

    def row(path):
        return {"model": model_name, "path": path, "batch": 1, "prompt_tokens": a.prompt_tokens,
                "new_tokens": a.new_tokens, "reps": a.reps, "ms_per_token": None, "stdev_ms": None}

    if a.dry_run:
        meta["dry_run"] = True
        print(json.dumps(cfg_kw), file=sys.stderr)
        rows.extend(dict(row(p), error="dry run") for p in paths)
        print(table(rows))
        dump()
        return 0

    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    t_start = time.time()
    dev = a.device
    cuda = dev.startswith("cuda")
    meta.update(torch=torch.__version__, transformers=transformers.__version__, cuda=torch.version.cuda,
                gpu=torch.cuda.get_device_name(0) if cuda else dev)
    torch.manual_seed(0)
    cfg = LlamaConfig(**cfg_kw)
    cfg.bos_token_id = cfg.eos_token_id = None  # random weights: never stop early
    cfg.pad_token_id = 0
    with torch.device(dev):
        model = LlamaForCausalLM(cfg)
    model = model.to(dtype=torch.bfloat16).eval()
    gc = model.generation_config
    gc.bos_token_id = gc.eos_token_id = None
    gc.pad_token_id = 0
    meta["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    meta["build_s"] = round(time.time() - t_start, 1)
    print(f"model built in {meta['build_s']} s (attention: {meta['attn_implementation']})", file=sys.stderr, flush=True)
    ids = torch.randint(0, cfg.vocab_size, (1, a.prompt_tokens), device=dev)
    mask = torch.ones_like(ids)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for path in paths:
        r = row(path)
        kw = dict(max_new_tokens=a.new_tokens, do_sample=False)
        if path != "eager":
            kw["cache_implementation"] = "static"
        if path == "static":
            kw["disable_compile"] = True
        t0 = time.time()
        try:
            skips = cudagraph_skips()
            with torch.no_grad():
                for i in range(max(a.warmup, 2 if path == "static-compile" else 0)):
                    t1 = time.time()
                    out = model.generate(ids, attention_mask=mask, **kw)
                    sync()
                    print(f"  {path} warm-up {i}: {time.time() - t1:.1f} s", file=sys.stderr, flush=True)
                secs = []
                for _ in range(a.reps):
                    sync()
                    t1 = time.perf_counter()
                    out = model.generate(ids, attention_mask=mask, **kw)
                    sync()
                    secs.append(time.perf_counter() - t1)
            new = out.shape[1] - ids.shape[1]
            if new != a.new_tokens:
                raise RuntimeError(f"generated {new} tokens, not {a.new_tokens}")
            ms = [1e3 * s / new for s in secs]
            r.update(ms_per_token=statistics.median(ms), stdev_ms=statistics.stdev(ms) if len(ms) > 1 else 0.0,
                     tokens_per_s=1e3 / statistics.median(ms), seconds=secs)
            if path == "static-compile":
                r["cudagraph_skips"] = (cudagraph_skips() or 0) - (skips or 0)
                if r["cudagraph_skips"]:
                    note(path, RuntimeError(f"inductor ran {r['cudagraph_skips']} graph(s) without CUDA graphs"))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            r["error"] = note(path, e)
        r["elapsed_s"] = round(time.time() - t0, 1)
        rows.append(r)
        res = "failed" if r["ms_per_token"] is None else f"{r['ms_per_token']:.2f} ms/token"
        print(f"{path}: {res} ({r['elapsed_s']} s)", file=sys.stderr, flush=True)
        dump()
    meta["elapsed_s"] = round(time.time() - t_start, 1)
    dump()
    print(table(rows))
    print(f"hf generate peer: {len(rows)} rows, {len(errors)} errors, {meta['elapsed_s']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
