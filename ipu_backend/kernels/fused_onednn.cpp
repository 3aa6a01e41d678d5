// oneDNN-backed fused kernels: convolution, matmul, batch norm, pooling.
// Each object creates its primitives, reorder buffers and scratchpads up front; run() binds the
// caller's pointers to pre-made memory objects and executes.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "ipu_backend/kernels/depthwise.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/onednn_common.h"
#include "ipu_backend/kernels/strided_pixels.h"
#include "ipu_backend/kernels/winograd.h"

namespace ipu::kernels::fused {

using detail::bind;
using detail::bindLayout;
using detail::LayoutBinding;
using detail::ownedMemory;
using detail::Prim;
using detail::userMemory;
using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

namespace {

// ---- convolution descriptors ----------------------------------------------------------------

Dt dataType(ElementType t) {
  return t == ElementType::BF16 ? Dt::bf16 : Dt::f32;
}

std::size_t elementBytes(ElementType t) {
  return t == ElementType::BF16 ? 2 : 4;
}

struct ConvDescs {
  memory::desc src, dst;     // user layouts: nhwc
  memory::desc userWeights;  // [K,R,S,C/G]: ohwi, or gohwi with groups
  memory::desc anyWeights;   // same dims, format chosen by the primitive
  memory::dims strides, dilates, padL, padR;
};

ConvDescs convDescs(const Conv2dShape& s, Dt dt) {
  ConvDescs d;
  d.src = memory::desc({s.n, s.c, s.h, s.w}, dt, Tag::nhwc);
  d.dst = memory::desc({s.n, s.k, s.outH(), s.outW()}, dt, Tag::nhwc);
  const memory::dims wdims = s.groups > 1
                                 ? memory::dims{s.groups, s.kPerGroup(), s.cPerGroup(), s.r, s.s}
                                 : memory::dims{s.k, s.c, s.r, s.s};
  d.userWeights = memory::desc(wdims, dt, s.groups > 1 ? Tag::gohwi : Tag::ohwi);
  d.anyWeights = memory::desc(wdims, dt, Tag::any);
  d.strides = {s.strideH, s.strideW};
  d.dilates = {s.dilH - 1, s.dilW - 1};  // oneDNN counts the gaps, not the step
  d.padL = {s.padTop, s.padLeft};
  d.padR = {s.padBottom, s.padRight};
  return d;
}

std::atomic<ConvAlgorithm> gConvAlgorithm{ConvAlgorithm::Auto};

// The descriptors of the algorithm a convolution runs with: the user's NHWC activations for
// direct, "any" (the primitive's blocked layout) for Winograd.
struct ConvPlan {
  dnnl::algorithm alg = dnnl::algorithm::convolution_direct;
  memory::desc src, dst;
};

ConvPlan directPlan(const ConvDescs& d) {
  return {dnnl::algorithm::convolution_direct, d.src, d.dst};
}

// Winograd tiles the output in 4x4 blocks; on images under 7x7 the padding of the tiles and the
// layout reorders cost more than the MACs saved (ResNet-50 at 32x32: direct was ~10-20% faster).
constexpr i64 kWinogradMinSide = 7;

bool winogradShape(const Conv2dShape& s) {
  return s.r == 3 && s.s == 3 && s.strideH == 1 && s.strideW == 1 && s.dilH == 1 &&
         s.outH() >= kWinogradMinSide && s.outW() >= kWinogradMinSide && s.dilW == 1 &&
         s.groups == 1 && s.c >= 64 && s.k >= 64 && s.c % 16 == 0 && s.k % 16 == 0;
}

dnnl::convolution_forward::primitive_desc convForwardPd(const ConvDescs& d, const ConvPlan& p,
                                                        const dnnl::primitive_attr& attr) {
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, p.alg, p.src,
                                       d.anyWeights, p.dst, d.strides, d.dilates, d.padL, d.padR);
  return dnnl::convolution_forward::primitive_desc(desc, attr, detail::cpuEngine());
}

// f32: oneDNN's Winograd where the kernel rule says so and oneDNN implements it on this CPU (it
// refuses the descriptor otherwise), else direct on the user's layout. bf16: direct (oneDNN has
// no bf16 Winograd).
ConvPlan choosePlan(const Conv2dShape& s, const ConvDescs& d, ElementType t) {
  if (t != ElementType::F32 || activeKernelRule().conv3x3 != Conv3x3Kernel::OnednnWinograd ||
      !winogradShape(s))
    return directPlan(d);
  ConvPlan w{dnnl::algorithm::convolution_winograd, memory::desc(d.src.dims(), Dt::f32, Tag::any),
             memory::desc(d.dst.dims(), Dt::f32, Tag::any)};
  try {
    (void)convForwardPd(d, w, dnnl::primitive_attr());
    return w;
  } catch (const dnnl::error&) {
    return directPlan(d);
  }
}

// A 1x1 stride-1 unpadded convolution over NHWC is a GEMM over the N*H*W pixels: y[M,K] =
// x[M,C] W[K,C]^T. In f32, for few pixels (the late stages, small images) oneDNN's matmul beats
// its convolution by 1.1-7x on the same operands and needs no weight reorders; for many pixels
// the two are within ~10% either way, so the convolution stays (measured on AVX-512, 2 threads,
// M = 32..100,352). A fixed rule, not a timing, so every process picks the same kernels.
// In bf16 oneDNN's AMX/AVX-512 matmul beats its convolution for every such ResNet-50 shape:
// 1.6-5.4x on the weight gradient, about even to 1.5x on the other two passes (2 threads,
// 224x224 batch 8, M = 392..25,088 pixels), so every pointwise bf16 convolution is a matmul.
constexpr i64 kPointwiseMatMulMaxPixels = 4096;

bool pointwise(const Conv2dShape& s) {
  return s.r == 1 && s.s == 1 && s.strideH == 1 && s.strideW == 1 && s.padTop == 0 &&
         s.padLeft == 0 && s.padBottom == 0 && s.padRight == 0 && s.groups == 1;
}

bool pointwiseAsMatMul(const Conv2dShape& s) {
  return pointwise(s) && s.n * s.h * s.w <= kPointwiseMatMulMaxPixels;
}

// The f32 data gradient of a pointwise convolution over very many pixels with a small weight
// matrix is a matmul too: dx[M,C] = dy[M,K] W[K,C] ran 1.09-1.25x faster than oneDNN's
// backward-data convolution at M = 100,352 (ResNet-50's 56x56 stage at batch 32) for
// C x K = 64x64, 64x256 and 256x64, but 0.92x for 256x128 there, and 0.84-0.91x at M = 25,088
// and 6,272 (2 threads, AVX-512, 2026-12-05).
constexpr i64 kPointwiseDataGradMatMulMinPixels = 65536;
constexpr i64 kPointwiseDataGradMatMulMaxWeights = 64 * 256;

bool pointwiseDataGradAsMatMul(const Conv2dShape& s) {
  return pointwiseAsMatMul(s) ||
         (pointwise(s) && s.n * s.h * s.w >= kPointwiseDataGradMatMulMinPixels &&
          s.k * s.c <= kPointwiseDataGradMatMulMaxWeights);
}

// The f32 weight gradient of a pointwise convolution over up to 16,384 pixels is a matmul too,
// dW[K,C] = dy^T x. In EfficientNet-B4's f32 step at 380x380 batch 8 (one thread's CPU profile,
// interleaved with the convolution, 2026-12-07) the 24 weight gradients over 24x24 images (4,608
// pixels) took 264 ms as matmuls against 318 ms as oneDNN's jit_1x1 backward-weights, the 8 over
// 48x48 (18,432) 77 ms either way, and the 8 over 95x95 (72,200) 109 ms against 78 ms; on
// ResNet-50's 14x14 shapes at batch 32 (6,272) the matmul was 1.1x faster (kernels_bench).
constexpr i64 kPointwiseWeightGradMatMulMaxPixels = 16384;

bool pointwiseWeightGradAsMatMul(const Conv2dShape& s) {
  return pointwise(s) && s.n * s.h * s.w <= kPointwiseWeightGradMatMulMaxPixels;
}

MatMulShape pointwiseGemm(i64 m, i64 k, i64 n, bool transA, bool transB) {
  MatMulShape g;
  g.m = m, g.k = k, g.n = n, g.transA = transA, g.transB = transB;
  return g;
}

// Other ungrouped f32 convolutions over few output pixels (strided 1x1 shortcuts, 3x3s on
// 1x1-4x4 images) as im2col + matmul: the patch matrix col[M, R*S*C] against the user's ohwi
// weights, which are W[K, R*S*C] row-major. oneDNN's direct kernels block over output pixels and
// waste most of their work on so few (ResNet-50 at 32x32: 5-6 ms for a 1x1 stride-2 conv onto
// 1x1 outputs that is 134 MFLOP). The patch matrix is capped (8 MB) and shared by every such
// kernel that runs on a thread: fused ops run one at a time per engine, and each replica's
// engine runs on its own thread.
constexpr i64 kIm2colMaxElements = i64{2} << 20;

constexpr i64 kIm2colMaxImagePixels = 16;  // output images up to 4x4

bool im2colGemm(const Conv2dShape& s) {
  const i64 m = s.n * s.outH() * s.outW();
  return s.groups == 1 && !pointwiseAsMatMul(s) && s.outH() * s.outW() <= kIm2colMaxImagePixels &&
         m <= kPointwiseMatMulMaxPixels && m * s.r * s.s * s.c <= kIm2colMaxElements;
}

// Strided 1x1 convolutions (ResNet-50's downsampling shortcuts) as subsample + matmul
// (strided_pixels.h). Against oneDNN's direct f32 convolution on the three ResNet-50 shortcuts
// at 224x224 batch 32 (2 threads, AVX-512; medians of 3): both gradients are faster as matmuls
// (data 27.5 / 21.6 / 22.7 ms vs 32.2 / 24.6 / 36.5, weights 26.7 / 20.2 / 21.6 vs
// 27.6 / 25.2 / 30.4 for 56x56x256, 28x28x512, 14x14x1024 inputs); the forward only over few
// output pixels (20.2 vs 23.0 ms onto 7x7), not over many, where the gather costs more than it
// saves (24.4 vs 20.5 ms onto 28x28): the same pixel bound as the stride-1 rule. In bf16 every
// pass is faster as a matmul: oneDNN's bf16 convolution took 5.7-9.3 ms on a weight gradient
// that the matmul does in ~1 ms (224x224 batch 8, 2 threads).
bool stridedPointwiseForwardAsMatMul(const Conv2dShape& s) {
  return detail::pointwiseStrided(s) && s.n * s.outH() * s.outW() <= kPointwiseMatMulMaxPixels;
}

// The patch matrix of a large convolution (the AVX2 rule's 3x3 stride-2 ones) is built and
// multiplied in blocks of output pixels of at most kIm2colMaxElements, so it stays in the L3
// cache and its buffer small; the convolutions above fit in one block.
bool stride2Conv3x3(const Conv2dShape& s) {
  return s.r == 3 && s.s == 3 && s.strideH == 2 && s.strideW == 2 && s.dilH == 1 && s.dilW == 1 &&
         s.groups == 1;
}

// The AVX2 rule's pointwise matmul bounds at any batch (KernelRule::smallImagePointwiseMatMul;
// ResNet-50's shapes, 1 thread, batch 32, 2026-12-07): forwards ran 1.04-1.32x and data
// gradients 1.1-1.55x faster as matmuls onto 14x14 and 7x7 images, 0.9-1.1x onto 28x28; weight
// gradients 1.3-2.3x faster over 7x7-28x28 images, even over 56x56.
constexpr i64 kAvx2PointwiseMaxImagePixels = 14 * 14;
constexpr i64 kAvx2PointwiseWeightGradMaxImagePixels = 28 * 28;

class Im2col {
 public:
  explicit Im2col(const Conv2dShape& s)
      : s_(s),
        m_(s.n * s.outH() * s.outW()),
        cols_(s.r * s.s * s.c),
        blockRows_(std::clamp<i64>(kIm2colMaxElements / cols_, 1, m_)) {
    (void)col();  // grows this thread's buffer now rather than in a step
  }
  i64 m() const { return m_; }
  i64 cols() const { return cols_; }
  // Rows (output pixels) per block; the last block holds the rest (m() % blockRows(), if any).
  i64 blockRows() const { return blockRows_; }
  i64 blocks() const { return (m_ + blockRows_ - 1) / blockRows_; }
  // This thread's patch matrix for one block, grown to this shape (valid until the next kernel
  // runs).
  float* col() const {
    thread_local std::vector<float> buffer;
    if (static_cast<i64>(buffer.size()) < blockRows_ * cols_)
      buffer.resize(static_cast<size_t>(blockRows_ * cols_));
    return buffer.data();
  }

