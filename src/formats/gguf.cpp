// GGUF reader: see gguf.h for the layout and the hostile-file policy, and
// docs/FORMATS.md for the llama key and tensor mapping.
#include "formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/text.h"
#include "formats/llama_layout.h"

namespace futr {
namespace {

constexpr uint64_t kMaxElements = uint64_t(1) << 50;  // per tensor, far above any model

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Bytes of a scalar value type; 0 for string/array; -1 for an unknown type id.
int scalar_size(uint32_t t) {
  switch (GgufType(t)) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool: return 1;
    case GgufType::kU16:
    case GgufType::kI16: return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32: return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return -1;
}

// A bounds-checked reader over the file's bytes. Every read that would pass the
// end throws, naming the file, what was being read and the offset.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> b, const std::string& path, uint64_t pos = 0)
      : b_(b), path_(path), pos_(pos) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return b_.size() - pos_; }
  const uint8_t* here() const { return b_.data() + pos_; }
  void need(uint64_t n, std::string_view what) const {
    FUTR_CHECK(n <= remaining(), "{}: truncated: {} needs {} bytes at offset {}, {} left", path_, what, n,
               pos_, remaining());
  }
  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }
  uint32_t u32(std::string_view what) {
    need(4, what);
    const uint32_t v = load<uint32_t>(here());
    pos_ += 4;
    return v;
  }
  uint64_t u64(std::string_view what) {
    need(8, what);
    const uint64_t v = load<uint64_t>(here());
    pos_ += 8;
    return v;
  }
  std::string_view str(std::string_view what) {
    const uint64_t n = u64(what);
    need(n, what);
    std::string_view s(reinterpret_cast<const char*>(here()), size_t(n));
    pos_ += n;
    return s;
  }
  const std::string& path() const { return path_; }

 private:
  std::span<const uint8_t> b_;
  const std::string& path_;
  uint64_t pos_;
};

// Reads (and fully validates) a value of type `type` at the cursor. Nothing is
// allocated: the result is a view.
GgufValue read_value(Cursor& c, uint32_t type, int depth, std::string_view what) {
  const int sz = scalar_size(type);
  FUTR_CHECK(sz >= 0, "{}: {}: unknown value type {}", c.path(), what, type);
  GgufValue v;
  v.type = GgufType(type);
  if (sz > 0) {
    v.data = c.here();
    v.size = uint64_t(sz);
    c.skip(v.size, what);
    return v;
  }
  if (v.type == GgufType::kString) {
    const uint64_t n = c.u64(what);
    c.need(n, what);
    v.count = v.size = n;
    v.data = c.here();
    c.skip(n, what);
    return v;
  }
  // Array.
  FUTR_CHECK(depth < GgufFile::kMaxArrayDepth, "{}: {}: arrays nested deeper than {}", c.path(), what,
             GgufFile::kMaxArrayDepth);
  const uint32_t et = c.u32(what);
  const int esz = scalar_size(et);
  FUTR_CHECK(esz >= 0, "{}: {}: unknown array element type {}", c.path(), what, et);
  v.elem_type = GgufType(et);
  v.count = c.u64(what);
  // The smallest encoding of one element bounds the count by the bytes left.
  const uint64_t min_elem = esz > 0 ? uint64_t(esz) : (et == uint32_t(GgufType::kString) ? 8 : 12);
  FUTR_CHECK(v.count <= c.remaining() / min_elem,
             "{}: {}: array of {} {} elements needs at least {} bytes per element, only {} bytes "
             "left at offset {}",
             c.path(), what, v.count, gguf_type_name(v.elem_type), min_elem, c.remaining(), c.pos());
  v.data = c.here();
  const uint64_t start = c.pos();
  if (esz > 0) {
    c.skip(v.count * uint64_t(esz), what);
  } else {
    for (uint64_t i = 0; i < v.count; ++i) read_value(c, et, depth + 1, what);
  }
  v.size = c.pos() - start;
  return v;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// GgufValue
// ---------------------------------------------------------------------------

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64: return true;
    default: return false;
  }
}

bool GgufValue::is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }

