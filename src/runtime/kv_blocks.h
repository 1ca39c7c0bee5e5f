// The block pool of a paged KV cache and its prefix index (docs/LAYOUTS.md,
// "Paged KV cache"): which fixed-size blocks of B token slots each sequence
// owns, which are free, and which hold a cached token prefix that a new
// sequence can attach instead of computing it again. Host bookkeeping only:
// an engine keeps the K/V rows of block b in slots [b * B, (b + 1) * B) of its
// slot-indexed storage and runs the copies this class asks for.
//
// A block is in one of three states:
//   free      no owner, no content worth keeping (the free list);
//   owned     refs > 0: one or more sequences hold it in their block table;
//   cached    refs == 0 but indexed: a full block whose content is known;
//             evictable, least recently released first, when a block is
//             wanted and the free list is empty.
// An owned block may also be indexed (a full block of a running sequence is
// published as soon as its B rows are written, so concurrent requests with
// the same system prompt share it).
//
// Prefix index. A full block is keyed by the hash chain of its prefix,
//   key(block i) = H(key(block i - 1), tokens[i*B, (i+1)*B)),  key(-1) = kRootKey,
// and holds its tokens, its parent block and the parent's generation. A match
// walks from the root and accepts a block only when its tokens equal the
// wanted ones and its parent is the block matched one level up, in the same
// generation (a block's generation changes whenever its content may change:
// allocation, or being written again). So a hit is exact by induction,
// whatever the hash collides with; a collision is a miss.
//
// Copy-on-write. A sequence that appends into its last, partially filled
// block while another sequence also holds it (after truncate() into an
// attached block, or a fork) gets a new block and a BlockCopy (rows [0, r) of
// the old block into the new one) that the engine runs before writing; its
// reference to the old block is dropped. A sequence that is the only owner of
// an indexed block it writes into takes the block out of the index first (the
// cached content is about to change).
//
// Accounting. free_blocks() counts the free and the cached-unreferenced
// blocks (both can be handed out); blocks_needed(seq, n) is exactly what
// grow(seq, n) takes, so a scheduler can check a step before running it.
//
// Not thread-safe (one engine thread). Every misuse (an id out of range, a
// release of a free block, a truncate beyond the length) is a futr::Error or,
// for a broken invariant, FUTR_ASSERT.
//
// Tests: tests/runtime/kv_blocks_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace futr::runtime {

using BlockId = int32_t;

// A sequence's view of the pool: its blocks in position order and the tokens
// stored at its positions (the hash chain needs them).
struct SequenceBlocks {
  std::vector<BlockId> table;   // [ceil(len / B)] block ids in position order
  std::vector<int32_t> tokens;  // [len] the token id stored at each position
  std::vector<uint64_t> keys;   // [len / B] the prefix key of each full block
  int len() const { return int(tokens.size()); }
};

// Copy rows [0, rows) of block src into block dst (copy-on-write).
struct BlockCopy {
  BlockId src = -1;
  BlockId dst = -1;
  int rows = 0;
};

struct BlockPoolStats {
  int64_t allocated = 0;  // allocate() calls that returned a block
  int64_t evicted = 0;    // cached blocks handed out again (their content dropped)
  int64_t copies = 0;     // copy-on-write copies
  int64_t attached = 0;   // blocks attached from the prefix index
};

class BlockPool {
 public:
  static constexpr uint64_t kRootKey = 0x9e3779b97f4a7c15ull;  // key(-1): the empty prefix
  static constexpr int kMaxBlockSize = 1 << 16;
  static constexpr int64_t kMaxBlocks = int64_t(1) << 24;

  // num_blocks in [1, 2^24], block_size in [1, 2^16] tokens (futr::Error otherwise).
  BlockPool(int64_t num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return int64_t(blocks_.size()); }
  // Blocks that allocate() can hand out: free + cached with no owner.
  int64_t free_blocks() const { return int64_t(free_.size()) + lru_size_; }
  int64_t used_blocks() const { return num_blocks() - free_blocks(); }  // owned by a sequence
  int64_t cached_blocks() const { return int64_t(index_.size()); }      // in the prefix index
  const BlockPoolStats& stats() const { return stats_; }

  // --- Blocks ---
  // A block with refs 1: a free one, else the least recently released cached
  // one (taken out of the index); -1 when every block is owned.
  BlockId allocate();
  void ref(BlockId b);      // one more owner (b owned or cached)
  void release(BlockId b);  // one owner less; at zero: cached -> evictable, else free
  int refs(BlockId b) const;
  bool indexed(BlockId b) const;

  // --- Prefix index ---
  // The key of a full block with `tokens` (B ids) after the prefix keyed `parent`.
  static uint64_t chain_key(uint64_t parent, std::span<const int32_t> tokens);

  // --- Sequences (what an engine calls) ---
  // Blocks grow(s, n) would take: new blocks for positions [len, len + n),
  // plus one when the last block is partial and shared (copy-on-write).
  int64_t blocks_needed(const SequenceBlocks& s, int n) const;
  // Takes those blocks (false, and nothing changes, when free_blocks() is too
  // small). `copy` is set when a copy-on-write must run before the rows are
  // written. The positions become s's once commit() records their tokens.
  bool grow(SequenceBlocks& s, int n, std::optional<BlockCopy>* copy);
  // The rows [len, len + tokens.size()) were written: records their tokens
  // and indexes every block they filled (unless an equal block is indexed).
  // The blocks must have been taken by grow().
  void commit(SequenceBlocks& s, std::span<const int32_t> tokens);
  // Keeps positions [0, len): the blocks past ceil(len / B) are released (also
  // blocks taken by grow() and never committed).
  void truncate(SequenceBlocks& s, int len);
  // Releases every block of s (the last first, so a prefix outlives its
  // tail in the cache) and empties it.
  void release(SequenceBlocks& s);
  // s empty: attaches the longest run of indexed blocks whose tokens are a
  // prefix of `tokens` (full blocks only); returns the positions attached,
  // a multiple of B, at most tokens.size().
  int attach(SequenceBlocks& s, std::span<const int32_t> tokens);

 private:
  struct Block {
    int32_t refs = 0;
    bool indexed = false;
    uint32_t gen = 0;              // changes whenever the content may change
    uint64_t key = 0;              // prefix key (indexed)
    BlockId parent = -1;           // the block before it in its prefix (indexed; -1: first)
    uint32_t parent_gen = 0;       // the parent's generation when indexed
    BlockId prev = -1, next = -1;  // LRU links (cached with refs == 0)
    bool in_lru = false;
  };
  void check(BlockId b) const;
  void lru_push(BlockId b);  // at the most recent end
  void lru_remove(BlockId b);
  void unindex(BlockId b);  // out of the index, new generation
  // The indexed block after `parent` (-1: the root) with `tokens`, or -1.
  BlockId lookup(uint64_t key, BlockId parent, std::span<const int32_t> tokens) const;

  int block_size_;
  std::vector<Block> blocks_;  // [num_blocks]
  std::vector<std::vector<int32_t>>
      contents_;                           // [num_blocks][B] the tokens of indexed blocks (empty otherwise)
  std::vector<BlockId> free_;              // free blocks (a stack)
  BlockId lru_head_ = -1, lru_tail_ = -1;  // head: least recently released
  int64_t lru_size_ = 0;
  std::unordered_map<uint64_t, BlockId> index_;  // prefix key -> block
  BlockPoolStats stats_;
};

}  // namespace futr::runtime
