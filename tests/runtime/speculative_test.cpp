// Speculative decoding (runtime/speculative.h) on the CPU engines, every KV
// format (fp32, bf16, int4, int4-rot):
//   - the tokens with drafts are bit for bit those of ordinary decoding, greedy
//     (with and without penalties) and sampled (temperature, top-k, top-p,
//     min-p, penalties; the same seed), with the n-gram drafter on random and
//     copying prompts, and with drafters that are always right (every draft
//     accepted), always wrong (every draft rejected) or right for a while;
//     including runs that end at the context and steps capped by
//     max_step_tokens;
//   - rollback: after the run the sequence holds what ordinary decoding left
//     (its length, and the logits of one more row, which read every K/V
//     position, are the same bits); truncate() after rows of a step leaves the
//     engine as if they never ran;
//   - the engine's sampler drawing every row (SpeculativeDecoder's
//     engine_draws) gives the host sampler's tokens: sampled without drafts,
//     greedy with drafts;
//   - the acceptance rule (verify_draft) on a synthetic 8-token vocabulary:
//     P(accept) = p(x) and the tokens follow the target distribution p of the
//     sampler's filters (chi-square over 200000 draws from a fixed seed, so the
//     outcome is the same on every run), as the textbook rule with a separate
//     coin and residual draw does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "../cpu_engine/quant_model.h"
#include "../cpu_engine/tiny_model.h"
#include "runtime/engine.h"
#include "runtime/ngram_drafter.h"
#include "runtime/speculative.h"
#include "support/expect_error.h"

namespace futr::runtime {
namespace {

struct Case {
  const char* name;
  bool quant_model;  // test::quant_config() or test::tiny_config()
  WeightFormat weights;
  KvFormat kv;
};

const Case kCases[] = {
    {"fp32_fp32", false, WeightFormat::kFp32, KvFormat::kFp32},
    {"fp32_bf16", false, WeightFormat::kFp32, KvFormat::kBf16},
    {"bf16_int4", true, WeightFormat::kBf16, KvFormat::kInt4},
    {"int4_int4rot", true, WeightFormat::kInt4, KvFormat::kInt4Rot},
};

constexpr int kCtx = 96;

// A drafter that knows the whole run (`truth`: prompt + ordinary output) and
// proposes its next tokens, right for the first `right` of each draft and
// wrong after (right < 0: always right).
class ScriptedDrafter final : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> truth, int vocab, int k, int right)
      : truth_(std::move(truth)), vocab_(vocab), k_(k), right_(right) {}
  void push(int32_t token) override {
    const size_t i = tokens_.size();
    // The decoder pushes exactly the sequence's tokens.
    EXPECT_TRUE(i < truth_.size() && truth_[i] == token) << "push " << token << " at " << i;
    tokens_.push_back(token);
  }
  void truncate(int64_t len) override { tokens_.resize(size_t(len)); }
  int64_t size() const override { return int64_t(tokens_.size()); }
  void draft(int max_tokens, std::vector<int32_t>& out) override {
    out.clear();
    for (int j = 0; j < std::min(k_, max_tokens); ++j) {
      const size_t i = tokens_.size() + size_t(j);
      if (i >= truth_.size()) break;
      const bool right = right_ < 0 || j < right_;
      out.push_back(right ? truth_[i] : (truth_[i] + 1) % vocab_);
    }
  }

 private:
  std::vector<int32_t> truth_, tokens_;
  int vocab_, k_, right_;
};

struct Outcome {
  std::vector<int32_t> tokens;  // drawn
  int length = 0;               // positions the sequence holds at the end
  std::vector<float> probe;     // logits of the last drawn token run at the end (empty at a full context)
  SpeculativeStats stats;
};

class Speculative : public ::testing::TestWithParam<Case> {
 protected:
  Speculative()
      : model_(test::random_model(GetParam().quant_model ? test::quant_config() : test::tiny_config(), 11)) {}

