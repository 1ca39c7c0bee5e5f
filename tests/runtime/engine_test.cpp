// The Engine contract (runtime/engine.h) on every CPU engine, built through
// make_engine(): the FP32 reference and the quantized reference (INT4 weights
// with the rotated INT4 cache; BF16 weights with the plain INT4 cache; FP8
// for stats()).
//
//   - several sequences in one step (ragged lengths, prompt and decode rows
//     interleaved, sequences in any order) give bit for bit what each
//     sequence gives alone on a fresh engine;
//   - open / truncate / close, reopening an id, free_positions() and
//     free_sequences();
//   - every misuse throws futr::Error naming the problem and changes nothing:
//     the state and every later result are those of an engine that never saw it;
//   - kToken rows draw with the sequence's sampler, kLogprob rows return
//     log softmax[target] in double;
//   - SequenceRunner splits long prompts into steps of max_step_tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "../cpu_engine/quant_model.h"
#include "../cpu_engine/tiny_model.h"
#include "core/error.h"
#include "cpu_engine/engine.h"
#include "quantize/quantize.h"
#include "runtime/engine.h"
#include "runtime/perplexity.h"
#include "support/compare.h"
#include "support/expect_error.h"
#include "support/tolerances.h"

namespace futr::runtime {
namespace {

struct EngineCase {
  const char* name;
  bool quant_model;  // test::quant_config() (INT4-compatible shapes) or test::tiny_config()
  WeightFormat weights;
  KvFormat kv;
};

const EngineCase kCases[] = {
    {"fp32", false, WeightFormat::kFp32, KvFormat::kFp32},
    {"int4_int4rot", true, WeightFormat::kInt4, KvFormat::kInt4Rot},
    {"bf16_int4", true, WeightFormat::kBf16, KvFormat::kInt4},
};

constexpr int kCtx = 48;
constexpr int kMaxSeqs = 3;
constexpr int kStepTokens = 40;

class EngineContract : public ::testing::TestWithParam<EngineCase> {
 protected:
  EngineContract()
      : model_(test::random_model(GetParam().quant_model ? test::quant_config() : test::tiny_config(), 7)) {}

  RuntimeConfig config(int max_step_tokens = kStepTokens) const {
    RuntimeConfig c;
    c.engine = EngineKind::kCpu;
    c.weights = GetParam().weights;
    c.kv = GetParam().kv;
    c.ctx = kCtx;
    c.max_seqs = kMaxSeqs;
    c.max_step_tokens = max_step_tokens;
    c.threads = 2;
    return c;
  }
  std::unique_ptr<Engine> engine(int max_step_tokens = kStepTokens) const {
    return make_engine(model_, config(max_step_tokens));
  }
  std::vector<int32_t> random_tokens(int n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(model_.config.vocab));
    return t;
  }
  int vocab() const { return model_.config.vocab; }

  Model model_;
};

// Rows of `tokens` for `seq` at positions from `pos0`, all with output `out`
// except the rows before `first_out` (kNone).
std::vector<BatchRow> rows_of(SeqId seq, const std::vector<int32_t>& tokens, int pos0, RowOutput out,
                              int first_out = 0) {
  std::vector<BatchRow> rows;
  for (size_t i = 0; i < tokens.size(); ++i)
    rows.push_back(
        {tokens[i], seq, pos0 + int(i), int(i) >= first_out ? out : RowOutput::kNone, (tokens[i] + 1) % 50});
  return rows;
}

void append(std::vector<BatchRow>& a, const std::vector<BatchRow>& b) {
  a.insert(a.end(), b.begin(), b.end());
}

// The logits rows of `r` that belong to rows [begin, end) of `rows`.
std::vector<float> logits_of(const StepResult& r, std::span<const BatchRow> rows, size_t begin, size_t end) {
  size_t k = 0;
  std::vector<float> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].out != RowOutput::kLogits) continue;
    if (i >= begin && i < end)
      out.insert(out.end(), r.logits.row(int64_t(k)), r.logits.row(int64_t(k)) + r.logits.dim(1));
    ++k;
  }
  return out;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A scenario: per step, per sequence (in batch order), the tokens it feeds and
// from which of them logits are wanted.
struct Piece {
  SeqId seq;
  int n;          // tokens fed
  int first_out;  // rows [first_out, n) want logits
};

