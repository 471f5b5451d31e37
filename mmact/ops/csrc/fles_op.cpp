// FleS on tiles or a global window as a torch operator, mmact::fles: the
// pixel passes of fles.c (compiled into this library), the scale MLP and
// its VJP as loops (fles_mlp.h: the small MLPs, where the Python path's ~10
// torch calls each way cost more than the product), the backward as a C++
// autograd node, and a Python entry (module.cpp).
//
// The pixel passes alone, for the Python path (mmact/ops/fles/fused.py:
// larger MLPs, other scale functions and indicators): mmact::fles_stats,
// fles_apply, fles_gate_backward, fles_indicator_backward (no autograd).
//
// One operator, per-device kernels: on a CUDA map the node and the entry
// run the pass operators' CUDA kernels (fles_cuda.cu, registered by the
// CUDA library, mmact.ops.cuda_build) through the dispatcher and the MLP
// as ATen calls (MlpAten: cuBLAS underneath), any MLP size; float16 /
// bfloat16 maps are read and written in their dtype, NCHW or
// channels-last.
//
// Schema: (Tensor x, Tensor fc1_weight, Tensor fc1_bias, Tensor fc2_weight,
// Tensor fc2_bias, int kh, int kw, str gate, str mode, float k_ho_min)
// -> Tensor.
// x: contiguous float32 (N, C, H, W) CPU map, or an NCHW / channels-last
// float32 / float16 / bfloat16 CUDA map; windows kh x kw from the
// top-left corner, cut at the border (kh = H, kw = W: one global window);
// MLP parameters float32 on x's device, per head (fc1 (2, h, C)) or with
// a shared trunk (fc1 (h, C)), heads fc2 (2, C, h), fc2_bias (2, C); gate
// sigmoid, tanh_gate, erf or tanh_softplus; indicator mode positive or mean;
// k_ho_min: the floor of k_ho (mmact.ops.fles.scales.K_HO_MIN).
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

#include "fles_mlp.h"

namespace {

using mmact::Mlp;
using mmact::MlpAten;
using torch::autograd::variable_list;

// Pixels per thread at least.
constexpr int64_t kMinPerThread = 1 << 15;

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

// Whether the kernels have the gate / indicator mode `name`.
bool has_gate(c10::string_view name) {
  for (const Gate& g : kGates) {
    if (name == g.name) return true;
  }
  return false;
}

bool has_mode(c10::string_view name) {
  return name == kModes[0] || name == kModes[1];
}

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
  const at::ScalarType t = x.scalar_type();
  TORCH_CHECK(x.dim() == 4 && ((x.is_cpu() && t == at::kFloat) ||
                               (x.is_cuda() && (t == at::kFloat ||
                                                t == at::kHalf ||
                                                t == at::kBFloat16))),
              "mmact::fles takes a float32 (N, C, H, W) CPU tensor or a "
              "float32 / float16 / bfloat16 CUDA one (got ",
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
    TORCH_CHECK(p->scalar_type() == at::kFloat && p->device() == x.device(),
                "mmact::fles: MLP parameters must be float32 tensors on x's "
                "device, ", x.device(), " (got ", p->scalar_type(), " on ",
                p->device(), ")");
  }
}

// The four pixel passes over the planes of g, outputs preallocated: what
// the whole op and the pass operators both run.
void run_stats(const Grid& g, int64_t mode, const at::Tensor& x,
               at::Tensor& ind, at::Tensor& div) {
  check_kernel(fles_stats_run(x.data_ptr<float>(), ind.data_ptr<float>(),
                              div.data_ptr<float>(), mode, g.h, g.w, g.kh,
                              g.kw, g.nh, g.nw, g.planes(), g.min_per_thread,
                              g.threads),
               "fles.stats");
}

