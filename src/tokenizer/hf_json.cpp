// Hugging Face tokenizer.json / tokenizer_config.json -> TokenizerSpec.
// See hf_json.h for what is accepted; every rejection names the file and what
// it found there, so a user knows which part of the tokenizer is unsupported.
#include "tokenizer/hf_json.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io.h"
#include "core/json.h"
#include "core/text.h"
#include "tokenizer/patterns.h"

namespace futr {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kMaxVocab = int64_t{1} << 24;  // sanity bound on token ids (16 M)
constexpr size_t kMaxDescribe = 160;             // characters of a JSON value in messages

constexpr uint64_t kMaxFileBytes = 64ull << 20;  // tokenizer.json of Llama 3: 9 MB

// Text from the file in a message: clipped and escaped (core/text.h).
std::string clip(std::string_view s) { return printable(s, kMaxDescribe); }

// A compact rendering of a normalizer / pre-tokenizer / decoder tree for error
// messages: "Sequence[Digits(individual_digits=false), ByteLevel(...)]".
std::string describe(const json& j) {
  if (j.is_null()) return "none";
  if (!j.is_object()) return clip(j.dump());
  std::string type = j.contains("type") && j["type"].is_string() ? clip(j["type"].get<std::string>()) : "?";
  for (const char* list_key : {"pretokenizers", "normalizers", "decoders", "processors"}) {
    if (j.contains(list_key) && j[list_key].is_array()) {
      std::string s = type + "[";
      for (size_t i = 0; i < j[list_key].size(); ++i) s += (i ? ", " : "") + describe(j[list_key][i]);
      return s + "]";
    }
  }
  std::string s = type + "(";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "type") continue;
    s += (first ? "" : ", ") + clip(it.key()) + "=" + clip(it.value().dump());
    first = false;
  }
  return s + ")";
}

// j[key] as a string; "" when j is not an object or the value is absent or
// not a string (json::value() would throw on a hostile file's other types).
std::string string_field(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return {};
  return j[key].get<std::string>();
}

bool is_type(const json& j, const char* type) {
  return j.is_object() && j.contains("type") && j["type"] == type;
}

// j[key] as a bool; `def` when absent or null.
bool flag(const json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  return j[key].is_boolean() ? j[key].get<bool>() : def;
}