TEST_P(EngineContract, MultiSequenceStepsEqualSingleSequenceRuns) {
  const std::vector<std::vector<Piece>> steps = {
      {{10, 7, 6}, {11, 13, 0}, {12, 3, 3}},  // three ragged prompts (12: no output)
      {{12, 5, 2}, {10, 1, 0}, {11, 1, 0}},   // 12 continues its prompt, 10 and 11 decode
      {{11, 1, 0}, {12, 1, 0}},               // 10 sits out
      {{10, 9, 4}, {12, 1, 0}, {11, 2, 1}},
  };
  std::map<SeqId, std::vector<int32_t>> stream;
  for (SeqId s : {10, 11, 12}) stream[s] = random_tokens(40, uint32_t(s));

  // Batched: all sequences in one engine.
  std::map<SeqId, std::vector<float>> batched, alone;
  {
    auto e = engine();
    std::map<SeqId, int> pos;
    for (SeqId s : {10, 11, 12}) e->open(s);
    for (const auto& step : steps) {
      std::vector<BatchRow> rows;
      std::vector<std::pair<size_t, size_t>> spans;
      for (const Piece& p : step) {
        const std::vector<int32_t> t(stream[p.seq].begin() + pos[p.seq],
                                     stream[p.seq].begin() + pos[p.seq] + p.n);
        spans.emplace_back(rows.size(), rows.size() + size_t(p.n));
        append(rows, rows_of(p.seq, t, pos[p.seq], RowOutput::kLogits, p.first_out));
        pos[p.seq] += p.n;
      }
      const StepResult r = e->step(rows);
      for (size_t i = 0; i < step.size(); ++i) {
        const auto l = logits_of(r, rows, spans[i].first, spans[i].second);
        batched[step[i].seq].insert(batched[step[i].seq].end(), l.begin(), l.end());
      }
    }
    for (SeqId s : {10, 11, 12}) EXPECT_EQ(e->length(s), pos[s]);
  }
  // Alone: each sequence on a fresh engine, the same pieces, one per step.
  for (SeqId s : {10, 11, 12}) {
    auto e = engine();
    e->open(s);
    int pos = 0;
    for (const auto& step : steps)
      for (const Piece& p : step) {
        if (p.seq != s) continue;
        const std::vector<int32_t> t(stream[s].begin() + pos, stream[s].begin() + pos + p.n);
        const auto rows = rows_of(s, t, pos, RowOutput::kLogits, p.first_out);
        const StepResult r = e->step(rows);
        const auto l = logits_of(r, rows, 0, rows.size());
        alone[s].insert(alone[s].end(), l.begin(), l.end());
        pos += p.n;
      }
  }
  for (SeqId s : {10, 11, 12}) {
    EXPECT_FALSE(batched[s].empty());
    EXPECT_TRUE(bit_equal(batched[s], alone[s]))
        << "sequence " << s << ": " << test::compare(batched[s], alone[s]).rel_l2;
  }
}

