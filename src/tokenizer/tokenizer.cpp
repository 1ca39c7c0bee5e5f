// Byte-level BPE: tables, PCRE2 pre-tokenizers, merge loop, decoding.
// The algorithm and its conventions are described in tokenizer.h.
#include "tokenizer/tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/text.h"
#include "tokenizer/patterns.h"

namespace futr {
namespace {

// GGUF token types (TokenizerSpec::token_types).
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

// SentencePiece's space marker U+2581 (▁) in UTF-8.
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

// The byte a SentencePiece byte token "<0xNN>" stands for (-1: not one).
int spm_byte_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

constexpr size_t kCacheMaxWord = 64;          // longer pieces are not cached (bytes)
constexpr size_t kCacheMaxEntries = 1 << 17;  // the cache is cleared when it grows past this
constexpr size_t kJitStackMax = 8 << 20;      // PCRE2 JIT stack limit (bytes)

struct StrHash {  // heterogeneous lookup: find(string_view) without a copy
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StrMap = std::unordered_map<std::string, V, StrHash, std::equal_to<>>;

// ---------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------

// Classifies the sequence at s[0..n): > 0 its length (valid); 0 incomplete (a
// valid prefix of a longer sequence); < 0 invalid, -k = skip k bytes (the
// maximal ill-formed subpart, as the Unicode standard recommends for U+FFFD).
int utf8_check(const unsigned char* s, size_t n) {
  const unsigned char b = s[0];
  if (b < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b >= 0xc2 && b <= 0xdf) {
    len = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    len = 3;
    if (b == 0xe0) lo = 0xa0;  // no overlongs
    if (b == 0xed) hi = 0x9f;  // no surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    len = 4;
    if (b == 0xf0) lo = 0x90;
    if (b == 0xf4) hi = 0x8f;  // <= U+10FFFF
  } else {
    return -1;
  }
  for (int i = 1; i < len; ++i) {
    if (size_t(i) >= n) return 0;
    const unsigned char c = s[i];
    const bool ok = i == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xbf);
    if (!ok) return -i;
  }
  return len;
}

uint32_t utf8_value(const unsigned char* s, int len) {
  if (len == 1) return s[0];
  uint32_t cp = s[0] & (0x7f >> len);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (s[i] & 0x3f);
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

// ---------------------------------------------------------------------------
// The GPT-2 byte-level alphabet: byte b <-> code point byte_cp()[b].
// Printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for
// themselves; the other 68 bytes take U+0100.. in increasing byte order.
// ---------------------------------------------------------------------------

constexpr uint32_t kAlphabetEnd = 0x100 + 68;  // code points used: [0, kAlphabetEnd)

const std::array<uint32_t, 256>& byte_cp() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
      t[size_t(b)] = printable ? uint32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

const std::array<int16_t, kAlphabetEnd>& cp_byte() {
  static const std::array<int16_t, kAlphabetEnd> table = [] {
    std::array<int16_t, kAlphabetEnd> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_cp()[size_t(b)]] = int16_t(b);
    return t;
  }();
  return table;
}

// The bytes a byte-level token text stands for; nullopt if a character is
// outside the alphabet (then the text is not byte-level encoded).
std::optional<std::string> alphabet_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const int len = utf8_check(s + i, text.size() - i);
    if (len <= 0) return std::nullopt;
    const uint32_t cp = utf8_value(s + i, len);
    if (cp >= kAlphabetEnd || cp_byte()[cp] < 0) return std::nullopt;
    out += char(cp_byte()[cp]);
    i += size_t(len);
  }
  return out;
}

// ---------------------------------------------------------------------------
// PCRE2
// ---------------------------------------------------------------------------

// Unicode White_Space, which is what \s means in the Oniguruma patterns of
// HF tokenizers. NOTE: PCRE2's \s under UCP lacks U+0085 (NEL), so the
// patterns are rewritten with this explicit class instead.
constexpr const char* kWhiteSpace =
    R"(\t\n\x0B\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S of a patterns.h pattern into explicit White_Space classes.