  std::unique_ptr<Engine> engine(int max_step_tokens = 64) const {
    RuntimeConfig c;
    c.engine = EngineKind::kCpu;
    c.weights = GetParam().weights;
    c.kv = GetParam().kv;
    c.ctx = kCtx;
    c.max_step_tokens = max_step_tokens;
    c.threads = 2;
    return make_engine(model_, c);
  }
  int vocab() const { return model_.config.vocab; }
  std::vector<int32_t> random_tokens(int n, uint32_t seed, int range = 0) const {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(size_t(n), 0);
    for (auto& x : t) x = int32_t(rng() % uint32_t(range > 0 ? range : vocab()));
    return t;
  }
  // The prompts: random, a copy task (a random piece three times), a few ids only.
  std::vector<std::vector<int32_t>> prompts() const {
    std::vector<int32_t> piece = random_tokens(9, 5), copy;
    for (int r = 0; r < 3; ++r) copy.insert(copy.end(), piece.begin(), piece.end());
    return {random_tokens(17, 3), copy, random_tokens(24, 8, 4)};
  }

  // The token loop of cli/generation.cpp without the text: draw, accept, advance.
  // engine_draws: the sequence opened with `sc`, the engine drawing every row.
  static Outcome decode(Engine& e, const std::vector<int32_t>& prompt, int max_tokens,
                        const SamplerConfig& sc, Drafter* drafter, bool engine_draws = false) {
    Outcome r;
    Sampler sampler(sc);
    for (int32_t t : prompt) sampler.accept(t, false);
    SequenceRunner seq(e, 0, engine_draws ? sc : SamplerConfig{});
    SpeculativeDecoder dec(seq, drafter, engine_draws);
    dec.prefill(prompt);
    for (int g = 0; g < max_tokens; ++g) {
      const int32_t t = dec.draw(sampler).token;
      r.tokens.push_back(t);
      sampler.accept(t, true);
      if (g + 1 == max_tokens || dec.position() >= seq.capacity()) break;
      dec.advance(t, max_tokens - g - 1);
    }
    dec.finish();
    r.length = seq.position();
    r.stats = dec.stats();
    if (r.length < seq.capacity()) {
      const int32_t last[1] = {r.tokens.back()};
      const Tensor z = seq.eval(last, 0, false);
      r.probe.assign(z.ptr(), z.ptr() + z.numel());
    }
    return r;
  }

  void expect_same(const Outcome& plain, const Outcome& spec, const std::string& what) const {
    EXPECT_EQ(spec.tokens, plain.tokens) << what;
    EXPECT_EQ(spec.length, plain.length) << what;
    ASSERT_EQ(spec.probe.size(), plain.probe.size()) << what;
    // (no probe when the run filled the context: memcmp of two empty vectors' null data is undefined)
    if (!plain.probe.empty()) {
      EXPECT_EQ(std::memcmp(spec.probe.data(), plain.probe.data(), plain.probe.size() * sizeof(float)), 0)
          << what << ": the cache after the run differs from ordinary decoding's";
    }
  }

  std::vector<SamplerConfig> samplers() const {
    SamplerConfig greedy;
    SamplerConfig greedy_penalized;
    greedy_penalized.repetition_penalty = 1.3f;
    greedy_penalized.frequency_penalty = 0.2f;
    SamplerConfig sampled;
    sampled.temperature = 0.8f;
    sampled.top_k = 20;
    sampled.top_p = 0.9f;
    sampled.min_p = 0.05f;
    sampled.presence_penalty = 0.3f;
    sampled.seed = 42;
    SamplerConfig hot;  // flat: drafts are rejected often
    hot.temperature = 2.0f;
    hot.top_k = 0;
    hot.top_p = 1.0f;
    hot.seed = 7;
    return {greedy, greedy_penalized, sampled, hot};
  }

  Model model_;
};

