#include "ipu_backend/replication/replicate.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/optimizers/optimizer.h"
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
  std::vector<UpdateOperands> operands;  // per update
  std::set<int> updated;                 // weights and state written by optimizer_update
  for (const Op& op : src.ops()) {
    if (op.kind == OpKind::OptimizerUpdate) {
      updates.push_back(&op);
      operands.push_back(updateOperands(op));
      updated.insert(op.inputs[0]);
      updated.insert(operands.back().state.begin(), operands.back().state.end());
      continue;
    }
    if (updates.empty()) continue;
    for (int t : op.inputs)
      if (updated.count(t))
        throw GraphError(fmt::format(
            "replicate '{}': op {} ({}) reads '{}' after its optimizer_update; the update "
            "must come after every other use of the weights",
            src.name(), op.id, opName(op.kind), src.tensor(t).name));
  }

  // Loss-scaled updates read an overflow flag that the source computes from one micro-batch of
  // one replica. A replicated step must skip on every replica when any gradient of any
  // micro-batch was not finite, so the pass drops the source's flag and recomputes it from the
  // accumulated gradients of every replica (or from the mean gradients, when the updates are
  // clipped), which are Inf/NaN exactly then.
  int sourceFlag = -1;
  for (const UpdateOperands& u : operands)
    if (u.overflow >= 0) sourceFlag = u.overflow;
  const bool replicated = o.replicas > 1 || o.accumulation > 1;
  const bool sharded = o.shardOptimizerState && o.replicas > 1;
  if (sharded)
    for (size_t i = 0; i < updates.size(); ++i) {
      const Tensor& w = src.tensor(operands[i].weight);
      const std::string kind = updates[i]->attrs.getString("optimizer");
      if (w.dtype != DType::F32 || operands[i].overflow >= 0)
        throw GraphError(fmt::format(
            "replicate '{}': '{}' is {}{}; sharding the optimizer state over replicas is "
            "implemented for f32 weights without loss scaling (turn sharding off)",
            src.name(), w.name, dtypeName(w.dtype),
            operands[i].overflow >= 0 ? " with a loss-scaled update" : ""));
      if (!optimizerShardable(kind) || updates[i]->attrs.getFloat("ema_decay", 0.0) > 0.0)
        throw GraphError(fmt::format(
            "replicate '{}': '{}' uses {}{}, which needs the whole weight; sharding the optimizer "
            "state over replicas is not supported with it (turn sharding off)",
            src.name(), w.name, kind,
            updates[i]->attrs.getFloat("ema_decay", 0.0) > 0.0 ? " with a weight EMA" : ""));
    }

  // The source ops the replicated graph keeps: all of them, except (replicated, loss-scaled)
  // those that only compute the per-micro-batch flag.
  std::vector<bool> keep(src.ops().size(), true);
  if (replicated && sourceFlag >= 0) {
    std::vector<bool> live(src.tensors().size(), false);
    for (int t : src.outputs())
      if (t != sourceFlag) live[static_cast<size_t>(t)] = true;
    for (const Op* u : updates)
      for (int t : u->inputs)
        if (t != sourceFlag) live[static_cast<size_t>(t)] = true;
    for (size_t k = src.ops().size(); k-- > 0;) {
      const Op& op = src.ops()[k];
      if (op.kind == OpKind::OptimizerUpdate) continue;
      bool needed = hasSideEffects(op.kind);
      for (int t : op.outputs) needed = needed || live[static_cast<size_t>(t)];
      keep[k] = needed;
      if (needed)
        for (int t : op.inputs) live[static_cast<size_t>(t)] = true;
    }
  }

  ReplicatedGraph out{Graph(src.name()), -1, {}};
  Graph& g = out.graph;
  // Sharded: each state variable of a weight's shape keeps this replica's chunk.
  std::set<int> shardedState;
  for (const UpdateOperands& u : operands)
    for (int t : u.state)
      if (src.tensor(t).shape == src.tensor(u.weight).shape) shardedState.insert(t);
  std::map<int, int> id;  // source tensor -> new tensor
  for (const Tensor& t : src.tensors()) {
    if (t.kind == TensorKind::Input) id[t.id] = g.addInput(t.name, t.shape, t.dtype);
    if (t.kind == TensorKind::Variable) {
      Shape shape = t.shape;
      if (sharded && shardedState.count(t.id)) shape = {chunkElements(t.elements(), o.replicas)};
      id[t.id] = g.addVariable(t.name, shape, t.dtype);
    }
  }
  auto map = [&](const std::vector<int>& ts) {
    std::vector<int> v;
    for (int t : ts) v.push_back(id.at(t));
    return v;
  };
  for (size_t k = 0; k < src.ops().size(); ++k) {
    const Op& op = src.ops()[k];
    if (op.kind == OpKind::OptimizerUpdate || !keep[k]) continue;
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
    if (auto f = id.find(op.gradientOf); op.gradientOf >= 0 && f != id.end())
      g.setGradientOf(nid, f->second);
  }
  if (!replicated) {  // the plain step, in the source's form
    for (int t : src.outputs()) g.markOutput(id.at(t));
    for (const Op* u : updates) g.addOp(u->kind, map(u->inputs), u->attrs);
    return out;
  }
  for (int t : src.outputs())
    if (t != sourceFlag) g.markOutput(id.at(t));

  // Micro-batch part: accumulate every gradient. Accumulators and the cross-replica reduction
  // are f32 whatever the gradient's dtype (a 16-bit gradient is widened first): the ring
  // collectives sum f32, and A x R loss-scaled 16-bit gradients could overflow a 16-bit sum.
  // accumulateInWeightDType: the accumulator has the weight's dtype (PopART's default; A
  // micro-batches only, the R-way sum is f32), widened at the start of the update part.
  Builder b(g);
  std::vector<int> reduced;  // per update: what the reduction reads
  std::vector<int> narrowAccumulators;
  for (const Op* u : updates) {
    const Tensor& w = src.tensor(u->inputs[0]);
    const DType accType = o.accumulateInWeightDType && o.accumulation > 1 ? w.dtype : DType::F32;
    const int grad = b.cast(id.at(updateOperands(*u).grad), accType,
                            w.name + "/grad_" + std::string(dtypeName(accType)));
    if (o.accumulation == 1) {
      reduced.push_back(grad);
      continue;
    }
    const int acc = g.addVariable(w.name + "/grad_accum", w.shape, accType);
    out.zeroInitialised.push_back(w.name + "/grad_accum");
    g.addOp(OpKind::Accumulate, {acc, grad}, {});
    reduced.push_back(acc);
    if (accType != DType::F32) narrowAccumulators.push_back(static_cast<int>(reduced.size()) - 1);
  }
  out.updateFirstOp = static_cast<int>(g.ops().size());
  std::vector<int> accumulators = reduced;  // what resetAccumulator zeroes
  // A 16-bit accumulator is widened where its reduction reads it (not all of them up front:
  // every widened copy would be live until its reduction).
  std::vector<bool> narrow(reduced.size(), false);
  for (int i : narrowAccumulators) narrow[static_cast<size_t>(i)] = true;
  auto widened = [&](size_t i) {
    if (!narrow[i]) return reduced[i];
    return b.cast(reduced[i], DType::F32,
                  src.tensor(updates[i]->inputs[0]).name + "/grad_accum_f32");
  };
  const double scale = 1.0 / (static_cast<double>(o.replicas) * o.accumulation);
  const i64 R = o.replicas;
  auto resetAccumulator = [&](size_t i, const Tensor& w) {
    if (o.accumulation == 1) return;
    const int zero = g.addOp1(OpKind::Constant, {}, Attrs{{"shape", w.shape}, {"value", 0.0}},
                              w.name + "/grad_accum_zero");
    g.addOp(OpKind::Assign, {accumulators[i], zero}, {});
  };
  // Every mean gradient first, then the updates, when an update reads more than its own mean:
  // clipped to the global norm (LAMB's max_grad_norm: one norm over every clipped gradient,
  // computed before the first clipped update). Otherwise each update follows its own reduction,
  // so a mean dies as soon as its update has read it.
  const bool clipped = std::any_of(updates.begin(), updates.end(), [](const Op* u) {
    return u->attrs.getFloat("max_grad_norm", 0.0) > 0.0;
  });
  // Loss scaled, not clipped: the overflow flag (which every update reads) comes from each
  // replica's own accumulated gradients, summed over the replicas: a mean is Inf/NaN exactly
  // when some replica's part is (the R-way f32 sum of finite 16-bit or f32 parts stays finite).
  // Taking it from the means held every mean of the step at once (BERT-Large: an IPU's f32
  // gradients, 622 KB of one tile).
  int flag = -1;
  if (sourceFlag >= 0 && !clipped) {
    int local = -1;
    for (size_t i = 0; i < updates.size(); ++i) {
      const Shape& shape = g.tensor(reduced[i]).shape;
      std::vector<i64> axes(shape.size());
      std::iota(axes.begin(), axes.end(), 0);
      int term = b.scale(reduced[i], 0.0);  // 0, or NaN where the part is Inf/NaN
      if (!axes.empty()) term = b.reduceSum(term, axes);
      if (g.tensor(term).shape != Shape{}) term = b.reshape(term, {});
      if (g.tensor(term).dtype != DType::F32) term = b.cast(term, DType::F32);
      local = local < 0 ? term : b.add(local, term);
    }
    const int summed =
        g.addOp1(OpKind::CrossReplicaSum, {local}, Attrs{{"group", R}, {"replicas", R}},
                 src.tensor(sourceFlag).name + "/replicas");
    flag = b.unary("identity", summed, src.tensor(sourceFlag).name);
    g.markOutput(flag);
  }
  if (clipped) {
    std::vector<int> means;
    for (size_t i = 0; i < updates.size(); ++i) {
      const Tensor& w = src.tensor(updates[i]->inputs[0]);
      const int chunk = g.addOp1(OpKind::CrossReplicaReduceScatter, {widened(i)},
                                 Attrs{{"replicas", R}, {"scale", scale}}, w.name + "/grad_chunk");
      const int mean = g.addOp1(OpKind::CrossReplicaAllGather, {chunk},
                                Attrs{{"replicas", R}, {"shape", w.shape}}, w.name + "/grad_mean");
      means.push_back(mean);
      if (sourceFlag < 0) continue;
      std::vector<i64> axes(w.shape.size());
      std::iota(axes.begin(), axes.end(), 0);
      int term = b.scale(mean, 0.0);  // 0, or NaN where the mean is Inf/NaN
      if (!axes.empty()) term = b.reduceSum(term, axes);
      if (g.tensor(term).shape != Shape{}) term = b.reshape(term, {});
      flag = flag < 0 ? term : b.add(flag, term);
    }
    if (sourceFlag >= 0) {
      flag = b.unary("identity", flag, src.tensor(sourceFlag).name);
      g.markOutput(flag);
    }
    for (size_t i = 0; i < updates.size(); ++i) {
      const Op& u = *updates[i];
      const Tensor& w = src.tensor(u.inputs[0]);
      std::vector<int> in;
      for (int t : u.inputs) in.push_back(t == sourceFlag ? flag : id.at(t));
      in[1] = b.cast(means[i], w.dtype, w.name + "/grad_mean_" + std::string(dtypeName(w.dtype)));
      g.addOp(u.kind, in, u.attrs);
      resetAccumulator(i, w);
    }
    return out;
  }
  for (size_t i = 0; i < updates.size(); ++i) {
    const Op& u = *updates[i];
    const Tensor& w = src.tensor(u.inputs[0]);
    const int chunk = g.addOp1(OpKind::CrossReplicaReduceScatter, {widened(i)},
                               Attrs{{"replicas", R}, {"scale", scale}}, w.name + "/grad_chunk");
    std::vector<int> in;
    for (int t : u.inputs) in.push_back(t == sourceFlag ? flag : id.at(t));
    Attrs a = u.attrs;
    if (sharded) {  // the update reads this replica's gradient chunk and writes its state chunks
      a.set("replicas", R);
      in[1] = chunk;
    } else {
      const int full = g.addOp1(OpKind::CrossReplicaAllGather, {chunk},
                                Attrs{{"replicas", R}, {"shape", w.shape}}, w.name + "/grad_mean");
      in[1] = b.cast(full, w.dtype, w.name + "/grad_mean_" + std::string(dtypeName(w.dtype)));
    }
    g.addOp(u.kind, in, a);
    resetAccumulator(i, w);
  }
  return out;
}

}  // namespace ipu::replication
