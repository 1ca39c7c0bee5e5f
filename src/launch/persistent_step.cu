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
  PersistentWeights weights = PersistentWeights::kRegisters;
  int ring_ctas_per_sm = PersistentStep::kDefaultRingCtasPerSm;
  std::vector<device::PersistentOp> ops;
  DeviceBuffer<device::PersistentOp> dev_ops;
  DeviceBuffer<uint32_t> done;  // [ops + 1], zero between launches
  size_t smem = device::kPersistentSmallSmem + device::kPersistentOpSmem;
  size_t gemv_smem = 0;  // the largest gemv's x slice and scales
  int total_units = 0;
  bool record = false;
  DeviceBuffer<device::PersistentUnitTimes> times;  // [total_units] when recording
  bool uploaded = false;

  template <class P>
  void add(device::PersistentKind kind, const P& p, int units, int nx, int ny) {
    FUTR_CHECK(!uploaded, "persistent step: ops added after the first launch");
    device::PersistentOp op{};
    op.kind = kind;
    op.units = units;
    op.nx = nx;
    op.ny = ny;
    op.first_unit = total_units;
    total_units += units;
    std::memcpy(op.params, &p, sizeof(P));
    ops.push_back(op);
  }
};

PersistentStep::PersistentStep(PersistentWeights weights, int ring_ctas_per_sm)
    : impl_(std::make_unique<Impl>()) {
  impl_->weights = weights;
  if (ring_ctas_per_sm != 0) {
    FUTR_CHECK(std::ranges::find(device::kPersistentRingCtasPerSm, ring_ctas_per_sm) !=
                   std::end(device::kPersistentRingCtasPerSm),
               "persistent step: the ring kernel runs 1, 2, 3 or 4 CTAs per SM, not {}", ring_ctas_per_sm);
    impl_->ring_ctas_per_sm = ring_ctas_per_sm;
  }
}
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
  impl_->gemv_smem = std::max(impl_->gemv_smem, l.smem);
  const int nx = int(l.grid.x), ny = int(l.grid.y);
  impl_->add(a.group == 128 ? device::PersistentKind::kGemvG128 : device::PersistentKind::kGemvG64, l.p,
             nx * ny, nx, ny);
}

int PersistentStep::size() const { return int(impl_->ops.size()); }

static_assert(sizeof(PersistentStep::UnitTimes) == sizeof(device::PersistentUnitTimes),
              "the host's view of a unit's timestamps is the device's");

void PersistentStep::record_times() {
  FUTR_CHECK(!impl_->uploaded, "persistent step: timestamps are chosen before the first launch");
  impl_->record = true;
}

std::vector<std::vector<PersistentStep::UnitTimes>> PersistentStep::times(cudaStream_t s) const {
  const Impl& m = *impl_;
  FUTR_CHECK(m.record && m.uploaded, "persistent step: no timestamps recorded (record_times, then launch)");
  std::vector<device::PersistentUnitTimes> all(size_t(m.total_units));
  FUTR_CUDA_CHECK(
      cudaMemcpyAsync(all.data(), m.times.get(), all.size() * sizeof(all[0]), cudaMemcpyDeviceToHost, s));
  FUTR_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<std::vector<UnitTimes>> out(m.ops.size());
  for (size_t i = 0; i < m.ops.size(); ++i)
    for (int u = 0; u < m.ops[i].units; ++u) {
      const device::PersistentUnitTimes& t = all[size_t(m.ops[i].first_unit + u)];
      out[i].push_back({t.start, t.ready, t.computed, t.end, t.produce_first, t.produce_last});
    }
  return out;
}

