#include "models/common/gradients.h"

#include <fmt/format.h>

namespace ipu::models {

void requireGradients(const Graph& g, const std::map<int, int>& grads,
                      const std::vector<int>& params, std::string_view model) {
  for (int p : params)
    if (!grads.count(p))
      throw GraphError(fmt::format("{}: parameter '{}' gets no gradient", model, g.tensor(p).name));
}

}  // namespace ipu::models
