#include "ipu_backend/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/op_shapes.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::cost {
namespace {

// Width of one tile load/store and vector ALU instruction: 64 bits (2 x f32 or 4 x f16), from
// the Mk2 tile ISA (f32v2 / f16v4 arithmetic).
constexpr double kVectorBits = 64;
// AMP contraction grain (input channels consumed per AMP pass): 8 for f32, 16 for f16 (the
// inChansPerGroup of poplibs' AMP convolution vertices on Mk2).
constexpr double kAmpGrainF32 = 8;
constexpr double kAmpGrainF16 = 16;

bool isHalf(Precision p) {
  return p != Precision::F32;
}

// Priced bytes per element of a buffer: f32 tensors (not temporaries) become halves with a 16.x
// precision and halfStorage; temporaries (partials) stay f32 unless partials are f16 (16.16).
double elemBytes(const Executable& exe, int buffer, const CostOptions& o) {
  const Buffer& b = exe.buffers[buffer];
  if (b.dtype != DType::F32 || !o.halfStorage || !isHalf(o.precision))
    return static_cast<double>(sizeOf(b.dtype));
  if (b.tensor < 0 && o.precision == Precision::F16F32) return 4;
  return 2;
}

// Registered kinds priced as MACs in some phases (CostTraits::macWork).
bool isMacOp(OpKind k) {
  const ops::OpInfo* info = ops::find(k);
  return info && info->costTraits.macWork;
}

// The compute sets priced as MACs: those of a MAC op's phases that multiply
// (CostTraits::macPhases; the others combine partials or move operands).
bool isMacPhase(const Op& op, int phase) {
  const ops::OpInfo* info = ops::find(op.kind);
  if (!info || !info->costTraits.macWork) return false;
  const std::vector<int>& phases = info->costTraits.macPhases;
  return std::find(phases.begin(), phases.end(), phase) != phases.end();
}

// Registered kinds whose phases 0-1 are channel sums (CostTraits::channelSumStreams).
int channelSumStreams(OpKind k) {
  const ops::OpInfo* info = ops::find(k);
  return info ? info->costTraits.channelSumStreams : 0;
}

double instructionsPerVector(const Op& op, int phase) {
  const ops::OpInfo* info = ops::find(op.kind);
  if (!info)
    throw std::logic_error(fmt::format("cost model: op kind {} ({}) is not registered",
                                       static_cast<int>(op.kind), opName(op.kind)));
  if (info->lowered)
    throw std::logic_error(fmt::format("cost model: {} is lowered by compile()", info->def.name));
  return info->cost(op, phase);
}

struct VertexWork {
  double macs = 0;      // AMP work (MAC ops)
  double units = 1;     // independent work units for the worker split
  double elements = 0;  // elements processed by vector instructions (non-MAC ops)
  double instrPerVector = 1;
  double vectorWidth = 2;
  double bytes = 0;  // tile memory traffic (non-MAC ops)
};

// Cost-relevant shape of one op, computed once per compute set.
struct OpInfo {
  double macs = 0, outElems = 1, redExtent = 1;
  double ampEfficiency = 1;
  double planA = 0, planW = 0;  // Planned exchange operands (bytes)
};

double ampEfficiency(double contraction, Precision p) {
  double g = isHalf(p) ? kAmpGrainF16 : kAmpGrainF32;
  return contraction / (std::ceil(contraction / g) * g);
}

OpInfo opInfo(const Executable& exe, const Op& op, const CostOptions& o) {
  const Graph& g = exe.graph;
  OpInfo in;
  const ops::OpInfo* registered = ops::find(op.kind);
  if (!registered || !registered->costTraits.macWork) return in;
  auto bytesOf = [&](const std::vector<int>& ts) {
    double b = 0;
    for (int t : ts) b += static_cast<double>(g.tensor(t).elements()) * elemBytes(exe, t, o);
    return b;
  };
  const ops::CostTraits::MacWork m = registered->costTraits.macWork(g, op);
  in.macs = m.macs;
  in.ampEfficiency = ampEfficiency(m.contraction, o.precision);
  in.outElems = m.outElems;
  in.redExtent = m.redExtent;
  in.planA = bytesOf(m.planA);
  in.planW = bytesOf(m.planW);
  return in;
}

VertexWork vertexWork(const Executable& exe, const ComputeSet& cs, const Op& op, const OpInfo& info,
                      const Vertex& v, const CostOptions& o) {
  VertexWork w;
  const double outElems = static_cast<double>(v.work.size());
  double outBytes = 0;
  for (const OutRegion& r : v.outputs)
    outBytes += static_cast<double>(r.end - r.begin) * elemBytes(exe, r.buffer, o);
  const double inBytes0 = v.inputs.empty() ? 4.0 : elemBytes(exe, v.inputs[0].buffer, o);
  w.vectorWidth = kVectorBits / 8 / inBytes0;

  if (isMacPhase(op, cs.phase)) {
    double redFrac = v.red.empty() ? 1.0 : static_cast<double>(v.red.size()) / info.redExtent;
    w.macs = info.macs * outElems / info.outElems * redFrac / info.ampEfficiency;
    w.units = std::max(1.0, outElems);
    return w;
  }
  // Combining partials (phase 1 of a split reduction) and reductions: elements read = outputs x
  // reduced extent of this vertex.
  const ops::OpInfo* registered = ops::find(op.kind);
  const bool combine = registered && registered->costTraits.reduction && !v.red.empty();
  const int sumStreams = channelSumStreams(op.kind);
  const bool channelSums = sumStreams > 0 && cs.phase < 2;
  if (combine || channelSums) {
    // channel_sums: sum and sum of squares (or dy and dy*xhat) of the tensors a phase-0 vertex
    // reads; finalize reads both partials.
    double streams = channelSums && cs.phase == 0 ? sumStreams : channelSums ? 2 : 1;
    double opsPer = channelSums ? 2 : 1;
    w.elements = outElems * std::max<double>(1, static_cast<double>(v.red.size())) * streams;
    w.instrPerVector = opsPer;
    w.bytes = w.elements * inBytes0 + outBytes;
    w.units = std::max(1.0, std::ceil(w.elements / w.vectorWidth));
    return w;
  }
  // Elementwise-style vertex: one pass over its outputs; each input contributes at most one
  // read per output element (windows of broadcast inputs may be bounding boxes), except pools
  // and softmax rows which read their windows.
  double inBytes = 0;
  for (const Window& win : v.inputs) {
    double n = static_cast<double>(win.end - win.begin);
    const bool windowed = registered && registered->costTraits.readsWindows;
    if (!windowed) n = std::min(n, outElems);
    inBytes += n * elemBytes(exe, win.buffer, o);
  }
  w.elements = outElems;
  if (registered && registered->costTraits.elementsPerOutput) {
    w.elements = outElems * registered->costTraits.elementsPerOutput(exe.graph, op);
  } else if (op.kind == OpKind::SoftmaxCrossEntropy) {
    w.elements = inBytes / inBytes0;  // logits read per output sample
  }
  // Read-modify-write kinds (ema_update; apply_update with keep != 0) read their in-place target
  // too.
  if (registered &&
      (registered->costTraits.readModifyWrite ||
       (registered->costTraits.readModifyWriteOf && registered->costTraits.readModifyWriteOf(op))))
    inBytes += outBytes;
  w.instrPerVector = instructionsPerVector(op, cs.phase);
  w.bytes = inBytes + outBytes;
  w.units = std::max(1.0, std::ceil(w.elements / w.vectorWidth));
  return w;
}

// Tile cycles of one vertex: 6 x the busiest worker's instructions, or the tile memory bound.
double vertexCycles(const VertexWork& w, const Target& t, double macRate, const CostOptions& o) {
  const double workers = static_cast<double>(t.workersPerTile);
  const double used = std::min(workers, w.units);
  const double perWorkerUnits = std::ceil(w.units / used);
  const double setup = o.vertexSetupInstructions * workers;
  if (w.macs > 0) {
    // Each worker instruction drives the AMP at the tile's rate for its issue slot.
    double instr = w.macs * (perWorkerUnits / w.units) / macRate;
    return setup + workers * instr;
  }
  double instr = perWorkerUnits * w.instrPerVector;
  return setup + std::max(workers * instr, w.bytes / t.tileMemBytesPerCycle);
}

struct CopyKey {
  int tile;
  i64 offset, bytes;
  auto operator<=>(const CopyKey&) const = default;
};

// Bytes a tile receives, named by their source: the same source bytes sent to several tiles are
// one broadcast.
struct Received {
  int sourceTile, buffer;
  i64 begin, bytes;
  int busGroup;  // destination tile / tilesPerSharedExchangeBus
  int tile;      // destination
  auto operator<=>(const Received&) const = default;
};

bool sameSourceBytes(const Received& a, const Received& b) {
  return a.sourceTile == b.sourceTile && a.buffer == b.buffer && a.begin == b.begin &&
         a.bytes == b.bytes;
}

// Exchange-bus sharing: the n tiles of a bus group that receive the same source bytes receive
// them in the same cycles, so each is charged 1/n of them (n = 2 on the Mk2; poplibs prices the
// shared bytes at twice the exchange rate). `recv` holds the bytes each tile receives.
// Leaves `received` sorted by source bytes (then bus group), without repeats.
void shareExchangeBus(std::vector<Received>& received, std::vector<double>& recv) {
  std::sort(received.begin(), received.end());
  received.erase(std::unique(received.begin(), received.end()), received.end());
  for (size_t i = 0; i < received.size();) {
    size_t j = i + 1;
    while (j < received.size() && received[j].busGroup == received[i].busGroup &&
           sameSourceBytes(received[i], received[j]))
      ++j;
    const double n = static_cast<double>(j - i);
    for (size_t k = i; n > 1 && k < j; ++k)
      recv[static_cast<size_t>(received[k].tile)] -=
          static_cast<double>(received[k].bytes) * (1 - 1 / n);
    i = j;
  }
}

// Broadcast: each distinct source bytes of `received` (sorted by source) is sent once.
void addBroadcastSends(const std::vector<Received>& received, std::vector<double>& sent) {
  for (size_t i = 0; i < received.size(); ++i)
    if (i == 0 || !sameSourceBytes(received[i - 1], received[i]))
      sent[static_cast<size_t>(received[i].sourceTile)] += static_cast<double>(received[i].bytes);
}

bool sharesExchangeBus(const Target& t, const CostOptions& o) {
  return o.exchangeBusSharing && t.tilesPerSharedExchangeBus > 1;
}

// Exchange cycles of a compute set as compiled: max over tiles of max(received, sent) bytes per
// port rate. `scale` reprices bytes when storage is priced narrower than compiled.
double compiledExchangeCycles(const ComputeSet& cs, const Target& t, double scale,
                              const CostOptions& o) {
  if (cs.exchange.empty()) return 0;
  std::vector<double> recv(static_cast<size_t>(t.numTiles), 0.0);
  std::vector<double> sent(static_cast<size_t>(t.numTiles), 0.0);
  std::vector<CopyKey> sends;
  const bool busSharing = sharesExchangeBus(t, o);
  std::vector<Received> received;
  for (const ExchangeCopy& c : cs.exchange) {
    if (c.srcTile == c.dstTile) continue;
    recv[c.dstTile] += static_cast<double>(c.bytes);
    if (busSharing)
      received.push_back({c.srcTile, -1, c.srcOffset, c.bytes,
                          c.dstTile / t.tilesPerSharedExchangeBus, c.dstTile});
    if (!o.multicast)
      sent[c.srcTile] += static_cast<double>(c.bytes);
    else if (!busSharing)
      sends.push_back({c.srcTile, c.srcOffset, c.bytes});
  }
  if (busSharing) {
    shareExchangeBus(received, recv);  // one sort serves the broadcast sends too
    if (o.multicast) addBroadcastSends(received, sent);
  } else if (o.multicast) {
    std::sort(sends.begin(), sends.end());
    sends.erase(std::unique(sends.begin(), sends.end()), sends.end());
    for (const CopyKey& k : sends) sent[k.tile] += static_cast<double>(k.bytes);
  }
  double busiest = 0;
  for (size_t i = 0; i < recv.size(); ++i) busiest = std::max({busiest, recv[i], sent[i]});
  return busiest * scale / t.exchangeBytesPerCycle;
}

// Repricing factor of a compute set's exchange: priced / compiled bytes of its gathered windows.
double exchangeScale(const Executable& exe, const ComputeSet& cs, const CostOptions& o) {
  double compiled = 0, priced = 0;
  for (const Vertex& v : cs.vertices)
    for (const Window& w : v.inputs) {
      if (!w.gather || w.shared) continue;
      double n = static_cast<double>(w.end - w.begin);
      compiled += n * static_cast<double>(sizeOf(exe.buffers[w.buffer].dtype));
      priced += n * elemBytes(exe, w.buffer, o);
    }
  return compiled > 0 ? priced / compiled : 1.0;
}

bool isElementwise(OpKind k) {
  const ops::OpInfo* info = ops::find(k);
  return info && info->costTraits.elementwise;
}

// Exchange of a non-MAC compute set under ExchangeModel::Planned: the compiled windows, except
// that an elementwise vertex reads only the elements of a same-sized operand that match its
// outputs (the compiler's bounding boxes fall back to the whole operand for large slices;
// a planner that lays out elementwise operands alike moves at most those elements).
double plannedWindowExchangeCycles(const Executable& exe, const ComputeSet& cs, const Op& op,
                                   const CostOptions& o) {
  const Target& t = exe.target;
  std::vector<double> recv(static_cast<size_t>(t.numTiles), 0.0);
  std::vector<double> sent(static_cast<size_t>(t.numTiles), 0.0);
  struct Send {
    int tile, buffer;
    i64 begin, end;
    auto operator<=>(const Send&) const = default;
  };
  std::vector<Send> sends;
  // Channel sums (batch norm: phases 0-1) are reductions, only the last phase is elementwise.
  const bool bnReduction = channelSumStreams(op.kind) > 0 && cs.phase < 2;
  const bool tighten = isElementwise(op.kind) && !bnReduction;
  const bool busSharing = sharesExchangeBus(t, o);
  std::vector<Received> received;
  for (const Vertex& v : cs.vertices) {
    const i64 outElems = v.outputs.empty() ? -1 : exe.buffers[v.outputs[0].buffer].elements;
    for (const Window& w : v.inputs) {
      if (!w.gather || w.shared) continue;
      i64 b = w.begin, e = w.end;
      if (tighten && exe.buffers[w.buffer].elements == outElems)
        b = std::max(b, v.work.begin), e = std::min(e, v.work.end);
      const double eb = elemBytes(exe, w.buffer, o);
      const auto& m = exe.mapping[w.buffer];
      auto it = std::upper_bound(m.begin(), m.end(), b,
                                 [](i64 x, const TileSlice& s) { return x < s.begin; });
      if (it != m.begin()) --it;
      for (; it != m.end() && it->begin < e; ++it) {
        i64 lo = std::max(b, it->begin), hi = std::min(e, it->end);
        if (lo >= hi || it->tile == v.tile) continue;
        recv[v.tile] += static_cast<double>(hi - lo) * eb;
        if (busSharing)
          received.push_back({it->tile, w.buffer, lo,
                              static_cast<i64>(static_cast<double>(hi - lo) * eb),
                              v.tile / t.tilesPerSharedExchangeBus, v.tile});
        if (o.multicast)
          sends.push_back({it->tile, w.buffer, lo, hi});
        else
          sent[it->tile] += static_cast<double>(hi - lo) * eb;
      }
    }
  }
  std::sort(sends.begin(), sends.end());
  sends.erase(std::unique(sends.begin(), sends.end()), sends.end());
  for (const Send& s : sends)
    sent[s.tile] += static_cast<double>(s.end - s.begin) * elemBytes(exe, s.buffer, o);
  if (busSharing) shareExchangeBus(received, recv);
  double busiest = 0;
  for (size_t i = 0; i < recv.size(); ++i) busiest = std::max({busiest, recv[i], sent[i]});
  return busiest / t.exchangeBytesPerCycle;
}

// Per-tile bytes a good conv/matmul plan moves: A*sK/T + W/sK at the best sK. With exchange-bus
// sharing, output-channel groups on consecutive tiles receive the activations they share at the
// doubled rate once sK is a whole number of bus groups: A*sK/(2T) + W/sK (poplibs' conv planner
// makes the output channels the innermost tile dimension for this).
double plannedExchangeCycles(const OpInfo& info, const Target& t, const CostOptions& o) {
  const double T = static_cast<double>(t.numTiles);
  if (info.planA <= 0 || info.planW <= 0) return 0;
  auto bestBytes = [&](double share, double minSk) {
    const double sK = std::clamp(std::sqrt(share * info.planW * T / info.planA), minSk, T);
    return info.planA * sK / (share * T) + info.planW / sK;
  };
  double bytes = bestBytes(1, 1);
  if (sharesExchangeBus(t, o)) {
    const double pair = t.tilesPerSharedExchangeBus;
    bytes = std::min(bytes, bestBytes(pair, pair));
  }
  return bytes / t.exchangeBytesPerCycle;
}

}  // namespace

