// GPTQ: INT4 quantization of one linear layer that minimizes the layer's
// output error on calibration inputs, written from the paper (Frantar et al.,
// "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
// Transformers", 2022), into the same format as RTN (quant/int4_quant.h).
//
// Objective, per output row w (K inputs) with calibration inputs X [n, K]:
//     minimize || X w - X w~ ||^2 = (w - w~)^T H (w - w~),   H = X^T X / n
// GPTQ quantizes the inputs one at a time in a fixed order and, after
// quantizing input i, spreads its error over the inputs not yet quantized
// (the optimal update of the Optimal Brain Surgeon with H^-1):
//     e      = (w_i - q_i) / U_ii
//     w_j   -= e * U_ij             for j after i
// where U is the upper Cholesky factor of H^-1 (H^-1 = U^T U), whose row i is
// the OBS update direction restricted to the not-yet-quantized inputs.
//
// Details:
//   dead inputs  H_ii == 0 (an input that is always 0): H_ii = 1, w_i = 0;
//   damping      H += damp * mean(diag H) * I before the inverse (default 1%);
//                if Cholesky still fails the damping is multiplied by 10 (up to
//                4 times), then futr::Error;
//   lazy blocks  the updates are applied eagerly only inside a block of
//                `block` (128) inputs; the rest of the row receives one matrix
//                product per block: W[:, after] -= E U[block, after] (the
//                paper's "lazy batch" update: same result, far less memory
//                traffic);
//   groups       the group scale (per row, G inputs) is chosen when the first
//                input of the group is reached, from the already-updated
//                weights of the group (RTN amax rule or the clipping search,
//                whose error is weighted by H_kk = E[x_k^2] by default);
//   act-order    optional: inputs are processed in order of decreasing H_ii
//                (most active first). Group membership stays by ORIGINAL
//                input index, and the scales of all groups are fixed before
//                the pass from the (dead-zeroed) weights ("static groups"), so
//                the stored q[n, k], s[n, k / G] keep the plain layout: the
//                permutation is undone when writing q and neither the file
//                format nor the kernel changes.
// Rows are independent given U: they run in parallel (OpenMP) in chunks.
//
// Tests: tests/quant/gptq_test.cpp (output error below RTN's on the same
// layer, with and without act-order and clipping; dead inputs; damping).
#pragma once

#include <span>
#include <string>

#include "quant/int4_quant.h"

namespace futr::quant {

struct GptqOptions {
  int group = 0;              // 0: int4_group_for(K)
  double damp = 0.01;         // relative damping of the Hessian diagonal
  int block = 128;            // lazy-update block (a multiple of the group size)
  bool act_order = false;     // process inputs by decreasing H_ii (static groups)
  ClipSearch clip;            // clipping search for each group's scale (GPTQ + clip)
  bool clip_weighted = true;  // the search's error weighted by H_kk (output-aware), else plain MSE
};

// Quantizes W [n, k] (row-major FP32) with the calibration second moment
// H [k, k] (row-major, symmetric, H = X^T X / count; any positive multiple
// gives the same result). `name` is used in error messages.
Int4Weights gptq_quantize(std::span<const float> w, int n, int k, std::span<const double> hessian,
                          const GptqOptions& options, const std::string& name = "weight");

// || X W^T - X W~^T ||_F^2 / n expressed with H: sum_rows (w - w~)^T H (w - w~).
double hessian_output_error(std::span<const float> w, const Int4Weights& q, std::span<const double> hessian);

}  // namespace futr::quant
