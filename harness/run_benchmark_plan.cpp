#include "harness/run_benchmark_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>

#include "datasets/fashion_mnist.h"
#include "datasets/image_folder.h"
#include "harness/bert_task.h"
#include "harness/config.h"
#include "harness/division_rules.h"
#include "harness/efficientnet_task.h"
#include "harness/exit_codes.h"
#include "harness/report_pages.h"
#include "harness/rules/efficientnet_rules.h"
#include "ipu_backend/cost/cost_model.h"
#include "ipu_backend/cost/pipeline_cost.h"
#include "ipu_backend/cost/pipeline_search.h"
#include "ipu_backend/replication/replica_group.h"
#include "models/resnet50/resnet50.h"

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

constexpr char kTrainSamplesKey[] = "mini_train_samples";
constexpr char kEvalSamplesKey[] = "mini_eval_samples";
constexpr char kTargetKey[] = "mini_target_accuracy";
constexpr char kAugmentFlipKey[] = "mini_augment_flip";
// BERT mini, open division only: the evaluation interval and the encoder's shape (RunSettings).
constexpr char kEvalIntervalKey[] = "mini_eval_interval_samples";
constexpr char kBertLayersKey[] = "mini_bert_layers";
constexpr char kBertHiddenKey[] = "mini_bert_hidden";
constexpr char kBertHeadsKey[] = "mini_bert_heads";
constexpr char kBertFfnKey[] = "mini_bert_ffn";
constexpr char kBertVocabKey[] = "mini_bert_vocab";
constexpr char kAugmentPaddingKey[] = "mini_augment_padding";
// Random translations beyond a third of a 28x28 image push the garment out of the frame.
constexpr int kMaxAugmentPadding = 8;
constexpr char kEvalPeriodKey[] = "eval_period";
constexpr char kEvalOffsetKey[] = "eval_offset";
constexpr char kMaxCorruptEvalKey[] = "max_corrupt_eval_fraction";
constexpr char kIpusPerReplicaKey[] = "ipus_per_replica";
constexpr char kPipelineSplitsKey[] = "pipeline_splits";
constexpr char kPipelineStageIpusKey[] = "pipeline_stage_ipus";
constexpr char kPipelineScheduleKey[] = "pipeline_schedule";
constexpr char kPipelineAutoKey[] = "pipeline_auto";
constexpr char kRecomputeKey[] = "recompute";
constexpr char kResnetRule[] = "MLPerf Training rules v4.0, ResNet-50 closed";
constexpr double kClosedResnetTarget = 0.759;  // the checker's closed_resnet.yaml target
constexpr double kClosedBertTarget = 0.720;    // the checker's closed_bert.yaml target
constexpr char kBertRule[] = "MLPerf Training rules v5.0, BERT closed";
// LARS trust coefficient (eeta): TensorFlow LARSOptimizer's default, which the MLPerf ResNet-50
// reference uses; the rules do not log it.
constexpr double kLarsTrustCoefficient = 0.001;
// LAMB: the MLPerf BERT reference clips the gradients to global norm 1.0 before the update.
constexpr double kLambMaxGradNorm = 1.0;
// Our key (not MLPerf's): the decay of an exponential moving average of the weights, which
// evaluation then reads (EfficientNet); absent or 0: none.
constexpr char kWeightEmaKey[] = "ipu_weight_ema_decay";

std::string joinViolations(const std::vector<Violation>& v) {
  std::string out;
  for (const Violation& x : v) out += "\n  - " + x.message();
  return out;
}

// EfficientNet-B4's closed cadence and target: our rules (harness/rules/efficientnet_b4.json).
std::vector<Violation> validateEfficientNetSettings(Division division, Scale scale,
                                                    const RunSettings& s) {
  const EfficientNetRules& rules = builtinEfficientNetRules();
  std::vector<Violation> out =
      validateEfficientNetEvaluation(rules, division, s.eval_period, s.eval_offset);
  const double target = scale == Scale::kMini ? rules.mini_target : rules.target;
  if (division == Division::kClosed && (s.target_accuracy < target || s.target_accuracy >= 1)) {
    out.push_back({kTargetKey, fmt::format("{}", s.target_accuracy),
                   fmt::format(">= {} and < 1 (the {} quality target of the rules; the checker's "
                               "ruleset refuses a log below it)",
                               target, toString(scale)),
                   fmt::format("EfficientNet-B4 closed rules ({}, quality)", rules.source)});
  }
  return out;
}

