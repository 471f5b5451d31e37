// CUDA kernels of mmact::apa / aglu, their backward and the backward at a
// rebuilt input, registered for the operators apa_op.cpp defines
// (TORCH_LIBRARY_IMPL(mmact, CUDA)); built by mmact.ops.cuda_build into a
// library of its own, which the autograd node and the Python entries of
// the CPU extension reach through the dispatcher.
//
// The element math is apa_math.h's, the C kernels' own. A tensor is read
// in storage order (any dense layout: NCHW, channels-last, NLC; others are
// made contiguous) as a row-major (R, Q) matrix whose rows (axis 0) or
// columns (axis 1, channels last) follow the channels, in tiles of 1024
// values, 4 per thread of a 256-thread block. A block walks several tiles
// in the direction in which its threads' channels stay, so each thread
// computes its channel constants once. Backward: grad_x, plus per-block
// partial parameter sums (each thread's, then a fixed-order tree in shared
// memory), then a second kernel that adds the partials of each channel in
// a fixed order: deterministic, no atomics. Half precision is read and
// written in its dtype and computed in float32.
#include <ATen/core/Tensor.h>
#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <ATen/ops/add.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "apa_checks.h"
#include "cuda_tensors.h"
#include "apa_math.h"

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 4;
constexpr int kTile = kThreads * kPerThread;

using Divider = at::cuda::detail::IntDivider<uint32_t>;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Storage as a (R, Q) matrix in tiles of TP x TQ values (TQ = 2^tq_log2,
// TP = kTile / TQ); channel c = row % C (axis 0) or column (axis 1), C = 1
// for shared parameters. A block walks `iters` tiles of its `other` index
// (tile row for axis 0, tile column for axis 1), `groups` blocks per
// `other`; partial sums: S per channel.
struct Plan {
  int64_t R, Q, C;
  int axis, tq_log2;
  int64_t n_p, n_q, groups, iters, S;
  Divider channels, samples;  // row % C; row / rows per sample
};

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// The largest power-of-two tile width that pads Q by at most 7 %, else
// the one that pads least (wide rows coalesce; padding is idle threads):
// the Triton row's rule.
int64_t tile_width(int64_t Q, int64_t lowest) {
  const int64_t top = std::min<int64_t>(kTile, pow2_ceil(Q));
  int64_t best = -1, least = -1;
  for (int64_t b = 1; b <= top; b <<= 1) {
    if (b < lowest && b != top) continue;
    const int64_t padded = cdiv(Q, b) * b;
    if (padded * 100 <= 107 * Q) best = b;
    if (least < 0 || padded <= least) least = padded;
  }
  if (best > 0) return best;
  for (int64_t b = top; b >= 1; b >>= 1) {
    if (cdiv(Q, b) * b == least) return b;
  }
  return top;
}

// x as the kernels read it: a row-major (R, Q) matrix in the order of its
// storage once dense (dense(): its own, else contiguous) whose rows (axis
// 0) or columns (axis 1) follow the C channels of dim (-1: shared, C = 1).
struct Matrix {
  int64_t R, Q, C;
  int axis;
};

Matrix matrix_of(const at::Tensor& x, int64_t dim) {
  const int64_t n = x.numel();
  const int64_t C = dim < 0 ? 1 : x.size(dim);
  if (C == 1) return {1, n, 1, 0};
  int64_t stride = 1;  // dim's, once dense
  if (x.is_non_overlapping_and_dense()) {
    stride = x.stride(dim);
  } else {
    for (int64_t d = dim + 1; d < x.dim(); ++d) stride *= x.size(d);
  }
  if (stride == 1) return {n / C, C, C, 1};
  return {n / stride, stride, C, 0};
}

// Refuses, before anything is allocated, an input of more rows than the
// plan's 32-bit row indices take.
void check_rows(const at::Tensor& x, int64_t dim) {
  const int64_t rows = matrix_of(x, dim).R;
  TORCH_CHECK(rows < (int64_t{1} << 31), "mmact's CUDA kernels take at ",
              "most 2^31 - 1 rows of a channel (got ", rows, " for shape ",
              x.sizes(), ")");
}

// The plan of a dense tensor x of at least one value with parameters along
// dim (-1: shared), of at most 2^31 - 1 rows (check_rows).
Plan make_plan(const at::Tensor& x, int64_t dim, int64_t rows_per_sample) {
  Plan p{};
  const Matrix m = matrix_of(x, dim);
  p.R = m.R, p.Q = m.Q, p.C = m.C, p.axis = m.axis;
  // shared parameters: one row, so the widest tile (a narrower one would
  // leave the tile's other rows idle)
  const int64_t tq = p.C == 1 ? std::min<int64_t>(kTile, pow2_ceil(p.Q))
                              : tile_width(p.Q, p.axis == 0 ? 16 : 1);
  p.tq_log2 = 0;
  while ((int64_t{1} << p.tq_log2) < tq) ++p.tq_log2;
  const int64_t tp = kTile / tq;
  p.n_p = cdiv(p.R, tp);
  p.n_q = cdiv(p.Q, tq);
  const int64_t walk = p.axis == 0 ? p.n_q : p.n_p;
  const int64_t other = p.axis == 0 ? p.n_p : p.n_q;
  // about one wave of 8 resident blocks per multiprocessor
  const int64_t aim = int64_t{8} * multiprocessors(x.get_device());
  p.iters = std::min(walk, std::max<int64_t>(1, walk * other / aim));
  p.groups = cdiv(walk, p.iters);
  p.S = p.axis == 0 ? (p.R / p.C) * p.groups : p.groups;
  p.channels = Divider(static_cast<uint32_t>(p.C));
  p.samples = Divider(static_cast<uint32_t>(std::max<int64_t>(
      rows_per_sample, 1)));
  return p;
}

// The blocks of a launch of plan p.
int64_t blocks(const Plan& p) {
  return p.groups * (p.axis == 0 ? p.n_p : p.n_q);
}

// How the backward kernel gets its input: x itself, or rebuilt as
// src * scale + shift + other * other_scale (scale per channel, or per
// (sample, channel) row when per_sample; absent terms are null).
struct Sources {
  const void* other = nullptr;
  const float *scale = nullptr, *shift = nullptr, *other_scale = nullptr;
  bool per_sample = false;
};

template <typename T>
__device__ __forceinline__ float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}

