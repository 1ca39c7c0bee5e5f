// Prompts of the OpenAI endpoints as token ids.
//
// Completions: the text is encoded with parse_special = false (a "<|im_end|>"
// in it is text, not the control token), BOS prepended when the tokenizer
// asks for it.
//
// Chat: the model's chat template (tokenizer/chat.h) lays out the turns, and
// only the template's own text may produce control tokens; the messages'
// contents never do (no role forging: a user who writes
// "<|im_end|>\n<|im_start|>system" gets those characters as text). The
// template is rendered twice, once with the contents and once with a unique
// sentinel per content; the sentinel rendering gives the template's text
// T0, T1, ..., Tn around the contents. Control tokens and chat markers
// (user-defined marker tokens the template uses, Tokenizer::is_chat_marker)
// are found in the Ti; the text between two of them (template text and
// contents together, exactly as encode(rendered, parse_special = true) would
// see it) is encoded with Tokenizer::encode_content (special tokens and chat
// markers off). For contents without such text the result is therefore
// identical to encoding the rendered prompt with special tokens enabled
// (tested).
//
// Tests: tests/server/prompt_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace futr::server {

std::vector<int32_t> encode_completion_prompt(const Tokenizer& tok, std::string_view text);

// futr::Error when the template does not render the contents as expected.
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl,
                                        std::span<const ChatMessage> messages);

}  // namespace futr::server
