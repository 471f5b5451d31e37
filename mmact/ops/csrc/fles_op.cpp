// FleS on tiles or a global window as a torch operator, mmact::fles: the
// pixel passes of fles.c (compiled into this library), the scale MLP and
// its VJP (plain loops on small grids, ATen matmuls on large ones), the
// backward as a C++ autograd node, and a Python module (mmact_fles_op) with
// an entry for it. The Python path (mmact/ops/fles/fused.py) pays ~10
// Python-level torch calls for the MLP each way and four ctypes calls.
// mmact/ops/fles/scales.py is the reference of the MLP math.
//
// Schema: (Tensor x, Tensor fc1_weight, Tensor fc1_bias, Tensor fc2_weight,
// Tensor fc2_bias, int kh, int kw, str gate, str mode) -> Tensor.
// x: contiguous float32 (N, C, H, W) CPU map; windows kh x kw from the
// top-left corner, cut at the border (kh = H, kw = W: one global window);
// MLP parameters float32, per head (fc1 (2, h, C)) or with a shared trunk
// (fc1 (h, C)), heads fc2 (2, C, h), fc2_bias (2, C); gate sigmoid,
// tanh_gate, erf or tanh_softplus; indicator mode positive or mean.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <string>

#include "op_node.h"

extern "C" {
#include "approx.h"
#include "fles.c"
}

namespace {

using torch::autograd::variable_list;

// The same floor as mmact.ops.fles.scales.K_HO_MIN.
constexpr double kKHoMin = 1e-6;
// Pixels per thread at least, and the grids on which the MLP runs on one
// thread (as mmact.ops.fles.fused._small_op_threads).
constexpr int64_t kMinPerThread = 1 << 15;
constexpr int64_t kSmallGrid = 1 << 18;

// The signatures fles.h declares (one per pass for every gate).
using Apply = decltype(&fles_apply_sigmoid_run);
using GateBackward = decltype(&fles_gate_bwd_sigmoid_run);

// The kernels' status: -1 when their row buffers could not be allocated.
inline void check_kernel(int64_t status, const char* pass) {
  TORCH_CHECK(status == 0, "mmact::fles: ", pass,
              ": no memory for the kernel's row buffers");
}

// rho(z) = base(cst z) for a kernel base; the names of mmact.ops.fles.gates.
struct Gate {
  const char* name;
  Apply apply;
  GateBackward backward;
  float cst;
};
const Gate kGates[] = {
    {"sigmoid", fles_apply_sigmoid_run, fles_gate_bwd_sigmoid_run, 1.0f},
    {"tanh_gate", fles_apply_sigmoid_run, fles_gate_bwd_sigmoid_run, 2.0f},
    {"erf", fles_apply_erf_run, fles_gate_bwd_erf_run, 1.0f},
    {"tanh_softplus", fles_apply_mish_run, fles_gate_bwd_mish_run, 1.0f}};
const char* const kModes[] = {"positive", "mean"};

const Gate& find_gate(c10::string_view name) {
  for (const Gate& g : kGates) {
    if (name == g.name) return g;
  }
  TORCH_CHECK_VALUE(false, "mmact::fles: unknown gate '", std::string(name),
                    "'; choose one of sigmoid, tanh_gate, erf, "
                    "tanh_softplus");
}

int64_t find_mode(c10::string_view name) {
  for (int64_t i = 0; i < 2; ++i) {
    if (name == kModes[i]) return i;
  }
  TORCH_CHECK_VALUE(false, "mmact::fles: indicator mode '",
                    std::string(name),
                    "' has no kernel; choose positive or mean (others run "
                    "in mmact.ops.fles.fles_fused)");
}

// x as (planes, H, W) with its window grid, and the kernels' thread split.
struct Grid {
  int64_t n, c, h, w, kh, kw, nh, nw, threads, min_per_thread;

  Grid(const at::Tensor& x, int64_t kh_, int64_t kw_)
      : n(x.size(0)), c(x.size(1)), h(x.size(2)), w(x.size(3)), kh(kh_),
        kw(kw_), nh((h + kh - 1) / kh), nw((w + kw - 1) / kw),
        threads(at::get_num_threads()),
        min_per_thread(std::max<int64_t>(1, kMinPerThread /
                                                std::max<int64_t>(h * w, 1))) {}

