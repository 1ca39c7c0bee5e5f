#!/usr/bin/env python3
"""PyTorch peer of the prefill-attention benchmark (bench/prefill_attention_bench.cpp).

Causal scaled dot-product attention of prompt chunks without a prefix
(is_causal=True, query length = key length: PyTorch's causal mask is aligned
top-left, which equals the bottom-right rule only then), GQA through
enable_gqa=True, BF16, with the flash and the cuDNN backends of
torch.nn.functional.scaled_dot_product_attention. Shapes: `requests` x `len`
(a batch of equal requests; ours runs them packed), at the Llama-3.1-8B
(32 / 8 heads, D 128) and SmolLM2-135M (9 / 3, D 64) attention shapes. The
same timing method as the C++ benchmark (torch_decode_peer.Timer: CUDA-graph
replay, CUDA events, median, L2 flushed by a read pass before every rep).
A backend that fails on a shape is recorded, never fatal.

Writes JSON: {"meta": {...}, "rows": [{"model", "requests", "len", "flash_us", "cudnn_us"}], "errors": [...]}

usage: torch_prefill_attention_peer.py --out sdpa.json [--shapes 1x8192,4x2048,16x512] [--reps 20]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import time_sdpa_backends  # noqa: E402
from torch_decode_peer import Timer  # noqa: E402

MODELS = {"llama-3.1-8b": (32, 8, 128), "smollm2-135m": (9, 3, 64)}
errors = []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="1x8192,4x2048,16x512")
    ap.add_argument("--models", default="llama-3.1-8b,smollm2-135m")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    timer = Timer(a.reps)
    rows = []
    for model in a.models.split(","):
        heads, kv_heads, d = MODELS[model]
        for shape in a.shapes.split(","):
            b, n = (int(x) for x in shape.split("x"))
            q = torch.randn(b, heads, n, d, dtype=torch.bfloat16, device="cuda")
            k = torch.randn(b, kv_heads, n, d, dtype=torch.bfloat16, device="cuda")
            v = torch.randn(b, kv_heads, n, d, dtype=torch.bfloat16, device="cuda")
            row = {"model": model, "requests": b, "len": n}
            time_sdpa_backends(timer, q, k, v, row, f"prefill {model} {shape}", errors, is_causal=True)
            rows.append(row)
            del q, k, v
            torch.cuda.empty_cache()
    meta = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
            "timing": f"median of {a.reps} CUDA-graph replays, L2 flushed by a read pass"}
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": rows, "errors": errors}, f, indent=1)


if __name__ == "__main__":
    main()
