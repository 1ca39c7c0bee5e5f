#include "launch/tensor_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000
#include <cuda_runtime.h>

#include <mutex>

#include "core/error.h"
#include "launch/check.h"

namespace futr::cuda {

namespace {
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::string why;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
      why = fmt::format("{} (query result {})", cudaGetErrorString(e), int(q));
      cudaGetLastError();
      return;
    }
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  FUTR_CHECK(fn != nullptr, "cuTensorMapEncodeTiled is not available from the driver: {}", why);
  return fn;
}
}  // namespace

CUtensorMap make_tensor_map_2d(const void* base, TmaElem elem, uint64_t rows, uint64_t cols,
                               uint64_t row_stride_bytes, uint32_t box_rows, uint32_t box_cols) {
  const uint32_t esize = elem == TmaElem::kU8 ? 1 : 2;
  FUTR_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "tensor map: base {} is not 16-byte aligned", base);
  FUTR_CHECK(row_stride_bytes % 16 == 0, "tensor map: row stride {} bytes is not a multiple of 16",
             row_stride_bytes);
  FUTR_CHECK(box_rows >= 1 && box_rows <= 256 && box_cols >= 1 && box_cols <= 256,
             "tensor map: box {}x{} outside 1..256", box_rows, box_cols);
  FUTR_CHECK(box_cols * esize == 128, "tensor map: a 128B-swizzled box row must be 128 bytes, got {}",
             box_cols * esize);
  FUTR_CHECK(rows >= 1 && cols >= 1, "tensor map: empty matrix {}x{}", rows, cols);
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_fn()(
      &map, elem == TmaElem::kU8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FUTR_CHECK(r == CUDA_SUCCESS,
             "cuTensorMapEncodeTiled failed ({}) for a {}x{} matrix, stride {} B, box {}x{}", int(r), rows,
             cols, row_stride_bytes, box_rows, box_cols);
  return map;
}

}  // namespace futr::cuda
