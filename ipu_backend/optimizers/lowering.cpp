#include "ipu_backend/optimizers/lowering.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ipu_backend/ir/op_defs.h"

namespace ipu {
namespace optimizers {

// The registry: adding an optimizer is its file and one entry here.
const std::vector<const OptimizerDef*>& registry() {
  static const std::vector<const OptimizerDef*> defs = {&kSgd, &kLars, &kLamb, &kRmsProp, &kAdam};
  return defs;
}

const OptimizerDef* findOptimizer(std::string_view name) {
  for (const OptimizerDef* d : registry())
    if (d->name == name) return d;
  return nullptr;
}

int Step::withWeightDecay(int grad, double wd) {
  return wd == 0.0 ? grad : add(grad, scale(weight, wd, "decay"), "grad_decayed");
}

namespace {

// The apply_update of `target` (a variable), with the step's skip flag.
void applyUpdate(Step& s, int target, const std::vector<Term>& terms, double keep, int factor) {
  Attrs a{{"addends", static_cast<i64>(terms.size())}, {"keep", keep}};
  std::vector<int> in = {target};
  for (size_t i = 0; i < terms.size(); ++i) {
    in.push_back(terms[i].x);
    static const char* const kCoefficient[] = {"c1", "c2", "c3"};
    if (terms[i].c != 1.0) a.set(kCoefficient[i], terms[i].c);
  }
  if (factor >= 0) {
    a.set("factor", true);
    in.push_back(factor);
  }
  if (s.skip >= 0) in.push_back(s.skip);
  if (s.stochasticRounding && s.g.tensor(target).dtype != DType::F32)
    a.set("stochastic_rounding", true);
  s.g.addOp(OpKind::ApplyUpdate, in, a);
}

// The same sum from unary / binary ops (a sharded weight chunk is not a variable): the products
// and sums in apply_update's order, so the bits are the same.
int linearOps(Step& s, int target, const std::vector<Term>& terms, double keep, int factor) {
  auto term = [&](const Term& t) { return t.c == 1.0 ? t.x : s.scale(t.x, t.c, "term"); };
  int sum = term(terms[0]);
  for (size_t i = 1; i < terms.size(); ++i) sum = s.add(sum, term(terms[i]), "sum");
  if (factor >= 0) sum = s.mul(sum, factor, "scaled");
  if (keep == 0.0) return sum;
  return s.add(keep == 1.0 ? target : s.scale(target, keep, "kept"), sum, "new");
}

}  // namespace

void Step::updateState(size_t i, const std::vector<Term>& terms, double keep, int factor) {
  applyUpdate(*this, stateVars[i], terms, keep, factor);
  state[i] = b.cast(stateVars[i], DType::F32, n("f32"));  // reads the new value
}

void Step::updateWeight(const std::vector<Term>& terms, double keep, int factor) {
  if (sharded) {
    newWeight = linearOps(*this, weight, terms, keep, factor);
    return;
  }
  applyUpdate(*this, weightVar, terms, keep, factor);
  newWeight = weightVar;
}

std::string freshName(const Graph& g, const std::string& stem) {
  return g.find(stem) < 0 ? stem : g.uniqueName(stem);
}

int sumOfSquares(Graph& g, int x, const std::string& name) {
  Builder b(g);
  const Tensor t = g.tensor(x);  // copy: adding ops grows the tensor table
  const int f = b.cast(x, DType::F32, freshName(g, name + "_f32"));
  const int sq = b.unary("square", f, freshName(g, name + "_squared"));
  std::vector<i64> axes(t.shape.size());
  std::iota(axes.begin(), axes.end(), 0);
  return axes.empty() ? sq : b.reduceSum(sq, axes, false, freshName(g, name + "_sumsq"));
}

namespace {

[[noreturn]] void fail(const std::string& weight, const std::string& msg) {
  throw GraphError(fmt::format("optimizer_update of '{}': {}", weight, msg));
}

int scalarOf(Builder& b, Graph& g, int t) {
  return g.tensor(t).shape.empty() ? t
                                   : b.reshape(t, {}, freshName(g, g.tensor(t).name + "_scalar"));
}

// The clip factor of LAMB's global-norm clipping over the updates `us`: c = M / max(|g|, M),
// |g| the norm of all their unscaled gradients (TensorFlow's clip_by_global_norm).
int globalClipFactor(Graph& g, const std::vector<int>& us) {
  Builder b(g);
  double maxNorm = -1;
  int total = -1;
  for (int u : us) {
    const Op op = g.op(u);
    const UpdateOperands uo = updateOperands(op);
    const std::string w = g.tensor(uo.weight).name;
    const double m = op.attrs.getFloat("max_grad_norm");
    if (maxNorm >= 0 && m != maxNorm)
      fail(w, fmt::format("max_grad_norm {} differs from the {} of the other updates (one global "
                          "norm clips them all)",
                          m, maxNorm));
    maxNorm = m;
    int ss = sumOfSquares(g, uo.grad, w + "/clip_grad");
    if (uo.inverseScale >= 0) {
      const int inv = scalarOf(b, g, uo.inverseScale);
      ss = b.mul(ss, b.mul(inv, inv));
    }
    total = total < 0 ? ss : b.add(total, ss);
  }
  if (!(maxNorm > 0)) fail(g.tensor(g.op(us[0]).inputs[0]).name, "max_grad_norm must be > 0");
  const int bound = b.constant({}, maxNorm, DType::F32, freshName(g, "optimizer/max_grad_norm"));
  const int norm = b.unary("sqrt", total, freshName(g, "optimizer/global_grad_norm"));
  return b.binary("div", bound, b.binary("max", norm, bound),
                  freshName(g, "optimizer/clip_factor"));
}

// Lowers one optimizer_update (appending its ops); `clip`: LAMB's global clip factor, or -1;
// `emaRate`: the warm-up EMA's 1 - d (emaWarmupRates), or -1 for the fixed decay.
void lowerOne(Graph& g, int u, int clip, int emaRate) {
  const Op op = g.op(u);  // copies: adding ops reallocates
  const UpdateOperands uo = updateOperands(op);
  const Tensor W = g.tensor(uo.weight);
  const std::string& kind = op.attrs.getString("optimizer");
  const OptimizerDef* def = findOptimizer(kind);
  if (!def)
    fail(W.name, fmt::format("unknown optimizer '{}' (valid: {})", kind,
                             fmt::join(optimizerNames(), ", ")));
  const double emaDecay = op.attrs.getFloat("ema_decay", 0.0);
  const size_t slots = def->slots.size();
  if (uo.state.size() != slots + (emaDecay > 0 ? 1 : 0))
    fail(W.name, fmt::format("{} takes {} state variables{}, got {}", kind, slots,
                             emaDecay > 0 ? " and the EMA" : "", uo.state.size()));
  if (emaDecay < 0 || emaDecay >= 1)
    fail(W.name, fmt::format("ema_decay {} is not in [0, 1)", emaDecay));
  const i64 replicas = op.attrs.getInt("replicas", 1);
  if (replicas > 1 && (def->needsWholeWeight || emaDecay > 0))
    fail(W.name, fmt::format("{} cannot be sharded over replicas: {} (turn sharding off)", kind,
                             emaDecay > 0 ? "the weight EMA is kept whole"
                                          : "its trust ratio needs the norm of the whole weight "
                                            "and update"));

  Step s(g, W.name, op.attrs);
  Builder& b = s.b;
  auto widen = [&](int t) {
    return g.tensor(t).dtype == DType::F32 ? t : b.cast(t, DType::F32, s.n("f32"));
  };
  s.weightVar = uo.weight;
  s.stateVars = uo.state;
  s.skip = uo.overflow;
  s.sharded = replicas > 1;
  s.stochasticRounding = op.attrs.getBool("stochastic_rounding", false);
  int weight = uo.weight;
  if (replicas > 1)
    weight = g.addOp1(OpKind::ReplicaChunk, {weight}, Attrs{{"replicas", replicas}}, s.n("chunk"));
  s.weight = widen(weight);
  s.grad = widen(uo.grad);
  if (uo.inverseScale >= 0)
    s.grad = s.mul(s.grad, scalarOf(b, g, uo.inverseScale), "grad_unscaled");
  if (clip >= 0) s.grad = s.mul(s.grad, clip, "grad_clipped");
  s.lr = scalarOf(b, g, uo.lr);
  for (size_t i = 0; i < slots; ++i) s.state.push_back(widen(uo.state[i]));
  def->lower(s);
  if (s.newWeight < 0) fail(W.name, fmt::format("internal: {} did not update the weight", kind));
  if (emaDecay > 0) {
    s.state.push_back(widen(uo.state.back()));
    emaStep(s, slots, emaDecay, emaRate);
  }
  if (replicas > 1) {  // all-gather the new chunks and write the whole weight
    const int full = g.addOp1(OpKind::CrossReplicaAllGather, {s.newWeight},
                              Attrs{{"replicas", replicas}, {"shape", W.shape}}, s.n("updated"));
    s.sharded = false;
    applyUpdate(s, uo.weight, {{full}}, 0.0, -1);
  }
}

}  // namespace
}  // namespace optimizers

std::vector<std::string> optimizerNames() {
  std::vector<std::string> v;
  for (const auto* d : optimizers::registry()) v.emplace_back(d->name);
  return v;
}

bool optimizerShardable(const std::string& kind) {
  const auto* d = optimizers::findOptimizer(kind);
  return d && !d->needsWholeWeight;
}

OptimizerState appendOptimizer(Graph& g, const std::map<int, int>& grads, int lr,
                               const OptimizerOptions& opts) {
  using namespace optimizers;
  const bool lars = opts.kind == "lars" || (opts.kind == "sgd" && opts.larsEta > 0.0);
  if (!lars && !findOptimizer(opts.kind))
    throw GraphError(fmt::format("appendOptimizer: unknown optimizer '{}' (valid: {})", opts.kind,
                                 fmt::join(optimizerNames(), ", ")));
  OptimizerState st;
  if (opts.emaDecay > 0.0 && opts.emaWarmup && !grads.empty()) {
    if (g.find(kOptimizerEmaUpdates) >= 0)
      throw GraphError(fmt::format(
          "appendOptimizer: the graph already has '{}' (one warm-up EMA per graph: append every "
          "weight's update in one call)",
          kOptimizerEmaUpdates));
    st.stateVariables.push_back(g.addVariable(kOptimizerEmaUpdates, {}, DType::F32));
    st.init.push_back(StateInit::Zero);
    st.weightOf.push_back(grads.begin()->first);
  }
  for (const auto& [var, grad] : grads) {
    const Tensor w = g.tensor(var);  // copy: adding variables reallocates
    const bool decays = opts.decay(w);
    // LARS on the decayed weights only, plain SGD on the others (the MLPerf reference).
    const OptimizerDef* def = lars ? (decays ? &kLars : &kSgd) : findOptimizer(opts.kind);
    Attrs a{{"optimizer", std::string(def->name)}};
    def->attrs(opts, decays, a);
    if (opts.stochasticRounding && w.dtype != DType::F32) a.set("stochastic_rounding", true);
    std::vector<int> inputs = {var, grad, lr};
    auto addState = [&](const std::string& slot, Shape shape, DType dt, StateInit init) {
      const int v = g.addVariable(w.name + "/" + slot, std::move(shape), dt);
      st.stateVariables.push_back(v);
      st.init.push_back(init);
      st.weightOf.push_back(var);
      inputs.push_back(v);
    };
    for (const Slot& s : def->slots)
      addState(std::string(s.name), s.scalar ? Shape{} : w.shape,
               s.scalar || s.f32 ? DType::F32 : w.dtype, s.init);
    if (opts.emaDecay > 0.0) {
      a.set("ema_decay", opts.emaDecay);
      if (opts.emaWarmup) a.set("ema_warmup", true);
      addState("ema", w.shape, w.dtype, StateInit::Weight);
    }
    if (opts.lossScaling.inverseScale >= 0) {
      a.set("loss_scaled", true);
      inputs.push_back(opts.lossScaling.inverseScale);
      inputs.push_back(opts.lossScaling.overflow);
    }
    g.addOp(OpKind::OptimizerUpdate, inputs, a);
  }
  return st;
}

ExpandedOptimizers expandOptimizers(Graph& g) {
  using namespace optimizers;
  ExpandedOptimizers r;
  const int n = static_cast<int>(g.ops().size());
  std::vector<int> updates, clipped, warm;
  std::vector<double> warmDecays;
  for (const Op& op : g.ops())
    if (op.kind == OpKind::OptimizerUpdate) {
      updates.push_back(op.id);
      if (op.attrs.getFloat("max_grad_norm", 0.0) > 0.0) clipped.push_back(op.id);
      if (op.attrs.getBool("ema_warmup", false)) {
        warm.push_back(op.id);
        warmDecays.push_back(op.attrs.getFloat("ema_decay", 0.0));
      }
      const UpdateOperands uo = updateOperands(op);
      for (int t : uo.state) r.stateBytes += g.tensor(t).bytes();
    }
  if (updates.empty()) return r;
  const int tensorsBefore = static_cast<int>(g.tensors().size());

  // Ops appended for update u run just before it.
  std::vector<std::vector<int>> before(static_cast<size_t>(n));
  // Within the block, each write moves up to just after the last op it depends on (the
  // producers of its operands, the writes of the variables it reads, the block's earlier
  // readers of its target), so a temporary dies as soon as it is consumed.
  auto placeBefore = [&](int u, int first) {
    const int end = static_cast<int>(g.ops().size());
    std::map<int, int> lastReader, written;       // tensor -> position / anchor in the block
    std::vector<std::tuple<int, int, int>> keys;  // (anchor, is a write, op)
    for (int i = first; i < end; ++i) {
      const Op& op = g.op(i);
      int anchor = i - first;
      if (op.kind == OpKind::ApplyUpdate) {
        anchor = -1;
        for (int t : op.inputs) {
          if (g.tensor(t).producer >= first)
            anchor = std::max(anchor, g.tensor(t).producer - first);
          if (auto it = written.find(t); it != written.end()) anchor = std::max(anchor, it->second);
        }
        if (auto it = lastReader.find(op.inputs[0]); it != lastReader.end())
          anchor = std::max(anchor, it->second);
        written[op.inputs[0]] = anchor;
      }
      keys.emplace_back(anchor, op.kind == OpKind::ApplyUpdate, i);
      for (int t : op.inputs) lastReader[t] = i - first;
    }
    std::stable_sort(keys.begin(), keys.end());
    for (const auto& k : keys) before[u].push_back(std::get<2>(k));
  };
  // The shared scalars go before the first update that needs them.
  int clip = -1;
  if (!clipped.empty()) {
    const int first = static_cast<int>(g.ops().size());
    clip = globalClipFactor(g, clipped);
    placeBefore(clipped.front(), first);
  }
  // The warm-up EMA's rates from the step counter, which is incremented after every update.
  std::map<double, int> emaRates;
  std::vector<int> atEnd;
  if (!warm.empty()) {
    const int count = g.find(kOptimizerEmaUpdates);
    const std::string& w = g.tensor(g.op(warm.front()).inputs[0]).name;
    if (count < 0 || g.tensor(count).kind != TensorKind::Variable)
      fail(w, fmt::format("ema_warmup needs the step counter variable '{}' (appendOptimizer "
                          "creates it)",
                          kOptimizerEmaUpdates));
    for (double d : warmDecays)
      if (!(d > 0))
        fail(w, "ema_warmup is set without an ema_decay (the warm-up shapes the EMA's decay)");
    int first = static_cast<int>(g.ops().size());
    emaRates = emaWarmupRates(g, count, warmDecays);
    placeBefore(warm.front(), first);
    first = static_cast<int>(g.ops().size());
    Attrs none;
    Step inc(g, kOptimizerEmaUpdates, none);
    applyUpdate(inc, count, {{inc.constant(1.0, "one")}}, 1.0, -1);  // n + 1, after every reader
    for (int i = first; i < static_cast<int>(g.ops().size()); ++i) atEnd.push_back(i);
  }
  for (int u : updates) {
    const int first = static_cast<int>(g.ops().size());
    const bool clips = std::find(clipped.begin(), clipped.end(), u) != clipped.end();
    const Op& op = g.op(u);
    const int rate = op.attrs.getBool("ema_warmup", false)
                         ? emaRates.at(op.attrs.getFloat("ema_decay", 0.0))
                         : -1;
    lowerOne(g, u, clips ? clip : -1, rate);
    placeBefore(u, first);
  }

  std::vector<int> order;
  for (int i = 0; i < n; ++i) {
    for (int o : before[i]) order.push_back(o);
    order.push_back(i);
  }
  for (int o : atEnd) order.push_back(o);
  g.reorderOps(order);
  g.removeOps([&](const Op& op) { return op.kind == OpKind::OptimizerUpdate; });
  for (int t = tensorsBefore; t < static_cast<int>(g.tensors().size()); ++t)
    r.producedTensors.push_back(t);
  r.updates = static_cast<int>(updates.size());
  return r;
}

}  // namespace ipu
