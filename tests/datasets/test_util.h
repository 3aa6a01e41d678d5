// Helpers for the datasets tests: scratch directories and generated images.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

namespace datasets::testing {

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("datasets_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::vector<uint8_t> readAll(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void writeAll(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A photo-like BGR test image: gradients plus a seed-dependent pattern.
inline cv::Mat makeTestImage(int width, int height, int seed) {
  cv::Mat m(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      m.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>((x * 255) / width),
                                        static_cast<uint8_t>((y * 255) / height),
                                        static_cast<uint8_t>((x * 7 + y * 3 + seed * 40) % 256));
    }
  }
  return m;
}

inline void writeJpeg(const std::filesystem::path& p, const cv::Mat& img, int quality = 90) {
  std::filesystem::create_directories(p.parent_path());
  if (!cv::imwrite(p.string(), img, {cv::IMWRITE_JPEG_QUALITY, quality})) {
    throw std::runtime_error("cannot write " + p.string());
  }
}

}  // namespace datasets::testing
