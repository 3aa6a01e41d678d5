// WordPiece vocabulary: one token per line, id = line index (google-research/bert's vocab.txt).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace datasets::bert {

// The special tokens and the ids the uncased BERT vocabulary (and the model) give them.
struct SpecialIds {
  int32_t pad = 0;
  int32_t unk = 100;
  int32_t cls = 101;
  int32_t sep = 102;
  int32_t mask = 103;
};

class Vocab {
 public:
  // Parses vocabulary bytes; `name` (a file name) is used in errors. Throws DatasetError on
  // non-UTF-8 bytes, an empty or duplicate token, or special tokens missing / not at their ids.
  static Vocab parse(std::string_view bytes, const std::string& name);
  static Vocab load(const std::string& path);
  // Builds from a token list (the trainer); the same checks as parse().
  static Vocab fromTokens(std::vector<std::string> tokens, const std::string& name);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  const std::vector<std::string>& tokens() const { return tokens_; }
  const SpecialIds& special() const { return special_; }
  // Id of a word-initial piece ("un"), or -1.
  int32_t find(std::string_view piece) const { return lookup(initial_, piece); }
  // Id of a continuation piece given without its "##" ("##able" -> find("able")), or -1.
  int32_t findContinuation(std::string_view piece) const { return lookup(continuation_, piece); }
  // Longest piece in bytes (bounds the greedy search).
  size_t maxPieceBytes() const { return maxPieceBytes_; }
  std::string serialize() const;  // one token per line

 private:
  // Open addressing; a slot's key is tokens_[id] (without "##" in the continuation table), so
  // the tables stay valid when a Vocab is copied or moved.
  struct Slot {
    uint64_t hash = 0;
    int32_t id = -1;
  };
  using Table = std::vector<Slot>;
  static uint64_t hashOf(std::string_view s);
  int32_t lookup(const Table& table, std::string_view key) const;
  std::string_view keyOf(const Table& table, int32_t id) const;
  void insert(Table& table, std::string_view key, int32_t id);
  void build(const std::string& name);

  std::vector<std::string> tokens_;
  Table initial_, continuation_;
  SpecialIds special_;
  size_t maxPieceBytes_ = 0;
};

}  // namespace datasets::bert
