// oneDNN-backed fused kernels: convolution, matmul, batch norm, pooling.
// Each object creates its primitives, reorder buffers and scratchpads up front; run() binds the
// caller's pointers to pre-made memory objects and executes.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/onednn_common.h"
#include "ipu_backend/kernels/strided_pixels.h"

namespace ipu::kernels::fused {

using detail::bind;
using detail::bindLayout;
using detail::LayoutBinding;
using detail::ownedMemory;
using detail::Prim;
using detail::userMemory;
using dnnl::memory;
using StridedPixels = detail::StridedPixels<float>;
using Tag = memory::format_tag;
using Dt = memory::data_type;

namespace {

// ---- convolution descriptors ----------------------------------------------------------------

struct ConvDescs {
  memory::desc src, dst;     // user layouts: nhwc
  memory::desc userWeights;  // [K,R,S,C/G]: ohwi, or gohwi with groups
  memory::desc anyWeights;   // same dims, format chosen by the primitive
  memory::dims strides, dilates, padL, padR;
};

ConvDescs convDescs(const Conv2dShape& s) {
  ConvDescs d;
  d.src = memory::desc({s.n, s.c, s.h, s.w}, Dt::f32, Tag::nhwc);
  d.dst = memory::desc({s.n, s.k, s.outH(), s.outW()}, Dt::f32, Tag::nhwc);
  const memory::dims wdims = s.groups > 1
                                 ? memory::dims{s.groups, s.kPerGroup(), s.cPerGroup(), s.r, s.s}
                                 : memory::dims{s.k, s.c, s.r, s.s};
  d.userWeights = memory::desc(wdims, Dt::f32, s.groups > 1 ? Tag::gohwi : Tag::ohwi);
  d.anyWeights = memory::desc(wdims, Dt::f32, Tag::any);
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

// Winograd where allowed and implemented on this CPU (oneDNN refuses the descriptor
// otherwise), else direct on the user's layout.
ConvPlan choosePlan(const Conv2dShape& s, const ConvDescs& d) {
  if (gConvAlgorithm.load() != ConvAlgorithm::Auto || !winogradShape(s)) return directPlan(d);
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
// x[M,C] W[K,C]^T. For few pixels (the late stages, small images) oneDNN's matmul beats its
// convolution by 1.1-7x on the same operands and needs no weight reorders; for many pixels
// the two are within ~10% either way, so the convolution stays (measured on AVX-512, 2 threads,
// M = 32..100,352). A fixed rule, not a timing, so every process picks the same kernels.
constexpr i64 kPointwiseMatMulMaxPixels = 4096;

bool pointwise(const Conv2dShape& s) {
  return s.r == 1 && s.s == 1 && s.strideH == 1 && s.strideW == 1 && s.padTop == 0 &&
         s.padLeft == 0 && s.padBottom == 0 && s.padRight == 0 && s.groups == 1;
}

bool pointwiseAsMatMul(const Conv2dShape& s) {
  return pointwise(s) && s.n * s.h * s.w <= kPointwiseMatMulMaxPixels;
}

// The data gradient of a pointwise convolution over very many pixels with a small weight
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

MatMulShape pointwiseGemm(i64 m, i64 k, i64 n, bool transA, bool transB) {
  MatMulShape g;
  g.m = m, g.k = k, g.n = n, g.transA = transA, g.transB = transB;
  return g;
}

// Other ungrouped convolutions over few output pixels (strided 1x1 shortcuts, 3x3s on 1x1-4x4
// images) as im2col + matmul: the patch matrix col[M, R*S*C] against the user's ohwi weights,
// which are W[K, R*S*C] row-major. oneDNN's direct kernels block over output pixels and waste
// most of their work on so few (ResNet-50 at 32x32: 5-6 ms for a 1x1 stride-2 conv onto 1x1
// outputs that is 134 MFLOP). The patch matrix is capped (8 MB) and shared by every such
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
// saves (24.4 vs 20.5 ms onto 28x28): the same pixel bound as the stride-1 rule.
bool stridedPointwiseForwardAsMatMul(const Conv2dShape& s) {
  return detail::pointwiseStrided(s) && s.n * s.outH() * s.outW() <= kPointwiseMatMulMaxPixels;
}

class Im2col {
 public:
  explicit Im2col(const Conv2dShape& s)
      : s_(s), m_(s.n * s.outH() * s.outW()), cols_(s.r * s.s * s.c) {
    (void)col();  // grows this thread's buffer now rather than in a step
  }
  i64 m() const { return m_; }
  i64 cols() const { return cols_; }
  // This thread's patch matrix, grown to this shape (valid until the next kernel runs).
  float* col() const {
    thread_local std::vector<float> buffer;
    if (static_cast<i64>(buffer.size()) < m_ * cols_)
      buffer.resize(static_cast<size_t>(m_ * cols_));
    return buffer.data();
  }

  // col[pixel, (r, s, c)] = x[n, ih, iw, c], 0 in the padding.
  void gather(const float* x) const {
    detail::syncThreads();
    float* colData = col();
    const i64 oh = s_.outH(), ow = s_.outW();
#pragma omp parallel for schedule(static)
    for (i64 p = 0; p < m_; ++p) {
      const i64 n = p / (oh * ow), y = p / ow % oh, xo = p % ow;
      float* row = colData + p * cols_;
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
  // overlapping windows of an image never race.
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
  i64 m_, cols_;
};

}  // namespace

void setConvAlgorithm(ConvAlgorithm a) {
  gConvAlgorithm.store(a);
}
ConvAlgorithm convAlgorithm() {
  return gConvAlgorithm.load();
}

// ---- Conv2dForward -------------------------------------------------------------------------

struct Conv2dForward::Impl {
  LayoutBinding x, y, w;
  Prim conv;
  std::string implementation;
  // pointwiseAsMatMul, im2colGemm with `patches`, or pointwiseStrided with `pixels`
  std::unique_ptr<MatMul> gemm;
  std::unique_ptr<Im2col> patches;
  std::unique_ptr<StridedPixels> pixels;
};

Conv2dForward::Conv2dForward(const Conv2dShape& s) : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  if (pointwiseAsMatMul(s)) {  // y[M,K] = x[M,C] W[K,C]^T
    impl_->gemm = std::make_unique<MatMul>(pointwiseGemm(s.n * s.h * s.w, s.c, s.k, false, true));
    impl_->implementation = "matmul (pointwise convolution)";
    return;
  }
  if (im2colGemm(s)) {  // y[M,K] = col[M,RSC] W[K,RSC]^T
    impl_->patches = std::make_unique<Im2col>(s);
    impl_->gemm = std::make_unique<MatMul>(
        pointwiseGemm(impl_->patches->m(), impl_->patches->cols(), s.k, false, true));
    impl_->implementation = "matmul (im2col convolution)";
    return;
  }
  if (stridedPointwiseForwardAsMatMul(s)) {  // y[M,K] = x_sampled[M,C] W[K,C]^T
    impl_->pixels = std::make_unique<StridedPixels>(s);
    impl_->gemm =
        std::make_unique<MatMul>(pointwiseGemm(impl_->pixels->m(), s.c, s.k, false, true));
    impl_->implementation = "matmul (strided pointwise convolution)";
    return;
  }
  const ConvDescs d = convDescs(s);
  const ConvPlan plan = choosePlan(s, d);
  const auto pd = convForwardPd(d, plan, detail::userScratchpadAttr());
  impl_->x = bindLayout(d.src, pd.src_desc(), /*toUser=*/false, 0);
  impl_->y = bindLayout(d.dst, pd.dst_desc(), /*toUser=*/true, 1);
  impl_->w = bindLayout(d.userWeights, pd.weights_desc(), /*toUser=*/false, 2);
  impl_->conv = Prim(pd, dnnl::convolution_forward(pd));
  impl_->implementation = pd.impl_info_str();
  impl_->conv.arg(DNNL_ARG_SRC, impl_->x.primitive);
  impl_->conv.arg(DNNL_ARG_WEIGHTS, impl_->w.primitive);
  impl_->conv.arg(DNNL_ARG_DST, impl_->y.primitive);
}

Conv2dForward::~Conv2dForward() = default;

std::string Conv2dForward::implementation() const {
  return impl_->implementation;
}

void Conv2dForward::run(const float* x, const float* w, float* y) {
  if (impl_->patches) {
    impl_->patches->gather(x);
    return impl_->gemm->run(impl_->patches->col(), w, y);
  }
  if (impl_->pixels) {
    impl_->pixels->gather(x);
    return impl_->gemm->run(impl_->pixels->buffer(), w, y);
  }
  if (impl_->gemm) return impl_->gemm->run(x, w, y);
  detail::syncThreads();
  bind(impl_->x.user, x);
  bind(impl_->w.user, w);
  bind(impl_->y.user, y);
  impl_->x.attach(), impl_->y.attach(), impl_->w.attach();
  impl_->w.reorderIfNeeded();
  impl_->x.reorderIfNeeded();
  impl_->conv.execute();
  impl_->y.reorderIfNeeded();
  detail::waitStream();
}

// ---- Conv2dBackwardData --------------------------------------------------------------------

struct Conv2dBackwardData::Impl {
  LayoutBinding dy, dx, w;
  Prim conv;
  // pointwiseAsMatMul, im2colGemm with `patches`, or pointwiseStrided with `pixels`
  std::unique_ptr<MatMul> gemm;
  std::unique_ptr<Im2col> patches;
  std::unique_ptr<StridedPixels> pixels;
};

Conv2dBackwardData::Conv2dBackwardData(const Conv2dShape& s) : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  if (pointwiseDataGradAsMatMul(s)) {  // dx[M,C] = dy[M,K] W[K,C]
    impl_->gemm = std::make_unique<MatMul>(pointwiseGemm(s.n * s.h * s.w, s.k, s.c, false, false));
    return;
  }
  if (im2colGemm(s)) {  // dcol[M,RSC] = dy[M,K] W[K,RSC], then summed back into dx
    impl_->patches = std::make_unique<Im2col>(s);
    impl_->gemm = std::make_unique<MatMul>(
        pointwiseGemm(impl_->patches->m(), s.k, impl_->patches->cols(), false, false));
    return;
  }
  if (detail::pointwiseStrided(s)) {  // dx_sampled[M,C] = dy[M,K] W[K,C], zero elsewhere
    impl_->pixels = std::make_unique<StridedPixels>(s);
    impl_->gemm =
        std::make_unique<MatMul>(pointwiseGemm(impl_->pixels->m(), s.k, s.c, false, false));
    return;
  }
  const ConvDescs d = convDescs(s);
  const ConvPlan plan = choosePlan(s, d);
  const auto hint = convForwardPd(d, plan, dnnl::primitive_attr());
  dnnl::convolution_backward_data::desc desc(plan.alg, plan.src, d.anyWeights, plan.dst, d.strides,
                                             d.dilates, d.padL, d.padR);
  dnnl::convolution_backward_data::primitive_desc pd(desc, detail::userScratchpadAttr(),
                                                     detail::cpuEngine(), hint);
  impl_->dy = bindLayout(d.dst, pd.diff_dst_desc(), /*toUser=*/false, 0);
  impl_->dx = bindLayout(d.src, pd.diff_src_desc(), /*toUser=*/true, 1);
  impl_->w = bindLayout(d.userWeights, pd.weights_desc(), /*toUser=*/false, 2);
  impl_->conv = Prim(pd, dnnl::convolution_backward_data(pd));
  impl_->conv.arg(DNNL_ARG_DIFF_DST, impl_->dy.primitive);
  impl_->conv.arg(DNNL_ARG_WEIGHTS, impl_->w.primitive);
  impl_->conv.arg(DNNL_ARG_DIFF_SRC, impl_->dx.primitive);
}

Conv2dBackwardData::~Conv2dBackwardData() = default;

void Conv2dBackwardData::run(const float* dy, const float* w, float* dx) {
  if (impl_->patches) {
    impl_->gemm->run(dy, w, impl_->patches->col());
    return impl_->patches->scatterAdd(dx);
  }
  if (impl_->pixels) {
    impl_->gemm->run(dy, w, impl_->pixels->buffer());
    return impl_->pixels->scatter(dx);
  }
  if (impl_->gemm) return impl_->gemm->run(dy, w, dx);
  detail::syncThreads();
  bind(impl_->dy.user, dy);
  bind(impl_->w.user, w);
  bind(impl_->dx.user, dx);
  impl_->dy.attach(), impl_->dx.attach(), impl_->w.attach();
  impl_->w.reorderIfNeeded();
  impl_->dy.reorderIfNeeded();
  impl_->conv.execute();
  impl_->dx.reorderIfNeeded();
  detail::waitStream();
}

// ---- Conv2dBackwardFilter ------------------------------------------------------------------

struct Conv2dBackwardFilter::Impl {
  LayoutBinding x, dy, dw;
  Prim conv;
  // pointwiseAsMatMul, im2colGemm with `patches`, or pointwiseStrided with `pixels`
  std::unique_ptr<MatMul> gemm;
  std::unique_ptr<Im2col> patches;
  std::unique_ptr<StridedPixels> pixels;
};

Conv2dBackwardFilter::Conv2dBackwardFilter(const Conv2dShape& s) : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  if (pointwiseAsMatMul(s)) {  // dW[K,C] = dy[M,K]^T x[M,C]
    impl_->gemm = std::make_unique<MatMul>(pointwiseGemm(s.k, s.n * s.h * s.w, s.c, true, false));
    return;
  }
  if (im2colGemm(s)) {  // dW[K,RSC] = dy[M,K]^T col[M,RSC]
    impl_->patches = std::make_unique<Im2col>(s);
    impl_->gemm = std::make_unique<MatMul>(
        pointwiseGemm(s.k, impl_->patches->m(), impl_->patches->cols(), true, false));
    return;
  }
  if (detail::pointwiseStrided(s)) {  // dW[K,C] = dy[M,K]^T x_sampled[M,C]
    impl_->pixels = std::make_unique<StridedPixels>(s);
    impl_->gemm =
        std::make_unique<MatMul>(pointwiseGemm(s.k, impl_->pixels->m(), s.c, true, false));
    return;
  }
  const ConvDescs d = convDescs(s);
  const ConvPlan plan = choosePlan(s, d);
  const auto hint = convForwardPd(d, plan, dnnl::primitive_attr());
  dnnl::convolution_backward_weights::desc desc(plan.alg, plan.src, d.anyWeights, plan.dst,
                                                d.strides, d.dilates, d.padL, d.padR);
  dnnl::convolution_backward_weights::primitive_desc pd(desc, detail::userScratchpadAttr(),
                                                        detail::cpuEngine(), hint);
  impl_->x = bindLayout(d.src, pd.src_desc(), /*toUser=*/false, 0);
  impl_->dy = bindLayout(d.dst, pd.diff_dst_desc(), /*toUser=*/false, 1);
  impl_->dw = bindLayout(d.userWeights, pd.diff_weights_desc(), /*toUser=*/true, 2);
  impl_->conv = Prim(pd, dnnl::convolution_backward_weights(pd));
  impl_->conv.arg(DNNL_ARG_SRC, impl_->x.primitive);
  impl_->conv.arg(DNNL_ARG_DIFF_DST, impl_->dy.primitive);
  impl_->conv.arg(DNNL_ARG_DIFF_WEIGHTS, impl_->dw.primitive);
}

Conv2dBackwardFilter::~Conv2dBackwardFilter() = default;

void Conv2dBackwardFilter::run(const float* x, const float* dy, float* dw) {
  if (impl_->patches) {
    impl_->patches->gather(x);
    return impl_->gemm->run(dy, impl_->patches->col(), dw);
  }
  if (impl_->pixels) {
    impl_->pixels->gather(x);
    return impl_->gemm->run(dy, impl_->pixels->buffer(), dw);
  }
  if (impl_->gemm) return impl_->gemm->run(dy, x, dw);
  detail::syncThreads();
  bind(impl_->x.user, x);
  bind(impl_->dy.user, dy);
  bind(impl_->dw.user, dw);
  impl_->x.attach(), impl_->dy.attach(), impl_->dw.attach();
  impl_->x.reorderIfNeeded();
  impl_->dy.reorderIfNeeded();
  impl_->conv.execute();
  impl_->dw.reorderIfNeeded();
  detail::waitStream();
}

// ---- MatMul --------------------------------------------------------------------------------

struct MatMul::Impl : detail::MatMulPrimitive {
  using MatMulPrimitive::MatMulPrimitive;
};

MatMul::MatMul(const MatMulShape& s) : impl_(std::make_unique<Impl>(s, Dt::f32)) {}

MatMul::~MatMul() = default;

void MatMul::run(const float* a, const float* b, float* c) {
  impl_->run(a, b, c);
}

// ---- batch norm ----------------------------------------------------------------------------

namespace {

using Flags = dnnl::normalization_flags;

// [rows, C] as an N x C x 1 x 1 nhwc tensor: same bytes as "nc", but it selects oneDNN's
// channels-last (nspc) implementations, which vectorise over C.
memory::desc bnData(i64 rows, i64 c) {
  return memory::desc({rows, c, 1, 1}, Dt::f32, Tag::nhwc);
}
memory::desc bnChannels(i64 c) {
  return memory::desc({c}, Dt::f32, Tag::x);
}

dnnl::batch_normalization_forward::primitive_desc bnForwardPd(dnnl::prop_kind prop, i64 rows, i64 c,
                                                              float eps, Flags flags,
                                                              const dnnl::primitive_attr& attr) {
  dnnl::batch_normalization_forward::desc desc(prop, bnData(rows, c), eps, flags);
  return dnnl::batch_normalization_forward::primitive_desc(desc, attr, detail::cpuEngine());
}

}  // namespace

Flags trainingFlags(BatchNormRelu relu) {
  return relu == BatchNormRelu::kFused ? Flags::use_scale | Flags::use_shift | Flags::fuse_norm_relu
                                       : Flags::use_scale | Flags::use_shift;
}

struct BatchNormForwardInference::Impl {
  memory x, gamma, beta, mean, var, y;
  Prim bn;
};

BatchNormForwardInference::BatchNormForwardInference(i64 rows, i64 c, float eps, BatchNormRelu relu)
    : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  // Inference with fuse_norm_relu needs no workspace (there is no backward to feed).
  const auto pd =
      bnForwardPd(dnnl::prop_kind::forward_inference, rows, c, eps,
                  Flags::use_global_stats | trainingFlags(relu), detail::userScratchpadAttr());
  Impl& p = *impl_;
  p.x = userMemory(pd.src_desc());
  p.y = userMemory(pd.dst_desc());
  p.gamma = userMemory(bnChannels(c));
  p.beta = userMemory(bnChannels(c));
  p.mean = userMemory(pd.mean_desc());
  p.var = userMemory(pd.variance_desc());
  p.bn = Prim(pd, dnnl::batch_normalization_forward(pd));
  p.bn.arg(DNNL_ARG_SRC, p.x);
  p.bn.arg(DNNL_ARG_SCALE, p.gamma);
  p.bn.arg(DNNL_ARG_SHIFT, p.beta);
  p.bn.arg(DNNL_ARG_MEAN, p.mean);
  p.bn.arg(DNNL_ARG_VARIANCE, p.var);
  p.bn.arg(DNNL_ARG_DST, p.y);
}

BatchNormForwardInference::~BatchNormForwardInference() = default;

void BatchNormForwardInference::run(const float* x, const float* gamma, const float* beta,
                                    const float* mean, const float* var, float* y) {
  detail::syncThreads();
  Impl& p = *impl_;
  bind(p.x, x);
  bind(p.gamma, gamma);
  bind(p.beta, beta);
  bind(p.mean, mean);
  bind(p.var, var);
  bind(p.y, y);
  p.bn.execute();
  detail::waitStream();
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

}  // namespace ipu::kernels::fused
