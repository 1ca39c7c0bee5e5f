// Batch invariance of the GPU engine (src/gpu_engine/engine.h "Batch invariance"):
// a row's logits are the same bits whatever else runs with it, on SmolLM2-135M
// (INT4 RTN weights) for every KV format:
//
//   - decode path (no prefill): a request's prompt and greedy decode rows
//     alone, then with 1, 7 and 31 other random requests in the same steps
//     (micro-steps of every bucket, prompt rows of several sequences mixed),
//     and its prompt cut into steps three ways (all at once, one row per step,
//     steps of 7): the logits of its last prompt row and of its decode rows
//     bit for bit;
//   - the FP8 prefill path with static scales: the same request alone, packed
//     with 7 or 31 others, chunked three ways (steps of 1, 7 and 64 rows),
//     and repeated after other traffic: bit for bit;
//   - the FP8 prefill path with delayed scaling (each request's own state,
//     one call per window of positions): alone, packed with others, chunked
//     three ways, repeated after traffic: bit for bit;
//   - the same with the streaming LM head (GpuEngineOptions::lm_head_streaming;
//     BF16 cache on the decode path, rotated INT4 with the static prefill) and
//     with the INT4 head (BF16 cache, decode path);
//   - perplexity of the WikiText excerpt with one sequence at a time and with
//     32 side by side: the same log-probabilities (the mean equal up to the
//     order of its double-precision sum);
//   - a greedy sequence's token rows in one step share a micro-step and draw
//     what one row per step draws;
//   - the device calibration of FP8 weights quantized on load (no stored
//     amax) gives logits as close to the CPU-calibrated engine's as chunking
//     moved them before static scales (tol::kPrefillVsFp8Ref*).
// Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "formats/loader.h"
#include "gpu_engine/engine.h"
#include "quantize/quantize.h"
#include "runtime/calibration.h"
#include "runtime/perplexity.h"
#include "support/compare.h"
#include "support/data_file.h"
#include "support/default_model.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerances.h"
#include "tokenizer/tokenizer.h"