// "<0xNN>" (two upper-case hex digits): a SentencePiece byte token.
bool is_byte_token(const std::string& t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

// ByteLevel(add_prefix_space=false, use_regex=want_regex)?
bool is_byte_level(const json& j, bool want_regex) {
  return is_type(j, "ByteLevel") && !flag(j, "add_prefix_space", true) &&
         flag(j, "use_regex", true) == want_regex;
}

// How a SentencePiece-style tokenizer.json (BPE with byte_fallback) writes
// spaces: transformers' Llama converter either normalizes (legacy:
// Prepend("\u2581") + Replace(" ", "\u2581"), no pre-tokenizer: the dummy
// prefix on every stretch between special tokens) or pre-tokenizes (Metaspace
// "\u2581": prepend_scheme "always" on every stretch, "first" only where the
// text starts, "never" none; and never where a stretch already starts with a
// space). An error names anything else.
struct SpmSpaces {
  bool prefix = true;         // TokenizerSpec::add_space_prefix
  bool first_only = false;    // TokenizerSpec::space_prefix_first_only
  bool unless_space = false;  // TokenizerSpec::space_prefix_unless_space
};
SpmSpaces recognise_spm_spaces(const json& root, const fs::path& file) {
  static const std::string kSpace = "\u2581";
  const json& norm = root.contains("normalizer") ? root["normalizer"] : json();
  const json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json();
  auto is_replace_space = [&](const json& r) {
    return is_type(r, "Replace") && r.contains("pattern") && r["pattern"].is_object() &&
           r["pattern"].contains("String") && r["pattern"]["String"] == " " &&
           string_field(r, "content") == kSpace;
  };
  auto is_metaspace = [&](const json& m) {
    return is_type(m, "Metaspace") && string_field(m, "replacement") == kSpace;
  };
  SpmSpaces sp;
  if (is_type(norm, "Sequence") && norm.contains("normalizers") && norm["normalizers"].is_array()) {
    const json& n = norm["normalizers"];
    const bool prepend = n.size() == 2 && is_type(n[0], "Prepend") &&
                         string_field(n[0], "prepend") == kSpace && is_replace_space(n[1]);
    const bool replace = n.size() == 1 && is_replace_space(n[0]);
    FUTR_CHECK((prepend || replace) && pre.is_null(),
               "{}: SentencePiece normalizer {} with pre_tokenizer {} is not supported (supported: "
               "Prepend(\u2581) + Replace(' ', \u2581) without a pre-tokenizer, or Metaspace)",
               file.string(), describe(norm), describe(pre));
    sp.prefix = prepend;
    return sp;
  }
  FUTR_CHECK(norm.is_null(),
             "{}: SentencePiece normalizer {} is not supported (supported: Prepend(\u2581) + "
             "Replace(' ', \u2581), or none with a Metaspace pre-tokenizer)",
             file.string(), describe(norm));
  FUTR_CHECK(is_metaspace(pre),
             "{}: SentencePiece pre_tokenizer {} is not supported (supported: Metaspace(\u2581), "
             "or none after a Prepend + Replace normalizer)",
             file.string(), describe(pre));
  // NOTE: older files say add_prefix_space (true: "always") instead of prepend_scheme.
  std::string scheme = string_field(pre, "prepend_scheme");
  if (scheme.empty()) scheme = flag(pre, "add_prefix_space", true) ? "always" : "never";
  FUTR_CHECK(scheme == "always" || scheme == "first" || scheme == "never",
             "{}: Metaspace prepend_scheme '{}' is not supported (always, first, never)", file.string(),
             clip(scheme));
  sp.prefix = scheme != "never";
  sp.first_only = scheme == "first";
  sp.unless_space = true;  // Metaspace prepends only to text that does not start with its replacement
  return sp;
}

// The pre_tokenizer structure -> spec.pre, or an error naming what was found.
std::string recognise_pre(const json& pre, const fs::path& file) {
  if (is_byte_level(pre, true)) return "gpt2";
  if (is_type(pre, "Sequence") && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() == 2) {
    const json& a = pre["pretokenizers"][0];
    const json& b = pre["pretokenizers"][1];
    if (is_type(a, "Digits") && flag(a, "individual_digits", false) && is_byte_level(b, true))
      return "smollm";
    for (const auto& [pattern, name] :
         {std::pair{pretok::kLlama3Pattern, "llama3"}, std::pair{pretok::kQwen2Pattern, "qwen2"}})
      if (is_type(a, "Split") && a.contains("pattern") && a["pattern"].is_object() &&
          a["pattern"].contains("Regex") && a["pattern"]["Regex"] == pattern &&
          string_field(a, "behavior") == "Isolated" && !flag(a, "invert", false) && is_byte_level(b, false))
        return name;
  }
  fail(
      "{}: unsupported pre_tokenizer {}; supported: ByteLevel(add_prefix_space=false) (gpt2), "
      "Sequence[Digits(individual_digits=true), ByteLevel] (smollm), "
      "Sequence[Split(Llama-3 or Qwen2 regex, Isolated), ByteLevel(use_regex=false)] (llama3, qwen2)",
      file.string(), describe(pre));
}

// tokenizer_config.json token fields: "text", {"content": "text", ...} or null.
std::string token_field(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return {};
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return {};
}

// A token id in [0, limit): `limit` is the model's vocabulary when known.
int32_t json_id(const json& v, const fs::path& file, const std::string& what, int64_t limit = kMaxVocab) {
  FUTR_CHECK(v.is_number_integer(), "{}: {} is not an integer id: {}", file.string(), what, clip(v.dump()));
  FUTR_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX),
             "{}: {} id {} is out of range [0, {})", file.string(), what, v.get<uint64_t>(), limit);
  const int64_t id = v.get<int64_t>();
  FUTR_CHECK(id >= 0 && id < limit, "{}: {} id {} is out of range [0, {}){}", file.string(), what, id, limit,
             limit == kMaxVocab ? "" : " (the model's vocab_size)");
  return int32_t(id);
}

// The TemplateProcessing of a post_processor (directly or inside a Sequence), or null.
const json* template_processing(const json& pp) {
  if (is_type(pp, "TemplateProcessing")) return &pp;
  if (is_type(pp, "Sequence") && pp.contains("processors") && pp["processors"].is_array())
    for (const json& p : pp["processors"])
      if (is_type(p, "TemplateProcessing")) return &p;
  return nullptr;
}

}  // namespace

