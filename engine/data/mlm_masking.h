// BERT's masked-language-model inputs, as Hugging Face's DataCollatorForLanguageModeling
// (mlm_probability 0.15) makes them: applied by the loader's worker thread to each token-id
// sample as it gathers it (engine/data/loader.h), so that a batch holds masked ids and one
// target per token.
//
// The rule. Every token but the special ones ([CLS], [SEP], [PAD]: never) is chosen with
// probability 0.15; of the chosen, 80% become [MASK], 10% a random id uniform over the whole
// vocabulary (as Hugging Face: special ids included) and 10% stay as they are. The target of
// a chosen position is its original id, of every other position ignore_index -100
// (kernels/index_check.h), so the loss counts the chosen positions only.
//
// Random draws. The masks of a sample depend only on (seed, epoch, the sample's index in the
// dataset), never on the batch it lands in, the batch size, the replicas, the order of the
// epoch or a resume: a std::mt19937_64 seeded with sample_seed(seed, kMlmStream, epoch,
// sample) (engine/random.h) gives, token by token from the first,
// u = uniform01 (chosen when u < 0.15), and for a chosen token v = uniform01 (v < 0.8:
// [MASK]; v < 0.9: the random id uniform_below(vocab_size), one more draw; else unchanged).
// The evaluation split takes `fixed`: the stream kMlmEvalStream and epoch 0 whatever the
// epoch, so its masks (and so its numbers) are the same after every epoch.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/dataset.h"

namespace dpcore::data {

// The streams of derive_seed(seed, .) the training and the evaluation masks come from.
constexpr uint64_t kMlmStream = 0x6d6c6d2d6d61736bull;      // "mlm-mask"
constexpr uint64_t kMlmEvalStream = 0x6d6c6d2d6576616cull;  // "mlm-eval"

struct MlmMasking {
  int64_t mask_id = -1;               // [MASK]; -1: no masking (the loader's default)
  int64_t vocab_size = 0;             // the random replacement is uniform over [0, vocab_size)
  std::vector<int64_t> special_ids;   // never chosen: [CLS], [SEP], [PAD]
  uint64_t seed = 0;
  bool fixed = false;                 // the evaluation key: the same masks every epoch

  bool on() const { return mask_id >= 0; }
};

// The masking of `data`'s token ids drawn from `seed` (fixed: the evaluation key). Throws
// dpcore::Error naming --task mlm and the vocabulary's file when it has no [MASK].
MlmMasking mlm_masking_of(const Dataset& data, uint64_t seed, bool fixed);

inline constexpr double kMlmProbability = 0.15, kMlmMaskShare = 0.8, kMlmRandomShare = 0.1;

// Masks sample `sample`'s `length` ids in place as they are at `epoch` and writes their
// `length` targets (the original id where chosen, else -100).
void mask_tokens(const MlmMasking& masking, int64_t epoch, int64_t sample, int64_t* ids, int64_t length,
                 int64_t* targets);

}  // namespace dpcore::data
