// FleS's scale MLP and its vector-Jacobian product as plain loops on the
// indicator grid (fles_op.cpp's small MLPs). Included after fles_math.h.
#ifndef MMACT_FLES_MLP_H
#define MMACT_FLES_MLP_H
#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <array>

#include "op_node.h"

namespace mmact {

using torch::autograd::variable_list;

// The largest MLP the loops run, measured as n * grid * C * h * 2 (one
// layer's multiply-adds for both heads; the whole MLP is 1.5x (shared
// trunk) or 2x (a trunk per head) that); larger ones run in torch.
constexpr int64_t kLoopMacs = 1 << 16;

inline float sigmoid(float v) { return fles_rho_sigmoid(v).r; }

// The scale MLP as plain loops, for the grids where it is a few thousand
// multiply-adds and an ATen call would cost more than the product. Its
// math is mmact.ops.fles.scales._mlp_vjp's (the one torch spelling, which
// runs every larger MLP): hidden = relu(fc1 ind + b1), opre = fc2 hidden +
// b2, scales = softplus(opre), k_ho floored at k_ho_min (K_HO_MIN there,
// passed in). fc1 has one trunk shared by both heads ((h, C)) or one per
// head ((2, h, C)).
struct Mlp {
  at::Tensor flat;    // (N, C, G): the indicator grid
  at::Tensor hidden;  // (2, N, h, G) per head, (N, h, G) shared
  at::Tensor opre, scales;  // (2, N, C, G)
  at::Tensor k_ve, k_ho;    // (N, C, G), contiguous
  int64_t n = 0, c = 0, grid = 0, h = 0, trunks = 1;
  float k_ho_min = 0;

  Mlp(const at::Tensor& ind, const at::Tensor& w1, const at::Tensor& b1,
      const at::Tensor& w2, const at::Tensor& b2, double k_ho_min_)
      : flat(ind.view({ind.size(0), ind.size(1), ind.size(2) * ind.size(3)})),
        n(flat.size(0)),
        c(flat.size(1)), grid(flat.size(2)), h(w1.size(-2)),
        trunks(w1.dim() == 3 ? 2 : 1),
        k_ho_min(static_cast<float>(k_ho_min_)) {
    forward(w1.contiguous(), b1.contiguous(), w2.contiguous(),
            b2.contiguous());
    k_ve = scales.select(0, 0);
    k_ho = scales.select(0, 1).clamp_min(k_ho_min);
  }

  // Gradients (ind, w1, b1, w2, b2) from those of (k_ve, k_ho), each
  // contiguous (N, C, nh, nw); undefined where not needed.
  variable_list vjp(const at::Tensor& g_ve, const at::Tensor& g_ho,
                    const at::Tensor& w1, const at::Tensor& w2,
                    const std::array<bool, 5>& need) const {
    return vjp_loops(g_ve, g_ho, w1.contiguous(), w2.contiguous(), need);
  }

