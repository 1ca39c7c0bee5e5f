// Log-probabilities of the server (src/server/logprobs.h): the value of a
// token from a logits row has the bits of -runtime::token_nll (what the
// engines' kLogprob rows and `futr perplexity` compute), the top
// alternatives are the largest logits in order (ties by id, never an id
// beyond the limit), -inf and NaN become JSON numbers / null, token strings
// escape partial UTF-8, and the two routes' shapes with text offsets that
// continue across chunks.
#include "server/logprobs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/perplexity.h"
#include "server/server_test_util.h"

namespace futr::server {
namespace {

using json = nlohmann::json;

TEST(Logprobs, ValueIsTheEnginesLogprobBitForBit) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> z(1000 + size_t(trial) * 37);
    for (float& v : z) v = nd(rng);
    for (int32_t t : {0, 1, int32_t(z.size() / 2), int32_t(z.size()) - 1}) {
      const TokenLogprob e = token_logprob(z, t, 0, 0);
      EXPECT_EQ(e.logprob, -runtime::token_nll(z, t)) << "token " << t;  // the same bits
      EXPECT_TRUE(e.has_logprob);
      EXPECT_TRUE(e.top.empty());
    }
    // The top 5: the five largest logits, descending, each its own value.
    const TokenLogprob e = token_logprob(z, 3, 5, 0);
    ASSERT_EQ(e.top.size(), 5u);
    std::vector<float> sorted = z;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(z[size_t(e.top[i].token)], sorted[i]) << i;
      EXPECT_EQ(e.top[i].logprob, -runtime::token_nll(z, e.top[i].token)) << i;
    }
  }
}

TEST(Logprobs, TopIsOrderedTiesByIdAndWithinTheLimit) {
  // ids 0..9; 7 and 2 tie at the top, 9 is larger but beyond the limit.
  std::vector<float> z = {0, 1, 5, 0, 3, 0, 0, 5, 0, 9};
  const TokenLogprob e = token_logprob(z, 4, 3, 9);
  ASSERT_EQ(e.top.size(), 3u);
  EXPECT_EQ(e.top[0].token, 2);
  EXPECT_EQ(e.top[1].token, 7);
  EXPECT_EQ(e.top[2].token, 4);
  EXPECT_EQ(e.top[0].logprob, e.top[1].logprob);
  // The distribution is still the whole row's (9 included in the sum).
  EXPECT_EQ(e.logprob, -runtime::token_nll(z, 4));
  // k beyond the drawable ids: all of them.
  EXPECT_EQ(token_logprob(z, 4, 20, 9).top.size(), 9u);
  // A -inf logit: a logprob of -inf, reported as -9999 (JSON has no infinity).
  z[5] = -INFINITY;
  EXPECT_EQ(token_logprob(z, 5, 0, 0).logprob, -INFINITY);
}

class LogprobsText : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = test::default_tokenizer();
    if (!tok_) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent (scripts/fetch-model.sh)";
  }
  const Tokenizer* tok_ = nullptr;
};

TEST_F(LogprobsText, TokenStringsEscapePartialCharacters) {
  const auto ids = tok_->encode(" the", false, false);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(token_string(*tok_, ids[0]), " the");
  // A token that is one byte of a multi-byte character: \xNN.
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    const std::string& p = tok_->piece(id);
    if (p.size() == 1 && uint8_t(p[0]) >= 0x80) {
      EXPECT_EQ(token_string(*tok_, id), fmt::format("\\x{:02x}", uint8_t(p[0])));
      EXPECT_NO_THROW(json(token_string(*tok_, id)).dump());
      break;
    }
  }
}

TEST_F(LogprobsText, ShapesAndTextOffsets) {
  const std::string text = "Hello, wörld and more";
  const auto ids = tok_->encode(text, false, false);
  ASSERT_GE(ids.size(), 4u);
  std::vector<TokenLogprob> entries;
  entries.push_back({ids[0], 0.0, false, {}});  // an echoed prompt's first token
  for (size_t i = 1; i < ids.size(); ++i)
    entries.push_back({ids[i], -double(i), true, {{ids[0], -0.5}, {ids[1], -0.75}}});
  entries[1].logprob = -INFINITY;

  // Completions, in two chunks: the offsets continue.
  LogprobsWriter w(*tok_, false, 1);
  const size_t cut = 2;
  const json a = w.add(std::span(entries).first(cut));
  const json b = w.add(std::span(entries).subspan(cut));
  std::vector<int64_t> offsets;
  std::vector<json> token_logprobs, tops;
  std::string joined;
  for (const json* j : {&a, &b}) {
    for (const auto& o : (*j)["text_offset"]) offsets.push_back(o.get<int64_t>());
    for (const auto& o : (*j)["token_logprobs"]) token_logprobs.push_back(o);
    for (const auto& o : (*j)["top_logprobs"]) tops.push_back(o);
    for (const auto& t : (*j)["tokens"]) joined += t.get<std::string>();
  }
  EXPECT_EQ(joined, text);
  ASSERT_EQ(offsets.size(), ids.size());
  EXPECT_TRUE(token_logprobs[0].is_null());
  EXPECT_TRUE(tops[0].is_null());
  EXPECT_EQ(token_logprobs[1].get<double>(), -9999.0);
  EXPECT_EQ(token_logprobs[2].get<double>(), -2.0);
  // top_logprobs: k = 1 alternative and the chosen token.
  EXPECT_EQ(tops[2].size(), 2u);
  EXPECT_EQ(tops[2][token_string(*tok_, ids[0])].get<double>(), -0.5);
  EXPECT_EQ(tops[2][token_string(*tok_, ids[2])].get<double>(), -2.0);
  // text_offset: code points of the text before each token.
  std::string before;
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t cps = 0;
    for (char c : before) cps += (uint8_t(c) & 0xc0) != 0x80;
    EXPECT_EQ(offsets[i], cps) << "token " << i;
    before += tok_->piece(ids[i]);
  }
  EXPECT_EQ(offsets.back(), int64_t(text.find(" more")) - 1);  // "ö" is one code point, two bytes

  // Chat: content entries with bytes and exactly k alternatives.
  LogprobsWriter c(*tok_, true, 2);
  const json h = c.add(std::span(entries).subspan(1));
  ASSERT_EQ(h["content"].size(), ids.size() - 1);
  const json& e = h["content"][1];
  EXPECT_EQ(e["token"], token_string(*tok_, ids[2]));
  EXPECT_EQ(e["logprob"].get<double>(), -2.0);
  std::string bytes;
  for (const auto& x : e["bytes"]) bytes += char(x.get<int>());
  EXPECT_EQ(bytes, tok_->piece(ids[2]));
  ASSERT_EQ(e["top_logprobs"].size(), 2u);
  EXPECT_EQ(e["top_logprobs"][0]["token"], token_string(*tok_, ids[0]));
  EXPECT_EQ(e["top_logprobs"][1]["logprob"].get<double>(), -0.75);
  EXPECT_TRUE(e["top_logprobs"][1]["bytes"].is_array());
}

}  // namespace
}  // namespace futr::server
