// The GPU engine's paged KV cache (gpu::GpuEngineOptions::kv_block_size;
// docs/LAYOUTS.md "Paged KV cache") on SmolLM2-135M with INT4 (RTN) weights,
// against the same engine with a region per sequence:
//   - for every KV format (bf16, int4, int4-rot), block sizes 16, 64 and 128,
//     prompts through the decode step or the FP8 prefill path: a script of
//     steps (two prompts in one step, prompt chunks, decode rows drawing on
//     the GPU and scoring, six decode rows of one sequence, truncate and
//     continue, close and reopen into reused blocks, a sequence up to the
//     context) gives bit for bit the logits, tokens and log-probabilities of
//     the contiguous cache (the decode step's graphs replay with the rows'
//     block tables; padding rows read and write the scratch blocks);
//   - an attached cached prefix gives the logits of computing it (its rows
//     run as the same kind of rows, whose bits do not depend on the cut), and
//     copy-on-write of a shared partial block leaves the sharer untouched;
//   - running out of blocks is an error that changes nothing; every block is
//     free at the end; the cache sized by a share of GPU memory; the options
//     the engine refuses.
// Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "formats/loader.h"
#include "gpu_engine/engine.h"
#include "quantize/quantize.h"
#include "runtime/calibration.h"
#include "support/data_file.h"
#include "support/default_model.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/paging.h"

