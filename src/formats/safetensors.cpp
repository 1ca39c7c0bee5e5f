// safetensors reader: see safetensors.h for the layout and the hostile-file policy.
#include "formats/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/numeric.h"
#include "core/text.h"
#include "formats/llama_layout.h"

namespace futr {
namespace {

constexpr uint64_t kMaxElements = uint64_t(1) << 50;

// SAX handler accepting exactly the safetensors header structure:
//   depth 1: the top object; depth 2: a tensor entry or __metadata__;
//   depth 3: the shape / data_offsets arrays.
// Each callback throws futr::Error (naming the file) on anything unexpected,
// which unwinds out of nlohmann::json::sax_parse.
class HeaderSax {
 public:
  using json = nlohmann::json;
  HeaderSax(const std::string& path, std::vector<SafetensorsTensor>& tensors,
            std::map<std::string, std::string>& metadata)
      : path_(path), tensors_(tensors), metadata_(metadata) {}

  bool null() { return scalar("null"); }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(json::number_integer_t v) {
    FUTR_CHECK(v >= 0, "{}: tensor '{}': negative number {} in '{}'", path_, clip(cur_.name), v, field_);
    return number(uint64_t(v));
  }
  bool number_unsigned(json::number_unsigned_t v) { return number(v); }
  bool number_float(json::number_float_t, const std::string&) { return scalar("a fractional number"); }
  bool binary(json::binary_t&) { return scalar("binary data"); }
  bool string(json::string_t& s) {
    if (depth_ == 2 && in_meta_) {
      metadata_[key_] = s;
      return true;
    }
    if (depth_ == 2 && field_ == "dtype" && !in_meta_) {
      FUTR_CHECK(safetensors_dtype_size(s) > 0, "{}: tensor '{}' has unknown dtype '{}'", path_,
                 clip(cur_.name), clip(s));
      cur_.dtype = s;
      return true;
    }
    return scalar("a string");
  }
  bool start_object(std::size_t) {
    if (depth_ == 0) {
      depth_ = 1;
      return true;
    }
    FUTR_CHECK(depth_ == 1, "{}: unexpected nested object in the header{}", path_, where());
    depth_ = 2;
    in_meta_ = key_ == "__metadata__";
    if (in_meta_) {
      FUTR_CHECK(!seen_meta_, "{}: duplicate __metadata__", path_);
      seen_meta_ = true;
    } else {
      cur_ = SafetensorsTensor{};
      cur_.name = key_;
      has_shape_ = has_offsets_ = false;
    }
    return true;
  }
  bool end_object() {
    if (depth_ == 2 && !in_meta_) finish_tensor();
    --depth_;
    in_meta_ = false;
    return true;
  }
  bool key(json::string_t& k) {
    if (depth_ == 1) {
      key_ = k;
    } else if (in_meta_) {
      FUTR_CHECK(!metadata_.count(k), "{}: duplicate __metadata__ key '{}'", path_, clip(k));
      key_ = k;
    } else {
      FUTR_CHECK(k == "dtype" || k == "shape" || k == "data_offsets",
                 "{}: tensor '{}' has an unknown field '{}'", path_, clip(cur_.name), clip(k));
      FUTR_CHECK((k == "dtype" && cur_.dtype.empty()) || (k == "shape" && !has_shape_) ||
                     (k == "data_offsets" && !has_offsets_),
                 "{}: tensor '{}' has field '{}' twice", path_, clip(cur_.name), k);
      field_ = k;
    }
    return true;
  }
  bool start_array(std::size_t) {
    FUTR_CHECK(depth_ == 2 && !in_meta_ && (field_ == "shape" || field_ == "data_offsets"),
               "{}: unexpected array in the header{}", path_, where());
    depth_ = 3;
    if (field_ == "shape") has_shape_ = true;
    if (field_ == "data_offsets") has_offsets_ = true;
    n_offsets_ = 0;
    return true;
  }
  bool end_array() {
    depth_ = 2;
    if (field_ == "data_offsets")
      FUTR_CHECK(n_offsets_ == 2, "{}: tensor '{}': data_offsets must have 2 entries, has {}", path_,
                 clip(cur_.name), n_offsets_);
    field_.clear();
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    // nlohmann's message quotes the last token read, which may be long.
    fail("{}: the JSON header is invalid at byte {}: {}", path_, pos, printable(e.what(), 200));
  }

