// The contract between a model and the harness's trainer: the two graphs a benchmark trains
// and evaluates, described by what the trainer feeds and reads, not by what the model is.
//
//   inputs   the data inputs fed once per micro-batch, any number, any dtype (images f32 and
//            labels i32 for a classifier; token ids, positions, masks, ... for BERT). Each is a
//            graph input whose shape is one micro-batch; batch sources fill them by name.
//   lr       the learning rate, an f32[] input (training graphs only).
//   loss     the mean loss, an f32[] output.
//   outputs  what evaluation reads back, by role ("logits" for a classifier; the masked-LM
//            predictions for BERT): the metric names the roles it needs.
//
// Plus what initialisation needs (trainable parameters, state, the optimizer's state and how
// it starts) and the loss-scaling tensors of 16-bit policies. The harness depends on this
// header, never the other way round: it names no dataset and no harness type.
#pragma once

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ipu_backend/ir/graph.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/precision/loss_scaling.h"

namespace ipu::models {

struct TaskGraph {
  Graph graph;
  std::vector<int> inputs;             // data inputs, in feed order
  int lr = -1;                         // f32[] input (training graphs only)
  int loss = -1;                       // f32[] output
  std::map<std::string, int> outputs;  // evaluation outputs by role
  std::vector<int> parameters;         // trainable variables, in model order
  std::vector<int> state;              // running statistics and optimizer state
  OptimizerState optimizer;            // the optimizer's state variables and their first values
  // Loss scaling (training graphs of 16-bit policies; -1 otherwise): host inputs S and 1/S,
  // output overflow flag (0, or NaN when a gradient was not finite and the update was skipped).
  int lossScale = -1, lossScaleInverse = -1, overflow = -1;
  precision::LossScalingConfig lossScaling;

  // The data input named `name`; std::invalid_argument naming the graph and its inputs if absent.
  int input(std::string_view name) const {
    for (int t : inputs)
      if (graph.tensor(t).name == name) return t;
    std::string have;
    for (int t : inputs) have += (have.empty() ? "" : ", ") + graph.tensor(t).name;
    throw std::invalid_argument("graph '" + graph.name() + "' has no data input '" +
                                std::string(name) + "' (its data inputs: " + have + ")");
  }
  // The output of role `role`; std::invalid_argument naming the graph and its roles if absent.
  int output(std::string_view role) const {
    auto it = outputs.find(std::string(role));
    if (it != outputs.end()) return it->second;
    std::string have;
    for (const auto& [r, t] : outputs) have += (have.empty() ? "" : ", ") + r;
    throw std::invalid_argument("graph '" + graph.name() + "' has no output of role '" +
                                std::string(role) + "' (its roles: " + have + ")");
  }
};

// Sets the optimizer state of `values` to what the optimizer starts from (Zero, One, or a copy of
// its weight for a weight EMA), overriding a model's generic initialisation of "other variables":
// RMSProp's mean square starts at 1, an EMA at the initial weight.
inline void applyOptimizerStateInit(const Graph& g, const OptimizerState& o,
                                    std::map<std::string, std::vector<float>>& values) {
  for (size_t i = 0; i < o.stateVariables.size(); ++i) {
    const Tensor& t = g.tensor(o.stateVariables[i]);
    const StateInit init = i < o.init.size() ? o.init[i] : StateInit::Zero;
    std::vector<float>& v = values[t.name];
    if (init == StateInit::Weight) {
      const std::string& weight = g.tensor(o.weightOf.at(i)).name;
      auto w = values.find(weight);
      if (w == values.end())
        throw std::invalid_argument("optimizer state '" + t.name + "' copies weight '" + weight +
                                    "', which has no initial value");
      v = w->second;
    } else {
      v.assign(static_cast<size_t>(t.elements()), init == StateInit::One ? 1.0f : 0.0f);
    }
  }
}

}  // namespace ipu::models
