// The one home of the format and quantization-choice enums (src/core/number_formats.h):
// every name round-trips through its parser, the parsers refuse anything else
// naming the accepted values, and the quantizer properties and metadata labels.
#include "core/number_formats.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/expect_error.h"

using namespace futr;

namespace {

template <class Parse>
void expect_round_trip(const std::vector<std::string>& names, Parse parse) {
  ASSERT_FALSE(names.empty());
  for (const std::string& n : names) EXPECT_EQ(to_string(parse(n)), n);
}

}  // namespace

TEST(Formats, NamesRoundTrip) {
  expect_round_trip(weight_format_names(), parse_weight_format);
  expect_round_trip(kv_format_names(), parse_kv_format);
  expect_round_trip(quant_method_names(), parse_quant_method);
  expect_round_trip(fp8_policy_names(), parse_fp8_policy);
  EXPECT_EQ(quant_method_names(), (std::vector<std::string>{"rtn", "clip", "clip-act", "gptq", "gptq-clip"}));
  EXPECT_EQ(fp8_policy_names(), (std::vector<std::string>{"clamp", "recompute"}));
  EXPECT_EQ(parse_fp8_policy("clamp"), Fp8SaturationPolicy::kClampRescale);
}

TEST(Formats, UnknownNamesListTheValidOnes) {
  EXPECT_FUTR_ERROR(parse_quant_method("awq"),
                    "unknown INT4 quantizer 'awq' (choose rtn, clip, clip-act, gptq, gptq-clip)");
  EXPECT_FUTR_ERROR(parse_quant_method("RTN"), "choose rtn, clip");  // spellings are exact
  EXPECT_FUTR_ERROR(parse_quant_method(""), "unknown INT4 quantizer ''");
  EXPECT_FUTR_ERROR(parse_fp8_policy("saturate"),
                    "unknown FP8 saturation policy 'saturate' (choose clamp, recompute)");
  EXPECT_FUTR_ERROR(parse_weight_format("int8"),
                    "unknown weight format 'int8' (choose auto, fp32, bf16, fp8, int4)");
  EXPECT_FUTR_ERROR(parse_kv_format("fp8"),
                    "unknown KV format 'fp8' (choose auto, fp32, bf16, int4, int4-rot)");
}

TEST(Formats, QuantizerProperties) {
  EXPECT_FALSE(is_gptq(QuantMethod::kRtn));
  EXPECT_FALSE(is_gptq(QuantMethod::kClipAct));
  EXPECT_TRUE(is_gptq(QuantMethod::kGptq));
  EXPECT_TRUE(is_gptq(QuantMethod::kGptqClip));
  EXPECT_FALSE(needs_activations(QuantMethod::kRtn));
  EXPECT_FALSE(needs_activations(QuantMethod::kClip));
  EXPECT_TRUE(needs_activations(QuantMethod::kClipAct));
  EXPECT_TRUE(needs_activations(QuantMethod::kGptq));
  EXPECT_TRUE(needs_activations(QuantMethod::kGptqClip));
}

// The .futr metadata labels are stable: files written before the enum existed
// carry the same strings.
TEST(Formats, MetadataLabels) {
  EXPECT_EQ(quant_method_label(QuantMethod::kRtn, false), "rtn");
  EXPECT_EQ(quant_method_label(QuantMethod::kClip, false), "rtn+clip");
  EXPECT_EQ(quant_method_label(QuantMethod::kClipAct, false), "rtn+clip(act)");
  EXPECT_EQ(quant_method_label(QuantMethod::kGptq, false), "gptq");
  EXPECT_EQ(quant_method_label(QuantMethod::kGptqClip, true), "gptq+clip,act-order");
  EXPECT_EQ(quant_method_label(QuantMethod::kRtn, true), "rtn");  // act-order is GPTQ's only
}