Precision parsePrecision(const std::string& s) {
  if (s == "32.32") return Precision::F32;
  if (s == "16.16") return Precision::F16F16;
  if (s == "16.32") return Precision::F16F32;
  throw std::invalid_argument(
      fmt::format("unknown precision '{}': expected 32.32, 16.16 or 16.32", s));
}

std::string precisionName(Precision p) {
  switch (p) {
    case Precision::F32:
      return "32.32";
    case Precision::F16F16:
      return "16.16";
    case Precision::F16F32:
      return "16.32";
  }
  return "?";
}

double macsPerCycle(const Target& t, Precision p) {
  switch (p) {
    case Precision::F32:
      return t.fp32MacsPerCycle;
    case Precision::F16F16:
      return t.fp16MacsPerCycle;
    case Precision::F16F32:
      return t.fp16Fp32MacsPerCycle;
  }
  return t.fp32MacsPerCycle;
}

namespace {

// Adds the compute sets of `exe` to `sc` (cycle sums, MACs, per-set profile).
void addComputeSets(const Executable& exe, const CostOptions& o, StepCost& sc) {
  const Target& t = exe.target;
  const double macRate = macsPerCycle(t, o.precision);
  std::vector<double> tileCycles(static_cast<size_t>(t.numTiles));
  for (const ComputeSet& cs : exe.computeSets) {
    const Op& op = exe.graph.op(cs.op);
    if (isReplicaOp(op.kind)) {
      ComputeSetCost c;
      c.name = cs.name;
      c.kind = op.kind;
      // The op's link traffic (ops/cross_replica.cpp): a fraction of a ring all-reduce, whose
      // halves each move (R-1)/R of the tensor's bytes per replica.
      const ops::LinkTraffic link = ops::find(op.kind)->linkTraffic(op);
      if (link.tensor >= 0) {
        const int replicas = static_cast<int>(replicasOf(op));
        const double bytes = static_cast<double>(exe.buffers[link.tensor].elements) *
                             elemBytes(exe, link.tensor, o) * link.scale;
        c.exchangeCycles =
            link.halves *
            allReduceSeconds(static_cast<i64>(bytes), PodShape::pod(replicas), t, o.collectives) *
            t.clockHz;
        c.syncCycles = t.syncCycles;
      }
      sc.exchangeCycles += c.exchangeCycles;
      sc.collectiveCycles += c.exchangeCycles;
      sc.syncCycles += c.syncCycles;
      sc.computeSets.push_back(std::move(c));
      continue;
    }
    const OpInfo info = opInfo(exe, op, o);
    ComputeSetCost c;
    c.name = cs.name;
    c.kind = op.kind;
    c.phase = cs.phase;
    std::fill(tileCycles.begin(), tileCycles.end(), 0.0);
    for (const Vertex& v : cs.vertices) {
      VertexWork w = vertexWork(exe, cs, op, info, v, o);
      tileCycles[v.tile] += vertexCycles(w, t, macRate, o);
      c.macs += w.macs * (isMacOp(op.kind) ? info.ampEfficiency : 0.0);
    }
    auto busiest = std::max_element(tileCycles.begin(), tileCycles.end());
    c.computeCycles = *busiest;
    for (double tc : tileCycles) c.tilesUsed += tc > 0;
    c.meanTileComputeCycles =
        std::accumulate(tileCycles.begin(), tileCycles.end(), 0.0) / t.numTiles;
    c.busiestTile = static_cast<int>(busiest - tileCycles.begin());
    if (o.exchange == ExchangeModel::AsCompiled)
      c.exchangeCycles = compiledExchangeCycles(cs, t, exchangeScale(exe, cs, o), o);
    else if (isMacPhase(op, cs.phase))
      c.exchangeCycles = plannedExchangeCycles(info, t, o);
    else if (isMacOp(op.kind))
      // The planned split brings both operands to the tiles that multiply (the MAC phase's
      // price) and splits no contraction, so the compiled plan's operand-block, transpose and
      // partial-sum phases move nothing more in it (pricing them too counted the operands twice).
      c.exchangeCycles = 0;
    else
      c.exchangeCycles = plannedWindowExchangeCycles(exe, cs, op, o);
    c.syncCycles = t.syncCycles;
    sc.computeCycles += c.computeCycles;
    sc.exchangeCycles += c.exchangeCycles;
    sc.syncCycles += c.syncCycles;
    sc.macs += c.macs;
    c.optimizer = static_cast<size_t>(op.id) < exe.optimizerOp.size() && exe.optimizerOp[op.id];
    if (c.optimizer) sc.optimizerCycles += c.total();
    sc.computeSets.push_back(std::move(c));
  }
}

// Host bytes of the graph's streams: every Input in, every marked output back.
double hostStreamBytes(const Graph& g, const CostOptions& o) {
  double bytes = 0;
  auto add = [&](const Tensor& t) {
    bool half = t.dtype == DType::F32 && o.halfStorage && isHalf(o.precision);
    bytes +=
        static_cast<double>(t.elements()) * (half ? 2.0 : static_cast<double>(sizeOf(t.dtype)));
  };
  for (const Tensor& t : g.tensors())
    if (t.kind == TensorKind::Input) add(t);
  for (int out : g.outputs()) add(g.tensor(out));
  return bytes;
}

void finish(StepCost& sc, const Target& t, const CostOptions& o) {
  const double macRate = macsPerCycle(t, o.precision);
  sc.deviceCycles = sc.computeCycles + sc.exchangeCycles + sc.syncCycles;
  sc.deviceSeconds = sc.deviceCycles / t.clockHz;
  const double hostBw = o.hostBytesPerSec > 0 ? o.hostBytesPerSec : t.hostLinkBytesPerSec;
  sc.hostSeconds = sc.hostBytes / hostBw;
  sc.seconds = o.overlapHostIo ? std::max(sc.deviceSeconds, sc.hostSeconds)
                               : sc.deviceSeconds + sc.hostSeconds;
  sc.peakFlops = 2.0 * macRate * static_cast<double>(t.numTiles) * t.clockHz;
  sc.achievedFlops = sc.seconds > 0 ? 2.0 * sc.macs / sc.seconds : 0.0;
  sc.utilisation = sc.peakFlops > 0 ? sc.achievedFlops / sc.peakFlops : 0.0;
}

}  // namespace

