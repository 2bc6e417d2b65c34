// `dpcore tokenize`: a text dataset's two splits as the token ids train feeds the model,
// in one safetensors file written atomically, and its errors naming the value
// (cli/tokenize_command.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "engine/data/spec.h"
#include "engine/io/safetensors.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

namespace fs = std::filesystem;

std::vector<int64_t> int64s(const io::TensorRecord& t) {
  const int64_t* v = t.values<int64_t>();
  return std::vector<int64_t>(v, v + t.numel());
}

// Texts of 1 to 13 words (so --max-len 8 --truncate cuts some), two classes.
void write_reviews(const std::string& path) {
  std::ofstream tsv(path);
  for (int i = 0; i < 200; ++i) {
    tsv << (i % 2 ? "pos\tgood" : "neg\tbad");
    for (int w = 0; w < i % 13; ++w) tsv << " film number " << i;
    tsv << "\n";
  }
}

TEST(TokenizeCommand, WritesTheIdsTrainFeedsTheModel) {
  TempDir dir;
  write_reviews(dir.file("reviews.tsv"));
  const std::string data = "text:" + dir.file("reviews.tsv");
  const CommandResult r = run("tokenize --data " + data + " --max-len 8 --truncate --out " + dir.file("t.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("written to " + dir.file("t.safetensors")), std::string::npos) << r.output;

  data::TextOptions text;
  text.max_len = 8, text.truncate = true;
  const data::DataSplits splits = data::load_data(data::parse_data_specs(data, "", {}, text), false);
  const io::SafetensorsFile f = io::load_safetensors(dir.file("t.safetensors"));
  for (const auto& [name, d] : {std::pair<std::string, const data::Dataset*>{"train", &splits.train},
                                {"test", &splits.test}}) {
    SCOPED_TRACE(name);
    const std::vector<int64_t> ids = int64s(f.at(name + ".ids")), offsets = int64s(f.at(name + ".offsets")),
                               labels = int64s(f.at(name + ".labels"));
    ASSERT_EQ(int64_t(labels.size()), d->n);
    ASSERT_EQ(int64_t(offsets.size()), d->n + 1);
    EXPECT_EQ(offsets.front(), 0);
    EXPECT_EQ(offsets.back(), int64_t(ids.size()));
    int64_t truncated = 0;
    for (int64_t i = 0; i < d->n; ++i) {
      const std::vector<int64_t> text(ids.begin() + offsets[size_t(i)], ids.begin() + offsets[size_t(i) + 1]);
      EXPECT_EQ(text, std::vector<int64_t>(d->ids(i), d->ids(i) + d->length(i))) << "text " << i;
      EXPECT_EQ(labels[size_t(i)], d->labels[size_t(i)]) << "text " << i;
      ASSERT_GE(text.size(), 2u);
      EXPECT_LE(text.size(), 8u);
      truncated += text.size() == 8;
    }
    EXPECT_GT(truncated, 0) << "no text reached --max-len: the truncation was not exercised";
  }
  const auto& meta = f.metadata();
  EXPECT_EQ(nlohmann::json::parse(meta.at("classes")).get<std::vector<std::string>>(), splits.train.class_names);
  EXPECT_EQ(meta.at("pad_id"), std::to_string(splits.train.pad_id));
  EXPECT_EQ(meta.at("vocab_size"), std::to_string(splits.train.vocab_size));
  EXPECT_EQ(meta.at("max_len"), "8");
}

TEST(TokenizeCommand, RefusesWhatTrainRefusesAndWritesNothing) {
  TempDir dir;
  write_reviews(dir.file("reviews.tsv"));
  const std::string out = " --out " + dir.file("t.safetensors");
  CommandResult r = run("tokenize --data text:" + dir.file("reviews.tsv") + " --max-len 8" + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--truncate"), std::string::npos) << r.output;
  r = run("tokenize --data fashion-mnist" + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--data \"fashion-mnist\" is not a text dataset"), std::string::npos) << r.output;
  std::ofstream(dir.file("bad.tsv")) << "a\tsome text\nb no tab\n";
  r = run("tokenize --data text:" + dir.file("bad.tsv") + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(dir.file("bad.tsv") + " line 2: no tab"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("t.safetensors")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 2) << "a temporary file left";
}

}  // namespace
}  // namespace dpcore::testing