namespace futr {
namespace {

using runtime::BatchRow;
using runtime::RowOutput;
using runtime::SeqId;
using runtime::StepResult;

constexpr int kCtx = 320;  // not a multiple of 64 or 128: a sequence's last block is partial

struct Case {
  KvFormat kv;
  int block_size;
  bool prefill;  // prompts through the FP8 prefill path (static scales), else the decode step
};

std::unique_ptr<gpu::GpuEngine> make(const Case& c, int block_size, int64_t blocks = 0, int max_seqs = 4,
                                     double memory_fraction = 0) {
  gpu::GpuEngineOptions o;
  o.kv = c.kv;
  o.kv_block = 64;
  o.ctx = kCtx;
  o.max_seqs = max_seqs;
  o.max_step_tokens = 1024;
  o.kv_block_size = block_size;
  o.kv_blocks = blocks;
  o.gpu_memory_fraction = memory_fraction;
  if (c.prefill) {
    o.prefill_fp8 = test::default_model_fp8();
    o.fp8.scaling = Fp8Scaling::kStatic;  // a row's bits independent of the chunk (the prefix test)
  }
  return std::make_unique<gpu::GpuEngine>(test::default_model(), test::default_model_int4(), o);
}

void expect_same(const StepResult& a, const StepResult& b, const std::string& what) {
  test::expect_same_results(a, b, what);
}

std::vector<BatchRow> rows_of(SeqId seq, const std::vector<int32_t>& tokens, int pos, RowOutput out,
                              bool prompt) {
  return test::rows_of(seq, tokens, pos, out, prompt, 7);
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(1 + rng() % 20000);
  return t;
}

class GpuPagedKv : public ::testing::TestWithParam<Case> {};

TEST_P(GpuPagedKv, StepsEqualTheContiguousCacheBitForBit) {
  FUTR_REQUIRE_GPU();
  const Case c = GetParam();
  auto ref = make(c, 0);
  auto paged = make(c, c.block_size);
  ASSERT_EQ(ref->info().kv_block_size, 0);
  ASSERT_EQ(paged->info().kv_block_size, c.block_size);
  EXPECT_EQ(paged->info().kv_blocks, 4 * ((kCtx + c.block_size - 1) / c.block_size));
  std::mt19937 rng(uint32_t(c.block_size) * 31 + uint32_t(c.kv) * 7 + (c.prefill ? 1 : 0));
  auto both = [&](auto&& f) {
    f(*ref);
    f(*paged);
  };
  auto step = [&](const std::vector<BatchRow>& rows, const std::string& what) {
    const StepResult a = ref->step(rows), b = paged->step(rows);
    expect_same(a, b, what);
  };
  both([](gpu::GpuEngine& e) {
    e.open(1, {.temperature = 0.9f, .top_k = 40, .seed = 11});  // drawn on the GPU
    e.open(2);
    e.open(3);
  });
  const auto p1 = random_tokens(rng, 150), p2 = random_tokens(rng, 70);
  {
    auto rows = rows_of(1, {p1.begin(), p1.begin() + 90}, 0, RowOutput::kLogits, true);
    const auto r2 = rows_of(2, p2, 0, RowOutput::kLogits, true);
    rows.insert(rows.end(), r2.begin(), r2.end());
    step(rows, "two prompts");
  }
  step(rows_of(1, {p1.begin() + 90, p1.end()}, 90, RowOutput::kLogits, true), "the rest of a prompt");
  for (int i = 0; i < 12; ++i) {
    std::vector<BatchRow> rows = {{int32_t(1 + rng() % 20000), 1, 150 + i, RowOutput::kToken, -1, false},
                                  {int32_t(1 + rng() % 20000), 2, 70 + i, RowOutput::kLogprob, 5, false}};
    step(rows, "decode " + std::to_string(i));
  }
  step(rows_of(2, random_tokens(rng, 6), 82, RowOutput::kLogits, false), "six decode rows of one sequence");
  both([](gpu::GpuEngine& e) { e.truncate(1, 30); });
  step(rows_of(1, random_tokens(rng, 9), 30, RowOutput::kLogits, true), "after truncate");
  both([](gpu::GpuEngine& e) { e.close(2); });
  both([](gpu::GpuEngine& e) { e.open(4); });
  step(rows_of(4, random_tokens(rng, 141), 0, RowOutput::kLogits, true), "a reopened sequence");
  step(rows_of(3, random_tokens(rng, kCtx - 1), 0, RowOutput::kNone, true), "to the context");
  step(rows_of(3, random_tokens(rng, 1), kCtx - 1, RowOutput::kLogits, false), "the last position");
  step(rows_of(1, random_tokens(rng, 3), 39, RowOutput::kLogits, false), "after a full one");
  EXPECT_EQ(paged->length(3), kCtx);
  for (SeqId id : {1, 3, 4}) {
    ref->close(id);
    paged->close(id);
  }
  test::expect_all_blocks_free(*paged);
}

// A prefix attached from the cache gives the logits of computing it: the
// history runs as prompt rows in both engines (the path a row takes depends
// only on its prompt flag, and its bits not on the cut: static FP8 scales, or
// the decode step).
TEST_P(GpuPagedKv, AnAttachedPrefixEqualsComputingIt) {
  FUTR_REQUIRE_GPU();
  const Case c = GetParam();
  auto ref = make(c, 0);
  auto paged = make(c, c.block_size);
  std::mt19937 rng(99);
  const int B = c.block_size;
  const auto history = random_tokens(rng, 2 * B + 45), extra = random_tokens(rng, 7),
             other = random_tokens(rng, 4);
  const int H = int(history.size());
  paged->open(1);
  paged->step(rows_of(1, history, 0, RowOutput::kNone, true));
  paged->close(1);  // its full blocks stay cached

  std::vector<int32_t> want = history;
  want.insert(want.end(), extra.begin(), extra.end());
  paged->open(2);
  const int attached = paged->attach_prefix(2, want);
  EXPECT_EQ(attached, H / B * B);
  EXPECT_EQ(paged->length(2), attached);
  EXPECT_FUTR_ERROR(paged->attach_prefix(2, want), "empty sequence");
  const std::vector<int32_t> rest(want.begin() + attached, want.end());
  const StepResult got = paged->step(rows_of(2, rest, attached, RowOutput::kLogits, true));
  ref->open(2);
  ref->step(rows_of(2, {want.begin(), want.begin() + attached}, 0, RowOutput::kNone, true));
  expect_same(ref->step(rows_of(2, rest, attached, RowOutput::kLogits, true)), got,
              "after an attached prefix");
  EXPECT_EQ(paged->stats()["kv_paged"]["blocks_attached"], attached / B);

  // Copy-on-write: a third sequence attaches the prefix while the second holds
  // it, goes back into its last block and writes there.
  paged->open(3);
  ASSERT_EQ(paged->attach_prefix(3, history), attached);
  const int back = attached - 2;
  paged->truncate(3, back);
  EXPECT_EQ(paged->blocks_needed(3, 1), 1);  // the copy
  const StepResult cow = paged->step(rows_of(3, other, back, RowOutput::kLogits, false));
  EXPECT_EQ(paged->stats()["kv_paged"]["block_copies"], 1);
  ref->open(3);
  ref->step(rows_of(3, {history.begin(), history.begin() + back}, 0, RowOutput::kNone, true));
  expect_same(ref->step(rows_of(3, other, back, RowOutput::kLogits, false)), cow, "copy-on-write");
  const std::vector<int32_t> next = {5, 6};
  const int at = int(want.size());
  expect_same(ref->step(rows_of(2, next, at, RowOutput::kLogits, false)),
              paged->step(rows_of(2, next, at, RowOutput::kLogits, false)), "the sharer after the copy");
  paged->close(3);
  paged->close(2);
  EXPECT_EQ(paged->stats()["kv_paged"]["blocks_used"], 0);
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string kv = to_string(i.param.kv);
  for (char& ch : kv)
    if (ch == '-') ch = '_';
  return kv + "_block" + std::to_string(i.param.block_size) + (i.param.prefill ? "_prefill" : "_decode");
}

const Case kCases[] = {
    {KvFormat::kBf16, 16, true},     {KvFormat::kBf16, 64, true},    {KvFormat::kBf16, 128, false},
    {KvFormat::kInt4, 16, false},    {KvFormat::kInt4, 64, true},    {KvFormat::kInt4, 128, true},
    {KvFormat::kInt4Rot, 32, false}, {KvFormat::kInt4Rot, 64, true},
};
INSTANTIATE_TEST_SUITE_P(Formats, GpuPagedKv, ::testing::ValuesIn(kCases), case_name);

TEST(GpuPagedKvEngine, RunningOutOfBlocksIsAnErrorThatChangesNothing) {
  FUTR_REQUIRE_GPU();
  const Case c{KvFormat::kInt4, 16, true};
  auto e = make(c, 16, /*blocks=*/5);
  test::expect_out_of_blocks_changes_nothing(*e, 20000);
}

TEST(GpuPagedKvEngine, SizedByAShareOfGpuMemoryAndRefusesWhatItCannotRun) {
  FUTR_REQUIRE_GPU();
  const Case c{KvFormat::kBf16, 64, false};
  {
    auto e = make(c, 64, 0, 4, 0.25);
    const int64_t regions = 4 * ((kCtx + 63) / 64);
    EXPECT_GT(e->info().kv_blocks, 100 * regions) << e->info().describe;  // ~35 GB of 141: millions of tokens
    EXPECT_NE(e->info().describe.find("paged"), std::string::npos) << e->info().describe;
  }
  EXPECT_FUTR_ERROR(make(c, 48), "16, 32, 64 or 128");
  EXPECT_FUTR_ERROR(make(c, 256), "16, 32, 64 or 128");
  EXPECT_FUTR_ERROR(make(c, 0, 10), "--kv-blocks");
  EXPECT_FUTR_ERROR(make(c, 64, 0, 4, 0.0001), "--gpu-memory-fraction");
}

}  // namespace
}  // namespace futr
