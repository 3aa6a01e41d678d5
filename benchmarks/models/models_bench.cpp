// One ResNet-50 training step (forward + backward + SGD momentum update, one graph) on the
// fused engine, batch 32 (and 8) at 224x224 and batch 32 at 32x32 (the ImageNet stem on CIFAR-sized
// images, as benchmarks/models/pytorch_resnet50_step.py runs the peer). 2 threads.
// BM_EfficientNetB4TrainStep: the EfficientNet-B4 step (RMSProp in TensorFlow's form with the
// weight EMA, label smoothing, dropout, stochastic depth) at 380x380 batch 8 and 32x32 batch 32,
// f32 and bf16 (benchmarks/models/pytorch_efficientnet_step.py is the peer).
//   images/s   batch / step time
//   GFLOP/s    3 x forward (2 flop per MAC; 24.5 GFLOP per 224x224 image)
//   tensor_GB  the engine's tensor memory (fused: activations share an arena by lifetime)
//   peak_rss_GB  the process's peak resident memory so far (compile, engine and kernels)
// MODELS_BENCH_PROFILE=1 prints, after each step benchmark, the host time per op kind and the
// slowest ops of two profiled steps (stderr; MODELS_BENCH_PROFILE_TOP=N lists N of them);
// MODELS_BENCH_PROFILE=cpu times them in process CPU seconds (with MODELS_BENCH_THREADS=1 on a
// loaded host).
// MODELS_BENCH_THREADS=n runs the steps on n threads instead of 2 (on a loaded host, 1 thread's CPU
// time per step is a measure that time-slicing does not inflate).
// MODELS_BENCH_REPORT=DIR writes the report page of the Mk2 compile (check 0: the whole plan) to
// DIR/resnet50_mk2_b<batch>.html.
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <string_view>

#include <fmt/format.h>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/compiler/mixed_precision.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/fused_bf16.h"
#include "ipu_backend/report/report.h"
#include "models/bert_large/bert.h"
#include "models/efficientnet_b4/efficientnet.h"
#include "models/resnet50/resnet50.h"

namespace {

using namespace ipu;
using namespace ipu::models;

double peakRssGB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB
}

