// tokenizer_spec_from_hf_json on small tokenizer.json files written here: the
// three supported pre-tokenizer structures, both merge forms, added tokens,
// tokenizer_config.json / generation_config.json / post_processor, and a clear
// error (naming the file and what was found) for each unsupported structure.
// A tokenizer.json written by the `tokenizers` package itself is read in
// tokenizer_reference_test.cpp.
#include "tokenizer/hf_json.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/patterns.h"
#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::byte_char;
using test::error_of;

json byte_level_pre(bool use_regex = true) {
  return {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}
json smollm_pre() {
  return {{"type", "Sequence"},
          {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level_pre()}}};
}
json llama3_pre() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", pretok::kLlama3Pattern}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            byte_level_pre(false)}}};
}

// A tokenizer.json with the 256 byte tokens (id = byte), "he" "ll" "hell"
// "hello" from merges, and two added tokens: <|im_start|> (special) at 260 and
// <tool> (not special) at 261.
json base_tokenizer(json pre = smollm_pre()) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(uint8_t(b))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab["<|im_start|>"] = 260;
  auto added = [](int id, const char* content, bool special) {
    return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {added(260, "<|im_start|>", true), added(261, "<tool>", false)}},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor", nullptr},
          {"decoder",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", {"h e", "l l", "he ll", json::array({"hell", "o"})}}}}};
}

// A fresh directory per test, removed afterwards.
class HfJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("futr_hf_json_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  void write(const std::string& name, const json& j) { write(name, j.dump()); }
  // The error reading the directory with tokenizer.json = j; checks it names the file.
  std::string error_with(const json& j) {
    write("tokenizer.json", j);
    const std::string e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
    EXPECT_NE(e.find((dir_ / "tokenizer.json").string()), std::string::npos) << e;
    return e;
  }
  fs::path dir_;
};

TEST_F(HfJson, SmolLMStructure) {
  write("tokenizer.json", base_tokenizer());
  const TokenizerSpec s = tokenizer_spec_from_hf_json(dir_);
  EXPECT_EQ(s.model, "gpt2");
  EXPECT_EQ(s.pre, "smollm");
  ASSERT_EQ(s.tokens.size(), 262u);
  EXPECT_EQ(s.tokens[' '], "\xC4\xA0");
  EXPECT_EQ(s.tokens[259], "hello");
  EXPECT_EQ(s.tokens[261], "<tool>");
  EXPECT_EQ(s.token_types[259], 1);
  EXPECT_EQ(s.token_types[260], 3);  // special -> control
  EXPECT_EQ(s.token_types[261], 4);  // not special -> user-defined
  EXPECT_EQ(s.merges, (std::vector<std::string>{"h e", "l l", "he ll", "hell o"}));  // both merge forms
  EXPECT_EQ(s.ignore_merges, std::optional<bool>(false));
  EXPECT_EQ(s.bos, -1);
  EXPECT_FALSE(s.add_bos);
  // The spec builds a working tokenizer.
  const Tokenizer tok(s);
  EXPECT_EQ(tok.encode("hello<|im_start|>12<tool>", false, true),
            (std::vector<int32_t>{259, 260, '1', '2', 261}));
}

TEST_F(HfJson, Gpt2AndLlama3Structures) {
  write("tokenizer.json", base_tokenizer(byte_level_pre()));
  EXPECT_EQ(tokenizer_spec_from_hf_json(dir_).pre, "gpt2");
  json j = base_tokenizer(llama3_pre());
  j["model"]["ignore_merges"] = true;
  write("tokenizer.json", j);
  const TokenizerSpec s = tokenizer_spec_from_hf_json(dir_);
  EXPECT_EQ(s.pre, "llama3");
  EXPECT_EQ(s.ignore_merges, std::optional<bool>(true));
}

