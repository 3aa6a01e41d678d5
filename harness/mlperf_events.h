// The MLPerf event sequence as library calls, so the training loop and the compliance test log
// the same thing. Order of a compliant log (what the official checker accepts):
//
//   cache_clear, init_start, submission_* (logSubmissionHeader), seed, hyperparameters
//   (logHyperparameters), weights_initialization per tensor (logWeightsInitialization),
//   init_stop, run_start, { block_start, epoch_start/stop..., block_stop, eval_start,
//   eval_stop, eval_accuracy }..., run_stop {status}.
//
// Every helper takes the caller's source location, so metadata.file/lineno name the call site
// in the training loop, not this file.
#pragma once

#include <source_location>
#include <string>
#include <vector>

#include "harness/mllog.h"

namespace ipu::harness {

struct SubmissionInfo {
  std::string org;        // submission_org, e.g. "ipu_mlperf"
  std::string platform;   // submission_platform: the system id, e.g. "ipu-pod16-emulated"
  std::string division;   // "closed" | "open"
  std::string status;     // "research" (an emulator), or "onprem" | "cloud" | "preview"
  std::string benchmark;  // "resnet" | "bert" | "efficientnet_b4" (mlperfBenchmarkName())
};

using Where = std::source_location;

// submission_benchmark, _division, _org, _status, _platform (POINT_IN_TIME each).
void logSubmissionHeader(MlLogger& logger, const SubmissionInfo& info,
                         Where where = Where::current());
// One POINT_IN_TIME event per key of `hyperparameters` (a JSON object), in its order.
void logHyperparameters(MlLogger& logger, const Json& hyperparameters,
                        Where where = Where::current());
// One weights_initialization event per tensor, metadata {"tensor": name}.
void logWeightsInitialization(MlLogger& logger, const std::vector<std::string>& tensorNames,
                              Where where = Where::current());

void logCacheClear(MlLogger& logger, Where where = Where::current());
void logInitStart(MlLogger& logger, Where where = Where::current());
void logInitStop(MlLogger& logger, Where where = Where::current());
void logRunStart(MlLogger& logger, Where where = Where::current());
// run_stop with metadata {"epoch_num": lastEpoch, "status": "success"|"aborted"}.
void logRunStop(MlLogger& logger, bool success, int lastEpoch, Where where = Where::current());
void logBlockStart(MlLogger& logger, int firstEpoch, int epochCount,
                   Where where = Where::current());
void logBlockStop(MlLogger& logger, int firstEpoch, Where where = Where::current());
void logEpochStart(MlLogger& logger, int epoch, Where where = Where::current());
void logEpochStop(MlLogger& logger, int epoch, Where where = Where::current());
void logEvalStart(MlLogger& logger, int epoch, Where where = Where::current());
void logEvalStop(MlLogger& logger, int epoch, Where where = Where::current());
void logEvalAccuracy(MlLogger& logger, double accuracy, int epoch, Where where = Where::current());

// The 161 canonical ResNet-50 tensor names the 1.1.0 ruleset requires in
// weights_initialization (conv0_weight, bn0_gamma, bn0_beta, stage{1..4}_unit{1..n}_
// {conv1,conv2,conv3,bn1..3,conv1sc,bnsc}..., fc1_weight, fc1_bias), in model order.
const std::vector<std::string>& resnet50CanonicalTensorNames();
// The 398 canonical BERT-Large names of the 1.1.0 ruleset (bert/embeddings/...,
// bert/encoder/layer_0..23/..., bert/pooler/..., cls/...), in model order.
const std::vector<std::string>& bertLargeCanonicalTensorNames();

// Training blocks of the ResNet closed schedule: epochs are numbered from 1 and evaluated every
// 4 epochs with an offset of 0-3 (epoch e is evaluated when e % 4 == offset, and always the
// last epoch); each block ends at an evaluation. Example: 38 epochs, offset 2 -> [1,2], [3..6],
// ..., [35..38]. Throws std::invalid_argument for totalEpochs < 1 or offset outside 0-3.
struct EpochBlock {
  int first_epoch = 1;
  int epoch_count = 1;
  int last_epoch() const { return first_epoch + epoch_count - 1; }
};
std::vector<EpochBlock> resnetEvalBlocks(int totalEpochs, int offset);

}  // namespace ipu::harness
