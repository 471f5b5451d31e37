// APA / AGLU as torch operators, mmact::apa and mmact::aglu: the kernels of
// apa.c (compiled into this library) behind the dispatcher, with the
// backward as a C++ autograd node, and a Python entry per operator
// (module.cpp), so that a call on a CPU tensor costs about what a native
// activation's does (no Python autograd.Function).
//
// mmact::apa_backward_rebuilt / aglu_backward_rebuilt: the backward at an
// input rebuilt per element from src * scale + shift + other * other_scale
// (mmact.ops.apa.rebuilt_backward; no autograd, called from a backward).
// mmact::apa_backward / aglu_backward: the node's backward as an operator.
//
// One operator, per-device kernels: the schemas, the autograd node and the
// Python entries are here; the CPU kernels are registered here, the CUDA
// kernels by the CUDA library (apa_cuda.cu, mmact.ops.cuda_build) for the
// same operators. The node and the entry branch on the input's device: CPU
// calls go straight to the C kernels, CUDA calls through the dispatcher to
// the CUDA library's kernels.
//
// Schema: (Tensor x, Tensor kappa, Tensor lambda_, float lambda_min,
// int channel_dim) -> Tensor. x: float32 / float16 / bfloat16 CPU tensor
// (half precision is evaluated in float32); kappa, lambda_: raw float32
// parameters with 1 or C values each (C = x.size(channel_dim)); lambda is
// clamped to lambda_min inside, and the gradients are those of the raw
// parameters (zero for lambda where it is clamped), as in
// mmact/ops/apa/params.py.
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

#include <string>
#include <tuple>

#include "apa_checks.h"
#include "op_node.h"

extern "C" {
#include "apa.c"
}

namespace {

using torch::autograd::variable_list;

// The kernels' signatures, as apa.h declares them.
using Forward = decltype(&apa_forward);
using Backward = decltype(&apa_backward);
using Rebuilt = decltype(&apa_backward_rebuilt);

struct Entries {
  const char* name;
  Forward forward;
  Backward backward;
  Rebuilt rebuilt;
};
const Entries kApa{"apa", apa_forward, apa_backward, apa_backward_rebuilt};
const Entries kAglu{"aglu", aglu_forward, aglu_backward,
                    aglu_backward_rebuilt};

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
  TORCH_CHECK(x.is_cpu() && kappa.is_cpu() && lambda.is_cpu(),
              "mmact::apa / aglu run on CPU tensors (got x on ", x.device(),
              "); call mmact.ops.apa / aglu, which pick the implementation");
  Layout out;
  out.kappa = kappa.contiguous();
  out.lambda = lambda.contiguous();
  const int64_t dim = mmact::channel_axis(x, kappa, lambda, channel_dim);
  if (dim < 0) {
    out.inner = std::max<int64_t>(x.numel(), 1);
    return out;
  }
  const int64_t count = std::max(kappa.numel(), lambda.numel());
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
  at::Tensor y = mmact::empty_cpu(z.sizes(), at::kFloat);
  const int64_t status = e.forward(
      z.data_ptr<float>(), y.data_ptr<float>(), l.kappa.data_ptr<float>(),
      l.lambda.data_ptr<float>(), static_cast<float>(lambda_min), l.channels,
      l.inner, z.numel(), at::get_num_threads());
  TORCH_CHECK(status == 0, e.name, ": no memory for its channel constants");
  return y.scalar_type() == x.scalar_type() ? y : y.to(x.scalar_type());
}

// The gradient of a parameter from its kernel gradient: already shaped as
// the parameter (empty_like its contiguous form) unless it was expanded.
at::Tensor to_param(const at::Tensor& grad, const at::Tensor& p) {
  return grad.numel() == p.numel() ? grad : grad.sum().view(p.sizes());
}

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// (grad_x, grad_kappa, grad_lambda) of the raw parameters on the CPU: the
// node's CPU branch and the CPU kernel of mmact::<op>_backward.
Grads backward_cpu(const Entries& e, const at::Tensor& grad_out,
                   const at::Tensor& x, const at::Tensor& kappa,
                   const at::Tensor& lambda, double lambda_min,
                   int64_t channel_dim, bool need_k, bool need_l) {
  const Layout l = layout(x, kappa, lambda, channel_dim);
  const at::Tensor z = as_float(x), go = as_float(grad_out);
  at::Tensor gx = mmact::empty_cpu(z.sizes(), at::kFloat), gk, gl;
  if (need_k) gk = mmact::empty_cpu(l.kappa.sizes(), at::kFloat);
  if (need_l) gl = mmact::empty_cpu(l.lambda.sizes(), at::kFloat);
  const int64_t status = e.backward(
      z.data_ptr<float>(), go.data_ptr<float>(), gx.data_ptr<float>(),
      l.kappa.data_ptr<float>(), l.lambda.data_ptr<float>(),
      static_cast<float>(lambda_min), l.channels, l.inner, z.numel(),
      at::get_num_threads(), need_k ? gk.data_ptr<float>() : nullptr,
      need_l ? gl.data_ptr<float>() : nullptr);
  TORCH_CHECK(status == 0, e.name,
              " backward: no memory for its sums or channel constants");
  if (gx.scalar_type() != x.scalar_type()) gx = gx.to(x.scalar_type());
  if (need_k) gk = to_param(gk, kappa);
  if (need_l) gl = to_param(gl, lambda);
  return {gx, gk, gl};
}

