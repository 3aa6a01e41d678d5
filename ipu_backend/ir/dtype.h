// Element types of the IR. f16/bf16 are first-class in the IR (storage, printing, planning);
// compute paths for them arrive with the precision passes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ipu {

enum class DType : std::uint8_t { F32, F16, BF16, I32 };

constexpr std::int64_t sizeOf(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
  }
  return 0;
}

constexpr std::string_view dtypeName(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
  }
  return "?";
}

inline std::optional<DType> parseDType(std::string_view s) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  if (s == "i32") return DType::I32;
  return std::nullopt;
}

constexpr bool isFloat(DType t) { return t != DType::I32; }

}  // namespace ipu
