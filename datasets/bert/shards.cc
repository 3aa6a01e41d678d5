#include "datasets/bert/shards.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <numeric>

#include "datasets/error.h"
#include "datasets/rng.h"

namespace datasets::bert {
namespace {

static_assert(std::endian::native == std::endian::little, "shards are written little-endian");

constexpr char kMagic[8] = {'B', 'E', 'R', 'T', 'P', 'A', 'K', '\0'};

uint32_t crc(std::span<const uint8_t> bytes) {
  uLong c = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths; records and headers are far below 4 GiB.
  c = crc32(c, bytes.data(), static_cast<uInt>(bytes.size()));
  return static_cast<uint32_t>(c);
}

template <typename T>
void put(std::vector<uint8_t>& out, const std::vector<T>& v) {
  const size_t at = out.size();
  out.resize(at + v.size() * sizeof(T));
  std::memcpy(out.data() + at, v.data(), v.size() * sizeof(T));
}
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}
template <typename T>
void get(std::span<const uint8_t> in, size_t& at, std::vector<T>& v) {
  std::memcpy(v.data(), in.data() + at, v.size() * sizeof(T));
  at += v.size() * sizeof(T);
}
template <typename T>
T get(std::span<const uint8_t> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

std::vector<uint8_t> encodeHeader(const ShardHeader& h) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  put<uint32_t>(out, kShardVersion);
  put<uint32_t>(out, kShardHeaderBytes);
  put<uint32_t>(out, static_cast<uint32_t>(h.layout.maxSeqLength));
  put<uint32_t>(out, static_cast<uint32_t>(h.layout.maskedSlots));
  put<uint32_t>(out, static_cast<uint32_t>(h.layout.maxPerPack));
  put<uint32_t>(out, h.recordBytes);
  put<uint64_t>(out, h.recordCount);
  put<uint32_t>(out, h.payloadCrc);
  put<uint32_t>(out, h.vocabSize);
  out.resize(60, 0);
  put<uint32_t>(out, crc(out));
  return out;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DatasetError("cannot open shard " + path, path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

uint32_t recordBytesFor(const PackedLayout& l) {
  return static_cast<uint32_t>(l.maxSeqLength * (4 + 1 + 1 + 2) + l.maskedSlots * (2 + 4 + 1) +
                               l.maxPerPack * (2 + 1 + 1));
}

void encodeRecord(const PackedRecord& r, const PackedLayout& layout, std::vector<uint8_t>& out) {
  const size_t start = out.size();
  put(out, r.inputIds);
  put(out, r.inputMask);
  put(out, r.segmentIds);
  put(out, r.positions);
  put(out, r.maskedPositions);
  put(out, r.maskedIds);
  put(out, r.maskedWeights);
  put(out, r.clsPositions);
  put(out, r.nspLabels);
  put(out, r.nspWeights);
  if (out.size() - start != recordBytesFor(layout))
    throw DatasetError("shard: record does not match the layout");
  put<uint32_t>(out, crc(std::span<const uint8_t>(out).subspan(start)));
}

ShardHeader parseShardHeader(std::span<const uint8_t> bytes, const std::string& name) {
  const auto fail = [&](const std::string& what) -> ShardHeader {
    throw DatasetError("shard " + name + ": " + what, name);
  };
  if (bytes.size() < kShardHeaderBytes)
    return fail("truncated header (" + std::to_string(bytes.size()) + " bytes, expected " +
                std::to_string(kShardHeaderBytes) + ")");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0)
    return fail("bad magic number (not a BERT shard written by prepare_bert_data)");
  if (get<uint32_t>(bytes, 60) != crc(bytes.first(60)))
    return fail("header checksum mismatch (corrupted header)");
  const auto version = get<uint32_t>(bytes, 8);
  if (version != kShardVersion)
    return fail("version " + std::to_string(version) + ", this reader reads version " +
                std::to_string(kShardVersion) + " (hint: re-run prepare_bert_data)");
  if (get<uint32_t>(bytes, 12) != kShardHeaderBytes) return fail("unexpected header size");
  ShardHeader h;
  h.layout.maxSeqLength = static_cast<int>(get<uint32_t>(bytes, 16));
  h.layout.maskedSlots = static_cast<int>(get<uint32_t>(bytes, 20));
  h.layout.maxPerPack = static_cast<int>(get<uint32_t>(bytes, 24));
  h.recordBytes = get<uint32_t>(bytes, 28);
  h.recordCount = get<uint64_t>(bytes, 32);
  h.payloadCrc = get<uint32_t>(bytes, 40);
  h.vocabSize = get<uint32_t>(bytes, 44);
  const auto& l = h.layout;
  if (l.maxSeqLength < 5 || l.maxSeqLength > 65535 || l.maskedSlots < 0 ||
      l.maskedSlots > l.maxSeqLength || l.maxPerPack < 1 || l.maxPerPack > 255)
    return fail("implausible layout (length " + std::to_string(l.maxSeqLength) + ", slots " +
                std::to_string(l.maskedSlots) + ", per pack " + std::to_string(l.maxPerPack) + ")");
  if (h.recordBytes != recordBytesFor(l)) return fail("record size does not match the layout");
  if (h.recordCount > (uint64_t{1} << 40)) return fail("implausible record count");
  return h;
}

PackedRecord parseShardRecord(std::span<const uint8_t> bytes, const ShardHeader& h,
                              const std::string& name, uint64_t index) {
  const std::string where = "shard " + name + ", record " + std::to_string(index) + ": ";
  if (bytes.size() != h.recordBytes + 4ull)
    throw DatasetError(where + "truncated (" + std::to_string(bytes.size()) + " bytes, expected " +
                           std::to_string(h.recordBytes + 4ull) + ")",
                       name);
  if (get<uint32_t>(bytes, h.recordBytes) != crc(bytes.first(h.recordBytes)))
    throw DatasetError(where + "checksum mismatch (corrupted data; hint: re-run prepare_bert_data)",
                       name);
  PackedRecord r(h.layout);
  size_t at = 0;
  get(bytes, at, r.inputIds);
  get(bytes, at, r.inputMask);
  get(bytes, at, r.segmentIds);
  get(bytes, at, r.positions);
  get(bytes, at, r.maskedPositions);
  get(bytes, at, r.maskedIds);
  get(bytes, at, r.maskedWeights);
  get(bytes, at, r.clsPositions);
  get(bytes, at, r.nspLabels);
  get(bytes, at, r.nspWeights);
  // A valid CRC over invalid values means a writer bug or a forged file: still no crash.
  const auto L = static_cast<uint32_t>(h.layout.maxSeqLength);
  const auto K = static_cast<uint32_t>(h.layout.maxPerPack);
  const auto check = [&](bool ok, const char* field) {
    if (!ok) throw DatasetError(where + "field " + field + " out of range", name);
  };
  const auto idOk = [&](int32_t id) {
    return id >= 0 && (h.vocabSize == 0 || static_cast<uint32_t>(id) < h.vocabSize);
  };
  for (uint32_t t = 0; t < L; ++t) {
    check(idOk(r.inputIds[t]), "input_ids");
    check(r.inputMask[t] <= K, "input_mask");
    check(r.segmentIds[t] <= 1, "segment_ids");
    check(r.positions[t] < L, "positions");
  }
  for (size_t m = 0; m < r.maskedPositions.size(); ++m) {
    check(r.maskedPositions[m] < L, "masked_lm_positions");
    check(idOk(r.maskedIds[m]), "masked_lm_ids");
    check(r.maskedWeights[m] <= K, "masked_lm_weights");
  }
  for (uint32_t k = 0; k < K; ++k) {
    check(r.clsPositions[k] < L, "cls_positions");
    check(r.nspLabels[k] <= 1 && r.nspWeights[k] <= 1, "next_sentence_labels");
  }
  return r;
}

std::vector<PackedRecord> parseShard(std::span<const uint8_t> bytes, const std::string& name) {
  const ShardHeader h = parseShardHeader(bytes, name);
  if (bytes.size() != h.fileBytes())
    throw DatasetError("shard " + name + ": " + std::to_string(bytes.size()) +
                           " bytes, the header says " + std::to_string(h.recordCount) +
                           " records = " + std::to_string(h.fileBytes()) +
                           " bytes (truncated or extended file)",
                       name);
  const auto payload = bytes.subspan(kShardHeaderBytes);
  std::vector<PackedRecord> records;
  records.reserve(static_cast<size_t>(h.recordCount));
  const size_t stride = h.recordBytes + 4ull;
  for (uint64_t i = 0; i < h.recordCount; ++i)
    records.push_back(parseShardRecord(payload.subspan(i * stride, stride), h, name, i));
  // Records are individually intact; the payload CRC (over the records without their own CRCs:
  // a CRC over data followed by its CRC is a constant) also catches reordered records.
  uLong all = crc32(0L, Z_NULL, 0);
  for (uint64_t i = 0; i < h.recordCount; ++i)
    all = crc32(all, payload.data() + i * stride, h.recordBytes);
  if (static_cast<uint32_t>(all) != h.payloadCrc)
    throw DatasetError(
        "shard " + name + ": payload checksum mismatch (records reordered or replaced)", name);
  return records;
}

ShardWriter::ShardWriter(const std::string& path, const PackedLayout& layout, uint32_t vocabSize)
    : path_(path) {
  header_.layout = layout;
  header_.recordBytes = recordBytesFor(layout);
  header_.vocabSize = vocabSize;
  header_.payloadCrc = static_cast<uint32_t>(crc32(0L, Z_NULL, 0));
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw DatasetError("cannot create shard " + path, path);
  const auto h = encodeHeader(header_);
  if (std::fwrite(h.data(), 1, h.size(), file_) != h.size())
    throw DatasetError("cannot write shard " + path, path);
}

ShardWriter::~ShardWriter() {
  try {
    close();
  } catch (...) {
  }
}

void ShardWriter::write(const PackedRecord& record) {
  buffer_.clear();
  encodeRecord(record, header_.layout, buffer_);
  header_.payloadCrc = static_cast<uint32_t>(
      crc32(header_.payloadCrc, buffer_.data(), static_cast<uInt>(header_.recordBytes)));
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
    throw DatasetError("cannot write shard " + path_ + " (disk full?)", path_);
  ++header_.recordCount;
}

void ShardWriter::close() {
  if (!file_) return;
  const auto h = encodeHeader(header_);
  const bool ok =
      std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(h.data(), 1, h.size(), file_) == h.size();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) throw DatasetError("cannot finish shard " + path_, path_);
}

ShardHeader readShardHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw DatasetError("cannot open shard " + path, path);
  const auto size = static_cast<uint64_t>(in.tellg());
  std::vector<uint8_t> bytes(std::min<uint64_t>(size, kShardHeaderBytes));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const ShardHeader h = parseShardHeader(bytes, path);
  if (size != h.fileBytes())
    throw DatasetError("shard " + path + ": " + std::to_string(size) + " bytes, the header says " +
                           std::to_string(h.recordCount) + " records = " +
                           std::to_string(h.fileBytes()) + " bytes (truncated: record " +
                           std::to_string((size - std::min<uint64_t>(size, kShardHeaderBytes)) /
                                          (h.recordBytes + 4ull)) +
                           " is the first incomplete one)",
                       path);
  return h;
}

