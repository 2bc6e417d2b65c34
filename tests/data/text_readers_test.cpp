// The text readers: UTF-8, the fortune databases, TSV files and class folders, duplicates
// and the hash split (engine/data/text, docs/text.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/data/text/fortunes.h"
#include "engine/data/text/text_files.h"
#include "engine/data/text/text_spec.h"
#include "engine/data/text/utf8.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data::text {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

void write_file(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Utf8, AcceptsValidAndFindsTheFirstInvalidByte) {
  EXPECT_EQ(invalid_utf8_offset("plain \xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), std::string::npos);
  EXPECT_EQ(invalid_utf8_offset("ab\xE9z"), 2u);              // Latin-1 é
  EXPECT_EQ(invalid_utf8_offset("a\xC0\xAF"), 1u);            // overlong '/'
  EXPECT_EQ(invalid_utf8_offset("a\xED\xA0\x80"), 1u);        // a surrogate
  EXPECT_EQ(invalid_utf8_offset("a\xF4\x90\x80\x80"), 1u);    // above U+10FFFF
  EXPECT_EQ(invalid_utf8_offset("ab\xE2\x82"), 2u);           // cut short
  const std::u32string cps = decode_utf8("\x41\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(cps, (std::u32string{0x41, 0xE9, 0x20AC, 0x1F600}));
  EXPECT_EQ(encode_utf8(cps), "\x41\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(Fortunes, EntriesAreTheTextBetweenPercentLines) {
  const std::string file = "first  \r\nline two\n%\n\n%\r\n\n  indented\n\n%\nlast, no final %\n";
  EXPECT_EQ(fortune_entries(file), (std::vector<std::string>{"first\nline two", "  indented", "last, no final %"}));
  EXPECT_EQ(fortune_entries("%\n%\n"), std::vector<std::string>{});
}

TEST(Fortunes, AnEmptyU8FileFallsBackToThePlainFile) {
  TempDir dir;
  write_file(dir.file("a"), "plain");
  write_file(dir.file("a.u8"), "");
  write_file(dir.file("b"), "plain");
  write_file(dir.file("b.u8"), "utf-8");
  write_file(dir.file("c"), "plain");
  EXPECT_EQ(fortune_file_to_read(dir.file("a")), dir.file("a"));
  EXPECT_EQ(fortune_file_to_read(dir.file("b")), dir.file("b.u8"));
  EXPECT_EQ(fortune_file_to_read(dir.file("c")), dir.file("c"));
}

// A fortunes folder laid out as Debian's packages lay it out, one entry per language
// (and the topics' files in the top folder), with the aliases those packages make.
void write_fortune_tree(const std::string& root) {
  const std::map<std::string, std::string> files = {
      {"computers", "Computers entry.\n%\nShared entry\n"},
      {"computers.u8", ""},
      {"definitions", "Definitions entry.\n"}, {"law", "Law entry.\n"}, {"love", "Love entry.\n"},
      {"medicine", "Medicine entry.\n"}, {"politics", "Politics entry.\n"}, {"science", "Science entry.\n"},
      {"songs-poems", "Songs entry.\n%\nShared   entry\n"}, {"sports", "Sports entry.\n"},
      {"startrek", "Star Trek entry.\n"}, {"brasil", "Ol\xC3\xA1.\n"},
      {"de/witze", "Gr\xC3\xBC\xC3\x9F Gott.\n"}, {"de/witze.dat", "\x01\x02binary"},
      {"es/refranes.fortunes", "Hola.\n"}, {"es/off/varios.fortunes", "Ofensivo.\n"},
      {"it/italia", "Ciao.\n"}, {"pl/misc", "Za\xC5\xBC\xC3\xB3\xC5\x82\xC4\x87.\n"}, {"pl/misc.u8", ""},
      {"ru/life", "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82.\n"},
      {"cs/citat", "Ahoj.\n"}, {"cs/klasik-sk", "Dobr\xC3\xBD de\xC5\x88.\n"}, {"eo/proverbaro", "Saluton.\n"},
      {"bg/others", "\xD0\x97\xD0\xB4\xD1\x80\xD0\xB0\xD0\xB2\xD0\xB5\xD0\xB9.\n"}, {"ga/proverbs", "Dia dhuit.\n"}};
  for (const auto& [name, bytes] : files) write_file(root + "/" + name, bytes);
  fs::create_directories(root + "/cz");
  fs::create_symlink("../cs/citat", root + "/cz/citat");
  fs::create_symlink("it/italia", root + "/italia");
  fs::create_symlink("citat", root + "/cs/citat.u8");
}

std::map<std::string, std::vector<std::string>> by_label(const std::vector<LabelledText>& items) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& item : items) out[item.label].push_back(item.text);
  return out;
}

TEST(Fortunes, EveryLanguageFolderOnceAndNoAlias) {
  TempDir dir;
  write_fortune_tree(dir.path());
  const auto langs = by_label(read_fortunes_lang(dir.path()));
  std::vector<std::string> labels;
  for (const auto& [label, texts] : langs) labels.push_back(label);
  EXPECT_EQ(labels, (std::vector<std::string>{"bg", "cs", "de", "en", "eo", "es", "ga", "it", "pl", "pt", "ru", "sk"}));
  EXPECT_EQ(langs.at("cs"), std::vector<std::string>{"Ahoj."});  // cz/citat, cs/citat.u8: aliases
  EXPECT_EQ(langs.at("sk"), std::vector<std::string>{"Dobr\xC3\xBD de\xC5\x88."});
  EXPECT_EQ(langs.at("it"), std::vector<std::string>{"Ciao."});  // not again through the top folder's link
  EXPECT_EQ(langs.at("es").size(), 2u);                           // es/off included
  EXPECT_EQ(langs.at("pl"), std::vector<std::string>{"Za\xC5\xBC\xC3\xB3\xC5\x82\xC4\x87."});
  EXPECT_EQ(langs.at("en").size(), 12u);  // the top folder's files but brasil, duplicates still in
  const auto topics = by_label(read_fortunes_topic(dir.path()));
  EXPECT_EQ(topics.size(), 10u);
  EXPECT_EQ(topics.at("computers"), (std::vector<std::string>{"Computers entry.", "Shared entry"}));
}

TEST(Fortunes, MissingFoldersAndInvalidUtf8AreNamed) {
  TempDir dir;
  write_fortune_tree(dir.path());
  fs::remove_all(dir.file("eo"));
  EXPECT_NE(error_of([&] { read_fortunes_lang(dir.path()); }).find("eo not found: install Debian's fortunes-eo"),
            std::string::npos);
  write_fortune_tree(dir.file("again"));
  write_file(dir.file("again/ru/life"), "ok\n%\nstill ok\n\xD0\n");
  EXPECT_EQ(error_of([&] { read_fortunes_lang(dir.file("again")); }),
            dir.file("again/ru/life") + " line 4: invalid UTF-8 (byte 0xD0)");
}

TEST(TextDataset, DuplicatesGoAndTheSplitDependsOnlyOnTheTexts) {
  std::vector<LabelledText> items;
  for (int i = 0; i < 2000; ++i) items.push_back({i % 3 == 0 ? "b" : "a", "text number " + std::to_string(i)});
  items.push_back({"a", "text  number\n0"});  // a duplicate of "text number 0" (label b): b is dropped for a
  std::vector<LabelledText> reversed(items.rbegin(), items.rend());
  const TextDataset train = make_text_dataset("t", items, Split::train);
  const TextDataset test = make_text_dataset("t", items, Split::test);
  const TextDataset train_r = make_text_dataset("t", reversed, Split::train);
  const TextDataset test_r = make_text_dataset("t", reversed, Split::test);
  EXPECT_EQ(train.texts, train_r.texts);
  EXPECT_EQ(train.labels, train_r.labels);
  EXPECT_EQ(test.texts, test_r.texts);
  EXPECT_EQ(train.texts.size() + test.texts.size(), 2000u);
  // 10% test: 200 expected, binomial sd sqrt(2000 * 0.1 * 0.9) = 13.4; 4 sd either side.
  EXPECT_NEAR(double(test.texts.size()), 200.0, 54.0);
  EXPECT_EQ(train.class_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_NO_THROW(check_text_dataset(train));
  for (const std::string& t : test.texts) EXPECT_EQ(std::count(train.texts.begin(), train.texts.end(), t), 0) << t;
  const TextDataset& has_zero = in_test_split(duplicate_key("text number 0")) ? test : train;
  const auto pos = std::find_if(has_zero.texts.begin(), has_zero.texts.end(),
                                [](const std::string& t) { return duplicate_key(t) == "text number 0"; });
  ASSERT_NE(pos, has_zero.texts.end());
  EXPECT_EQ(has_zero.labels[size_t(pos - has_zero.texts.begin())], 0) << "the duplicate's first label, a";
  EXPECT_EQ(describe(train), std::to_string(train.texts.size()) + " texts, 2 classes");
}

TEST(TextFiles, TsvLinesAndTheirErrors) {
  TempDir dir;
  write_file(dir.file("ok.tsv"), "pos\tgood film\r\n\nneg\tbad\tfilm\n");
  const auto items = read_text_tsv(dir.file("ok.tsv"));
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[1].label, "neg");
  EXPECT_EQ(items[1].text, "bad\tfilm");
  write_file(dir.file("notab.tsv"), "pos\tfine\nno tab here\n");
  EXPECT_EQ(error_of([&] { read_text_tsv(dir.file("notab.tsv")); }),
            dir.file("notab.tsv") + " line 2: no tab (expected label<TAB>text)");
  write_file(dir.file("latin1.tsv"), "pos\tfine\npos\tfine\nneg\tcaf\xE9\n");
  EXPECT_EQ(error_of([&] { read_text_tsv(dir.file("latin1.tsv")); }),
            dir.file("latin1.tsv") + " line 3: invalid UTF-8 (byte 0xE9)");
  write_file(dir.file("empty.tsv"), "pos\tfine\nneg\t  \n");
  EXPECT_EQ(error_of([&] { read_text_tsv(dir.file("empty.tsv")); }),
            dir.file("empty.tsv") + " line 2: empty text after the tab");
  EXPECT_NE(error_of([&] { load_text_split("text:" + dir.file("none.tsv"), Split::train); }).find("not found"),
            std::string::npos);
}

TEST(TextFiles, ClassFoldersSortedAndTheirErrors) {
  TempDir dir;
  write_file(dir.file("d/zebra/1.txt"), "stripes");
  write_file(dir.file("d/ant/x/2.txt"), "six legs");
  write_file(dir.file("d/ant/readme.md"), "not a text");
  const auto items = read_text_dir(dir.file("d"));
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].label, "ant");
  EXPECT_EQ(items[0].text, "six legs");
  const TextDataset all_train = load_text_split("text:" + dir.file("d"), Split::train);
  EXPECT_EQ(all_train.class_names, (std::vector<std::string>{"ant", "zebra"}));
  write_file(dir.file("d/zebra/2.txt"), "\n \n");
  EXPECT_EQ(error_of([&] { read_text_dir(dir.file("d")); }), dir.file("d/zebra/2.txt") + ": empty text");
}

