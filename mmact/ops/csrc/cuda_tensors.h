// What the CUDA sources (apa_cuda.cu, fles_cuda.cu) share on the host side:
// the dtype switch of their kernels' launches, the launch itself, a GPU's
// multiprocessors, and bringing a tensor to another's layout.
#ifndef MMACT_CUDA_TENSORS_H
#define MMACT_CUDA_TENSORS_H
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <atomic>
#include <cstdint>
#include <utility>

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

// The most blocks a launch takes (a grid's x dimension).
constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;

// Runs kernel on `blocks` blocks of `threads` threads on stream, args
// converted to its parameters. One template instead of `<<<>>>` at each
// call site, so that the host compiler takes the call sites too: the CPU
// simulation of the kernels (mmact/testing/cuda_sim, MMACT_CUDA_SIM) runs
// each block's threads as fibers there.
template <typename... P, typename... A>
void launch_kernel(void (*kernel)(P...), int64_t blocks, int threads,
                   cudaStream_t stream, A&&... args) {
  TORCH_CHECK(0 < blocks && blocks <= kMaxBlocks,
              "mmact's CUDA kernels launch 1 to 2^31 - 1 blocks (got ",
              blocks, ")");
#ifdef MMACT_CUDA_SIM
  mmact_sim::launch(kernel, blocks, threads, std::forward<A>(args)...);
#else
  kernel<<<static_cast<unsigned int>(blocks), threads, 0, stream>>>(
      std::forward<A>(args)...);
#endif
}

#ifdef MMACT_CUDA_SIM
using mmact_sim::multiprocessors;  // the count the simulation's tests set
#else
// The multiprocessors of GPU `device` (a launch plan aims at one wave of
// blocks), asked of the runtime once per device. Atomic: threads asking
// at once each store the same count, a race on nothing.
inline int multiprocessors(c10::DeviceIndex device) {
  static std::atomic<int> counts[C10_COMPILE_TIME_MAX_GPUS];
  TORCH_CHECK(0 <= device && device < C10_COMPILE_TIME_MAX_GPUS,
              "mmact's CUDA kernels: no GPU ", int{device});
  int sms = counts[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(
        &sms, cudaDevAttrMultiProcessorCount, device));
    counts[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}
#endif

// t laid out as like (same strides and dtype), copied where it is not.
static inline at::Tensor laid_out_as(const at::Tensor& t,
                                     const at::Tensor& like) {
  if (t.strides() == like.strides() && t.scalar_type() == like.scalar_type())
    return t;
  return at::empty_like(like).copy_(t);
}

#endif