void run_apply(const Grid& g, const Gate& rho, const at::Tensor& x,
               const at::Tensor& kv, const at::Tensor& ko, at::Tensor& y) {
  check_kernel(rho.apply(x.data_ptr<float>(), y.data_ptr<float>(),
                         kv.data_ptr<float>(), ko.data_ptr<float>(), rho.cst,
                         g.h, g.w, g.kh, g.kw, g.nh, g.nw, g.planes(),
                         g.min_per_thread, g.threads),
               "fles.apply");
}

void run_gate_backward(const Grid& g, const Gate& rho, const at::Tensor& x,
                       const at::Tensor& go, const at::Tensor& kv,
                       const at::Tensor& ko, at::Tensor& gx, at::Tensor& g_ve,
                       at::Tensor& g_ho) {
  check_kernel(rho.backward(x.data_ptr<float>(), go.data_ptr<float>(),
                            gx.data_ptr<float>(), kv.data_ptr<float>(),
                            ko.data_ptr<float>(), rho.cst,
                            g_ve.data_ptr<float>(), g_ho.data_ptr<float>(),
                            g.h, g.w, g.kh, g.kw, g.nh, g.nw, g.planes(),
                            g.min_per_thread, g.threads),
               "fles.bwd.gate");
}

void run_indicator_backward(const Grid& g, int64_t mode, const at::Tensor& x,
                            const at::Tensor& g_ind, const at::Tensor& div,
                            const at::Tensor& gx) {
  check_kernel(fles_ind_bwd_run(x.data_ptr<float>(), gx.data_ptr<float>(),
                                g_ind.data_ptr<float>(), div.data_ptr<float>(),
                                mode, g.h, g.w, g.kh, g.kw, g.nh, g.nw,
                                g.planes(), g.min_per_thread, g.threads),
               "fles.bwd.indicator");
}

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
                    const at::Tensor& b2, double k_ho_min, const Grid& g,
                    const Gate& gate, int64_t mode) {
  // The MLP's matmuls stay float32 under autocast (the Python path leaves
  // autocast around FleS).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::Tensor ind = g.windows(), div = g.windows();
  stage("fles.stats", [&] { run_stats(g, mode, x, ind, div); });
  Mlp mlp =
      stage("fles.mlp", [&] { return Mlp(ind, w1, b1, w2, b2, k_ho_min); });
  at::Tensor y = mmact::empty_cpu(x.sizes(), at::kFloat);
  stage("fles.apply",
        [&] { run_apply(g, gate, x, mlp.k_ve, mlp.k_ho, y); });
  return {std::move(y), std::move(div), std::move(mlp)};
}

// The pass operators through the dispatcher: on CUDA maps, the CUDA
// library's kernels (fles_cuda.cu).
using StatsOp = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t,
                                                   int64_t, c10::string_view);
using ApplyOp = at::Tensor(const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, int64_t, int64_t,
                           c10::string_view);
using GateBackwardOp = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const at::Tensor&, int64_t, int64_t, c10::string_view);
using IndicatorBackwardOp = void(const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&, const at::Tensor&,
                                 int64_t, int64_t, c10::string_view);
using InputBackwardOp = at::Tensor(const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, const at::Tensor&,
                                   int64_t, int64_t, c10::string_view,
                                   c10::string_view);

template <typename F>
c10::TypedOperatorHandle<F> pass_op(const char* name) {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow(name, "")
      .template typed<F>();
}

struct ForwardCuda {
  at::Tensor y, div;
  MlpAten mlp;
};

// The whole op on a CUDA map: the pass operators' CUDA kernels around the
// MLP's ATen calls (float32 under autocast, as on the CPU).
ForwardCuda forward_cuda(const at::Tensor& x, const at::Tensor& w1,
                         const at::Tensor& b1, const at::Tensor& w2,
                         const at::Tensor& b2, double k_ho_min, int64_t kh,
                         int64_t kw, const Gate& gate, int64_t mode) {
  static const auto stats = pass_op<StatsOp>("mmact::fles_stats");
  static const auto apply = pass_op<ApplyOp>("mmact::fles_apply");
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::Tensor ind, div;
  std::tie(ind, div) =
      stage("fles.stats", [&] { return stats.call(x, kh, kw, kModes[mode]); });
  MlpAten mlp = stage("fles.mlp", [&] {
    return MlpAten(ind, w1, b1, w2, b2, k_ho_min);
  });
  at::Tensor y = stage("fles.apply", [&] {
    return apply.call(x, mlp.k_ve, mlp.k_ho, kh, kw, gate.name);
  });
  return {std::move(y), std::move(div), std::move(mlp)};
}

