#!/usr/bin/env python3
"""Reference dequantization of ggml block types by the Python `gguf` package
(test-only), for tests/formats/ggml_crosscheck_test.cpp.

  ggml_reference.py blocks DIR SEED N
      For every quantized type futr reads (Q4_0 ... Q8_K): DIR/<TYPE>.bin, N
      random blocks (random bytes; the fp16/f32 scale fields random finite
      values in [-2, 2), except blocks 0..2: scales 0, the smallest fp16
      subnormal and 65504), and DIR/<TYPE>.f32, their values dequantized by
      gguf.quants.dequantize (FP32, little-endian). DIR/reference.json names the
      dequantizer used per type.

  ggml_reference.py model OUT.gguf DIR SEED
      Writes with gguf.GGUFWriter a one-layer llama model (hidden 256, 4 heads
      / 2 kv heads of 64, intermediate 512, vocab 256, tied embedding, no
      tokenizer) whose matrices use the ggml types below, filled with random
      blocks (random bytes; the fp16/f32 scale fields random finite values in
      [-2, 2)). Reads it back with gguf.GGUFReader and writes DIR/<tensor>.f32:
      each tensor dequantized by gguf.quants.dequantize, in file (GGUF) order.

gguf 0.19.0 has no dequantizer for Q8_K (ggml only makes it for activations):
for that type the reference is x = d * q written here from ggml's block_q8_K
(f32 d, int8 qs[256], int16 bsums[16]); reference.json says so.

Exit status 3: a required package is missing (the C++ test skips, naming it).
"""
import json
import sys
from pathlib import Path

try:
    import numpy as np
    import gguf
    from gguf.constants import GGML_QUANT_SIZES
except ImportError as e:
    print(f"ggml_reference.py: missing Python package: {e}", file=sys.stderr)
    sys.exit(3)

Q = gguf.GGMLQuantizationType

# Byte offsets of the scale fields in each block: (offset, "f16" | "f32").
SCALE_FIELDS = {
    "Q4_0": [(0, "f16")], "Q4_1": [(0, "f16"), (2, "f16")], "Q8_0": [(0, "f16")],
    "Q5_0": [(0, "f16")], "Q5_1": [(0, "f16"), (2, "f16")],
    "Q2_K": [(80, "f16"), (82, "f16")], "Q3_K": [(108, "f16")],
    "Q4_K": [(0, "f16"), (2, "f16")], "Q5_K": [(0, "f16"), (2, "f16")],
    "Q6_K": [(208, "f16")], "Q8_K": [(0, "f32")],
}

# The model's matrices and their types: every new type at least once.
MODEL_TYPES = {
    "token_embd.weight": "Q4_K", "blk.0.attn_q.weight": "Q5_K", "blk.0.attn_k.weight": "Q6_K",
    "blk.0.attn_v.weight": "Q2_K", "blk.0.attn_output.weight": "Q3_K",
    "blk.0.ffn_gate.weight": "Q8_K", "blk.0.ffn_up.weight": "Q5_0", "blk.0.ffn_down.weight": "Q5_1",
}


def random_blocks(rng, kind: str, n_blocks: int, edges: bool = False) -> np.ndarray:
    """n_blocks random blocks of type `kind`, [n_blocks, type_size] uint8; with
    `edges`, blocks 0..2 get the scales 0, 2^-24 and 65504."""
    _, size = GGML_QUANT_SIZES[Q[kind]]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off, f in SCALE_FIELDS[kind]:
        v = rng.uniform(-2.0, 2.0, size=n_blocks)
        if edges:
            v[:3] = [0.0, 2.0**-24, 65504.0][:min(3, n_blocks)]
        dt = np.float16 if f == "f16" else np.float32
        b[:, off:off + np.dtype(dt).itemsize] = v.astype(dt).view(np.uint8).reshape(n_blocks, -1)
    return b


def dequantize(data: np.ndarray, kind: str) -> tuple[np.ndarray, str]:
    """FP32 values of raw blocks `data` (uint8, any shape with whole blocks per row)."""
    if kind == "Q8_K" and Q.Q8_K not in gguf.quants._type_traits:
        blocks = data.reshape(-1, 292)
        d = blocks[:, :4].copy().view(np.float32)
        q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(-1), "numpy from block_q8_K (gguf has no Q8_K dequantizer)"
    return np.asarray(gguf.quants.dequantize(data, Q[kind]), dtype=np.float32).reshape(-1), "gguf.quants"


def cmd_blocks(d: Path, seed: int, n: int) -> int:
    rng = np.random.default_rng(seed)
    used = {}
    for kind in SCALE_FIELDS:
        raw = random_blocks(rng, kind, n, edges=True)
        raw.tofile(d / f"{kind}.bin")
        y, used[kind] = dequantize(raw, kind)
        y.astype("<f4").tofile(d / f"{kind}.f32")
    (d / "reference.json").write_text(json.dumps(used, indent=1))
    return 0


def cmd_model(out: Path, d: Path, seed: int) -> int:
    rng = np.random.default_rng(seed)
    hidden, heads, kv_heads, head_dim, inter, vocab = 256, 4, 2, 64, 512, 256
    shapes = {  # canonical [rows, cols]
        "token_embd.weight": (vocab, hidden), "blk.0.attn_q.weight": (heads * head_dim, hidden),
        "blk.0.attn_k.weight": (kv_heads * head_dim, hidden), "blk.0.attn_v.weight": (kv_heads * head_dim, hidden),
        "blk.0.attn_output.weight": (hidden, heads * head_dim), "blk.0.ffn_gate.weight": (inter, hidden),
        "blk.0.ffn_up.weight": (inter, hidden), "blk.0.ffn_down.weight": (hidden, inter),
    }
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("ktypes")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(head_dim)
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        w.add_tensor(name, rng.uniform(0.5, 1.5, size=hidden).astype(np.float32))
    for name, (rows, cols) in shapes.items():
        kind = MODEL_TYPES[name]
        block, size = GGML_QUANT_SIZES[Q[kind]]
        raw = random_blocks(rng, kind, rows * cols // block).reshape(rows, cols // block * size)
        w.add_tensor(name, raw, raw_dtype=Q[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    used = {}
    for t in gguf.GGUFReader(str(out)).tensors:
        y, used[t.tensor_type.name] = dequantize(np.asarray(t.data), t.tensor_type.name)
        y.astype("<f4").tofile(d / f"{t.name}.f32")
    (d / "reference.json").write_text(json.dumps(used, indent=1))
    return 0


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "blocks":
        return cmd_blocks(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    if len(sys.argv) == 5 and sys.argv[1] == "model":
        return cmd_model(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