// The counters every training-step benchmark reports: items (images or sequences) per second,
// GFLOP/s, the compile time, the last loss, the engine's tensor memory and the process's peak.
void stepCounters(benchmark::State& state, const char* rate, double itemsPerStep,
                  double flopsPerStep, double setupS, float loss, const Engine& engine) {
  state.counters[rate] =
      benchmark::Counter(itemsPerStep, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flopsPerStep / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["compile_s"] = setupS;
  state.counters["loss"] = loss;
  state.counters["tensor_GB"] = static_cast<double>(engine.tensorMemoryBytes()) / 1e9;
  state.counters["peak_rss_GB"] = peakRssGB();
}

void maybePrintProfile(Engine& engine, const std::string& what) {
  if (!std::getenv("MODELS_BENCH_PROFILE")) return;
  constexpr int kSteps = 2;
  engine.setProfiling(true, std::string_view(std::getenv("MODELS_BENCH_PROFILE")) == "cpu");
  for (int i = 0; i < kSteps; ++i) engine.run();
  engine.setProfiling(false);
  const Graph& g = engine.executable().graph;
  const std::vector<double>& sec = engine.opSeconds();
  std::map<std::string, std::pair<double, int>> byKind;
  double total = 0;
  for (const Op& op : g.ops()) {
    std::string kind(opName(op.kind));
    if (op.kind == OpKind::Unary || op.kind == OpKind::Binary || op.kind == OpKind::UnaryGrad)
      kind += ":" + op.attrs.getString("fn");
    byKind[kind].first += sec[op.id] / kSteps;
    byKind[kind].second += 1;
    total += sec[op.id] / kSteps;
  }
  std::vector<std::pair<double, std::string>> kinds;
  for (auto& [k, v] : byKind) kinds.emplace_back(v.first, fmt::format("{} ({} ops)", k, v.second));
  std::sort(kinds.rbegin(), kinds.rend());
  std::fprintf(stderr, "profile of %s: %.1f ms %s per step over the ops\n", what.c_str(),
               total * 1e3,
               std::string_view(std::getenv("MODELS_BENCH_PROFILE")) == "cpu" ? "CPU" : "wall");
  for (auto& [t, k] : kinds)
    std::fprintf(stderr, "  %8.1f ms %5.1f%%  %s\n", t * 1e3, 100 * t / total, k.c_str());
  std::vector<int> ops(g.ops().size());
  for (size_t i = 0; i < ops.size(); ++i) ops[i] = static_cast<int>(i);
  std::sort(ops.begin(), ops.end(), [&](int a, int b) { return sec[a] > sec[b]; });
  // MODELS_BENCH_PROFILE_TOP=N lists the N slowest ops (15 by default).
  const char* top = std::getenv("MODELS_BENCH_PROFILE_TOP");
  const size_t shown = top ? static_cast<size_t>(std::max(0, std::atoi(top))) : 15;
  std::fprintf(stderr, "  slowest ops:\n");
  for (size_t i = 0; i < std::min(shown, ops.size()); ++i) {
    const Op& op = g.op(ops[i]);
    std::string kind(opName(op.kind));
    if (op.attrs.has("fn")) kind += ":" + op.attrs.getString("fn");
    std::fprintf(stderr, "  %8.2f ms  %s -> %s %s\n", sec[op.id] / kSteps * 1e3, kind.c_str(),
                 op.outputs.empty() ? "" : g.tensor(op.outputs[0]).name.c_str(),
                 op.outputs.empty() ? "" : shapeStr(g.tensor(op.outputs[0]).shape).c_str());
  }
}

// CPU time of every thread of this process so far.
double processCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

int benchThreads() {
  const char* n = std::getenv("MODELS_BENCH_THREADS");
  return n ? std::max(1, std::atoi(n)) : 2;
}

// The fused engine runs whole ops, so the tile plan is irrelevant to its timing: a 16-tile target
// with large tiles keeps the planner small (the Mk2 plan of batch 32 at 224 takes ~14 GB).
Target fusedTimingTarget() {
  return Target::small(16, std::int64_t{1} << 34);
}

void resnet50TrainStep(benchmark::State& state, kernels::fused::ConvAlgorithm algorithm) {
  kernels::fused::setNumThreads(benchThreads());
  kernels::fused::setConvAlgorithm(algorithm);
  const i64 kBatch = state.range(1);
  ResNetConfig c = ResNetConfig::resnet50();
  c.inputH = c.inputW = static_cast<int>(state.range(0));
  c.labelSmoothing = 0.1;
  const double flopsPerImage =
      6.0 * forwardMacs(buildInference(c, 1).graph);  // fwd + 2x fwd for the backward
  ResNetGraph rg = buildTraining(c, kBatch, resnetSgdOptions(0.9, 5e-5));

  const auto t0 = std::chrono::steady_clock::now();
  CompileOptions opts;
  opts.checkMemory = false;  // one step of batch 32 is far more than one IPU holds
  auto exe = std::make_shared<const Executable>(compile(rg.graph, fusedTimingTarget(), opts));
  Engine engine(exe, EngineMode::Fused);
  const double setupS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "kernel rule: %s\n", exe->hostKernelRule.c_str());
  for (auto& [name, v] : initWeights(rg, 1)) engine.writeTensor(name, v);

  std::vector<float> images(static_cast<size_t>(exe->graph.tensor(rg.images).elements()));
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i % 251) / 251.0f;
  std::vector<std::int32_t> labels(kBatch);
  for (i64 i = 0; i < kBatch; ++i) labels[i] = static_cast<std::int32_t>((i * 37) % 1000);
  float lr = 0.01f, loss = 0;
  std::vector<float> logits(static_cast<size_t>(exe->graph.tensor(rg.logits).elements()));
  engine.connectInput(rg.images, images.data());
  engine.connectInput(rg.labels, labels.data());
  engine.connectInput(rg.lr, &lr);
  engine.connectOutput(rg.logits, logits.data());
  engine.connectOutput(rg.loss, &loss);
  for (int i = 0; i < 3; ++i) engine.run();  // warm-up

  for (auto _ : state) {
    engine.run();
    benchmark::DoNotOptimize(loss);
  }
  stepCounters(state, "images/s", static_cast<double>(kBatch), kBatch * flopsPerImage, setupS, loss,
               engine);
  maybePrintProfile(engine, fmt::format("f32 batch {} at {}x{}", kBatch, c.inputH, c.inputW));
  state.SetLabel(fmt::format("batch {} at {}x{}, {:.2f} GFLOP/img", kBatch, c.inputH, c.inputW,
                             flopsPerImage / 1e9));
  kernels::fused::setConvAlgorithm(kernels::fused::ConvAlgorithm::Auto);
}
// Auto: Winograd for the 3x3 stride-1 convolutions (kernels/fused.h); Direct: direct only.
void BM_ResNet50TrainStep(benchmark::State& state) {
  resnet50TrainStep(state, kernels::fused::ConvAlgorithm::Auto);
}
void BM_ResNet50TrainStepDirectConv(benchmark::State& state) {
  resnet50TrainStep(state, kernels::fused::ConvAlgorithm::Direct);
}
// The workloads of both step benchmarks (batch 32 at 224x224 holds ~3 GB of tensors).
void stepWorkloads(benchmark::internal::Benchmark* b) {
  b->Args({224, 32})
      ->Args({224, 8})
      ->Args({32, 32})
      ->ArgNames({"hw", "batch"})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(10.0);
}
BENCHMARK(BM_ResNet50TrainStep)->Apply(stepWorkloads);
BENCHMARK(BM_ResNet50TrainStepDirectConv)->Apply(stepWorkloads);