// The backward node, written as torch's generated nodes are (see
// apa_op.cpp): the inputs as SavedVariables (their versions checked), the
// MLP's intermediates on the small grid as plain tensors (mlp_ on the CPU,
// mlp_cuda_ on CUDA).
struct FleSBackward final : public torch::autograd::TraceableFunction {
  torch::autograd::SavedVariable x_, w1_, w2_;
  at::Tensor div_;
  std::unique_ptr<Mlp> mlp_;
  std::unique_ptr<MlpAten> mlp_cuda_;
  int64_t kh_ = 1, kw_ = 1, mode_ = 0;
  const Gate* gate_ = nullptr;

  std::string name() const override { return "mmact::fles_backward"; }

  void release_variables() override {
    x_.reset_data();
    w1_.reset_data();
    w2_.reset_data();
    div_.reset();
    mlp_.reset();
    mlp_cuda_.reset();
  }

  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return variable_list(5);
    TORCH_CHECK(mlp_ != nullptr || mlp_cuda_ != nullptr,
                "mmact::fles: backward through the graph a second time (its "
                "buffers were freed); pass retain_graph=True");
    const at::Tensor x = x_.unpack(), w1 = w1_.unpack(), w2 = w2_.unpack();
    variable_list out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      c10::impl::ExcludeDispatchKeyGuard no_autocast(
          c10::autocast_dispatch_keyset);
      const std::array<bool, 5> need = {
          true, should_compute_output(1), should_compute_output(2),
          should_compute_output(3), should_compute_output(4)};
      if (x.is_cuda()) {
        out = backward_cuda(grads[0], x, w2, need);
        return mmact::once_differentiable(std::move(out), "fles_fused");
      }
      const Grid g(x, kh_, kw_);
      const at::Tensor go = grads[0].to(at::kFloat).contiguous();
      at::Tensor gx = mmact::empty_cpu(x.sizes(), at::kFloat);
      at::Tensor g_ve = g.windows(), g_ho = g.windows();
      stage("fles.bwd.gate", [&] {
        run_gate_backward(g, *gate_, x, go, mlp_->k_ve, mlp_->k_ho, gx, g_ve,
                          g_ho);
      });
      // the indicator's gradient is needed for x's, and always computed
      out = stage("fles.bwd.mlp", [&] {
        return mlp_->vjp(g_ve, g_ho, w1, w2, need);
      });
      stage("fles.bwd.indicator", [&] {
        run_indicator_backward(g, mode_, x, out[0].contiguous(), div_, gx);
      });
      out[0] = should_compute_output(0) ? gx : at::Tensor();
    }
    return mmact::once_differentiable(std::move(out), "fles_fused");
  }

  // The CUDA branch: gate backward (grad_x in x's dtype and layout, the
  // scales' window gradients), the MLP's VJP, the indicator's term added
  // into grad_x; a half map's grad_x is then computed whole by the input
  // pass (both terms in float32, one rounding; its gate pass's grad_x is
  // not read).
  variable_list backward_cuda(const at::Tensor& go, const at::Tensor& x,
                              const at::Tensor& w2,
                              const std::array<bool, 5>& need) {
    static const auto gate_backward =
        pass_op<GateBackwardOp>("mmact::fles_gate_backward");
    static const auto indicator_backward =
        pass_op<IndicatorBackwardOp>("mmact::fles_indicator_backward");
    static const auto input_backward =
        pass_op<InputBackwardOp>("mmact::fles_input_backward");
    at::Tensor gx, g_ve, g_ho;
    std::tie(gx, g_ve, g_ho) = stage("fles.bwd.gate", [&] {
      return gate_backward.call(x, go, mlp_cuda_->k_ve, mlp_cuda_->k_ho, kh_,
                                kw_, gate_->name);
    });
    variable_list out = stage("fles.bwd.mlp", [&] {
      return mlp_cuda_->vjp(g_ve, g_ho, w2, need);
    });
    stage("fles.bwd.indicator", [&] {
      if (x.scalar_type() == at::kFloat) {
        indicator_backward.call(gx, x, out[0], div_, kh_, kw_, kModes[mode_]);
      } else {
        gx = input_backward.call(x, go, mlp_cuda_->k_ve, mlp_cuda_->k_ho,
                                 out[0], div_, kh_, kw_, gate_->name,
                                 kModes[mode_]);
      }
    });
    out[0] = should_compute_output(0) ? gx : at::Tensor();
    return out;
  }
};