// A thread's slot k: its place in a tile, and what stays across the walk.
struct Slot {
  int64_t fixed;  // the row (axis 0) or column (axis 1)
  int64_t c;      // channel, valid where fixed is in range
  bool in_range;
  ApaConsts k;
  float scale, shift, other_scale;
};

template <bool REBUILT>
__device__ __forceinline__ Slot make_slot(const Plan& p, int e, int64_t o,
                                          const float* kp, const float* lp,
                                          bool k_pc, bool l_pc, float lmin,
                                          const Sources& s) {
  Slot slot;
  const int tq = 1 << p.tq_log2;
  if (p.axis == 0) {
    slot.fixed = o * (kTile >> p.tq_log2) + (e >> p.tq_log2);
    slot.in_range = slot.fixed < p.R;
    slot.c = p.C == 1 ? 0
                      : p.channels.divmod(static_cast<uint32_t>(slot.fixed))
                            .mod;
  } else {
    slot.fixed = o * tq + (e & (tq - 1));
    slot.in_range = slot.fixed < p.Q;
    slot.c = slot.fixed;
  }
  const int64_t c = slot.in_range ? slot.c : 0;
  slot.k = apa_consts(kp[k_pc ? c : 0], lp[l_pc ? c : 0], lmin);
  if (REBUILT) {
    slot.scale = s.scale && !s.per_sample ? s.scale[c] : 1.0f;
    slot.shift = s.shift ? s.shift[c] : 0.0f;
    slot.other_scale = s.other_scale ? s.other_scale[c] : 1.0f;
  }
  return slot;
}

