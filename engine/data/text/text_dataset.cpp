#include "engine/data/text/text_dataset.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "kernels/error.h"

namespace dpcore::data::text {

static bool is_layout_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

std::string duplicate_key(const std::string& text) {
  std::string key;
  key.reserve(text.size());
  bool pending_space = false;
  for (char ch : text) {
    if (is_layout_space(ch)) {
      pending_space = !key.empty();
      continue;
    }
    if (pending_space) key += ' ';
    pending_space = false;
    key += ch;
  }
  return key;
}

uint64_t text_hash(const std::string& key) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : key) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

bool in_test_split(const std::string& key) { return text_hash(key) % 10 == 0; }

TextDataset make_text_dataset(const std::string& name, const std::vector<LabelledText>& items, Split split) {
  TextDataset data;
  data.name = name;
  for (const LabelledText& item : items) data.class_names.push_back(item.label);
  std::sort(data.class_names.begin(), data.class_names.end());
  data.class_names.erase(std::unique(data.class_names.begin(), data.class_names.end()), data.class_names.end());

  // Per key, the item whose label sorts first (then its text, for a total order).
  std::map<std::string, const LabelledText*> chosen;
  for (const LabelledText& item : items) {
    std::string key = duplicate_key(item.text);
    if (key.empty() || in_test_split(key) != (split == Split::test)) continue;
    auto [it, fresh] = chosen.emplace(std::move(key), &item);
    if (!fresh && std::tie(item.label, item.text) < std::tie(it->second->label, it->second->text)) it->second = &item;
  }
  std::vector<std::tuple<uint64_t, const std::string*, const LabelledText*>> order;
  order.reserve(chosen.size());
  for (const auto& [key, item] : chosen) order.emplace_back(text_hash(key), &key, item);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::get<0>(a) != std::get<0>(b) ? std::get<0>(a) < std::get<0>(b) : *std::get<1>(a) < *std::get<1>(b);
  });
  for (const auto& entry : order) {
    const LabelledText& item = *std::get<2>(entry);
    data.texts.push_back(item.text);
    data.sources.push_back(item.source);
    const auto cls = std::lower_bound(data.class_names.begin(), data.class_names.end(), item.label);
    data.labels.push_back(int64_t(cls - data.class_names.begin()));
  }
  return data;
}

void check_text_dataset(const TextDataset& data) {
  DPCORE_CHECK(data.labels.size() == data.texts.size(), data.name, ": ", data.texts.size(), " texts but ",
               data.labels.size(), " labels");
  for (size_t i = 0; i < data.labels.size(); ++i) {
    DPCORE_CHECK(data.labels[i] >= 0 && data.labels[i] < int64_t(data.class_names.size()), data.name, ": text ", i,
                 " has label ", data.labels[i], ", outside the ", data.class_names.size(), " classes");
  }
}

std::string describe(const TextDataset& data) {
  return std::to_string(data.texts.size()) + " texts, " + std::to_string(data.class_names.size()) + " classes";
}

}  // namespace dpcore::data::text