// Compile time of the full ResNet-50 training graph (224x224, SGD momentum) for one Mk2 IPU at
// the published micro-batch 20, with the per-tile memory check on. `fits` = 1 when it fits;
// otherwise `worst_tile_kib` is what the worst tile would need (capacity 624 KiB).
// check 0: the whole plan (exchanges included) as --skip-memory-check builds it.
void BM_ResNet50CompileMk2(benchmark::State& state) {
  const i64 kBatch = state.range(0);
  const ResNetConfig c = ResNetConfig::resnet50();
  CompileOptions opts;
  opts.checkMemory = state.range(1) != 0;
  double fits = 1, worstKiB = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ResNetGraph rg = buildTraining(c, kBatch, resnetSgdOptions(0.9, 5e-5));
    state.ResumeTiming();
    try {
      const Executable exe = compile(rg.graph, Target::mk2(), opts);
      i64 worst = 0;
      for (const TileMemory& m : exe.tileMemory) worst = std::max(worst, m.total());
      fits = worst <= exe.target.bytesPerTile ? 1 : 0;
      worstKiB = fits ? 0 : static_cast<double>(worst) / 1024.0;
      if (const char* dir = std::getenv("MODELS_BENCH_REPORT"); dir && !opts.checkMemory) {
        state.PauseTiming();
        const std::string title =
            fmt::format("ResNet-50 training step, micro-batch {} at 224x224, f32, Mk2", kBatch);
        report::writeHtmlPage(
            std::filesystem::path(dir) / fmt::format("resnet50_mk2_b{}.html", kBatch),
            {report::compileView(exe, cost::estimateStep(exe), title)}, title);
        state.ResumeTiming();
      }
    } catch (const CompileError& e) {
      fits = 0;
      worstKiB = static_cast<double>(e.bytes()) / 1024.0;
    }
  }
  state.counters["fits"] = fits;
  state.counters["worst_tile_kib"] = worstKiB;
  state.SetLabel(fmt::format("training graph, micro-batch {} at 224x224, Mk2", kBatch));
}
BENCHMARK(BM_ResNet50CompileMk2)
    ->Args({20, 1})
    ->Args({20, 0})
    ->ArgNames({"batch", "check"})
    ->Unit(benchmark::kSecond)
    ->UseRealTime()
    ->Iterations(1);

