// broadcast: numpy broadcasting of a tensor to a larger shape.
//   broadcast(x) -> y [shape], y = x repeated along the dimensions where x has 1 (or none)
// Gradient: dy summed over those dimensions. The kernels are the binary kernels' add of an
// implicit zero (b strides 0), so both modes index the broadcast one way.
#include <fmt/format.h>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

const float kZero = 0.0f;

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  const Shape& target = a.getInts("shape");
  if (broadcastShapes(in[0]->shape, target, label) != target)
    fail(label, fmt::format("'{}' {} does not broadcast to {}", in[0]->name, shapeStr(in[0]->shape),
                            shapeStr(target)));
  return {{target, in[0]->dtype}};
}

// y = x + 0, the zero broadcast everywhere.
kernels::BroadcastShape shapeOf(const Graph& g, const Op& op) {
  auto s =
      kernels::BroadcastShape::make(g.tensor(op.inputs[0]).shape, g.tensor(op.outputs[0]).shape);
  for (int d = 0; d < s.rank; ++d) s.bStrides[d] = 0;
  return s;
}

}  // namespace

IPU_REGISTER_OPS(broadcast) {
  OpInfo b;
  b.def = {OpKind::Broadcast, "broadcast", 1, 1, {}, {{"shape", AttrType::Ints, true}}};
  b.doc = "x -> x broadcast (numpy rules) to [shape]";
  b.inputDTypes = {floatTypes()};
  b.infer = infer;
  b.grad = [](const GradArgs& a) {
    if (a.needs[0])
      a.accumulate(a.op.inputs[0], reduceToShape(a.b, a.dy[0], a.g.tensor(a.op.inputs[0]).shape));
  };
  b.plan = [](PlanApi& p, const Op& op) {
    const auto s = shapeOf(p.graph(), op);
    const i64 n = p.graph().tensor(op.inputs[0]).elements();
    p.perSlice(op, 0, {op.outputs[0]}, [s, n, x = op.inputs[0]](Range r) {
      const Range w = broadcastBounds(s, s.aStrides, r, n);
      return Windows{{x, w.begin, w.end}};
    });
  };
  b.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [s = shapeOf(a.g, a.op), x = a.in[0], y = a.out[0], r = a.work] {
      kernels::ref::binary(kernels::BinaryKind::Add, s, x, FW{&kZero, 0, 1}, y, r);
    };
  };
  b.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [s = shapeOf(a.g, a.op), x = a.in[0], y = a.out[0]] {
      kernels::fused::binary(kernels::BinaryKind::Add, s, x, &kZero, y);
    };
  };
  b.cost = [](const Op&, int) { return 1.0; };  // a copy per output vector
  b.tolerances.f32 = {0, 0, 2e-2};
  registerOp(std::move(b));
}

}  // namespace ipu::ops
