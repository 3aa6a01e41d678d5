// Batch norm over x viewed as [rows, C] (channels innermost: NHWC activations), attribute eps.
// batch_norm_train: (x, gamma [C], beta [C]) -> y, mean [C] f32, var [C] f32 (biased), with
//   y = (x - mean) / sqrt(var + eps) * gamma + beta over the batch statistics.
// batch_norm_inference: (x, gamma, beta, mean, var) -> y with the given statistics.
// batch_norm_backward: (x, dy, gamma, mean, var) -> dx, dgamma [C] f32, dbeta [C] f32.
// Tile plans: per-channel sums (PlanApi::channelSums, phases 0-1), then an elementwise phase 2.
// Fused mode: the kernels of fused.h on f32 data, oneDNN's bf16 batch norm on bf16 activations
// with f32 parameters where the CPU has it (nativeFused), and the engine's host fusions with a
// following relu (a mask buffer the backward reads) or a residual add (host_fusion.h).
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/engine/host_fusion.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/fused_bf16.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace ref = kernels::ref;
namespace fz = kernels::fused;
using Role = HostFusionPlan::Role;
using kernels::BatchNormRelu;

float epsOf(const Op& op) {
  return static_cast<float>(op.attrs.getFloat("eps"));
}

// ---- type inference ----------------------------------------------------------------------------
// Checks x (rank >= 2) and that the tensors `perChannel` of `in` are [C]; returns C.
i64 expectChannels(const std::vector<const Tensor*>& in, std::vector<size_t> perChannel,
                   const std::string& label) {
  const Tensor& x = *in[0];
  if (x.shape.size() < 2) fail(label, "input must have rank >= 2 (channels innermost)");
  const i64 c = x.shape.back();
  for (size_t i : perChannel)
    if (in[i]->shape != Shape{c})
      fail(label, fmt::format("'{}' {} must have shape [{}] (channels of '{}' {})", in[i]->name,
                              shapeStr(in[i]->shape), c, x.name, shapeStr(x.shape)));
  return c;
}

std::vector<TensorType> inferTrain(const std::vector<const Tensor*>& in, const Attrs&,
                                   const std::string& label) {
  const i64 c = expectChannels(in, {1, 2}, label);
  return {{in[0]->shape, in[0]->dtype}, {{c}, DType::F32}, {{c}, DType::F32}};
}

std::vector<TensorType> inferInference(const std::vector<const Tensor*>& in, const Attrs&,
                                       const std::string& label) {
  expectChannels(in, {1, 2, 3, 4}, label);
  return {{in[0]->shape, in[0]->dtype}};
}

std::vector<TensorType> inferBackward(const std::vector<const Tensor*>& in, const Attrs&,
                                      const std::string& label) {
  if (in[0]->shape.size() >= 2) expectSameShape(*in[0], *in[1], label);
  const i64 c = expectChannels(in, {2, 3, 4}, label);
  return {{in[0]->shape, in[0]->dtype}, {{c}, DType::F32}, {{c}, DType::F32}};
}

void gradTrain(const GradArgs& a) {
  if (a.dy[1] >= 0 || a.dy[2] >= 0)
    throw GraphError(fmt::format(
        "autodiff: {} has no gradient rule (the loss depends on the batch statistics outputs)",
        a.label));
  const Op& op = a.op;
  const int bw =
      a.g.addOp(OpKind::BatchNormBackward,
                {op.inputs[0], a.dy[0], op.inputs[1], op.outputs[1], op.outputs[2]}, op.attrs);
  const std::vector<int> o = a.g.op(bw).outputs;
  for (int i = 0; i < 3; ++i)
    if (a.needs[static_cast<size_t>(i)]) a.accumulate(op.inputs[static_cast<size_t>(i)], o[i]);
}

// ---- tile plans --------------------------------------------------------------------------------
void planInference(PlanApi& p, const Op& op) {
  const auto& in = op.inputs;
  const Windows params = {p.whole(in[1]), p.whole(in[2]), p.whole(in[3]), p.whole(in[4])};
  p.perSlice(op, 0, {op.outputs[0]}, [x = in[0], params](Range r) {
    Windows w{{x, r.begin, r.end}};
    w.insert(w.end(), params.begin(), params.end());
    return w;
  });
}

