#include "ipu_backend/compiler/pipeline.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <omp.h>

#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/replication/replicate.h"

namespace ipu::pipeline {

std::string_view scheduleName(Schedule s) {
  switch (s) {
    case Schedule::Grouped:
      return "grouped";
    case Schedule::Interleaved:
      return "interleaved";
    case Schedule::Sequential:
      return "sequential";
  }
  return "?";
}

Schedule parseSchedule(std::string_view s) {
  if (s == "grouped") return Schedule::Grouped;
  if (s == "interleaved") return Schedule::Interleaved;
  if (s == "sequential") return Schedule::Sequential;
  throw PipelineError(fmt::format(
      "unknown pipeline schedule '{}': expected grouped, interleaved or sequential", s));
}

std::string_view phaseName(Phase p) {
  switch (p) {
    case Phase::Forward:
      return "forward";
    case Phase::Backward:
      return "backward";
    case Phase::Update:
      return "update";
  }
  return "?";
}

std::vector<std::string> splitsFromLayerCounts(const std::vector<std::string>& layers,
                                               const std::vector<int>& layersPerStage) {
  const int total = std::accumulate(layersPerStage.begin(), layersPerStage.end(), 0);
  if (total != static_cast<int>(layers.size()) ||
      std::any_of(layersPerStage.begin(), layersPerStage.end(), [](int n) { return n < 1; }))
    throw PipelineError(fmt::format(
        "layers per IPU [{}] must be positive and add up to the model's {} layers (they add up "
        "to {})",
        fmt::join(layersPerStage, ","), layers.size(), total));
  std::vector<std::string> splits;
  int done = 0;
  for (size_t s = 0; s + 1 < layersPerStage.size(); ++s) {
    done += layersPerStage[s];
    splits.push_back(layers[static_cast<size_t>(done - 1)]);
  }
  return splits;
}

int overlapLength(Schedule s, int stages) {
  switch (s) {
    case Schedule::Grouped:
      return 2 * stages;  // forward stages then the reversed backward stages
    case Schedule::Interleaved:
      return stages;
    case Schedule::Sequential:
      return 1;
  }
  return 1;
}

int smallestAccumulation(Schedule s, int stages) {
  return overlapLength(s, stages);
}

int stashDepth(Schedule s, int stages, int stage) {
  switch (s) {
    case Schedule::Grouped:
      return 2 * (stages - 1 - stage);
    case Schedule::Interleaved:
      return stages - 1 - stage;
    case Schedule::Sequential:
      return 0;
  }
  return 0;
}

void checkSchedule(Schedule s, int stages, const std::vector<int>& stageIpu, int accumulation) {
  if (accumulation < 1)
    throw PipelineError(
        fmt::format("gradient-accumulation count G = {} must be at least 1", accumulation));
  if (s == Schedule::Interleaved)
    for (int a = 0; a < stages; ++a)
      for (int b = a + 1; b < stages; ++b)
        if (stageIpu[static_cast<size_t>(a)] == stageIpu[static_cast<size_t>(b)])
          throw PipelineError(fmt::format(
              "the interleaved schedule cannot put two stages on one IPU in training (stages {} "
              "and {} are both on IPU {}): use the grouped or sequential schedule, or give every "
              "stage its own IPU",
              a, b, stageIpu[static_cast<size_t>(a)]));
  const int L = overlapLength(s, stages);
  if (s == Schedule::Sequential || (accumulation % L == 0 && accumulation >= L)) return;
  const int nearest = std::max(L, (accumulation + L - 1) / L * L);
  throw PipelineError(fmt::format(
      "the {} schedule over {} stages needs the gradient-accumulation count G to be a multiple "
      "of L = {} and at least L (G % L == 0, G >= L; L = {}); got G = {}: the smallest valid G "
      "is {}, the nearest at or above {} is {} (the sequential schedule takes any G)",
      scheduleName(s), stages, L, s == Schedule::Grouped ? "2 x stages" : "stages", accumulation, L,
      accumulation, nearest));
}

std::vector<std::vector<SegmentRun>> scheduleCycles(Schedule s, int stages, int accumulation,
                                                    const std::vector<int>& forward,
                                                    const std::vector<int>& backward) {
  const int N = stages, G = accumulation;
  std::vector<std::vector<SegmentRun>> cycles;
  auto valid = [&](int m) { return m >= 0 && m < G; };
  switch (s) {
    case Schedule::Grouped:
      // F_s(m) in cycle m + s, B_s(m) in cycle m + 2N - 2 - s: forwards first in a cycle (the
      // last stage's backward follows its forward in the same cycle).
      for (int c = 0; c < G + 2 * N - 2; ++c) {
        std::vector<SegmentRun> runs;
        for (int st = 0; st < N; ++st)
          if (valid(c - st)) runs.push_back({forward[static_cast<size_t>(st)], c - st});
        for (int st = N - 1; st >= 0; --st)
          if (int m = c - (2 * N - 2 - st); valid(m))
            runs.push_back({backward[static_cast<size_t>(st)], m});
        cycles.push_back(std::move(runs));
      }
      break;
    case Schedule::Interleaved:
      // Ticks: F_s(m) at 2m + s, B_s(m) at 2m + 2N - 1 - s (the other parity on the same IPU,
      // so every IPU alternates a forward and a backward); a cycle is two ticks.
      for (int c = 0; c < G + N - 1; ++c) {
        std::vector<SegmentRun> runs;
        for (int tick = 2 * c; tick < 2 * c + 2; ++tick)
          for (int st = 0; st < N; ++st) {
            if ((tick - st) % 2 == 0 && valid((tick - st) / 2) && tick >= st)
              runs.push_back({forward[static_cast<size_t>(st)], (tick - st) / 2});
            const int b = tick - (2 * N - 1 - st);
            if (b >= 0 && b % 2 == 0 && valid(b / 2))
              runs.push_back({backward[static_cast<size_t>(st)], b / 2});
          }
        cycles.push_back(std::move(runs));
      }
      break;
    case Schedule::Sequential:
      for (int m = 0; m < G; ++m) {
        std::vector<SegmentRun> runs;
        for (int st = 0; st < N; ++st) runs.push_back({forward[static_cast<size_t>(st)], m});
        for (int st = N - 1; st >= 0; --st) runs.push_back({backward[static_cast<size_t>(st)], m});
        cycles.push_back(std::move(runs));
      }
      break;
  }
  return cycles;
}

bool splitMatches(const std::string& name, const std::string& split) {
  return name == split ||
         (name.size() > split.size() && name.compare(0, split.size(), split) == 0 &&
          (name[split.size()] == '/' || name[split.size()] == '_' || name[split.size()] == '.'));
}

namespace {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The forward output names (and their name prefixes) closest to `split`, for the error.
std::string closeNames(const Graph& g, int forwardEnd, const std::string& split) {
  std::set<std::string> names;
  for (int i = 0; i < forwardEnd; ++i)
    for (int t : g.op(i).outputs) {
      const std::string& n = g.tensor(t).name;
      names.insert(n);
      for (size_t p = n.find('/'); p != std::string::npos; p = n.find('/', p + 1))
        names.insert(n.substr(0, p));
    }
  std::vector<std::pair<size_t, std::string>> ranked;
  for (const std::string& n : names) ranked.emplace_back(editDistance(n, split), n);
  std::sort(ranked.begin(), ranked.end());
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(4, ranked.size()); ++i)
    out += (i ? ", '" : "'") + ranked[i].second + "'";
  return out;
}

// Where each op goes: stage and phase, from the splits, Op::gradientOf and the dataflow.
struct Assignment {
  std::vector<int> opStage;
  std::vector<Phase> opPhase;
  int stages = 1;
};

// `recomputedStage[op]` >= 0: a recomputed forward op, which runs in that stage's backward.
Assignment assignStages(const Graph& g, int updateFirst, const std::vector<std::string>& splits,
                        const std::vector<int>& recomputedStage = {}) {
  auto recomputedIn = [&](int op) {
    return recomputedStage.empty() ? -1 : recomputedStage[static_cast<size_t>(op)];
  };
  const int nOps = static_cast<int>(g.ops().size());
  int forwardEnd = std::min(updateFirst, nOps);
  for (int i = 0; i < forwardEnd; ++i)
    if (g.op(i).gradientOf >= 0 || recomputedIn(i) >= 0) {
      forwardEnd = i;
      break;
    }
  Assignment a;
  a.stages = static_cast<int>(splits.size()) + 1;
  a.opStage.assign(static_cast<size_t>(nOps), -1);
  a.opPhase.assign(static_cast<size_t>(nOps), Phase::Backward);
  // Forward: stage k ends after the last op whose output matches splits[k].
  std::vector<int> splitOp(splits.size(), -1);
  for (size_t k = 0; k < splits.size(); ++k) {
    for (int i = 0; i < forwardEnd; ++i)
      for (int t : g.op(i).outputs)
        if (splitMatches(g.tensor(t).name, splits[k])) splitOp[k] = i;
    if (splitOp[k] < 0)
      throw PipelineError(fmt::format(
          "pipeline split '{}' names no forward op of '{}' (a split is an op's output name or a "
          "layer's name prefix); close names: {}",
          splits[k], g.name(), closeNames(g, forwardEnd, splits[k])));
    if (k > 0 && splitOp[k] <= splitOp[k - 1])
      throw PipelineError(fmt::format(
          "pipeline split '{}' ends at or before split '{}' (op {} <= op {}): give the splits in "
          "forward order, one per stage boundary",
          splits[k], splits[k - 1], splitOp[k], splitOp[k - 1]));
  }
  if (!splitOp.empty() && splitOp.back() >= forwardEnd - 1)
    throw PipelineError(fmt::format(
        "pipeline split '{}' is the last forward op: stage {} would be empty; drop that split",
        splits.back(), a.stages - 1));
  for (int i = 0, s = 0; i < forwardEnd; ++i) {
    a.opStage[static_cast<size_t>(i)] = s;
    a.opPhase[static_cast<size_t>(i)] = Phase::Forward;
    if (s < static_cast<int>(splitOp.size()) && splitOp[static_cast<size_t>(s)] == i) ++s;
  }
  // Tensors: activations follow their producer, variables their first forward reader (or the
  // first op that writes them, below).
  std::vector<int> tensorStage(g.tensors().size(), -1);
  for (int i = 0; i < forwardEnd; ++i) {
    const Op& op = g.op(i);
    for (int t : op.inputs)
      if (g.tensor(t).kind == TensorKind::Variable && tensorStage[static_cast<size_t>(t)] < 0)
        tensorStage[static_cast<size_t>(t)] = a.opStage[static_cast<size_t>(i)];
    for (int t : op.outputs)
      tensorStage[static_cast<size_t>(t)] = a.opStage[static_cast<size_t>(i)];
  }
  const int backwardEnd = std::min(updateFirst, nOps);
  // Backward: the forward op's stage, else the stage of what it writes or reads.
  for (int i = forwardEnd; i < backwardEnd; ++i) {
    const Op& op = g.op(i);
    int stage = recomputedIn(i);
    if (stage < 0 && op.gradientOf >= 0) stage = tensorStage[static_cast<size_t>(op.gradientOf)];
    std::vector<int> written;
    for (int w : opDef(op.kind).writesInputs) written.push_back(op.inputs[static_cast<size_t>(w)]);
    for (int w : written)
      if (stage < 0) stage = tensorStage[static_cast<size_t>(w)];
    if (stage < 0)
      for (int t : op.inputs) stage = std::max(stage, tensorStage[static_cast<size_t>(t)]);
    a.opStage[static_cast<size_t>(i)] = stage;
    if (stage < 0) continue;
    for (int w : written)
      if (tensorStage[static_cast<size_t>(w)] < 0) tensorStage[static_cast<size_t>(w)] = stage;
    for (int t : op.outputs) tensorStage[static_cast<size_t>(t)] = stage;
  }
  // Update: an op runs where the variable it writes lives. Optimizer state and accumulators
  // live with their weight: walking back from the writes of the weights, the variables an
  // update reads take the stage of the variable it writes. Then every update op takes the stage
  // of the variable it writes, else of a variable it reads, else the highest stage of its inputs
  // (a value every stage needs, the loss-scaling flag, is computed last and copied to the
  // others).
  auto writtenStage = [&](const Op& op) {
    int stage = -1;
    for (int w : opDef(op.kind).writesInputs)
      stage = std::max(stage, tensorStage[static_cast<size_t>(op.inputs[static_cast<size_t>(w)])]);
    return stage;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = nOps - 1; i >= backwardEnd; --i) {
      const Op& op = g.op(i);
      const int stage = writtenStage(op);
      if (stage < 0) continue;
      for (int t : op.inputs)
        if (g.tensor(t).kind == TensorKind::Variable && tensorStage[static_cast<size_t>(t)] < 0) {
          tensorStage[static_cast<size_t>(t)] = stage;
          changed = true;
        }
    }
  }
  // State that no weight write reads directly (LAMB's and Adam's per-weight step count, read
  // through the bias corrections) lives with its weight by name: `<weight>/<slot>`.
  for (const Tensor& t : g.tensors()) {
    if (t.kind != TensorKind::Variable || tensorStage[static_cast<size_t>(t.id)] >= 0) continue;
    for (size_t cut = t.name.rfind('/'); cut != std::string::npos && cut > 0;
         cut = t.name.rfind('/', cut - 1)) {
      const int owner = g.find(t.name.substr(0, cut));
      if (owner >= 0 && tensorStage[static_cast<size_t>(owner)] >= 0) {
        tensorStage[static_cast<size_t>(t.id)] = tensorStage[static_cast<size_t>(owner)];
        break;
      }
    }
  }
  for (int i = backwardEnd; i < nOps; ++i) {
    const Op& op = g.op(i);
    a.opPhase[static_cast<size_t>(i)] = Phase::Update;
    int stage = writtenStage(op);
    for (int t : op.inputs)
      if (stage < 0 && g.tensor(t).kind == TensorKind::Variable)
        stage = tensorStage[static_cast<size_t>(t)];
    if (stage < 0)
      for (int t : op.inputs) stage = std::max(stage, tensorStage[static_cast<size_t>(t)]);
    a.opStage[static_cast<size_t>(i)] = stage;
    if (stage < 0) continue;
    for (int t : op.outputs) tensorStage[static_cast<size_t>(t)] = stage;
    for (int w : opDef(op.kind).writesInputs)
      if (int& ws = tensorStage[static_cast<size_t>(op.inputs[static_cast<size_t>(w)])]; ws < 0)
        ws = stage;
  }
  const auto consumers = g.consumers();
  // Ops still without a stage read nothing staged (constants): the stage of their first reader.
  for (int i = nOps - 1; i >= 0; --i) {
    if (a.opStage[static_cast<size_t>(i)] >= 0) continue;
    int stage = a.stages;
    for (int t : g.op(i).outputs)
      for (int c : consumers[static_cast<size_t>(t)])
        if (a.opStage[static_cast<size_t>(c)] >= 0)
          stage = std::min(stage, a.opStage[static_cast<size_t>(c)]);
    a.opStage[static_cast<size_t>(i)] = stage == a.stages ? a.stages - 1 : stage;
  }
  return a;
}

}  // namespace

