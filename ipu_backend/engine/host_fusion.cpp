#include "ipu_backend/engine/host_fusion.h"

#include <algorithm>
#include <optional>

#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/kernels/fused.h"

namespace ipu {
namespace {

bool isFn(const Op& op, OpKind kind, const char* fn) {
  return op.kind == kind && op.attrs.has("fn") && op.attrs.getString("fn") == fn;
}

}  // namespace

std::vector<int> HostFusionPlan::inputsOf(const Op& op) const {
  switch (role[op.id]) {
    case Role::kAbsorbed:
      return {};
    case Role::kElementwiseChain:
      return chainInputs[op.id];
    case Role::kUpdateGroup:
      return groupInputs[op.id];
    case Role::kBatchNormReluBackward: {
      std::vector<int> in = op.inputs;
      in[1] = reluGradIn[op.id];  // the relu's gradient replaces the batch norm's dy
      if (perSampleDy[op.id] >= 0) {
        in[1] = perSampleDy[op.id];
        in.push_back(perSampleScale[op.id]);
        in.push_back(perSampleShift[op.id]);
      }
      return in;
    }
    case Role::kAddReluBackward:
      if (reluBitsFrom[op.id] >= 0) return {op.inputs[0], op.inputs[1]};
      return {op.inputs[0], op.inputs[1], reluX[op.id]};
    case Role::kAddBatchNormRelu:
      return {normX[op.id], addOther[op.id]};
    default:
      return op.inputs;
  }
}

std::vector<int> HostFusionPlan::outputsOf(const Op& op) const {
  switch (role[op.id]) {
    case Role::kAbsorbed:
      return {};
    case Role::kBatchNormRelu: {
      std::vector<int> out = op.outputs;
      out[0] = reluOut[op.id];
      return out;
    }
    case Role::kAddRelu:
    case Role::kAddReluBackward:
    case Role::kAddBatchNormRelu:
      return {reluOut[op.id]};
    case Role::kSquareSum:
    case Role::kMulReduceSum:
      return {sumOut[op.id]};
    case Role::kWidenedOutput:
      return {widenOut[op.id]};
    case Role::kUpdateGroup:
      return groupOutputs[op.id];
    case Role::kBatchNormStatistics:
      return {op.outputs[1], op.outputs[2]};
    default:
      return op.outputs;
  }
}

namespace {

// Chains of f32 unary / binary ops over n elements (operands: n elements, one value, or a
// binary op's operand that broadcasts to its result), each op the sole reader of the previous
// one's output, none already fused; an apply_update that adds the last link into its target
// may end one. A broadcast op whose result only a member reads is absorbed: the member reads
// its input broadcast (a chain of one op then fuses too). The chain runs at its last op, so no
// op between its first and last (or an absorbed broadcast and the last) may update in place a
// tensor the chain reads.
template <typename SoleReader>
void planElementwiseChains(const Graph& g, HostFusionPlan& p, SoleReader soleReader) {
  using Role = HostFusionPlan::Role;
  auto eligible = [&](const Op& op, i64 n) {
    if ((op.kind != OpKind::Unary && op.kind != OpKind::Binary) || op.outputs.size() != 1 ||
        p.role[op.id] != Role::kNone)
      return false;
    const Tensor& y = g.tensor(op.outputs[0]);
    if (y.dtype != DType::F32 || (n >= 0 && y.elements() != n)) return false;
    for (int t : op.inputs) {
      const Tensor& x = g.tensor(t);
      // A binary op's operand of fewer elements broadcasts to its result (inferred so).
      if (x.dtype != DType::F32 ||
          (x.elements() != y.elements() && x.elements() != 1 && op.kind != OpKind::Binary))
        return false;
    }
    return true;
  };
  // The f32 broadcast op whose result `t` only `reader` reads, or nullptr.
  auto absorbableBroadcast = [&](int t, const Op& reader) -> const Op* {
    const int producer = g.tensor(t).producer;
    if (producer < 0 || soleReader(t) != &reader) return nullptr;
    const Op& b = g.op(producer);
    if (b.kind != OpKind::Broadcast || p.role[b.id] != Role::kNone ||
        g.tensor(b.inputs[0]).dtype != DType::F32 || g.tensor(t).dtype != DType::F32)
      return nullptr;
    return &b;
  };
  // apply_update (in place on its target) ends a chain whose link is one of its addends.
  auto endsChain = [&](const Op& op, int link, i64 n) {
    if (op.kind != OpKind::ApplyUpdate || p.role[op.id] != Role::kNone || op.inputs[0] == link ||
        g.tensor(op.inputs[0]).elements() != n)
      return false;
    for (int t : op.inputs) {
      const Tensor& x = g.tensor(t);
      if (x.dtype != DType::F32 || (x.elements() != n && x.elements() != 1)) return false;
    }
    return true;
  };
  auto writes = [&](const Op& op) {
    std::vector<int> w;
    for (int i : opDef(op.kind).writesInputs) w.push_back(op.inputs[static_cast<size_t>(i)]);
    return w;
  };
  for (const Op& first : g.ops()) {
    if (!eligible(first, -1)) continue;
    const i64 n = g.tensor(first.outputs[0]).elements();
    if (n < 2) continue;
    std::vector<int> chain = {first.id};
    std::vector<int> read(first.inputs.begin(), first.inputs.end());
    for (;;) {
      const Op& last = g.op(chain.back());
      const Op* next = soleReader(last.outputs[0]);
      if (!next || (!eligible(*next, n) && !endsChain(*next, last.outputs[0], n))) break;
      bool clobbered = false;  // an in-place update between the two of what the chain reads
      for (int id = last.id + 1; id < next->id && !clobbered; ++id)
        for (int t : writes(g.op(id)))
          clobbered = clobbered || std::find(read.begin(), read.end(), t) != read.end();
      if (clobbered) break;
      chain.push_back(next->id);
      for (int t : next->inputs)
        if (t != last.outputs[0]) read.push_back(t);
      if (next->kind == OpKind::ApplyUpdate) break;
    }
    // Broadcast ops feeding the members, unless an op between one and the chain's last op
    // updates in place what it reads.
    std::vector<const Op*> broadcasts;
    for (int id : chain) {
      const Op& op = g.op(id);
      if (op.kind != OpKind::Binary) continue;
      for (int t : op.inputs) {
        const Op* b = absorbableBroadcast(t, op);
        bool clobbered = false;
        for (int k = b ? b->id + 1 : chain.back(); k < chain.back() && !clobbered; ++k)
          for (int w : writes(g.op(k))) clobbered = clobbered || w == b->inputs[0];
        if (b && !clobbered &&
            std::find(broadcasts.begin(), broadcasts.end(), b) == broadcasts.end())
          broadcasts.push_back(b);
      }
    }
    if (chain.size() < 2 && broadcasts.empty()) continue;
    for (const Op* b : broadcasts) {
      p.role[static_cast<size_t>(b->id)] = Role::kAbsorbed;
      p.elided[static_cast<size_t>(b->outputs[0])] = true;
      ++p.absorbedOps;
      std::replace(read.begin(), read.end(), b->outputs[0], b->inputs[0]);
    }
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      p.role[static_cast<size_t>(chain[i])] = Role::kAbsorbed;
      p.elided[static_cast<size_t>(g.op(chain[i]).outputs[0])] = true;
      ++p.absorbedOps;
    }
    p.role[static_cast<size_t>(chain.back())] = Role::kElementwiseChain;
    p.chain[static_cast<size_t>(chain.back())] = chain;
    p.chainInputs[static_cast<size_t>(chain.back())] = read;
  }
}

// A batch norm + swish backward whose dy (the swish gradient's dy) only that gradient reads and
// a chain writes as mul(dy', scale) -> add(link, broadcast op(shift)), scale and shift
// [N, 1, ..., 1, C] against dy [N, ..., C] (host_fusion.h): the chain moves into the batch
// norm's first pass, unless an op between them updates in place what the chain reads.
template <typename SoleReader>
void planPerSampleDy(const Graph& g, HostFusionPlan& p, SoleReader soleReader) {
  using Role = HostFusionPlan::Role;
  auto perSample = [&](int t, const Shape& full) {
    const Shape& s = g.tensor(t).shape;
    if (s.size() != full.size() || s.size() < 2 || s.front() != full.front() ||
        s.back() != full.back())
      return false;
    return std::all_of(s.begin() + 1, s.end() - 1, [](i64 d) { return d == 1; });
  };
  for (const Op& bwd : g.ops()) {
    if (p.role[bwd.id] != Role::kBatchNormReluBackward || !p.swish[bwd.id]) continue;
    const int dy = p.reluGradIn[bwd.id];
    const int last = g.tensor(dy).producer;
    const Shape& full = g.tensor(dy).shape;
    if (last < 0 || p.role[static_cast<size_t>(last)] != Role::kElementwiseChain ||
        !soleReader(dy) || p.chain[static_cast<size_t>(last)].size() != 2)
      continue;
    const Op& mul = g.op(p.chain[static_cast<size_t>(last)][0]);
    const Op& add = g.op(last);
    if (!isFn(mul, OpKind::Binary, "mul") || !isFn(add, OpKind::Binary, "add") ||
        g.tensor(mul.outputs[0]).shape != full)
      continue;
    const int link = mul.outputs[0];
    int scaled = mul.inputs[0], scale = mul.inputs[1];
    if (g.tensor(scale).shape == full) std::swap(scaled, scale);
    const int spread = add.inputs[0] == link ? add.inputs[1] : add.inputs[0];
    if (g.tensor(scaled).shape != full || !perSample(scale, full) ||
        !p.elided[static_cast<size_t>(spread)] || g.tensor(spread).producer < 0)
      continue;
    const Op& broadcast = g.op(g.tensor(spread).producer);
    if (broadcast.kind != OpKind::Broadcast || !perSample(broadcast.inputs[0], full)) continue;
    const int shift = broadcast.inputs[0];
    bool clobbered = false;
    for (int id = last + 1; id < bwd.id && !clobbered; ++id)
      for (int i : opDef(g.op(id).kind).writesInputs) {
        const int w = g.op(id).inputs[static_cast<size_t>(i)];
        clobbered = clobbered || w == scaled || w == scale || w == shift;
      }
    if (clobbered) continue;
    p.role[static_cast<size_t>(last)] = Role::kAbsorbed;
    p.elided[static_cast<size_t>(dy)] = true;
    ++p.absorbedOps;
    p.perSampleDy[bwd.id] = scaled;
    p.perSampleScale[bwd.id] = scale;
    p.perSampleShift[bwd.id] = shift;
  }
}

// Update groups (host_fusion.h). Scanning in program order from an eligible op, the group
// takes every later eligible op over the same n elements until an op outside it reads what the
// group wrote (an n-element output, an updated target, a sum: it must run after the group) or
// updates in place what the group touched; ops between its members that it does not involve
// (the scalar bias corrections, the step counter) keep their places, before the group runs at
// its last member. Members: f32 unary / binary ops and apply_updates over n elements (other
// operands: single values), squares whose sole reader sums them to one value (kSquareSum).
// A group without an apply_update and a norm is left to the chains.
void planUpdateGroups(const Graph& g, HostFusionPlan& p, const std::vector<bool>& graphOutput,
                      const HostFusionOptions& options) {
  using Role = HostFusionPlan::Role;
  if (!options.updateGroups) return;
  const int cut = options.updateFirstOp;
  const auto consumers = g.consumers();
  auto f32 = [&](int t) { return g.tensor(t).dtype == DType::F32; };
  // The n-element tensors an eligible op writes (its output, or its in-place target), or -1.
  auto elementsOf = [&](const Op& op) -> i64 {
    if (op.kind == OpKind::ApplyUpdate) {
      if (p.role[op.id] != Role::kNone) return -1;
      const i64 n = g.tensor(op.inputs[0]).elements();
      for (int t : op.inputs)
        if (!f32(t) || (g.tensor(t).elements() != n && g.tensor(t).elements() != 1)) return -1;
      return n;
    }
    const bool squareSum = p.role[op.id] == Role::kSquareSum;
    if ((op.kind != OpKind::Unary && op.kind != OpKind::Binary) || op.outputs.size() != 1 ||
        (p.role[op.id] != Role::kNone && !squareSum))
      return -1;
    const Tensor& y = g.tensor(op.outputs[0]);
    if (!f32(y.id)) return -1;
    for (int t : op.inputs)
      if (!f32(t) || (g.tensor(t).elements() != y.elements() && g.tensor(t).elements() != 1))
        return -1;
    return y.elements();
  };
  auto writesOf = [&](const Op& op) {
    std::vector<int> w = op.outputs;
    for (int i : opDef(op.kind).writesInputs) w.push_back(op.inputs[static_cast<size_t>(i)]);
    if (p.role[op.id] == Role::kSquareSum) w.push_back(p.sumOut[op.id]);
    return w;
  };
  auto in = [](const std::vector<int>& v, int t) {
    return std::find(v.begin(), v.end(), t) != v.end();
  };
  std::vector<bool> taken(g.ops().size(), false);
  for (const Op& first : g.ops()) {
    const i64 n = taken[first.id] ? -1 : elementsOf(first);
    if (n < 2) continue;
    std::vector<int> members, touched, written;  // touched: read or written by a member
    // An optimizer's ops for one weight lie together: a group looks this far past its last
    // member (which also bounds the planner's work on large graphs).
    constexpr int kReach = 64;
    for (int id = first.id; id < static_cast<int>(g.ops().size()); ++id) {
      if (!members.empty() && id - members.back() > kReach) break;
      if (cut >= 0 && first.id < cut && id >= cut) break;  // the update part runs apart
      const Op& op = g.op(id);
      if (p.role[id] == Role::kAbsorbed) {
        // The reduce of a member square-sum: part of it. Other absorbed ops belong to fusions
        // that run elsewhere; one reading the group's writes ends it.
        const int producer = g.tensor(op.inputs[0]).producer;
        if (producer >= 0 && in(members, producer) && p.role[producer] == Role::kSquareSum) {
          members.push_back(id);
          continue;
        }
      }
      bool readsWritten = false;
      for (int t : op.inputs) readsWritten = readsWritten || in(written, t);
      const bool member = !taken[id] && elementsOf(op) == n && [&] {
        for (int t : op.inputs)  // n-element reads of the group's writes only (not its sums)
          if (in(written, t) && g.tensor(t).elements() != n) return false;
        return true;
      }();
      if (!member) {
        bool clobbers = false;
        for (int i : opDef(op.kind).writesInputs)
          clobbers = clobbers || in(touched, op.inputs[static_cast<size_t>(i)]);
        if (readsWritten || clobbers) break;
        continue;
      }
      members.push_back(id);
      for (int t : op.inputs) touched.push_back(t);
      for (int t : writesOf(op)) {
        touched.push_back(t);
        written.push_back(t);
      }
    }
    // Only updates that take a norm of their own (LAMB's and LARS's trust ratios) group for
    // now: SGD's, RMSProp's and Adam's would too, but their models' fusion counts and timings
    // were measured without it.
    auto any = [&](auto pred) { return std::any_of(members.begin(), members.end(), pred); };
    if (!any([&](int id) { return g.op(id).kind == OpKind::ApplyUpdate; }) ||
        !any([&](int id) { return p.role[id] == Role::kSquareSum; }))
      continue;
    // Tensors the group writes that anything else reads (or the host) are written; the others
    // stay in chunk buffers.
    std::vector<int> inputs, outputs;
    for (int id : members) {
      const Op& op = g.op(id);
      taken[id] = true;
      if (p.role[id] == Role::kAbsorbed) continue;  // a member square's reduce
      for (int t : op.inputs)
        if (g.tensor(t).producer < 0 || !in(members, g.tensor(t).producer)) {
          if (!in(inputs, t)) inputs.push_back(t);
        }
      if (p.role[id] == Role::kSquareSum) {
        outputs.push_back(p.sumOut[id]);
        continue;  // its squares are elided already
      }
      for (int t : op.outputs) {
        bool outside =
            graphOutput[static_cast<size_t>(t)] || g.tensor(t).kind != TensorKind::Activation;
        for (int c : consumers[static_cast<size_t>(t)]) outside = outside || !in(members, c);
        if (outside)
          outputs.push_back(t);
        else
          p.elided[static_cast<size_t>(t)] = true;
      }
    }
    const int last = members.back();  // runs the group (it may be a square's reduce)
    for (int id : members) {
      if (id != last && p.role[id] != Role::kAbsorbed) ++p.absorbedOps;
      if (id == last && p.role[id] == Role::kAbsorbed) --p.absorbedOps;
      p.role[id] = Role::kAbsorbed;
    }
    p.role[last] = Role::kUpdateGroup;
    p.group[last] = members;
    p.groupInputs[last] = inputs;
    p.groupOutputs[last] = outputs;
  }
}

// A 16-bit binary op over equal-sized operands whose result only a cast to f32 reads (the
// cast is exact): the op writes the cast's output itself (host_fusion.h).
template <typename SoleReader>
void planWidenedOutputs(const Graph& g, HostFusionPlan& p, SoleReader soleReader) {
  using Role = HostFusionPlan::Role;
  for (const Op& op : g.ops()) {
    if (op.kind != OpKind::Binary || p.role[op.id] != Role::kNone || op.outputs.size() != 1 ||
        op.attrs.getBool("stochastic_rounding", false))  // the chunk path rounds to nearest
      continue;
    const Tensor& y = g.tensor(op.outputs[0]);
    if (y.dtype != DType::BF16 && y.dtype != DType::F16) continue;
    bool same = true;
    for (int t : op.inputs)
      same = same && g.tensor(t).dtype == y.dtype && g.tensor(t).elements() == y.elements();
    const Op* cast = soleReader(op.outputs[0]);
    if (!same || !cast || cast->kind != OpKind::Cast || p.role[cast->id] != Role::kNone ||
        g.tensor(cast->outputs[0]).dtype != DType::F32)
      continue;
    p.role[op.id] = Role::kWidenedOutput;
    p.widenOut[op.id] = cast->outputs[0];
    p.role[cast->id] = Role::kAbsorbed;
    p.elided[static_cast<size_t>(op.outputs[0])] = true;
    ++p.absorbedOps;
  }
}

}  // namespace

