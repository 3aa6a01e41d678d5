#include "harness/full_scale_projection.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "harness/benchmark_registry.h"
#include "harness/run_benchmark_plan.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/pipeline.h"
#include "ipu_backend/compiler/recompute.h"
#include "ipu_backend/cost/cost_model.h"
#include "ipu_backend/replication/replicate.h"
#include "models/bert_large/bert_pipeline.h"
#include "models/resnet50/resnet50.h"

namespace ipu::harness {
namespace {

// Ops compiled at a time: bounds host memory to ~1-2 GB for full ResNet-50 at micro-batch 20.
constexpr int kOpsPerSegment = 40;

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

cost::Precision costPrecision(const std::string& preset) {
  if (preset == "FP16.16") return cost::Precision::F16F16;
  if (preset == "FP16.32") return cost::Precision::F16F32;
  return cost::Precision::F32;
}

ProgramMemory memoryOf(const Executable& exe) {
  ProgramMemory m;
  m.capacity = exe.target.bytesPerTile;
  for (const TileMemory& t : exe.tileMemory) {
    m.tiles_over += t.total() > m.capacity;
    m.always_live_all_tiles += t.alwaysLive;
  }
  const MemoryDetail& d = exe.memoryDetail;
  if (!d.liveBytes.empty())
    m.peak_live_bytes = *std::max_element(d.liveBytes.begin(), d.liveBytes.end());
  if (!d.worstTiles.empty()) {
    const TileDetail& w = d.worstTiles.front();
    m.worst_tile = w.tile;
    m.worst_tile_bytes = w.memory.total();
    m.always_live = w.memory.alwaysLive;
    m.code_and_vertex_state = w.codeAndVertexState;
    m.peak_not_always_live = w.memory.peakNotAlwaysLive;
    m.peak_compute_set = w.peakComputeSet >= 0 ? exe.computeSets[w.peakComputeSet].name
                                               : std::string("the host stream copies");
    if (!w.occupants.empty())
      m.largest_occupant = fmt::format("{} {} B", w.occupants[0].name, w.occupants[0].bytes);
  }
  m.fits = m.tiles_over == 0;

  return m;
}

}  // namespace

Json ProgramMemory::json() const {
  return {{"fits", fits},
          {"worst_tile", worst_tile},
          {"worst_tile_bytes", worst_tile_bytes},
          {"tile_capacity_bytes", capacity},
          {"always_live_bytes", always_live},
          {"code_and_vertex_state_bytes", code_and_vertex_state},
          {"peak_not_always_live_bytes", peak_not_always_live},
          {"peak_live_bytes_all_tiles", peak_live_bytes},
          {"always_live_bytes_all_tiles", always_live_all_tiles},
          {"tiles_over_capacity", tiles_over},
          {"peak_compute_set", peak_compute_set},
          {"largest_occupant", largest_occupant}};
}

// One replica's programs as run_benchmark would run them, compiled for the Mk2 with the
// tile-memory check: the training step (recomputed from the published checkpoints) replicated
// (cross-replica reduction, accumulation), then the evaluation forward pass. A program that does
// not fit stops at the verdict; one that fits is planned up to its tile memory (its exchange
// copies change no tile's bytes and are not planned).
FitVerdict checkFit(const PodPreset& p, const FitOptions& options,
                    const ProgramReportSink& report) {
  const auto t0 = std::chrono::steady_clock::now();
  FitVerdict v;
  const Target target = Target::mk2();
  ModelRequest request =
      modelRequestOf(p, mlperfHyperparameters(p), Scale::kFull, precisionPolicyOf(p));
  const std::string title = fmt::format("{}, {} replicas x micro-batch {} x accumulation {}, {}",
                                        podTopology(p.pod_size).name, p.replicas, p.micro_batch,
                                        p.gradient_accumulation, p.precision);
  // The checked programs have no exchange copies (a verdict needs none): their pages price the
  // exchange from the vertices' windows.
  const cost::CostOptions costOpts{.precision = costPrecision(p.precision),
                                   .exchange = cost::ExchangeModel::Planned};
  auto pageName = [&](const char* program) { return fmt::format("pod{}_{}", p.pod_size, program); };
  // Compiles one program; its memory goes to `memory`; the first program that does not fit
  // gives the verdict's tile, bytes and message.
  auto compileChecked = [&](const char* name, ProgramMemory& memory, bool verdict,
                            auto&& compileIt) {
    try {
      const Executable exe = compileIt();
      memory = memoryOf(exe);
      if (report && verdict)
        report(pageName(name), exe, false, title + ": " + name + " program", costOpts);
      return true;
    } catch (const CompileError& e) {
      if (e.tile() < 0 || !e.partial()) throw;  // not a tile-memory verdict
      memory = memoryOf(*e.partial());
      if (!verdict) return false;
      if (report)
        report(pageName(name), *e.partial(), true, title + ": " + name + " program", costOpts);
      if (v.program.empty()) {
        v.program = name;
        v.tile = e.tile();
        v.bytes = e.bytes();
        v.capacity = e.capacity();
        v.message = e.what();
      }
      return false;
    }
  };
  auto compileTraining = [&](const Graph& graph) {
    CompileOptions co;
    co.planExchanges = false;
    if (p.replicas > 1 || p.gradient_accumulation > 1) {
      const replication::ReplicatedGraph rg =
          replication::replicate(graph, {p.replicas, p.gradient_accumulation, false});
      rg.configure(co, p.gradient_accumulation);
      return compile(rg.graph, target, co);
    }
    return compile(graph, target, co);
  };
  auto check = [&] {
    ModelInstance model = findBenchmarkEntry(p.benchmark).build(request);
    if (options.compare_without_recomputation) {
      ProgramMemory without;
      compileChecked("training", without, false,
                     [&] { return compileTraining(model.train.graph); });
      v.training_without_recomputation = without;
    }
    if (options.recompute && p.benchmark == Benchmark::kResNet50) {
      v.recomputation_checkpoints = models::publishedRecomputationCheckpoints();
      const RecomputationReport r =
          applyRecomputation(model.train.graph, model.train.loss, v.recomputation_checkpoints);
      v.recomputed_forward_fraction =
          r.forwardMacs > 0 ? static_cast<double>(r.recomputedMacs) / r.forwardMacs : 0;
    }
    v.train_fits = compileChecked("training", v.training, true,
                                  [&] { return compileTraining(model.train.graph); });
    v.eval_fits = compileChecked("evaluation", v.evaluation, true, [&] {
      CompileOptions co;
      co.planExchanges = false;
      return compile(model.eval.graph, target, co);
    });
  };
  try {
    check();
  } catch (const std::exception& e) {
    // Batch norm across replicas (model_bn_span > micro-batch) in 16-bit does not build yet.
    // Its cross-replica sums move per-channel vectors, nothing beside the activations, so the
    // memory check runs with per-replica statistics instead, and says so.
    if (request.bn_span_replicas <= 1) throw;
    std::string deviation = fmt::format(
        "the exact configuration does not build ({}); tile memory checked with batch norm "
        "over each replica's micro-batch instead of {} replicas (the cross-replica statistics "
        "are per-channel vectors)",
        e.what(), request.bn_span_replicas);
    request.bn_span_replicas = 1;
    v = FitVerdict{};
    v.deviation = std::move(deviation);
    check();
  }
  v.seconds = secondsSince(t0);
  return v;
}

namespace {

// The host side of Graphcore's v1.1 ResNet-50 runs, from hardware figures, the system
// descriptions and a microbenchmark (never from the published times):
//  * 8 host cores per IPU at every size: host_processors_per_node x host_processor_core_count /
//    accelerators_per_node in systems/ipu-pod<N>-TF1.json, 2 x 64 / 16 (POD16) and 8 x 64 / 64
//    (per POD64), AMD EPYC 7742.
//  * Images one core decodes and augments per second: this project's loader (datasets/:
//    libjpeg-turbo region decode, DCT-scaled, resize to 224, flip; evaluation: decode, resize,
//    centre crop), CPU time per image on one core of the development host (AMD EPYC Zen 4) over
//    200 photo-like 500 x 375 JPEGs (benchmarks/datasets/datasets_bench, docs/PERFORMANCE.md
//    2026-12-08). Graphcore's hosts ran TensorFlow's pipeline on Zen 2 cores: not measured here.
//  * 5.5 GB/s between the host and the IPUs through an M2000's gateway (PIPELINING_FACTS.md
//    section 0), taken as shared by the gateway's 4 IPUs (the tighter reading).
//  * Images stream as 224 x 224 x 3 uint8 (the runs' eight_bit_io).
constexpr double kHostCoresPerIpu = 8;
constexpr double kTrainImagesPerCoreSecond = 850;
constexpr double kEvalImagesPerCoreSecond = 815;
constexpr double kGatewayBytesPerSec = 5.5e9;
constexpr double kImageBytes = 224.0 * 224.0 * 3.0;

// The cost model's price of one micro-batch (training) and one evaluation batch.
struct Priced {
  cost::StepCost step, eval;
  std::int64_t parameters = 0;
  // Channels of every batch-norm pass of a micro-batch (forward, recomputed forward, backward).
  std::vector<std::int64_t> batchNormChannels;
};

// Batch norm whose statistics span `span` replicas (model_bn_span / micro-batch) adds, to every
// batch-norm pass of a micro-batch (forward, recomputed forward and backward), one all-reduce of
// its per-channel pair of sums (forward: sum and sum of squares; backward: the sums of dy and
// dy x-hat) over the span's IPUs (neighbours on IPU-Links), priced as the gradient all-reduce is
// (cost::allReduceSeconds: bandwidth and per-hop latency) plus one sync. The fused batch-norm
// ops themselves are priced by the cost model as compiled for one replica: the graph built with
// bnSpanReplicas > 1 spells batch norm as a dozen unfused elementwise ops and would charge
// this compiler's decomposition, not the cross-replica traffic.
double batchNormAcrossReplicasSeconds(const Priced& priced, int span, const Target& target) {
  if (span <= 1) return 0;
  const cost::PodShape group = cost::PodShape::pod(span);
  double seconds = 0;
  for (const std::int64_t channels : priced.batchNormChannels) {
    const std::int64_t bytes = 2 * channels * 4;  // two f32 sums per channel
    seconds += cost::allReduceSeconds(bytes, group, target) + target.syncCycles / target.clockHz;
  }
  return seconds;
}

Priced price(const PodPreset& p) {
  const Target target = Target::mk2();
  const cost::CostOptions opts{.precision = costPrecision(p.precision)};
  // The published run's optimizer (LARS: per weight tensor two norms, each a reduction over
  // the tiles, and its trust ratio). The forward segments between the published checkpoints
  // run twice (recomputation). Batch norm across replicas: batchNormAcrossReplicasSeconds.
  const ModelRequest request =
      modelRequestOf(p, mlperfHyperparameters(p), Scale::kFull, precisionPolicyOf(p));
  const models::ResNetConfig full = models::ResNetConfig::resnet50();
  OptimizerOptions optimizer = request.optimizer;
  optimizer.decay = models::resnetSgdOptions().decay;  // no decay or trust ratio on BN, biases
  models::ResNetGraph train = models::buildTraining(full, p.micro_batch, optimizer);
  applyRecomputation(train.graph, train.loss, models::publishedRecomputationCheckpoints());
  Priced r;
  r.parameters = train.parameterCount();
  r.step = cost::estimateGraph(train.graph, target, {opts}, kOpsPerSegment)[0];
  for (const Op& op : train.graph.ops())
    if (op.kind == OpKind::BatchNormTrain || op.kind == OpKind::BatchNormBackward)
      r.batchNormChannels.push_back(train.graph.tensor(op.inputs[0]).shape.back());
  r.eval = cost::estimateGraph(models::buildInference(full, p.micro_batch).graph, target, {opts},
                               kOpsPerSegment)[0];
  return r;
}

FullScaleProjection project(const PodPreset& p, const Priced& priced, FitVerdict fit) {
  FullScaleProjection r;
  r.benchmark = p.benchmark;
  r.system = podTopology(p.pod_size).name;
  r.preset = p;
  r.published_minutes = publishedMinutes(p.benchmark, p.pod_size);
  r.published_throughput = publishedThroughput(p.benchmark, p.pod_size);
  r.parameters = priced.parameters;
  r.fit = std::move(fit);

  const Target target = Target::mk2();
  const cost::StepCost& step = priced.step;
  cost::StepTimes st;
  st.weightUpdateSeconds = step.optimizerCycles / target.clockHz;
  // model_bn_span / micro-batch replicas (the v1.1 logs: 40 = 2 x 20).
  const int bnSpan = modelRequestOf(p, mlperfHyperparameters(p), Scale::kFull, precisionPolicyOf(p))
                         .bn_span_replicas;
  const double bnStatistics = batchNormAcrossReplicasSeconds(priced, bnSpan, target);
  st.microBatchSeconds =
      std::max(step.deviceSeconds - st.weightUpdateSeconds, step.hostSeconds) + bnStatistics;
  st.evalStepSeconds = priced.eval.seconds;

  cost::TrainingRun run;
  run.pod = cost::PodShape::pod(p.ipus, p.ipus_per_replica);
  run.microBatch = p.micro_batch;
  run.accumulation = p.gradient_accumulation;
  run.epochs = p.epochs;
  const bool half = costPrecision(p.precision) != cost::Precision::F32;
  const std::int64_t weightBytes = half ? 2 : 4;
  run.gradientBytes = r.parameters * weightBytes;
  cost::HostSide& host = run.host;
  host.coresPerIpu = kHostCoresPerIpu;
  host.trainImagesPerCoreSecond = kTrainImagesPerCoreSecond;
  host.evalImagesPerCoreSecond = kEvalImagesPerCoreSecond;
  host.gatewayBytesPerSec = kGatewayBytesPerSec;
  host.ipusPerGateway = std::min(4, p.ipus);  // an IPU-M2000's (POD1 uses one of them)
  host.imageBytes = kImageBytes;
  // Graphcore saves a checkpoint every 4 epochs and evaluates each after training: the weights
  // and the LARS momentum (the weights' type) out of one IPU, the weights back onto every IPU,
  // and the evaluation program loaded once (its always-live bytes: an upper bound on its image).
  host.checkpointBytes = 2 * r.parameters * weightBytes;
  host.restoreBytes = r.parameters * weightBytes;
  host.evalProgramBytes = r.fit.evaluation.always_live_all_tiles;
  r.time = cost::projectTimeToTrain(run, st, target);

  // The micro-batch part of the step (time.computeSeconds: accumulation x one micro-batch, or
  // its share of a pipeline) split as the micro-batch's own cycles split; the optimizer's
  // compute sets run once per step and are the update.
  double c = 0, x = 0, s = 0;
  for (const cost::ComputeSetCost& cs : step.computeSets) {
    if (cs.optimizer) continue;
    c += cs.computeCycles;
    x += cs.exchangeCycles;
    s += cs.syncCycles;
  }
  // Micro-batches per step; a wait for the host lengthens each and is host I/O.
  const double mb = st.microBatchSeconds;
  const double share = mb > 0 ? (r.time.computeSeconds - r.time.hostWaitSeconds) / mb : 0;
  StepBreakdown& b = r.breakdown;
  b.compute = c / target.clockHz * share;
  b.exchange = x / target.clockHz * share;
  b.sync = s / target.clockHz * share;
  b.bn_statistics = bnStatistics * share;
  b.host_io = std::max(0.0, mb - bnStatistics - (c + x + s) / target.clockHz) * share +
              r.time.hostWaitSeconds;
  b.host_io_total = step.hostSeconds * share;
  b.weight_update = r.time.updateSeconds;
  b.collectives = r.time.allReduceSeconds;
  b.pipeline_ramp = r.time.pipelineSeconds;
  return r;
}

// Graphcore's v1.1 att_ffn_placement (../shared/docs/BERT_FACTS.md section 3, PIPELINING_FACTS.md
// section 2): attention and FFN sublayers per encoder stage, IPU1.. first, IPU0's last stage
// (with the heads) last.
models::BertPlacement publishedBertPlacement(const models::BertConfig& c, int ipusPerReplica) {
  if (ipusPerReplica == 4) return models::bertAttentionFfnPlacement(c, {7, 6, 7, 4}, {6, 7, 6, 5});
  if (ipusPerReplica == 8)
    return models::bertAttentionFfnPlacement(c, {2, 3, 4, 3, 4, 3, 4, 1}, {2, 3, 3, 4, 3, 4, 3, 2});
  throw Refusal(
      fmt::format("no published BERT-Large placement over {} IPUs (4 or 8)", ipusPerReplica));
}

// BERT-Large at sequence 512 (packs of up to 3 sequences, 76 + 3 - 1 masked slots), one
// replica's pipeline compiled for IPU-Mk2 exactly as Graphcore placed it, priced per step; the
// progress in samples from MLPerf's reference convergence point for the global batch.
FullScaleProjection projectBert(const PodPreset& p) {
  const auto t0 = std::chrono::steady_clock::now();
  FullScaleProjection r;
  r.benchmark = p.benchmark;
  r.system = podTopology(p.pod_size).name;
  r.preset = p;
  r.published_minutes = publishedMinutes(p.benchmark, p.pod_size);
  r.published_throughput = publishedThroughput(p.benchmark, p.pod_size);

  const models::BertConfig config = models::BertConfig::large();
  const models::BertShape shape{
      .batch = p.micro_batch, .seqLength = 512, .maskedSlots = 78, .maxPerPack = 3};
  models::BertGraph bert =
      models::buildBertTraining(config, shape, models::bertLambOptions(), precisionPolicyOf(p));
  r.parameters = bert.parameterCount();
  const models::BertPlacement placement = publishedBertPlacement(config, p.ipus_per_replica);
  pipeline::PipelineOptions o;
  o.splits = placement.splits;
  o.stageIpu = placement.stageIpu;
  o.ipus = placement.ipus;
  // Graphcore's BERT ran on PopART, whose pipeline takes any G >= its stage count and runs
  // G + 2N - 2 cycles a step (PIPELINING_FACTS.md 1b); this compiler's grouped schedule asks for
  // a multiple of 2N (TensorFlow's rule). A stage's programs do not depend on G, so the
  // pipeline is compiled at the smallest G the schedule takes and the step counts the
  // published G's cycles.
  o.accumulation =
      pipeline::smallestAccumulation(o.schedule, static_cast<int>(o.splits.size()) + 1);
  o.replicas = p.replicas;
  // Graphcore: the optimizer state in streaming memory on POD16 only (4-IPU pipelines).
  o.optimizerStateOffChip = p.ipus_per_replica == 4;
  o.recompute = true;  // RecomputationType.Pipeline
  o.checkMemory = false;
  o.planExchanges = false;  // a verdict and a price; priced with the planned exchange
  const Target target = Target::mk2();
  const pipeline::PipelinedExecutable pe = pipeline::compilePipeline(bert.graph, target, o);

  PipelineProjection pp;
  pp.placement = placement.describe();
  pp.stages = pe.stages;
  pp.optimizer_state_off_chip = o.optimizerStateOffChip;
  FitVerdict& v = r.fit;
  v.train_fits = true;
  for (const pipeline::IpuProgram& prog : pe.programs) {
    IpuFit f;
    f.ipu = prog.ipu;
    f.capacity = prog.exe->target.bytesPerTile;
    f.worst_tile = prog.worstTile;
    f.worst_tile_bytes = prog.peakTileBytes;
    f.fits = prog.peakTileBytes <= f.capacity;
    f.stash_bytes = prog.stashBytes;
    f.off_chip_state_bytes = prog.offChipStateBytes;
    if (!f.fits && v.train_fits) {
      v.train_fits = false;
      v.program = "training";
      v.tile = f.worst_tile;
      v.bytes = f.worst_tile_bytes;
      v.capacity = f.capacity;
      v.message = fmt::format("IPU {} tile {} needs {} B of {} B", f.ipu, f.worst_tile,
                              f.worst_tile_bytes, f.capacity);
    }
    pp.ipus.push_back(f);
  }
  // Graphcore validates with the training graph (lr 0): no program of its own to check.
  v.eval_fits = v.train_fits;
  v.recomputed_forward_fraction =
      static_cast<double>(pe.recomputation.recomputedMacs) /
      static_cast<double>(std::max<std::int64_t>(1, pe.recomputation.forwardMacs));
  v.seconds = secondsSince(t0);

  const cost::CostOptions costOpts{.precision = costPrecision(p.precision),
                                   .exchange = cost::ExchangeModel::Planned};
  pp.step = cost::estimatePipelineStep(pe, costOpts);
  cost::PipelineStepCost& ps = pp.step;
  ps.cycles = p.gradient_accumulation + 2 * pe.stages - 2;
  ps.rampFraction = static_cast<double>(ps.cycles - p.gradient_accumulation) / ps.cycles;
  ps.seconds = ps.cycles * ps.cycleSeconds + ps.updateSeconds;

  // MLPerf's evaluation: 10,000 sequences, one per row (Graphcore's packed eval files), every
  // interval; priced as forward passes through the pipeline (its slowest IPU's forward stages
  // per micro-batch, plus the fill).
  std::vector<double> forwardPerIpu(pe.programs.size(), 0.0);
  for (int s = 0; s < pe.stages; ++s)
    forwardPerIpu[static_cast<size_t>(pe.stageIpu[static_cast<size_t>(s)])] +=
        ps.forwardSeconds[static_cast<size_t>(s)];
  const double slowestForward = *std::max_element(forwardPerIpu.begin(), forwardPerIpu.end());
  const std::int64_t rowsPerMicroBatch = static_cast<std::int64_t>(p.replicas) * p.micro_batch;
  const double evalMicroBatches =
      std::ceil(static_cast<double>(p.eval_samples) / static_cast<double>(rowsPerMicroBatch));
  pp.evaluation_seconds = (evalMicroBatches + pe.stages - 1) * slowestForward;

  SampleSchedule sc;
  sc.rcp_samples = cost::bertRcpSamples(p.global_batch);
  sc.eval_interval = cost::bertEvalIntervalSamples(p.global_batch);
  sc.evaluations = static_cast<int>(std::ceil(sc.rcp_samples / sc.eval_interval));
  sc.trained_samples = sc.evaluations * sc.eval_interval;

  cost::TimeToTrain& t = r.time;
  const double g = p.gradient_accumulation;
  t.steps = (sc.trained_samples + p.global_batch - 1) / p.global_batch;
  t.computeSeconds = g * ps.cycleSeconds;
  t.pipelineSeconds = (ps.cycles - g) * ps.cycleSeconds;
  t.updateSeconds = ps.updateSeconds;  // the gradient all-reduce is inside the update
  t.stepSeconds = ps.seconds;
  t.trainSeconds = static_cast<double>(t.steps) * t.stepSeconds;
  t.evalSeconds = sc.evaluations * pp.evaluation_seconds;
  t.totalSeconds = t.trainSeconds + t.evalSeconds;
  t.imagesPerSecond = static_cast<double>(p.global_batch) / t.stepSeconds;

  StepBreakdown& b = r.breakdown;
  b.compute = t.computeSeconds;  // the steady-state cycles (compute, exchange, copies, stashes)
  b.pipeline_ramp = t.pipelineSeconds;
  b.weight_update = t.updateSeconds;
  r.pipeline = std::move(pp);
  r.samples = sc;
  r.model_seconds = secondsSince(t0);
  return r;
}

}  // namespace

std::optional<double> publishedMinutes(Benchmark benchmark, int podSize) {
  // MLPerf Training v1.1 closed, Graphcore: the olympic means of the published packages
  // (ResNet-50: ipu-pod<N>-TF1; tests/fixtures/mlperf_v1.1 keeps them with the configurations;
  // BERT-Large: ipu-pod<N>-POPART-closed, ../shared/docs/IPU_FACTS.md).
  if (benchmark == Benchmark::kBertLarge) {
    const std::map<int, double> bert = {{16, 32.70}, {64, 10.56}, {128, 6.86}};
    if (!bert.contains(podSize)) return std::nullopt;
    return bert.at(podSize);
  }
  if (benchmark != Benchmark::kResNet50) return std::nullopt;
  switch (podSize) {
    case 16:
      return 28.33;
    case 64:
      return 8.50;
    case 128:
      return 5.67;
    case 256:
      return 3.795;
    default:
      return std::nullopt;
  }
}

std::optional<double> publishedThroughput(Benchmark benchmark, int podSize) {
  // ../shared/docs/PIPELINING_FACTS.md 4b, from the v1.1 logs: ResNet-50 1,281,167 images over
  // the median epoch (the first excluded), BERT the sequences between evaluations over the
  // median block.
  const std::map<int, double> resnet = {{16, 29466}, {64, 108024}, {128, 180956}, {256, 334508}};
  const std::map<int, double> bert = {{16, 1524}, {64, 4798}, {128, 9006}};
  const std::map<int, double>* table = benchmark == Benchmark::kResNet50    ? &resnet
                                       : benchmark == Benchmark::kBertLarge ? &bert
                                                                            : nullptr;
  if (table == nullptr || !table->contains(podSize)) return std::nullopt;
  return table->at(podSize);
}

std::vector<FullScaleProjection> projectFullScale(Benchmark benchmark,
                                                  const std::vector<int>& podSizes,
                                                  const ProgramReportSink& report) {
  // The projection prices the full model's own graph: ResNet-50's and BERT-Large's, for now.
  const BenchmarkEntry& entry = findBenchmarkEntry(benchmark);
  const bool projectable = benchmark == Benchmark::kResNet50 || benchmark == Benchmark::kBertLarge;
  if (!projectable || !entry.implemented)
    throw Refusal(fmt::format(
        "no full-scale projection for {}: it has no full-scale model yet ({}); only resnet50 "
        "and bert_large can be projected",
        toString(benchmark),
        !entry.implemented                 ? entry.not_implemented
        : entry.full_scale_missing.empty() ? "not wired here"
                                           : entry.full_scale_missing));
  std::vector<const PodPreset*> presets;
  for (int pod : podSizes) {
    try {
      presets.push_back(&findPreset(benchmark, pod, Scale::kFull));
    } catch (const std::invalid_argument& e) {
      throw Refusal(e.what());
    }
  }
  // The priced programs depend only on the micro-batch, the precision and the optimizer.
  std::map<std::tuple<int, std::string, std::string>, Priced> priced;
  std::vector<FullScaleProjection> out;
  for (const PodPreset* p : presets) {
    if (benchmark == Benchmark::kBertLarge) {
      out.push_back(projectBert(*p));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    FitVerdict fit = checkFit(*p, {}, report);
    const auto key = std::make_tuple(p->micro_batch, p->precision,
                                     mlperfHyperparameters(*p).value(keys::kOptName, ""));
    auto it = priced.find(key);
    if (it == priced.end()) it = priced.emplace(key, price(*p)).first;
    out.push_back(project(*p, it->second, std::move(fit)));
    out.back().model_seconds = secondsSince(t0);
  }
  return out;
}

FullScaleProjection projectFullScale(Benchmark benchmark, int podSize) {
  return projectFullScale(benchmark, std::vector<int>{podSize})[0];
}

namespace {

// The lines of a pipelined (BERT-Large) projection.
std::string describePipelined(const FullScaleProjection& r) {
  const PodPreset& p = r.preset;
  const PipelineProjection& pp = *r.pipeline;
  const SampleSchedule& sc = *r.samples;
  const cost::TimeToTrain& t = r.time;
  std::string s = fmt::format(
      "full-scale projection for {} (cost model, not a measurement): BERT-Large at sequence 512 "
      "(packs of up to 3 sequences), the {} configuration {} replicas x {}-IPU pipeline, "
      "micro-batch {} packs x accumulation {} = global batch {} sequences, {}, optimizer state "
      "{}:\n",
      r.system, p.published ? "published" : "unpublished (see below)", p.replicas,
      p.ipus_per_replica, p.micro_batch, p.gradient_accumulation, p.global_batch, p.precision,
      pp.optimizer_state_off_chip ? "off-chip (streaming memory)" : "on-chip");
  if (!p.published) s += fmt::format("  configuration: {}\n", p.source);
  s += fmt::format("  placement: {}\n", pp.placement);
  s += r.fit.fits()
           ? "  fit: every IPU's program fits its IPU-Mk2 (tile memory checked)\n"
           : fmt::format(
                 "  fit: DOES NOT FIT in this compiler ({}); the times below price the programs "
                 "AS IF THEY FIT\n",
                 r.fit.message);
  for (const IpuFit& f : pp.ipus)
    s += fmt::format(
        "    IPU {}: {}, fullest tile {} {} B of {} B; activation stashes {:.1f} MB, optimizer "
        "state off-chip {:.1f} MB\n",
        f.ipu, f.fits ? "fits" : "does not fit", f.worst_tile, f.worst_tile_bytes, f.capacity,
        static_cast<double>(f.stash_bytes) / 1e6,
        static_cast<double>(f.off_chip_state_bytes) / 1e6);
  s += fmt::format(
      "  recomputation: every stage but the last ({:.0f}% of the forward multiply-accumulates "
      "run twice)\n",
      100 * r.fit.recomputed_forward_fraction);
  std::string stages;
  for (size_t k = 0; k < pp.step.forwardSeconds.size(); ++k)
    stages += fmt::format("{}{:.2f}/{:.2f}", k ? ", " : "", pp.step.forwardSeconds[k] * 1e3,
                          pp.step.backwardSeconds[k] * 1e3);
  s += fmt::format(
      "  modeled step {:.1f} ms = {} cycles x {:.2f} ms (steady {} x {:.2f} = {:.1f} ms, ramp-up "
      "and ramp-down {:.1f} ms) + update {:.2f} ms (gradient all-reduce included; optimizer state "
      "streamed {:.2f} ms); stage forward/backward per micro-batch (ms): {}; slowest stage {}\n",
      t.stepSeconds * 1e3, pp.step.cycles, pp.step.cycleSeconds * 1e3, p.gradient_accumulation,
      pp.step.cycleSeconds * 1e3, t.computeSeconds * 1e3, t.pipelineSeconds * 1e3,
      t.updateSeconds * 1e3, pp.step.offChipStateSeconds * 1e3, stages, pp.step.slowestStage);
  s += fmt::format(
      "  samples: MLPerf's reference convergence point for global batch {} is {:.0f} sequences; "
      "evaluations every {} (the rules' interval), so {} evaluations and {} sequences "
      "trained\n",
      p.global_batch, sc.rcp_samples, sc.eval_interval, sc.evaluations, sc.trained_samples);
  s += fmt::format(
      "  modeled time-to-train {:.2f} min = {} steps x {:.1f} ms + evaluation {:.1f} s ({} x "
      "{:.2f} s: {} sequences through the pipeline's forward stages); {:.0f} sequences/s\n",
      t.totalSeconds / 60, t.steps, t.stepSeconds * 1e3, t.evalSeconds, sc.evaluations,
      pp.evaluation_seconds, p.eval_samples, t.imagesPerSecond);
  if (r.published_minutes)
    s += fmt::format(
        "  published MLPerf Training v1.1 result (Graphcore, closed): {:.2f} min (ratio {:.2f})\n",
        *r.published_minutes, t.totalSeconds / 60 / *r.published_minutes);
  else
    s += "  published MLPerf Training v1.1 result: none for this pod size\n";
  if (r.published_throughput)
    s += fmt::format(
        "  Graphcore's steady-state throughput in those logs: {:.0f} sequences/s (modeled / "
        "logged {:.2f})\n",
        *r.published_throughput, t.imagesPerSecond / *r.published_throughput);
  s += fmt::format(
      "  priced from every IPU's program compiled for IPU-Mk2 with the planned exchange, LAMB "
      "({:.1f} s wall on this host)\n",
      r.model_seconds);
  return s;
}

}  // namespace

std::string FullScaleProjection::describe() const {
  if (pipeline && samples) return describePipelined(*this);
  const PodPreset& p = preset;
  std::string s = fmt::format(
      "full-scale projection for {} (cost model, not a measurement): ResNet-50 v1.5 at 224x224 "
      "on ImageNet, the {} configuration {} replicas x micro-batch {} x accumulation {} "
      "= global batch {}, {} epochs, {}, {} IPU(s) per replica:\n",
      system, p.published ? "published" : "unpublished (see below)", p.replicas, p.micro_batch,
      p.gradient_accumulation, p.global_batch, p.epochs, p.precision, p.ipus_per_replica);
  if (!p.published) s += fmt::format("  configuration: {}\n", p.source);
  if (fit.fits()) {
    s += "  fit: fits one IPU-Mk2 (training and evaluation programs, tile memory checked)\n";
  } else {
    // The verdict sentence; the occupant list stays in the JSON's message.
    const auto firstLine = fit.message.substr(0, fit.message.find(" Largest occupants"));
    s += fmt::format(
        "  fit: DOES NOT FIT one IPU-Mk2 in this compiler: the {} program's tile {} needs {} B "
        "of {} B (training program {}, evaluation program {}). The times below price the "
        "programs AS IF THEY FIT (what the configuration would cost once it does).\n"
        "    compiler: {}\n",
        fit.program, fit.tile, fit.bytes, fit.capacity, fit.train_fits ? "fits" : "does not fit",
        fit.eval_fits ? "fits" : "does not fit", firstLine);
  }
  if (!fit.deviation.empty()) s += fmt::format("  fit check: {}\n", fit.deviation);
  auto memoryLine = [](const char* what, const ProgramMemory& m) {
    return fmt::format(
        "  {}: worst tile {} {} B of {} B ({} B always live, {} B of it code and vertex state; "
        "peak {} B during {}); {} tile(s) over; all tiles' peak {:.1f} MB\n",
        what, m.worst_tile, m.worst_tile_bytes, m.capacity, m.always_live, m.code_and_vertex_state,
        m.peak_not_always_live, m.peak_compute_set, m.tiles_over,
        static_cast<double>(m.peak_live_bytes) / 1e6);
  };
  if (!fit.recomputation_checkpoints.empty()) {
    std::string names;
    for (const std::string& n : fit.recomputation_checkpoints)
      names += (names.empty() ? "" : ", ") + n;
    s += fmt::format(
        "  recomputation: checkpoints {} (Graphcore's [b1/0,b1/2,b2/0,b2/2,b3/0,b3/3]/relu); "
        "{:.0f}% of the forward pass's multiply-accumulates run again before their backward\n",
        names, 100 * fit.recomputed_forward_fraction);
  }
  if (fit.training.worst_tile >= 0) s += memoryLine("training program", fit.training);
  if (fit.training_without_recomputation)
    s += memoryLine("training program without recomputation", *fit.training_without_recomputation);
  if (fit.evaluation.worst_tile >= 0) s += memoryLine("evaluation program", fit.evaluation);
  const StepBreakdown& b = breakdown;
  s += fmt::format(
      "  modeled step {:.2f} ms = compute {:.2f} + exchange {:.2f} + sync {:.2f} + batch-norm "
      "statistics across replicas {:.2f} + host I/O {:.2f} (of {:.2f} ms streamed, the rest "
      "overlapped) + weight update {:.2f} + collectives (gradient all-reduce) {:.2f}{} ms\n",
      time.stepSeconds * 1e3, b.compute * 1e3, b.exchange * 1e3, b.sync * 1e3,
      b.bn_statistics * 1e3, b.host_io * 1e3, b.host_io_total * 1e3, b.weight_update * 1e3,
      b.collectives * 1e3,
      p.ipus_per_replica > 1 ? fmt::format(" + pipeline ramp {:.2f}", b.pipeline_ramp * 1e3)
                             : std::string());
  s += fmt::format(
      "  host side: {:.0f} cores per IPU decode a micro-batch in {:.2f} ms and its images "
      "stream through the M2000 gateway in {:.2f} ms ({}); evaluation waits {:.2f} s for the "
      "hosts' decode; through the gateways per run: checkpoint saves {:.2f} s, weight restores "
      "{:.2f} s, evaluation program load {:.2f} s\n",
      kHostCoresPerIpu, time.hostDecodeSeconds * 1e3, time.gatewayStreamSeconds * 1e3,
      time.hostWaitSeconds > 0
          ? fmt::format("the device waits {:.2f} ms a step", time.hostWaitSeconds * 1e3)
          : std::string("hidden behind the device"),
      time.evalHostWaitSeconds, time.checkpointSaveSeconds, time.restoreSeconds,
      time.evalProgramLoadSeconds);
  s += fmt::format(
      "  modeled time-to-train {:.2f} min = {} steps x {:.1f} ms (compute {:.1f} ms, "
      "all-reduce {:.1f} ms, update {:.2f} ms) + evaluation {:.1f} s + host transfers {:.1f} s; "
      "{:.0f} images/s\n",
      time.totalSeconds / 60, time.steps, time.stepSeconds * 1e3, time.computeSeconds * 1e3,
      time.allReduceSeconds * 1e3, time.updateSeconds * 1e3, time.evalSeconds,
      time.hostTransferSeconds(), time.imagesPerSecond);
  if (published_minutes)
    s += fmt::format(
        "  published MLPerf Training v1.1 result (Graphcore, closed): {:.2f} min (ratio {:.2f})\n",
        *published_minutes, time.totalSeconds / 60 / *published_minutes);
  else
    s += "  published MLPerf Training v1.1 result: none for this pod size\n";
  if (published_throughput)
    s += fmt::format(
        "  Graphcore's steady-state throughput in those logs: {:.0f} images/s (modeled / logged "
        "{:.2f})\n",
        *published_throughput, time.imagesPerSecond / *published_throughput);
  s += fmt::format(
      "  priced from the training and evaluation programs compiled for IPU-Mk2 in segments, "
      "the update as LARS ({:.1f} s wall on this host, {:.1f} s of it the fit "
      "check)\n",
      model_seconds, fit.seconds);
  return s;
}

Json FullScaleProjection::json() const {
  const PodPreset& p = preset;
  const StepBreakdown& b = breakdown;
  Json fitJson = {{"fits", fit.fits()},
                  {"training_program_fits", fit.train_fits},
                  {"evaluation_program_fits", fit.eval_fits},
                  {"target", Target::mk2().name},
                  {"priced_as_if_fitting", !fit.fits()}};
  if (!fit.deviation.empty()) fitJson["deviation"] = fit.deviation;
  fitJson["recomputation_checkpoints"] = fit.recomputation_checkpoints;
  fitJson["recomputed_forward_fraction"] = fit.recomputed_forward_fraction;
  fitJson["training_memory"] = fit.training.json();
  fitJson["evaluation_memory"] = fit.evaluation.json();
  if (fit.training_without_recomputation)
    fitJson["training_memory_without_recomputation"] = fit.training_without_recomputation->json();
  if (!fit.fits()) {
    fitJson["program"] = fit.program;
    fitJson["worst_tile"] = fit.tile;
    fitJson["worst_tile_bytes"] = fit.bytes;
    fitJson["tile_capacity_bytes"] = fit.capacity;
    fitJson["message"] = fit.message;
  }
  Json j = {
      {"benchmark", toString(benchmark)},
      {"mlperf_benchmark", mlperfBenchmarkName(benchmark)},
      {"system", system},
      {"pod_size", p.pod_size},
      {"configuration",
       {{"replicas", p.replicas},
        {"ipus_per_replica", p.ipus_per_replica},
        {"micro_batch", p.micro_batch},
        {"gradient_accumulation", p.gradient_accumulation},
        {"global_batch", p.global_batch},
        {"epochs", p.epochs},
        {"precision", p.precision},
        {"optimizer", p.optimizer},
        {"published", p.published},
        {"source", p.source}}},
      {"parameters", parameters},
      {"fit", fitJson},
      {"step_seconds", time.stepSeconds},
      {"step_breakdown_seconds",
       {{"compute", b.compute},
        {"exchange", b.exchange},
        {"sync", b.sync},
        {"bn_statistics", b.bn_statistics},
        {"host_io", b.host_io},
        {"weight_update", b.weight_update},
        {"collectives", b.collectives},
        {"pipeline_ramp", b.pipeline_ramp}}},
      {"host_io_streamed_seconds", b.host_io_total},
      {"time_to_train", time.report()},
      {"modeled_minutes", time.totalSeconds / 60},
      {"published_minutes", published_minutes ? Json(*published_minutes) : Json(nullptr)},
      {"logged_samples_per_second",
       published_throughput ? Json(*published_throughput) : Json(nullptr)},
      {"modeled_over_logged_throughput",
       published_throughput ? Json(time.imagesPerSecond / *published_throughput) : Json(nullptr)},
      {"modeled_over_published",
       published_minutes ? Json(time.totalSeconds / 60 / *published_minutes) : Json(nullptr)},
      {"priced_as",
       "training and evaluation programs compiled for IPU-Mk2 in segments by the "
       "cost model; the update as LARS, batch norm over model_bn_span images"},
      {"host_seconds", model_seconds},
      {"fit_check_seconds", fit.seconds}};
  if (!pipeline)
    j["host_side"] = {{"cores_per_ipu", kHostCoresPerIpu},
                      {"train_images_per_core_second", kTrainImagesPerCoreSecond},
                      {"eval_images_per_core_second", kEvalImagesPerCoreSecond},
                      {"gateway_bytes_per_second", kGatewayBytesPerSec},
                      {"image_bytes", kImageBytes},
                      {"source",
                       "cores: Graphcore's v1.1 system descriptions; images per core-second: "
                       "this project's loader measured on one core of the development host; "
                       "gateway: 5.5 GB/s shared by an M2000's IPUs"}};
  if (pipeline) {
    Json ipus = Json::array();
    for (const IpuFit& f : pipeline->ipus)
      ipus.push_back({{"ipu", f.ipu},
                      {"fits", f.fits},
                      {"worst_tile", f.worst_tile},
                      {"worst_tile_bytes", f.worst_tile_bytes},
                      {"tile_capacity_bytes", f.capacity},
                      {"stash_bytes", f.stash_bytes},
                      {"off_chip_state_bytes", f.off_chip_state_bytes}});
    j["pipeline"] = {{"placement", pipeline->placement},
                     {"stages", pipeline->stages},
                     {"optimizer_state_off_chip", pipeline->optimizer_state_off_chip},
                     {"ipus", ipus},
                     {"step", pipeline->step.report()},
                     {"evaluation_seconds", pipeline->evaluation_seconds}};
    j["priced_as"] =
        "every IPU's program of the pipeline compiled for IPU-Mk2, priced by the cost model "
        "with the planned exchange; LAMB";
  }
  if (samples)
    j["samples"] = {{"rcp_samples", samples->rcp_samples},
                    {"eval_interval", samples->eval_interval},
                    {"evaluations", samples->evaluations},
                    {"trained_samples", samples->trained_samples}};
  return j;
}

}  // namespace ipu::harness
