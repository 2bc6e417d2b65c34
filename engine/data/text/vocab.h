// A WordPiece vocabulary in Hugging Face's vocab.txt format: one token per line, its id the
// line's number from 0. BERT's special tokens are ordinary entries of it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dpcore::data::text {

inline constexpr const char* kPadToken = "[PAD]";
inline constexpr const char* kUnkToken = "[UNK]";
inline constexpr const char* kClsToken = "[CLS]";
inline constexpr const char* kSepToken = "[SEP]";
inline constexpr const char* kMaskToken = "[MASK]";
// In the order a built vocabulary lists them first (ids 0 to 4).
inline const std::vector<std::string> kSpecialTokens = {kPadToken, kUnkToken, kClsToken, kSepToken, kMaskToken};

class Vocab {
 public:
  // Throws dpcore::Error naming `source` (a file, or what built the tokens) when a token is
  // empty or appears twice (with both positions), or when there is no [UNK].
  Vocab(std::vector<std::string> tokens, const std::string& source);

  // Reads vocab.txt (UTF-8; a "\r" ending a line is not part of its token).
  static Vocab read(const std::string& path);
  // Writes vocab.txt atomically (engine/io/atomic_file.h).
  void write(const std::string& path) const;

  int64_t size() const { return int64_t(tokens_.size()); }
  const std::string& token(int64_t id) const { return tokens_[size_t(id)]; }
  // The token's id, or -1 when it is not in the vocabulary.
  int64_t id_of(const std::string& token) const;
  // The id of a token that must be present (the special tokens), else an error naming it.
  int64_t required_id(const std::string& token) const;
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::string& source() const { return source_; }  // the file it was read from, for messages

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  std::string source_;
};

}  // namespace dpcore::data::text
