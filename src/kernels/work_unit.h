// Work units: the decode step's kernels as device functions an executor calls,
// one call per unit of work, so the launch executor (one kernel per op, one
// CTA per unit: gpu_engine/launch_executor.h) and a persistent executor (one
// grid sized to the SMs looping over the step's units) run the same code and
// produce the same bits.
//
// The contract of a body, for every decode kernel:
//
//   template <[Unit,] Deps>
//   __device__ void <op>_unit(const <Op>Params& p, unit, int units, <Op>Smem sm, [dynamic smem,] const Deps&
//   deps);
//
//   - unit: which piece of the op this call computes, of `units`. For the
//     row-wise ops an int in [0, units); for the ops with 2-D / 3-D work (the
//     GEMMs, the attention) its coordinates x(), y(), z() (BlockUnit,
//     LinearUnit below). The kernel's __global__ wrapper maps blockIdx to it
//     (the table below); a body never reads blockIdx or gridDim. A body's
//     result for a unit depends on (p, unit) and, where the table says so, on
//     `units` (a grid-stride loop), never on which CTA runs it or in which
//     order units run.
//     A non-template wrapper is `static` (internal linkage): each translation
//     unit that includes a body (the launchers', the persistent executor's)
//     has its own, and no two definitions meet at link time.
//   - the CTA shape: every body is written for the threads per CTA of the
//     table (threadIdx.x below it; blockDim.x equal to it).
//   - shared memory: the body takes it from its caller, never declares it.
//     <Op>Smem is the static part: a struct of the arrays (one array: as a
//     value) or a view of pointers to them, kBytes in all; where the table
//     says so, also a dynamic buffer whose bytes the launcher computes. The
//     wrapper declares the pieces as __shared__ variables, exactly what the
//     kernel declared before; a persistent kernel carves every op's pieces
//     from one dynamic allocation (the largest op's bytes), its dynamic
//     buffers 128-byte aligned (the W4A16 rings: sm90_w4a16_skinny.cuh).
//     NOTE: why views of separate arrays rather than one struct: with one
//     struct the shared addresses are offsets from one base and ptxas
//     allocated differently (sample top-k: 49 -> 40 registers + 16 bytes of
//     spills); separate symbols keep every kernel's code as it was.
//   - A body leaves no state in shared memory between units (each writes
//     what it reads first), but it does not barrier at its end: a persistent
//     caller runs __syncthreads() between two units of one CTA. A body may
//     return early: the whole CTA, or whole warps that have no work and
//     meet no barrier after (the LM head's last unit, the KV append's
//     spare warps).
//   - deps.wait(): called by every thread where the body first touches what
//     an earlier op writes (activations, the KV cache, the row map); what it
//     does before (weight loads, gains, index math) needs nothing from
//     earlier ops. deps.release(): where the op stops holding back the next
//     one (at the body's start; sample top-k: right after its wait). Under
//     the launch executor Deps is PdlDeps (griddepcontrol, ptx/pdl.cuh),
//     both at the places the kernels always had them; a persistent executor
//     passes its dependency-counter wait and a release that does nothing.
//     NOTE: the release stays inside the body, not in the wrapper, because
//     moving it changed the instruction schedule of the W4A16 kernels
//     (same registers, 90% of the instructions reordered).
//   - NOTE: read-only-path loads. The GEMMs and the LM head read their
//     activations (x) and the attention its BF16 KV cache with
//     ld.global.nc (ptx/ld.cuh ld_cached_*, attn::ld_nc): the non-coherent
//     path is valid for data written by an earlier kernel, not by another
//     CTA of the same grid. A persistent kernel in which the producing op
//     runs in the same grid must read those through coherent loads (the
//     bodies' load policy, a later step); weights (ld_stream_*) are never
//     written and stay as they are.
//   - in-op arrivals: the split-K GEMMs and the split attention keep their own
//     last-arrival counters (p.counters): the last unit of a group to arrive
//     reduces and re-arms the counter, whatever the order the units ran in.
//
// The decode kernels: threads per CTA; static smem per unit (Smem::kBytes or
// sizeof); dynamic smem; the wrapper's unit; what one unit reads -> writes
// (where a persistent executor's dependency counters go, per op or per tile).
//
//   rmsnorm_unit            256   32 B     -   row = blockIdx.x
//     x[row] (or embd[tok[row]]), add[row], gain -> x[row], out[row]
//   rope_unit               256   -        -   row = blockIdx.x
//     q and k heads of x[row] in place; pos[row], the tables
//   swiglu_unit             256   -        -   blockIdx.x of gridDim.x (units)
//     elements unit * 256 + i * units * 256 + thread: gu[r] (gate|up) -> out[r];
//     every unit touches every row: a consumer waits for the whole op
//   logits_reduce_unit      1024  644 B    -   row = blockIdx.x
//     logits[row], targets[row] -> out[row]
//   sample_topk_unit        512   35960 B  -   row = blockIdx.x
//     logits[row], rows[row] -> out[row]
//   kv_append_unit<D>       64 per KV head  128 D B  -   row = blockIdx.x
//     q|k|v[row], the row map -> the cache at the row's slot (BF16 and the
//     mirror), q[row] rotated in place, *nonfinite
//   decode_attention_unit<D, KIND>  128  ~18.8-43.4 KB  -   (x, y, z) = blockIdx:
//     chunk group x < grid_x = ceil(splits / chunks_per_cta), KV head y,
//     sequence z; linear x + grid_x * (y + kv_heads * z)
//     q[z], the cache of z's slots -> out[z][y's G heads] (splits > 1: o_part,
//     ml_part, and the last unit of (z, y) to arrive merges them into out)
//   w4a16_gemv_unit<G, TM, U>   256   36 B  x slice + scales  (x, y) = blockIdx:
//   w4a16_skinny_unit<WF, MT, TM>  256  4 B  cp.async rings   column group x
//     (8 TM tiles of 16 channels) < ceil(N / (128 TM)), K split y < splits;
//     linear x + cols * y
//     W[the group's tiles][y's K slice], x[rows][K slice] (gemv fused inputs:
//     the gate|up row, or the residual row x, add and gain: all of K) ->
//     y[rows][the group's channels] (splits > 1: ws, and the last split of x
//     to arrive reduces into y; gemv with the fused norm: unit (0, 0) also
//     writes nx_out)
//   w4a16_gemv_ring_unit<G>  256 + a producer warp  as the gemv, its weights out of a
//     shared-memory ring the producer fills (sm90_w4a16_gemv_ring.cuh; persistent only)
//   lm_head_unit<WF, MT, U> 256   -        -   blockIdx.x: vocabulary tiles 8 unit .. 8 unit + 7 (16 rows
//   each)
//     W[128 rows of the unit], x[all rows][all of K] -> out[rows][the unit's 128 columns]
//
// Not work units (the prefill path's, launched once per chunk):
// sm90_gather_rows, sm90_kv_append_rows, the FP8 GEMM and prefill attention.
//
// Block shapes: 256 threads is the common shape (the norms, RoPE, SwiGLU,
// both GEMMs and the LM head). The others differ for reasons of their own:
//   - decode attention: 128 (4 warps). Its registers (86-128 per thread: a
//     warp's K/V step in registers) and 19-43 KB of shared memory per CTA
//     make 4 warps the shape that keeps several CTAs per SM; a 256-thread
//     caller would run it on warps 0..3 (its barriers are __syncthreads:
//     such a caller needs named barriers, a later step).
//   - logits reduce: 1024 (one CTA reads a row of up to 128k floats at one
//     SM's bandwidth; fewer threads read it slower).
//   - sample top-k: 512 (the block radix sort holds 2 x threads candidates:
//     kSampleMaxTopK = 1024).
//   - kv_append: 64 per KV head (a warp pair per head, K and V: the Hadamard
//     rotation and the INT4 quantization of a head vector per warp).
// Registers: each kernel's own (ptxas -v); a persistent kernel runs at the
// largest of the ops it holds, the GEMMs' 56-128.
#pragma once