// Harness rules on the run settings: the closed ResNet schedule evaluates every 4 epochs with
// an offset of 0-3 and stops at the 75.9% quality target or above.
std::vector<Violation> validateSettings(Division division, Benchmark benchmark, Scale scale,
                                        const RunSettings& s) {
  std::vector<Violation> out;
  if (benchmark == Benchmark::kEfficientNetB4) {
    out = validateEfficientNetSettings(division, scale, s);
    division = Division::kOpen;  // the ResNet-50 cadence and target below do not apply
  }
  const bool closed = division == Division::kClosed;
  const bool bert = benchmark == Benchmark::kBertLarge;  // evaluates every N samples, not epochs
  if (bert && closed && (s.target_accuracy < kClosedBertTarget || s.target_accuracy >= 1.0)) {
    out.push_back({kTargetKey, fmt::format("{}", s.target_accuracy),
                   ">= 0.72 and < 1 (the closed BERT quality target is a masked-LM accuracy of "
                   "0.720)",
                   kBertRule});
  }
  if (!bert && closed && s.eval_period != 4) {
    out.push_back({kEvalPeriodKey, std::to_string(s.eval_period),
                   "4 (evaluation every 4 epochs, epochs numbered from 1)", kResnetRule});
  }
  if (s.eval_period < 1) {
    out.push_back(
        {kEvalPeriodKey, std::to_string(s.eval_period), "an integer >= 1", "run_benchmark"});
  }
  const int maxOffset = std::max(0, std::min(3, s.eval_period - 1));
  if (s.eval_offset < 0 || s.eval_offset > maxOffset) {
    out.push_back({kEvalOffsetKey, std::to_string(s.eval_offset),
                   fmt::format("an integer 0-{} (the offset of the evaluation epochs)", maxOffset),
                   closed && !bert ? kResnetRule : "run_benchmark"});
  }
  if (!bert && closed && (s.target_accuracy < kClosedResnetTarget || s.target_accuracy >= 1.0)) {
    out.push_back({kTargetKey, fmt::format("{}", s.target_accuracy),
                   ">= 0.759 and < 1 (the closed ResNet-50 quality target is 75.9% top-1)",
                   kResnetRule});
  }
  if (!closed && (s.target_accuracy <= 0 || s.target_accuracy >= 1.0)) {
    out.push_back({kTargetKey, fmt::format("{}", s.target_accuracy), "in (0, 1)", "run_benchmark"});
  }
  for (const auto& [key, value] :
       {std::pair{kTrainSamplesKey, s.train_samples}, std::pair{kEvalSamplesKey, s.eval_samples},
        std::pair{kEvalIntervalKey, s.eval_interval_samples}}) {
    if (value < 0) out.push_back({key, std::to_string(value), "an integer >= 0", "run_benchmark"});
  }
  // The BERT mini model's shape and evaluation interval: open runs only. The closed mini keeps
  // the 24-layer model (the 398 tensors of the 1.1.0 checker) and MLPerf's cadence scaled down.
  const std::pair<const char*, std::int64_t> bertMiniKeys[] = {
      {kEvalIntervalKey, s.eval_interval_samples},
      {kBertLayersKey, s.bert_layers},
      {kBertHiddenKey, s.bert_hidden},
      {kBertHeadsKey, s.bert_heads},
      {kBertFfnKey, s.bert_ffn},
      {kBertVocabKey, s.bert_vocab}};
  for (const auto& [key, value] : bertMiniKeys) {
    if (value == 0) continue;
    if (!bert || scale != Scale::kMini) {
      out.push_back({key, std::to_string(value),
                     "0 (unset): it applies to --benchmark bert_large "
                     "--scale mini only",
                     "run_benchmark"});
    } else if (closed) {
      out.push_back({key, std::to_string(value),
                     "0 (unset) in the closed division: the closed mini model is 24 x 32 with "
                     "the default vocabulary and MLPerf's evaluation rule scaled down; use "
                     "--division open for another shape or interval",
                     kBertRule});
    } else if (value < 0) {
      out.push_back({key, std::to_string(value), "an integer >= 0", "run_benchmark"});
    }
  }
  if (!(s.max_corrupt_eval_fraction >= 0 && s.max_corrupt_eval_fraction < 1)) {
    out.push_back({kMaxCorruptEvalKey, fmt::format("{}", s.max_corrupt_eval_fraction),
                   "in [0, 1) (the share of validation images that may be corrupt)",
                   "run_benchmark"});
  }
  if (s.augment_padding < 0 || s.augment_padding > kMaxAugmentPadding) {
    out.push_back(
        {kAugmentPaddingKey, std::to_string(s.augment_padding),
         fmt::format("an integer 0-{} (pixels of random translation)", kMaxAugmentPadding),
         "run_benchmark"});
  }
  return out;
}

}  // namespace

namespace {
// The preset's precision names (MLPerf system-description style) and the CLI's policy names.
const std::vector<std::pair<std::string, std::string>> kPrecisionNames = {{"FP32", "fp32"},
                                                                          {"FP16", "fp16"},
                                                                          {"BF16", "bf16"},
                                                                          {"FP16.16", "16.16"},
                                                                          {"FP16.32", "16.32"}};
}  // namespace

precision::PrecisionPolicy precisionPolicyOf(const PodPreset& preset) {
  auto it = std::find_if(kPrecisionNames.begin(), kPrecisionNames.end(),
                         [&](const auto& n) { return n.first == preset.precision; });
  if (it == kPrecisionNames.end())
    throw Refusal(
        fmt::format("precision \"{}\" is unknown (valid: FP32, FP16, BF16, FP16.16, "
                    "FP16.32; on the command line fp32, fp16, bf16, 16.16, 16.32)",
                    preset.precision));
  precision::PrecisionPolicy p = precision::PrecisionPolicy::parse(it->second);
  const LossScaling& ls = preset.loss_scaling;
  try {
    if (ls.mode == "none") {
      p.lossScaling = precision::LossScalingConfig::none();
    } else if (ls.mode == "static") {
      p.lossScaling = precision::parseLossScaling(fmt::format("static:{}", ls.scale));
    } else if (ls.mode == "dynamic") {
      p.lossScaling = precision::parseLossScaling(fmt::format("dynamic:{}", ls.scale));
    } else {
      throw std::invalid_argument(fmt::format("unknown mode \"{}\"", ls.mode));
    }
  } catch (const std::invalid_argument& e) {
    throw Refusal(
        fmt::format("loss_scaling {{mode \"{}\", scale {}}}: {} (modes: none, static, "
                    "dynamic)",
                    ls.mode, ls.scale, e.what()));
  }
  return p;
}

ImageNetIndex scanImageNet(const fs::path& dataDir, datasets::CorruptPolicy policy,
                           int maxClasses) {
  const char* layout =
      "expected the standard ImageNet layout: <data-dir>/train/<synset>/*.JPEG and "
      "<data-dir>/val/<synset>/*.JPEG (val sorted into the same synset folders)";
  for (const char* split : {"train", "val"}) {
    std::error_code ec;
    if (!fs::is_directory(dataDir / split, ec))
      throw Refusal(fmt::format("--data-dir {}: no {} folder ({}); {}", dataDir.string(), split,
                                (dataDir / split).string(), layout));
  }
  ImageNetIndex index;
  try {
    auto train = std::make_shared<datasets::ImageFolderIndex>(
        datasets::scanImageFolder(dataDir / "train", policy));
    index.val = std::make_shared<const datasets::ImageFolderIndex>(
        datasets::scanImageFolder(dataDir / "val", policy, &train->classes));
    index.train = std::move(train);
  } catch (const datasets::DatasetError& e) {
    throw Refusal(fmt::format("--data-dir {}: {}; {}", dataDir.string(), e.what(), layout));
  }
  if (static_cast<int>(index.train->classes.size()) > maxClasses)
    throw Refusal(fmt::format(
        "--data-dir {}: {} holds {} class folders, but ResNet-50 classifies {} (ImageNet-1k)",
        dataDir.string(), (dataDir / "train").string(), index.train->classes.size(), maxClasses));
  return index;
}