  // col[p - begin, (r, s, c)] = x[n, ih, iw, c] for the output pixels p of [begin, end), 0 in
  // the padding.
  void gather(const float* x, i64 begin = 0, i64 end = -1) const {
    if (end < 0) end = m_;
    detail::syncThreads();
    float* colData = col();
    const i64 oh = s_.outH(), ow = s_.outW();
#pragma omp parallel for schedule(static)
    for (i64 p = begin; p < end; ++p) {
      const i64 n = p / (oh * ow), y = p / ow % oh, xo = p % ow;
      float* row = colData + (p - begin) * cols_;
      for (i64 r = 0; r < s_.r; ++r) {
        const i64 ih = y * s_.strideH - s_.padTop + r * s_.dilH;
        for (i64 t = 0; t < s_.s; ++t) {
          const i64 iw = xo * s_.strideW - s_.padLeft + t * s_.dilW;
          float* dst = row + (r * s_.s + t) * s_.c;
          if (ih < 0 || ih >= s_.h || iw < 0 || iw >= s_.w) {
            std::fill(dst, dst + s_.c, 0.0f);
          } else {
            const float* src = x + ((n * s_.h + ih) * s_.w + iw) * s_.c;
            std::copy(src, src + s_.c, dst);
          }
        }
      }
    }
  }

