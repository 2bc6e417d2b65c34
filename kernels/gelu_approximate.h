// The two forms of GELU, PyTorch's gelu(x, approximate="none" | "tanh"):
//   None: 0.5 x (1 + erf(x / sqrt 2)), the exact Gaussian CDF form;
//   Tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), Hendrycks and Gimpel's
//         approximation (BERT's and GPT-2's).
#pragma once

namespace dpcore::kernels {

enum class GeluApproximate { None, Tanh };

}  // namespace dpcore::kernels