  int64_t planes() const { return n * c; }
  at::Tensor windows() const {
    return mmact::empty_cpu({n, c, nh, nw}, at::kFloat);
  }
};

void check_inputs(const at::Tensor& x, const at::Tensor& w1,
                  const at::Tensor& b1, const at::Tensor& w2,
                  const at::Tensor& b2, int64_t kh, int64_t kw) {
  TORCH_CHECK(x.dim() == 4 && x.is_cpu() && x.scalar_type() == at::kFloat,
              "mmact::fles takes a float32 (N, C, H, W) CPU tensor (got ",
              x.scalar_type(), " ", x.sizes(), " on ", x.device(),
              "); call mmact.ops.fles.fles_fused, which picks the "
              "implementation");
  TORCH_CHECK_VALUE(0 < kh && kh <= x.size(2) && 0 < kw && kw <= x.size(3),
                    "mmact::fles: window (", kh, ", ", kw,
                    ") must be positive and fit the ", x.size(2), "x",
                    x.size(3), " map");
  const int64_t c = x.size(1);
  const bool ok =
      (w1.dim() == 2 || (w1.dim() == 3 && w1.size(0) == 2)) &&
      w1.size(-1) == c && b1.sizes().equals(w1.sizes().slice(0, w1.dim() - 1)) &&
      w2.dim() == 3 && w2.size(0) == 2 && w2.size(1) == c &&
      w2.size(2) == w1.size(-2) && b2.dim() == 2 && b2.size(0) == 2 &&
      b2.size(1) == c;
  TORCH_CHECK_VALUE(ok, "mmact::fles: MLP parameters fc1_weight ",
                    w1.sizes(), ", fc1_bias ", b1.sizes(), ", fc2_weight ",
                    w2.sizes(), ", fc2_bias ", b2.sizes(),
                    " do not fit C=", c,
                    "; expected (2, h, C) / (2, h) or (h, C) / (h,), then "
                    "(2, C, h) / (2, C)");
  for (const at::Tensor* p : {&w1, &b1, &w2, &b2}) {
    TORCH_CHECK(p->scalar_type() == at::kFloat && p->is_cpu(),
                "mmact::fles: MLP parameters must be float32 CPU tensors");
  }
}

// One intra-op thread for the MLP's small ATen calls on a small grid: with
// several, each call ends in a barrier that a descheduled worker stalls.
class SmallGridThreads {
 public:
  explicit SmallGridThreads(int64_t grid_values)
      : threads_(at::get_num_threads()),
        active_(threads_ > 1 && grid_values <= kSmallGrid) {
    if (active_) at::set_num_threads(1);
  }
  ~SmallGridThreads() {
    if (active_) at::set_num_threads(threads_);
  }

 private:
  int threads_;
  bool active_;
};

// MLPs of at most this many multiply-adds per layer run as plain loops (an
// ATen call from C++ costs about a microsecond, and a pass makes ten or
// more); larger ones as batched matmuls.
constexpr int64_t kLoopMacs = 1 << 16;

inline float sigmoid(float v) { return 1.0f / (1.0f + exp_c(-v)); }

// The scale MLP on the indicator grid (mmact.ops.fles.scales._mlp_vjp is
// its reference): hidden = relu(fc1 ind + b1), opre = fc2 hidden + b2,
// scales = softplus(opre), k_ho floored at kKHoMin. fc1 has one trunk
// shared by both heads ((h, C)) or one per head ((2, h, C)).
struct Mlp {
  at::Tensor flat;    // (N, C, G): the indicator grid
  at::Tensor hidden;  // (2, N, h, G) per head, (N, h, G) shared
  at::Tensor opre, scales;  // (2, N, C, G)
  at::Tensor k_ve, k_ho;    // (N, C, G), contiguous
  int64_t n = 0, c = 0, grid = 0, h = 0, trunks = 1;
  bool loops = false;

  Mlp(const at::Tensor& ind, const at::Tensor& w1, const at::Tensor& b1,
      const at::Tensor& w2, const at::Tensor& b2)
      : flat(ind.view({ind.size(0), ind.size(1), ind.size(2) * ind.size(3)})),
        n(flat.size(0)),
        c(flat.size(1)), grid(flat.size(2)), h(w1.size(-2)),
        trunks(w1.dim() == 3 ? 2 : 1),
        loops(n * grid * c * h * 2 <= kLoopMacs) {
    if (loops) {
      forward_loops(w1.contiguous(), b1.contiguous(), w2.contiguous(),
                    b2.contiguous());
    } else {
      forward_matmul(w1, b1, w2, b2);
    }
    k_ve = scales.select(0, 0);
    k_ho = scales.select(0, 1).clamp_min(kKHoMin);
  }

