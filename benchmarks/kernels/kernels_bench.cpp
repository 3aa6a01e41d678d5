// Fused kernel objects against hand-written oneDNN calls of the same shapes and the same user
// layouts (nhwc activations, ohwi weights, row-major matrices). The direct versions do what a
// oneDNN user with those layouts does: weights in the primitive's preferred format (any) with a
// reorder from/to the user layout on every call, primitives and memories created once.
// Backend* runs the same op as a compiled one-op graph through the engine (what a model pays).
// Goal: backend / direct < 1.10 in time.
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/fused_bf16.h"

namespace {

using dnnl::memory;
using ipu::kernels::Conv2dShape;
using ipu::kernels::i64;
using ipu::kernels::MatMulShape;
using Tag = memory::format_tag;
using Dt = memory::data_type;

constexpr int kThreads = 2;

std::vector<float> randomVec(i64 n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void setFlops(benchmark::State& state, double flops) {
  state.SetItemsProcessed(static_cast<int64_t>(flops) * state.iterations());
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

Conv2dShape resnetConv(i64 hw, i64 c) {
  Conv2dShape s;
  s.n = 32, s.h = s.w = hw, s.c = s.k = c, s.r = s.s = 3;
  s.padTop = s.padLeft = s.padBottom = s.padRight = 1;
  return s;
}

Conv2dShape convFromArgs(const benchmark::State& state) {
  return resnetConv(state.range(0), state.range(1));
}

// ResNet-50's downsampling shortcut: 1x1 stride 2 from hw x hw x c onto (hw/2)^2 x 2c.
Conv2dShape shortcutFromArgs(const benchmark::State& state) {
  Conv2dShape s;
  s.n = 32, s.h = s.w = state.range(0), s.c = state.range(1), s.k = 2 * s.c;
  s.strideH = s.strideW = 2;
  return s;
}

// ResNet-50's downsampling 3x3 (stride 2, pad 1): hw x hw x c onto (hw/2)^2 x c.
Conv2dShape stride2FromArgs(const benchmark::State& state) {
  Conv2dShape s = resnetConv(state.range(0), state.range(1));
  s.strideH = s.strideW = 2;
  return s;
}

// EfficientNet-B4's depthwise convolutions at batch 8 (380x380): hw x hw x c, rs x rs, stride,
// "same" padding.
Conv2dShape depthwiseFromArgs(const benchmark::State& state) {
  Conv2dShape s;
  s.n = 8, s.h = s.w = state.range(0), s.c = s.k = s.groups = state.range(1);
  s.r = s.s = state.range(2);
  s.strideH = s.strideW = state.range(3);
  s.padTop = s.padLeft = s.padBottom = s.padRight = s.r / 2;
  return s;
}

// ResNet-50's 1x1 stride-1 convolutions: hw x hw x c onto k channels.
Conv2dShape pointwiseFromArgs(const benchmark::State& state) {
  Conv2dShape s;
  s.n = 32, s.h = s.w = state.range(0), s.c = state.range(1), s.k = state.range(2);
  return s;
}

// ---- direct oneDNN -------------------------------------------------------------------------

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// [K, C, R, S] weights, or [G, K/G, C/G, R, S] for a grouped convolution.
memory::dims weightDims(const Conv2dShape& s) {
  return s.groups > 1 ? memory::dims{s.groups, s.kPerGroup(), s.cPerGroup(), s.r, s.s}
                      : memory::dims{s.k, s.c, s.r, s.s};
}

struct DirectConv {
  memory::desc src, dst, userW, anyW;
  memory::dims strides, dil, padL, padR;
  explicit DirectConv(const Conv2dShape& s)
      : src({s.n, s.c, s.h, s.w}, Dt::f32, Tag::nhwc),
        dst({s.n, s.k, s.outH(), s.outW()}, Dt::f32, Tag::nhwc),
        userW(weightDims(s), Dt::f32, s.groups > 1 ? Tag::gohwi : Tag::ohwi),
        anyW(weightDims(s), Dt::f32, Tag::any),
        strides{s.strideH, s.strideW},
        dil{s.dilH - 1, s.dilW - 1},
        padL{s.padTop, s.padLeft},
        padR{s.padBottom, s.padRight} {}
  dnnl::convolution_forward::primitive_desc forwardPd() const {
    return {{dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, anyW, dst,
             strides, dil, padL, padR},
            engine()};
  }
};

void directConvForward(benchmark::State& state, const Conv2dShape& s) {
  auto x = randomVec(s.inputElems(), 1), w = randomVec(s.weightElems(), 2);
  std::vector<float> y(s.outputElems());
  DirectConv d(s);
  dnnl::stream stream(engine());
  const auto pd = d.forwardPd();
  dnnl::convolution_forward conv(pd);
  memory xm(d.src, engine(), x.data()), ym(d.dst, engine(), y.data());
  memory wUser(d.userW, engine(), w.data()), wm = wUser;
  dnnl::reorder wReorder;
  if (pd.weights_desc() != d.userW) {
    wm = memory(pd.weights_desc(), engine());
    wReorder = dnnl::reorder(wUser, wm);
  }
  for (auto _ : state) {
    if (wm != wUser) wReorder.execute(stream, wUser, wm);
    conv.execute(stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    stream.wait();
  }
  setFlops(state, 2.0 * double(s.macs()));
}

void directConvBackwardData(benchmark::State& state, const Conv2dShape& s) {
  auto dy = randomVec(s.outputElems(), 1), w = randomVec(s.weightElems(), 2);
  std::vector<float> dx(s.inputElems());
  DirectConv d(s);
  dnnl::stream stream(engine());
  dnnl::convolution_backward_data::primitive_desc pd(
      {dnnl::algorithm::convolution_direct, d.src, d.anyW, d.dst, d.strides, d.dil, d.padL, d.padR},
      engine(), d.forwardPd());
  dnnl::convolution_backward_data conv(pd);
  memory dym(d.dst, engine(), dy.data()), dxm(d.src, engine(), dx.data());
  memory wUser(d.userW, engine(), w.data()), wm = wUser;
  dnnl::reorder wReorder;
  if (pd.weights_desc() != d.userW) {
    wm = memory(pd.weights_desc(), engine());
    wReorder = dnnl::reorder(wUser, wm);
  }
  for (auto _ : state) {
    if (wm != wUser) wReorder.execute(stream, wUser, wm);
    conv.execute(stream,
                 {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dxm}});
    stream.wait();
  }
  setFlops(state, 2.0 * double(s.macs()));
}

void directConvBackwardFilter(benchmark::State& state, const Conv2dShape& s) {
  auto x = randomVec(s.inputElems(), 1), dy = randomVec(s.outputElems(), 2);
  std::vector<float> dw(s.weightElems());
  DirectConv d(s);
  dnnl::stream stream(engine());
  dnnl::convolution_backward_weights::primitive_desc pd(
      {dnnl::algorithm::convolution_direct, d.src, d.anyW, d.dst, d.strides, d.dil, d.padL, d.padR},
      engine(), d.forwardPd());
  dnnl::convolution_backward_weights conv(pd);
  memory xm(d.src, engine(), x.data()), dym(d.dst, engine(), dy.data());
  memory dwUser(d.userW, engine(), dw.data()), dwm = dwUser;
  dnnl::reorder dwReorder;
  if (pd.diff_weights_desc() != d.userW) {
    dwm = memory(pd.diff_weights_desc(), engine());
    dwReorder = dnnl::reorder(dwm, dwUser);
  }
  for (auto _ : state) {
    conv.execute(stream,
                 {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_WEIGHTS, dwm}});
    if (dwm != dwUser) dwReorder.execute(stream, dwm, dwUser);
    stream.wait();
  }
  setFlops(state, 2.0 * double(s.macs()));
}

void BM_DirectMatMul(benchmark::State& state) {
  const i64 m = state.range(0), k = state.range(1), n = state.range(2);
  auto a = randomVec(m * k, 1), b = randomVec(k * n, 2);
  std::vector<float> c(m * n);
  dnnl::stream stream(engine());
  const memory::desc ad({m, k}, Dt::f32, Tag::ab), bd({k, n}, Dt::f32, Tag::ab),
      cd({m, n}, Dt::f32, Tag::ab);
  dnnl::matmul::primitive_desc pd({ad, bd, cd}, engine());
  dnnl::matmul mm(pd);
  memory am(ad, engine(), a.data()), bm(bd, engine(), b.data()), cm(cd, engine(), c.data());
  for (auto _ : state) {
    mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  }
  setFlops(state, 2.0 * double(m) * double(k) * double(n));
}

// Training batch norm + ReLU over [32 * hw * hw, c] (channels last), as the fused engine ran it
// before batch_norm.cpp: oneDNN's channels-last batch norm with fuse_norm_relu, its 1-bit ReLU
// mask as the workspace, the backward applying that mask.
struct DirectBatchNormRelu {
  using Flags = dnnl::normalization_flags;
  i64 rows, c;
  std::vector<float> x, y, dy, dx, gamma, beta, mean, var, dgamma, dbeta;
  dnnl::stream stream{engine()};
  dnnl::batch_normalization_forward fwd;
  dnnl::batch_normalization_backward bwd;
  memory xm, ym, dym, dxm, gm, bm, mm, vm, dgm, dbm, ws;

  explicit DirectBatchNormRelu(const benchmark::State& state)
      : rows(32 * state.range(0) * state.range(0)), c(state.range(1)) {
    x = randomVec(rows * c, 1), dy = randomVec(rows * c, 2);
    y.resize(rows * c), dx.resize(rows * c);
    gamma.assign(c, 1.0f), beta.assign(c, 0.1f), mean.resize(c), var.resize(c);
    dgamma.resize(c), dbeta.resize(c);
    const memory::desc md({rows, c, 1, 1}, Dt::f32, Tag::nhwc), cd({c}, Dt::f32, Tag::x);
    const auto flags = Flags::use_scale | Flags::use_shift | Flags::fuse_norm_relu;
    dnnl::batch_normalization_forward::primitive_desc fpd(
        {dnnl::prop_kind::forward_training, md, 1e-5f, flags}, engine());
    dnnl::batch_normalization_backward::primitive_desc bpd(
        {dnnl::prop_kind::backward, md, md, 1e-5f, flags}, engine(), fpd);
    fwd = dnnl::batch_normalization_forward(fpd);
    bwd = dnnl::batch_normalization_backward(bpd);
    xm = memory(md, engine(), x.data()), ym = memory(md, engine(), y.data());
    dym = memory(md, engine(), dy.data()), dxm = memory(md, engine(), dx.data());
    gm = memory(cd, engine(), gamma.data()), bm = memory(cd, engine(), beta.data());
    mm = memory(cd, engine(), mean.data()), vm = memory(cd, engine(), var.data());
    dgm = memory(cd, engine(), dgamma.data()), dbm = memory(cd, engine(), dbeta.data());
    ws = memory(fpd.workspace_desc(), engine());
  }
  void forward() {
    fwd.execute(stream, {{DNNL_ARG_SRC, xm},
                         {DNNL_ARG_SCALE, gm},
                         {DNNL_ARG_SHIFT, bm},
                         {DNNL_ARG_DST, ym},
                         {DNNL_ARG_MEAN, mm},
                         {DNNL_ARG_VARIANCE, vm},
                         {DNNL_ARG_WORKSPACE, ws}});
    stream.wait();
  }
  void backward() {
    bwd.execute(stream, {{DNNL_ARG_SRC, xm},
                         {DNNL_ARG_DIFF_DST, dym},
                         {DNNL_ARG_SCALE, gm},
                         {DNNL_ARG_SHIFT, bm},
                         {DNNL_ARG_MEAN, mm},
                         {DNNL_ARG_VARIANCE, vm},
                         {DNNL_ARG_DIFF_SRC, dxm},
                         {DNNL_ARG_DIFF_SCALE, dgm},
                         {DNNL_ARG_DIFF_SHIFT, dbm},
                         {DNNL_ARG_WORKSPACE, ws}});
    stream.wait();
  }
};

void setTensorBytes(benchmark::State& state, i64 elements) {
  state.counters["tensor_MB"] = double(elements) * 4e-6;
}

// Batch norm + ReLU benchmarks over a kernel pair K (forward(), backward(), rows, c).
template <typename K>
void batchNormReluForward(benchmark::State& state) {
  K k(state);
  for (auto _ : state) k.forward();
  setTensorBytes(state, k.rows * k.c);
}

template <typename K>
void batchNormReluBackward(benchmark::State& state) {
  K k(state);
  k.forward();
  for (auto _ : state) k.backward();
  setTensorBytes(state, k.rows * k.c);
}

void BM_DirectBatchNormReluForward(benchmark::State& state) {
  batchNormReluForward<DirectBatchNormRelu>(state);
}
void BM_DirectBatchNormReluBackward(benchmark::State& state) {
  batchNormReluBackward<DirectBatchNormRelu>(state);
}

// ResNet-50's stem max pool backward (3x3 stride 2 pad 1 over [32, 112, 112, 64]) as the fused
// engine ran it before max_pool_backward.cpp: oneDNN's forward rerun for its workspace, then
// its backward.
ipu::kernels::Pool2dShape stemPool() {
  ipu::kernels::Pool2dShape s;
  s.n = 32, s.h = s.w = 112, s.c = 64, s.kh = s.kw = 3, s.strideH = s.strideW = 2;
  s.padTop = s.padLeft = s.padBottom = s.padRight = 1;
  return s;
}

void BM_DirectMaxPoolBackward(benchmark::State& state) {
  const auto s = stemPool();
  auto x = randomVec(s.inputElems(), 1), dy = randomVec(s.outputElems(), 2);
  std::vector<float> y(s.outputElems()), dx(s.inputElems());
  dnnl::stream stream(engine());
  const memory::desc xd({s.n, s.c, s.h, s.w}, Dt::f32, Tag::nhwc),
      yd({s.n, s.c, s.outH(), s.outW()}, Dt::f32, Tag::nhwc);
  const memory::dims strides{2, 2}, kernel{3, 3}, pad{1, 1};
  dnnl::pooling_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, xd, yd, strides, kernel,
       pad, pad},
      engine());
  dnnl::pooling_backward::primitive_desc bpd(
      {dnnl::algorithm::pooling_max, xd, yd, strides, kernel, pad, pad}, engine(), fpd);
  dnnl::pooling_forward fwd(fpd);
  dnnl::pooling_backward bwd(bpd);
  memory xm(xd, engine(), x.data()), ym(yd, engine(), y.data()), dym(yd, engine(), dy.data()),
      dxm(xd, engine(), dx.data()), ws(fpd.workspace_desc(), engine());
  for (auto _ : state) {
    fwd.execute(stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}, {DNNL_ARG_WORKSPACE, ws}});
    bwd.execute(stream,
                {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_WORKSPACE, ws}, {DNNL_ARG_DIFF_SRC, dxm}});
    stream.wait();
  }
  setTensorBytes(state, s.inputElems());
}

