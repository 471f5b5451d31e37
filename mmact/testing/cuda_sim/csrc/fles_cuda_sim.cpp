// fles_cuda.cu for the host compiler: its kernels on CPU tensors, as
// mmact_cuda_sim::fles_stats and the other pass operators (cuda_sim.h).
#include "cuda_sim.h"
// cuda_sim.h first
#include "fles_cuda.cu"
