// Test data and model files: read whole, or fail with the file's name. A test
// that reads a missing file through a bare std::ifstream gets an empty string,
// and whatever it computes from it (token ids read past the end, an empty
// prompt) fails far from the cause; these helpers throw instead, and GoogleTest
// reports the exception's message as the test's failure:
//
//   const std::string text = test::read_data_file(FUTR_TEST_TEXT);
//   test::require_data_file(FUTR_DEFAULT_MODEL);  // before load_model
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace futr::test {

// Where a missing file comes from, for the message.
inline std::string data_file_hint(const std::filesystem::path& p) {
  if (p.extension() == ".gguf") return " (the default model: scripts/fetch-model.sh fetches it into models/)";
  return " (test data are committed under tests/data/ and data/: is the checkout complete?)";
}

// Throws std::runtime_error naming `p` unless it is a readable regular file.
inline void require_data_file(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec))
    throw std::runtime_error("test data file missing: " + p.string() + data_file_hint(p));
}

// The bytes of `p`; throws std::runtime_error naming `p` if it cannot be
// opened or read.
inline std::string read_data_file(const std::filesystem::path& p) {
  require_data_file(p);
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open test data file " + p.string() + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw std::runtime_error("cannot read test data file " + p.string());
  return ss.str();
}

}  // namespace futr::test
