// futr's tokenizer against the Hugging Face `tokenizers` package on the whole
// WikiText-2 test text (read as bytes, CRLF line endings kept) and on a list
// of edge cases (contractions, digits, whitespace kinds, CJK, emoji, combining
// marks, special tokens).
//
// scripts/tokenizer_reference.py (run with $FUTR_PYTHON, else python3) builds a
// tokenizers.Tokenizer from the default model's GGUF vocabulary and merges,
// saves it as tokenizer.json and writes the reference ids. futr then encodes
// the same text from (a) the GGUF metadata via load_tokenizer_spec() and (b)
// that tokenizer.json via tokenizer_spec_from_hf_json(); the ids must be
// identical, token for token, and decode(encode(text)) must give the text back
// byte for byte. Variants: "smollm" (SmolLM2's own pre-tokenizer), "llama3"
// (the same vocabulary with Llama-3's pattern and ignore_merges) and "qwen2"
// (Qwen2's pattern: one digit a piece).
// The SmolLM2 chat template rendered by jinja2 is compared with ChatTemplate.
//
// Skips (with the reason) when the model or text is missing or the script's
// Python packages (tokenizers, gguf, numpy) are not installed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/loader.h"
#include "tokenizer/chat.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kMaxEncodeSeconds = 10.0;  // the whole text; ~0.05 s measured (Release)

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Edge cases tokenized one by one by both sides (valid UTF-8 only: the
// reference takes Python str).
std::vector<std::string> edge_cases() {
  return {
      "Hello world",
      "  leading and trailing   ",
      "tabs\t\tand\nnewlines\r\n\r\n  \r\n",
      "I'm you're they've he'll she'd it's DON'T I'M We'Re",
      "1234567 12 3.14159 0x1F 2023-11-29 1,000,000",
      "\xD9\xA1\xD9\xA2\xD9\xA3 \xC2\xB2\xC2\xB3 \xE2\x85\xAB \xC2\xBD",  // ١٢٣ ²³ Ⅻ ½
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
      "\xE4\xB8\xAD\xE6\x96\x87\xEF\xBC\x8C\xE6\xA0\x87\xE7\x82\xB9\xE3\x80\x82 "
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D"
      "\xF0\x9F\x91\xA7 \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7!",
      "combining e\xCC\x81 a\xCC\x88 Z\xCC\xA4\xCD\x94\xCD\xA7 "
      "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D"
      "\xE0\xA4\xA6\xE0\xA5\x80 \xE0\xB8\xA0\xE0\xB8\xB2\xE0\xB8\xA9\xE0\xB8\xB2",
      "nbsp\xC2\xA0here nel\xC2\x85there ideo\xE3\x80\x80space zw\xE2\x80\x8Bsp thin\xE2\x80\x89sp",
      "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|<|im_end|>> <|endoftext|>x<repo_name>",
      "$$$ !!! ... ??? --- ((())) \"quoted\" 'single'",
      std::string(300, 'x') + " " + std::string(100, ' ') + "y",
      "it'S it'\xC5\xBF \xE2\x84\xAA'LL \xC2\x85\xC2\x85x\r\r\n\x0B\x0C end",  // long s, Kelvin sign, NEL,
                                                                               // VT, FF
      "caf\xC3\xA9 na\xC3\xAFve \xC3\x85ngstr\xC3\xB6m \xC3\x9F \xEF\xAC\x81",
  };
}

struct Reference {
  fs::path dir;             // script output for this variant
  std::string skip_reason;  // non-empty: skip
};

// Runs scripts/tokenizer_reference.py for one variant into a fresh directory.
Reference run_reference(const std::string& variant, const fs::path& model, const fs::path& text) {
  const char* env = std::getenv("FUTR_PYTHON");
  const std::string python = env && *env ? env : "python3";
  const fs::path out =
      fs::temp_directory_path() / ("futr_tokref_" + std::to_string(getpid()) + "_" + variant);
  fs::remove_all(out);
  fs::create_directories(out);
  std::ofstream(out / "cases.json") << json(edge_cases()).dump();
  auto q = [](const std::string& s) { return "'" + s + "'"; };
  const std::string cmd = q(python) + " " +
                          q(std::string(FUTR_SOURCE_DIR) + "/scripts/tokenizer_reference.py") + " --gguf " +
                          q(model.string()) + " --text " + q(text.string()) + " --out " + q(out.string()) +
                          " --variants " + variant + " --cases " + q((out / "cases.json").string()) + " > " +
                          q((out / "stdout.txt").string()) + " 2> " + q((out / "stderr.txt").string());
  const int status = std::system(cmd.c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 3 || rc == 127)
    return {out, "reference script cannot run with " + python + " (rc " + std::to_string(rc) +
                     "): " + read_bytes(out / "stderr.txt")};
  EXPECT_EQ(rc, 0) << cmd << "\n" << read_bytes(out / "stderr.txt");
  return {out, rc == 0 ? "" : "reference script failed"};
}

std::vector<int32_t> read_ids(const fs::path& p) {
  const std::string b = read_bytes(p);
  std::vector<int32_t> ids(b.size() / 4);
  std::memcpy(ids.data(), b.data(), ids.size() * 4);  // int32 little-endian (x86)
  return ids;
}

// Empty if equal; else the first differing position with context: ids and
// pieces around it, and the text near it.
std::string first_difference(const Tokenizer& tok, const std::vector<int32_t>& got,
                             const std::vector<int32_t>& want, const std::string& text) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return {};
  size_t byte = 0;
  for (size_t k = 0; k < i; ++k) byte += tok.piece(got[k]).size();
  std::ostringstream os;
  os << "first difference at token " << i << " of " << want.size() << " (futr has " << got.size()
     << "), text byte " << byte << "\n";
  auto show = [&](const char* who, const std::vector<int32_t>& ids) {
    os << "  " << who << ":";
    for (size_t k = i >= 4 ? i - 4 : 0; k < std::min(ids.size(), i + 6); ++k)
      os << (k == i ? " >>" : " ") << ids[k] << "'" << test::escape(tok.piece(ids[k])) << "'";
    os << "\n";
  };
  show("futr", got);
  show("HF  ", want);
  const size_t from = byte >= 60 ? byte - 60 : 0;
  os << "  text: \"" << test::escape(text.substr(from, byte - from)) << "|"
     << test::escape(text.substr(byte, 60)) << "\"";
  return os.str();
}

