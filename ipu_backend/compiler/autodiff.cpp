#include "ipu_backend/compiler/autodiff.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu {

int reduceToShape(Builder& b, int dy, const Shape& target) {
  const Shape s = b.graph().tensor(dy).shape;  // copy: adding ops may reallocate tensors
  if (s == target) return dy;
  size_t lead = s.size() - target.size();
  std::vector<i64> axes;
  for (size_t d = 0; d < s.size(); ++d)
    if (d < lead || (target[d - lead] == 1 && s[d] != 1)) axes.push_back(static_cast<i64>(d));
  int r = b.reduceSum(dy, axes, /*keep=*/true);
  return b.reshape(r, target.empty() ? Shape{} : target);
}

namespace {

class GradBuilder {
 public:
  GradBuilder(Graph& g) : g_(g), b_(g) {}

  void accumulate(int t, int grad) {
    auto it = grads_.find(t);
    if (it == grads_.end()) {
      grads_[t] = grad;
    } else {
      // Consumers in different precisions (e.g. an f32-kept op and an f16 one) give gradients
      // of different dtypes: sum in the dtype of the tensor itself.
      DType dt = g_.tensor(t).dtype;
      it->second = b_.add(b_.cast(it->second, dt), b_.cast(grad, dt));
    }
  }
  int grad(int t) const {
    auto it = grads_.find(t);
    return it == grads_.end() ? -1 : it->second;
  }
  const std::map<int, int>& all() const { return grads_; }

  // Applies the gradient rule of `op` given dy for its outputs. needs[i]: input i needs a grad.
  void rule(const Op& op, const std::vector<bool>& needs) {
    const std::string label = fmt::format(
        "{} '{}'", opName(op.kind), op.outputs.empty() ? "" : g_.tensor(op.outputs[0]).name);
    const ops::OpInfo* info = ops::find(op.kind);
    if (!info)  // every kind is registered (OpRegistry.EveryOpKindHasEveryFacetAndACase)
      throw GraphError(fmt::format("autodiff: {} is not a registered op kind", label));
    std::vector<int> dys;
    for (int o : op.outputs) dys.push_back(grad(o));
    info->grad({g_, b_, op, dys, needs, [this](int t, int gr) { accumulate(t, gr); }, label});
  }

 private:
  Graph& g_;
  Builder b_;
  std::map<int, int> grads_;
};

}  // namespace

namespace {
GradientResult backwardFrom(Graph& g, int loss, const std::vector<int>& wrt,
                            const std::function<int(Builder&, const Tensor&)>& makeSeed) {
  const Tensor L = g.tensor(loss);
  if (L.elements() != 1)
    throw GraphError(fmt::format("autodiff: loss '{}' must have one element, has shape {}", L.name,
                                 shapeStr(L.shape)));
  const size_t nOpsBefore = g.ops().size();
  // Forward reachability from wrt, and backward reachability from the loss.
  std::vector<bool> fromWrt(g.tensors().size(), false), toLoss(g.tensors().size(), false);
  for (int t : wrt) fromWrt[t] = true;
  for (const Op& op : g.ops()) {
    bool any = std::any_of(op.inputs.begin(), op.inputs.end(), [&](int t) { return fromWrt[t]; });
    if (any)
      for (int o : op.outputs) fromWrt[o] = true;
  }
  toLoss[loss] = true;
  for (size_t i = nOpsBefore; i-- > 0;) {
    const Op& op = g.op(static_cast<int>(i));
    bool any = std::any_of(op.outputs.begin(), op.outputs.end(), [&](int t) { return toLoss[t]; });
    if (any)
      for (int t : op.inputs) toLoss[t] = true;
  }

  GradBuilder gb(g);
  Builder b(g);
  // Every added op records the forward op it differentiates (the seed: the loss's producer).
  auto tagSince = [&g](size_t first, int forwardTensor) {
    for (size_t o = first; o < g.ops().size(); ++o)
      g.setGradientOf(static_cast<int>(o), forwardTensor);
  };
  gb.accumulate(loss, makeSeed(b, L));
  tagSince(nOpsBefore, loss);
  for (size_t i = nOpsBefore; i-- > 0;) {
    const Op op = g.op(static_cast<int>(i));  // copy: adding ops may reallocate
    bool hasGrad =
        std::any_of(op.outputs.begin(), op.outputs.end(), [&](int t) { return gb.grad(t) >= 0; });
    if (!hasGrad) continue;
    std::vector<bool> needs(op.inputs.size());
    bool anyNeed = false;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      int t = op.inputs[k];
      needs[k] = fromWrt[t] && toLoss[t] && isFloat(g.tensor(t).dtype);
      anyNeed = anyNeed || needs[k];
    }
    if (!anyNeed) continue;
    const size_t first = g.ops().size();
    gb.rule(op, needs);
    tagSince(first, op.outputs.empty() ? op.inputs[0] : op.outputs[0]);
  }
  GradientResult r;
  for (int t : wrt)
    if (int d = gb.grad(t); d >= 0) r.grads[t] = d;
  r.opsAdded = static_cast<int>(g.ops().size() - nOpsBefore);
  return r;
}
}  // namespace

GradientResult appendBackward(Graph& g, int loss, const std::vector<int>& wrt, double seed) {
  return backwardFrom(g, loss, wrt, [&](Builder& b, const Tensor& L) {
    return b.constant(L.shape, seed, L.dtype, g.uniqueName("loss_grad_seed"));
  });
}

GradientResult appendBackwardSeeded(Graph& g, int loss, const std::vector<int>& wrt,
                                    int seedTensor) {
  const Tensor S = g.tensor(seedTensor);
  if (S.elements() != 1 || !isFloat(S.dtype))
    throw GraphError(fmt::format("autodiff: seed '{}' {}{} must be a floating-point scalar", S.name,
                                 dtypeName(S.dtype), shapeStr(S.shape)));
  return backwardFrom(g, loss, wrt, [&](Builder& b, const Tensor& L) {
    int s = b.cast(seedTensor, L.dtype);
    if (g.tensor(s).shape != L.shape) s = b.reshape(s, L.shape, g.uniqueName("loss_grad_seed"));
    return s;
  });
}

std::vector<int> trainableVariables(const Graph& g) {
  std::set<int> state, read;
  for (const Op& op : g.ops()) {
    if (op.kind == OpKind::OptimizerUpdate) {  // the weight is trainable, its state is not
      const UpdateOperands u = updateOperands(op);
      state.insert(u.state.begin(), u.state.end());
      read.insert(u.weight);
      continue;
    }
    const OpDef& d = opDef(op.kind);
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      bool written = std::find(d.writesInputs.begin(), d.writesInputs.end(), static_cast<int>(i)) !=
                     d.writesInputs.end();
      if (written) state.insert(op.inputs[i]);
      if (!written) read.insert(op.inputs[i]);
    }
  }
  std::vector<int> out;
  for (const Tensor& t : g.tensors())
    if (t.kind == TensorKind::Variable && read.count(t.id) && !state.count(t.id) &&
        isFloat(t.dtype))
      out.push_back(t.id);
  return out;
}

}  // namespace ipu
