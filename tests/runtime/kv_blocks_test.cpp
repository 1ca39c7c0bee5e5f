// runtime::BlockPool (src/runtime/kv_blocks.h): the block pool and prefix
// index of the paged KV cache. Reuse of cached prefixes (full blocks only,
// tokens compared), LRU eviction order, copy-on-write of a shared partial
// block, reference counts when a sequence is preempted and resumed, the
// accounting (blocks_needed() is what grow() takes), no leak after random
// operations on several sequences (every block free at the end), and hostile
// sizes refused.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "runtime/kv_blocks.h"
#include "support/expect_error.h"

namespace futr::runtime {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Grows s by `tokens` and commits them (no copy expected).
void append(BlockPool& pool, SequenceBlocks& s, std::span<const int32_t> tokens) {
  std::optional<BlockCopy> copy;
  ASSERT_TRUE(pool.grow(s, int(tokens.size()), &copy));
  ASSERT_FALSE(copy.has_value());
  pool.commit(s, tokens);
}

TEST(BlockPool, AllocatesReleasesAndCounts) {
  BlockPool pool(4, 16);
  EXPECT_EQ(pool.num_blocks(), 4);
  EXPECT_EQ(pool.free_blocks(), 4);
  const BlockId a = pool.allocate(), b = pool.allocate();
  EXPECT_EQ(a, 0);  // lowest ids first
  EXPECT_EQ(b, 1);
  EXPECT_EQ(pool.refs(a), 1);
  EXPECT_EQ(pool.used_blocks(), 2);
  pool.ref(a);
  EXPECT_EQ(pool.refs(a), 2);
  pool.release(a);
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.free_blocks(), 4);
  EXPECT_FUTR_ERROR(pool.release(a), "has no owner");
  EXPECT_FUTR_ERROR(pool.ref(a), "is free");
  for (int i = 0; i < 4; ++i) EXPECT_GE(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), -1);  // every block owned
}

TEST(BlockPool, SequenceGrowsOneBlockAtATime) {
  BlockPool pool(8, 4);
  SequenceBlocks s;
  EXPECT_EQ(pool.blocks_needed(s, 0), 0);
  EXPECT_EQ(pool.blocks_needed(s, 1), 1);
  EXPECT_EQ(pool.blocks_needed(s, 4), 1);
  EXPECT_EQ(pool.blocks_needed(s, 5), 2);
  const auto t = iota_tokens(10);
  append(pool, s, std::span(t).first(3));
  EXPECT_EQ(s.table.size(), 1u);
  EXPECT_EQ(pool.blocks_needed(s, 1), 0);  // room in the last block
  EXPECT_EQ(pool.blocks_needed(s, 2), 1);
  append(pool, s, std::span(t).subspan(3, 7));
  EXPECT_EQ(s.len(), 10);
  EXPECT_EQ(s.table.size(), 3u);
  EXPECT_EQ(s.keys.size(), 2u);        // two full blocks
  EXPECT_EQ(pool.cached_blocks(), 2);  // indexed as soon as full
  pool.release(s);
  EXPECT_EQ(pool.free_blocks(), 8);
  EXPECT_EQ(pool.cached_blocks(), 2);  // kept for reuse, evictable
}

TEST(BlockPool, ReusesTheLongestCachedPrefixOfFullBlocks) {
  BlockPool pool(16, 4);
  const auto t = iota_tokens(14, 100);  // 3 full blocks + 2
  SequenceBlocks a;
  append(pool, a, t);
  const std::vector<BlockId> a_table = a.table;
  pool.release(a);

  SequenceBlocks b;
  EXPECT_EQ(pool.attach(b, t), 12);  // the full blocks only
  EXPECT_EQ(std::vector<BlockId>(b.table.begin(), b.table.end()),
            std::vector<BlockId>(a_table.begin(), a_table.begin() + 3));
  EXPECT_EQ(b.len(), 12);
  EXPECT_EQ(pool.refs(b.table[0]), 1);
  EXPECT_EQ(pool.stats().attached, 3);

  // A second sequence shares them; a diverging one shares only the common full blocks.
  SequenceBlocks c, d, e;
  EXPECT_EQ(pool.attach(c, std::span(t).first(9)), 8);
  EXPECT_EQ(pool.refs(b.table[0]), 2);
  auto diverged = t;
  diverged[5] = 7;  // inside block 1
  EXPECT_EQ(pool.attach(d, diverged), 4);
  auto other = t;
  other[0] = 1;
  EXPECT_EQ(pool.attach(e, other), 0);  // the first block differs: nothing
  EXPECT_TRUE(e.table.empty());
  EXPECT_FUTR_ERROR(pool.attach(b, t), "empty sequence");

  // The tokens must follow the same parent: block 1's tokens alone are not a hit.
  SequenceBlocks f;
  EXPECT_EQ(pool.attach(f, std::span(t).subspan(4, 4)), 0);

  for (SequenceBlocks* s : {&b, &c, &d, &e, &f}) pool.release(*s);
  EXPECT_EQ(pool.free_blocks(), 16);
}