StepCost estimateStep(const Executable& exe, const CostOptions& o) {
  StepCost sc;
  addComputeSets(exe, o, sc);
  for (const Program::Step& s : exe.program.body)
    if (s.kind != Program::Step::Kind::Execute)
      sc.hostBytes +=
          static_cast<double>(exe.buffers[s.index].elements) * elemBytes(exe, s.index, o);
  finish(sc, exe.target, o);
  return sc;
}

std::vector<KindCycles> cyclesByKind(const StepCost& sc) {
  std::vector<KindCycles> out;
  for (const ComputeSetCost& c : sc.computeSets) {
    auto it = std::find_if(out.begin(), out.end(), [&](const KindCycles& k) {
      return k.kind == c.kind && k.phase == c.phase;
    });
    if (it == out.end()) it = out.insert(out.end(), KindCycles{.kind = c.kind, .phase = c.phase});
    ++it->sets;
    it->computeCycles += c.computeCycles;
    it->exchangeCycles += c.exchangeCycles;
    it->syncCycles += c.syncCycles;
  }
  std::stable_sort(out.begin(), out.end(), [](const KindCycles& a, const KindCycles& b) {
    return a.exchangeCycles > b.exchangeCycles;
  });
  return out;
}

std::vector<StepCost> estimateGraph(const Graph& g, const Target& target,
                                    const std::vector<CostOptions>& opts, int opsPerSegment) {
  if (opts.empty()) return {};
  std::vector<StepCost> out(opts.size());
  const int nOps = static_cast<int>(g.ops().size());
  const int seg = opsPerSegment > 0 ? opsPerSegment : std::max(1, nOps);
  for (int first = 0; first < nOps; first += seg) {
    // Sub-graph of ops [first, first + seg): tensors from outside become inputs (variables stay
    // variables: in-place updates require them), names and shapes unchanged.
    Graph sub(fmt::format("{}[{}:{}]", g.name(), first, std::min(nOps, first + seg)));
    std::vector<int> remap(g.tensors().size(), -1);
    auto mapped = [&](int id) {
      if (remap[id] < 0) {
        const Tensor& t = g.tensor(id);
        remap[id] = t.kind == TensorKind::Variable ? sub.addVariable(t.name, t.shape, t.dtype)
                                                   : sub.addInput(t.name, t.shape, t.dtype);
      }
      return remap[id];
    };
    for (int i = first; i < std::min(nOps, first + seg); ++i) {
      const Op& op = g.op(i);
      std::vector<int> ins;
      for (int t : op.inputs) ins.push_back(mapped(t));
      std::vector<std::string> names;
      for (int t : op.outputs) names.push_back(g.tensor(t).name);
      const Op& added = sub.op(sub.addOp(op.kind, std::move(ins), op.attrs, std::move(names)));
      for (size_t k = 0; k < op.outputs.size(); ++k) remap[op.outputs[k]] = added.outputs[k];
    }
    Executable exe = compile(std::move(sub), target,
                             CompileOptions{.deviceIterations = 1, .checkMemory = false});
    for (size_t k = 0; k < opts.size(); ++k) addComputeSets(exe, opts[k], out[k]);
  }
  for (size_t k = 0; k < opts.size(); ++k) {
    out[k].hostBytes = hostStreamBytes(g, opts[k]);
    finish(out[k], target, opts[k]);
  }
  return out;
}

