// cast: a float tensor converted to another float dtype.
//   cast(x [...]) -> y [...] of dtype `dtype` (f32, f16, bf16), rounded to nearest even
// The kernels copy f32 values; the engine's conversions around the op (16-bit operands widened
// before, results rounded after) do the rounding, the same in both modes.
#include <cstring>

#include <fmt/format.h>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {

IPU_REGISTER_OPS(cast) {
  OpInfo c;
  c.def = {OpKind::Cast, "cast", 1, 1, {}, {{"dtype", AttrType::String, true}}};
  c.doc = "x [...] -> x in dtype `dtype` (f32, f16, bf16), rounded to nearest even";
  c.inputDTypes = {floatTypes()};
  c.infer = [](const std::vector<const Tensor*>& in, const Attrs& a, const std::string& label) {
    auto dt = parseDType(a.getString("dtype"));
    if (!dt || !isFloat(*dt))
      fail(label, fmt::format("cast of '{}' to unknown or non-float dtype '{}' (valid: f32, "
                              "f16, bf16)",
                              in[0]->name, a.getString("dtype")));
    return std::vector<TensorType>{{in[0]->shape, *dt}};
  };
  // The gradient is cast back to the input's dtype.
  c.grad = [](const GradArgs& a) {
    a.accumulate(a.op.inputs[0], a.b.cast(a.dy[0], a.g.tensor(a.op.inputs[0]).dtype));
  };
  c.plan = planElementwise;
  c.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [x = a.in[0], y = a.out[0], work = a.work] {
      for (i64 i = work.begin; i < work.end; ++i) y[i - work.begin] = x[i];
    };
  };
  c.fused = [](const FusedArgs& a) -> std::function<void()> {
    const size_t n = static_cast<size_t>(a.g.tensor(a.op.outputs[0]).elements());
    return [x = a.in[0], y = a.out[0], n] { std::memcpy(y, x, n * sizeof(float)); };
  };
  c.halfChunk = [](const Graph&, const Op&) -> ElementChunk {
    return [](const FW* w, float* y, Range r) {
      std::memcpy(y, w[0].data, static_cast<size_t>(r.size()) * sizeof(float));
    };
  };
  c.cost = [](const Op&, int) { return 1.0; };  // a copy
  registerOp(std::move(c));
}

}  // namespace ipu::ops