// Phases 0-1: mean and variance (channel sums of x and x^2); phase 2: normalise.
void planTrain(PlanApi& p, const Op& op) {
  const int x = op.inputs[0], mean = op.outputs[1], var = op.outputs[2];
  const auto [rows, c] = rowsChannelsOf(p.graph(), x);
  p.channelSums(
      op, rows, c, c * sizeOf(p.graph().tensor(x).dtype),
      [x, c = c](Range ch, Range red) {
        return Windows{{x, red.begin * c + ch.begin, (red.end - 1) * c + ch.end}};
      },
      mean, var);
  const Windows params = {p.whole(mean), p.whole(var), p.whole(op.inputs[1]),
                          p.whole(op.inputs[2])};
  p.perSlice(
      op, 2, {op.outputs[0]},
      [x, params](Range r) {
        Windows w{{x, r.begin, r.end}};
        w.insert(w.end(), params.begin(), params.end());
        return w;
      },
      0, "normalize");
}

// inputs x, dy, gamma, mean, var; outputs dx, dgamma, dbeta. Phases 0-1: dbeta (sum of dy) and
// dgamma (sum of dy * xhat); phase 2: dx.
void planBackward(PlanApi& p, const Op& op) {
  const auto& in = op.inputs;
  const int x = in[0], dy = in[1], dgamma = op.outputs[1], dbeta = op.outputs[2];
  const Graph& g = p.graph();
  const auto [rows, c] = rowsChannelsOf(g, x);
  const NeedWindow mean = p.whole(in[3]), var = p.whole(in[4]);
  p.channelSums(
      op, rows, c, c * (sizeOf(g.tensor(x).dtype) + sizeOf(g.tensor(dy).dtype)),
      [x, dy, c = c, mean, var](Range ch, Range red) {
        const i64 b = red.begin * c + ch.begin, e = (red.end - 1) * c + ch.end;
        return Windows{{x, b, e}, {dy, b, e}, mean, var};
      },
      dbeta, dgamma);
  const Windows params = {mean, var, p.whole(in[2]), p.whole(dbeta), p.whole(dgamma)};
  p.perSlice(
      op, 2, {op.outputs[0]},
      [x, dy, params](Range r) {
        Windows w{{x, r.begin, r.end}, {dy, r.begin, r.end}};
        w.insert(w.end(), params.begin(), params.end());
        return w;
      },
      0, "input_grad");
}

// ---- tile vertices -----------------------------------------------------------------------------
std::function<void()> vertexInference(const VertexArgs& a) {
  const auto [rows, c] = rowsChannelsOf(a.g, a.op.inputs[0]);
  // windows: x, gamma, beta, mean, var
  return [rows = rows, c = c, eps = epsOf(a.op), W = a.in, y = a.out[0], work = a.work] {
    ref::batchNormNormalize(rows, c, eps, W[0], W[3], W[4], W[1], W[2], y, work);
  };
}

// Phase 1 of the channel sums: windows are the (first, second) partial rows of every part,
// interleaved. Training: mean and biased variance; backward: dbeta = sum dy and
// dgamma = sum dy * xhat.
std::function<void()> finalizeSums(const VertexArgs& a, bool train) {
  const auto [rows, c] = rowsChannelsOf(a.g, a.op.inputs[0]);
  const double inv = 1.0 / static_cast<double>(rows);
  return [W = a.in, y = a.out[0], y2 = a.out[1], work = a.work, inv, train] {
    for (i64 i = 0; i < work.size(); ++i) {
      double s = 0, s2 = 0;
      for (size_t p = 0; p + 1 < W.size(); p += 2) {
        s += W[p].data[i];
        s2 += W[p + 1].data[i];
      }
      if (train) {
        double mean = s * inv;
        y[i] = static_cast<float>(mean);
        y2[i] = static_cast<float>(std::max(0.0, s2 * inv - mean * mean));
      } else {
        y[i] = static_cast<float>(s);
        y2[i] = static_cast<float>(s2);
      }
    }
  };
}

std::function<void()> vertexTrain(const VertexArgs& a) {
  const auto [rows, c] = rowsChannelsOf(a.g, a.op.inputs[0]);
  const float eps = epsOf(a.op);
  const Range work = a.work, red = a.red;
  if (a.phase == 0)
    return [rows = rows, c = c, W = a.in, y = a.out[0], y2 = a.out[1], work, red] {
      ref::batchNormSums(rows, c, W[0], y, y2, work, red);
    };
  if (a.phase == 1) return finalizeSums(a, true);
  // windows: x, mean, var, gamma, beta
  return [rows = rows, c = c, eps, W = a.in, y = a.out[0], work] {
    ref::batchNormNormalize(rows, c, eps, W[0], W[1], W[2], W[3], W[4], y, work);
  };
}

