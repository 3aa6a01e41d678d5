// Packed BERT shards (datasets/bert/shards.h): readShardHeader, verifyShard and one epoch of
// ShardReader on a damaged file must end in DatasetError naming the shard, never a crash.
#include "datasets/bert/shards.h"
#include "datasets/error.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ipu::fuzz::writeScratch("shard.bin", data, size).string();
  try {
    datasets::bert::readShardHeader(path);
  } catch (const datasets::DatasetError&) {
    return 0;
  }
  try {
    datasets::bert::verifyShard(path);
  } catch (const datasets::DatasetError&) {
  }
  try {
    datasets::bert::ShardReader reader({path}, datasets::bert::ReaderConfig{});
    reader.startEpoch(0);
    datasets::bert::PackedRecord record(reader.layout());
    for (int i = 0; i < 64 && reader.next(record); ++i) {
    }
  } catch (const datasets::DatasetError&) {
  }
  return 0;
}
