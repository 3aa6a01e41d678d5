#include "ipu_backend/compiler/recompute.h"

#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "ipu_backend/compiler/op_shapes.h"

namespace ipu {
namespace {

i64 macsOf(const Graph& g, const Op& op) {
  if (op.kind == OpKind::Conv2d) return convShapeOf(g, op).macs();
  if (op.kind == OpKind::MatMul) return matMulShapeOf(g, op).macs();
  return 0;
}

// Ops the loss depends on (the forward pass), by op id.
std::vector<bool> forwardOps(const Graph& g, int loss) {
  std::vector<bool> fwd(g.ops().size(), false);
  std::vector<int> stack{loss};
  std::vector<bool> seen(g.tensors().size(), false);
  while (!stack.empty()) {
    const int t = stack.back();
    stack.pop_back();
    if (seen[t]) continue;
    seen[t] = true;
    const int p = g.tensor(t).producer;
    if (p < 0 || fwd[p]) continue;
    fwd[p] = true;
    for (int in : g.op(p).inputs) stack.push_back(in);
  }
  return fwd;
}

}  // namespace

RecomputationReport applyRecomputation(Graph& g, int loss,
                                       const std::vector<std::string>& checkpoints) {
  RecomputationReport rep;
  if (checkpoints.empty()) return rep;
  const int lossOp = g.tensor(loss).producer;
  if (lossOp < 0)
    throw GraphError(
        fmt::format("recomputation: the loss '{}' is not computed by an op", g.tensor(loss).name));
  const std::vector<bool> fwd = forwardOps(g, loss);
  const int numOps = static_cast<int>(g.ops().size());
  for (int i = 0; i < numOps; ++i) rep.forwardMacs += fwd[i] ? macsOf(g, g.op(i)) : 0;

  // Checkpoints in forward order; each ends a segment at its producer.
  std::vector<int> cutOps;
  for (const std::string& name : checkpoints) {
    const int t = g.find(name);
    if (t < 0)
      throw GraphError(fmt::format(
          "recomputation checkpoint '{}' names no tensor of graph '{}' (hint: checkpoints are "
          "tensor names of the forward pass, e.g. a block's output ReLU)",
          name, g.name()));
    const int p = g.tensor(t).producer;
    if (p < 0 || !fwd[p] || p == lossOp)
      throw GraphError(fmt::format(
          "recomputation checkpoint '{}' is not an activation on the forward path to the loss "
          "'{}' (hint: name a tensor that a forward op before the loss produces, not an input, "
          "a variable or a backward tensor)",
          name, g.tensor(loss).name));
    rep.checkpoints.push_back(t);
    cutOps.push_back(p);
  }
  std::sort(cutOps.begin(), cutOps.end());
  cutOps.erase(std::unique(cutOps.begin(), cutOps.end()), cutOps.end());
  std::sort(rep.checkpoints.begin(), rep.checkpoints.end(),
            [&](int a, int b) { return g.tensor(a).producer < g.tensor(b).producer; });
  std::vector<bool> isCheckpoint(g.tensors().size(), false);
  for (int t : rep.checkpoints) isCheckpoint[t] = true;

  // segment[op]: index of the forward segment (ops up to and including the k-th cut op form
  // segment k); the last segment (up to the loss) runs its backward right after its forward
  // and is not recomputed.
  std::vector<int> segment(numOps, -1);
  for (int i = 0, k = 0; i < numOps; ++i) {
    if (!fwd[i]) continue;
    segment[i] = k;
    if (k < static_cast<int>(cutOps.size()) && i == cutOps[k]) ++k;
  }
  const int recomputed = static_cast<int>(cutOps.size());  // segments 0..recomputed-1
  rep.segments = recomputed + 1;

  // Backward readers (ops after the loss that are not forward ops) of each segment's
  // activations other than the checkpoints.
  const auto consumers = g.consumers();
  std::vector<int> insertAt(recomputed, std::numeric_limits<int>::max());
  std::vector<std::vector<std::pair<int, int>>> redirect(recomputed);  // (tensor, reader op)
  for (int i = 0; i < numOps; ++i) {
    if (!fwd[i] || segment[i] >= recomputed) continue;
    for (int t : g.op(i).outputs) {
      if (isCheckpoint[t]) continue;
      for (int c : consumers[t])
        if (!fwd[c] && c > lossOp) {
          redirect[segment[i]].emplace_back(t, c);
          insertAt[segment[i]] = std::min(insertAt[segment[i]], c);
        }
    }
  }

  // Copy each segment's ops that the backward needs (the producers of the redirected tensors
  // and their ancestors inside the segment), in forward order, reading the originals of
  // everything produced outside the segment and of the checkpoints.
  std::vector<std::vector<int>> copiesBefore(numOps + 1);  // new op ids to run before op i
  std::map<int, int> copyOf;                               // original tensor -> recomputed
  std::vector<std::pair<int, int>> copies;                 // (copy, original), old op ids
  for (int k = 0; k < recomputed; ++k) {
    if (redirect[k].empty()) continue;
    std::vector<bool> need(numOps, false);
    std::vector<int> stack;
    for (const auto& [t, c] : redirect[k]) stack.push_back(g.tensor(t).producer);
    while (!stack.empty()) {
      const int o = stack.back();
      stack.pop_back();
      if (need[o]) continue;
      need[o] = true;
      for (int in : g.op(o).inputs) {
        const int p = g.tensor(in).producer;
        if (p >= 0 && segment[p] == k && !isCheckpoint[in]) stack.push_back(p);
      }
    }
    for (int o = 0; o < numOps; ++o) {
      if (!need[o]) continue;
      const Op op = g.op(o);  // copy: addOp may reallocate
      std::vector<int> inputs;
      for (int in : op.inputs) {
        // Only this segment's copies: another segment's run at its own (possibly later) place.
        const int p = g.tensor(in).producer;
        auto it = p >= 0 && segment[p] == k ? copyOf.find(in) : copyOf.end();
        inputs.push_back(it != copyOf.end() ? it->second : in);
      }
      std::vector<std::string> names;
      for (int out : op.outputs) names.push_back(g.uniqueName(g.tensor(out).name + "/recomputed"));
      const int id = g.addOp(op.kind, std::move(inputs), op.attrs, std::move(names));
      for (size_t j = 0; j < op.outputs.size(); ++j) copyOf[op.outputs[j]] = g.op(id).outputs[j];
      copiesBefore[insertAt[k]].push_back(id);
      copies.emplace_back(id, o);
      ++rep.recomputedOps;
      rep.recomputedMacs += macsOf(g, op);
    }
  }

  // The copies run right before their segment's first backward reader; then the readers take
  // the recomputed tensors (op ids change with the order).
  std::vector<int> order;
  order.reserve(g.ops().size());
  for (int i = 0; i < numOps; ++i) {
    for (int id : copiesBefore[i]) order.push_back(id);
    order.push_back(i);
  }
  g.reorderOps(order);
  std::vector<int> newId(order.size());
  for (size_t i = 0; i < order.size(); ++i) newId[order[i]] = static_cast<int>(i);
  for (const auto& [copy, original] : copies) rep.copies.emplace_back(newId[copy], newId[original]);
  for (const auto& readers : redirect)
    for (const auto& [t, c] : readers) {
      Op reader = g.op(newId[c]);
      for (int& in : reader.inputs)
        if (in == t) in = copyOf.at(t);
      g.rewriteOp(reader.id, reader.inputs, reader.attrs);
    }
  return rep;
}

std::vector<std::string> stageBoundaryCheckpoints(const Graph& g,
                                                  const std::vector<int>& stageOfOp) {
  if (stageOfOp.size() != g.ops().size())
    throw GraphError(fmt::format("stageBoundaryCheckpoints: {} stage entries for {} ops of '{}'",
                                 stageOfOp.size(), g.ops().size(), g.name()));
  std::vector<std::string> names;
  const auto consumers = g.consumers();
  for (const Op& op : g.ops()) {
    const int s = stageOfOp[op.id];
    if (s < 0) continue;
    for (int t : op.outputs)
      for (int c : consumers[t])
        if (stageOfOp[c] > s) {
          names.push_back(g.tensor(t).name);
          break;
        }
  }
  return names;
}

}  // namespace ipu