// ---- ours ----------------------------------------------------------------------------------

void BM_OursMaxPoolBackward(benchmark::State& state) {
  const auto s = stemPool();
  auto x = randomVec(s.inputElems(), 1), dy = randomVec(s.outputElems(), 2);
  std::vector<float> dx(s.inputElems());
  ipu::kernels::fused::MaxPoolBackward k(s);
  for (auto _ : state) k.run(x.data(), dy.data(), dx.data());
  setTensorBytes(state, s.inputElems());
}

std::vector<std::uint16_t> randomBf16(i64 n, unsigned seed) {
  const auto f = randomVec(n, seed);
  std::vector<std::uint16_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &f[i], sizeof u);
    v[i] = static_cast<std::uint16_t>(u >> 16);  // truncation: any bf16 values will do
  }
  return v;
}

template <class T>
std::vector<T> randomOf(i64 n, unsigned seed) {
  if constexpr (std::is_same_v<T, float>)
    return randomVec(n, seed);
  else
    return randomBf16(n, seed);
}

namespace fz = ipu::kernels::fused;

// Our batch norm + ReLU over activations of type T (f32: our loops; bf16 bits: oneDNN), f32
// parameters and statistics.
template <class Forward, class Backward, class T>
struct OursBatchNormReluOf {
  i64 rows, c;
  std::vector<T> x, y, dy, dx;
  std::vector<float> gamma, beta, mean, var, dgamma, dbeta;
  Forward fwd;
  Backward bwd;
  std::vector<unsigned char> ws;

