// gelu: the Gaussian error linear unit, in the erf form (approximate = "none", PyTorch's
// default) or the tanh form (approximate = "tanh", which the MLPerf BERT reference uses).
//   gelu(x [...]) -> y [...]:  erf:  y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
//                              tanh: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   gelu_grad(x, dy) -> dx = dy * dy/dx of the same form.
#include <cmath>

#include <fmt/format.h>

#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

bool tanhForm(const Op& op) {
  return op.attrs.has("approximate") && op.attrs.getString("approximate") == "tanh";
}

double gelu(double x, bool tanhF) {
  if (tanhF) return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x)));
  return 0.5 * x * (1 + std::erf(x * kInvSqrt2));
}

double geluDerivative(double x, bool tanhF) {
  if (tanhF) {
    const double t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kCubic * x * x);
  }
  return 0.5 * (1 + std::erf(x * kInvSqrt2)) + x * std::exp(-0.5 * x * x) * kInvSqrt2Pi;
}

std::vector<TensorType> infer(const std::vector<const Tensor*>& in, const Attrs& a,
                              const std::string& label) {
  if (a.has("approximate") && a.getString("approximate") != "tanh" &&
      a.getString("approximate") != "none")
    fail(label, fmt::format("approximate=\"{}\" (valid: none, tanh)", a.getString("approximate")));
  for (size_t i = 1; i < in.size(); ++i) expectSameShape(*in[0], *in[i], label);
  return {{in[0]->shape, in.back()->dtype}};
}

ElementFn forward(const Op& op) {
  return [t = tanhForm(op)](const float* v, i64) { return static_cast<float>(gelu(v[0], t)); };
}

ElementFn backward(const Op& op) {
  return [t = tanhForm(op)](const float* v, i64) {
    return static_cast<float>(v[1] * geluDerivative(v[0], t));
  };
}

// Fused mode: the tanh form through oneDNN's gelu_tanh primitives (vectorised; the element
// function above evaluates tanh in double one element at a time); the erf form through that.
FusedKernel fusedKernel(bool backwardOp) {
  return [backwardOp](const FusedArgs& a) -> std::function<void()> {
    if (!tanhForm(a.op)) return elementwiseFused(backwardOp ? backward : forward)(a);
    const i64 n = a.g.tensor(a.op.outputs[0]).elements();
    auto k = std::make_shared<kernels::fused::GeluTanh>(n);
    const float *x = a.in[0], *dy = backwardOp ? a.in[1] : nullptr;
    float* y = a.out[0];
    if (backwardOp) return [k, x, dy, y] { k->backward(x, dy, y); };
    return [k, x, y] { k->forward(x, y); };
  };
}

std::vector<AttrSpec> attrSpecs() {
  return {{"approximate", AttrType::String, false}};
}

}  // namespace

IPU_REGISTER_OPS(gelu) {
  OpInfo f;
  f.def = {kUnassignedKind, "gelu", 1, 1, {}, attrSpecs()};
  f.doc = "x [...] -> gelu(x), erf form or (approximate=tanh) BERT's tanh form";
  f.inputDTypes = {floatTypes()};
  f.infer = infer;
  f.grad = [](const GradArgs& a) {
    if (a.needs[0])
      a.accumulate(a.op.inputs[0], add(a.g, "gelu_grad", {a.op.inputs[0], a.dy[0]}, a.op.attrs)[0]);
  };
  f.plan = planElementwise;
  f.vertex = elementwiseVertex(forward);
  f.fused = fusedKernel(false);
  f.cost = [](const Op&, int) { return 12.0; };  // a transcendental (erf or tanh) and 4 flops
  registerOp(std::move(f));

  OpInfo b;
  b.def = {kUnassignedKind, "gelu_grad", 2, 1, {}, attrSpecs()};
  b.doc = "x, dy [...] -> dy * gelu'(x)";
  b.inputDTypes = {floatTypes(), floatTypes()};
  b.infer = infer;
  b.grad = noGradient("it is a backward op");
  b.plan = planElementwise;
  b.vertex = elementwiseVertex(backward);
  b.fused = fusedKernel(true);
  b.cost = [](const Op&, int) { return 20.0; };
  registerOp(std::move(b));
}

}  // namespace ipu::ops
