// Compiled variants of the QkvRope policy: packed rows (variable-length
// requests concatenated) and padded rows, separately compiled; the rows of
// kGemmVariants (launch/fp8_gemm_variants.h) with these epilogues.
#include "launch/fp8_gemm_launch.cuh"

namespace futr::cuda::detail {

namespace {
template <class Rows, class P>
void set_qkv(P& p, const QkvRopeArgs& a) {
  set_scales(p, a.scales);
  p.inv_freq = a.inv_freq;
  p.heads = a.heads;
  p.kv_heads = a.kv_heads;
  p.head_dim = a.head_dim;
  p.q_out = a.q_out;
  p.ld_q = a.ld_q;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.num_slots = a.num_slots;
}
}  // namespace

void launch_qkv_rope_packed(const GemmVariant& v, const GemmLaunch& l, const QkvRopeArgs& a,
                            const PackedRowMap& rows) {
  using Rows = device::epi::PackedRows;
  using Epi = device::epi::QkvRope<Rows>;
  Epi::Params p{};
  set_qkv<Rows>(p, a);
  p.rows = {rows.cu_rows, rows.start_pos, rows.slot_base, rows.num_requests};
  dispatch<GemmEpilogue::kQkvRopePacked, Epi>(v, l, p);
}

void launch_qkv_rope_padded(const GemmVariant& v, const GemmLaunch& l, const QkvRopeArgs& a,
                            const PaddedRowMap& rows) {
  using Rows = device::epi::PaddedRows;
  using Epi = device::epi::QkvRope<Rows>;
  Epi::Params p{};
  set_qkv<Rows>(p, a);
  p.rows = {rows.lengths, rows.start_pos, rows.slot_base, rows.num_requests, rows.max_len};
  dispatch<GemmEpilogue::kQkvRopePadded, Epi>(v, l, p);
}

}  // namespace futr::cuda::detail
