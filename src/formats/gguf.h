// GGUF reader (versions 2 and 3): metadata, tensor infos, tensor data
// dequantized to FP32, and the llama architecture mapped onto futr::Model.
//
// File layout (all integers little-endian):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count
//   kv_count x { string key, u32 value_type, value }
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the tensor data section;
//   each tensor's offset is relative to the data section and aligned.
// string = u64 length + bytes (no terminator); array = u32 element type, u64 count,
// elements (arrays may nest). Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32,
// 5 i32, 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64, 12 f64.
// ne[0] is the innermost (contiguous) dimension: a canonical [out, in] weight
// is stored with ne = {in, out}. GgufTensorInfo::shape() reverses ne.
//
// Hostile files: every count and length is bounded by the bytes left in the
// file before anything is allocated, arrays nest at most kMaxArrayDepth deep,
// tensor data must be aligned, in bounds and non-overlapping, names and keys
// unique. Every failure is a futr::Error naming the file and the problem.
// Memory: metadata values are views into the mapping (no copies); what the
// parser stores is a small multiple of the metadata's size in the file.
//
// The llama mapping (load_gguf_model) and its Q/K permutation are documented
// in docs/FORMATS.md. Tests: tests/formats/gguf_test.cpp (synthetic files from
// tests/formats/gguf_writer.h, broken files, the real SmolLM2 file);
// fuzz/gguf_fuzz.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "formats/ggml_types.h"
#include "formats/mapped_file.h"
#include "model/model.h"

namespace futr {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value: a view into the mapped file, valid while its GgufFile lives.
struct GgufValue {
  GgufType type = GgufType::kU8;       // scalar type, kString or kArray
  GgufType elem_type = GgufType::kU8;  // kArray: type of the elements
  uint64_t count = 0;                  // kArray: number of elements; kString: bytes
  const uint8_t* data = nullptr;       // first payload byte (after length/type headers)
  uint64_t size = 0;                   // payload bytes (validated to lie in the file)

  bool is_integer() const;  // u8..i64 (not bool)
  bool is_float() const;    // f32, f64
  // Typed access; each throws futr::Error (naming `what`) on a type mismatch or
  // a value that does not fit.
  int64_t as_int(std::string_view what) const;              // any integer type
  double as_float(std::string_view what) const;             // f32, f64 or any integer type
  bool as_bool(std::string_view what) const;                // bool
  std::string_view as_string(std::string_view what) const;  // string
  // Arrays: the elements converted; throws on a wrong element type.
  std::vector<int64_t> int_array(std::string_view what) const;
  std::vector<double> float_array(std::string_view what) const;
  std::vector<std::string> string_array(std::string_view what) const;
  // Any element type, as views (48 bytes each: meant for nested arrays; prefer the
  // typed readers above for large scalar arrays).
  std::vector<GgufValue> array_items(std::string_view what) const;
  // Human-readable short form ("u32 30", "string 'llama'", "array[49152] of string").
  std::string summary(size_t max_chars = 60) const;
};

struct GgufKV {
  std::string_view key;  // view into the mapping
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;          // "blk.0.attn_q.weight"
  std::vector<uint64_t> ne;  // GGUF order: ne[0] innermost; 1..4 dims, each >= 1
  uint32_t type = 0;         // ggml type id (known: ggml_type_info() != nullptr)
  uint64_t offset = 0;       // relative to the data section, aligned
  uint64_t numel = 0;        // product of ne
  uint64_t nbytes = 0;       // bytes in the file

  // Canonical shape, outermost first (ne reversed): [out, in] for a weight.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  const GgmlTypeInfo& type_info() const { return *ggml_type_info(type); }
};

class GgufFile {
 public:
  static constexpr int kMaxArrayDepth = 8;
  static constexpr uint32_t kMaxDims = 4;

  // Maps and parses the whole header; validates every tensor's data range.
  explicit GgufFile(const std::filesystem::path& path);
  // Parses an in-memory image (fuzzing, tests); `bytes` must outlive the object.
  GgufFile(std::span<const uint8_t> bytes, std::string name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section

  const std::vector<GgufKV>& metadata() const { return kvs_; }             // in file order
  const GgufValue* find(std::string_view key) const;                       // nullptr if absent
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // in file order
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // The tensor's bytes in the file.
  std::span<const uint8_t> tensor_bytes(const GgufTensorInfo& t) const;
  // The tensor dequantized to FP32 in canonical shape; throws for unsupported
  // types and for non-finite values (naming the tensor and the element).
  Tensor read_tensor(const GgufTensorInfo& t) const;

 private:
  void parse();
  MappedFile map_;                  // owns the bytes when opened from a path
  std::span<const uint8_t> bytes_;  // the whole file
  std::string path_;                // for error messages
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKV> kvs_;
  std::unordered_map<std::string_view, size_t> kv_index_;  // key -> kvs_ index
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;  // name -> tensors_ index
};

// The llama.* keys as a ModelConfig (not yet validated; vocab may be 0 when the
// file has neither llama.vocab_size nor tokenizer tokens).
ModelConfig gguf_model_config(const GgufFile& f);
// tokenizer.ggml.* and tokenizer.chat_template as a TokenizerSpec (tokens empty
// when the file has no tokenizer).
TokenizerSpec gguf_tokenizer_spec(const GgufFile& f);

// The whole model: config (validated), tokenizer, sources, and, when
// `with_weights`, the FP32 weights in canonical form (Q/K rows un-permuted to
// the rotate-half order). Without weights no tensor data is read.
Model load_gguf_model(const std::filesystem::path& path, bool with_weights = true);
Model load_gguf_model(const GgufFile& f, bool with_weights = true);

// llama.cpp stores Q and K rows of each head interleaved: GGUF row h*d + 2*j + s
// holds canonical (Hugging Face) row h*d + s*d/2 + j, for j < d/2, s in {0, 1}.
// These convert a [n_head*d, cols] matrix between the two orders, in place.
void unpermute_rope_rows(Tensor& w, int n_head);  // GGUF order -> canonical
void permute_rope_rows(Tensor& w, int n_head);    // canonical -> GGUF order (tests, writers)

}  // namespace futr
