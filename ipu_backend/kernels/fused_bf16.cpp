// The bf16 twins of fused_onednn.cpp's convolution and matmul: same descriptors with bf16
// memory, weights reordered to the primitive's format.
#include "ipu_backend/kernels/fused_bf16.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "ipu_backend/kernels/onednn_common.h"
#include "ipu_backend/kernels/strided_pixels.h"

namespace ipu::kernels::fused {

using detail::bind;
using detail::ownedMemory;
using detail::Prim;
using detail::userMemory;
using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

namespace {

struct ConvDescs {
  memory::desc src, dst, userWeights, anyWeights;
  memory::dims strides, dilates, padL, padR;
};

ConvDescs convDescs(const Conv2dShape& s) {
  ConvDescs d;
  d.src = memory::desc({s.n, s.c, s.h, s.w}, Dt::bf16, Tag::nhwc);
  d.dst = memory::desc({s.n, s.k, s.outH(), s.outW()}, Dt::bf16, Tag::nhwc);
  const memory::dims wdims = s.groups > 1
                                 ? memory::dims{s.groups, s.kPerGroup(), s.cPerGroup(), s.r, s.s}
                                 : memory::dims{s.k, s.c, s.r, s.s};
  d.userWeights = memory::desc(wdims, Dt::bf16, s.groups > 1 ? Tag::gohwi : Tag::ohwi);
  d.anyWeights = memory::desc(wdims, Dt::bf16, Tag::any);
  d.strides = {s.strideH, s.strideW};
  d.dilates = {s.dilH - 1, s.dilW - 1};
  d.padL = {s.padTop, s.padLeft};
  d.padR = {s.padBottom, s.padRight};
  return d;
}

dnnl::convolution_forward::primitive_desc forwardPd(const ConvDescs& d,
                                                    const dnnl::primitive_attr& attr) {
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, d.src, d.anyWeights,
                                       d.dst, d.strides, d.dilates, d.padL, d.padR);
  return dnnl::convolution_forward::primitive_desc(desc, attr, detail::cpuEngine());
}

}  // namespace

bool nativeBf16Isa() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