int64_t GgufValue::as_int(std::string_view what) const {
  switch (type) {
    case GgufType::kU8: return load<uint8_t>(data);
    case GgufType::kI8: return load<int8_t>(data);
    case GgufType::kU16: return load<uint16_t>(data);
    case GgufType::kI16: return load<int16_t>(data);
    case GgufType::kU32: return load<uint32_t>(data);
    case GgufType::kI32: return load<int32_t>(data);
    case GgufType::kI64: return load<int64_t>(data);
    case GgufType::kU64: {
      const uint64_t u = load<uint64_t>(data);
      FUTR_CHECK(u <= uint64_t(INT64_MAX), "{}: value {} is too large", what, u);
      return int64_t(u);
    }
    default: fail("{}: expected an integer, found {}", what, gguf_type_name(type));
  }
}

double GgufValue::as_float(std::string_view what) const {
  if (type == GgufType::kF32) return load<float>(data);
  if (type == GgufType::kF64) return load<double>(data);
  if (is_integer()) return double(as_int(what));
  fail("{}: expected a number, found {}", what, gguf_type_name(type));
}

bool GgufValue::as_bool(std::string_view what) const {
  FUTR_CHECK(type == GgufType::kBool, "{}: expected a bool, found {}", what, gguf_type_name(type));
  return data[0] != 0;
}

std::string_view GgufValue::as_string(std::string_view what) const {
  FUTR_CHECK(type == GgufType::kString, "{}: expected a string, found {}", what, gguf_type_name(type));
  return {reinterpret_cast<const char*>(data), size_t(size)};
}

std::vector<GgufValue> GgufValue::array_items(std::string_view what) const {
  FUTR_CHECK(type == GgufType::kArray, "{}: expected an array, found {}", what, gguf_type_name(type));
  std::vector<GgufValue> items;
  items.reserve(size_t(count));
  // The payload was validated when the file was parsed; re-reading it through a
  // cursor over exactly the payload keeps this function safe on its own.
  const std::string label(what);
  Cursor c({data, size_t(size)}, label);
  for (uint64_t i = 0; i < count; ++i) items.push_back(read_value(c, uint32_t(elem_type), 1, what));
  return items;
}

// Element i of a validated array of fixed-size scalars, as a view.
static GgufValue scalar_at(const GgufValue& a, uint64_t i) {
  GgufValue v;
  v.type = a.elem_type;
  v.size = uint64_t(scalar_size(uint32_t(a.elem_type)));
  v.data = a.data + i * v.size;
  return v;
}

std::vector<int64_t> GgufValue::int_array(std::string_view what) const {
  FUTR_CHECK(type == GgufType::kArray, "{}: expected an array, found {}", what, gguf_type_name(type));
  const GgufValue probe{elem_type};
  FUTR_CHECK(probe.is_integer(), "{}: expected an array of integers, found an array of {}", what,
             gguf_type_name(elem_type));
  std::vector<int64_t> out;
  out.reserve(size_t(count));  // count * elem size bytes are in the file
  for (uint64_t i = 0; i < count; ++i) out.push_back(scalar_at(*this, i).as_int(what));
  return out;
}

std::vector<double> GgufValue::float_array(std::string_view what) const {
  FUTR_CHECK(type == GgufType::kArray, "{}: expected an array, found {}", what, gguf_type_name(type));
  const GgufValue probe{elem_type};
  FUTR_CHECK(probe.is_integer() || probe.is_float(), "{}: expected an array of numbers, found an array of {}",
             what, gguf_type_name(elem_type));
  std::vector<double> out;
  out.reserve(size_t(count));
  for (uint64_t i = 0; i < count; ++i) out.push_back(scalar_at(*this, i).as_float(what));
  return out;
}

std::vector<std::string> GgufValue::string_array(std::string_view what) const {
  FUTR_CHECK(type == GgufType::kArray && elem_type == GgufType::kString,
             "{}: expected an array of strings, found {}{}", what, gguf_type_name(type),
             type == GgufType::kArray ? std::string(" of ") + gguf_type_name(elem_type) : "");
  std::vector<std::string> out;
  out.reserve(size_t(count));
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  for (uint64_t i = 0; i < count; ++i) {
    FUTR_ASSERT(end - p >= 8);
    const uint64_t n = load<uint64_t>(p);
    p += 8;
    FUTR_ASSERT(n <= uint64_t(end - p));
    out.emplace_back(reinterpret_cast<const char*>(p), size_t(n));
    p += n;
  }
  return out;
}