TEST(TextSpec, NamesTheFormsItAccepts) {
  EXPECT_TRUE(is_text_data("fortunes-lang"));
  EXPECT_TRUE(is_text_data("text:x.tsv"));
  EXPECT_FALSE(is_text_data("cifar10:dir"));
  EXPECT_NE(error_of([] { load_text_split("fortunes:x", Split::train); }).find("expected fortunes-lang[:DIR]"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_text_split("text:", Split::train); }).find("empty path"), std::string::npos);
}

// The real packages (scripts/install-deps.sh installs them): every language, no replacement
// characters, and the same sets whatever order the files are read in.
TEST(FortunesPackages, EveryLanguageDecodedAndSplitStable) {
  if (!fs::exists(std::string(kFortunesDir) + "/ga")) GTEST_SKIP() << "Debian's fortunes packages are not installed";
  std::vector<LabelledText> items = read_fortunes_lang(kFortunesDir);
  for (const auto& item : items)
    ASSERT_EQ(item.text.find("\xEF\xBF\xBD"), std::string::npos) << item.label << ": " << item.text;
  const TextDataset train = make_text_dataset("train", items, Split::train);
  const TextDataset test = make_text_dataset("test", items, Split::test);
  std::reverse(items.begin(), items.end());
  EXPECT_EQ(make_text_dataset("train", items, Split::train).texts, train.texts);
  EXPECT_EQ(make_text_dataset("test", items, Split::test).labels, test.labels);
  const double total = double(train.texts.size() + test.texts.size());
  EXPECT_NEAR(double(test.texts.size()) / total, 0.1, 0.01);
  EXPECT_EQ(train.class_names.size(), 12u);
  std::string counts;
  for (size_t c = 0; c < train.class_names.size(); ++c) {
    const auto n = std::count(train.labels.begin(), train.labels.end(), int64_t(c)) +
                   std::count(test.labels.begin(), test.labels.end(), int64_t(c));
    EXPECT_GE(n, 100) << train.class_names[c] << ": fewer entries than the smallest package (fortunes-ga) holds";
    counts += " " + train.class_names[c] + " " + std::to_string(n);
  }
  std::cout << "fortunes-lang: " << train.texts.size() << " train, " << test.texts.size() << " test;" << counts << "\n";
  EXPECT_EQ(load_text_split("fortunes-topic", Split::train).class_names.size(), 10u);
}

}  // namespace
}  // namespace dpcore::data::text
