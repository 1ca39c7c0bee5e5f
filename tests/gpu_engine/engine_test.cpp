// The GPU engine (src/gpu_engine/engine.h) against the CPU quantized reference
// (cpu::CpuEngine) on SmolLM2-135M with the same INT4 (RTN) weights, for every
// KV format (bf16, int4, int4-rot):
//
//   - the logits of every position of a ~200-token prompt. The yardstick is
//     the reference's own spread: the CPU engine run on the same tokens one
//     position per step instead of one chunk (only the FP32 summation order of
//     its GEMMs changes) differs from itself by a mean relative L2 of ~1e-2
//     per row with the BF16 cache and ~0.2 with the INT4 mirror (requantizing
//     every K/V row turns one-ulp BF16 differences into whole INT4 steps). The
//     GPU must stay within kGpuEngineVsSpread times that spread (mean over
//     rows), and agree on the argmax about as often as the reference does with
//     itself;
//   - four sequences of different lengths in one step (prompt and decode rows
//     mixed), each against the reference run alone;
//   - the Engine contract's bookkeeping: lengths, truncate and re-run,
//     free_positions, misuse refused (shared plan_batch checks);
//   - CUDA graph replay against the same launches run eagerly (graphs off):
//     bitwise equal logits, tokens and log-probabilities, over micro-steps of
//     every bucket (1..32 rows, padded), each bucket replayed several times;
//   - what comes back without logits: greedy tokens (the GPU's argmax) equal
//     runtime::argmax of the same engine's logits, log-probabilities equal
//     -token_nll of them within tol::kLogitsReduce, and a temperature sampler
//     draws what a host Sampler with the same seed draws, on the GPU
//     (top-k rows: sm90_sample_topk, no logits copied) and on the host (no
//     top-k cut);
//   - synthetic models (model/synthetic.h: tiny, Llama-3.2-1B, 3.1-8B, 3.1-70B
//     shapes, weights drawn on the device): 32 sequences step together with
//     finite logits, greedy tokens are the logits' argmax, graph == eager;
//   - the tiny Qwen2, Mistral and Llama-2 (SentencePiece) checkpoints of
//     tests/data/hf_tiny loaded from their directories: prompt logits
//     within fixed bounds (two layers: the spread is no yardstick there),
//     greedy tokens never on padded LM-head rows;
//   - perplexity over windows of the committed WikiText excerpt: the GPU as
//     close to the reference as the reference run one position per step is
//     (times kGpuEngineVsSpread, at least 0.2%); the |delta ppl| <= 0.001
//     target is measured on 32,768 tokens by scripts/gpu-check.sh.
// Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "cpu_engine/engine.h"
#include "formats/loader.h"
#include "gpu_engine/engine.h"
#include "model/synthetic.h"
#include "quantize/quantize.h"
#include "runtime/perplexity.h"
#include "support/compare.h"
#include "support/crash_backtrace.h"
#include "support/data_file.h"
#include "support/default_model.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/qwen2_style.h"
#include "support/random.h"
#include "support/scratch_dir.h"
#include "support/tiny_families.h"
#include "support/tolerances.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

using runtime::BatchRow;
using runtime::RowOutput;

std::unique_ptr<runtime::Engine> make_gpu(KvFormat kv, int ctx, int seqs, bool graphs = true, bool pdl = true,
                                          bool fuse_norm = false) {
  gpu::GpuEngineOptions o;
  o.graphs = graphs;
  o.pdl = pdl;
  o.fuse_norm = fuse_norm;
  o.kv = kv;
  o.kv_block = 64;
  o.ctx = ctx;
  o.max_seqs = seqs;
  o.max_step_tokens = 4096;
  return std::make_unique<gpu::GpuEngine>(test::default_model(), test::default_model_int4(), o);
}

std::unique_ptr<runtime::Engine> make_cpu(KvFormat kv, int ctx, int seqs) {
  cpu::CpuEngineOptions o;
  o.weights = WeightFormat::kInt4;
  o.kv = kv;
  o.kv_block = 64;
  o.ctx = ctx;
  o.max_seqs = seqs;
  o.max_step_tokens = 4096;
  return std::make_unique<cpu::CpuEngine>(test::default_model(), test::default_model_int4(), o);
}

// The logits of every row of `tokens` run as sequence `id` from position 0,
// in one step. `prompt` marks the rows as given tokens (BatchRow::prompt):
// the CPU reference then runs them as one chunk, whose rounding differs from
// one position per step (the yardstick below); unmarked rows are decode rows,
// which the CPU engines run exactly as one position per step.
Tensor all_logits(runtime::Engine& e, runtime::SeqId id, std::span<const int32_t> tokens,
                  bool prompt = false) {
  std::vector<BatchRow> rows;
  for (size_t i = 0; i < tokens.size(); ++i) {
    rows.push_back({tokens[i], id, int32_t(i), RowOutput::kLogits, -1});
    rows.back().prompt = prompt;
  }
  return e.step(rows).logits;
}

std::map<std::string, double>& worst() {
  static std::map<std::string, double> w;
  return w;
}

