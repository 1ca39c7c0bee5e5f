// core/io.h: file kinds named as such (never "missing"), regular files only,
// size limits checked before allocating, stdin-like descriptors read bounded;
// TempOutput: unique temporaries, renamed on commit, removed on failure and
// on SIGINT/SIGTERM.
#include "core/io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/expect_error.h"

using namespace futr;
namespace fs = std::filesystem;

namespace {

struct TmpDir {
  fs::path p = fs::temp_directory_path() / ("futr_io_test_" + std::to_string(::getpid()));
  TmpDir() { fs::create_directories(p); }
  ~TmpDir() { fs::remove_all(p); }
};

}  // namespace

TEST(FileKind, NamesEachKind) {
  TmpDir d;
  std::ofstream(d.p / "f") << "x";
  ASSERT_EQ(::mkfifo((d.p / "fifo").c_str(), 0600), 0);
  fs::create_symlink(d.p / "nowhere", d.p / "dangling");
  EXPECT_EQ(file_kind(d.p / "f"), "regular file");
  EXPECT_EQ(file_kind(d.p), "directory");
  EXPECT_EQ(file_kind(d.p / "fifo"), "FIFO");
  EXPECT_EQ(file_kind("/dev/null"), "character device");
  EXPECT_EQ(file_kind(d.p / "none"), "missing");
  EXPECT_EQ(file_kind(d.p / "dangling"), "symbolic link");
  EXPECT_TRUE(optional_regular_file(d.p / "f", "x"));
  EXPECT_FALSE(optional_regular_file(d.p / "none", "x"));
  EXPECT_FUTR_ERROR(optional_regular_file(d.p, "the tokenizer"),
                    "is a directory, expected a regular file (the tokenizer)");
  EXPECT_FUTR_ERROR(optional_regular_file(d.p / "fifo", "t"), "is a FIFO, expected a regular file");
  EXPECT_FUTR_ERROR(require_regular_file("/dev/zero", "t"), "/dev/zero: is a character device");
  EXPECT_FUTR_ERROR(require_regular_file(d.p / "none", "the prompt"), "no such file (the prompt)");
  EXPECT_FUTR_ERROR(require_regular_file(d.p / "dangling", "t"), "dangling symbolic link");
}

TEST(ReadFileLimited, RegularFilesWithinTheLimit) {
  TmpDir d;
  std::ofstream(d.p / "f") << std::string(1000, 'a');
  EXPECT_EQ(read_file_limited(d.p / "f", 1000, "text").size(), 1000u);
  EXPECT_FUTR_ERROR(read_file_limited(d.p / "f", 999, "the text"),
                    "1000 bytes, more than the 999 bytes limit for the text");
  ASSERT_EQ(::mkfifo((d.p / "fifo").c_str(), 0600), 0);
  // A FIFO is refused without opening it (opening one without a writer blocks).
  EXPECT_FUTR_ERROR(read_file_limited(d.p / "fifo", 100, "text"), "is a FIFO");
  EXPECT_FUTR_ERROR(read_file_limited("/dev/zero", 100, "text"), "is a character device");
  EXPECT_FUTR_ERROR(read_file_limited(d.p, 100, "text"), "is a directory");
}

TEST(ReadFdLimited, BoundedStream) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string data(5000, 'z');
  ASSERT_EQ(::write(fds[1], data.data(), data.size()), ssize_t(data.size()));
  ::close(fds[1]);
  EXPECT_EQ(read_fd_limited(fds[0], 5000, "stdin"), data);
  ::close(fds[0]);
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], data.data(), data.size()), ssize_t(data.size()));
  ::close(fds[1]);
  EXPECT_FUTR_ERROR(read_fd_limited(fds[0], 4096, "stdin"), "stdin: more than the 4096 bytes limit");
  ::close(fds[0]);
  // An endless source stops at the limit.
  const int z = ::open("/dev/zero", O_RDONLY);
  EXPECT_FUTR_ERROR(read_fd_limited(z, 1 << 20, "stdin"), "stdin: more than the 1 MiB limit");
  ::close(z);
}

TEST(HumanBytes, Units) {
  EXPECT_EQ(human_bytes(4096), "4096 bytes");
  EXPECT_EQ(human_bytes(64ull << 20), "64 MiB");
  EXPECT_EQ(human_bytes(2ull << 30), "2 GiB");
  EXPECT_EQ(human_bytes(3ull << 29), "1.5 GiB");
}

namespace {

// The files in `dir` whose name holds ".tmp".
int temporaries(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().find(".tmp") != std::string::npos;
  return n;
}

}  // namespace

TEST(TempOutput, CommitRenamesAndFailureRemoves) {
  TmpDir d;
  {
    TempOutput t(d.p / "a.bin");
    EXPECT_EQ(t.path().string().rfind((d.p / "a.bin.tmp.").string(), 0), 0u);
    t.write("hello", 5);
    t.commit();
  }
  EXPECT_EQ(fs::file_size(d.p / "a.bin"), 5u);
  {
    TempOutput t(d.p / "b.bin");
    t.write("x", 1);
  }  // destroyed without commit
  EXPECT_FALSE(fs::exists(d.p / "b.bin"));
  EXPECT_EQ(temporaries(d.p), 0);
  EXPECT_FUTR_ERROR(TempOutput(d.p / "no" / "c.bin"), "cannot open for writing");
}

// A signal while the temporary exists removes it, then ends the process as
// the signal would have.
TEST(TempOutput, TempOutputIsRemovedOnSignals) {
  for (const int sig : {SIGINT, SIGTERM}) {
    TmpDir d;
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      signal(sig, SIG_DFL);
      TempOutput t(d.p / "out.futr");
      t.write("partial", 7);
      raise(sig);
      _exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    EXPECT_EQ(temporaries(d.p), 0) << "signal " << sig;
    EXPECT_FALSE(fs::exists(d.p / "out.futr"));
  }
}