bool bf16PrimitivesAvailable() {
  static const bool available = [] {
    try {
      Conv2dShape s;
      s.n = 1, s.c = 8, s.h = 4, s.w = 4, s.k = 8, s.r = 3, s.s = 3, s.padTop = s.padBottom = 1,
      s.padLeft = s.padRight = 1;
      Conv2dForwardBf16 forward(s);
      Conv2dBackwardDataBf16 backwardData(s);
      Conv2dBackwardFilterBf16 backwardFilter(s);
      MatMulShape m;
      m.m = 4, m.k = 8, m.n = 4;
      MatMulBf16 matmul(m);
      BatchNormForwardTrainingBf16 bnForward(16, 8, 1e-5f);
      BatchNormBackwardBf16 bnBackward(16, 8, 1e-5f);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

namespace {

// A 1x1 stride-1 unpadded convolution over NHWC is a GEMM over the N*H*W pixels (see
// fused_onednn.cpp). In bf16 oneDNN's AMX/AVX-512 matmul beats its convolution for every such
// ResNet-50 shape: 1.6-5.4x on the weight gradient, about even to 1.5x on the other two passes
// (2 threads, 224x224 batch 8, M = 392..25,088 pixels), and it needs no weight reorders.
bool pointwiseStride1(const Conv2dShape& s) {
  return s.r == 1 && s.s == 1 && s.strideH == 1 && s.strideW == 1 && s.padTop == 0 &&
         s.padLeft == 0 && s.padBottom == 0 && s.padRight == 0 && s.groups == 1;
}

// Strided 1x1 convolutions as subsample + GEMM (strided_pixels.h): oneDNN's bf16 convolution
// took 5.7-9.3 ms on a weight gradient that the GEMM does in ~1 ms (224x224 batch 8, 2 threads).
using detail::pointwiseStrided;
using Subsample = detail::StridedPixels<std::uint16_t>;

MatMulShape gemmShape(i64 m, i64 k, i64 n, bool transA, bool transB) {
  MatMulShape g;
  g.m = m, g.k = k, g.n = n, g.transA = transA, g.transB = transB;
  return g;
}

}  // namespace

struct Conv2dForwardBf16::Impl {
  memory x, y;
  detail::LayoutBinding w;
  Prim conv;
  std::unique_ptr<MatMulBf16> gemm;   // pointwise: y[M,K] = x[M,C] W[K,C]^T
  std::unique_ptr<Subsample> pixels;  // pointwiseStrided: x subsampled first
};

Conv2dForwardBf16::Conv2dForwardBf16(const Conv2dShape& s) : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  if (pointwiseStride1(s)) {
    impl_->gemm = std::make_unique<MatMulBf16>(gemmShape(s.n * s.h * s.w, s.c, s.k, false, true));
    return;
  }
  if (pointwiseStrided(s)) {
    impl_->pixels = std::make_unique<Subsample>(s);
    impl_->gemm =
        std::make_unique<MatMulBf16>(gemmShape(impl_->pixels->m(), s.c, s.k, false, true));
    return;
  }
  const ConvDescs d = convDescs(s);
  const auto pd = forwardPd(d, detail::userScratchpadAttr());
  impl_->x = userMemory(d.src);
  impl_->y = userMemory(d.dst);
  impl_->w = detail::bindLayout(d.userWeights, pd.weights_desc(), false, 2);
  impl_->conv = Prim(pd, dnnl::convolution_forward(pd));
  impl_->conv.arg(DNNL_ARG_SRC, impl_->x);
  impl_->conv.arg(DNNL_ARG_WEIGHTS, impl_->w.primitive);
  impl_->conv.arg(DNNL_ARG_DST, impl_->y);
}

Conv2dForwardBf16::~Conv2dForwardBf16() = default;

void Conv2dForwardBf16::run(const void* x, const void* w, void* y) {
  if (impl_->pixels) {
    impl_->pixels->gather(x);
    return impl_->gemm->run(impl_->pixels->buffer(), w, y);
  }
  if (impl_->gemm) return impl_->gemm->run(x, w, y);
  detail::syncThreads();
  bind(impl_->x, x);
  bind(impl_->w.user, w);
  bind(impl_->y, y);
  impl_->w.attach();
  impl_->w.reorderIfNeeded();
  impl_->conv.execute();
  detail::waitStream();
}

struct Conv2dBackwardDataBf16::Impl {
  memory dy, dx;
  detail::LayoutBinding w;
  Prim conv;
  std::unique_ptr<MatMulBf16> gemm;   // pointwise: dx[M,C] = dy[M,K] W[K,C]
  std::unique_ptr<Subsample> pixels;  // pointwiseStrided: dx scattered to the sampled pixels
};

Conv2dBackwardDataBf16::Conv2dBackwardDataBf16(const Conv2dShape& s)
    : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  if (pointwiseStride1(s)) {
    impl_->gemm = std::make_unique<MatMulBf16>(gemmShape(s.n * s.h * s.w, s.k, s.c, false, false));
    return;
  }
  if (pointwiseStrided(s)) {
    impl_->pixels = std::make_unique<Subsample>(s);
    impl_->gemm =
        std::make_unique<MatMulBf16>(gemmShape(impl_->pixels->m(), s.k, s.c, false, false));
    return;
  }
  const ConvDescs d = convDescs(s);
  const auto hint = forwardPd(d, dnnl::primitive_attr());
  dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.src,
                                             d.anyWeights, d.dst, d.strides, d.dilates, d.padL,
                                             d.padR);
  dnnl::convolution_backward_data::primitive_desc pd(desc, detail::userScratchpadAttr(),
                                                     detail::cpuEngine(), hint);
  impl_->dy = userMemory(d.dst);
  impl_->dx = userMemory(d.src);
  impl_->w = detail::bindLayout(d.userWeights, pd.weights_desc(), false, 2);
  impl_->conv = Prim(pd, dnnl::convolution_backward_data(pd));
  impl_->conv.arg(DNNL_ARG_DIFF_DST, impl_->dy);
  impl_->conv.arg(DNNL_ARG_WEIGHTS, impl_->w.primitive);
  impl_->conv.arg(DNNL_ARG_DIFF_SRC, impl_->dx);
}

Conv2dBackwardDataBf16::~Conv2dBackwardDataBf16() = default;

void Conv2dBackwardDataBf16::run(const void* dy, const void* w, void* dx) {
  if (impl_->pixels) {
    impl_->gemm->run(dy, w, impl_->pixels->buffer());
    return impl_->pixels->scatter(dx);
  }
  if (impl_->gemm) return impl_->gemm->run(dy, w, dx);
  detail::syncThreads();
  bind(impl_->dy, dy);
  bind(impl_->w.user, w);
  bind(impl_->dx, dx);
  impl_->w.attach();
  impl_->w.reorderIfNeeded();
  impl_->conv.execute();
  detail::waitStream();
}

