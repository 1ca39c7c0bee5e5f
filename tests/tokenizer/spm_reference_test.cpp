// futr's SentencePiece tokenizer (model "llama": Llama-2, TinyLlama, Mistral)
// against the Hugging Face `tokenizers` package on the whole WikiText-2 test
// text and on edge cases (spaces, newlines, characters outside the
// vocabulary, special tokens in the text, the empty string).
//
// scripts/spm_reference.py (run with $FUTR_PYTHON, else python3) learns a
// 4000-piece vocabulary from the text with tokenizers' BPE trainer, writes it
// as a Llama-2 style GGUF (scores, <0xNN> byte tokens, <unk> <s> </s>) and
// encodes the text with the tokenizer transformers makes of such a model
// (BPE + byte fallback, Prepend/Replace normalizer). futr loads the GGUF
// (load_tokenizer_spec) and must give the same ids, token for token; its
// decode gives the text back with the dummy prefix's space in front. The
// reference's own tokenizer.json, legacy and Metaspace ("first") forms, loads
// through the Hugging Face reader and gives the same ids too.
// Nothing is downloaded: the vocabulary is made from the repository's text.
// Skips (with the reason) when the text or the Python packages are missing.
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
#include "tokenizer/hf_json.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<int32_t> read_ids(const fs::path& p) {
  const std::string b = read_bytes(p);
  std::vector<int32_t> ids(b.size() / 4);
  std::memcpy(ids.data(), b.data(), ids.size() * 4);  // int32 little-endian (x86)
  return ids;
}

const std::vector<std::string> kCases = {
    "Hello world",
    "  two  spaces and a trailing one ",
    "tabs\t\tand\nnewlines\r\n\r\n",
    "<s>special</s> tokens<unk>in the text",
    "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E emoji \xF0\x9F\x98\x80!",
    "1234567 3.14159 2023-11-29",
    " ",
    "",
};

TEST(SentencePieceReference, WikiTextIdenticalToHuggingFace) {
  const fs::path text_path = FUTR_DEFAULT_TEXT;
  if (!fs::exists(text_path)) GTEST_SKIP() << "reference text " << text_path << " is missing";
  const char* env = std::getenv("FUTR_PYTHON");
  const std::string python = env && *env ? env : "python3";
  const fs::path out = fs::temp_directory_path() / ("futr_spmref_" + std::to_string(getpid()));
  fs::remove_all(out);
  fs::create_directories(out);
  std::ofstream(out / "cases_in.json") << json(kCases).dump();
  auto q = [](const std::string& s) { return "'" + s + "'"; };
  const std::string cmd = q(python) + " " + q(std::string(FUTR_SOURCE_DIR) + "/scripts/spm_reference.py") +
                          " --text " + q(text_path.string()) + " --out " + q(out.string()) + " --cases " +
                          q((out / "cases_in.json").string()) + " > " + q((out / "stdout.txt").string()) +
                          " 2> " + q((out / "stderr.txt").string());
  const int status = std::system(cmd.c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 3 || rc == 127) {
    const std::string why = read_bytes(out / "stderr.txt");
    fs::remove_all(out);
    GTEST_SKIP() << "reference script cannot run with " << python << " (rc " << rc << "): " << why;
  }
  ASSERT_EQ(rc, 0) << cmd << "\n" << read_bytes(out / "stderr.txt");

  const TokenizerSpec spec = load_tokenizer_spec(out / "spm.gguf");
  ASSERT_EQ(spec.model, "llama");
  ASSERT_EQ(spec.scores.size(), spec.tokens.size());
  const Tokenizer tok(spec);
  const std::string text = read_bytes(text_path);
  const std::vector<int32_t> want = read_ids(out / "ids.i32");
  const json info = json::parse(read_bytes(out / "info.json"));
  ASSERT_EQ(want.size(), info["tokens"].get<size_t>());
  EXPECT_GT(info["byte_fallback_ids"].get<int>(), 100) << "the text should exercise the byte fallback";

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> got = tok.encode(text, false, true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  EXPECT_TRUE(i == got.size() && i == want.size())
      << "first difference at token " << i << " of " << want.size() << " (futr has " << got.size()
      << "): futr " << (i < got.size() ? got[i] : -1) << " '"
      << (i < got.size() ? tok.token_text(got[i]) : "") << "', HF " << (i < want.size() ? want[i] : -1)
      << " '" << (i < want.size() ? tok.token_text(want[i]) : "") << "'";
  EXPECT_EQ(tok.decode(got), " " + text);
  EXPECT_LT(seconds, 10.0);
  std::printf(
      "[ reference ] sentencepiece: %zu tokens of %zu bytes (%d byte-fallback ids), identical: %s; futr "
      "%.3f s, HF tokenizers %.3f s\n",
      got.size(), text.size(), info["byte_fallback_ids"].get<int>(), got == want ? "yes" : "NO", seconds,
      info["encode_seconds"].get<double>());

  const json cases = json::parse(read_bytes(out / "cases.json"));
  ASSERT_EQ(cases.size(), kCases.size());
  for (size_t c = 0; c < kCases.size(); ++c)
    EXPECT_EQ(tok.encode(kCases[c], false, true), cases[c].get<std::vector<int32_t>>()) << "case " << c;

  // The same vocabulary as a Hugging Face tokenizer.json (BPE with
  // byte_fallback, the merges in the converter's order): both conversions load
  // as SentencePiece and give the reference's ids, the legacy one on the
  // whole text too.
  const TokenizerSpec hf = tokenizer_spec_from_hf_json(out);
  ASSERT_EQ(hf.model, "llama");
  ASSERT_EQ(hf.tokens, spec.tokens);
  const Tokenizer hf_tok(hf);
  EXPECT_TRUE(hf_tok.encode(text, false, true) == want) << "tokenizer.json (legacy): the whole text differs";
  for (size_t c = 0; c < kCases.size(); ++c)
    EXPECT_EQ(hf_tok.encode(kCases[c], false, true), cases[c].get<std::vector<int32_t>>())
        << "legacy case " << c;
  const TokenizerSpec hf_first = tokenizer_spec_from_hf_json(out / "first");
  EXPECT_TRUE(hf_first.space_prefix_first_only);
  const Tokenizer first_tok(hf_first);
  const json cases_first = json::parse(read_bytes(out / "cases_first.json"));
  ASSERT_EQ(cases_first.size(), kCases.size());
  for (size_t c = 0; c < kCases.size(); ++c)
    EXPECT_EQ(first_tok.encode(kCases[c], false, true), cases_first[c].get<std::vector<int32_t>>())
        << "prepend_scheme first, case " << c;
  if (!::testing::Test::HasFailure()) fs::remove_all(out);
  else std::printf("[ reference ] files kept in %s\n", out.c_str());
}

}  // namespace
}  // namespace futr
