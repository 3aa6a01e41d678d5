// Bulk f32 <-> 16-bit conversions. Each vector path handles full blocks and leaves the tail to
// the scalar functions, so every element is converted by code the tests check bit for bit.
#include "ipu_backend/precision/half.h"

#if defined(__F16C__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace ipu::precision {

namespace scalar {
void toF16(const float* in, f16* out, i64 n) {
  for (i64 i = 0; i < n; ++i) out[i] = precision::toF16(in[i]);
}
void toFloat(const f16* in, float* out, i64 n) {
  for (i64 i = 0; i < n; ++i) out[i] = precision::toFloat(in[i]);
}
void toBF16(const float* in, bf16* out, i64 n) {
  for (i64 i = 0; i < n; ++i) out[i] = precision::toBF16(in[i]);
}
void toFloat(const bf16* in, float* out, i64 n) {
  for (i64 i = 0; i < n; ++i) out[i] = precision::toFloat(in[i]);
}
}  // namespace scalar

void toF16(const float* in, f16* out, i64 n) {
  i64 i = 0;
#ifdef __F16C__
  // The immediate rounding mode overrides MXCSR.RC; F16C never flushes f16 subnormals.
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  scalar::toF16(in + i, out + i, n - i);
}

void toFloat(const f16* in, float* out, i64 n) {
  i64 i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  scalar::toFloat(in + i, out + i, n - i);
}

void toBF16(const float* in, bf16* out, i64 n) {
  i64 i = 0;
#ifdef __AVX512BF16__
  // VCVTNEPS2BF16 treats f32 subnormal inputs as zero, whereas RNE keeps them (they are bf16
  // subnormals). Blocks containing one (rare outside of underflowing gradients) redo the block
  // with the scalar code; the check is a single compare.
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  const __m512i one = _mm512_set1_epi32(1), maxSub = _mm512_set1_epi32(0x007ffffe);
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(x), absMask);
    // a - 1 <= 0x7ffffe (unsigned) <=> 1 <= a <= 0x7fffff, i.e. x is subnormal.
    if (_mm512_cmple_epu32_mask(_mm512_sub_epi32(a, one), maxSub) != 0) {
      scalar::toBF16(in + i, out + i, 16);
      continue;
    }
    const __m256bh h = _mm512_cvtneps_pbh(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(h));
  }
#endif
  scalar::toBF16(in + i, out + i, n - i);
}

void toFloat(const bf16* in, float* out, i64 n) {
  // A shift: the plain loop auto-vectorises at -O3 and needs no intrinsics.
  scalar::toFloat(in, out, n);
}

void quantizeToF16(const float* in, float* out, i64 n) {
  constexpr i64 kBlock = 256;  // stack staging keeps in == out safe and the data in L1
  f16 tmp[kBlock];
  for (i64 i = 0; i < n; i += kBlock) {
    const i64 m = n - i < kBlock ? n - i : kBlock;
    toF16(in + i, tmp, m);
    toFloat(tmp, out + i, m);
  }
}

void quantizeToBF16(const float* in, float* out, i64 n) {
  constexpr i64 kBlock = 256;
  bf16 tmp[kBlock];
  for (i64 i = 0; i < n; i += kBlock) {
    const i64 m = n - i < kBlock ? n - i : kBlock;
    toBF16(in + i, tmp, m);
    toFloat(tmp, out + i, m);
  }
}

const char* vectorPathF16() {
#ifdef __F16C__
  return "f16c";
#else
  return "scalar";
#endif
}

const char* vectorPathBF16() {
#ifdef __AVX512BF16__
  return "avx512bf16";
#else
  return "scalar";
#endif
}

}  // namespace ipu::precision