TEST(BlockPool, EvictsTheLeastRecentlyReleasedCachedBlockFirst) {
  BlockPool pool(4, 2);
  // Four sequences of one full block each, released in the order 2, 0, 3, 1.
  std::vector<SequenceBlocks> s(4);
  for (int i = 0; i < 4; ++i) append(pool, s[size_t(i)], iota_tokens(2, 10 * i));
  EXPECT_EQ(pool.free_blocks(), 0);
  std::vector<BlockId> block(4);
  for (int i = 0; i < 4; ++i) block[size_t(i)] = s[size_t(i)].table[0];
  for (int i : {2, 0, 3, 1}) pool.release(s[size_t(i)]);
  EXPECT_EQ(pool.free_blocks(), 4);
  EXPECT_EQ(pool.cached_blocks(), 4);
  // Attaching one makes it recent again: it is released last.
  SequenceBlocks again;
  EXPECT_EQ(pool.attach(again, iota_tokens(2, 20)), 2);  // sequence 2's block
  pool.release(again);                                   // order now 0, 3, 1, 2
  for (int i : {0, 3, 1}) {
    EXPECT_EQ(pool.allocate(), block[size_t(i)]);
    SequenceBlocks probe;
    EXPECT_EQ(pool.attach(probe, iota_tokens(2, 10 * i)), 0) << "block of sequence " << i << " was evicted";
  }
  EXPECT_EQ(pool.stats().evicted, 3);
  SequenceBlocks probe;
  EXPECT_EQ(pool.attach(probe, iota_tokens(2, 20)), 2);  // the recent one survived
  pool.release(probe);
}

TEST(BlockPool, FreeBlocksAreTakenBeforeCachedOnes) {
  BlockPool pool(3, 2);
  SequenceBlocks a;
  append(pool, a, iota_tokens(2));
  pool.release(a);
  const BlockId x = pool.allocate(), y = pool.allocate();
  EXPECT_NE(x, a.table.empty() ? -1 : a.table[0]);
  EXPECT_EQ(pool.stats().evicted, 0);
  SequenceBlocks b;
  EXPECT_EQ(pool.attach(b, iota_tokens(2)), 2);  // still cached
  pool.release(b);
  pool.release(x);
  pool.release(y);
}

TEST(BlockPool, CopyOnWriteOfASharedPartialBlock) {
  BlockPool pool(8, 4);
  const auto t = iota_tokens(8, 50);
  SequenceBlocks a, b;
  append(pool, a, t);
  EXPECT_EQ(pool.attach(b, t), 8);
  const BlockId shared = a.table[1];
  EXPECT_EQ(pool.refs(shared), 2);
  pool.truncate(b, 6);  // into the shared block: rows [0, 2) of it stay b's
  EXPECT_EQ(b.table.size(), 2u);
  EXPECT_EQ(pool.blocks_needed(b, 1), 1);  // the copy
  EXPECT_EQ(pool.blocks_needed(b, 3), 2);  // the copy and one new block
  std::optional<BlockCopy> copy;
  EXPECT_FUTR_ERROR(pool.grow(b, 1, nullptr), "needs a copy");
  ASSERT_TRUE(pool.grow(b, 1, &copy));
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->src, shared);
  EXPECT_NE(copy->dst, shared);
  EXPECT_EQ(copy->rows, 2);
  EXPECT_EQ(b.table[1], copy->dst);
  EXPECT_EQ(pool.refs(shared), 1);    // a's only
  EXPECT_TRUE(pool.indexed(shared));  // a's content did not change
  pool.commit(b, std::vector<int32_t>{999});
  // a's prefix is still cached in full; b's rewritten block is not a copy of it.
  SequenceBlocks c;
  EXPECT_EQ(pool.attach(c, t), 8);
  EXPECT_EQ(c.table[1], shared);
  EXPECT_EQ(pool.stats().copies, 1);
  for (SequenceBlocks* s : {&a, &b, &c}) pool.release(*s);
  EXPECT_EQ(pool.free_blocks(), 8);
}

