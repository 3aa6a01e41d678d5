// EfficientNet-B4 on the image-classification task (harness/image_task.h): the registry's
// `build` and `data` for --benchmark efficientnet_b4.
//
//   model   models/efficientnet_b4 as the trainer's two graphs, configured from the logged
//           hyperparameters: model_variant b4 | g16, norm_type batch_norm | group_norm,
//           dropout_rate, stochastic_depth_rate, label_smoothing; the optimizer (RMSProp in
//           TensorFlow's form, weight EMA model_eval_ema_factor read by evaluation) with weight
//           decay on every parameter but the norm layers'. Full scale: 380x380x3, 1000 classes;
//           mini: the same architecture on Fashion-MNIST's 28x28x1 (only the stem's input
//           channels differ: the tensor names and every other shape are B4's).
//   data    the image task; ImageNet folders at 380 (eval: shorter side 412, centre crop 380,
//           the reference's crop padding 32). Training micro-batches also carry "dropout_key"
//           (step, first global sample of the micro-batch), so dropout and stochastic depth draw
//           other masks every step and the same masks for any replica / accumulation split.
#pragma once

#include <memory>
#include <string>

#include "harness/benchmark_registry.h"
#include "models/efficientnet_b4/efficientnet.h"

namespace ipu::harness {

// What this build cannot run of a request the rules allow ("" when it can), e.g. open's
// norm_type layer_norm_proxy_norm; the plan refuses with it before anything is written.
std::string efficientNetUnsupported(const Json& hyperparameters);

// The model configuration of a request (std::invalid_argument for what
// efficientNetUnsupported names).
models::efficientnet::Config efficientNetConfig(Scale scale, const Json& hyperparameters);

ModelInstance buildEfficientNet(const ModelRequest& request);
std::unique_ptr<TaskData> makeEfficientNetData(const DataRequest& request);

}  // namespace ipu::harness
