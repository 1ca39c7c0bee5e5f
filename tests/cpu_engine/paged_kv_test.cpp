// The paged KV cache of the CPU engines (src/cpu_engine/paged_kv.h): on every
// KV format and block sizes 1, 7 (not dividing the context), 16 and 64, a
// script of steps (prompt chunks, decode rows, several decode rows of one
// sequence, truncate and continue, close and reopen into reused blocks) gives
// bit for bit the logits and tokens of the contiguous cache; an attached
// cached prefix gives the logits of computing it (copy-on-write included);
// running out of blocks is an error that changes nothing; a sampler's state
// survives a close and reopen (preemption); every block is free at the end.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cpu_engine/engine.h"
#include "cpu_engine/tiny_model.h"
#include "support/expect_error.h"
#include "support/paging.h"

namespace futr::cpu {
namespace {

using runtime::BatchRow;
using runtime::RowOutput;
using runtime::SeqId;
using runtime::StepResult;

constexpr int kCtx = 100;

const Model& model() {
  static const Model m = test::random_model(test::tiny_config(), 1234);
  return m;
}

std::unique_ptr<CpuEngine> make(KvFormat kv, int block_size, int64_t blocks = 0, int max_seqs = 3) {
  CpuEngineOptions o;
  o.weights = WeightFormat::kFp32;
  o.kv = kv;
  o.kv_block = 16;  // the Hadamard block (int4-rot), head_dim 16
  o.ctx = kCtx;
  o.max_seqs = max_seqs;
  o.max_step_tokens = 128;
  o.threads = 2;
  o.kv_block_size = block_size;
  o.kv_blocks = blocks;
  return std::make_unique<CpuEngine>(model(), nullptr, o);
}

void expect_same(const StepResult& a, const StepResult& b, const std::string& what) {
  test::expect_same_results(a, b, what);
}

std::vector<BatchRow> rows_of(SeqId seq, const std::vector<int32_t>& tokens, int pos, RowOutput out,
                              bool prompt) {
  return test::rows_of(seq, tokens, pos, out, prompt, 3);
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % 97);
  return t;
}

struct Case {
  KvFormat kv;
  int block_size;
};

class PagedKv : public ::testing::TestWithParam<Case> {};

// One script on both engines, step by step.
TEST_P(PagedKv, StepsEqualTheContiguousCacheBitForBit) {
  const Case c = GetParam();
  auto ref = make(c.kv, 0);
  auto paged = make(c.kv, c.block_size);
  ASSERT_EQ(ref->info().kv_block_size, 0);
  ASSERT_EQ(paged->info().kv_block_size, c.block_size);
  std::mt19937 rng(uint32_t(c.block_size) * 31 + uint32_t(c.kv));
  auto both = [&](auto&& f) {
    f(*ref);
    f(*paged);
  };
  auto step = [&](const std::vector<BatchRow>& rows, const std::string& what) {
    const StepResult a = ref->step(rows), b = paged->step(rows);
    expect_same(a, b, what);
  };
  both([](CpuEngine& e) {
    e.open(1, {.temperature = 0.9f, .seed = 11});
    e.open(2);
    e.open(3);
  });
  // Prompts in chunks, two sequences in one step.
  const auto p1 = random_tokens(rng, 37), p2 = random_tokens(rng, 20);
  {
    auto rows = rows_of(1, {p1.begin(), p1.begin() + 23}, 0, RowOutput::kLogits, true);
    const auto r2 = rows_of(2, p2, 0, RowOutput::kLogits, true);
    rows.insert(rows.end(), r2.begin(), r2.end());
    step(rows, "two prompts");
  }
  step(rows_of(1, {p1.begin() + 23, p1.end()}, 23, RowOutput::kLogits, true), "the rest of a prompt");
  // Decode rows (sampled, log-probabilities, logits), then several decode rows of one sequence.
  for (int i = 0; i < 12; ++i) {
    std::vector<BatchRow> rows = {{int32_t(rng() % 97), 1, 37 + i, RowOutput::kToken, -1, false},
                                  {int32_t(rng() % 97), 2, 20 + i, RowOutput::kLogprob, 5, false}};
    step(rows, "decode " + std::to_string(i));
  }
  step(rows_of(2, random_tokens(rng, 6), 32, RowOutput::kLogits, false), "six decode rows of one sequence");
  // Truncate into a block and continue (the block is indexed: it leaves the index).
  both([](CpuEngine& e) { e.truncate(1, 30); });
  step(rows_of(1, random_tokens(rng, 9), 30, RowOutput::kLogits, true), "after truncate");
  // Close and reopen: the new sequence gets blocks another one used.
  both([](CpuEngine& e) { e.close(2); });
  both([](CpuEngine& e) { e.open(4); });
  step(rows_of(4, random_tokens(rng, 41), 0, RowOutput::kLogits, true), "a reopened sequence");
  // A sequence up to the context.
  step(rows_of(3, random_tokens(rng, kCtx), 0, RowOutput::kNone, true), "to the context");
  step(rows_of(1, random_tokens(rng, 3), 39, RowOutput::kLogits, false), "after a full one");
  EXPECT_EQ(paged->length(3), kCtx);
  for (SeqId id : {1, 3, 4}) {
    ref->close(id);
    paged->close(id);
  }
  test::expect_all_blocks_free(*paged);
}

// A prefix attached from the cache gives the logits of computing it. The
// history is fed as decode rows (not prompt rows), whose bits do not depend
// on how they are grouped into steps, so the reference can compute the same
// positions in other steps and match bit for bit.
TEST_P(PagedKv, AnAttachedPrefixEqualsComputingIt) {
  const Case c = GetParam();
  auto ref = make(c.kv, 0);
  auto paged = make(c.kv, c.block_size);
  std::mt19937 rng(99);
  const auto history = random_tokens(rng, 45), extra = random_tokens(rng, 7), other = random_tokens(rng, 4);
  // The first sequence computes the history, 5 rows a step, and closes: its full blocks stay cached.
  paged->open(1);
  for (int p = 0; p < 45; p += 5)
    paged->step(rows_of(1, {history.begin() + p, history.begin() + p + 5}, p, RowOutput::kNone, false));
  paged->close(1);

  std::vector<int32_t> want = history;
  want.insert(want.end(), extra.begin(), extra.end());
  paged->open(2);
  const int attached = paged->attach_prefix(2, want);
  EXPECT_EQ(attached, 45 / c.block_size * c.block_size);
  EXPECT_EQ(paged->length(2), attached);
  if (attached > 0) EXPECT_FUTR_ERROR(paged->attach_prefix(2, want), "empty sequence");
  const std::vector<int32_t> rest(want.begin() + attached, want.end());
  const StepResult got = paged->step(rows_of(2, rest, attached, RowOutput::kLogits, false));

  ref->open(2);
  if (attached > 0)
    ref->step(rows_of(2, {want.begin(), want.begin() + attached}, 0, RowOutput::kNone, false));
  expect_same(ref->step(rows_of(2, rest, attached, RowOutput::kLogits, false)), got,
              "after an attached prefix");

  // Copy-on-write: a third sequence attaches the prefix while the second holds
  // it, goes back into its last block and writes there.
  if (attached >= 2 * c.block_size && c.block_size > 2) {
    paged->open(3);
    ASSERT_EQ(paged->attach_prefix(3, history), attached);
    const int back = attached - 2;
    paged->truncate(3, back);
    EXPECT_EQ(paged->blocks_needed(3, 1), 1);  // the copy
    const StepResult cow = paged->step(rows_of(3, other, back, RowOutput::kLogits, false));
    EXPECT_EQ(paged->stats()["kv_paged"]["block_copies"], 1);
    ref->open(3);
    ref->step(rows_of(3, {history.begin(), history.begin() + back}, 0, RowOutput::kNone, false));
    expect_same(ref->step(rows_of(3, other, back, RowOutput::kLogits, false)), cow, "copy-on-write");
    // The second sequence's blocks are untouched by the third's writes.
    const std::vector<int32_t> next = {5, 6};
    expect_same(ref->step(rows_of(2, next, 52, RowOutput::kLogits, false)),
                paged->step(rows_of(2, next, 52, RowOutput::kLogits, false)), "the sharer after the copy");
    paged->close(3);
  }
  paged->close(2);
  EXPECT_EQ(paged->stats()["kv_paged"]["blocks_used"], 0);
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string kv = to_string(i.param.kv);
  for (char& ch : kv)
    if (ch == '-') ch = '_';
  return kv + "_block" + std::to_string(i.param.block_size);
}

const Case kCases[] = {
    {KvFormat::kFp32, 1},  {KvFormat::kFp32, 7},    {KvFormat::kFp32, 16},    {KvFormat::kFp32, 64},
    {KvFormat::kBf16, 1},  {KvFormat::kBf16, 16},   {KvFormat::kInt4, 7},     {KvFormat::kInt4, 16},
    {KvFormat::kInt4, 64}, {KvFormat::kInt4Rot, 1}, {KvFormat::kInt4Rot, 16}, {KvFormat::kInt4Rot, 64},
};
INSTANTIATE_TEST_SUITE_P(Formats, PagedKv, ::testing::ValuesIn(kCases), case_name);

TEST(PagedKvEngine, RunningOutOfBlocksIsAnErrorThatChangesNothing) {
  auto e = make(KvFormat::kBf16, 8, /*blocks=*/5);
  test::expect_out_of_blocks_changes_nothing(*e, 97);
  EXPECT_FUTR_ERROR(make(KvFormat::kBf16, -1), "--block-size");
  EXPECT_FUTR_ERROR(make(KvFormat::kBf16, 0, 4), "--kv-blocks needs");
  EXPECT_FUTR_ERROR(make(KvFormat::kBf16, 1 << 16, 1 << 10), "more than 16777216");
}

// A preempted sequence continues its draws exactly: the sampler's state is
// taken before close and given to the sequence that resumes it.
TEST(PagedKvEngine, SamplerStateSurvivesAReopen) {
  auto e = make(KvFormat::kFp32, 4);
  const runtime::SamplerConfig sc{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 77};
  std::mt19937 rng(5);
  const auto prompt = random_tokens(rng, 9);
  auto run = [&](bool preempt) {
    std::vector<int32_t> out;
    e->open(1, sc);
    e->step(rows_of(1, prompt, 0, RowOutput::kNone, true));
    std::vector<int32_t> history = prompt;
    int32_t last = prompt.back();
    SeqId id = 1;
    e->truncate(1, 8);  // the last prompt token is fed as the first decode row
    history.pop_back();
    for (int i = 0; i < 12; ++i) {
      if (preempt && i == 5) {
        const std::optional<runtime::Sampler> state = e->sampler_state(id);
        EXPECT_TRUE(state.has_value());
        e->close(id);
        ++id;
        e->open(id, sc);
        const int attached = e->attach_prefix(id, history);
        if (attached < int(history.size()))
          e->step(
              rows_of(id, {history.begin() + attached, history.end()}, attached, RowOutput::kNone, false));
        e->restore_sampler(id, *state);
      }
      const StepResult r =
          e->step(std::vector<BatchRow>{{last, id, int(history.size()), RowOutput::kToken, -1, false}});
      history.push_back(last);
      last = r.tokens[0];
      out.push_back(last);
    }
    e->close(id);
    return out;
  };
  const auto plain = run(false);
  EXPECT_EQ(run(true), plain);
  EXPECT_EQ(e->free_blocks(), e->info().kv_blocks);
}

}  // namespace
}  // namespace futr::cpu