 private:
  void forward(const at::Tensor& w1, const at::Tensor& b1,
                     const at::Tensor& w2, const at::Tensor& b2) {
    hidden = trunks == 2 ? mmact::empty_cpu({2, n, h, grid}, at::kFloat)
                         : mmact::empty_cpu({n, h, grid}, at::kFloat);
    opre = mmact::empty_cpu({2, n, c, grid}, at::kFloat);
    scales = mmact::empty_cpu(opre.sizes(), at::kFloat);
    const float *x = flat.data_ptr<float>(), *pw1 = w1.data_ptr<float>(),
                *pb1 = b1.data_ptr<float>(), *pw2 = w2.data_ptr<float>(),
                *pb2 = b2.data_ptr<float>();
    float *ph = hidden.data_ptr<float>(), *po = opre.data_ptr<float>(),
          *ps = scales.data_ptr<float>();
    for (int64_t t = 0; t < trunks; ++t) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < h; ++j) {
          const float* wr = pw1 + (t * h + j) * c;
          float* hr = ph + ((t * n + i) * h + j) * grid;
          for (int64_t g = 0; g < grid; ++g) {
            float acc = pb1[t * h + j];
            for (int64_t k = 0; k < c; ++k) {
              acc += wr[k] * x[(i * c + k) * grid + g];
            }
            hr[g] = acc > 0.0f ? acc : 0.0f;
          }
        }
      }
    }
    for (int64_t head = 0; head < 2; ++head) {
      const float* hb = ph + (trunks == 2 ? head : 0) * n * h * grid;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < c; ++k) {
          const float* wr = pw2 + (head * c + k) * h;
          const int64_t o = ((head * n + i) * c + k) * grid;
          for (int64_t g = 0; g < grid; ++g) {
            float acc = pb2[head * c + k];
            for (int64_t j = 0; j < h; ++j) {
              acc += wr[j] * hb[(i * h + j) * grid + g];
            }
            po[o + g] = acc;
          }
        }
      }
    }
    const int64_t m = opre.numel();
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) ps[i] = softplus_approx(po[i]);
  }

  variable_list vjp_loops(const at::Tensor& g_ve, const at::Tensor& g_ho,
                          const at::Tensor& w1, const at::Tensor& w2,
                          const std::array<bool, 5>& need) const {
    const int64_t m = n * c * grid;
    at::Tensor d_opre = mmact::empty_cpu(opre.sizes(), at::kFloat);
    float* pd = d_opre.data_ptr<float>();
    const float *pve = g_ve.data_ptr<float>(), *pho = g_ho.data_ptr<float>(),
                *po = opre.data_ptr<float>(), *ps = scales.data_ptr<float>();
    for (int64_t i = 0; i < m; ++i) {  // softplus' = sigmoid
      pd[i] = pve[i] * sigmoid(po[i]);
      pd[m + i] = ps[m + i] >= k_ho_min ? pho[i] * sigmoid(po[m + i]) : 0.0f;
    }
    const float *x = flat.data_ptr<float>(), *ph = hidden.data_ptr<float>(),
                *pw1 = w1.data_ptr<float>(), *pw2 = w2.data_ptr<float>();
    variable_list out(5);
    if (need[3] || need[4]) {
      at::Tensor g_w2 = at::zeros({2, c, h}, opre.options());
      at::Tensor g_b2 = at::zeros({2, c}, opre.options());
      float *pgw = g_w2.data_ptr<float>(), *pgb = g_b2.data_ptr<float>();
      for (int64_t head = 0; head < 2; ++head) {
        const float* hb = ph + (trunks == 2 ? head : 0) * n * h * grid;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t k = 0; k < c; ++k) {
            float* gw = pgw + (head * c + k) * h;
            for (int64_t g = 0; g < grid; ++g) {
              const float d = pd[((head * n + i) * c + k) * grid + g];
              pgb[head * c + k] += d;
              for (int64_t j = 0; j < h; ++j) {
                gw[j] += d * hb[(i * h + j) * grid + g];
              }
            }
          }
        }
      }
      if (need[3]) out[3] = g_w2;
      if (need[4]) out[4] = g_b2;
    }
    if (!(need[0] || need[1] || need[2])) return out;
    at::Tensor d_hidden = mmact::empty_cpu(hidden.sizes(), at::kFloat);
    float* pdh = d_hidden.data_ptr<float>();
    for (int64_t t = 0; t < trunks; ++t) {
      // a trunk's gradient: its head's (per head) or both heads' (shared)
      const int64_t first = trunks == 2 ? t : 0, last = trunks == 2 ? t : 1;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < h; ++j) {
          for (int64_t g = 0; g < grid; ++g) {
            const int64_t o = ((t * n + i) * h + j) * grid + g;
            float acc = 0.0f;
            for (int64_t head = first; head <= last; ++head) {
              for (int64_t k = 0; k < c; ++k) {
                acc += pw2[(head * c + k) * h + j] *
                       pd[((head * n + i) * c + k) * grid + g];
              }
            }
            pdh[o] = ph[o] > 0.0f ? acc : 0.0f;
          }
        }
      }
    }
    if (need[1] || need[2]) {
      at::Tensor g_w1 = at::zeros_like(w1), g_b1 = at::zeros(
          w1.sizes().slice(0, w1.dim() - 1), w1.options());
      float *pgw = g_w1.data_ptr<float>(), *pgb = g_b1.data_ptr<float>();
      for (int64_t t = 0; t < trunks; ++t) {
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < h; ++j) {
            float* gw = pgw + (t * h + j) * c;
            for (int64_t g = 0; g < grid; ++g) {
              const float d = pdh[((t * n + i) * h + j) * grid + g];
              pgb[t * h + j] += d;
              for (int64_t k = 0; k < c; ++k) {
                gw[k] += d * x[(i * c + k) * grid + g];
              }
            }
          }
        }
      }
      if (need[1]) out[1] = g_w1;
      if (need[2]) out[2] = g_b1;
    }
    if (need[0]) {
      at::Tensor g_ind = mmact::empty_cpu(flat.sizes(), at::kFloat);
      float* pgi = g_ind.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < c; ++k) {
          for (int64_t g = 0; g < grid; ++g) {
            float acc = 0.0f;
            for (int64_t t = 0; t < trunks; ++t) {
              for (int64_t j = 0; j < h; ++j) {
                acc += pw1[(t * h + j) * c + k] *
                       pdh[((t * n + i) * h + j) * grid + g];
              }
            }
            pgi[(i * c + k) * grid + g] = acc;
          }
        }
      }
      out[0] = g_ind;
    }
    return out;
  }
};