std::string GgufValue::summary(size_t max_chars) const {
  auto clip = [&](std::string s) {
    if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
    return s;
  };
  switch (type) {
    case GgufType::kString: {
      std::string s(as_string(""));
      for (char& ch : s)  // control characters (terminal escapes, newlines) shown as blanks
        if (uint8_t(ch) < 0x20 || ch == 0x7f) ch = ' ';
      return "string '" + clip(s) + "'";
    }
    case GgufType::kArray: return "array[" + std::to_string(count) + "] of " + gguf_type_name(elem_type);
    case GgufType::kBool: return std::string("bool ") + (as_bool("") ? "true" : "false");
    case GgufType::kF32:
    case GgufType::kF64: return std::string(gguf_type_name(type)) + " " + fmt::format("{:g}", as_float(""));
    default:
      if (type == GgufType::kU64 && load<uint64_t>(data) > uint64_t(INT64_MAX))
        return "u64 " + std::to_string(load<uint64_t>(data));
      return std::string(gguf_type_name(type)) + " " + std::to_string(as_int(""));
  }
}

// ---------------------------------------------------------------------------
// GgufFile: parsing
// ---------------------------------------------------------------------------

GgufFile::GgufFile(const std::filesystem::path& path) : map_(path), path_(path.string()) {
  bytes_ = map_.bytes();
  parse();
}

GgufFile::GgufFile(std::span<const uint8_t> bytes, std::string name) : bytes_(bytes), path_(std::move(name)) {
  parse();
}

void GgufFile::parse() {
  Cursor c(bytes_, path_);
  c.need(4, "magic");
  FUTR_CHECK(std::memcmp(c.here(), "GGUF", 4) == 0, "{}: not a GGUF file (bad magic)", path_);
  c.skip(4, "magic");
  version_ = c.u32("version");
  FUTR_CHECK(version_ != 1, "{}: GGUF version 1 is not supported (versions 2 and 3 are)", path_);
  FUTR_CHECK(version_ != 0x02000000u && version_ != 0x03000000u,
             "{}: big-endian GGUF files are not supported", path_);
  FUTR_CHECK(version_ == 2 || version_ == 3, "{}: unsupported GGUF version {} (versions 2 and 3 are)", path_,
             version_);
  const uint64_t n_tensors = c.u64("tensor count");
  const uint64_t n_kv = c.u64("metadata count");
  // Minimum encodings: a KV is key length (8) + type (4) + a 1-byte value; a
  // tensor info is name length (8) + n_dims (4) + one ne (8) + type (4) + offset (8).
  FUTR_CHECK(n_kv <= c.remaining() / 13,
             "{}: metadata count {} is impossible: only {} bytes follow the header", path_, n_kv,
             c.remaining());
  FUTR_CHECK(n_tensors <= c.remaining() / 32,
             "{}: tensor count {} is impossible: only {} bytes follow the header", path_, n_tensors,
             c.remaining());

  kvs_.reserve(size_t(std::min<uint64_t>(n_kv, 4096)));  // grows with entries actually read
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string what = fmt::format("metadata entry {}", i);
    const std::string_view key = c.str(what + " key");
    FUTR_CHECK(!key.empty(), "{}: {} has an empty key", path_, what);
    const std::string kwhat = fmt::format("metadata '{}'", printable(key, 200));
    const uint32_t type = c.u32(kwhat);
    GgufValue v = read_value(c, type, 0, kwhat);
    FUTR_CHECK(kv_index_.emplace(key, kvs_.size()).second, "{}: duplicate metadata key '{}'", path_,
               printable(key, 200));
    kvs_.push_back({key, v});
  }

  if (const GgufValue* a = find("general.alignment")) {
    const int64_t al = a->as_int(path_ + ": general.alignment");
    FUTR_CHECK(al > 0 && al <= (int64_t(1) << 30) && std::has_single_bit(uint64_t(al)),
               "{}: general.alignment {} is not a power of two in 1..2^30", path_, al);
    alignment_ = uint64_t(al);
  }

  tensors_.reserve(size_t(std::min<uint64_t>(n_tensors, 4096)));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string what = fmt::format("tensor info {}", i);
    GgufTensorInfo t;
    t.name = std::string(c.str(what + " name"));
    const std::string tw = fmt::format("tensor '{}'", printable(t.name, 200));
    const uint32_t n_dims = c.u32(tw + " n_dims");
    FUTR_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "{}: {} has {} dimensions (1..{} allowed)", path_, tw,
               n_dims, kMaxDims);
    t.numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.u64(tw + " dims");
      FUTR_CHECK(ne >= 1 && ne <= kMaxElements, "{}: {} has dimension {} = {} (must be 1..2^50)", path_, tw,
                 d, ne);
      FUTR_CHECK(t.numel <= kMaxElements / ne, "{}: {} has more than 2^50 elements", path_, tw);
      t.numel *= ne;
      t.ne.push_back(ne);
    }
    t.type = c.u32(tw + " type");
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    FUTR_CHECK(ti != nullptr, "{}: {} has unknown ggml type {}", path_, tw, t.type);
    FUTR_CHECK(t.ne[0] % ti->block == 0,
               "{}: {} of type {} has a row of {} values, not a multiple of the block size {}", path_, tw,
               ti->name, t.ne[0], ti->block);
    t.nbytes = t.numel / ti->block * ti->block_bytes;  // < 2^50 * 292 / 1: no overflow
    t.offset = c.u64(tw + " offset");
    tensors_.push_back(std::move(t));
  }
  // Index by name (after the vector stopped growing: keys view the names).
  for (size_t i = 0; i < tensors_.size(); ++i)
    FUTR_CHECK(tensor_index_.emplace(tensors_[i].name, i).second, "{}: duplicate tensor name '{}'", path_,
               printable(tensors_[i].name, 200));

  // Data section: aligned start, tensors aligned, inside the file, disjoint.
  const uint64_t end_of_infos = c.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t fsize = bytes_.size();
  const uint64_t data_size = data_offset_ <= fsize ? fsize - data_offset_ : 0;
  for (const GgufTensorInfo& t : tensors_) {
    FUTR_CHECK(t.offset % alignment_ == 0,
               "{}: tensor '{}' data offset {} is not a multiple of the alignment {}", path_,
               printable(t.name, 200), t.offset, alignment_);
    FUTR_CHECK(data_offset_ <= fsize && t.offset <= data_size && t.nbytes <= data_size - t.offset,
               "{}: tensor '{}' data [{}, +{}) lies past the end of the file ({} bytes, data "
               "section at {}): truncated file?",
               path_, printable(t.name, 200), t.offset, t.nbytes, fsize, data_offset_);
  }
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensorInfo& p = tensors_[order[i - 1]];
    const GgufTensorInfo& t = tensors_[order[i]];
    FUTR_CHECK(t.offset >= p.offset + p.nbytes,
               "{}: data of tensors '{}' [{}, +{}) and '{}' [{}, +{}) overlap", path_, printable(p.name, 200),
               p.offset, p.nbytes, printable(t.name, 200), t.offset, t.nbytes);
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufFile::tensor_bytes(const GgufTensorInfo& t) const {
  return bytes_.subspan(size_t(data_offset_ + t.offset), size_t(t.nbytes));
}

