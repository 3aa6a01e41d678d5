#include "datasets/fashion_mnist.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cstring>

#include "datasets/decode_limits.h"
#include "datasets/error.h"

namespace datasets {
namespace {

constexpr const char* kHint =
    "hint: install Debian's dataset-fashion-mnist package or pass the data directory";

[[noreturn]] void fail(const std::string& name, size_t offset, const std::string& what,
                       const std::string& found, const char* hint = nullptr) {
  throw DatasetError(fmt::format("{}: at byte offset {}: expected {}, found {}{}{}", name, offset,
                                 what, found, hint ? "; " : "", hint ? hint : ""),
                     name);
}

uint32_t readBe32(std::span<const uint8_t> d, size_t off) {
  return (uint32_t{d[off]} << 24) | (uint32_t{d[off + 1]} << 16) | (uint32_t{d[off + 2]} << 8) |
         uint32_t{d[off + 3]};
}

// Checks the header: magic, then `dims` big-endian dimensions. Returns the dimensions.
std::vector<uint32_t> readHeader(const std::string& path, std::span<const uint8_t> d,
                                 uint32_t magic, int dims, const char* kind) {
  const size_t headerBytes = 4 + 4 * static_cast<size_t>(dims);
  if (d.size() < headerBytes) {
    fail(path, d.size(), fmt::format("a {}-byte IDX header ({})", headerBytes, kind),
         fmt::format("end of file after {} bytes (truncated file)", d.size()));
  }
  const uint32_t got = readBe32(d, 0);
  if (got != magic) {
    fail(path, 0, fmt::format("IDX magic 0x{:08x} ({})", magic, kind),
         fmt::format("0x{:08x} (not an IDX {} file, or a gzip file that is damaged)", got, kind));
  }
  std::vector<uint32_t> out;
  for (int i = 0; i < dims; ++i) out.push_back(readBe32(d, 4 + 4 * i));
  return out;
}

}  // namespace

std::vector<uint8_t> readMaybeGzip(const std::filesystem::path& path, uint64_t maxBytes) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw DatasetError(fmt::format("{}: file not found; {}", path.string(), kHint), path.string());
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) {
    throw DatasetError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)),
                       path.string());
  }
  gzbuffer(f, 1 << 17);
  std::vector<uint8_t> out;
  const size_t chunk = 1 << 20;
  for (;;) {
    const size_t old = out.size();
    if (old > maxBytes) {  // a gzip bomb stops here, not at the memory's end
      gzclose(f);
      checkFileBytes(old, fmt::format("{} (decompressed)", path.string()),
                     DecodeLimits{.maxFileBytes = maxBytes});
    }
    out.resize(old + chunk);
    const int n = gzread(f, out.data() + old, static_cast<unsigned>(chunk));
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      throw DatasetError(
          fmt::format("{}: at decompressed byte offset {}: expected a valid gzip stream, found "
                      "a decompression error ({})",
                      path.string(), old, msg),
          path.string());
    }
    out.resize(old + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // zlib reports a stream cut short only through gzerror after the final read.
  int err = Z_OK;
  const std::string msg = gzerror(f, &err);
  gzclose(f);
  if (err != Z_OK && err != Z_STREAM_END) {
    throw DatasetError(fmt::format("{}: at decompressed byte offset {}: expected the rest of the "
                                   "gzip stream, found {} (truncated or damaged .gz file)",
                                   path.string(), out.size(), msg),
                       path.string());
  }
  return out;
}

ImageDataset parseIdxImages(std::span<const uint8_t> d, const std::string& path) {
  checkFileBytes(d.size(), path);
  const auto dims = readHeader(path, d, 0x00000803, 3, "images");
  const uint64_t count = dims[0], rows = dims[1], cols = dims[2];
  checkImageDimensions(cols, rows, path);         // the same limits as the image decoders
  const uint64_t expected = count * rows * cols;  // < 2^32 * 2^28: no overflow
  const uint64_t got = d.size() - 16;
  if (got != expected) {
    fail(path, 16,
         fmt::format("{} bytes of pixel data ({} images of {}x{})", expected, count, rows, cols),
         fmt::format("{} bytes ({})", got, got < expected ? "truncated file" : "trailing bytes"));
  }
  ImageDataset ds;
  ds.count = static_cast<int64_t>(count);
  ds.height = static_cast<int>(rows);
  ds.width = static_cast<int>(cols);
  ds.channels = 1;
  ds.pixels.assign(d.begin() + 16, d.end());
  return ds;
}

std::vector<int32_t> parseIdxLabels(std::span<const uint8_t> d, const std::string& path,
                                    int numClasses) {
  checkFileBytes(d.size(), path);
  const auto dims = readHeader(path, d, 0x00000801, 1, "labels");
  const uint64_t count = dims[0];
  const uint64_t got = d.size() - 8;
  if (got != count) {
    fail(path, 8, fmt::format("{} bytes of label data", count),
         fmt::format("{} bytes ({})", got, got < count ? "truncated file" : "trailing bytes"));
  }
  std::vector<int32_t> labels(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t v = d[8 + i];
    if (v >= numClasses) {
      fail(path, 8 + i, fmt::format("a label in 0..{}", numClasses - 1),
           fmt::format("{} (label of sample {})", v, i));
    }
    labels[i] = v;
  }
  return labels;
}

ImageDataset readIdxImages(const std::filesystem::path& path) {
  return parseIdxImages(readMaybeGzip(path), path.string());
}

std::vector<int32_t> readIdxLabels(const std::filesystem::path& path, int numClasses) {
  return parseIdxLabels(readMaybeGzip(path), path.string(), numClasses);
}

namespace {
std::filesystem::path pickFile(const std::filesystem::path& dir, const std::string& stem) {
  const auto gz = dir / (stem + ".gz");
  const auto plain = dir / stem;
  std::error_code ec;
  if (std::filesystem::is_regular_file(gz, ec)) return gz;
  if (std::filesystem::is_regular_file(plain, ec)) return plain;
  throw DatasetError(fmt::format("{}: file not found (nor uncompressed {}); {}", gz.string(),
                                 plain.filename().string(), kHint),
                     gz.string());
}
}  // namespace

ImageDataset loadFashionMnist(const std::filesystem::path& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const auto imagesPath = pickFile(dir, prefix + "-images-idx3-ubyte");
  const auto labelsPath = pickFile(dir, prefix + "-labels-idx1-ubyte");
  ImageDataset ds = readIdxImages(imagesPath);
  ds.labels = readIdxLabels(labelsPath, kFashionMnistClasses);
  ds.numClasses = kFashionMnistClasses;
  if (static_cast<int64_t>(ds.labels.size()) != ds.count) {
    throw DatasetError(
        fmt::format("{}: at byte offset 4: expected {} labels (the image count of {}), found {}",
                    labelsPath.string(), ds.count, imagesPath.string(), ds.labels.size()),
        labelsPath.string());
  }
  return ds;
}

}  // namespace datasets