struct Deviation {
  double mean_rel = 0, max_rel = 0;  // relative L2 per row, mean and max over rows
  double argmax_agree = 0;           // fraction of rows with the same argmax
};

Deviation deviation(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.dim(0), want.dim(0));
  const size_t V = size_t(want.dim(1));
  Deviation d;
  for (int64_t r = 0; r < want.dim(0); ++r) {
    const std::span<const float> g(got.row(r), V), w(want.row(r), V);
    const test::ErrorStats e = test::compare(g, w);
    EXPECT_EQ(e.non_finite, 0u) << "row " << r;
    d.mean_rel += e.rel_l2 / double(want.dim(0));
    d.max_rel = std::max(d.max_rel, e.rel_l2);
    d.argmax_agree += (std::max_element(g.begin(), g.end()) - g.begin() ==
                       std::max_element(w.begin(), w.end()) - w.begin()) /
                      double(want.dim(0));
  }
  return d;
}

// The logits of `tokens` on the CPU reference one position per step.
Tensor stepwise_logits(runtime::Engine& e, runtime::SeqId id, std::span<const int32_t> tokens) {
  Tensor out({int64_t(tokens.size()), int64_t(e.info().vocab)});
  for (size_t i = 0; i < tokens.size(); ++i) {
    const BatchRow row{tokens[i], id, int32_t(i), RowOutput::kLogits, -1};
    const Tensor z = e.step(std::span<const BatchRow>(&row, 1)).logits;
    std::memcpy(out.row(int64_t(i)), z.ptr(), size_t(z.numel()) * sizeof(float));
  }
  return out;
}

// How far below the reference's own argmax agreement `self` (over `rows`
// rows) another rounding order's agreement may fall: the table's margin, or
// three standard deviations of the difference of two agreement fractions
// measured on `rows` rows each (sqrt(2 p (1 - p) / rows)), whichever is
// larger. Why: with the INT4 mirror p is 0.6-0.85, and on a few dozen rows the
// fraction alone moves by 0.1 between two equally good orders.
double argmax_margin(double self, int64_t rows) {
  const double p = std::clamp(self, 0.0, 1.0);
  return std::max(test::tol::kGpuEngineArgmaxMargin, 3.0 * std::sqrt(2.0 * p * (1.0 - p) / double(rows)));
}

// GPU vs reference within kGpuEngineVsSpread x the reference's own spread
// (kGpuEngineVsSpreadInt4Kv with the INT4 mirror), argmax agreement within
// argmax_margin() of the reference's own.
void expect_within_spread(const Tensor& gpu, const Tensor& ref, const Tensor& ref_stepwise,
                          const std::string& what) {
  const Deviation g = deviation(gpu, ref), self = deviation(ref_stepwise, ref);
  std::printf(
      "%s: gpu vs cpu mean %.3e max %.3e argmax %.3f | cpu stepwise vs cpu mean %.3e max %.3e argmax %.3f\n",
      what.c_str(), g.mean_rel, g.max_rel, g.argmax_agree, self.mean_rel, self.max_rel, self.argmax_agree);
  worst()[what] = std::max(worst()[what], g.mean_rel / std::max(self.mean_rel, 1e-6));
  const bool int4 = what.find("int4") != std::string::npos;
  const double bound = int4 ? test::tol::kGpuEngineVsSpreadInt4Kv : test::tol::kGpuEngineVsSpread;
  EXPECT_LE(g.mean_rel, bound * self.mean_rel + 1e-3) << what;
  EXPECT_GE(g.argmax_agree, std::min(self.argmax_agree, 1.0) - argmax_margin(self.argmax_agree, ref.dim(0)))
      << what;
}

class GpuEngineVsCpu : public ::testing::TestWithParam<KvFormat> {};

TEST_P(GpuEngineVsCpu, PromptLogitsMatchTheQuantizedReference) {
  FUTR_REQUIRE_GPU();
  const KvFormat kv = GetParam();
  auto g = make_gpu(kv, 512, 4);
  auto c = make_cpu(kv, 512, 4);
  const std::span<const int32_t> prompt(test::default_model_text().data(), 200);
  g->open(0);
  c->open(0);
  c->open(1);
  const Tensor want = all_logits(*c, 0, prompt, /*prompt=*/true);
  expect_within_spread(all_logits(*g, 0, prompt), want, stepwise_logits(*c, 1, prompt),
                       "prompt kv " + to_string(kv));
  EXPECT_EQ(g->length(0), 200);
  // Truncate and re-run the tail: the logits of the first run again. The
  // prompt ran as micro-steps of 32 rows from position 0, so a tail from 128
  // runs as the same micro-steps (128..159, 160..191, 192..199): the same
  // kernels on the same inputs, bit for bit.
  g->truncate(0, 128);
  std::vector<BatchRow> tail;
  for (int i = 128; i < 200; ++i) tail.push_back({prompt[size_t(i)], 0, i, RowOutput::kLogits, -1});
  const Tensor again = g->step(tail).logits;
  auto g2 = make_gpu(kv, 512, 1);
  g2->open(0);
  const Tensor first = all_logits(*g2, 0, prompt);
  for (int i = 128; i < 200; ++i)
    EXPECT_EQ(0, std::memcmp(again.row(i - 128), first.row(i), size_t(again.dim(1)) * sizeof(float)))
        << "row " << i << " after truncate differs";
  EXPECT_EQ(g2->stats()["micro_steps"].get<int64_t>(), 7)
      << "200 prompt rows: 7 micro-steps of up to 32 rows";
}