TokenizerSpec tokenizer_spec_from_hf_json(const fs::path& dir, int64_t max_vocab) {
  HfTokenizerTexts t;
  t.dir = dir;
  const fs::path file = dir / "tokenizer.json";
  FUTR_CHECK(optional_regular_file(file, "the tokenizer"), "{}: no tokenizer.json there", dir.string());
  t.tokenizer = read_file_limited(file, kMaxFileBytes, "a tokenizer file");
  if (optional_regular_file(dir / "tokenizer_config.json", "the tokenizer configuration"))
    t.config = read_file_limited(dir / "tokenizer_config.json", kMaxFileBytes, "a tokenizer file");
  if (optional_regular_file(dir / "generation_config.json", "the generation configuration"))
    t.generation = read_file_limited(dir / "generation_config.json", kMaxFileBytes, "a tokenizer file");
  return tokenizer_spec_from_hf_texts(t, max_vocab);
}

namespace {

TokenizerSpec spec_from_texts(const HfTokenizerTexts& texts, int64_t max_vocab) {
  const fs::path& dir = texts.dir;
  const fs::path file = dir / "tokenizer.json";
  const int64_t id_limit = max_vocab > 0 ? std::min(max_vocab, kMaxVocab) : kMaxVocab;
  const json root = parse_json_document(texts.tokenizer, file.string());
  FUTR_CHECK(root.is_object() && root.contains("model") && root["model"].is_object(),
             "{}: no \"model\" object (not a tokenizers file?)", file.string());
  const json& model = root["model"];

  // --- model: byte-level BPE, or BPE with byte_fallback (SentencePiece's, as
  // transformers converts Llama-2, TinyLlama and Mistral tokenizers) ---
  const std::string mtype = model.contains("type") && model["type"].is_string()
                                ? model["type"].get<std::string>()
                                : std::string("?");
  FUTR_CHECK(mtype == "BPE",
             "{}: model type {} is not supported (only BPE: byte-level, or SentencePiece-style "
             "with byte_fallback)",
             file.string(), clip(mtype));
  const bool spm = flag(model, "byte_fallback", false);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    FUTR_CHECK(!model.contains(k) || model[k].is_null() || model[k] == "", "{}: BPE {}={} is not supported",
               file.string(), k, clip(model[k].dump()));
  FUTR_CHECK(!model.contains("dropout") || model["dropout"].is_null() || model["dropout"] == 0,
             "{}: BPE dropout is not supported", file.string());
  const json& dec = root.contains("decoder") ? root["decoder"] : json();
  TokenizerSpec spec;
  if (spm) {
    const SpmSpaces sp = recognise_spm_spaces(root, file);
    // The decoder only undoes what the model did (\u2581 to space, <0xNN> to
    // bytes, the dummy prefix stripped); futr's SentencePiece decoding does
    // the same, so any decoder made of these steps is accepted.
    auto spm_decoder = [](const json& d) {
      return is_type(d, "Replace") || is_type(d, "ByteFallback") || is_type(d, "Fuse") ||
             is_type(d, "Strip") || is_type(d, "Metaspace");
    };
    bool dec_ok = dec.is_null() || spm_decoder(dec);
    if (is_type(dec, "Sequence") && dec.contains("decoders") && dec["decoders"].is_array()) {
      dec_ok = true;
      for (const json& d : dec["decoders"]) dec_ok = dec_ok && spm_decoder(d);
    }
    FUTR_CHECK(dec_ok,
               "{}: SentencePiece decoder {} is not supported (Replace, ByteFallback, Fuse, Strip, "
               "Metaspace)",
               file.string(), describe(dec));
    spec.model = "llama";
    spec.pre = "default";
    spec.add_space_prefix = sp.prefix;
    spec.space_prefix_first_only = sp.first_only;
    spec.space_prefix_unless_space = sp.unless_space;
  } else {
    FUTR_CHECK(!root.contains("normalizer") || root["normalizer"].is_null(),
               "{}: normalizer {} is not supported (byte-level BPE tokenizers have none)", file.string(),
               describe(root["normalizer"]));
    FUTR_CHECK(dec.is_null() || is_type(dec, "ByteLevel"),
               "{}: decoder {} is not supported (expected ByteLevel)", file.string(), describe(dec));
    spec.model = "gpt2";
    spec.pre = recognise_pre(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json(), file);
    spec.ignore_merges = flag(model, "ignore_merges", false);
  }

  // --- vocab and added tokens -> tokens[id], token_types[id] ---
  FUTR_CHECK(model.contains("vocab") && model["vocab"].is_object(), "{}: model.vocab is not an object",
             file.string());
  const json& vocab = model["vocab"];
  const json added =
      root.contains("added_tokens") && root["added_tokens"].is_array() ? root["added_tokens"] : json::array();
  int64_t n = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    n = std::max<int64_t>(n, json_id(it.value(), file, "vocab entry '" + clip(it.key()) + "'", id_limit) + 1);
  for (const json& a : added) {
    FUTR_CHECK(a.is_object() && a.contains("id") && a.contains("content") && a["content"].is_string(),
               "{}: malformed added_tokens entry {}", file.string(), clip(a.dump()));
    n = std::max<int64_t>(n, json_id(a["id"], file, "added token", id_limit) + 1);
  }
  FUTR_CHECK(n > 0, "{}: empty vocabulary", file.string());
  // Ids may leave holes (they become "unused" tokens), but not so many that the
  // tables below would be out of proportion to the file (one huge id).
  const int64_t entries = int64_t(vocab.size() + added.size());
  FUTR_CHECK(n <= 2 * entries + 256, "{}: the largest token id is {}, but only {} tokens are defined",
             file.string(), n - 1, entries);
  std::vector<bool> have(size_t(n), false);
  spec.tokens.assign(size_t(n), std::string());
  spec.token_types.assign(size_t(n), 5);  // ids no entry names stay "unused"
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const size_t id = size_t(it.value().get<int64_t>());
    FUTR_CHECK(!have[id], "{}: id {} appears twice in model.vocab ('{}' and '{}')", file.string(), id,
               clip(spec.tokens[id]), clip(it.key()));
    have[id] = true;
    spec.tokens[id] = it.key();
    spec.token_types[id] = spm && is_byte_token(it.key()) ? 6 : 1;
  }
  for (const json& a : added) {
    const size_t id = size_t(a["id"].get<int64_t>());
    const std::string content = a["content"].get<std::string>();
    FUTR_CHECK(!content.empty(), "{}: added token {} has empty content", file.string(), id);
    FUTR_CHECK(!have[id] || spec.tokens[id] == content,
               "{}: added token '{}' has id {}, which the vocab "
               "gives to '{}'",
               file.string(), clip(content), id, clip(spec.tokens[id]));
    for (const char* k : {"lstrip", "rstrip", "single_word"})
      FUTR_CHECK(!flag(a, k, false), "{}: added token '{}' has {}=true, which is not supported",
                 file.string(), clip(content), k);
    have[id] = true;
    spec.tokens[id] = content;
    spec.token_types[id] = flag(a, "special", false) ? 3 : 4;
  }
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(size_t(n));
  for (size_t i = 0; i < size_t(n); ++i)
    if (have[i]) id_of.emplace(spec.tokens[i], int32_t(i));
  auto lookup = [&](const std::string& text, const fs::path& where, const char* what) {
    auto it = id_of.find(text);
    FUTR_CHECK(it != id_of.end(), "{}: {} '{}' is not in the vocabulary", where.string(), what, clip(text));
    return it->second;
  };

