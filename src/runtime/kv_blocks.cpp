// The block pool and prefix index of a paged KV cache (see kv_blocks.h).
#include "runtime/kv_blocks.h"

#include <algorithm>

#include "core/error.h"

namespace futr::runtime {

namespace {
// splitmix64's finalizer: every input bit reaches every output bit.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

BlockPool::BlockPool(int64_t num_blocks, int block_size) : block_size_(block_size) {
  FUTR_CHECK(block_size >= 1 && block_size <= kMaxBlockSize,
             "KV block size {} is out of range (1..{} tokens)", block_size, kMaxBlockSize);
  FUTR_CHECK(num_blocks >= 1 && num_blocks <= kMaxBlocks, "KV blocks: {} is out of range (1..{})", num_blocks,
             kMaxBlocks);
  blocks_.resize(size_t(num_blocks));
  contents_.resize(size_t(num_blocks));
  free_.reserve(size_t(num_blocks));
  // Lowest ids first out of the stack.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(BlockId(b));
}

void BlockPool::check(BlockId b) const {
  FUTR_CHECK(b >= 0 && int64_t(b) < num_blocks(), "KV block {} is out of range (0..{})", b, num_blocks() - 1);
}

int BlockPool::refs(BlockId b) const {
  check(b);
  return blocks_[size_t(b)].refs;
}

bool BlockPool::indexed(BlockId b) const {
  check(b);
  return blocks_[size_t(b)].indexed;
}

void BlockPool::lru_push(BlockId b) {
  Block& k = blocks_[size_t(b)];
  FUTR_ASSERT(!k.in_lru);
  k.prev = lru_tail_;
  k.next = -1;
  if (lru_tail_ >= 0) blocks_[size_t(lru_tail_)].next = b;
  else lru_head_ = b;
  lru_tail_ = b;
  k.in_lru = true;
  ++lru_size_;
}

void BlockPool::lru_remove(BlockId b) {
  Block& k = blocks_[size_t(b)];
  FUTR_ASSERT(k.in_lru);
  if (k.prev >= 0) blocks_[size_t(k.prev)].next = k.next;
  else lru_head_ = k.next;
  if (k.next >= 0) blocks_[size_t(k.next)].prev = k.prev;
  else lru_tail_ = k.prev;
  k.prev = k.next = -1;
  k.in_lru = false;
  --lru_size_;
}

void BlockPool::unindex(BlockId b) {
  Block& k = blocks_[size_t(b)];
  if (!k.indexed) return;
  const auto it = index_.find(k.key);
  FUTR_ASSERT(it != index_.end() && it->second == b);
  index_.erase(it);
  k.indexed = false;
  ++k.gen;  // children keyed on this content no longer match
  contents_[size_t(b)].clear();
}

BlockId BlockPool::allocate() {
  BlockId b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    lru_remove(b);
    unindex(b);
    ++stats_.evicted;
  } else {
    return -1;
  }
  Block& k = blocks_[size_t(b)];
  FUTR_ASSERT(k.refs == 0 && !k.indexed);
  k.refs = 1;
  ++k.gen;
  ++stats_.allocated;
  return b;
}

void BlockPool::ref(BlockId b) {
  check(b);
  Block& k = blocks_[size_t(b)];
  FUTR_CHECK(k.refs > 0 || k.indexed, "KV block {} is free: it has no content to share", b);
  if (k.refs == 0) lru_remove(b);
  ++k.refs;
}

void BlockPool::release(BlockId b) {
  check(b);
  Block& k = blocks_[size_t(b)];
  FUTR_CHECK(k.refs > 0, "KV block {} is released but has no owner", b);
  if (--k.refs > 0) return;
  if (k.indexed) lru_push(b);
  else free_.push_back(b);
}

uint64_t BlockPool::chain_key(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent ^ 0x2545f4914f6cdd1dull);
  for (int32_t t : tokens) h = mix(h ^ (uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ull));
  return h;
}

BlockId BlockPool::lookup(uint64_t key, BlockId parent, std::span<const int32_t> tokens) const {
  const auto it = index_.find(key);
  if (it == index_.end()) return -1;
  const BlockId b = it->second;
  const Block& k = blocks_[size_t(b)];
  if (k.parent != parent) return -1;
  if (parent >= 0 && k.parent_gen != blocks_[size_t(parent)].gen) return -1;
  const std::vector<int32_t>& c = contents_[size_t(b)];
  if (!std::equal(c.begin(), c.end(), tokens.begin(), tokens.end())) return -1;  // a collision: a miss
  return b;
}

