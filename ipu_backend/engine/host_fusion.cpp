#include "ipu_backend/engine/host_fusion.h"

#include <algorithm>

namespace ipu {
namespace {

bool isFn(const Op& op, OpKind kind, const char* fn) {
  return op.kind == kind && op.attrs.has("fn") && op.attrs.getString("fn") == fn;
}

}  // namespace

std::vector<int> HostFusionPlan::inputsOf(const Op& op) const {
  switch (role[op.id]) {
    case Role::kAbsorbed:
      return {};
    case Role::kBatchNormReluBackward: {
      std::vector<int> in = op.inputs;
      in[1] = reluGradIn[op.id];  // the relu's gradient replaces the batch norm's dy
      return in;
    }
    default:
      return op.inputs;
  }
}

std::vector<int> HostFusionPlan::outputsOf(const Op& op) const {
  switch (role[op.id]) {
    case Role::kAbsorbed:
      return {};
    case Role::kBatchNormRelu: {
      std::vector<int> out = op.outputs;
      out[0] = reluOut[op.id];
      return out;
    }
    case Role::kAddRelu:
      return {reluOut[op.id]};
    default:
      return op.outputs;
  }
}

HostFusionPlan planHostFusions(const Graph& g) {
  const size_t nOps = g.ops().size(), nTensors = g.tensors().size();
  HostFusionPlan p;
  p.role.assign(nOps, HostFusionPlan::Role::kNone);
  p.reluOut.assign(nOps, -1);
  p.reluGradIn.assign(nOps, -1);
  p.forwardOp.assign(nOps, -1);
  p.elided.assign(nTensors, false);

  const auto consumers = g.consumers();
  std::vector<bool> output(nTensors, false);
  for (int t : g.outputs()) output[static_cast<size_t>(t)] = true;
  auto f32 = [&](const Op& op) {
    auto isF32 = [&](int t) { return g.tensor(t).dtype == DType::F32; };
    return std::all_of(op.inputs.begin(), op.inputs.end(), isF32) &&
           std::all_of(op.outputs.begin(), op.outputs.end(), isF32);
  };
  // The single op that reads activation `t` (and nothing else does), or nullptr.
  auto soleReader = [&](int t) -> const Op* {
    const Tensor& T = g.tensor(t);
    if (T.kind != TensorKind::Activation || output[static_cast<size_t>(t)]) return nullptr;
    const auto& c = consumers[static_cast<size_t>(t)];
    if (c.size() != 1) return nullptr;
    return &g.op(c[0]);
  };
  using Role = HostFusionPlan::Role;
  auto fuseRelu = [&](const Op& producer, Role role) {
    const int between = producer.outputs[0];
    const Op* relu = soleReader(between);
    if (!relu || !isFn(*relu, OpKind::Unary, "relu") || !f32(*relu)) return;
    p.role[producer.id] = role;
    p.reluOut[producer.id] = relu->outputs[0];
    p.role[relu->id] = Role::kAbsorbed;
    p.elided[static_cast<size_t>(between)] = true;
    ++p.absorbedOps;
  };

  for (const Op& op : g.ops()) {  // producers come before consumers
    if (!f32(op)) continue;
    if (op.kind == OpKind::BatchNormTrain || op.kind == OpKind::BatchNormInference) {
      fuseRelu(op, Role::kBatchNormRelu);
    } else if (isFn(op, OpKind::Binary, "add")) {
      const Shape& y = g.tensor(op.outputs[0]).shape;
      if (g.tensor(op.inputs[0]).shape == y && g.tensor(op.inputs[1]).shape == y)
        fuseRelu(op, Role::kAddRelu);
    } else if (op.kind == OpKind::BatchNormBackward) {
      // relu_grad(relu output, g) -> dy -> batch_norm_backward(x, dy, gamma, mean, var) whose
      // forward is a fused batch norm + relu over the same x: the mask is in its workspace.
      const int dy = op.inputs[1];
      const int fwd = g.tensor(op.inputs[3]).producer;
      const int reluGrad = g.tensor(dy).producer;
      if (fwd < 0 || reluGrad < 0 || p.role[static_cast<size_t>(fwd)] != Role::kBatchNormRelu ||
          g.op(fwd).kind != OpKind::BatchNormTrain)
        continue;
      const Op& forward = g.op(fwd);
      const Op& grad = g.op(reluGrad);
      if (soleReader(dy) != &op || !isFn(grad, OpKind::UnaryGrad, "relu") || !f32(grad) ||
          grad.inputs[0] != p.reluOut[static_cast<size_t>(fwd)] ||
          forward.inputs[0] != op.inputs[0] || forward.outputs[2] != op.inputs[4])
        continue;
      p.role[op.id] = Role::kBatchNormReluBackward;
      p.reluGradIn[op.id] = grad.inputs[1];
      p.forwardOp[op.id] = fwd;
      p.role[grad.id] = Role::kAbsorbed;
      p.elided[static_cast<size_t>(dy)] = true;
      ++p.absorbedOps;
    }
  }
  return p;
}

}  // namespace ipu
