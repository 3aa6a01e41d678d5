// Pools over NHWC windows and their gradients (attributes kernel [KH,KW], stride [2],
// pad [top, left, bottom, right]).
//   max_pool(x [N,H,W,C]) -> y [N,OH,OW,C]: each window's maximum
//   avg_pool(x) -> y: each window's mean (count_include_pad: padding counts in the divisor)
//   max_pool_grad(x, dy) -> dx: dy to each window's first maximum, recomputed from x (the IR
//     carries no argmax workspace)
//   avg_pool_grad(dy) -> dx [input_shape]: dy spread evenly over each window
// Tile plans read whole window rows: the input rows that an output slice's windows cover (the
// gradients: the output rows whose windows cover an input slice).
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/reference.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

namespace fz = kernels::fused;
namespace ref = kernels::ref;

enum class Pool { Max, Avg };

std::vector<AttrSpec> attrSpecs(bool avg, bool avgGrad) {
  std::vector<AttrSpec> a = {{"kernel", AttrType::Ints, true},
                             {"stride", AttrType::Ints, true},
                             {"pad", AttrType::Ints, true}};
  if (avg) a.push_back({"count_include_pad", AttrType::Bool, false});
  if (avgGrad) a.push_back({"input_shape", AttrType::Ints, true});
  return a;
}

// The pooled shape of x [N,H,W,C] (x: avg_pool_grad's input_shape attribute, else input 0);
// for the gradients, dy (input `dyInput`) must have it and dx is x's shape.
InferRule inferPool(bool grad, bool avgGrad, int dyInput) {
  return [=](const std::vector<const Tensor*>& in, const Attrs& a, const std::string& label) {
    const auto& k = a.getInts("kernel");
    if (k.size() != 2) fail(label, "attribute 'kernel' must have 2 values");
    const Shape xs = avgGrad ? a.getInts("input_shape") : in[0]->shape;
    if (xs.size() != 4) fail(label, fmt::format("input must be [N,H,W,C], got {}", shapeStr(xs)));
    const auto geo = windowGeometry(xs, k[0], k[1], a, label);
    const Shape ys = {xs[0], geo.oh, geo.ow, xs[3]};
    if (!grad) return std::vector<TensorType>{{ys, in[0]->dtype}};
    const Tensor& dy = *in[static_cast<size_t>(dyInput)];
    if (dy.shape != ys)
      fail(label, fmt::format("gradient '{}' {} must have the pooled shape {}", dy.name,
                              shapeStr(dy.shape), shapeStr(ys)));
    return std::vector<TensorType>{{xs, dy.dtype}};
  };
}

// Forward: a vertex per output slice reads the input rows its windows cover.
void planForward(PlanApi& p, const Op& op) {
  const auto s = poolShapeOf(p.graph(), op);
  const i64 oRowLen = s.outW() * s.c, iRowLen = s.w * s.c;
  p.perSlice(op, 0, {op.outputs[0]}, [s, oRowLen, iRowLen, x = op.inputs[0]](Range r) {
    const Range rows =
        inputRowsForOutputRows(rowsOf(r, oRowLen), s.outH(), s.h, s.strideH, s.padTop, s.kh);
    return Windows{{x, rows.begin * iRowLen, rows.end * iRowLen}};
  });
}

// Gradients: a vertex per slice of dx reads the dy rows whose windows cover it (max: and the x
// rows those windows cover, to recompute their argmax).
void planGrad(PlanApi& p, const Op& op, Pool pool) {
  const auto s = poolShapeOf(p.graph(), op);
  const i64 oRowLen = s.outW() * s.c, iRowLen = s.w * s.c;
  const bool isMax = pool == Pool::Max;
  p.perSlice(op, 0, {op.outputs[0]}, [s, oRowLen, iRowLen, isMax, in = op.inputs](Range r) {
    const Range oRows =
        outputRowsForInputRows(rowsOf(r, iRowLen), s.outH(), s.h, s.strideH, s.padTop, s.kh);
    const NeedWindow dy{in[isMax ? 1 : 0], oRows.begin * oRowLen, oRows.end * oRowLen};
    if (!isMax) return Windows{dy};
    const Range xRows = inputRowsForOutputRows(oRows, s.outH(), s.h, s.strideH, s.padTop, s.kh);
    return Windows{{in[0], xRows.begin * iRowLen, xRows.end * iRowLen}, dy};
  });
}

// Elements read per output element: the window (forward); for the gradients the windows that
// cover an input element, and for max_pool_grad x as well as dy.
std::function<double(const Graph&, const Op&)> elementsPerOutput(bool grad, Pool pool) {
  return [=](const Graph& g, const Op& op) {
    const auto s = poolShapeOf(g, op);
    const double window = static_cast<double>(s.kh * s.kw);
    if (!grad) return window;
    const double cover = window / static_cast<double>(s.strideH * s.strideW);
    return std::max(1.0, cover) * (pool == Pool::Max ? 2 : 1);
  };
}

