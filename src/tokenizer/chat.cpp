// Chat template recognition and rendering; the formats are described in chat.h.
#include "tokenizer/chat.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kStartHeader = "<|start_header_id|>";
constexpr std::string_view kEndHeader = "<|end_header_id|>";
constexpr std::string_view kEotId = "<|eot_id|>";

// A Jinja string literal's body with its escapes resolved (\n, \t, \\, \', \").
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Skips a newline at s[p] (a real one or the escape \n); npos if there is none.
size_t skip_newline(std::string_view s, size_t p) {
  if (s.substr(p, 1) == "\n") return p + 1;
  if (s.substr(p, 2) == "\\n") return p + 2;
  return std::string_view::npos;
}

// ChatML: the literal system prompt a template inserts, if any: the text
// between "<|im_start|>system\n" and "<|im_end|>" in the source, provided it is
// plain text (no quotes, braces or concatenation, i.e. not an expression).
// Linear in the source: the next "<|im_end|>" and the next forbidden character
// are searched again only once the marker has passed them (a template of many
// markers without an end would otherwise be scanned to its end per marker).
std::string chatml_default_system(std::string_view src) {
  const std::string marker = std::string(kImStart) + "system";
  const char* forbidden = "'\"{}+";
  size_t end = 0, bad = 0;  // the next kImEnd / forbidden character at or after them (npos: none)
  bool end_known = false, bad_known = false;
  for (size_t pos = src.find(marker); pos != std::string_view::npos; pos = src.find(marker, pos + 1)) {
    const size_t b = skip_newline(src, pos + marker.size());
    if (b == std::string_view::npos) continue;
    if (!end_known || (end != std::string_view::npos && end < b)) {
      end = src.find(kImEnd, b);
      end_known = true;
    }
    if (end == std::string_view::npos) break;  // no later marker has an end either
    if (!bad_known || (bad != std::string_view::npos && bad < b)) {
      bad = src.find_first_of(forbidden, b);
      bad_known = true;
    }
    if (end == b || (bad != std::string_view::npos && bad < end)) continue;
    return unescape(src.substr(b, end - b));
  }
  return {};
}

// The text of a literal that starts right after `prefix` and ends at a quote
// or a newline (real or escaped); `def` if the prefix is absent.
std::string literal_after(std::string_view src, std::string_view prefix, std::string def) {
  const size_t p = src.find(prefix);
  if (p == std::string_view::npos) return def;
  size_t e = p + prefix.size();
  while (e < src.size() && src[e] != '"' && src[e] != '\'' && src[e] != '\n' && src[e] != '\\') ++e;
  return std::string(src.substr(p + prefix.size(), e - p - prefix.size()));
}

// Python's str.strip() over ASCII whitespace (Jinja's `trim` filter).
std::string trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

}  // namespace

ChatTemplate ChatTemplate::from_source(std::string_view src, std::string bos_text, std::string eos_text) {
  FUTR_CHECK(!src.empty(),
             "chat: the model has no chat template; run without --chat (the prompt is then "
             "used as is)");
  ChatTemplate t;
  t.bos_text_ = std::move(bos_text);
  t.eos_text_ = std::move(eos_text);
  t.trim_ = src.find("| trim") != std::string_view::npos || src.find("|trim") != std::string_view::npos;
  if (src.find(kStartHeader) != std::string_view::npos && src.find(kEotId) != std::string_view::npos) {
    t.family_ = ChatFamily::Llama3;
    t.emits_bos_ = src.find("bos_token") != std::string_view::npos;
    t.dated_system_ = src.find("Cutting Knowledge Date") != std::string_view::npos;
    t.knowledge_date_ = literal_after(src, "Cutting Knowledge Date: ", "December 2023");
    t.today_date_ = literal_after(src, "date_string = \"", "26 Jul 2024");
    return t;
  }
  if (src.find(kImStart) != std::string_view::npos && src.find(kImEnd) != std::string_view::npos) {
    t.family_ = ChatFamily::ChatML;
    t.emits_bos_ = false;  // NOTE: ChatML templates do not start with BOS
    t.default_system_ = chatml_default_system(src);
    return t;
  }
  if (src.find("[INST]") != std::string_view::npos && src.find("[/INST]") != std::string_view::npos) {
    // NOTE: both [INST] templates write bos_token themselves.
    t.family_ = src.find("<<SYS>>") != std::string_view::npos ? ChatFamily::Llama2 : ChatFamily::Mistral;
    t.emits_bos_ = true;
    return t;
  }
  std::string head(src.substr(0, 120));
  for (char& c : head)
    if (c == '\n') c = ' ';
  fail(
      "chat: the model's chat template is not recognised (supported: ChatML with <|im_start|>, Llama-3 with "
      "<|start_header_id|>, Llama-2 and Mistral with [INST]); template begins: \"{}{}\". Run without --chat "
      "to use the prompt as is",
      head, src.size() > head.size() ? "..." : "");
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tok) {
  return from_source(tok.chat_template(), tok.bos() >= 0 ? tok.token_text(tok.bos()) : std::string(),
                     tok.eos() >= 0 ? tok.token_text(tok.eos()) : std::string());
}

