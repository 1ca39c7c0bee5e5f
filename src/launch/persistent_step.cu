// The persistent executor's launcher (see persistent_step.h).
#include "launch/persistent_step.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/sm90_persistent_step.cuh"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/decode_ops_params.cuh"
#include "launch/device.h"
#include "launch/w4a16_variant.cuh"

namespace futr::cuda {

struct PersistentStep::Impl {
  std::vector<device::PersistentOp> ops;
  DeviceBuffer<device::PersistentOp> dev_ops;
  DeviceBuffer<uint32_t> done;  // [ops + 1], zero between launches
  size_t smem = device::kPersistentSmallSmem + device::kPersistentOpSmem;
  bool uploaded = false;

  template <class P>
  void add(device::PersistentKind kind, const P& p, int units, int nx, int ny) {
    FUTR_CHECK(!uploaded, "persistent step: ops added after the first launch");
    device::PersistentOp op{};
    op.kind = kind;
    op.units = units;
    op.nx = nx;
    op.ny = ny;
    std::memcpy(op.params, &p, sizeof(P));
    ops.push_back(op);
  }
};

PersistentStep::PersistentStep() : impl_(std::make_unique<Impl>()) {}
PersistentStep::~PersistentStep() = default;

void PersistentStep::rmsnorm(const RmsNormArgs& a) {
  const device::RmsNormParams p = rmsnorm_params(a);
  if (a.rows > 0) impl_->add(device::PersistentKind::kRmsNorm, p, a.rows, a.rows, 1);
}

void PersistentStep::swiglu(const void* gu, void* out, int rows, int I) {
  if (rows == 0) return;
  const int units = swiglu_units(rows, I);
  impl_->add(device::PersistentKind::kSwiglu, swiglu_params(gu, out, rows, I), units, units, 1);
}

void PersistentStep::gemm(const DecodeArgs& a, const DecodeConfig& c) {
  FUTR_CHECK(c.kernel == DecodeKernel::kGemv && c.tn == 1 && c.loads == 4 && a.m == 1,
             "persistent step: the gemm ops are the one-row INT4 gemv (tn=1 loads=4); got {} at M = {}",
             describe(c), a.m);
  const w4a16::DecodeLaunch l = w4a16::decode_launch(DecodeWeights::kInt4, a, c);
  const size_t fixed = device::kPersistentSmallSmem + device::kPersistentOpSmem;
  FUTR_CHECK(l.smem + fixed <= size_t(160) * 1024,
             "persistent step: the gemv stages {} bytes, more than fits", l.smem);
  impl_->smem = std::max(impl_->smem, fixed + l.smem);
  const int nx = int(l.grid.x), ny = int(l.grid.y);
  impl_->add(a.group == 128 ? device::PersistentKind::kGemvG128 : device::PersistentKind::kGemvG64, l.p,
             nx * ny, nx, ny);
}

int PersistentStep::size() const { return int(impl_->ops.size()); }

namespace {
// The kernel instance for a list: the gemv-only one (four CTAs per SM) where it can.
using Kernel = void (*)(device::PersistentStepParams);
Kernel kernel_for(const std::vector<device::PersistentOp>& ops) {
  const bool gemv_only = std::all_of(ops.begin(), ops.end(), [](const device::PersistentOp& op) {
    return op.kind == device::PersistentKind::kGemvG128 || op.kind == device::PersistentKind::kGemvG64;
  });
  return gemv_only ? device::sm90_persistent_step_kernel<true> : device::sm90_persistent_step_kernel<false>;
}
}  // namespace

int PersistentStep::resident_ctas() const {
  const Kernel kernel = kernel_for(impl_->ops);
  FUTR_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(impl_->smem)));
  int per_sm = 0;
  FUTR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, device::kPersistentThreads,
                                                                impl_->smem));
  FUTR_CHECK(per_sm > 0, "persistent step: {} bytes of shared memory per CTA do not fit an SM", impl_->smem);
  return per_sm * require_device().sm_count;
}

void PersistentStep::launch(cudaStream_t s, int ctas) {
  Impl& m = *impl_;
  FUTR_CHECK(!m.ops.empty(), "persistent step: no ops");
  const int resident = resident_ctas();
  FUTR_CHECK(ctas >= 0 && ctas <= resident,
             "persistent step: {} CTAs requested, {} fit on the GPU at once (all must be resident)", ctas,
             resident);
  if (!m.uploaded) {
    m.dev_ops = DeviceBuffer<device::PersistentOp>(m.ops, s);
    m.done = DeviceBuffer<uint32_t>(m.ops.size() + 1);
    m.done.fill_bytes(0, s);
    m.uploaded = true;
  }
  const device::PersistentStepParams p{m.dev_ops.get(), int(m.ops.size()), m.done.get()};
  const unsigned grid = unsigned(ctas > 0 ? ctas : resident);
  kernel_for(m.ops)<<<grid, device::kPersistentThreads, m.smem, s>>>(p);
  FUTR_CUDA_CHECK(cudaGetLastError());
}

}  // namespace futr::cuda