  explicit OursBatchNormReluOf(const benchmark::State& state)
      : rows(32 * state.range(0) * state.range(0)),
        c(state.range(1)),
        fwd(rows, c, 1e-5f, ipu::kernels::BatchNormRelu::kFused),
        bwd(rows, c, 1e-5f, ipu::kernels::BatchNormRelu::kFused),
        ws(fwd.workspaceBytes()) {
    x = randomOf<T>(rows * c, 1), dy = randomOf<T>(rows * c, 2);
    y.resize(rows * c), dx.resize(rows * c);
    gamma.assign(c, 1.0f), beta.assign(c, 0.1f), mean.resize(c), var.resize(c);
    dgamma.resize(c), dbeta.resize(c);
  }
  void forward() {
    fwd.run(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(), ws.data());
  }
  void backward() {
    bwd.run(x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(), dgamma.data(),
            dbeta.data(), ws.data());
  }
};
using OursBatchNormRelu =
    OursBatchNormReluOf<fz::BatchNormForwardTraining, fz::BatchNormBackward, float>;
using OursBatchNormReluBf16 =
    OursBatchNormReluOf<fz::BatchNormForwardTrainingBf16, fz::BatchNormBackwardBf16, std::uint16_t>;

void BM_OursBatchNormReluForward(benchmark::State& state) {
  batchNormReluForward<OursBatchNormRelu>(state);
}
void BM_OursBatchNormReluBackward(benchmark::State& state) {
  batchNormReluBackward<OursBatchNormRelu>(state);
}

