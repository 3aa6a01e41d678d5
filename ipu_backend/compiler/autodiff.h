// Autodiff: appends the backward graph of a scalar loss to the same Graph, from per-op gradient
// rules (the optimizer update goes after it, ipu_backend/optimizers), so that one training step
// is one static program.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu {

struct GradientResult {
  std::map<int, int> grads;  // wrt tensor id -> gradient tensor id
  int opsAdded = 0;
};

// Appends ops computing d(loss)/d(t) for each t in wrt. The loss must have one element.
// The seed gradient is `seed` (1.0, or the loss scale when loss scaling arrives).
// A tensor in wrt that the loss does not depend on gets no entry (callers decide if that is an
// error). Throws GraphError for an op on the path that has no gradient rule, naming the op.
GradientResult appendBackward(Graph& g, int loss, const std::vector<int>& wrt, double seed = 1.0);
// The same with the seed read from a scalar tensor (a host input: the current loss scale, which
// dynamic loss scaling changes between steps without a recompile).
GradientResult appendBackwardSeeded(Graph& g, int loss, const std::vector<int>& wrt,
                                    int seedTensor);

// All trainable variables in declaration order: Variables that some op reads and that no
// side-effect op writes as state (i.e. not optimizer state or running statistics).
std::vector<int> trainableVariables(const Graph& g);

class Builder;
// Sums dy over the dimensions along which `target` was broadcast to dy's shape (the gradient of
// a broadcast operand; gradient rules of op files use it).
int reduceToShape(Builder& b, int dy, const Shape& target);

}  // namespace ipu
