#!/usr/bin/env python3
"""Reference token ids of a SentencePiece (Llama-2 style) vocabulary from the
Hugging Face `tokenizers` package (test-only; nothing is downloaded).

1. Learns a small vocabulary from the text with tokenizers' BPE trainer (words
   split at the space marker U+2581, at most --alphabet characters, so rarer
   characters and newlines take the byte fallback).
2. Lays it out as a Llama-2 GGUF vocabulary: <unk>, <s>, </s> (types 2, 3, 3),
   the 256 byte tokens <0x00>..<0xFF> (type 6), then the learned pieces (type
   1), each scored by its merge order (earlier merges score higher), and
   writes it with the `gguf` package as OUT/spm.gguf (metadata only:
   tokenizer.ggml.model = llama, scores, token types, bos 1, eos 2, unk 0,
   add_bos_token, add_space_prefix).
3. Builds the reference the way transformers converts a SentencePiece model
   (LlamaConverter, legacy): BPE over that vocabulary with byte_fallback, the
   merges read from the scores (every split of a normal token into two normal
   tokens, by decreasing score of the token), normalizer Prepend(U+2581) +
   Replace(" ", U+2581), no pre-tokenizer, <unk> <s> </s> as special tokens.

OUT receives spm.gguf, tokenizer.json (the reference), first/tokenizer.json
(the same model as transformers converts it without `legacy`: a Metaspace
pre-tokenizer whose dummy prefix goes only where the text starts, as in
Mistral's files), ids.i32 (the whole text, int32 little-endian, no special
tokens added), info.json (tokens, seconds, vocabulary size) and, with --cases
FILE.json (a list of strings), cases.json and cases_first.json (each one's
ids under either). tests/tokenizer/spm_reference_test.cpp compares
futr's SentencePiece tokenizer (tokenizer/tokenizer.h, model "llama") with
these ids. Exit status 3: a required package is missing (the test skips).

usage: spm_reference.py --text FILE --out DIR [--vocab N] [--alphabet N] [--cases FILE.json]
"""
import argparse
import json
import os
import sys
import time

try:
    import numpy as np
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
except ImportError as e:  # the C++ test turns this into GTEST_SKIP
    print(f"spm_reference.py: missing Python package: {e}", file=sys.stderr)
    sys.exit(3)

SPACE = "\u2581"
UNKNOWN, CONTROL, NORMAL, BYTE = 2, 3, 1, 6


def learn_pieces(text, vocab_size, alphabet):
    """The learned pieces in merge order (alphabet first), as tokenizers' BPE trainer finds them."""
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, limit_alphabet=alphabet, show_progress=False)
    t.train_from_iterator([line for line in text.split("\n") if line.strip()], trainer)
    vocab = t.get_vocab()
    return [p for p, _ in sorted(vocab.items(), key=lambda kv: kv[1])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--alphabet", type=int, default=100)
    ap.add_argument("--cases")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with open(a.text, "rb") as f:
        text = f.read().decode("utf-8")

    pieces = learn_pieces(text, a.vocab, a.alphabet)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    scores = [0.0] * len(tokens)
    seen = set(tokens)
    for i, p in enumerate(pieces):
        if p in seen:
            continue
        seen.add(p)
        tokens.append(p)
        types.append(NORMAL)
        scores.append(-float(i))  # earlier merges first, as SentencePiece's BPE scores

    w = gguf.GGUFWriter(os.path.join(a.out, "spm.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # The reference: transformers' LlamaConverter of this vocabulary.
    vocab = {t: i for i, t in enumerate(tokens)}
    normal = {t for t, ty in zip(tokens, types) if ty == NORMAL}
    merges = []
    for piece in normal:
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in normal and piece[k:] in normal]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend((l, r, scores[vocab[piece]], vocab[piece]) for l, r in local)
    merges.sort(key=lambda m: (-m[2], m[3]))
    ref = Tokenizer(models.BPE(vocab=vocab, merges=[(l, r) for l, r, _, _ in merges], unk_token="<unk>",
                               fuse_unk=True, byte_fallback=True))
    ref.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
    ref.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    ref.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    ref.save(os.path.join(a.out, "tokenizer.json"))
    # The non-legacy conversion (Mistral's files): no normalizer, a Metaspace
    # pre-tokenizer that prepends the space only where the text starts.
    first = Tokenizer(models.BPE(vocab=vocab, merges=[(l, r) for l, r, _, _ in merges], unk_token="<unk>",
                                 fuse_unk=True, byte_fallback=True))
    first.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first", split=False)
    first.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="first", split=False)
    first.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    os.makedirs(os.path.join(a.out, "first"), exist_ok=True)
    first.save(os.path.join(a.out, "first", "tokenizer.json"))

    t0 = time.time()
    ids = ref.encode(text, add_special_tokens=False).ids
    seconds = time.time() - t0
    np.asarray(ids, dtype="<i4").tofile(os.path.join(a.out, "ids.i32"))
    with open(os.path.join(a.out, "info.json"), "w") as f:
        json.dump({"tokens": len(ids), "encode_seconds": seconds, "vocab": len(tokens),
                   "byte_fallback_ids": sum(1 for i in ids if types[i] == BYTE)}, f)
    if a.cases:
        with open(a.cases, encoding="utf-8") as f:
            cases = json.load(f)
        with open(os.path.join(a.out, "cases.json"), "w") as f:
            json.dump([ref.encode(c, add_special_tokens=False).ids for c in cases], f)
        with open(os.path.join(a.out, "cases_first.json"), "w") as f:
            json.dump([first.encode(c, add_special_tokens=False).ids for c in cases], f)


if __name__ == "__main__":
    main()
