// futr::Tokenizer: byte-level BPE (GPT-2 family: spec.model "gpt2") or
// SentencePiece BPE (Llama-2, TinyLlama, Mistral: spec.model "llama") built
// from a TokenizerSpec.
//
// SentencePiece (tokenizer.cpp spm_encode(), llama.cpp's llm_tokenizer_spm):
// special tokens are matched as below; each stretch of text between them has
// its spaces replaced by U+2581 (▁), with one more in front at the start and
// after each special token (add_space_prefix), and is merged pair by pair,
// the pair whose concatenation is the normal token of highest score first
// (leftmost on ties); a character left without a token becomes its bytes'
// <0xNN> tokens (byte fallback, <unk> where one is missing). No
// pre-tokenizer, no merge list, no byte-level alphabet. The steps below are
// those of byte-level BPE.
//
// encode(text):
//   1. special tokens: control tokens and the unknown token (types 3 and 2,
//      only when parse_special) and user-defined tokens (type 4, always) are
//      found as whole strings,
//      leftmost-longest, and emitted as their ids; the text between them goes on;
//   2. pre-tokenizer (spec.pre; the GGUF names gpt-2, llama-bpe and llama-v3 are
//      accepted as aliases), compiled once with PCRE2 (UTF + UCP, JIT):
//        "gpt2"   the GPT-2 regex (patterns.h)
//        "smollm" every \p{N} character is its own piece, then the GPT-2 regex
//                 on each stretch between them (HF Sequence[Digits(individual),
//                 ByteLevel(use_regex)])
//        "llama3" the Llama-3 regex ((?i:'s|...), \p{N}{1,3}, ...)
//      \s is Unicode White_Space as in the Oniguruma patterns of HF tokenizers.
//      Bytes the regex cannot match (invalid UTF-8) become pieces of their own,
//      so no input byte is lost and nothing crashes;
//   3. BPE per piece: the piece's bytes start as the byte-level alphabet's
//      single-character tokens (GPT-2 bytes_to_unicode: printable Latin-1 bytes
//      map to themselves, the other 68 to U+0100..U+0143), then the adjacent
//      pair of lowest merge rank is merged (leftmost first) until none is left.
//      With ignore_merges a piece that is itself a token is emitted directly.
//      Results are cached per piece. A byte whose single-character token is not
//      in the vocabulary is dropped (what HF tokenizers does when unk_token is
//      null, and llama.cpp always does); SmolLM2 lacks 21 such bytes: six C0
//      controls, and lead bytes that valid UTF-8 never uses or uses only for
//      unassigned planes (C0 C1 F1 F2 F5..FF). A vocabulary without a token
//      for each of the 95 printable ASCII bytes is refused at construction.
//
// encode_content(text): as encode(text, false, false), without chat markers:
//   user-defined tokens that look like markers and that the chat template
//   uses (is_chat_marker) are not matched in chat message contents, so a
//   user cannot forge a turn where the markers are not control tokens.
//
// decode(ids): normal tokens map back through the alphabet to bytes; control
// and user-defined tokens are their text; invalid ids are a futr::Error.
// StreamDecoder turns ids into printable text one at a time, holding back an
// incomplete UTF-8 sequence until the token that completes it arrives.
//
// Tests: tests/tokenizer/tokenizer_test.cpp (units), tokenizer_reference_test.cpp
// (the whole wiki.test.raw against HF tokenizers). docs/TOKENIZER.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/spec.h"

namespace futr {

class Tokenizer {
 public:
  // Builds the tables and compiles the pre-tokenizer; futr::Error on an
  // unsupported model/pre-tokenizer, ids out of range or merges naming unknown tokens.
  explicit Tokenizer(const TokenizerSpec& spec);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Token ids of `text` (any bytes). add_bos prepends bos() (error if there is none).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // A chat message's content: encode(text, false, false), and chat markers
  // (is_chat_marker) are not matched either: their text stays text.
  std::vector<int32_t> encode_content(std::string_view text) const;
  // The pre-tokenizer's pieces of `text` (no special-token matching), views into text.
  std::vector<std::string_view> split_words(std::string_view text) const;
  // The bytes of the tokens, concatenated (may be invalid UTF-8 mid-stream).
  std::string decode(std::span<const int32_t> ids) const;
  // The bytes of one token; futr::Error for an invalid id.
  const std::string& piece(int32_t id) const;

  bool is_eog(int32_t id) const;      // eos or one of extra_eos
  bool is_control(int32_t id) const;  // a control (special) token such as <|im_end|>
  // A user-defined token with marker-like text (3..64 bytes in <...> or [...],
  // no whitespace) that the chat template uses, as ChatML fine-tunes ship
  // <|im_start|> / <|im_end|>: the template's text may produce it, chat
  // contents may not (encode_content()).
  bool is_chat_marker(int32_t id) const;
  int32_t vocab_size() const;
  int32_t bos() const;                       // -1: none
  int32_t eos() const;                       // -1: none
  bool add_bos() const;                      // whether prompts should get bos (spec.add_bos)
  const std::string& pre() const;            // the pre-tokenizer: "gpt2" | "smollm" | "llama3"
  const std::string& chat_template() const;  // spec.chat_template ("" if none); see chat.h
  // The vocabulary's text of a token (byte-level alphabet for normal tokens).
  const std::string& token_text(int32_t id) const;
  // The id whose vocabulary text is exactly `text`, if any.
  std::optional<int32_t> find_token(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Builds a Tokenizer from `spec` only to validate it (nothing when it has no
// tokens): readers call it before loading weights, so a broken tokenizer is
// reported first, as "<source>: tokenizer: ...".
void check_tokenizer_spec(const TokenizerSpec& spec, const std::string& source);

// Streaming detokenizer: push() returns the text that is safe to print now,
// always valid UTF-8. An incomplete sequence at the end is held back until the
// next token completes it; invalid bytes become U+FFFD. flush() returns what is
// held (as U+FFFD if it never completed) and resets. Control tokens (such as
// <|im_start|>) print nothing unless print_control is set, as in llama.cpp's
// default output; decode() always includes them.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool print_control = false)
      : tok_(&tok), print_control_(print_control) {}
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer* tok_;
  bool print_control_;   // print the text of control tokens
  std::string pending_;  // bytes of an incomplete UTF-8 sequence (at most 3)
};

// Appends to `out` the longest prefix of `in` that can be printed now: valid
// sequences as they are, invalid bytes as U+FFFD; returns how many bytes of
// `in` were consumed (the rest is an incomplete but so far valid sequence).
// With final = true everything is consumed.
size_t utf8_sanitize(std::string_view in, bool final, std::string& out);

}  // namespace futr