// The residual + RMSNorm fused into the one-row gemv (GpuEngineOptions::fuse_norm):
// decode one position per step against the reference within its spread, and
// against the unfused engine as close as two reduction orders allow; graph
// replay equal to eager launches bit for bit.
TEST_P(GpuEngineVsCpu, FusedNormDecodeMatchesTheReference) {
  FUTR_REQUIRE_GPU();
  const KvFormat kv = GetParam();
  auto fused = make_gpu(kv, 256, 2, true, true, true);
  auto fused_eager = make_gpu(kv, 256, 2, false, true, true);
  auto plain = make_gpu(kv, 256, 2);
  auto c = make_cpu(kv, 256, 2);
  const std::span<const int32_t> toks(test::default_model_text().data() + 300, 96);
  fused->open(0), fused_eager->open(0), plain->open(0), c->open(0), c->open(1);
  const Tensor f = stepwise_logits(*fused, 0, toks), fe = stepwise_logits(*fused_eager, 0, toks);
  EXPECT_EQ(0, std::memcmp(f.ptr(), fe.ptr(), size_t(f.numel()) * sizeof(float))) << "fused: graph vs eager";
  const Tensor want = all_logits(*c, 0, toks, /*prompt=*/true), want_stepwise = stepwise_logits(*c, 1, toks);
  expect_within_spread(f, want, want_stepwise, "fused norm kv " + to_string(kv));
  // Fused against unfused: another reduction order of the same engine, as far
  // apart as the reference from itself under a change of order.
  const Deviation d = deviation(f, stepwise_logits(*plain, 0, toks)), self = deviation(want_stepwise, want);
  std::printf("fused vs unfused kv %s: mean rel %.3e max %.3e argmax %.3f\n", to_string(kv).c_str(),
              d.mean_rel, d.max_rel, d.argmax_agree);
  EXPECT_GE(d.argmax_agree, std::min(self.argmax_agree, 1.0) - argmax_margin(self.argmax_agree, want.dim(0)));
}

TEST_P(GpuEngineVsCpu, SeveralSequencesInOneStep) {
  FUTR_REQUIRE_GPU();
  const KvFormat kv = GetParam();
  auto g = make_gpu(kv, 256, 4);
  const std::vector<int> lens = {37, 5, 120, 64};
  std::vector<BatchRow> rows;
  for (int s = 0; s < 4; ++s) {
    g->open(s);
    for (int i = 0; i < lens[size_t(s)]; ++i)
      rows.push_back({test::default_model_text()[size_t(100 * s + i)], s, i, RowOutput::kLogits, -1});
  }
  const Tensor got = g->step(rows).logits;
  int64_t row = 0;
  for (int s = 0; s < 4; ++s) {
    auto c = make_cpu(kv, 256, 2);
    c->open(0);
    c->open(1);
    const std::span<const int32_t> toks(test::default_model_text().data() + 100 * s, size_t(lens[size_t(s)]));
    const Tensor want = all_logits(*c, 0, toks, /*prompt=*/true);
    Tensor part({int64_t(lens[size_t(s)]), want.dim(1)});
    std::memcpy(part.ptr(), got.row(row), size_t(part.numel()) * sizeof(float));
    row += lens[size_t(s)];
    expect_within_spread(part, want, stepwise_logits(*c, 1, toks), "batched kv " + to_string(kv));
  }
  EXPECT_EQ(g->free_positions(), int64_t(4) * 256 - (37 + 5 + 120 + 64));
}

TEST_P(GpuEngineVsCpu, PerplexityOfTheExcerpt) {
  FUTR_REQUIRE_GPU();
  const KvFormat kv = GetParam();
  auto g = make_gpu(kv, 256, 8);
  auto c = make_cpu(kv, 256, 8);
  const std::span<const int32_t> t(test::default_model_text().data(),
                                   std::min<size_t>(test::default_model_text().size(), 1024));
  const runtime::PplResult pg = runtime::evaluate_perplexity(*g, t, 256, 256, 4096);
  const runtime::PplResult pc = runtime::evaluate_perplexity(*c, t, 256, 256, 4096);
  const runtime::PplResult ps = runtime::evaluate_perplexity(*c, t, 256, 256, 1);  // one position per step
  std::printf("perplexity kv %s: gpu %.5f cpu %.5f cpu stepwise %.5f (%lld tokens)\n", to_string(kv).c_str(),
              pg.stats.ppl(), pc.stats.ppl(), ps.stats.ppl(), (long long)pc.stats.count());
  // The two CPU evaluations are both the reference (the same formats, other
  // rounding orders); the GPU runs one position per step like the stepwise one.
  // On 1,020 tokens their own spread is 0.064 (BF16 cache) to 1.6 (INT4 mirror)
  // perplexity, so the GPU is judged against the nearer of the two (H200,
  // 2026-12-01: BF16 0.087 from the stepwise, 0.151 from the chunked one).
  const double spread = std::fabs(ps.stats.ppl() - pc.stats.ppl());
  const double nearest =
      std::min(std::fabs(pg.stats.ppl() - pc.stats.ppl()), std::fabs(pg.stats.ppl() - ps.stats.ppl()));
  const double floor =
      (kv == KvFormat::kBf16 ? 2e-3 : test::tol::kGpuEnginePplExcerptInt4Kv) * pc.stats.ppl();
  EXPECT_LE(nearest, std::max(test::tol::kGpuEngineVsSpread * spread, floor));
}

