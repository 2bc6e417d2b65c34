#include "engine/data/dataset.h"

#include "kernels/error.h"

namespace dpcore::data {

void check_dataset(const Dataset& d) {
  DPCORE_CHECK(d.n > 0 && d.c > 0 && d.h > 0 && d.w > 0, "dataset ", d.name, ": empty or invalid shape ", describe(d));
  DPCORE_CHECK(d.num_classes > 0, "dataset ", d.name, ": num_classes is ", d.num_classes);
  DPCORE_CHECK(int64_t(d.images.size()) == (d.source ? 0 : d.n * d.sample_size()), "dataset ", d.name, ": ",
               d.images.size(), " pixel values for ", describe(d), d.source ? " made per batch" : "");
  DPCORE_CHECK(d.zero_value.empty() || int64_t(d.zero_value.size()) == d.c, "dataset ", d.name, ": ",
               d.zero_value.size(), " zero values for ", d.c, " channels");
  DPCORE_CHECK(int64_t(d.labels.size()) == d.n, "dataset ", d.name, ": ", d.labels.size(), " labels for ", d.n,
               " samples");
  for (int64_t i = 0; i < d.n; ++i)
    DPCORE_CHECK(d.labels[i] >= 0 && d.labels[i] < d.num_classes, "dataset ", d.name, ": label ", d.labels[i],
                 " of sample ", i, " is outside [0, ", d.num_classes, ")");
}

std::string describe(const Dataset& d) {
  return std::to_string(d.n) + " x " + std::to_string(d.c) + " x " + std::to_string(d.h) + " x " + std::to_string(d.w) +
         ", " + std::to_string(d.num_classes) + " classes";
}

}  // namespace dpcore::data