// The row and column of walk step w of slot (e, slot).
__device__ __forceinline__ void place(const Plan& p, int e, const Slot& slot,
                                      int64_t w, int64_t* row,
                                      int64_t* col) {
  if (p.axis == 0) {
    *row = slot.fixed;
    *col = (w << p.tq_log2) + (e & ((1 << p.tq_log2) - 1));
  } else {
    *row = w * (kTile >> p.tq_log2) + (e >> p.tq_log2);
    *col = slot.fixed;
  }
}

template <typename T, bool AGLU>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                   const float* __restrict__ kp, const float* __restrict__ lp,
                   bool k_pc, bool l_pc, float lmin, Plan p) {
  const int64_t o = blockIdx.x / p.groups, g = blockIdx.x % p.groups;
  const int64_t walk = p.axis == 0 ? p.n_q : p.n_p;
  const int64_t w0 = g * p.iters, w1 = min(w0 + p.iters, walk);
  Slot slots[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    slots[k] = make_slot<false>(p, threadIdx.x + k * kThreads, o, kp, lp,
                                k_pc, l_pc, lmin, Sources());
  }
  for (int64_t w = w0; w < w1; ++w) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int e = threadIdx.x + k * kThreads;
      int64_t row, col;
      place(p, e, slots[k], w, &row, &col);
      if (row >= p.R || col >= p.Q) continue;
      const int64_t i = row * p.Q + col;
      const float z = load(x, i);
      const ApaConsts& c = slots[k].k;
      const float a2 = apa_arg(c.lnl2, c.k2, z);
      const float le = apa_log2_eta(a2, apa_gate_exp(a2), c.ninvl);
      y[i] = static_cast<T>(apa_output(AGLU, z, le));
    }
  }
}

// Sums a tile's values in shared memory along its rows (axis 0: per row)
// or its columns (axis 1: per column), halving in a fixed order.
__device__ void tile_sums(float* v, int tq_log2, int axis) {
  const int tq = 1 << tq_log2, tp = kTile >> tq_log2;
  if (axis == 0) {
    for (int half = tq >> 1, lg = tq_log2 - 1; half >= 1; half >>= 1, --lg) {
      for (int e = threadIdx.x; e < tp * half; e += kThreads) {
        const int at = ((e >> lg) << tq_log2) + (e & (half - 1));
        v[at] += v[at + half];
      }
      __syncthreads();
    }
  } else {
    for (int half = tp >> 1; half >= 1; half >>= 1) {
      for (int e = threadIdx.x; e < half * tq; e += kThreads) {
        v[e] += v[e + half * tq];
      }
      __syncthreads();
    }
  }
}

