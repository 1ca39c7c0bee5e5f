// safetensors reader: one *.safetensors file, tensors converted to FP32.
//
// Layout: u64 N (little-endian), N bytes of UTF-8 JSON, then the data buffer.
// The JSON is an object: "__metadata__" (optional) maps strings to strings;
// every other key is a tensor name mapping to
//   {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}
// with offsets relative to the start of the data buffer, end - begin =
// numel * dtype size. Shapes are row-major, outermost first (already the
// canonical order: a torch Linear weight is [out, in]).
//
// Read: BF16, F16, F32 (converted to FP32). Listed but rejected when read:
// F64, I64, I32, I16, I8, U8, U16, U32, U64, BOOL, F8_E4M3, F8_E5M2, F8_E8M0.
// Any other dtype string rejects the file.
//
// Hostile files: the header length must fit in the file and be at most
// kMaxHeaderBytes (100 MB); the JSON is parsed by a SAX handler that accepts
// only the structure above (no DOM is built, so memory stays proportional to
// the tensor table); shapes must match the byte ranges; ranges must lie in the
// buffer, must not overlap and must cover it without holes; names are unique;
// tensor values must be finite. Every failure is a futr::Error naming the file.
//
// Tests: tests/formats/safetensors_test.cpp (files written by
// tests/formats/safetensors_writer.h); fuzz/safetensors_fuzz.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "formats/mapped_file.h"

namespace futr {

struct SafetensorsTensor {
  std::string name;            // tensor name (JSON key)
  std::string dtype;           // "BF16", "F16", "F32", ... (a known dtype)
  std::vector<int64_t> shape;  // row-major, outermost first; may be empty (scalar)
  uint64_t begin = 0;          // byte range in the data buffer: [begin, end)
  uint64_t end = 0;
  uint64_t numel = 0;  // product of shape
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100u << 20;

  explicit SafetensorsFile(const std::filesystem::path& path);
  // Parses an in-memory image (fuzzing, tests); `bytes` must outlive the object.
  SafetensorsFile(std::span<const uint8_t> bytes, std::string name);

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return bytes_.size(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // sorted by begin
  const SafetensorsTensor* find(std::string_view name) const;                 // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  std::span<const uint8_t> tensor_bytes(const SafetensorsTensor& t) const;
  // FP32 copy; BF16/F16/F32 only (others: futr::Error naming dtype and tensor);
  // non-finite values are an error.
  Tensor read_tensor(const SafetensorsTensor& t) const;

 private:
  void parse();
  MappedFile map_;                  // owns the bytes when opened from a path
  std::span<const uint8_t> bytes_;  // the whole file
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string_view, size_t> index_;  // name -> tensors_ index
  std::map<std::string, std::string> metadata_;         // "__metadata__"
};

// Bytes per element of a safetensors dtype; 0 if the dtype is unknown.
int safetensors_dtype_size(std::string_view dtype);

}  // namespace futr