// The forward without autograd, registered for CPU and CUDA maps.
at::Tensor forward_op(const at::Tensor& x, const at::Tensor& w1,
                      const at::Tensor& b1, const at::Tensor& w2,
                      const at::Tensor& b2, int64_t kh, int64_t kw,
                      c10::string_view gate, c10::string_view mode,
                      double k_ho_min) {
  check_inputs(x, w1, b1, w2, b2, kh, kw);
  if (x.is_cuda()) {
    return forward_cuda(x, w1, b1, w2, b2, k_ho_min, kh, kw, find_gate(gate),
                        find_mode(mode))
        .y;
  }
  const at::Tensor xc = x.contiguous();
  return forward_cpu(xc, w1, b1, w2, b2, k_ho_min, Grid(xc, kh, kw),
                     find_gate(gate), find_mode(mode))
      .y;
}

// Records the node only when a gradient is wanted (eval and no_grad calls
// skip it and keep nothing).
at::Tensor autograd(const at::Tensor& x, const at::Tensor& w1,
                    const at::Tensor& b1, const at::Tensor& w2,
                    const at::Tensor& b2, int64_t kh, int64_t kw,
                    c10::string_view gate, c10::string_view mode,
                    double k_ho_min) {
  mmact::refuse_tangents("fles", x, w1, b1, w2, b2);
  const bool record = at::GradMode::is_enabled() &&
                      (x.requires_grad() || w1.requires_grad() ||
                       b1.requires_grad() || w2.requires_grad() ||
                       b2.requires_grad());
  if (!record) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return forward_op(x, w1, b1, w2, b2, kh, kw, gate, mode, k_ho_min);
  }
  check_inputs(x, w1, b1, w2, b2, kh, kw);
  const Gate& rho = find_gate(gate);
  const int64_t mode_index = find_mode(mode);
  mmact::NodePtr node = mmact::make_node<FleSBackward>();
  auto* fles = static_cast<FleSBackward*>(node.get());
  fles->set_next_edges(torch::autograd::collect_next_edges(x, w1, b1, w2, b2));
  fles->w1_ = torch::autograd::SavedVariable(w1, false);
  fles->w2_ = torch::autograd::SavedVariable(w2, false);
  fles->kh_ = kh;
  fles->kw_ = kw;
  fles->mode_ = mode_index;
  fles->gate_ = &rho;
  if (x.is_cuda()) {
    ForwardCuda f = [&] {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      return forward_cuda(x, w1, b1, w2, b2, k_ho_min, kh, kw, rho,
                          mode_index);
    }();
    fles->x_ = torch::autograd::SavedVariable(x, false);
    fles->div_ = std::move(f.div);
    fles->mlp_cuda_ = std::make_unique<MlpAten>(std::move(f.mlp));
    torch::autograd::set_history(f.y, node);
    return f.y;
  }
  at::Tensor xc;
  Forward f = [&] {
    // below autograd, so that copying a non-contiguous x records no node
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    xc = x.contiguous();
    return forward_cpu(xc, w1, b1, w2, b2, k_ho_min, Grid(xc, kh, kw), rho,
                       mode_index);
  }();
  fles->x_ = torch::autograd::SavedVariable(xc, false);
  fles->div_ = std::move(f.div);
  fles->mlp_ = std::make_unique<Mlp>(std::move(f.mlp));
  torch::autograd::set_history(f.y, node);
  return f.y;
}

