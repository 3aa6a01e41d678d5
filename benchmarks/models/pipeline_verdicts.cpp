// Fit verdicts of Graphcore's published pipelines on Mk2 IPUs (compile only): every IPU's
// fullest tile and what holds it, the activation stashes, the compile time and the modeled
// pipelined step. The placements are Graphcore's (../shared/docs/PIPELINING_FACTS.md section 2).
//   pipeline_verdicts --model bert            BERT-Large, seq 512, 2 packs, 16.16, POD16 att/FFN
//   pipeline_verdicts --model bert-3777       the same over layers_per_ipu [3,7,7,7]
//   pipeline_verdicts --model b4 | g16        EfficientNet-B4 mb 3 / G16 mb 5, 16.32, 4 IPUs
//   pipeline_verdicts --model g16-2ipu        G16 mb 3, 16.16, split [block4a] over 2 IPUs (2022)
//   --one-ipu                                 the same training step on one IPU (no pipeline)
//   --no-recompute                            stash everything the backward reads
//   --no-step-cost                            skip the modeled step (its planned-exchange estimate
//                                             takes minutes; the verdict needs only tile memory)
//   --always-live                             list the always-live buffers on each fullest tile
//   --state on-chip|off-chip                  BERT's default off-chip (Graphcore's POD16),
//                                             EfficientNet's on-chip (offloading disabled)
//   --no-checkpoints                          BERT: recompute each stage from its inputs only
//                                             (default: Graphcore's per-sublayer checkpoints)
//   --f32-accumulators                        BERT: f32 gradient accumulators (default: the
//                                             weight's dtype, PopART's default accum_type)
// The optimizer state is not sharded over the replicas (16-bit loss-scaled updates cannot be).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/cost/pipeline_cost.h"
#include "ipu_backend/ir/op_defs.h"
#include "models/bert_large/bert_pipeline.h"
#include "models/efficientnet_b4/efficientnet_pipeline.h"

using namespace ipu;