  // dx = sum over patches of col (the adjoint of gather): one image per thread, so the
  // overlapping windows of an image never race. Only for a patch matrix of one block.
  void scatterAdd(float* dx) const {
    detail::syncThreads();
    const i64 oh = s_.outH(), ow = s_.outW(), image = s_.h * s_.w * s_.c;
    const float* colData = col();
#pragma omp parallel for schedule(static)
    for (i64 n = 0; n < s_.n; ++n) {
      float* img = dx + n * image;
      std::fill(img, img + image, 0.0f);
      for (i64 p = n * oh * ow; p < (n + 1) * oh * ow; ++p) {
        const i64 y = p / ow % oh, xo = p % ow;
        const float* row = colData + p * cols_;
        for (i64 r = 0; r < s_.r; ++r) {
          const i64 ih = y * s_.strideH - s_.padTop + r * s_.dilH;
          if (ih < 0 || ih >= s_.h) continue;
          for (i64 t = 0; t < s_.s; ++t) {
            const i64 iw = xo * s_.strideW - s_.padLeft + t * s_.dilW;
            if (iw < 0 || iw >= s_.w) continue;
            const float* src = row + (r * s_.s + t) * s_.c;
            float* dst = img + (ih * s_.w + iw) * s_.c;
#pragma omp simd
            for (i64 c = 0; c < s_.c; ++c) dst[c] += src[c];
          }
        }
      }
    }
  }