TEST_P(Speculative, NgramDraftsGiveTheTokensOfOrdinaryDecoding) {
  auto e = engine();
  SpeculativeStats total;
  for (const auto& prompt : prompts())
    for (const SamplerConfig& sc : samplers())
      for (int draft_max : {1, 4, 8}) {
        const Outcome plain = decode(*e, prompt, 48, sc, nullptr);
        NgramDrafter d({draft_max, 3, 1});
        const Outcome spec = decode(*e, prompt, 48, sc, &d);
        expect_same(
            plain, spec,
            fmt::format("prompt of {}, T {}, draft_max {}", prompt.size(), sc.temperature, draft_max));
        EXPECT_EQ(d.size(), int64_t(spec.length));  // the drafter holds the sequence again
        EXPECT_EQ(plain.stats.drafted, 0);
        EXPECT_LE(spec.stats.steps, plain.stats.steps);
        total.drafted += spec.stats.drafted;
        total.accepted += spec.stats.accepted;
      }
  // Random models repeat themselves: some drafts are accepted, some rejected.
  EXPECT_GT(total.accepted, 0);
  EXPECT_LT(total.accepted, total.drafted);
}

// An engine whose steps are padded to buckets (as the GPU engine's
// micro-steps: 1, 2, 4, 8, ...): the drafts fill the buckets and never spill
// into the next one (draft_max 8: at most 8 rows, not 9 in a bucket of 16),
// and the tokens are still those of ordinary decoding.
class PaddedSteps final : public Engine {
 public:
  explicit PaddedSteps(Engine& e) : e_(e) {}
  void open(SeqId id, const SamplerConfig& s = {}) override { e_.open(id, s); }
  void truncate(SeqId id, int len) override { e_.truncate(id, len); }
  void close(SeqId id) override { e_.close(id); }
  bool is_open(SeqId id) const override { return e_.is_open(id); }
  int length(SeqId id) const override { return e_.length(id); }
  StepResult step(std::span<const BatchRow> rows) override {
    if (!rows.empty() && !rows[0].prompt) max_rows = std::max(max_rows, int(rows.size()));
    return e_.step(rows);
  }
  int64_t free_positions() const override { return e_.free_positions(); }
  int free_sequences() const override { return e_.free_sequences(); }
  const EngineInfo& info() const override { return e_.info(); }
  nlohmann::json stats() const override { return e_.stats(); }
  int step_rows(int n) const override {
    int b = 1;
    while (b < n) b *= 2;
    return b;
  }
  int max_rows = 0;  // the most rows of a decode step

 private:
  Engine& e_;
};

TEST_P(Speculative, DraftsFillAPaddedStepAndNeverSpillIntoTheNext) {
  auto inner = engine();
  PaddedSteps e(*inner);
  SpeculativeStats total;
  for (const auto& prompt : prompts())
    for (const SamplerConfig& sc : samplers()) {
      const Outcome plain = decode(e, prompt, 48, sc, nullptr);
      NgramDrafter d({8, 3, 1});
      e.max_rows = 0;
      const Outcome spec = decode(e, prompt, 48, sc, &d);
      expect_same(plain, spec, fmt::format("prompt of {}, T {}", prompt.size(), sc.temperature));
      EXPECT_LE(e.max_rows, 8) << "a draft of 8 runs 9 rows: a bucket of 16";
      total.drafted += spec.stats.drafted;
      total.accepted += spec.stats.accepted;
    }
  EXPECT_GT(total.accepted, 0);
}