 private:
  static std::string clip(const std::string& s) { return printable(s, 200); }
  std::string where() const {
    return depth_ >= 2 ? fmt::format(" (in '{}')", clip(in_meta_ ? std::string("__metadata__") : cur_.name))
                       : "";
  }
  bool scalar(const char* kind) {
    if (depth_ == 2 && in_meta_)
      fail("{}: __metadata__ value of '{}' is {}, expected a string", path_, clip(key_), kind);
    if (depth_ <= 1) fail("{}: the header is not a JSON object of tensor entries", path_);
    fail("{}: tensor '{}': unexpected {}{}", path_, clip(cur_.name), kind,
         field_.empty() ? "" : " in '" + field_ + "'");
  }
  bool number(uint64_t v) {
    if (depth_ != 3) return scalar("a number");
    if (field_ == "shape") {
      FUTR_CHECK(v <= kMaxElements && cur_.shape.size() < 16,
                 "{}: tensor '{}': shape entry {} (or rank) too large", path_, clip(cur_.name), v);
      cur_.shape.push_back(int64_t(v));
    } else {
      FUTR_CHECK(n_offsets_ < 2, "{}: tensor '{}': data_offsets must have 2 entries", path_, clip(cur_.name));
      (n_offsets_ == 0 ? cur_.begin : cur_.end) = v;
      ++n_offsets_;
    }
    return true;
  }
  void finish_tensor() {
    FUTR_CHECK(!cur_.dtype.empty() && has_shape_ && has_offsets_,
               "{}: tensor '{}' lacks dtype, shape or data_offsets", path_, clip(cur_.name));
    uint64_t n = 1;
    for (int64_t d : cur_.shape) {
      FUTR_CHECK(d == 0 || n <= kMaxElements / uint64_t(d), "{}: tensor '{}' has too many elements", path_,
                 clip(cur_.name));
      n *= uint64_t(d);
    }
    cur_.numel = n;
    tensors_.push_back(std::move(cur_));
  }