TEST_P(EngineContract, OpenTruncateCloseAndFreeCounts) {
  auto e = engine();
  const EngineInfo& info = e->info();
  EXPECT_EQ(info.name, "cpu");
  EXPECT_EQ(info.ctx, kCtx);
  EXPECT_EQ(info.max_seqs, kMaxSeqs);
  EXPECT_EQ(info.max_step_tokens, kStepTokens);
  EXPECT_EQ(info.vocab, vocab());
  EXPECT_EQ(info.weights, GetParam().weights);
  EXPECT_EQ(info.kv, GetParam().kv);
  EXPECT_EQ(e->free_sequences(), kMaxSeqs);
  EXPECT_EQ(e->free_positions(), int64_t(kMaxSeqs) * kCtx);

  const auto t = random_tokens(20, 3);
  e->open(5);
  EXPECT_TRUE(e->is_open(5));
  EXPECT_FALSE(e->is_open(6));
  EXPECT_EQ(e->length(5), 0);
  EXPECT_EQ(e->free_sequences(), kMaxSeqs - 1);
  const auto rows = rows_of(5, t, 0, RowOutput::kLogits, 19);
  const StepResult first = e->step(rows);
  EXPECT_EQ(e->length(5), 20);
  EXPECT_EQ(e->free_positions(), int64_t(kMaxSeqs) * kCtx - 20);
  EXPECT_EQ(e->stats()["kv_positions_used"].get<int64_t>(), 20);
  EXPECT_EQ(e->stats()["sequences_open"].get<int>(), 1);

  // Truncate and re-run the tail: the same rows at the same positions.
  e->truncate(5, 12);
  EXPECT_EQ(e->length(5), 12);
  EXPECT_EQ(e->free_positions(), int64_t(kMaxSeqs) * kCtx - 12);
  const std::vector<int32_t> tail(t.begin() + 12, t.end());
  const StepResult again = e->step(rows_of(5, tail, 12, RowOutput::kLogits, 7));
  if (GetParam().weights == WeightFormat::kFp32) {
    // FP32: the same computation up to the summation order of a different chunking.
    EXPECT_LT(test::compare(again.logits.data, first.logits.data).rel_l2, test::tol::kCpuChunking);
  }
  e->truncate(5, 0);
  EXPECT_EQ(e->length(5), 0);

  // Close frees everything; a reopened id starts empty and repeats the first run bit for bit.
  e->close(5);
  EXPECT_FALSE(e->is_open(5));
  EXPECT_EQ(e->free_sequences(), kMaxSeqs);
  EXPECT_EQ(e->free_positions(), int64_t(kMaxSeqs) * kCtx);
  e->open(6);  // takes the first slot
  e->open(5);  // another slot now
  EXPECT_EQ(e->length(5), 0);
  const StepResult reopened = e->step(rows);
  EXPECT_TRUE(bit_equal(reopened.logits.data, first.logits.data));

  // All sequences open: no more, until one closes.
  e->open(7);
  EXPECT_EQ(e->free_sequences(), 0);
  EXPECT_FUTR_ERROR(e->open(8), "all 3 sequences are in use");
  e->close(6);
  e->open(8);
  EXPECT_EQ(e->free_positions(), int64_t(kMaxSeqs) * kCtx - 20);
}

TEST_P(EngineContract, EveryMisuseThrowsAndChangesNothing) {
  // Two engines see the same valid calls; `e` also sees every misuse.
  auto e = engine(), ref = engine();
  const auto a = random_tokens(30, 1), b = random_tokens(30, 2);
  for (Engine* x : {e.get(), ref.get()}) {
    x->open(1);
    x->open(2, {.temperature = 0.8f, .top_k = 5, .top_p = 0.9f, .seed = 3});
    x->step(rows_of(1, std::vector<int32_t>(a.begin(), a.begin() + 5), 0, RowOutput::kNone));
    x->step(rows_of(2, std::vector<int32_t>(b.begin(), b.begin() + 3), 0, RowOutput::kToken, 2));
  }
  const auto snapshot = [&] { return e->stats().dump(); };
  const std::string before = snapshot();
  const BatchRow ok1{a[5], 1, 5, RowOutput::kLogits};  // a valid row, first in most bad batches
  const int V = vocab();
  auto bad_step = [&](std::vector<BatchRow> rows, const std::string& msg) {
    EXPECT_FUTR_ERROR(e->step(rows), msg);
    EXPECT_EQ(snapshot(), before) << msg;
    EXPECT_EQ(e->length(1), 5);
    EXPECT_EQ(e->length(2), 3);
  };
  bad_step({ok1, {b[3], 9, 0}}, "sequence 9 is not open");
  bad_step({ok1, {-1, 2, 3}}, "token id -1 is outside the vocabulary");
  bad_step({ok1, {V, 2, 3}}, fmt::format("token id {} is outside the vocabulary", V));
  bad_step({ok1, {b[3], 2, 2}}, "its first row must be at position 3, not 2");
  bad_step({ok1, {b[3], 2, 4}}, "its first row must be at position 3, not 4");
  bad_step({ok1, {b[3], 2, 3}, {b[4], 2, 5}}, "at position 5 follows position 3");
  bad_step({ok1, {b[3], 2, 3}, {a[6], 1, 6}}, "sequence 1 has rows earlier in this batch");
  bad_step({ok1, {b[3], 2, 3, RowOutput::kLogprob, V}}, "log-probability target");
  bad_step({ok1, {b[3], 2, 3, RowOutput::kLogprob, -1}}, "log-probability target");
  bad_step({ok1, {b[3], 2, 3, static_cast<RowOutput>(9)}}, "invalid output kind");
  bad_step(rows_of(2, random_tokens(kStepTokens + 1, 4), 3, RowOutput::kNone),
           "more than the engine's max_step_tokens");
  {
    // Past the context: an engine whose step takes the rows, whose context does not.
    auto e2 = engine(kCtx + 8);
    e2->open(1);
    e2->step(rows_of(1, std::vector<int32_t>(a.begin(), a.begin() + 5), 0, RowOutput::kNone));
    const std::string s = e2->stats().dump();
    EXPECT_FUTR_ERROR(e2->step(rows_of(1, random_tokens(kCtx - 4, 5), 5, RowOutput::kLogits)),
                      "5 positions + 44 rows exceed the context of 48 positions");
    EXPECT_EQ(e2->stats().dump(), s);
    EXPECT_EQ(e2->length(1), 5);
  }
  EXPECT_FUTR_ERROR(e->open(1), "sequence 1 is already open");
  EXPECT_FUTR_ERROR(e->open(4, {.temperature = -1.0f}), "--temperature");
  EXPECT_FUTR_ERROR(e->truncate(9, 0), "sequence 9 is not open");
  EXPECT_FUTR_ERROR(e->truncate(1, 6), "cannot truncate sequence 1 of 5 positions to 6");
  EXPECT_FUTR_ERROR(e->truncate(1, -1), "cannot truncate");
  EXPECT_FUTR_ERROR(e->close(9), "sequence 9 is not open");
  EXPECT_FUTR_ERROR(e->length(9), "sequence 9 is not open");
  EXPECT_EQ(snapshot(), before);
  EXPECT_EQ(e->free_sequences(), kMaxSeqs - 2);
  EXPECT_FALSE(e->is_open(4));

  // Later results (logits, sampled tokens: the sampler's state too) equal the clean engine's.
  std::vector<BatchRow> rows =
      rows_of(1, std::vector<int32_t>(a.begin() + 5, a.begin() + 12), 5, RowOutput::kLogits, 3);
  append(rows, rows_of(2, std::vector<int32_t>(b.begin() + 3, b.begin() + 9), 3, RowOutput::kToken));
  const StepResult r1 = e->step(rows), r2 = ref->step(rows);
  EXPECT_TRUE(bit_equal(r1.logits.data, r2.logits.data));
  EXPECT_EQ(r1.tokens, r2.tokens);
  EXPECT_EQ(r1.tokens.size(), 6u);
}

