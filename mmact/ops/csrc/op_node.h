// What mmact's C++ operators share (apa_op.cpp, fles_op.cpp): creating an
// autograd node on every supported torch, refusing a second derivative and
// forward-mode tangents, the Python entries' checks and GIL policy; the
// entries themselves are declared in python_entries.h.
#ifndef MMACT_OP_NODE_H
#define MMACT_OP_NODE_H
#include <ATen/EmptyTensor.h>
#include <ATen/TracerMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "python_entries.h"

#include <memory>
#include <string>
#include <type_traits>

namespace mmact {

// torch 2.1 holds nodes in std::shared_ptr, newer torch in c10::intrusive_ptr.
using NodePtr = decltype(torch::autograd::Edge::function);

template <typename T>
NodePtr make_node() {
  if constexpr (std::is_same_v<NodePtr,
                               std::shared_ptr<torch::autograd::Node>>) {
    // deleteNode (torch 2.1 only) frees long chains without deep
    // recursion; found by argument-dependent lookup where it exists.
    return std::shared_ptr<T>(new T(), [](auto* node) { deleteNode(node); });
  } else {
    return c10::make_intrusive<T>();
  }
}

// A contiguous CPU tensor allocated without the dispatcher, as native CPU
// kernels allocate theirs: at::empty_like dispatches twice per tensor (the
// four tensors of an APA forward + backward cost about 0.8 us of a 22 us
// call on torch 2.1.2, benchmark_overhead.py).
inline at::Tensor empty_cpu(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::Tensor(at::detail::empty_cpu(sizes, dtype));
}

// Under create_graph a fused kernel's gradients hang off a node that raises
// when a second derivative reaches it (what torch.autograd.function's
// once_differentiable does), instead of being constants that would drop
// the second derivative silently.
inline torch::autograd::variable_list once_differentiable(
    torch::autograd::variable_list grads, const std::string& name) {
  if (!at::GradMode::is_enabled()) return grads;
  for (auto& g : grads) {
    if (g.defined()) {
      g = g.detach();
      g.set_requires_grad(true);
    }
  }
  // the words of mmact/ops/second_derivative.py, the one rule
  torch::autograd::DelayedError error(
      "mmact.ops." + name +
          " cannot be differentiated twice (its backward is written out, "
          "not recorded by autograd; run the composite for a second "
          "derivative: mmact.ops.backends.using(composite=True))",
      static_cast<int>(grads.size()));
  return error.apply(std::move(grads));
}

// Whether any of the tensors carries a forward-mode tangent (level 0, as
// torch's isFwGradDefined). By reference: on newer torch a copy of a tensor
// handle whose Python object is alive takes the GIL.
template <typename... T>
bool any_tangent(const T&... inputs) {
  return ((inputs.defined() && inputs._fw_grad(0).defined()) || ...);
}

// What a Function without a jvp does: refuse rather than drop tangents.
template <typename... T>
void refuse_tangents(const char* name, const T&... inputs) {
  TORCH_CHECK(!any_tangent(inputs...), "mmact::", name,
              " has no forward-mode derivative (jvp); use reverse mode ",
              "(backward, torch.autograd.grad)");
}

// Whether a call from Python may go straight to a kernel: nothing records
// or redirects ops (the JIT tracer, a Python dispatch mode such as fake
// tensors) and no input carries a tangent. The Python entries decline the
// other calls (they return None), which the Python dispatch decides.
template <typename... T>
bool direct_call(const T&... inputs) {
  return !at::tracer::impl::is_dispatch_enabled() &&
         c10::impl::TorchDispatchModeTLS::stack_len() == 0 &&
         !any_tangent(inputs...);
}

// Runs a Python entry's call with the GIL held when the input is small:
// releasing and re-taking it costs more than a small kernel (~0.4 us, and
// on newer torch every copy of a tensor handle made meanwhile takes it
// again). A large call releases it for other Python threads, as torch's
// own bindings do.
constexpr int64_t kReleaseGilNumel = int64_t{1} << 16;

template <typename F>
at::Tensor call_from_python(int64_t numel, F&& call) {
  if (numel < kReleaseGilNumel) return call();
  pybind11::gil_scoped_release no_gil;
  return call();
}

}  // namespace mmact

#endif
