// Projected time-to-train from a per-micro-batch step cost.
//
//   steps       = ceil(epochs x trainSamples / globalBatch)
//   step        = A x microBatch + allReduce + weightUpdate            (P = 1)
//               = (A + 2P - 1) x microBatch / P + allReduce + update   (P > 1 pipeline stages)
//   evaluation  = ceil(epochs / evalEveryEpochs) x evalSamples / (replicas x evalBatch) x evalStep
//   total       = steps x step + evaluation + host transfers + fixed host overhead
// With a HostSide, a micro-batch lasts as long as the slowest of the device, the hosts' decode
// and augmentation of its images and their stream through the M2000 gateway (the three overlap:
// the input pipeline prefetches), an evaluation batch as long as the slower of the device and
// the hosts' eval decode, and the run adds what crosses the gateways outside the steps.
// where globalBatch = replicas x microBatch x A. The pipeline rule is the published rule of
// thumb (docs: IPU facts, "fill/drain costs ~(2N-1) stage slots per step") with a stage slot
// = one micro-batch through one of P balanced stages; it is not applied without pipelining.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "ipu_backend/cost/collectives.h"

namespace ipu::cost {

// ImageNet-1k (ILSVRC 2012) split sizes.
constexpr i64 kImageNetTrainImages = 1281167;
constexpr i64 kImageNetEvalImages = 50000;

// What feeds the IPUs from the host servers and crosses the gateways outside the steps. A zero
// figure leaves its term out (the default: no host side).
struct HostSide {
  // Host CPU cores per IPU (system description: host processors x cores per processor /
  // accelerators) and the images one core decodes and augments per second, for training (random
  // resized crop, flip) and evaluation (resize, centre crop): a microbenchmark of a loader.
  double coresPerIpu = 0;
  double trainImagesPerCoreSecond = 0;
  double evalImagesPerCoreSecond = 0;
  // Host <-> IPU bytes per second through one IPU-M2000 gateway, shared by its IPUs, and the
  // bytes one training image streams (224 x 224 x 3 uint8 with eight-bit I/O).
  double gatewayBytesPerSec = 0;
  int ipusPerGateway = 4;
  double imageBytes = 0;
  // Outside the steps, per IPU: at each evaluation a checkpoint saved from one IPU (weights and
  // optimizer state) and the weights restored onto every IPU before it; once per run the
  // evaluation program's image loaded onto every IPU.
  i64 checkpointBytes = 0, restoreBytes = 0, evalProgramBytes = 0;
};

struct TrainingRun {
  PodShape pod;
  i64 microBatch = 20;   // per replica
  i64 accumulation = 1;  // gradient accumulation steps A
  double epochs = 38;    // to converge
  i64 trainSamples = kImageNetTrainImages;
  i64 evalSamples = kImageNetEvalImages;
  double evalEveryEpochs = 4;  // MLPerf ResNet: evaluation every 4 epochs (docs: MLPerf logging)
  i64 evalBatch = 0;           // per replica; 0: microBatch
  i64 gradientBytes = 0;       // per replica, all-reduced once per step
  double fixedSeconds = 0;     // host-side overhead per run outside the steps (e.g. 0)
  HostSide host;
  i64 globalBatch() const { return pod.replicas * microBatch * accumulation; }
};

struct StepTimes {
  double microBatchSeconds = 0;    // forward + backward of one micro-batch (host I/O included)
  double weightUpdateSeconds = 0;  // optimizer update, once per step
  double evalStepSeconds = 0;      // forward of one eval batch
};

struct TimeToTrain {
  i64 steps = 0;
  double stepSeconds = 0, computeSeconds = 0, allReduceSeconds = 0, updateSeconds = 0;
  double pipelineSeconds = 0;  // fill/drain part of stepSeconds
  // Part of computeSeconds the device waits for the host (decode or gateway stream slower).
  double hostWaitSeconds = 0;
  // One micro-batch's images on the host side: decoded by the replica's cores, streamed through
  // the gateway (0 without a HostSide).
  double hostDecodeSeconds = 0, gatewayStreamSeconds = 0;
  double evalHostWaitSeconds = 0;  // part of evalSeconds waiting for the hosts' eval decode
  // Per run, through the gateways: checkpoint saves, weight restores, the evaluation program.
  double checkpointSaveSeconds = 0, restoreSeconds = 0, evalProgramLoadSeconds = 0;
  double hostTransferSeconds() const {
    return checkpointSaveSeconds + restoreSeconds + evalProgramLoadSeconds;
  }
  double trainSeconds = 0, evalSeconds = 0, totalSeconds = 0;
  double imagesPerSecond = 0;  // training throughput of the whole system
  nlohmann::json report() const;
};

TimeToTrain projectTimeToTrain(const TrainingRun& run, const StepTimes& t,
                               const Target& target = Target::mk2(),
                               const CollectiveOptions& copts = {});

// MLPerf ResNet-50 reference convergence points: epochs to converge by global batch (docs: MLPerf
// logging, RCP table), linearly interpolated, clamped at the ends.
double resnetRcpEpochs(i64 globalBatch);

// MLPerf BERT reference convergence points: samples to converge by global batch (the olympic
// means of the reference runs in mlperf-logging's rcps_bert.json, training 5.0.0; docs: BERT
// facts section 1), linearly interpolated, clamped at the ends.
double bertRcpSamples(i64 globalBatch);
// MLPerf BERT evaluation interval in samples (docs: BERT facts section 1):
// FLOOR(0.05 x (230.23 x globalBatch + 3,000,000), 25,000), i.e. rounded down to a multiple of
// 25,000. A run stops at the first evaluation that reaches the target, so it trains a whole
// number of intervals.
i64 bertEvalIntervalSamples(i64 globalBatch);

}  // namespace ipu::cost
