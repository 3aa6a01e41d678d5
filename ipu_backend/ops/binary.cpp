// binary: an elementwise function of two tensors of one dtype, with NumPy broadcasting.
//   binary(a, b) -> y [broadcast shape of a and b] = fn(a, b)   fn: add, sub, mul, div, max, min
// The add of the residual add + ReLU and the batch-norm adds run as host fusions in fused mode
// (engine/host_fusion.h), whose kernels belong to the fusion plan, not to this file.
#include <fmt/format.h>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/engine/host_fusion.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace fz = kernels::fused;
namespace ref = kernels::ref;

// Division: a reciprocal estimate plus a Newton step. An estimate.
constexpr double kDivideInstructions = 4;
// Kernels index operands of rank <= 6 (kernels::BroadcastShape).
constexpr size_t kMaxRank = 6;

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  expectFunction(a, binaryFunctionNames(), label);
  if (in[0]->dtype != in[1]->dtype)
    fail(label, fmt::format("dtypes of '{}' ({}) and '{}' ({}) differ", in[0]->name,
                            dtypeName(in[0]->dtype), in[1]->name, dtypeName(in[1]->dtype)));
  if (in[0]->shape.size() > kMaxRank || in[1]->shape.size() > kMaxRank)
    fail(label, "rank must be <= 6");
  return {{broadcastShapes(in[0]->shape, in[1]->shape, label), in[0]->dtype}};
}

// d(a fn b): summed back to each operand's shape over its broadcast dimensions.
void gradient(const GradArgs& a) {
  Builder& b = a.b;
  const int x = a.op.inputs[0], z = a.op.inputs[1], dy = a.dy[0];
  const std::string& fn = a.op.attrs.getString("fn");
  const Shape sa = a.g.tensor(x).shape, sb = a.g.tensor(z).shape;
  if (fn == "add" || fn == "sub") {
    if (a.needs[0]) a.accumulate(x, reduceToShape(b, dy, sa));
    if (a.needs[1]) {
      int d = reduceToShape(b, dy, sb);
      a.accumulate(z, fn == "sub" ? b.unary("neg", d) : d);
    }
  } else if (fn == "mul") {
    if (a.needs[0]) a.accumulate(x, reduceToShape(b, b.mul(dy, z), sa));
    if (a.needs[1]) a.accumulate(z, reduceToShape(b, b.mul(dy, x), sb));
  } else if (fn == "div") {
    if (a.needs[0]) a.accumulate(x, reduceToShape(b, b.binary("div", dy, z), sa));
    if (a.needs[1]) {
      // d(a/b)/db = -(a/b)/b = -y/b
      int t = b.binary("div", b.mul(dy, a.op.outputs[0]), z);
      a.accumulate(z, reduceToShape(b, b.unary("neg", t), sb));
    }
  } else {
    noGradient("binary max/min are not differentiable here yet")(a);
  }
}

}  // namespace

IPU_REGISTER_OPS(binary) {
  OpInfo f;
  f.def = {OpKind::Binary, "binary", 2, 1, {}, {{"fn", AttrType::String, true}}};
  f.doc = "a, b (broadcasting, rank <= 6) -> fn(a, b): add, sub, mul, div, max, min";
  f.inputDTypes = {floatTypes(), floatTypes()};
  f.infer = infer;
  f.grad = gradient;
  // A vertex per slice of y reading the bounding boxes of its elements in a and b.
  f.plan = [](PlanApi& p, const Op& op) {
    const auto bs = binaryShapeOf(p.graph(), op);
    const int a = op.inputs[0], b = op.inputs[1];
    const i64 na = p.graph().tensor(a).elements(), nb = p.graph().tensor(b).elements();
    p.perSlice(op, 0, {op.outputs[0]}, [=](Range r) {
      const Range ra = broadcastBounds(bs, bs.aStrides, r, na);
      const Range rb = broadcastBounds(bs, bs.bStrides, r, nb);
      return Windows{{a, ra.begin, ra.end}, {b, rb.begin, rb.end}};
    });
  };
  f.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [k = binaryKindOf(a.op), bs = binaryShapeOf(a.g, a.op), x = a.in[0], z = a.in[1],
            y = a.out[0], work = a.work] { ref::binary(k, bs, x, z, y, work); };
  };
  f.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [k = binaryKindOf(a.op), bs = binaryShapeOf(a.g, a.op), x = a.in[0], z = a.in[1],
            y = a.out[0]] { fz::binary(k, bs, x, z, y); };
  };
  // bf16 with broadcasting (EfficientNet's squeeze-excitation scale and its gradient): widened
  // and rounded a block at a time; same-shaped operands take the halfChunk path below.
  f.nativeFused = [](const NativeFusedArgs& a) -> std::function<void()> {
    const Op& op = a.op;
    if (a.fusion.role[static_cast<size_t>(op.id)] != HostFusionPlan::Role::kNone ||
        !allOperandsAre(a.g, op, DType::BF16) || op.attrs.getBool("stochastic_rounding", false) ||
        (a.g.tensor(op.inputs[0]).shape == a.g.tensor(op.inputs[1]).shape))
      return {};
    return [k = binaryKindOf(op), bs = binaryShapeOf(a.g, op),
            x = static_cast<const std::uint16_t*>(a.in[0]),
            z = static_cast<const std::uint16_t*>(a.in[1]),
            y = static_cast<std::uint16_t*>(a.out[0])] { fz::binaryBf16(k, bs, x, z, y); };
  };
  // Same-shaped operands only (the engine checks): no broadcast indexing.
  f.halfChunk = [](const Graph&, const Op& op) -> ElementChunk {
    return [k = binaryKindOf(op)](const FW* w, float* y, Range r) {
      fz::binaryChunk(k, w[0].data, w[1].data, y, r.size());
    };
  };
  f.cost = [](const Op& op, int) {
    return binaryKindOf(op) == kernels::BinaryKind::Div ? kDivideInstructions : 1.0;
  };
  f.costTraits.elementwise = true;
  registerOp(std::move(f));
}

}  // namespace ipu::ops
