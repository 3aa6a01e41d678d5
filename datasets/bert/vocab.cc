#include "datasets/bert/vocab.h"

#include <fstream>
#include <sstream>

#include "datasets/bert/utf8.h"
#include "datasets/error.h"

namespace datasets::bert {
namespace {

constexpr std::string_view kContinuation = "##";

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DatasetError("cannot open vocabulary " + path, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

uint64_t Vocab::hashOf(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h | 1;  // 0 marks an empty slot
}

std::string_view Vocab::keyOf(const Table& table, int32_t id) const {
  std::string_view t = tokens_[static_cast<size_t>(id)];
  if (&table == &continuation_) t.remove_prefix(kContinuation.size());
  return t;
}

int32_t Vocab::lookup(const Table& table, std::string_view key) const {
  const uint64_t h = hashOf(key);
  const size_t mask = table.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = table[i];
    if (s.hash == 0) return -1;
    if (s.hash == h && keyOf(table, s.id) == key) return s.id;
  }
}

void Vocab::insert(Table& table, std::string_view key, int32_t id) {
  const uint64_t h = hashOf(key);
  const size_t mask = table.size() - 1;
  size_t i = h & mask;
  while (table[i].hash != 0) i = (i + 1) & mask;
  table[i] = {h, id};
}

Vocab Vocab::parse(std::string_view bytes, const std::string& name) {
  requireUtf8(bytes, name);
  std::vector<std::string> tokens;
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t end = bytes.find('\n', pos);
    if (end == std::string_view::npos) end = bytes.size();
    std::string_view line = bytes.substr(pos, end - pos);
    // The reference strips each line (vocab files written on Windows end in \r\n).
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    tokens.emplace_back(line);
    pos = end + 1;
  }
  return fromTokens(std::move(tokens), name);
}

Vocab Vocab::load(const std::string& path) {
  return parse(readFile(path), path);
}

Vocab Vocab::fromTokens(std::vector<std::string> tokens, const std::string& name) {
  Vocab v;
  v.tokens_ = std::move(tokens);
  v.build(name);
  return v;
}

void Vocab::build(const std::string& name) {
  if (tokens_.empty())
    throw DatasetError(name + ": empty vocabulary (expected one token per line)", name);
  if (tokens_.size() > (1u << 24))
    throw DatasetError(
        name + ": " + std::to_string(tokens_.size()) + " tokens; at most 16777216 are supported",
        name);
  size_t capacity = 16;
  while (capacity < 2 * tokens_.size()) capacity *= 2;
  initial_.assign(capacity, {});
  continuation_.assign(capacity, {});
  maxPieceBytes_ = 0;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    const std::string where = name + ":" + std::to_string(i + 1) + ": ";
    if (t.empty())
      throw DatasetError(
          where + "empty token (expected one token per line; hint: remove blank lines)", name);
    const int32_t id = static_cast<int32_t>(i);
    const bool cont = t.size() > kContinuation.size() && t.starts_with(kContinuation);
    Table& table = cont ? continuation_ : initial_;
    const std::string_view key = cont ? std::string_view(t).substr(kContinuation.size()) : t;
    const int32_t previous = lookup(table, key);
    if (previous >= 0)
      throw DatasetError(where + "duplicate token '" + t + "' (first at line " +
                             std::to_string(previous + 1) + ")",
                         name);
    insert(table, key, id);
    maxPieceBytes_ = std::max(maxPieceBytes_, key.size());
  }
  const SpecialIds expected;
  const std::pair<const char*, int32_t> specials[] = {{"[PAD]", expected.pad},
                                                      {"[UNK]", expected.unk},
                                                      {"[CLS]", expected.cls},
                                                      {"[SEP]", expected.sep},
                                                      {"[MASK]", expected.mask}};
  for (const auto& [token, id] : specials) {
    const int32_t found = find(token);
    if (found < 0)
      throw DatasetError(name + ": special token " + token + " missing (expected at line " +
                             std::to_string(id + 1) + ", id " + std::to_string(id) +
                             "; hint: use BERT's uncased vocab.txt layout)",
                         name);
    if (found != id)
      throw DatasetError(name + ":" + std::to_string(found + 1) + ": special token " + token +
                             " has id " + std::to_string(found) + ", expected " +
                             std::to_string(id) + " (the model's embedding rows assume it)",
                         name);
  }
  special_ = expected;
}

std::string Vocab::serialize() const {
  std::string out;
  for (const auto& t : tokens_) {
    out += t;
    out += '\n';
  }
  return out;
}

}  // namespace datasets::bert