void oursConvForward(benchmark::State& state, const Conv2dShape& s) {
  auto x = randomVec(s.inputElems(), 1), w = randomVec(s.weightElems(), 2);
  std::vector<float> y(s.outputElems());
  ipu::kernels::fused::Conv2dForward conv(s);
  for (auto _ : state) conv.run(x.data(), w.data(), y.data());
  setFlops(state, 2.0 * double(s.macs()));
}

void oursConvBackwardData(benchmark::State& state, const Conv2dShape& s) {
  auto dy = randomVec(s.outputElems(), 1), w = randomVec(s.weightElems(), 2);
  std::vector<float> dx(s.inputElems());
  ipu::kernels::fused::Conv2dBackwardData conv(s);
  for (auto _ : state) conv.run(dy.data(), w.data(), dx.data());
  setFlops(state, 2.0 * double(s.macs()));
}

void oursConvBackwardFilter(benchmark::State& state, const Conv2dShape& s) {
  auto x = randomVec(s.inputElems(), 1), dy = randomVec(s.outputElems(), 2);
  std::vector<float> dw(s.weightElems());
  ipu::kernels::fused::Conv2dBackwardFilter conv(s);
  for (auto _ : state) conv.run(x.data(), dy.data(), dw.data());
  setFlops(state, 2.0 * double(s.macs()));
}