template <const Entries& E>
Grads backward_cpu_op(const at::Tensor& grad_out, const at::Tensor& x,
                      const at::Tensor& kappa, const at::Tensor& lambda,
                      double lambda_min, int64_t channel_dim, bool need_kappa,
                      bool need_lambda) {
  return backward_cpu(E, grad_out, x, kappa, lambda, lambda_min, channel_dim,
                      need_kappa, need_lambda);
}

using Signature = at::Tensor(const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, double, int64_t);
using BackwardSignature = Grads(const at::Tensor&, const at::Tensor&,
                                const at::Tensor&, const at::Tensor&, double,
                                int64_t, bool, bool);

// The typed handle of mmact::<name><suffix>, found once.
template <typename F>
c10::TypedOperatorHandle<F> handle(const char* name, const char* suffix) {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow((std::string("mmact::") + name + suffix).c_str(), "")
      .template typed<F>();
}

// The forward below autograd: the CUDA library's kernel through the
// dispatcher for a CUDA input, else the C kernels (which refuse other
// devices, naming them).
template <const Entries& E>
at::Tensor forward_any(const at::Tensor& x, const at::Tensor& kappa,
                       const at::Tensor& lambda, double lambda_min,
                       int64_t channel_dim) {
  if (!x.is_cuda()) {
    return forward_cpu(E, x, kappa, lambda, lambda_min, channel_dim);
  }
  static const auto op = handle<Signature>(E.name, "");
  return op.call(x, kappa, lambda, lambda_min, channel_dim);
}

// The backward node, written as torch's generated nodes are (a Node with
// SavedVariables) rather than a torch::autograd::Function: that one keeps
// its state in string-keyed maps and wraps its outputs, which cost more
// than the whole of a small activation's backward.
template <const Entries& E>
struct EtaBackward final : public torch::autograd::TraceableFunction {
  torch::autograd::SavedVariable x_, kappa_, lambda_;
  double lambda_min_ = 0;
  int64_t channel_dim_ = 1;

  std::string name() const override {
    return std::string("mmact::") + E.name + "_backward";
  }

  void release_variables() override {
    x_.reset_data();
    kappa_.reset_data();
    lambda_.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return variable_list(3);
    const at::Tensor x = x_.unpack(), kappa = kappa_.unpack(),
                     lambda = lambda_.unpack();
    const bool need_k = should_compute_output(1);
    const bool need_l = should_compute_output(2);
    at::Tensor gx, gk, gl;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      if (!x.is_cuda()) {
        std::tie(gx, gk, gl) =
            backward_cpu(E, grads[0], x, kappa, lambda, lambda_min_,
                         channel_dim_, need_k, need_l);
      } else {
        static const auto op = handle<BackwardSignature>(E.name, "_backward");
        std::tie(gx, gk, gl) = op.call(grads[0], x, kappa, lambda,
                                       lambda_min_, channel_dim_, need_k,
                                       need_l);
      }
    }
    variable_list out = {should_compute_output(0) ? gx : at::Tensor(), gk,
                         gl};
    return mmact::once_differentiable(std::move(out), E.name);
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
  mmact::refuse_tangents(E.name, x, kappa, lambda);
  const bool record =
      at::GradMode::is_enabled() &&
      (x.requires_grad() || kappa.requires_grad() || lambda.requires_grad());
  at::Tensor y;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    y = forward_any<E>(x, kappa, lambda, lambda_min, channel_dim);
  }
  if (record) {
    mmact::NodePtr node = mmact::make_node<EtaBackward<E>>();
    auto* eta = static_cast<EtaBackward<E>*>(node.get());
    eta->set_next_edges(torch::autograd::collect_next_edges(x, kappa, lambda));
    eta->x_ = torch::autograd::SavedVariable(x, false);
    eta->kappa_ = torch::autograd::SavedVariable(kappa, false);
    eta->lambda_ = torch::autograd::SavedVariable(lambda, false);
    eta->lambda_min_ = lambda_min;
    eta->channel_dim_ = channel_dim;
    torch::autograd::set_history(y, node);
  }
  return y;
}