TEST(BlockPool, TheOnlyOwnerWritingIntoACachedBlockTakesItOutOfTheIndex) {
  BlockPool pool(4, 4);
  const auto t = iota_tokens(8);
  SequenceBlocks a;
  append(pool, a, t);
  EXPECT_EQ(pool.cached_blocks(), 2);
  pool.truncate(a, 5);
  EXPECT_EQ(pool.blocks_needed(a, 1), 0);  // no copy: a owns it alone
  std::optional<BlockCopy> copy;
  ASSERT_TRUE(pool.grow(a, 1, &copy));
  EXPECT_FALSE(copy.has_value());
  EXPECT_FALSE(pool.indexed(a.table[1]));
  pool.commit(a, std::vector<int32_t>{77});
  SequenceBlocks b;
  EXPECT_EQ(pool.attach(b, t), 4);  // block 1 changed: only block 0 is reusable
  pool.release(b);
  pool.release(a);
  EXPECT_EQ(pool.free_blocks(), 4);
}

TEST(BlockPool, AnEvictedParentInvalidatesItsChildren) {
  BlockPool pool(3, 2);
  const auto t = iota_tokens(4);
  SequenceBlocks a;
  append(pool, a, t);  // blocks p (tokens 0, 1) and c (2, 3)
  const BlockId p = a.table[0], c = a.table[1];
  pool.release(a);  // LRU: c, p
  pool.ref(c);
  pool.release(c);                        // LRU: p, c
  const BlockId spare = pool.allocate();  // the free block first
  EXPECT_NE(spare, p);
  EXPECT_NE(spare, c);
  EXPECT_EQ(pool.allocate(), p);  // then the least recently released: p, evicted
  EXPECT_TRUE(pool.indexed(c));   // c is still indexed, behind a parent that is gone
  pool.release(p);
  // Block 0 is computed again with the same tokens (in block p, a new generation).
  SequenceBlocks b;
  append(pool, b, std::span(t).first(2));
  EXPECT_EQ(b.table[0], p);
  pool.release(b);
  // c was indexed behind p's old generation: not attached behind the new one.
  SequenceBlocks probe;
  EXPECT_EQ(pool.attach(probe, t), 2);
  pool.release(probe);
  pool.release(spare);
  EXPECT_EQ(pool.free_blocks(), 3);
  for (BlockId id = 0; id < 3; ++id) EXPECT_EQ(pool.refs(id), 0);
}