void BM_OursMatMul(benchmark::State& state) {
  MatMulShape s;
  s.m = state.range(0), s.k = state.range(1), s.n = state.range(2);
  auto a = randomVec(s.aElems(), 1), b = randomVec(s.bElems(), 2);
  std::vector<float> c(s.cElems());
  ipu::kernels::fused::MatMul mm(s);
  for (auto _ : state) mm.run(a.data(), b.data(), c.data());
  setFlops(state, 2.0 * double(s.macs()));
}

// ---- bf16: the same kernels on bf16 storage (what the fused engine runs for bf16 models) ---

// in0, in1 -> out element counts of the pass; make(s) builds the kernel.
template <class Make>
void oursConvBf16(benchmark::State& state, const Conv2dShape& s, i64 in0, i64 in1, i64 out,
                  Make make) {
  auto a = randomBf16(in0, 1), b = randomBf16(in1, 2);
  std::vector<std::uint16_t> c(static_cast<size_t>(out));
  auto conv = make(s);
  for (auto _ : state) conv->run(a.data(), b.data(), c.data());
  setFlops(state, 2.0 * double(s.macs()));
}

auto makeForwardBf16 = [](const Conv2dShape& s) {
  return std::make_unique<fz::Conv2dForward>(s, ipu::kernels::ElementType::BF16);
};
auto makeBackwardDataBf16 = [](const Conv2dShape& s) {
  return std::make_unique<fz::Conv2dBackwardData>(s, ipu::kernels::ElementType::BF16);
};
auto makeBackwardFilterBf16 = [](const Conv2dShape& s) {
  return std::make_unique<fz::Conv2dBackwardFilter>(s, ipu::kernels::ElementType::BF16);
};

void BM_OursConvForwardBf16(benchmark::State& state) {
  const auto s = convFromArgs(state);
  oursConvBf16(state, s, s.inputElems(), s.weightElems(), s.outputElems(), makeForwardBf16);
}
void BM_OursShortcutForwardBf16(benchmark::State& state) {
  const auto s = shortcutFromArgs(state);
  oursConvBf16(state, s, s.inputElems(), s.weightElems(), s.outputElems(), makeForwardBf16);
}
void BM_OursConvBackwardDataBf16(benchmark::State& state) {
  const auto s = convFromArgs(state);
  oursConvBf16(state, s, s.outputElems(), s.weightElems(), s.inputElems(), makeBackwardDataBf16);
}
void BM_OursShortcutBackwardDataBf16(benchmark::State& state) {
  const auto s = shortcutFromArgs(state);
  oursConvBf16(state, s, s.outputElems(), s.weightElems(), s.inputElems(), makeBackwardDataBf16);
}
void BM_OursConvBackwardFilterBf16(benchmark::State& state) {
  const auto s = convFromArgs(state);
  oursConvBf16(state, s, s.inputElems(), s.outputElems(), s.weightElems(), makeBackwardFilterBf16);
}
void BM_OursShortcutBackwardFilterBf16(benchmark::State& state) {
  const auto s = shortcutFromArgs(state);
  oursConvBf16(state, s, s.inputElems(), s.outputElems(), s.weightElems(), makeBackwardFilterBf16);
}

void BM_OursBatchNormReluForwardBf16(benchmark::State& state) {
  batchNormReluForward<OursBatchNormReluBf16>(state);
}
void BM_OursBatchNormReluBackwardBf16(benchmark::State& state) {
  batchNormReluBackward<OursBatchNormReluBf16>(state);
}

// ---- through the whole backend: a one-op graph compiled for a Mk2 and run by the engine ----
// This is what a model pays per op: the kernel plus the engine's dispatch.

void runBackendGraph(benchmark::State& state, ipu::Graph g, double flops) {
  ipu::CompileOptions co;
  co.checkMemory = false;  // one huge op on one IPU: only the fused engine's speed matters here
  auto exe = std::make_shared<ipu::Executable>(ipu::compile(std::move(g), ipu::Target::mk2(), co));
  ipu::Engine e(exe, ipu::EngineMode::Fused);
  for (const auto& t : exe->graph.tensors())
    if (t.kind == ipu::TensorKind::Variable) {
      auto v = randomVec(t.elements(), static_cast<unsigned>(t.id) + 1);
      e.writeTensor(t.id, v.data(), v.size() * sizeof(float));
    }
  for (auto _ : state) e.run();
  setFlops(state, flops);
}