using Signature = at::Tensor(const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, int64_t, int64_t,
                             c10::string_view, c10::string_view, double);


// Whether the operator's loops run this MLP (the entry's rule; larger ones
// take the Python path, whose torch MLP runs on matmuls).
bool loop_sized(const at::Tensor& x, const at::Tensor& w1, int64_t kh,
                int64_t kw) {
  if (x.dim() != 4 || w1.dim() < 2 || kh <= 0 || kw <= 0) return false;
  const int64_t grid =
      ((x.size(2) + kh - 1) / kh) * ((x.size(3) + kw - 1) / kw);
  return x.size(0) * grid * x.size(1) * w1.size(-2) * 2 <= mmact::kLoopMacs;
}

// The pixel passes alone, on (planes, H, W) maps and (planes, nh, nw)
// window values, all float32 and contiguous (mmact.ops.fles.fused checks).
Grid pass_grid(const at::Tensor& x, int64_t kh, int64_t kw) {
  TORCH_CHECK(x.dim() == 3 && x.is_cpu() && x.scalar_type() == at::kFloat &&
                  x.is_contiguous() && 0 < kh && kh <= x.size(1) && 0 < kw &&
                  kw <= x.size(2),
              "mmact::fles passes take a contiguous float32 (planes, H, W) "
              "CPU map and a window that fits it (got ",
              x.scalar_type(), " ", x.sizes(), ", window (", kh, ", ", kw,
              "))");
  return Grid(x.unsqueeze(1), kh, kw);
}

at::Tensor window_values(const Grid& g) {
  return mmact::empty_cpu({g.planes(), g.nh, g.nw}, at::kFloat);
}

// A pass's per-window input: float32 CPU values, one per window of every
// plane (the kernels read planes * nh * nw of them).
void check_window_values(const Grid& g, const at::Tensor& t,
                         const char* name) {
  TORCH_CHECK(t.is_cpu() && t.scalar_type() == at::kFloat &&
                  t.numel() == g.planes() * g.nh * g.nw,
              "mmact::fles passes: ", name, " must hold float32 CPU values "
              "for the (", g.planes(), ", ", g.nh, ", ", g.nw,
              ") windows (got ", t.scalar_type(), " ", t.sizes(), " on ",
              t.device(), ")");
}

std::tuple<at::Tensor, at::Tensor> stats_pass(const at::Tensor& x, int64_t kh,
                                              int64_t kw,
                                              c10::string_view mode) {
  const Grid g = pass_grid(x, kh, kw);
  at::Tensor ind = window_values(g), div = window_values(g);
  run_stats(g, find_mode(mode), x, ind, div);
  return {ind, div};
}

