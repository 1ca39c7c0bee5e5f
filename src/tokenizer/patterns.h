// The pre-tokenizer regular expressions, in the source form the Hugging Face
// `tokenizers` files use (Oniguruma syntax, where \s is Unicode White_Space).
//
// hf_json.cpp compares a tokenizer.json's Split pattern with these strings to
// recognise a pre-tokenizer; tokenizer.cpp translates them for PCRE2 (see
// pcre2_pattern() there) and compiles them once per Tokenizer.
#pragma once

namespace futr::pretok {

// GPT-2's pattern: what the ByteLevel pre-tokenizer applies when use_regex is true.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama-3's pattern (tokenizer.json: Split, behavior Isolated, then ByteLevel
// without regex): case-insensitive contractions, at most three digits a piece.
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2's pattern (tokenizer.json: Split, Isolated, then ByteLevel without
// regex): Llama-3's with one digit a piece.
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace futr::pretok
