#include "ipu_backend/replication/replicate.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/replication/collective.h"

namespace ipu::replication {

void ReplicatedGraph::configure(CompileOptions& co, int accumulation) const {
  co.accumulationSteps = accumulation;
  co.updateFirstOp = updateFirstOp;
}

ReplicatedGraph replicate(const Graph& src, const ReplicationOptions& o) {
  if (o.replicas < 1 || o.accumulation < 1)
    throw GraphError(fmt::format("replicate '{}': replicas {} and accumulation {} must be >= 1",
                                 src.name(), o.replicas, o.accumulation));
  std::vector<const Op*> updates;
  std::set<int> updated;  // weights and momentum written by sgd_update
  for (const Op& op : src.ops()) {
    if (op.kind == OpKind::SgdUpdate) {
      updates.push_back(&op);
      updated.insert(op.inputs[0]);
      updated.insert(op.inputs[1]);
      continue;
    }
    if (updates.empty()) continue;
    for (int t : op.inputs)
      if (updated.count(t))
        throw GraphError(fmt::format(
            "replicate '{}': op {} ({}) reads '{}' after its sgd_update; the optimizer update "
            "must come after every other use of the weights",
            src.name(), op.id, opName(op.kind), src.tensor(t).name));
  }

  ReplicatedGraph out{Graph(src.name()), -1, {}};
  Graph& g = out.graph;
  const bool sharded = o.shardOptimizerState && o.replicas > 1;
  std::set<int> momenta;
  for (const Op* u : updates) momenta.insert(u->inputs[1]);
  std::map<int, int> id;  // source tensor -> new tensor
  for (const Tensor& t : src.tensors()) {
    if (t.kind == TensorKind::Input) id[t.id] = g.addInput(t.name, t.shape, t.dtype);
    if (t.kind == TensorKind::Variable) {
      Shape shape = t.shape;
      if (sharded && momenta.count(t.id)) shape = {chunkElements(t.elements(), o.replicas)};
      id[t.id] = g.addVariable(t.name, shape, t.dtype);
    }
  }
  auto map = [&](const std::vector<int>& ts) {
    std::vector<int> v;
    for (int t : ts) v.push_back(id.at(t));
    return v;
  };
  for (const Op& op : src.ops()) {
    if (op.kind == OpKind::SgdUpdate) continue;
    std::vector<std::string> names;
    for (int t : op.outputs) names.push_back(src.tensor(t).name);
    Attrs attrs = op.attrs;
    if (op.kind == OpKind::CrossReplicaSum) {  // e.g. batch-norm statistics spanning replicas
      const i64 group = attrs.getInt("group");
      if (o.replicas % group != 0)
        throw GraphError(fmt::format(
            "replicate '{}': '{}' sums over groups of {} replicas, which do not divide {} "
            "replicas (batch-norm span: choose a number of replicas that is a multiple of {})",
            src.name(), src.tensor(op.inputs[0]).name, group, o.replicas, group));
      attrs.set("replicas", static_cast<i64>(o.replicas));
    }
    const int nid = g.addOp(op.kind, map(op.inputs), attrs, names);
    for (size_t i = 0; i < op.outputs.size(); ++i) id[op.outputs[i]] = g.op(nid).outputs[i];
  }
  for (int t : src.outputs()) g.markOutput(id.at(t));
  if (o.replicas == 1 && o.accumulation == 1) {  // the plain step, in the source's form
    for (const Op* u : updates) g.addOp(OpKind::SgdUpdate, map(u->inputs), u->attrs);
    return out;
  }

  // Micro-batch part: accumulate every gradient.
  std::vector<int> reduced;  // per update: what the reduction reads
  for (const Op* u : updates) {
    const int grad = id.at(u->inputs[2]);
    if (o.accumulation == 1) {
      reduced.push_back(grad);
      continue;
    }
    const Tensor& w = src.tensor(u->inputs[0]);
    const int acc = g.addVariable(w.name + "/grad_accum", w.shape, w.dtype);
    out.zeroInitialised.push_back(w.name + "/grad_accum");
    g.addOp(OpKind::Accumulate, {acc, grad}, {});
    reduced.push_back(acc);
  }
  out.updateFirstOp = static_cast<int>(g.ops().size());
  const double scale = 1.0 / (static_cast<double>(o.replicas) * o.accumulation);
  const i64 R = o.replicas;
  for (size_t i = 0; i < updates.size(); ++i) {
    const Op& u = *updates[i];
    const Tensor& w = src.tensor(u.inputs[0]);
    const int wId = id.at(u.inputs[0]), mId = id.at(u.inputs[1]), lr = id.at(u.inputs[3]);
    const int chunk = g.addOp1(OpKind::CrossReplicaReduceScatter, {reduced[i]},
                               Attrs{{"replicas", R}, {"scale", scale}}, w.name + "/grad_chunk");
    if (sharded) {
      if (u.attrs.getFloat("lars_eta", 0.0) > 0.0)
        throw GraphError(fmt::format(
            "replicate '{}': '{}' uses LARS, whose trust ratio needs the norm of the whole "
            "weight and gradient; sharding the optimizer state over replicas is not supported "
            "with LARS (turn sharding off)",
            src.name(), w.name));
      Attrs a = u.attrs;
      a.set("replicas", R);
      const int wChunk =
          g.addOp1(OpKind::ShardedSgdUpdate, {wId, mId, chunk, lr}, a, w.name + "/updated_chunk");
      const int full = g.addOp1(OpKind::CrossReplicaAllGather, {wChunk},
                                Attrs{{"replicas", R}, {"shape", w.shape}}, w.name + "/updated");
      g.addOp(OpKind::Assign, {wId, full}, {});
    } else {
      const int full = g.addOp1(OpKind::CrossReplicaAllGather, {chunk},
                                Attrs{{"replicas", R}, {"shape", w.shape}}, w.name + "/grad_mean");
      g.addOp(OpKind::SgdUpdate, {wId, mId, full, lr}, u.attrs);
    }
    if (o.accumulation > 1) {
      const int zero = g.addOp1(OpKind::Constant, {}, Attrs{{"shape", w.shape}, {"value", 0.0}},
                                w.name + "/grad_accum_zero");
      g.addOp(OpKind::Assign, {reduced[i], zero}, {});
    }
  }
  return out;
}

std::int64_t optimizerStateBytes(const Graph& g) {
  std::int64_t bytes = 0;
  for (const Op& op : g.ops())
    if (op.kind == OpKind::SgdUpdate || op.kind == OpKind::ShardedSgdUpdate)
      bytes += g.tensor(op.inputs[1]).bytes();
  return bytes;
}

}  // namespace ipu::replication