int64_t BlockPool::blocks_needed(const SequenceBlocks& s, int n) const {
  if (n <= 0) return 0;
  const int64_t len = s.len(), B = block_size_;
  const int64_t have = int64_t(s.table.size());
  int64_t need = std::max<int64_t>(0, ceil_div(len + n, B) - have);
  // Copy-on-write of a shared, partially filled last block.
  if (len % B != 0 && have == ceil_div(len, B) && blocks_[size_t(s.table.back())].refs > 1) ++need;
  return need;
}

bool BlockPool::grow(SequenceBlocks& s, int n, std::optional<BlockCopy>* copy) {
  if (copy) copy->reset();
  FUTR_CHECK(n >= 0, "KV blocks: cannot grow a sequence by {} positions", n);
  if (n == 0) return true;
  if (blocks_needed(s, n) > free_blocks()) return false;
  const int64_t len = s.len(), B = block_size_;
  if (len % B != 0 && int64_t(s.table.size()) == ceil_div(len, B)) {
    const BlockId last = s.table.back();
    if (blocks_[size_t(last)].refs > 1) {
      FUTR_CHECK(copy != nullptr, "KV blocks: a shared block needs a copy and the caller takes none");
      const BlockId dst = allocate();
      FUTR_ASSERT(dst >= 0);
      *copy = BlockCopy{last, dst, int(len % B)};
      s.table.back() = dst;
      release(last);
      ++stats_.copies;
    } else {
      unindex(last);  // its only owner writes into it: the cached content changes
    }
  }
  while (int64_t(s.table.size()) < ceil_div(len + n, B)) {
    const BlockId b = allocate();
    FUTR_ASSERT(b >= 0);  // blocks_needed() said there are enough
    s.table.push_back(b);
  }
  return true;
}

void BlockPool::commit(SequenceBlocks& s, std::span<const int32_t> tokens) {
  const int64_t B = block_size_, old_len = s.len(), new_len = old_len + int64_t(tokens.size());
  FUTR_ASSERT(int64_t(s.table.size()) >= ceil_div(new_len, B));
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  for (int64_t i = old_len / B; i < new_len / B; ++i) {  // the blocks these rows filled
    FUTR_ASSERT(int64_t(s.keys.size()) == i);
    const std::span<const int32_t> bt(s.tokens.data() + i * B, size_t(B));
    const uint64_t key = chain_key(i > 0 ? s.keys[size_t(i - 1)] : kRootKey, bt);
    s.keys.push_back(key);
    const BlockId b = s.table[size_t(i)];
    Block& k = blocks_[size_t(b)];
    if (k.indexed || index_.count(key)) continue;  // an equal (or colliding) block is indexed already
    const BlockId parent = i > 0 ? s.table[size_t(i - 1)] : -1;
    k.indexed = true;
    k.key = key;
    k.parent = parent;
    k.parent_gen = parent >= 0 ? blocks_[size_t(parent)].gen : 0;
    contents_[size_t(b)].assign(bt.begin(), bt.end());
    index_.emplace(key, b);
  }
}

void BlockPool::truncate(SequenceBlocks& s, int len) {
  FUTR_CHECK(len >= 0 && len <= s.len(), "KV blocks: cannot truncate a sequence of {} positions to {}",
             s.len(), len);
  s.tokens.resize(size_t(len));
  s.keys.resize(size_t(len / block_size_));
  const size_t keep = size_t(ceil_div(len, block_size_));
  while (s.table.size() > keep) {
    release(s.table.back());
    s.table.pop_back();
  }
}

void BlockPool::release(SequenceBlocks& s) {
  while (!s.table.empty()) {
    release(s.table.back());
    s.table.pop_back();
  }
  s.tokens.clear();
  s.keys.clear();
}

int BlockPool::attach(SequenceBlocks& s, std::span<const int32_t> tokens) {
  FUTR_CHECK(s.table.empty() && s.tokens.empty(),
             "KV blocks: a prefix attaches to an empty sequence only ({} "
             "positions stored)",
             s.len());
  const size_t B = size_t(block_size_);
  BlockId parent = -1;
  uint64_t key = kRootKey;
  size_t i = 0;
  for (; (i + 1) * B <= tokens.size(); ++i) {
    const std::span<const int32_t> bt = tokens.subspan(i * B, B);
    const uint64_t k = chain_key(key, bt);
    const BlockId b = lookup(k, parent, bt);
    if (b < 0) break;
    ref(b);
    s.table.push_back(b);
    s.keys.push_back(k);
    parent = b;
    key = k;
  }
  s.tokens.assign(tokens.begin(), tokens.begin() + std::ptrdiff_t(i * B));
  stats_.attached += int64_t(i);
  return int(i * B);
}

}  // namespace futr::runtime
