// f16/bf16 conversions: exhaustive over all 16-bit patterns, RNE against the ladder reference
// over a large structured sample of f32 patterns, and vector paths == scalar bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ipu_backend/precision/half.h"
#include "tests/precision/reference.h"

namespace ipu::precision {
namespace {

using testing::kBF16;
using testing::kF16;
using testing::Ladder;

std::uint32_t bitsOf(float f) {
  return std::bit_cast<std::uint32_t>(f);
}
float fromBits(std::uint32_t b) {
  return std::bit_cast<float>(b);
}

const Ladder& f16Ladder() {
  static const Ladder l(kF16);
  return l;
}
const Ladder& bf16Ladder() {
  static const Ladder l(kBF16);
  return l;
}

// Every rung of the ladder, the midpoints between consecutive rungs and +-1 f32 ulp around
// them, boundary neighbourhoods, specials, and f32 patterns at a prime stride; both signs.
std::vector<float> sampleFloats(const Ladder& ladder) {
  std::vector<std::uint32_t> b;
  for (std::uint64_t x = 0; x < (1ull << 32); x += 4099) b.push_back(static_cast<std::uint32_t>(x));
  for (size_t i = 0; i + 1 < ladder.size(); ++i) {
    const float lo = static_cast<float>(ladder.value(i));
    const float mid = static_cast<float>((ladder.value(i) + ladder.value(i + 1)) / 2);
    if (static_cast<long double>(mid) != (ladder.value(i) + ladder.value(i + 1)) / 2)
      ADD_FAILURE() << "midpoint not exact in f32 at rung " << i;
    for (std::uint32_t c : {bitsOf(lo), bitsOf(mid)})
      for (int d = -1; d <= 1; ++d) b.push_back(c + d);
  }
  const std::uint32_t keys[] = {0x00000000, 0x00800000, 0x33000000, 0x33800000, 0x387fc000,
                                0x38800000, 0x477fe000, 0x477ff000, 0x47800000, 0x7f7f8000,
                                0x7f7fffff, 0x7f800000, 0x7fc00000, 0x7fffffff};
  for (std::uint32_t k : keys)
    for (int d = -2048; d <= 2048; ++d) b.push_back(k + d);
  std::vector<float> out;
  for (std::uint32_t x : b) {
    out.push_back(fromBits(x & 0x7fffffffu));
    out.push_back(fromBits(x | 0x80000000u));
  }
  return out;
}

// NaN rule shared by both formats: quiet, sign kept, top payload bits kept.
template <typename H>
void expectQuietNaN(float x, H h, int manBits) {
  const std::uint32_t xb = bitsOf(x);
  const std::uint16_t expect =
      static_cast<std::uint16_t>((xb >> 16 & 0x8000) | (0x7fff & ~((1 << manBits) - 1)) |
                                 (1 << (manBits - 1)) | ((xb & 0x7fffff) >> (23 - manBits)));
  EXPECT_EQ(h.bits, expect) << std::hex << "NaN " << xb;
}

TEST(Half, AllF16PatternsDecodeExactlyAndRoundTrip) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const f16 h = f16::fromBits(static_cast<std::uint16_t>(b));
    const float f = toFloat(h);
    if (kF16.isNaN(h.bits)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      EXPECT_EQ(std::signbit(f), (b & 0x8000) != 0);
      EXPECT_EQ(toF16(f).bits, b | 0x200) << std::hex << b;  // quiet bit set, payload kept
      EXPECT_TRUE(isNaN(h) && !isFinite(h) && !isInf(h));
      continue;
    }
    const long double v = kF16.decode(h.bits);
    ASSERT_EQ(static_cast<long double>(f), v) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0) << std::hex << b;
    ASSERT_EQ(toF16(f).bits, b) << std::hex << b;
    EXPECT_EQ(isInf(h), std::isinf(f));
    EXPECT_EQ(isFinite(h), std::isfinite(f));
  }
}

TEST(Half, AllBF16PatternsDecodeExactlyAndRoundTrip) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const bf16 h = bf16::fromBits(static_cast<std::uint16_t>(b));
    const float f = toFloat(h);
    ASSERT_EQ(bitsOf(f), b << 16) << std::hex << b;  // exact, NaN payload too
    if (kBF16.isNaN(h.bits)) {
      ASSERT_TRUE(std::isnan(f));
      EXPECT_EQ(toBF16(f).bits, b | 0x40) << std::hex << b;
      EXPECT_TRUE(isNaN(h) && !isFinite(h));
      continue;
    }
    ASSERT_EQ(static_cast<long double>(f), kBF16.decode(h.bits)) << std::hex << b;
    ASSERT_EQ(toBF16(f).bits, b) << std::hex << b;
    EXPECT_EQ(isInf(h), std::isinf(f));
  }
}

