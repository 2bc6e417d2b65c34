// BERT's uncased WordPiece tokenizer, its vocabulary and the vocabulary builder
// (engine/data/text), and the tokens against Hugging Face's own tokenizers: a committed
// sample always, the whole corpus when bench/.venv-hf exists (docs/text.md).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "engine/data/text/basic_tokenizer.h"
#include "engine/data/text/fortunes.h"
#include "engine/data/text/text_spec.h"
#include "engine/data/text/utf8.h"
#include "engine/data/text/vocab_builder.h"
#include "engine/data/text/wordpiece.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::data::text {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  for (const std::u32string& w : basic_tokenize(text)) out.push_back(encode_utf8(w));
  return out;
}

using Words = std::vector<std::string>;

TEST(BasicTokenizer, LowerCaseNoAccentsPunctuationAndCjkSplit) {
  EXPECT_EQ(words_of("H\xC3\xA9llo, WORLD!"), (Words{"hello", ",", "world", "!"}));
  EXPECT_EQ(words_of("$5^x`y"), (Words{"$", "5", "^", "x", "`", "y"}));  // ASCII symbols count as punctuation
  EXPECT_EQ(words_of("\xE2\x80\x94" "dash\xC2\xBF"), (Words{"\xE2\x80\x94", "dash", "\xC2\xBF"}));  // Pd, Po
  EXPECT_EQ(words_of("\xE6\x97\xA5\xE6\x9C\xAC" "abc"), (Words{"\xE6\x97\xA5", "\xE6\x9C\xAC", "abc"}));
  EXPECT_EQ(words_of("a\x01" "b\x7F" "c\tnext\r\nline"), (Words{"abc", "next", "line"}));  // controls dropped
  EXPECT_EQ(words_of("zero\xE2\x80\x8Bwidth a\xE2\x80\xA8" "b"), (Words{"zerowidth", "a", "b"}));  // Cf dropped, U+2028 splits
  EXPECT_EQ(words_of("o\xCC\x88 \xCC\x81"), (Words{"o"}));  // a lone mark is no word
  // Python's str.lower: a final sigma stays final, İ loses its dot once accents go.
  EXPECT_EQ(words_of("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3 \xCE\xA3"), (Words{"\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82", "\xCF\x83"}));
  EXPECT_EQ(words_of("\xC4\xB0stanbul"), (Words{"istanbul"}));
  EXPECT_NE(error_of([] { basic_tokenize("bad \xE9"); }).find("invalid UTF-8 at byte 4"), std::string::npos);
}

Vocab small_vocab() {
  return Vocab({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "a", "##a", ",", "x"}, "test");
}

TEST(WordPiece, LongestMatchFirstAndUnknownWords) {
  const WordPieceTokenizer tok(small_vocab());
  EXPECT_EQ(tok.tokenize("UNAFFABLE, a aa"), (Words{"un", "##aff", "##able", ",", "a", "a", "##a"}));
  EXPECT_EQ(tok.tokenize("unaffablez un"), (Words{"[UNK]", "un"}));  // no piece for "z": the whole word
  EXPECT_EQ(tok.tokenize(std::string(100, 'a') + " " + std::string(101, 'a')).back(), "[UNK]");
  EXPECT_EQ(tok.tokenize(std::string(100, 'a')).size(), 100u);
  EXPECT_EQ(tok.tokenize("a[MASK]x [mask]"), (Words{"a", "[MASK]", "x", "[UNK]", "[UNK]", "[UNK]"}));
}

TEST(WordPiece, EncodeAddsClsAndSepAndRefusesOrTruncatesLongTexts) {
  const WordPieceTokenizer tok(small_vocab());
  EXPECT_EQ(tok.encode("un a", 8, false), (std::vector<int64_t>{2, 5, 8, 3}));
  EXPECT_EQ(tok.encode("a a a a", 4, true), (std::vector<int64_t>{2, 8, 8, 3}));
  EXPECT_EQ(error_of([&] { tok.encode("a a a a", 4, false); }),
            "a text of 6 tokens (with [CLS] and [SEP]) is longer than the maximum length 4 (truncate it with "
            "--truncate): \"a a a a\"");
  EXPECT_NE(error_of([] { WordPieceTokenizer(Vocab({"[UNK]", "[CLS]"}, "v.txt")); }).find("v.txt: no [SEP] token"),
            std::string::npos);
}

