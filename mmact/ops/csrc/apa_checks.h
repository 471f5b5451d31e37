// The argument checks of mmact::apa / aglu that every device's kernels
// share (apa_op.cpp for the CPU, apa_cuda.cu for CUDA), with the words of
// mmact.ops.checks.broadcast_shape.
#ifndef MMACT_APA_CHECKS_H
#define MMACT_APA_CHECKS_H
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace mmact {

inline void check_count(const at::Tensor& p, const char* what,
                        const at::Tensor& x, int64_t dim) {
  const int64_t channels = x.size(dim);
  TORCH_CHECK_VALUE(p.numel() == 1 || p.numel() == channels, what, " has ",
                    p.numel(), " values (num_parameters=", p.numel(),
                    ") but the input has ", channels, " channels at dim ",
                    dim, " (shape ", x.sizes(), "); use num_parameters=1 or ",
                    channels, ", or set channel_dim to the channel axis");
}

// The axis per-channel parameters follow (0 <= dim < x.dim()), checking
// both parameters' counts; -1 when both are shared (one value each).
inline int64_t channel_axis(const at::Tensor& x, const at::Tensor& kappa,
                            const at::Tensor& lambda, int64_t channel_dim) {
  if (kappa.numel() == 1 && lambda.numel() == 1) return -1;
  TORCH_CHECK_VALUE(-x.dim() <= channel_dim && channel_dim < x.dim(),
                    "channel_dim=", channel_dim,
                    " is out of range for an input with ", x.dim(), " dims");
  const int64_t dim = channel_dim < 0 ? channel_dim + x.dim() : channel_dim;
  check_count(kappa, "kappa", x, dim);
  check_count(lambda, "lambda", x, dim);
  return dim;
}

}  // namespace mmact

#endif
