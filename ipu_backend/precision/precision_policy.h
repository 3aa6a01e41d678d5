// Which floating-point types a training run uses where, parsed from a command-line string.
//
// Presets (Graphcore's "A.B" names: A = bits of weights/activations/gradients in compute,
// B = bits of the master weights the optimizer updates):
//   fp32   everything f32, no loss scaling.
//   fp16   f16 compute, f32 master weights and partials, RNE, dynamic loss scaling
//          (GPU-style automatic mixed precision, for comparison).
//   bf16   bf16 compute, f32 master weights and partials, no loss scaling (bf16 has f32's
//          range). EXTENSION: bf16 is not native on the IPU.
//   16.16  f16 weights, activations and partials, stochastic rounding, static loss scale 128:
//          the published IPU MLPerf ResNet-50 configuration.
//   16.32  f16 compute with f32 master weights and f32 partials, stochastic rounding, static
//          loss scale 128.
// Which op kinds stay f32 under a 16-bit preset is a fact of each op kind, not of the policy:
// OpDef::precision (ir/op_defs.h), applied by the precision pass (compiler/mixed_precision.h).
//
// String form: <preset>[,loss=<spec>][,sr=on|off], e.g. "16.16", "16.16,loss=dynamic",
// "fp16,loss=static:1024,sr=on". Loss-scaling specs:
//   none | static:<S> | dynamic[:<initial S>[:<growth interval>]]   (S a positive number)
// toString() prints the canonical form, which parses back to an equal policy.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ipu_backend/ir/dtype.h"
#include "ipu_backend/precision/loss_scaling.h"

namespace ipu::precision {

// Throws std::invalid_argument naming the string and the valid forms.
LossScalingConfig parseLossScaling(std::string_view spec);
std::string toString(const LossScalingConfig& c);

struct PrecisionPolicy {
  std::string preset = "fp32";  // one of the preset names above
  DType compute = DType::F32;   // weights, activations, gradients as stored and computed
  DType masterWeights = DType::F32;
  DType partials = DType::F32;  // matmul/conv accumulators and reduction partials
  bool stochasticRounding = false;
  bool nativeOnIpu = true;  // false: an emulator extension (bf16)
  LossScalingConfig lossScaling;

  // Throws std::invalid_argument naming the string and the valid forms.
  static PrecisionPolicy parse(std::string_view s);
  std::string toString() const;  // canonical, parse(toString()) == *this
  std::string describe() const;  // multi-field human-readable summary

  bool isMixed() const { return compute != DType::F32; }
  bool operator==(const PrecisionPolicy&) const = default;
};

std::ostream& operator<<(std::ostream& os, const PrecisionPolicy& p);

// The preset names, in the order listed above.
const std::vector<std::string_view>& precisionPresets();

}  // namespace ipu::precision