namespace {

struct Model {
  Graph graph;
  std::string precision;
  pipeline::PipelineOptions options;
  std::string placement;
};

Model bert(bool layersPerIpu, int microBatch) {
  const models::BertConfig c = models::BertConfig::large();
  models::BertShape s;
  s.batch = microBatch;
  s.seqLength = 512;
  s.maskedSlots = 78;  // 76 + 3 - 1 per pack of up to 3 sequences (Graphcore's packing)
  s.maxPerPack = 3;
  Model m;
  m.precision = "16.16";
  m.graph = models::buildBertTraining(c, s, models::bertLambOptions(),
                                      precision::PrecisionPolicy::parse(m.precision))
                .graph;
  const models::BertPlacement p =
      layersPerIpu ? models::bertLayersPerIpuPlacement(c, {3, 7, 7, 7})
                   : models::bertAttentionFfnPlacement(c, {7, 6, 7, 4}, {6, 7, 6, 5});
  m.options.splits = p.splits;
  m.options.stageIpu = p.stageIpu;
  m.options.ipus = p.ipus;
  m.options.checkpoints = p.checkpoints;     // Graphcore's checkpointOutput per sublayer
  m.options.accumulateInWeightDType = true;  // PopART's default accum_type: f16 accumulators
  m.placement = p.describe();
  return m;
}

Model efficientNet(bool g16, int microBatch, bool twoIpus = false) {
  namespace en = models::efficientnet;
  en::Config c = g16 ? en::Config::b4G16() : en::Config::b4();
  c.norm = en::Norm::Group;  // Graphcore: GroupNorm, 4 groups
  c.normGroups = 4;
  OptimizerOptions o;
  o.kind = "rmsprop";
  o.epsilon = 1e-3;
  o.rho = 0.953125;
  o.weightDecay = 1e-5;
  o.emaDecay = 0.97;  // weight averaging
  Model m;
  // Graphcore's 2022 G16 configuration (the one behind its published 8,936 img/s on a Bow Pod16,
  // EFFICIENTNET_FACTS.md 4.1 and 4.5) runs 16.16 over 2 IPUs; the others 16.32 over 4.
  m.precision = twoIpus ? "16.16" : "16.32";
  m.graph =
      en::buildTraining(c, microBatch, o, precision::PrecisionPolicy::parse(m.precision)).graph;
  const std::vector<std::string> blocks =
      twoIpus ? std::vector<std::string>{"block4a"}
      : g16   ? std::vector<std::string>{"block2c", "block4c", "block6a"}
              : std::vector<std::string>{"block2b", "block4b", "block6c"};
  m.options.splits = en::splitPrefixes(c, blocks);
  m.placement = fmt::format(
      "Graphcore's splits {} (first block of the next IPU) = stages ending "
      "at {}",
      fmt::join(blocks, ","), fmt::join(m.options.splits, ","));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Fit verdicts of Graphcore's published pipelines (Mk2, compile only)");
  std::string which = "bert";
  int microBatch = 0, replicas = 4, accumulation = 0;
  bool oneIpu = false, noRecompute = false, noStepCost = false, alwaysLiveDetail = false;
  std::string state;
  app.add_option("--model", which, "bert | bert-3777 | b4 | g16 | g16-2ipu")->required();
  app.add_option("--micro-batch", microBatch,
                 "0: the published (BERT 2 packs, B4 3, G16 5, G16 over 2 IPUs 3)");
  app.add_option("--replicas", replicas,
                 "data-parallel replicas (their all-reduce is in the update)");
  app.add_option("--accumulation", accumulation, "G (0: the schedule's smallest valid count)");
  app.add_flag("--one-ipu", oneIpu, "compile the training step on one IPU instead");
  app.add_flag("--no-recompute", noRecompute, "no recomputation at the stage boundaries");
  app.add_flag("--no-step-cost", noStepCost, "print the verdict without the modeled step");
  app.add_flag("--always-live", alwaysLiveDetail,
               "list the always-live buffers of every IPU's fullest tile");
  bool noCheckpoints = false, f32Accumulators = false;
  app.add_flag("--no-checkpoints", noCheckpoints,
               "BERT: no per-sublayer recomputation checkpoints");
  app.add_flag("--f32-accumulators", f32Accumulators, "BERT: f32 gradient accumulators");
  app.add_option("--state", state, "on-chip | off-chip (default: as Graphcore ran the model)");
  int byKind = 0;
  app.add_option("--by-kind", byKind,
                 "per IPU, the N op kinds (and phases) with the most exchange cycles");
  CLI11_PARSE(app, argc, argv);

  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // The published micro-batch of each model (BERT: packs).
  if (microBatch <= 0)
    microBatch = which == "b4" || which == "g16-2ipu" ? 3 : which == "g16" ? 5 : 2;
  try {
    Model m = which == "bert"        ? bert(false, microBatch)
              : which == "bert-3777" ? bert(true, microBatch)
              : which == "b4"        ? efficientNet(false, microBatch)
              : which == "g16"       ? efficientNet(true, microBatch)
              : which == "g16-2ipu"
                  ? efficientNet(true, microBatch, true)
                  : throw std::invalid_argument("--model: bert | bert-3777 | b4 | g16 | g16-2ipu");
    const double buildSeconds = seconds();
    pipeline::PipelineOptions& o = m.options;
    if (oneIpu) {
      o.splits.clear();
      o.stageIpu.clear();
      o.ipus = 0;
      m.placement = "one IPU";
    }
    const int stages = static_cast<int>(o.splits.size()) + 1;
    o.accumulation =
        accumulation > 0 ? accumulation : pipeline::smallestAccumulation(o.schedule, stages);
    o.replicas = replicas;
    o.optimizerStateOffChip = state.empty() ? which.starts_with("bert") : state == "off-chip";
    o.recompute = !noRecompute && stages > 1;
    if (noCheckpoints || !o.recompute) o.checkpoints.clear();
    if (f32Accumulators) o.accumulateInWeightDType = false;
    o.checkMemory = false;
    o.planExchanges = false;
    const pipeline::PipelinedExecutable pe = pipeline::compilePipeline(m.graph, Target::mk2(), o);
    const double compileSeconds = seconds() - buildSeconds;
    std::printf("%s, %s, micro-batch %d, %d replicas, optimizer state %s, recomputation %s\n",
                which.c_str(), m.precision.c_str(), microBatch, replicas,
                o.optimizerStateOffChip ? "off-chip" : "on-chip",
                o.recompute ? "at the stage boundaries" : "off");
    std::printf("placement: %s\n%s", m.placement.c_str(), pe.describe().c_str());
    bool fits = true;
    for (const pipeline::IpuProgram& p : pe.programs) {
      const i64 cap = p.exe->target.bytesPerTile;
      const bool ok = p.peakTileBytes <= cap;
      fits = fits && ok;
      i64 total = 0;
      for (const TileMemory& t : p.exe->tileMemory) total += t.total();
      std::printf(
          "  IPU %d: %s, fullest tile %d %.1f KiB of %.1f KiB (%+.1f KiB), all tiles %.1f "
          "MiB, optimizer state %.1f MiB\n",
          p.ipu, ok ? "fits" : "DOES NOT FIT", p.worstTile, p.peakTileBytes / 1024.0, cap / 1024.0,
          (p.peakTileBytes - cap) / 1024.0, total / 1048576.0,
          p.exe->optimizerStateBytes / 1048576.0);
      if (!p.exe->memoryDetail.worstTiles.empty()) {
        const TileDetail& d = p.exe->memoryDetail.worstTiles.front();
        std::string occ;
        for (size_t k = 0; k < std::min<size_t>(4, d.occupants.size()); ++k)
          occ += fmt::format("{}{} {} B{}", k ? ", " : "", d.occupants[k].name,
                             d.occupants[k].bytes, d.occupants[k].alwaysLive ? " (always)" : "");
        const std::string at = d.peakComputeSet < 0
                                   ? std::string("the host stream copies")
                                   : p.exe->computeSets[static_cast<size_t>(d.peakComputeSet)].name;
        std::printf(
            "    tile %d: always-live %lld B (code+vertex state %lld B), peak live %lld "
            "B at '%s'; largest: %s\n",
            d.tile, static_cast<long long>(d.memory.alwaysLive),
            static_cast<long long>(d.codeAndVertexState),
            static_cast<long long>(d.memory.peakNotAlwaysLive), at.c_str(), occ.c_str());
        if (alwaysLiveDetail) {
          // The always-live buffers (weights, accumulators, state, stashes) with a slice there.
          std::vector<std::pair<i64, std::string>> held;
          i64 sum = 0;
          for (size_t b = 0; b < p.exe->buffers.size(); ++b) {
            if (!p.exe->buffers[b].alwaysLive) continue;
            i64 bytes = 0;
            for (const TileSlice& sl : p.exe->mapping[b])
              if (sl.tile == d.tile) bytes += (sl.end - sl.begin) * sizeOf(p.exe->buffers[b].dtype);
            if (bytes > 0) held.emplace_back(bytes, p.exe->buffers[b].name), sum += bytes;
          }
          std::sort(held.rbegin(), held.rend());
          i64 all = 0;
          for (size_t b = 0; b < p.exe->buffers.size(); ++b)
            if (p.exe->buffers[b].alwaysLive) all += p.exe->buffers[b].bytes();
          std::printf(
              "    always-live buffers on tile %d: %zu, %lld B (the IPU's mean per tile %lld B); "
              "largest:",
              d.tile, held.size(), static_cast<long long>(sum),
              static_cast<long long>(all / static_cast<i64>(p.exe->tileMemory.size())));
          for (size_t k = 0; k < std::min<size_t>(12, held.size()); ++k)
            std::printf(" %s %lld B%s", held[k].second.c_str(),
                        static_cast<long long>(held[k].first), k + 1 < held.size() ? "," : "");
          std::printf("\n");
        }
      }
    }
    if (o.recompute)
      std::printf("  recomputed: %d ops, %.1f%% of the forward multiply-accumulates\n",
                  pe.recomputation.recomputedOps,
                  100.0 * static_cast<double>(pe.recomputation.recomputedMacs) /
                      static_cast<double>(std::max<i64>(1, pe.recomputation.forwardMacs)));
    std::printf("verdict: %s\n", fits ? "FITS" : "DOES NOT FIT");
    std::printf("host: graph %.1f s, pipeline compile %.1f s\n", buildSeconds, compileSeconds);
    if (noStepCost) return fits ? 0 : 2;
    cost::CostOptions co;
    co.precision = cost::parsePrecision(m.precision);
    co.exchange = cost::ExchangeModel::Planned;
    const cost::PipelineStepCost pc = cost::estimatePipelineStep(pe, co);
    std::printf(
        "step (G = %d): %d cycles x %.3f ms + update %.3f ms (off-chip state %.3f ms) = %.3f ms\n",
        o.accumulation, pc.cycles, pc.cycleSeconds * 1e3, pc.updateSeconds * 1e3,
        pc.offChipStateSeconds * 1e3, pc.seconds * 1e3);
    std::string perStage, perIpu;
    for (size_t k = 0; k < pc.forwardSeconds.size(); ++k)
      perStage +=
          fmt::format(" {:.3f}/{:.3f}", pc.forwardSeconds[k] * 1e3, pc.backwardSeconds[k] * 1e3);
    for (size_t i = 0; i < pc.ipuSeconds.size(); ++i)
      perIpu += fmt::format(" {:.3f} (compute {:.3f}, exchange {:.3f}, sync {:.3f})",
                            pc.ipuSeconds[i] * 1e3, pc.ipuComputeSeconds[i] * 1e3,
                            pc.ipuExchangeSeconds[i] * 1e3, pc.ipuSyncSeconds[i] * 1e3);
    std::printf("stage forward/backward per micro-batch (ms):%s\nper IPU per micro-batch (ms):%s\n",
                perStage.c_str(), perIpu.c_str());
    for (const pipeline::IpuProgram& prog : pe.programs) {
      if (byKind <= 0) break;
      const cost::StepCost sc = cost::estimateStep(*prog.exe, co);
      std::printf(
          "IPU %d, every compute set of its program once (ms): compute %.3f, exchange %.3f\n",
          prog.ipu, sc.computeCycles / prog.exe->target.clockHz * 1e3,
          sc.exchangeCycles / prog.exe->target.clockHz * 1e3);
      const std::vector<cost::KindCycles> kinds = cost::cyclesByKind(sc);
      for (size_t k = 0; k < kinds.size() && static_cast<int>(k) < byKind; ++k)
        std::printf("    %-28s phase %d: %4d sets, compute %8.3f ms, exchange %8.3f ms\n",
                    std::string(opName(kinds[k].kind)).c_str(), kinds[k].phase, kinds[k].sets,
                    kinds[k].computeCycles / prog.exe->target.clockHz * 1e3,
                    kinds[k].exchangeCycles / prog.exe->target.clockHz * 1e3);
    }
    // Samples per second of `replicas` such pipelines (images; BERT: packs).
    std::printf("throughput: %d replicas x %d x G %d / step = %.1f samples/s\n", replicas,
                microBatch, o.accumulation,
                static_cast<double>(replicas) * microBatch * o.accumulation / pc.seconds);
    std::printf("host: step cost estimate %.1f s\n", seconds() - buildSeconds - compileSeconds);
    return fits ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