ipu::Attrs convAttrsOf(const Conv2dShape& s) {
  ipu::Conv2dOptions o = ipu::Conv2dOptions::make(s.strideH, s.padTop);
  return ipu::convAttrs(o);
}

void BM_BackendConvForward(benchmark::State& state) {
  const Conv2dShape s = convFromArgs(state);
  ipu::Graph g("conv");
  ipu::Builder b(g);
  int x = b.variable("x", {s.n, s.h, s.w, s.c}), w = b.variable("w", {s.k, s.r, s.s, s.c});
  b.conv2d(x, w, ipu::Conv2dOptions::make(1, 1), "y");
  runBackendGraph(state, std::move(g), 2.0 * double(s.macs()));
}

void BM_BackendConvBackwardData(benchmark::State& state) {
  const Conv2dShape s = convFromArgs(state);
  ipu::Graph g("conv_bwd_data");
  ipu::Builder b(g);
  int dy = b.variable("dy", {s.n, s.outH(), s.outW(), s.k}),
      w = b.variable("w", {s.k, s.r, s.s, s.c});
  ipu::Attrs a = convAttrsOf(s);
  a.set("input_shape", std::vector<i64>{s.n, s.h, s.w, s.c});
  g.addOp1(ipu::OpKind::Conv2dBackwardData, {dy, w}, a, "dx");
  runBackendGraph(state, std::move(g), 2.0 * double(s.macs()));
}

void BM_BackendConvBackwardFilter(benchmark::State& state) {
  const Conv2dShape s = convFromArgs(state);
  ipu::Graph g("conv_bwd_filter");
  ipu::Builder b(g);
  int x = b.variable("x", {s.n, s.h, s.w, s.c}),
      dy = b.variable("dy", {s.n, s.outH(), s.outW(), s.k});
  ipu::Attrs a = convAttrsOf(s);
  a.set("kernel", std::vector<i64>{s.r, s.s});
  g.addOp1(ipu::OpKind::Conv2dBackwardFilter, {x, dy}, a, "dw");
  runBackendGraph(state, std::move(g), 2.0 * double(s.macs()));
}

void BM_BackendMatMul(benchmark::State& state) {
  i64 m = state.range(0), k = state.range(1), n = state.range(2);
  ipu::Graph g("matmul");
  ipu::Builder b(g);
  b.matmul(b.variable("a", {m, k}), b.variable("b", {k, n}), false, false, "c");
  runBackendGraph(state, std::move(g), 2.0 * double(m) * double(k) * double(n));
}

