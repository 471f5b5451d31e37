// APA / AGLU as torch operators, mmact::apa and mmact::aglu: the kernels of
// apa.c (compiled into this library) behind the dispatcher, with the
// backward as a C++ autograd node, so that a call on a CPU tensor costs what
// a native activation's does (no Python autograd.Function, no ctypes).
//
// Schema: (Tensor x, Tensor kappa, Tensor lambda_, float lambda_min,
// int channel_dim) -> Tensor. x: float32 / float16 / bfloat16 CPU tensor
// (half precision is evaluated in float32); kappa, lambda_: raw float32
// parameters with 1 or C values each (C = x.size(channel_dim)); lambda is
// clamped to lambda_min inside, and the gradients are those of the raw
// parameters (zero for lambda where it is clamped), as in mmact/ops/apa.py.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/library.h>

#include <string>

extern "C" {
#include "apa.c"
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using Forward = void (*)(const float*, float*, const float*, const float*,
                         float, int64_t, int64_t, int64_t, int64_t);
using Backward = int64_t (*)(const float*, const float*, float*,
                             const float*, const float*, float, int64_t,
                             int64_t, int64_t, int64_t, float*, float*);

struct Entries {
  const char* name;
  Forward forward;
  Backward backward;
};
const Entries kApa{"apa", apa_forward, apa_backward};
const Entries kAglu{"aglu", aglu_forward, aglu_backward};

// The same words as mmact.ops.apa._broadcast_shape.
void check_count(const at::Tensor& p, const char* what, const at::Tensor& x,
                 int64_t dim) {
  const int64_t channels = x.size(dim);
  TORCH_CHECK_VALUE(p.numel() == 1 || p.numel() == channels, what, " has ",
                    p.numel(), " values (num_parameters=", p.numel(),
                    ") but the input has ", channels, " channels at dim ",
                    dim, " (shape ", x.sizes(), "); use num_parameters=1 or ",
                    channels, ", or set channel_dim to the channel axis");
}

// x viewed as (outer, C, inner), parameters with one value each or C each
// (a shared one beside a per-channel one is expanded).
struct Layout {
  int64_t channels = 1, inner = 1;
  at::Tensor kappa, lambda;
};

Layout layout(const at::Tensor& x, const at::Tensor& kappa,
              const at::Tensor& lambda, int64_t channel_dim) {
  TORCH_CHECK(kappa.scalar_type() == at::kFloat &&
                  lambda.scalar_type() == at::kFloat,
              "mmact::apa / aglu take float32 parameters");
  Layout out;
  out.kappa = kappa.contiguous();
  out.lambda = lambda.contiguous();
  const int64_t count = std::max(kappa.numel(), lambda.numel());
  if (count == 1) {
    out.inner = std::max<int64_t>(x.numel(), 1);
    return out;
  }
  TORCH_CHECK_VALUE(-x.dim() <= channel_dim && channel_dim < x.dim(),
                    "channel_dim=", channel_dim,
                    " is out of range for an input with ", x.dim(), " dims");
  const int64_t dim = channel_dim < 0 ? channel_dim + x.dim() : channel_dim;
  check_count(kappa, "kappa", x, dim);
  check_count(lambda, "lambda", x, dim);
  out.channels = count;
  for (int64_t d = dim + 1; d < x.dim(); ++d) out.inner *= x.size(d);
  if (out.kappa.numel() != count) out.kappa = out.kappa.expand({count}).contiguous();
  if (out.lambda.numel() != count) out.lambda = out.lambda.expand({count}).contiguous();
  return out;
}

at::Tensor as_float(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat ? t.contiguous()
                                       : t.to(at::kFloat).contiguous();
}

at::Tensor forward_cpu(const Entries& e, const at::Tensor& x,
                       const at::Tensor& kappa, const at::Tensor& lambda,
                       double lambda_min, int64_t channel_dim) {
  const Layout l = layout(x, kappa, lambda, channel_dim);
  const at::Tensor z = as_float(x);
  at::Tensor y = at::empty_like(z);
  e.forward(z.data_ptr<float>(), y.data_ptr<float>(),
            l.kappa.data_ptr<float>(), l.lambda.data_ptr<float>(),
            static_cast<float>(lambda_min), l.channels, l.inner, z.numel(),
            at::get_num_threads());
  return y.scalar_type() == x.scalar_type() ? y : y.to(x.scalar_type());
}

// The gradient of a parameter from its kernel gradient: already shaped as
// the parameter (empty_like its contiguous form) unless it was expanded.
at::Tensor to_param(const at::Tensor& grad, const at::Tensor& p) {
  return grad.numel() == p.numel() ? grad : grad.sum().view(p.sizes());
}

// Under create_graph the kernel's gradients hang off a node that raises when
// a second derivative reaches it (what torch.autograd.function's
// once_differentiable does), instead of being constants that would drop
// the second derivative silently.
variable_list once_differentiable(variable_list grads, const char* name) {
  for (auto& g : grads) {
    if (g.defined()) {
      g = g.detach();
      g.set_requires_grad(true);
    }
  }
  torch::autograd::DelayedError error(
      std::string("mmact::") + name +
          " cannot be differentiated twice (its backward is a fused kernel)",
      static_cast<int>(grads.size()));
  return error.apply(std::move(grads));
}

template <const Entries& E>
struct Eta : public torch::autograd::Function<Eta<E>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& kappa, const at::Tensor& lambda,
                            double lambda_min, int64_t channel_dim) {
    ctx->save_for_backward({x, kappa, lambda});
    ctx->saved_data["lambda_min"] = lambda_min;
    ctx->saved_data["channel_dim"] = channel_dim;
    return forward_cpu(E, x, kappa, lambda, lambda_min, channel_dim);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &kappa = saved[1], &lambda = saved[2];
    const Layout l = layout(x, kappa, lambda,
                            ctx->saved_data["channel_dim"].toInt());
    const at::Tensor z = as_float(x), go = as_float(grads[0]);
    at::Tensor gx = at::empty_like(z);
    const bool need_k = ctx->needs_input_grad(1);
    const bool need_l = ctx->needs_input_grad(2);
    at::Tensor gk = need_k ? at::empty_like(l.kappa) : at::Tensor();
    at::Tensor gl = need_l ? at::empty_like(l.lambda) : at::Tensor();
    const int64_t status = E.backward(
        z.data_ptr<float>(), go.data_ptr<float>(), gx.data_ptr<float>(),
        l.kappa.data_ptr<float>(), l.lambda.data_ptr<float>(),
        static_cast<float>(ctx->saved_data["lambda_min"].toDouble()),
        l.channels, l.inner, z.numel(), at::get_num_threads(),
        need_k ? gk.data_ptr<float>() : nullptr,
        need_l ? gl.data_ptr<float>() : nullptr);
    TORCH_CHECK(status == 0, E.name, " backward: no memory for its sums");
    variable_list out = {
        gx.scalar_type() == x.scalar_type() ? gx : gx.to(x.scalar_type()),
        need_k ? to_param(gk, kappa) : at::Tensor(),
        need_l ? to_param(gl, lambda) : at::Tensor(), at::Tensor(),
        at::Tensor()};
    return at::GradMode::is_enabled() ? once_differentiable(std::move(out), E.name)
                                      : out;
  }
};