struct Encoded {
  std::vector<int32_t> ids;
  double seconds;  // building the tokenizer and encoding the text
};

Encoded encode_timed(const TokenizerSpec& spec, const std::string& text) {
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok(spec);
  Encoded e{tok.encode(text, false, true), 0.0};
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

void compare_variant(const std::string& variant) {
  const fs::path model = FUTR_DEFAULT_MODEL, text_path = FUTR_DEFAULT_TEXT;
  if (!fs::exists(model))
    GTEST_SKIP() << "default model " << model << " is missing: run scripts/fetch-model.sh";
  if (!fs::exists(text_path)) GTEST_SKIP() << "reference text " << text_path << " is missing";
  const Reference ref = run_reference(variant, model, text_path);
  if (!ref.skip_reason.empty()) {
    if (::testing::Test::HasFailure()) return;  // the script failed: keep its output for a look
    fs::remove_all(ref.dir);
    GTEST_SKIP() << ref.skip_reason;
  }
  const std::string text = read_bytes(text_path);
  const std::vector<int32_t> want = read_ids(ref.dir / variant / "ids.i32");
  const json info = json::parse(read_bytes(ref.dir / variant / "info.json"));
  ASSERT_EQ(want.size(), info["tokens"].get<size_t>());
  EXPECT_TRUE(info["decode_round_trip"].get<bool>()) << "HF's own decode(encode(x)) != x";

  // (a) from the GGUF metadata; llama3 swaps the pre-tokenizer of the same vocabulary.
  TokenizerSpec gguf_spec = load_tokenizer_spec(model);
  ASSERT_EQ(gguf_spec.pre, "smollm");
  if (variant != "smollm") gguf_spec.pre = variant;
  // (b) from the tokenizer.json that HF tokenizers saved.
  const TokenizerSpec hf_spec = tokenizer_spec_from_hf_json(ref.dir / variant);
  EXPECT_EQ(hf_spec.pre, variant);
  EXPECT_EQ(hf_spec.tokens, gguf_spec.tokens);
  EXPECT_EQ(hf_spec.merges, gguf_spec.merges);
  EXPECT_EQ(hf_spec.token_types, gguf_spec.token_types);
  EXPECT_EQ(hf_spec.bos, gguf_spec.bos);
  EXPECT_EQ(hf_spec.eos, gguf_spec.eos);
  EXPECT_EQ(hf_spec.chat_template, gguf_spec.chat_template);

  const std::vector<std::string> cases = edge_cases();
  const json case_ids = json::parse(read_bytes(ref.dir / variant / "cases.json"));
  ASSERT_EQ(case_ids.size(), cases.size());
  for (const auto& [name, spec] : {std::pair<const char*, const TokenizerSpec&>{"gguf", gguf_spec},
                                   std::pair<const char*, const TokenizerSpec&>{"tokenizer.json", hf_spec}}) {
    const Encoded got = encode_timed(spec, text);
    const Tokenizer tok(spec);
    const std::string diff = first_difference(tok, got.ids, want, text);
    EXPECT_TRUE(diff.empty()) << variant << " from " << name << ": " << diff;
    EXPECT_TRUE(tok.decode(got.ids) == text)
        << variant << " from " << name << ": decode(encode(text)) != text";
    EXPECT_LT(got.seconds, kMaxEncodeSeconds);
    std::printf(
        "[ reference ] %s from %s: %zu tokens of %zu bytes, identical: %s; futr %.3f s "
        "(build + encode), HF tokenizers %.3f s (encode)\n",
        variant.c_str(), name, got.ids.size(), text.size(), diff.empty() ? "yes" : "NO", got.seconds,
        info["encode_seconds"].get<double>());
    ::testing::Test::RecordProperty(variant + "_" + name + "_tokens", std::to_string(got.ids.size()));
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto ids = tok.encode(cases[c], false, true);
      const auto ref_ids = case_ids[c].get<std::vector<int32_t>>();
      const std::string d = first_difference(tok, ids, ref_ids, cases[c]);
      EXPECT_TRUE(d.empty()) << variant << " from " << name << ", case " << c << " \""
                             << test::escape(cases[c].substr(0, 60)) << "\": " << d;
      EXPECT_EQ(tok.decode(ids), cases[c]);
    }
  }

  // The chat template, rendered by jinja2 (when the script had it).
  const json chat = json::parse(read_bytes(ref.dir / "chat.json"));
  if (chat.contains("chats")) {
    const ChatTemplate t = ChatTemplate::for_tokenizer(Tokenizer(gguf_spec));
    for (const json& c : chat["chats"]) {
      std::vector<ChatMessage> msgs;
      for (const json& m : c["messages"])
        msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      EXPECT_EQ(t.apply(msgs), c["prompt"].get<std::string>());
    }
    std::printf("[ reference ] chat template: %zu conversations identical to jinja2's rendering\n",
                chat["chats"].size());
  } else {
    std::printf("[ reference ] chat template not compared: %s\n",
                chat.value("skipped", std::string()).c_str());
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(ref.dir);
  else std::printf("[ reference ] reference files kept in %s\n", ref.dir.c_str());
}

TEST(TokenizerReference, SmolLM2WikiText) { compare_variant("smollm"); }
TEST(TokenizerReference, Llama3PatternWikiText) { compare_variant("llama3"); }
TEST(TokenizerReference, Qwen2PatternWikiText) { compare_variant("qwen2"); }

}  // namespace
}  // namespace futr