std::function<void()> vertexBackward(const VertexArgs& a) {
  const auto [rows, c] = rowsChannelsOf(a.g, a.op.inputs[0]);
  const float eps = epsOf(a.op);
  const Range work = a.work, red = a.red;
  if (a.phase == 0)  // windows: x, dy, mean, var
    return [rows = rows, c = c, eps, W = a.in, y = a.out[0], y2 = a.out[1], work, red] {
      ref::batchNormBackwardSums(rows, c, eps, W[0], W[1], W[2], W[3], y, y2, work, red);
    };
  if (a.phase == 1) return finalizeSums(a, false);
  // windows: x, dy, mean, var, gamma, dbeta (sum of dy), dgamma (sum of dy * xhat)
  return [rows = rows, c = c, eps, W = a.in, y = a.out[0], work] {
    ref::batchNormBackwardData(rows, c, eps, W[0], W[1], W[2], W[3], W[4], W[5], W[6], y, work);
  };
}

// ---- fused kernels -----------------------------------------------------------------------------
// The f32 kernels of fused.h. `role` is the op's host fusion (f32 operands only):
// kBatchNormRelu writes relu(y) (`swish`: swish(y)) to `y` and the map y = x * a + b (allocated
// by `allocate`) for the backward; kBatchNormStatistics writes mean, var and that map instead
// of y.
std::function<void()> trainF32(const Graph& g, const Op& op, Role role, bool swish, const float* x,
                               const float* gamma, const float* beta, float* y, float* mean,
                               float* var, const std::function<void*(std::size_t)>& allocate) {
  const auto [rows, c] = rowsChannelsOf(g, op.inputs[0]);
  const bool relu = role == Role::kBatchNormRelu;
  auto k = std::make_shared<fz::BatchNormForwardTraining>(rows, c, epsOf(op),
                                                          !relu   ? BatchNormRelu::kNone
                                                          : swish ? BatchNormRelu::kSwish
                                                                  : BatchNormRelu::kFused);
  if (role == Role::kBatchNormStatistics) {
    auto* affine = static_cast<float*>(allocate(2 * static_cast<std::size_t>(c) * sizeof(float)));
    return [=] { k->runStatistics(x, gamma, beta, mean, var, affine); };
  }
  void* mask = relu ? allocate(k->workspaceBytes()) : nullptr;
  return [=] { k->run(x, gamma, beta, y, mean, var, mask); };
}

std::function<void()> inferenceF32(const Graph& g, const Op& op, bool relu, const float* x,
                                   const float* gamma, const float* beta, const float* mean,
                                   const float* var, float* y) {
  const auto [rows, c] = rowsChannelsOf(g, op.inputs[0]);
  auto k = std::make_shared<fz::BatchNormForwardInference>(
      rows, c, epsOf(op), relu ? BatchNormRelu::kFused : BatchNormRelu::kNone);
  return [=] { k->run(x, gamma, beta, mean, var, y); };
}

std::function<void()> backwardF32(const Graph& g, const Op& op, BatchNormRelu act, const float* x,
                                  const float* dy, const float* gamma, const float* mean,
                                  const float* var, float* dx, float* dgamma, float* dbeta,
                                  const void* mask) {
  const auto [rows, c] = rowsChannelsOf(g, op.inputs[0]);
  auto k = std::make_shared<fz::BatchNormBackward>(rows, c, epsOf(op), act);
  return [=] { k->run(x, dy, gamma, mean, var, dx, dgamma, dbeta, mask); };
}

std::function<void()> fusedTrain(const FusedArgs& a) {
  return trainF32(a.g, a.op, Role::kNone, false, a.in[0], a.in[1], a.in[2], a.out[0], a.out[1],
                  a.out[2], {});
}
std::function<void()> fusedInference(const FusedArgs& a) {
  return inferenceF32(a.g, a.op, false, a.in[0], a.in[1], a.in[2], a.in[3], a.in[4], a.out[0]);
}
std::function<void()> fusedBackward(const FusedArgs& a) {
  return backwardF32(a.g, a.op, BatchNormRelu::kNone, a.in[0], a.in[1], a.in[2], a.in[3], a.in[4],
                     a.out[0], a.out[1], a.out[2], nullptr);
}