TEST(Vocab, ReadsAndWritesVocabTxtAndNamesItsErrors) {
  TempDir dir;
  small_vocab().write(dir.file("vocab.txt"));
  const Vocab back = Vocab::read(dir.file("vocab.txt"));
  EXPECT_EQ(back.tokens(), small_vocab().tokens());
  EXPECT_EQ(back.id_of("##able"), 7);
  EXPECT_EQ(back.id_of("absent"), -1);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1) << "no temporary left";
  std::ofstream(dir.file("dup.txt")) << "[UNK]\r\nhello\r\nworld\r\nhello\r\n";
  EXPECT_EQ(error_of([&] { Vocab::read(dir.file("dup.txt")); }),
            dir.file("dup.txt") + " line 4: duplicate token \"hello\" (first on line 2)");
  std::ofstream(dir.file("nounk.txt")) << "[PAD]\nhello\n";
  EXPECT_EQ(error_of([&] { Vocab::read(dir.file("nounk.txt")); }), dir.file("nounk.txt") + ": no [UNK] token");
  std::ofstream(dir.file("blank.txt")) << "[UNK]\n\nhello\n";
  EXPECT_EQ(error_of([&] { Vocab::read(dir.file("blank.txt")); }), dir.file("blank.txt") + " line 2: empty token");
}