OptimizerOptions optimizerOf(const Json& hp) {
  const std::string name = hp.value(keys::kOptName, "");
  const std::vector<std::string> known = optimizerNames();
  if (std::find(known.begin(), known.end(), name) == known.end())
    throw Refusal(fmt::format("opt_name \"{}\": the backend has no such optimizer (it has: {})",
                              name, fmt::join(known, ", ")));
  OptimizerOptions o;
  o.kind = name;
  if (name == "sgd") {
    o.momentum = hp.value(keys::kSgdOptMomentum, 0.9);
    o.weightDecay = hp.value(keys::kSgdOptWeightDecay, 0.0);
  } else if (name == "lars") {
    o.momentum = hp.value(keys::kLarsOptMomentum, 0.9);
    o.weightDecay = hp.value(keys::kLarsOptWeightDecay, 0.0);
    o.larsEta = kLarsTrustCoefficient;
    o.larsEpsilon = hp.value(keys::kLarsEpsilon, 0.0);
  } else if (name == "lamb") {
    o.beta1 = hp.value(keys::kOptLambBeta1, 0.9);
    o.beta2 = hp.value(keys::kOptLambBeta2, 0.999);
    o.epsilon = hp.value(keys::kOptLambEpsilon, 1e-6);
    o.weightDecay = hp.value(keys::kOptLambWeightDecayRate, 0.0);
    o.maxGradNorm = kLambMaxGradNorm;
  } else if (name == "rmsprop") {
    o.rho = hp.value(keys::kOptRmspropDecay, 0.9);
    o.momentum = hp.value(keys::kOptRmspropMomentum, 0.9);
    o.epsilon = hp.value(keys::kOptRmspropEpsilon, 1e-3);
    o.weightDecay = hp.value(keys::kOptWeightDecay, 0.0);
  } else if (name == "adam") {
    o.epsilon = hp.value(keys::kOptEpsilon, 1e-8);
    o.weightDecay = hp.value(keys::kOptWeightDecay, 0.0);
  }
  // The evaluation's weight EMA: EfficientNet's model_eval_ema_factor, else our key. Both warm
  // up as TensorFlow's ExponentialMovingAverage with num_updates (the EfficientNet reference):
  // at 0.9999 a fixed decay would leave a short run's average near the initial weights.
  o.emaDecay = hp.value(keys::kModelEvalEmaFactor, hp.value(kWeightEmaKey, 0.0));
  o.emaWarmup = o.emaDecay > 0;
  return o;
}

ModelRequest modelRequestOf(const PodPreset& preset, const Json& hp, Scale scale,
                            const precision::PrecisionPolicy& policy) {
  ModelRequest m;
  m.scale = scale;
  m.micro_batch = preset.micro_batch;
  m.optimizer = optimizerOf(hp);
  if (preset.max_grad_norm > 0) m.optimizer.maxGradNorm = preset.max_grad_norm;
  m.precision = policy;
  m.hyperparameters = hp;
  if (hp.contains(keys::kModelBnSpan)) {
    const std::int64_t span = hp[keys::kModelBnSpan].get<std::int64_t>();
    if (span >= preset.micro_batch && span % preset.micro_batch == 0)
      m.bn_span_replicas = static_cast<int>(span / preset.micro_batch);
  }
  return m;
}

Json runSettingKeys(const PodPreset& preset) {
  return Json{{kTrainSamplesKey, 0},
              {kEvalSamplesKey, 0},
              {kTargetKey, preset.target_accuracy.value_or(0.0)},
              {kAugmentFlipKey, false},
              {kAugmentPaddingKey, 0},
              {kEvalPeriodKey, 4},
              {kEvalOffsetKey, 0},
              {kMaxCorruptEvalKey, RunSettings{}.max_corrupt_eval_fraction},
              {kEvalIntervalKey, 0},
              {kBertLayersKey, 0},
              {kBertHiddenKey, 0},
              {kBertHeadsKey, 0},
              {kBertFfnKey, 0},
              {kBertVocabKey, 0},
              // Pipelining, as the flags of the same names (--ipus-per-replica, ...).
              {kIpusPerReplicaKey, 1},
              {kPipelineSplitsKey, ""},
              {kPipelineStageIpusKey, ""},
              {kPipelineScheduleKey, "grouped"},
              {kPipelineAutoKey, false},
              {kRecomputeKey, false}};
}

CliOptions pipelineFlagsOf(const CliOptions& cli, const Json& keys) {
  const CliOptions defaults;
  CliOptions o = cli;
  const auto take = [&](auto& field, const auto& fallback, const char* key) {
    using T = std::remove_reference_t<decltype(field)>;
    if (field == fallback && keys.contains(key)) field = keys[key].template get<T>();
  };
  take(o.ipus_per_replica, defaults.ipus_per_replica, kIpusPerReplicaKey);
  take(o.pipeline_splits, defaults.pipeline_splits, kPipelineSplitsKey);
  take(o.pipeline_stage_ipus, defaults.pipeline_stage_ipus, kPipelineStageIpusKey);
  take(o.pipeline_schedule, defaults.pipeline_schedule, kPipelineScheduleKey);
  take(o.pipeline_auto, defaults.pipeline_auto, kPipelineAutoKey);
  take(o.recompute, defaults.recompute, kRecomputeKey);
  return o;
}

namespace {

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

}  // namespace