template <const Entries& E>
at::Tensor cpu(const at::Tensor& x, const at::Tensor& kappa,
               const at::Tensor& lambda, double lambda_min,
               int64_t channel_dim) {
  return forward_cpu(E, x, kappa, lambda, lambda_min, channel_dim);
}

// Records the node only when a gradient is wanted (eval and no_grad calls
// skip building it: most of what such a call costs).
template <const Entries& E>
at::Tensor autograd(const at::Tensor& x, const at::Tensor& kappa,
                    const at::Tensor& lambda, double lambda_min,
                    int64_t channel_dim) {
  if (at::GradMode::is_enabled() &&
      (x.requires_grad() || kappa.requires_grad() || lambda.requires_grad())) {
    return Eta<E>::apply(x, kappa, lambda, lambda_min, channel_dim);
  }
  return forward_cpu(E, x, kappa, lambda, lambda_min, channel_dim);
}

}  // namespace

TORCH_LIBRARY(mmact, m) {
  m.def("apa(Tensor x, Tensor kappa, Tensor lambda_, float lambda_min, "
        "int channel_dim) -> Tensor");
  m.def("aglu(Tensor x, Tensor kappa, Tensor lambda_, float lambda_min, "
        "int channel_dim) -> Tensor");
}

TORCH_LIBRARY_IMPL(mmact, CPU, m) {
  m.impl("apa", cpu<kApa>);
  m.impl("aglu", cpu<kAglu>);
}

TORCH_LIBRARY_IMPL(mmact, Autograd, m) {
  m.impl("apa", autograd<kApa>);
  m.impl("aglu", autograd<kAglu>);
}
