// Fashion-MNIST / MNIST IDX files, gzip-compressed or plain.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "datasets/decode_limits.h"
#include "datasets/image_dataset.h"

namespace datasets {

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kFashionMnistClasses = 10;

enum class Split { kTrain, kTest };

// Reads the whole file, decompressing gzip transparently (plain files are read as they are).
// Throws DatasetError on a missing/unreadable file or a damaged gzip stream, and once the
// decompressed bytes pass `maxBytes` (decode_limits.h: a gzip bomb).
std::vector<uint8_t> readMaybeGzip(const std::filesystem::path& path,
                                   uint64_t maxBytes = kDecodeLimits.maxFileBytes);

// IDX3 (magic 0x00000803) images -> [count, rows, cols, 1] uint8 (labels left empty). Rows and
// cols obey kDecodeLimits (decode_limits.h), as every image decoder does.
ImageDataset readIdxImages(const std::filesystem::path& path);
// IDX1 (magic 0x00000801) labels, each checked against 0..numClasses-1.
std::vector<int32_t> readIdxLabels(const std::filesystem::path& path, int numClasses);
// The same two over bytes already in memory (decompressed); errors name `name`.
ImageDataset parseIdxImages(std::span<const uint8_t> bytes, const std::string& name);
std::vector<int32_t> parseIdxLabels(std::span<const uint8_t> bytes, const std::string& name,
                                    int numClasses);

// Loads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (the .gz is preferred when both
// exist) and checks that image and label counts agree.
ImageDataset loadFashionMnist(const std::filesystem::path& dir = kDefaultFashionMnistDir,
                              Split split = Split::kTrain);

}  // namespace datasets