// Prompts of lengths 1..n for n sequences, each row asking for `out`. Round r
// continues round r - 1 (sequence s holds r (s + 1) positions). As
// staircase_steps: n steps of n, n-1, ..., 1 rows (one row per sequence:
// step t holds the sequences s >= t), so every bucket runs (eagerly first,
// then replayed).
BatchRow stair_row(int s, int i, RowOutput out, int round) {
  const int p = round * (s + 1) + i;
  return {test::default_model_text()[size_t(37 * s + p)], s, p, out,
          test::default_model_text()[size_t(37 * s + p + 1)]};
}
std::vector<std::vector<BatchRow>> staircase_steps(int n, RowOutput out, int round = 0) {
  std::vector<std::vector<BatchRow>> steps(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t)
    for (int s = t; s < n; ++s) steps[size_t(t)].push_back(stair_row(s, t, out, round));
  return steps;
}
// The steps' results, concatenated (logits rows, log-probabilities, tokens).
runtime::StepResult run_steps(runtime::Engine& e, const std::vector<std::vector<BatchRow>>& steps) {
  runtime::StepResult all;
  std::vector<float> logits;
  int64_t rows = 0, vocab = 0;
  for (const auto& st : steps) {
    const runtime::StepResult r = e.step(st);
    logits.insert(logits.end(), r.logits.data.begin(), r.logits.data.end());
    if (!r.logits.data.empty()) rows += r.logits.dim(0), vocab = r.logits.dim(1);
    all.logprobs.insert(all.logprobs.end(), r.logprobs.begin(), r.logprobs.end());
    all.tokens.insert(all.tokens.end(), r.tokens.begin(), r.tokens.end());
  }
  if (rows > 0) {
    all.logits = Tensor({rows, vocab});
    std::memcpy(all.logits.ptr(), logits.data(), logits.size() * sizeof(float));
  }
  return all;
}

TEST_P(GpuEngineVsCpu, GraphReplayEqualsEagerLaunchesBitwise) {
  FUTR_REQUIRE_GPU();
  const KvFormat kv = GetParam();
  const int n = 20;
  auto graph = make_gpu(kv, 128, n, true);
  auto eager = make_gpu(kv, 128, n, false);
  for (int s = 0; s < n; ++s) graph->open(s), eager->open(s);
  for (int round = 0; round < 3; ++round) {  // round 0 warms every bucket up; 1 and 2 replay graphs
    const RowOutput out = round == 2 ? RowOutput::kLogprob : RowOutput::kLogits;
    const auto steps = staircase_steps(n, out, round);
    const runtime::StepResult g = run_steps(*graph, steps), e = run_steps(*eager, steps);
    // NOTE: data.size(), not numel(): a default Tensor (no kLogits rows) has
    // shape {} and numel() 1 but no data.
    ASSERT_EQ(g.logits.data.size(), e.logits.data.size());
    EXPECT_EQ(0,
              std::memcmp(g.logits.data.data(), e.logits.data.data(), g.logits.data.size() * sizeof(float)))
        << "round " << round << ": graph replay and eager logits differ";
    ASSERT_EQ(g.logprobs.size(), e.logprobs.size());
    for (size_t i = 0; i < g.logprobs.size(); ++i) EXPECT_EQ(g.logprobs[i], e.logprobs[i]) << "row " << i;
  }
  const nlohmann::json st = graph->stats();
  std::printf("graph engine stats: %s\n", st.dump().c_str());
  EXPECT_EQ(st["graphs_captured"].get<int>(), 6);  // every bucket
  EXPECT_GT(st["graph_launches"].get<int64_t>(), 0);
  EXPECT_EQ(eager->stats()["graph_launches"].get<int64_t>(), 0);
}