i64 PipelinedExecutable::interIpuBytesPerMicroBatch() const {
  // A tensor crosses to an IPU once per micro-batch, however many of its segments read it.
  std::set<std::pair<int, int>> crossings;  // (tensor, receiving IPU)
  i64 b = 0;
  for (const Transfer& t : transfers)
    if (t.interIpu && t.fromSegment >= 0 &&
        segments[static_cast<size_t>(t.toSegment)].phase != Phase::Update &&
        segments[static_cast<size_t>(t.fromSegment)].phase != Phase::Update &&
        crossings.insert({t.tensor, segments[static_cast<size_t>(t.toSegment)].ipu}).second)
      b += t.bytes;
  return b;
}

i64 PipelinedExecutable::interIpuBytesPerStep() const {
  i64 b = 0;
  for (const Transfer& t : transfers)
    if (t.interIpu && t.fromSegment >= 0 &&
        (segments[static_cast<size_t>(t.toSegment)].phase == Phase::Update ||
         segments[static_cast<size_t>(t.fromSegment)].phase == Phase::Update))
      b += t.bytes;
  return b;
}

std::string PipelinedExecutable::describe() const {
  std::string s = fmt::format(
      "pipeline of {} stages on {} IPUs per replica x {} replicas, {} schedule, G = {}\n", stages,
      ipus, options.replicas, scheduleName(options.schedule), options.accumulation);
  for (const IpuProgram& p : programs) {
    const i64 cap = p.exe->target.bytesPerTile;
    s += fmt::format(
        "  IPU {}: stages [{}], fullest tile {} holds {} B of {} B ({:.1f}%), "
        "activation stashes {} B{}\n",
        p.ipu, fmt::join(p.stages, ","), p.worstTile, p.peakTileBytes, cap,
        100.0 * static_cast<double>(p.peakTileBytes) / static_cast<double>(cap), p.stashBytes,
        p.offChipStateBytes > 0
            ? fmt::format(", optimizer state off-chip {} B", p.offChipStateBytes)
            : std::string());
  }
  s += fmt::format("  inter-IPU copies: {} B per micro-batch, {} B per step (update part)\n",
                   interIpuBytesPerMicroBatch(), interIpuBytesPerStep());
  return s;
}