void resolvePipeline(const CliOptions& cli, CliChoice& c,
                     const std::vector<std::string>* checkpoints) {
  c.pipeline = {};  // resolved again once --config's keys are known
  TrainerPipeline& p = c.pipeline;
  const int S = cli.ipus_per_replica;
  if (S < 1) throw Refusal(fmt::format("--ipus-per-replica must be >= 1, got {}", S));
  p.ipus = S;
  try {
    p.schedule = pipeline::parseSchedule(cli.pipeline_schedule);
  } catch (const std::exception& e) {
    throw Refusal(
        fmt::format("--pipeline-schedule {}: {} (valid: grouped, interleaved, "
                    "sequential)",
                    cli.pipeline_schedule, e.what()));
  }
  if (!cli.pipeline_splits.empty()) {
    p.splits = splitList(cli.pipeline_splits);
    for (const std::string& s : p.splits)
      if (s.empty())
        throw Refusal(
            fmt::format("--pipeline-splits {}: an empty split name; give op or layer "
                        "names separated by commas, e.g. stage2_unit1,stage4_unit1",
                        cli.pipeline_splits));
  }
  c.pipeline_auto = cli.pipeline_auto;
  if (cli.pipeline_auto && !p.splits.empty())
    throw Refusal(
        "--pipeline-auto searches the split points: give it or --pipeline-splits, "
        "not both");
  if (cli.pipeline_auto && S < 2)
    throw Refusal(
        "--pipeline-auto places stages on several IPUs: add --ipus-per-replica S "
        "(S >= 2)");
  if (!cli.pipeline_stage_ipus.empty()) {
    if (cli.pipeline_auto)
      throw Refusal("--pipeline-auto puts stage s on IPU s: drop --pipeline-stage-ipus");
    for (const std::string& t : splitList(cli.pipeline_stage_ipus)) {
      int ipu = -1;
      try {
        size_t used = 0;
        ipu = std::stoi(t, &used);
        if (used != t.size()) ipu = -1;
      } catch (const std::exception&) {
        ipu = -1;
      }
      if (ipu < 0 || ipu >= S)
        throw Refusal(
            fmt::format("--pipeline-stage-ipus {}: '{}' is not an IPU of the replica (0 to {} with "
                        "--ipus-per-replica {})",
                        cli.pipeline_stage_ipus, t, S - 1, S));
      p.stageIpu.push_back(ipu);
    }
    const size_t stages = p.splits.size() + 1;
    if (p.stageIpu.size() != stages)
      throw Refusal(fmt::format(
          "--pipeline-stage-ipus {}: {} IPU(s) for the {} stage(s) of --pipeline-splits {}; give "
          "one IPU per stage",
          cli.pipeline_stage_ipus, p.stageIpu.size(), stages, cli.pipeline_splits));
  }
  const int stages = static_cast<int>(p.splits.size()) + 1;
  if (!cli.pipeline_auto && p.stageIpu.empty() && !p.splits.empty() && !cli.recompute &&
      stages != S)
    throw Refusal(fmt::format(
        "--pipeline-splits {} makes {} stages for --ipus-per-replica {}: without "
        "--pipeline-stage-ipus stage s runs on IPU s, so give {} split point(s), or map the "
        "stages onto the IPUs (e.g. --pipeline-stage-ipus {})",
        cli.pipeline_splits, stages, S, S - 1, stages > S ? "0,1,...,0" : "0,1"));
  if (S > 1 && p.splits.empty() && !cli.pipeline_auto)
    throw Refusal(
        fmt::format("--ipus-per-replica {} needs the stages' split points: "
                    "--pipeline-splits a,b,... ({} names) or --pipeline-auto",
                    S, S - 1));
  p.recompute = cli.recompute;
  if (cli.recompute && p.splits.empty() && !cli.pipeline_auto && checkpoints) {
    if (checkpoints->empty())
      throw Refusal(
          "--recompute puts its checkpoints at the stage boundaries: give --pipeline-splits (on "
          "one IPU the splits are only checkpoints) or --pipeline-auto; only resnet50 has "
          "published checkpoints to default to");
    p.splits = *checkpoints;  // one IPU: the published checkpoints
  }
  // One IPU and only checkpoints: the replica is not pipelined (TrainerPipeline::pipelined).
  if (S == 1 && p.stageIpu.empty()) p.ipus = 1;
}

void checkPipelineAccumulation(const CliChoice& choice, int accumulation) {
  const TrainerPipeline& p = choice.pipeline;
  if (!p.pipelined()) return;
  const int stages = choice.pipeline_auto ? p.ipus : static_cast<int>(p.splits.size()) + 1;
  std::vector<int> stageIpu = p.stageIpu;
  for (int s = static_cast<int>(stageIpu.size()); s < stages; ++s) stageIpu.push_back(s);
  try {
    pipeline::checkSchedule(p.schedule, stages, stageIpu, accumulation);
  } catch (const std::exception& e) {
    throw Refusal(fmt::format("{} (gradient_accumulation_steps is {}: set it in --config)",
                              e.what(), accumulation));
  }
}

CliChoice validateCli(const CliOptions& cli) {
  CliChoice c;
  try {
    c.benchmark = parseBenchmark(cli.benchmark);
    c.division = parseDivision(cli.division);
    c.scale = parseScale(cli.scale);
  } catch (const std::invalid_argument& e) {
    throw Refusal(e.what());
  }
  const BenchmarkEntry& entry = findBenchmarkEntry(c.benchmark);
  if (!entry.implemented) {
    throw Refusal(fmt::format(
        "--benchmark {}: not implemented yet ({}). Available now: resnet50, efficientnet_b4.",
        cli.benchmark, entry.not_implemented));
  }
  if (c.scale == Scale::kFull && !entry.full_scale) {
    throw Refusal(fmt::format("--scale full is not implemented yet for {}: {}. Use --scale mini.",
                              cli.benchmark, entry.full_scale_missing));
  }
  if (cli.on_corrupt_image == "skip") {
    c.corrupt_policy = datasets::CorruptPolicy::kSkip;
  } else if (cli.on_corrupt_image != "fail") {
    throw Refusal(
        fmt::format("--on-corrupt-image {}: unknown (valid: fail, skip)", cli.on_corrupt_image));
  }
  if (cli.loader_threads < 0)
    throw Refusal(fmt::format("--loader-threads must be >= 0, got {}", cli.loader_threads));
  if (cli.runs < 1) throw Refusal(fmt::format("--runs must be >= 1, got {}", cli.runs));
  if (cli.threads < 1) throw Refusal(fmt::format("--threads must be >= 1, got {}", cli.threads));
  if (cli.max_epochs < 0) {
    throw Refusal(
        fmt::format("--max-epochs must be >= 1 (0: the preset's), got {}", cli.max_epochs));
  }
  try {
    c.engine = parseEngineMode(cli.engine);
  } catch (const std::exception& e) {
    throw Refusal(fmt::format("--engine {}: {}", cli.engine, e.what()));
  }
  resolvePipeline(cli, c);
  return c;
}