// PDL between the step's kernels (the default) changes when kernels start,
// never what they compute: graphs with PDL equal eager launches without it,
// bit for bit. Profiling (launches one by one with events) computes the same
// too, and accounts for every launch of the step.
TEST_P(GpuEngineVsCpu, PdlAndProfilingEqualPlainLaunchesBitwise) {
  FUTR_REQUIRE_GPU();
  const KvFormat kv = GetParam();
  const int n = 9;
  auto pdl = make_gpu(kv, 128, n, true, true);
  auto plain = make_gpu(kv, 128, n, false, false);
  for (int s = 0; s < n; ++s) pdl->open(s), plain->open(s);
  for (int round = 0; round < 4; ++round) {  // round 0 warms up; 1, 2 replay graphs; 3 profiles
    if (round == 3) {
      ASSERT_TRUE(pdl->set_profiling(true));
    }
    const auto steps = staircase_steps(n, RowOutput::kLogits, round);
    const runtime::StepResult a = run_steps(*pdl, steps), b = run_steps(*plain, steps);
    ASSERT_EQ(a.logits.data.size(), b.logits.data.size());
    EXPECT_EQ(0,
              std::memcmp(a.logits.data.data(), b.logits.data.data(), a.logits.data.size() * sizeof(float)))
        << "round " << round << ": PDL" << (round == 3 ? " (profiled)" : "") << " and plain launches differ";
  }
  const nlohmann::json p = pdl->stats()["profile"];
  std::printf("profile: %s\n", p.dump().c_str());
  const int layers = test::default_model().config.n_layers;
  const int64_t steps = p["micro_steps"].get<int64_t>();
  double sum = 0;
  int64_t launches = 0, swiglu = 0;
  for (const auto& op : p["ops"]) {
    sum += op["us_per_micro_step"].get<double>();
    const int64_t n = std::llround(op["launches_per_micro_step"].get<double>() * double(steps));
    launches += n;
    if (op["op"] == "swiglu") swiglu = n;
    EXPECT_GT(op["us_per_micro_step"].get<double>(), 0.0) << op["op"];
  }
  // 9 launches per layer + 4 (embedding, LM head, reductions, sampling), less
  // the SwiGLU of the micro-steps of one row (fused into the down GEMM there):
  // every launch of a micro-step timed once.
  EXPECT_EQ(swiglu % layers, 0);
  EXPECT_EQ(launches, steps * (8 * layers + 4) + swiglu) << "micro-steps " << steps;
  EXPECT_NEAR(sum, p["us_per_micro_step"].get<double>(), 1e-3 * sum + 1.0) << "the ops cover the micro-step";
  EXPECT_TRUE(pdl->set_profiling(false));
  EXPECT_FALSE(pdl->stats().contains("profile"));
  EXPECT_FALSE(make_cpu(kv, 16, 1)->set_profiling(true)) << "the CPU engine cannot profile";
}

TEST_P(GpuEngineVsCpu, TokensAndLogprobsComputedOnTheGpuMatchTheHost) {
  FUTR_REQUIRE_GPU();
  const KvFormat kv = GetParam();
  const int n = 12;
  auto logits_engine = make_gpu(kv, 64, n);
  auto greedy_engine = make_gpu(kv, 64, n);
  auto logprob_engine = make_gpu(kv, 64, n);
  auto sampled_engine = make_gpu(kv, 64, n);
  auto host_sampled_engine = make_gpu(kv, 64, n);
  runtime::SamplerConfig hot;
  hot.temperature = 0.8f;
  hot.top_k = 20;
  hot.top_p = 0.9f;
  hot.min_p = 0.02f;
  runtime::SamplerConfig all = hot;  // no top-k cut: drawn on the host
  all.top_k = 0;
  for (int s = 0; s < n; ++s) {
    hot.seed = all.seed = uint64_t(1000 + s);
    logits_engine->open(s), greedy_engine->open(s), logprob_engine->open(s), sampled_engine->open(s, hot);
    host_sampled_engine->open(s, all);
  }
  // Steps of one row per sequence (staircase_steps): every engine then packs
  // the same micro-steps whatever the rows ask for (a row asking for a token
  // ends its sequence's rows in a micro-step, a logits row does not), so the
  // logits the draws start from are the same bits as the logits engine's.
  const auto flat = [](const std::vector<std::vector<BatchRow>>& steps) {
    std::vector<BatchRow> all;
    for (const auto& st : steps) all.insert(all.end(), st.begin(), st.end());
    return all;
  };
  const std::vector<BatchRow> rows_l = flat(staircase_steps(n, RowOutput::kLogits));
  const runtime::StepResult zl = run_steps(*logits_engine, staircase_steps(n, RowOutput::kLogits));
  const Tensor& z = zl.logits;
  const runtime::StepResult t = run_steps(*greedy_engine, staircase_steps(n, RowOutput::kToken));
  const runtime::StepResult p = run_steps(*logprob_engine, staircase_steps(n, RowOutput::kLogprob));
  const runtime::StepResult h = run_steps(*sampled_engine, staircase_steps(n, RowOutput::kToken));
  const runtime::StepResult ha = run_steps(*host_sampled_engine, staircase_steps(n, RowOutput::kToken));
  ASSERT_EQ(t.tokens.size(), rows_l.size());
  ASSERT_EQ(p.logprobs.size(), rows_l.size());
  std::map<int64_t, runtime::Sampler> host, host_all;
  for (int s = 0; s < n; ++s) {
    hot.seed = all.seed = uint64_t(1000 + s);
    host.emplace(s, runtime::Sampler(hot));
    host_all.emplace(s, runtime::Sampler(all));
  }
  double worst_lp = 0;
  for (size_t i = 0; i < rows_l.size(); ++i) {
    const std::span<const float> row(z.row(int64_t(i)), size_t(z.dim(1)));
    EXPECT_EQ(t.tokens[i], runtime::argmax(row)) << "row " << i;
    const double want = -runtime::token_nll(row, rows_l[i].target);
    worst_lp = std::max(worst_lp, std::fabs(p.logprobs[i] - want));
    EXPECT_NEAR(p.logprobs[i], want, test::tol::kLogitsReduce) << "row " << i;
    EXPECT_EQ(h.tokens[i], host.at(rows_l[i].seq).sample(row)) << "row " << i << " (drawn on the GPU)";
    EXPECT_EQ(ha.tokens[i], host_all.at(rows_l[i].seq).sample(row)) << "row " << i << " (drawn on the host)";
  }
  std::printf("kv %s: largest |logprob gpu - host| %.3e\n", to_string(kv).c_str(), worst_lp);
  // Greedy and log-probability rows bring no logits back; sampled rows one each.
  EXPECT_EQ(greedy_engine->stats()["logits_rows_copied"].get<int64_t>(), 0);
  EXPECT_EQ(logprob_engine->stats()["logits_rows_copied"].get<int64_t>(), 0);
  // Top-k rows are drawn on the GPU (sm90_sample_topk): no logits come back;
  // without a top-k cut the host draws from the row's logits.
  EXPECT_EQ(sampled_engine->stats()["gpu_sampled_rows"].get<int64_t>(), int64_t(rows_l.size()));
  EXPECT_EQ(sampled_engine->stats()["host_sampled_rows"].get<int64_t>(), 0);
  EXPECT_EQ(sampled_engine->stats()["logits_rows_copied"].get<int64_t>(), 0);
  EXPECT_EQ(host_sampled_engine->stats()["host_sampled_rows"].get<int64_t>(), int64_t(rows_l.size()));
}