OpInfo poolInfo(OpKind kind, const char* name, Pool pool, bool grad) {
  OpInfo p;
  const bool avgGrad = grad && pool == Pool::Avg;
  const int inputs = grad && pool == Pool::Max ? 2 : 1;
  p.def = {kind, name, inputs, 1, {}, attrSpecs(pool == Pool::Avg, avgGrad)};
  p.inputDTypes = std::vector<DTypes>(static_cast<size_t>(inputs), floatTypes());
  p.infer = inferPool(grad, avgGrad, pool == Pool::Max ? 1 : 0);
  p.cost = [](const Op&, int) { return 1.0; };  // vertexWork counts the window's elements
  p.costTraits.readsWindows = true;
  p.costTraits.elementsPerOutput = elementsPerOutput(grad, pool);
  return p;
}

}  // namespace

IPU_REGISTER_OPS(pool) {
  OpInfo mp = poolInfo(OpKind::MaxPool, "max_pool", Pool::Max, false);
  mp.doc = "x [N,H,W,C] -> each window's maximum [N,OH,OW,C]";
  mp.grad = [](const GradArgs& a) {
    if (a.needs[0])
      a.accumulate(a.op.inputs[0],
                   a.g.addOp1(OpKind::MaxPoolGrad, {a.op.inputs[0], a.dy[0]}, a.op.attrs));
  };
  mp.plan = planForward;
  mp.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [s = poolShapeOf(a.g, a.op), x = a.in[0], y = a.out[0], r = a.work] {
      ref::maxPoolForward(s, x, y, r);
    };
  };
  mp.fused = [](const FusedArgs& a) -> std::function<void()> {
    auto k = std::make_shared<fz::MaxPoolForward>(poolShapeOf(a.g, a.op));
    return [k, x = a.in[0], y = a.out[0]] { k->run(x, y); };
  };
  registerOp(std::move(mp));

  OpInfo mg = poolInfo(OpKind::MaxPoolGrad, "max_pool_grad", Pool::Max, true);
  mg.doc = "x, dy -> dx: dy to each window's first maximum";
  mg.grad = noGradient("it is a backward op");
  mg.plan = [](PlanApi& p, const Op& op) { planGrad(p, op, Pool::Max); };
  mg.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [s = poolShapeOf(a.g, a.op), x = a.in[0], dy = a.in[1], dx = a.out[0], r = a.work] {
      ref::maxPoolBackward(s, x, dy, dx, r);
    };
  };
  mg.fused = [](const FusedArgs& a) -> std::function<void()> {
    auto k = std::make_shared<fz::MaxPoolBackward>(poolShapeOf(a.g, a.op));
    return [k, x = a.in[0], dy = a.in[1], dx = a.out[0]] { k->run(x, dy, dx); };
  };
  registerOp(std::move(mg));

  OpInfo ap = poolInfo(OpKind::AvgPool, "avg_pool", Pool::Avg, false);
  ap.doc = "x [N,H,W,C] -> each window's mean [N,OH,OW,C]";
  ap.grad = [](const GradArgs& a) {
    if (!a.needs[0]) return;
    Attrs attrs = a.op.attrs;
    attrs.set("input_shape", a.g.tensor(a.op.inputs[0]).shape);
    a.accumulate(a.op.inputs[0], a.g.addOp1(OpKind::AvgPoolGrad, {a.dy[0]}, attrs));
  };
  ap.plan = planForward;
  ap.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [s = poolShapeOf(a.g, a.op), x = a.in[0], y = a.out[0], r = a.work] {
      ref::avgPoolForward(s, x, y, r);
    };
  };
  ap.fused = [](const FusedArgs& a) -> std::function<void()> {
    auto k = std::make_shared<fz::AvgPoolForward>(poolShapeOf(a.g, a.op));
    return [k, x = a.in[0], y = a.out[0]] { k->run(x, y); };
  };
  registerOp(std::move(ap));

  OpInfo ag = poolInfo(OpKind::AvgPoolGrad, "avg_pool_grad", Pool::Avg, true);
  ag.doc = "dy -> dx [input_shape]: dy spread evenly over each window";
  ag.grad = noGradient("it is a backward op");
  ag.plan = [](PlanApi& p, const Op& op) { planGrad(p, op, Pool::Avg); };
  ag.vertex = [](const VertexArgs& a) -> std::function<void()> {
    return [s = poolShapeOf(a.g, a.op), dy = a.in[0], dx = a.out[0], r = a.work] {
      ref::avgPoolBackward(s, dy, dx, r);
    };
  };
  ag.fused = [](const FusedArgs& a) -> std::function<void()> {
    auto k = std::make_shared<fz::AvgPoolBackward>(poolShapeOf(a.g, a.op));
    return [k, dy = a.in[0], dx = a.out[0]] { k->run(dy, dx); };
  };
  registerOp(std::move(ag));
}

}  // namespace ipu::ops
