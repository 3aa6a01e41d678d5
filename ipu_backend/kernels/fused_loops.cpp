// Fused elementwise / reduction / layout / loss / optimizer loops: OpenMP over contiguous
// chunks, with the element function specialised per kind so the inner loops vectorise.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ipu_backend/kernels/elementwise_math.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/onednn_common.h"
#include "ipu_backend/kernels/parallel_ranges.h"
#include "ipu_backend/precision/half.h"

namespace ipu::kernels::fused {
namespace {

// Splits `rows` independent rows of `cols` elements each into one contiguous range per thread
// and calls f(begin, end) on each non-empty one.
template <typename F>
void parallelRows(i64 rows, i64 cols, F&& f) {
  detail::forThreadRanges(detail::teamFor(rows, rows * cols), rows, [&](int, i64 begin, i64 end) {
    if (begin < end) f(begin, end);
  });
}

// Same, for `count` independent elements.
template <typename F>
void parallelChunks(i64 count, F&& f) {
  parallelRows(count, 1, std::forward<F>(f));
}

// Per-calling-thread scratch for reduction partials: grows once, then is reused.
float* scratch(i64 n) {
  thread_local std::vector<float> buf;
  if (static_cast<i64>(buf.size()) < n) buf.resize(n);
  return buf.data();
}

// ---- unary ---------------------------------------------------------------------------------

template <UnaryKind K>
void unaryLoop(float alpha, const float* x, float* y, i64 count) {
  parallelChunks(count, [&](i64 b, i64 e) {
#pragma omp simd
    for (i64 i = b; i < e; ++i) y[i] = kernels::detail::unaryValue(K, alpha, x[i]);
  });
}

template <UnaryKind K>
void unaryGradLoop(float alpha, const float* x, const float* dy, float* dx, i64 count) {
  parallelChunks(count, [&](i64 b, i64 e) {
#pragma omp simd
    for (i64 i = b; i < e; ++i) dx[i] = dy[i] * kernels::detail::unaryDerivative(K, alpha, x[i]);
  });
}

}  // namespace

void addRelu(const float* a, const float* b, float* y, i64 count) {
  parallelChunks(count, [&](i64 begin, i64 end) {
#pragma omp simd
    for (i64 i = begin; i < end; ++i) {
      const float s = a[i] + b[i];
      y[i] = s > 0.0f ? s : 0.0f;  // as the unfused ReLU: NaN -> 0
    }
  });
}

void addReluBackward(const float* a, const float* b, const float* x, float* dx, i64 count) {
  parallelChunks(count, [&](i64 begin, i64 end) {
#pragma omp simd
    for (i64 i = begin; i < end; ++i)  // as the unfused pair: dy * relu'(x), NaN dy stays NaN
      dx[i] = (a[i] + b[i]) * kernels::detail::unaryDerivative(UnaryKind::Relu, 1.0f, x[i]);
  });
}

void addReluBackwardBits(const float* a, const float* b, const std::uint8_t* reluBits, float* dx,
                         i64 count) {
  if (count % 16 != 0)
    throw std::invalid_argument("addReluBackwardBits: the element count must be a multiple of 16");
  // Blocks of 16 elements: one 16-bit word of the mask each, and no two threads share a byte.
  parallelChunks(count / 16, [&](i64 begin, i64 end) {
    for (i64 blk = begin; blk < end; ++blk) {
      const i64 i = blk * 16;
      std::uint16_t bits;
      std::memcpy(&bits, reluBits + blk * 2, sizeof bits);
#if defined(__AVX512F__)
      const __m512 sum = _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
      const __m512 gate = _mm512_maskz_mov_ps(bits, _mm512_set1_ps(1.0f));
      _mm512_storeu_ps(dx + i, _mm512_mul_ps(sum, gate));  // * 0, not a select: NaN stays NaN
#elif defined(__AVX2__)
      const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
      for (int h = 0; h < 16; h += 8) {  // two 8-lane halves, each gated by its byte of bits
        const __m256i set = _mm256_and_si256(_mm256_set1_epi32((bits >> h) & 0xff), lane);
        const __m256 gate = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(set, lane)),
                                          _mm256_set1_ps(1.0f));
        const __m256 sum = _mm256_add_ps(_mm256_loadu_ps(a + i + h), _mm256_loadu_ps(b + i + h));
        _mm256_storeu_ps(dx + i + h, _mm256_mul_ps(sum, gate));
      }
#else
      for (int k = 0; k < 16; ++k)
        dx[i + k] = (a[i + k] + b[i + k]) * ((bits >> k) & 1 ? 1.0f : 0.0f);
#endif
    }
  });
}

