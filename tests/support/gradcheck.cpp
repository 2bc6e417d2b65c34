#include "support/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "support/test_support.h"

namespace dpcore::testing {

Tensor random_leaf(const Shape& shape, uint64_t seed, double lo, double hi) {
  auto values = random_vector<double>(size_t(shape_numel(shape)), seed, lo, hi);
  Tensor t = Tensor::from_vector(values, shape);
  t.set_requires_grad(true);
  return t;
}

Tensor weighted_sum(const Tensor& y, uint64_t seed) {
  auto w = random_vector<double>(size_t(y.numel()), seed);
  Tensor weights = Tensor::from_vector(w, {1, y.numel()});
  // sum(y * w) through ops we trust: linear of the flattened output with w as a 1-row weight.
  Tensor flat = ops::reshape(y, {1, y.numel()});
  return ops::sum(ops::linear(flat, weights, Tensor()));
}

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          const GradcheckOptions& opt) {
  GradcheckResult result;
  Tensor out = f(inputs);
  DPCORE_CHECK(out.numel() == 1 && out.dtype() == DType::Float64, "gradcheck: f must return one float64 value");
  out.backward();

  auto eval = [&]() {
    autograd::NoGradGuard no_grad;
    return f(inputs).item();
  };
  const double f0 = eval();
  Generator pick(opt.seed);
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& in = inputs[k];
    if (!in.requires_grad()) continue;
    DPCORE_CHECK(in.grad().defined(), "gradcheck: input ", k, " received no gradient");
    std::vector<double> analytic = in.grad().to_vector<double>();
    double* x = in.data<double>();
    std::vector<int64_t> indices;
    if (opt.samples_per_input <= 0 || opt.samples_per_input >= in.numel()) {
      for (int64_t i = 0; i < in.numel(); ++i) indices.push_back(i);
    } else {
      for (int64_t s = 0; s < opt.samples_per_input; ++s) indices.push_back(int64_t(pick.below(uint64_t(in.numel()))));
    }
    for (int64_t i : indices) {
      double saved = x[i];
      x[i] = saved + opt.step;
      double f_plus = eval();
      x[i] = saved - opt.step;
      double f_minus = eval();
      x[i] = saved;
      // A kink between x - e and x + e shows up as one-sided slopes that disagree.
      double right = (f_plus - f0) / opt.step, left = (f0 - f_minus) / opt.step;
      if (std::abs(right - left) > 1e-3 * std::max({std::abs(right), std::abs(left), 1.0})) {
        ++result.skipped_near_kink;
        continue;
      }
      double numeric = (f_plus - f_minus) / (2 * opt.step);
      double a = analytic[size_t(i)];
      double err = std::abs(a - numeric) / std::max({std::abs(a), std::abs(numeric), 1.0});
      ++result.checked;
      std::ostringstream where;
      where << "input " << k << " element " << i << ": analytic " << a << ", numeric " << numeric;
      if (err > result.worst_error) result.worst_error = err, result.worst_where = where.str();
      if (err > opt.threshold) result.failures.push_back(where.str());
    }
  }
  return result;
}

}  // namespace dpcore::testing
