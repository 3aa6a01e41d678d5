// What every model builder checks after autodiff: each trainable parameter got a gradient (the
// backend leaves the decision to its callers: ipu_backend/compiler/autodiff.h).
#pragma once

#include <map>
#include <string_view>
#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu::models {

// Throws GraphError "<model>: parameter '<name>' gets no gradient" for the first parameter of
// `params` without an entry in `grads` (parameter -> gradient).
void requireGradients(const Graph& g, const std::map<int, int>& grads,
                      const std::vector<int>& params, std::string_view model);

}  // namespace ipu::models