at::Tensor apply_pass(const at::Tensor& x, const at::Tensor& k_ve,
                      const at::Tensor& k_ho, int64_t kh, int64_t kw,
                      c10::string_view gate) {
  const Grid g = pass_grid(x, kh, kw);
  const Gate& rho = find_gate(gate);
  check_window_values(g, k_ve, "k_ve");
  check_window_values(g, k_ho, "k_ho");
  const at::Tensor kv = k_ve.contiguous(), ko = k_ho.contiguous();
  at::Tensor y = mmact::empty_cpu(x.sizes(), at::kFloat);
  run_apply(g, rho, x, kv, ko, y);
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gate_backward_pass(
    const at::Tensor& x, const at::Tensor& grad_out, const at::Tensor& k_ve,
    const at::Tensor& k_ho, int64_t kh, int64_t kw, c10::string_view gate) {
  const Grid g = pass_grid(x, kh, kw);
  const Gate& rho = find_gate(gate);
  TORCH_CHECK(grad_out.sizes() == x.sizes() && grad_out.is_cpu() &&
                  grad_out.scalar_type() == at::kFloat,
              "mmact::fles_gate_backward takes a float32 CPU grad_out of x's "
              "shape ", x.sizes(), " (got ", grad_out.scalar_type(), " ",
              grad_out.sizes(), ")");
  check_window_values(g, k_ve, "k_ve");
  check_window_values(g, k_ho, "k_ho");
  const at::Tensor go = grad_out.contiguous(), kv = k_ve.contiguous(),
                   ko = k_ho.contiguous();
  at::Tensor gx = mmact::empty_cpu(x.sizes(), at::kFloat);
  at::Tensor g_ve = window_values(g), g_ho = window_values(g);
  run_gate_backward(g, rho, x, go, kv, ko, gx, g_ve, g_ho);
  return {gx, g_ve, g_ho};
}

void indicator_backward_pass(const at::Tensor& grad_x, const at::Tensor& x,
                             const at::Tensor& g_ind, const at::Tensor& div,
                             int64_t kh, int64_t kw, c10::string_view mode) {
  const Grid g = pass_grid(x, kh, kw);
  TORCH_CHECK(grad_x.sizes() == x.sizes() && grad_x.is_contiguous() &&
                  grad_x.scalar_type() == at::kFloat,
              "mmact::fles_indicator_backward adds into a contiguous float32 "
              "grad_x of x's shape");
  const at::Tensor q = g_ind.to(at::kFloat).contiguous(), d = div.contiguous();
  check_window_values(g, q, "g_ind");
  check_window_values(g, d, "div");
  run_indicator_backward(g, find_mode(mode), x, q, d, grad_x);
}

// Whether the Python entry takes CUDA calls: MMACT_CUDA_KERNELS=1 and the
// CUDA library loaded (mmact.ops.fles.cpu.cuda_routed sets it).
bool route_cuda = false;

// Whether the entry takes x and the MLP parameters: on the CPU a plain
// contiguous float32 map with float32 CPU weights small enough for the
// loops; on CUDA (routed) a plain float32 / float16 / bfloat16 NCHW or
// channels-last map with float32 weights on its device, any MLP size.
bool entry_takes(const at::Tensor& x, const at::Tensor& w1,
                 const at::Tensor& b1, const at::Tensor& w2,
                 const at::Tensor& b2, int64_t kh, int64_t kw) {
  if (x.layout() != at::kStrided || x.dim() != 4) return false;
  for (const at::Tensor* p : {&w1, &b1, &w2, &b2}) {
    if (p->scalar_type() != at::kFloat || p->device() != x.device()) {
      return false;
    }
  }
  if (x.is_cpu()) {
    return x.scalar_type() == at::kFloat && x.is_contiguous() &&
           loop_sized(x, w1, kh, kw);
  }
  const at::ScalarType t = x.scalar_type();
  return route_cuda && x.is_cuda() &&
         (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) &&
         (x.is_contiguous() ||
          x.is_contiguous(at::MemoryFormat::ChannelsLast));
}

}  // namespace

