// CUDA kernels of FleS's pixel passes, registered for the pass operators
// fles_op.cpp defines (TORCH_LIBRARY_IMPL(mmact, CUDA)): mmact::fles_stats,
// fles_apply, fles_gate_backward, fles_indicator_backward and
// fles_input_backward (CUDA only: both backward terms at once). The C++
// node of mmact::fles (fles_op.cpp) calls them through the dispatcher
// around the scale MLP's ATen calls; built by mmact.ops.cuda_build into the
// same library as apa_cuda.cu.
//
// The element math is fles_math.h's, the C kernels' own. Maps are
// (N, C, H, W) in NCHW or channels-last storage (others are made
// contiguous first), or (planes, H, W) contiguous; windows kh x kw from
// the top-left corner, cut at the border (no overlap); per-window values
// (N, C, nh, nw) float32, contiguous. One block of 256 threads takes one
// window of a tile of channels: 8 channels x 32 pixel lanes (NCHW: a warp
// walks one channel's window, whose rows are contiguous) or 32 channels x
// 8 pixel lanes (channels last: a warp reads 32 adjacent channels), so a
// thread reads its window's scales once and a window's sums are each
// lane's, then a fixed-order sum over the lanes in shared memory:
// deterministic, no atomics. Window sums accumulate in double, as fles.c
// sums a window of one band (a 200x304 global window is 1,900 values per
// lane in NCHW, 7,600 channels-last). Half precision is read and written in
// its dtype and computed in float32; its grad_x is rounded once
// (input_backward_kernel).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_tensors.h"
#include "fles_math.h"