HostFusionPlan planHostFusions(const Graph& g, const HostFusionOptions& options) {
  const size_t nOps = g.ops().size(), nTensors = g.tensors().size();
  HostFusionPlan p;
  p.role.assign(nOps, HostFusionPlan::Role::kNone);
  p.reluOut.assign(nOps, -1);
  p.reluX.assign(nOps, -1);
  p.reluGradIn.assign(nOps, -1);
  p.forwardOp.assign(nOps, -1);
  p.normX.assign(nOps, -1);
  p.addOther.assign(nOps, -1);
  p.otherBn.assign(nOps, -1);
  p.reluBitsFrom.assign(nOps, -1);
  p.writesReluBits.assign(nOps, false);
  p.sumOut.assign(nOps, -1);
  p.widenOut.assign(nOps, -1);
  p.swish.assign(nOps, false);
  p.perSampleDy.assign(nOps, -1);
  p.perSampleScale.assign(nOps, -1);
  p.perSampleShift.assign(nOps, -1);
  p.chain.assign(nOps, {});
  p.chainInputs.assign(nOps, {});
  p.group.assign(nOps, {});
  p.groupInputs.assign(nOps, {});
  p.groupOutputs.assign(nOps, {});
  p.elided.assign(nTensors, false);

  const auto consumers = g.consumers();
  std::vector<bool> output(nTensors, false);
  for (int t : g.outputs()) output[static_cast<size_t>(t)] = true;
  auto dt = [&](int t) { return g.tensor(t).dtype; };
  auto all = [&](const Op& op, DType d) {
    auto is = [&](int t) { return dt(t) == d; };
    return std::all_of(op.inputs.begin(), op.inputs.end(), is) &&
           std::all_of(op.outputs.begin(), op.outputs.end(), is);
  };
  // Batch norm ops the engine has a fusing kernel for: all f32, or bf16 activations with f32
  // parameters and statistics (the native bf16 kernels). Returns the activation dtype.
  auto batchNormDtype = [&](const Op& op) -> std::optional<DType> {
    if (all(op, DType::F32)) return DType::F32;
    if (!options.bf16BatchNorm || dt(op.inputs[0]) != DType::BF16) return std::nullopt;
    const bool backward = op.kind == OpKind::BatchNormBackward;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const bool activation = i == 0 || (backward && i == 1);
      if (dt(op.inputs[i]) != (activation ? DType::BF16 : DType::F32)) return std::nullopt;
    }
    for (size_t i = 0; i < op.outputs.size(); ++i)
      if (dt(op.outputs[i]) != (i == 0 ? DType::BF16 : DType::F32)) return std::nullopt;
    return DType::BF16;
  };
  // The single op that reads activation `t` (and nothing else does), or nullptr.
  auto soleReader = [&](int t) -> const Op* {
    const Tensor& T = g.tensor(t);
    if (T.kind != TensorKind::Activation || output[static_cast<size_t>(t)]) return nullptr;
    const auto& c = consumers[static_cast<size_t>(t)];
    if (c.size() != 1) return nullptr;
    return &g.op(c[0]);
  };
  using Role = HostFusionPlan::Role;
  auto fuseRelu = [&](const Op& producer, Role role, DType d) {
    const int between = producer.outputs[0];
    const Op* relu = soleReader(between);
    if (!relu || !isFn(*relu, OpKind::Unary, "relu") || !all(*relu, d)) return;
    p.role[producer.id] = role;
    p.reluOut[producer.id] = relu->outputs[0];
    p.role[relu->id] = Role::kAbsorbed;
    p.elided[static_cast<size_t>(between)] = true;
    ++p.absorbedOps;
  };

  // batch_norm_train (f32) -> add (same shapes, the other operand any f32 tensor) -> relu.
  auto fuseAddRelu = [&](const Op& bn) {
    const int y = bn.outputs[0];
    const Op* add = soleReader(y);
    if (!add || !isFn(*add, OpKind::Binary, "add") || !all(*add, DType::F32) ||
        p.role[add->id] != Role::kNone || add->inputs[0] == add->inputs[1])
      return;
    const Shape& s = g.tensor(y).shape;
    const int other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
    const Op* relu = soleReader(add->outputs[0]);
    if (g.tensor(other).shape != s || g.tensor(add->outputs[0]).shape != s || !relu ||
        !isFn(*relu, OpKind::Unary, "relu") || !all(*relu, DType::F32))
      return;
    p.role[bn.id] = Role::kBatchNormStatistics;
    p.role[add->id] = Role::kAddBatchNormRelu;
    p.forwardOp[add->id] = bn.id;
    p.normX[add->id] = bn.inputs[0];
    p.addOther[add->id] = other;
    // A projection shortcut: the other operand is a second f32 batch norm's y that only this
    // add reads; it computes only its statistics too, and the add normalises both.
    const int otherBn = g.tensor(other).producer;
    if (otherBn >= 0 && p.role[static_cast<size_t>(otherBn)] == Role::kNone &&
        g.op(otherBn).kind == OpKind::BatchNormTrain && g.op(otherBn).outputs[0] == other &&
        all(g.op(otherBn), DType::F32) && soleReader(other) == add) {
      p.role[static_cast<size_t>(otherBn)] = Role::kBatchNormStatistics;
      p.otherBn[add->id] = otherBn;
      p.addOther[add->id] = g.op(otherBn).inputs[0];
      p.elided[static_cast<size_t>(other)] = true;
    }
    p.reluOut[add->id] = relu->outputs[0];
    p.role[relu->id] = Role::kAbsorbed;
    p.elided[static_cast<size_t>(y)] = true;
    p.elided[static_cast<size_t>(add->outputs[0])] = true;
    ++p.absorbedOps;
  };

  // batch_norm_train (f32) -> y -> swish, with y read only by the swish and by swish_grad(y,
  // dz), whose result only the batch norm's backward (same x and statistics) reads: both pairs
  // fuse at once, or neither (y is elided, so every reader of it must be).
  auto fuseSwish = [&](const Op& bn) {
    if (!options.stateFromForwardToBackward || !all(bn, DType::F32)) return;
    const int y = bn.outputs[0];
    const Tensor& yt = g.tensor(y);
    const auto& readers = consumers[static_cast<size_t>(y)];
    if (yt.kind != TensorKind::Activation || output[static_cast<size_t>(y)] || readers.size() != 2)
      return;
    const Op* swish = nullptr;
    const Op* grad = nullptr;
    for (int id : readers) {
      const Op& r = g.op(id);
      if (isFn(r, OpKind::Unary, "swish") && r.inputs[0] == y) swish = &r;
      if (isFn(r, OpKind::UnaryGrad, "swish") && r.inputs[0] == y && r.inputs[1] != y) grad = &r;
    }
    if (!swish || !grad || !all(*swish, DType::F32) || !all(*grad, DType::F32) ||
        p.role[swish->id] != Role::kNone || p.role[grad->id] != Role::kNone)
      return;
    const Op* bwd = soleReader(grad->outputs[0]);
    if (!bwd || bwd->kind != OpKind::BatchNormBackward || p.role[bwd->id] != Role::kNone ||
        !all(*bwd, DType::F32) || bwd->inputs[0] != bn.inputs[0] ||
        bwd->inputs[1] != grad->outputs[0] || bwd->inputs[2] != bn.inputs[1] ||
        bwd->inputs[3] != bn.outputs[1] || bwd->inputs[4] != bn.outputs[2])
      return;
    p.role[bn.id] = Role::kBatchNormRelu;
    p.swish[bn.id] = true;
    p.reluOut[bn.id] = swish->outputs[0];
    p.role[bwd->id] = Role::kBatchNormReluBackward;
    p.swish[bwd->id] = true;
    p.reluGradIn[bwd->id] = grad->inputs[1];
    p.forwardOp[bwd->id] = bn.id;
    p.role[swish->id] = Role::kAbsorbed;
    p.role[grad->id] = Role::kAbsorbed;
    p.elided[static_cast<size_t>(y)] = true;
    p.elided[static_cast<size_t>(grad->outputs[0])] = true;
    p.absorbedOps += 2;
  };

  // mul (f32, same shapes) -> reduce sum over one run of axes with kept ones inside it: one
  // pass, the products elided.
  auto fuseMulReduceSum = [&](const Op& mul) {
    const Shape& y = g.tensor(mul.outputs[0]).shape;
    if (g.tensor(mul.inputs[0]).shape != y || g.tensor(mul.inputs[1]).shape != y) return;
    const Op* sum = soleReader(mul.outputs[0]);
    if (!sum || opName(sum->kind) != "reduce" || sum->attrs.getString("fn") != "sum" ||
        !all(*sum, DType::F32) || p.role[sum->id] != Role::kNone ||
        !kernels::fused::mulReduceSumRuns(reduceShapeOf(g, *sum)))
      return;
    p.role[mul.id] = Role::kMulReduceSum;
    p.sumOut[mul.id] = sum->outputs[0];
    p.role[sum->id] = Role::kAbsorbed;
    p.elided[static_cast<size_t>(mul.outputs[0])] = true;
    ++p.absorbedOps;
  };

  for (const Op& op : g.ops()) {  // producers come before consumers
    if (op.kind == OpKind::BatchNormTrain) {
      if (auto d = batchNormDtype(op)) fuseRelu(op, Role::kBatchNormRelu, *d);
      if (p.role[op.id] == Role::kNone && all(op, DType::F32)) fuseAddRelu(op);
      if (p.role[op.id] == Role::kNone) fuseSwish(op);
    } else if (op.kind == OpKind::BatchNormInference) {
      if (all(op, DType::F32)) fuseRelu(op, Role::kBatchNormRelu, DType::F32);
    } else if (isFn(op, OpKind::Binary, "add") && p.role[op.id] == Role::kNone) {
      const Shape& y = g.tensor(op.outputs[0]).shape;
      const DType d = dt(op.outputs[0]);
      if (!all(op, d) || g.tensor(op.inputs[0]).shape != y || g.tensor(op.inputs[1]).shape != y)
        continue;
      fuseRelu(op, Role::kAddRelu, d);
      // relu_grad(x, a + b): the sum is its dy (not its x), x is kept (a relu output that no
      // fusion elided), all f32.
      const Op* grad = p.role[op.id] == Role::kNone ? soleReader(op.outputs[0]) : nullptr;
      if (d != DType::F32 || !grad || !isFn(*grad, OpKind::UnaryGrad, "relu") ||
          grad->inputs[1] != op.outputs[0] || grad->inputs[0] == op.outputs[0] ||
          !all(*grad, DType::F32) || g.tensor(grad->inputs[0]).shape != y ||
          p.elided[static_cast<size_t>(grad->inputs[0])])
        continue;
      p.role[op.id] = Role::kAddReluBackward;
      p.reluOut[op.id] = grad->outputs[0];
      p.reluX[op.id] = grad->inputs[0];
      // x is the relu output of a fused batch_norm_train -> add -> relu: read its bits.
      const int relu = g.tensor(grad->inputs[0]).producer;
      const int fwdAdd = relu < 0 ? -1 : g.tensor(g.op(relu).inputs[0]).producer;
      if (options.stateFromForwardToBackward && fwdAdd >= 0 &&
          p.role[static_cast<size_t>(fwdAdd)] == Role::kAddBatchNormRelu &&
          p.reluOut[static_cast<size_t>(fwdAdd)] == grad->inputs[0] && y.back() % 16 == 0) {
        p.reluBitsFrom[op.id] = fwdAdd;
        p.writesReluBits[static_cast<size_t>(fwdAdd)] = true;
      }
      p.role[grad->id] = Role::kAbsorbed;
      p.elided[static_cast<size_t>(op.outputs[0])] = true;
      ++p.absorbedOps;
    } else if (isFn(op, OpKind::Unary, "square") && all(op, DType::F32)) {
      // square -> reduce(fn=sum) to one element (so over every axis of size > 1): one pass,
      // the squares elided.
      const Op* sum = soleReader(op.outputs[0]);
      if (!sum || opName(sum->kind) != "reduce" || sum->attrs.getString("fn") != "sum" ||
          !all(*sum, DType::F32) || g.tensor(sum->outputs[0]).elements() != 1)
        continue;
      p.role[op.id] = Role::kSquareSum;
      p.sumOut[op.id] = sum->outputs[0];
      p.role[sum->id] = Role::kAbsorbed;
      p.elided[static_cast<size_t>(op.outputs[0])] = true;
      ++p.absorbedOps;
    } else if (isFn(op, OpKind::Binary, "mul") && all(op, DType::F32)) {
      fuseMulReduceSum(op);
    } else if (op.kind == OpKind::BatchNormBackward) {
      const auto d = batchNormDtype(op);
      if (!d || !options.stateFromForwardToBackward) continue;
      // relu_grad(relu output, g) -> dy -> batch_norm_backward(x, dy, gamma, mean, var) whose
      // forward is a fused batch norm + relu over the same x: the mask is in its workspace.
      const int dy = op.inputs[1];
      const int fwd = g.tensor(op.inputs[3]).producer;
      const int reluGrad = g.tensor(dy).producer;
      if (fwd < 0 || reluGrad < 0 || p.role[static_cast<size_t>(fwd)] != Role::kBatchNormRelu ||
          g.op(fwd).kind != OpKind::BatchNormTrain ||
          p.role[static_cast<size_t>(reluGrad)] != Role::kNone)  // absorbed by an add already
        continue;
      const Op& forward = g.op(fwd);
      const Op& grad = g.op(reluGrad);
      if (soleReader(dy) != &op || !isFn(grad, OpKind::UnaryGrad, "relu") || !all(grad, *d) ||
          grad.inputs[0] != p.reluOut[static_cast<size_t>(fwd)] ||
          forward.inputs[0] != op.inputs[0] || forward.outputs[2] != op.inputs[4] ||
          batchNormDtype(forward) != d)
        continue;
      p.role[op.id] = Role::kBatchNormReluBackward;
      p.reluGradIn[op.id] = grad.inputs[1];
      p.forwardOp[op.id] = fwd;
      p.role[grad.id] = Role::kAbsorbed;
      p.elided[static_cast<size_t>(dy)] = true;
      ++p.absorbedOps;
    }
  }
  planUpdateGroups(g, p, output, options);
  planElementwiseChains(g, p, soleReader);
  planPerSampleDy(g, p, soleReader);
  planWidenedOutputs(g, p, soleReader);
  return p;
}

}  // namespace ipu