// The same step under a precision policy (compiler/mixed_precision.h), third argument:
//   0 bf16   bf16 activations / gradients, f32 master weights: oneDNN bf16 conv and matmul
//            primitives (native on AVX512-BF16), the other ops widen to f32 and round back;
//   1 fp16   f16 compute, f32 masters, dynamic loss scaling: no CPU has f16 conv kernels
//            here, so every op converts f16 <-> f32 around an f32 kernel (the conversion cost).
void BM_ResNet50TrainStepPrecision(benchmark::State& state) {
  kernels::fused::setNumThreads(benchThreads());
  const i64 kBatch = state.range(1);
  const char* policyName = state.range(2) == 0 ? "bf16" : "fp16";
  const auto policy = precision::PrecisionPolicy::parse(policyName);
  ResNetConfig c = ResNetConfig::resnet50();
  c.inputH = c.inputW = static_cast<int>(state.range(0));
  c.labelSmoothing = 0.1;
  const double flopsPerImage = 6.0 * forwardMacs(buildInference(c, 1).graph);
  ResNetGraph fwd = buildForward(c, kBatch, BnMode::Train);
  PrecisionRewrite rw = applyPrecision(fwd.graph, policy);
  const int lrIn = rw.graph.addInput("lr", {});
  std::vector<int> params;
  for (int p : fwd.params) params.push_back(rw.map(p));
  TrainingStepTensors step = appendTrainingStep(rw.graph, rw.map(fwd.loss), params, lrIn,
                                                resnetSgdOptions(0.9, 5e-5), policy);
  const int images = rw.map(fwd.images), labels = rw.map(fwd.labels), lossT = rw.map(fwd.loss);

  const auto t0 = std::chrono::steady_clock::now();
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe =
      std::make_shared<const Executable>(compile(std::move(rw.graph), fusedTimingTarget(), opts));
  Engine engine(exe, EngineMode::Fused);
  const double setupS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& [name, v] : initWeights(fwd, 1))
    if (exe->graph.find(name) >= 0) engine.writeTensor(name, v);
  for (const Tensor& t : exe->graph.tensors())  // momentum buffers
    if (t.kind == TensorKind::Variable && t.name.ends_with("/momentum"))
      engine.writeTensor(t.name, std::vector<float>(static_cast<size_t>(t.elements()), 0.f));

  std::vector<float> imageData(static_cast<size_t>(exe->graph.tensor(images).elements()));
  for (size_t i = 0; i < imageData.size(); ++i) imageData[i] = static_cast<float>(i % 251) / 251.0f;
  std::vector<std::int32_t> labelData(kBatch);
  for (i64 i = 0; i < kBatch; ++i) labelData[i] = static_cast<std::int32_t>((i * 37) % 1000);
  float lr = 0.01f, loss = 0, scale = policy.lossScaling.scale, inv = 1.0f / scale, overflow = 0;
  engine.connectInput(images, imageData.data());
  engine.connectInput(labels, labelData.data());
  engine.connectInput(lrIn, &lr);
  engine.connectOutput(lossT, &loss);
  if (step.lossScale >= 0) {
    engine.connectInput(step.lossScale, &scale);
    engine.connectInput(step.lossScaleInverse, &inv);
    engine.connectOutput(step.overflow, &overflow);
  }
  for (int i = 0; i < 3; ++i) engine.run();  // warm-up

  for (auto _ : state) {
    engine.run();
    benchmark::DoNotOptimize(loss);
  }
  state.counters["native_bf16_isa"] = kernels::fused::nativeBf16Isa() ? 1 : 0;
  maybePrintProfile(engine,
                    fmt::format("{} batch {} at {}x{}", policyName, kBatch, c.inputH, c.inputW));
  stepCounters(state, "images/s", static_cast<double>(kBatch), kBatch * flopsPerImage, setupS, loss,
               engine);
  state.SetLabel(fmt::format("{} batch {} at {}x{}", policyName, kBatch, c.inputH, c.inputW));
}
BENCHMARK(BM_ResNet50TrainStepPrecision)
    ->Args({224, 32, 0})
    ->Args({224, 8, 0})
    ->Args({224, 32, 1})
    ->Args({224, 8, 1})
    ->ArgNames({"hw", "batch", "precision"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(10.0);

// One BERT-Large training step (forward + backward + LAMB, one graph) on the fused engine: the
// full width (1024 hidden, 16 heads, FFN 4096, vocabulary 30,522 with the tied MLM decoder, NSP
// head) with `layers` encoder layers, `batch` unpacked sequences of `seq` tokens (20 masked
// slots at 128, 76 at 512: MLPerf's max_predictions_per_seq), 2 threads. Fourth argument: 0 f32,
// 1 the bf16 policy (bf16 activations and gradients, f32 master weights and LAMB state).
// benchmarks/models/pytorch_bert_step.py is the peer (compare_bert.sh runs both).
//   seq/s  batch / mean step time;  median_s  median step;  GFLOP/s  3 x forward matmul flops
//   (2 per MAC). LAMB clips to global gradient norm 1 (the reference).
BertHostBatch bertBenchBatch(const BertConfig& c, const BertShape& s) {
  BertHostBatch b;
  const i64 B = s.batch, S = s.seqLength, P = s.maskedSlots;
  for (i64 r = 0; r < B; ++r) {
    for (i64 t = 0; t < S; ++t) {
      b.inputIds.push_back(static_cast<std::int32_t>(5 + (r * 7919 + t * 104729) % (c.vocab - 5)));
      b.segmentIds.push_back(t < S / 2 ? 0 : 1);
      b.positions.push_back(static_cast<std::int32_t>(t));
      b.sequenceIndex.push_back(1);
    }
    for (i64 p = 0; p < P; ++p) {
      b.maskedPositions.push_back(static_cast<std::int32_t>(1 + p * (S - 1) / P));
      b.maskedIds.push_back(static_cast<std::int32_t>(5 + (r * 31 + p * 577) % (c.vocab - 5)));
      b.maskedSequence.push_back(1);
    }
    b.clsPositions.push_back(0);
    b.nspLabels.push_back(static_cast<std::int32_t>(r % 2));
    b.nspWeights.push_back(1);
  }
  return b;
}

void BM_BertTrainStep(benchmark::State& state) {
  kernels::fused::setNumThreads(benchThreads());
  BertConfig c = BertConfig::large();
  c.layers = static_cast<int>(state.range(2));
  BertShape s;
  s.seqLength = state.range(0);
  s.batch = state.range(1);
  s.maskedSlots = s.seqLength >= 512 ? 76 : 20;
  const char* policyName = state.range(3) == 0 ? "fp32" : "bf16";
  const auto policy = precision::PrecisionPolicy::parse(policyName);
  const double flopsPerStep = 6.0 * forwardMacs(buildBertForward(c, s).graph);

  const auto t0 = std::chrono::steady_clock::now();
  OptimizerOptions lamb = bertLambOptions();
  lamb.maxGradNorm = 1.0;  // the reference clips to global norm 1
  BertGraph bg = buildBertTraining(c, s, lamb, policy);
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(bg.graph, fusedTimingTarget(), opts));
  Engine engine(exe, EngineMode::Fused);
  const double setupS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& [name, v] : initBertWeights(bg, 1)) engine.writeTensor(name, v);

  const BertFeeds f = makeBertFeeds(bg, bertBenchBatch(c, s));
  float lr = 1e-4f, loss = 0, scale = policy.lossScaling.scale, inv = 1.0f / scale, overflow = 0;
  engine.connectInput(bg.inputIds, f.inputIds.data());
  engine.connectInput(bg.segmentIds, f.segmentIds.data());
  engine.connectInput(bg.positionIds, f.positionIds.data());
  engine.connectInput(bg.sequenceIndex, f.sequenceIndex.data());
  engine.connectInput(bg.maskedRows, f.maskedRows.data());
  engine.connectInput(bg.maskedLabels, f.maskedLabels.data());
  engine.connectInput(bg.maskedWeights, f.maskedWeights.data());
  engine.connectInput(bg.maskedLabelIndex, f.maskedLabelIndex.data());
  engine.connectInput(bg.clsRows, f.clsRows.data());
  engine.connectInput(bg.nspLabels, f.nspLabels.data());
  engine.connectInput(bg.nspWeights, f.nspWeights.data());
  engine.connectInput(bg.lr, &lr);
  engine.connectOutput(bg.loss, &loss);
  if (bg.lossScale >= 0) {
    engine.connectInput(bg.lossScale, &scale);
    engine.connectInput(bg.lossScaleInverse, &inv);
    engine.connectOutput(bg.overflow, &overflow);
  }
  for (int i = 0; i < 3; ++i) engine.run();  // warm-up

  // The median step is what compare_bert.sh compares: wall time, and the process's CPU time
  // (its cpu-time mode, one thread on a loaded host).
  std::vector<double> stepS, stepCpuS;
  for (auto _ : state) {
    const auto s0 = std::chrono::steady_clock::now();
    const double c0 = processCpuSeconds();
    engine.run();
    benchmark::DoNotOptimize(loss);
    stepCpuS.push_back(processCpuSeconds() - c0);
    stepS.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count());
  }
  std::sort(stepS.begin(), stepS.end());
  std::sort(stepCpuS.begin(), stepCpuS.end());
  state.counters["median_s"] = stepS[stepS.size() / 2];
  state.counters["median_cpu_s"] = stepCpuS[stepCpuS.size() / 2];
  stepCounters(state, "seq/s", static_cast<double>(s.batch), flopsPerStep, setupS, loss, engine);
  const std::string what = fmt::format("BERT {} x 1024, {} batch {} at sequence {}", c.layers,
                                       policyName, s.batch, s.seqLength);
  maybePrintProfile(engine, what);
  state.SetLabel(fmt::format("{}, {:.1f} GFLOP/step", what, flopsPerStep / 1e9));
}
BENCHMARK(BM_BertTrainStep)
    ->ArgsProduct({{128, 512}, {2}, {2, 4, 24}, {0, 1}})
    ->ArgNames({"seq", "batch", "layers", "precision"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);  // multi-second steps: 3 warm-up + 3 timed, as the peer

// The EfficientNet-B4 training step as run_benchmark trains it (models/efficientnet_b4 with the
// closed recipe's optimizer: RMSProp 0.9 / 0.9 / 1e-3, weight decay 1e-5 off the norm
// parameters, the 0.9999 weight EMA with warm-up; label smoothing 0.1, dropout 0.4, stochastic
// depth 0.2), third argument the precision: 0 f32, 1 bf16 (bf16 activations and gradients, f32
// master weights and optimizer: the peer's bf16 autocast).
void BM_EfficientNetB4TrainStep(benchmark::State& state) {
  namespace en = models::efficientnet;
  kernels::fused::setNumThreads(benchThreads());
  const i64 kBatch = state.range(1);
  const bool bf16 = state.range(2) != 0;
  const auto policy = precision::PrecisionPolicy::parse(bf16 ? "bf16" : "fp32");
  en::Config c = en::Config::b4();
  c.inputH = c.inputW = static_cast<int>(state.range(0));
  c.labelSmoothing = 0.1;
  OptimizerOptions o;
  o.kind = "rmsprop";
  o.rho = 0.9;
  o.momentum = 0.9;
  o.epsilon = 1e-3;
  o.weightDecay = 1e-5;
  o.emaDecay = 0.9999;
  o.emaWarmup = true;
  const double flopsPerImage = 6.0 * forwardMacs(en::buildInference(c, 1).graph);
  en::EfficientNetGraph eg = en::buildTraining(c, kBatch, o, policy);

  const auto t0 = std::chrono::steady_clock::now();
  CompileOptions opts;
  opts.checkMemory = false;
  auto exe = std::make_shared<const Executable>(compile(eg.graph, fusedTimingTarget(), opts));
  Engine engine(exe, EngineMode::Fused);
  const double setupS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto values = en::initWeights(eg, 1);
  applyOptimizerStateInit(eg.graph, eg.optimizer, values);
  for (auto& [name, v] : values)
    if (exe->graph.find(name) >= 0) engine.writeTensor(name, v);

  std::vector<float> images(static_cast<size_t>(exe->graph.tensor(eg.images).elements()));
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i % 251) / 251.0f;
  std::vector<std::int32_t> labels(kBatch), key = {0, 0};
  for (i64 i = 0; i < kBatch; ++i) labels[i] = static_cast<std::int32_t>((i * 37) % 1000);
  float lr = 0.001f, loss = 0, scale = policy.lossScaling.scale, inv = 1.0f / scale, overflow = 0;
  engine.connectInput(eg.images, images.data());
  engine.connectInput(eg.labels, labels.data());
  engine.connectInput(eg.lr, &lr);
  if (eg.dropoutKey >= 0) engine.connectInput(eg.dropoutKey, key.data());
  engine.connectOutput(eg.loss, &loss);
  if (eg.lossScale >= 0) {
    engine.connectInput(eg.lossScale, &scale);
    engine.connectInput(eg.lossScaleInverse, &inv);
    engine.connectOutput(eg.overflow, &overflow);
  }
  for (int i = 0; i < 3; ++i) engine.run();  // warm-up

  for (auto _ : state) {
    ++key[0];  // a new dropout draw each step, as training
    engine.run();
    benchmark::DoNotOptimize(loss);
  }
  stepCounters(state, "images/s", static_cast<double>(kBatch), kBatch * flopsPerImage, setupS, loss,
               engine);
  const std::string what =
      fmt::format("{} batch {} at {}x{}", bf16 ? "bf16" : "f32", kBatch, c.inputH, c.inputW);
  maybePrintProfile(engine, "EfficientNet-B4 " + what);
  state.SetLabel(fmt::format("EfficientNet-B4 {}, {:.2f} GFLOP/img", what, flopsPerImage / 1e9));
}
BENCHMARK(BM_EfficientNetB4TrainStep)
    ->Args({380, 8, 0})
    ->Args({32, 32, 0})
    ->Args({380, 8, 1})
    ->Args({32, 32, 1})
    ->ArgNames({"hw", "batch", "bf16"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(5.0);

}  // namespace

BENCHMARK_MAIN();
