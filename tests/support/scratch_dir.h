// A scratch directory for one test binary: temp/futr_<name>_<pid>, created on
// first use and removed when the tests end (a gtest environment's teardown),
// so files that tests write (models, .futr files, texts) never outlive them.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

namespace futr::test {

class ScratchDir : public ::testing::Environment {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / fmt::format("futr_{}_{}", name, ::getpid())) {
    std::filesystem::create_directories(path_);
  }
  const std::filesystem::path& path() const { return path_; }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

 private:
  std::filesystem::path path_;
};

// The binary's scratch directory (the first call names it).
inline const std::filesystem::path& scratch_dir(const std::string& name) {
  static const ScratchDir* const d =
      static_cast<const ScratchDir*>(::testing::AddGlobalTestEnvironment(new ScratchDir(name)));
  return d->path();
}

}  // namespace futr::test