namespace {

constexpr int kThreads = 256;

// The window grid of a map: N samples of C channels (a (planes, H, W) map
// is one sample of `planes` channels), windows kh x kw, nh x nw of them.
struct Geo {
  int64_t N, C, H, W, kh, kw, nh, nw, ctiles;
};

// A thread's window and channel, and its pixel lane.
struct Place {
  int64_t n, c, win;  // win: the (n, c, gr, gc) index of the window values
  int64_t i0, j0, rows, cols;
  int lane, channel;  // within the block
  bool valid;
};

// Channels per block: 8 (NCHW) or 32 (channels last); pixel lanes: the
// rest of the 256 threads.
template <bool CL>
__host__ __device__ constexpr int channels_per_block() {
  return CL ? 32 : 8;
}

template <bool CL>
__device__ __forceinline__ Place place(const Geo& g) {
  constexpr int NC = channels_per_block<CL>();
  Place p;
  const int t = threadIdx.x;
  p.channel = CL ? t % NC : t / (kThreads / NC);
  p.lane = CL ? t / NC : t % (kThreads / NC);
  int64_t b = blockIdx.x;
  const int64_t ct = b % g.ctiles;
  b /= g.ctiles;
  const int64_t gc = b % g.nw;
  b /= g.nw;
  const int64_t gr = b % g.nh;
  p.n = b / g.nh;
  p.c = ct * NC + p.channel;
  p.valid = p.c < g.C;
  p.win = ((p.n * g.C + p.c) * g.nh + gr) * g.nw + gc;
  p.i0 = gr * g.kh;
  p.j0 = gc * g.kw;
  p.rows = min(g.kh, g.H - p.i0);
  p.cols = min(g.kw, g.W - p.j0);
  return p;
}

// Calls f(offset) for each of the thread's pixels of its window: lane,
// lane + NP, ... in row-major order within the window, walked as (row,
// column) counters (no division per pixel).
template <bool CL, typename F>
__device__ __forceinline__ void for_pixels(const Geo& g, const Place& p,
                                           F&& f) {
  constexpr int NP = kThreads / channels_per_block<CL>();
  const int rows = static_cast<int>(p.rows), cols = static_cast<int>(p.cols);
  const int di = NP / cols, dj = NP % cols;
  int i = p.lane / cols, j = p.lane % cols;
  const int64_t base =
      CL ? ((p.n * g.H + p.i0) * g.W + p.j0) * g.C + p.c
         : ((p.n * g.C + p.c) * g.H + p.i0) * g.W + p.j0;
  const int64_t row_step = CL ? g.W * g.C : g.W, col_step = CL ? g.C : 1;
  while (i < rows) {
    f(base + i * row_step + j * col_step);
    i += di;
    j += dj;
    if (j >= cols) {
      j -= cols;
      ++i;
    }
  }
}

// The sum of v over the pixel lanes of each channel, in a fixed order;
// valid in the threads of lane 0. s: kThreads doubles of shared memory.
template <bool CL>
__device__ __forceinline__ double lane_sum(double v, double* s,
                                           const Place& p) {
  constexpr int NC = channels_per_block<CL>();
  constexpr int NP = kThreads / NC;
  __syncthreads();  // s may still be read by a previous sum
  s[p.lane * NC + p.channel] = v;
  __syncthreads();
  double total = 0.0;
  if (p.lane == 0) {
    for (int q = 0; q < NP; ++q) total += s[q * NC + p.channel];
  }
  return total;
}

template <typename T>
__device__ __forceinline__ float load(const T* t, int64_t i) {
  return static_cast<float>(t[i]);
}

// Indicator (sum of fles_ind_term over the window / divisor) and divisor.
template <typename T, bool CL>
__global__ void __launch_bounds__(kThreads)
    stats_kernel(const T* __restrict__ x, float* __restrict__ ind,
                 float* __restrict__ div, int64_t mode, Geo g) {
  __shared__ double s[kThreads];
  const Place p = place<CL>(g);
  double sum = 0.0, count = 0.0;
  if (p.valid) {
    for_pixels<CL>(g, p, [&](int64_t i) {
      const float v = load(x, i);
      sum += fles_ind_term(mode, v);
      count += fles_ind_count(v);
    });
  }
  sum = lane_sum<CL>(sum, s, p);
  count = lane_sum<CL>(count, s, p);
  if (p.lane == 0 && p.valid) {
    const float d = fles_divisor(static_cast<float>(
        mode == 0 ? count : static_cast<double>(p.rows * p.cols)));
    div[p.win] = d;
    ind[p.win] = static_cast<float>(sum * (1.0f / d));
  }
}

template <int GATE, typename T, bool CL>
__global__ void __launch_bounds__(kThreads)
    apply_kernel(const T* __restrict__ x, T* __restrict__ y,
                 const float* __restrict__ kv, const float* __restrict__ ko,
                 float cst, Geo g) {
  const Place p = place<CL>(g);
  if (!p.valid) return;
  const float sv = kv[p.win], so = cst * ko[p.win];
  for_pixels<CL>(g, p, [&](int64_t i) {
    const float xv = load(x, i);
    y[i] = static_cast<T>(fles_output(sv, fles_rho(GATE, so * xv).r, xv));
  });
}

// grad_x with the scales held fixed, and the window sums of the scales'
// gradients: g_ve = sum g x rho(u), g_ho = cst k_ve sum g x^2 rho'(u).
template <int GATE, typename T, bool CL>
__global__ void __launch_bounds__(kThreads)
    gate_backward_kernel(const T* __restrict__ x, const T* __restrict__ go,
                         T* __restrict__ gx, const float* __restrict__ kv,
                         const float* __restrict__ ko, float cst,
                         float* __restrict__ g_ve, float* __restrict__ g_ho,
                         Geo g) {
  __shared__ double s[kThreads];
  const Place p = place<CL>(g);
  double sa = 0.0, sb = 0.0;
  float sv = 0.0f;
  if (p.valid) {
    sv = kv[p.win];
    const float so = cst * ko[p.win];
    for_pixels<CL>(g, p, [&](int64_t i) {
      const float xv = load(x, i), gv = load(go, i);
      const float u = so * xv;
      const FlesRho q = fles_rho(GATE, u);
      gx[i] = static_cast<T>(fles_gate_grad(gv, sv, u, q));
      const FlesSums t = fles_scale_terms(gv, xv, q);
      sa += t.sa;
      sb += t.sb;
    });
  }
  sa = lane_sum<CL>(sa, s, p);
  sb = lane_sum<CL>(sb, s, p);
  if (p.lane == 0 && p.valid) {
    g_ve[p.win] = static_cast<float>(sa);
    g_ho[p.win] = static_cast<float>(sb * (cst * sv));
  }
}

// grad_x += fles_ind_grad(x, g_ind / div) of the pixel's window, in place.
template <typename T, bool CL>
__global__ void __launch_bounds__(kThreads)
    indicator_backward_kernel(const T* __restrict__ x, T* __restrict__ gx,
                              const float* __restrict__ gind,
                              const float* __restrict__ div, int64_t mode,
                              Geo g) {
  const Place p = place<CL>(g);
  if (!p.valid) return;
  const float q = gind[p.win] / div[p.win];
  for_pixels<CL>(g, p, [&](int64_t i) {
    gx[i] = static_cast<T>(load(gx, i) + fles_ind_grad(mode, load(x, i), q));
  });
}

// grad_x whole: the gate term (gate_backward_kernel's) plus the indicator
// term of the pixel's window, added in float32 and stored once. The node
// takes it for half maps, whose grad_x would otherwise be rounded to the
// half type by the gate pass and again after the indicator's addition.
template <int GATE, typename T, bool CL>
__global__ void __launch_bounds__(kThreads)
    input_backward_kernel(const T* __restrict__ x, const T* __restrict__ go,
                          T* __restrict__ gx, const float* __restrict__ kv,
                          const float* __restrict__ ko, float cst,
                          const float* __restrict__ gind,
                          const float* __restrict__ div, int64_t mode,
                          Geo g) {
  const Place p = place<CL>(g);
  if (!p.valid) return;
  const float sv = kv[p.win], so = cst * ko[p.win];
  const float q = gind[p.win] / div[p.win];
  for_pixels<CL>(g, p, [&](int64_t i) {
    const float xv = load(x, i);
    const float u = so * xv;
    const float gate = fles_gate_grad(load(go, i), sv, u, fles_rho(GATE, u));
    gx[i] = static_cast<T>(gate + fles_ind_grad(mode, xv, q));
  });
}

// The gates by name (mmact.ops.fles.gates): the kernels' gate code and the
// constant c of rho(z) = base(c z).
struct GateCode {
  const char* name;
  int code;
  float cst;
};
const GateCode kGates[] = {{"sigmoid", FLES_SIGMOID, 1.0f},
                           {"tanh_gate", FLES_SIGMOID, 2.0f},
                           {"erf", FLES_ERF, 1.0f},
                           {"tanh_softplus", FLES_MISH, 1.0f}};

const GateCode& find_gate(c10::string_view name) {
  for (const GateCode& g : kGates) {
    if (name == g.name) return g;
  }
  TORCH_CHECK_VALUE(false, "mmact::fles on CUDA: unknown gate '",
                    std::string(name),
                    "'; choose one of sigmoid, tanh_gate, erf, "
                    "tanh_softplus");
}

int64_t find_mode(c10::string_view name) {
  if (name == "positive") return 0;
  if (name == "mean") return 1;
  TORCH_CHECK_VALUE(false, "mmact::fles on CUDA: indicator mode '",
                    std::string(name),
                    "' has no kernel; choose positive or mean (others run "
                    "in mmact.ops.fles.fles_fused)");
}

int64_t blocks(const Geo& g) { return g.N * g.nh * g.nw * g.ctiles; }

// A map as the kernels read it: NCHW or channels-last storage (the
// layout the kernels walk), else a contiguous copy.
struct Map {
  at::Tensor x;
  Geo g;
  bool cl;
};

Map map_of(const at::Tensor& x_in, int64_t kh, int64_t kw, const char* op) {
  const at::ScalarType t = x_in.scalar_type();
  TORCH_CHECK_TYPE(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                   "mmact::", op, " on CUDA takes a float32 / float16 / ",
                   "bfloat16 map, got ", t);
  TORCH_CHECK(x_in.dim() == 3 || x_in.dim() == 4, "mmact::", op,
              " on CUDA takes an (N, C, H, W) or (planes, H, W) map (got ",
              x_in.sizes(), ")");
  const int64_t H = x_in.size(-2), W = x_in.size(-1);
  TORCH_CHECK_VALUE(0 < kh && kh <= H && 0 < kw && kw <= W, "mmact::", op,
                    ": window (", kh, ", ", kw,
                    ") must be positive and fit the ", H, "x", W, " map");
  Map m;
  m.cl = x_in.dim() == 4 && !x_in.is_contiguous() &&
         x_in.is_contiguous(at::MemoryFormat::ChannelsLast);
  // (planes, H, W): one sample of `planes` channels
  const int64_t N = x_in.dim() == 4 ? x_in.size(0) : 1;
  const int64_t C = x_in.dim() == 4 ? x_in.size(1) : x_in.size(0);
  const int64_t nc = m.cl ? channels_per_block<true>()
                          : channels_per_block<false>();
  m.g = Geo{N, C, H, W, kh, kw, (H + kh - 1) / kh, (W + kw - 1) / kw,
            (C + nc - 1) / nc};
  // a block per window of each channel tile, refused before any copy
  TORCH_CHECK(blocks(m.g) <= kMaxBlocks, "mmact::", op, " on CUDA takes ",
              "at most 2^31 - 1 windows x tiles of ", nc, " channels (got ",
              blocks(m.g), " for shape ", x_in.sizes(), " and window (", kh,
              ", ", kw, "))");
  m.x = m.cl ? x_in : x_in.contiguous();
  return m;
}

// The per-window values shape: x's leading dims, then (nh, nw).
at::Tensor window_values(const Map& m) {
  std::vector<int64_t> sizes(m.x.sizes().begin(), m.x.sizes().end() - 2);
  sizes.push_back(m.g.nh);
  sizes.push_back(m.g.nw);
  return at::empty(sizes, m.x.options().dtype(at::kFloat));
}

// A pass's per-window input: float32 values on the map's device, one per
// window of every plane.
at::Tensor window_input(const at::Tensor& t, const Map& m, const char* name,
                        const char* op) {
  const Geo& g = m.g;
  TORCH_CHECK(t.device() == m.x.device() && t.scalar_type() == at::kFloat &&
                  t.numel() == g.N * g.C * g.nh * g.nw,
              "mmact::", op, " on CUDA: ", name, " must hold float32 values ",
              "on ", m.x.device(), " for the (", g.N * g.C, ", ", g.nh, ", ",
              g.nw, ") windows (got ", t.scalar_type(), " ", t.sizes(),
              " on ", t.device(), ")");
  return t.contiguous();
}



#define FLES_LAYOUTS(CL_VALUE, ...)                                        \
  if (CL_VALUE) {                                                          \
    constexpr bool kCL = true;                                             \
    __VA_ARGS__;                                                           \
  } else {                                                                 \
    constexpr bool kCL = false;                                            \
    __VA_ARGS__;                                                           \
  }

#define FLES_GATE_CODES(CODE, ...)                                         \
  switch (CODE) {                                                          \
    case FLES_SIGMOID: {                                                   \
      constexpr int kGate = FLES_SIGMOID;                                  \
      __VA_ARGS__;                                                         \
      break;                                                               \
    }                                                                      \
    case FLES_ERF: {                                                       \
      constexpr int kGate = FLES_ERF;                                      \
      __VA_ARGS__;                                                         \
      break;                                                               \
    }                                                                      \
    default: {                                                             \
      constexpr int kGate = FLES_MISH;                                     \
      __VA_ARGS__;                                                         \
    }                                                                      \
  }

std::tuple<at::Tensor, at::Tensor> stats_cuda(const at::Tensor& x_in,
                                              int64_t kh, int64_t kw,
                                              c10::string_view mode) {
  const int64_t mode_index = find_mode(mode);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Map m = map_of(x_in, kh, kw, "fles_stats");
  at::Tensor ind = window_values(m), div = window_values(m);
  if (blocks(m.g) == 0) return {ind, div};
  const auto stream = c10::cuda::getCurrentCUDAStream();
  MMACT_DTYPES(m.x.scalar_type(), FLES_LAYOUTS(m.cl, {
    launch_kernel(stats_kernel<scalar_t, kCL>, blocks(m.g), kThreads,
                  stream, m.x.data_ptr<scalar_t>(), ind.data_ptr<float>(),
                  div.data_ptr<float>(), mode_index, m.g);
  }));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {ind, div};
}

at::Tensor apply_cuda(const at::Tensor& x_in, const at::Tensor& k_ve,
                      const at::Tensor& k_ho, int64_t kh, int64_t kw,
                      c10::string_view gate) {
  const GateCode& rho = find_gate(gate);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Map m = map_of(x_in, kh, kw, "fles_apply");
  const at::Tensor kv = window_input(k_ve, m, "k_ve", "fles_apply"),
                   ko = window_input(k_ho, m, "k_ho", "fles_apply");
  at::Tensor y = at::empty_like(m.x);
  if (blocks(m.g) == 0) return y;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  MMACT_DTYPES(m.x.scalar_type(), FLES_LAYOUTS(m.cl, FLES_GATE_CODES(
      rho.code, {
        launch_kernel(apply_kernel<kGate, scalar_t, kCL>, blocks(m.g),
                      kThreads, stream, m.x.data_ptr<scalar_t>(),
                      y.data_ptr<scalar_t>(), kv.data_ptr<float>(),
                      ko.data_ptr<float>(), rho.cst, m.g);
      })));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gate_backward_cuda(
    const at::Tensor& x_in, const at::Tensor& grad_out,
    const at::Tensor& k_ve, const at::Tensor& k_ho, int64_t kh, int64_t kw,
    c10::string_view gate) {
  const GateCode& rho = find_gate(gate);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Map m = map_of(x_in, kh, kw, "fles_gate_backward");
  TORCH_CHECK(grad_out.sizes() == x_in.sizes() &&
                  grad_out.device() == x_in.device(),
              "mmact::fles_gate_backward on CUDA takes a grad_out of x's ",
              "shape ", x_in.sizes(), " on ", x_in.device(), " (got ",
              grad_out.sizes(), " on ", grad_out.device(), ")");
  const at::Tensor go = laid_out_as(grad_out, m.x);
  const at::Tensor kv = window_input(k_ve, m, "k_ve", "fles_gate_backward"),
                   ko = window_input(k_ho, m, "k_ho", "fles_gate_backward");
  at::Tensor gx = at::empty_like(m.x);
  at::Tensor g_ve = window_values(m), g_ho = window_values(m);
  if (blocks(m.g) == 0) return {gx, g_ve, g_ho};
  const auto stream = c10::cuda::getCurrentCUDAStream();
  MMACT_DTYPES(m.x.scalar_type(), FLES_LAYOUTS(m.cl, FLES_GATE_CODES(
      rho.code, {
        launch_kernel(gate_backward_kernel<kGate, scalar_t, kCL>,
                      blocks(m.g), kThreads, stream, m.x.data_ptr<scalar_t>(),
                      go.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(),
                      kv.data_ptr<float>(), ko.data_ptr<float>(), rho.cst,
                      g_ve.data_ptr<float>(), g_ho.data_ptr<float>(), m.g);
      })));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {gx, g_ve, g_ho};
}

void indicator_backward_cuda(const at::Tensor& grad_x, const at::Tensor& x_in,
                             const at::Tensor& g_ind, const at::Tensor& div_in,
                             int64_t kh, int64_t kw, c10::string_view mode) {
  const int64_t mode_index = find_mode(mode);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Map m = map_of(x_in, kh, kw, "fles_indicator_backward");
  TORCH_CHECK(grad_x.sizes() == m.x.sizes() &&
                  grad_x.strides() == m.x.strides() &&
                  grad_x.scalar_type() == m.x.scalar_type() &&
                  grad_x.device() == m.x.device(),
              "mmact::fles_indicator_backward on CUDA adds into a grad_x of ",
              "x's shape, layout and dtype (", m.x.sizes(), " ",
              m.x.scalar_type(), ")");
  const at::Tensor q = window_input(g_ind.to(at::kFloat), m, "g_ind",
                                    "fles_indicator_backward"),
                   d = window_input(div_in, m, "div",
                                    "fles_indicator_backward");
  if (blocks(m.g) == 0) return;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  MMACT_DTYPES(m.x.scalar_type(), FLES_LAYOUTS(m.cl, {
    launch_kernel(indicator_backward_kernel<scalar_t, kCL>, blocks(m.g),
                  kThreads, stream, m.x.data_ptr<scalar_t>(),
                  grad_x.data_ptr<scalar_t>(), q.data_ptr<float>(),
                  d.data_ptr<float>(), mode_index, m.g);
  }));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor input_backward_cuda(const at::Tensor& x_in,
                               const at::Tensor& grad_out,
                               const at::Tensor& k_ve, const at::Tensor& k_ho,
                               const at::Tensor& g_ind,
                               const at::Tensor& div_in, int64_t kh,
                               int64_t kw, c10::string_view gate,
                               c10::string_view mode) {
  const GateCode& rho = find_gate(gate);
  const int64_t mode_index = find_mode(mode);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Map m = map_of(x_in, kh, kw, "fles_input_backward");
  TORCH_CHECK(grad_out.sizes() == x_in.sizes() &&
                  grad_out.device() == x_in.device(),
              "mmact::fles_input_backward on CUDA takes a grad_out of x's ",
              "shape ", x_in.sizes(), " on ", x_in.device(), " (got ",
              grad_out.sizes(), " on ", grad_out.device(), ")");
  const at::Tensor go = laid_out_as(grad_out, m.x);
  const char* op = "fles_input_backward";
  const at::Tensor kv = window_input(k_ve, m, "k_ve", op),
                   ko = window_input(k_ho, m, "k_ho", op),
                   q = window_input(g_ind.to(at::kFloat), m, "g_ind", op),
                   d = window_input(div_in, m, "div", op);
  at::Tensor gx = at::empty_like(m.x);
  if (blocks(m.g) == 0) return gx;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  MMACT_DTYPES(m.x.scalar_type(), FLES_LAYOUTS(m.cl, FLES_GATE_CODES(
      rho.code, {
        launch_kernel(input_backward_kernel<kGate, scalar_t, kCL>,
                      blocks(m.g), kThreads, stream, m.x.data_ptr<scalar_t>(),
                      go.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(),
                      kv.data_ptr<float>(), ko.data_ptr<float>(), rho.cst,
                      q.data_ptr<float>(), d.data_ptr<float>(), mode_index,
                      m.g);
      })));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return gx;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmact, CUDA, m) {
  m.impl("fles_stats", stats_cuda);
  m.impl("fles_apply", apply_cuda);
  m.impl("fles_gate_backward", gate_backward_cuda);
  m.impl("fles_indicator_backward", indicator_backward_cuda);
  m.impl("fles_input_backward", input_backward_cuda);
}