namespace mmact {

// The Python entry, what FleS layers and mmact.ops.fles.fused call: it
// takes the calls entry_takes describes, with a gate and indicator mode
// the kernels have (mmact::direct_call), and declines any other with None,
// as mmact.ops.fles.dispatch's table decides.
PyObject* python_fles(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mmact::fles", "")
                             .typed<Signature>();
  bool ok = nargs == 10 && PyLong_Check(args[5]) && !PyBool_Check(args[5]) &&
            PyLong_Check(args[6]) && !PyBool_Check(args[6]) &&
            PyUnicode_Check(args[7]) && PyUnicode_Check(args[8]) &&
            PyFloat_Check(args[9]);
  for (Py_ssize_t i = 0; ok && i < 5; ++i) {
    ok = THPVariable_CheckExact(args[i]);
  }
  if (!ok) Py_RETURN_NONE;
  const at::Tensor &x = THPVariable_Unpack(args[0]),
                   &w1 = THPVariable_Unpack(args[1]),
                   &b1 = THPVariable_Unpack(args[2]),
                   &w2 = THPVariable_Unpack(args[3]),
                   &b2 = THPVariable_Unpack(args[4]);
  const int64_t kh = PyLong_AsLongLong(args[5]);
  const int64_t kw = PyLong_AsLongLong(args[6]);
  if (PyErr_Occurred()) return nullptr;
  if (!(entry_takes(x, w1, b1, w2, b2, kh, kw) &&
        mmact::direct_call(x, w1, b1, w2, b2))) {
    Py_RETURN_NONE;
  }
  Py_ssize_t gate_len = 0, mode_len = 0;
  const char* gate = PyUnicode_AsUTF8AndSize(args[7], &gate_len);
  const char* mode = PyUnicode_AsUTF8AndSize(args[8], &mode_len);
  if (gate == nullptr || mode == nullptr) return nullptr;
  // a gate or indicator the kernels lack: the Python path's (or its error)
  if (!has_gate(c10::string_view(gate, gate_len)) ||
      !has_mode(c10::string_view(mode, mode_len))) {
    Py_RETURN_NONE;
  }
  const double k_ho_min = PyFloat_AS_DOUBLE(args[9]);
  at::Tensor y = mmact::call_from_python(x.numel(), [&] {
    return op.call(x, w1, b1, w2, b2, kh, kw,
                   c10::string_view(gate, gate_len),
                   c10::string_view(mode, mode_len), k_ho_min);
  });
  return THPVariable_Wrap(std::move(y));
  END_HANDLE_TH_ERRORS
}

PyObject* python_fles_routes(PyObject*, PyObject* const* args,
                             Py_ssize_t nargs) {
  if (nargs != 1 || !PyBool_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "fles_routes(cuda: bool)");
    return nullptr;
  }
  route_cuda = args[0] == Py_True;
  Py_RETURN_NONE;
}

}  // namespace mmact

// A fragment: apa_op.cpp registers into the same namespace.
TORCH_LIBRARY_FRAGMENT(mmact, m) {
  m.def("fles(Tensor x, Tensor fc1_weight, Tensor fc1_bias, "
        "Tensor fc2_weight, Tensor fc2_bias, int kh, int kw, str gate, "
        "str mode, float k_ho_min) -> Tensor");
  m.def("fles_stats(Tensor x, int kh, int kw, str mode) -> (Tensor, Tensor)");
  m.def("fles_apply(Tensor x, Tensor k_ve, Tensor k_ho, int kh, int kw, "
        "str gate) -> Tensor");
  m.def("fles_gate_backward(Tensor x, Tensor grad_out, Tensor k_ve, "
        "Tensor k_ho, int kh, int kw, str gate) -> (Tensor, Tensor, Tensor)");
  m.def("fles_indicator_backward(Tensor(a!) grad_x, Tensor x, Tensor g_ind, "
        "Tensor div, int kh, int kw, str mode) -> ()");
  // CUDA maps only (fles_cuda.cu): grad_x of both passes at once
  m.def("fles_input_backward(Tensor x, Tensor grad_out, Tensor k_ve, "
        "Tensor k_ho, Tensor g_ind, Tensor div, int kh, int kw, str gate, "
        "str mode) -> Tensor");
}

TORCH_LIBRARY_IMPL(mmact, CPU, m) {
  m.impl("fles", forward_op);
  m.impl("fles_stats", stats_pass);
  m.impl("fles_apply", apply_pass);
  m.impl("fles_gate_backward", gate_backward_pass);
  m.impl("fles_indicator_backward", indicator_backward_pass);
}

// The whole op's CUDA forward is host code (the pass operators' CUDA
// kernels around ATen calls): registered here, beside its CPU one.
TORCH_LIBRARY_IMPL(mmact, CUDA, m) { m.impl("fles", forward_op); }

TORCH_LIBRARY_IMPL(mmact, Autograd, m) { m.impl("fles", autograd); }