namespace {

// One IPU program's compile: its executable, or what it threw.
struct Compiled {
  std::optional<Executable> exe;
  std::exception_ptr error;
};

// Compiles the IPU programs side by side: the programs are independent, and much of a compile
// runs on one thread (planning the ops, describing the memory), so a pipeline's verdict takes
// about half the wall time on two cores. As many workers as OpenMP threads (one: in order),
// each taking the next program and running the compiler's own parallel passes in its own team.
// The executables are those of compiling them one at a time, bit for bit.
std::vector<Compiled> compileSideBySide(std::vector<Graph>& graphs,
                                        const std::vector<Target>& targets,
                                        const std::vector<CompileOptions>& options) {
  std::vector<Compiled> out(graphs.size());
  const int threads = omp_get_max_threads();
  std::atomic<size_t> next{0};
  auto work = [&] {
    omp_set_num_threads(threads);  // a new thread starts from the environment's count
    for (size_t i; (i = next.fetch_add(1)) < graphs.size();) {
      try {
        out[i].exe.emplace(compile(std::move(graphs[i]), targets[i], options[i]));
      } catch (...) {
        out[i].error = std::current_exception();
      }
    }
  };
  const size_t workers = std::min(graphs.size(), static_cast<size_t>(std::max(1, threads)));
  std::vector<std::thread> pool;
  for (size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

}  // namespace

PipelinedExecutable compilePipeline(const Graph& training, const Target& ipu,
                                    const PipelineOptions& options) {
  PipelinedExecutable pe;
  pe.options = options;
  if (options.replicas < 1)
    throw PipelineError(fmt::format("replicas = {} must be at least 1", options.replicas));
  // 1. The replica's training graph: accumulation over G micro-batches and the replicas' update
  //    part, optimizers lowered to ordinary ops (every IPU program then only cuts it).
  replication::ReplicatedGraph rg = replication::replicate(
      training, {options.replicas, options.accumulation, options.shardOptimizerState,
                 options.accumulateInWeightDType});
  Graph& g = rg.graph;
  int updateFirst = rg.updateFirstOp;
  if (updateFirst < 0) {
    updateFirst = static_cast<int>(g.ops().size());
    for (const Op& op : g.ops())
      if (op.kind == OpKind::OptimizerUpdate) {
        updateFirst = op.id;
        break;
      }
  }
  expandOptimizers(g);
  for (const Op& op : g.ops())
    if (op.id >= updateFirst && op.gradientOf >= 0)
      throw PipelineError(fmt::format(
          "'{}': backward op {} ({}) follows the first optimizer update: the updates must come "
          "after the whole backward",
          g.name(), op.id, opName(op.kind)));
  pe.zeroInitialised = rg.zeroInitialised;

  // 2. Stages (with recomputation: the stage boundaries and the explicit checkpoints cut the
  //    forward; every recomputed op runs in the backward of the stage of the op it copies), IPUs,
  //    schedule.
  std::vector<int> recomputedStage;
  if (options.recompute) {
    const Assignment before = assignStages(g, updateFirst, options.splits);
    std::vector<int> forwardStage(g.ops().size(), -1);
    int loss = -1;
    for (const Op& op : g.ops()) {
      if (before.opPhase[static_cast<size_t>(op.id)] == Phase::Forward)
        forwardStage[static_cast<size_t>(op.id)] = before.opStage[static_cast<size_t>(op.id)];
      else if (loss < 0 && op.gradientOf >= 0)
        loss = op.gradientOf;  // the backward starts with the loss's seed
    }
    if (loss < 0)
      throw PipelineError(fmt::format(
          "'{}': recomputation needs a training graph (forward, backward from a loss, updates)",
          g.name()));
    std::vector<std::string> checkpoints = stageBoundaryCheckpoints(g, forwardStage);
    checkpoints.insert(checkpoints.end(), options.checkpoints.begin(), options.checkpoints.end());
    try {
      pe.recomputation = applyRecomputation(g, loss, checkpoints);
    } catch (const GraphError& e) {
      throw PipelineError(e.what());
    }
    updateFirst += pe.recomputation.recomputedOps;  // the copies run before the updates
    recomputedStage.assign(g.ops().size(), -1);
    for (const auto& [copy, original] : pe.recomputation.copies)
      recomputedStage[static_cast<size_t>(copy)] = forwardStage[static_cast<size_t>(
          original - static_cast<int>(std::count_if(
                         pe.recomputation.copies.begin(), pe.recomputation.copies.end(),
                         [&](const std::pair<int, int>& c) { return c.first < original; })))];
  } else if (!options.checkpoints.empty()) {
    throw PipelineError(
        "recomputation checkpoints are given but recomputation is off: set recompute, or drop "
        "the checkpoints");
  }
  Assignment a = assignStages(g, updateFirst, options.splits, recomputedStage);
  const int N = a.stages;
  pe.stages = N;
  pe.stageIpu = options.stageIpu;
  if (pe.stageIpu.empty()) {
    if (options.ipus > 0 && options.ipus != N)
      throw PipelineError(fmt::format(
          "{} stages ({} split points) on {} IPUs: give one stage per IPU, or a stage -> IPU "
          "map to put several stages on one IPU",
          N, options.splits.size(), options.ipus));
    pe.stageIpu.resize(static_cast<size_t>(N));
    std::iota(pe.stageIpu.begin(), pe.stageIpu.end(), 0);
  }
  if (static_cast<int>(pe.stageIpu.size()) != N)
    throw PipelineError(
        fmt::format("the stage -> IPU map has {} entries for {} stages ({} split "
                    "points + 1)",
                    pe.stageIpu.size(), N, options.splits.size()));
  pe.ipus = options.ipus > 0 ? options.ipus
                             : *std::max_element(pe.stageIpu.begin(), pe.stageIpu.end()) + 1;
  std::vector<std::vector<int>> stagesOf(static_cast<size_t>(pe.ipus));
  for (int s = 0; s < N; ++s) {
    const int i = pe.stageIpu[static_cast<size_t>(s)];
    if (i < 0 || i >= pe.ipus)
      throw PipelineError(fmt::format(
          "stage {} is mapped to IPU {}, but the replica has {} IPUs (0..{}): more stages than "
          "IPUs need a map that shares IPUs",
          s, i, pe.ipus, pe.ipus - 1));
    stagesOf[static_cast<size_t>(i)].push_back(s);
  }
  for (int i = 0; i < pe.ipus; ++i)
    if (stagesOf[static_cast<size_t>(i)].empty())
      throw PipelineError(fmt::format(
          "IPU {} of {} holds no stage: use fewer IPUs per replica or map a stage to it", i,
          pe.ipus));
  checkSchedule(options.schedule, N, pe.stageIpu, options.accumulation);
  pe.opStage = a.opStage;
  pe.opPhase = a.opPhase;

  // 3. Segments: each stage's forward and backward, then runs of update ops on one IPU.
  const int nOps = static_cast<int>(g.ops().size());
  std::vector<int> opSegment(static_cast<size_t>(nOps), -1);
  auto addSegment = [&](Phase p, int stage, int ipuOf) {
    Segment s;
    s.phase = p;
    s.stage = stage;
    s.ipu = ipuOf;
    pe.segments.push_back(s);
    return static_cast<int>(pe.segments.size() - 1);
  };
  for (int s = 0; s < N; ++s)
    pe.forwardSegment.push_back(addSegment(Phase::Forward, s, pe.stageIpu[static_cast<size_t>(s)]));
  for (int s = 0; s < N; ++s)
    pe.backwardSegment.push_back(
        addSegment(Phase::Backward, s, pe.stageIpu[static_cast<size_t>(s)]));
  for (int i = 0; i < nOps; ++i) {
    const int stage = a.opStage[static_cast<size_t>(i)];
    const int ipuOf = pe.stageIpu[static_cast<size_t>(stage)];
    switch (a.opPhase[static_cast<size_t>(i)]) {
      case Phase::Forward:
        opSegment[static_cast<size_t>(i)] = pe.forwardSegment[static_cast<size_t>(stage)];
        break;
      case Phase::Backward:
        opSegment[static_cast<size_t>(i)] = pe.backwardSegment[static_cast<size_t>(stage)];
        break;
      case Phase::Update:
        if (pe.updateSegments.empty() ||
            pe.segments[static_cast<size_t>(pe.updateSegments.back())].ipu != ipuOf)
          pe.updateSegments.push_back(addSegment(Phase::Update, -1, ipuOf));
        opSegment[static_cast<size_t>(i)] = pe.updateSegments.back();
        break;
    }
  }
  // Dataflow must follow the schedule: forwards from lower stages, backwards from higher ones.
  for (int i = 0; i < nOps; ++i) {
    const Op& op = g.op(i);
    const Segment& to = pe.segments[static_cast<size_t>(opSegment[static_cast<size_t>(i)])];
    for (int t : op.inputs) {
      const int p = g.tensor(t).producer;
      if (p < 0) continue;
      const Segment& from = pe.segments[static_cast<size_t>(opSegment[static_cast<size_t>(p)])];
      const bool ok = to.phase == Phase::Update || from.phase == Phase::Update
                          ? !(from.phase == Phase::Update && to.phase != Phase::Update)
                      : from.phase == Phase::Forward && to.phase == Phase::Forward
                          ? from.stage <= to.stage
                      : from.phase == Phase::Backward && to.phase == Phase::Backward
                          ? from.stage >= to.stage
                          : from.phase == Phase::Forward;
      if (!ok)
        throw PipelineError(fmt::format(
            "op {} ({}, {} of stage {}) reads '{}' from the {} of stage {}, which the pipeline "
            "runs later: the split points cut a dependency the schedule cannot keep",
            i, opName(op.kind), phaseName(to.phase), to.stage, g.tensor(t).name,
            phaseName(from.phase), from.stage));
    }
  }
  // A variable lives on one IPU.
  std::vector<int> variableIpu(g.tensors().size(), -1);
  for (int i = 0; i < nOps; ++i) {
    const int ipuOf = pe.segments[static_cast<size_t>(opSegment[static_cast<size_t>(i)])].ipu;
    for (int t : g.op(i).inputs) {
      if (g.tensor(t).kind != TensorKind::Variable) continue;
      int& v = variableIpu[static_cast<size_t>(t)];
      if (v >= 0 && v != ipuOf)
        throw PipelineError(fmt::format(
            "variable '{}' is used on IPU {} and IPU {} (op {}, {}): a weight and its state live "
            "on one IPU; move the split points so that its readers share a stage or an IPU",
            g.tensor(t).name, v, ipuOf, i, opName(g.op(i).kind)));
      v = ipuOf;
    }
  }

  // 4. Every IPU's program: its segments' ops in schedule order.
  const auto cycles = scheduleCycles(options.schedule, N, options.accumulation, pe.forwardSegment,
                                     pe.backwardSegment);
  std::vector<std::vector<int>> opsOfSegment(pe.segments.size());
  for (int i = 0; i < nOps; ++i)
    opsOfSegment[static_cast<size_t>(opSegment[static_cast<size_t>(i)])].push_back(i);
  for (const Tensor& t : g.tensors())
    if (t.kind == TensorKind::Input) pe.graphInputs.push_back(t.id);
  pe.graphOutputs = g.outputs();
  std::vector<bool> isOutput(g.tensors().size(), false);
  for (int t : g.outputs()) isOutput[static_cast<size_t>(t)] = true;

  std::vector<Graph> programGraphs;  // per IPU, until compiled
  for (int i = 0; i < pe.ipus; ++i) {
    IpuProgram prog;
    prog.ipu = i;
    prog.stages = stagesOf[static_cast<size_t>(i)];
    std::vector<int> order;  // this IPU's segments in program order
    for (int s : prog.stages) order.push_back(pe.forwardSegment[static_cast<size_t>(s)]);
    for (auto it = prog.stages.rbegin(); it != prog.stages.rend(); ++it)
      order.push_back(pe.backwardSegment[static_cast<size_t>(*it)]);
    for (int u : pe.updateSegments)
      if (pe.segments[static_cast<size_t>(u)].ipu == i) order.push_back(u);
    Graph sub(fmt::format("{}/ipu{}", g.name(), i));
    auto local = [&](int t) -> int {
      if (auto it = prog.localOf.find(t); it != prog.localOf.end()) return it->second;
      const Tensor& T = g.tensor(t);
      const int id = T.kind == TensorKind::Variable ? sub.addVariable(T.name, T.shape, T.dtype)
                                                    : sub.addInput(T.name, T.shape, T.dtype);
      prog.localOf[t] = id;
      return id;
    };
    for (int segId : order) {
      Segment& seg = pe.segments[static_cast<size_t>(segId)];
      seg.firstOp = static_cast<int>(sub.ops().size());
      for (int o : opsOfSegment[static_cast<size_t>(segId)]) {
        const Op& op = g.op(o);
        std::vector<int> ins;
        for (int t : op.inputs) {
          const Tensor& T = g.tensor(t);
          const int from =
              T.producer >= 0 ? opSegment[static_cast<size_t>(T.producer)] : -1;  // -1: host
          if (T.kind != TensorKind::Variable && from != segId) {
            if (std::find(seg.receives.begin(), seg.receives.end(), t) == seg.receives.end()) {
              seg.receives.push_back(t);
              Transfer tr;
              tr.tensor = t;
              tr.fromSegment = from;
              tr.toSegment = segId;
              tr.bytes = T.bytes();
              tr.interIpu = from >= 0 && pe.segments[static_cast<size_t>(from)].ipu != i;
              pe.transfers.push_back(tr);
            }
          }
          ins.push_back(local(t));
        }
        std::vector<std::string> names;
        for (int t : op.outputs) names.push_back(g.tensor(t).name);
        const int id = sub.addOp(op.kind, ins, op.attrs, names);
        for (size_t k = 0; k < op.outputs.size(); ++k)
          prog.localOf[op.outputs[k]] = sub.op(id).outputs[k];
      }
      seg.endOp = static_cast<int>(sub.ops().size());
    }
    pe.programs.push_back(std::move(prog));
    // The graph is finished below (sends, stashes) once every IPU's receives are known.
    programGraphs.push_back(std::move(sub));
  }
  // Sends: what other segments receive, and the training graph's outputs.
  for (const Transfer& tr : pe.transfers)
    if (tr.fromSegment >= 0) {
      auto& sends = pe.segments[static_cast<size_t>(tr.fromSegment)].sends;
      if (std::find(sends.begin(), sends.end(), tr.tensor) == sends.end())
        sends.push_back(tr.tensor);
    }
  for (int t : g.outputs()) {
    const int p = g.tensor(t).producer;
    if (p < 0) continue;
    auto& sends = pe.segments[static_cast<size_t>(opSegment[static_cast<size_t>(p)])].sends;
    if (std::find(sends.begin(), sends.end(), t) == sends.end()) sends.push_back(t);
  }
  // Activation stashes: what a stage's backward reads from the forwards (its own activations
  // and its stage inputs) is held once per micro-batch whose forward of that stage has run and
  // whose backward has not; beyond the live copy these are FIFO slots (counted by running the
  // schedule: 2(N-1-s) grouped, N-1-s interleaved, 0 sequential).
  std::vector<i64> slotsOfStage(static_cast<size_t>(N), 0);
  {
    std::vector<i64> open(static_cast<size_t>(N), 0);
    for (const auto& cycle : cycles)
      for (const SegmentRun& r : cycle) {
        const Segment& seg = pe.segments[static_cast<size_t>(r.segment)];
        i64& o = open[static_cast<size_t>(seg.stage)];
        if (seg.phase == Phase::Backward) {
          --o;
        } else {
          ++o;
          slotsOfStage[static_cast<size_t>(seg.stage)] =
              std::max(slotsOfStage[static_cast<size_t>(seg.stage)], o - 1);
        }
      }
  }
  std::vector<i64> stashSlots(pe.transfers.size(), 0);
  for (size_t k = 0; k < pe.transfers.size(); ++k) {
    const Transfer& tr = pe.transfers[k];
    if (tr.fromSegment < 0) continue;
    const Segment& to = pe.segments[static_cast<size_t>(tr.toSegment)];
    if (pe.segments[static_cast<size_t>(tr.fromSegment)].phase == Phase::Forward &&
        to.phase == Phase::Backward)
      stashSlots[k] = slotsOfStage[static_cast<size_t>(to.stage)];
  }
  // Every IPU's graph and compile options; the programs compile side by side below.
  std::vector<Target> targets;
  std::vector<CompileOptions> compileOptions;
  for (IpuProgram& prog : pe.programs) {
    Graph& sub = programGraphs[static_cast<size_t>(prog.ipu)];
    std::set<int> marked(sub.outputs().begin(), sub.outputs().end());
    for (int segId = 0; segId < static_cast<int>(pe.segments.size()); ++segId) {
      const Segment& seg = pe.segments[static_cast<size_t>(segId)];
      if (seg.ipu != prog.ipu) continue;
      for (int t : seg.sends)
        if (marked.insert(prog.localOf.at(t)).second) sub.markOutput(prog.localOf.at(t));
    }
    for (size_t k = 0; k < pe.transfers.size(); ++k) {
      const Transfer& tr = pe.transfers[k];
      if (stashSlots[k] == 0 || pe.segments[static_cast<size_t>(tr.toSegment)].ipu != prog.ipu)
        continue;
      const Tensor& T = g.tensor(tr.tensor);
      sub.addVariable(T.name + "/stash", {stashSlots[k] * T.elements()}, T.dtype);
      prog.stashBytes += stashSlots[k] * T.bytes();
    }
    // Every IPU's tile memory on its own; ops stay in segment order (no update scheduling).
    Target t = ipu;
    t.name = fmt::format("IPU {} of {} of the pipeline (stages {}) of {}", prog.ipu, pe.ipus,
                         fmt::join(prog.stages, ","), ipu.name);
    CompileOptions co;
    // Off-chip state: the check below, once the state's bytes are known.
    co.checkMemory = options.checkMemory && !options.optimizerStateOffChip;
    co.planExchanges = options.planExchanges;
    co.updateFirstOp = static_cast<int>(sub.ops().size());
    for (int u : pe.updateSegments)
      if (pe.segments[static_cast<size_t>(u)].ipu == prog.ipu) {
        co.updateFirstOp = pe.segments[static_cast<size_t>(u)].firstOp;
        break;
      }
    for (const Tensor& T : sub.tensors()) prog.globalOf.push_back(g.find(T.name));
    targets.push_back(std::move(t));
    compileOptions.push_back(co);
  }
  std::vector<Compiled> compiled = compileSideBySide(programGraphs, targets, compileOptions);
  // In IPU order, so that the error is the one compiling them one after another gives.
  for (IpuProgram& prog : pe.programs) {
    const size_t i = static_cast<size_t>(prog.ipu);
    const Target& t = targets[i];
    const CompileOptions& co = compileOptions[i];
    try {
      if (compiled[i].error) std::rethrow_exception(compiled[i].error);
      Executable exe = std::move(*compiled[i].exe);
      compiled[i].exe.reset();
      // Stochastic rounding keys on the training graph's tensor ids (stashes on their own).
      for (const Tensor& T : exe.graph.tensors()) {
        const int global = static_cast<size_t>(T.id) < prog.globalOf.size()
                               ? prog.globalOf[static_cast<size_t>(T.id)]
                               : -1;
        exe.roundingKeys.push_back(global >= 0 ? global
                                               : static_cast<int>(g.tensors().size()) + T.id);
      }
      prog.exe = std::make_shared<const Executable>(std::move(exe));
    } catch (const CompileError& e) {
      if (e.tile() < 0) throw;
      throw IpuDoesNotFit(
          e,
          std::string(e.what()) +
              fmt::format("\n  pipeline hint: IPU {} holds stages [{}]; move split points so "
                          "that it holds fewer layers, spread the stages over more IPUs, or use "
                          "a schedule with shallower stashes (stashes here: {} B)",
                          prog.ipu, fmt::join(prog.stages, ","), prog.stashBytes),
          prog.ipu, prog.stages);
    }
    // Off-chip optimizer state: per tile, the bytes of the variables only update ops touch.
    std::vector<i64> offChip(prog.exe->tileMemory.size(), 0);
    if (options.optimizerStateOffChip) {
      const Graph& pg = prog.exe->graph;
      std::vector<bool> updateOnly(pg.tensors().size(), true);
      for (const Op& op : pg.ops())
        if (op.id < co.updateFirstOp)
          for (int t : op.inputs) updateOnly[static_cast<size_t>(t)] = false;
      for (const Tensor& T : pg.tensors()) {
        if (T.kind != TensorKind::Variable || !updateOnly[static_cast<size_t>(T.id)] ||
            T.name.ends_with("/stash"))
          continue;
        prog.offChipStateBytes += T.bytes();
        for (const TileSlice& sl : prog.exe->mapping[static_cast<size_t>(T.id)])
          offChip[static_cast<size_t>(sl.tile)] += (sl.end - sl.begin) * sizeOf(T.dtype);
      }
    }
    i64 worst = -1;
    for (size_t tile = 0; tile < prog.exe->tileMemory.size(); ++tile)
      if (prog.exe->tileMemory[tile].total() - offChip[tile] > worst) {
        worst = prog.exe->tileMemory[tile].total() - offChip[tile];
        prog.worstTile = static_cast<int>(tile);
      }
    prog.peakTileBytes = worst;
    if (options.checkMemory && options.optimizerStateOffChip && worst > t.bytesPerTile)
      throw IpuDoesNotFit(
          CompileError(
              fmt::format("'{}': tile {} holds {} B of {} B with the optimizer state "
                          "({} B on this IPU) off-chip",
                          t.name, prog.worstTile, worst, t.bytesPerTile, prog.offChipStateBytes),
              prog.worstTile, worst, t.bytesPerTile),
          fmt::format("'{}': tile {} holds {} B of {} B with the optimizer state ({} B on this "
                      "IPU) off-chip\n  pipeline hint: IPU {} holds stages [{}]; move split "
                      "points so that it holds fewer layers or use recomputation",
                      t.name, prog.worstTile, worst, t.bytesPerTile, prog.offChipStateBytes,
                      prog.ipu, fmt::join(prog.stages, ",")),
          prog.ipu, prog.stages);
  }
  pe.graph = std::move(g);
  return pe;
}

}  // namespace ipu::pipeline
