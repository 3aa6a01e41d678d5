// Strict JPEG/PNG decoding with OpenCV. libjpeg only warns on a truncated file ("Premature end
// of JPEG file") and hands back a partly gray image, so the file structure is checked here first.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace datasets {

enum class ImageFormat { kJpeg, kPng };

struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;
  int height = 0;
  int components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK (JPEG); PNG: 0 (not parsed)
};

// Reads a whole file into `out` (reusing its capacity). Throws CorruptSampleError naming the file.
void readFileBytes(const std::filesystem::path& path, std::vector<uint8_t>& out);

// Checks the container: JPEG needs SOI, well-formed marker segments up to the first SOS, a frame
// header (SOF) and an EOI marker after the scan data; PNG needs its signature, IHDR and IEND.
// Throws CorruptSampleError naming `name` and saying what is wrong.
ImageHeader inspectImage(std::span<const uint8_t> data, const std::string& name);

// Decodes to 8-bit 3-channel BGR (OpenCV order; gray and CMYK are converted), ignoring EXIF
// orientation as PIL/torchvision do. `reduce` in {1, 2, 4, 8} uses libjpeg's DCT-domain scaling
// (output size ceil(W/reduce) x ceil(H/reduce)). Throws CorruptSampleError naming `name`.
cv::Mat decodeImageBgr(std::span<const uint8_t> data, const std::string& name, int reduce = 1,
                       ImageHeader* header = nullptr);
cv::Mat decodeImageFileBgr(const std::filesystem::path& path, int reduce = 1);

}  // namespace datasets