// grad_x (gx, when not null) and the partial parameter sums part
// (2, C, S): kappa's then lambda's, unscaled.
template <typename T, bool AGLU, bool REBUILT>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ x, const T* __restrict__ go,
                    T* __restrict__ gx, const float* __restrict__ kp,
                    const float* __restrict__ lp, bool k_pc, bool l_pc,
                    float lmin, float* __restrict__ part, Plan p,
                    Sources s) {
  const int64_t o = blockIdx.x / p.groups, g = blockIdx.x % p.groups;
  const int64_t walk = p.axis == 0 ? p.n_q : p.n_p;
  const int64_t w0 = g * p.iters, w1 = min(w0 + p.iters, walk);
  const T* other = static_cast<const T*>(s.other);
  Slot slots[kPerThread];
  float sk[kPerThread], sl[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    slots[k] = make_slot<REBUILT>(p, threadIdx.x + k * kThreads, o, kp, lp,
                                  k_pc, l_pc, lmin, s);
    sk[k] = sl[k] = 0.0f;
  }
  for (int64_t w = w0; w < w1; ++w) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int e = threadIdx.x + k * kThreads;
      const Slot& slot = slots[k];
      int64_t row, col;
      place(p, e, slot, w, &row, &col);
      if (row >= p.R || col >= p.Q) continue;
      const int64_t i = row * p.Q + col;
      float z = load(x, i);
      if (REBUILT) {
        float a = slot.scale;
        if (s.per_sample) {
          const uint32_t n = p.samples.divmod(static_cast<uint32_t>(row)).div;
          a = s.scale[n * p.C + slot.c];
        }
        z = z * a + slot.shift;
        if (other) z += load(other, i) * slot.other_scale;
      }
      const ApaConsts& c = slot.k;
      const float a2 = apa_arg(c.lnl2, c.k2, z);
      const ApaSpG sg = apa_sp_g(a2, apa_gate_exp(a2));
      const ApaTerms t =
          apa_terms(AGLU, z, load(go, i), sg.sp2, sg.g, c.ninvl, c.kinvl);
      if (gx) gx[i] = static_cast<T>(t.gx);
      sk[k] += t.sk;
      sl[k] += t.sl;
    }
  }
  if (!part) return;
  __shared__ float vk[kTile], vl[kTile];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    vk[threadIdx.x + k * kThreads] = sk[k];
    vl[threadIdx.x + k * kThreads] = sl[k];
  }
  __syncthreads();
  tile_sums(vk, p.tq_log2, p.axis);
  tile_sums(vl, p.tq_log2, p.axis);
  const int tq = 1 << p.tq_log2, tp = kTile >> p.tq_log2;
  const int64_t CS = p.C * p.S;
  if (p.axis == 0) {
    for (int r = threadIdx.x; r < tp; r += kThreads) {
      const int64_t row = o * tp + r;
      if (row >= p.R) break;
      const auto dm = p.channels.divmod(static_cast<uint32_t>(row));
      const int64_t at = int64_t{dm.mod} * p.S + int64_t{dm.div} * p.groups + g;
      part[at] = vk[r << p.tq_log2];
      part[CS + at] = vl[r << p.tq_log2];
    }
  } else {
    for (int q = threadIdx.x; q < tq; q += kThreads) {
      const int64_t col = o * tq + q;
      if (col >= p.Q) break;
      part[col * p.S + g] = vk[q];
      part[CS + col * p.S + g] = vl[q];
    }
  }
}