struct Conv2dBackwardFilterBf16::Impl {
  memory x, dy;
  detail::LayoutBinding dw;
  Prim conv;
  std::unique_ptr<MatMulBf16> gemm;   // pointwise: dW[K,C] = dy[M,K]^T x[M,C]
  std::unique_ptr<Subsample> pixels;  // pointwiseStrided: x subsampled first
};

Conv2dBackwardFilterBf16::Conv2dBackwardFilterBf16(const Conv2dShape& s)
    : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  if (pointwiseStride1(s)) {
    impl_->gemm = std::make_unique<MatMulBf16>(gemmShape(s.k, s.n * s.h * s.w, s.c, true, false));
    return;
  }
  if (pointwiseStrided(s)) {
    impl_->pixels = std::make_unique<Subsample>(s);
    impl_->gemm =
        std::make_unique<MatMulBf16>(gemmShape(s.k, impl_->pixels->m(), s.c, true, false));
    return;
  }
  const ConvDescs d = convDescs(s);
  const auto hint = forwardPd(d, dnnl::primitive_attr());
  dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, d.src,
                                                d.anyWeights, d.dst, d.strides, d.dilates, d.padL,
                                                d.padR);
  dnnl::convolution_backward_weights::primitive_desc pd(desc, detail::userScratchpadAttr(),
                                                        detail::cpuEngine(), hint);
  impl_->x = userMemory(d.src);
  impl_->dy = userMemory(d.dst);
  impl_->dw = detail::bindLayout(d.userWeights, pd.diff_weights_desc(), true, 2);
  impl_->conv = Prim(pd, dnnl::convolution_backward_weights(pd));
  impl_->conv.arg(DNNL_ARG_SRC, impl_->x);
  impl_->conv.arg(DNNL_ARG_DIFF_DST, impl_->dy);
  impl_->conv.arg(DNNL_ARG_DIFF_WEIGHTS, impl_->dw.primitive);
}

Conv2dBackwardFilterBf16::~Conv2dBackwardFilterBf16() = default;

void Conv2dBackwardFilterBf16::run(const void* x, const void* dy, void* dw) {
  if (impl_->pixels) {
    impl_->pixels->gather(x);
    return impl_->gemm->run(dy, impl_->pixels->buffer(), dw);
  }
  if (impl_->gemm) return impl_->gemm->run(dy, x, dw);
  detail::syncThreads();
  bind(impl_->x, x);
  bind(impl_->dy, dy);
  bind(impl_->dw.user, dw);
  impl_->dw.attach();
  impl_->conv.execute();
  impl_->dw.reorderIfNeeded();
  detail::waitStream();
}

struct MatMulBf16::Impl : detail::MatMulPrimitive {
  using MatMulPrimitive::MatMulPrimitive;
};

MatMulBf16::MatMulBf16(const MatMulShape& s) : impl_(std::make_unique<Impl>(s, Dt::bf16)) {}

MatMulBf16::~MatMulBf16() = default;

void MatMulBf16::run(const void* a, const void* b, void* c) {
  impl_->run(a, b, c);
}

// ---- batch norm ----------------------------------------------------------------------------

namespace {

using Flags = dnnl::normalization_flags;

// [rows, C] as N x C x 1 x 1 nhwc (oneDNN's channels-last implementations), as fused_onednn.
memory::desc bnData(i64 rows, i64 c) {
  return memory::desc({rows, c, 1, 1}, Dt::bf16, Tag::nhwc);
}
memory::desc bnChannels(i64 c) {
  return memory::desc({c}, Dt::f32, Tag::x);
}

Flags bnFlags(BatchNormRelu relu) {
  return relu == BatchNormRelu::kFused ? Flags::use_scale | Flags::use_shift | Flags::fuse_norm_relu
                                       : Flags::use_scale | Flags::use_shift;
}

dnnl::batch_normalization_forward::primitive_desc bnForwardPd(i64 rows, i64 c, float eps,
                                                              BatchNormRelu relu,
                                                              const dnnl::primitive_attr& attr) {
  dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_training, bnData(rows, c),
                                               eps, bnFlags(relu));
  return dnnl::batch_normalization_forward::primitive_desc(desc, attr, detail::cpuEngine());
}

}  // namespace

struct BatchNormForwardTrainingBf16::Impl {
  memory x, gamma, beta, y, mean, var, workspace;
  std::size_t workspaceBytes = 0;
  Prim bn;
};

