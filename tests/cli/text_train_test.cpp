// `dpcore train` on text (docs/text.md, "Training"): --data text:FILE.tsv tokenized with the
// committed vocabulary, bert-tiny with the data's classes, batches padded per batch, and
// the confusion table at the end; a text longer than --max-len is refused naming its line.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_run.h"
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

}  // namespace
}  // namespace dpcore::testing