INSTANTIATE_TEST_SUITE_P(Kv, GpuEngineVsCpu,
                         ::testing::Values(KvFormat::kBf16, KvFormat::kInt4, KvFormat::kInt4Rot),
                         [](const auto& i) {
                           std::string s = to_string(i.param);
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(GpuEngine, RefusesWhatItCannotRun) {
  FUTR_REQUIRE_GPU();
  gpu::GpuEngineOptions o;
  o.kv = KvFormat::kFp32;
  EXPECT_FUTR_ERROR(gpu::GpuEngine(test::default_model(), test::default_model_int4(), o),
                    "KV cache fp32 is not supported");
  o.kv = KvFormat::kBf16;
  o.ctx = 1 << 22;
  o.max_seqs = 4096;
  EXPECT_FUTR_ERROR(gpu::GpuEngine(test::default_model(), test::default_model_int4(), o), "what fits");
  o.max_seqs = 200;  // 2^22 x 200 slots: addressable, but 19 TB
  EXPECT_FUTR_ERROR(gpu::GpuEngine(test::default_model(), test::default_model_int4(), o), "what fits");
  o.ctx = 64;
  o.max_seqs = 1;
  gpu::GpuEngine e(test::default_model(), test::default_model_int4(), o);
  e.open(1);
  const std::vector<BatchRow> bad = {{1, 1, 3, RowOutput::kLogits, -1}};  // not at the sequence's end
  EXPECT_THROW(e.step(bad), Error);
  EXPECT_EQ(e.length(1), 0);
  EXPECT_THROW(e.open(2), Error);  // max_seqs = 1
}

// The GPU and the CPU engine on the same model and INT4 weights (ctx 256):
// the GPU's sequence 0 open, the CPU's 0 and 1 (the second for the stepwise yardstick).
struct EnginePair {
  std::unique_ptr<gpu::GpuEngine> gpu;
  std::unique_ptr<cpu::CpuEngine> cpu;
  EnginePair(const Model& m, const std::shared_ptr<const quant::QuantizedWeights>& q, KvFormat kv) {
    gpu::GpuEngineOptions go;
    go.kv = kv;
    go.kv_block = 64;
    go.ctx = 256;
    go.max_seqs = 2;
    gpu = std::make_unique<gpu::GpuEngine>(m, q, go);
    cpu::CpuEngineOptions co;
    co.weights = WeightFormat::kInt4;
    co.kv = kv;
    co.kv_block = 64;
    co.ctx = 256;
    co.max_seqs = 2;
    cpu = std::make_unique<cpu::CpuEngine>(m, q, co);
    gpu->open(0);
    cpu->open(0);
    cpu->open(1);
  }
};

// A Qwen2-style model (q/k/v projection biases): SmolLM2's weights with
// random biases (a fixed draw), prompt logits on the GPU engine against the
// CPU engine within fixed bounds (tol::kQwen2Style*: the reference's own
// spread is no steady yardstick on a model this chaotic). The biases are
// large enough (RMS ~0.6 against activations of RMS ~1) that an engine
// ignoring them fails the bounds by far.
TEST(GpuEngineQwen2Style, BiasedProjectionsMatchTheQuantizedReference) {
  FUTR_REQUIRE_GPU();
  Model m = load_model(FUTR_DEFAULT_MODEL);
  test::add_random_qkv_biases(m, 0.6f, /*seed=*/60);
  cpu::QuantizeOptions qo;
  qo.format = WeightFormat::kInt4;
  qo.method = QuantMethod::kRtn;
  const auto q = std::make_shared<quant::QuantizedWeights>(cpu::quantize_model(m, qo, {}));
  const std::span<const int32_t> prompt(test::default_model_text().data(), 120);
  for (const KvFormat kv : {KvFormat::kBf16, KvFormat::kInt4}) {
    const EnginePair e(m, q, kv);
    gpu::GpuEngine& g = *e.gpu;
    cpu::CpuEngine& c = *e.cpu;
    const Tensor want = all_logits(c, 0, prompt, /*prompt=*/true);
    const Deviation d = deviation(all_logits(g, 0, prompt), want);
    const Deviation self = deviation(stepwise_logits(c, 1, prompt), want);
    const std::string what = "qwen2-style prompt kv " + to_string(kv);
    std::printf("%s: gpu vs cpu mean %.3e argmax %.3f | cpu stepwise vs cpu mean %.3e argmax %.3f\n",
                what.c_str(), d.mean_rel, d.argmax_agree, self.mean_rel, self.argmax_agree);
    const bool bf16 = kv == KvFormat::kBf16;
    EXPECT_LE(d.mean_rel, bf16 ? test::tol::kQwen2StyleBf16 : test::tol::kQwen2StyleInt4Kv) << what;
    EXPECT_GE(d.argmax_agree, bf16 ? test::tol::kQwen2StyleArgmaxBf16 : test::tol::kQwen2StyleArgmaxInt4Kv)
        << what;
  }
}

// The families beyond Llama 3 as checkpoints (tests/support/tiny_families.h:
// Qwen2 with q/k/v biases and a tied head, Mistral with one KV head and an
// untied head, a Llama checkpoint with a SentencePiece-style tokenizer) load
// from their directories into the GPU engine, whose prompt logits match the
// CPU engine's on the same INT4 weights, for the BF16 cache and the INT4
// mirror (bounds: tol::kGpuEngineFamily*, why not the self-spread there).
class GpuEngineFamilies : public ::testing::TestWithParam<const test::TinyFamily*> {};

TEST_P(GpuEngineFamilies, CheckpointLogitsMatchTheQuantizedReference) {
  FUTR_REQUIRE_GPU();
  const test::TinyFamily& f = *GetParam();
  const Model m = load_model(test::tiny_family_dir(f, test::scratch_dir("gpu_engine_families")).string());
  cpu::QuantizeOptions qo;
  qo.format = WeightFormat::kInt4;
  qo.method = QuantMethod::kRtn;
  const auto q = std::make_shared<quant::QuantizedWeights>(cpu::quantize_model(m, qo, {}));
  const Tokenizer tok(m.tokenizer);
  std::vector<int32_t> tokens =
      tok.encode(test::read_data_file(FUTR_TEST_TEXT).substr(0, 400), tok.add_bos(), false);
  tokens.resize(std::min<size_t>(tokens.size(), 96));
  ASSERT_GE(tokens.size(), 64u);
  for (const KvFormat kv : {KvFormat::kBf16, KvFormat::kInt4}) {
    const EnginePair e(m, q, kv);
    gpu::GpuEngine& g = *e.gpu;
    cpu::CpuEngine& c = *e.cpu;
    const Tensor want = all_logits(c, 0, tokens, /*prompt=*/true);
    const Deviation d = deviation(all_logits(g, 0, tokens), want);
    const std::string what = std::string(f.dir) + " prompt kv " + to_string(kv);
    std::printf("%s: gpu vs cpu mean %.3e max %.3e argmax %.3f\n", what.c_str(), d.mean_rel, d.max_rel,
                d.argmax_agree);
    EXPECT_LE(d.mean_rel,
              kv == KvFormat::kBf16 ? test::tol::kGpuEngineFamilyBf16 : test::tol::kGpuEngineFamilyInt4Kv)
        << what;
    EXPECT_GE(d.argmax_agree, test::tol::kGpuEngineFamilyArgmax) << what;
  }
}

// A vocabulary padded beyond the tokenizer (the tiny Mistral: 320 LM-head rows,
// 258 tokens; real checkpoints pad to a multiple of 64 or 128): greedy tokens
// are the argmax over the ids that have a token, never a padded row, even
// where a padded row holds the row's maximum (here: the padded rows scaled
// up, so that they win most rows). Each token equals the argmax of the same
// engine's logits over the sampleable ids.
TEST(GpuEngineFamiliesPadded, GreedyTokensNeverPaddedRows) {
  FUTR_REQUIRE_GPU();
  Model m = load_model(
      test::tiny_family_dir(test::kTinyMistral, test::scratch_dir("gpu_engine_families")).string());
  const int32_t known = m.sampleable_vocab();
  ASSERT_LT(known, m.config.vocab) << "the tiny Mistral's vocabulary is padded beyond its tokenizer";
  ASSERT_FALSE(m.weights.lm_head.empty());
  const int64_t H = m.config.hidden;
  for (int64_t r = known; r < m.config.vocab; ++r)
    for (int64_t j = 0; j < H; ++j) m.weights.lm_head.data[size_t(r * H + j)] *= 6.f;
  cpu::QuantizeOptions qo;
  qo.format = WeightFormat::kInt4;
  qo.method = QuantMethod::kRtn;
  const auto q = std::make_shared<quant::QuantizedWeights>(cpu::quantize_model(m, qo, {}));
  gpu::GpuEngineOptions go;
  go.ctx = 128;
  go.max_seqs = 2;
  gpu::GpuEngine g(m, q, go);
  g.open(0);
  g.open(1);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 48; ++i) prompt.push_back(int32_t(i * 37 % known));
  const Tensor z = all_logits(g, 0, prompt);
  std::vector<BatchRow> rows;
  for (size_t i = 0; i < prompt.size(); ++i)
    rows.push_back({prompt[i], 1, int32_t(i), RowOutput::kToken, -1});
  const runtime::StepResult t = g.step(rows);
  ASSERT_EQ(t.tokens.size(), prompt.size());
  int padded_max = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::span<const float> row(z.row(int64_t(i)), size_t(z.dim(1)));
    padded_max += runtime::argmax(row) >= known;
    EXPECT_EQ(t.tokens[i], runtime::argmax(row.first(size_t(known)))) << "row " << i;
  }
  EXPECT_GT(padded_max, 0) << "no row had its maximum on a padded row: the test tests nothing";
}