ResolvedPreset resolvePreset(const CliOptions& cli, const CliChoice& choice) {
  // The preset, and the pod it describes.
  const PodPreset* base = nullptr;
  try {
    base = &findPreset(choice.benchmark, cli.pod_size, choice.scale);
  } catch (const std::invalid_argument& e) {
    throw Refusal(e.what());
  }
  if (base->ipus_per_replica > 1) {
    throw Refusal(fmt::format(
        "--pod-size {}: the {} preset needs {} replica(s) x {} IPU(s) per replica, and its "
        "published placement is not run by run_benchmark yet (pipelining runs through "
        "--ipus-per-replica at mini scale); it will not be run on one IPU per replica instead "
        "(that would be a different configuration).",
        cli.pod_size, base->name(), base->replicas, base->ipus_per_replica));
  }

  // --config: the preset's keys and the run settings, unknown keys refused by name.
  ResolvedPreset r;
  r.preset = *base;
  Json settingsJson = runSettingKeys(r.preset);
  if (!cli.config.empty()) {
    try {
      const Json user = loadJsonFile(cli.config);
      Json defaults = presetConfigJson(r.preset);
      for (const auto& [k, v] : settingsJson.items()) defaults[k] = v;
      const Json merged = mergeConfig(defaults, user, cli.config);  // validates every key
      Json presetPart = Json::object();
      for (const auto& [k, v] : user.items()) {
        if (settingsJson.contains(k)) {
          settingsJson[k] = merged[k];
        } else {
          presetPart[k] = v;
        }
      }
      r.preset = applyConfig(r.preset, presetPart, cli.config);
    } catch (const ConfigError& e) {
      throw Refusal(e.what());
    }
    if (choice.scale != Scale::kMini) {
      for (const char* k :
           {kTrainSamplesKey, kEvalSamplesKey, kTargetKey, kAugmentFlipKey, kAugmentPaddingKey}) {
        if (settingsJson[k] != runSettingKeys(*base)[k]) {
          throw Refusal(fmt::format("{}: key '{}' applies to --scale mini only", cli.config, k));
        }
      }
    }
  }
  RunSettings& s = r.settings;
  s.train_samples = settingsJson[kTrainSamplesKey].get<std::int64_t>();
  s.eval_samples = settingsJson[kEvalSamplesKey].get<std::int64_t>();
  s.target_accuracy = settingsJson[kTargetKey].get<double>();
  s.augment_flip = settingsJson[kAugmentFlipKey].get<bool>();
  s.augment_padding = settingsJson[kAugmentPaddingKey].get<int>();
  s.eval_period = settingsJson[kEvalPeriodKey].get<int>();
  s.eval_offset = settingsJson[kEvalOffsetKey].get<int>();
  s.max_corrupt_eval_fraction = settingsJson[kMaxCorruptEvalKey].get<double>();
  s.eval_interval_samples = settingsJson[kEvalIntervalKey].get<std::int64_t>();
  s.bert_layers = settingsJson[kBertLayersKey].get<int>();
  s.bert_hidden = settingsJson[kBertHiddenKey].get<int>();
  s.bert_heads = settingsJson[kBertHeadsKey].get<int>();
  s.bert_ffn = settingsJson[kBertFfnKey].get<int>();
  s.bert_vocab = settingsJson[kBertVocabKey].get<int>();
  for (const char* k : {kIpusPerReplicaKey, kPipelineSplitsKey, kPipelineStageIpusKey,
                        kPipelineScheduleKey, kPipelineAutoKey, kRecomputeKey})
    r.pipeline_keys[k] = settingsJson[k];
  r.precision = resolvePrecision(cli, r.preset);
  return r;
}

precision::PrecisionPolicy resolvePrecision(const CliOptions& cli, PodPreset& preset) {
  // --precision / --loss-scaling override the preset's (closed presets carry the published
  // settings: ResNet-50 FP16.16 with static loss scale 128). --precision alone brings its
  // policy's own loss scaling (16.16: static 128, fp16: dynamic, fp32/bf16: none).
  using M = precision::LossScalingMode;
  const auto modeName = [](M m) {
    return m == M::None ? "none" : m == M::Static ? "static" : "dynamic";
  };
  if (!cli.precision.empty()) {
    auto it = std::find_if(kPrecisionNames.begin(), kPrecisionNames.end(),
                           [&](const auto& n) { return n.second == cli.precision; });
    if (it == kPrecisionNames.end())
      throw Refusal(fmt::format("--precision {}: unknown (valid: fp32, fp16, bf16, 16.16, 16.32)",
                                cli.precision));
    preset.precision = it->first;
    if (cli.loss_scaling.empty()) {
      const auto& d = precision::PrecisionPolicy::parse(cli.precision).lossScaling;
      preset.loss_scaling = {modeName(d.mode), d.scale};
    }
  }
  if (!cli.loss_scaling.empty()) {
    precision::LossScalingConfig c;
    try {
      c = precision::parseLossScaling(cli.loss_scaling);
    } catch (const std::invalid_argument& e) {
      throw Refusal(fmt::format("--loss-scaling: {}", e.what()));
    }
    preset.loss_scaling = {modeName(c.mode), c.scale};
  }
  precision::PrecisionPolicy p = precisionPolicyOf(preset);
  if (!p.isMixed() && p.lossScaling.mode != M::None && p.preset == "fp32")
    throw Refusal(
        fmt::format("--loss-scaling {}: loss scaling is for 16-bit compute; with "
                    "precision FP32 use none (or pick --precision fp16 / 16.16 / 16.32)",
                    cli.loss_scaling));
  return p;
}

ResolvedData resolveData(const CliOptions& cli, Scale scale, datasets::CorruptPolicy policy) {
  // At full scale the folders are scanned now: the logged sample counts are the folders' own,
  // and a broken layout is refused before anything is written.
  ResolvedData d;
  if (parseBenchmark(cli.benchmark) == Benchmark::kBertLarge) {
    d.dir = cli.data_dir;  // planned with the model's text shape (planBertData)
    return d;
  }
  d.dir = !cli.data_dir.empty()   ? fs::path(cli.data_dir)
          : scale == Scale::kMini ? fs::path(datasets::kDefaultFashionMnistDir)
                                  : fs::path();
  if (scale == Scale::kFull) {
    if (d.dir.empty())
      throw Refusal(
          "--scale full needs --data-dir: the ImageNet folder with train/<synset>/*.JPEG and "
          "val/<synset>/*.JPEG (the standard layout; val sorted into synset folders)");
    const ImageNetIndex index = scanImageNet(d.dir, policy, 1000);
    d.imagenet_train = index.train;
    d.imagenet_val = index.val;
  } else {
    std::string missing;
    if (fashionMnistFiles(d.dir, &missing).empty()) {
      throw Refusal(fmt::format(
          "--data-dir {}: Fashion-MNIST not found ({} is missing, nor its uncompressed form); "
          "install Debian's dataset-fashion-mnist package (files under {}) or pass --data-dir",
          d.dir.string(), missing, datasets::kDefaultFashionMnistDir));
    }
  }
  return d;
}