namespace futr {
namespace {

using runtime::BatchRow;
using runtime::RowOutput;

enum class Prefill { kOff, kStatic, kDelayed };

std::unique_ptr<gpu::GpuEngine> make_gpu(KvFormat kv, Prefill prefill, int seqs = 32, int prefill_rows = 2048,
                                         bool streaming_head = false, bool int4_head = false) {
  gpu::GpuEngineOptions o;
  o.kv = kv;
  o.lm_head_streaming = streaming_head;
  o.lm_head_int4 = int4_head;
  o.ctx = 512;
  o.max_seqs = seqs;
  o.max_step_tokens = 4096;
  if (prefill != Prefill::kOff) {
    o.prefill_fp8 = test::default_model_fp8();
    o.prefill_rows = prefill_rows;
    o.fp8.scaling = prefill == Prefill::kStatic ? Fp8Scaling::kStatic : Fp8Scaling::kDelayed;
  }
  return std::make_unique<gpu::GpuEngine>(test::default_model(), test::default_model_int4(), o);
}

// A request: its prompt (text at an offset) and the logits it produced.
struct Request {
  runtime::SeqId id;
  std::vector<int32_t> prompt;
  int32_t next = 0;                        // the token to feed in the next decode step
  std::vector<std::vector<float>> logits;  // the last prompt row's, then each decode row's
};

std::vector<int32_t> text_at(size_t off, size_t n) {
  const std::vector<int32_t>& t = test::default_model_text();
  off %= t.size() - n;
  return {t.begin() + ptrdiff_t(off), t.begin() + ptrdiff_t(off + n)};
}

// Runs `reqs` together: their prompts in steps cut at `chunk` rows per request
// (every request's next piece in the same step), then `decode` greedy steps
// with one row per request. The last prompt row and every decode row return
// their logits; the next token is their argmax.
void run_together(runtime::Engine& e, std::vector<Request>& reqs, int chunk, int decode) {
  for (Request& r : reqs) {
    if (e.is_open(r.id)) e.close(r.id);
    e.open(r.id);
    r.logits.clear();
  }
  const size_t V = size_t(e.info().vocab);
  auto take = [&](const runtime::StepResult& res, const std::vector<Request*>& who) {
    for (size_t k = 0; k < who.size(); ++k) {
      const float* z = res.logits.row(int64_t(k));
      who[k]->logits.emplace_back(z, z + V);
      who[k]->next = runtime::argmax({z, V});
    }
  };
  for (size_t done = 0;;) {
    std::vector<BatchRow> rows;
    std::vector<Request*> who;
    for (Request& r : reqs) {
      const size_t n = r.prompt.size();
      if (done >= n) continue;
      const size_t end = std::min(n, done + size_t(chunk));
      for (size_t i = done; i < end; ++i)
        rows.push_back(
            {r.prompt[i], r.id, int32_t(i), i + 1 == n ? RowOutput::kLogits : RowOutput::kNone, -1, true});
      if (end == n) who.push_back(&r);
    }
    if (rows.empty()) break;
    take(e.step(rows), who);
    done += size_t(chunk);
  }
  for (int s = 0; s < decode; ++s) {
    std::vector<BatchRow> rows;
    std::vector<Request*> who;
    for (Request& r : reqs) {
      rows.push_back({r.next, r.id, int32_t(r.prompt.size()) + s, RowOutput::kLogits, -1});
      who.push_back(&r);
    }
    take(e.step(rows), who);
  }
}

std::vector<Request> with_others(const Request& probe, int others, std::mt19937_64& g) {
  std::vector<Request> reqs{probe};
  for (int i = 0; i < others; ++i) {
    const size_t n = 5 + g() % 90;
    reqs.push_back({runtime::SeqId(100 + i), text_at(g() % 100000, n), 0, {}});
  }
  std::shuffle(reqs.begin(), reqs.end(), g);
  return reqs;
}

const Request& find(const std::vector<Request>& reqs, runtime::SeqId id) {
  return *std::find_if(reqs.begin(), reqs.end(), [&](const Request& r) { return r.id == id; });
}

void expect_same(const Request& got, const Request& want, const std::string& what) {
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (size_t i = 0; i < want.logits.size(); ++i)
    EXPECT_EQ(0,
              std::memcmp(got.logits[i].data(), want.logits[i].data(), want.logits[i].size() * sizeof(float)))
        << what << ": row " << i << (i == 0 ? " (the last prompt row)" : " (a decode row)");
}

class GpuInvariance : public ::testing::TestWithParam<std::tuple<KvFormat, Prefill>> {};

void check_invariance(KvFormat kv, Prefill prefill, bool streaming_head, bool int4_head = false) {
  auto e = make_gpu(kv, prefill, 32, 2048, streaming_head, int4_head);
  std::mt19937_64 g(test::rng()());
  const int decode = 6;
  Request probe{7, text_at(g() % 100000, 40 + g() % 60), 0, {}};
  std::vector<Request> alone{probe};
  run_together(*e, alone, 4096, decode);
  const Request& want = alone[0];
  for (int others : {1, 7, 31}) {
    std::vector<Request> reqs = with_others(probe, others, g);
    run_together(*e, reqs, 4096, decode);
    expect_same(find(reqs, probe.id), want, "with " + std::to_string(others) + " other requests");
  }
  for (int chunk : {1, 7, 64}) {
    std::vector<Request> reqs{probe};
    run_together(*e, reqs, chunk, decode);
    expect_same(reqs[0], want, "prompt in steps of " + std::to_string(chunk) + " rows");
  }
  // Chunked and batched at once: 7 rows per step beside 15 others.
  std::vector<Request> reqs = with_others(probe, 15, g);
  run_together(*e, reqs, 7, decode);
  expect_same(find(reqs, probe.id), want, "steps of 7 rows beside 15 other requests");
  // The same request again after all that traffic.
  std::vector<Request> again{probe};
  run_together(*e, again, 4096, decode);
  expect_same(again[0], want, "repeated after other traffic");
  std::printf("%s / %s%s: %s\n", to_string(kv).c_str(),
              prefill == Prefill::kOff
                  ? "decode path"
                  : (prefill == Prefill::kStatic ? "prefill, static" : "prefill, delayed"),
              int4_head        ? " / INT4 LM head"
              : streaming_head ? " / streaming LM head"
                               : "",
              e->stats()["prefill"].dump().c_str());
}

TEST_P(GpuInvariance, ARequestsLogitsDoNotDependOnItsNeighboursOrItsChunking) {
  FUTR_REQUIRE_GPU();
  const auto [kv, prefill] = GetParam();
  check_invariance(kv, prefill, false);
}

// The same with the LM head by the streaming kernel over each bucket's rows
// (GpuEngineOptions::lm_head_streaming): its summation order does not depend
// on M, so the buckets' heads agree bit for bit.
TEST(GpuInvarianceStreamingHead, ARequestsLogitsDoNotDependOnItsNeighboursOrItsChunking) {
  FUTR_REQUIRE_GPU();
  check_invariance(KvFormat::kBf16, Prefill::kOff, true);
  check_invariance(KvFormat::kInt4Rot, Prefill::kStatic, true);
}

// And with the INT4 head (GpuEngineOptions::lm_head_int4, the same kernel over
// the quantized rows).
TEST(GpuInvarianceInt4Head, ARequestsLogitsDoNotDependOnItsNeighboursOrItsChunking) {
  FUTR_REQUIRE_GPU();
  check_invariance(KvFormat::kBf16, Prefill::kOff, false, true);
}

INSTANTIATE_TEST_SUITE_P(
    KvAndPrefill, GpuInvariance,
    ::testing::Combine(::testing::Values(KvFormat::kBf16, KvFormat::kInt4, KvFormat::kInt4Rot),
                       ::testing::Values(Prefill::kOff, Prefill::kStatic)),
    [](const auto& info) {
      const KvFormat kv = std::get<0>(info.param);
      return std::string(kv == KvFormat::kBf16 ? "bf16" : (kv == KvFormat::kInt4 ? "int4" : "int4rot")) +
             (std::get<1>(info.param) == Prefill::kOff ? "_decode" : "_prefill_static");
    });

// Delayed scaling keeps a state per request whose calls are windows of
// prefill_rows positions (gpu/prefill.h): alone, beside others, with its
// prompt cut into steps three ways (windows of 64 positions here, so the
// scales move inside the 150-token prompt) and repeated after traffic, its
// logits are the same bits.
// Several token rows of one greedy sequence in one step (speculative
// decoding's draft rows, verified by the engine's draws): one micro-step, and
// each row's token is what one row per step draws. A sampled sequence's token
// rows keep one micro-step each (its draws in row order).
TEST(GpuInvarianceGreedyTokenRows, ASequencesTokenRowsShareAMicroStep) {
  FUTR_REQUIRE_GPU();
  auto e = make_gpu(KvFormat::kBf16, Prefill::kOff, 4);
  const std::vector<int32_t> prompt = text_at(777, 40);
  const int n = int(prompt.size());
  auto open_with_prompt = [&](runtime::SeqId id, const runtime::SamplerConfig& sc) {
    e->open(id, sc);
    std::vector<BatchRow> rows;
    for (int i = 0; i < n; ++i)
      rows.push_back({prompt[size_t(i)], id, i, i + 1 == n ? RowOutput::kToken : RowOutput::kNone, -1, true});
    return e->step(rows).tokens.at(0);
  };
  auto micro_steps = [&] { return e->stats()["micro_steps"].get<int64_t>(); };
  for (const float temperature : {0.0f, 0.8f}) {
    runtime::SamplerConfig sc;
    sc.temperature = temperature;
    sc.seed = 5;
    // One row per step: the reference.
    std::vector<int32_t> seq{open_with_prompt(1, sc)};
    for (int i = 0; i < 8; ++i)
      seq.push_back(
          e->step(std::vector<BatchRow>{{seq.back(), 1, n + i, RowOutput::kToken, -1}}).tokens.at(0));
    // The same tokens as 8 rows of one step (each row's input is the reference's token).
    const int32_t first = open_with_prompt(2, sc);
    ASSERT_EQ(first, seq[0]);
    std::vector<BatchRow> rows;
    for (int i = 0; i < 8; ++i) rows.push_back({seq[size_t(i)], 2, n + i, RowOutput::kToken, -1});
    const int64_t before = micro_steps();
    const std::vector<int32_t> got = e->step(rows).tokens;
    EXPECT_EQ(micro_steps() - before, temperature == 0.0f ? 1 : 8) << "temperature " << temperature;
    EXPECT_EQ(got, std::vector<int32_t>(seq.begin() + 1, seq.end())) << "temperature " << temperature;
    e->close(1);
    e->close(2);
  }
}

TEST(GpuInvarianceDelayed, EachRequestKeepsItsOwnScales) {
  FUTR_REQUIRE_GPU();
  auto e = make_gpu(KvFormat::kInt4, Prefill::kDelayed, 32, 64);
  std::mt19937_64 g(test::rng()());
  Request probe{3, text_at(g() % 100000, 150), 0, {}};
  std::vector<Request> alone{probe};
  run_together(*e, alone, 4096, 4);
  for (int others : {1, 7, 31}) {
    std::vector<Request> reqs = with_others(probe, others, g);
    run_together(*e, reqs, 4096, 4);
    expect_same(find(reqs, probe.id), alone[0],
                "delayed scaling, with " + std::to_string(others) + " others");
  }
  for (int chunk : {1, 7, 50}) {
    std::vector<Request> reqs = with_others(probe, 3, g);
    run_together(*e, reqs, chunk, 4);
    expect_same(find(reqs, probe.id), alone[0],
                "delayed scaling, steps of " + std::to_string(chunk) + " rows");
  }
  EXPECT_GT(e->stats()["prefill"]["fp8_calls"].get<int64_t>(), 0) << "windows of 64 positions ended calls";
  std::vector<Request> again{probe};
  run_together(*e, again, 4096, 4);
  expect_same(again[0], alone[0], "delayed scaling, repeated after traffic");
}

// --seqs 1 and --seqs 32: every target's log-probability is the same bits, so
// the perplexity is equal up to the order of the double sum of its mean.
TEST(GpuInvariancePerplexity, OneSequenceOrThirtyTwoGiveTheSamePerplexity) {
  FUTR_REQUIRE_GPU();
  const std::vector<int32_t>& t = test::default_model_text();
  const std::span<const int32_t> text(t.data(), std::min<size_t>(t.size(), 4096));
  for (Prefill p : {Prefill::kOff, Prefill::kStatic}) {
    auto one = make_gpu(KvFormat::kInt4, p, 1), many = make_gpu(KvFormat::kInt4, p, 32);
    const double a = runtime::evaluate_perplexity(*one, text, 256, 256, 256).stats.ppl();
    const double b = runtime::evaluate_perplexity(*many, text, 256, 256, 256).stats.ppl();
    std::printf("perplexity, %s: 1 sequence %.9f, 32 sequences %.9f\n",
                p == Prefill::kOff ? "decode path" : "prefill", a, b);
    EXPECT_NEAR(a, b, 1e-12 * a);
  }
}

// FP8 weights quantized on load carry no calibrated amax: the engine
// calibrates on the device at construction (the engine's describe and stats
// say so), and its prompt logits stay as close to the CPU-calibrated
// engine's as the tolerance table allows the prefill against its reference.
TEST(GpuInvarianceCalibration, DeviceCalibrationMatchesTheStoredOne) {
  FUTR_REQUIRE_GPU();
  runtime::CalibrationConfig cc;
  cc.tokens = 2048;
  std::vector<int32_t> calib = runtime::calibration_tokens(test::default_model(), cc);
  gpu::GpuEngineOptions o;
  o.kv = KvFormat::kBf16;
  o.ctx = 512;
  o.max_step_tokens = 4096;
  o.fp8.scaling = Fp8Scaling::kStatic;
  o.prefill_fp8 = test::default_model_fp8(false);
  o.fp8_calibration = calib;
  gpu::GpuEngine dev(test::default_model(), test::default_model_int4(), o);
  o.prefill_fp8 = test::default_model_fp8();
  o.fp8_calibration.clear();
  gpu::GpuEngine stored(test::default_model(), test::default_model_int4(), o);
  const nlohmann::json st = dev.stats()["prefill"];
  std::printf("device calibration: %s\n", st.dump().c_str());
  EXPECT_GT(st["fp8_calibration_ms"].get<double>(), 0.0);
  EXPECT_EQ(st["fp8_calibration_tokens"].get<int64_t>(), int64_t(calib.size()));
  EXPECT_EQ(st["fp8_calls"].get<int64_t>(), 0) << "the calibration leaves no trace in the counters";
  const std::vector<int32_t> prompt = text_at(1234, 200);
  std::vector<BatchRow> rows;
  for (size_t i = 0; i < prompt.size(); ++i)
    rows.push_back({prompt[i], 0, int32_t(i), RowOutput::kLogits, -1, true});
  dev.open(0), stored.open(0);
  const Tensor a = dev.step(rows).logits, b = stored.step(rows).logits;
  const size_t V = size_t(a.dim(1));
  double mean = 0, agree = 0;
  for (int64_t r = 0; r < a.dim(0); ++r) {
    const std::span<const float> x(a.row(r), V), y(b.row(r), V);
    mean += test::compare(x, y).rel_l2 / double(a.dim(0));
    agree += double(runtime::argmax(x) == runtime::argmax(y)) / double(a.dim(0));
  }
  std::printf("device vs stored calibration: mean rel L2 %.3e, argmax agreement %.3f\n", mean, agree);
  EXPECT_LE(mean, test::tol::kPrefillVsFp8RefMeanRel);
  EXPECT_GE(agree, test::tol::kPrefillVsFp8RefArgmax);
  EXPECT_EQ(dev.stats()["prefill"]["fp8_nonfinite_calls"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace futr
