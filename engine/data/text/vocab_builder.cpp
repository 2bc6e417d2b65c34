#include "engine/data/text/vocab_builder.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "engine/data/text/basic_tokenizer.h"
#include "engine/data/text/utf8.h"
#include "kernels/error.h"

namespace dpcore::data::text {

namespace {

using PairKey = uint64_t;  // left unit << 32 | right unit
PairKey pair_key(uint32_t left, uint32_t right) { return uint64_t(left) << 32 | right; }
uint32_t left_of(PairKey key) { return uint32_t(key >> 32); }
uint32_t right_of(PairKey key) { return uint32_t(key); }

struct Word {
  std::vector<uint32_t> units;
  int64_t count;
};

class Merger {
 public:
  Merger(std::vector<std::string> units, std::vector<Word> words) : units_(std::move(units)), words_(std::move(words)) {
    for (size_t i = 0; i < units_.size(); ++i) ids_[units_[i]] = uint32_t(i);
    for (size_t w = 0; w < words_.size(); ++w) add_pairs(uint32_t(w), +1);
    for (const auto& [key, count] : counts_) queue_.push({count, key});
  }

  // The next merge's new unit text, or false when no pair is left.
  bool merge_best(std::string& merged) {
    while (!queue_.empty()) {
      const Candidate best = queue_.top();
      queue_.pop();
      const auto it = counts_.find(best.key);
      if (it == counts_.end() || it->second != best.count) continue;  // stale
      merged = units_[left_of(best.key)] + continuation(units_[right_of(best.key)]);
      merge(best.key, unit_id(merged));
      return true;
    }
    return false;
  }

 private:
  struct Candidate {
    int64_t count;
    PairKey key;
  };
  // The queue's order: the highest count first, then the pair whose texts sort first.
  struct Later {
    const Merger* m;
    bool operator()(const Candidate& a, const Candidate& b) const {
      if (a.count != b.count) return a.count < b.count;
      const auto ta = std::tie(m->units_[left_of(a.key)], m->units_[right_of(a.key)]);
      const auto tb = std::tie(m->units_[left_of(b.key)], m->units_[right_of(b.key)]);
      return ta > tb;
    }
  };

  static std::string continuation(const std::string& unit) { return unit.rfind("##", 0) == 0 ? unit.substr(2) : unit; }

  uint32_t unit_id(const std::string& text) {
    const auto [it, fresh] = ids_.emplace(text, uint32_t(units_.size()));
    if (fresh) units_.push_back(text);
    return it->second;
  }

  void add_pairs(uint32_t w, int sign) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.units.size(); ++i) {
      const PairKey key = pair_key(word.units[i], word.units[i + 1]);
      counts_[key] += sign * word.count;
      touched_.insert(key);
      if (sign > 0) words_of_[key].insert(w);
    }
  }

  void merge(PairKey key, uint32_t merged) {
    std::vector<uint32_t> affected(words_of_[key].begin(), words_of_[key].end());
    std::sort(affected.begin(), affected.end());
    touched_.clear();
    for (uint32_t w : affected) {
      add_pairs(w, -1);
      for (size_t i = 0; i + 1 < words_[w].units.size(); ++i) words_of_[pair_key(words_[w].units[i], words_[w].units[i + 1])].erase(w);
      std::vector<uint32_t>& u = words_[w].units;
      std::vector<uint32_t> out;
      for (size_t i = 0; i < u.size(); ++i) {
        if (i + 1 < u.size() && pair_key(u[i], u[i + 1]) == key) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(u[i]);
        }
      }
      u = std::move(out);
      add_pairs(w, +1);
    }
    for (PairKey k : touched_) {
      const auto it = counts_.find(k);
      if (it->second <= 0) {
        counts_.erase(it);
        words_of_.erase(k);
      } else {
        queue_.push({it->second, k});
      }
    }
  }

  std::vector<std::string> units_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<Word> words_;
  std::unordered_map<PairKey, int64_t> counts_;
  std::unordered_map<PairKey, std::unordered_set<uint32_t>> words_of_;
  std::unordered_set<PairKey> touched_;
  std::priority_queue<Candidate, std::vector<Candidate>, Later> queue_{Later{this}};
};

}  // namespace

Vocab build_vocab(const std::vector<std::string>& texts, int64_t vocab_size, VocabSummary* summary) {
  VocabSummary s;
  std::map<std::u32string, int64_t> word_counts;
  for (const std::string& text : texts) {
    for (std::u32string& word : basic_tokenize(text)) {
      ++word_counts[std::move(word)];
      ++s.words;
    }
  }
  s.texts = int64_t(texts.size());
  s.distinct_words = int64_t(word_counts.size());
  std::set<std::string> alphabet;
  for (const auto& [word, count] : word_counts)
    for (size_t i = 0; i < word.size(); ++i) alphabet.insert((i ? "##" : "") + encode_utf8(word.substr(i, 1)));
  s.alphabet = int64_t(alphabet.size());

  std::vector<std::string> tokens = kSpecialTokens;
  tokens.insert(tokens.end(), alphabet.begin(), alphabet.end());
  DPCORE_CHECK(vocab_size >= int64_t(tokens.size()), "vocab: a vocabulary of ", vocab_size,
               " tokens has no room for the ", kSpecialTokens.size(), " special tokens and the ", alphabet.size(),
               " characters of the training texts (at least ", tokens.size(), ")");

  std::vector<std::string> units(alphabet.begin(), alphabet.end());
  std::unordered_map<std::string, uint32_t> unit_ids;
  for (size_t i = 0; i < units.size(); ++i) unit_ids[units[i]] = uint32_t(i);
  std::vector<Word> words;
  words.reserve(word_counts.size());
  for (const auto& [word, count] : word_counts) {
    Word w{{}, count};
    for (size_t i = 0; i < word.size(); ++i) w.units.push_back(unit_ids.at((i ? "##" : "") + encode_utf8(word.substr(i, 1))));
    words.push_back(std::move(w));
  }
  std::unordered_set<std::string> in_vocab(tokens.begin(), tokens.end());
  Merger merger(std::move(units), std::move(words));
  std::string merged;
  while (int64_t(tokens.size()) < vocab_size && merger.merge_best(merged)) {
    ++s.merges;
    if (in_vocab.insert(merged).second) tokens.push_back(merged);
  }
  if (summary) *summary = s;
  return Vocab(std::move(tokens), "vocab: the built vocabulary");
}

}  // namespace dpcore::data::text
