// GPTQ (src/quant/gptq.h): on the same layer and calibration inputs, GPTQ's
// output error || X W^T - X W~^T || is lower than RTN's, with and without
// act-order and clipping; act-order keeps the plain (q, s) format; dead inputs
// and a degenerate Hessian are handled.
#include "quant/gptq.h"

#include <gtest/gtest.h>

#include "core/numeric.h"
#include "quant/quant_test_util.h"

using namespace futr;
using namespace futr::quant;

namespace {

struct Layer {
  int n, k, rows;
  std::vector<float> w, x;
  std::vector<double> h;
};

Layer make_layer(int n, int k, int rows) {
  auto& rng = test::test_rng();
  Layer L{n, k, rows, test::randn(size_t(n) * k, 0.05f, rng), test::correlated_inputs(rows, k, rng), {}};
  L.h = test::hessian_of(L.x, rows, k);
  return L;
}

// || X (W - W~)^T ||_F^2 / rows computed directly from the inputs.
double output_error(const Layer& L, const Int4Weights& q) {
  const std::vector<float> d = dequantize_int4(q);
  double e = 0;
  for (int r = 0; r < L.rows; ++r)
    for (int o = 0; o < L.n; ++o) {
      double y = 0;
      for (int j = 0; j < L.k; ++j)
        y += double(L.x[size_t(r) * L.k + j]) * (double(L.w[size_t(o) * L.k + j]) - d[size_t(o) * L.k + j]);
      e += y * y;
    }
  return e / L.rows;
}

}  // namespace

TEST(Gptq, LowerOutputErrorThanRtn) {
  const Layer L = make_layer(48, 256, 512);
  const Int4Weights rtn = quantize_int4(L.w, L.n, L.k, 0, {});
  GptqOptions o;
  const Int4Weights g = gptq_quantize(L.w, L.n, L.k, L.h, o);
  const double e_rtn = output_error(L, rtn), e_g = output_error(L, g);
  // Consistency of the Hessian form with the direct computation.
  EXPECT_NEAR(hessian_output_error(L.w, g, L.h), e_g, 1e-6 * e_g + 1e-12);
  EXPECT_LT(e_g, 0.8 * e_rtn) << "gptq " << e_g << " rtn " << e_rtn;

  o.act_order = true;
  const Int4Weights ga = gptq_quantize(L.w, L.n, L.k, L.h, o);
  EXPECT_LT(output_error(L, ga), 0.8 * e_rtn);
  o.clip.enabled = true;
  const Int4Weights gc = gptq_quantize(L.w, L.n, L.k, L.h, o);
  EXPECT_LT(output_error(L, gc), 0.8 * e_rtn);
  for (const Int4Weights* q : {&g, &ga, &gc}) {
    for (auto v : q->q) ASSERT_TRUE(v >= -8 && v <= 7);
    EXPECT_EQ(q->group, 128);
  }
}

TEST(Gptq, ActOrderKeepsFormat) {
  // With act-order the scales are fixed up front (static groups): they equal RTN's.
  const Layer L = make_layer(16, 128, 256);
  GptqOptions o;
  o.act_order = true;
  const Int4Weights g = gptq_quantize(L.w, L.n, L.k, L.h, o);
  const Int4Weights rtn = quantize_int4(L.w, L.n, L.k, 0, {});
  EXPECT_EQ(g.scale, rtn.scale);
  // q is stored at the original input positions: dequantization alone reproduces W~.
  const std::vector<float> d = dequantize_int4(g);
  double e = 0, ref = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    e += (d[i] - L.w[i]) * (d[i] - L.w[i]);
    ref += L.w[i] * L.w[i];
  }
  EXPECT_LT(e, 0.05 * ref);  // close to W (a scrambled permutation would not be)
}

TEST(Gptq, Group64AndSmolShapes) {
  const Layer L = make_layer(24, 576, 600);  // K = 576 -> group 64
  const Int4Weights g = gptq_quantize(L.w, L.n, L.k, L.h, {});
  EXPECT_EQ(g.group, 64);
  EXPECT_LT(output_error(L, g), output_error(L, quantize_int4(L.w, L.n, L.k, 0, {})));
}

TEST(Gptq, DeadInputsAndDegenerateHessian) {
  Layer L = make_layer(16, 128, 64);  // rows < k: H is singular, damping makes it definite
  for (int r = 0; r < L.rows; ++r) L.x[size_t(r) * L.k + 7] = 0.0f;  // input 7 always 0
  L.h = test::hessian_of(L.x, L.rows, L.k);
  const Int4Weights g = gptq_quantize(L.w, L.n, L.k, L.h, {});
  for (int r = 0; r < L.n; ++r) EXPECT_EQ(g.q[size_t(r) * L.k + 7], 0);  // dead input -> 0
  EXPECT_LT(output_error(L, g), output_error(L, quantize_int4(L.w, L.n, L.k, 0, {})));
}

TEST(Gptq, Errors) {
  const Layer L = make_layer(8, 128, 32);
  std::vector<double> h = L.h;
  h[0] = -1.0;
  EXPECT_FUTR_ERROR(gptq_quantize(L.w, L.n, L.k, h, {}, "blk.2.attn_v"),
                    "blk.2.attn_v: GPTQ: Hessian diagonal 0");
  EXPECT_FUTR_ERROR(gptq_quantize(L.w, L.n, L.k, std::vector<double>(10), {}, "w"), "Hessian of 10 values");
  GptqOptions o;
  o.block = 100;
  EXPECT_FUTR_ERROR(gptq_quantize(L.w, L.n, L.k, L.h, o, "w"), "multiple of group");
}