DType dtypeOf(const NativeFusedArgs& a, int t) {
  return a.g.tensor(t).dtype;
}
float* f32(void* p) {
  return static_cast<float*>(p);
}

// bf16 activations (x, y) with f32 parameters: oneDNN's bf16 batch norm where the CPU has it;
// every operand f32 with a host fusion: the f32 kernel in its fused form.
std::function<void()> nativeTrain(const NativeFusedArgs& a) {
  const Op& op = a.op;
  const Role role = a.fusion.role[static_cast<size_t>(op.id)];
  const bool relu = role == Role::kBatchNormRelu;
  void* y = relu ? a.memory(a.fusion.reluOut[static_cast<size_t>(op.id)]) : a.out[0];
  if (a.bf16Primitives && dtypeOf(a, op.inputs[0]) == DType::BF16 &&
      dtypeOf(a, op.outputs[0]) == DType::BF16 && dtypeOf(a, op.inputs[1]) == DType::F32 &&
      dtypeOf(a, op.inputs[2]) == DType::F32) {
    const auto [rows, c] = rowsChannelsOf(a.g, op.inputs[0]);
    auto k = std::make_shared<fz::BatchNormForwardTrainingBf16>(
        rows, c, epsOf(op), relu ? BatchNormRelu::kFused : BatchNormRelu::kNone);
    void* mask = relu ? a.allocateFusionBuffer(k->workspaceBytes()) : nullptr;
    return [k, x = a.in[0], ga = f32(a.in[1]), be = f32(a.in[2]), y, mean = f32(a.out[1]),
            var = f32(a.out[2]), mask] { k->run(x, ga, be, y, mean, var, mask); };
  }
  if (role == Role::kNone || !allOperandsAre(a.g, op, DType::F32)) return {};
  return trainF32(a.g, op, role, a.fusion.swish[static_cast<size_t>(op.id)], f32(a.in[0]),
                  f32(a.in[1]), f32(a.in[2]), f32(y), f32(a.out[1]), f32(a.out[2]),
                  a.allocateFusionBuffer);
}

std::function<void()> nativeInference(const NativeFusedArgs& a) {
  const Op& op = a.op;
  const Role role = a.fusion.role[static_cast<size_t>(op.id)];
  if (role == Role::kNone || !allOperandsAre(a.g, op, DType::F32)) return {};
  const bool relu = role == Role::kBatchNormRelu;
  void* y = relu ? a.memory(a.fusion.reluOut[static_cast<size_t>(op.id)]) : a.out[0];
  return inferenceF32(a.g, op, relu, f32(a.in[0]), f32(a.in[1]), f32(a.in[2]), f32(a.in[3]),
                      f32(a.in[4]), f32(y));
}

