// apa_cuda.cu for the host compiler: its kernels on CPU tensors, as
// mmact_cuda_sim::apa, aglu and their backward (cuda_sim.h).
#include "cuda_sim.h"
// cuda_sim.h first
#include "apa_cuda.cu"
