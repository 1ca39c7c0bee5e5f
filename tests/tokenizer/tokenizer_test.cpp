// Unit tests of futr::Tokenizer on synthetic vocabularies: the byte-level
// alphabet, merge order, ignore_merges, special tokens, the three
// pre-tokenizers (digits, contractions, whitespace), Unicode (CJK, emoji,
// combining marks), invalid UTF-8, StreamDecoder, errors, long inputs and
// concurrent use. The comparison with Hugging Face tokenizers on real text is
// tokenizer_reference_test.cpp.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/test_util.h"

namespace futr {
namespace {

using test::alphabet_spec;
using test::byte_char;
using test::error_of;

std::vector<std::string> words(const Tokenizer& tok, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : tok.split_words(text)) out.emplace_back(p);
  return out;
}

// The ids of raw byte strings in an alphabet_spec vocabulary.
std::vector<int32_t> ids_of(const Tokenizer& tok, const std::vector<std::string>& raw) {
  std::vector<int32_t> ids;
  for (const auto& r : raw) {
    auto id = tok.find_token(test::byte_level(r));
    EXPECT_TRUE(id.has_value()) << r;
    ids.push_back(id.value_or(-1));
  }
  return ids;
}

std::vector<int32_t> enc(const Tokenizer& tok, std::string_view text, bool parse_special = true) {
  return tok.encode(text, false, parse_special);
}

// Special-token matching is linear in the text however many special tokens
// share a first byte or a prefix: 20,000 user-defined tokens "<a...a|N>" and a
// 1 MB text of "<aaaa..." that starts one at every byte (before: every
// candidate compared at every '<', minutes). Also the leftmost-longest rule
// with many overlapping tokens, on a small case checked by hand.
TEST(Tokenizer, SpecialTokenMatchingIsLinear) {
  std::vector<std::pair<std::string, int32_t>> specials;
  for (int i = 0; i < 20000; ++i)
    specials.push_back({"<" + std::string(40, 'a') + "|" + std::to_string(i) + ">", 4});
  specials.push_back({"<|c|>", 3});
  const Tokenizer tok(alphabet_spec({}, "gpt2", specials));
  std::string text;
  while (text.size() < (1 << 20)) text += "<" + std::string(39, 'a') + "b";
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = enc(tok, text, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(tok.decode(ids), text);
  const std::string hit = "x<" + std::string(40, 'a') + "|17><|c|>";
  const auto h = enc(tok, hit, false);
  ASSERT_GE(h.size(), 2u);
  EXPECT_EQ(h[1], *tok.find_token("<" + std::string(40, 'a') + "|17>"));
  EXPECT_EQ(tok.decode(h), hit);
  EXPECT_EQ(enc(tok, hit, true).back(), *tok.find_token("<|c|>"));

  const Tokenizer nest(
      alphabet_spec({}, "gpt2", {{"ab", 4}, {"abcd", 4}, {"bc", 4}, {"bcde", 3}, {"cd", 4}}));
  auto id = [&](const char* t) { return *nest.find_token(t); };
  // "abcde": the leftmost match starts at 0, its longest is "abcd"; then 'e'.
  EXPECT_EQ(enc(nest, "abcde"), (std::vector<int32_t>{id("abcd"), 'e'}));
  // "xbcde": "bcde" (control) with parse_special; else "bc", then "d" and "e" as bytes.
  EXPECT_EQ(enc(nest, "xbcde"), (std::vector<int32_t>{'x', id("bcde")}));
  EXPECT_EQ(enc(nest, "xbcde", false), (std::vector<int32_t>{'x', id("bc"), 'd', 'e'}));
  EXPECT_EQ(enc(nest, "abcabd"), (std::vector<int32_t>{id("ab"), 'c', id("ab"), 'd'}));
}

TEST(Tokenizer, ByteLevelAlphabet) {
  const Tokenizer tok(alphabet_spec());
  EXPECT_EQ(tok.vocab_size(), 256);
  // Known entries of GPT-2's table.
  EXPECT_EQ(tok.token_text(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(tok.token_text('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(tok.token_text(0x00), "\xC4\x80");  // U+0100
  EXPECT_EQ(tok.token_text(0x7f), "\xC4\xA1");  // U+0121
  EXPECT_EQ(tok.token_text(0xad), "\xC5\x83");  // U+0143, the last of the 68
  EXPECT_EQ(tok.token_text('A'), "A");
  EXPECT_EQ(tok.token_text(0xe9), "\xC3\xA9");  // U+00E9 stands for itself
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, char(b));
    EXPECT_EQ(enc(tok, one), std::vector<int32_t>{b}) << b;
    EXPECT_EQ(tok.piece(b), one) << b;
  }
}

TEST(Tokenizer, MergesApplyByRank) {
  const Tokenizer ab_first(alphabet_spec({{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(enc(ab_first, "abc"), ids_of(ab_first, {"ab", "c"}));
  const Tokenizer bc_first(alphabet_spec({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(enc(bc_first, "abc"), ids_of(bc_first, {"a", "bc"}));
}

TEST(Tokenizer, EqualRanksMergeLeftmostFirst) {
  const Tokenizer tok(alphabet_spec({{"a", "a"}}));
  EXPECT_EQ(enc(tok, "aaa"), ids_of(tok, {"aa", "a"}));
  EXPECT_EQ(enc(tok, "aaaa"), ids_of(tok, {"aa", "aa"}));
  EXPECT_EQ(enc(tok, "aaaaa"), ids_of(tok, {"aa", "aa", "a"}));
}

TEST(Tokenizer, MultiLevelMerges) {
  const Tokenizer tok(alphabet_spec({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "hello"}}));
  EXPECT_EQ(enc(tok, "hello"), ids_of(tok, {"hello"}));
  EXPECT_EQ(enc(tok, "hello hello"), ids_of(tok, {"hello", " hello"}));
  EXPECT_EQ(enc(tok, "hellhello"), ids_of(tok, {"hell", "hello"}));
  EXPECT_EQ(enc(tok, "hel"), ids_of(tok, {"he", "l"}));
}

TEST(Tokenizer, IgnoreMerges) {
  TokenizerSpec spec = alphabet_spec({{"a", "b"}});
  spec.tokens.push_back("abc");  // a token no merge produces
  spec.token_types.push_back(1);
  const int32_t abc = int32_t(spec.tokens.size() - 1);
  spec.ignore_merges = false;
  EXPECT_EQ(enc(Tokenizer(spec), "abc"), ids_of(Tokenizer(spec), {"ab", "c"}));
  spec.ignore_merges = true;
  EXPECT_EQ(enc(Tokenizer(spec), "abc"), std::vector<int32_t>{abc});
  // llama3 implies it when the spec does not say (GGUF files do not store it).
  spec.ignore_merges.reset();
  spec.pre = "llama3";
  EXPECT_EQ(enc(Tokenizer(spec), "abc"), std::vector<int32_t>{abc});
  spec.pre = "gpt2";
  EXPECT_EQ(enc(Tokenizer(spec), "abc"), ids_of(Tokenizer(spec), {"ab", "c"}));
}

TEST(Tokenizer, SpecialTokens) {
  const Tokenizer tok(alphabet_spec({{"u", "s"}}, "gpt2",
                                    {{"<|im_start|>", 3}, {"<|im_end|>", 3}, {"<|im", 3}, {"<tool>", 4}}));
  const int32_t start = *tok.find_token("<|im_start|>"), end = *tok.find_token("<|im_end|>");
  const int32_t im = *tok.find_token("<|im"), tool = *tok.find_token("<tool>");
  const int32_t u = 'u', s = 's', nl = '\n';
  EXPECT_EQ(enc(tok, "<|im_start|>user\n"),
            (std::vector<int32_t>{start, *tok.find_token("us"), 'e', 'r', nl}));
  EXPECT_EQ(enc(tok, "<|im_start|><|im_end|>"), (std::vector<int32_t>{start, end}));  // adjacent
  EXPECT_EQ(enc(tok, "x<|im_end|>"), (std::vector<int32_t>{'x', end}));               // at the end
  EXPECT_EQ(enc(tok, "<|im_x"), (std::vector<int32_t>{im, '_', 'x'}));                // longest that matches
  EXPECT_EQ(enc(tok, "<|im_start|"), (std::vector<int32_t>{im, '_', 's', 't', 'a', 'r', 't', '|'}));
  (void)u;
  (void)s;
  // Control tokens only with parse_special; user-defined tokens always.
  const auto plain = enc(tok, "<|im_end|>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  EXPECT_EQ(tok.decode(plain), "<|im_end|>");
  EXPECT_EQ(enc(tok, "<tool>", false), std::vector<int32_t>{tool});
  EXPECT_EQ(tok.decode(std::vector<int32_t>{start, 'h', 'i', end}), "<|im_start|>hi<|im_end|>");
  EXPECT_TRUE(tok.is_control(start));
  EXPECT_FALSE(tok.is_control(tool));
  EXPECT_FALSE(tok.is_control('a'));
}

TEST(Tokenizer, Gpt2PreTokenizer) {
  const Tokenizer tok(alphabet_spec());
  EXPECT_EQ(words(tok, "Hello world  foo's 123abc\n\n x"),
            (std::vector<std::string>{"Hello", " world", " ", " foo", "'s", " 123", "abc", "\n\n", " x"}));
  // Contractions are case-sensitive in GPT-2's pattern.
  EXPECT_EQ(words(tok, "I'M you're"), (std::vector<std::string>{"I", "'", "M", " you", "'re"}));
  EXPECT_EQ(words(tok, "a  \t\nb  "), (std::vector<std::string>{"a", "  \t", "\n", "b", "  "}));
  EXPECT_EQ(words(tok, "!!! ...?"), (std::vector<std::string>{"!!!", " ...?"}));
}

TEST(Tokenizer, SmolLMSplitsEveryDigit) {
  const Tokenizer tok(alphabet_spec({}, "smollm"));
  EXPECT_EQ(words(tok, "abc 123 x1"), (std::vector<std::string>{"abc", " ", "1", "2", "3", " x", "1"}));
  // Any \p{N}: Arabic-Indic digits (Nd), Roman numeral twelve (Nl), one half (No).
  EXPECT_EQ(words(tok, "\xD9\xA3\xD9\xA4 \xE2\x85\xAB\xC2\xBD"),
            (std::vector<std::string>{"\xD9\xA3", "\xD9\xA4", " ", "\xE2\x85\xAB", "\xC2\xBD"}));
  // GPT-2's regex alone keeps a number (with its space) together.
  const Tokenizer gpt2(alphabet_spec());
  EXPECT_EQ(words(gpt2, "abc 123 x1"), (std::vector<std::string>{"abc", " 123", " x", "1"}));
  // The lookahead (?!\S) sees the end of the stretch before a digit: "a  1" has
  // "a", "  " (both spaces: nothing follows them within the stretch), "1".
  EXPECT_EQ(words(tok, "a  1"), (std::vector<std::string>{"a", "  ", "1"}));
  EXPECT_EQ(words(gpt2, "a  1"), (std::vector<std::string>{"a", " ", " 1"}));
}

TEST(Tokenizer, Llama3PreTokenizer) {
  const Tokenizer tok(alphabet_spec({}, "llama3"));
  EXPECT_EQ(words(tok, "I'M 1234567 hello\r\n\r\nworld"),
            (std::vector<std::string>{"I", "'M", " ", "123", "456", "7", " hello", "\r\n\r\n", "world"}));
  EXPECT_EQ(words(tok, "you'RE (x)...\n"), (std::vector<std::string>{"you", "'RE", " (", "x", ")...\n"}));
  EXPECT_EQ(words(tok, "$hello"), (std::vector<std::string>{"$hello"}));
}

TEST(Tokenizer, UnicodeRoundTrips) {
  const std::vector<std::string> texts = {
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83"
      "\x88",                                                                      // 日本語のテキスト
      "\xE4\xB8\xAD\xE6\x96\x87\xEF\xBC\x8C\xE6\xA0\x87\xE7\x82\xB9\xE3\x80\x82",  // 中文，标点。
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9"
      "\xE2\x80\x8D\xF0\x9F\x91\xA7 \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",  // 😀👍🏽 👨‍👩‍👧
                                                                        // 🇫🇷
      "combining e\xCC\x81 a\xCC\x88 "
      "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80",  // é ä हिन्दी
      "spaces\xC2\xA0nbsp\xC2\x85nel\xE3\x80\x80ideographic\xE2\x80\x8Bzwsp",
  };
  for (const char* pre : {"gpt2", "smollm", "llama3"}) {
    const Tokenizer tok(alphabet_spec({{"e", "\xCC"}}, pre));
    for (const auto& t : texts) {
      EXPECT_EQ(tok.decode(enc(tok, t)), t) << pre << ": " << test::escape(t);
      std::string joined;
      for (auto w : tok.split_words(t)) joined += w;
      EXPECT_EQ(joined, t) << pre;
    }
  }
  // A combining mark is not a letter: it starts a piece of its own.
  const Tokenizer tok(alphabet_spec());
  EXPECT_EQ(words(tok, "e\xCC\x81x"), (std::vector<std::string>{"e", "\xCC\x81", "x"}));
  // U+0085 (NEL) and U+00A0 are White_Space, as in the Oniguruma patterns.
  EXPECT_EQ(words(tok, "a\xC2\x85\xC2\xA0"), (std::vector<std::string>{"a", "\xC2\x85\xC2\xA0"}));
}

TEST(Tokenizer, InvalidUtf8IsEncodedWithoutLoss) {
  const std::vector<std::string> texts = {"\xFF",
                                          "abc\xC3",
                                          "\xC3(",
                                          "\xED\xA0\x80 surrogate",
                                          "\xF4\x90\x80\x80",
                                          "\xC0\x80 overlong",
                                          "a\x80"
                                          "b \xFE\xFF 12\xE2\x82"};
  std::mt19937 rng(1234);
  std::vector<std::string> all = texts;
  for (int i = 0; i < 20; ++i) {
    std::string r(size_t(rng() % 2000), '\0');
    for (char& c : r) c = char(rng() & 0xff);
    all.push_back(r);
  }
  for (const char* pre : {"gpt2", "smollm", "llama3"}) {
    const Tokenizer tok(alphabet_spec({{"a", "b"}}, pre, {{"<s>", 3}}));
    for (const auto& t : all) {
      std::vector<int32_t> ids;
      ASSERT_NO_THROW(ids = enc(tok, t)) << pre;
      EXPECT_EQ(tok.decode(ids), t) << pre << ": " << test::escape(t.substr(0, 40));
    }
  }
}

TEST(Tokenizer, BytesWithoutATokenAreDropped) {
  // Like SmolLM2, which has no token for 0xFF (not in valid UTF-8) and others.
  const Tokenizer tok(alphabet_spec({{"a", "b"}}, "gpt2", {}, {0xff}));
  EXPECT_EQ(enc(tok,
                "a\xFF"
                "b"),
            (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(enc(tok, "\xFF"), std::vector<int32_t>{});
}

TEST(Tokenizer, BosEosAndEog) {
  TokenizerSpec spec = alphabet_spec({}, "gpt2", {{"<s>", 3}, {"</s>", 3}, {"<eot>", 3}});
  spec.bos = 256;
  spec.eos = 257;
  spec.extra_eos = {258};
  spec.add_bos = true;
  const Tokenizer tok(spec);
  EXPECT_EQ(tok.bos(), 256);
  EXPECT_EQ(tok.eos(), 257);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.encode("a", true, true), (std::vector<int32_t>{256, 'a'}));
  EXPECT_TRUE(tok.is_eog(257));
  EXPECT_TRUE(tok.is_eog(258));
  EXPECT_FALSE(tok.is_eog(256));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_FALSE(tok.is_eog(100000));
  const Tokenizer no_bos(alphabet_spec());
  EXPECT_NE(error_of([&] { no_bos.encode("a", true, true); }).find("no BOS"), std::string::npos);
}

TEST(Tokenizer, InvalidIdsAreErrors) {
  const Tokenizer tok(alphabet_spec());
  EXPECT_NE(error_of([&] { tok.decode(std::vector<int32_t>{1, -1}); }).find("-1"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.decode(std::vector<int32_t>{256}); }).find("256"), std::string::npos);
  EXPECT_THROW(tok.piece(1 << 30), Error);
  EXPECT_THROW(tok.token_text(-5), Error);
}

TEST(Tokenizer, SpecErrors) {
  auto err = [](TokenizerSpec s) { return error_of([&] { Tokenizer t(s); }); };
  TokenizerSpec s = alphabet_spec();
  s.pre = "bert";
  EXPECT_NE(err(s).find("'bert' is not supported"), std::string::npos) << err(s);
  s = alphabet_spec();
  s.model = "unigram";
  EXPECT_NE(err(s).find("'unigram' is not supported"), std::string::npos) << err(s);
  s = alphabet_spec();
  s.model = "llama";  // SentencePiece without byte tokens or <unk>
  EXPECT_NE(err(s).find("lacks 256 of the 256 byte tokens"), std::string::npos) << err(s);
  s = alphabet_spec();
  s.merges.push_back("zz q");
  EXPECT_NE(err(s).find("'zz q'"), std::string::npos) << err(s);
  s = alphabet_spec();
  s.merges.push_back("a b");  // "ab" is not a token
  EXPECT_NE(err(s).find("not in the vocabulary"), std::string::npos) << err(s);
  s = alphabet_spec();
  s.merges.push_back("ab");
  EXPECT_NE(err(s).find("is not 'a b'"), std::string::npos) << err(s);
  s = alphabet_spec();
  s.token_types.pop_back();
  EXPECT_NE(err(s).find("token types"), std::string::npos);
  s = alphabet_spec();
  s.eos = 999;
  EXPECT_NE(err(s).find("eos id 999"), std::string::npos) << err(s);
  s = TokenizerSpec{};
  EXPECT_NE(err(s).find("vocabulary size 0"), std::string::npos) << err(s);
}

TEST(StreamDecoder, HoldsBackIncompleteSequences) {
  const Tokenizer tok(alphabet_spec());
  StreamDecoder sd(tok);
  EXPECT_EQ(sd.push(0xC3), "");
  EXPECT_EQ(sd.push(0xA9), "\xC3\xA9");  // é
  EXPECT_EQ(sd.push('a'), "a");
  for (uint8_t b : {0xF0, 0x9F, 0x98}) EXPECT_EQ(sd.push(b), "");
  EXPECT_EQ(sd.push(0x80), "\xF0\x9F\x98\x80");  // 😀
  EXPECT_EQ(sd.push(0xFF), "\xEF\xBF\xBD");      // invalid byte -> U+FFFD
  EXPECT_EQ(sd.push(0xE2), "");
  EXPECT_EQ(sd.push('x'), "\xEF\xBF\xBDx");  // a sequence broken off
  EXPECT_EQ(sd.push(0xE2), "");
  EXPECT_EQ(sd.push(0x82), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");  // never completed
  EXPECT_EQ(sd.flush(), "");
}

TEST(StreamDecoder, ControlTokensPrintOnlyWhenAsked) {
  const Tokenizer tok(alphabet_spec({}, "gpt2", {{"<|im_end|>", 3}, {"<tool>", 4}}));
  StreamDecoder quiet(tok), loud(tok, true);
  std::string q, l;
  for (int32_t id : tok.encode("a<|im_end|>b<tool>", false, true)) {
    q += quiet.push(id);
    l += loud.push(id);
  }
  EXPECT_EQ(q, "ab<tool>");  // user-defined tokens are text
  EXPECT_EQ(l, "a<|im_end|>b<tool>");
  EXPECT_THROW(quiet.push(-1), Error);
}

TEST(Tokenizer, GgufPreTokenizerAliases) {
  TokenizerSpec s = alphabet_spec();
  for (auto [alias, name] : {std::pair{"gpt-2", "gpt2"}, std::pair{"llama-bpe", "llama3"},
                             std::pair{"llama-v3", "llama3"}, std::pair{"smollm", "smollm"}}) {
    s.pre = alias;
    EXPECT_EQ(Tokenizer(s).pre(), name);
  }
}

TEST(StreamDecoder, ConcatenationEqualsDecodeForValidText) {
  const Tokenizer tok(alphabet_spec({{"\xE6", "\x97"}, {"\xF0", "\x9F"}}, "smollm"));
  const std::string text =
      "Caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC 123 \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD end";
  StreamDecoder sd(tok);
  std::string out;
  for (int32_t id : enc(tok, text)) out += sd.push(id);
  out += sd.flush();
  EXPECT_EQ(out, text);
}

TEST(Utf8Sanitize, MaximalSubparts) {
  auto clean = [](std::string_view in, bool final) {
    std::string out;
    const size_t used = utf8_sanitize(in, final, out);
    return std::make_pair(out, used);
  };
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(clean("ab", false), std::make_pair(std::string("ab"), size_t(2)));
  EXPECT_EQ(clean("\xC0\x80", false), std::make_pair(R + R, size_t(2)));                  // overlong lead
  EXPECT_EQ(clean("\xED\xA0\x80", false), std::make_pair(R + R + R, size_t(3)));          // surrogate
  EXPECT_EQ(clean("\xF4\x90\x80\x80", false), std::make_pair(R + R + R + R, size_t(4)));  // > U+10FFFF
  EXPECT_EQ(clean("a\xE2\x82", false), std::make_pair(std::string("a"), size_t(1)));      // held back
  EXPECT_EQ(clean("a\xE2\x82", true), std::make_pair("a" + R, size_t(3)));
  EXPECT_EQ(clean("\xE2\x82(", false), std::make_pair(R + "(", size_t(3)));
}

TEST(Tokenizer, LongInputs) {
  const Tokenizer tok(alphabet_spec({{"a", "a"}, {"aa", "aa"}}, "smollm"));
  const std::string as(1 << 20, 'a');
  const auto ids = enc(tok, as);
  EXPECT_EQ(ids.size(), size_t(1 << 18));
  EXPECT_EQ(tok.decode(ids), as);
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(tok.decode(enc(tok, spaces)), spaces);
  std::string digits(200000, '7');
  EXPECT_EQ(enc(tok, digits).size(), digits.size());
  const Tokenizer llama(alphabet_spec({}, "llama3"));
  const std::string mixed = std::string(300000, 'x') + std::string(300000, '\n') + std::string(300000, '!');
  EXPECT_EQ(llama.decode(enc(llama, mixed)), mixed);
}

TEST(Tokenizer, ConcurrentEncodes) {
  const Tokenizer tok(alphabet_spec({{"t", "h"}, {"th", "e"}, {" ", "the"}}, "smollm"));
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "the " + std::to_string(i) + " word" + std::to_string(i % 97) + "\n";
  const auto expect = enc(tok, text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t) th.emplace_back([&, t] { got[size_t(t)] = enc(tok, text); });
  for (auto& x : th) x.join();
  for (const auto& g : got) EXPECT_EQ(g, expect);
  EXPECT_EQ(tok.decode(expect), text);
}

}  // namespace
}  // namespace futr