// The scale MLP in ATen ops, for CUDA grids (cuBLAS underneath): the
// math of mmact.ops.fles.scales._mlp_vjp op for op, with its grid-sized
// intermediates kept for the VJP (backward does not re-run the MLP).
struct MlpAten {
  at::Tensor flat;    // (N, C, G): the indicator grid
  at::Tensor w1;      // fc1 as (2, 1, h, C) per head, (1, h, C) shared
  at::Tensor hidden;  // (2, N, h, G) per head, (N, h, G) shared
  at::Tensor opre, out;     // (2, N, C, G)
  at::Tensor k_ve, k_ho;    // (N, C, nh, nw), contiguous
  bool per_head = false;
  double k_ho_min = 0;

  MlpAten(const at::Tensor& ind, const at::Tensor& fc1_weight,
          const at::Tensor& fc1_bias, const at::Tensor& fc2_weight,
          const at::Tensor& fc2_bias, double k_ho_min_)
      : flat(ind.reshape({ind.size(0), ind.size(1), -1})),
        w1(fc1_weight.unsqueeze(-3)),
        per_head(fc1_weight.dim() == 3),
        k_ho_min(k_ho_min_) {
    hidden = at::matmul(w1, flat).add_(
        fc1_bias.unsqueeze(-2).unsqueeze(-1)).relu_();
    opre = at::matmul(fc2_weight.unsqueeze(1), hidden)
               .add_(fc2_bias.unsqueeze(1).unsqueeze(-1));
    out = at::softplus(opre);
    k_ve = out.select(0, 0).view(ind.sizes());
    k_ho = out.select(0, 1).clamp_min(k_ho_min).view(ind.sizes());
  }

  // Gradients (ind, fc1_weight, fc1_bias, fc2_weight, fc2_bias) from those
  // of (k_ve, k_ho); undefined where not needed.
  variable_list vjp(const at::Tensor& g_ve, const at::Tensor& g_ho,
                    const at::Tensor& fc2_weight,
                    const std::array<bool, 5>& need) const {
    const int64_t n = flat.size(0), c = flat.size(1);
    // no gradient below k_ho's floor; softplus' = sigmoid
    at::Tensor d_opre =
        at::stack({g_ve.reshape({n, c, -1}),
                   g_ho.reshape({n, c, -1}) * out.select(0, 1).ge(k_ho_min)});
    d_opre.mul_(at::sigmoid(opre));
    variable_list grads(5);
    if (need[3]) {
      grads[3] = at::matmul(d_opre, hidden.transpose(-1, -2))
                     .sum(1)
                     .view(fc2_weight.sizes());
    }
    if (need[4]) grads[4] = d_opre.sum({1, 3});
    if (!(need[0] || need[1] || need[2])) return grads;
    at::Tensor d_hidden =
        at::matmul(fc2_weight.transpose(-1, -2).unsqueeze(1), d_opre);
    if (!per_head) d_hidden = d_hidden.sum(0);
    d_hidden.mul_(hidden.gt(0));
    if (need[1]) {
      grads[1] = at::matmul(d_hidden, flat.transpose(-1, -2)).sum(-3);
    }
    if (need[2]) grads[2] = d_hidden.sum({-3, -1});
    if (need[0]) {
      at::Tensor g_ind = at::matmul(w1.transpose(-1, -2), d_hidden);
      if (per_head) g_ind = g_ind.sum(0);
      grads[0] = g_ind.view(k_ve.sizes());
    }
    return grads;
  }
};

}  // namespace mmact

#endif
