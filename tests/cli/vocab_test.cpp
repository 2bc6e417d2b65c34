// `dpcore vocab`: a vocab.txt from a text dataset's train split, written atomically, and its
// errors naming the value (cli/vocab_command.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_run.h"
#include "engine/data/text/text_spec.h"
#include "engine/data/text/vocab.h"
#include "engine/data/text/vocab_builder.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

namespace fs = std::filesystem;

TEST(VocabCommand, WritesTheBuiltVocabularyOfTheTrainSplit) {
  TempDir dir;
  {
    std::ofstream tsv(dir.file("reviews.tsv"));
    for (int i = 0; i < 200; ++i) tsv << (i % 2 ? "pos\tgood film number " : "neg\tbad movie number ") << i << "\n";
  }
  const CommandResult r = run("vocab --data text:" + dir.file("reviews.tsv") + " --vocab-size 60 --out " + dir.file("vocab.txt"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("60 tokens written to " + dir.file("vocab.txt")), std::string::npos) << r.output;
  const data::text::TextDataset train =
      data::text::load_text_split("text:" + dir.file("reviews.tsv"), data::Split::train);
  EXPECT_EQ(data::text::Vocab::read(dir.file("vocab.txt")).tokens(), data::text::build_vocab(train.texts, 60).tokens());
}

TEST(VocabCommand, ASizeTooSmallOrBadDataWritesNothing) {
  TempDir dir;
  std::ofstream(dir.file("t.tsv")) << "a\tsome text\nb\tno tab next\nc\n";
  CommandResult r = run("vocab --data text:" + dir.file("t.tsv") + " --vocab-size 40 --out " + dir.file("vocab.txt"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(dir.file("t.tsv") + " line 3: no tab"), std::string::npos) << r.output;
  std::ofstream(dir.file("ok.tsv")) << "a\tsome text\nb\tother words\n";
  r = run("vocab --data text:" + dir.file("ok.tsv") + " --vocab-size 6 --out " + dir.file("vocab.txt"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("a vocabulary of 6 tokens has no room"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("vocab.txt")));
  r = run("vocab --data text:" + dir.file("ok.tsv") + " --out " + dir.file("vocab.txt"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--vocab-size is required"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dpcore::testing
