// MappedFile: a read-only memory mapping of a whole file, the byte source of
// the GGUF and safetensors readers.
//
// The mapping is private and read-only; pages are read from disk only when a
// reader touches them, so parsing the metadata of a large file is cheap.
// Limits: an empty file maps to an empty span (no mmap call). A file that is
// truncated by another process while mapped raises SIGBUS on access; readers
// cannot defend against that and do not try.
//
// Tested through the readers (tests/formats/*).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace futr {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`; throws futr::Error naming the path if it is missing, not a
  // regular file, or cannot be mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_t(size_)}; }
  const std::string& path() const { return path_; }

 private:
  void release();
  const uint8_t* data_ = nullptr;  // [size_] bytes, read-only mapping (null when empty)
  uint64_t size_ = 0;              // file size in bytes
  std::string path_;               // as given, for error messages
};

}  // namespace futr
