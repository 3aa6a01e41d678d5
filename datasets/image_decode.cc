#include "datasets/image_decode.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <opencv2/imgcodecs.hpp>

#include "datasets/decode_limits.h"
#include "datasets/error.h"

namespace datasets {

void checkImageDimensions(uint64_t width, uint64_t height, const std::string& name,
                          const DecodeLimits& limits) {
  const char* hint =
      "refused before decoding (a broken or malicious file, e.g. a decompression bomb): remove "
      "or replace it";
  if (width == 0 || height == 0) {
    throw CorruptSampleError(
        fmt::format("{}: corrupt image: the header claims {}x{} pixels", name, width, height),
        name);
  }
  if (width > limits.maxSide || height > limits.maxSide) {
    throw CorruptSampleError(
        fmt::format("{}: corrupt image: the header claims {}x{} pixels, a side above the decode "
                    "limit of {}; {}",
                    name, width, height, limits.maxSide, hint),
        name);
  }
  if (width * height > limits.maxPixels) {
    throw CorruptSampleError(
        fmt::format("{}: corrupt image: the header claims {}x{} = {} pixels, above the decode "
                    "limit of {}; {}",
                    name, width, height, width * height, limits.maxPixels, hint),
        name);
  }
}

void checkFileBytes(uint64_t bytes, const std::string& name, const DecodeLimits& limits) {
  if (bytes > limits.maxFileBytes) {
    throw CorruptSampleError(
        fmt::format("{}: {} bytes, above the decode limit of {} bytes per file; refused before "
                    "reading (a broken or malicious file)",
                    name, bytes, limits.maxFileBytes),
        name);
  }
}

namespace {

[[noreturn]] void corrupt(const std::string& name, const std::string& what) {
  throw CorruptSampleError(fmt::format("{}: corrupt image: {}", name, what), name);
}

ImageHeader inspectJpeg(std::span<const uint8_t> d, const std::string& name) {
  ImageHeader h;
  h.format = ImageFormat::kJpeg;
  const size_t n = d.size();
  // Walk the marker segments up to the first SOS; the SOF gives the frame size.
  size_t pos = 2;
  size_t sos = 0;
  while (sos == 0) {
    if (pos + 4 > n) corrupt(name, fmt::format("file ends at byte {} inside the JPEG header", n));
    if (d[pos] != 0xFF) {
      corrupt(name, fmt::format("expected a JPEG marker (0xFF) at byte offset {}, found 0x{:02x}",
                                pos, d[pos]));
    }
    uint8_t m = d[pos + 1];
    if (m == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // standalone markers
      pos += 2;
      continue;
    }
    if (m == 0xD9) corrupt(name, fmt::format("EOI marker at byte offset {} before any scan", pos));
    const size_t len = (size_t{d[pos + 2]} << 8) | d[pos + 3];
    if (len < 2 || pos + 2 + len > n) {
      corrupt(name, fmt::format("JPEG segment 0x{:02x} at byte offset {} claims {} bytes but the "
                                "file has {} (truncated file)",
                                m, pos, len, n));
    }
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof) {
      if (len < 8) corrupt(name, fmt::format("short SOF segment at byte offset {}", pos));
      h.height = (d[pos + 5] << 8) | d[pos + 6];
      h.width = (d[pos + 7] << 8) | d[pos + 8];
      h.components = d[pos + 9];
    }
    if (m == 0xDA) sos = pos;
    pos += 2 + len;
  }
  if (h.width <= 0 || h.height <= 0) corrupt(name, "no JPEG frame header (SOF) before the scan");
  checkImageDimensions(static_cast<uint64_t>(h.width), static_cast<uint64_t>(h.height), name);
  // Entropy-coded data never contains 0xFFD9 (0xFF is byte-stuffed), so an EOI after the first
  // scan means the file is complete. Trailing bytes after EOI are tolerated.
  bool eoi = false;
  for (size_t i = n - 1; i > sos + 1; --i) {
    if (d[i] == 0xD9 && d[i - 1] == 0xFF) {
      eoi = true;
      break;
    }
  }
  if (!eoi) {
    corrupt(name, fmt::format("no JPEG end-of-image marker (0xFFD9) after the scan data starting "
                              "at byte offset {}; the file ({} bytes) is truncated",
                              sos, n));
  }
  return h;
}

ImageHeader inspectPng(std::span<const uint8_t> d, const std::string& name) {
  ImageHeader h;
  h.format = ImageFormat::kPng;
  const size_t n = d.size();
  if (n < 8 + 25 + 12) corrupt(name, fmt::format("PNG file of only {} bytes", n));
  auto be32 = [&](size_t o) {
    return (uint32_t{d[o]} << 24) | (uint32_t{d[o + 1]} << 16) | (uint32_t{d[o + 2]} << 8) |
           d[o + 3];
  };
  if (std::memcmp(d.data() + 12, "IHDR", 4) != 0) corrupt(name, "PNG without IHDR chunk");
  checkImageDimensions(be32(16), be32(20), name);  // also keeps them inside int
  h.width = static_cast<int>(be32(16));
  h.height = static_cast<int>(be32(20));
  if (std::memcmp(d.data() + n - 8, "IEND", 4) != 0) {
    corrupt(name, fmt::format("no PNG IEND chunk at the end of the file ({} bytes); the file is "
                              "truncated",
                              n));
  }
  return h;
}

}  // namespace