TEST_P(EngineContract, TokenAndLogprobRows) {
  auto e = engine(), ref = engine();
  const auto t = random_tokens(12, 9);
  const SamplerConfig sampled{.temperature = 0.9f, .top_k = 0, .top_p = 0.95f, .seed = 42};
  e->open(1);           // greedy (the default sampler)
  e->open(2, sampled);  // seeded
  e->open(3);           // log-probabilities
  for (SeqId s : {1, 2, 3}) ref->open(s);
  std::vector<BatchRow> rows, ref_rows;
  append(rows, rows_of(1, t, 0, RowOutput::kToken, 8));
  append(rows, rows_of(2, t, 0, RowOutput::kToken, 8));
  append(rows, rows_of(3, t, 0, RowOutput::kLogprob, 4));
  for (BatchRow r : rows) {
    if (r.out != RowOutput::kNone) r.out = RowOutput::kLogits;
    ref_rows.push_back(r);
  }
  const StepResult r = e->step(rows), lr = ref->step(ref_rows);
  ASSERT_EQ(r.tokens.size(), 8u);
  ASSERT_EQ(r.logprobs.size(), 8u);
  EXPECT_TRUE(r.logits.empty());
  ASSERT_EQ(lr.logits.dim(0), 16);
  const size_t V = size_t(vocab());
  Sampler s2(sampled);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.tokens[size_t(i)], argmax({lr.logits.row(i), V}));
    EXPECT_EQ(r.tokens[size_t(4 + i)], s2.sample({lr.logits.row(4 + i), V}));
  }
  for (int i = 0; i < 8; ++i) {
    const int row = 2 * 12 + 4 + i;
    EXPECT_EQ(r.logprobs[size_t(i)], -token_nll({lr.logits.row(8 + i), V}, rows[size_t(row)].target));
    EXPECT_LT(r.logprobs[size_t(i)], 0.0);
  }
}

