// Shape and parameter structs shared by the reference (tile-mode) and fused kernels.
// Pure data, no dependency on the graph IR: the ops layer translates IR attributes into these.
//
// Dimension letters, used in every shape comment below:
//   N batch, H/W input height/width, C input channels, K output channels,
//   R/S filter height/width, OH/OW output height/width, G groups.
// Activations are NHWC (channels innermost, as on the IPU where channels are grouped for the
// AMP unit); convolution weights are [K, R, S, C/G] ("OHWI"), group g owning input channels
// [g*C/G, (g+1)*C/G) and output channels [g*K/G, (g+1)*K/G) exactly as PyTorch groups them.
#pragma once

#include <cassert>
#include <cstdint>
#include <vector>

namespace ipu::kernels {

using i64 = std::int64_t;

// Half-open range [begin, end) of flat (row-major) element indices or of an outer dimension.
struct Range {
  i64 begin = 0;
  i64 end = 0;
  i64 size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

// A read-only window onto a flat tensor: the elements [base, base + size) of the whole tensor,
// stored contiguously at `data`. Indexing takes the *global* flat index, so a reference kernel
// reads `x[i]` whatever part of x its tile holds. Out-of-window reads are a planner bug.
template <typename T>
struct Window {
  const T* data = nullptr;
  i64 base = 0;
  i64 size = 0;
  const T& operator[](i64 i) const {
    assert(i >= base && i < base + size && "read outside the vertex's input window");
    return data[i - base];
  }
  // The whole tensor as one window.
  static Window whole(const T* p, i64 n) { return Window{p, 0, n}; }
};

struct Conv2dShape {
  i64 n = 1, h = 1, w = 1, c = 1;  // input [N, H, W, C]
  i64 k = 1, r = 1, s = 1;         // weights [K, R, S, C/G]
  i64 strideH = 1, strideW = 1;
  i64 padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  i64 dilH = 1, dilW = 1;
  i64 groups = 1;

  i64 outH() const { return (h + padTop + padBottom - dilH * (r - 1) - 1) / strideH + 1; }
  i64 outW() const { return (w + padLeft + padRight - dilW * (s - 1) - 1) / strideW + 1; }
  i64 cPerGroup() const { return c / groups; }
  i64 kPerGroup() const { return k / groups; }
  i64 inputElems() const { return n * h * w * c; }
  i64 weightElems() const { return k * r * s * cPerGroup(); }
  i64 outputElems() const { return n * outH() * outW() * k; }
  // Multiply-accumulates of the forward pass (each backward pass has the same count).
  i64 macs() const { return n * outH() * outW() * k * r * s * cPerGroup(); }
};

// C[b] = op(A[b]) x op(B[b]) for b in [0, batch).
//   A: [batch, M, K] ([batch, K, M] if transA); B: [batchB, K, N] ([batchB, N, K] if transB),
//   batchB == batch, or 1 when broadcastB (a weight shared by every batch entry); C: [batch, M, N].
struct MatMulShape {
  i64 batch = 1;
  i64 m = 1, k = 1, n = 1;
  bool transA = false, transB = false;
  bool broadcastB = false;
  i64 aElems() const { return batch * m * k; }
  i64 bElems() const { return (broadcastB ? 1 : batch) * k * n; }
  i64 cElems() const { return batch * m * n; }
  i64 macs() const { return batch * m * n * k; }
};

// 2-D pooling over NHWC.
struct Pool2dShape {
  i64 n = 1, h = 1, w = 1, c = 1;
  i64 kh = 1, kw = 1;
  i64 strideH = 1, strideW = 1;
  i64 padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  bool countIncludePad = false;  // average pooling only: divisor includes padded cells
  i64 outH() const { return (h + padTop + padBottom - kh) / strideH + 1; }
  i64 outW() const { return (w + padLeft + padRight - kw) / strideW + 1; }
  i64 inputElems() const { return n * h * w * c; }
  i64 outputElems() const { return n * outH() * outW() * c; }
};

// Numpy-style broadcasting of two operands to one output of rank <= kMaxRank.
// Operand strides are 0 along broadcast dimensions.
struct BroadcastShape {
  static constexpr int kMaxRank = 6;
  int rank = 0;
  i64 outDims[kMaxRank] = {};
  i64 aStrides[kMaxRank] = {};  // element strides into A for each output dimension
  i64 bStrides[kMaxRank] = {};
  i64 outElems() const {
    i64 e = 1;
    for (int d = 0; d < rank; ++d) e *= outDims[d];
    return e;
  }
  // Build from the two operand shapes (already validated as broadcast-compatible).
  static BroadcastShape make(const std::vector<i64>& aDims, const std::vector<i64>& bDims);
};

// Reduction of `inDims` over the dimensions with reduced[d] == true; the output has the same
// rank with reduced dimensions of size 1 (callers reshape as they like).
// The reduced index space is the row-major flattening of the reduced dimensions alone.
struct ReduceShape {
  std::vector<i64> inDims;
  std::vector<bool> reduced;
  i64 inElems() const;
  i64 outElems() const;
  i64 reducedCount() const;  // product of reduced dimensions
};

enum class UnaryKind {
  Identity,
  Relu,
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Square,
  Sigmoid,
  Tanh,
  Gelu,
  Swish,
  Scale
};
// Gelu is the exact erf form (BERT's reference uses erf). Scale computes alpha * x.
enum class BinaryKind { Add, Sub, Mul, Div, Max, Min };
// Fused kernels: batch norm alone, or with the ReLU that follows it in the same pass (kFused),
// or with the swish (y * sigmoid(y)) that follows it (kSwish: the f32 training kernels only).
enum class BatchNormRelu { kNone, kFused, kSwish };
enum class ReduceKind { Sum, Mean, Max };
// Storage type of the activations and weights of a fused oneDNN kernel (convolution, matmul,
// batch norm): oneDNN takes it as a field of its memory descriptors, so one kernel serves both.
enum class ElementType { F32, BF16 };

}  // namespace ipu::kernels