 private:
  Conv2dShape s_;
  i64 m_, cols_, blockRows_;
};

// ---- one convolution kernel for the three passes and both element types -------------------

// The three passes, by their operands (in0, in1) -> out.
enum class ConvPass {
  Forward,         // (x, w) -> y
  BackwardData,    // (dy, w) -> dx
  BackwardFilter,  // (x, dy) -> dw
};

// How a pass runs: a oneDNN convolution primitive, or a matmul over the pixels as they are
// (pointwise), over the im2col patch matrix (f32 only) or over the strided pixels, or our
// Winograd F(4x4, 3x3) (f32 only; winograd.h), or our depthwise kernels (depthwise.h).
enum class ConvRoute { Primitive, Pointwise, Im2col, Strided, Winograd, Depthwise };

// The rules above, per pass and element type (a fixed rule, not a timing: every process picks
// the same kernels).
ConvRoute convRoute(ConvPass pass, const Conv2dShape& s, ElementType t) {
  if (detail::depthwiseShape(s) &&
      (pass == ConvPass::BackwardFilter ||
       (pass == ConvPass::BackwardData && t == ElementType::F32 && detail::depthwiseStrided(s))))
    return ConvRoute::Depthwise;
  if (t == ElementType::BF16) {
    if (pointwise(s)) return ConvRoute::Pointwise;
    if (detail::pointwiseStrided(s)) return ConvRoute::Strided;
    return ConvRoute::Primitive;
  }
  const KernelRule rule = activeKernelRule();
  if (winogradShape(s) && rule.conv3x3 == Conv3x3Kernel::OwnWinograd) return ConvRoute::Winograd;
  bool gemm = pass == ConvPass::BackwardData ? pointwiseDataGradAsMatMul(s) : pointwiseAsMatMul(s);
  if (pass == ConvPass::BackwardFilter) gemm = gemm || pointwiseWeightGradAsMatMul(s);
  if (rule.smallImagePointwiseMatMul && pointwise(s))
    gemm = gemm ||
           s.h * s.w <= (pass == ConvPass::BackwardFilter ? kAvx2PointwiseWeightGradMaxImagePixels
                                                          : kAvx2PointwiseMaxImagePixels);
  if (gemm) return ConvRoute::Pointwise;
  if (im2colGemm(s)) return ConvRoute::Im2col;
  if (rule.stride2Conv3x3Im2col && stride2Conv3x3(s) && pass != ConvPass::BackwardData)
    return ConvRoute::Im2col;
  const bool strided =
      pass == ConvPass::Forward ? stridedPointwiseForwardAsMatMul(s) : detail::pointwiseStrided(s);
  return strided ? ConvRoute::Strided : ConvRoute::Primitive;
}

class ConvKernel {
 public:
  ConvKernel(ConvPass pass, const Conv2dShape& s, ElementType t)
      : pass_(pass), route_(convRoute(pass, s, t)), outChannels_(s.k) {
    detail::syncThreads();
    if (route_ == ConvRoute::Primitive) {
      makePrimitive(s, t);
      return;
    }
    if (route_ == ConvRoute::Winograd) {
      winograd_ = std::make_unique<detail::WinogradF43>(
          pass == ConvPass::Forward        ? detail::WinogradPass::Forward
          : pass == ConvPass::BackwardData ? detail::WinogradPass::BackwardData
                                           : detail::WinogradPass::BackwardFilter,
          s);
      implementation_ = "winograd F(4x4,3x3) (ours) + batched matmul";
      return;
    }
    if (route_ == ConvRoute::Depthwise && pass == ConvPass::BackwardFilter) {
      depthwiseWeightGrad_ = std::make_unique<detail::DepthwiseWeightGrad>(s, t);
      implementation_ = "depthwise weight gradient (ours)";
      return;
    }
    if (route_ == ConvRoute::Depthwise) {
      const bool forward = pass == ConvPass::Forward;
      depthwise_ = std::make_unique<detail::DepthwiseConv>(
          forward ? detail::DepthwiseConv::Pass::Forward
                  : detail::DepthwiseConv::Pass::BackwardData,
          s);
      implementation_ = forward ? "depthwise forward (ours)" : "depthwise data gradient (ours)";
      return;
    }
    // The gemm's rows: the pixels; its inner columns: C (or the R*S*C patch of im2col).
    i64 m = s.n * s.h * s.w, cols = s.c;
    if (route_ == ConvRoute::Im2col) {
      patches_ = std::make_unique<Im2col>(s);
      m = patches_->blockRows(), cols = patches_->cols();
    } else if (route_ == ConvRoute::Strided) {
      pixels_ = std::make_unique<detail::StridedPixels>(s, elementBytes(t));
      m = pixels_->m();
    }
    // The weight gradient transposed (dW^T = x^T dy, then a transpose) where the rule wants the
    // larger of C and K as the GEMM's N.
    transposedWeightGrad_ = pass == ConvPass::BackwardFilter &&
                            (route_ == ConvRoute::Pointwise || route_ == ConvRoute::Strided) &&
                            t == ElementType::F32 && activeKernelRule().wideWeightGradMatMul &&
                            s.c < s.k;
    auto gemmOf = [&](i64 rows) {
      return pass == ConvPass::Forward        ? pointwiseGemm(rows, cols, s.k, false, true)
             : pass == ConvPass::BackwardData ? pointwiseGemm(rows, s.k, cols, false, false)
             : transposedWeightGrad_          ? pointwiseGemm(cols, rows, s.k, true, false)
                                              : pointwiseGemm(s.k, rows, cols, true, false);
    };  // forward y = x W^T, data dx = dy W, filter dW = dy^T x (or dW^T = x^T dy)
    // A patch matrix in several blocks: the weight gradient sums the blocks' products.
    const bool blocked = patches_ && patches_->blocks() > 1;
    if (blocked && pass == ConvPass::BackwardData)
      throw std::logic_error("Conv2dBackwardData: im2col over more than one block");
    const bool accumulate = blocked && pass == ConvPass::BackwardFilter;
    gemm_ = std::make_unique<detail::MatMulPrimitive>(gemmOf(m), dataType(t), accumulate);
    if (patches_ && patches_->m() % m != 0)
      lastGemm_ = std::make_unique<detail::MatMulPrimitive>(gemmOf(patches_->m() % m), dataType(t),
                                                            accumulate);
    if (transposedWeightGrad_) {
      transposedShape_ = {cols, s.k};
      (void)transposeBuffer();
    }
    implementation_ = route_ == ConvRoute::Pointwise ? "matmul (pointwise convolution"
                      : blocked                      ? "matmul (blocked im2col convolution"
                      : route_ == ConvRoute::Im2col  ? "matmul (im2col convolution"
                                                     : "matmul (strided pointwise convolution";
    implementation_ += transposedWeightGrad_ ? ", dW^T = x^T dy)" : ")";
  }

  const std::string& implementation() const { return implementation_; }

  void run(const void* in0, const void* in1, void* out) {
    switch (route_) {
      case ConvRoute::Primitive:
        return runPrimitive(in0, in1, out);
      case ConvRoute::Pointwise:
        // forward y = x W^T, data dx = dy W, filter dW = dy^T x: (in0, in1) in gemm order except
        // for the filter pass
        if (transposedWeightGrad_) return runTransposedWeightGrad(in0, in1, out);
        return pass_ == ConvPass::BackwardFilter ? gemm_->run(in1, in0, out)
                                                 : gemm_->run(in0, in1, out);
      case ConvRoute::Im2col:
      case ConvRoute::Strided:
        return runGathered(in0, in1, out);
      case ConvRoute::Winograd:
        return winograd_->run(static_cast<const float*>(in0), static_cast<const float*>(in1),
                              static_cast<float*>(out));
      case ConvRoute::Depthwise:
        if (depthwiseWeightGrad_) return depthwiseWeightGrad_->run(in0, in1, out);
        return depthwise_->run(static_cast<const float*>(in0), static_cast<const float*>(in1),
                               static_cast<float*>(out));
    }
  }

 private:
  void* pixelBuffer() const {
    return patches_ ? static_cast<void*>(patches_->col()) : pixels_->buffer();
  }

  // This thread's dW^T buffer (C x K), shared like the other per-thread buffers.
  float* transposeBuffer() const {
    thread_local std::vector<float> buffer;
    const i64 elements = transposedShape_[0] * transposedShape_[1];
    if (static_cast<i64>(buffer.size()) < elements) buffer.resize(static_cast<size_t>(elements));
    return buffer.data();
  }

