#include "engine/data/mlm_masking.h"

#include <algorithm>
#include <random>

#include "engine/random.h"
#include "kernels/error.h"
#include "kernels/index_check.h"

namespace dpcore::data {

MlmMasking mlm_masking_of(const Dataset& data, uint64_t seed, bool fixed) {
  DPCORE_CHECK(data.tokens(), "--task mlm: ", data.name, " is not text (it has no token ids)");
  DPCORE_CHECK(data.mask_id >= 0, "--task mlm: the vocabulary ", data.vocab, " has no [MASK] token");
  MlmMasking m;
  m.mask_id = data.mask_id, m.vocab_size = data.vocab_size, m.special_ids = data.special_ids;
  m.seed = seed, m.fixed = fixed;
  return m;
}

void mask_tokens(const MlmMasking& m, int64_t epoch, int64_t sample, int64_t* ids, int64_t length,
                 int64_t* targets) {
  const uint64_t stream = m.fixed ? kMlmEvalStream : kMlmStream;
  const uint64_t at_epoch = m.fixed ? 0 : uint64_t(epoch);
  std::mt19937_64 rng(sample_seed(m.seed, stream, at_epoch, uint64_t(sample)));
  for (int64_t t = 0; t < length; ++t) {
    const double u = uniform01(rng);
    const bool special = std::find(m.special_ids.begin(), m.special_ids.end(), ids[t]) != m.special_ids.end();
    if (special || u >= kMlmProbability) {
      targets[t] = kernels::kDefaultIgnoreIndex;
      continue;
    }
    targets[t] = ids[t];
    const double v = uniform01(rng);
    if (v < kMlmMaskShare)
      ids[t] = m.mask_id;
    else if (v < kMlmMaskShare + kMlmRandomShare)
      ids[t] = int64_t(uniform_below(rng, uint64_t(m.vocab_size)));
  }
}

}  // namespace dpcore::data