// The partial sums of each channel (blockIdx.x; all channels into one when
// the parameters are shared) added in a fixed order, then scaled to the
// gradients of the raw parameters (apa_kappa_grad, apa_lambda_grad).
__global__ void __launch_bounds__(kThreads)
    param_grad_kernel(const float* __restrict__ part, int64_t C, int64_t S,
                      bool shared, const float* __restrict__ lp, bool l_pc,
                      float lmin, float* gk, float* gl) {
  const int64_t c = blockIdx.x;
  const int64_t start = shared ? 0 : c * S, end = shared ? C * S : start + S;
  double ak = 0.0, al = 0.0;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
    ak += part[i];
    al += part[C * S + i];
  }
  __shared__ double tk[kThreads], tl[kThreads];
  tk[threadIdx.x] = ak;
  tl[threadIdx.x] = al;
  __syncthreads();
  for (int half = kThreads / 2; half >= 1; half >>= 1) {
    if (threadIdx.x < half) {
      tk[threadIdx.x] += tk[threadIdx.x + half];
      tl[threadIdx.x] += tl[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float l = lp[l_pc ? c : 0];
    if (gk) gk[c] = apa_kappa_grad(tk[0], l, lmin);
    if (gl) gl[c] = apa_lambda_grad(tl[0], l, lmin);
  }
}

const char* const kNames[2] = {"apa", "aglu"};

// Parameters the kernels read: float32 on x's device, named when not.
void check_param(const at::Tensor& p, const char* what, const at::Tensor& x,
                 const char* op) {
  TORCH_CHECK(p.device() == x.device() && p.scalar_type() == at::kFloat,
              "mmact::", op, ": ", what, " is ", p.scalar_type(), " on ",
              p.device(), " but x is on ", x.device(), "; the CUDA kernels ",
              "take float32 parameters on x's device");
}

void check_input(const at::Tensor& x, const char* what, const char* op) {
  const at::ScalarType t = x.scalar_type();
  TORCH_CHECK_TYPE(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                   "mmact::", op, " on CUDA takes float32 / float16 / ",
                   "bfloat16 ", what, ", got ", t);
}

// x itself when its storage is dense (any order of dims), else a copy.
at::Tensor dense(const at::Tensor& x) {
  return x.is_non_overlapping_and_dense() ? x : x.contiguous();
}


// A parameter gradient from the kernel's P values.
at::Tensor to_param(const at::Tensor& grad, const at::Tensor& p) {
  return grad.numel() == p.numel() ? grad.view(p.sizes())
                                   : grad.sum().view(p.sizes());
}


template <bool AGLU>
at::Tensor forward_cuda(const at::Tensor& x_in, const at::Tensor& kappa,
                        const at::Tensor& lambda, double lambda_min,
                        int64_t channel_dim) {
  const char* op = kNames[AGLU];
  check_input(x_in, "x", op);
  check_param(kappa, "kappa", x_in, op);
  check_param(lambda, "lambda", x_in, op);
  const int64_t dim = mmact::channel_axis(x_in, kappa, lambda, channel_dim);
  check_rows(x_in, dim);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = dense(x_in);
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0) return y;
  const Plan p = make_plan(x, dim, 1);
  const at::Tensor k = kappa.contiguous(), l = lambda.contiguous();
  const auto stream = c10::cuda::getCurrentCUDAStream();
  MMACT_DTYPES(x.scalar_type(),
               launch_kernel(forward_kernel<scalar_t, AGLU>, blocks(p),
                             kThreads, stream, x.data_ptr<scalar_t>(),
                             y.data_ptr<scalar_t>(), k.data_ptr<float>(),
                             l.data_ptr<float>(), k.numel() > 1,
                             l.numel() > 1, static_cast<float>(lambda_min),
                             p));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

// The gradients of an empty input: grad_x and zeros for the parameters.
Grads empty_grads(const at::Tensor& x, const at::Tensor& kappa,
                  const at::Tensor& lambda, bool need_k, bool need_l) {
  const auto floats = x.options().dtype(at::kFloat);
  return {at::empty_like(x),
          need_k ? at::zeros(kappa.sizes(), floats) : at::Tensor(),
          need_l ? at::zeros(lambda.sizes(), floats) : at::Tensor()};
}

// The backward launches on x (or the sources) laid out for plan p: grad_x
// into gx (may be undefined: not wanted) and the gradients of the raw
// parameters where wanted (P values: C when either is per channel).
template <bool AGLU, bool REBUILT>
Grads launch_backward(const at::Tensor& x, const at::Tensor& go,
                      at::Tensor gx, const at::Tensor& kappa,
                      const at::Tensor& lambda, double lambda_min,
                      const Plan& p, bool per_channel, bool need_k,
                      bool need_l, const Sources& s) {
  const at::Tensor k = kappa.contiguous(), l = lambda.contiguous();
  const bool need_params = need_k || need_l;
  const int64_t P = per_channel ? p.C : 1;
  const auto floats = x.options().dtype(at::kFloat);
  at::Tensor part, gk, gl;
  if (need_params) part = at::empty({2 * p.C * p.S}, floats);
  if (need_k) gk = at::empty({P}, floats);
  if (need_l) gl = at::empty({P}, floats);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  MMACT_DTYPES(
      x.scalar_type(),
      launch_kernel(backward_kernel<scalar_t, AGLU, REBUILT>, blocks(p),
                    kThreads, stream, x.data_ptr<scalar_t>(),
                    go.data_ptr<scalar_t>(),
                    gx.defined() ? gx.data_ptr<scalar_t>() : nullptr,
                    k.data_ptr<float>(), l.data_ptr<float>(), k.numel() > 1,
                    l.numel() > 1, static_cast<float>(lambda_min),
                    need_params ? part.data_ptr<float>() : nullptr, p, s));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (need_params) {
    launch_kernel(param_grad_kernel, P, kThreads, stream,
                  part.data_ptr<float>(), p.C, p.S, P == 1,
                  l.data_ptr<float>(), l.numel() > 1,
                  static_cast<float>(lambda_min),
                  need_k ? gk.data_ptr<float>() : nullptr,
                  need_l ? gl.data_ptr<float>() : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {gx, need_k ? to_param(gk, kappa) : gk,
          need_l ? to_param(gl, lambda) : gl};
}

template <bool AGLU>
Grads backward_cuda(const at::Tensor& grad_out, const at::Tensor& x_in,
                    const at::Tensor& kappa, const at::Tensor& lambda,
                    double lambda_min, int64_t channel_dim, bool need_kappa,
                    bool need_lambda) {
  const char* op = kNames[AGLU];
  check_input(x_in, "x", op);
  check_param(kappa, "kappa", x_in, op);
  check_param(lambda, "lambda", x_in, op);
  TORCH_CHECK(grad_out.device() == x_in.device() &&
                  grad_out.sizes() == x_in.sizes(),
              "mmact::", op, "_backward: grad_out ", grad_out.sizes(), " on ",
              grad_out.device(), ", x ", x_in.sizes(), " on ", x_in.device());
  const int64_t dim = mmact::channel_axis(x_in, kappa, lambda, channel_dim);
  check_rows(x_in, dim);
  const c10::cuda::CUDAGuard guard(x_in.device());
  if (x_in.numel() == 0) {
    return empty_grads(x_in, kappa, lambda, need_kappa, need_lambda);
  }
  const at::Tensor x = dense(x_in);
  const at::Tensor go = laid_out_as(grad_out, x);
  const Plan p = make_plan(x, dim, 1);
  return launch_backward<AGLU, false>(x, go, at::empty_like(x), kappa, lambda,
                                      lambda_min, p, dim >= 0, need_kappa,
                                      need_lambda, Sources());
}

// A coefficient of the rebuilt input: float32 values on src's device.
at::Tensor coefficient(const c10::optional<at::Tensor>& t, const char* what,
                       const at::Tensor& src, const char* op) {
  if (!t.has_value() || !t->defined()) return at::Tensor();
  TORCH_CHECK(t->device() == src.device(), "mmact::", op,
              "_backward_rebuilt: ", what, " is on ", t->device(),
              " but src is on ", src.device());
  return t->to(at::kFloat).contiguous();
}

template <bool AGLU>
Grads backward_rebuilt_cuda(const at::Tensor& grad_out,
                            const at::Tensor& kappa, const at::Tensor& lambda,
                            double lambda_min, const at::Tensor& src_in,
                            const c10::optional<at::Tensor>& scale_in,
                            const c10::optional<at::Tensor>& shift_in,
                            const c10::optional<at::Tensor>& other_in,
                            const c10::optional<at::Tensor>& other_scale_in,
                            bool need_kappa, bool need_lambda) {
  const char* op = kNames[AGLU];
  const bool has_other = other_in.has_value() && other_in->defined();
  check_input(src_in, "src", op);
  TORCH_CHECK(src_in.dim() >= 2 && grad_out.sizes() == src_in.sizes() &&
                  grad_out.scalar_type() == src_in.scalar_type() &&
                  grad_out.device() == src_in.device() &&
                  (!has_other || (other_in->sizes() == src_in.sizes() &&
                                  other_in->scalar_type() ==
                                      src_in.scalar_type() &&
                                  other_in->device() == src_in.device())),
              "mmact::", op, "_backward_rebuilt on CUDA takes (N, C, ...) ",
              "src, grad_out and other of one shape, dtype and device (got ",
              "src ", src_in.sizes(), " ", src_in.scalar_type(), ", grad_out ",
              grad_out.sizes(), " ", grad_out.scalar_type(), ")");
  check_param(kappa, "kappa", src_in, op);
  check_param(lambda, "lambda", src_in, op);
  mmact::channel_axis(src_in, kappa, lambda, 1);
  check_rows(src_in, 1);
  const c10::cuda::CUDAGuard guard(src_in.device());
  const int64_t N = src_in.size(0), C = src_in.size(1);
  const at::Tensor scale = coefficient(scale_in, "scale", src_in, op),
                   shift = coefficient(shift_in, "shift", src_in, op),
                   other_scale =
                       coefficient(other_scale_in, "other_scale", src_in, op);
  const bool per_sample = scale.defined() && scale.numel() == N * C && N > 1;
  TORCH_CHECK_VALUE(
      (!scale.defined() || scale.numel() == C || per_sample) &&
          (!shift.defined() || shift.numel() == C) &&
          (!other_scale.defined() || other_scale.numel() == C),
      "mmact::", op, "_backward_rebuilt: scale has ",
      scale.defined() ? scale.numel() : 0, " values, shift ",
      shift.defined() ? shift.numel() : 0, ", other_scale ",
      other_scale.defined() ? other_scale.numel() : 0, "; expected C=", C,
      " each (scale also N*C=", N * C, ")");
  if (src_in.numel() == 0) {
    return empty_grads(src_in, kappa, lambda, need_kappa, need_lambda);
  }
  const at::Tensor src = dense(src_in);
  const bool per_channel = kappa.numel() > 1 || lambda.numel() > 1;
  // per-sample scales are indexed by row: samples outermost, C > 1
  // (rebuilt with ATen ops otherwise)
  if (per_sample && (C == 1 || src.stride(0) * N != src.numel())) {
    std::vector<int64_t> coef(src.dim(), 1), rows(src.dim(), 1);
    coef[1] = rows[1] = C;
    rows[0] = N;
    at::Tensor z = at::mul(src, scale.view(rows));
    if (shift.defined()) z = at::add(z, shift.view(coef));
    if (has_other) {
      z = other_scale.defined()
              ? at::addcmul(z, *other_in, other_scale.view(coef))
              : at::add(z, *other_in);
    }
    // z is float32 (the coefficients are); grad_z is in grad_out's dtype,
    // as from the kernel below
    Grads grads = backward_cuda<AGLU>(grad_out, z, kappa, lambda, lambda_min,
                                      1, need_kappa, need_lambda);
    std::get<0>(grads) = std::get<0>(grads).to(grad_out.scalar_type());
    return grads;
  }
  const at::Tensor go = laid_out_as(grad_out, src);
  const at::Tensor other = has_other ? laid_out_as(*other_in, src)
                                     : at::Tensor();
  // coefficients follow dim 1 whether the parameters do or not
  Plan p = make_plan(src, 1, 1);
  if (per_sample) {
    p = make_plan(src, 1, src.stride(0) / p.Q);
  }
  Sources s;
  s.other = has_other ? other.data_ptr() : nullptr;
  s.scale = scale.defined() ? scale.data_ptr<float>() : nullptr;
  s.shift = shift.defined() ? shift.data_ptr<float>() : nullptr;
  s.other_scale = other_scale.defined() ? other_scale.data_ptr<float>()
                                        : nullptr;
  s.per_sample = per_sample;
  return launch_backward<AGLU, true>(src, go, at::empty_like(src), kappa,
                                     lambda, lambda_min, p, per_channel,
                                     need_kappa, need_lambda, s);
}

}  // namespace

TORCH_LIBRARY_IMPL(mmact, CUDA, m) {
  m.impl("apa", forward_cuda<false>);
  m.impl("aglu", forward_cuda<true>);
  m.impl("apa_backward", backward_cuda<false>);
  m.impl("aglu_backward", backward_cuda<true>);
  m.impl("apa_backward_rebuilt", backward_rebuilt_cuda<false>);
  m.impl("aglu_backward_rebuilt", backward_rebuilt_cuda<true>);
}
