// The CPU simulation of mmact's CUDA kernels (mmact.testing.cuda_sim): what
// the host compiler needs to compile the unchanged CUDA sources
// (mmact/ops/csrc/apa_cuda.cu, fles_cuda.cu, through apa_cuda_sim.cpp and
// fles_cuda_sim.cpp, which include this first) and to run their kernels on
// CPU tensors.
//
// A launch (launch_kernel of cuda_tensors.h) runs the grid's blocks one
// after another on the calling thread, in a permuted order; a block's
// threads are fibers (cuda_sim.cpp) that switch only at __syncthreads,
// each time in a new permuted order, and every thread must reach the same
// __syncthreads (or all return) before any goes on: a divergent barrier is
// an error, not a hang. In-order execution would hide a missing barrier
// (a sum read before all its terms are written still adds up when the
// writers ran first). __shared__ memory is one copy per OS thread (which
// runs one block at a time); it is not cleared between blocks, so reading
// shared memory no thread wrote is not detected (compute-sanitizer's
// initcheck on a GPU sees it). The element math takes the GPU's formulas
// (MMACT_CUDA_SIM selects approx.h's MMACT_GPU_MATH), with the host's
// exp2f. The kernels register (TORCH_LIBRARY_IMPL(mmact, CUDA) in the .cu
// files) under the test namespace mmact_cuda_sim for CPU tensors, whose
// schemas cuda_sim.cpp defines.
#ifndef MMACT_CUDA_SIM_H
#define MMACT_CUDA_SIM_H
#define MMACT_CUDA_SIM 1

#include <c10/core/Device.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

// CUDA's qualifiers, as the host compiler reads them.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

typedef struct CUstream_st* cudaStream_t;

namespace mmact_sim {

struct Dim3 {
  unsigned int x, y, z;
};

// The running simulated thread's indices (CUDA's threadIdx, blockIdx).
extern thread_local Dim3 thread_idx, block_idx;

// Parks the running thread at the barrier of file:line until every thread
// of its block is there.
void sync_threads(const char* file, int line);

// Runs `blocks` blocks of `threads` threads, each calling thread(call).
void run_grid(int64_t blocks, int threads, void (*thread)(void*),
              void* call);

// The simulated GPU's multiprocessors (what launch plans read).
int multiprocessors(c10::DeviceIndex device);

// A launch: the arguments converted to the kernel's parameters once, each
// thread calling the kernel with copies of them, as a GPU passes them.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), int64_t blocks, int threads,
            A&&... args) {
  const std::tuple<P...> params(std::forward<A>(args)...);
  auto call = [&] { std::apply(kernel, params); };
  run_grid(
      blocks, threads,
      [](void* f) { (*static_cast<decltype(call)*>(f))(); }, &call);
}

}  // namespace mmact_sim

#define threadIdx (::mmact_sim::thread_idx)
#define blockIdx (::mmact_sim::block_idx)
#define __syncthreads() ::mmact_sim::sync_threads(__FILE__, __LINE__)

// CUDA's int64 min of device code.
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

// The kernels' registrations go to the test namespace, for CPU tensors.
#undef TORCH_LIBRARY_IMPL
#define TORCH_LIBRARY_IMPL(ns, k, m) \
  _TORCH_LIBRARY_IMPL(mmact_cuda_sim, CPU, m, C10_UID)

#endif