nlohmann::json StepCost::report(int topSets) const {
  nlohmann::json r;
  r["cycles"] = {{"compute", computeCycles},     {"exchange", exchangeCycles},
                 {"sync", syncCycles},           {"device", deviceCycles},
                 {"optimizer", optimizerCycles}, {"collectives", collectiveCycles}};
  r["seconds"] = {{"device", deviceSeconds}, {"host", hostSeconds}, {"step", seconds}};
  r["host_bytes"] = hostBytes;
  r["macs"] = macs;
  r["flops"] = {{"achieved", achievedFlops}, {"peak", peakFlops}, {"utilisation", utilisation}};
  std::vector<const ComputeSetCost*> order;
  for (const ComputeSetCost& c : computeSets) order.push_back(&c);
  std::stable_sort(
      order.begin(), order.end(),
      [](const ComputeSetCost* a, const ComputeSetCost* b) { return a->total() > b->total(); });
  nlohmann::json sets = nlohmann::json::array();
  for (size_t i = 0; i < order.size() && static_cast<int>(i) < topSets; ++i) {
    const ComputeSetCost& c = *order[i];
    sets.push_back({{"name", c.name},
                    {"compute_cycles", c.computeCycles},
                    {"exchange_cycles", c.exchangeCycles},
                    {"sync_cycles", c.syncCycles},
                    {"macs", c.macs},
                    {"busiest_tile", c.busiestTile}});
  }
  r["compute_sets"] = {{"count", computeSets.size()}, {"most_expensive", sets}};
  return r;
}

}  // namespace ipu::cost
