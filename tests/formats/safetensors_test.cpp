// safetensors reader on valid and broken files written by the test itself.
#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include "formats/safetensors_writer.h"
#include "support/expect_error.h"

using namespace futr;
using namespace futr::test;

namespace {
SafetensorsFile parse(const std::vector<uint8_t>& b) {
  return SafetensorsFile(std::span<const uint8_t>(b), "bad.safetensors");
}
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes = 0) {
  return st_raw(header, std::vector<uint8_t>(data_bytes));
}
}  // namespace

TEST(Safetensors, ReadsEveryFloatDtype) {
  const std::vector<float> v = {1.0f, -2.5f, 0.125f, 3.0f, 65504.0f, -0.0f};
  const std::vector<StTensor> ts = {st_from_floats("a", "F32", {2, 3}, v),
                                    st_from_floats("b", "F16", {6}, v),
                                    st_from_floats("c", "BF16", {3, 2}, v),
                                    {"d", "I64", {2}, std::vector<uint8_t>(16)}};
  const auto bytes = st_bytes(ts, {{"format", "pt"}});
  const SafetensorsFile f = parse(bytes);
  EXPECT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const Tensor a = f.read_tensor(*f.find("a"));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, v);
  EXPECT_EQ(f.read_tensor(*f.find("b")).data, v);
  const Tensor c = f.read_tensor(*f.find("c"));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(c.data[i], round_bf16(v[i]));
  EXPECT_FUTR_ERROR(f.read_tensor(*f.find("d")), "tensor 'd' has dtype I64; supported: BF16, F16, F32");
  EXPECT_EQ(f.find("zz"), nullptr);
}

TEST(Safetensors, PaddedHeaderAndEmptyFile) {
  std::string h = st_header({st_from_floats("a", "F32", {1}, {2.0f})});
  h += "        ";  // writers pad the header with spaces to an 8-byte multiple
  const auto b = st_raw(h, {0, 0, 0, 64});
  EXPECT_EQ(parse(b).read_tensor(*parse(b).find("a")).data[0], 2.0f);
  EXPECT_TRUE(parse(raw("{}")).tensors().empty());
}

TEST(Safetensors, TruncatedAnywhere) {
  const auto full = st_bytes({st_from_floats("a", "F32", {4, 4}, std::vector<float>(16, 1.0f)),
                              st_from_floats("b", "BF16", {8}, std::vector<float>(8, 2.0f))});
  for (size_t len = 0; len < full.size(); ++len) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + long(len));
    try {
      parse(cut);
      ADD_FAILURE() << "no error at length " << len;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("bad.safetensors: ", 0), 0u) << e.what();
    }
  }
}

TEST(Safetensors, BrokenHeaders) {
  std::vector<uint8_t> huge(8, 0xff);
  EXPECT_FUTR_ERROR(parse(huge), "header length 18446744073709551615 exceeds");
  std::vector<uint8_t> past(8, 0);
  past[0] = 100;
  EXPECT_FUTR_ERROR(parse(past), "truncated: header length 100 but only 0 bytes follow");
  EXPECT_FUTR_ERROR(parse(raw("[1, 2]")), "does not start with a JSON object");
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": ")), "the JSON header is invalid");
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": 1}")), "not a JSON object of tensor entries");
  EXPECT_FUTR_ERROR(parse(raw("{} trailing")), "the JSON header is invalid");
  EXPECT_FUTR_ERROR(parse(raw(R"({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", 1)),
                    "tensor 'a' has unknown dtype 'Q4'");
  EXPECT_FUTR_ERROR(parse(raw(R"({"a": {"dtype": "F32", "shape": [1]}})")),
                    "tensor 'a' lacks dtype, shape or data_offsets");
  EXPECT_FUTR_ERROR(parse(raw(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4)),
                    "negative number -1");
  EXPECT_FUTR_ERROR(parse(raw(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4)),
                    "unexpected a fractional number");
  EXPECT_FUTR_ERROR(parse(raw(R"({"a": {"dtype": "F32", "shape": [[1]], "data_offsets": [0, 4]}})", 4)),
                    "unexpected array");
  EXPECT_FUTR_ERROR(parse(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8)),
                    "data_offsets must have 2 entries");
  EXPECT_FUTR_ERROR(parse(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 8)),
                    "data_offsets must have 2 entries, has 1");
  EXPECT_FUTR_ERROR(parse(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}})", 4)),
                    "tensor 'a' has an unknown field 'x'");
  EXPECT_FUTR_ERROR(
      parse(raw(R"({"a": {"dtype": "F32", "dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4)),
      "has field 'dtype' twice");
  EXPECT_FUTR_ERROR(parse(raw(R"({"__metadata__": {"k": 1}})")), "__metadata__ value of 'k' is a number");
  EXPECT_FUTR_ERROR(
      parse(raw(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4)),
      "has too many elements");
}

// A long invalid token is quoted clipped in the message (nlohmann's parse
// error quotes the whole last token: here 1 MB).
TEST(Safetensors, InvalidHeaderMessagesAreShort) {
  const std::string header = "{\"" + std::string(1 << 20, 'n') + "\x01\": 1}";
  try {
    parse(raw(header));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the JSON header is invalid"), std::string::npos);
    EXPECT_LT(std::string(e.what()).size(), 500u);
  }
}

TEST(Safetensors, BrokenRanges) {
  const std::string one = R"("dtype": "F32", "shape": [2])";
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": {" + one + R"(, "data_offsets": [0, 8]}})", 4)),
                    "tensor 'a' data [0, 8) lies outside the 4-byte data buffer");
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": {" + one + R"(, "data_offsets": [8, 0]}})", 8)), "lies outside");
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": {" + one + R"(, "data_offsets": [0, 4]}})", 4)),
                    "needs 8 bytes but data_offsets span 4");
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": {" + one + R"(, "data_offsets": [0, 8]}, "b": {)" + one +
                                  R"(, "data_offsets": [4, 12]}})",
                              12)),
                    "data of tensor 'b' [4, 12) overlaps");
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": {" + one + R"(, "data_offsets": [8, 16]}})", 16)),
                    "the data buffer has a hole [0, 8)");
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": {" + one + R"(, "data_offsets": [0, 8]}})", 12)), "trailing data");
  EXPECT_FUTR_ERROR(parse(raw("{\"a\": {" + one + R"(, "data_offsets": [0, 8]}, "a": {)" + one +
                                  R"(, "data_offsets": [8, 16]}})",
                              16)),
                    "duplicate tensor name 'a'");
  // NaN in the data.
  EXPECT_FUTR_ERROR(
      {
        const auto b = st_bytes({st_from_floats("n", "F32", {2}, {1.0f, std::nanf("")})});
        const SafetensorsFile f = parse(b);
        f.read_tensor(*f.find("n"));
      },
      "tensor 'n' has a non-finite value at element 1");
}

TEST(Safetensors, MissingFile) {
  EXPECT_FUTR_ERROR(SafetensorsFile("/nonexistent/x.safetensors"), "/nonexistent/x.safetensors: cannot open");
}
