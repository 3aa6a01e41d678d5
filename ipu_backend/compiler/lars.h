// LARS lowering: an sgd_update (or sgd_update_scaled) with attribute lars_eta > 0 becomes
//
//   wss = reduce_sum(square(w)), gss = reduce_sum(square(g))   (f32, cast first if 16-bit)
//   lr' = lars_learning_rate(wss, gss, lr, 1/S)                 (a scalar; 1/S = 1 unscaled)
//   sgd_update(w, v, g, lr')                                    (the lars_* attributes removed)
//
// which is TensorFlow's LARSOptimizer (the MLPerf ResNet-50 reference): the trust ratio scales
// the learning rate of the momentum update, v = m v + (g + wd w), w -= lr' v. It runs in compile(),
// after the replication pass, so the norms are those of the reduced (all-replica) gradient and
// the two sums are split over the tiles like any other reduction.
#pragma once

#include "ipu_backend/ir/graph.h"

namespace ipu {

// Expands every LARS update in place; tensor ids are kept, the new ops sit just before their
// update. Returns the number of updates expanded. A graph without LARS is left untouched.
int expandLars(Graph& g);

}  // namespace ipu
