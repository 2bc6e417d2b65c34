// Shared by the BERT data-parallel tests (bert_equivalence_test.cpp, mpi_equivalence_test.cpp):
// a small bert(...) spec with dropout on, and padded token-id batches in which samples hold
// different numbers of real tokens, for the classification head (one label per sample) and
// the masked-LM head (one target per token, ignore_index on padding and on unmasked tokens).
#pragma once

#include <string>
#include <vector>

#include "kernels/index_check.h"
#include "layers/zoo.h"
#include "train/runners/runner.h"

namespace dpcore::testing {

// Small enough for CI (a step is well under a millisecond), with every part of BERT:
// two layers, two heads, padding masks, dropout 0.1 everywhere (so that the batch position
// given to each micro-batch matters), the pooler and both heads.
constexpr int64_t kBertTokens = 6, kBertVocab = 30, kBertLabels = 3;
inline std::string bert_spec(bool masked_lm) {
  return "bert(layers=2,hidden=16,heads=2,intermediate=24,vocab=" + std::to_string(kBertVocab) +
         ",max_len=8,labels=" + std::to_string(kBertLabels) + ",dropout=0.1" + (masked_lm ? ",head=mlm)" : ")");
}

inline std::unique_ptr<layers::Model> bert_net(bool masked_lm, DType dtype, uint64_t seed = 5) {
  layers::ModelDef def = layers::model_from_flag(bert_spec(masked_lm), {kBertTokens});
  return std::make_unique<layers::Model>(std::move(def.net), def.input_shape, Device::cpu(), dtype, seed);
}

// Sample i holds 1 + (i^2 + 2 i + seed) % kBertTokens real tokens (ids 1..kBertVocab-1), then
// padding (id 0 = pad_token_id): replicas and micro-batches hold different numbers of real
// tokens. Classification: label (7 i + seed) % kBertLabels. Masked LM: a real token counts
// when (i + 2 k + seed) % 3 != 0 (its target another id), the rest is ignore_index, so some
// samples count no token at all.
struct BertBatch {
  std::vector<int64_t> ids, labels;
  data::Batch batch;
};

inline BertBatch make_bert_batch(bool masked_lm, int64_t n, uint64_t seed) {
  BertBatch b;
  const int64_t s = int64_t(seed);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t real = 1 + (i * i + 2 * i + s) % kBertTokens;
    for (int64_t k = 0; k < kBertTokens; ++k) {
      const bool is_real = k < real;
      b.ids.push_back(is_real ? 1 + (i * 11 + k * 5 + s) % (kBertVocab - 1) : 0);
      if (masked_lm) {
        const bool counted = is_real && (i + 2 * k + s) % 3 != 0;
        b.labels.push_back(counted ? (i * 7 + k * 3 + s) % kBertVocab : kernels::kDefaultIgnoreIndex);
      }
    }
    if (!masked_lm) b.labels.push_back((7 * i + s) % kBertLabels);
  }
  b.batch.size = n, b.batch.sample = {kBertTokens}, b.batch.labels_per_sample = masked_lm ? kBertTokens : 1;
  b.batch.ids = b.ids.data(), b.batch.labels = b.labels.data();
  return b;
}

// Parameters (as double) after `steps` steps of `runner` on batches make_bert_batch(n, 100 + step).
inline std::vector<double> train_bert_with(train::StepRunner& runner, bool masked_lm, int64_t n, int steps) {
  for (int s = 0; s < steps; ++s) {
    BertBatch b = make_bert_batch(masked_lm, n, uint64_t(100 + s));
    runner.set_step_number(s + 1);
    runner.step(b.batch);
  }
  runner.settle();
  Tensor values = runner.model().parameters().values();
  if (values.dtype() == DType::Float64) return values.to_vector<double>();
  const std::vector<float> f = values.to_vector<float>();
  return {f.begin(), f.end()};
}

// AdamW as BERT is fine-tuned (weight decay off for biases and LayerNorm weights by the
// parameters' flags), with a learning rate large enough to move every parameter.
const AdamConfig kBertAdamW{1e-2, 0.9, 0.999, 1e-8, 0.01, true};

}  // namespace dpcore::testing