Json resolveHyperparameters(const CliChoice& choice, const ResolvedPreset& r,
                            const ResolvedData& data) {
  // What the log will say, checked against the division's rules.
  const RunSettings& s = r.settings;
  Json hp = mlperfHyperparameters(r.preset);
  if (s.train_samples > 0) {
    hp[keys::kTrainSamples] = std::min<std::int64_t>(s.train_samples, r.preset.train_samples);
  }
  if (s.eval_samples > 0) {
    hp[keys::kEvalSamples] = std::min<std::int64_t>(s.eval_samples, r.preset.eval_samples);
  }
  if (data.imagenet_train) {  // what this data set holds (ImageNet: 1,281,167 and 50,000)
    hp[keys::kTrainSamples] = static_cast<std::int64_t>(data.imagenet_train->samples.size());
    hp[keys::kEvalSamples] = static_cast<std::int64_t>(data.imagenet_val->samples.size());
  }
  std::vector<Violation> violations =
      validate(choice.division, choice.benchmark, hp, findBenchmarkEntry(choice.benchmark).variant,
               choice.scale);
  for (Violation& v : validateSettings(choice.division, choice.benchmark, choice.scale, s))
    violations.push_back(std::move(v));
  if (hp.contains(keys::kBenchmarkScale) && hp[keys::kBenchmarkScale] != toString(choice.scale)) {
    // The rules pick the recipe a log must follow from this key: it must name the run's scale.
    violations.push_back({keys::kBenchmarkScale, hp[keys::kBenchmarkScale].dump(),
                          fmt::format("\"{}\" (the run's --scale)", toString(choice.scale)),
                          "run_benchmark"});
  }
  if (hp.value(keys::kOptName, "") == "lamb" &&
      hp.value(keys::kNumWarmupSteps, Json()) != hp.value(keys::kOptLrWarmupSteps, Json())) {
    violations.push_back({keys::kNumWarmupSteps, hp.value(keys::kNumWarmupSteps, Json()).dump(),
                          fmt::format("equal to opt_learning_rate_warmup_steps ({}): both name "
                                      "the one warm-up of the schedule",
                                      hp.value(keys::kOptLrWarmupSteps, Json()).dump()),
                          "run_benchmark"});
  }
  if (!violations.empty()) {
    throw Refusal(fmt::format("refused: the {} division does not allow this configuration{}",
                              toString(choice.division), joinViolations(violations)));
  }
  if (choice.benchmark == Benchmark::kEfficientNetB4) {
    if (const std::string why = efficientNetUnsupported(hp); !why.empty())
      throw Refusal(fmt::format("--benchmark efficientnet_b4: {}", why));
  }
  return hp;
}

ModelRequest resolveModel(const CliOptions& cli, Scale scale, const ResolvedPreset& r,
                          const Json& hp) {
  const PodPreset& preset = r.preset;
  ModelRequest m = modelRequestOf(preset, hp, scale, r.precision);
  if (cli.shard_optimizer_state && !optimizerShardable(m.optimizer.kind)) {
    throw Refusal(fmt::format(
        "--shard-optimizer-state with opt_name \"{}\": its trust ratio needs the norm of every "
        "whole weight and gradient, which a replica holding 1/R of them does not have; drop "
        "--shard-optimizer-state",
        m.optimizer.kind));
  }
  // Batch norm over model_bn_span samples: one replica's micro-batch, or a group of
  // model_bn_span / micro-batch consecutive replicas (Graphcore's bn_span), whose statistics
  // are summed across the group (ipu::Builder::batchNormTrainAcrossReplicas).
  if (hp.contains(keys::kModelBnSpan)) {
    const std::int64_t span = hp[keys::kModelBnSpan].get<std::int64_t>();
    if (span < preset.micro_batch || span % preset.micro_batch != 0 ||
        preset.replicas % (span / preset.micro_batch) != 0) {
      throw Refusal(fmt::format(
          "model_bn_span {}: batch-norm statistics span whole replicas, so model_bn_span must "
          "be the micro-batch ({}) times a number of replicas that divides the {} replicas of "
          "this pod (e.g. {} or {})",
          span, preset.micro_batch, preset.replicas, preset.micro_batch,
          preset.micro_batch * preset.replicas));
    }
  }
  return m;
}

ResolvedSchedule resolveSchedule(Benchmark benchmark, const CliOptions& cli,
                                 const PodPreset& preset, const Json& hp,
                                 const RunSettings& settings) {
  ResolvedSchedule r;
  const std::string opt = hp.value(keys::kOptName, "");
  const int epochs = std::max(1, preset.epochs);
  LrSchedule& lr = r.lr;
  if (opt == "lars") {
    lr.base = hp.value(keys::kLarsOptBaseLearningRate, 0.1);
    lr.end = hp.value(keys::kLarsOptEndLearningRate, 0.0001);
    lr.power = hp.value(keys::kLarsOptLrDecayPolyPower, 2.0);
    lr.warmup = hp.value(keys::kLarsOptLrWarmupEpochs, 0.0);
    lr.decay = hp.value(keys::kLarsOptLrDecaySteps, static_cast<double>(epochs));
  } else if (opt == "sgd") {
    lr.base = hp.value(keys::kSgdOptBaseLearningRate, 0.1);
    lr.end = hp.value(keys::kSgdOptEndLearningRate, 0.0001);
    lr.power = hp.value(keys::kSgdOptLrDecayPolyPower, 2.0);
    lr.warmup = hp.value(keys::kOptLrWarmupEpochs, 0.0);
    lr.decay = hp.value(keys::kSgdOptLrDecaySteps, static_cast<double>(epochs));
  } else if (opt == "lamb") {
    // BERT: warm-up and decay in steps of the global batch, counted here in samples; decay to
    // 0 over the training steps, from step 0 (the reference's form).
    const double gbs = static_cast<double>(preset.global_batch);
    lr.unit = ProgressUnit::kSamples;
    lr.decay_from_start = true;
    lr.base = hp.value(keys::kOptBaseLearningRate, 0.0);
    lr.end = 0;
    lr.power = hp.value(keys::kOptLambLrDecayPolyPower, 1.0);
    lr.warmup = hp.value(keys::kOptLrWarmupSteps, 0.0) * gbs;
    lr.warmup_start = hp.value(keys::kStartWarmupStep, 0.0) * gbs;
    lr.decay = hp.value(keys::kOptLrTrainingSteps, 1.0) * gbs;
  } else {
    // RMSProp / Adam: warm-up in epochs, then exponential decay by opt_learning_rate_decay_factor
    // every opt_learning_rate_decay_epochs (EfficientNet's recipe); constant without them.
    lr.base = hp.value(keys::kOptBaseLearningRate, 0.0);
    lr.warmup = hp.value(keys::kOptLrWarmupEpochs, 0.0);
    lr.decay_factor = hp.value(keys::kOptLrDecayFactor, 1.0);
    lr.decay_every = hp.value(keys::kOptLrDecayEpochs, 1.0);
  }
  r.cadence = evalCadenceOf(benchmark, settings, preset.global_batch, preset.scale);
  r.max_epochs = cli.max_epochs > 0 ? cli.max_epochs : epochs;
  // A samples cadence's budget: the preset's epochs of its training samples; BERT's: the
  // schedule's training steps (the learning rate reaches 0 there).
  r.max_samples = static_cast<std::int64_t>(r.max_epochs) * preset.train_samples;
  if (benchmark == Benchmark::kBertLarge) r.max_samples = static_cast<std::int64_t>(lr.decay);
  return r;
}

