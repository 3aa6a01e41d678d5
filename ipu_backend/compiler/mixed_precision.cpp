#include "ipu_backend/compiler/mixed_precision.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu {
namespace {

PrecisionRule ruleOf(OpKind k) {
  return opDef(k).precision;
}

// Whether input i of op kind k takes dtype dt: a registered op's inputDTypes say (layer_norm's
// gamma and beta, masked_lm_loss's weights are f32 only); the switch-handled kinds take any.
bool accepts(OpKind k, size_t i, DType dt) {
  const ops::OpInfo* info = ops::find(k);
  if (!info || (info->def.numInputs >= 0 && i >= info->inputDTypes.size())) return true;
  const ops::DTypes& ok = ops::inputDTypesOf(*info, i);
  return std::find(ok.begin(), ok.end(), dt) != ok.end();
}

// Variables that hold parameters or statistics of DataInCompute ops (batch norm), the state of
// FollowState ops (ema_update), or feed an input that takes f32 only (layer-norm parameters):
// kept f32.
std::vector<bool> keptF32Variables(const Graph& g) {
  std::vector<bool> keep(g.tensors().size(), false);
  for (const Op& op : g.ops()) {
    if (ruleOf(op.kind) == PrecisionRule::DataInCompute)
      for (size_t i = 1; i < op.inputs.size(); ++i) keep[op.inputs[i]] = true;
    if (ruleOf(op.kind) == PrecisionRule::FollowState) keep[op.inputs[0]] = true;
    for (size_t i = 0; i < op.inputs.size(); ++i)
      if (g.tensor(op.inputs[i]).kind == TensorKind::Variable && !accepts(op.kind, i, DType::F16) &&
          accepts(op.kind, i, DType::F32))
        keep[op.inputs[i]] = true;
  }
  return keep;
}

}  // namespace

PrecisionRewrite applyPrecision(const Graph& old, const precision::PrecisionPolicy& policy) {
  PrecisionRewrite r{Graph(old.name()), std::vector<int>(old.tensors().size(), -1)};
  Graph& g = r.graph;
  Builder b(g);
  const DType compute = policy.compute;
  const std::vector<bool> keepVar = keptF32Variables(old);

  for (const Tensor& t : old.tensors()) {
    if (t.kind == TensorKind::Input) {
      r.tensorMap[t.id] = g.addInput(t.name, t.shape, t.dtype);
    } else if (t.kind == TensorKind::Variable) {
      DType dt = isFloat(t.dtype) && !keepVar[t.id] ? policy.masterWeights : t.dtype;
      r.tensorMap[t.id] = g.addVariable(t.name, t.shape, dt);
    }
  }
  // One cast per (tensor, dtype), shared by all consumers.
  std::map<std::pair<int, DType>, int> casts;
  auto castTo = [&](int t, DType dt) {
    if (g.tensor(t).dtype == dt || !isFloat(g.tensor(t).dtype)) return t;
    auto key = std::make_pair(t, dt);
    if (auto it = casts.find(key); it != casts.end()) return it->second;
    int c = b.cast(t, dt, g.uniqueName(fmt::format("{}/{}", g.tensor(t).name, dtypeName(dt))));
    casts[key] = c;
    return c;
  };

  for (const Op& op : old.ops()) {
    const std::string label = fmt::format("precision pass: {} '{}'", opName(op.kind),
                                          op.outputs.empty() ? "" : old.tensor(op.outputs[0]).name);
    const PrecisionRule rule = policy.isMixed() ? ruleOf(op.kind) : PrecisionRule::KeepF32;
    // ema_update (FollowState) is the one op with side effects a forward graph may hold.
    if (hasSideEffects(op.kind) && ruleOf(op.kind) != PrecisionRule::FollowState)
      throw GraphError(label +
                       ": run the precision pass on the forward graph, before autodiff "
                       "and the optimizer update");
    if (op.kind == OpKind::Cast) throw GraphError(label + ": the graph already has casts");
    std::vector<int> in;
    for (int t : op.inputs) in.push_back(r.map(t));
    Attrs attrs = op.attrs;
    if (ruleOf(op.kind) == PrecisionRule::FollowState) {
      in[1] = castTo(in[1], g.tensor(in[0]).dtype);
    } else if (rule == PrecisionRule::KeepF32) {
      for (int& t : in) t = castTo(t, DType::F32);
    } else if (rule == PrecisionRule::DataInCompute) {
      in[0] = castTo(in[0], compute);  // parameters and statistics stay f32 (see the header)
    } else {
      // Graph inputs and weights enter the compute dtype; activations keep theirs unless the
      // operands of one op disagree. Inputs that do not take the compute dtype (a registered
      // op's f32-only inputs) are f32.
      std::vector<DType> seen;
      for (size_t i = 0; i < in.size(); ++i) {
        const Tensor& src = old.tensor(op.inputs[i]);
        const bool follows = accepts(op.kind, i, compute);
        if (src.kind != TensorKind::Activation)
          in[i] = castTo(in[i], follows ? compute : DType::F32);
        if (follows && isFloat(g.tensor(in[i]).dtype)) seen.push_back(g.tensor(in[i]).dtype);
      }
      bool mixed =
          std::adjacent_find(seen.begin(), seen.end(), std::not_equal_to<>()) != seen.end();
      for (size_t i = 0; i < in.size(); ++i)
        if (mixed && accepts(op.kind, i, compute))
          in[i] = castTo(in[i], compute);
        else if (!accepts(op.kind, i, g.tensor(in[i]).dtype))
          in[i] = castTo(in[i], DType::F32);
    }
    if (opDef(op.kind).usesPartials && compute != DType::F32)
      attrs.set("partials", std::string(dtypeName(policy.partials)));
    std::vector<std::string> names;  // outputs keep their names
    for (int o : op.outputs) names.push_back(old.tensor(o).name);
    int id = g.addOp(op.kind, in, attrs, names);
    const std::vector<int> outs = g.op(id).outputs;
    for (size_t k = 0; k < outs.size(); ++k) r.tensorMap[op.outputs[k]] = outs[k];
  }
  for (int o : old.outputs()) {
    int t = r.map(o);
    if (g.tensor(t).dtype != DType::F32 && isFloat(g.tensor(t).dtype)) t = castTo(t, DType::F32);
    r.tensorMap[o] = t;
    g.markOutput(t);
  }
  return r;
}

