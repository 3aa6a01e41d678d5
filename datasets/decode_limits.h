// The limits every decoder of this folder applies before it allocates (full OpenCV decode, the
// DCT-scaled JPEG decodes, PNG, IDX and its gzip stream), so that a broken or malicious header
// can neither exhaust memory nor make up pixels: one place, the same numbers on every path.
#pragma once

#include <cstdint>
#include <string>

namespace datasets {

struct DecodeLimits {
  // PIL's decompression-bomb error threshold (2 x Image.MAX_IMAGE_PIXELS): what torchvision
  // refuses we refuse too. ImageNet's largest image has about 1/10 of it.
  uint64_t maxPixels = 178956970;
  // Width or height: JPEG's own maximum (libjpeg's JPEG_MAX_DIMENSION), for PNG and IDX too.
  uint64_t maxSide = 65500;
  // One file's bytes (an encoded image; an IDX file after gunzip). ImageNet's largest JPEG is
  // under 16 MB, Fashion-MNIST's training images 47 MB.
  uint64_t maxFileBytes = uint64_t{512} << 20;
};

inline constexpr DecodeLimits kDecodeLimits{};

// Throws CorruptSampleError naming `name` when a header's width x height breaks a limit.
void checkImageDimensions(uint64_t width, uint64_t height, const std::string& name,
                          const DecodeLimits& limits = kDecodeLimits);
// Throws CorruptSampleError naming `name` when `bytes` exceeds limits.maxFileBytes.
void checkFileBytes(uint64_t bytes, const std::string& name,
                    const DecodeLimits& limits = kDecodeLimits);

}  // namespace datasets
