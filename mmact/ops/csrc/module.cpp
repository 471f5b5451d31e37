// The Python module of mmact's CPU extension (named by the build,
// TORCH_EXTENSION_NAME): one entry per operator, the native-cost way in
// from mmact.ops (a METH_FASTCALL function, not torch.ops' boxed call).
// Loading the library also registers the operators under torch.ops.mmact.
#include "python_entries.h"

#define MMACT_STR_(x) #x
#define MMACT_STR(x) MMACT_STR_(x)
#define MMACT_CAT_(a, b) a##b
#define MMACT_CAT(a, b) MMACT_CAT_(a, b)

namespace {

template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t)>
PyCFunction fastcall() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(F));
}

PyMethodDef methods[] = {
    {"apa", fastcall<mmact::python_apa>(), METH_FASTCALL,
     "mmact::apa(x, kappa, lambda_, lambda_min, channel_dim)"},
    {"aglu", fastcall<mmact::python_aglu>(), METH_FASTCALL,
     "mmact::aglu(x, kappa, lambda_, lambda_min, channel_dim)"},
    {"routes", fastcall<mmact::python_routes>(), METH_FASTCALL,
     "routes(cpu, cuda): which devices' calls the apa / aglu entries take"},
    {"fles", fastcall<mmact::python_fles>(), METH_FASTCALL,
     "mmact::fles(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias, kh, kw, "
     "gate, mode, k_ho_min)"},
    {"fles_routes", fastcall<mmact::python_fles_routes>(), METH_FASTCALL,
     "fles_routes(cuda): whether the fles entry takes CUDA calls"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, MMACT_STR(TORCH_EXTENSION_NAME),
                      nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC MMACT_CAT(PyInit_, TORCH_EXTENSION_NAME)() {
  return PyModule_Create(&module);
}