const char* ChatTemplate::family_name() const {
  switch (family_) {
    case ChatFamily::ChatML: return "chatml";
    case ChatFamily::Llama3: return "llama3";
    case ChatFamily::Llama2: return "llama2";
    case ChatFamily::Mistral: return "mistral";
  }
  return "?";
}

std::vector<ChatTemplate::Segment> ChatTemplate::segments(std::span<const ChatMessage> messages,
                                                          bool add_generation_prompt) const {
  auto content = [&](const ChatMessage& m) { return trim_ ? trim(m.content) : m.content; };
  std::vector<Segment> out;
  auto tmpl = [&](std::string s) { out.push_back({std::move(s), true}); };
  auto user = [&](std::string s) { out.push_back({std::move(s), false}); };
  if (family_ == ChatFamily::ChatML) {
    const bool has_system = !messages.empty() && messages[0].role == "system";
    if (!has_system && !default_system_.empty())
      tmpl(std::string(kImStart) + "system\n" + default_system_ + std::string(kImEnd) + "\n");
    for (const ChatMessage& m : messages) {
      tmpl(std::string(kImStart));
      user(m.role);
      tmpl("\n");
      user(content(m));
      tmpl(std::string(kImEnd) + "\n");
    }
    if (add_generation_prompt) tmpl(std::string(kImStart) + "assistant\n");
    return out;
  }
  if (family_ == ChatFamily::Llama2) {
    // content.strip() of "<<SYS>>\n{system}\n<</SYS>>\n\n{content}" for the first user
    // message: the system text as written, the content stripped at its end only
    // (the whole is stripped, and it starts with "<<SYS>>").
    const bool has_system = !messages.empty() && messages[0].role == "system";
    for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if (m.role == "user") {
        tmpl(bos_text_ + "[INST] ");
        if (has_system && i == 1) {
          const std::string c = trim("x" + m.content).substr(1);  // right-stripped
          tmpl("<<SYS>>\n");
          user(messages[0].content);
          tmpl(c.empty() ? "\n<</SYS>>" : "\n<</SYS>>\n\n");
          user(c);
        } else {
          user(trim(m.content));
        }
        tmpl(" [/INST]");
      } else if (m.role == "assistant") {
        tmpl(" ");
        user(trim(m.content));
        tmpl(" " + eos_text_);
      } else {
        fail("chat: the Llama-2 template has no role '{}' (system, user, assistant)", m.role.substr(0, 40));
      }
    }
    return out;
  }
  if (family_ == ChatFamily::Mistral) {
    tmpl(bos_text_);
    for (const ChatMessage& m : messages) {
      if (m.role == "user") {
        tmpl("[INST] ");
        user(m.content);
        tmpl(" [/INST]");
      } else if (m.role == "assistant") {
        user(m.content);
        tmpl(eos_text_);
      } else {
        fail(
            "chat: the Mistral template has only the roles user and assistant (got '{}'); a system message "
            "is "
            "not part of it",
            m.role.substr(0, 40));
      }
    }
    return out;
  }
  // Llama-3
  auto header = [&](const std::string& role, bool from_user) {
    tmpl(std::string(kStartHeader));
    if (from_user) user(role);
    else tmpl(role);
    tmpl(std::string(kEndHeader) + "\n\n");
  };
  if (emits_bos_) tmpl(bos_text_);
  size_t first = 0;
  if (dated_system_) {
    const bool has_system = !messages.empty() && messages[0].role == "system";
    header("system", false);
    tmpl("Cutting Knowledge Date: " + knowledge_date_ + "\nToday Date: " + today_date_ + "\n\n");
    if (has_system) user(trim(messages[0].content));
    tmpl(std::string(kEotId));
    first = has_system ? 1 : 0;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    header(messages[i].role, true);
    user(content(messages[i]));
    tmpl(std::string(kEotId));
  }
  if (add_generation_prompt) header("assistant", false);
  return out;
}