std::string pcre2_pattern(std::string_view src) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < src.size(); ++i) {
    const char c = src[i];
    if (c == '\\' && i + 1 < src.size()) {
      const char e = src[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        FUTR_ASSERT(!in_class);  // not used inside classes by any supported pattern
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// One compiled pattern (UTF + UCP; invalid UTF-8 subjects allowed, their bad
// bytes simply never match). Shared read-only by all threads.
class Regex {
 public:
  explicit Regex(std::string_view pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("tokenizer: PCRE2 cannot compile pre-tokenizer pattern at offset {}: {}", size_t(off),
           reinterpret_cast<const char*>(msg));
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;  // the interpreter if JIT is unavailable
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  pcre2_code* code() const { return code_; }
  bool jit() const { return jit_; }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// The JIT stack of the calling thread, big enough for long pieces (it grows up
// to kJitStackMax), created on the thread's first match. One stack serves
// every Matcher of the thread: PCRE2 uses it only inside pcre2_match(), and
// the matches of one thread never overlap (a nested Matcher, the smollm
// words inside digit stretches, runs between its caller's matches).
// NOTE: a stack per Matcher, i.e. per encode() call, mapped and unmapped
// 8 MiB each time: a chat prompt encodes three segments per message.
pcre2_jit_stack* thread_jit_stack() {
  struct Stack {
    pcre2_jit_stack* s = pcre2_jit_stack_create(32 << 10, kJitStackMax, nullptr);
    ~Stack() {
      if (s) pcre2_jit_stack_free(s);
    }
  };
  thread_local Stack stack;
  return stack.s;
}

// Per-call matching state: match data, and the thread's JIT stack.
class Matcher {
 public:
  explicit Matcher(const Regex& re) : re_(re) {
    md_ = pcre2_match_data_create_from_pattern(re.code(), nullptr);
    ctx_ = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* stack = re.jit() ? thread_jit_stack() : nullptr;
    if (stack) pcre2_jit_stack_assign(ctx_, nullptr, stack);
    FUTR_CHECK(md_ && ctx_ && (!re.jit() || stack), "tokenizer: out of memory creating PCRE2 match data");
  }
  ~Matcher() {
    pcre2_match_data_free(md_);
    pcre2_match_context_free(ctx_);
  }
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // Calls emit(begin, end, true) for each match of the pattern in s[0..n) and
  // emit(begin, end, false) for each stretch between matches, in order.
  template <class F>
  void split(const char* s, size_t n, F&& emit) {
    size_t off = 0;
    while (off < n) {
      const int rc = pcre2_match(re_.code(), reinterpret_cast<PCRE2_SPTR>(s), n, off, 0, md_, ctx_);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("tokenizer: PCRE2 match failed at byte {}: {}", off, reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_);
      const size_t b = ov[0], e = ov[1];
      FUTR_ASSERT(e > b && b >= off);  // every alternative of every pattern consumes a character
      if (b > off) emit(off, b, false);
      emit(b, e, true);
      off = e;
    }
    if (off < n) emit(off, n, false);
  }

 private:
  const Regex& re_;
  pcre2_match_data* md_ = nullptr;
  pcre2_match_context* ctx_ = nullptr;
};

enum class Pre { Gpt2, SmolLM, Llama3, Qwen2 };

struct Merge {
  int32_t rank;    // position in spec.merges: lower merges first
  int32_t result;  // id of the merged token
};

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

// ---------------------------------------------------------------------------
// Special-token matching
// ---------------------------------------------------------------------------

// Aho-Corasick over the reversed texts of the special (control and
// user-defined) tokens. Run over a text backwards, the state after reading
// text[i] names the longest special token that starts at i (the longest
// reversed pattern that ends there), for all i in one linear pass, however
// many tokens share a prefix or a first byte. Three answers per state: any
// special token (parse_special), user-defined tokens only, and user-defined
// tokens that are not chat markers (chat contents); among tokens with the
// same text, the lowest id.
class SpecialMatcher {
 public:
  // `content`: matched in chat contents too (a user-defined token that is not
  // a chat marker).
  void add(std::string_view text, int32_t id, bool user_defined, bool content) {
    int32_t s = 0;
    for (size_t k = text.size(); k-- > 0;) {
      const uint8_t c = uint8_t(text[k]);
      int32_t t = edge(s, c);
      if (t < 0) {
        t = int32_t(nodes_.size());
        nodes_.push_back({});
        set_edge(s, c, t);
      }
      s = t;
    }
    Node& n = nodes_[size_t(s)];
    if (n.id_any < 0) n.id_any = id;
    if (user_defined && n.id_user < 0) n.id_user = id;
    if (content && n.id_content < 0) n.id_content = id;
  }

  // Failure links and, per state, the state of its longest accepting suffix
  // (breadth first, so a state's failure state is done before it).
  void finish() {
    std::vector<uint32_t> first(nodes_.size() + 1, 0);  // children of each state, CSR
    std::vector<std::pair<uint8_t, int32_t>> kids(edges_.size());
    for (const auto& [key, t] : edges_) ++first[size_t(key >> 8) + 1];
    for (size_t i = 1; i < first.size(); ++i) first[i] += first[i - 1];
    std::vector<uint32_t> fill(first.begin(), first.end() - 1);
    for (const auto& [key, t] : edges_) kids[fill[size_t(key >> 8)]++] = {uint8_t(key & 255), t};
    std::vector<int32_t> order;
    order.reserve(nodes_.size());
    for (int c = 0; c < 256; ++c)
      if (root_[size_t(c)] >= 0) {
        Node& n = nodes_[size_t(root_[size_t(c)])];
        n.fail = 0;
        n.best_any = n.id_any >= 0 ? root_[size_t(c)] : -1;
        n.best_user = n.id_user >= 0 ? root_[size_t(c)] : -1;
        n.best_content = n.id_content >= 0 ? root_[size_t(c)] : -1;
        order.push_back(root_[size_t(c)]);
      }
    for (size_t q = 0; q < order.size(); ++q) {
      const int32_t s = order[q];
      for (uint32_t k = first[size_t(s)]; k < first[size_t(s) + 1]; ++k) {
        const auto [c, t] = kids[k];
        int32_t f = nodes_[size_t(s)].fail, ft;
        while ((ft = edge(f, c)) < 0 && f != 0) f = nodes_[size_t(f)].fail;
        Node& n = nodes_[size_t(t)];
        n.fail = ft < 0 ? 0 : ft;
        const Node& fn = nodes_[size_t(n.fail)];
        n.best_any = n.id_any >= 0 ? t : (n.fail != 0 ? fn.best_any : -1);
        n.best_user = n.id_user >= 0 ? t : (n.fail != 0 ? fn.best_user : -1);
        n.best_content = n.id_content >= 0 ? t : (n.fail != 0 ? fn.best_content : -1);
        order.push_back(t);
      }
    }
  }

  bool empty() const { return nodes_.size() == 1; }

  enum class Allow { kAll, kUserDefined, kContent };
  // best[i]: the id of the longest allowed special token starting at text[i], or -1.
  void longest_starting(std::string_view text, Allow allow, std::vector<int32_t>& best) const {
    best.assign(text.size(), -1);
    int32_t s = 0;
    for (size_t i = text.size(); i-- > 0;) {
      const uint8_t c = uint8_t(text[i]);
      int32_t t;
      while ((t = edge(s, c)) < 0 && s != 0) s = nodes_[size_t(s)].fail;
      s = t < 0 ? 0 : t;
      const Node& n = nodes_[size_t(s)];
      const int32_t b = allow == Allow::kAll           ? n.best_any
                        : allow == Allow::kUserDefined ? n.best_user
                                                       : n.best_content;
      if (b >= 0) {
        const Node& m = nodes_[size_t(b)];
        best[i] = allow == Allow::kAll ? m.id_any : allow == Allow::kUserDefined ? m.id_user : m.id_content;
      }
    }
  }

 private:
  struct Node {
    int32_t fail = 0;
    int32_t id_any = -1, id_user = -1, id_content = -1;        // the token whose (reversed) text ends here
    int32_t best_any = -1, best_user = -1, best_content = -1;  // the state of the longest accepting suffix
  };
  int32_t edge(int32_t s, uint8_t c) const {
    if (s == 0) return root_[c];
    const auto it = edges_.find(uint64_t(s) << 8 | c);
    return it == edges_.end() ? -1 : it->second;
  }
  void set_edge(int32_t s, uint8_t c, int32_t t) {
    if (s == 0) root_[c] = t;
    else edges_.emplace(uint64_t(s) << 8 | c, t);
  }

  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<int32_t, 256> root_ = [] {
    std::array<int32_t, 256> a{};
    a.fill(-1);
    return a;
  }();
  std::unordered_map<uint64_t, int32_t> edges_;  // (state << 8 | byte) -> state, below the root
};

constexpr size_t kMaxSpecialBytes = 16 << 20;  // all control and user-defined texts together

// Marker-like text: 3 to 64 bytes without whitespace, in <...> or [...].
bool is_marker_text(std::string_view t) {
  if (t.size() < 3 || t.size() > 64) return false;
  if (!((t.front() == '<' && t.back() == '>') || (t.front() == '[' && t.back() == ']'))) return false;
  for (char c : t)
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return false;
  return true;
}

// ---------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::vector<std::string> text;               // [vocab] vocabulary text of each id
  std::vector<int32_t> type;                   // [vocab] GGUF token type
  std::vector<std::string> bytes;              // [vocab] what decode emits for each id
  std::vector<uint8_t> eog;                    // [vocab] 1: end of generation
  StrMap<int32_t> id_of_text;                  // vocabulary text -> id (first occurrence)
  StrMap<int32_t> id_of_bytes;                 // bytes -> normal token id (ignore_merges)
  std::array<int32_t, 256> byte_token{};       // byte -> id of its one-character token (-1: none)
  std::unordered_map<uint64_t, Merge> merges;  // (left id, right id) -> rank, result
  SpecialMatcher special;                      // control and user-defined texts
  std::vector<uint8_t> chat_marker;            // [vocab] 1: a user-defined token the chat template uses
  Pre pre = Pre::Gpt2;
  bool spm = false;                     // model "llama": SentencePiece BPE
  std::vector<float> score;             // [vocab] spm: merge priority (higher first)
  std::array<int32_t, 256> spm_byte{};  // spm: byte -> id of its <0xNN> token (-1: none)
  bool add_space_prefix = true;         // spm: dummy prefix (TokenizerSpec)
  bool prefix_first_only = false;       // spm: ... only where the text starts
  bool prefix_unless_space = false;     // spm: ... not before a space
  int32_t unk = -1;
  std::string pre_name;
  std::string chat_template;
  bool ignore_merges = false;
  int32_t bos = -1, eos = -1;
  bool add_bos = false;
  std::unique_ptr<Regex> split_re;  // the word pattern of `pre`
  std::unique_ptr<Regex> digit_re;  // \p{N} (smollm only)

  mutable std::mutex cache_mu;                 // guards cache
  mutable StrMap<std::vector<int32_t>> cache;  // piece bytes -> ids

  std::vector<int32_t> encode(std::string_view text, bool add_bos, SpecialMatcher::Allow allow) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void spm_encode(std::string_view fragment, bool prefix, std::vector<int32_t>& out) const;
  int32_t spm_piece(std::string_view text) const;  // id of a normal token with this text, or -1
  void merge_loop(std::string_view piece, std::vector<int32_t>& out) const;
  template <class F>
  void pieces(std::string_view text, Matcher& split, Matcher* digits, F&& on_piece) const;
};

Tokenizer::Tokenizer(const TokenizerSpec& spec) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  FUTR_CHECK(
      spec.model == "gpt2" || spec.model == "llama",
      "tokenizer: model '{}' is not supported (supported: 'gpt2', byte-level BPE as in Llama-3, Qwen2 and "
      "SmolLM; 'llama', SentencePiece BPE as in Llama-2, TinyLlama and Mistral)",
      spec.model);
  m.spm = spec.model == "llama";
  // NOTE: GGUF files written by llama.cpp's converter name Llama-3's pre-tokenizer
  // "llama-bpe" (older ones "llama-v3") and GPT-2's "gpt-2"; they are aliases.
  // A SentencePiece vocabulary has no pre-tokenizer (its GGUF says "default").
  if (m.spm) m.pre = Pre::Gpt2;
  else if (spec.pre == "gpt2" || spec.pre == "gpt-2") m.pre = Pre::Gpt2;
  else if (spec.pre == "smollm") m.pre = Pre::SmolLM;
  else if (spec.pre == "llama3" || spec.pre == "llama-bpe" || spec.pre == "llama-v3") m.pre = Pre::Llama3;
  else if (spec.pre == "qwen2") m.pre = Pre::Qwen2;
  else
    fail(
        "tokenizer: pre-tokenizer '{}' is not supported (supported: gpt2, smollm, llama3, qwen2; GGUF "
        "aliases "
        "gpt-2, llama-bpe, llama-v3)",
        spec.pre);
  m.pre_name = m.spm                  ? "sentencepiece"
               : m.pre == Pre::Gpt2   ? "gpt2"
               : m.pre == Pre::SmolLM ? "smollm"
               : m.pre == Pre::Qwen2  ? "qwen2"
                                      : "llama3";
  m.chat_template = spec.chat_template;
  m.ignore_merges = spec.ignore_merges.value_or(m.pre == Pre::Llama3);

  const size_t n = spec.tokens.size();
  FUTR_CHECK(n > 0 && n < (size_t(1) << 31), "tokenizer: vocabulary size {} is invalid", n);
  FUTR_CHECK(spec.token_types.empty() || spec.token_types.size() == n,
             "tokenizer: {} token types for {} tokens", spec.token_types.size(), n);
  auto check_id = [&](int32_t id, const char* what) {
    FUTR_CHECK(id >= -1 && id < int64_t(n), "tokenizer: {} id {} is outside the vocabulary ({} tokens)", what,
               id, n);
  };
  check_id(spec.bos, "bos");
  check_id(spec.eos, "eos");
  check_id(spec.unk, "unk");
  check_id(spec.pad, "pad");
  for (int32_t id : spec.extra_eos) check_id(id, "extra eos");
  m.bos = spec.bos;
  m.eos = spec.eos;
  m.unk = spec.unk;
  m.add_bos = spec.add_bos && spec.bos >= 0;
  m.add_space_prefix = spec.add_space_prefix;
  m.prefix_first_only = spec.space_prefix_first_only;
  m.prefix_unless_space = spec.space_prefix_unless_space;
  FUTR_CHECK(spec.scores.empty() || spec.scores.size() == n, "tokenizer: {} scores for {} tokens",
             spec.scores.size(), n);
  if (m.spm) m.score = spec.scores.empty() ? std::vector<float>(n, 0.0f) : spec.scores;
  m.spm_byte.fill(-1);

  m.text = spec.tokens;
  m.type = spec.token_types.empty() ? std::vector<int32_t>(n, kNormal) : spec.token_types;
  m.bytes.resize(n);
  m.eog.assign(n, 0);
  if (m.eos >= 0) m.eog[size_t(m.eos)] = 1;
  for (int32_t id : spec.extra_eos)
    if (id >= 0) m.eog[size_t(id)] = 1;
  m.id_of_text.reserve(n);
  m.byte_token.fill(-1);

  size_t special_bytes = 0;
  m.chat_marker.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = m.text[i];
    m.id_of_text.emplace(t, int32_t(i));
    const int32_t ty = m.type[i];
    // NOTE: the unknown token (<unk>) is matched like a control token, with
    // parse_special only, as llama.cpp and HF tokenizers (an added special
    // token there) match it.
    if (ty == kControl || ty == kUserDefined || ty == kUnknown) {
      m.bytes[i] = t;  // special tokens are their text
      special_bytes += t.size();
      FUTR_CHECK(special_bytes <= kMaxSpecialBytes,
                 "tokenizer: the control and user-defined tokens hold more than {} bytes of text (at id {})",
                 kMaxSpecialBytes, i);
      // A user-defined token that looks like a marker ("<|im_start|>",
      // "[INST]") and appears in the chat template is a chat marker: many
      // ChatML fine-tunes ship their markers as user-defined, not control,
      // tokens; chat contents never match them (encode_content()).
      const bool marker =
          ty == kUserDefined && is_marker_text(t) && m.chat_template.find(t) != std::string::npos;
      if (marker) m.chat_marker[i] = 1;
      if (!t.empty()) m.special.add(t, int32_t(i), ty == kUserDefined, ty == kUserDefined && !marker);
      continue;
    }
    if (m.spm) {
      // SentencePiece: a byte token is its byte, the others their text with ▁ as a space.
      const int byte = ty == kByte ? spm_byte_value(t) : -1;
      if (byte >= 0) {
        m.bytes[i] = std::string(1, char(byte));
        if (m.spm_byte[size_t(byte)] < 0) m.spm_byte[size_t(byte)] = int32_t(i);
        continue;
      }
      std::string& out = m.bytes[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, kSpaceMarker.size(), kSpaceMarker) == 0) {
          out += ' ';
          k += kSpaceMarker.size();
        } else {
          out += t[k++];
        }
      }
      continue;
    }
    // Normal (and unknown/unused/byte) tokens: through the alphabet when the
    // text is byte-level encoded, else their text as is (HF's ByteLevel decoder).
    std::optional<std::string> b = alphabet_to_bytes(t);
    m.bytes[i] = b ? *b : t;
    if (!b || b->empty() || ty != kNormal) continue;
    m.id_of_bytes.emplace(*b, int32_t(i));
    if (b->size() == 1 && m.byte_token[uint8_t((*b)[0])] < 0) m.byte_token[uint8_t((*b)[0])] = int32_t(i);
  }
  m.special.finish();
  if (m.spm) {
    // Byte fallback needs the 256 <0xNN> tokens (or <unk>); without either, a
    // character outside the vocabulary would be lost silently.
    int missing_bytes = 0;
    for (int b = 0; b < 256; ++b) missing_bytes += m.spm_byte[size_t(b)] < 0;
    FUTR_CHECK(
        missing_bytes == 0 || m.unk >= 0,
        "tokenizer: the SentencePiece vocabulary lacks {} of the 256 byte tokens <0x00>..<0xFF> and has no "
        "unknown token",
        missing_bytes);
    return;
  }
  // A byte-level vocabulary has a token for every printable ASCII byte (space
  // as U+0120); without them ordinary text would lose its bytes silently.
  std::string missing;
  for (int b = 0x20; b < 0x7f; ++b)
    if (m.byte_token[size_t(b)] < 0) missing += char(b);
  FUTR_CHECK(
      missing.empty(),
      "tokenizer: the vocabulary has no byte token for {} of the 95 printable ASCII bytes ('{}'); it is not "
      "a byte-level BPE vocabulary",
      missing.size(), printable(missing, 20));

  m.merges.reserve(spec.merges.size() * 2);
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& s = spec.merges[r];
    const size_t sp = s.find(' ', 1);
    FUTR_CHECK(sp != std::string::npos && sp + 1 < s.size(), "tokenizer: merge #{} '{}' is not 'a b'", r, s);
    const std::string_view a(s.data(), sp), b(s.data() + sp + 1, s.size() - sp - 1);
    auto ia = m.id_of_text.find(a), ib = m.id_of_text.find(b);
    auto ir = m.id_of_text.find(std::string(a) + std::string(b));
    FUTR_CHECK(ia != m.id_of_text.end() && ib != m.id_of_text.end(),
               "tokenizer: merge #{} '{}' names a token that is not in the vocabulary", r, s);
    FUTR_CHECK(ir != m.id_of_text.end(),
               "tokenizer: merge #{} '{}' makes '{}{}', which is not in the vocabulary", r, s, a, b);
    m.merges.emplace(pair_key(ia->second, ib->second), Merge{int32_t(r), ir->second});  // first rank wins
  }

  m.split_re = std::make_unique<Regex>(pcre2_pattern(m.pre == Pre::Llama3  ? pretok::kLlama3Pattern
                                                     : m.pre == Pre::Qwen2 ? pretok::kQwen2Pattern
                                                                           : pretok::kGpt2Pattern));
  if (m.pre == Pre::SmolLM) m.digit_re = std::make_unique<Regex>(R"(\p{N})");
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