  const std::string& path_;
  std::vector<SafetensorsTensor>& tensors_;
  std::map<std::string, std::string>& metadata_;
  int depth_ = 0;         // 0 outside, 1 top object, 2 entry, 3 array
  bool in_meta_ = false;  // inside __metadata__
  bool seen_meta_ = false;
  std::string key_;        // current top-level key (tensor name) or metadata key
  std::string field_;      // current field of a tensor entry
  SafetensorsTensor cur_;  // the entry being read
  bool has_shape_ = false, has_offsets_ = false;
  int n_offsets_ = 0;
};

}  // namespace

int safetensors_dtype_size(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2" || d == "F8_E8M0") return 1;
  return 0;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : map_(path), path_(path.string()) {
  bytes_ = map_.bytes();
  parse();
}

SafetensorsFile::SafetensorsFile(std::span<const uint8_t> bytes, std::string name)
    : bytes_(bytes), path_(std::move(name)) {
  parse();
}

void SafetensorsFile::parse() {
  const uint64_t fsize = bytes_.size();
  FUTR_CHECK(fsize >= 8, "{}: truncated: {} bytes, too short for a safetensors header", path_, fsize);
  uint64_t n;
  std::memcpy(&n, bytes_.data(), 8);
  FUTR_CHECK(n <= kMaxHeaderBytes,
             "{}: header length {} exceeds the {} byte limit (not a "
             "safetensors file?)",
             path_, n, kMaxHeaderBytes);
  FUTR_CHECK(n <= fsize - 8, "{}: truncated: header length {} but only {} bytes follow", path_, n, fsize - 8);
  FUTR_CHECK(n >= 2 && bytes_[8] == '{', "{}: the header does not start with a JSON object", path_);
  data_start_ = 8 + n;
  const char* h = reinterpret_cast<const char*>(bytes_.data() + 8);
  HeaderSax sax(path_, tensors_, metadata_);
  // The header may be padded with trailing spaces; sax_parse in strict mode
  // accepts trailing whitespace only.
  nlohmann::json::sax_parse(h, h + n, &sax, nlohmann::json::input_format_t::json, true);

  // Tensors: unique names, sizes match shapes, ranges in the buffer, no overlap, no holes.
  const uint64_t data_size = fsize - data_start_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const SafetensorsTensor& t = tensors_[i];
    FUTR_CHECK(index_.emplace(t.name, i).second, "{}: duplicate tensor name '{}'", path_,
               printable(t.name, 200));
    FUTR_CHECK(t.begin <= t.end && t.end <= data_size,
               "{}: tensor '{}' data [{}, {}) lies outside the {}-byte data buffer (truncated file?)", path_,
               printable(t.name, 200), t.begin, t.end, data_size);
    const uint64_t want = t.numel * uint64_t(safetensors_dtype_size(t.dtype));
    FUTR_CHECK(t.end - t.begin == want,
               "{}: tensor '{}' of dtype {} and shape {} needs {} bytes but data_offsets span {}", path_,
               printable(t.name, 200), printable(t.dtype, 40), shape_string(t.shape), want, t.end - t.begin);
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  index_.clear();
  uint64_t covered = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const SafetensorsTensor& t = tensors_[i];
    FUTR_CHECK(t.begin >= covered || t.begin == t.end,
               "{}: data of tensor '{}' [{}, {}) overlaps the previous tensor's (ends at {})", path_,
               printable(t.name, 200), t.begin, t.end, covered);
    FUTR_CHECK(t.begin <= covered, "{}: the data buffer has a hole [{}, {}) before tensor '{}'", path_,
               covered, t.begin, printable(t.name, 200));
    covered = std::max(covered, t.end);
    index_.emplace(t.name, i);
  }
  FUTR_CHECK(covered == data_size,
             "{}: the data buffer has {} bytes but the tensors cover only {} (trailing data)", path_,
             data_size, covered);
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> SafetensorsFile::tensor_bytes(const SafetensorsTensor& t) const {
  return bytes_.subspan(size_t(data_start_ + t.begin), size_t(t.end - t.begin));
}

Tensor SafetensorsFile::read_tensor(const SafetensorsTensor& t) const {
  FUTR_CHECK(t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16",
             "{}: tensor '{}' has dtype {}; supported: BF16, F16, F32", path_, printable(t.name, 200),
             printable(t.dtype, 40));
  Tensor out(t.shape);
  const uint8_t* p = tensor_bytes(t).data();
  float* y = out.data.data();
  const size_t n = out.data.size();
  if (n == 0) return out;
  const int dt = t.dtype == "F32" ? 0 : t.dtype == "BF16" ? 1 : 2;
  // Chunks converted in parallel; the first non-finite value is an error.
  constexpr int64_t kChunk = 65536;
  const int64_t n_chunks = (int64_t(n) + kChunk - 1) / kChunk;
  int64_t first_bad = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : first_bad)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const size_t i0 = size_t(c * kChunk), i1 = std::min(n, i0 + size_t(kChunk));
    if (dt == 0) {
      std::memcpy(y + i0, p + 4 * i0, (i1 - i0) * 4);
    } else {
      for (size_t i = i0; i < i1; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        y[i] = dt == 1 ? bf16_to_float(h) : fp16_to_float(h);
      }
    }
    for (size_t i = i0; i < i1; ++i)
      if (!std::isfinite(y[i])) {
        first_bad = std::min(first_bad, int64_t(i));
        break;
      }
  }
  FUTR_CHECK(first_bad == INT64_MAX, "{}: tensor '{}' has a non-finite value at element {}", path_,
             printable(t.name, 200), first_bad);
  return out;
}

}  // namespace futr