// A per-channel coefficient of the rebuilt input as the kernel reads it:
// C values (N * C for a per-row scale) in float32, `fill` where absent.
at::Tensor coefficient(const c10::optional<at::Tensor>& t, int64_t channels,
                       float fill) {
  if (!t.has_value() || !t->defined()) {
    return at::full({channels}, fill, at::kFloat);
  }
  return as_float(*t);
}

// The backward at z = src * scale + shift + other * other_scale, rebuilt per
// element: (N, C, ...) float32 src, other and grad_out of one shape,
// per-channel coefficients (scale also per (n, c) row), parameters shared
// or along dim 1. The parameter gradients are those of the raw parameters,
// undefined (None) where not wanted.
template <const Entries& E>
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_rebuilt(
    const at::Tensor& grad_out, const at::Tensor& kappa,
    const at::Tensor& lambda, double lambda_min, const at::Tensor& src,
    const c10::optional<at::Tensor>& scale,
    const c10::optional<at::Tensor>& shift,
    const c10::optional<at::Tensor>& other,
    const c10::optional<at::Tensor>& other_scale, bool need_kappa,
    bool need_lambda) {
  const bool has_other = other.has_value() && other->defined();
  TORCH_CHECK(src.dim() >= 2 && src.scalar_type() == at::kFloat &&
                  grad_out.sizes() == src.sizes() &&
                  grad_out.scalar_type() == at::kFloat &&
                  (!has_other || (other->sizes() == src.sizes() &&
                                  other->scalar_type() == at::kFloat)),
              "mmact::", E.name,
              "_backward_rebuilt takes float32 (N, C, ...) src, grad_out and ",
              "other of one shape (got src ", src.sizes(),
              "); call mmact.ops.apa.rebuilt_backward, which picks the ",
              "implementation");
  const Layout l = layout(src, kappa, lambda, 1);
  const int64_t channels = src.size(1);
  int64_t inner = 1;
  for (int64_t d = 2; d < src.dim(); ++d) inner *= src.size(d);
  const at::Tensor z = as_float(src), go = as_float(grad_out);
  const at::Tensor oth = has_other ? as_float(*other) : at::Tensor();
  const at::Tensor za = coefficient(scale, channels, 1.0f),
                   zb = coefficient(shift, channels, 0.0f),
                   zd = coefficient(other_scale, channels, 1.0f);
  TORCH_CHECK_VALUE(
      (za.numel() == channels || za.numel() == src.size(0) * channels) &&
          zb.numel() == channels && zd.numel() == channels,
      "mmact::", E.name, "_backward_rebuilt: scale has ", za.numel(),
      " values, shift ", zb.numel(), ", other_scale ", zd.numel(), "; ",
      "expected C=", channels, " each (scale also N*C=",
      src.size(0) * channels, ")");
  at::Tensor gx = mmact::empty_cpu(z.sizes(), at::kFloat), gk, gl;
  if (need_kappa) gk = mmact::empty_cpu(l.kappa.sizes(), at::kFloat);
  if (need_lambda) gl = mmact::empty_cpu(l.lambda.sizes(), at::kFloat);
  const int64_t status = E.rebuilt(
      z.data_ptr<float>(), has_other ? oth.data_ptr<float>() : nullptr,
      go.data_ptr<float>(), gx.data_ptr<float>(), za.data_ptr<float>(),
      zb.data_ptr<float>(), zd.data_ptr<float>(), za.numel() != channels,
      l.kappa.data_ptr<float>(), l.lambda.data_ptr<float>(),
      static_cast<float>(lambda_min), l.kappa.numel() != 1, channels,
      inner, z.numel(),
      at::get_num_threads(), need_kappa ? gk.data_ptr<float>() : nullptr,
      need_lambda ? gl.data_ptr<float>() : nullptr);
  TORCH_CHECK(status == 0, E.name,
              " backward: no memory for its sums or channel constants");
  if (need_kappa) gk = to_param(gk, kappa);
  if (need_lambda) gl = to_param(gl, lambda);
  return {gx, gk, gl};
}

// Which devices' calls the Python entries take (mmact.ops.apa.cpu.routes):
// CPU calls while the C kernels are on, CUDA calls once the CUDA library
// is loaded and its kernels selected.
bool route_cpu = true;
bool route_cuda = false;

