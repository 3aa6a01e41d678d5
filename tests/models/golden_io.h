// Reading tests/fixtures/resnet50/resnet_goldens.json (scripts/goldens/make_resnet_goldens.py):
// arrays are {"shape": [...], "f32_b64": little-endian float32, base64}.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ipu::testing {

inline const nlohmann::json& resnetGoldens() {
  static const nlohmann::json j = [] {
    const std::string path =
        std::string(IPU_SOURCE_DIR) + "/tests/fixtures/resnet50/resnet_goldens.json";
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(f);
  }();
  return j;
}

inline std::vector<float> decodeF32(const nlohmann::json& a) {
  const std::string& s = a.at("f32_b64").get_ref<const std::string&>();
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;  // '=' padding
  };
  std::vector<unsigned char> bytes;
  bytes.reserve(s.size() * 3 / 4);
  unsigned buf = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) break;
    buf = (buf << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<unsigned char>((buf >> bits) & 0xff));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);  // x86: little-endian
  return out;
}

// max |a - b| / max |b|: an error relative to the tensor's scale, robust to near-zero entries.
inline double maxRelToScale(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    s = std::max(s, std::abs(double(b[i])));
  }
  return s > 0 ? d / s : d;
}

// ||a - b||_2 / ||b||_2 over the first min(a, b) elements of b's length.
inline double l2Rel(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() < b.size()) return INFINITY;
  double d = 0, s = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double e = double(a[i]) - double(b[i]);
    d += e * e;
    s += double(b[i]) * double(b[i]);
  }
  return s > 0 ? std::sqrt(d / s) : std::sqrt(d);
}

}  // namespace ipu::testing
