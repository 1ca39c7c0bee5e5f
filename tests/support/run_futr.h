// Runs the `futr` binary (FUTR_BINARY, set by the test's CMake fragment) as a
// child process with both streams captured, for the end-to-end CLI tests
// (tests/cli/futr_e2e_test.cpp, tests/cli/quant_cli_test.cpp).
//
//   test::FutrRun r = test::run_futr({"generate", "hi", "--max-tokens", "4"});
//   ASSERT_EQ(r.rc, 0) << r.err;
//
// rc is the exit status, or 128 + the signal number when the child was killed
// (a crash then shows as rc >= 128, never as a pass).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/data_file.h"

namespace futr::test {

struct FutrRun {
  int rc = -1;      // exit status, or 128 + signal
  std::string out;  // stdout
  std::string err;  // stderr
};

// Single-quotes `s` for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q.append("'\\''");
    } else {
      q.push_back(c);
    }
  }
  q.push_back('\'');
  return q;
}

// The bytes of `p`; throws naming the file if it is missing (support/data_file.h).
inline std::string slurp(const std::filesystem::path& p) { return read_data_file(p); }

// Runs FUTR_BINARY with `args`, `input` on stdin; the scratch files live in a
// per-call directory under the system temp directory and are removed after.
inline FutrRun run_futr(const std::vector<std::string>& args, const std::string& input = "") {
  namespace fs = std::filesystem;
  static std::atomic<int> n{0};
  const fs::path dir = fs::temp_directory_path() / fmt::format("futr_run_{}_{}", ::getpid(), n++);
  fs::create_directories(dir);
  { std::ofstream(dir / "in") << input; }
  std::string cmd = shell_quote(FUTR_BINARY);
  for (const auto& a : args) {
    cmd += ' ';
    cmd += shell_quote(a);
  }
  cmd += fmt::format(" < {} > {} 2> {}", shell_quote((dir / "in").string()),
                     shell_quote((dir / "out").string()), shell_quote((dir / "err").string()));
  const int status = std::system(cmd.c_str());
  FutrRun r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  fs::remove_all(dir);
  return r;
}

}  // namespace futr::test