void verifyShard(const std::string& path) {
  const std::string bytes = readAll(path);
  parseShard(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), path);
}

ShardReader::ShardReader(std::vector<std::string> shardPaths, const ReaderConfig& config)
    : paths_(std::move(shardPaths)), config_(config) {
  if (paths_.empty()) throw DatasetError("shard reader: no shards given");
  if (config.processCount < 1 || config.processIndex < 0 ||
      config.processIndex >= config.processCount || config.localBatch < 1)
    throw DatasetError("shard reader: process " + std::to_string(config.processIndex) + " of " +
                       std::to_string(config.processCount) + ", local batch " +
                       std::to_string(config.localBatch) + " is not a valid slice");
  for (const auto& p : paths_) {
    headers_.push_back(readShardHeader(p));
    const auto& a = headers_.front().layout;
    const auto& b = headers_.back().layout;
    if (a.maxSeqLength != b.maxSeqLength || a.maskedSlots != b.maskedSlots ||
        a.maxPerPack != b.maxPerPack)
      throw DatasetError("shard " + p + ": layout differs from shard " + paths_.front(), p);
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw DatasetError("cannot open shard " + p, p);
    fds_.push_back(fd);
  }
}

ShardReader::~ShardReader() {
  stop();
  for (int fd : fds_) ::close(fd);
}

