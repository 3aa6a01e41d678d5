// ema_update: an exponential moving average kept in a variable (batch norm's running mean and
// variance), updated in place.
//   ema_update(running, value) : running = momentum * running + (1 - momentum) * scale * value
//   (same shape; `scale` defaults to 1: the unbiasing factor of a running variance)
// Under a 16-bit policy the value follows the running state's dtype (PrecisionRule::FollowState).
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

struct Params {
  float momentum, scale;
};

Params paramsOf(const Op& op) {
  return {static_cast<float>(op.attrs.getFloat("momentum")),
          static_cast<float>(op.attrs.getFloat("scale", 1.0))};
}

}  // namespace

IPU_REGISTER_OPS(ema_update) {
  OpInfo e;
  e.def = {OpKind::EmaUpdate,
           "ema_update",
           2,
           0,
           {0},
           {{"momentum", AttrType::Float, true}, {"scale", AttrType::Float, false}},
           PrecisionRule::FollowState};
  e.doc = "running, value (same shape): running = m running + (1 - m) scale value";
  e.inputDTypes = {floatTypes(), floatTypes()};
  e.infer = [](const std::vector<const Tensor*>& in, const Attrs&, const std::string& label) {
    expectSameShape(*in[0], *in[1], label);
    return std::vector<TensorType>{};
  };
  e.grad = noGradient("it is an update op");
  // A vertex per slice of the running state, reading the same range of the value.
  e.plan = [](PlanApi& p, const Op& op) {
    p.perSlice(op, 0, {op.inputs[0]}, [value = op.inputs[1]](Range r) {
      return Windows{{value, r.begin, r.end}};
    });
  };
  e.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [k = paramsOf(a.op), running = a.out[0], value = a.in[0].data, n = a.work.size()] {
      kernels::ref::emaUpdate(k.momentum, k.scale, running, value, n);
    };
  };
  e.fused = [](const FusedArgs& a) -> std::function<void()> {
    return [k = paramsOf(a.op), running = a.in[0], value = a.in[1],
            n = a.g.tensor(a.op.inputs[0]).elements()] {
      kernels::fused::emaUpdate(k.momentum, k.scale, running, value, n);
    };
  };
  e.cost = [](const Op&, int) { return 2.0; };  // a multiply and a multiply-add
  e.costTraits.readModifyWrite = true;
  e.costTraits.elementwise = true;
  registerOp(std::move(e));
}

}  // namespace ipu::ops