void BM_DirectConvForward(benchmark::State& state) {
  directConvForward(state, convFromArgs(state));
}
void BM_DirectShortcutForward(benchmark::State& state) {
  directConvForward(state, shortcutFromArgs(state));
}
void BM_DirectConvBackwardData(benchmark::State& state) {
  directConvBackwardData(state, convFromArgs(state));
}
void BM_DirectShortcutBackwardData(benchmark::State& state) {
  directConvBackwardData(state, shortcutFromArgs(state));
}
void BM_DirectConvBackwardFilter(benchmark::State& state) {
  directConvBackwardFilter(state, convFromArgs(state));
}
void BM_DirectShortcutBackwardFilter(benchmark::State& state) {
  directConvBackwardFilter(state, shortcutFromArgs(state));
}
void BM_DirectStride2ConvForward(benchmark::State& state) {
  directConvForward(state, stride2FromArgs(state));
}
void BM_DirectStride2ConvBackwardData(benchmark::State& state) {
  directConvBackwardData(state, stride2FromArgs(state));
}
void BM_DirectStride2ConvBackwardFilter(benchmark::State& state) {
  directConvBackwardFilter(state, stride2FromArgs(state));
}
void BM_OursStride2ConvForward(benchmark::State& state) {
  oursConvForward(state, stride2FromArgs(state));
}
void BM_OursStride2ConvBackwardData(benchmark::State& state) {
  oursConvBackwardData(state, stride2FromArgs(state));
}
void BM_OursStride2ConvBackwardFilter(benchmark::State& state) {
  oursConvBackwardFilter(state, stride2FromArgs(state));
}
void BM_DirectPointwiseForward(benchmark::State& state) {
  directConvForward(state, pointwiseFromArgs(state));
}
void BM_DirectPointwiseBackwardData(benchmark::State& state) {
  directConvBackwardData(state, pointwiseFromArgs(state));
}
void BM_DirectPointwiseBackwardFilter(benchmark::State& state) {
  directConvBackwardFilter(state, pointwiseFromArgs(state));
}
void BM_OursDepthwiseForward(benchmark::State& state) {
  oursConvForward(state, depthwiseFromArgs(state));
}
void BM_DirectDepthwiseForward(benchmark::State& state) {
  directConvForward(state, depthwiseFromArgs(state));
}
void BM_OursDepthwiseBackwardData(benchmark::State& state) {
  oursConvBackwardData(state, depthwiseFromArgs(state));
}
void BM_DirectDepthwiseBackwardData(benchmark::State& state) {
  directConvBackwardData(state, depthwiseFromArgs(state));
}
void BM_OursDepthwiseBackwardFilter(benchmark::State& state) {
  oursConvBackwardFilter(state, depthwiseFromArgs(state));
}
void BM_DirectDepthwiseBackwardFilter(benchmark::State& state) {
  directConvBackwardFilter(state, depthwiseFromArgs(state));
}
void BM_OursPointwiseForward(benchmark::State& state) {
  oursConvForward(state, pointwiseFromArgs(state));
}
void BM_OursPointwiseBackwardData(benchmark::State& state) {
  oursConvBackwardData(state, pointwiseFromArgs(state));
}
void BM_OursPointwiseBackwardFilter(benchmark::State& state) {
  oursConvBackwardFilter(state, pointwiseFromArgs(state));
}
void BM_OursConvForward(benchmark::State& state) {
  oursConvForward(state, convFromArgs(state));
}
void BM_OursShortcutForward(benchmark::State& state) {
  oursConvForward(state, shortcutFromArgs(state));
}
void BM_OursConvBackwardData(benchmark::State& state) {
  oursConvBackwardData(state, convFromArgs(state));
}
void BM_OursShortcutBackwardData(benchmark::State& state) {
  oursConvBackwardData(state, shortcutFromArgs(state));
}
void BM_OursConvBackwardFilter(benchmark::State& state) {
  oursConvBackwardFilter(state, convFromArgs(state));
}
void BM_OursShortcutBackwardFilter(benchmark::State& state) {
  oursConvBackwardFilter(state, shortcutFromArgs(state));
}

// Args: {H=W, C=K} for convs (N=32, 3x3, pad 1); {H=W, C} for ResNet-50's 1x1 stride-2
// downsampling shortcut onto 2C channels; {M, K, N} for matmuls. Ours and direct are
// registered next to each other so that they run under the same machine conditions.
void convArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hw", "c"})
      ->Args({56, 64})
      ->Args({28, 128})
      ->Args({14, 256})
      ->Args({7, 512})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
void shortcutArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hw", "c"})
      ->Args({56, 256})
      ->Args({28, 512})
      ->Args({14, 1024})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
// ResNet-50's 3x3 stride-2 convolutions (stage 2-4 unit 1) at batch 32: {input H=W, C=K}.
void stride2Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hw", "c"})
      ->Args({56, 128})
      ->Args({28, 256})
      ->Args({14, 512})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
// Some of ResNet-50's 1x1 stride-1 convolutions at batch 32 onto 28x28 and smaller:
// {H=W, C, K}.
void depthwiseArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hw", "c", "rs", "stride"})
      ->Args({190, 48, 3, 1})
      ->Args({190, 144, 3, 2})
      ->Args({95, 192, 3, 1})
      ->Args({95, 192, 5, 2})
      ->Args({48, 336, 5, 1})
      ->Args({24, 960, 5, 1})
      ->Args({12, 2688, 3, 1})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
void pointwiseArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hw", "c", "k"})
      ->Args({95, 24, 144})
      ->Args({95, 144, 24})
      ->Args({48, 192, 32})
      ->Args({24, 336, 56})
      ->Args({12, 960, 160})
      ->Args({48, 32, 192})
      ->Args({24, 56, 336})
      ->Args({12, 160, 960})
      ->Args({28, 128, 512})
      ->Args({14, 256, 1024})
      ->Args({14, 1024, 256})
      ->Args({7, 2048, 512})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
// ResNet-50's batch norms at batch 32: {H=W, C}.
void batchNormArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hw", "c"})
      ->Args({112, 64})
      ->Args({56, 64})
      ->Args({56, 256})
      ->Args({28, 512})
      ->Args({14, 1024})
      ->Args({7, 2048})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
void matmulArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "k", "n"})
      ->Args({2048, 1024, 1024})
      ->Args({32, 2048, 1000})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_BackendConvForward)->Apply(convArgs);