EvalCadence evalCadenceOf(Benchmark benchmark, const RunSettings& settings,
                          std::int64_t globalBatch, Scale scale) {
  EvalCadence c;
  if (benchmark == Benchmark::kBertLarge) {
    c.unit = ProgressUnit::kSamples;
    c.every_samples = scale == Scale::kFull ? bertEvalIntervalSamples(globalBatch)
                      : settings.eval_interval_samples > 0
                          ? settings.eval_interval_samples
                          : bertMiniEvalIntervalSamples(globalBatch);
    return c;
  }
  c.period = settings.eval_period;
  c.offset = settings.eval_offset;
  return c;
}

BenchmarkPlan makePlan(const CliOptions& cli) {
  BenchmarkPlan plan;
  plan.cli = cli;
  CliChoice choice = validateCli(cli);
  plan.benchmark = choice.benchmark;
  plan.division = choice.division;
  plan.scale = choice.scale;
  ResolvedPreset preset = resolvePreset(cli, choice);
  // --config's keys too; ResNet-50's --recompute defaults to Graphcore's six checkpoints.
  const std::vector<std::string> checkpoints = choice.benchmark == Benchmark::kResNet50
                                                   ? models::publishedRecomputationCheckpoints()
                                                   : std::vector<std::string>{};
  resolvePipeline(pipelineFlagsOf(cli, preset.pipeline_keys), choice, &checkpoints);
  plan.precision = preset.precision;
  ResolvedData data = resolveData(cli, choice.scale, choice.corrupt_policy);
  Json hp = resolveHyperparameters(choice, preset, data);
  RunPlan& r = plan.run;
  r.model = resolveModel(cli, choice.scale, preset, hp);
  if (choice.benchmark == Benchmark::kBertLarge) {
    // The data must have been made for the model: checked, and its sample counts logged.
    BertDataPlan bp;
    try {
      bp = planBertData(cli.data_dir, choice.scale, hp, preset.settings.train_samples,
                        preset.settings.eval_samples, preset.settings.bert_vocab);
    } catch (const std::exception& e) {
      throw Refusal(e.what());
    }
    r.model.text = bp.text;
    const RunSettings& rs = preset.settings;
    r.model.text.layers = rs.bert_layers;
    r.model.text.hidden = rs.bert_hidden;
    r.model.text.heads = rs.bert_heads;
    r.model.text.ffn = rs.bert_ffn;
    data.dir = bp.dir;
    hp[keys::kTrainSamples] = bp.train_samples;
    hp[keys::kEvalSamples] = bp.eval_samples;
    const std::int64_t gbs = preset.preset.global_batch;
    hp["ipu_eval_interval_samples"] =
        evalCadenceOf(choice.benchmark, rs, gbs, choice.scale).every_samples;
    hp["ipu_eval_interval_rule"] =
        rs.eval_interval_samples > 0 ? std::string("open: mini_eval_interval_samples")
        : choice.scale == Scale::kMini
            ? fmt::format(
                  "mini: floor(0.05 x (230.23 x {} + 3,000,000) / {} / {}) x {} samples "
                  "(MLPerf's rule scaled down)",
                  gbs, kBertMiniEvalScale, gbs, gbs)
            : fmt::format("floor(0.05 x (230.23 x {} + 3,000,000), 25,000) samples", gbs);
    hp["ipu_sample_unit"] = "one packed row of up to 3 sequences";
    if (choice.scale == Scale::kMini) {  // the encoder's shape: the open mini may change it
      models::BertConfig c;
      try {
        c = bertMiniConfig(r.model.text);
      } catch (const std::invalid_argument& e) {
        throw Refusal(fmt::format("{}: {}", cli.config, e.what()));
      }
      hp["ipu_bert_mini_model"] = fmt::format("{} layers x {}, {} heads, FFN {}, vocabulary {}",
                                              c.layers, c.hidden, c.heads, c.ffn, c.vocab);
    }
    hp["ipu_masked_lm_accuracy"] =
        choice.division == Division::kOpen ? "per sequence" : "per token";
  }
  const ResolvedSchedule schedule =
      resolveSchedule(choice.benchmark, cli, preset.preset, hp, preset.settings);

  // The results package: names checked now, folders created only after every check.
  plan.layout = {cli.results_dir, cli.org,
                 cli.system_name.empty() ? defaultSystemId(cli.pod_size) : cli.system_name};
  try {
    (void)benchmarkDir(plan.layout, plan.benchmark);
    (void)systemDescriptionPath(plan.layout);
  } catch (const std::invalid_argument& e) {
    throw Refusal(e.what());
  }

  r.entry = &findBenchmarkEntry(choice.benchmark);
  r.preset = preset.preset;
  r.settings = preset.settings;
  r.hyperparameters = hp;
  r.submission = {cli.org, plan.layout.system, toString(plan.division), "research",
                  mlperfBenchmarkName(plan.benchmark)};
  r.data_dir = data.dir;
  r.imagenet_train = data.imagenet_train;
  r.imagenet_val = data.imagenet_val;
  r.corrupt_policy = choice.corrupt_policy;
  r.loader_threads = cli.loader_threads > 0 ? cli.loader_threads : cli.threads;
  r.trainer.batch = preset.preset.micro_batch;
  r.trainer.mode = choice.engine;
  r.trainer.checkMemory = !cli.skip_memory_check;
  r.trainer.augment.flip = r.settings.augment_flip;
  r.trainer.augment.padding = r.settings.augment_padding;
  r.trainer.replicas = preset.preset.replicas;
  r.trainer.accumulation = preset.preset.gradient_accumulation;
  r.trainer.shardOptimizerState = cli.shard_optimizer_state;
  r.trainer.threadsPerReplica = cli.threads;
  checkPipelineAccumulation(choice, r.trainer.accumulation);
  r.trainer.pipeline = choice.pipeline;
  plan.pipeline_auto = choice.pipeline_auto;
  r.lr = schedule.lr;
  r.cadence = schedule.cadence;
  r.max_epochs = schedule.max_epochs;
  r.max_samples = schedule.max_samples;
  plan.fit_check = r.trainer;
  // The fused engine runs whole ops: the IPU's tile plan (1,472 tiles of mappings, vertices and
  // exchanges per program) is for the fit check only. Kept for the run it held most of the
  // EfficientNet mini run's 5.9 GB peak.
  if (r.trainer.mode == EngineMode::Fused) {
    r.trainer.target = Target::small(16, std::int64_t{1} << 36);
    r.trainer.checkMemory = false;  // checked for the IPU by preflightCompile
  }

  // Distinct integer seeds, one per run (the seed checker wants them distinct in a package).
  for (int i = 0; i < cli.runs; ++i) plan.seeds.push_back(cli.seed + static_cast<std::uint64_t>(i));
  return plan;
}