// ---------------------------------------------------------------------------
// BPE
// ---------------------------------------------------------------------------

// The merge loop over one piece: a doubly linked list of symbols and a heap of
// candidate pairs ordered by (rank, position). A popped candidate is stale if
// either symbol has changed since it was pushed (symbols only grow, so a
// symbol that changed has a different id).
void Tokenizer::Impl::merge_loop(std::string_view piece, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int32_t prev, next;  // neighbours in the list, -1 at the ends
  };
  std::vector<Sym> sym;
  sym.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_token[uint8_t(c)];
    if (id < 0) continue;  // byte without a token: dropped (see tokenizer.h)
    const int32_t i = int32_t(sym.size());
    sym.push_back({id, i - 1, -1});
    if (i > 0) sym[size_t(i - 1)].next = i;
  }
  struct Cand {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = sym[size_t(left)].next;
    if (right < 0) return;
    auto it = merges.find(pair_key(sym[size_t(left)].id, sym[size_t(right)].id));
    if (it != merges.end()) heap.push({it->second.rank, left, sym[size_t(left)].id, sym[size_t(right)].id});
  };
  for (int32_t i = 0; i + 1 < int32_t(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& l = sym[size_t(c.left)];
    if (l.id != c.left_id || l.next < 0 || sym[size_t(l.next)].id != c.right_id) continue;  // stale
    const int32_t r = l.next;
    l.id = merges.at(pair_key(c.left_id, c.right_id)).result;
    l.next = sym[size_t(r)].next;
    if (l.next >= 0) sym[size_t(l.next)].prev = c.left;
    sym[size_t(r)].id = -1;  // removed
    push(l.prev);
    push(c.left);
  }
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    if (auto it = id_of_bytes.find(piece); it != id_of_bytes.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    if (byte_token[uint8_t(piece[0])] >= 0) out.push_back(byte_token[uint8_t(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= kCacheMaxWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  merge_loop(piece, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() >= kCacheMaxEntries) cache.clear();
    cache.emplace(std::string(piece), std::vector<int32_t>(out.begin() + std::ptrdiff_t(start), out.end()));
  }
}

// ---------------------------------------------------------------------------
// SentencePiece BPE (model "llama")
// ---------------------------------------------------------------------------

int32_t Tokenizer::Impl::spm_piece(std::string_view t) const {
  const auto it = id_of_text.find(t);
  return it != id_of_text.end() && type[size_t(it->second)] == kNormal ? it->second : -1;
}

// SentencePiece's BPE encoding, as llama.cpp's llm_tokenizer_spm: spaces
// become ▁ (with one more in front when `prefix`), the text starts as one
// symbol per UTF-8 character (an invalid byte is a symbol of its own), and the
// adjacent pair whose concatenation is a normal token of the highest score
// merges first (the leftmost among equal scores) until no pair is a token.
// A symbol that is not a token is emitted as its bytes' <0xNN> tokens (byte
// fallback; <unk> where one is missing). Only normal tokens are ever produced
// by merging: control, user-defined and byte tokens come from their own rules.
void Tokenizer::Impl::spm_encode(std::string_view fragment, bool prefix, std::vector<int32_t>& out) const {
  std::string text;
  text.reserve(fragment.size() + 16);
  if (prefix) text += kSpaceMarker;
  for (char c : fragment) {
    if (c == ' ') text += kSpaceMarker;
    else text += c;
  }
  struct Sym {
    int32_t prev, next;
    uint32_t off, len;  // bytes of text; len 0: merged into its left neighbour
  };
  std::vector<Sym> sym;
  const auto* u = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const int l = utf8_check(u + i, text.size() - i);
    const size_t len = l > 0 ? size_t(l) : 1;
    const int32_t k = int32_t(sym.size());
    sym.push_back({k - 1, -1, uint32_t(i), uint32_t(len)});
    if (k > 0) sym[size_t(k - 1)].next = k;
    i += len;
  }
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t len;
    bool operator<(const Bigram& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Bigram> heap;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = sym[size_t(left)].len + sym[size_t(right)].len;
    const int32_t id = spm_piece(std::string_view(text).substr(sym[size_t(left)].off, len));
    if (id >= 0) heap.push({score[size_t(id)], left, right, len});
  };
  for (int32_t i = 1; i < int32_t(sym.size()); ++i) try_add(i - 1, i);
  while (!heap.empty()) {
    const Bigram b = heap.top();
    heap.pop();
    Sym& l = sym[size_t(b.left)];
    Sym& r = sym[size_t(b.right)];
    // Stale: one side merged since (lengths only grow; a merged-away symbol has length 0).
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[size_t(i)].next) {
    const std::string_view t = std::string_view(text).substr(sym[size_t(i)].off, sym[size_t(i)].len);
    const int32_t id = spm_piece(t);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : t) {
      const int32_t b = spm_byte[uint8_t(c)];
      if (b >= 0) out.push_back(b);
      else if (unk >= 0) out.push_back(unk);
    }
  }
}

// Pre-tokenizes a stretch of text without special tokens: on_piece(string_view)
// for each piece, in order. The pieces cover the text exactly.
template <class F>
void Tokenizer::Impl::pieces(std::string_view text, Matcher& split, Matcher* digits, F&& on_piece) const {
  auto words = [&](std::string_view s) {
    split.split(s.data(), s.size(), [&](size_t b, size_t e, bool) { on_piece(s.substr(b, e - b)); });
  };
  if (!digits) {
    words(text);
    return;
  }
  // smollm: every \p{N} character is a piece; the GPT-2 regex runs on each
  // stretch between them as a subject of its own (so (?!\S) sees its end).
  digits->split(text.data(), text.size(), [&](size_t b, size_t e, bool is_digit) {
    if (is_digit) on_piece(text.substr(b, e - b));
    else words(text.substr(b, e - b));
  });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  return impl_->encode(text, add_bos,
                       parse_special ? SpecialMatcher::Allow::kAll : SpecialMatcher::Allow::kUserDefined);
}

std::vector<int32_t> Tokenizer::encode_content(std::string_view text) const {
  return impl_->encode(text, false, SpecialMatcher::Allow::kContent);
}

std::vector<int32_t> Tokenizer::Impl::encode(std::string_view text, bool add_bos,
                                             SpecialMatcher::Allow allow) const {
  const Impl& m = *this;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos) {
    FUTR_CHECK(m.bos >= 0, "tokenizer: add_bos requested but the tokenizer has no BOS token");
    out.push_back(m.bos);
  }
  std::optional<Matcher> split;
  if (m.split_re) split.emplace(*m.split_re);
  std::optional<Matcher> digits;
  if (m.digit_re) digits.emplace(*m.digit_re);
  Matcher* dm = digits ? &*digits : nullptr;
  // SentencePiece: the dummy prefix at the start and after each special token
  // (prefix_first_only: at the start only, where the text begins;
  // prefix_unless_space: not where the stretch already starts with a space).
  bool after_special = true, at_start = true;
  auto encode_text = [&](std::string_view t) {
    if (m.spm) {
      if (t.empty()) return;
      const bool prefix = m.add_space_prefix && after_special && (at_start || !m.prefix_first_only) &&
                          !(m.prefix_unless_space && t.front() == ' ');
      m.spm_encode(t, prefix, out);
      after_special = at_start = false;
      return;
    }
    m.pieces(t, *split, dm, [&](std::string_view p) { m.bpe(p, out); });
  };

  // Special tokens split the text; the stretches between them are encoded.
  // The leftmost match wins, the longest one at that position (linear time:
  // SpecialMatcher).
  size_t start = 0;
  if (!m.special.empty()) {
    std::vector<int32_t> best;
    m.special.longest_starting(text, allow, best);
    for (size_t i = 0; i < text.size(); ++i) {
      const int32_t id = best[i];
      if (id < 0) continue;
      encode_text(text.substr(start, i - start));
      out.push_back(id);
      after_special = true;
      at_start = false;
      i += m.text[size_t(id)].size() - 1;
      start = i + 1;
    }
  }
  encode_text(text.substr(start));
  return out;
}