#include "kernels/ptx/fence.cuh"
#include "kernels/ptx/ld.cuh"
#include "kernels/ptx/pdl.cuh"
#include "kernels/ptx/sync.cuh"

namespace futr::device {

// The launch executor's dependencies: the kernel was launched as a
// programmatic dependent (or not: then both instructions return at once).
//   release(): the next op may start (griddepcontrol.launch_dependents);
//   wait(): what earlier ops wrote is visible (griddepcontrol.wait).
//   act_v4(p): 16 bytes of an activation an earlier op wrote (the read-only
//   path: an earlier kernel wrote it).
struct PdlDeps {
  __device__ __forceinline__ void release() const { ptx::griddep_launch_dependents(); }
  __device__ __forceinline__ void wait() const { ptx::griddep_wait(); }
  __device__ __forceinline__ uint4 act_v4(const void* p) const { return ptx::ld_cached_v4(p); }
};

// The barrier a body meets where its threads exchange data through shared
// memory: every thread of the CTA (CtaBarrier: the launch executor's kernels
// and the persistent kernel without a producer warp), or the 256 threads of
// the body only (ConsumerBarrier, named barrier 1: a persistent kernel whose
// producer warp streams weights and never meets the body's barriers).
//   threads(): the threads running the body (the stride of its loops).
struct CtaBarrier {
  __device__ __forceinline__ static void sync() { __syncthreads(); }
  __device__ __forceinline__ static int threads() { return int(blockDim.x); }
};
struct ConsumerBarrier {
  static constexpr int kThreads = 256;
  __device__ __forceinline__ static void sync() { ptx::bar_sync(1, kThreads); }
  __device__ __forceinline__ static int threads() { return kThreads; }
};

// A persistent executor's dependencies: the op waits until the op before it
// has counted `need` finished units on *counter (each unit's CTA adds one with
// release semantics after its last write: ptx/sync.cuh); a chain of such
// waits orders every op after all earlier ones (release / acquire is
// transitive), as the launch executor's PDL does.
//   release(): nothing (the executor counts a unit when its CTA has finished it);
//   wait(): thread 0 spins on the counter with acquire semantics, then a
//     barrier (Bar) orders every thread's later loads after it. Only for bodies in
//     which every thread of the body calls wait() once (the RMSNorm, the SwiGLU
//     and the W4A16 GEMMs; not the KV append, whose spare warps return early);
//   act_v4(p): a coherent load (the producer ran in the same grid).
//   ready: where thread 0 stores the time its wait ended (globaltimer ns), or null.
template <class Bar = CtaBarrier>
struct CtaCounterDeps {
  const uint32_t* counter = nullptr;
  uint32_t need = 0;
  uint64_t* ready = nullptr;
  __device__ __forceinline__ void release() const {}
  __device__ __forceinline__ void wait() const {
    if (counter) {
      if (threadIdx.x == 0) {
        while (ptx::ld_acquire_gpu(counter) < need) ptx::nanosleep(32);
        __threadfence();
      }
      Bar::sync();
    }
    if (ready && threadIdx.x == 0) *ready = ptx::globaltimer();
  }
  __device__ __forceinline__ uint4 act_v4(const void* p) const { return ptx::ld_coherent_v4(p); }
};

// A persistent executor's record of one unit (globaltimer ns, 0 where a body
// does not record it): its start, the end of its dependency wait, the end of
// its sums (before the split-K store), its end; for a unit whose weights a
// producer warp streams, that warp's first and last copy of them.
struct PersistentUnitTimes {
  uint64_t start, ready, computed, end, produce_first, produce_last;
};

// The coordinates of a unit of an op whose units form a grid (x fastest:
// linear index u = x + nx * (y + ny * z)), the unit argument of the bodies
// with 2-D and 3-D work (the GEMMs, the attention).
//   BlockUnit: the launch executor's, the CTA's blockIdx, read where used.
//     NOTE: blockIdx lives in special registers the compiler re-reads
//     instead of holding them across the main loop; a linear index
//     decomposed at the start must be held: +18 registers in the INT4
//     attention (128 -> 146 per thread, 4 -> 3 CTAs per SM).
//   LinearUnit: a persistent executor's, decomposed from the linear index once.
// Unsigned, as blockIdx: the bodies' index arithmetic is the kernels' as it was.
struct BlockUnit {
  __device__ __forceinline__ unsigned nx() const { return gridDim.x; }  // the x extent
  __device__ __forceinline__ unsigned x() const { return blockIdx.x; }
  __device__ __forceinline__ unsigned y() const { return blockIdx.y; }
  __device__ __forceinline__ unsigned z() const { return blockIdx.z; }
};
struct LinearUnit {
  unsigned ux, uy, uz, unx;
  __device__ __forceinline__ LinearUnit(unsigned u, unsigned nx, unsigned ny)
      : ux(u % nx), uy(u / nx % ny), uz(u / nx / ny), unx(nx) {}
  __device__ __forceinline__ unsigned nx() const { return unx; }
  __device__ __forceinline__ unsigned x() const { return ux; }
  __device__ __forceinline__ unsigned y() const { return uy; }
  __device__ __forceinline__ unsigned z() const { return uz; }
};

}  // namespace futr::device