  // Gradients (ind, w1, b1, w2, b2) from those of (k_ve, k_ho), each
  // contiguous (N, C, nh, nw); undefined where not needed.
  variable_list vjp(const at::Tensor& g_ve, const at::Tensor& g_ho,
                    const at::Tensor& w1, const at::Tensor& w2,
                    const std::array<bool, 5>& need) const {
    return loops ? vjp_loops(g_ve, g_ho, w1.contiguous(), w2.contiguous(),
                             need)
                 : vjp_matmul(g_ve, g_ho, w1, w2, need);
  }

 private:
  void forward_matmul(const at::Tensor& w1, const at::Tensor& b1,
                      const at::Tensor& w2, const at::Tensor& b2) {
    const SmallGridThreads one_thread(flat.numel());
    hidden = at::matmul(w1.unsqueeze(-3), flat)
                 .add_(b1.unsqueeze(-2).unsqueeze(-1))
                 .relu_();
    opre = at::matmul(w2.unsqueeze(1), hidden)
               .add_(b2.unsqueeze(1).unsqueeze(-1));
    scales = at::softplus(opre, 1, 20);
  }

  void forward_loops(const at::Tensor& w1, const at::Tensor& b1,
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

  variable_list vjp_matmul(const at::Tensor& g_ve, const at::Tensor& g_ho,
                           const at::Tensor& w1, const at::Tensor& w2,
                           const std::array<bool, 5>& need) const {
    const SmallGridThreads one_thread(flat.numel());
    const auto sizes = flat.sizes();
    const at::Tensor d_opre =
        at::stack({g_ve.view(sizes),
                   g_ho.view(sizes) * scales.select(0, 1).ge(kKHoMin)})
            .mul_(at::sigmoid(opre));  // softplus' = sigmoid
    variable_list out(5);
    if (need[3]) out[3] = at::matmul(d_opre, hidden.transpose(-1, -2)).sum(1);
    if (need[4]) out[4] = d_opre.sum({1, 3});
    if (!(need[0] || need[1] || need[2])) return out;
    at::Tensor d_hidden =
        at::matmul(w2.transpose(-1, -2).unsqueeze(1), d_opre);
    if (trunks == 1) d_hidden = d_hidden.sum(0);
    d_hidden.mul_(hidden.gt(0));
    if (need[0]) {
      at::Tensor g_ind = at::matmul(w1.transpose(-1, -2).unsqueeze(-3),
                                    d_hidden);
      out[0] = trunks == 2 ? g_ind.sum(0) : g_ind;
    }
    if (need[1]) out[1] = at::matmul(d_hidden, flat.transpose(-1, -2)).sum(-3);
    if (need[2]) out[2] = d_hidden.sum({-3, -1});
    return out;
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
      pd[m + i] = ps[m + i] >= kKHoMin ? pho[i] * sigmoid(po[m + i]) : 0.0f;
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

struct Forward {
  at::Tensor y, div;
  Mlp mlp;  // its flat is the indicator grid
};

// Runs f inside the profiler range `name`: the ranges of
// mmact/ops/fles/fused.py, which benchmark_fles.py --profile reads; free
// while no profiler records.
template <typename F>
auto stage(const char* name, F&& f) {
  RECORD_FUNCTION(name, std::vector<c10::IValue>());
  return f();
}

Forward forward_cpu(const at::Tensor& x, const at::Tensor& w1,
                    const at::Tensor& b1, const at::Tensor& w2,
                    const at::Tensor& b2, const Grid& g, const Gate& gate,
                    int64_t mode) {
  // The MLP's matmuls stay float32 under autocast (the Python path leaves
  // autocast around FleS).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::Tensor ind = g.windows(), div = g.windows();
  stage("fles.stats", [&] {
    check_kernel(fles_stats_run(x.data_ptr<float>(), ind.data_ptr<float>(),
                                div.data_ptr<float>(), mode, g.h, g.w, g.kh,
                                g.kw, g.nh, g.nw, g.planes(),
                                g.min_per_thread, g.threads),
                 "fles.stats");
  });
  Mlp mlp = stage("fles.mlp", [&] { return Mlp(ind, w1, b1, w2, b2); });
  at::Tensor y = mmact::empty_cpu(x.sizes(), at::kFloat);
  stage("fles.apply", [&] {
    check_kernel(gate.apply(x.data_ptr<float>(), y.data_ptr<float>(),
                            mlp.k_ve.data_ptr<float>(),
                            mlp.k_ho.data_ptr<float>(), gate.cst, g.h, g.w,
                            g.kh, g.kw, g.nh, g.nw, g.planes(),
                            g.min_per_thread, g.threads),
                 "fles.apply");
  });
  return {std::move(y), std::move(div), std::move(mlp)};
}

// The backward node, written as torch's generated nodes are (see
// apa_op.cpp): the inputs as SavedVariables (their versions checked), the
// MLP's intermediates on the small grid as plain tensors.
struct FleSBackward final : public torch::autograd::TraceableFunction {
  torch::autograd::SavedVariable x_, w1_, w2_;
  at::Tensor div_;
  std::unique_ptr<Mlp> mlp_;
  int64_t kh_ = 1, kw_ = 1, mode_ = 0;
  const Gate* gate_ = nullptr;

  std::string name() const override { return "mmact::fles_backward"; }

  void release_variables() override {
    x_.reset_data();
    w1_.reset_data();
    w2_.reset_data();
    div_.reset();
    mlp_.reset();
  }

  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return variable_list(5);
    TORCH_CHECK(mlp_ != nullptr, "mmact::fles: backward through the graph a "
                "second time (its buffers were freed); pass retain_graph=True");
    const at::Tensor x = x_.unpack(), w1 = w1_.unpack(), w2 = w2_.unpack();
    variable_list out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      c10::impl::ExcludeDispatchKeyGuard no_autocast(
          c10::autocast_dispatch_keyset);
      const Grid g(x, kh_, kw_);
      const at::Tensor go = grads[0].to(at::kFloat).contiguous();
      at::Tensor gx = mmact::empty_cpu(x.sizes(), at::kFloat);
      at::Tensor g_ve = g.windows(), g_ho = g.windows();
      stage("fles.bwd.gate", [&] {
        check_kernel(
            gate_->backward(x.data_ptr<float>(), go.data_ptr<float>(),
                            gx.data_ptr<float>(), mlp_->k_ve.data_ptr<float>(),
                            mlp_->k_ho.data_ptr<float>(), gate_->cst,
                            g_ve.data_ptr<float>(), g_ho.data_ptr<float>(),
                            g.h, g.w, g.kh, g.kw, g.nh, g.nw, g.planes(),
                            g.min_per_thread, g.threads),
            "fles.bwd.gate");
      });
      // the indicator's gradient is needed for x's, and always computed
      out = stage("fles.bwd.mlp", [&] {
        return mlp_->vjp(g_ve, g_ho, w1, w2,
                         {true, should_compute_output(1),
                          should_compute_output(2), should_compute_output(3),
                          should_compute_output(4)});
      });
      stage("fles.bwd.indicator", [&] {
        const at::Tensor g_ind = out[0].contiguous();
        check_kernel(
            fles_ind_bwd_run(x.data_ptr<float>(), gx.data_ptr<float>(),
                             g_ind.data_ptr<float>(), div_.data_ptr<float>(),
                             mode_, g.h, g.w, g.kh, g.kw, g.nh, g.nw,
                             g.planes(), g.min_per_thread, g.threads),
            "fles.bwd.indicator");
      });
      out[0] = should_compute_output(0) ? gx : at::Tensor();
    }
    return mmact::once_differentiable(std::move(out), "fles");
  }
};

at::Tensor cpu(const at::Tensor& x, const at::Tensor& w1,
               const at::Tensor& b1, const at::Tensor& w2,
               const at::Tensor& b2, int64_t kh, int64_t kw,
               c10::string_view gate, c10::string_view mode) {
  check_inputs(x, w1, b1, w2, b2, kh, kw);
  const at::Tensor xc = x.contiguous();
  return forward_cpu(xc, w1, b1, w2, b2, Grid(xc, kh, kw), find_gate(gate),
                     find_mode(mode))
      .y;
}

// Records the node only when a gradient is wanted (eval and no_grad calls
// skip it and keep nothing).
at::Tensor autograd(const at::Tensor& x, const at::Tensor& w1,
                    const at::Tensor& b1, const at::Tensor& w2,
                    const at::Tensor& b2, int64_t kh, int64_t kw,
                    c10::string_view gate, c10::string_view mode) {
  mmact::refuse_tangents("fles", x, w1, b1, w2, b2);
  const bool record = at::GradMode::is_enabled() &&
                      (x.requires_grad() || w1.requires_grad() ||
                       b1.requires_grad() || w2.requires_grad() ||
                       b2.requires_grad());
  if (!record) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return cpu(x, w1, b1, w2, b2, kh, kw, gate, mode);
  }
  check_inputs(x, w1, b1, w2, b2, kh, kw);
  const Gate& rho = find_gate(gate);
  const int64_t mode_index = find_mode(mode);
  at::Tensor xc;
  Forward f = [&] {
    // below autograd, so that copying a non-contiguous x records no node
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    xc = x.contiguous();
    return forward_cpu(xc, w1, b1, w2, b2, Grid(xc, kh, kw), rho,
                       mode_index);
  }();
  mmact::NodePtr node = mmact::make_node<FleSBackward>();
  auto* fles = static_cast<FleSBackward*>(node.get());
  fles->set_next_edges(torch::autograd::collect_next_edges(x, w1, b1, w2, b2));
  fles->x_ = torch::autograd::SavedVariable(xc, false);
  fles->w1_ = torch::autograd::SavedVariable(w1, false);
  fles->w2_ = torch::autograd::SavedVariable(w2, false);
  fles->div_ = std::move(f.div);
  fles->mlp_ = std::make_unique<Mlp>(std::move(f.mlp));
  fles->kh_ = kh;
  fles->kw_ = kw;
  fles->mode_ = mode_index;
  fles->gate_ = &rho;
  torch::autograd::set_history(f.y, node);
  return f.y;
}

using Signature = at::Tensor(const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, int64_t, int64_t,
                             c10::string_view, c10::string_view);

// The Python entry (as apa_op.cpp's), what FleS layers and
// mmact.ops.fles.fused call: it takes a call on a plain contiguous float32
// CPU map with float32 CPU MLP weights (mmact::direct_call) and declines any
// other with None, which mmact.ops.fles.fused._implementation decides.
PyObject* python_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mmact::fles", "")
                             .typed<Signature>();
  bool ok = nargs == 9 && PyLong_Check(args[5]) && !PyBool_Check(args[5]) &&
            PyLong_Check(args[6]) && !PyBool_Check(args[6]) &&
            PyUnicode_Check(args[7]) && PyUnicode_Check(args[8]);
  for (Py_ssize_t i = 0; ok && i < 5; ++i) {
    ok = THPVariable_CheckExact(args[i]) &&
         THPVariable_Unpack(args[i]).is_cpu() &&
         THPVariable_Unpack(args[i]).scalar_type() == at::kFloat;
  }
  if (!ok) Py_RETURN_NONE;
  const at::Tensor &x = THPVariable_Unpack(args[0]),
                   &w1 = THPVariable_Unpack(args[1]),
                   &b1 = THPVariable_Unpack(args[2]),
                   &w2 = THPVariable_Unpack(args[3]),
                   &b2 = THPVariable_Unpack(args[4]);
  if (!(x.layout() == at::kStrided && x.is_contiguous() &&
        mmact::direct_call(x, w1, b1, w2, b2))) {
    Py_RETURN_NONE;
  }
  Py_ssize_t gate_len = 0, mode_len = 0;
  const char* gate = PyUnicode_AsUTF8AndSize(args[7], &gate_len);
  const char* mode = PyUnicode_AsUTF8AndSize(args[8], &mode_len);
  const int64_t kh = PyLong_AsLongLong(args[5]);
  const int64_t kw = PyLong_AsLongLong(args[6]);
  if (PyErr_Occurred()) return nullptr;
  at::Tensor y = mmact::call_from_python(x.numel(), [&] {
    return op.call(x, w1, b1, w2, b2, kh, kw,
                   c10::string_view(gate, gate_len),
                   c10::string_view(mode, mode_len));
  });
  return THPVariable_Wrap(std::move(y));
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"fles",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(python_entry)),
     METH_FASTCALL,
     "mmact::fles(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias, kh, kw, "
     "gate, mode)"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

MMACT_PYTHON_MODULE(methods)

// A fragment: apa_op.cpp registers into the same namespace.
TORCH_LIBRARY_FRAGMENT(mmact, m) {
  m.def("fles(Tensor x, Tensor fc1_weight, Tensor fc1_bias, "
        "Tensor fc2_weight, Tensor fc2_bias, int kh, int kw, str gate, "
        "str mode) -> Tensor");
}

TORCH_LIBRARY_IMPL(mmact, CPU, m) { m.impl("fles", cpu); }

TORCH_LIBRARY_IMPL(mmact, Autograd, m) { m.impl("fles", autograd); }
