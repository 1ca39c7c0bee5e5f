// TokenizerSpec: everything a file says about its tokenizer, before any
// tables are built. GGUF metadata (tokenizer.ggml.*) and tokenizer.json both
// reduce to this; futr::Tokenizer (tokenizer/tokenizer.h) is built from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace futr {

struct TokenizerSpec {
  std::string model = "gpt2";              // "gpt2" = byte-level BPE; "llama" = SentencePiece BPE
                                           // (Llama-2, TinyLlama, Mistral: scores, byte fallback)
  std::string pre = "gpt2";                // pre-tokenizer: "gpt2" | "smollm" | "llama3" (gpt2 only)
  std::vector<std::string> tokens;         // [vocab] id -> token text (byte-level alphabet; "llama":
                                           //         U+2581 (▁) for a space, "<0xNN>" byte tokens)
  std::vector<float> scores;               // [vocab] "llama": merge priority (higher first); empty: all 0
  bool add_space_prefix = true;            // "llama": a space before the text at the start and after
                                           //          each special token (SentencePiece's dummy prefix)
  bool space_prefix_first_only = false;    // "llama": the dummy prefix only where the text starts,
                                           //          not after special tokens (tokenizer.json's
                                           //          Metaspace prepend_scheme "first": Mistral)
  bool space_prefix_unless_space = false;  // "llama": no dummy prefix where the text already starts
                                           //          with a space (tokenizer.json's Metaspace)
  std::vector<int32_t> token_types;        // [vocab] GGUF types: 1 normal, 2 unknown, 3 control,
                                           //         4 user-defined, 5 unused, 6 byte (empty: all 1)
  std::vector<std::string> merges;         // ["a b", ...] in priority order
  int32_t bos = -1;                        // -1: none
  int32_t eos = -1;
  int32_t unk = -1;
  int32_t pad = -1;
  std::vector<int32_t> extra_eos;     // further end-of-generation ids (e.g. <|eot_id|>)
  bool add_bos = false;               // prepend bos when encoding a prompt
  std::string chat_template;          // Jinja source as found in the file ("" if none)
  std::optional<bool> ignore_merges;  // BPE: a word that is itself a token is not merged
                                      // (tokenizer.json model.ignore_merges); unset: the
                                      // default of `pre` (true for "llama3", as llama.cpp)
};

}  // namespace futr