BatchNormForwardTrainingBf16::BatchNormForwardTrainingBf16(i64 rows, i64 c, float eps,
                                                           BatchNormRelu relu)
    : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  const auto pd = bnForwardPd(rows, c, eps, relu, detail::userScratchpadAttr());
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
  p.bn.arg(DNNL_ARG_DST, p.y);
  p.bn.arg(DNNL_ARG_MEAN, p.mean);
  p.bn.arg(DNNL_ARG_VARIANCE, p.var);
  if (relu == BatchNormRelu::kFused) {
    p.workspace = userMemory(pd.workspace_desc());
    p.workspaceBytes = pd.workspace_desc().get_size();
    p.bn.arg(DNNL_ARG_WORKSPACE, p.workspace);
  }
}

BatchNormForwardTrainingBf16::~BatchNormForwardTrainingBf16() = default;

std::size_t BatchNormForwardTrainingBf16::workspaceBytes() const {
  return impl_->workspaceBytes;
}

void BatchNormForwardTrainingBf16::run(const void* x, const float* gamma, const float* beta,
                                       void* y, float* mean, float* var, void* workspace) {
  detail::syncThreads();
  Impl& p = *impl_;
  if (p.workspaceBytes > 0) {
    if (!workspace)
      throw std::invalid_argument("BatchNormForwardTrainingBf16 with fused ReLU: no workspace");
    bind(p.workspace, workspace);
  }
  bind(p.x, x);
  bind(p.gamma, gamma);
  bind(p.beta, beta);
  bind(p.y, y);
  bind(p.mean, mean);
  bind(p.var, var);
  p.bn.execute();
  detail::waitStream();
}

struct BatchNormBackwardBf16::Impl {
  memory x, dy, gamma, mean, var, dx, dgamma, dbeta, workspace;
  bool fusedRelu = false;
  Prim bn;
};

BatchNormBackwardBf16::BatchNormBackwardBf16(i64 rows, i64 c, float eps, BatchNormRelu relu)
    : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  const Flags flags = bnFlags(relu);
  const auto hint = bnForwardPd(rows, c, eps, relu, dnnl::primitive_attr());
  dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, bnData(rows, c),
                                                bnData(rows, c), eps, flags);
  dnnl::batch_normalization_backward::primitive_desc pd(desc, detail::userScratchpadAttr(),
                                                        detail::cpuEngine(), hint);
  Impl& p = *impl_;
  p.x = userMemory(pd.src_desc());
  p.dy = userMemory(pd.diff_dst_desc());
  p.dx = userMemory(pd.diff_src_desc());
  p.gamma = userMemory(bnChannels(c));
  p.dgamma = userMemory(bnChannels(c));
  p.dbeta = userMemory(bnChannels(c));
  p.mean = userMemory(pd.mean_desc());
  p.var = userMemory(pd.variance_desc());
  p.bn = Prim(pd, dnnl::batch_normalization_backward(pd));
  p.bn.arg(DNNL_ARG_SRC, p.x);
  p.bn.arg(DNNL_ARG_DIFF_DST, p.dy);
  p.bn.arg(DNNL_ARG_SCALE, p.gamma);
  p.bn.arg(DNNL_ARG_SHIFT, ownedMemory(bnChannels(c)));  // read by no one (see fused_onednn)
  p.bn.arg(DNNL_ARG_MEAN, p.mean);
  p.bn.arg(DNNL_ARG_VARIANCE, p.var);
  p.bn.arg(DNNL_ARG_DIFF_SRC, p.dx);
  p.bn.arg(DNNL_ARG_DIFF_SCALE, p.dgamma);
  p.bn.arg(DNNL_ARG_DIFF_SHIFT, p.dbeta);
  if (relu == BatchNormRelu::kFused) {
    p.fusedRelu = true;
    p.workspace = userMemory(pd.workspace_desc());
    p.bn.arg(DNNL_ARG_WORKSPACE, p.workspace);
  }
}

BatchNormBackwardBf16::~BatchNormBackwardBf16() = default;

void BatchNormBackwardBf16::run(const void* x, const void* dy, const float* gamma,
                                const float* mean, const float* var, void* dx, float* dgamma,
                                float* dbeta, const void* workspace) {
  detail::syncThreads();
  Impl& p = *impl_;
  if (p.fusedRelu) {
    if (!workspace)
      throw std::invalid_argument("BatchNormBackwardBf16 with fused ReLU: no workspace");
    bind(p.workspace, workspace);
  }
  bind(p.x, x);
  bind(p.dy, dy);
  bind(p.gamma, gamma);
  bind(p.mean, mean);
  bind(p.var, var);
  bind(p.dx, dx);
  bind(p.dgamma, dgamma);
  bind(p.dbeta, dbeta);
  p.bn.execute();
  detail::waitStream();
}

}  // namespace ipu::kernels::fused