namespace {

// Calls f.template operator()<K>() for the run-time kind.
template <typename F>
void dispatchUnary(UnaryKind kind, F&& f) {
  switch (kind) {
#define IPU_UNARY_CASE(k) \
  case UnaryKind::k:      \
    return f.template operator()<UnaryKind::k>();
    IPU_UNARY_CASE(Identity)
    IPU_UNARY_CASE(Relu)
    IPU_UNARY_CASE(Neg)
    IPU_UNARY_CASE(Exp)
    IPU_UNARY_CASE(Log)
    IPU_UNARY_CASE(Sqrt)
    IPU_UNARY_CASE(Rsqrt)
    IPU_UNARY_CASE(Square)
    IPU_UNARY_CASE(Sigmoid)
    IPU_UNARY_CASE(Tanh)
    IPU_UNARY_CASE(Gelu)
    IPU_UNARY_CASE(Swish)
    IPU_UNARY_CASE(Scale)
#undef IPU_UNARY_CASE
  }
}

// ---- binary --------------------------------------------------------------------------------

// Calls f.template operator()<K>() for the run-time kind.
template <typename F>
void dispatchBinary(BinaryKind kind, F&& f) {
  switch (kind) {
    case BinaryKind::Add:
      return f.template operator()<BinaryKind::Add>();
    case BinaryKind::Sub:
      return f.template operator()<BinaryKind::Sub>();
    case BinaryKind::Mul:
      return f.template operator()<BinaryKind::Mul>();
    case BinaryKind::Div:
      return f.template operator()<BinaryKind::Div>();
    case BinaryKind::Max:
      return f.template operator()<BinaryKind::Max>();
    case BinaryKind::Min:
      return f.template operator()<BinaryKind::Min>();
  }
}

// Broadcast shape with size-1 dimensions dropped and mergeable neighbours fused, so the common
// cases (same shape, scalar, per-channel vector) become rank 1 or 2.
struct Collapsed {
  int rank = 0;
  i64 dims[BroadcastShape::kMaxRank] = {};
  i64 sa[BroadcastShape::kMaxRank] = {};
  i64 sb[BroadcastShape::kMaxRank] = {};
};

Collapsed collapse(const BroadcastShape& s) {
  Collapsed c;
  for (int d = 0; d < s.rank; ++d) {
    if (s.outDims[d] == 1) continue;
    const int last = c.rank - 1;
    // Dim d folds into the previous kept one when both operands walk them as one dimension.
    if (last >= 0 && c.sa[last] == s.aStrides[d] * s.outDims[d] &&
        c.sb[last] == s.bStrides[d] * s.outDims[d]) {
      c.dims[last] *= s.outDims[d];
      c.sa[last] = s.aStrides[d];
      c.sb[last] = s.bStrides[d];
      continue;
    }
    c.dims[c.rank] = s.outDims[d];
    c.sa[c.rank] = s.aStrides[d];
    c.sb[c.rank] = s.bStrides[d];
    ++c.rank;
  }
  if (c.rank == 0) {  // a single element
    c.rank = 1;
    c.dims[0] = 1;
    c.sa[0] = c.sb[0] = 1;
  }
  return c;
}

// Innermost loop over n elements, specialised on the operands' inner strides (0 or 1).
template <BinaryKind K>
void binaryRow(const float* a, i64 sa, const float* b, i64 sb, float* y, i64 n) {
  if (sa == 1 && sb == 1) {
#pragma omp simd
    for (i64 i = 0; i < n; ++i) y[i] = kernels::detail::binaryValue(K, a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const float bv = b[0];
#pragma omp simd
    for (i64 i = 0; i < n; ++i) y[i] = kernels::detail::binaryValue(K, a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const float av = a[0];
#pragma omp simd
    for (i64 i = 0; i < n; ++i) y[i] = kernels::detail::binaryValue(K, av, b[i]);
  } else {
    for (i64 i = 0; i < n; ++i) y[i] = kernels::detail::binaryValue(K, a[i * sa], b[i * sb]);
  }
}

// Walks the output over the team in runs along the innermost dimension: run(aOff, bOff, e, len)
// for len output elements from element e, whose operands start at aOff / bOff and step by
// c.sa / c.sb of the innermost dimension.
template <typename Run>
void broadcastRuns(const Collapsed& c, Run&& run) {
  const int inner = c.rank - 1;
  const i64 cols = c.dims[inner];
  i64 total = 1;
  for (int d = 0; d < c.rank; ++d) total *= c.dims[d];
  parallelChunks(total, [&](i64 begin, i64 end) {
    // Unflatten the chunk start into outer coordinates, then walk rows with an odometer.
    i64 coord[BroadcastShape::kMaxRank] = {};
    i64 aOff = 0, bOff = 0;
    i64 row = begin / cols, col = begin % cols;
    for (int d = inner - 1; d >= 0; --d) {
      coord[d] = row % c.dims[d];
      row /= c.dims[d];
      aOff += coord[d] * c.sa[d];
      bOff += coord[d] * c.sb[d];
    }
    for (i64 e = begin; e < end;) {
      const i64 len = std::min(cols - col, end - e);
      run(aOff + col * c.sa[inner], bOff + col * c.sb[inner], e, len);
      e += len;
      col = 0;
      for (int d = inner - 1; d >= 0; --d) {
        aOff += c.sa[d];
        bOff += c.sb[d];
        if (++coord[d] < c.dims[d]) break;
        aOff -= c.sa[d] * c.dims[d];
        bOff -= c.sb[d] * c.dims[d];
        coord[d] = 0;
      }
    }
  });
}

template <BinaryKind K>
void binaryLoop(const Collapsed& c, const float* a, const float* b, float* y) {
  const i64 sa = c.sa[c.rank - 1], sb = c.sb[c.rank - 1];
  broadcastRuns(c, [&](i64 aOff, i64 bOff, i64 e, i64 len) {
    binaryRow<K>(a + aOff, sa, b + bOff, sb, y + e, len);
  });
}

// n bf16 values from p at element stride `stride` widened into f32 (stride 0: one value).
void widenRun(const std::uint16_t* p, i64 stride, float* out, i64 n) {
  if (stride == 1) return precision::toFloat(reinterpret_cast<const precision::bf16*>(p), out, n);
  for (i64 i = 0; i < (stride == 0 ? 1 : n); ++i)
    out[i] = precision::toFloat(precision::bf16{p[i * stride]});
}

// bf16 operands: each run widened, computed and rounded in blocks that stay in L1, with
// precision's bulk conversions (the engine's): the bits of widening the whole tensors,
// computing in f32 and rounding back, without their three extra passes over memory.
template <BinaryKind K>
void binaryLoopBf16(const Collapsed& c, const std::uint16_t* a, const std::uint16_t* b,
                    std::uint16_t* y) {
  const i64 sa = c.sa[c.rank - 1], sb = c.sb[c.rank - 1];
  broadcastRuns(c, [&](i64 aOff, i64 bOff, i64 e, i64 len) {
    constexpr i64 kBlock = 512;
    float fa[kBlock], fb[kBlock], fy[kBlock];
    for (i64 i = 0; i < len; i += kBlock) {
      const i64 n = std::min(kBlock, len - i);
      widenRun(a + aOff + i * sa, sa, fa, n);
      widenRun(b + bOff + i * sb, sb, fb, n);
      binaryRow<K>(fa, sa == 0 ? 0 : 1, fb, sb == 0 ? 0 : 1, fy, n);
      precision::toBF16(fy, reinterpret_cast<precision::bf16*>(y + e + i), n);
    }
  });
}

// ---- reduce --------------------------------------------------------------------------------

struct ReduceOp {
  ReduceKind kind;
  float identity() const {
    return kind == ReduceKind::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
  }
};

// Reduce x viewed as [O, R, I] over R into y[O, I].
// An element as f32: itself, or a bf16 value's bits widened (exact).
inline float widened(float v) {
  return v;
}
inline float widened(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// T: float, or bf16 bits (widened as they are read: the f32 loop's sums in its order).
template <typename T>
void reduceORI(ReduceKind kind, i64 o, i64 r, i64 in, const T* x, float* y, float scale) {
  const bool isMax = kind == ReduceKind::Max;
  const float init = ReduceOp{kind}.identity();
  // Accumulates rows [r0, r1) of block ob into acc[0..in).
  auto accumulate = [&](i64 ob, i64 r0, i64 r1, float* acc) {
    const T* base = x + ob * r * in;
    if constexpr (std::is_same_v<T, float>) {
      if (in == 1) {
        float a = acc[0];
        if (isMax) {
#pragma omp simd reduction(max : a)
          for (i64 j = r0; j < r1; ++j) a = std::max(a, base[j]);
        } else {
#pragma omp simd reduction(+ : a)
          for (i64 j = r0; j < r1; ++j) a += base[j];
        }
        acc[0] = a;
        return;
      }
    }
    for (i64 j = r0; j < r1; ++j) {
      const T* row = base + j * in;
      if (isMax) {
#pragma omp simd
        for (i64 i = 0; i < in; ++i) acc[i] = std::max(acc[i], widened(row[i]));
      } else {
#pragma omp simd
        for (i64 i = 0; i < in; ++i) acc[i] += widened(row[i]);
      }
    }
  };
  const int nt = numThreads();
  const i64 total = o * r * in;
  if (o >= nt || total < detail::kParallelMin || nt == 1) {
    parallelRows(o, r * in, [&](i64 b, i64 e) {
      for (i64 ob = b; ob < e; ++ob) {
        float* acc = y + ob * in;
        std::fill(acc, acc + in, init);
        accumulate(ob, 0, r, acc);
      }
    });
  } else {
    // Few outputs, long reduction (e.g. [N*H*W, C] -> [C]): each thread reduces a slice of R
    // into its own partial; partials are then combined in thread order (deterministic).
    float* part = scratch(static_cast<i64>(nt) * o * in);
    const i64 outElems = o * in;
#pragma omp parallel num_threads(nt)
    {
      const i64 t = omp_get_thread_num(), tn = omp_get_num_threads();
      float* mine = part + t * outElems;
      std::fill(mine, mine + outElems, init);
      const i64 r0 = r * t / tn, r1 = r * (t + 1) / tn;
      for (i64 ob = 0; ob < o; ++ob) accumulate(ob, r0, r1, mine + ob * in);
#pragma omp barrier
      const i64 e0 = outElems * t / tn, e1 = outElems * (t + 1) / tn;
      for (i64 i = e0; i < e1; ++i) {
        float a = part[i];
        for (i64 p = 1; p < tn; ++p) {
          a = isMax ? std::max(a, part[p * outElems + i]) : a + part[p * outElems + i];
        }
        y[i] = a;
      }
    }
  }
  if (scale != 1.0f) {
    const i64 n = o * in;
    for (i64 i = 0; i < n; ++i) y[i] *= scale;
  }
}

// Any pattern of reduced dimensions: one output element at a time.
void reduceGeneric(ReduceKind kind, const std::vector<i64>& dims, const std::vector<bool>& red,
                   const float* x, float* y, float scale) {
  const int rank = static_cast<int>(dims.size());
  std::vector<i64> strides(rank);
  for (i64 d = rank - 1, st = 1; d >= 0; --d) {
    strides[d] = st;
    st *= dims[d];
  }
  i64 outElems = 1, redElems = 1;
  for (int d = 0; d < rank; ++d) (red[d] ? redElems : outElems) *= dims[d];
  const bool isMax = kind == ReduceKind::Max;
  parallelRows(outElems, redElems, [&](i64 b, i64 e) {
    for (i64 o = b; o < e; ++o) {
      i64 base = 0;
      for (i64 d = rank - 1, rest = o; d >= 0; --d) {
        if (red[d]) continue;
        base += (rest % dims[d]) * strides[d];
        rest /= dims[d];
      }
      float acc = ReduceOp{kind}.identity();
      for (i64 rr = 0; rr < redElems; ++rr) {
        i64 off = base;
        for (i64 d = rank - 1, rest = rr; d >= 0; --d) {
          if (!red[d]) continue;
          off += (rest % dims[d]) * strides[d];
          rest /= dims[d];
        }
        acc = isMax ? std::max(acc, x[off]) : acc + x[off];
      }
      y[o] = acc * scale;
    }
  });
}

// ---- transpose -----------------------------------------------------------------------------

constexpr i64 kTile = 32;

}  // namespace

// ---- public entry points ---------------------------------------------------------------------

void unary(UnaryKind kind, float alpha, const float* x, float* y, i64 count) {
  dispatchUnary(kind, [&]<UnaryKind K>() { unaryLoop<K>(alpha, x, y, count); });
}

void unaryGrad(UnaryKind kind, float alpha, const float* x, const float* dy, float* dx, i64 count) {
  dispatchUnary(kind, [&]<UnaryKind K>() { unaryGradLoop<K>(alpha, x, dy, dx, count); });
}

void binary(BinaryKind kind, const BroadcastShape& s, const float* a, const float* b, float* y) {
  const Collapsed c = collapse(s);
  dispatchBinary(kind, [&]<BinaryKind K>() { binaryLoop<K>(c, a, b, y); });
}

void binaryBf16(BinaryKind kind, const BroadcastShape& s, const std::uint16_t* a,
                const std::uint16_t* b, std::uint16_t* y) {
  const Collapsed c = collapse(s);
  dispatchBinary(kind, [&]<BinaryKind K>() { binaryLoopBf16<K>(c, a, b, y); });
}

float sumOfSquares(const float* x, i64 count) {
  const int nt = count < detail::kParallelMin ? 1 : numThreads();
  std::vector<double> part(static_cast<size_t>(nt), 0.0);
#pragma omp parallel num_threads(nt)
  {
    const i64 t = omp_get_thread_num(), tn = omp_get_num_threads();
    const i64 b = count * t / tn, e = count * (t + 1) / tn;
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (i64 i = b; i < e; ++i) acc += static_cast<double>(x[i]) * x[i];
    part[static_cast<size_t>(t)] = acc;
  }
  double total = 0;
  for (double v : part) total += v;
  return static_cast<float>(total);
}

void unaryChunk(UnaryKind kind, float alpha, const float* x, float* y, i64 n) {
  dispatchUnary(kind, [&]<UnaryKind K>() {
#pragma omp simd
    for (i64 i = 0; i < n; ++i) y[i] = kernels::detail::unaryValue(K, alpha, x[i]);
  });
}

void unaryGradChunk(UnaryKind kind, float alpha, const float* x, const float* dy, float* dx,
                    i64 n) {
  dispatchUnary(kind, [&]<UnaryKind K>() {
#pragma omp simd
    for (i64 i = 0; i < n; ++i) dx[i] = dy[i] * kernels::detail::unaryDerivative(K, alpha, x[i]);
  });
}

void binaryChunk(BinaryKind kind, const float* a, const float* b, float* y, i64 n) {
  dispatchBinary(kind, [&]<BinaryKind K>() { binaryRow<K>(a, 1, b, 1, y, n); });
}

namespace {

// A reduction with its size-1 dimensions dropped and neighbours of the same reduced flag fused.
struct CollapsedReduce {
  std::vector<i64> dims;
  std::vector<bool> red;
  int reducedRuns = 0;
  i64 o = 1, r = 1, in = 1;  // one reduced run: x viewed as [O, R, I]

  explicit CollapsedReduce(const ReduceShape& s) {
    for (size_t d = 0; d < s.inDims.size(); ++d) {
      if (s.inDims[d] == 1) continue;
      if (!dims.empty() && red.back() == s.reduced[d]) {
        dims.back() *= s.inDims[d];
      } else {
        dims.push_back(s.inDims[d]);
        red.push_back(s.reduced[d]);
      }
    }
    reducedRuns = static_cast<int>(std::count(red.begin(), red.end(), true));
    if (reducedRuns == 1) {
      const size_t rd = std::find(red.begin(), red.end(), true) - red.begin();
      o = rd > 0 ? dims[0] : 1;
      r = dims[rd];
      in = rd + 1 < dims.size() ? dims[rd + 1] : 1;
    }
  }
};

float reduceScale(ReduceKind kind, const ReduceShape& s) {
  return kind == ReduceKind::Mean ? 1.0f / float(s.reducedCount()) : 1.0f;
}

}  // namespace

bool reduceBf16Runs(const ReduceShape& s) {
  const CollapsedReduce c(s);
  return c.reducedRuns == 1 && c.in > 1;
}

void reduceBf16(ReduceKind kind, const ReduceShape& s, const std::uint16_t* x, float* y) {
  const CollapsedReduce c(s);
  if (c.reducedRuns != 1 || c.in == 1)
    throw std::invalid_argument("reduceBf16: only one run of reduced dimensions, not innermost");
  reduceORI(kind, c.o, c.r, c.in, x, y, reduceScale(kind, s));
}

bool mulReduceSumRuns(const ReduceShape& s) {
  return reduceBf16Runs(s);  // the same [O, R, I] view with I > 1
}

void mulReduceSum(const ReduceShape& s, const float* a, const float* b, float* y) {
  const CollapsedReduce c(s);
  if (c.reducedRuns != 1 || c.in == 1)
    throw std::invalid_argument("mulReduceSum: only one run of reduced dimensions, not innermost");
  const i64 o = c.o, r = c.r, in = c.in;
  // reduceORI's sum over rows [r0, r1) of block ob, of x = a * b. Each row's products are
  // stored before they are added, so that no multiply-add is contracted: the unfused ops round
  // the product first.
  auto accumulate = [&](i64 ob, i64 r0, i64 r1, float* acc, float* products) {
    for (i64 j = r0; j < r1; ++j) {
      const float* ra = a + (ob * r + j) * in;
      const float* rb = b + (ob * r + j) * in;
#pragma omp simd
      for (i64 i = 0; i < in; ++i) products[i] = ra[i] * rb[i];
#pragma omp simd
      for (i64 i = 0; i < in; ++i) acc[i] += products[i];
    }
  };
  const int nt = numThreads();
  if (o >= nt || o * r * in < detail::kParallelMin || nt == 1) {
    parallelRows(o, r * in, [&](i64 begin, i64 end) {
      std::vector<float> products(static_cast<size_t>(in));
      for (i64 ob = begin; ob < end; ++ob) {
        float* acc = y + ob * in;
        std::fill(acc, acc + in, 0.0f);
        accumulate(ob, 0, r, acc, products.data());
      }
    });
    return;
  }
  // Few outputs, long rows: per-thread partials combined in thread order, as reduceORI.
  const i64 outElems = o * in;
  float* part = scratch(static_cast<i64>(nt) * outElems);
#pragma omp parallel num_threads(nt)
  {
    const i64 t = omp_get_thread_num(), tn = omp_get_num_threads();
    float* mine = part + t * outElems;
    std::fill(mine, mine + outElems, 0.0f);
    std::vector<float> products(static_cast<size_t>(in));
    const i64 r0 = r * t / tn, r1 = r * (t + 1) / tn;
    for (i64 ob = 0; ob < o; ++ob) accumulate(ob, r0, r1, mine + ob * in, products.data());
#pragma omp barrier
    const i64 e0 = outElems * t / tn, e1 = outElems * (t + 1) / tn;
    for (i64 i = e0; i < e1; ++i) {
      float v = part[i];
      for (i64 q = 1; q < tn; ++q) v += part[q * outElems + i];
      y[i] = v;
    }
  }
}

void reduce(ReduceKind kind, const ReduceShape& s, const float* x, float* y) {
  const CollapsedReduce c(s);
  const std::vector<i64>& dims = c.dims;
  const std::vector<bool>& red = c.red;
  const float scale = reduceScale(kind, s);
  const int nRed = c.reducedRuns;
  if (nRed == 0) {  // nothing to reduce: a copy
    const i64 n = s.inElems();
    parallelChunks(n, [&](i64 b, i64 e) {
      for (i64 i = b; i < e; ++i) y[i] = x[i] * scale;
    });
    return;
  }
  if (nRed == 1) return reduceORI(kind, c.o, c.r, c.in, x, y, scale);  // [O, R, I]
  reduceGeneric(kind, dims, red, x, y, scale);
}

void transpose(const std::vector<i64>& inDims, const std::vector<int>& perm, const float* x,
               float* y) {
  // Collapse: drop size-1 input dims, then fuse input dims that stay adjacent and in order in
  // the output. dims/perm below describe the collapsed problem.
  const int rank0 = static_cast<int>(inDims.size());
  std::vector<int> keep(rank0, -1);  // input dim -> index among non-unit dims
  std::vector<i64> d1;
  for (int d = 0; d < rank0; ++d) {
    if (inDims[d] != 1) {
      keep[d] = static_cast<int>(d1.size());
      d1.push_back(inDims[d]);
    }
  }
  std::vector<int> p1;
  for (int d = 0; d < rank0; ++d) {
    if (keep[perm[d]] >= 0) p1.push_back(keep[perm[d]]);
  }
  // Groups of output positions whose input dims are consecutive.
  std::vector<std::vector<int>> groups;
  for (int q = 0; q < static_cast<int>(p1.size()); ++q) {
    if (!groups.empty() && groups.back().back() + 1 == p1[q]) {
      groups.back().push_back(p1[q]);
    } else {
      groups.push_back({p1[q]});
    }
  }
  // Collapsed input dims are the groups ordered by their first input dim.
  const int rank = static_cast<int>(groups.size());
  std::vector<int> order(rank);
  for (int g = 0; g < rank; ++g) order[g] = g;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return groups[a][0] < groups[b][0]; });
  std::vector<i64> dims(rank);     // collapsed input dims
  std::vector<int> outToIn(rank);  // collapsed perm
  for (int j = 0; j < rank; ++j) {
    const auto& g = groups[order[j]];
    dims[j] = 1;
    for (int d : g) dims[j] *= d1[d];
    outToIn[order[j]] = j;
  }
  i64 total = 1;
  for (i64 d : inDims) total *= d;
  if (rank <= 1) {
    parallelChunks(total,
                   [&](i64 b, i64 e) { std::memcpy(y + b, x + b, (e - b) * sizeof(float)); });
    return;
  }
  std::vector<i64> inStride(rank), outDims(rank), outStride(rank);
  for (i64 d = rank - 1, st = 1; d >= 0; --d) {
    inStride[d] = st;
    st *= dims[d];
  }
  for (int q = 0; q < rank; ++q) outDims[q] = dims[outToIn[q]];
  for (i64 q = rank - 1, st = 1; q >= 0; --q) {
    outStride[q] = st;
    st *= outDims[q];
  }
  const int a = outToIn[rank - 1], b = rank - 1;  // input dims innermost in y / in x
  if (a == b) {
    // Innermost dim unmoved: copy contiguous rows of dims[b] elements.
    const i64 cols = dims[b], rows = total / cols;
    parallelRows(rows, cols, [&](i64 begin, i64 end) {
      for (i64 row = begin; row < end; ++row) {
        i64 rest = row, inOff = 0;
        for (int q = rank - 2; q >= 0; --q) {
          inOff += (rest % outDims[q]) * inStride[outToIn[q]];
          rest /= outDims[q];
        }
        std::memcpy(y + row * cols, x + inOff, cols * sizeof(float));
      }
    });
    return;
  }
  // Otherwise transpose the (A, B) planes in tiles, for every combination of the other dims.
  int bOut = 0;  // output position of input dim b
  for (int q = 0; q < rank; ++q) {
    if (outToIn[q] == b) bOut = q;
  }
  const i64 na = dims[a], nb = dims[b];
  const i64 sa = inStride[a], sbOut = outStride[bOut];
  std::vector<int> others;  // output positions of the remaining dims
  for (int q = 0; q < rank - 1; ++q) {
    if (q != bOut) others.push_back(q);
  }
  i64 nOther = 1;
  for (int q : others) nOther *= outDims[q];
  const i64 aTiles = (na + kTile - 1) / kTile;
  parallelRows(nOther * aTiles, kTile * nb, [&](i64 begin, i64 end) {
    for (i64 job = begin; job < end; ++job) {
      i64 rest = job / aTiles, inOff = 0, outOff = 0;
      for (int i = static_cast<int>(others.size()) - 1; i >= 0; --i) {
        const int q = others[i];
        const i64 coord = rest % outDims[q];
        rest /= outDims[q];
        inOff += coord * inStride[outToIn[q]];
        outOff += coord * outStride[q];
      }
      const i64 a0 = (job % aTiles) * kTile, a1 = std::min(na, a0 + kTile);
      for (i64 b0 = 0; b0 < nb; b0 += kTile) {
        const i64 b1 = std::min(nb, b0 + kTile);
        for (i64 ib = b0; ib < b1; ++ib) {
          for (i64 ia = a0; ia < a1; ++ia) y[outOff + ib * sbOut + ia] = x[inOff + ia * sa + ib];
        }
      }
    }
  });
}

namespace {

void checkLabels(i64 n, i64 classes, const std::int32_t* labels) {
  for (i64 i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw std::invalid_argument("softmax cross-entropy: sample " + std::to_string(i) +
                                  " has label " + std::to_string(labels[i]) + " outside [0, " +
                                  std::to_string(classes) + ")");
    }
  }
}

float rowMax(const float* x, i64 n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (i64 j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

float rowSumExp(const float* x, i64 n, float max) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (i64 j = 0; j < n; ++j) s += std::exp(x[j] - max);
  return s;
}

}  // namespace

void softmaxCrossEntropy(i64 n, i64 classes, float smoothing, const float* logits,
                         const std::int32_t* labels, float* loss) {
  checkLabels(n, classes, labels);  // before the parallel region: it must not throw
  const float offTarget = smoothing / float(classes);
  parallelRows(n, classes, [&](i64 b, i64 e) {
    for (i64 r = b; r < e; ++r) {
      const float* x = logits + r * classes;
      const float m = rowMax(x, classes);
      const float lse = m + std::log(rowSumExp(x, classes, m));
      float sumX = 0;
#pragma omp simd reduction(+ : sumX)
      for (i64 j = 0; j < classes; ++j) sumX += x[j];
      // -sum_j target_j (x_j - lse) with sum_j target_j == 1.
      loss[r] = lse - (1.0f - smoothing) * x[labels[r]] - offTarget * sumX;
    }
  });
}

void softmaxCrossEntropyGrad(i64 n, i64 classes, float smoothing, const float* logits,
                             const std::int32_t* labels, const float* dloss, float* dlogits) {
  checkLabels(n, classes, labels);
  const float offTarget = smoothing / float(classes);
  parallelRows(n, classes, [&](i64 b, i64 e) {
    for (i64 r = b; r < e; ++r) {
      const float* x = logits + r * classes;
      float* dx = dlogits + r * classes;
      const float m = rowMax(x, classes);
      const float scale = dloss[r] / rowSumExp(x, classes, m);
      const float shift = dloss[r] * offTarget;
#pragma omp simd
      for (i64 j = 0; j < classes; ++j) dx[j] = std::exp(x[j] - m) * scale - shift;
      dx[labels[r]] -= dloss[r] * (1.0f - smoothing);
    }
  });
}

void softmax(i64 rows, i64 cols, const float* x, float* y) {
  parallelRows(rows, cols, [&](i64 b, i64 e) {
    for (i64 r = b; r < e; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      const float m = rowMax(xr, cols);
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (i64 j = 0; j < cols; ++j) {
        yr[j] = std::exp(xr[j] - m);
        s += yr[j];
      }
      const float inv = 1.0f / s;
#pragma omp simd
      for (i64 j = 0; j < cols; ++j) yr[j] *= inv;
    }
  });
}

void softmaxGrad(i64 rows, i64 cols, const float* y, const float* dy, float* dx) {
  parallelRows(rows, cols, [&](i64 b, i64 e) {
    for (i64 r = b; r < e; ++r) {
      const float* yr = y + r * cols;
      const float* gr = dy + r * cols;
      float* dr = dx + r * cols;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (i64 j = 0; j < cols; ++j) dot += gr[j] * yr[j];
#pragma omp simd
      for (i64 j = 0; j < cols; ++j) dr[j] = yr[j] * (gr[j] - dot);
    }
  });
}

void emaUpdate(float momentum, float scale, float* running, const float* value, i64 count) {
  const float k = (1.0f - momentum) * scale;
  parallelChunks(count, [&](i64 b, i64 e) {
#pragma omp simd
    for (i64 i = b; i < e; ++i) running[i] = momentum * running[i] + k * value[i];
  });
}

}  // namespace ipu::kernels::fused