Tensor GgufFile::read_tensor(const GgufTensorInfo& t) const {
  const GgmlTypeInfo& ti = t.type_info();
  FUTR_CHECK(ti.supported, "{}: tensor '{}' has type {}, which futr cannot dequantize (supported: {})", path_,
             printable(t.name, 200), ti.name, ggml_supported_types());
  Tensor out(t.shape());
  // Chunks of whole blocks, decoded in parallel; the first non-finite value is an error.
  const std::span<const uint8_t> in = tensor_bytes(t);
  const int64_t chunk_blocks = std::max<int64_t>(1, 65536 / ti.block);
  const int64_t n_blocks = int64_t(t.numel / ti.block);
  const int64_t n_chunks = (n_blocks + chunk_blocks - 1) / chunk_blocks;
  int64_t first_bad = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : first_bad)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t b0 = c * chunk_blocks, b1 = std::min(n_blocks, b0 + chunk_blocks);
    std::span<float> y(out.data.data() + b0 * ti.block, size_t((b1 - b0) * ti.block));
    dequantize_ggml(ti, in.subspan(size_t(b0 * ti.block_bytes), size_t((b1 - b0) * ti.block_bytes)), y);
    for (size_t i = 0; i < y.size(); ++i)
      if (!std::isfinite(y[i])) {
        first_bad = std::min(first_bad, b0 * int64_t(ti.block) + int64_t(i));
        break;
      }
  }
  FUTR_CHECK(first_bad == INT64_MAX, "{}: tensor '{}' has a non-finite value at element {}", path_,
             printable(t.name, 200), first_bad);
  return out;
}

}  // namespace futr
