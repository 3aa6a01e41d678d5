#include "ipu_backend/cost/pipeline_search.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "ipu_backend/replication/replicate.h"

namespace ipu::cost {

std::vector<double> stageSeconds(const PipelineStepCost& c) {
  std::vector<double> s;
  for (size_t i = 0; i < c.forwardSeconds.size(); ++i)
    s.push_back(c.forwardSeconds[i] + c.backwardSeconds[i]);
  return s;
}

std::string AutoSplit::describe() const {
  std::string s = fmt::format(
      "automatic placement over {} IPUs: splits [{}] ({} pipeline(s) "
      "compiled)\n",
      pipeline.ipus, fmt::join(splits, ", "), placementsCompiled);
  s += pipeline.describe();
  const std::vector<double> st = stageSeconds(cost);
  for (size_t i = 0; i < st.size(); ++i)
    s += fmt::format("  stage {}: {:.3f} ms per micro-batch (forward {:.3f} + backward {:.3f})\n",
                     i, st[i] * 1e3, cost.forwardSeconds[i] * 1e3, cost.backwardSeconds[i] * 1e3);
  s += fmt::format("  step: {} cycles x {:.3f} ms + update {:.3f} ms = {:.3f} ms\n", cost.cycles,
                   cost.cycleSeconds * 1e3, cost.updateSeconds * 1e3, cost.seconds * 1e3);
  return s;
}

namespace {

// Seconds per forward op (with its backward ops) of the unpipelined step, in forward order, and
// each forward op's first output name.
struct ForwardCosts {
  std::vector<double> seconds;
  std::vector<std::string> names;
};

ForwardCosts forwardCosts(const Graph& training, const Target& ipu,
                          const pipeline::PipelineOptions& o, const CostOptions& opts) {
  replication::ReplicatedGraph rg = replication::replicate(
      training, {o.replicas, o.accumulation, o.shardOptimizerState, o.accumulateInWeightDType});
  CompileOptions co;
  rg.configure(co, o.accumulation);
  co.checkMemory = false;
  const Executable exe = compile(rg.graph, ipu, co);
  const StepCost sc = estimateStep(exe, opts);
  const Graph& g = exe.graph;
  int forwardEnd = static_cast<int>(g.ops().size());
  for (const Op& op : g.ops())
    if (op.gradientOf >= 0 || op.kind == OpKind::ApplyUpdate ||
        (co.updateFirstOp >= 0 && op.id >= co.updateFirstOp)) {
      forwardEnd = op.id;
      break;
    }
  ForwardCosts f;
  std::vector<int> position(g.ops().size(), -1);
  for (int i = 0; i < forwardEnd; ++i) {
    const Op& op = g.op(i);
    if (op.outputs.empty()) continue;  // side effects (running statistics) go with the op before
    position[static_cast<size_t>(i)] = static_cast<int>(f.names.size());
    f.names.push_back(g.tensor(op.outputs[0]).name);
    f.seconds.push_back(0.0);
  }
  auto positionOf = [&](int opId) {
    for (int i = opId; i >= 0; --i)
      if (position[static_cast<size_t>(i)] >= 0) return position[static_cast<size_t>(i)];
    return 0;
  };
  for (size_t k = 0; k < exe.computeSets.size(); ++k) {
    const Op& op = g.op(exe.computeSets[k].op);
    int p = -1;
    if (op.id < forwardEnd)
      p = positionOf(op.id);
    else if (op.gradientOf >= 0 && g.tensor(op.gradientOf).producer >= 0)
      p = positionOf(g.tensor(op.gradientOf).producer);
    if (p >= 0) f.seconds[static_cast<size_t>(p)] += sc.computeSets[k].total() / ipu.clockHz;
  }
  return f;
}

}  // namespace

AutoSplit autoSplit(const Graph& training, const Target& ipu, int ipus,
                    const pipeline::PipelineOptions& options, const CostOptions& opts,
                    const std::vector<std::string>& candidates) {
  if (ipus < 1) throw pipeline::PipelineError(fmt::format("ipus = {} must be at least 1", ipus));
  const ForwardCosts f = forwardCosts(training, ipu, options, opts);
  const int K = static_cast<int>(f.names.size());
  // A stage may end after position i when a split point names it: the last position a
  // candidate (an output name or a layer prefix) covers; without candidates, every position
  // whose own name covers no later op.
  std::vector<bool> cut(static_cast<size_t>(K), false);
  std::vector<std::string> cutName(static_cast<size_t>(K));
  auto lastCovered = [&](const std::string& split) {
    int last = -1;
    for (int i = 0; i < K; ++i)
      if (pipeline::splitMatches(f.names[static_cast<size_t>(i)], split)) last = i;
    return last;
  };
  auto allowCut = [&](int i, const std::string& name) {
    cut[static_cast<size_t>(i)] = true;
    cutName[static_cast<size_t>(i)] = name;
  };
  if (candidates.empty()) {
    for (int i = 0; i < K; ++i)
      if (lastCovered(f.names[static_cast<size_t>(i)]) == i)
        allowCut(i, f.names[static_cast<size_t>(i)]);
  } else {
    for (const std::string& c : candidates)
      if (const int i = lastCovered(c); i >= 0) allowCut(i, c);
  }
  cut[static_cast<size_t>(K - 1)] = false;
  std::vector<double> prefix(static_cast<size_t>(K) + 1, 0.0);
  for (int i = 0; i < K; ++i) prefix[i + 1] = prefix[i] + f.seconds[static_cast<size_t>(i)];
  // Ops [a, b) that overflowed as stage s: ruled out with any more ops as any stage <= s (an
  // earlier stage stashes more micro-batches); a later stage may still hold them.
  struct Overflow {
    int a, b, stage;
  };
  std::vector<Overflow> forbidden;
  auto allowedRange = [&](int a, int b, int stage) {
    for (const Overflow& f : forbidden)
      if (a <= f.a && f.b <= b && stage <= f.stage) return false;
    return true;
  };
  AutoSplit best;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (;;) {
    // best[s][j]: the smallest slowest stage of positions [0, j) in s stages ending at a cut.
    const int S = ipus;
    std::vector<std::vector<double>> dp(static_cast<size_t>(S) + 1,
                                        std::vector<double>(static_cast<size_t>(K) + 1, kInf));
    std::vector<std::vector<int>> from(static_cast<size_t>(S) + 1,
                                       std::vector<int>(static_cast<size_t>(K) + 1, -1));
    dp[0][0] = 0;
    for (int s = 1; s <= S; ++s)
      for (int j = 1; j <= K; ++j) {
        if (j < K && !cut[static_cast<size_t>(j - 1)]) continue;
        if (s == S && j != K) continue;
        for (int i = s - 1; i < j; ++i) {  // stage s covers [i, j)
          if (dp[s - 1][i] == kInf || !allowedRange(i, j, s - 1)) continue;
          const double v = std::max(dp[s - 1][i], prefix[j] - prefix[i]);
          if (v < dp[s][j]) dp[s][j] = v, from[s][j] = i;  // strict: the earliest i wins ties
        }
      }
    if (dp[S][K] == kInf)
      throw pipeline::PipelineError(fmt::format(
          "no placement of '{}' over {} IPUs fits every IPU ({} pipelines compiled, {} ranges "
          "of ops ruled out): use more IPUs per replica, a smaller micro-batch, or recomputation",
          training.name(), ipus, best.placementsCompiled, forbidden.size()));
    std::vector<int> bounds = {K};
    for (int s = S, j = K; s > 0; --s) {
      j = from[s][j];
      bounds.push_back(j);
    }
    std::reverse(bounds.begin(), bounds.end());  // 0 = b0 < b1 < ... < bS = K
    pipeline::PipelineOptions o = options;
    o.splits.clear();
    o.stageIpu.clear();
    o.ipus = ipus;
    o.checkMemory = true;  // a placement is chosen by its fit verdict
    for (int s = 1; s < S; ++s) o.splits.push_back(cutName[static_cast<size_t>(bounds[s] - 1)]);
    ++best.placementsCompiled;
    try {
      best.pipeline = pipeline::compilePipeline(training, ipu, o);
    } catch (const pipeline::IpuDoesNotFit& e) {
      const int stage = e.stages().front();
      forbidden.push_back(
          {bounds[static_cast<size_t>(stage)], bounds[static_cast<size_t>(stage) + 1], stage});
      continue;
    }
    best.splits = o.splits;
    best.cost = estimatePipelineStep(best.pipeline, opts);
    const std::vector<double> st = stageSeconds(best.cost);
    best.slowestStageSeconds = *std::max_element(st.begin(), st.end());
    return best;
  }
}

}  // namespace ipu::cost