// The report pages of this plan's programs: <dir>/<benchmark>_<scale>_pod<N>_<program>.html.
static ProgramReportSink reportSinkOf(BenchmarkPlan& plan) {
  const std::string stem =
      fmt::format("{}_{}_pod{}", toString(plan.benchmark), plan.cli.scale, plan.cli.pod_size);
  return reportWriter(plan.cli.report_dir, stem, &plan.report_pages);
}

double preflightCompile(BenchmarkPlan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ModelInstance model = plan.run.entry->build(plan.run.model);
    plan.model_description = model.description;
    if (plan.pipeline_auto && plan.fit_check.pipeline.splits.empty()) {
      // The split points that fit every IPU with the smallest slowest stage; the runs use them.
      const cost::AutoSplit a =
          cost::autoSplit(model.train.graph, plan.fit_check.target, plan.fit_check.pipeline.ipus,
                          plan.fit_check.pipelineOptions());
      plan.fit_check.pipeline.splits = a.splits;
      plan.run.trainer.pipeline.splits = a.splits;
    }
    TrainerPrograms programs = compileTrainerPrograms(model.train, model.eval, plan.fit_check);
    const std::shared_ptr<const Executable> eval = std::move(programs.eval);
    if (programs.pipelined) {
      const pipeline::PipelinedExecutable& pe = *programs.pipelined;
      const cost::PipelineStepCost pc = cost::estimatePipelineStep(pe);
      plan.modeled_step_seconds = pc.seconds;
      plan.modeled_eval_seconds = cost::estimateStep(*eval).seconds;
      plan.pipeline_description = pe.describe();
      if (!plan.cli.report_dir.empty() && plan.run.rank == 0) {
        const ProgramReportSink write = reportSinkOf(plan);
        for (const pipeline::IpuProgram& ipu : pe.programs) {
          const nlohmann::json view =
              write(fmt::format("training_ipu{}", ipu.ipu), *ipu.exe, false,
                    fmt::format("{}: training step, IPU {} of the pipeline (stages {})",
                                plan.run.preset.name(), ipu.ipu, fmt::join(ipu.stages, ", ")),
                    {});
          if (ipu.ipu == 0) plan.report_train_view = view;
        }
        write("evaluation", *eval, false, plan.run.preset.name() + ": evaluation batch", {});
      }
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const std::shared_ptr<const Executable> train = std::move(programs.train);
    if (plan.fit_check.replicas > 1) {
      // Each emulated IPU holds its own tensors: refuse, before anything is written, replicas
      // whose copies this host (this process's share under mpirun) cannot hold. One replica's
      // engine is built to measure it, not all of them (the run builds those).
      replication::ReplicaGroupOptions go;
      go.mode = plan.fit_check.mode;
      go.replicas = plan.fit_check.replicas;
      go.link = plan.fit_check.link;
      replication::ReplicaGroup::checkHostMemory(train, go);
    }
    // The programs exactly as compiled (cost::ExchangeModel::AsCompiled, the default).
    plan.modeled_step_seconds = cost::estimateStep(*train).seconds;
    plan.modeled_eval_seconds = cost::estimateStep(*eval).seconds;
    if (!plan.cli.report_dir.empty() && plan.run.rank == 0) {  // one writer under mpirun
      const ProgramReportSink write = reportSinkOf(plan);
      // Priced as plan.modeled_step_seconds is (default options: the programs as compiled).
      plan.report_train_view =
          write("training", *train, false, plan.run.preset.name() + ": training step", {});
      write("evaluation", *eval, false, plan.run.preset.name() + ": evaluation batch", {});
    }
  } catch (const pipeline::PipelineError& e) {
    throw Refusal(fmt::format("the pipeline placement was refused before running: {}", e.what()));
  } catch (const GraphError& e) {
    if (!plan.fit_check.pipeline.recompute) throw;
    throw Refusal(fmt::format("--recompute: the checkpoints were refused: {}", e.what()));
  } catch (const CompileError& e) {
    std::string report;
    if (!plan.cli.report_dir.empty() && plan.run.rank == 0 && e.partial()) {
      reportSinkOf(plan)("not_fitting", *e.partial(), true,
                         plan.run.preset.name() + ": the program that does not fit", {});
      report = fmt::format("\nreport: {}", plan.report_pages.back().string());
    }
    throw Refusal(
        fmt::format(
            "the configuration does not fit in IPU tile memory (micro-batch {}), so it was not "
            "run:\n"
            "{}\n(--skip-memory-check runs it anyway on the emulator, for backend development){}",
            plan.run.trainer.batch, e.what(), report),
        kExitDoesNotFit);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ipu::harness
