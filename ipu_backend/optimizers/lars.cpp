// LARS, TensorFlow's LARSOptimizer (the MLPerf ResNet-50 reference): SGD with momentum at the
// rate lr x trust, trust = eta |w| / (|g| + wd |w| + epsilon), 1 when |w| or |g| is 0. The norms
// are those of the update's (reduced, unscaled) gradient: the lowering runs after replication.
#include "ipu_backend/optimizers/lowering.h"

namespace ipu::optimizers {
namespace {

void attrs(const OptimizerOptions& o, bool decays, Attrs& a) {
  a.set("momentum", o.momentum);
  a.set("weight_decay", decays ? o.weightDecay : 0.0);
  if (o.nesterov) a.set("nesterov", true);
  a.set("lars_eta", o.larsEta);
  a.set("lars_epsilon", o.larsEpsilon);
}

void lower(Step& s) {
  const int one = s.constant(1.0, "lars_grad_scale_inverse");
  const int rate = s.g.addOp1(OpKind::LarsLearningRate,
                              {sumOfSquares(s.g, s.weight, s.name + "/lars_weight"),
                               sumOfSquares(s.g, s.grad, s.name + "/lars_grad"), s.lr, one},
                              Attrs{{"eta", s.attr("lars_eta", 0.0)},
                                    {"weight_decay", s.attr("weight_decay", 0.0)},
                                    {"epsilon", s.attr("lars_epsilon", 0.0)}},
                              s.n("lars_lr"));
  sgdStep(s, rate);
}

}  // namespace

const OptimizerDef kLars = {"lars", {{"momentum", StateInit::Zero}}, attrs, lower, true};

}  // namespace ipu::optimizers
