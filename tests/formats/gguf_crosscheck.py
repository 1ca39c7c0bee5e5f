#!/usr/bin/env python3
"""One-off cross-check of futr's GGUF dequantization against the Python `gguf`
package (gguf.quants.dequantize), recorded in docs/FORMATS.md. Not run by ctest
(the C++ tests must not need Python).

  ninja -C build gguf_dump_tool
  python3 tests/formats/gguf_crosscheck.py build/bin/gguf_dump_tool models/SmolLM2-135M-Instruct.Q4_1.gguf
  python3 tests/formats/gguf_crosscheck.py build/bin/gguf_dump_tool --synthetic

--synthetic writes a GGUF with gguf.GGUFWriter holding random tensors of every
type gguf.quants can quantize (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1;
the K-quants: tests/formats/ggml_crosscheck_test.cpp)
and checks those the same way (the real model has only F32, Q8_0 and Q4_1).

For every tensor: futr's FP32 values must equal gguf's bit for bit. For Q and K:
futr's un-permuted rows must equal numpy's inverse of llama.cpp's permutation,
reshape(n_head, d/2, 2, cols).swapaxes(1, 2).
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np


def write_synthetic(path: str) -> None:
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "tensors")
    Q = gguf.GGMLQuantizationType
    for i, kind in enumerate([Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]):
        x = (rng.standard_normal((64, 256)) * (0.1 + i)).astype(np.float32)
        x[0, :32] = 0  # an all-zero block
        data = gguf.quants.quantize(x, kind)
        w.add_tensor(f"t.{kind.name}", data, raw_shape=x.shape if kind in (Q.F32,) else None,
                     raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    tool, model = sys.argv[1], sys.argv[2]
    tmpdir = tempfile.TemporaryDirectory()
    if model == "--synthetic":
        model = str(Path(tmpdir.name) / "synthetic.gguf")
        write_synthetic(model)
    reader = gguf.GGUFReader(model)
    heads = reader.fields.get("llama.attention.head_count")
    n_head = int(heads.contents()) if heads else 0
    kvh = reader.fields.get("llama.attention.head_count_kv")
    n_kv = int(kvh.contents()) if kvh else n_head
    worst = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool, model, tmp], check=True)
        bad = 0
        for t in reader.tensors:
            ref = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
            got = np.fromfile(Path(tmp) / f"{t.name}.f32", dtype=np.float32)
            same = got.shape == ref.shape and np.array_equal(got.view(np.uint32), ref.view(np.uint32))
            kind = t.tensor_type.name
            worst[kind] = worst.get(kind, 0) + (0 if same else 1)
            bad += 0 if same else 1
            for part, heads in (("attn_q", n_head), ("attn_k", n_kv)):
                if heads and t.name.endswith(f".{part}.weight"):
                    rows, cols = int(t.shape[1]), int(t.shape[0])
                    canon = ref.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(-1)
                    gotc = np.fromfile(Path(tmp) / f"{t.name}.canonical.f32", dtype=np.float32)
                    if not np.array_equal(gotc.view(np.uint32), canon.view(np.uint32)):
                        print("Q/K un-permutation differs:", t.name)
                        bad += 1
        counts = {}
        for t in reader.tensors:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        for kind, n in sorted(counts.items()):
            print(f"{kind}: {n} tensors, {worst[kind]} differ")
        print(f"gguf {gguf.__version__ if hasattr(gguf, '__version__') else ''} numpy {np.__version__}:",
              "all bit-identical" if bad == 0 else f"{bad} mismatches")
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