TEST_P(EngineContract, SequenceRunnerSplitsLongPrompts) {
  auto e = engine(/*max_step_tokens=*/8), whole = engine();
  const auto t = random_tokens(21, 4);
  Tensor split_logits;
  {
    SequenceRunner seq(*e, 3);
    EXPECT_EQ(seq.capacity(), kCtx);
    split_logits = seq.eval(t, 15);  // steps of 8, 8, 5 rows
    EXPECT_EQ(seq.position(), 21);
    EXPECT_EQ(split_logits.dim(0), 6);
    EXPECT_EQ(split_logits.dim(1), vocab());
    // Too long for the rest of the context: refused before the first step.
    EXPECT_FUTR_ERROR(seq.eval(random_tokens(kCtx - 20, 5), 0), "context length exceeded");
    EXPECT_EQ(seq.position(), 21);
    seq.reset();
    EXPECT_EQ(seq.position(), 0);
  }
  EXPECT_FALSE(e->is_open(3));  // the runner closed it
  // Bit for bit the steps a caller would make by hand.
  auto manual = engine(8);
  manual->open(0);
  std::vector<float> by_hand;
  for (int a = 0; a < 21; a += 8) {
    const int b = std::min(21, a + 8);
    auto rows = rows_of(0, std::vector<int32_t>(t.begin() + a, t.begin() + b), a, RowOutput::kLogits,
                        std::max(0, 15 - a));
    for (BatchRow& row : rows) row.prompt = true;  // as SequenceRunner::eval marks them (the prompt path)
    const StepResult r = manual->step(rows);
    by_hand.insert(by_hand.end(), r.logits.data.begin(), r.logits.data.end());
  }
  EXPECT_TRUE(bit_equal(split_logits.data, by_hand));
  if (GetParam().weights == WeightFormat::kFp32) {
    SequenceRunner one(*whole);
    const Tensor w = one.eval(t, 15);  // one step
    EXPECT_LT(test::compare(split_logits.data, w.data).rel_l2, test::tol::kCpuChunking);
  }
}