std::vector<std::string_view> Tokenizer::split_words(std::string_view text) const {
  if (!impl_->split_re)
    return text.empty() ? std::vector<std::string_view>{} : std::vector<std::string_view>{text};
  Matcher split(*impl_->split_re);
  std::optional<Matcher> digits;
  if (impl_->digit_re) digits.emplace(*impl_->digit_re);
  std::vector<std::string_view> out;
  impl_->pieces(text, split, digits ? &*digits : nullptr, [&](std::string_view p) { out.push_back(p); });
  return out;
}

// ---------------------------------------------------------------------------
// Decoding and accessors
// ---------------------------------------------------------------------------

const std::string& Tokenizer::piece(int32_t id) const {
  FUTR_CHECK(id >= 0 && size_t(id) < impl_->bytes.size(),
             "tokenizer: token id {} is outside the vocabulary ({} tokens)", id, impl_->bytes.size());
  return impl_->bytes[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += piece(id);
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->eog.size() && impl_->eog[size_t(id)];
}
bool Tokenizer::is_chat_marker(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->chat_marker.size() && impl_->chat_marker[size_t(id)];
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->type.size() && impl_->type[size_t(id)] == kControl;
}
int32_t Tokenizer::vocab_size() const { return int32_t(impl_->text.size()); }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
const std::string& Tokenizer::pre() const { return impl_->pre_name; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

const std::string& Tokenizer::token_text(int32_t id) const {
  FUTR_CHECK(id >= 0 && size_t(id) < impl_->text.size(),
             "tokenizer: token id {} is outside the vocabulary ({} tokens)", id, impl_->text.size());
  return impl_->text[size_t(id)];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->id_of_text.find(text);
  if (it == impl_->id_of_text.end()) return std::nullopt;
  return it->second;
}

// ---------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------

size_t utf8_sanitize(std::string_view in, bool final, std::string& out) {
  const auto* s = reinterpret_cast<const unsigned char*>(in.data());
  size_t i = 0;
  while (i < in.size()) {
    const int r = utf8_check(s + i, in.size() - i);
    if (r > 0) {
      out.append(in.data() + i, size_t(r));
      i += size_t(r);
    } else if (r < 0) {
      utf8_append(out, 0xFFFD);
      i += size_t(-r);
    } else if (final) {  // incomplete at the very end, and nothing more will come
      utf8_append(out, 0xFFFD);
      i = in.size();
    } else {
      break;  // hold back
    }
  }
  return i;
}

std::string StreamDecoder::push(int32_t id) {
  const std::string& p = tok_->piece(id);  // validates id
  if (!print_control_ && tok_->is_control(id)) return {};
  pending_ += p;
  std::string out;
  const size_t used = utf8_sanitize(pending_, false, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8_sanitize(pending_, true, out);
  pending_.clear();
  return out;
}

void check_tokenizer_spec(const TokenizerSpec& spec, const std::string& source) {
  if (spec.tokens.empty()) return;
  try {
    const Tokenizer t(spec);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
}

}  // namespace futr