  // dW^T[C, K] = x^T dy, then dw[k][c] = dW^T[c][k] in 64 x 64 blocks.
  void runTransposedWeightGrad(const void* x, const void* dy, void* out) {
    float* wt = transposeBuffer();
    gemm_->run(x, dy, wt);
    const i64 c = transposedShape_[0], k = transposedShape_[1];
    float* dw = static_cast<float*>(out);
    constexpr i64 kBlock = 64;
    detail::syncThreads();
#pragma omp parallel for collapse(2) schedule(static)
    for (i64 k0 = 0; k0 < k; k0 += kBlock)
      for (i64 c0 = 0; c0 < c; c0 += kBlock)
        for (i64 kk = k0; kk < std::min(k, k0 + kBlock); ++kk)
          for (i64 cc = c0; cc < std::min(c, c0 + kBlock); ++cc) dw[kk * c + cc] = wt[cc * k + kk];
  }

  // Im2col in several blocks (forward and weight gradient): gather a block of output pixels,
  // then y[block] = col W^T, or dw += dy[block]^T col (dw zeroed first).
  void runBlocked(const float* in0, const float* in1, float* out) {
    const i64 rows = patches_->blockRows(), m = patches_->m(), k = outChannels_;
    if (pass_ == ConvPass::BackwardFilter) std::fill(out, out + k * patches_->cols(), 0.0f);
    float* col = patches_->col();
    for (i64 begin = 0; begin < m; begin += rows) {
      const i64 end = std::min(m, begin + rows);
      patches_->gather(in0, begin, end);
      detail::MatMulPrimitive& gemm = end - begin == rows ? *gemm_ : *lastGemm_;
      if (pass_ == ConvPass::Forward)
        gemm.run(col, in1, out + begin * k);
      else
        gemm.run(in1 + begin * k, col, out);
    }
  }

  // Im2col / Strided: the forward and filter passes gather x into the pixel buffer first; the
  // data pass writes the buffer and scatters it back into dx.
  void runGathered(const void* in0, const void* in1, void* out) {
    if (patches_ && patches_->blocks() > 1)
      return runBlocked(static_cast<const float*>(in0), static_cast<const float*>(in1),
                        static_cast<float*>(out));
    void* buffer = pixelBuffer();
    if (pass_ == ConvPass::BackwardData) {
      gemm_->run(in0, in1, buffer);
      if (patches_) return patches_->scatterAdd(static_cast<float*>(out));
      return pixels_->scatter(out);
    }
    if (patches_)
      patches_->gather(static_cast<const float*>(in0));
    else
      pixels_->gather(in0);
    if (pass_ == ConvPass::Forward) return gemm_->run(buffer, in1, out);
    if (transposedWeightGrad_) return runTransposedWeightGrad(buffer, in1, out);
    gemm_->run(in1, buffer, out);
  }

  void makePrimitive(const Conv2dShape& s, ElementType t) {
    const ConvDescs d = convDescs(s, dataType(t));
    const ConvPlan plan = choosePlan(s, d, t);
    const auto attr = detail::userScratchpadAttr();
    // Operand slots: in0 0, out 1, in1 2 (the weights' slot is 2 in the two passes that read them).
    switch (pass_) {
      case ConvPass::Forward: {
        const auto pd = convForwardPd(d, plan, attr);
        bindings(bindLayout(d.src, pd.src_desc(), false, 0),
                 bindLayout(d.userWeights, pd.weights_desc(), false, 2),
                 bindLayout(d.dst, pd.dst_desc(), true, 1));
        conv_ = Prim(pd, dnnl::convolution_forward(pd));
        args(DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST);
        implementation_ = pd.impl_info_str();
        return;
      }
      case ConvPass::BackwardData: {
        const auto hint = convForwardPd(d, plan, dnnl::primitive_attr());
        dnnl::convolution_backward_data::desc desc(plan.alg, plan.src, d.anyWeights, plan.dst,
                                                   d.strides, d.dilates, d.padL, d.padR);
        dnnl::convolution_backward_data::primitive_desc pd(desc, attr, detail::cpuEngine(), hint);
        bindings(bindLayout(d.dst, pd.diff_dst_desc(), false, 0),
                 bindLayout(d.userWeights, pd.weights_desc(), false, 2),
                 bindLayout(d.src, pd.diff_src_desc(), true, 1));
        conv_ = Prim(pd, dnnl::convolution_backward_data(pd));
        args(DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC);
        implementation_ = pd.impl_info_str();
        return;
      }
      case ConvPass::BackwardFilter: {
        const auto hint = convForwardPd(d, plan, dnnl::primitive_attr());
        dnnl::convolution_backward_weights::desc desc(plan.alg, plan.src, d.anyWeights, plan.dst,
                                                      d.strides, d.dilates, d.padL, d.padR);
        dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, detail::cpuEngine(),
                                                              hint);
        bindings(bindLayout(d.src, pd.src_desc(), false, 0),
                 bindLayout(d.dst, pd.diff_dst_desc(), false, 1),
                 bindLayout(d.userWeights, pd.diff_weights_desc(), true, 2));
        conv_ = Prim(pd, dnnl::convolution_backward_weights(pd));
        args(DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS);
        implementation_ = pd.impl_info_str();
        return;
      }
    }
  }

  void bindings(LayoutBinding in0, LayoutBinding in1, LayoutBinding out) {
    in0_ = std::move(in0), in1_ = std::move(in1), out_ = std::move(out);
  }
  void args(int in0, int in1, int out) {
    conv_.arg(in0, in0_.primitive);
    conv_.arg(in1, in1_.primitive);
    conv_.arg(out, out_.primitive);
  }

