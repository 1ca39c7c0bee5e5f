// Hostile command lines: flag values outside their range are
// refused with the range (never remapped), options that do not apply are
// refused, resource limits hold (threads, context, input files), and futr
// quantize never overwrites its input or a non-regular file. Each case runs
// the `futr` binary and expects exit status 1 with a message on stderr
// (never a crash: rc >= 128 fails). Also: every command that opens an engine
// (serve and chat too) checks --ctx and the memory for --max-seqs x --ctx at
// start-up; serve's resource options are capped; a write error on standard
// output exits 1; quantize refuses -o naming the calibration text.
// Library-level hostile inputs are in tests/formats/hostile_input_test.cpp.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/run_futr.h"

namespace {

namespace fs = std::filesystem;
using futr::test::run_futr;

bool have_model() { return fs::exists(FUTR_DEFAULT_MODEL); }

struct Case {
  std::vector<std::string> args;
  const char* error;  // substring of stderr
  bool needs_model;
};

void check(const Case& c) {
  std::string line;
  for (const auto& a : c.args) line += a + " ";
  SCOPED_TRACE(line);
  const futr::test::FutrRun r = run_futr(c.args);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find(c.error), std::string::npos) << "stderr: " << r.err;
  EXPECT_LT(r.err.size(), 400u) << "an unclear (long) message: " << r.err;
}

const char* kText = FUTR_TEST_TEXT;

}  // namespace

TEST(HostileCli, FlagsOutOfRangeAreRefused) {
  const std::vector<Case> cases = {
      {{"generate", "hi", "--threads", "100000"}, "100000 not in range 0 to", false},
      {{"generate", "hi", "--threads", "-1"}, "-1 not in range 0 to", false},
      {{"generate", "hi", "--ctx", "-5"}, "--ctx -5 is out of range", false},
      {{"generate", "hi", "--top-k", "-5"}, "-5 not in range 0 to 2147483647", false},
      {{"generate", "hi", "--seed", "-1"}, "the seed must be in 0..18446744073709551615", false},
      {{"generate", "hi", "--top-p", "1.5"}, "--top-p must be in (0, 1] (got 1.5)", false},
      {{"generate", "hi", "--temperature", "nan"}, "--temperature must be in [0, 100] (got nan)", false},
      {{"generate", "hi", "--max-tokens", "-2"}, "--max-tokens must be >= 0", false},
      {{"perplexity", kText, "--ctx", "-5"}, "--ctx -5 is out of range (2..", false},
      {{"perplexity", kText, "--ctx", "64", "--stride", "-3"},
       "--stride -3 is out of range (1..--ctx 64",
       false},
      {{"generate", "hi", "--ctx", "1000000"},
       "--ctx 1000000 is out of range (1..8192, the model's trained context)",
       true},
      {{"perplexity", kText, "--ctx", "100000"}, "--ctx 100000 is out of range (2..8192", true},
      {{"generate", "hi", "--kv-block", "32"}, "--kv-block applies to --kv int4-rot", true},
      {{"generate", "hi", "--tp", "0"}, "0 not in range 1 to 64", false},
      {{"bench", "--tp", "65"}, "65 not in range 1 to 64", false},
      // Tensor parallelism runs the GPU engine: on the CPU backend it is refused, naming why.
      {{"generate", "hi", "--tp", "2", "--backend", "cpu"},
       "--tp 2: tensor parallelism runs the GPU engine",
       true},
      {{"bench", "--synthetic", "tiny", "--backend", "cpu", "--tp", "4", "-p", "0", "-n", "1"},
       "--tp 4: tensor parallelism runs the GPU engine",
       false},
      // The FP8 prefill path is the GPU engine's: asked for on the CPU, refused, naming the CPU's FP8
      // reference.
      {{"generate", "hi", "--prefill", "--backend", "cpu"},
       "--prefill on: the FP8 prefill path is the GPU engine's",
       true},
      {{"generate", "hi", "--prefill=sometimes"}, "--prefill: sometimes not in {auto,on,off}", false},
      {{"perplexity", kText, "--fp8-numerics", "tpu"}, "--fp8-numerics: tpu not in {cpu,gpu}", false},
  };
  for (const Case& c : cases)
    if (!c.needs_model || have_model()) check(c);
}

