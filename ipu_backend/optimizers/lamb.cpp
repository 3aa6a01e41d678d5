// LAMB as the MLPerf BERT reference has it (lamb_optimizer_v1.py, apex FusedLAMB):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  t = t + 1
//   m^ = m / (1 - b1^t), v^ = v / (1 - b2^t)   (bias_correction false: m^ = m, v^ = v, Graphcore's
//                                                LambNoBias)
//   u = m^ / (sqrt(v^) + eps) + wd w;  w -= lr x trust x u,  trust = |w| / |u| (1 if either is 0)
// Layer norm and bias tensors (trust_ratio false) take trust 1 and wd 0. The gradients arrive
// clipped to the global norm max_grad_norm (lowering.cpp: one norm over every lamb update).
#include "ipu_backend/optimizers/lowering.h"

#include "ipu_backend/optimizers/adam_moments.h"

namespace ipu::optimizers {
namespace {

void attrs(const OptimizerOptions& o, bool decays, Attrs& a) {
  setMomentAttrs(o, decays, a);
  a.set("trust_ratio", decays);
  if (o.maxGradNorm > 0.0) a.set("max_grad_norm", o.maxGradNorm);
}

void lower(Step& s) {
  const Moments mo = adamMoments(s);
  const int denom = s.add(s.unary("sqrt", mo.vHat, "v_sqrt"),
                          s.constant(s.attr("epsilon", 1e-6), "epsilon"), "denominator");
  const int u = s.withWeightDecay(s.div(mo.mHat, denom, "adam_step"), s.attr("weight_decay", 0.0));
  int rate = s.lr;
  if (s.attrs.getBool("trust_ratio", true)) {
    const int one = s.constant(1.0, "lamb_one");
    rate = s.g.addOp1(OpKind::LarsLearningRate,
                      {sumOfSquares(s.g, s.weight, s.name + "/lamb_weight"),
                       sumOfSquares(s.g, u, s.name + "/lamb_update"), s.lr, one},
                      Attrs{{"eta", 1.0}, {"weight_decay", 0.0}, {"epsilon", 0.0}}, s.n("lamb_lr"));
  }
  s.updateWeight({{u}}, 1.0, s.scale(rate, -1.0, "negative_lr"));
}

}  // namespace

const OptimizerDef kLamb = {"lamb", kMomentSlots, attrs, lower, true};

}  // namespace ipu::optimizers