  // Inputs reordered into the primitive's layouts where they differ, the output back out.
  void runPrimitive(const void* in0, const void* in1, void* out) {
    detail::syncThreads();
    bind(in0_.user, in0);
    bind(in1_.user, in1);
    bind(out_.user, out);
    in0_.attach(), in1_.attach(), out_.attach();
    in1_.reorderIfNeeded();
    in0_.reorderIfNeeded();
    conv_.execute();
    out_.reorderIfNeeded();
    detail::waitStream();
  }

  ConvPass pass_;
  ConvRoute route_;
  i64 outChannels_ = 0;  // K
  bool transposedWeightGrad_ = false;
  std::array<i64, 2> transposedShape_{};               // dW^T: [C, K]
  std::unique_ptr<detail::MatMulPrimitive> lastGemm_;  // the last, partial block of im2col
  std::string implementation_;
  LayoutBinding in0_, in1_, out_;
  Prim conv_;
  std::unique_ptr<detail::MatMulPrimitive> gemm_;
  std::unique_ptr<Im2col> patches_;
  std::unique_ptr<detail::StridedPixels> pixels_;
  std::unique_ptr<detail::WinogradF43> winograd_;
  std::unique_ptr<detail::DepthwiseWeightGrad> depthwiseWeightGrad_;
  std::unique_ptr<detail::DepthwiseConv> depthwise_;
};

}  // namespace

void setConvAlgorithm(ConvAlgorithm a) {
  gConvAlgorithm.store(a);
}
ConvAlgorithm convAlgorithm() {
  return gConvAlgorithm.load();
}

KernelIsa kernelIsa() {
  static const KernelIsa isa = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case dnnl::cpu_isa::avx512_core:
      case dnnl::cpu_isa::avx512_core_vnni:
      case dnnl::cpu_isa::avx512_core_bf16:
      case dnnl::cpu_isa::avx512_core_amx:
      case dnnl::cpu_isa::all:
        return KernelIsa::Avx512;
      case dnnl::cpu_isa::avx2:
      case dnnl::cpu_isa::avx2_vnni:
        return KernelIsa::Avx2;
      default:
        return KernelIsa::Older;
    }
  }();
  return isa;
}

const char* isaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::Avx512:
      return "avx512";
    case KernelIsa::Avx2:
      return "avx2";
    case KernelIsa::Older:
      break;
  }
  return "older than avx2";
}

KernelRule kernelRule(KernelIsa isa, ConvAlgorithm algorithm) {
  KernelRule r;
  r.isa = isa;
  switch (algorithm) {
    case ConvAlgorithm::Direct:
      r.conv3x3 = Conv3x3Kernel::Direct;
      break;
    case ConvAlgorithm::OwnWinograd:
      r.conv3x3 = Conv3x3Kernel::OwnWinograd;
      break;
    case ConvAlgorithm::Auto:
      r.conv3x3 = isa == KernelIsa::Avx512 ? Conv3x3Kernel::OnednnWinograd
                  : isa == KernelIsa::Avx2 ? Conv3x3Kernel::OwnWinograd
                                           : Conv3x3Kernel::Direct;
      break;
  }
  // oneDNN's AVX2 direct kernels against its AVX2 GEMM (docs/PERFORMANCE.md, 2026-12-07 late).
  const bool avx2 = isa == KernelIsa::Avx2;
  r.smallImagePointwiseMatMul = avx2;
  r.wideWeightGradMatMul = avx2;
  r.stride2Conv3x3Im2col = avx2;
#if defined(__AVX512F__)
  r.reluMaskLoops = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  r.reluMaskLoops = "avx2";
#endif
  return r;
}

namespace {
// -1: the CPU's ISA; else a KernelIsa's value.
std::atomic<int> gRuleIsa{-1};
}  // namespace

void setRuleIsa(std::optional<KernelIsa> isa) {
  gRuleIsa.store(isa ? static_cast<int>(*isa) : -1);
}

KernelRule activeKernelRule() {
  const int forced = gRuleIsa.load();
  return kernelRule(forced < 0 ? kernelIsa() : static_cast<KernelIsa>(forced), convAlgorithm());
}

std::string describe(const KernelRule& rule) {
  const char* conv3x3 = rule.conv3x3 == Conv3x3Kernel::OnednnWinograd
                            ? "winograd F(4x4,3x3) (oneDNN)"
                        : rule.conv3x3 == Conv3x3Kernel::OwnWinograd
                            ? "winograd F(4x4,3x3) (ours) + oneDNN batched matmul"
                            : "direct (oneDNN)";
  return std::string("isa ") + isaName(rule.isa) +
         ": f32 conv 3x3 stride 1 (>= 64 channels, >= " + std::to_string(kWinogradMinSide) + "x" +
         std::to_string(kWinogradMinSide) + " outputs) = " + conv3x3 +
         "; pointwise <= " + std::to_string(kPointwiseMatMulMaxPixels) +
         " pixels (weight gradient <= " + std::to_string(kPointwiseWeightGradMatMulMaxPixels) +
         "), strided pointwise, im2col onto <= 4x4 = matmul (oneDNN)" +
         (rule.smallImagePointwiseMatMul
              ? "; pointwise onto <= 14x14, weight gradient over <= 28x28 = matmul"
              : "") +
         (rule.wideWeightGradMatMul ? "; pointwise weight gradient with C < K = (x^T dy)^T" : "") +
         (rule.stride2Conv3x3Im2col
              ? "; conv 3x3 stride 2 forward, weight gradient = blocked im2col + matmul"
              : "") +
         "; other convs = direct (oneDNN); batch norm + relu, + add + relu = fused loops (mask " +
         "bits " + rule.reluMaskLoops + ")";
}

struct Conv2dForward::Impl : ConvKernel {
  using ConvKernel::ConvKernel;
};
Conv2dForward::Conv2dForward(const Conv2dShape& s, ElementType t)
    : impl_(std::make_unique<Impl>(ConvPass::Forward, s, t)) {}
Conv2dForward::~Conv2dForward() = default;
std::string Conv2dForward::implementation() const {
  return impl_->implementation();
}
void Conv2dForward::run(const void* x, const void* w, void* y) {
  impl_->run(x, w, y);
}

