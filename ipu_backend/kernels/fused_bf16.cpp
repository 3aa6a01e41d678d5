// The bf16 side of the fused kernels: the probes and the oneDNN batch norm for bf16
// activations. The convolutions and the matmul are the f32 kernels with bf16 as their element
// type (fused_onednn.cpp); the batch-norm forward is the oneDNN kernel the f32 inference uses
// (onednn_common.cpp), in training mode.
#include "ipu_backend/kernels/fused_bf16.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <stdexcept>

#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/onednn_common.h"

namespace ipu::kernels::fused {

using detail::bind;
using detail::ownedMemory;
using detail::Prim;
using detail::userMemory;
using dnnl::memory;
using Dt = memory::data_type;

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
      Conv2dForward forward(s, ElementType::BF16);
      Conv2dBackwardData backwardData(s, ElementType::BF16);
      Conv2dBackwardFilter backwardFilter(s, ElementType::BF16);
      MatMulShape m;
      m.m = 4, m.k = 8, m.n = 4;
      MatMul matmul(m, ElementType::BF16);
      BatchNormForwardTrainingBf16 bnForward(16, 8, 1e-5f);
      BatchNormBackwardBf16 bnBackward(16, 8, 1e-5f);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

// ---- batch norm ----------------------------------------------------------------------------

struct BatchNormForwardTrainingBf16::Impl : detail::BatchNormForwardPrimitive {
  using BatchNormForwardPrimitive::BatchNormForwardPrimitive;
};

BatchNormForwardTrainingBf16::BatchNormForwardTrainingBf16(i64 rows, i64 c, float eps,
                                                           BatchNormRelu relu)
    : impl_(std::make_unique<Impl>(rows, c, eps, relu, Dt::bf16, /*training=*/true)) {}

BatchNormForwardTrainingBf16::~BatchNormForwardTrainingBf16() = default;

std::size_t BatchNormForwardTrainingBf16::workspaceBytes() const {
  return impl_->workspaceBytes;
}

void BatchNormForwardTrainingBf16::run(const void* x, const float* gamma, const float* beta,
                                       void* y, float* mean, float* var, void* workspace) {
  impl_->run(x, gamma, beta, y, mean, var, workspace, "BatchNormForwardTrainingBf16");
}

struct BatchNormBackwardBf16::Impl {
  memory x, dy, gamma, mean, var, dx, dgamma, dbeta, workspace;
  bool fusedRelu = false;
  Prim bn;
};

BatchNormBackwardBf16::BatchNormBackwardBf16(i64 rows, i64 c, float eps, BatchNormRelu relu)
    : impl_(std::make_unique<Impl>()) {
  detail::syncThreads();
  const auto flags = detail::batchNormFlags(relu);
  const auto hint = detail::batchNormForwardPd(dnnl::prop_kind::forward_training, rows, c, eps,
                                               flags, Dt::bf16, dnnl::primitive_attr());
  dnnl::batch_normalization_backward::desc desc(
      dnnl::prop_kind::backward, detail::batchNormData(rows, c, Dt::bf16),
      detail::batchNormData(rows, c, Dt::bf16), eps, flags);
  dnnl::batch_normalization_backward::primitive_desc pd(desc, detail::userScratchpadAttr(),
                                                        detail::cpuEngine(), hint);
  Impl& p = *impl_;
  p.x = userMemory(pd.src_desc());
  p.dy = userMemory(pd.diff_dst_desc());
  p.dx = userMemory(pd.diff_src_desc());
  p.gamma = userMemory(detail::batchNormChannels(c));
  p.dgamma = userMemory(detail::batchNormChannels(c));
  p.dbeta = userMemory(detail::batchNormChannels(c));
  p.mean = userMemory(pd.mean_desc());
  p.var = userMemory(pd.variance_desc());
  p.bn = Prim(pd, dnnl::batch_normalization_backward(pd));
  p.bn.arg(DNNL_ARG_SRC, p.x);
  p.bn.arg(DNNL_ARG_DIFF_DST, p.dy);
  p.bn.arg(DNNL_ARG_SCALE, p.gamma);
  p.bn.arg(DNNL_ARG_SHIFT,
           ownedMemory(detail::batchNormChannels(c)));  // read by no one (oneDNN asks for it)
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
