// The replica kinds: ops whose result depends on the replica running them. They run off the
// tiles (IPU-Links, the replica index) through the engine's Collective in both engine modes
// (OpInfo::replica), on f32 operands.
//   cross_replica_reduce_scatter(x [n]) -> this replica's chunk [ceil(n/R)] of scale * the sum
//     of x over the R replicas (a ring)
//   cross_replica_all_gather(chunk [ceil(n/R)]) -> the whole tensor of `shape` from every
//     replica's chunk
//   cross_replica_sum(x) -> the sum of x over this replica's group of G replicas (batch-norm
//     statistics spanning replicas); `replicas` (R, a multiple of G) is set by the replication
//     pass, before it R = G
//   replica_chunk(x [n]) -> elements [r s, r s + s) of x, s = ceil(n/R), zero-padded, on
//     replica r (the sharded update's slice of a weight it holds whole)
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "ipu_backend/ops/op_info.h"
#include "ipu_backend/replication/collective.h"

namespace ipu::ops {
namespace {

i64 replicasAttr(const Attrs& a, const std::string& label) {
  const i64 r = a.getInt("replicas");
  if (r < 1) fail(label, fmt::format("replicas must be >= 1, got {}", r));
  return r;
}

void expectF32(const Tensor& t, const std::string& label, const char* what) {
  if (t.dtype != DType::F32)
    fail(label, fmt::format("'{}' is {}; {} take f32", t.name, dtypeName(t.dtype), what));
}

// The name the collectives report in their errors.
std::string what(const ReplicaArgs& a) {
  return a.g.tensor(a.op.outputs[0]).name;
}

// Common facets: one f32 input, planned as the tiles holding the operands.
OpInfo replicaKind(OpKind kind, std::string_view name, std::vector<AttrSpec> attrs) {
  OpInfo o;
  o.def = {kind, name, 1, 1, {}, std::move(attrs)};
  o.inputDTypes = {floatTypes()};
  o.plan = [](PlanApi& p, const Op& op) { p.operandTiles(op); };
  o.cost = [](const Op&, int) { return 1.0; };  // no tile compute: priced by linkTraffic
  return o;
}

}  // namespace

IPU_REGISTER_OPS(cross_replica) {
  OpInfo rs = replicaKind(OpKind::CrossReplicaReduceScatter, "cross_replica_reduce_scatter",
                          {{"replicas", AttrType::Int, true}, {"scale", AttrType::Float, false}});
  rs.doc = "x [n] -> this replica's chunk [ceil(n/R)] of scale * (sum of x over the replicas)";
  rs.infer = [](const std::vector<const Tensor*>& in, const Attrs& a, const std::string& label) {
    const i64 r = replicasAttr(a, label);
    return std::vector<TensorType>{{{(in[0]->elements() + r - 1) / r}, in[0]->dtype}};
  };
  rs.grad = noGradient("it is part of the replicated update");
  rs.replica = [](const ReplicaArgs& a) -> std::function<void()> {
    const float* x = a.in[0];
    float* y = a.out[0];
    const i64 n = a.g.tensor(a.op.inputs[0]).elements();
    const float scale = static_cast<float>(a.op.attrs.getFloat("scale", 1.0));
    if (a.replicas == 1)
      return [=] {
        for (i64 i = 0; i < n; ++i) y[i] = x[i] * scale;
      };
    return [coll = a.collective, r = a.replica, x, n, y, scale, w = what(a)] {
      coll->reduceScatter(r, x, n, y, scale, w);
    };
  };
  rs.linkTraffic = [](const Op& op) { return LinkTraffic{op.inputs[0]}; };
  registerOp(std::move(rs));

  OpInfo ag = replicaKind(OpKind::CrossReplicaAllGather, "cross_replica_all_gather",
                          {{"replicas", AttrType::Int, true}, {"shape", AttrType::Ints, true}});
  ag.doc = "chunk [ceil(n/R)] of every replica -> the whole tensor of `shape`";
  ag.infer = [](const std::vector<const Tensor*>& in, const Attrs& a, const std::string& label) {
    const i64 r = replicasAttr(a, label);
    const Shape full = a.getInts("shape");
    if (in[0]->shape != Shape{(numElements(full) + r - 1) / r})
      fail(label, fmt::format("chunk '{}' {} must be [{}] (ceil of {} elements / {} replicas)",
                              in[0]->name, shapeStr(in[0]->shape), (numElements(full) + r - 1) / r,
                              numElements(full), r));
    return std::vector<TensorType>{{full, in[0]->dtype}};
  };
  ag.grad = noGradient("it is part of the replicated update");
  ag.replica = [](const ReplicaArgs& a) -> std::function<void()> {
    const float* x = a.in[0];
    float* y = a.out[0];
    const i64 n = a.g.tensor(a.op.outputs[0]).elements();
    if (a.replicas == 1) return [=] { std::copy(x, x + n, y); };
    return [coll = a.collective, r = a.replica, x, y, n, w = what(a)] {
      coll->allGather(r, x, y, n, w);
    };
  };
  ag.linkTraffic = [](const Op& op) { return LinkTraffic{op.outputs[0]}; };
  registerOp(std::move(ag));

  OpInfo sum = replicaKind(OpKind::CrossReplicaSum, "cross_replica_sum",
                           {{"group", AttrType::Int, true}, {"replicas", AttrType::Int, false}});
  sum.doc = "x -> the sum of x over this replica's group of `group` replicas";
  sum.infer = [](const std::vector<const Tensor*>& in, const Attrs& a, const std::string& label) {
    const i64 g = a.getInt("group"), r = a.getInt("replicas", g);
    if (g < 1 || r < g || r % g != 0)
      fail(label, fmt::format("group {} must be >= 1 and divide replicas {}", g, r));
    expectF32(*in[0], label, "cross-replica sums");
    return std::vector<TensorType>{{in[0]->shape, in[0]->dtype}};
  };
  // y_r = sum of x over r's group, so dL/dx_r = the same sum of dL/dy (L: the sum of the
  // group's losses, as every replica's backward seeds its own).
  sum.grad = [](const GradArgs& a) {
    a.accumulate(a.op.inputs[0], a.g.addOp1(OpKind::CrossReplicaSum, {a.dy[0]}, a.op.attrs));
  };
  sum.replica = [](const ReplicaArgs& a) -> std::function<void()> {
    // A sum within groups of G replicas through the all-replica ring: replica r puts x in slot
    // r / G of an (R/G)-slot vector of zeros; reduce-scatter + all-gather sum the slots (adding
    // zeros is exact), and each replica keeps its group's slot. The summation order is the
    // ring's, so a run split over processes gives the same bits.
    const float* x = a.in[0];
    float* y = a.out[0];
    const i64 n = a.g.tensor(a.op.inputs[0]).elements();
    const i64 group = a.op.attrs.getInt("group"), replicas = a.replicas;
    if (replicas % group != 0)
      throw std::invalid_argument(
          fmt::format("engine: cross_replica_sum on '{}' sums groups of {} replicas, which do "
                      "not divide the engine's {} replicas",
                      a.g.tensor(a.op.inputs[0]).name, group, replicas));
    if (replicas == 1) return [=] { std::copy(x, x + n, y); };
    const int r = a.replica;
    const i64 slots = replicas / group, slot = r / group, total = slots * n;
    auto padded = std::make_shared<std::vector<float>>(static_cast<size_t>(total));
    auto chunk = std::make_shared<std::vector<float>>(
        static_cast<size_t>(chunkElements(total, static_cast<int>(replicas))));
    auto summed = std::make_shared<std::vector<float>>(static_cast<size_t>(total));
    return [=, coll = a.collective, w = what(a)] {
      std::fill(padded->begin(), padded->end(), 0.0f);
      std::copy(x, x + n, padded->data() + slot * n);
      coll->reduceScatter(r, padded->data(), total, chunk->data(), 1.0f, w);
      coll->allGather(r, chunk->data(), summed->data(), total, w);
      std::copy(summed->data() + slot * n, summed->data() + (slot + 1) * n, y);
    };
  };
  // A whole ring all-reduce of R / G slots (the engine's form).
  sum.linkTraffic = [](const Op& op) {
    return LinkTraffic{op.inputs[0], static_cast<double>(replicasOf(op) / op.attrs.getInt("group")),
                       1.0};
  };
  registerOp(std::move(sum));

  OpInfo chunk =
      replicaKind(OpKind::ReplicaChunk, "replica_chunk", {{"replicas", AttrType::Int, true}});
  chunk.doc = "x [n] -> replica r's elements [r s, r s + s), s = ceil(n/R), zero-padded";
  chunk.infer = [](const std::vector<const Tensor*>& in, const Attrs& a, const std::string& label) {
    const i64 r = replicasAttr(a, label);
    expectF32(*in[0], label, "replica chunks");
    return std::vector<TensorType>{{{(in[0]->elements() + r - 1) / r}, in[0]->dtype}};
  };
  chunk.grad = noGradient("it is part of the replicated update");
  chunk.replica = [](const ReplicaArgs& a) -> std::function<void()> {
    const float* x = a.in[0];
    float* y = a.out[0];
    const i64 n = a.g.tensor(a.op.inputs[0]).elements(),
              s = chunkElements(n, static_cast<int>(a.replicas));
    const i64 begin = std::min(n, a.replica * s), len = std::min(n, begin + s) - begin;
    return [=] {
      std::copy(x + begin, x + begin + len, y);
      std::fill(y + len, y + s, 0.0f);
    };
  };
  // The replica's slice of a weight it holds whole: no link traffic (the sharded update's math
  // is priced as its ordinary ops).
  chunk.linkTraffic = [](const Op&) { return LinkTraffic{}; };
  registerOp(std::move(chunk));
}

}  // namespace ipu::ops
