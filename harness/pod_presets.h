// Pod presets as data: for each benchmark x pod size x scale, how the pod is split into replicas,
// the batch arithmetic, the optimizer and its MLPerf-named hyperparameters, and the precision.
// Full scale reproduces the published Graphcore MLPerf Training v1.1 configurations
// (docs/IPU_FACTS.md and the raw logs); rows that were never published say so in `source`.
// Mini scale is a CPU-friendly shape of the same code (Fashion-MNIST, tiny models).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/benchmark.h"
#include "harness/mllog.h"  // Json

namespace ipu::harness {

// How the IPUs of a pod are wired (docs/IPU_FACTS.md, "Pods").
enum class IpuLinkTopology {
  kNone,     // a single IPU: no IPU-Links used
  kRing,     // IPU-Links around one IPU-M2000 or a POD16 (4 stacked M2000s)
  kTorus2D,  // IPU-Links across a POD64 rack, 2D torus
};
std::string toString(IpuLinkTopology topology);

struct PodTopology {
  int pod_size = 0;  // IPUs in the pod
  std::string name;  // "IPU-POD16"
  int m2000s = 0;    // IPU-M2000 machines, 4 IPUs each (POD1 uses 1 of 4)
  int pod64s = 0;    // POD64 racks (0 below 64 IPUs)
  IpuLinkTopology ipu_links = IpuLinkTopology::kNone;  // inside one POD64 (or smaller pod)
  bool gw_links = false;  // GW-Links (100 GbE) join the POD64s (POD128, POD256)
  int hosts_min = 1;      // host servers used for this size in MLPerf v1.1
  int hosts_max = 1;
  std::string description() const;  // one line, e.g. for the system description
};

const std::vector<int>& validPodSizes();  // 1, 4, 16, 64, 128, 256
// Throws std::invalid_argument naming the size and listing the valid ones.
PodTopology podTopology(int podSize);

struct LossScaling {
  std::string mode;    // "static" | "dynamic" | "none"
  double scale = 1.0;  // the static scale, or the initial one for "dynamic"
};

struct PodPreset {
  Benchmark benchmark = Benchmark::kResNet50;
  int pod_size = 1;
  Scale scale = Scale::kFull;

  int ipus = 1;              // = replicas x ipus_per_replica = pod_size
  int replicas = 1;          // data-parallel replicas
  int ipus_per_replica = 1;  // pipeline stages (BERT-Large, EfficientNet-B4: 4 or 8)
  int m2000s = 1;            // IPU-M2000 count (4 IPUs each)
  int hosts = 1;             // host servers driving the pod
  int micro_batch = 1;       // samples per replica per micro-step
  int gradient_accumulation = 1;
  std::int64_t global_batch = 1;  // = replicas x gradient_accumulation x micro_batch x below
  // Samples a micro-batch row stands for: 1, or BERT-Large's packs counted as Graphcore's
  // v1.1 runs count them (2 sequences on average in a pack of up to 3: global_batch_size 3,072
  // = 4 replicas x 192 x 2 packs x 2 on POD16).
  int samples_per_row = 1;
  // Gradient clipping to this global norm before the update (0: the optimizer's default; BERT:
  // Graphcore's 1.0, 100 on POD128 closed).
  double max_grad_norm = 0;
  // Where a pipelined model's parts sit (IPU, stage), as the published configuration places
  // them; empty for one IPU per replica. Recorded for the pipelining work and the reports.
  std::string pipeline;

  // Optimizer name ("lars", "sgd", "lamb", "rmsprop") and the hyperparameters under their
  // MLPerf log keys, in the order they are logged: opt_name first, then the optimizer's keys and
  // model_bn_span / max_sequence_length. global_batch_size and gradient_accumulation_steps are
  // not in here: they derive from the fields above (mlperfHyperparameters()).
  std::string optimizer;
  Json hyperparameters = Json::object();

  std::string precision;  // "FP16.16" (fp16 compute, fp16 partials) | "FP16.32" | "FP32"
  LossScaling loss_scaling;

  std::string dataset;             // "imagenet", "fashion_mnist", "bert_wikipedia", "tiny_text"
  std::string model_variant;       // "resnet50", "resnet_mini", ... (closed needs the reference)
  std::int64_t train_samples = 0;  // 0: counted by the training loop (BERT)
  std::int64_t eval_samples = 0;
  std::optional<double> target_accuracy;  // quality target; none: run `epochs`
  int epochs = 0;  // epochs to schedule (ResNet: = LR decay epochs); 0 for BERT (samples)

  // Pipelined presets: the first block of each stage after the first (Graphcore's split points,
  // EfficientNet-B4: block2b, block4b, block6c); empty for one IPU per replica.
  std::vector<std::string> pipeline_splits;

  bool published = false;  // exactly a published Graphcore configuration
  std::string source;      // where the numbers come from, or why they were chosen

  std::string name() const;  // "resnet50/full/POD16"
};

// Every preset row, validated on first use (batch identity, ipus = pod size...).
const std::vector<PodPreset>& allPresets();

// Throws std::invalid_argument naming the request and listing the pod sizes that exist for the
// benchmark and scale.
const PodPreset& findPreset(Benchmark benchmark, int podSize, Scale scale);
const PodPreset& findPreset(std::string_view benchmark, int podSize, std::string_view scale);
std::vector<int> presetPodSizes(Benchmark benchmark, Scale scale);

// The hyperparameters to log (and to check against the division rules): global_batch_size,
// gradient_accumulation_steps, then the optimizer's keys, then train_samples / eval_samples
// where the preset knows them. BERT's epsilon is emitted under both
// "opt_lamb_epsilon" (rulesets >= 2.0) and "opt_epsilon" (1.1.0).
Json mlperfHyperparameters(const PodPreset& preset);

// Graphcore's EfficientNet-B4 G16 configuration (open division) for a full-scale pod size: the
// B4 preset's pod with micro-batch 5, accumulation 40 and splits [block2c, block4c, block6a],
// model_variant g16. std::invalid_argument as findPreset.
PodPreset efficientNetG16Preset(int podSize);

// The keys a user --config file may override: micro_batch_size, gradient_accumulation_steps,
// precision, loss_scaling {mode, scale}, and every optimizer hyperparameter.
Json presetConfigJson(const PodPreset& preset);
// The preset with a user configuration applied (mergeConfig rules: unknown keys and wrong types
// throw ConfigError naming `sourceName` and the key); the global batch is recomputed.
PodPreset applyConfig(const PodPreset& preset, const Json& user, std::string_view sourceName);

}  // namespace ipu::harness
