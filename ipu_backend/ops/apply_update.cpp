// apply_update: the in-place write of every optimizer (ipu_backend/optimizers lower each one to
// ordinary ops and apply_updates).
//   apply_update(target, x1[, x2[, x3]][, factor][, skip]):
//     target = keep target + factor (c1 x1 + c2 x2 + c3 x3)   (x_i the target's shape)
//   unless the skip flag (an f32 scalar) is nonzero: NaN, a loss-scaled step that overflowed,
//   is nonzero too. `addends` (default 1) x's; with `factor` an f32 scalar input after them
//   multiplies the sum (a learning rate).
// Loss-scale unscaling and skip-on-overflow wrap any optimizer through these inputs
// (optimizers/lowering.cpp), and a sharded update is this op on a replica's chunk: neither is a
// kind of its own.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "ipu_backend/kernels/apply_update.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  const i64 k = a.getInt("addends", 1);
  const bool factor = a.getBool("factor", false);
  const size_t fixed = 1 + static_cast<size_t>(k) + (factor ? 1 : 0);
  if (k < 1 || k > 3 || (in.size() != fixed && in.size() != fixed + 1))
    fail(label, fmt::format("expects the target, {} addends{} and an optional skip flag ({} "
                            "or {} inputs; addends 1 to 3), got {}",
                            k, factor ? ", the factor" : "", fixed, fixed + 1, in.size()));
  for (size_t i = 1; i <= static_cast<size_t>(k); ++i) expectSameShape(*in[0], *in[i], label);
  for (size_t i = static_cast<size_t>(k) + 1; i < in.size(); ++i)
    if (in[i]->elements() != 1 || in[i]->dtype != DType::F32)
      fail(label, fmt::format("'{}' {}{} must be an f32 scalar (factor, skip flag)", in[i]->name,
                              dtypeName(in[i]->dtype), shapeStr(in[i]->shape)));
  return {};
}

}  // namespace

IPU_REGISTER_OPS(apply_update) {
  OpInfo u;
  u.def = {OpKind::ApplyUpdate,
           "apply_update",
           -1,
           0,
           {0},
           {{"addends", AttrType::Int, false},
            {"keep", AttrType::Float, false},
            {"c1", AttrType::Float, false},
            {"c2", AttrType::Float, false},
            {"c3", AttrType::Float, false},
            {"factor", AttrType::Bool, false},
            {"stochastic_rounding", AttrType::Bool, false}}};
  u.doc =
      "target, x1..x3 [, factor][, skip]: target = keep target + factor sum c_i x_i "
      "unless skip != 0";
  u.inputDTypes = {floatTypes()};
  u.infer = infer;
  u.grad = noGradient("it is an update op");
  // A vertex per slice of the target reading the addends' same slices and the scalars whole.
  u.plan = [](PlanApi& p, const Op& op) {
    const ApplyUpdateForm form = applyUpdateForm(op);
    p.perSlice(op, 0, {op.inputs[0]}, [&p, &op, form](Range r) {
      Windows need;
      for (int i = 1; i <= form.k; ++i) need.push_back({op.inputs[i], r.begin, r.end});
      for (size_t i = static_cast<size_t>(form.k) + 1; i < op.inputs.size(); ++i)
        need.push_back(p.whole(op.inputs[i]));
      return need;
    });
  };
  // Windows: the addends[, factor][, skip flag]; out[0]: the target's slice.
  u.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [form = applyUpdateForm(a.op), W = a.in, y = a.out[0], n = a.work.size()] {
      if (form.skipInput >= 0 && W[form.skipInput - 1][0] != 0.0f) return;
      std::array<const float*, 3> x{};
      for (int i = 0; i < form.k; ++i) x[i] = W[i].data;
      const float f = form.factorInput >= 0 ? W[form.factorInput - 1][0] : 1.0f;
      kernels::applyUpdate(form.keep, f, form.k, x.data(), form.c.data(), y, n);
    };
  };
  u.fused = [](const FusedArgs& a) -> std::function<void()> {
    const ApplyUpdateForm form = applyUpdateForm(a.op);
    std::array<const float*, 3> x{};
    for (int i = 0; i < form.k; ++i) x[i] = a.in[1 + i];
    const float* factor = form.factorInput >= 0 ? a.in[form.factorInput] : nullptr;
    const float* skip = form.skipInput >= 0 ? a.in[form.skipInput] : nullptr;
    return [form, t = a.in[0], x, factor, skip, n = a.g.tensor(a.op.inputs[0]).elements()] {
      if (skip && *skip != 0.0f) return;  // NaN (overflow) is unequal too
      const float f = factor ? *factor : 1.0f;
      constexpr i64 kChunk = 16384;
#pragma omp parallel for schedule(static)
      for (i64 b = 0; b < n; b += kChunk) {
        std::array<const float*, 3> xb{};
        for (int i = 0; i < form.k; ++i) xb[i] = x[i] + b;
        kernels::applyUpdate(form.keep, f, form.k, xb.data(), form.c.data(), t + b,
                             std::min(kChunk, n - b));
      }
    };
  };
  // keep * t + f * sum of c_i x_i: a multiply-add per term.
  u.cost = [](const Op& op, int) { return static_cast<double>(op.attrs.getInt("addends", 1)) + 1; };
  u.costTraits.elementwise = true;
  u.costTraits.readModifyWriteOf = [](const Op& op) {
    return op.attrs.getFloat("keep", 0.0) != 0.0;
  };
  registerOp(std::move(u));
}

}  // namespace ipu::ops