TEST(VocabBuilder, MergesTheMostFrequentPairTiesByText) {
  // Words ab x3 and abc: units a ##b ##c; (a, ##b) counts 4 and merges first, then (ab, ##c).
  VocabSummary s;
  const Vocab v = build_vocab({"ab AB ab", "abc"}, 10, &s);
  EXPECT_EQ(v.tokens(), (Words{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "##b", "##c", "a", "ab", "abc"}));
  EXPECT_EQ(s.words, 4);
  EXPECT_EQ(s.distinct_words, 2);
  EXPECT_EQ(s.merges, 2);
  // (a, ##b) and (c, ##d) both count 1: the pair whose text sorts first goes first.
  EXPECT_EQ(build_vocab({"cd ab"}, 10).tokens().back(), "ab");
  EXPECT_EQ(build_vocab({"cd ab"}, 20).tokens().back(), "cd");  // and no pair is left after both
  EXPECT_EQ(build_vocab({"cd ab"}, 20).size(), 11);
  EXPECT_EQ(error_of([] { build_vocab({"abc"}, 7); }),
            "vocab: a vocabulary of 7 tokens has no room for the 5 special tokens and the 3 characters of the "
            "training texts (at least 8)");
  // Every training word tokenizes without [UNK] under the vocabulary built from it.
  const WordPieceTokenizer tok(build_vocab({"the cat sat on the mat", "zebras"}, 40));
  for (const std::string& piece : tok.tokenize("the cat sat on the mat zebras")) EXPECT_NE(piece, "[UNK]");
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The Rust tokenizer lowercases character by character, so a final sigma is a plain one
// there (Python's str.lower, which dpcore follows, makes it final): compared to it, both
// sides have final sigmas made plain.
Words final_sigma_plain(Words words) {
  for (std::string& w : words)
    for (size_t at; (at = w.find("\xCF\x82")) != std::string::npos;) w.replace(at, 2, "\xCF\x83");
  return words;
}

// Our tokens and basic words against Hugging Face's, per text: the Python tokenizer's
// ("legacy", "basic") and the Rust one's ("fast", "fast_basic", present where they differ).
struct Comparison {
  static constexpr const char* kKeys[4] = {"legacy", "fast", "basic", "fast_basic"};
  size_t texts = 0, tokens = 0, final_sigma_only = 0;
  size_t mismatches[4] = {0, 0, 0, 0};
  std::string first_mismatch[4];

  std::string report() const {
    std::string r;
    for (size_t k = 0; k < 4; ++k) r += std::string(" ") + kKeys[k] + " " + std::to_string(mismatches[k]);
    return r + " (and " + std::to_string(final_sigma_only) + " differ from the Rust tokenizer in final sigmas only)";
  }
};

Comparison compare(const WordPieceTokenizer& tok, const std::vector<std::string>& texts,
                   const std::vector<nlohmann::json>& hf) {
  Comparison c;
  EXPECT_EQ(texts.size(), hf.size());
  for (size_t i = 0; i < std::min(texts.size(), hf.size()); ++i) {
    const Words ours[4] = {tok.tokenize(texts[i]), {}, words_of(texts[i]), {}};
    const Words theirs[4] = {hf[i]["legacy"].get<Words>(), hf[i].value("fast", hf[i]["legacy"]).get<Words>(),
                             hf[i]["basic"].get<Words>(), hf[i].value("fast_basic", hf[i]["basic"]).get<Words>()};
    ++c.texts;
    c.tokens += ours[0].size();
    bool sigma_only = false;
    for (size_t k = 0; k < 4; ++k) {
      const bool rust = k % 2 == 1;
      const Words& mine = ours[rust ? k - 1 : k];
      if (mine == theirs[k]) continue;
      if (rust && final_sigma_plain(mine) == final_sigma_plain(theirs[k])) {
        sigma_only = true;
        continue;
      }
      if (c.mismatches[k]++ > 0) continue;
      c.first_mismatch[k] = texts[i] + "\n ours " + nlohmann::json(mine).dump() + "\n HF   " + nlohmann::json(theirs[k]).dump();
    }
    c.final_sigma_only += sigma_only;
  }
  return c;
}

void expect_no_mismatch(const Comparison& c) {
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(c.mismatches[k], 0u) << Comparison::kKeys[k] << ": " << c.first_mismatch[k];
}

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/fixtures/text/" + name; }

TEST(WordPieceVsHuggingFace, CommittedSample) {
  std::vector<std::string> texts;
  for (const auto& j : read_jsonl(fixture("sample_texts.jsonl"))) texts.push_back(j.get<std::string>());
  const WordPieceTokenizer tok(Vocab::read(fixture("vocab.txt")));
  const Comparison c = compare(tok, texts, read_jsonl(fixture("sample_hf_tokens.jsonl")));
  EXPECT_GT(c.texts, 1000u);
  expect_no_mismatch(c);
  std::cout << "tokenizer vs Hugging Face, committed sample: " << c.texts << " texts, " << c.tokens
            << " tokens; texts that differ:" << c.report() << "\n";
}

// The vocabulary builder is deterministic: on the installed packages it rebuilds the
// committed vocab.txt (scripts/make_tokenizer_fixture.sh) token for token.
TEST(WordPieceVsHuggingFace, CommittedVocabRebuilds) {
  if (!fs::exists(std::string(kFortunesDir) + "/ga")) GTEST_SKIP() << "Debian's fortunes packages are not installed";
  const TextDataset train = load_text_split("fortunes-lang", Split::train);
  EXPECT_EQ(build_vocab(train.texts, 3000).tokens(), Vocab::read(fixture("vocab.txt")).tokens());
}

// Opt-in: every text of fortunes-lang (both splits) through Hugging Face's tokenizers, when
// bench/.venv-hf exists (bench/install-hf-tokenizers.sh); docs/text.md records the result.
TEST(WordPieceVsHuggingFace, WholeCorpus) {
  const std::string python = testing::source_dir() + "/bench/.venv-hf/bin/python";
  if (!fs::exists(python)) GTEST_SKIP() << "no bench/.venv-hf (bench/install-hf-tokenizers.sh)";
  if (!fs::exists(std::string(kFortunesDir) + "/ga")) GTEST_SKIP() << "Debian's fortunes packages are not installed";
  std::vector<std::string> texts = load_text_split("fortunes-lang", Split::train).texts;
  for (std::string& t : load_text_split("fortunes-lang", Split::test).texts) texts.push_back(std::move(t));
  TempDir dir;
  {
    std::ofstream out(dir.file("texts.jsonl"));
    for (const std::string& t : texts) out << nlohmann::json(t).dump() << "\n";
  }
  const std::string vocab = fixture("vocab.txt");
  const auto run = testing::run_python_script(
      "tests/data/hf_wordpiece.py", "'" + vocab + "' '" + dir.file("texts.jsonl") + "' '" + dir.file("hf.jsonl") + "'",
      python);
  ASSERT_EQ(run.status, 0) << run.output;
  const Comparison c = compare(WordPieceTokenizer(Vocab::read(vocab)), texts, read_jsonl(dir.file("hf.jsonl")));
  expect_no_mismatch(c);
  std::cout << "tokenizer vs Hugging Face, whole corpus: " << c.texts << " texts, " << c.tokens
            << " tokens; texts that differ:" << c.report() << "\n";
}

}  // namespace
}  // namespace dpcore::data::text
