#!/usr/bin/env python3
"""Reference token ids from the Hugging Face `tokenizers` package (test-only).

Builds a `tokenizers.Tokenizer` from the vocabulary and merges stored in a GGUF
file's metadata (read with the `gguf` package), saves it as a Hugging Face
tokenizer directory and tokenizes a text file with it. Three variants:

  smollm  SmolLM2's pre-tokenizer: Sequence[Digits(individual_digits=True),
          ByteLevel(add_prefix_space=False, use_regex=True)], ByteLevel decoder.
  llama3  the same vocabulary with Llama-3's pre-tokenizer: Sequence[Split(Llama-3
          regex, isolated), ByteLevel(use_regex=False)], and ignore_merges=True as
          in Llama-3's tokenizer.json.
  qwen2   the same vocabulary with Qwen2's pre-tokenizer (the Llama-3 regex with one
          digit a piece), merges not ignored, as in Qwen2's tokenizer.json.

For each variant, OUT/<variant>/ receives:
  tokenizer.json         written by tokenizers.Tokenizer.save()
  tokenizer_config.json  bos/eos/unk/pad token strings, add_bos_token, chat_template
  ids.i32                the ids of the whole text (read as bytes, decoded as UTF-8,
                         line endings kept), int32 little-endian, no special tokens added
  info.json              token count, seconds spent encoding, decode round trip ok
  cases.json             with --cases FILE (a JSON list of strings): each one's ids
and OUT/chat.json: the GGUF chat template rendered by jinja2 (as transformers'
apply_chat_template does) for a few conversations, if jinja2 is installed
(else {"skipped": reason}), which the test compares with futr's ChatTemplate.

The C++ test tests/tokenizer/tokenizer_reference_test.cpp runs this script and
compares futr's ids with ids.i32, token for token. Exit status 3 means a
required package is missing (the test skips with the message).

usage: tokenizer_reference.py --gguf MODEL.gguf --text FILE --out DIR [--cases FILE.json]
                              [--variants smollm,llama3]
"""
import argparse
import json
import os
import sys
import time

try:
    import numpy as np
    import gguf
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
except ImportError as e:  # the C++ test turns this into GTEST_SKIP
    print(f"tokenizer_reference.py: missing Python package: {e}", file=sys.stderr)
    sys.exit(3)

# The Llama-3 pre-tokenizer pattern (as in Meta's tokenizer.json); it must equal
# futr::pretok::kLlama3Pattern (src/tokenizer/patterns.h) for hf_json to accept it.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen2's (its tokenizer.json): Llama-3's with one digit a piece; it must equal
# futr::pretok::kQwen2Pattern.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Conversations rendered into OUT/chat.json.
CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"},
     {"role": "user", "content": "  How are you?\n"}],
]

CONTROL = 3  # GGUF token type of special (control) tokens
USER_DEFINED = 4


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def read_gguf_tokenizer(path):
    r = gguf.GGUFReader(path)
    tok = {
        "model": field(r, "tokenizer.ggml.model"),
        "tokens": field(r, "tokenizer.ggml.tokens"),
        "types": field(r, "tokenizer.ggml.token_type"),
        "merges": field(r, "tokenizer.ggml.merges"),
        "bos": field(r, "tokenizer.ggml.bos_token_id", -1),
        "eos": field(r, "tokenizer.ggml.eos_token_id", -1),
        "unk": field(r, "tokenizer.ggml.unknown_token_id", -1),
        "pad": field(r, "tokenizer.ggml.padding_token_id", -1),
        "add_bos": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
        "chat_template": field(r, "tokenizer.chat_template", ""),
    }
    if tok["model"] != "gpt2":
        sys.exit(f"{path}: tokenizer model {tok['model']!r} is not byte-level BPE ('gpt2')")
    return tok


def build(tok, variant):
    vocab = {t: i for i, t in enumerate(tok["tokens"])}
    merges = [tuple(m.split(" ")) for m in tok["merges"]]
    if variant == "smollm":
        bpe = models.BPE(vocab=vocab, merges=merges, unk_token=None, ignore_merges=False)
        pre = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    elif variant == "llama3":
        bpe = models.BPE(vocab=vocab, merges=merges, unk_token=None, ignore_merges=True)
        pre = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    elif variant == "qwen2":
        bpe = models.BPE(vocab=vocab, merges=merges, unk_token=None, ignore_merges=False)
        pre = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        sys.exit(f"unknown variant {variant!r}")
    t = Tokenizer(bpe)
    t.pre_tokenizer = pre
    t.decoder = decoders.ByteLevel()
    types = tok["types"] or [1] * len(tok["tokens"])
    added = [AddedToken(tok["tokens"][i], special=(ty == CONTROL), normalized=False)
             for i, ty in enumerate(types) if ty in (CONTROL, USER_DEFINED)]
    t.add_tokens(added)  # ids already in the vocab: they keep them
    for a in added:
        assert t.token_to_id(a.content) == tok["tokens"].index(a.content), a.content
    return t


def render_chats(tok):
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:
        return {"skipped": f"jinja2 is not installed ({e})"}
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(tok["chat_template"])
    name = lambda i: tok["tokens"][i] if 0 <= i < len(tok["tokens"]) else ""
    return {"chats": [{"messages": m, "prompt": tmpl.render(messages=m, add_generation_prompt=True,
                                                             bos_token=name(tok["bos"]), eos_token=name(tok["eos"]))}
                      for m in CONVERSATIONS]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", help="JSON list of strings to tokenize one by one")
    ap.add_argument("--variants", default="smollm,llama3")
    args = ap.parse_args()

    tok = read_gguf_tokenizer(args.gguf)
    with open(args.text, "rb") as f:
        text = f.read().decode("utf-8")  # strict: the reference text is valid UTF-8
    cases = None
    if args.cases:
        with open(args.cases, encoding="utf-8") as f:
            cases = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "chat.json"), "w", encoding="utf-8") as f:
        json.dump(render_chats(tok), f, ensure_ascii=False, indent=1)

    name = lambda i: tok["tokens"][i] if 0 <= i < len(tok["tokens"]) else None
    for variant in args.variants.split(","):
        out = os.path.join(args.out, variant)
        os.makedirs(out, exist_ok=True)
        t = build(tok, variant)
        t.save(os.path.join(out, "tokenizer.json"))
        cfg = {
            "bos_token": name(tok["bos"]), "eos_token": name(tok["eos"]),
            "unk_token": name(tok["unk"]), "pad_token": name(tok["pad"]),
            "add_bos_token": tok["add_bos"], "chat_template": tok["chat_template"],
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
        with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=2)

        t0 = time.perf_counter()
        ids = t.encode(text, add_special_tokens=False).ids
        seconds = time.perf_counter() - t0
        np.asarray(ids, dtype="<i4").tofile(os.path.join(out, "ids.i32"))
        round_trip = t.decode(ids, skip_special_tokens=False) == text
        info = {"variant": variant, "tokens": len(ids), "bytes": len(text.encode("utf-8")),
                "encode_seconds": round(seconds, 3), "decode_round_trip": round_trip}
        if cases is not None:
            with open(os.path.join(out, "cases.json"), "w") as f:
                json.dump([t.encode(c, add_special_tokens=False).ids for c in cases], f)
        with open(os.path.join(out, "info.json"), "w") as f:
            json.dump(info, f)
        print(json.dumps(info))


if __name__ == "__main__":
    main()
