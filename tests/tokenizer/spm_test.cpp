// The SentencePiece tokenizer (model "llama": Llama-2, TinyLlama, Mistral) on
// a hand-made vocabulary whose answers are worked out by hand: the space
// marker and the dummy prefix (at the start and after each special token),
// merges by score (not position), the leftmost of equal scores, byte fallback
// for characters outside the vocabulary, <unk> where a byte token is missing,
// control tokens only with parse_special, decoding (▁ -> space, <0xNN> -> the
// byte), and the refusals. The whole-text comparison with Hugging Face
// `tokenizers` is tests/tokenizer/spm_reference_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/spec.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

const std::string S = "\xE2\x96\x81";  // ▁

// <unk> <s> </s>, the 256 byte tokens (ids 3..258), then the normal pieces
// with their scores.
TokenizerSpec vocabulary(const std::vector<std::pair<std::string, float>>& pieces) {
  TokenizerSpec s;
  s.model = "llama";
  s.pre = "default";
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.token_types = {2, 3, 3};
  s.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    s.tokens.push_back(buf);
    s.token_types.push_back(6);
    s.scores.push_back(0);
  }
  for (const auto& [p, score] : pieces) {
    s.tokens.push_back(p);
    s.token_types.push_back(1);
    s.scores.push_back(score);
  }
  s.unk = 0;
  s.bos = 1;
  s.eos = 2;
  s.add_bos = true;
  return s;
}

constexpr int32_t kFirst = 259;  // the first normal piece

// ids: ▁ h e l o w r d ▁h el ll he hel lo ▁hel ▁hello wor ▁w ▁wor ▁world
const std::vector<std::pair<std::string, float>> kPieces = {
    {S, -1},          {"h", -2},          {"e", -3},        {"l", -4},          {"o", -5},    {"w", -6},
    {"r", -7},        {"d", -8},          {S + "h", -20},   {"el", -10},        {"ll", -30},  {"he", -11},
    {"hel", -12},     {"lo", -13},        {S + "hel", -14}, {S + "hello", -15}, {"wor", -40}, {S + "w", -16},
    {S + "wor", -50}, {S + "world", -60}, {"or", -17},      {S + "wo", -18},    {"ld", -19}};
int32_t id(const std::string& piece) {
  for (size_t i = 0; i < kPieces.size(); ++i)
    if (kPieces[i].first == piece) return kFirst + int32_t(i);
  ADD_FAILURE() << "no piece " << piece;
  return -1;
}

TEST(SentencePiece, MergesByScoreWithTheDummyPrefix) {
  const Tokenizer tok(vocabulary(kPieces));
  EXPECT_EQ(tok.pre(), "sentencepiece");
  // "▁hello": el (-10) before he (-11) and ▁h (-20): ▁ h el l o; then hel
  // (-12): ▁ hel l o; lo (-13): ▁ hel lo; ▁hel (-14); ▁hel + lo = ▁hello (-15).
  EXPECT_EQ(tok.encode("hello", false, false), std::vector<int32_t>{id(S + "hello")});
  EXPECT_EQ(tok.encode("hello", true, false), (std::vector<int32_t>{1, id(S + "hello")}));
  // "▁world": ▁w (-16), or (-17) (▁wo, -18, is stale by then), ld (-19),
  // ▁w + or = ▁wor (-50), ▁wor + ld = ▁world (-60).
  EXPECT_EQ(tok.encode("hello world", false, false),
            (std::vector<int32_t>{id(S + "hello"), id(S + "world")}));
  // Two spaces: ▁▁ is no piece: two ▁ tokens' worth (▁ then ▁hello).
  EXPECT_EQ(tok.encode(" hello", false, false), (std::vector<int32_t>{id(S), id(S + "hello")}));
}

TEST(SentencePiece, EqualScoresMergeLeftmostFirst) {
  // "aaa": aa could form at 0 or 1; the leftmost wins: aa a.
  const Tokenizer tok(vocabulary({{S, -1}, {"a", -2}, {"aa", -3}}));
  TokenizerSpec no_prefix = vocabulary({{S, -1}, {"a", -2}, {"aa", -3}});
  no_prefix.add_space_prefix = false;
  const Tokenizer plain(no_prefix);
  EXPECT_EQ(plain.encode("aaa", false, false), (std::vector<int32_t>{kFirst + 2, kFirst + 1}));
  EXPECT_EQ(tok.encode("aaa", false, false), (std::vector<int32_t>{kFirst, kFirst + 2, kFirst + 1}));
}

TEST(SentencePiece, ByteFallbackAndUnknown) {
  const Tokenizer tok(vocabulary(kPieces));
  // é (C3 A9) and \n are no pieces: their bytes' tokens (3 + byte).
  EXPECT_EQ(tok.encode("h\xC3\xA9\n", false, false),
            (std::vector<int32_t>{id(S + "h"), 3 + 0xC3, 3 + 0xA9, 3 + 0x0A}));
  // Without the byte tokens, <unk> per byte.
  TokenizerSpec few = vocabulary(kPieces);
  few.token_types[3 + 0xC3] = 1;  // no longer a byte token
  const Tokenizer t2(few);
  EXPECT_EQ(t2.encode("\xC3\xA9", false, false), (std::vector<int32_t>{id(S), 0, 3 + 0xA9}));
  few.unk = -1;
  EXPECT_THROW(Tokenizer{few}, Error);
}

TEST(SentencePiece, SpecialTokensAndThePrefixAfterThem) {
  const Tokenizer tok(vocabulary(kPieces));
  // Control tokens only with parse_special; the text after one gets the prefix again.
  EXPECT_EQ(tok.encode("hello</s>world", false, true),
            (std::vector<int32_t>{id(S + "hello"), 2, id(S + "world")}));
  const std::vector<int32_t> plain = tok.encode("</s>", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 2), plain.end());
  EXPECT_EQ(tok.decode(plain), " </s>");
}

TEST(SentencePiece, DecodesMarkersAndBytes) {
  const Tokenizer tok(vocabulary(kPieces));
  const std::string text = "hello world \xC3\xA9\xE6\x97\xA5\n";
  EXPECT_EQ(tok.decode(tok.encode(text, false, false)), " " + text);
  EXPECT_EQ(tok.piece(3 + 'A'), "A");
  EXPECT_EQ(tok.piece(id(S + "world")), " world");
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(tok.encode("", false, false).empty());
}

TEST(SentencePiece, RefusesBrokenSpecs) {
  TokenizerSpec s = vocabulary(kPieces);
  s.scores.pop_back();
  EXPECT_THROW(Tokenizer{s}, Error);
  TokenizerSpec u = vocabulary(kPieces);
  u.model = "unigram";
  try {
    Tokenizer t(u);
    ADD_FAILURE() << "accepted model unigram";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'llama', SentencePiece BPE"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace futr
