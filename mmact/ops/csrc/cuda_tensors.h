// What the CUDA sources (apa_cuda.cu, fles_cuda.cu) share on the host side:
// the dtype switch of their kernels' launches, and bringing a tensor to
// another's layout.
#ifndef MMACT_CUDA_TENSORS_H
#define MMACT_CUDA_TENSORS_H
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

// Runs the statements with scalar_t the element type of DTYPE: float32,
// float16 or bfloat16 (the callers have refused every other dtype).
#define MMACT_DTYPES(DTYPE, ...)                                           \
  switch (DTYPE) {                                                         \
    case at::kFloat: {                                                     \
      using scalar_t = float;                                              \
      __VA_ARGS__;                                                         \
      break;                                                               \
    }                                                                      \
    case at::kHalf: {                                                      \
      using scalar_t = c10::Half;                                          \
      __VA_ARGS__;                                                         \
      break;                                                               \
    }                                                                      \
    default: {                                                             \
      using scalar_t = c10::BFloat16;                                      \
      __VA_ARGS__;                                                         \
    }                                                                      \
  }

// t laid out as like (same strides and dtype), copied where it is not.
static inline at::Tensor laid_out_as(const at::Tensor& t,
                                     const at::Tensor& like) {
  if (t.strides() == like.strides() && t.scalar_type() == like.scalar_type())
    return t;
  return at::empty_like(like).copy_(t);
}

#endif
