// `dpcore train` on text (docs/text.md, "Training"): --data text:FILE.tsv tokenized with the
// committed vocabulary, bert-tiny with the data's classes, batches padded per batch, and
// the confusion table at the end; a text longer than --max-len is refused naming its line.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_run.h"
#include "same_maths.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

const std::string kTexts = source_dir() + "/tests/fixtures/text/tiny_topics.tsv";
const std::string kTextJob = "train --model bert-tiny --data text:" + kTexts +
                             " --optimizer adamw --lr 1e-3 --batch 16 --threads 1 --progress 0 --device cpu";

TEST(TextTraining, BertTinyLearnsTheTsvClassesAndEndsWithTheConfusionTable) {
  TempDir dir;
  const CommandResult r = run(kTextJob + " --steps 3 --bucket-by-length --save " + dir.file("w.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("texts of "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 classes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("class_to_idx: {\"computers\":0,\"cooking\":1,\"sailing\":2}"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("confusion (rows: true class, columns: predicted)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recall"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(dir.file("w.class_to_idx.json")), "{\"computers\":0,\"cooking\":1,\"sailing\":2}\n");
}

TEST(TextTraining, ATextLongerThanMaxLenIsRefusedNamingItsLineUnlessTruncated) {
  const CommandResult r = run(kTextJob + " --steps 1 --max-len 10");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(kTexts + " line "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is longer than the maximum length 10"), std::string::npos) << r.output;
  const CommandResult t = run(kTextJob + " --steps 1 --max-len 10 --truncate");
  EXPECT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("texts of "), std::string::npos) << t.output;
}

TEST(TextTraining, TextFlagsOnImagesAndBadTextDataAreRefusedInWords) {
  const CommandResult images = run(job() + " --steps 1 --bucket-by-length");
  EXPECT_EQ(images.status, 1) << images.output;
  EXPECT_NE(images.output.find("--bucket-by-length"), std::string::npos) << images.output;
  const CommandResult missing = run(kTextJob + " --steps 1 --vocab /nonexistent/vocab.txt");
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/vocab.txt"), std::string::npos) << missing.output;
  TempDir dir;
  const CommandResult no_tab = run("train --model bert-tiny --data text:" + dir.file("none.tsv") + " --steps 1");
  EXPECT_EQ(no_tab.status, 1) << no_tab.output;
  EXPECT_NE(no_tab.output.find("none.tsv not found"), std::string::npos) << no_tab.output;
  const CommandResult task = run(kTextJob + " --steps 1 --task mlm");
  EXPECT_NE(task.status, 0) << task.output;
  EXPECT_NE(task.output.find("--task mlm: must be one of classify"), std::string::npos) << task.output;
}

// The token-balanced scatter keeps the step exact: 2 replicas (dp) and 3 (ddp) train the
// parameters one replica does, within float32's reordered sums (same_maths.h), dropout
// included (its draws follow the sample, not the replica).
TEST(TextTraining, TwoAndThreeReplicasSplitByTokensTrainWhatOneReplicaDoes) {
  TempDir dir;
  // SGD: a step linear in the gradient, so reordered sums stay rounding-sized (Adam's
  // g / sqrt(v) would magnify them where a gradient is rounding noise, as the key biases'
  // are: softmax ignores a bias added to every key).
  const std::string job = "train --model bert-tiny --data text:" + kTexts +
                          " --optimizer sgd --lr 0.05 --batch 16 --threads 1 --progress 0 --device cpu";
  const std::string steps = " --steps 3 --seed 5 --save ";
  const CommandResult one = run(job + steps + dir.file("one.safetensors"));
  ASSERT_EQ(one.status, 0) << one.output;
  const CommandResult two = run(job + " --replicas 2 --mode dp" + steps + dir.file("two.safetensors"));
  ASSERT_EQ(two.status, 0) << two.output;
  const CommandResult three = run(job + " --replicas 3 --mode ddp" + steps + dir.file("three.safetensors"));
  ASSERT_EQ(three.status, 0) << three.output;
  // (Per tensor, but relative to the model's largest parameter: the key biases are noise.)
  expect_same_maths(dir.file("one.safetensors"), dir.file("two.safetensors"), 1e-5, true);
  expect_same_maths(dir.file("one.safetensors"), dir.file("three.safetensors"), 1e-5, true);
  EXPECT_NE(two.output.find("data parallel (dp, local) over 2 replicas"), std::string::npos) << two.output;
}

TEST(TextTraining, ExplainShowsTheTokensOfEachReplica) {
  const CommandResult r = run(kTextJob + " --steps 1 --replicas 2 --explain");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--split even, by tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("int64 token ids, padded to the batch's longest text"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" tokens), replica 1 rows "), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dpcore::testing