namespace {
bool gemv_only(const std::vector<device::PersistentOp>& ops) {
  return std::all_of(ops.begin(), ops.end(), [](const device::PersistentOp& op) {
    return op.kind == device::PersistentKind::kGemvG128 || op.kind == device::PersistentKind::kGemvG64;
  });
}

// The ring kernel's shared memory: the fixed part, the x slice, then as many
// stages as fit one CTA per SM.
struct RingLayout {
  uint32_t offset = 0;
  int stages = 0;
  size_t smem = 0;
};
// The SM's shared memory (228 KB on Hopper) is shared by ctas_per_sm CTAs, each
// with 1 KB the hardware reserves.
constexpr size_t kSmemPerSm = 228 * 1024, kSmemReservedPerCta = 1024;
RingLayout ring_layout(size_t gemv_smem, int ctas_per_sm) {
  RingLayout r;
  r.offset = uint32_t((device::kPersistentRingFixedSmem + gemv_smem + 127) / 128 * 128);
  const size_t max_smem =
      std::min(size_t(require_device().smem_optin), kSmemPerSm / size_t(ctas_per_sm) - kSmemReservedPerCta);
  r.stages = int(std::min<size_t>(device::kPersistentRingMaxStages,
                                  max_smem > r.offset ? (max_smem - r.offset) / device::kRingStageBytes : 0));
  FUTR_CHECK(r.stages >= 2, "persistent step: the gemv's x slice ({} bytes) leaves no room for a weight ring",
             gemv_smem);
  r.smem = r.offset + size_t(r.stages) * device::kRingStageBytes;
  return r;
}

using Kernel = void (*)(device::PersistentStepParams);

Kernel ring_kernel(int ctas_per_sm) {
  switch (ctas_per_sm) {
    case 1: return device::sm90_persistent_ring_kernel<1>;
    case 2: return device::sm90_persistent_ring_kernel<2>;
    case 3: return device::sm90_persistent_ring_kernel<3>;
    default: return device::sm90_persistent_ring_kernel<4>;
  }
}
}  // namespace

bool PersistentStep::ring() const {
  return impl_->weights == PersistentWeights::kRing && gemv_only(impl_->ops);
}

int PersistentStep::ring_stages() const {
  return ring() ? ring_layout(impl_->gemv_smem, impl_->ring_ctas_per_sm).stages : 0;
}

int PersistentStep::resident_ctas() const {
  if (ring()) {  // as many CTAs per SM as the kernel is compiled for, checked by the occupancy
    const RingLayout r = ring_layout(impl_->gemv_smem, impl_->ring_ctas_per_sm);
    const Kernel kernel = ring_kernel(impl_->ring_ctas_per_sm);
    FUTR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(r.smem)));
    int per_sm = 0;
    FUTR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel,
                                                                  device::kPersistentRingThreads, r.smem));
    FUTR_CHECK(per_sm >= impl_->ring_ctas_per_sm, "persistent step: {} ring CTAs per SM do not fit ({} do)",
               impl_->ring_ctas_per_sm, per_sm);
    return impl_->ring_ctas_per_sm * require_device().sm_count;
  }
  // The register kernel: the gemv-only instance (four CTAs per SM) where it can.
  const Kernel kernel = gemv_only(impl_->ops) ? device::sm90_persistent_step_kernel<true>
                                              : device::sm90_persistent_step_kernel<false>;
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
    if (m.record) {
      m.times = DeviceBuffer<device::PersistentUnitTimes>(size_t(m.total_units));
      m.times.fill_bytes(0, s);
    }
    m.uploaded = true;
  }
  device::PersistentStepParams p{m.dev_ops.get(), int(m.ops.size()), m.done.get()};
  p.times = m.record ? m.times.get() : nullptr;
  const unsigned grid = unsigned(ctas > 0 ? ctas : resident);
  if (ring()) {
    const RingLayout r = ring_layout(m.gemv_smem, m.ring_ctas_per_sm);
    p.ring_offset = r.offset;
    p.ring_stages = r.stages;
    ring_kernel(m.ring_ctas_per_sm)<<<grid, device::kPersistentRingThreads, r.smem, s>>>(p);
  } else {
    const Kernel kernel = gemv_only(m.ops) ? device::sm90_persistent_step_kernel<true>
                                           : device::sm90_persistent_step_kernel<false>;
    kernel<<<grid, device::kPersistentThreads, m.smem, s>>>(p);
  }
  FUTR_CUDA_CHECK(cudaGetLastError());
}

}  // namespace futr::cuda
