// Reading a Hugging Face tokenizer directory into a TokenizerSpec.
//
//   dir/tokenizer.json         (required) model BPE: vocab, merges, added_tokens;
//                              normalizer, pre_tokenizer, decoder, post_processor
//   dir/tokenizer_config.json  (optional) bos/eos/unk/pad token strings,
//                              add_bos_token, chat_template
//   dir/generation_config.json (optional) eos_token_id (int or list) -> extra_eos
//
// Only byte-level BPE is supported, with one of three pre-tokenizer structures:
//   ByteLevel(add_prefix_space=false, use_regex=true)                  -> "gpt2"
//   Sequence[Digits(individual_digits=true), ByteLevel(.., use_regex=true)] -> "smollm"
//   Sequence[Split(Llama-3 regex, Isolated), ByteLevel(.., use_regex=false)] -> "llama3"
// Anything else (another pre-tokenizer, a normalizer, byte fallback, word
// prefixes/suffixes) is a futr::Error naming the file and what was found.
//
// Added tokens: special=true -> type 3 (control), special=false -> type 4
// (user-defined); lstrip/rstrip/single_word are not supported (error).
//
// Limits: each file at most 64 MiB and nested at most 64 levels (core/json.h);
// token ids below max_vocab (the model's vocabulary when known, else 2^24),
// and at most 2 x (number of entries) + 256, so a single huge id cannot make
// the reader allocate before the vocabulary is checked. A path that exists but
// is not a regular file (a directory, FIFO, device) is an error, not "absent".
//
// Tested by tests/tokenizer/tokenizer_reference_test.cpp (a tokenizer.json
// written by the `tokenizers` package itself) and tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "tokenizer/spec.h"

namespace futr {

// Reads dir/tokenizer.json (+ tokenizer_config.json, generation_config.json if
// present); `max_vocab` > 0 bounds every token id (the config's vocab_size).
TokenizerSpec tokenizer_spec_from_hf_json(const std::filesystem::path& dir, int64_t max_vocab = 0);

// The same from the files' texts (tests and the fuzz target fuzz/tokenizer_json_fuzz.cpp);
// `dir` only names the files in messages.
struct HfTokenizerTexts {
  std::filesystem::path dir;
  std::string tokenizer;                  // tokenizer.json
  std::optional<std::string> config;      // tokenizer_config.json, if present
  std::optional<std::string> generation;  // generation_config.json, if present
};
TokenizerSpec tokenizer_spec_from_hf_texts(const HfTokenizerTexts& texts, int64_t max_vocab = 0);

}  // namespace futr