void readFileBytes(const std::filesystem::path& path, std::vector<uint8_t>& out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    throw CorruptSampleError(
        fmt::format("{}: cannot open image file: {}", path.string(), std::strerror(errno)),
        path.string());
  }
  out.clear();
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  if (size < 0) {
    std::fclose(f);
    throw CorruptSampleError(fmt::format("{}: cannot determine the file size", path.string()),
                             path.string());
  }
  try {
    checkFileBytes(static_cast<uint64_t>(size), path.string());
  } catch (...) {
    std::fclose(f);
    throw;
  }
  out.resize(static_cast<size_t>(size));
  const size_t got = size ? std::fread(out.data(), 1, out.size(), f) : 0;
  std::fclose(f);
  if (got != out.size()) {
    throw CorruptSampleError(fmt::format("{}: read {} of {} bytes", path.string(), got, out.size()),
                             path.string());
  }
}

ImageHeader inspectImage(std::span<const uint8_t> d, const std::string& name) {
  checkFileBytes(d.size(), name);
  static constexpr uint8_t kPngSig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (d.size() >= 4 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return inspectJpeg(d, name);
  if (d.size() >= 8 && std::memcmp(d.data(), kPngSig, 8) == 0) return inspectPng(d, name);
  if (d.empty()) corrupt(name, "empty file");
  corrupt(name, fmt::format("not a JPEG or PNG file (first bytes {:02x})",
                            fmt::join(d.subspan(0, std::min<size_t>(d.size(), 4)), " ")));
}

cv::Mat decodeImageBgr(std::span<const uint8_t> data, const std::string& name, int reduce,
                       ImageHeader* headerOut) {
  const ImageHeader h = inspectImage(data, name);
  if (headerOut) *headerOut = h;
  int flags = cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION;
  if (h.format == ImageFormat::kJpeg) {
    switch (reduce) {
      case 1:
        break;
      case 2:
        flags |= cv::IMREAD_REDUCED_COLOR_2;
        break;
      case 4:
        flags |= cv::IMREAD_REDUCED_COLOR_4;
        break;
      case 8:
        flags |= cv::IMREAD_REDUCED_COLOR_8;
        break;
      default:
        throw DatasetError(
            fmt::format("decodeImageBgr: reduce must be 1, 2, 4 or 8, got {}", reduce));
    }
  } else {
    reduce = 1;  // PNG has no DCT scaling; callers map coordinates with the returned size.
  }
  // cv::Mat header over the caller's bytes: no copy.
  const cv::Mat buf(1, static_cast<int>(data.size()), CV_8UC1, const_cast<uint8_t*>(data.data()));
  cv::Mat img;
  try {
    img = cv::imdecode(buf, flags);
  } catch (const cv::Exception& e) {
    corrupt(name, fmt::format("decoder error: {}", e.what()));
  }
  if (img.empty()) corrupt(name, "the decoder rejected the file");
  const int ew = (h.width + reduce - 1) / reduce, eh = (h.height + reduce - 1) / reduce;
  if (img.type() != CV_8UC3 || img.cols != ew || img.rows != eh) {
    corrupt(name, fmt::format("decoded {}x{} type {} but the header says {}x{}", img.cols, img.rows,
                              img.type(), ew, eh));
  }
  return img;
}

cv::Mat decodeImageFileBgr(const std::filesystem::path& path, int reduce) {
  std::vector<uint8_t> bytes;
  readFileBytes(path, bytes);
  return decodeImageBgr(bytes, path.string(), reduce);
}

}  // namespace datasets
