// Chat prompts for instruct models (`futr generate --chat`).
//
// A model's chat template is Jinja source; futr does not interpret Jinja.
// It recognises the template's family from marker strings and renders that
// family's format itself:
//
//   ChatML (SmolLM2-Instruct, Qwen, ...), marker <|im_start|>:
//     [<|im_start|>system\n{default system}<|im_end|>\n]   if the template inserts a
//                                                          literal default system prompt and
//                                                          the first message is not "system"
//     <|im_start|>{role}\n{content}<|im_end|>\n            per message
//     <|im_start|>assistant\n                              generation prompt
//
//   Llama-3 (3.0 .. 3.3), marker <|start_header_id|>:
//     {bos}                                                if the template uses bos_token
//     <|start_header_id|>system<|end_header_id|>\n\n       Llama-3.1+ (the template mentions
//       Cutting Knowledge Date: December 2023\n            "Cutting Knowledge Date"): always,
//       Today Date: 26 Jul 2024\n\n{system}<|eot_id|>      with the template's fixed dates
//     <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>   per message
//     <|start_header_id|>assistant<|end_header_id|>\n\n   generation prompt
//   Contents are trimmed when the template applies `| trim` (all Llama-3 templates do).
//
//   Llama-2 chat, markers [INST] and <<SYS>> (Llama-2-chat):
//     {bos}[INST] {content} [/INST]                        per user message, content stripped; the
//                                                          first one is <<SYS>>\n{system}\n<</SYS>>\n\n
//                                                          {content} when there is a system message
//      {content} {eos}                                     per assistant message, stripped
//
//   Mistral instruct, marker [INST] without <<SYS>> (Mistral-7B-Instruct v0.1-v0.3):
//     {bos}                                                once
//     [INST] {content} [/INST]                             per user message
//     {content}{eos}                                       per assistant message
//   A system message is refused (the template has no system role).
//
// The [INST] families render no generation prompt: the answer follows [/INST].
// They belong to SentencePiece tokenizers, whose encoding depends on where a
// stretch of text starts (a space goes before the text after each special
// token), so their prompt is encoded the way `futr serve` encodes any
// template: the template's control tokens as ids, every stretch of text
// between them (template text and contents together) with special tokens off.
//
// Anything else (or no template) is a futr::Error that suggests running
// without --chat. Tools, images and multi-part contents are not supported.
//
// encode() tokenizes the prompt so that user text can never become a control
// token: the template's own text is encoded with special tokens parsed, every
// role and content as plain text with Tokenizer::encode_content (a user who
// types "<|im_end|>\n<|im_start|>assistant" gets those characters, not a
// forged turn, also where the markers are user-defined, not control, tokens). It adds BOS when
// !emits_bos() && tokenizer.add_bos(). apply() is the same prompt as text
// (for display and tests); do not encode it with parse_special = true.
// encode_after() is encode() of the prompt's text past a prefix, for a
// conversation that grew (`futr chat` keeps the ids of the shorter one in its
// KV cache): the same rule, from the first segment at or after the prefix.
// Tests: tests/tokenizer/chat_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace futr {

class Tokenizer;

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant" (passed through as written)
  std::string content;  // plain text
};

enum class ChatFamily { ChatML, Llama3, Llama2, Mistral };

class ChatTemplate {
 public:
  // Recognises `source` (Jinja). bos_text / eos_text: the BOS and EOS tokens'
  // texts, used where the template emits bos_token / eos_token. futr::Error if
  // empty or not recognised.
  static ChatTemplate from_source(std::string_view source, std::string bos_text,
                                  std::string eos_text = "</s>");
  // The template of a tokenizer (spec.chat_template) with its BOS text.
  static ChatTemplate for_tokenizer(const Tokenizer& tok);

  ChatFamily family() const { return family_; }
  const char* family_name() const;
  // The system prompt inserted when the conversation has none ("" = none).
  const std::string& default_system() const { return default_system_; }
  // Whether apply() puts the BOS text at the start of the prompt.
  bool emits_bos() const { return emits_bos_; }

  // The prompt for `messages`, ending with the assistant's header when
  // add_generation_prompt is true.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;
  // The prompt's token ids: template text with special tokens, roles and
  // contents without (see above); BOS first when the tokenizer adds one and
  // the template does not.
  std::vector<int32_t> encode(const Tokenizer& tok, std::span<const ChatMessage> messages,
                              bool add_generation_prompt = true) const;
  // The ids of the prompt's text after its first `prefix_chars` characters
  // (apply()'s text; no BOS), encoded as encode() does. nullopt when the
  // offset falls inside a segment (a role, a content or a stretch of template
  // text) or past the end: the caller encodes the whole prompt instead.
  std::optional<std::vector<int32_t>> encode_after(const Tokenizer& tok,
                                                   std::span<const ChatMessage> messages, size_t prefix_chars,
                                                   bool add_generation_prompt = true) const;

 private:
  struct Segment {
    std::string text;
    bool from_template;  // true: the template's own text (special tokens parsed); false: a role or content
  };
  std::vector<Segment> segments(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  // [INST] families: control tokens of the template text as ids, the text between them with special tokens
  // off.
  std::vector<int32_t> encode_stretches(const Tokenizer& tok, std::span<const Segment> segs) const;
  bool inst_family() const { return family_ == ChatFamily::Llama2 || family_ == ChatFamily::Mistral; }

  ChatFamily family_ = ChatFamily::ChatML;
  std::string default_system_;  // ChatML: inserted before a conversation without a system message
  std::string bos_text_;        // text of the BOS token
  std::string eos_text_;        // text of the EOS token ([INST] families)
  bool emits_bos_ = false;      // template writes bos_token
  bool trim_ = false;           // template trims contents (`| trim`)
  bool dated_system_ = false;   // Llama-3.1+: system block with knowledge/today dates, always
  std::string knowledge_date_;  // "December 2023"
  std::string today_date_;      // "26 Jul 2024"
};

}  // namespace futr
