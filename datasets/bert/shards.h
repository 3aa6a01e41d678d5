// Sharded binary format for packed BERT records, and a prefetching reader that streams them in a
// seeded random order, each process reading its replicas' slice of every global batch.
//
// Shard file (little-endian):
//   header, 64 bytes: magic "BERTPAK\0", u32 version (1), u32 header bytes (64),
//     u32 max_seq_length, u32 masked_slots, u32 max_per_pack, u32 record_bytes,
//     u64 record_count, u32 payload_crc32 (over every record, without the records' CRCs), u32
//     vocab_size, 12 reserved zero bytes, u32 header_crc32 (over bytes 0..59);
//   record_count x (record_bytes of fields in PackedRecord order, then u32 crc32 of them).
// Every field is a fixed-width array, so a record is found by its index without an index table.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "datasets/bert/packing.h"

namespace datasets::bert {

inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  PackedLayout layout;
  uint32_t recordBytes = 0;  // without the CRC
  uint64_t recordCount = 0;
  uint32_t payloadCrc = 0;
  uint32_t vocabSize = 0;
  uint64_t fileBytes() const { return kShardHeaderBytes + recordCount * (recordBytes + 4ull); }
};

uint32_t recordBytesFor(const PackedLayout& layout);

// Byte-level parsers (fuzzable): throw DatasetError naming `name` (and the record) on any
// inconsistency; never read outside `bytes`.
ShardHeader parseShardHeader(std::span<const uint8_t> bytes, const std::string& name);
// `bytes` = one record and its CRC (recordBytes + 4).
PackedRecord parseShardRecord(std::span<const uint8_t> bytes, const ShardHeader& header,
                              const std::string& name, uint64_t index);
// A whole shard in memory: header, size, payload CRC and every record.
std::vector<PackedRecord> parseShard(std::span<const uint8_t> bytes, const std::string& name);

void encodeRecord(const PackedRecord& record, const PackedLayout& layout,
                  std::vector<uint8_t>& out);

class ShardWriter {
 public:
  ShardWriter(const std::string& path, const PackedLayout& layout, uint32_t vocabSize);
  ~ShardWriter();
  void write(const PackedRecord& record);
  void close();  // writes the final header; called by the destructor if needed
  uint64_t count() const { return header_.recordCount; }

 private:
  std::string path_;
  ShardHeader header_;
  std::FILE* file_ = nullptr;
  std::vector<uint8_t> buffer_;
};

// Reads the header and checks that the file size matches it (truncation error otherwise).
ShardHeader readShardHeader(const std::string& path);
// Reads the whole shard and checks the payload CRC and each record's CRC.
void verifyShard(const std::string& path);

struct ReaderConfig {
  uint64_t seed = 0;
  int processIndex = 0;  // this MPI process
  int processCount = 1;
  int localBatch = 1;    // records per process per step (its replicas x micro-batch)
  size_t prefetch = 64;  // records read ahead by the background thread
};

// Streams the records of all shards: each epoch a seeded shuffle of every (shard, record); the
// order is cut into global batches of processCount * localBatch records and this process takes
// slice [processIndex * localBatch, +localBatch) of each. The last partial global batch is dropped
// so every process sees the same number of records.
class ShardReader {
 public:
  ShardReader(std::vector<std::string> shardPaths, const ReaderConfig& config);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  void startEpoch(uint64_t epoch);
  // The next record of this epoch, or false at its end. Rethrows a read error (e.g. a record's
  // CRC mismatch naming the shard and record).
  bool next(PackedRecord& record);
  uint64_t recordsPerEpoch() const { return mine_.size(); }
  const PackedLayout& layout() const { return headers_.front().layout; }

 private:
  void stop();
  void produce();
  std::vector<std::string> paths_;
  std::vector<ShardHeader> headers_;
  std::vector<int> fds_;
  ReaderConfig config_;
  std::vector<std::pair<uint32_t, uint64_t>> mine_;  // (shard, record) of this epoch, in order
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<PackedRecord> queue_;
  size_t produced_ = 0, consumed_ = 0;
  bool finished_ = false;
  std::exception_ptr error_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace datasets::bert