TEST_P(Speculative, RightWrongAndPartlyRightDrafts) {
  for (int step_tokens : {64, 3}) {
    auto e = engine(step_tokens);
    for (const SamplerConfig& sc : samplers())
      for (const auto& prompt : prompts()) {
        const Outcome plain = decode(*e, prompt, 40, sc, nullptr);
        std::vector<int32_t> truth = prompt;
        truth.insert(truth.end(), plain.tokens.begin(), plain.tokens.end());
        for (int right : {-1, 0, 2}) {
          ScriptedDrafter d(truth, vocab(), 6, right);
          const Outcome spec = decode(*e, prompt, 40, sc, &d);
          const std::string what = fmt::format("prompt of {}, T {}, right {}, step {}", prompt.size(),
                                               sc.temperature, right, step_tokens);
          expect_same(plain, spec, what);
          EXPECT_GT(spec.stats.drafted, 0) << what;
          if (right < 0) {
            // Every draft accepted (drafts are capped at the draws left, so none is left unread).
            EXPECT_EQ(spec.stats.accepted, spec.stats.drafted) << what;
            EXPECT_LE(spec.stats.steps, step_tokens == 3 ? 14 : 7) << what;
          }
          if (right == 0) {
            EXPECT_EQ(spec.stats.accepted, 0) << what;
            EXPECT_EQ(spec.stats.steps, plain.stats.steps) << what;
          }
        }
      }
  }
}

// The engine's sampler drawing the rows (no logits leave the engine; what
// futr generate does when the draws need no history): the tokens of the host
// sampler's draws, with any sampler without penalties, and with drafts when
// greedy (right, wrong and n-gram drafts; steps capped at 3 rows too).
TEST_P(Speculative, EngineDrawsGiveTheHostSamplersTokens) {
  for (int step_tokens : {64, 3}) {
    auto e = engine(step_tokens);
    for (SamplerConfig sc : samplers()) {
      if (uses_history(sc)) {
        sc.repetition_penalty = 1.0f, sc.presence_penalty = 0.0f, sc.frequency_penalty = 0.0f;
        if (sc.temperature == 0.0f) continue;  // the plain greedy case is in the list already
      }
      for (const auto& prompt : prompts()) {
        const std::string what =
            fmt::format("prompt of {}, T {}, step {}", prompt.size(), sc.temperature, step_tokens);
        const Outcome host = decode(*e, prompt, 40, sc, nullptr);
        expect_same(host, decode(*e, prompt, 40, sc, nullptr, /*engine_draws=*/true), what);
        if (sc.temperature != 0.0f) continue;
        std::vector<int32_t> truth = prompt;
        truth.insert(truth.end(), host.tokens.begin(), host.tokens.end());
        for (int right : {-1, 0, 2}) {
          ScriptedDrafter d(truth, vocab(), 6, right);
          const Outcome spec = decode(*e, prompt, 40, sc, &d, true);
          expect_same(host, spec, what + fmt::format(", right {}", right));
          if (right < 0) {
            EXPECT_EQ(spec.stats.accepted, spec.stats.drafted) << what;
          }
        }
        NgramDrafter d({8, 3, 1});
        expect_same(host, decode(*e, prompt, 40, sc, &d, true), what + ", ngram");
      }
    }
  }
}

TEST_P(Speculative, RunsThatEndAtTheContext) {
  auto e = engine();
  const SamplerConfig greedy;
  for (const auto& prompt : prompts()) {
    const Outcome plain = decode(*e, prompt, 1000, greedy, nullptr);
    ASSERT_EQ(plain.length, kCtx);  // stopped with the context full: the last token drawn never ran
    EXPECT_TRUE(plain.probe.empty());
    std::vector<int32_t> truth = prompt;
    truth.insert(truth.end(), plain.tokens.begin(), plain.tokens.end());
    ScriptedDrafter right(truth, vocab(), 16, -1);
    expect_same(plain, decode(*e, prompt, 1000, greedy, &right), "always right, at the context");
    NgramDrafter ngram({16, 3, 1});
    expect_same(plain, decode(*e, prompt, 1000, greedy, &ngram), "n-gram, at the context");
  }
}

