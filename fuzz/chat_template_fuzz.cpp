// libFuzzer target: chat templates (tokenizer/chat.h) rendered and encoded
// with arbitrary messages, through both prompt builders: ChatTemplate::encode()
// (futr generate --chat, futr chat) and server::encode_chat_prompt()
// (futr serve's /v1/chat/completions).
//
// Input: fields separated by the byte 0x1e (record separator):
//   template source 0x1e options 0x1e role 0x1e content 0x1e role 0x1e content ...
// options[0] bits: 0 markers are user-defined (type 4) tokens instead of
// control (type 3) tokens (the chat-marker path), 1 the "llama3"
// pre-tokenizer instead of "smollm", 2 the tokenizer has a BOS token and adds
// it, 3 a ChatML template (SmolLM2's) replaces the input's source, 4 a
// Llama-3.1 template does. The tokenizer is synthetic: one token per byte, a
// few merges, the ChatML and Llama-3 markers and "<tool>" (built once per
// option set, never from the input: building one per input was 30x slower).
//
// Besides "only futr::Error may come out", every accepted rendering must hold:
//  - decode(encode(messages)) is apply(messages) (no byte lost or added);
//  - roles and contents never produce a control token or chat marker: the
//    special ids of the prompt are those of the same messages with every '<'
//    in roles and contents replaced by '(' (no special text left in them);
//  - encode_chat_prompt() (roles as the server allows them) decodes to
//    apply() and has the same special ids as encode(), and refuses only a
//    template whose own text holds its sentinel byte;
//  - encode_after() past the text of the conversation without its last
//    message decodes to the rest of the whole conversation's text.
// A violation calls __builtin_trap() (a crash libFuzzer reports and keeps).
// Seeds: fuzz/corpus/chat_template. See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "server/prompt.h"
#include "tokenizer/chat.h"
#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace futr;

constexpr char kSep = '\x1e';

const char* kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' "
    "}}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const char* kLlama31 =
    "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = \"\" %}{%- endif %}"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December "
    "2023\\n\" }}"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}{{- system_message }}{{- \"<|eot_id|>\" }}"
    "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// The synthetic tokenizer of one option set, built once. Its own chat
// template uses every marker, so user-defined markers are chat markers (as
// for any template that uses them; a template that does not cannot emit
// them either); the template under test is recognised from the input.
const Tokenizer& tokenizer(unsigned opts) {
  static std::unique_ptr<Tokenizer> cache[8];
  std::unique_ptr<Tokenizer>& c = cache[opts & 7];
  if (!c) {
    const int32_t type = (opts & 1) ? 4 : 3;
    TokenizerSpec spec =
        test::alphabet_spec({{"\n", "\n"}, {" ", "t"}, {"h", "e"}, {" t", "he"}, {"u", "s"}, {"e", "r"}},
                            (opts & 2) ? "llama3" : "smollm",
                            {{"<|im_start|>", type},
                             {"<|im_end|>", type},
                             {"<|begin_of_text|>", 3},
                             {"<|start_header_id|>", type},
                             {"<|end_header_id|>", type},
                             {"<|eot_id|>", type},
                             {"<tool>", 4}});
    spec.chat_template = std::string(kSmolLM2) + kLlama31;
    if (opts & 4) {
      for (size_t i = 0; i < spec.tokens.size(); ++i)
        if (spec.tokens[i] == "<|begin_of_text|>") spec.bos = int32_t(i);
      spec.add_bos = true;
    }
    c = std::make_unique<Tokenizer>(spec);
  }
  return *c;
}

bool special(const Tokenizer& tok, int32_t id) { return tok.is_control(id) || tok.is_chat_marker(id); }

std::vector<int32_t> specials_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  for (int32_t id : ids)
    if (special(tok, id)) out.push_back(id);
  return out;
}

// The prompt's text as decode() gives it: the BOS that encode adds, then apply().
std::string expected_text(const Tokenizer& tok, const ChatTemplate& t, std::span<const ChatMessage> m,
                          bool gen) {
  std::string s;
  if (!t.emits_bos() && tok.add_bos()) s = tok.token_text(tok.bos());
  return s + t.apply(m, gen);
}

std::vector<ChatMessage> defused(std::span<const ChatMessage> m) {
  std::vector<ChatMessage> out(m.begin(), m.end());
  for (ChatMessage& x : out)
    for (std::string* s : {&x.role, &x.content})
      for (char& c : *s)
        if (c == '<') c = '(';
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> f(1);
  for (size_t i = 0; i < size; ++i) {
    if (char(data[i]) == kSep) f.emplace_back();
    else f.back() += char(data[i]);
  }
  const unsigned opts = f.size() > 1 && !f[1].empty() ? uint8_t(f[1][0]) : 0u;
  const std::string src = (opts & 8) ? kSmolLM2 : (opts & 16) ? kLlama31 : f[0];
  std::vector<ChatMessage> msgs;
  for (size_t i = 2; i < f.size(); i += 2)
    msgs.push_back({f[i], i + 1 < f.size() ? f[i + 1] : std::string()});

  const Tokenizer& tok = tokenizer(opts);
  std::optional<ChatTemplate> t;
  try {
    t = ChatTemplate::from_source(src, tok.bos() >= 0 ? tok.token_text(tok.bos()) : std::string());
  } catch (const Error&) {
    return 0;  // not a recognised template: refused, as every command refuses it
  }
  try {
    const std::vector<int32_t> ids = t->encode(tok, msgs, true);
    check(tok.decode(ids) == expected_text(tok, *t, msgs, true));
    check(specials_of(tok, ids) == specials_of(tok, t->encode(tok, defused(msgs), true)));
    const std::vector<int32_t> no_gen = t->encode(tok, msgs, false);  // futr chat's history
    check(tok.decode(no_gen) == expected_text(tok, *t, msgs, false));

    // The server's builder, with the roles it accepts.
    std::vector<ChatMessage> served = msgs;
    static const char* kRoles[3] = {"system", "user", "assistant"};
    for (ChatMessage& m : served)
      if (m.role != kRoles[0] && m.role != kRoles[1] && m.role != kRoles[2])
        m.role = kRoles[m.role.empty() ? 1 : uint8_t(m.role[0]) % 3];
    bool served_roles = false;  // a role was replaced
    for (size_t i = 0; i < msgs.size(); ++i) served_roles |= served[i].role != msgs[i].role;
    if (!served.empty()) {
      std::optional<std::vector<int32_t>> sids;
      try {
        sids = server::encode_chat_prompt(tok, *t, served);
      } catch (const Error&) {
        // Only for a template whose own text holds the builder's sentinel
        // byte (0x1d), e.g. in its default system prompt: refused for every
        // request. Any other refusal would be a 400 for a valid request.
        std::vector<ChatMessage> bare = served;
        for (ChatMessage& m : bare) m.content.clear();
        check(t->apply(bare, true).find('\x1d') != std::string::npos);
      }
      if (sids) {
        check(tok.decode(*sids) == expected_text(tok, *t, served, true));
        check(specials_of(tok, *sids) == specials_of(tok, served_roles ? t->encode(tok, served, true) : ids));
      }
    }

    // futr chat: the conversation without its last message, then with it.
    if (msgs.size() >= 2) {
      const std::span<const ChatMessage> shorter(msgs.data(), msgs.size() - 1);
      const std::string held = t->apply(shorter, true);
      const std::string whole = t->apply(msgs, true);
      const auto rest = t->encode_after(tok, msgs, held.size(), true);
      if (rest) check(tok.decode(*rest) == whole.substr(held.size()));
    }
  } catch (const Error&) {}
  return 0;
}