TEST(BlockPool, RefcountsUnderPreemptionAndResume) {
  // Two requests share a cached system prompt; the newer is preempted (gives
  // its blocks back) and resumed through the prefix cache.
  BlockPool pool(10, 4);
  const auto system = iota_tokens(8, 1);
  SequenceBlocks warm;
  append(pool, warm, system);
  pool.release(warm);

  auto prompt = [&](int32_t tag, int extra) {
    auto p = system;
    for (int i = 0; i < extra; ++i) p.push_back(tag + i);
    return p;
  };
  const auto pa = prompt(1000, 6), pb = prompt(2000, 9);
  SequenceBlocks a, b;
  EXPECT_EQ(pool.attach(a, pa), 8);
  append(pool, a, std::span(pa).subspan(8));
  EXPECT_EQ(pool.attach(b, pb), 8);
  append(pool, b, std::span(pb).subspan(8));
  EXPECT_EQ(pool.refs(a.table[0]), 2);
  EXPECT_EQ(pool.refs(a.table[1]), 2);
  const int64_t used = pool.used_blocks();  // 2 shared + 2 (a) + 3 (b)
  EXPECT_EQ(used, 7);

  // Preempt b: its own blocks come back, the shared ones stay a's.
  const std::vector<int32_t> b_history = b.tokens;
  pool.release(b);
  EXPECT_EQ(pool.used_blocks(), 4);
  EXPECT_EQ(pool.refs(a.table[0]), 1);

  // Resume: its full blocks are still cached (nothing evicted them).
  SequenceBlocks r;
  EXPECT_EQ(pool.attach(r, b_history), 16);  // 4 full blocks of its 17 positions
  append(pool, r, std::span(b_history).subspan(16));
  EXPECT_EQ(r.tokens, b_history);
  EXPECT_EQ(pool.used_blocks(), 7);
  pool.release(a);
  pool.release(r);
  EXPECT_EQ(pool.free_blocks(), 10);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(BlockPool, GrowRefusesAndChangesNothingWhenFull) {
  BlockPool pool(3, 4);
  SequenceBlocks a, b;
  append(pool, a, iota_tokens(5));  // 2 blocks, 1 free
  const auto before = a.table;
  std::optional<BlockCopy> copy;
  EXPECT_FALSE(pool.grow(b, 5, &copy));  // needs 2, 1 free
  EXPECT_TRUE(b.table.empty());
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_TRUE(pool.grow(b, 4, &copy));
  EXPECT_EQ(pool.free_blocks(), 0);
  EXPECT_EQ(a.table, before);
  // A grow that is never committed is trimmed by truncate to the length.
  pool.truncate(b, 0);
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_FUTR_ERROR(pool.truncate(a, 6), "cannot truncate");
  EXPECT_FUTR_ERROR(pool.grow(a, -1, &copy), "cannot grow");
  pool.release(a);
  EXPECT_EQ(pool.free_blocks(), 3);
}

TEST(BlockPool, RandomOperationsLeakNothingAndAccountExactly) {
  for (int block_size : {1, 3, 16}) {
    std::mt19937 rng(uint32_t(7 + block_size));
    BlockPool pool(40, block_size);
    std::vector<SequenceBlocks> seqs(6);
    // Prompts drawn from a few shared prefixes, so attach() hits.
    auto random_tokens = [&](int n) {
      std::vector<int32_t> t(static_cast<size_t>(n));
      const int32_t family = int32_t(rng() % 3);
      for (int i = 0; i < n; ++i) t[size_t(i)] = i < n / 2 ? family * 100 + i : int32_t(rng() % 5);
      return t;
    };
    for (int op = 0; op < 4000; ++op) {
      SequenceBlocks& s = seqs[rng() % seqs.size()];
      const int kind = int(rng() % 10);
      if (kind < 5) {
        const int n = 1 + int(rng() % (2 * block_size + 3));
        const int64_t need = pool.blocks_needed(s, n), free_before = pool.free_blocks();
        std::optional<BlockCopy> copy;
        const bool ok = pool.grow(s, n, &copy);
        ASSERT_EQ(ok, need <= free_before);
        if (!ok) continue;
        ASSERT_EQ(free_before - pool.free_blocks(), need) << "blocks_needed() is what grow() takes";
        if (copy) {
          ASSERT_EQ(copy->rows, s.len() % block_size);
          ASSERT_EQ(pool.refs(copy->dst), 1);
        }
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = int32_t(rng() % 4);
        pool.commit(s, t);
      } else if (kind < 7) {
        pool.truncate(s, s.len() == 0 ? 0 : int(rng() % size_t(s.len() + 1)));
      } else if (kind < 9) {
        pool.release(s);
        const auto t = random_tokens(int(rng() % 40));
        const int got = pool.attach(s, t);
        ASSERT_EQ(got % block_size, 0);
        ASSERT_EQ(std::vector<int32_t>(t.begin(), t.begin() + got), s.tokens);
        // Computes the rest, as an engine would (the prefix gets cached).
        const int rest = int(t.size()) - got;
        std::optional<BlockCopy> copy;
        if (rest > 0 && pool.grow(s, rest, &copy)) pool.commit(s, std::span(t).subspan(size_t(got)));
      } else {
        pool.release(s);
      }
      // Every owned block's count equals the tables that hold it.
      std::vector<int> holders(size_t(pool.num_blocks()), 0);
      for (const SequenceBlocks& q : seqs) {
        ASSERT_EQ(q.table.size(), size_t((q.len() + block_size - 1) / block_size));
        for (BlockId b : q.table) ++holders[size_t(b)];
      }
      int64_t used = 0;
      for (BlockId b = 0; b < pool.num_blocks(); ++b) {
        ASSERT_EQ(pool.refs(b), holders[size_t(b)]) << "block " << b << " after op " << op;
        used += holders[size_t(b)] > 0;
      }
      ASSERT_EQ(pool.used_blocks(), used);
    }
    for (SequenceBlocks& s : seqs) pool.release(s);
    EXPECT_EQ(pool.free_blocks(), pool.num_blocks()) << "block size " << block_size;
    EXPECT_EQ(pool.used_blocks(), 0);
    EXPECT_GT(pool.stats().attached, 0);
    if (block_size > 1) EXPECT_GT(pool.stats().copies, 0);  // (a block of 1 is never partial)
  }
}

TEST(BlockPool, HostileSizesAreRefused) {
  EXPECT_FUTR_ERROR(BlockPool(4, 0), "block size 0");
  EXPECT_FUTR_ERROR(BlockPool(4, -16), "out of range");
  EXPECT_FUTR_ERROR(BlockPool(4, BlockPool::kMaxBlockSize + 1), "out of range");
  EXPECT_FUTR_ERROR(BlockPool(0, 16), "KV blocks: 0");
  EXPECT_FUTR_ERROR(BlockPool(-1, 16), "out of range");
  EXPECT_FUTR_ERROR(BlockPool(BlockPool::kMaxBlocks + 1, 16), "out of range");
  BlockPool one(1, BlockPool::kMaxBlockSize);
  SequenceBlocks s;
  const auto t = iota_tokens(BlockPool::kMaxBlockSize);
  append(one, s, t);
  std::optional<BlockCopy> copy;
  EXPECT_FALSE(one.grow(s, 1, &copy));
  EXPECT_FUTR_ERROR(one.refs(1), "out of range");
  EXPECT_FUTR_ERROR(one.release(BlockId(-1)), "out of range");
  one.release(s);
  EXPECT_EQ(one.free_blocks(), 1);
}

}  // namespace
}  // namespace futr::runtime