TEST(HostileCli, InputFilesMustBeRegular) {
  const fs::path dir = fs::temp_directory_path() / ("futr_hostile_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  check({{"perplexity", "/dev/zero"}, "/dev/zero: is a character device, expected a regular file", false});
  check({{"perplexity", (dir / "fifo").string()}, "fifo: is a FIFO, expected a regular file", false});
  check({{"perplexity", dir.string()}, "is a directory, expected a regular file", false});
  check({{"generate", "hi", "--model", (dir / "fifo").string()}, "is a FIFO, expected a model file", false});
  fs::remove_all(dir);
}

TEST(HostileCli, QuantizeNeverOverwritesTheInput) {
  const fs::path dir = fs::temp_directory_path() / ("futr_hostile_q_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(fs::path(FUTR_TEST_DATA) / "hf_tiny" / "gqa_hd64_tied_bf16", dir, fs::copy_options::recursive);
  const auto before = fs::file_size(dir / "model.safetensors");
  check({{"quantize", "--model", dir.string(), "-o", (dir / "model.safetensors").string()},
         "is a file of the input model; choose another output file",
         false});
  EXPECT_EQ(fs::file_size(dir / "model.safetensors"), before);
  fs::create_symlink(dir / "model.safetensors", dir / "alias.futr");
  check({{"quantize", "--model", (dir / "model.safetensors").string(), "-o", (dir / "alias.futr").string()},
         "is the file of the input model",
         false});
  check({{"quantize", "--model", dir.string(), "-o", "/dev/null"},
         "-o /dev/null: is a character device",
         false});
  check({{"quantize", "--model", dir.string(), "-o", dir.string()}, "is a directory", false});
  fs::remove_all(dir);
}

// serve and chat refuse at start-up what generate refuses (the trained
// context; the KV cache of --max-seqs x --ctx beyond the machine's memory,
// saying what fits), and serve's resource options have caps, named.
TEST(HostileCli, ServeAndChatCheckTheContextAtStartUp) {
  const std::vector<Case> cases = {
      {{"serve", "--port", "0", "--ctx", "100000"},
       "--ctx 100000 is out of range (1..8192, the model's trained context)",
       true},
      {{"serve", "--port", "0", "--max-seqs", "4096", "--ctx", "8192"},
       "x 4096 sequences (--max-seqs): its KV cache",
       true},
      {{"serve", "--port", "0", "--max-seqs", "4096", "--ctx", "8192"},
       "positions per sequence with 4096 sequences fit",
       true},
      {{"chat", "--ctx", "100000"}, "--ctx 100000 is out of range (1..8192", true},
      {{"serve", "--port", "0", "--max-queue", "100000"},
       "--max-queue must be in [0, 65536] (got 100000)",
       false},
      {{"serve", "--port", "0", "--max-connections", "5000"},
       "--max-connections must be in [0, 4096]",
       false},
      {{"serve", "--port", "0", "--max-body", "2000000000"},
       "--max-body must be in [1, 1073741824] bytes",
       false},
      {{"serve", "--port", "0", "--drain-timeout", "0"}, "--drain-timeout must be in (0, 3600]", false},
  };
  for (const Case& c : cases)
    if (!c.needs_model || have_model()) check(c);
}

// Standard output that cannot be written (/dev/full: ENOSPC) is an error,
// exit 1, never 0 with the output lost.
TEST(HostileCli, StdoutWriteErrorsExit1) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path err = fs::temp_directory_path() / ("futr_hostile_full_" + std::to_string(::getpid()));
  auto run_full = [&](const std::string& args) {
    const std::string cmd = futr::test::shell_quote(FUTR_BINARY) + " " + args + " > /dev/full 2> " +
                            futr::test::shell_quote(err.string());
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  EXPECT_EQ(run_full("--help"), 1);
  EXPECT_NE(futr::test::slurp(err).find("standard output: write error"), std::string::npos)
      << futr::test::slurp(err);
  if (have_model()) {
    EXPECT_EQ(run_full("generate hi --max-tokens 3 --temperature 0 --quiet"), 1);
    EXPECT_NE(futr::test::slurp(err).find("standard output: write error"), std::string::npos)
        << futr::test::slurp(err);
    EXPECT_EQ(run_full("info"), 1);
  }
  fs::remove(err);
}

// --seed beyond 2^64-1 is refused (never clamped); --stop takes exactly one
// value, so the word after it stays the prompt.
TEST(HostileCli, SeedAndStopTakeWhatTheySay) {
  check({{"generate", "hi", "--seed", "18446744073709551616"}, "18446744073709551615", false});
  check({{"generate", "hi", "--seed", "99999999999999999999999"}, "18446744073709551615", false});
  if (!have_model()) return;
  const futr::test::FutrRun r = run_futr(
      {"generate", "--stop", "zzzz", "The capital of France is", "--max-tokens", "2", "--temperature", "0"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
}

// -o may not be the calibration text (it would be overwritten by the output).
TEST(HostileCli, QuantizeRefusesTheCalibrationTextAsOutput) {
  const fs::path dir = fs::temp_directory_path() / ("futr_hostile_qc_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(fs::path(FUTR_TEST_DATA) / "hf_tiny" / "gqa_hd64_tied_bf16", dir / "m",
           fs::copy_options::recursive);
  fs::copy_file(kText, dir / "calib.txt");
  const auto before = fs::file_size(dir / "calib.txt");
  check({{"quantize", "--model", (dir / "m").string(), "-o", (dir / "calib.txt").string(), "--calib-file",
          (dir / "calib.txt").string()},
         "is the calibration text",
         false});
  EXPECT_EQ(fs::file_size(dir / "calib.txt"), before);
  fs::remove_all(dir);
}

namespace {

// `futr serve` on a free port (the CPU engine, --ctx 512, 2 sequences unless
// `default_seqs`) with stderr in `log`; the pid, and the port once it listens
// (0 if it never does within 60 s).
std::pair<pid_t, int> start_serve(const fs::path& log, const std::vector<std::string>& extra,
                                  bool default_seqs = false) {
  std::vector<std::string> args = {FUTR_BINARY, "serve", "--port", "0",  "--backend",
                                   "cpu",       "--ctx", "512",    "-t", "1"};
  if (!default_seqs) args.insert(args.end(), {"--max-seqs", "2"});
  args.insert(args.end(), extra.begin(), extra.end());
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    const int null = ::open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const std::regex re(R"(listening on http://127\.0\.0\.1:(\d+))");
  for (int i = 0; i < 600; ++i) {
    std::ifstream f(log);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::smatch m;
    if (std::regex_search(text, m, re)) return {pid, std::stoi(m[1])};
    if (waitpid(pid, nullptr, WNOHANG) == pid) return {-1, 0};
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return {pid, 0};
}

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Seconds until `pid` exits (at most `limit`; then it is killed), and its status.
std::pair<double, int> wait_exit(pid_t pid, double limit) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > limit) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return {s, -1};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), status};
}

}  // namespace

// Without --max-seqs, `futr serve` on the CPU engine decodes 8 sequences at
// once (the GPU engine: 32, one decode micro-step's rows) and says so.
TEST(HostileCli, ServeSizesTheBatchByTheEngine) {
  if (!have_model()) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent";
  const fs::path log = fs::temp_directory_path() / ("futr_hostile_seqs_" + std::to_string(::getpid()));
  const auto [pid, port] = start_serve(log, {}, /*default_seqs=*/true);
  ASSERT_GT(pid, 0) << futr::test::slurp(log);
  EXPECT_GT(port, 0) << "futr serve did not start: " << futr::test::slurp(log);
  kill(pid, SIGTERM);
  const auto [seconds, status] = wait_exit(pid, 30);
  EXPECT_NE(status, -1) << "still running after 30 s";
  const std::string text = futr::test::slurp(log);
  EXPECT_NE(text.find("futr serve: 8 sequences x 512 positions"), std::string::npos) << text;
  fs::remove(log);
}

// The real `futr serve` with 100 slow clients connected and a long request
// running: SIGTERM ends it within --drain-timeout (+ a margin), and a second
// SIGTERM right after the first ends it at once.
TEST(HostileCli, ServeStopsWithinItsBoundWithSlowClients) {
  if (!have_model()) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent";
  const fs::path log = fs::temp_directory_path() / ("futr_hostile_serve_" + std::to_string(::getpid()));
  for (const bool twice : {false, true}) {
    SCOPED_TRACE(twice ? "two signals" : "one signal");
    const auto [pid, port] = start_serve(log, {"--drain-timeout", "2"});
    ASSERT_GT(pid, 0);
    ASSERT_GT(port, 0) << "futr serve did not start";
    std::vector<int> slow;
    for (int i = 0; i < 100; ++i) {
      slow.push_back(connect_to(port));
      send(slow.back(), "POST /v1/completions HTTP/1.1\r\nHo", 33, MSG_NOSIGNAL);
    }
    const std::string body =
        R"({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "Once upon a time", "max_tokens": 400})";
    const int busy = connect_to(port);
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    send(busy, req.data(), req.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(pid, SIGTERM);
    if (twice) {
      // The second signal once the first one is handled: two SIGTERMs pending
      // at once are one signal (POSIX does not queue them), which a loaded
      // machine makes likely with a fixed pause.
      for (int i = 0; i < 400 && futr::test::slurp(log).find("draining") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      kill(pid, SIGTERM);
    }
    const auto [seconds, status] = wait_exit(pid, 30);
    EXPECT_NE(status, -1) << "still running after 30 s";
    EXPECT_LT(seconds, twice ? 3.0 : 2.0 + 3.0);
    for (int fd : slow) close(fd);
    close(busy);
  }
  fs::remove(log);
}
