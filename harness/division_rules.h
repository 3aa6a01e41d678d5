// Closed/open division rules: which hyperparameters and models a closed entry may use. Each
// violation cites the rule it breaks, so a refused run tells the user what to change.
// Sources: the MLPerf Training rules (hyperparameter table) and the official checker's rule
// files (mlperf_logging/compliance_checker/training_<ruleset>/closed_*.yaml).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harness/benchmark.h"
#include "harness/mllog.h"  // Json

namespace ipu::harness {

struct Violation {
  std::string key;      // the hyperparameter (or "model", "submission_division")
  std::string value;    // what was given, as JSON text ("<missing>" when absent)
  std::string allowed;  // what the rule allows
  std::string rule;     // the rule cited, e.g. "MLPerf Training rules v4.0, ResNet-50 closed"
  // "<rule>: <key> must be <allowed> (got <value>)"
  std::string message() const;
};

// Every violation of `division`'s rules by `hyperparameters` (MLPerf-named keys, as from
// mlperfHyperparameters()) and `modelVariant` ("resnet50", "bert_large", ...). Empty = valid.
//  - ResNet-50 closed: opt_name sgd|lars; LARS: end LR 1e-4, poly power 2, epsilon 0,
//    momentum 0.9 below batch 32k, weight decay 1e-4 x 2^N; SGD: base LR a multiple of 0.001,
//    end LR 1e-4, poly power 2, momentum 0.9, weight decay 1e-4 x 2^N, integer warmup/decay
//    epochs >= 0; label smoothing 0 or 0.1; every key the checker requires; the reference model.
//  - BERT closed: LAMB; every key the checker requires; the reference's linear decay (poly
//    power 1); sequence length 512 (mini scale: the mini preset's 128); the reference model.
//  - EfficientNet-B4: our own rules, validateEfficientNet (rules/efficientnet_rules.h), in
//    both divisions (open must log model_variant and norm_type).
//  - Open division (ResNet-50, BERT): hyperparameters and model are free (nothing to report).
std::vector<Violation> validate(Division division, Benchmark benchmark, const Json& hyperparameters,
                                std::string_view modelVariant, Scale scale = Scale::kFull);

// All messages joined by newlines ("" when there is none), for an error or a log.
std::string formatViolations(const std::vector<Violation>& violations);

}  // namespace ipu::harness