INSTANTIATE_TEST_SUITE_P(Tiny, GpuEngineFamilies,
                         ::testing::Values(&test::kTinyQwen2, &test::kTinyMistral, &test::kTinyLlama2),
                         [](const ::testing::TestParamInfo<const test::TinyFamily*>& i) {
                           return std::string(i.param == &test::kTinyQwen2     ? "qwen2"
                                              : i.param == &test::kTinyMistral ? "mistral"
                                                                               : "llama2_spm");
                         });

class SyntheticGpuEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticGpuEngine, RealShapesRunWithFiniteLogits) {
  FUTR_REQUIRE_GPU();
  const ModelConfig c = synthetic_config(GetParam());
  gpu::GpuEngineOptions o;
  o.kv = KvFormat::kInt4Rot;
  o.ctx = 64;
  o.max_seqs = 32;
  o.max_step_tokens = 4096;
  gpu::GpuEngine g(c, 7, o);
  o.graphs = false;
  gpu::GpuEngine e(c, 7, o);  // the same weights (same seed), eager
  std::printf("%s: %s\n", GetParam().c_str(), g.info().describe.c_str());
  std::vector<BatchRow> rows, greedy;
  for (int s = 0; s < 32; ++s) {
    g.open(s), e.open(s);
    for (int i = 0; i < 3; ++i)
      rows.push_back({(s * 7919 + i * 104729) % c.vocab, s, i, RowOutput::kLogits, -1});
    greedy.push_back({(s * 31) % c.vocab, s, 3, RowOutput::kToken, -1});
  }
  for (int round = 0; round < 2; ++round) {  // round 1 replays the captured graphs
    if (round == 1)
      for (int s = 0; s < 32; ++s) g.truncate(s, 0), e.truncate(s, 0);
    const Tensor z = g.step(rows).logits, ze = e.step(rows).logits;
    ASSERT_EQ(z.numel(), int64_t(rows.size()) * c.vocab);
    size_t bad = 0;
    for (float v : z.data) bad += std::isfinite(v) ? 0 : 1;
    EXPECT_EQ(bad, 0u) << GetParam();
    EXPECT_EQ(0, std::memcmp(z.ptr(), ze.ptr(), size_t(z.numel()) * sizeof(float)))
        << "graph vs eager, round " << round;
  }
  const runtime::StepResult t = g.step(greedy);
  ASSERT_EQ(t.tokens.size(), 32u);
  for (int s = 0; s < 32; ++s) g.truncate(s, 3);
  std::vector<BatchRow> as_logits = greedy;
  for (BatchRow& r : as_logits) r.out = RowOutput::kLogits;
  const Tensor z = g.step(as_logits).logits;
  for (int s = 0; s < 32; ++s)
    EXPECT_EQ(t.tokens[size_t(s)], runtime::argmax({z.row(s), size_t(c.vocab)}))
        << GetParam() << " seq " << s;
}

INSTANTIATE_TEST_SUITE_P(Synthetic, SyntheticGpuEngine,
                         ::testing::Values("tiny", "smollm2-135m", "llama-3.2-1b", "llama-3.1-8b",
                                           "llama-3.1-70b"),
                         [](const auto& i) {
                           std::string s = i.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           std::replace(s.begin(), s.end(), '.', '_');
                           return s;
                         });

class Report : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [k, v] : worst())
      std::printf("gpu engine: mean logits deviation over the reference's own spread, %s: %.2f\n", k.c_str(),
                  v);
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new Report);

}  // namespace
}  // namespace futr
