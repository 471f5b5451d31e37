// Stand-in for c10's CUDAStream.h in the CPU simulation of the CUDA kernels
// (cuda_sim.h): one stream, on which launches run at once.
#pragma once
#include "cuda_sim.h"

namespace c10 {
namespace cuda {

struct CUDAStream {
  operator cudaStream_t() const { return nullptr; }
};

inline CUDAStream getCurrentCUDAStream() { return {}; }

}  // namespace cuda
}  // namespace c10
