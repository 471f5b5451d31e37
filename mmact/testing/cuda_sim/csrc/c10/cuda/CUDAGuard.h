// Stand-in for c10's CUDAGuard.h in the CPU simulation of the CUDA kernels
// (cuda_sim.h): one simulated device, nothing to switch.
#pragma once
#include <c10/core/Device.h>

#include "cuda_sim.h"

namespace c10 {
namespace cuda {

struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
};

}  // namespace cuda
}  // namespace c10