TEST_P(Speculative, TruncateLeavesTheSequenceAsIfTheRowsNeverRan) {
  EXPECT_EQ(engine()->rollback_unsupported_reason(), "");
  const auto a = random_tokens(20, 1), b = random_tokens(7, 2), c = random_tokens(5, 4);
  auto logits_after = [&](bool detour) {
    auto e = engine();
    e->open(1);
    std::vector<BatchRow> rows;
    auto step = [&](const std::vector<int32_t>& t, bool prompt) {
      rows.clear();
      const int pos0 = e->length(1);
      for (size_t i = 0; i < t.size(); ++i)
        rows.push_back({t[i], 1, pos0 + int(i), RowOutput::kLogits, -1, prompt});
      return e->step(rows);
    };
    step(a, true);
    if (detour) {
      step(b, false);  // drafts that will be rejected
      e->truncate(1, int(a.size()) + 2);
      step({b[2], b[3]}, false);  // some rows again over the dropped positions
      e->truncate(1, int(a.size()));
    }
    const StepResult r = step(c, false);
    EXPECT_EQ(e->length(1), int(a.size() + c.size()));
    return std::vector<float>(r.logits.ptr(), r.logits.ptr() + r.logits.numel());
  };
  const std::vector<float> straight = logits_after(false), detour = logits_after(true);
  ASSERT_EQ(straight.size(), detour.size());
  EXPECT_EQ(std::memcmp(straight.data(), detour.data(), straight.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(CpuEngines, Speculative, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// --- The acceptance rule on a synthetic vocabulary ---

// Chi-square of observed counts against n * p over the ids with p > 0; ids
// with p == 0 must never be seen.
double chi_square(const std::map<int32_t, int>& seen, const std::vector<std::pair<int32_t, double>>& p,
                  int n) {
  double chi2 = 0.0;
  std::map<int32_t, double> want;
  for (const auto& [id, q] : p) want[id] = q;
  for (const auto& [id, count] : seen)
    EXPECT_GT(want[id], 0.0) << "id " << id << " is outside the distribution";
  for (const auto& [id, q] : p) {
    const auto it = seen.find(id);
    const double o = it == seen.end() ? 0.0 : it->second, ex = q * n;
    chi2 += (o - ex) * (o - ex) / ex;
  }
  return chi2;
}

// The chi-square bound at significance 1e-6 for 7 degrees of freedom (the
// most here: 8 ids), 40.5: the draws come from fixed seeds, so a pass is a pass
// on every run.
constexpr double kChi2Bound = 40.5;

const std::vector<float> kLogits = {2.0f, 1.5f, 1.2f, 0.7f, 0.3f, -0.5f, -1.0f, -3.0f};

std::vector<SamplerConfig> rule_samplers() {
  SamplerConfig a;  // every filter on
  a.temperature = 0.9f;
  a.top_k = 6;
  a.top_p = 0.95f;
  a.min_p = 0.05f;
  a.seed = 1234;
  SamplerConfig b;  // plain softmax, hot
  b.temperature = 1.5f;
  b.top_k = 0;
  b.top_p = 1.0f;
  b.seed = 99;
  SamplerConfig c = a;  // with penalties over a history
  c.repetition_penalty = 1.4f;
  c.presence_penalty = 0.5f;
  c.frequency_penalty = 0.25f;
  c.seed = 5;
  return {a, b, c};
}

Sampler with_history(const SamplerConfig& sc) {
  Sampler s(sc);
  for (int32_t t : {0, 3, 0}) s.accept(t, true);
  s.accept(1, false);
  return s;
}

TEST(SpeculativeRule, AcceptsWithProbabilityPAndDrawsFromTheTarget) {
  constexpr int kDraws = 200000;
  for (const SamplerConfig& sc : rule_samplers())
    for (int32_t x : {0, 2, 4, 7}) {  // most likely, middle, tail, filtered out (with a)
      Sampler sampler = with_history(sc);
      const auto p = sampler.distribution(kLogits);
      double px = 0.0;
      for (const auto& [id, q] : p)
        if (id == x) px = q;
      int accepted = 0;
      std::map<int32_t, int> seen, rejected;
      for (int i = 0; i < kDraws; ++i) {
        const DraftVerdict v = verify_draft(sampler, kLogits, x);
        ASSERT_EQ(v.accepted, v.token == x);
        accepted += v.accepted;
        ++seen[v.token];
        if (!v.accepted) ++rejected[v.token];
      }
      const std::string what =
          fmt::format("T {} penalties {} draft {} p(x) {:.4f}", sc.temperature, sc.repetition_penalty, x, px);
      // P(accept) = p(x), within 5 standard deviations.
      const double sd = std::sqrt(std::max(px * (1 - px), 1e-12) / kDraws);
      EXPECT_NEAR(double(accepted) / kDraws, px, 5 * sd + 1e-9) << what;
      // The tokens: the target distribution.
      EXPECT_LT(chi_square(seen, p, kDraws), kChi2Bound) << what;
      // After a rejection: the residual norm(max(0, p - delta_x)) = p without x, renormalized.
      if (px < 1.0 && kDraws - accepted > 1000) {
        std::vector<std::pair<int32_t, double>> residual;
        for (const auto& [id, q] : p)
          if (id != x) residual.emplace_back(id, q / (1.0 - px));
        EXPECT_LT(chi_square(rejected, residual, kDraws - accepted), kChi2Bound) << what;
      }
    }
}

// The textbook rule, with its own coin and residual draw, has the same output
// distribution (the comparison the rule above is a coupling of).
TEST(SpeculativeRule, TheTextbookRuleAgreesInDistribution) {
  constexpr int kDraws = 200000;
  for (const SamplerConfig& sc : rule_samplers()) {
    const Sampler sampler = with_history(sc);
    const auto p = sampler.distribution(kLogits);
    std::mt19937_64 rng(sc.seed);
    auto u01 = [&] { return double(rng() >> 11) * 0x1.0p-53; };
    const int32_t x = 1;
    double px = 0.0;
    for (const auto& [id, q] : p)
      if (id == x) px = q;
    std::map<int32_t, int> seen;
    for (int i = 0; i < kDraws; ++i) {
      if (u01() < px) {
        ++seen[x];
        continue;
      }
      double u = u01() * (1.0 - px), cum = 0.0;  // residual: p without x
      int32_t y = -1;
      for (const auto& [id, q] : p) {
        if (id == x) continue;
        cum += q;
        y = id;
        if (u < cum) break;
      }
      ++seen[y];
    }
    EXPECT_LT(chi_square(seen, p, kDraws), kChi2Bound) << "T " << sc.temperature;
  }
}

TEST(SpeculativeRule, GreedyAcceptsExactlyTheArgmax) {
  Sampler s(SamplerConfig{});
  for (int32_t x = -1; x < 8; ++x) {
    const DraftVerdict v = verify_draft(s, kLogits, x);
    EXPECT_EQ(v.token, 0);
    EXPECT_EQ(v.accepted, x == 0);
  }
}

TEST(SpeculativeRule, ModesParseAndTheDrafterFollows) {
  EXPECT_EQ(parse_speculative_mode("ngram"), SpeculativeMode::kNgram);
  EXPECT_EQ(parse_speculative_mode("off"), SpeculativeMode::kOff);
  EXPECT_FUTR_ERROR(parse_speculative_mode("eagle"), "ngram | off");
  EXPECT_EQ(make_drafter({SpeculativeMode::kOff, 8}), nullptr);
  EXPECT_NE(make_drafter({SpeculativeMode::kNgram, 8}), nullptr);
  EXPECT_FUTR_ERROR(make_drafter({SpeculativeMode::kNgram, 0}), "--draft-max");
}

}  // namespace
}  // namespace futr::runtime