struct Conv2dBackwardData::Impl : ConvKernel {
  using ConvKernel::ConvKernel;
};
Conv2dBackwardData::Conv2dBackwardData(const Conv2dShape& s, ElementType t)
    : impl_(std::make_unique<Impl>(ConvPass::BackwardData, s, t)) {}
Conv2dBackwardData::~Conv2dBackwardData() = default;
std::string Conv2dBackwardData::implementation() const {
  return impl_->implementation();
}
void Conv2dBackwardData::run(const void* dy, const void* w, void* dx) {
  impl_->run(dy, w, dx);
}

struct Conv2dBackwardFilter::Impl : ConvKernel {
  using ConvKernel::ConvKernel;
};
Conv2dBackwardFilter::Conv2dBackwardFilter(const Conv2dShape& s, ElementType t)
    : impl_(std::make_unique<Impl>(ConvPass::BackwardFilter, s, t)) {}
Conv2dBackwardFilter::~Conv2dBackwardFilter() = default;
std::string Conv2dBackwardFilter::implementation() const {
  return impl_->implementation();
}
void Conv2dBackwardFilter::run(const void* x, const void* dy, void* dw) {
  impl_->run(x, dy, dw);
}

// ---- MatMul --------------------------------------------------------------------------------

// Which operands an f32 matmul copies into oneDNN's blocked layout before the GEMM (one reorder
// per run, into this thread's layout buffers). oneDNN's brgemm reads a plain row-major B (and a
// transposed A) through its own per-block copies, which cost more than one reorder when many
// rows share B: on Zen 4 with one thread, BERT-Large's dense layers at 1,024 tokens ran
// 5-14% faster packed (x W [1024,4096] x [4096,1024] 95 -> 84 ms; the weight gradient
// x^T dy 92 -> 86 ms), reorders included; with few rows (the MLM decoder's 152) the reorder of
// the [30522, 1024] table costs more than it saves, and a transposed B gained nothing.
struct MatMulPacking {
  bool a = false, b = false;
};
MatMulPacking packingOf(const MatMulShape& s, Dt dt, i64 batch, i64 rows) {
  constexpr i64 kMinRows = 512;  // rows sharing B (or, transposed A, columns sharing A)
  if (dt != Dt::f32 || batch != 1 || (s.transA && s.transB)) return {};
  if (s.transA) return {s.m >= kMinRows, s.m >= kMinRows};  // a weight gradient x^T dy
  return {false, !s.transB && rows >= kMinRows};
}

struct MatMul::Impl {
  Impl(const MatMulShape& s, Dt dt) {
    const detail::MatMulDescs d = detail::matMulDescs(s, dt);
    const MatMulPacking pack = packingOf(s, dt, d.batch, d.rows);
    if (!pack.a && !pack.b) {
      plain.emplace(s, dt);
      return;
    }
    detail::syncThreads();
    auto any = [dt](const memory::desc& md) { return memory::desc(md.dims(), dt, Tag::any); };
    dnnl::matmul::desc desc(pack.a ? any(d.a) : d.a, pack.b ? any(d.b) : d.b, d.c);
    dnnl::matmul::primitive_desc pd(desc, detail::userScratchpadAttr(), detail::cpuEngine());
    a = bindLayout(d.a, pd.src_desc(), false, 0);
    b = bindLayout(d.b, pd.weights_desc(), false, 1);
    c = userMemory(d.c);
    mm = Prim(pd, dnnl::matmul(pd));
    mm.arg(DNNL_ARG_SRC, a.primitive);
    mm.arg(DNNL_ARG_WEIGHTS, b.primitive);
    mm.arg(DNNL_ARG_DST, c);
  }
  void run(const void* pa, const void* pb, void* pc) {
    if (plain) return plain->run(pa, pb, pc);
    detail::syncThreads();
    bind(a.user, pa);
    bind(b.user, pb);
    bind(c, pc);
    a.attach(), b.attach();
    a.reorderIfNeeded();
    b.reorderIfNeeded();
    mm.execute();
    detail::waitStream();
  }
  std::optional<detail::MatMulPrimitive> plain;  // no operand packed
  LayoutBinding a, b;
  memory c;
  Prim mm;
};

MatMul::MatMul(const MatMulShape& s, ElementType t)
    : impl_(std::make_unique<Impl>(s, dataType(t))) {}

MatMul::~MatMul() = default;

void MatMul::run(const void* a, const void* b, void* c) {
  impl_->run(a, b, c);
}

bool MatMul::packsOperands() const {
  return !impl_->plain;
}

// ---- batch norm ----------------------------------------------------------------------------

struct BatchNormForwardInference::Impl : detail::BatchNormForwardPrimitive {
  using BatchNormForwardPrimitive::BatchNormForwardPrimitive;
};

BatchNormForwardInference::BatchNormForwardInference(i64 rows, i64 c, float eps, BatchNormRelu relu)
    : impl_(std::make_unique<Impl>(rows, c, eps, relu, Dt::f32, /*training=*/false)) {}

BatchNormForwardInference::~BatchNormForwardInference() = default;

void BatchNormForwardInference::run(const float* x, const float* gamma, const float* beta,
                                    const float* mean, const float* var, float* y) {
  impl_->run(x, gamma, beta, y, mean, var, nullptr, "BatchNormForwardInference");
}

// ---- pooling -------------------------------------------------------------------------------

namespace {

struct PoolDescs {
  memory::desc src, dst;
  memory::dims strides, kernel, padL, padR;
};

PoolDescs poolDescs(const Pool2dShape& s) {
  return PoolDescs{memory::desc({s.n, s.c, s.h, s.w}, Dt::f32, Tag::nhwc),
                   memory::desc({s.n, s.c, s.outH(), s.outW()}, Dt::f32, Tag::nhwc),
                   {s.strideH, s.strideW},
                   {s.kh, s.kw},
                   {s.padTop, s.padLeft},
                   {s.padBottom, s.padRight}};
}

dnnl::algorithm avgAlgorithm(const Pool2dShape& s) {
  return s.countIncludePad ? dnnl::algorithm::pooling_avg_include_padding
                           : dnnl::algorithm::pooling_avg_exclude_padding;
}

dnnl::pooling_forward::primitive_desc poolForwardPd(const PoolDescs& d, dnnl::prop_kind prop,
                                                    dnnl::algorithm alg,
                                                    const dnnl::primitive_attr& attr) {
  dnnl::pooling_forward::desc desc(prop, alg, d.src, d.dst, d.strides, d.kernel, d.padL, d.padR);
  return dnnl::pooling_forward::primitive_desc(desc, attr, detail::cpuEngine());
}

}  // namespace