INSTANTIATE_TEST_SUITE_P(CpuEngines, EngineContract, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(EngineStats, Fp8CountersAndKvUse) {
  const Model m = test::random_model(test::quant_config(), 3);
  // FP8 on load calibrates on text (the random model has no tokenizer): the
  // engine itself, with uncalibrated FP8 weights.
  cpu::QuantizeOptions qo;
  qo.format = WeightFormat::kFp8;
  cpu::CpuEngineOptions o;
  o.weights = WeightFormat::kFp8;
  o.kv = KvFormat::kBf16;
  o.ctx = 32;
  o.max_seqs = 2;
  o.threads = 2;
  auto e = std::make_unique<cpu::CpuEngine>(
      m, std::make_shared<quant::QuantizedWeights>(cpu::quantize_model(m, qo, {})), o);
  nlohmann::json s = e->stats();
  ASSERT_TRUE(s.contains("fp8")) << s.dump();
  EXPECT_EQ(s["fp8"]["calls"].get<uint64_t>(), 0u);
  EXPECT_EQ(s["fp8"]["policy"], "clamp");
  e->open(0);
  e->open(1);
  std::vector<BatchRow> rows = rows_of(0, {1, 2, 3, 4}, 0, RowOutput::kNone);
  append(rows, rows_of(1, {5, 6}, 0, RowOutput::kLogits));
  e->step(rows);
  s = e->stats();
  EXPECT_GT(s["fp8"]["calls"].get<uint64_t>(), 0u);
  EXPECT_EQ(s["kv_positions_used"].get<int64_t>(), 6);
  EXPECT_EQ(s["kv_positions_free"].get<int64_t>(), 64 - 6);
  EXPECT_EQ(s["sequences_open"].get<int>(), 2);
  // No FP8, no counters; auto KV is bf16 with quantized weights.
  RuntimeConfig c;
  c.engine = EngineKind::kCpu;
  c.weights = WeightFormat::kInt4;
  c.ctx = 32;
  auto i4 = make_engine(m, c);
  EXPECT_EQ(i4->info().kv, KvFormat::kBf16);
  EXPECT_FALSE(i4->stats().contains("fp8"));
}

// A vocabulary padded beyond the tokenizer (LM-head rows no token has): kToken
// rows never draw a padded id, greedy or sampled, on the FP32 and the
// quantized references, although those ids have the largest logits.
TEST(EngineSampling, PaddedVocabularyIsNeverSampled) {
  constexpr int kTokenizer = 90;  // of vocab 97 (tiny_config) / 101 (quant_config)
  for (const bool quant : {false, true}) {
    const Model m =
        test::padded_vocab_model(quant ? test::quant_config() : test::tiny_config(), 21, kTokenizer);
    ASSERT_EQ(m.sampleable_vocab(), kTokenizer);
    RuntimeConfig c;
    c.engine = EngineKind::kCpu;
    c.weights = quant ? WeightFormat::kInt4 : WeightFormat::kFp32;
    c.ctx = 32;
    c.max_seqs = 3;
    c.threads = 2;
    auto e = make_engine(m, c);
    std::mt19937 rng(5);
    std::vector<int32_t> t(16);
    for (auto& x : t) x = int32_t(rng() % kTokenizer);
    e->open(1);  // logits, to show the test has teeth
    e->open(2);  // greedy
    e->open(3, {.temperature = 1.5f, .top_k = 0, .top_p = 1.0f, .seed = 9});
    std::vector<BatchRow> rows;
    append(rows, rows_of(1, t, 0, RowOutput::kLogits));
    append(rows, rows_of(2, t, 0, RowOutput::kToken));
    append(rows, rows_of(3, t, 0, RowOutput::kToken));
    const StepResult r = e->step(rows);
    int padded_argmax = 0;
    for (int i = 0; i < int(t.size()); ++i)
      padded_argmax += argmax({r.logits.row(i), size_t(m.config.vocab)}) >= kTokenizer;
    EXPECT_GE(padded_argmax, int(t.size()) / 2) << "the padded rows should dominate the unmasked logits";
    ASSERT_EQ(r.tokens.size(), 2 * t.size());
    for (int32_t tok : r.tokens) EXPECT_LT(tok, kTokenizer) << (quant ? "int4" : "fp32");
    // The greedy draw is the argmax over the tokenizer's ids.
    for (int i = 0; i < int(t.size()); ++i)
      EXPECT_EQ(r.tokens[size_t(i)], argmax({r.logits.row(i), size_t(kTokenizer)}));
  }
  // Without a tokenizer (or one as large as the vocabulary) every id can be drawn.
  EXPECT_EQ(test::random_model(test::tiny_config(), 1).sampleable_vocab(), test::tiny_config().vocab);
}

// NaN logits (here: a NaN in one LM-head row) are a clear error on a kToken
// row, never a silent token; the engine stays usable for other sequences.
TEST(EngineSampling, NonFiniteLogitsAreAnError) {
  Model m = test::random_model(test::tiny_config(), 4);
  const int64_t H = m.config.hidden;
  m.weights.lm_head.data[size_t(17 * H + 3)] = NAN;  // id 17's logit is NaN at every position
  auto e = make_engine(m, {.engine = EngineKind::kCpu, .ctx = 16, .max_seqs = 2, .threads = 2});
  for (const SamplerConfig& sc : {SamplerConfig{.temperature = 0.0f},
                                  SamplerConfig{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1}}) {
    e->open(1, sc);
    const std::vector<int32_t> t = {1, 2, 3};
    EXPECT_FUTR_ERROR(e->step(rows_of(1, t, 0, RowOutput::kToken, 2)), "logit of id 17 is nan");
    e->close(1);
  }
  // kLogits rows hand the NaN back as is (the caller checks, e.g. the CLI names the step).
  e->open(2);
  const StepResult r = e->step(rows_of(2, {5}, 0, RowOutput::kLogits));
  EXPECT_TRUE(std::isnan(r.logits.row(0)[17]));
}

TEST(EngineFactory, BadChoicesAreErrors) {
  const Model m = test::random_model(test::tiny_config(), 3);
  RuntimeConfig c;
  c.engine = EngineKind::kCpu;
  c.ctx = 16;
  c.kv_block = 16;
  EXPECT_FUTR_ERROR(make_engine(m, c), "--kv-block applies to --kv int4-rot");
  c.kv_block = 0;
  c.engine = EngineKind::kGpu;
  EXPECT_FUTR_ERROR(make_engine(m, c), "--backend gpu");
  c.engine = EngineKind::kCpu;
  c.max_seqs = -1;
  EXPECT_FUTR_ERROR(make_engine(m, c), "sequences");
  c.max_seqs = 0;  // the engine's default: one sequence on the CPU
  EXPECT_EQ(make_engine(m, c)->info().max_seqs, 1);
  c.max_seqs = 1;
  c.max_step_tokens = 0;
  EXPECT_FUTR_ERROR(make_engine(m, c), "tokens per step");
  c.max_step_tokens = 8;
  c.quant_given = true;
  EXPECT_FUTR_ERROR(make_engine(m, c), "need --weights int4");
}

}  // namespace
}  // namespace futr::runtime
