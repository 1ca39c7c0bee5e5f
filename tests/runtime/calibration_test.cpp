// The calibration tokens (runtime/calibration.h) on the default model: the
// held-out tail tokenized alone gives the requested count from the text's last
// tenth, and a missing calibration file is an error naming it. Skips without
// the model (scripts/fetch-model.sh).
#include "runtime/calibration.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "formats/loader.h"
#include "support/data_file.h"
#include "support/expect_error.h"
#include "tokenizer/tokenizer.h"

namespace futr::runtime {
namespace {

TEST(Calibration, TheTailAloneGivesTokensOfTheLastTenth) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(FUTR_DEFAULT_MODEL, ec))
    GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent";
  const Model model = load_model(FUTR_DEFAULT_MODEL);
  CalibrationConfig c;
  const std::vector<int32_t> t = calibration_tokens_tail(model, c, 2048);
  ASSERT_EQ(t.size(), 2048u);
  const Tokenizer tok(model.tokenizer);
  const std::string text = test::read_data_file(default_text_path());
  std::string piece = tok.decode(std::span<const int32_t>(t).subspan(t.size() / 2, 64));
  const size_t at = text.find(piece);
  ASSERT_NE(at, std::string::npos) << "the tail's tokens decode to the text";
  EXPECT_GE(at, text.size() - text.size() / 10);
  c.file = "/nonexistent/calibration.txt";
  EXPECT_FUTR_ERROR(calibration_tokens_tail(model, c, 64), "/nonexistent/calibration.txt: no such file");
}

}  // namespace
}  // namespace futr::runtime