// The Python entry of an operator, what mmact.ops.apa / aglu call first
// (module.cpp lists it):
// for a call the operator takes (plain float32 / float16 / bfloat16 strided
// input on a routed device, float32 parameters on the input's device, a
// float lambda_min > 0, an int (not bool) channel_dim, mmact::direct_call)
// it unpacks the arguments and calls
// through the dispatcher, so autograd applies, for ~2 us less than
// torch.ops' boxed call; any other call it declines with None, and
// mmact.ops.apa.dispatch.implementation picks another implementation (its
// table's 'op' row is this rule).
template <const Entries& E>
PyObject* python_entry(PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  static const auto op = handle<Signature>(E.name, "");
  if (nargs != 5 || !THPVariable_CheckExact(args[0]) ||
      !THPVariable_CheckExact(args[1]) || !THPVariable_CheckExact(args[2]) ||
      !PyFloat_Check(args[3]) || !PyLong_Check(args[4]) ||
      PyBool_Check(args[4])) {
    Py_RETURN_NONE;
  }
  const at::Tensor &x = THPVariable_Unpack(args[0]),
                   &kappa = THPVariable_Unpack(args[1]),
                   &lambda = THPVariable_Unpack(args[2]);
  const at::ScalarType dtype = x.scalar_type();
  const double lambda_min = PyFloat_AS_DOUBLE(args[3]);
  const bool routed =
      x.is_cpu() ? route_cpu && kappa.is_cpu() && lambda.is_cpu()
                 : route_cuda && x.is_cuda() &&
                       kappa.device() == x.device() &&
                       lambda.device() == x.device();
  if (!(routed && x.layout() == at::kStrided &&
        (dtype == at::kFloat || dtype == at::kHalf ||
         dtype == at::kBFloat16) &&
        kappa.scalar_type() == at::kFloat &&
        lambda.scalar_type() == at::kFloat && lambda_min > 0 &&
        mmact::direct_call(x, kappa, lambda))) {
    Py_RETURN_NONE;
  }
  const int64_t channel_dim = PyLong_AsLongLong(args[4]);
  if (PyErr_Occurred()) return nullptr;
  at::Tensor y = mmact::call_from_python(x.numel(), [&] {
    return op.call(x, kappa, lambda, lambda_min, channel_dim);
  });
  return THPVariable_Wrap(std::move(y));
  END_HANDLE_TH_ERRORS
}

}  // namespace

namespace mmact {

PyObject* python_apa(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return python_entry<kApa>(args, nargs);
}

PyObject* python_aglu(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return python_entry<kAglu>(args, nargs);
}

PyObject* python_routes(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyBool_Check(args[0]) || !PyBool_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "routes(cpu: bool, cuda: bool)");
    return nullptr;
  }
  route_cpu = args[0] == Py_True;
  route_cuda = args[1] == Py_True;
  Py_RETURN_NONE;
}

}  // namespace mmact

// A fragment: fles_op.cpp registers into the same namespace.
TORCH_LIBRARY_FRAGMENT(mmact, m) {
  m.def("apa(Tensor x, Tensor kappa, Tensor lambda_, float lambda_min, "
        "int channel_dim) -> Tensor");
  m.def("aglu(Tensor x, Tensor kappa, Tensor lambda_, float lambda_min, "
        "int channel_dim) -> Tensor");
#define MMACT_REBUILT_SCHEMA                                                \
  "_backward_rebuilt(Tensor grad_out, Tensor kappa, Tensor lambda_, "        \
  "float lambda_min, Tensor src, Tensor? scale, Tensor? shift, "             \
  "Tensor? other, Tensor? other_scale, bool need_kappa, bool need_lambda) " \
  "-> (Tensor, Tensor, Tensor)"
  m.def("apa" MMACT_REBUILT_SCHEMA);
  m.def("aglu" MMACT_REBUILT_SCHEMA);
#undef MMACT_REBUILT_SCHEMA
#define MMACT_BACKWARD_SCHEMA                                               \
  "_backward(Tensor grad_out, Tensor x, Tensor kappa, Tensor lambda_, "      \
  "float lambda_min, int channel_dim, bool need_kappa, bool need_lambda) "  \
  "-> (Tensor, Tensor, Tensor)"
  m.def("apa" MMACT_BACKWARD_SCHEMA);
  m.def("aglu" MMACT_BACKWARD_SCHEMA);
#undef MMACT_BACKWARD_SCHEMA
}

TORCH_LIBRARY_IMPL(mmact, CPU, m) {
  m.impl("apa", cpu<kApa>);
  m.impl("aglu", cpu<kAglu>);
  m.impl("apa_backward_rebuilt", backward_rebuilt<kApa>);
  m.impl("aglu_backward_rebuilt", backward_rebuilt<kAglu>);
  m.impl("apa_backward", backward_cpu_op<kApa>);
  m.impl("aglu_backward", backward_cpu_op<kAglu>);
}

TORCH_LIBRARY_IMPL(mmact, Autograd, m) {
  m.impl("apa", autograd<kApa>);
  m.impl("aglu", autograd<kAglu>);
}
