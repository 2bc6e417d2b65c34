#include "engine/data/dataset.h"

#include <algorithm>

#include "kernels/error.h"

namespace dpcore::data {

static void check_tokens(const Dataset& d) {
  DPCORE_CHECK(d.n > 0 && d.c == 0 && d.h == 0 && d.w == 0 && d.images.empty(), "dataset ", d.name,
               ": token ids and images together, or no samples (", d.n, ")");
  DPCORE_CHECK(int64_t(d.token_offsets.size()) == d.n + 1 && d.token_offsets.front() == 0 &&
                   d.token_offsets.back() == int64_t(d.token_ids.size()),
               "dataset ", d.name, ": ", d.token_offsets.size(), " token offsets for ", d.n, " samples of ",
               d.token_ids.size(), " ids in all");
  DPCORE_CHECK(d.pad_id >= 0 && d.pad_id < d.vocab_size, "dataset ", d.name, ": pad id ", d.pad_id,
               " outside a vocabulary of ", d.vocab_size);
  for (int64_t i = 0; i < d.n; ++i)
    DPCORE_CHECK(d.length(i) >= 1 && d.length(i) <= d.max_len, "dataset ", d.name, ": sample ", i, " has ",
                 d.length(i), " tokens; expected 1 to ", d.max_len);
  for (int64_t id : d.token_ids)
    DPCORE_CHECK(id >= 0 && id < d.vocab_size, "dataset ", d.name, ": token id ", id, " outside a vocabulary of ",
                 d.vocab_size);
}

static void check_images(const Dataset& d) {
  DPCORE_CHECK(d.n > 0 && d.c > 0 && d.h > 0 && d.w > 0, "dataset ", d.name, ": empty or invalid shape ", describe(d));
  DPCORE_CHECK(int64_t(d.images.size()) == (d.source ? 0 : d.n * d.sample_size()), "dataset ", d.name, ": ",
               d.images.size(), " pixel values for ", describe(d), d.source ? " made per batch" : "");
  DPCORE_CHECK(d.zero_value.empty() || int64_t(d.zero_value.size()) == d.c, "dataset ", d.name, ": ",
               d.zero_value.size(), " zero values for ", d.c, " channels");
}

void check_dataset(const Dataset& d) {
  if (d.tokens()) {
    check_tokens(d);
  } else {
    check_images(d);
  }
  DPCORE_CHECK(d.num_classes > 0, "dataset ", d.name, ": num_classes is ", d.num_classes);
  DPCORE_CHECK(int64_t(d.labels.size()) == d.n, "dataset ", d.name, ": ", d.labels.size(), " labels for ", d.n,
               " samples");
  for (int64_t i = 0; i < d.n; ++i)
    DPCORE_CHECK(d.labels[i] >= 0 && d.labels[i] < d.num_classes, "dataset ", d.name, ": label ", d.labels[i],
                 " of sample ", i, " is outside [0, ", d.num_classes, ")");
}

std::string describe(const Dataset& d) {
  if (d.tokens()) {
    int64_t shortest = d.max_len, longest = 0;
    for (int64_t i = 0; i < d.n; ++i) shortest = std::min(shortest, d.length(i)), longest = std::max(longest, d.length(i));
    return std::to_string(d.n) + " texts of " + std::to_string(shortest) + " to " + std::to_string(longest) +
           " tokens, " + std::to_string(d.num_classes) + " classes";
  }
  return std::to_string(d.n) + " x " + std::to_string(d.c) + " x " + std::to_string(d.h) + " x " + std::to_string(d.w) +
         ", " + std::to_string(d.num_classes) + " classes";
}

}  // namespace dpcore::data