struct MaxPoolForward::Impl {
  memory x, y;
  Prim pool;
};

MaxPoolForward::MaxPoolForward(const Pool2dShape& s) : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  const PoolDescs d = poolDescs(s);
  // forward_inference: no argmax workspace is needed when only y is wanted.
  const auto pd = poolForwardPd(d, dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max,
                                detail::userScratchpadAttr());
  impl_->x = userMemory(d.src);
  impl_->y = userMemory(d.dst);
  impl_->pool = Prim(pd, dnnl::pooling_forward(pd));
  impl_->pool.arg(DNNL_ARG_SRC, impl_->x);
  impl_->pool.arg(DNNL_ARG_DST, impl_->y);
}

MaxPoolForward::~MaxPoolForward() = default;

void MaxPoolForward::run(const float* x, float* y) {
  detail::syncThreads();
  bind(impl_->x, x);
  bind(impl_->y, y);
  impl_->pool.execute();
  detail::waitStream();
}

struct AvgPoolForward::Impl {
  memory x, y;
  Prim pool;
};

AvgPoolForward::AvgPoolForward(const Pool2dShape& s) : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  const PoolDescs d = poolDescs(s);
  const auto pd = poolForwardPd(d, dnnl::prop_kind::forward_inference, avgAlgorithm(s),
                                detail::userScratchpadAttr());
  impl_->x = userMemory(d.src);
  impl_->y = userMemory(d.dst);
  impl_->pool = Prim(pd, dnnl::pooling_forward(pd));
  impl_->pool.arg(DNNL_ARG_SRC, impl_->x);
  impl_->pool.arg(DNNL_ARG_DST, impl_->y);
}

AvgPoolForward::~AvgPoolForward() = default;

void AvgPoolForward::run(const float* x, float* y) {
  detail::syncThreads();
  bind(impl_->x, x);
  bind(impl_->y, y);
  impl_->pool.execute();
  detail::waitStream();
}

struct AvgPoolBackward::Impl {
  memory dy, dx;
  Prim pool;
};

AvgPoolBackward::AvgPoolBackward(const Pool2dShape& s) : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  const PoolDescs d = poolDescs(s);
  const auto hint =
      poolForwardPd(d, dnnl::prop_kind::forward_training, avgAlgorithm(s), dnnl::primitive_attr());
  dnnl::pooling_backward::desc desc(avgAlgorithm(s), d.src, d.dst, d.strides, d.kernel, d.padL,
                                    d.padR);
  dnnl::pooling_backward::primitive_desc pd(desc, detail::userScratchpadAttr(), detail::cpuEngine(),
                                            hint);
  impl_->dy = userMemory(d.dst);
  impl_->dx = userMemory(d.src);
  impl_->pool = Prim(pd, dnnl::pooling_backward(pd));
  impl_->pool.arg(DNNL_ARG_DIFF_DST, impl_->dy);
  impl_->pool.arg(DNNL_ARG_DIFF_SRC, impl_->dx);
}

AvgPoolBackward::~AvgPoolBackward() = default;

void AvgPoolBackward::run(const float* dy, float* dx) {
  detail::syncThreads();
  bind(impl_->dy, dy);
  bind(impl_->dx, dx);
  impl_->pool.execute();
  detail::waitStream();
}

// ---- GELU (tanh form) ----------------------------------------------------------------------

struct GeluTanh::Impl {
  memory x, y, dy, dx;
  Prim forward, backward;
};

GeluTanh::GeluTanh(i64 count) : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  const memory::desc md({count}, Dt::f32, Tag::a);
  const dnnl::eltwise_forward::desc fd(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::eltwise_gelu_tanh, md, 0.f, 0.f);
  const dnnl::eltwise_forward::primitive_desc fpd(fd, detail::userScratchpadAttr(),
                                                  detail::cpuEngine());
  const dnnl::eltwise_backward::desc bd(dnnl::algorithm::eltwise_gelu_tanh, md, md, 0.f, 0.f);
  const dnnl::eltwise_backward::primitive_desc bpd(bd, detail::userScratchpadAttr(),
                                                   detail::cpuEngine(), fpd);
  impl_->x = userMemory(md);
  impl_->y = userMemory(md);
  impl_->dy = userMemory(md);
  impl_->dx = userMemory(md);
  impl_->forward = Prim(fpd, dnnl::eltwise_forward(fpd));
  impl_->forward.arg(DNNL_ARG_SRC, impl_->x);
  impl_->forward.arg(DNNL_ARG_DST, impl_->y);
  impl_->backward = Prim(bpd, dnnl::eltwise_backward(bpd));
  impl_->backward.arg(DNNL_ARG_SRC, impl_->x);
  impl_->backward.arg(DNNL_ARG_DIFF_DST, impl_->dy);
  impl_->backward.arg(DNNL_ARG_DIFF_SRC, impl_->dx);
}

GeluTanh::~GeluTanh() = default;

void GeluTanh::forward(const float* x, float* y) {
  detail::syncThreads();
  bind(impl_->x, x);
  bind(impl_->y, y);
  impl_->forward.execute();
  detail::waitStream();
}

void GeluTanh::backward(const float* x, const float* dy, float* dx) {
  detail::syncThreads();
  bind(impl_->x, x);
  bind(impl_->dy, dy);
  bind(impl_->dx, dx);
  impl_->backward.execute();
  detail::waitStream();
}

}  // namespace ipu::kernels::fused
