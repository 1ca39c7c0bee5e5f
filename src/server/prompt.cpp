// Completion and chat prompts as token ids (see prompt.h).
#include "server/prompt.h"

#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace futr::server {

namespace {

// Python's str.strip() over ASCII whitespace: what chat.cpp applies to
// contents for templates that use Jinja's `trim`.
std::string_view strip(std::string_view s) {
  const char* ws = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A piece of the prompt: a control token (or chat marker) of the template, or text.
struct Piece {
  int32_t special = -1;  // control token / chat marker id, or -1 for text
  std::string text;
};

// Appends the template text `t`, split at its control tokens and chat markers.
void add_template_text(const Tokenizer& tok, std::string_view t, std::vector<Piece>& out) {
  auto add_text = [&](std::string_view s) {
    if (s.empty()) return;
    if (out.empty() || out.back().special >= 0) out.push_back({});
    out.back().text.append(s);
  };
  size_t cursor = 0;
  for (int32_t id : tok.encode(t, /*add_bos=*/false, /*parse_special=*/true)) {
    if (!tok.is_control(id) && !tok.is_chat_marker(id)) continue;
    const std::string& p = tok.piece(id);
    const size_t at = t.find(p, cursor);
    FUTR_CHECK(at != std::string_view::npos, "chat template: control token {} not found in its text", id);
    add_text(t.substr(cursor, at - cursor));
    out.push_back({id, {}});
    cursor = at + p.size();
  }
  add_text(t.substr(cursor));
}

}  // namespace

std::vector<int32_t> encode_completion_prompt(const Tokenizer& tok, std::string_view text) {
  return tok.encode(text, tok.add_bos(), /*parse_special=*/false);
}

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl,
                                        std::span<const ChatMessage> messages) {
  // 1. The template's text around the contents, from a rendering with sentinels.
  std::vector<ChatMessage> marked(messages.begin(), messages.end());
  std::vector<std::string> sentinels;
  for (size_t i = 0; i < marked.size(); ++i) {
    sentinels.push_back(fmt::format("\x1d{}\x1d", i));  // no whitespace: not trimmed
    marked[i].content = sentinels.back();
  }
  const std::string s = tmpl.apply(marked, /*add_generation_prompt=*/true);
  std::vector<std::string_view> parts;  // T0 .. Tn
  // Each sentinel exactly once, in order: found in order, and the rendering
  // holds no other \x1d (linear; searching the rest of the rendering for a
  // second copy of each would be quadratic in the number of messages).
  size_t marks = 0;
  for (char c : s) marks += c == '\x1d';
  FUTR_CHECK(marks == 2 * sentinels.size(), "chat template: a message content is not rendered exactly once");
  size_t cursor = 0;
  for (const auto& m : sentinels) {
    const size_t at = s.find(m, cursor);
    FUTR_CHECK(at != std::string::npos, "chat template: a message content is not rendered exactly once");
    parts.push_back(std::string_view(s).substr(cursor, at - cursor));
    cursor = at + m.size();
  }
  parts.push_back(std::string_view(s).substr(cursor));

  // 2. The contents as the template renders them (as written, or stripped).
  const std::string r = tmpl.apply(messages, /*add_generation_prompt=*/true);
  std::vector<Piece> pieces;
  size_t off = 0;
  auto expect = [&](std::string_view t) {
    FUTR_CHECK(std::string_view(r).substr(off, t.size()) == t,
               "chat template: its text differs between two renderings");
    off += t.size();
  };
  expect(parts[0]);
  add_template_text(tok, parts[0], pieces);
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string_view next = parts[i + 1];
    std::string_view content;
    bool found = false;
    for (std::string_view c : {std::string_view(messages[i].content), strip(messages[i].content)}) {
      if (std::string_view(r).substr(off, c.size()) == c &&
          std::string_view(r).substr(off + c.size(), next.size()) == next) {
        content = c;
        found = true;
        break;
      }
    }
    FUTR_CHECK(found, "chat template: message {} is not rendered as its content", i);
    off += content.size();
    if (!content.empty()) {
      if (pieces.empty() || pieces.back().special >= 0) pieces.push_back({});
      pieces.back().text.append(content);
    }
    expect(next);
    add_template_text(tok, next, pieces);
  }
  FUTR_CHECK(off == r.size(), "chat template: unexpected text after the last message");

  // 3. Control tokens as ids, every stretch of text with special tokens off.
  std::vector<int32_t> ids;
  if (!tmpl.emits_bos() && tok.add_bos()) ids.push_back(tok.bos());
  for (const auto& p : pieces) {
    if (p.special >= 0) {
      ids.push_back(p.special);
    } else {
      const auto t = tok.encode_content(p.text);
      ids.insert(ids.end(), t.begin(), t.end());
    }
  }
  return ids;
}

}  // namespace futr::server
