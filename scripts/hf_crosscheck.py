#!/usr/bin/env python3
"""Cross-check material from an implementation nobody here wrote.

Builds small random-weight models with Hugging Face transformers: Llama (GQA with
head dim 64 and 128, tied and untied embeddings, llama3 RoPE scaling, a head dim
that differs from hidden/heads, single and sharded safetensors in BF16, F16 and
F32), Qwen2 (random q/k/v biases, rope theta 1e6) and Mistral (no sliding
window), runs them in FP32 on fixed token ids, and saves each model directory
with the golden logits beside it:

  <out>/<name>/config.json, *.safetensors[, model.safetensors.index.json]
  <out>/<name>/golden.json   {"tokens": [...], "shape": [T, vocab]}
  <out>/<name>/golden.f32    logits, little-endian float32, row-major [T, vocab]

tests/cpu_engine/hf_crosscheck_test.cpp loads each directory with futr's HF loader,
runs the CPU backend (batched prefill and token-by-token decode) and compares
with golden.f32 (relative L2 error <= 1e-4, tests/support/tolerances.h).

Run where torch + transformers exist (CPU is used):
  python3 scripts/hf_crosscheck.py --out tests/data/hf_tiny [--only NAME,...]
"""
import argparse
import json
import os

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

ARCHS = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
         "mistral": (MistralConfig, MistralForCausalLM)}

MODELS = [
    # name, config overrides, save dtype, shard size[, architecture (default llama)]
    ("gqa_hd64_tied_bf16", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                 head_dim=64, intermediate_size=384, tie_word_embeddings=True,
                                 rope_theta=10000.0), torch.bfloat16, None),
    ("gqa_hd128_untied_llama3_f16_sharded",
     dict(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
          intermediate_size=320, tie_word_embeddings=False, rope_theta=500000.0,
          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                            high_freq_factor=4.0, original_max_position_embeddings=64)),
     torch.float16, "300KB"),
    ("mqa_hd64_wide_heads_f32", dict(hidden_size=96, num_attention_heads=3, num_key_value_heads=1,
                                      head_dim=64, intermediate_size=160, tie_word_embeddings=False,
                                      rope_theta=100000.0), torch.float32, None),
    ("qwen2_gqa_hd64_bias_tied_bf16", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                           intermediate_size=384, tie_word_embeddings=True,
                                           rope_theta=1000000.0, use_sliding_window=False),
     torch.bfloat16, None, "qwen2"),
    ("mistral_gqa_hd64_untied_f16", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=1,
                                         head_dim=64, intermediate_size=320, tie_word_embeddings=False,
                                         rope_theta=1000000.0, sliding_window=None),
     torch.float16, None, "mistral"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq", type=int, default=48)
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    torch.manual_seed(1234)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    for name, over, dtype, shard, *arch in MODELS:
        if only and name not in only:
            continue
        torch.manual_seed(1234)  # each model from the same seed, whichever are built
        config_cls, model_cls = ARCHS[arch[0] if arch else "llama"]
        extra = dict(attention_bias=False, mlp_bias=False) if config_cls is LlamaConfig else {}
        cfg = config_cls(vocab_size=320, num_hidden_layers=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                         **extra, **over)
        model = model_cls(cfg).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():  # non-trivial norms, biases, larger weights than init
                if pname.endswith(".bias"):  # Qwen2's q/k/v biases (zero at init)
                    p.normal_(0.0, 0.5)
                elif p.dim() == 1:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                else:
                    p.normal_(0.0, 0.08)
            # Round to the storage dtype so the saved weights are the ones used.
            for p in model.parameters():
                p.copy_(p.to(dtype).to(torch.float32))
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        kw = dict(safe_serialization=True)
        if shard:
            kw["max_shard_size"] = shard
        model.to(dtype).save_pretrained(d, **kw)
        # Run the saved checkpoint in FP32 as a user would: reload it. (Casting
        # the model back with .to(torch.float32) is not enough: .to(dtype) also
        # casts the RoPE inverse-frequency buffer, leaving it rounded to BF16 /
        # F16, which moved the golden logits by 4e-3 / 8e-4 relative L2.)
        rng = torch.get_rng_state()
        model = model_cls.from_pretrained(d, dtype=torch.float32).eval()
        torch.set_rng_state(rng)
        assert model.model.rotary_emb.inv_freq.dtype == torch.float32
        g = torch.Generator().manual_seed(99)
        tokens = torch.randint(0, cfg.vocab_size, (1, args.seq), generator=g)
        with torch.no_grad():
            logits = model(tokens).logits[0].to(torch.float32).contiguous()
        logits.numpy().astype("<f4").tofile(os.path.join(d, "golden.f32"))
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump({"tokens": tokens[0].tolist(), "shape": list(logits.shape),
                       "transformers": transformers.__version__, "torch": torch.__version__}, f)
        print(name, "saved", sorted(os.listdir(d)))
        print(open(os.path.join(d, "config.json")).read())


if __name__ == "__main__":
    main()
