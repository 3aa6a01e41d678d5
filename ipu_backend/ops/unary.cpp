// unary: an elementwise function of one tensor, and its gradient.
//   unary(x [...]) -> y [...] = fn(x)   fn: identity, relu, neg, exp, log, sqrt, rsqrt, square,
//                                       sigmoid, tanh, gelu (tanh form), swish, scale (alpha x)
//   unary_grad(x, dy [...]) -> dx = dy * fn'(x); for relu x is the forward's output (y > 0
//   exactly where x > 0), so the forward's input need not stay live for the backward.
// The element functions are kernels/elementwise_math.h's, shared by the tile vertices, the fused
// loops and the 16-bit chunk path.
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace fz = kernels::fused;
namespace ref = kernels::ref;

// Vector instructions per vector of a transcendental (exp, log, sqrt, sigmoid, tanh, gelu, ...).
// The tile has no single-instruction exp for vectors; poplibs' estimates for these unary ops are
// several times a simple op. An estimate.
constexpr double kTranscendentalInstructions = 8;

struct Fn {
  kernels::UnaryKind kind;
  float alpha;
};
Fn fnOf(const Op& op) {
  return {unaryKindOf(op), static_cast<float>(op.attrs.getFloat("alpha", 1.0))};
}

double instructions(const Op& op) {
  using U = kernels::UnaryKind;
  const U u = unaryKindOf(op);
  const bool simple =
      u == U::Identity || u == U::Relu || u == U::Neg || u == U::Square || u == U::Scale;
  return simple ? 1.0 : kTranscendentalInstructions;
}

std::vector<AttrSpec> attrSpecs() {
  return {{"fn", AttrType::String, true}, {"alpha", AttrType::Float, false}};
}

}  // namespace

IPU_REGISTER_OPS(unary) {
  OpInfo f;
  f.def = {OpKind::Unary, "unary", 1, 1, {}, attrSpecs()};
  f.doc = "x [...] -> fn(x) [...] (relu, exp, sigmoid, scale by alpha, ...)";
  f.inputDTypes = {floatTypes()};
  f.infer = [](const std::vector<const Tensor*>& in, const Attrs& a, const std::string& label) {
    expectFunction(a, unaryFunctionNames(), label);
    return std::vector<TensorType>{{in[0]->shape, in[0]->dtype}};
  };
  f.grad = [](const GradArgs& a) {
    if (!a.needs[0]) return;
    // ReLU's derivative reads its output (y > 0 exactly when x > 0), so that the input
    // (typically a batch-norm or residual-add output) need not stay live for the backward.
    const int x = a.op.attrs.getString("fn") == "relu" ? a.op.outputs[0] : a.op.inputs[0];
    a.accumulate(a.op.inputs[0], a.g.addOp1(OpKind::UnaryGrad, {x, a.dy[0]}, a.op.attrs));
  };
  f.plan = planElementwise;
  f.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [fn = fnOf(a.op), x = a.in[0], y = a.out[0], work = a.work] {
      ref::unary(fn.kind, fn.alpha, x, y, work);
    };
  };
  f.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [fn = fnOf(a.op), x = a.in[0], y = a.out[0],
            n = a.g.tensor(a.op.outputs[0]).elements()] { fz::unary(fn.kind, fn.alpha, x, y, n); };
  };
  f.halfChunk = [](const Graph&, const Op& op) -> ElementChunk {
    return [fn = fnOf(op)](const FW* w, float* y, Range r) {
      fz::unaryChunk(fn.kind, fn.alpha, w[0].data, y, r.size());
    };
  };
  f.cost = [](const Op& op, int) { return instructions(op); };
  f.costTraits.elementwise = true;
  registerOp(std::move(f));

  OpInfo b;
  b.def = {OpKind::UnaryGrad, "unary_grad", 2, 1, {}, attrSpecs()};
  b.doc = "x (relu: y), dy [...] -> dy * fn'(x)";
  b.inputDTypes = {floatTypes(), floatTypes()};
  b.infer = [](const std::vector<const Tensor*>& in, const Attrs& a, const std::string& label) {
    expectFunction(a, unaryFunctionNames(), label);
    expectSameShape(*in[0], *in[1], label);
    return std::vector<TensorType>{{in[0]->shape, in[0]->dtype}};
  };
  b.grad = noGradient("it is a backward op");
  b.plan = planElementwise;
  b.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [fn = fnOf(a.op), x = a.in[0], dy = a.in[1], y = a.out[0], work = a.work] {
      ref::unaryGrad(fn.kind, fn.alpha, x, dy, y, work);
    };
  };
  b.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [fn = fnOf(a.op), x = a.in[0], dy = a.in[1], dx = a.out[0],
            n = a.g.tensor(a.op.outputs[0]).elements()] {
      fz::unaryGrad(fn.kind, fn.alpha, x, dy, dx, n);
    };
  };
  b.halfChunk = [](const Graph&, const Op& op) -> ElementChunk {
    return [fn = fnOf(op)](const FW* w, float* y, Range r) {
      fz::unaryGradChunk(fn.kind, fn.alpha, w[0].data, w[1].data, y, r.size());
    };
  };
  b.cost = [](const Op& op, int) { return 2 * instructions(op); };
  b.costTraits.elementwise = true;
  registerOp(std::move(b));
}

}  // namespace ipu::ops