TEST_F(HfJson, ConfigFiles) {
  write("tokenizer.json", base_tokenizer());
  write("tokenizer_config.json",
        json{{"bos_token", "<|im_start|>"},
             {"eos_token", {{"content", "<tool>"}, {"lstrip", false}}},
             {"pad_token", nullptr},
             {"add_bos_token", true},
             {"chat_template",
              {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}});
  write("generation_config.json", json{{"eos_token_id", {261, 97, 98}}});
  const TokenizerSpec s = tokenizer_spec_from_hf_json(dir_);
  EXPECT_EQ(s.bos, 260);
  EXPECT_EQ(s.eos, 261);
  EXPECT_EQ(s.pad, -1);
  EXPECT_TRUE(s.add_bos);
  EXPECT_EQ(s.chat_template, "D");
  EXPECT_EQ(s.extra_eos, (std::vector<int32_t>{97, 98}));
}

TEST_F(HfJson, PostProcessorTemplateAddsBos) {
  json j = base_tokenizer();
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors",
                          {{{"type", "ByteLevel"}},
                           {{"type", "TemplateProcessing"},
                            {"single",
                             {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}}}};
  write("tokenizer.json", j);
  const TokenizerSpec s = tokenizer_spec_from_hf_json(dir_);
  EXPECT_EQ(s.bos, 260);
  EXPECT_TRUE(s.add_bos);
  // tokenizer_config.json's add_bos_token wins.
  write("tokenizer_config.json", json{{"add_bos_token", false}});
  EXPECT_FALSE(tokenizer_spec_from_hf_json(dir_).add_bos);
}

TEST_F(HfJson, ValuesOfTheWrongJsonTypeAreIgnoredOrRefusedNotThrown) {
  // Strings expected, other types given (what a fuzzer finds): a SpecialToken
  // whose id is a number or that is not an object, a chat template entry whose
  // name is a boolean. Each is skipped like an absent value, never an uncaught
  // nlohmann exception.
  for (const json& special : {json{{"id", 7}}, json("<|im_start|>"), json::array()}) {
    json j = base_tokenizer();
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", special}}}}};
    write("tokenizer.json", j);
    const TokenizerSpec s = tokenizer_spec_from_hf_json(dir_);
    EXPECT_FALSE(s.add_bos) << special.dump();
  }
  write("tokenizer.json", base_tokenizer());
  write("tokenizer_config.json", json{{"chat_template", {{{"name", true}, {"template", "T"}}, json(5)}}});
  EXPECT_EQ(tokenizer_spec_from_hf_json(dir_).chat_template, "");
}

// A SentencePiece tokenizer as transformers converts Llama-2 (legacy: a
// Prepend + Replace normalizer) and Mistral (a Metaspace pre-tokenizer,
// prepend_scheme "first"): model "llama", byte tokens typed as bytes, the
// merges' order as scores (the first merge making a piece ranks it), the
// dummy prefix as each form places it. (The whole WikiText-2 text against
// Hugging Face tokenizers: spm_reference_test.)
TEST_F(HfJson, SentencePieceStructures) {
  const std::string sp = "\u2581";
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int id = 259;
  for (const std::string& t : {sp, std::string("h"), std::string("i"), sp + "h", sp + "hi"}) vocab[t] = id++;
  auto added = [](int i, const char* content) {
    return json{{"id", i},         {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  const json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}};
  const json replace_back = {{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}};
  json j = json::object();
  j["added_tokens"] = json::array({added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")});
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers", json::array({json{{"type", "Prepend"}, {"prepend", sp}}, replace_space})}};
  j["pre_tokenizer"] = nullptr;
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders", json::array({replace_back, json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}},
                                json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  j["model"] = {{"type", "BPE"},    {"unk_token", "<unk>"},
                {"fuse_unk", true}, {"byte_fallback", true},
                {"vocab", vocab},   {"merges", json::array({sp + " h", sp + "h i"})}};
  write("tokenizer.json", j);
  const TokenizerSpec s = tokenizer_spec_from_hf_json(dir_);
  EXPECT_EQ(s.model, "llama");
  EXPECT_TRUE(s.add_space_prefix);
  EXPECT_FALSE(s.space_prefix_first_only);
  EXPECT_EQ(s.unk, 0);
  EXPECT_EQ(s.token_types[0], 2);
  EXPECT_EQ(s.token_types[3 + 0x41], 6);
  ASSERT_EQ(s.scores.size(), s.tokens.size());
  EXPECT_GT(s.scores[size_t(vocab[sp + "h"].get<int>())], s.scores[size_t(vocab[sp + "hi"].get<int>())]);
  EXPECT_TRUE(s.merges.empty());
  const Tokenizer legacy(s);
  EXPECT_EQ(legacy.encode("hi", false, true), std::vector<int32_t>{vocab[sp + "hi"].get<int32_t>()});
  EXPECT_EQ(legacy.encode("<s>hi", false, true), (std::vector<int32_t>{1, vocab[sp + "hi"].get<int32_t>()}));

  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "first"}, {"split", false}};
  write("tokenizer.json", j);
  const TokenizerSpec m = tokenizer_spec_from_hf_json(dir_);
  EXPECT_TRUE(m.space_prefix_first_only);
  const Tokenizer mistral(m);
  EXPECT_EQ(mistral.encode("hi", false, true), std::vector<int32_t>{vocab[sp + "hi"].get<int32_t>()});
  // After a special token no dummy prefix: "h" "i" without the space marker.
  EXPECT_EQ(mistral.encode("<s>hi", false, true),
            (std::vector<int32_t>{1, vocab["h"].get<int32_t>(), vocab["i"].get<int32_t>()}));

  j["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  write("tokenizer.json", j);
  EXPECT_THROW(tokenizer_spec_from_hf_json(dir_), Error);
}

TEST_F(HfJson, UnsupportedStructuresAreClearErrors) {
  auto expect_error = [&](json j, const std::string& needle) {
    const std::string e = error_with(j);
    EXPECT_NE(e.find(needle), std::string::npos) << "expected '" << needle << "' in: " << e;
  };
  json j = base_tokenizer();
  j["model"]["type"] = "WordPiece";
  expect_error(j, "model type WordPiece");
  j = base_tokenizer();
  j["model"]["byte_fallback"] = true;  // SentencePiece-style, but with byte-level pre-tokenization
  expect_error(j, "SentencePiece pre_tokenizer");
  j = base_tokenizer();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_error(j, "continuing_subword_prefix");
  j = base_tokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  expect_error(j, "normalizer NFC()");
  j = base_tokenizer({{"type", "Metaspace"}, {"replacement", "_"}});
  expect_error(j, "pre_tokenizer Metaspace(replacement=\"_\")");
  j = base_tokenizer(
      {{"type", "Sequence"},
       {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", false}}, byte_level_pre()}}});
  expect_error(j, "Sequence[Digits(individual_digits=false), ByteLevel(");
  json split = llama3_pre();
  split["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  expect_error(base_tokenizer(split), "Split(");
  split = llama3_pre();
  split["pretokenizers"][0]["behavior"] = true;  // a boolean where a string belongs (found by the fuzzer)
  expect_error(base_tokenizer(split), "Split(");
  json prefix = byte_level_pre();
  prefix["add_prefix_space"] = true;
  expect_error(base_tokenizer(prefix), "add_prefix_space=true");
  expect_error(base_tokenizer(nullptr), "unsupported pre_tokenizer none");
  j = base_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, "decoder WordPiece(");
  j = base_tokenizer();
  j["model"]["merges"].push_back("hello");
  expect_error(j, "merge 'hello'");
  j = base_tokenizer();
  j["model"]["vocab"]["dup"] = 5;
  expect_error(j, "id 5 appears twice");
  j = base_tokenizer();
  j["added_tokens"][1]["lstrip"] = true;
  expect_error(j, "lstrip=true");
  j = base_tokenizer();
  j["added_tokens"][0]["id"] = 100;  // the vocab has 'd' there
  expect_error(j, "added token '<|im_start|>' has id 100");
  j = base_tokenizer();
  j["model"]["vocab"]["x"] = -3;
  expect_error(j, "id -3 is out of range");
  j = base_tokenizer();
  j.erase("model");
  expect_error(j, "no \"model\" object");
}

TEST_F(HfJson, BrokenFilesAreClearErrors) {
  EXPECT_NE(error_of([&] { tokenizer_spec_from_hf_json(dir_); }).find("no tokenizer.json"),
            std::string::npos);
  EXPECT_NE(error_with(json()).find("no \"model\" object"), std::string::npos);  // valid JSON, not an object
  write("tokenizer.json", std::string("{\"model\": {\"type\": \"BPE\", "));
  EXPECT_NE(error_of([&] { tokenizer_spec_from_hf_json(dir_); }).find("not valid JSON"), std::string::npos);
  write("tokenizer.json", base_tokenizer());
  write("tokenizer_config.json", json{{"bos_token", "<nope>"}});
  const std::string e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
  EXPECT_NE(e.find("tokenizer_config.json: bos_token '<nope>' is not in the vocabulary"), std::string::npos)
      << e;
  write("tokenizer_config.json", json::object());
  write("generation_config.json", json{{"eos_token_id", 99999}});
  EXPECT_NE(error_of([&] { tokenizer_spec_from_hf_json(dir_); }).find("outside the vocabulary"),
            std::string::npos);
}

// Documents nested 100,000 deep are refused by the parser's
// depth limit, naming the file, in each of the three files.
TEST_F(HfJson, DeepNestingIsRefused) {
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    SCOPED_TRACE(f);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("tokenizer.json", std::string(f) == "tokenizer.json" ? deep : base_tokenizer().dump());
    if (std::string(f) != "tokenizer.json") write(f, deep);
    const std::string e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
    EXPECT_NE(e.find((dir_ / f).string() + ": JSON nested deeper than 64 levels"), std::string::npos) << e;
  }
}

// Class 3: one huge token id is refused before any table is allocated, against
// the model's vocabulary when known, else against the number of entries.
TEST_F(HfJson, HugeTokenIdIsRefusedBeforeAllocating) {
  json j = base_tokenizer();
  j["model"]["vocab"]["huge"] = 16000000;
  write("tokenizer.json", j);
  std::string e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
  EXPECT_NE(e.find("the largest token id is 16000000, but only 264 tokens are defined"), std::string::npos)
      << e;
  e = error_of([&] { tokenizer_spec_from_hf_json(dir_, 49152); });
  EXPECT_NE(e.find("id 16000000 is out of range [0, 49152) (the model's vocab_size)"), std::string::npos)
      << e;
  j["model"]["vocab"]["huge"] = uint64_t(1) << 63;
  write("tokenizer.json", j);
  e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
  EXPECT_NE(e.find("id 9223372036854775808 is out of range"), std::string::npos) << e;
}

// generation_config.json's end-of-generation list is de-duplicated in linear
// time (200,000 distinct ids, each listed twice: before, each id was looked up
// in the list so far, minutes), and duplicate JSON keys are refused naming
// the key.
TEST_F(HfJson, LongEosListsAndDuplicateKeys) {
  json j = base_tokenizer();
  const int n = 200000;
  for (int i = 262; i < n; ++i) j["model"]["vocab"][std::string("t").append(std::to_string(i))] = i;
  write("tokenizer.json", j);
  json ids = json::array();
  for (int rep = 0; rep < 2; ++rep)
    for (int i = 0; i < n; ++i) ids.push_back(i);
  write("generation_config.json", json{{"eos_token_id", ids}});
  const auto t0 = std::chrono::steady_clock::now();
  const TokenizerSpec spec = tokenizer_spec_from_hf_json(dir_);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(spec.eos, 0);
  EXPECT_EQ(spec.extra_eos.size(), size_t(n - 1));
  fs::remove(dir_ / "generation_config.json");
  write("tokenizer.json", std::string(R"({"version": "1.0", "version": "2.0"})"));
  const std::string e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
  EXPECT_NE(e.find("duplicate key 'version'"), std::string::npos) << e;
  EXPECT_NE(e.find((dir_ / "tokenizer.json").string()), std::string::npos) << e;
}

// Class 7: a tokenizer file that is a directory or a FIFO is reported as such
// (not as absent, and never opened).
TEST_F(HfJson, NonRegularFilesAreNamed) {
  fs::create_directories(dir_ / "tokenizer.json");
  std::string e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
  EXPECT_NE(e.find("tokenizer.json: is a directory, expected a regular file"), std::string::npos) << e;
  fs::remove_all(dir_ / "tokenizer.json");
  write("tokenizer.json", base_tokenizer());
  ASSERT_EQ(::mkfifo((dir_ / "generation_config.json").c_str(), 0600), 0);
  e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
  EXPECT_NE(e.find("generation_config.json: is a FIFO, expected a regular file"), std::string::npos) << e;
}

// Class 6: names from the file are escaped in messages.
TEST_F(HfJson, MessagesEscapeFileText) {
  json j = base_tokenizer();
  j["model"]["type"] = "Word\x1b]0;owned\x07";
  write("tokenizer.json", j);
  std::string e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
  EXPECT_NE(e.find("model type Word\\x1b]0;owned\\x07 is not supported"), std::string::npos) << e;
  j = base_tokenizer();
  j["model"]["vocab"]["\x1b[2J"] = -1;
  write("tokenizer.json", j);
  e = error_of([&] { tokenizer_spec_from_hf_json(dir_); });
  EXPECT_NE(e.find("vocab entry '\\x1b[2J' id -1 is out of range"), std::string::npos) << e;
}

}  // namespace
}  // namespace futr
