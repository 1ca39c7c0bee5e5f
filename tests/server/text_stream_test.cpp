// Stop strings on decoded text (src/server/text_stream.h): held-back
// prefixes, stops across pieces, the earliest of several, UTF-8 safety.
#include "server/text_stream.h"

#include <gtest/gtest.h>

#include <random>

#include "server/server_test_util.h"

namespace futr::server {
namespace {

// Feeds `pieces` and returns what came out (with finish() when not stopped).
std::string run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  if (!m.stopped()) out += m.finish();
  return out;
}

TEST(StopMatcher, NoStopsPassesEverything) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.push(""), "");
  EXPECT_EQ(m.finish(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopInsideOnePiece) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abcENDdef"), "abc");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, StopAcrossPiecesIsHeldBackThenCut) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abcE"), "abc");  // "E" might start "END"
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("Dxyz"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abEN"), "ab");
  EXPECT_EQ(m.push("x"), "ENx");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("E"), "");
  EXPECT_EQ(m.finish(), "E");  // the generation ended: held text is final
}

TEST(StopMatcher, EarliestOfSeveralStops) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(run(m, {"hel", "lo wor", "ld"}), "hel");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher m({""});
  EXPECT_EQ(run(m, {"abc"}), "abc");
}

// Whatever the split of a text into pieces, the output is the text up to the
// first stop (or all of it), and every emitted piece is valid UTF-8.
TEST(StopMatcher, AnySplitGivesTheSameTextAndValidUtf8) {
  const std::string text = "Grüße, 世界! The end is near: STOP here, then ☃ more";
  const std::vector<std::vector<std::string>> stop_sets = {{"STOP"}, {"世界"},        {"☃"},
                                                           {"nope"}, {"e n", "near"}, {"ße"}};
  std::mt19937 rng(std::random_device{}());
  for (const auto& stops : stop_sets) {
    size_t cut = std::string::npos;
    for (const auto& s : stops) cut = std::min(cut, text.find(s));
    const std::string expected = cut == std::string::npos ? text : text.substr(0, cut);
    for (int rep = 0; rep < 200; ++rep) {
      // Split at random character boundaries (the StreamDecoder gives whole characters).
      std::vector<std::string> pieces;
      std::string cur;
      for (size_t i = 0; i < text.size();) {
        size_t len = 1;
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c >= 0xf0) len = 4;
        else if (c >= 0xe0) len = 3;
        else if (c >= 0xc0) len = 2;
        cur += text.substr(i, len);
        i += len;
        if (rng() % 3 == 0) {
          pieces.push_back(cur);
          cur.clear();
        }
      }
      if (!cur.empty()) pieces.push_back(cur);
      StopMatcher m(stops);
      std::string out;
      for (const auto& p : pieces) {
        const std::string o = m.push(p);
        std::string clean;
        EXPECT_EQ(utf8_sanitize(o, true, clean), o.size());
        EXPECT_EQ(clean, o) << "emitted invalid UTF-8";
        out += o;
      }
      if (!m.stopped()) out += m.finish();
      EXPECT_EQ(out, expected) << "stops " << stops[0];
      EXPECT_EQ(m.stopped(), cut != std::string::npos);
    }
  }
}

// With real tokens: a multi-byte character split across tokens is never cut.
TEST(TextStream, TokensToTextWithStops) {
  FUTR_NEED_TOKENIZER(tok);
  const std::string text = "Hello 世界, this is the end. Bye";
  const auto ids = tok->encode(text, false, false);
  TextStream all(*tok, {});
  std::string out;
  for (int32_t id : ids) out += all.push(id);
  out += all.finish();
  EXPECT_EQ(out, text);
  TextStream cut(*tok, {"the end"});
  out.clear();
  for (int32_t id : ids) {
    out += cut.push(id);
    if (cut.stopped()) break;
  }
  EXPECT_TRUE(cut.stopped());
  EXPECT_EQ(out, "Hello 世界, this is ");
}

}  // namespace
}  // namespace futr::server
