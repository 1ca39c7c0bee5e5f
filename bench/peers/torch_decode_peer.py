#!/usr/bin/env python3
"""PyTorch peers of the INT4 decode GEMM benchmark (bench/w4a16_bench.cpp).

For each model's four projections (the shapes of src/launch/w4a16_shapes.h) and
each M: torch BF16 (F.linear, cuBLAS) and torch's INT4 kernel
torch._weight_int4pack_mm (group 128; group 64 where K % 128 != 0), each as a
CUDA-graph replay, timed with CUDA events, median over reps, L2 flushed before
every rep by a read pass over 2x the L2 size (the same method as the C++
benchmark). Also one layer: the four projections in one graph.
Random weights: the timings do not depend on values.

Writes JSON: {"meta": {...}, "rows": [{"model", "proj", "m", "bf16_us", "int4_us"}],
"errors": [...]}. Every op is wrapped: a failure is recorded, never fatal.

usage: torch_decode_peer.py --out peers.json [--m 1,2,4,8,16,32] [--models a,b] [--reps 30]
"""
import argparse
import json
import statistics
import sys
import traceback

import torch
import torch.nn.functional as F

SHAPES = [  # (model, proj, N, K, group) -- keep in sync with src/launch/w4a16_shapes.h
    ("SmolLM2-135M", "qkv", 960, 576, 64), ("SmolLM2-135M", "o", 576, 576, 64),
    ("SmolLM2-135M", "gate_up", 3072, 576, 64), ("SmolLM2-135M", "down", 576, 1536, 64),
    ("Llama-3.2-1B", "qkv", 3072, 2048, 128), ("Llama-3.2-1B", "o", 2048, 2048, 128),
    ("Llama-3.2-1B", "gate_up", 16384, 2048, 128), ("Llama-3.2-1B", "down", 2048, 8192, 128),
    ("Llama-3.1-8B", "qkv", 6144, 4096, 128), ("Llama-3.1-8B", "o", 4096, 4096, 128),
    ("Llama-3.1-8B", "gate_up", 28672, 4096, 128), ("Llama-3.1-8B", "down", 4096, 14336, 128),
    ("Llama-3.1-70B", "qkv", 10240, 8192, 128), ("Llama-3.1-70B", "o", 8192, 8192, 128),
    ("Llama-3.1-70B", "gate_up", 57344, 8192, 128), ("Llama-3.1-70B", "down", 8192, 28672, 128),
    ("Llama-3.1-405B", "qkv", 18432, 16384, 128), ("Llama-3.1-405B", "o", 16384, 16384, 128),
    ("Llama-3.1-405B", "gate_up", 106496, 16384, 128), ("Llama-3.1-405B", "down", 16384, 53248, 128),
]

errors = []


def note(what, e):
    msg = f"{what}: {type(e).__name__}: {e}"
    errors.append(msg)
    print("PEER ERROR", msg, file=sys.stderr, flush=True)


class Timer:
    def __init__(self, reps):
        self.reps = reps
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush_buf = torch.randint(0, 255, (2 * l2 // 4,), dtype=torch.int32, device="cuda").float()

    def us(self, fn):
        fn()  # warm-up outside the capture (kernel selection, workspaces)
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        for _ in range(3):
            g.replay()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for i in range(self.reps):
            self.flush_buf.sum()  # read pass over 2x L2: clean lines only
            starts[i].record()
            g.replay()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(1e3 * a.elapsed_time(b) for a, b in zip(starts, ends))


def int4_weight(n, k, group):
    """Packed weight + scales/zeros for torch._weight_int4pack_mm (random values)."""
    w_u8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
    packed = None
    last = None
    for inner in (8, 4, 2):
        if k % (inner * 16):
            continue
        try:
            packed = torch._convert_weight_to_int4pack(w_u8, inner)
            break
        except Exception as e:  # older signature: int32 [n, k] values 0..15
            last = e
            try:
                w_i32 = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
                packed = torch._convert_weight_to_int4pack(w_i32, inner)
                break
            except Exception as e2:
                last = e2
    if packed is None:
        raise RuntimeError(f"_convert_weight_to_int4pack failed for N={n} K={k}: {last}")
    sz = torch.empty((k // group, n, 2), dtype=torch.bfloat16, device="cuda")
    sz[..., 0].uniform_(0.002, 0.02)
    sz[..., 1].uniform_(-0.01, 0.01)
    return packed, sz


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--m", default="1,2,4,8,16,32")
    ap.add_argument("--models", default="")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    ms = [int(x) for x in a.m.split(",") if x]
    models = [x for x in a.models.split(",") if x] or list(dict.fromkeys(s[0] for s in SHAPES))
    rows = []
    meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
            "int4_op": "torch._weight_int4pack_mm (group 128; 64 where K % 128 != 0)",
            "bf16_op": "F.linear (cuBLAS)", "timing": f"median of {a.reps} CUDA-graph replays, cold L2 (read flush)"}
    timer = Timer(a.reps)
    for model in models:
        shapes = [s for s in SHAPES if s[0] == model]
        ws16, ws4 = [], []
        for (_, proj, n, k, group) in shapes:
            try:
                ws16.append(torch.empty((n, k), dtype=torch.bfloat16, device="cuda").uniform_(-0.05, 0.05))
            except Exception as e:
                note(f"{model} {proj} bf16 alloc", e)
                ws16.append(None)
            try:
                ws4.append(int4_weight(n, k, group))
            except Exception as e:
                note(f"{model} {proj} int4 pack", e)
                ws4.append(None)
        kmax = max(s[3] for s in shapes)
        for m in ms:
            x = torch.empty((m, kmax), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
            xs = [x[:, :s[3]].contiguous() for s in shapes]
            for i, (_, proj, n, k, group) in enumerate(shapes):
                r = {"model": model, "proj": proj, "m": m, "n": n, "k": k, "group": group}
                if ws16[i] is not None:
                    try:
                        r["bf16_us"] = timer.us(lambda: F.linear(xs[i], ws16[i]))
                    except Exception as e:
                        note(f"{model} {proj} M={m} bf16", e)
                if ws4[i] is not None:
                    try:
                        r["int4_us"] = timer.us(lambda: torch._weight_int4pack_mm(xs[i], ws4[i][0], group, ws4[i][1]))
                    except Exception as e:
                        note(f"{model} {proj} M={m} int4", e)
                rows.append(r)
                print(json.dumps(r), flush=True)
            lr = {"model": model, "proj": "layer", "m": m}
            if all(w is not None for w in ws16):
                try:
                    lr["bf16_us"] = timer.us(lambda: [F.linear(xs[i], ws16[i]) for i in range(len(shapes))])
                except Exception as e:
                    note(f"{model} layer M={m} bf16", e)
            if all(w is not None for w in ws4):
                try:
                    lr["int4_us"] = timer.us(lambda: [torch._weight_int4pack_mm(xs[i], ws4[i][0], shapes[i][4], ws4[i][1])
                                                      for i in range(len(shapes))])
                except Exception as e:
                    note(f"{model} layer M={m} int4", e)
            rows.append(lr)
            print(json.dumps(lr), flush=True)
        del ws16, ws4
        torch.cuda.empty_cache()
        with open(a.out, "w") as f:  # after every model: a timeout keeps what was measured
            json.dump({"meta": meta, "rows": rows, "errors": errors}, f, indent=1)
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": rows, "errors": errors}, f, indent=1)
    print(f"torch peer: {len(rows)} rows, {len(errors)} errors -> {a.out}")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