  // --- merges: "a b" strings or [a, b] pairs ---
  FUTR_CHECK(model.contains("merges") && model["merges"].is_array(), "{}: model.merges is not an array",
             file.string());
  spec.merges.reserve(model["merges"].size());
  for (const json& m : model["merges"]) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      FUTR_CHECK(
          sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
          "{}: merge '{}' is not two tokens separated by one space", file.string(), clip(s));
      spec.merges.push_back(s);
    } else {
      FUTR_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                 "{}: merge {} is neither \"a b\" nor [a, b]", file.string(), clip(m.dump()));
      const std::string a = m[0].get<std::string>(), b = m[1].get<std::string>();
      // NOTE: TokenizerSpec keeps merges as "a b"; a byte-level token never has a
      // literal space (the alphabet maps it to U+0120), so this is no restriction.
      FUTR_CHECK(
          !a.empty() && !b.empty() && a.find(' ') == std::string::npos && b.find(' ') == std::string::npos,
          "{}: merge {} has an empty token or one with a space", file.string(), clip(m.dump()));
      spec.merges.push_back(a + " " + b);
    }
  }
  if (model.contains("unk_token") && model["unk_token"].is_string())
    spec.unk = lookup(model["unk_token"].get<std::string>(), file, "model.unk_token");
  if (spm) {
    // SentencePiece merges by the score of the merged piece: the rank of the
    // first merge that makes it (earlier higher), as the converter ordered
    // the merges by those scores; pieces no merge makes rank below all.
    spec.scores.assign(size_t(n), -float(spec.merges.size() + 1));
    for (size_t r = spec.merges.size(); r-- > 0;) {
      const std::string& m = spec.merges[r];
      const size_t sp = m.find(' ');
      const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
      lookup(a, file, "merge token");
      lookup(b, file, "merge token");
      auto it = id_of.find(a + b);
      FUTR_CHECK(it != id_of.end(), "{}: merge '{}' makes '{}', which is not in the vocabulary",
                 file.string(), clip(m), clip(a + b));
      spec.scores[size_t(it->second)] = -float(r);
    }
    spec.merges.clear();
    if (spec.unk >= 0) spec.token_types[size_t(spec.unk)] = 2;
  }

  // --- tokenizer_config.json: special token strings, add_bos, chat template ---
  std::optional<bool> add_bos;
  const fs::path cfg_file = dir / "tokenizer_config.json";
  if (texts.config) {
    const json cfg = parse_json_document(*texts.config, cfg_file.string());
    FUTR_CHECK(cfg.is_object(), "{}: not a JSON object", cfg_file.string());
    if (auto s = token_field(cfg, "bos_token"); !s.empty()) spec.bos = lookup(s, cfg_file, "bos_token");
    if (auto s = token_field(cfg, "eos_token"); !s.empty()) spec.eos = lookup(s, cfg_file, "eos_token");
    if (auto s = token_field(cfg, "unk_token"); !s.empty()) spec.unk = lookup(s, cfg_file, "unk_token");
    if (auto s = token_field(cfg, "pad_token"); !s.empty()) spec.pad = lookup(s, cfg_file, "pad_token");
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      add_bos = cfg["add_bos_token"].get<bool>();
    if (cfg.contains("chat_template")) {
      const json& t = cfg["chat_template"];
      if (t.is_string()) {
        spec.chat_template = t.get<std::string>();
      } else if (t.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        for (const json& e : t)
          if (string_field(e, "name") == "default" && e.contains("template") && e["template"].is_string())
            spec.chat_template = e["template"].get<std::string>();
      }
    }
  }

  // --- post_processor: a template that starts with a special token adds BOS ---
  if (root.contains("post_processor")) {
    if (const json* tp = template_processing(root["post_processor"])) {
      const json& single = tp->contains("single") ? (*tp)["single"] : json();
      if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
        const std::string first = string_field(single[0]["SpecialToken"], "id");
        auto it = id_of.find(first);
        if (spec.bos < 0 && it != id_of.end()) spec.bos = it->second;
        if (!add_bos && it != id_of.end() && it->second == spec.bos) add_bos = true;
      }
    }
  }
  spec.add_bos = add_bos.value_or(false) && spec.bos >= 0;

  // --- generation_config.json: further end-of-generation ids ---
  const fs::path gen_file = dir / "generation_config.json";
  if (texts.generation) {
    const json gen = parse_json_document(*texts.generation, gen_file.string());
    std::vector<int32_t> eos_ids;
    if (gen.is_object() && gen.contains("eos_token_id")) {
      const json& e = gen["eos_token_id"];
      if (e.is_array()) {
        for (const json& v : e) eos_ids.push_back(json_id(v, gen_file, "eos_token_id"));
      } else if (!e.is_null()) {
        eos_ids.push_back(json_id(e, gen_file, "eos_token_id"));
      }
    }
    // De-duplicated in linear time (a set of the ids seen; the list is as
    // long as the file makes it).
    std::unordered_set<int32_t> seen(spec.extra_eos.begin(), spec.extra_eos.end());
    for (int32_t id : eos_ids) {
      FUTR_CHECK(id < n, "{}: eos_token_id {} is outside the vocabulary ({} tokens)", gen_file.string(), id,
                 n);
      if (spec.eos < 0) spec.eos = id;
      if (id != spec.eos && seen.insert(id).second) spec.extra_eos.push_back(id);
    }
  }
  return spec;
}

}  // namespace

TokenizerSpec tokenizer_spec_from_hf_texts(const HfTokenizerTexts& texts, int64_t max_vocab) {
  // The checks above name what they find; a JSON value of a type no check
  // anticipated (a hostile file) is still an error naming the file, not a crash.
  try {
    return spec_from_texts(texts, max_vocab);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: a value of an unexpected JSON type: {}", (texts.dir / "tokenizer.json").string(), e.what());
  }
}

}  // namespace futr
