// Calibration tokens (see calibration.h).
#include "runtime/calibration.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

#ifndef FUTR_DEFAULT_TEXT
#define FUTR_DEFAULT_TEXT "data/wikitext-2-raw/wiki.test.raw"
#endif

namespace futr::runtime {

namespace {

std::string read_text(const std::string& path) {
  std::error_code ec;
  FUTR_CHECK(std::filesystem::exists(path, ec), "{}: no such file", path);
  FUTR_CHECK(!std::filesystem::is_directory(path, ec), "{}: is a directory, not a text file", path);
  std::ifstream f(path, std::ios::binary);
  FUTR_CHECK(f.good(), "{}: cannot open for reading", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  FUTR_CHECK(!f.bad(), "{}: read error", path);
  return ss.str();
}

}  // namespace

std::string default_text_path() {
  std::error_code ec;
  if (std::filesystem::exists(FUTR_DEFAULT_TEXT, ec)) return FUTR_DEFAULT_TEXT;
  // An installed futr whose source tree is gone: the copy `cmake --install` put
  // under <prefix>/share/futransformer, beside <prefix>/bin/futr.
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed =
        exe.parent_path().parent_path() / "share/futransformer/wikitext-2-raw/wiki.test.raw";
    if (std::filesystem::exists(installed, ec)) return installed.string();
  }
  return FUTR_DEFAULT_TEXT;
}

namespace {

// The calibration text (its path into *file) for `model`, whose tokenizer it
// needs; futr::Error naming the file or the model otherwise.
std::string calibration_text(const Model& model, const CalibrationConfig& c, std::string* file) {
  *file = c.file.empty() ? default_text_path() : c.file;
  std::error_code ec;
  FUTR_CHECK(std::filesystem::exists(*file, ec),
             "{}: no such file (the calibration text{}; give one with --calib-file)", *file,
             c.file.empty() ? ", by default the perplexity text" : "");
  FUTR_CHECK(!model.tokenizer.tokens.empty(), "{}: the model has no tokenizer (needed for calibration)",
             model.path);
  return read_text(*file);
}

}  // namespace

std::vector<int32_t> calibration_tokens(const Model& model, const CalibrationConfig& c) {
  std::string file;
  const std::string text = calibration_text(model, c, &file);
  const Tokenizer tok(model.tokenizer);
  const std::vector<int32_t> all = tok.encode(text, tok.add_bos(), /*parse_special=*/false);
  // The held-out slice: the last 10% of the tokens.
  const size_t from = all.size() - all.size() / 10;
  std::vector<int32_t> out(all.begin() + long(from), all.end());
  if (out.size() > size_t(c.tokens)) out.resize(size_t(c.tokens));
  FUTR_CHECK(out.size() >= size_t(c.ctx),
             "{}: the calibration slice (last 10%) has {} tokens, less than --calib-ctx {}", file, out.size(),
             c.ctx);
  return out;
}

std::vector<int32_t> calibration_tokens_tail(const Model& model, const CalibrationConfig& c, size_t n) {
  std::string file;
  const std::string text = calibration_text(model, c, &file);
  const Tokenizer tok(model.tokenizer);
  size_t from = text.size() - text.size() / 10;
  from = text.find('\n', from);
  from = from == std::string::npos ? text.size() - text.size() / 10 : from + 1;
  // Tokenize growing pieces of the tail (whole lines) until n tokens are there.
  std::vector<int32_t> out;
  for (size_t len = std::max<size_t>(n * 8, 4096);; len *= 2) {
    size_t end = std::min(text.size(), from + len);
    if (end < text.size()) {
      const size_t nl = text.find('\n', end);
      end = nl == std::string::npos ? text.size() : nl + 1;
    }
    out = tok.encode(std::string_view(text).substr(from, end - from), tok.add_bos(), /*parse_special=*/false);
    if (out.size() >= n || end == text.size()) break;
  }
  if (out.size() > n) out.resize(n);
  FUTR_CHECK(out.size() >= size_t(c.ctx), "{}: the calibration tail has {} tokens, less than --calib-ctx {}",
             file, out.size(), c.ctx);
  return out;
}

}  // namespace futr::runtime
