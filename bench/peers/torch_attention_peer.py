#!/usr/bin/env python3
"""PyTorch peer of the decode-attention benchmark (bench/decode_attention_bench.cpp).

Scaled dot-product attention of one query row per sequence over a BF16 KV
cache, at the Llama-3.1-8B attention shape (32 query heads, 8 KV heads, head
dim 128, GQA through enable_gqa=True), with the flash and the cuDNN backends of
torch.nn.functional.scaled_dot_product_attention. The same timing method as the
C++ benchmark (torch_decode_peer.Timer: CUDA-graph replay, CUDA events, median,
L2 flushed by a read pass before every rep). Random data: timings do not depend
on values. A backend that fails on a shape is recorded, never fatal.

Writes JSON: {"meta": {...}, "rows": [{"batch", "ctx", "flash_us", "cudnn_us"}], "errors": [...]}

usage: torch_attention_peer.py --out sdpa.json [--batch 1,8,32] [--ctx 1024,8192,32768] [--reps 30]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import time_sdpa_backends  # noqa: E402
from torch_decode_peer import Timer  # noqa: E402

HEADS, KV_HEADS, D = 32, 8, 128
errors = []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--ctx", default="1024,8192,32768")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    timer = Timer(a.reps)
    rows = []
    for b in [int(x) for x in a.batch.split(",")]:
        for ctx in [int(x) for x in a.ctx.split(",")]:
            q = torch.randn(b, HEADS, 1, D, dtype=torch.bfloat16, device="cuda")
            k = torch.randn(b, KV_HEADS, ctx, D, dtype=torch.bfloat16, device="cuda")
            v = torch.randn(b, KV_HEADS, ctx, D, dtype=torch.bfloat16, device="cuda")
            row = {"batch": b, "ctx": ctx}
            time_sdpa_backends(timer, q, k, v, row, f"batch {b} ctx {ctx}", errors)
            rows.append(row)
            del q, k, v
            torch.cuda.empty_cache()
    meta = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
            "timing": f"median of {a.reps} CUDA-graph replays, L2 flushed by a read pass"}
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": rows, "errors": errors}, f, indent=1)


if __name__ == "__main__":
    main()