BENCHMARK(BM_OursConvForward)->Apply(convArgs);
BENCHMARK(BM_DirectConvForward)->Apply(convArgs);
BENCHMARK(BM_BackendConvBackwardData)->Apply(convArgs);
BENCHMARK(BM_OursConvBackwardData)->Apply(convArgs);
BENCHMARK(BM_DirectConvBackwardData)->Apply(convArgs);
BENCHMARK(BM_BackendConvBackwardFilter)->Apply(convArgs);
BENCHMARK(BM_OursConvBackwardFilter)->Apply(convArgs);
BENCHMARK(BM_DirectConvBackwardFilter)->Apply(convArgs);
BENCHMARK(BM_OursStride2ConvForward)->Apply(stride2Args);
BENCHMARK(BM_DirectStride2ConvForward)->Apply(stride2Args);
BENCHMARK(BM_OursStride2ConvBackwardData)->Apply(stride2Args);
BENCHMARK(BM_DirectStride2ConvBackwardData)->Apply(stride2Args);
BENCHMARK(BM_OursStride2ConvBackwardFilter)->Apply(stride2Args);
BENCHMARK(BM_DirectStride2ConvBackwardFilter)->Apply(stride2Args);
BENCHMARK(BM_OursDepthwiseForward)->Apply(depthwiseArgs);
BENCHMARK(BM_DirectDepthwiseForward)->Apply(depthwiseArgs);
BENCHMARK(BM_OursDepthwiseBackwardData)->Apply(depthwiseArgs);
BENCHMARK(BM_DirectDepthwiseBackwardData)->Apply(depthwiseArgs);
BENCHMARK(BM_OursDepthwiseBackwardFilter)->Apply(depthwiseArgs);
BENCHMARK(BM_DirectDepthwiseBackwardFilter)->Apply(depthwiseArgs);
BENCHMARK(BM_OursPointwiseForward)->Apply(pointwiseArgs);
BENCHMARK(BM_DirectPointwiseForward)->Apply(pointwiseArgs);
BENCHMARK(BM_OursPointwiseBackwardData)->Apply(pointwiseArgs);
BENCHMARK(BM_DirectPointwiseBackwardData)->Apply(pointwiseArgs);
BENCHMARK(BM_OursPointwiseBackwardFilter)->Apply(pointwiseArgs);
BENCHMARK(BM_DirectPointwiseBackwardFilter)->Apply(pointwiseArgs);
BENCHMARK(BM_OursShortcutForward)->Apply(shortcutArgs);
BENCHMARK(BM_DirectShortcutForward)->Apply(shortcutArgs);
BENCHMARK(BM_OursShortcutBackwardData)->Apply(shortcutArgs);
BENCHMARK(BM_DirectShortcutBackwardData)->Apply(shortcutArgs);
BENCHMARK(BM_OursShortcutBackwardFilter)->Apply(shortcutArgs);
BENCHMARK(BM_DirectShortcutBackwardFilter)->Apply(shortcutArgs);
BENCHMARK(BM_OursBatchNormReluForward)->Apply(batchNormArgs);
BENCHMARK(BM_DirectBatchNormReluForward)->Apply(batchNormArgs);
BENCHMARK(BM_OursBatchNormReluBackward)->Apply(batchNormArgs);
BENCHMARK(BM_DirectBatchNormReluBackward)->Apply(batchNormArgs);
BENCHMARK(BM_OursConvForwardBf16)->Apply(convArgs);
BENCHMARK(BM_OursConvBackwardDataBf16)->Apply(convArgs);
BENCHMARK(BM_OursConvBackwardFilterBf16)->Apply(convArgs);
BENCHMARK(BM_OursShortcutForwardBf16)->Apply(shortcutArgs);
BENCHMARK(BM_OursShortcutBackwardDataBf16)->Apply(shortcutArgs);
BENCHMARK(BM_OursShortcutBackwardFilterBf16)->Apply(shortcutArgs);
BENCHMARK(BM_OursBatchNormReluForwardBf16)->Apply(batchNormArgs);
BENCHMARK(BM_OursBatchNormReluBackwardBf16)->Apply(batchNormArgs);
BENCHMARK(BM_OursMaxPoolBackward)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DirectMaxPoolBackward)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BackendMatMul)->Apply(matmulArgs);
BENCHMARK(BM_OursMatMul)->Apply(matmulArgs);
BENCHMARK(BM_DirectMatMul)->Apply(matmulArgs);

}  // namespace

int main(int argc, char** argv) {
  // KERNELS_BENCH_THREADS=n: n threads instead of 2. With 1, the reported CPU time is all of the
  // kernel's work, a measure that time-slicing on a loaded host inflates far less than real time.
  const char* threads = std::getenv("KERNELS_BENCH_THREADS");
  // Also the OpenMP team size of the direct calls.
  ipu::kernels::fused::setNumThreads(threads ? std::max(1, std::atoi(threads)) : kThreads);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
