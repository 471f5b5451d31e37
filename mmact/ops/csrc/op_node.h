// What mmact's C++ operators share (apa_op.cpp, fles_op.cpp): creating an
// autograd node on every supported torch, refusing a second derivative and
// forward-mode tangents, and their Python module.
#ifndef MMACT_OP_NODE_H
#define MMACT_OP_NODE_H
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <initializer_list>
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
  torch::autograd::DelayedError error(
      "mmact::" + name +
          " cannot be differentiated twice (its backward is a fused kernel)",
      static_cast<int>(grads.size()));
  return error.apply(std::move(grads));
}

// What a Function without a jvp does: refuse rather than drop tangents.
inline void refuse_tangents(std::initializer_list<at::Tensor> inputs,
                            const char* name) {
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(!torch::autograd::isFwGradDefined(t), "mmact::", name,
                " has no forward-mode derivative (jvp); use reverse mode ",
                "(backward, torch.autograd.grad)");
  }
}

}  // namespace mmact

// Defines the extension's Python module, named by the build
// (TORCH_EXTENSION_NAME), with the entries of the PyMethodDef table METHODS.
#define MMACT_STR_(x) #x
#define MMACT_STR(x) MMACT_STR_(x)
#define MMACT_CAT_(a, b) a##b
#define MMACT_CAT(a, b) MMACT_CAT_(a, b)
#define MMACT_PYTHON_MODULE(METHODS)                                      \
  PyMODINIT_FUNC MMACT_CAT(PyInit_, TORCH_EXTENSION_NAME)() {             \
    static PyModuleDef module = {PyModuleDef_HEAD_INIT,                   \
                                 MMACT_STR(TORCH_EXTENSION_NAME), nullptr, \
                                 -1, METHODS};                            \
    return PyModule_Create(&module);                                      \
  }

#endif