TEST(Half, F16RoundToNearestEvenMatchesReference) {
  const auto xs = sampleFloats(f16Ladder());
  ASSERT_GT(xs.size(), 2'000'000u);
  i64 bad = 0;
  for (float x : xs) {
    const f16 h = toF16(x);
    if (std::isnan(x)) {
      expectQuietNaN(x, h, 10);
      continue;
    }
    const std::uint16_t want = f16Ladder().rne(x);
    if (h.bits != want && ++bad <= 10)
      ADD_FAILURE() << std::hex << "x=" << bitsOf(x) << " got " << h.bits << " want " << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Half, BF16RoundToNearestEvenMatchesReference) {
  const auto xs = sampleFloats(bf16Ladder());
  i64 bad = 0;
  for (float x : xs) {
    const bf16 h = toBF16(x);
    if (std::isnan(x)) {
      expectQuietNaN(x, h, 7);
      continue;
    }
    const std::uint16_t want = bf16Ladder().rne(x);
    if (h.bits != want && ++bad <= 10)
      ADD_FAILURE() << std::hex << "x=" << bitsOf(x) << " got " << h.bits << " want " << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Half, NamedBoundaries) {
  EXPECT_EQ(toF16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(toF16(65519.996f).bits, 0x7bff);
  EXPECT_EQ(toF16(65520.0f).bits, 0x7c00);
  EXPECT_EQ(toF16(-65520.0f).bits, 0xfc00);
  EXPECT_EQ(toF16(kF16MinSubnormal).bits, 0x0001);
  EXPECT_EQ(toF16(kF16MinSubnormal / 2).bits, 0x0000);  // tie to even (0)
  EXPECT_EQ(toF16(std::nextafter(kF16MinSubnormal / 2, 1.0f)).bits, 0x0001);
  EXPECT_EQ(toF16(kF16MinSubnormal * 1.5f).bits, 0x0002);  // tie 1.5 -> 2
  EXPECT_EQ(toF16(kF16MinNormal).bits, 0x0400);
  EXPECT_EQ(toF16(-0.0f).bits, 0x8000);
  EXPECT_EQ(toF16(1.0f + 0x1p-11f).bits, 0x3c00);        // tie -> even 1.0
  EXPECT_EQ(toF16(1.0f + 3 * 0x1p-11f).bits, 0x3c02);    // tie -> even
  EXPECT_EQ(toBF16(fromBits(0x007fffff)).bits, 0x0080);  // f32 subnormal rounds up to normal
  EXPECT_EQ(toBF16(fromBits(0x00008000)).bits, 0x0000);  // tie -> even 0
  EXPECT_EQ(toBF16(fromBits(0x00018000)).bits, 0x0002);  // tie -> even 2
  EXPECT_EQ(toBF16(fromBits(0x7f7fffff)).bits, 0x7f80);  // overflow to Inf
  EXPECT_EQ(toBF16(fromBits(0xff7f7fff)).bits, 0xff7f);
  static_assert(toF16(1.0f).bits == 0x3c00 && toFloat(f16{0x3c00}) == 1.0f, "constexpr");
}

// ---- vector paths ----------------------------------------------------------------------------

void toF16or(const float* in, f16* v, f16* s, i64 n, f16) {
  toF16(in, v, n);
  scalar::toF16(in, s, n);
}
void toF16or(const float* in, bf16* v, bf16* s, i64 n, bf16) {
  toBF16(in, v, n);
  scalar::toBF16(in, s, n);
}

// Odd lengths and offsets so full vector blocks and scalar tails both run.
template <typename H>
void expectBulkMatchesScalar(const std::vector<float>& xs) {
  for (i64 offset : {0, 1, 3}) {
    const i64 n = static_cast<i64>(xs.size()) - offset;
    std::vector<H> v(n), s(n);
    std::vector<float> fv(n), fs(n);
    toF16or(xs.data() + offset, v.data(), s.data(), n, H{});
    i64 bad = 0;
    for (i64 i = 0; i < n; ++i)
      if (v[i].bits != s[i].bits && ++bad <= 5)
        ADD_FAILURE() << std::hex << "x=" << bitsOf(xs[offset + i]) << " vector " << v[i].bits
                      << " scalar " << s[i].bits;
    ASSERT_EQ(bad, 0);
    toFloat(v.data(), fv.data(), n);
    scalar::toFloat(v.data(), fs.data(), n);
    for (i64 i = 0; i < n; ++i) ASSERT_EQ(bitsOf(fv[i]), bitsOf(fs[i])) << i;
  }
}

// The vector paths are chosen at compile time. A path may only be one the running CPU has, a
// -march=native build (IPU_MARCH_NATIVE) must not fall back to scalar where the CPU has the ISA,
// and an x86-64-v3 build (IPU_MARCH_X86_64_V3: AVX2, F16C, no AVX-512) takes F16C and the scalar
// bf16 rounding whatever the CPU it runs on.
TEST(HalfVector, PathsMatchTheCpu) {
  const std::string f16 = vectorPathF16(), bf16 = vectorPathBF16();
  std::printf("[ vector paths ] f32->f16/f16->f32: %s, f32->bf16: %s\n", f16.c_str(), bf16.c_str());
  const bool cpuF16c = __builtin_cpu_supports("f16c");
  const bool cpuBf16 = __builtin_cpu_supports("avx512bf16");
  EXPECT_TRUE(f16 == "scalar" || (f16 == "f16c" && cpuF16c)) << f16;
  EXPECT_TRUE(bf16 == "scalar" || (bf16 == "avx512bf16" && cpuBf16)) << bf16;
#ifdef IPU_MARCH_NATIVE
  EXPECT_EQ(f16, cpuF16c ? "f16c" : "scalar");
  EXPECT_EQ(bf16, cpuBf16 ? "avx512bf16" : "scalar");
#elif defined(IPU_MARCH_X86_64_V3)
  EXPECT_EQ(f16, "f16c");
  EXPECT_EQ(bf16, "scalar");
#endif
}

TEST(HalfVector, F16SampleMatchesScalar) {
  expectBulkMatchesScalar<f16>(sampleFloats(f16Ladder()));
}
TEST(HalfVector, BF16SampleMatchesScalar) {
  expectBulkMatchesScalar<bf16>(sampleFloats(bf16Ladder()));
}

TEST(HalfVector, AllSixteenBitPatternsWidenLikeScalar) {
  std::vector<f16> h(0x10001);
  std::vector<bf16> b(0x10001);
  for (std::uint32_t i = 0; i <= 0x10000; ++i) {
    h[i].bits = static_cast<std::uint16_t>(i * 7919u);  // a permutation, unaligned tail
    b[i].bits = static_cast<std::uint16_t>(i * 7919u);
  }
  std::vector<float> v(h.size()), s(h.size());
  toFloat(h.data(), v.data(), static_cast<i64>(h.size()));
  scalar::toFloat(h.data(), s.data(), static_cast<i64>(h.size()));
  for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(bitsOf(v[i]), bitsOf(s[i])) << h[i].bits;
  toFloat(b.data(), v.data(), static_cast<i64>(b.size()));
  scalar::toFloat(b.data(), s.data(), static_cast<i64>(b.size()));
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(bitsOf(v[i]), bitsOf(s[i])) << b[i].bits;
}

// A block holding one f32 subnormal among normals takes the bf16 fix-up route.
TEST(HalfVector, BF16SubnormalInsideVectorBlock) {
  std::vector<float> x(64, 1.5f);
  x[5] = fromBits(0x007fffff);
  x[40] = fromBits(0x80000001);
  std::vector<bf16> v(64), s(64);
  toBF16(x.data(), v.data(), 64);
  scalar::toBF16(x.data(), s.data(), 64);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(v[i].bits, s[i].bits) << i;
  EXPECT_EQ(v[5].bits, 0x0080);
}

TEST(HalfVector, QuantizeInPlace) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 100.0f);
  std::vector<float> x(1001);
  for (auto& e : x) e = d(rng);
  std::vector<float> q = x, qb = x;
  quantizeToF16(q.data(), q.data(), static_cast<i64>(q.size()));
  quantizeToBF16(qb.data(), qb.data(), static_cast<i64>(qb.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(q[i], toFloat(toF16(x[i])));
    EXPECT_EQ(qb[i], toFloat(toBF16(x[i])));
  }
}

// Every one of the 2^32 f32 patterns: vector == scalar == reference. Minutes of CPU, so only
// when IPU_PRECISION_FULL_SWEEP=1.
TEST(HalfVector, FullSweepAllFloats) {
  const char* env = std::getenv("IPU_PRECISION_FULL_SWEEP");
  if (!env || std::string(env) != "1") GTEST_SKIP() << "set IPU_PRECISION_FULL_SWEEP=1";
  constexpr i64 kChunk = 1 << 20;
  std::vector<float> x(kChunk);
  std::vector<f16> hv(kChunk), hs(kChunk);
  std::vector<bf16> bv(kChunk), bs(kChunk);
  i64 bad = 0;
  for (std::uint64_t base = 0; base < (1ull << 32); base += kChunk) {
    for (i64 i = 0; i < kChunk; ++i) x[i] = fromBits(static_cast<std::uint32_t>(base + i));
    toF16(x.data(), hv.data(), kChunk);
    scalar::toF16(x.data(), hs.data(), kChunk);
    toBF16(x.data(), bv.data(), kChunk);
    scalar::toBF16(x.data(), bs.data(), kChunk);
    for (i64 i = 0; i < kChunk; ++i) {
      bool ok = hv[i] == hs[i] && bv[i] == bs[i];
      if (!std::isnan(x[i]))
        ok = ok && hs[i].bits == f16Ladder().rne(x[i]) && bs[i].bits == bf16Ladder().rne(x[i]);
      if (!ok && ++bad <= 10) ADD_FAILURE() << std::hex << "x=" << base + i;
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace ipu::precision
