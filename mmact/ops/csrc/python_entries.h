// The Python entries of mmact's operators (apa_op.cpp, fles_op.cpp), the
// methods of the extension's module (module.cpp). Apart from op_node.h so
// that module.cpp compiles without torch's headers.
#ifndef MMACT_PYTHON_ENTRIES_H
#define MMACT_PYTHON_ENTRIES_H

#include <Python.h>

namespace mmact {

// Each takes a call the operator takes and returns None for any other
// (METH_FASTCALL).
PyObject* python_apa(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* python_aglu(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* python_fles(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// Sets whether the FleS entry takes CUDA calls: fles_routes(cuda).
PyObject* python_fles_routes(PyObject*, PyObject* const* args,
                             Py_ssize_t nargs);
// Sets which devices' calls the APA / AGLU entries take: routes(cpu, cuda).
PyObject* python_routes(PyObject*, PyObject* const* args, Py_ssize_t nargs);

}  // namespace mmact

#endif
