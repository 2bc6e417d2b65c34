#include "engine/data/text/vocab.h"

#include "engine/data/text/read_utf8_file.h"
#include "engine/io/atomic_file.h"
#include "kernels/error.h"

namespace dpcore::data::text {

Vocab::Vocab(std::vector<std::string> tokens, const std::string& source)
    : tokens_(std::move(tokens)), source_(source) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    DPCORE_CHECK(!tokens_[i].empty(), source_, " line ", i + 1, ": empty token");
    auto [it, fresh] = ids_.emplace(tokens_[i], int64_t(i));
    DPCORE_CHECK(fresh, source_, " line ", i + 1, ": duplicate token \"", tokens_[i], "\" (first on line ",
                 it->second + 1, ")");
  }
  DPCORE_CHECK(ids_.count(kUnkToken), source_, ": no ", kUnkToken, " token");
}

Vocab Vocab::read(const std::string& path) {
  const std::string bytes = read_utf8_file(path);
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    std::string line = bytes.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(std::move(line));
    start = end + 1;
  }
  return Vocab(std::move(tokens), path);
}

void Vocab::write(const std::string& path) const {
  std::string bytes;
  for (const std::string& token : tokens_) bytes += token + "\n";
  io::AtomicFileWriter out(path, "vocab");
  out.write(bytes.data(), bytes.size());
  out.commit();
}

int64_t Vocab::id_of(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

int64_t Vocab::required_id(const std::string& token) const {
  const int64_t id = id_of(token);
  DPCORE_CHECK(id >= 0, source_, ": no ", token, " token");
  return id;
}

}  // namespace dpcore::data::text
