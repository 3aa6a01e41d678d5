// What an optimizer file implements: the f32 math of one weight's step over ordinary ops and
// in-place linear updates (apply_update: target = keep target + factor sum c_i x_i). The wrappers
// in lowering.cpp hand it f32 operands (already unscaled, clipped and, when sharded, chunked)
// and give every write the loss-scaling skip flag.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ir/graph.h"
#include "ipu_backend/optimizers/optimizer.h"

namespace ipu::optimizers {

// `stem` itself while no tensor has that name, else a numbered variant.
std::string freshName(const Graph& g, const std::string& stem);

// One term c x of an in-place update.
struct Term {
  int x;
  double c = 1.0;
};

struct Step {
  Step(Graph& graph, std::string weightName, const Attrs& a)
      : g(graph), b(graph), name(std::move(weightName)), attrs(a) {}
  Graph& g;
  Builder b;
  std::string name;  // the weight's name: the stem of every tensor the step creates
  const Attrs& attrs;
  int weight = -1;  // f32 weight (this replica's chunk when sharded)
  int grad = -1;    // f32 gradient, unscaled and clipped
  int lr = -1;      // f32 scalar learning rate
  // f32 values of the optimizer's state variables: the new value after updateState.
  std::vector<int> state;
  // state slot i = keep * slot + factor * sum(c x), in place (factor: an f32 scalar or -1).
  void updateState(size_t i, const std::vector<Term>& terms, double keep, int factor = -1);
  // The same for the weight; every optimizer calls it once, last.
  void updateWeight(const std::vector<Term>& terms, double keep, int factor = -1);

  // Set by lowering.cpp: the variables, the skip flag, the sharded weight chunk's result.
  std::vector<int> stateVars;
  int weightVar = -1;
  int skip = -1;
  bool sharded = false;
  // Once written: the weight variable (sharded: the new chunk, f32, not yet gathered).
  int newWeight = -1;
  bool stochasticRounding = false;

  double attr(const char* key, double dflt) const { return attrs.getFloat(key, dflt); }
  // Ordinary-op helpers, each naming its output `<weight>/<what>`.
  int scale(int x, double alpha, const std::string& what) { return b.scale(x, alpha, n(what)); }
  int add(int x, int y, const std::string& what) { return b.add(x, y, n(what)); }
  int sub(int x, int y, const std::string& what) { return b.sub(x, y, n(what)); }
  int mul(int x, int y, const std::string& what) { return b.mul(x, y, n(what)); }
  int div(int x, int y, const std::string& what) { return b.binary("div", x, y, n(what)); }
  int unary(const std::string& fn, int x, const std::string& what) {
    return b.unary(fn, x, n(what));
  }
  int constant(double v, const std::string& what) { return b.constant({}, v, DType::F32, n(what)); }
  // g + wd * w (L2 weight decay folded into the gradient); g itself when wd is 0.
  int withWeightDecay(int g, double wd);
  std::string n(const std::string& what) const { return freshName(g, name + "/" + what); }
};

// Sum of the squares of all elements of x, as an f32 scalar [] (x cast to f32 first).
int sumOfSquares(Graph& g, int x, const std::string& name);

struct Slot {
  std::string_view name;  // the state variable is `<weight>/<name>`
  StateInit init;
  bool scalar = false;  // an f32 scalar (a step count), not one value per weight element
  // Kept in f32 whatever the weight's dtype (second moments: their squares of small gradients
  // underflow 16 bits; Graphcore keeps LAMB's second moment in f32 too). Others: the weight's.
  bool f32 = false;
};
struct OptimizerDef {
  std::string_view name;
  std::vector<Slot> slots;
  // The optimizer_update attributes for one weight; `decays`: opts.decay(weight).
  void (*attrs)(const OptimizerOptions& opts, bool decays, Attrs& a);
  void (*lower)(Step& s);
  bool needsWholeWeight = false;  // a norm of the weight: cannot be sharded
};

// One per file; the list in lowering.cpp is the registry.
extern const OptimizerDef kSgd, kLars, kLamb, kRmsProp, kAdam;
const OptimizerDef* findOptimizer(std::string_view name);

// SGD with momentum at learning rate `lr` (LARS calls it with the trust-scaled rate).
void sgdStep(Step& s, int lr);
// The EMA wrapper (ema.cpp): ema = d ema + (1 - d) w_new, the EMA in state slot `slot`; `rate`:
// -1 for the fixed decay `decay`, else an f32 scalar tensor 1 - d (emaWarmupRates).
void emaStep(Step& s, size_t slot, double decay, int rate);
// The warm-up's 1 - min(decay, (1 + n) / (10 + n)) per distinct decay, n = count + 1 for the
// step counter `count` (not yet incremented this step): shared scalars, appended to g.
std::map<double, int> emaWarmupRates(Graph& g, int count, const std::vector<double>& decays);

}  // namespace ipu::optimizers