TrainingStepTensors appendTrainingStep(Graph& g, int loss, const std::vector<int>& params, int lr,
                                       SgdOptions sgd, const precision::PrecisionPolicy& policy) {
  TrainingStepTensors r;
  sgd.stochasticRounding = policy.stochasticRounding;
  if (policy.lossScaling.mode == precision::LossScalingMode::None) {
    r.grads = appendBackward(g, loss, params).grads;
    r.optimizer = appendSgdUpdate(g, r.grads, lr, sgd);
    return r;
  }
  r.lossScale = g.addInput("loss_scale", {});
  r.lossScaleInverse = g.addInput("loss_scale_inverse", {});
  r.grads = appendBackwardSeeded(g, loss, params, r.lossScale).grads;
  Builder b(g);
  int flag = -1;
  for (const auto& [param, grad] : r.grads) {
    const Shape s = g.tensor(grad).shape;  // copy: adding ops may reallocate
    std::vector<i64> axes(s.size());
    std::iota(axes.begin(), axes.end(), 0);
    int zeroed = b.scale(grad, 0.0);  // 0, or NaN where grad is Inf/NaN
    int sum = axes.empty() ? zeroed : b.reduceSum(zeroed, axes);
    sum = b.cast(sum, DType::F32);
    if (g.tensor(sum).shape != Shape{}) sum = b.reshape(sum, {});
    flag = flag < 0 ? sum : b.add(flag, sum);
  }
  if (flag < 0) throw GraphError("appendTrainingStep: the loss depends on no parameter");
  r.overflow = b.unary("identity", flag, "loss_scaling/overflow");
  g.markOutput(r.overflow);
  sgd.lossScaling = {r.lossScaleInverse, r.overflow};
  r.optimizer = appendSgdUpdate(g, r.grads, lr, sgd);
  return r;
}

}  // namespace ipu