std::function<void()> nativeBackward(const NativeFusedArgs& a) {
  const Op& op = a.op;
  const auto id = static_cast<size_t>(op.id);
  const Role role = a.fusion.role[id];
  const bool relu = role == Role::kBatchNormReluBackward;
  void* dy = relu ? a.memory(a.fusion.reluGradIn[id]) : a.in[1];
  const void* mask = relu ? a.fusionBuffer(a.fusion.forwardOp[id]) : nullptr;
  const auto& in = op.inputs;
  if (a.bf16Primitives && dtypeOf(a, in[0]) == DType::BF16 && dtypeOf(a, in[1]) == DType::BF16 &&
      dtypeOf(a, op.outputs[0]) == DType::BF16 && dtypeOf(a, in[2]) == DType::F32 &&
      dtypeOf(a, in[3]) == DType::F32 && dtypeOf(a, in[4]) == DType::F32) {
    const auto [rows, c] = rowsChannelsOf(a.g, in[0]);
    auto k = std::make_shared<fz::BatchNormBackwardBf16>(
        rows, c, epsOf(op), relu ? BatchNormRelu::kFused : BatchNormRelu::kNone);
    return [k, x = a.in[0], dy, ga = f32(a.in[2]), mean = f32(a.in[3]), var = f32(a.in[4]),
            dx = a.out[0], dga = f32(a.out[1]), dbe = f32(a.out[2]),
            mask] { k->run(x, dy, ga, mean, var, dx, dga, dbe, mask); };
  }
  if (role == Role::kNone || !allOperandsAre(a.g, op, DType::F32)) return {};
  const BatchNormRelu act = !relu                ? BatchNormRelu::kNone
                            : a.fusion.swish[id] ? BatchNormRelu::kSwish
                                                 : BatchNormRelu::kFused;
  if (const int scaled = a.fusion.perSampleDy[id]; relu && scaled >= 0) {
    // dy = scaled * scale + (shift + 0) per sample: the absorbed chain's ops (host_fusion.h),
    // shift + 0 being its broadcast op's values.
    const auto [rows, c] = rowsChannelsOf(a.g, op.inputs[0]);
    const i64 samples = a.g.tensor(op.inputs[0]).shape.front();
    auto k = std::make_shared<fz::BatchNormBackward>(rows, c, epsOf(op), act);
    auto shifted = std::make_shared<std::vector<float>>(static_cast<size_t>(samples * c));
    return [k, shifted, x = f32(a.in[0]), dy = f32(a.memory(scaled)),
            scale = f32(a.memory(a.fusion.perSampleScale[id])),
            shift = f32(a.memory(a.fusion.perSampleShift[id])), ga = f32(a.in[2]),
            mean = f32(a.in[3]), var = f32(a.in[4]), dx = f32(a.out[0]), dga = f32(a.out[1]),
            dbe = f32(a.out[2]), mask, rowsPerSample = rows / samples] {
      float* z = shifted->data();
      for (size_t j = 0; j < shifted->size(); ++j) z[j] = shift[j] + 0.0f;
      k->run(x, dy, ga, mean, var, dx, dga, dbe, mask, {scale, z, rowsPerSample});
    };
  }
  return backwardF32(a.g, op, act, f32(a.in[0]), f32(dy), f32(a.in[2]), f32(a.in[3]), f32(a.in[4]),
                     f32(a.out[0]), f32(a.out[1]), f32(a.out[2]), mask);
}

OpInfo batchNormInfo(OpKind kind, std::string_view name, int inputs, int outputs) {
  OpInfo f;
  f.def = {kind, name, inputs, outputs, {}, {{"eps", AttrType::Float, true}}};
  f.inputDTypes.assign(static_cast<size_t>(inputs), floatTypes());
  f.costTraits.elementwise = true;  // the normalising phase; channel sums: channelSumStreams
  return f;
}

}  // namespace

IPU_REGISTER_OPS(batch_norm) {
  OpInfo t = batchNormInfo(OpKind::BatchNormTrain, "batch_norm_train", 3, 3);
  t.def.precision = PrecisionRule::DataInCompute;
  t.doc = "x [..., C], gamma [C], beta [C] -> y [..., C], mean [C] f32, var [C] f32";
  t.infer = inferTrain;
  t.grad = gradTrain;
  t.plan = planTrain;
  t.vertex = vertexTrain;
  t.fused = fusedTrain;
  t.nativeFused = nativeTrain;
  t.cost = [](const Op&, int) { return 1.0; };  // channel sums: two per element; normalise
  t.costTraits.channelSumStreams = 1;
  registerOp(std::move(t));

  OpInfo i = batchNormInfo(OpKind::BatchNormInference, "batch_norm_inference", 5, 1);
  i.def.precision = PrecisionRule::DataInCompute;
  i.doc = "x [..., C], gamma, beta, mean, var [C] -> y [..., C]";
  i.infer = inferInference;
  i.grad = noGradient("it is an inference op");
  i.plan = planInference;
  i.vertex = vertexInference;
  i.fused = fusedInference;
  i.nativeFused = nativeInference;
  i.cost = [](const Op&, int) { return 2.0; };  // x * scale + shift per channel
  registerOp(std::move(i));

  OpInfo b = batchNormInfo(OpKind::BatchNormBackward, "batch_norm_backward", 5, 3);
  b.doc = "x, dy [..., C], gamma, mean, var [C] -> dx [..., C], dgamma [C] f32, dbeta [C] f32";
  b.infer = inferBackward;
  b.grad = noGradient("it is a backward op");
  b.plan = planBackward;
  b.vertex = vertexBackward;
  b.fused = fusedBackward;
  b.nativeFused = nativeBackward;
  b.cost = [](const Op&, int) { return 1.0; };
  b.costTraits.channelSumStreams = 2;
  registerOp(std::move(b));
}

}  // namespace ipu::ops