std::string ChatTemplate::apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  for (const Segment& s : segments(messages, add_generation_prompt)) out += s.text;
  return out;
}

std::vector<int32_t> ChatTemplate::encode_stretches(const Tokenizer& tok,
                                                    std::span<const Segment> segs) const {
  std::vector<int32_t> ids;
  std::string text;  // the stretch since the last control token
  auto flush = [&] {
    const std::vector<int32_t> part = tok.encode_content(text);
    ids.insert(ids.end(), part.begin(), part.end());
    text.clear();
  };
  for (const Segment& s : segs) {
    if (!s.from_template) {
      text += s.text;
      continue;
    }
    size_t cursor = 0;
    for (int32_t id : tok.encode(s.text, false, /*parse_special=*/true)) {
      if (!tok.is_control(id)) continue;
      const std::string& p = tok.piece(id);
      const size_t at = s.text.find(p, cursor);
      FUTR_CHECK(at != std::string::npos, "chat template: control token {} not found in its text", id);
      text += s.text.substr(cursor, at - cursor);
      flush();
      ids.push_back(id);
      cursor = at + p.size();
    }
    text += s.text.substr(cursor);
  }
  flush();
  return ids;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tok, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt) const {
  if (inst_family()) return encode_stretches(tok, segments(messages, add_generation_prompt));
  std::vector<int32_t> ids;
  if (!emits_bos_ && tok.add_bos()) ids.push_back(tok.bos());
  for (const Segment& s : segments(messages, add_generation_prompt)) {
    // NOTE: every segment boundary is a pre-tokenizer boundary (a special token
    // or a newline next to it), so the ids equal those of the whole prompt
    // whenever the contents hold no special-token text.
    const std::vector<int32_t> part =
        s.from_template ? tok.encode(s.text, false, /*parse_special=*/true) : tok.encode_content(s.text);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::optional<std::vector<int32_t>> ChatTemplate::encode_after(const Tokenizer& tok,
                                                               std::span<const ChatMessage> messages,
                                                               size_t prefix_chars,
                                                               bool add_generation_prompt) const {
  std::vector<int32_t> ids;
  size_t at = 0;  // characters of the segments before `s`
  if (inst_family()) {
    // From a segment boundary on, encoded as a prompt of its own: right where the
    // prefix ends at a control token (the turns of these templates start after
    // </s> or with <s>); elsewhere the caller encodes the whole prompt.
    const std::vector<Segment> all = segments(messages, add_generation_prompt);
    size_t i = 0;
    for (; i < all.size() && at < prefix_chars; ++i) at += all[i].text.size();
    if (at != prefix_chars) return std::nullopt;
    const std::string before = apply(messages, add_generation_prompt).substr(0, prefix_chars);
    const bool after_control = prefix_chars == 0 || (!eos_text_.empty() && before.ends_with(eos_text_)) ||
                               (!bos_text_.empty() && before.ends_with(bos_text_));
    if (!after_control || (i < all.size() && !all[i].from_template)) return std::nullopt;
    return encode_stretches(tok, std::span<const Segment>(all).subspan(i));
  }
  for (const Segment& s : segments(messages, add_generation_prompt)) {
    if (at >= prefix_chars) {
      const std::vector<int32_t> part =
          s.from_template ? tok.encode(s.text, false, /*parse_special=*/true) : tok.encode_content(s.text);
      ids.insert(ids.end(), part.begin(), part.end());
    } else if (at + s.text.size() > prefix_chars) {
      return std::nullopt;  // the prefix ends inside this segment
    }
    at += s.text.size();
  }
  if (prefix_chars > at) return std::nullopt;
  return ids;
}

}  // namespace futr
