// Reading input files with limits: the one place that opens a user-named file
// or stdin for its bytes (config and tokenizer JSON, prompt and perplexity
// texts, calibration text); and TempOutput, the way an output file is written.
//
// Paths that exist but are not regular files (a directory, FIFO, character or
// block device, socket) are refused as such, never reported as "missing" and
// never read (a FIFO without a writer would block forever, /dev/zero never
// ends). Every read is capped: a file larger than its limit is refused before
// any allocation, stdin is read in chunks up to the limit and then refused.
//
// Tests: tests/core/io_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace futr {

// "regular file", "directory", "FIFO", "character device", "block device",
// "socket", "symbolic link" (dangling), "other file" or "missing".
std::string file_kind(const std::filesystem::path& p);

// True if `p` is a regular file, false if nothing is there; futr::Error
// "<p>: is a directory, expected a regular file (<what>)" for anything else.
bool optional_regular_file(const std::filesystem::path& p, const std::string& what);
// As above, but a missing file is an error too: "<p>: no such file (<what>)".
void require_regular_file(const std::filesystem::path& p, const std::string& what);

// The whole file, which must be regular and at most `max_bytes` long.
std::string read_file_limited(const std::filesystem::path& p, uint64_t max_bytes, const std::string& what);

// All of a file descriptor (stdin: 0) up to `max_bytes`; futr::Error naming
// `source` and the limit when there is more.
std::string read_fd_limited(int fd, uint64_t max_bytes, const std::string& source);

// "1.5 GiB", "64 MiB", "4096 bytes": sizes in messages.
std::string human_bytes(uint64_t n);

// An output file written under a temporary name and renamed into place.
// The temporary is a new file with a unique name beside the output
// ("OUT.tmp.XXXXXX", mkstemp: O_EXCL, so never a pre-existing file or a link
// someone planted), removed by the destructor unless commit() renamed it, and
// by SIGINT/SIGTERM while it exists (the handler unlinks it, then the signal
// takes its previous action). One at a time per process.
class TempOutput {
 public:
  // futr::Error "<OUT.tmp.XXXXXX>: cannot open for writing: <reason>".
  explicit TempOutput(const std::filesystem::path& final_path);
  ~TempOutput();
  TempOutput(const TempOutput&) = delete;
  TempOutput& operator=(const TempOutput&) = delete;

  void write(const void* data, size_t n);  // futr::Error on a short write (disk full)
  void commit();                           // close, rename onto the output
  const std::filesystem::path& path() const { return tmp_; }

 private:
  void discard() noexcept;
  std::filesystem::path final_, tmp_;
  int fd_ = -1;
};

}  // namespace futr
