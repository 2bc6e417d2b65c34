// `dpcore train --task mlm` (docs/text.md, "Masked-LM pretraining"): BERT's masked-LM on any
// text data, the loss over the masked tokens, the masked-token accuracy and the perplexity in
// the epoch line and the metrics, test masks the same every epoch, exact under data
// parallelism and across a resume; a task that does not fit the model, or a vocabulary without [MASK], refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_run.h"
#include "metrics_lines.h"
#include "same_maths.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

const std::string kTexts = source_dir() + "/tests/fixtures/text/tiny_topics.tsv";
const std::string kMlmJob = "train --task mlm --model bert-tiny-mlm --data text:" + kTexts +
                            " --batch 16 --threads 1 --progress 0 --device cpu";

TEST(MaskedLmTraining, ReportsTheMaskedTokensLossAccuracyAndPerplexity) {
  TempDir dir;
  const std::string metrics = dir.file("m.jsonl");
  const CommandResult r = run(kMlmJob + " --optimizer adamw --lr 1e-3 --steps 3 --metrics " + metrics + " --save " +
                              dir.file("w.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(", task mlm (the data's labels are not used), max length 128"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(", test perplexity "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", masked-token accuracy "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("confusion"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("class_to_idx"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.class_to_idx.json")));
  const auto records = metrics_lines(metrics);
  ASSERT_EQ(records.size(), 1u);
  const double loss = records[0]["test_loss"], perplexity = records[0]["test_perplexity"];
  EXPECT_NEAR(perplexity, std::exp(loss), 1e-12 * std::exp(loss));
  // From scratch, near a uniform guess over the 3,000 tokens: ln 3000 = 8.0.
  EXPECT_GT(loss, 5.0);
  EXPECT_LT(loss, 10.0);
  const double accuracy = records[0]["test_accuracy"];
  EXPECT_GE(accuracy, 0.0);
  EXPECT_LE(accuracy, 1.0);
}

// With lr 0 the model does not change: the test split's masks come from the evaluation key,
// so both epochs' test numbers are equal, while the training masks (and loss) change with
// the epoch.
TEST(MaskedLmTraining, TheTestMasksAreTheSameEveryEpochTheTrainingMasksAreNot) {
  TempDir dir;
  const std::string metrics = dir.file("m.jsonl");
  const CommandResult r = run(kMlmJob + " --optimizer sgd --lr 0 --epochs 2 --metrics " + metrics);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto records = metrics_lines(metrics);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["test_loss"], records[1]["test_loss"]);
  EXPECT_EQ(records[0]["test_accuracy"], records[1]["test_accuracy"]);
  EXPECT_NE(records[0]["train_loss"], records[1]["train_loss"]);
}

// The loss is the mean over the global batch's masked tokens, however the batch is shared:
// 2 replicas (dp) and 3 (ddp) train the parameters one replica does (same_maths.h), with SGD.
TEST(MaskedLmTraining, TwoAndThreeReplicasTrainWhatOneReplicaDoes) {
  TempDir dir;
  const std::string job = kMlmJob + " --optimizer sgd --lr 0.05 --steps 3 --seed 5 --save ";
  const CommandResult one = run(job + dir.file("one.safetensors"));
  ASSERT_EQ(one.status, 0) << one.output;
  const CommandResult two = run(job + dir.file("two.safetensors") + " --replicas 2 --mode dp");
  ASSERT_EQ(two.status, 0) << two.output;
  const CommandResult three = run(job + dir.file("three.safetensors") + " --replicas 3 --mode ddp");
  ASSERT_EQ(three.status, 0) << three.output;
  expect_same_maths(dir.file("one.safetensors"), dir.file("two.safetensors"), 1e-5, true);
  expect_same_maths(dir.file("one.safetensors"), dir.file("three.safetensors"), 1e-5, true);
}

// A text's masks follow (seed, epoch, text), so a resumed run, here across the epoch boundary
// (8 steps per epoch), masks the rest of the run as the uninterrupted one: the same bits.
TEST(MaskedLmTraining, AResumedRunIsBitIdenticalToAnUninterruptedOne) {
  TempDir dir;
  const std::string job = kMlmJob + " --optimizer sgd --lr 0.05";
  ASSERT_EQ(run(job + " --steps 11 --save " + dir.file("whole.safetensors")).status, 0);
  const std::string ck = " --checkpoint " + dir.file("ck");
  ASSERT_EQ(run(job + " --steps 5" + ck).status, 0);
  const CommandResult resumed = run(job + " --steps 11 --resume" + ck + " --save " + dir.file("resumed.safetensors"));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(slurp(dir.file("whole.safetensors")), slurp(dir.file("resumed.safetensors")));
}

// --explain tells the per-token step: the seed 1/M, M the batch's masked tokens, not 1/N.
TEST(MaskedLmTraining, ExplainSeedsTheBackwardWithOneOverTheMaskedTokens) {
  for (const char* mode : {"dp", "ddp"}) {
    const CommandResult r = run(kMlmJob + " --steps 1 --replicas 2 --explain --mode " + mode);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("backward seeded with 1/M = 1/"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("1/N"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" (int64 per-token labels)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("the loss of step 1: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" (the mean over the M = "), std::string::npos) << r.output;
  }
  const CommandResult one = run(kMlmJob + " --steps 1 --explain");
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_NE(one.output.find("backward seeded with 1/M = 1/"), std::string::npos) << one.output;
}

TEST(MaskedLmTraining, ATaskTheModelCannotLearnOrAVocabularyWithoutMaskIsRefusedNamed) {
  const std::string on_texts = " --data text:" + kTexts + " --steps 1 --threads 1 --progress 0 --device cpu";
  const CommandResult classifier = run("train --task mlm --model bert-tiny" + on_texts);
  EXPECT_EQ(classifier.status, 1) << classifier.output;
  EXPECT_NE(classifier.output.find("--task mlm: --model bert-tiny is a classifier (an output per text)"),
            std::string::npos)
      << classifier.output;
  const CommandResult masked_lm = run("train --task classify --model bert-tiny-mlm" + on_texts);
  EXPECT_EQ(masked_lm.status, 1) << masked_lm.output;
  EXPECT_NE(masked_lm.output.find("--task classify: --model bert-tiny-mlm is a masked-LM model (an output per "
                                  "token); use --task mlm"),
            std::string::npos)
      << masked_lm.output;
  TempDir dir;
  const std::string vocab = dir.file("vocab.txt");
  {
    std::ifstream in(source_dir() + "/tests/fixtures/text/vocab.txt");
    std::ofstream out(vocab);
    for (std::string token; std::getline(in, token);)
      if (token != "[MASK]") out << token << "\n";
  }
  const CommandResult no_mask = run("train --task mlm --model bert-tiny-mlm --vocab " + vocab + on_texts);
  EXPECT_EQ(no_mask.status, 1) << no_mask.output;
  EXPECT_NE(no_mask.output.find("--task mlm: the vocabulary " + vocab + " has no [MASK] token"), std::string::npos)
      << no_mask.output;
}

}  // namespace
}  // namespace dpcore::testing