void ShardReader::stop() {
  {
    std::lock_guard lock(mutex_);  // under the lock, or the producer could miss the wake-up
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  stopping_ = false;
}

void ShardReader::startEpoch(uint64_t epoch) {
  stop();
  std::vector<std::pair<uint32_t, uint64_t>> all;
  for (size_t s = 0; s < headers_.size(); ++s)
    for (uint64_t r = 0; r < headers_[s].recordCount; ++r)
      all.emplace_back(static_cast<uint32_t>(s), r);
  Rng rng(hashSeed({config_.seed, epoch}));
  for (size_t i = all.size(); i > 1; --i)
    std::swap(all[i - 1], all[static_cast<size_t>(rng.uniformInt(0, static_cast<int64_t>(i) - 1))]);
  const size_t b = static_cast<size_t>(config_.localBatch);
  const size_t global = b * static_cast<size_t>(config_.processCount);
  mine_.clear();
  for (size_t start = 0; start + global <= all.size(); start += global)
    for (size_t j = 0; j < b; ++j)
      mine_.push_back(all[start + static_cast<size_t>(config_.processIndex) * b + j]);
  {
    std::lock_guard lock(mutex_);
    queue_.clear();
    produced_ = consumed_ = 0;
    finished_ = false;
    error_ = nullptr;
  }
  thread_ = std::thread([this] { produce(); });
}

void ShardReader::produce() {
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < mine_.size(); ++i) {
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || queue_.size() < config_.prefetch; });
      if (stopping_) return;
    }
    const auto [s, r] = mine_[i];
    const ShardHeader& h = headers_[s];
    const size_t stride = h.recordBytes + 4ull;
    buf.resize(stride);
    try {
      const auto offset = static_cast<off_t>(kShardHeaderBytes + r * stride);
      const ssize_t got = ::pread(fds_[s], buf.data(), stride, offset);
      if (got < 0)
        throw DatasetError("shard " + paths_[s] + ": read error at record " + std::to_string(r),
                           paths_[s]);
      buf.resize(static_cast<size_t>(got));
      PackedRecord rec = parseShardRecord(buf, h, paths_[s], r);
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(rec));
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      finished_ = true;
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
  }
  std::lock_guard lock(mutex_);
  finished_ = true;
  cv_.notify_all();
}

bool ShardReader::next(PackedRecord& record) {
  std::unique_lock lock(mutex_);
  if (!thread_.joinable()) throw DatasetError("shard reader: next() before startEpoch()");
  cv_.wait(lock, [&] { return !queue_.empty() || finished_; });
  if (!queue_.empty()) {
    record = std::move(queue_.front());
    queue_.pop_front();
    ++consumed_;
    cv_.notify_all();
    return true;
  }
  if (error_) std::rethrow_exception(error_);
  return false;
}

}  // namespace datasets::bert
