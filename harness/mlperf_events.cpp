#include "harness/mlperf_events.h"

#include <fmt/format.h>

#include <stdexcept>

namespace ipu::harness {

void logSubmissionHeader(MlLogger& logger, const SubmissionInfo& info, Where where) {
  logger.event(keys::kSubmissionBenchmark, info.benchmark, Json::object(), where);
  logger.event(keys::kSubmissionDivision, info.division, Json::object(), where);
  logger.event(keys::kSubmissionOrg, info.org, Json::object(), where);
  logger.event(keys::kSubmissionStatus, info.status, Json::object(), where);
  logger.event(keys::kSubmissionPlatform, info.platform, Json::object(), where);
}

void logHyperparameters(MlLogger& logger, const Json& hyperparameters, Where where) {
  if (!hyperparameters.is_object()) {
    throw std::invalid_argument(
        fmt::format("logHyperparameters: expected a JSON object, got {}", hyperparameters.dump()));
  }
  for (const auto& [key, value] : hyperparameters.items()) {
    logger.event(key, value, Json::object(), where);
  }
}

void logWeightsInitialization(MlLogger& logger, const std::vector<std::string>& tensorNames,
                              Where where) {
  for (const std::string& name : tensorNames) {
    logger.event(keys::kWeightsInitialization, nullptr, Json{{meta::kTensor, name}}, where);
  }
}

void logCacheClear(MlLogger& logger, Where where) {
  logger.event(keys::kCacheClear, true, Json::object(), where);
}
void logInitStart(MlLogger& logger, Where where) {
  logger.start(keys::kInitStart, nullptr, Json::object(), where);
}
void logInitStop(MlLogger& logger, Where where) {
  logger.end(keys::kInitStop, nullptr, Json::object(), where);
}
void logRunStart(MlLogger& logger, Where where) {
  logger.start(keys::kRunStart, nullptr, Json::object(), where);
}
void logRunStop(MlLogger& logger, bool success, int lastEpoch, Where where) {
  logger.end(keys::kRunStop, nullptr,
             Json{{meta::kEpochNum, lastEpoch},
                  {meta::kStatus, success ? meta::kStatusSuccess : meta::kStatusAborted}},
             where);
}
void logBlockStart(MlLogger& logger, int firstEpoch, int epochCount, Where where) {
  logger.start(keys::kBlockStart, nullptr,
               Json{{meta::kFirstEpochNum, firstEpoch}, {meta::kEpochCount, epochCount}}, where);
}
void logBlockStop(MlLogger& logger, int firstEpoch, Where where) {
  logger.end(keys::kBlockStop, nullptr, Json{{meta::kFirstEpochNum, firstEpoch}}, where);
}
void logEpochStart(MlLogger& logger, int epoch, Where where) {
  logger.start(keys::kEpochStart, nullptr, Json{{meta::kEpochNum, epoch}}, where);
}
void logEpochStop(MlLogger& logger, int epoch, Where where) {
  logger.end(keys::kEpochStop, nullptr, Json{{meta::kEpochNum, epoch}}, where);
}
void logEvalStart(MlLogger& logger, int epoch, Where where) {
  logger.start(keys::kEvalStart, nullptr, Json{{meta::kEpochNum, epoch}}, where);
}
void logEvalStop(MlLogger& logger, int epoch, Where where) {
  logger.end(keys::kEvalStop, nullptr, Json{{meta::kEpochNum, epoch}}, where);
}
void logEvalAccuracy(MlLogger& logger, double accuracy, int epoch, Where where) {
  logger.event(keys::kEvalAccuracy, accuracy, Json{{meta::kEpochNum, epoch}}, where);
}

const std::vector<std::string>& resnet50CanonicalTensorNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names = {"conv0_weight", "bn0_gamma", "bn0_beta"};
    constexpr int kUnitsPerStage[4] = {3, 4, 6, 3};  // ResNet-50 bottleneck blocks
    for (int stage = 1; stage <= 4; ++stage) {
      for (int unit = 1; unit <= kUnitsPerStage[stage - 1]; ++unit) {
        const std::string p = fmt::format("stage{}_unit{}_", stage, unit);
        for (int i = 1; i <= 3; ++i) {
          names.push_back(fmt::format("{}conv{}_weight", p, i));
          names.push_back(fmt::format("{}bn{}_gamma", p, i));
          names.push_back(fmt::format("{}bn{}_beta", p, i));
        }
        if (unit == 1) {  // the projection shortcut of each stage's first block
          names.push_back(p + "conv1sc_weight");
          names.push_back(p + "bnsc_gamma");
          names.push_back(p + "bnsc_beta");
        }
      }
    }
    names.push_back("fc1_weight");
    names.push_back("fc1_bias");
    return names;
  }();
  return kNames;
}

const std::vector<std::string>& bertLargeCanonicalTensorNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names = {
        "bert/embeddings/word_embeddings", "bert/embeddings/position_embeddings",
        "bert/embeddings/token_type_embeddings", "bert/embeddings/LayerNorm/gamma",
        "bert/embeddings/LayerNorm/beta"};
    constexpr const char* kLayerTensors[] = {"attention/self/query/kernel",
                                             "attention/self/query/bias",
                                             "attention/self/key/kernel",
                                             "attention/self/key/bias",
                                             "attention/self/value/kernel",
                                             "attention/self/value/bias",
                                             "attention/output/dense/kernel",
                                             "attention/output/dense/bias",
                                             "attention/output/LayerNorm/gamma",
                                             "attention/output/LayerNorm/beta",
                                             "intermediate/dense/kernel",
                                             "intermediate/dense/bias",
                                             "output/dense/kernel",
                                             "output/dense/bias",
                                             "output/LayerNorm/gamma",
                                             "output/LayerNorm/beta"};
    for (int layer = 0; layer < 24; ++layer) {
      for (const char* t : kLayerTensors) {
        names.push_back(fmt::format("bert/encoder/layer_{}/{}", layer, t));
      }
    }
    for (const char* t :
         {"bert/pooler/dense/kernel", "bert/pooler/dense/bias", "cls/predictions/output_bias",
          "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
          "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
          "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias"}) {
      names.push_back(t);
    }
    return names;
  }();
  return kNames;
}

std::vector<EpochBlock> resnetEvalBlocks(int totalEpochs, int offset) {
  if (totalEpochs < 1 || offset < 0 || offset > 3) {
    throw std::invalid_argument(
        fmt::format("resnetEvalBlocks: need totalEpochs >= 1 and an offset of 0-3, got {} and {}",
                    totalEpochs, offset));
  }
  std::vector<EpochBlock> blocks;
  int first = 1;
  for (int e = 1; e <= totalEpochs; ++e) {
    if (e % 4 == offset || e == totalEpochs) {
      blocks.push_back({first, e - first + 1});
      first = e + 1;
    }
  }
  return blocks;
}

}  // namespace ipu::harness
