#include "harness/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <thread>

#include <omp.h>

#include "ipu_backend/compiler/recompute.h"
#include "ipu_backend/replication/replicate.h"

namespace ipu::harness {

void HostSlot::checkType(bool ok, const char* type) const {
  if (!ok)
    throw std::invalid_argument(fmt::format("tensor '{}' holds {} elements, read as C++ type {}",
                                            name, dtypeName(dtype), type));
}

const HostSlot& MicroBatch::operator[](std::string_view name) const {
  for (const HostSlot& s : slots_)
    if (s.name == name) return s;
  std::string have;
  for (const HostSlot& s : slots_) have += (have.empty() ? "" : ", ") + s.name;
  throw std::invalid_argument(
      fmt::format("no tensor '{}' in this micro-batch (it has: {})", name, have));
}

bool ConcatenatedSource::beginStep(std::int64_t globalStep) {
  if (current_ && current_->beginStep(globalStep)) return true;
  // Dry, or none yet: the next part carries on. A part dry at once ends the stream.
  if (current_)
    for (std::string& f : current_->corruptFiles()) corrupt_.push_back(std::move(f));
  current_ = open_(++part_);
  return current_ && current_->beginStep(globalStep);
}

void ConcatenatedSource::fill(int replica, int slot, const MicroBatch& inputs) {
  current_->fill(replica, slot, inputs);
}

void ConcatenatedSource::endStep() {
  if (current_) current_->endStep();
}

std::vector<std::string> ConcatenatedSource::corruptFiles() const {
  std::vector<std::string> all = corrupt_;
  if (current_)
    for (std::string& f : current_->corruptFiles()) all.push_back(std::move(f));
  std::sort(all.begin(), all.end());
  return all;
}

void TopOneAccuracy::accumulate(const MicroBatch& inputs, const MicroBatch& outputs,
                                const std::vector<bool>& scored) {
  const std::span<const std::int32_t> labels = inputs.get<const std::int32_t>(labels_);
  const HostSlot& logits = outputs["logits"];
  const std::span<const float> l = logits.as<const float>();
  const std::int64_t rows = static_cast<std::int64_t>(labels.size());
  const std::int64_t classes = static_cast<std::int64_t>(l.size()) / rows;
  for (std::int64_t k = 0; k < rows; ++k) {
    if (!scored[static_cast<size_t>(k)] || labels[k] < 0) continue;
    ++scored_;
    const float* row = l.data() + k * classes;
    correct_ += std::max_element(row, row + classes) - row == labels[k];
  }
}

void copyVariables(const Engine& src, Engine& dst, bool useEma) {
  const Graph& sg = src.executable().graph;
  for (const Tensor& t : dst.executable().graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    int s = useEma ? sg.find(t.name + "/ema") : -1;
    if (s < 0) s = sg.find(t.name);
    if (s < 0) continue;  // e.g. optimizer state only exists in the training graph
    if (sg.tensor(s).dtype != t.dtype) {
      dst.writeTensor(t.name, src.readFloats(s));
      continue;
    }
    std::vector<std::byte> buf(static_cast<size_t>(t.bytes()));
    src.readTensor(s, buf.data(), buf.size());
    dst.writeTensor(t.id, buf.data(), buf.size());
  }
}

std::vector<std::string> splitCheckpoints(const Graph& g, int loss,
                                          const std::vector<std::string>& splits) {
  const std::vector<Op>& ops = g.ops();
  int lossOp = -1;
  for (const Op& op : ops)
    if (std::find(op.outputs.begin(), op.outputs.end(), loss) != op.outputs.end()) lossOp = op.id;
  const auto forward = [&](const Op& op) { return op.id <= lossOp && op.gradientOf < 0; };
  std::vector<int> lastOf(splits.size(), -1);  // per split: its stage's last forward op
  for (const Op& op : ops) {
    if (!forward(op)) continue;
    for (int t : op.outputs)
      for (size_t k = 0; k < splits.size(); ++k)
        if (pipeline::splitMatches(g.tensor(t).name, splits[k])) lastOf[k] = op.id;
  }
  for (size_t k = 0; k < splits.size(); ++k) {
    if (lastOf[k] < 0)
      throw pipeline::PipelineError(fmt::format(
          "split point '{}' names no forward op of '{}' (a split is an op output's name or a "
          "layer prefix followed by '/' or '_', e.g. 'stage2_unit1')",
          splits[k], g.name()));
    if (k > 0 && lastOf[k] <= lastOf[k - 1])
      throw pipeline::PipelineError(
          fmt::format("split points '{}' and '{}' are out of forward order: list them as the "
                      "forward pass meets them",
                      splits[k - 1], splits[k]));
  }
  std::vector<int> stage(ops.size(), -1);
  int s = 0;
  for (const Op& op : ops) {
    if (!forward(op)) continue;
    stage[static_cast<size_t>(op.id)] = s;
    while (static_cast<size_t>(s) < splits.size() && lastOf[static_cast<size_t>(s)] == op.id) ++s;
  }
  return stageBoundaryCheckpoints(g, stage);
}

pipeline::PipelineOptions TrainerOptions::pipelineOptions() const {
  pipeline::PipelineOptions po;
  po.splits = pipeline.splits;
  po.stageIpu = pipeline.stageIpu;
  po.ipus = pipeline.ipus;
  po.schedule = pipeline.schedule;
  po.accumulation = accumulation;
  po.replicas = replicas;
  po.shardOptimizerState = shardOptimizerState;
  po.checkMemory = checkMemory;
  return po;
}

TrainerPrograms compileTrainerPrograms(const models::TaskGraph& model,
                                       const models::TaskGraph& eval, const TrainerOptions& opts) {
  TrainerPrograms p;
  CompileOptions co;
  co.checkMemory = opts.checkMemory;
  p.eval = std::make_shared<Executable>(compile(eval.graph, opts.target, co));
  const TrainerPipeline& pl = opts.pipeline;
  // Recomputation rewrites the training graph only: same inputs, variables and outputs.
  models::TaskGraph recomputed;
  const models::TaskGraph* trainPtr = &model;
  if (pl.recompute) {
    if (pl.splits.empty())
      throw std::invalid_argument(
          "recomputation checkpoints at stage boundaries need split points (--pipeline-splits "
          "or --pipeline-auto)");
    recomputed = model;
    applyRecomputation(recomputed.graph, recomputed.loss,
                       splitCheckpoints(model.graph, model.loss, pl.splits));
    trainPtr = &recomputed;
  }
  const models::TaskGraph& train = *trainPtr;
  if (pl.pipelined()) {
    p.pipelined = std::make_shared<const pipeline::PipelinedExecutable>(
        pipeline::compilePipeline(train.graph, opts.target, opts.pipelineOptions()));
    p.zeroInitialised = p.pipelined->zeroInitialised;
    return p;
  }
  if (opts.replicas > 1 || opts.accumulation > 1) {
    // The replicated step: same model graph, cross-replica reduction and accumulation added.
    // Each replica's graph sees its own micro-batch (batch norm statistics per replica).
    const replication::ReplicatedGraph rg = replication::replicate(
        train.graph, {opts.replicas, opts.accumulation, opts.shardOptimizerState});
    rg.configure(co, opts.accumulation);
    p.train = std::make_shared<Executable>(compile(rg.graph, opts.target, co));
    p.zeroInitialised = rg.zeroInitialised;
  } else {
    p.train = std::make_shared<Executable>(compile(train.graph, opts.target, co));
  }
  return p;
}

void Trainer::HostTensors::allocate(const Graph& g, const std::vector<int>& tensors, int n) {
  storage.clear();
  std::vector<std::vector<HostSlot>> views(static_cast<size_t>(n));
  for (int id : tensors) {
    const Tensor& t = g.tensor(id);
    const size_t bytes = static_cast<size_t>(t.bytes());
    storage.emplace_back(bytes * static_cast<size_t>(n));
    for (int s = 0; s < n; ++s)
      views[static_cast<size_t>(s)].push_back(
          {t.name, t.dtype, t.shape,
           std::span<std::byte>(storage.back().data() + bytes * static_cast<size_t>(s), bytes)});
  }
  slots.clear();
  for (auto& v : views) slots.emplace_back(std::move(v));
}

Trainer::Trainer(models::TaskGraph train, models::TaskGraph eval, const TrainerOptions& opts)
    : train_(std::move(train)), eval_(std::move(eval)), opts_(opts), scaler_(train_.lossScaling) {
  for (int t : train_.inputs) {
    const Tensor& a = train_.graph.tensor(t);
    const Tensor& b = eval_.graph.tensor(eval_.input(a.name));
    if (a.dtype != b.dtype || a.shape != b.shape)
      throw std::invalid_argument(fmt::format(
          "data input '{}': the training graph's is {} {}, the evaluation graph's {} {}; a "
          "source fills both, so they must agree",
          a.name, dtypeName(a.dtype), shapeStr(a.shape), dtypeName(b.dtype), shapeStr(b.shape)));
  }
  TrainerPrograms programs = compileTrainerPrograms(train_, eval_, opts);
  evalExe_ = std::move(programs.eval);
  trainExe_ = std::move(programs.train);
  zeroInitialised_ = std::move(programs.zeroInitialised);
  pipelined_ = std::move(programs.pipelined);
  evalEngine_ = std::make_unique<Engine>(evalExe_, opts.mode);
  if (pipelined_) {
    setUpPipelines();
  } else if (opts.replicas > 1 || opts.accumulation > 1) {
    setUpReplicas();
  } else {
    trainEngine_ = std::make_unique<Engine>(trainExe_, opts.mode);
    trainInputs_.resize(1);
    trainInputs_[0].allocate(train_.graph, train_.inputs, 1);
    for (size_t i = 0; i < train_.inputs.size(); ++i)
      trainEngine_->connectInput(train_.inputs[i], trainInputs_[0].storage[i].data());
    losses_.assign(1, std::vector<float>(1, 0.0f));
    lr_.assign(1, 0.0f);
    scale_.assign(1, 1.0f);
    inverseScale_.assign(1, 1.0f);
    overflow_.assign(1, std::vector<float>(1, 0.0f));
    trainEngine_->connectOutput(train_.loss, losses_[0].data());
    trainEngine_->connectInput(train_.lr, lr_.data());
    if (train_.lossScale >= 0) {
      trainEngine_->connectInput(train_.lossScale, scale_.data());
      trainEngine_->connectInput(train_.lossScaleInverse, inverseScale_.data());
      trainEngine_->connectOutput(train_.overflow, overflow_[0].data());
    }
    trainEngine_->setRoundingSeed(opts.seed);
  }
  evalInputs_.allocate(eval_.graph, eval_.inputs, 1);
  for (size_t i = 0; i < eval_.inputs.size(); ++i)
    evalEngine_->connectInput(eval_.inputs[i], evalInputs_.storage[i].data());
  std::vector<int> outs;
  for (const auto& [role, t] : eval_.outputs) outs.push_back(t);
  evalOutputs_.allocate(eval_.graph, outs, 1);
  // Metrics read outputs by role; the buffers carry the tensors' names, so rename to roles.
  {
    std::vector<HostSlot> v = evalOutputs_.slots[0].slots();
    size_t k = 0;
    for (const auto& [role, t] : eval_.outputs) v[k++].name = role;
    evalOutputs_.slots[0] = MicroBatch(std::move(v));
  }
  for (size_t i = 0; i < outs.size(); ++i)
    evalEngine_->connectOutput(outs[i], evalOutputs_.storage[i].data());
  evalEngine_->connectOutput(eval_.loss, &loss_);
}

void Trainer::setUpReplicas() {
  replication::ReplicaGroupOptions go;
  go.mode = opts_.mode;
  go.replicas = opts_.replicas;
  go.link = opts_.link;
  go.threadsPerReplica = opts_.threadsPerReplica;
  group_ = std::make_unique<replication::ReplicaGroup>(trainExe_, go);
  const Graph& g = trainExe_->graph;
  const int local = group_->localReplicas();
  const int micro = opts_.accumulation;
  // The replicated graph keeps the model's names; each input streams A micro-batches a step.
  std::vector<int> inputs;
  for (int t : train_.inputs) inputs.push_back(g.get(train_.graph.tensor(t).name));
  trainInputs_.resize(static_cast<size_t>(local));
  for (HostTensors& h : trainInputs_) h.allocate(g, inputs, micro);
  losses_.assign(local, std::vector<float>(static_cast<size_t>(micro)));
  lr_.assign(static_cast<size_t>(micro), 0.0f);
  scale_.assign(static_cast<size_t>(micro), 1.0f);
  inverseScale_.assign(static_cast<size_t>(micro), 1.0f);
  overflow_.assign(local, std::vector<float>(static_cast<size_t>(micro), 0.0f));
  const auto id = [&](int t) { return g.get(train_.graph.tensor(t).name); };
  for (int l = 0; l < local; ++l) {
    Engine& e = group_->engine(l);
    for (size_t i = 0; i < inputs.size(); ++i)
      e.connectInput(inputs[i], trainInputs_[l].storage[i].data());
    e.connectInput(id(train_.lr), lr_.data());
    e.connectOutput(id(train_.loss), losses_[l].data());
    // The same seed on every replica: stochastic rounding of the update then draws the same
    // bits, so the 16-bit weights of all replicas stay identical.
    e.setRoundingSeed(opts_.seed);
    if (train_.lossScale >= 0) {
      // The flag is the graph's (from the reduced gradients): the same on every replica.
      e.connectInput(id(train_.lossScale), scale_.data());
      e.connectInput(id(train_.lossScaleInverse), inverseScale_.data());
      e.connectOutput(id(train_.overflow), overflow_[l].data());
    }
  }
}

void Trainer::setUpPipelines() {
  replication::ReplicaGroupOptions go;
  go.replicas = opts_.replicas;
  go.link = opts_.link;
  const int local = replication::localReplicasOf(go);
  firstReplica_ = (opts_.link ? opts_.link->rank() : 0) * local;
  ring_ = std::make_unique<replication::RingCollective>(opts_.replicas, firstReplica_, local,
                                                        opts_.link);
  const Graph& g = pipelined_->graph;
  const int micro = opts_.accumulation;
  const auto name = [&](int t) -> const std::string& { return train_.graph.tensor(t).name; };
  std::vector<int> inputs;
  for (int t : train_.inputs) inputs.push_back(g.get(name(t)));
  trainInputs_.resize(static_cast<size_t>(local));
  for (HostTensors& h : trainInputs_) h.allocate(g, inputs, micro);
  losses_.assign(local, std::vector<float>(static_cast<size_t>(micro)));
  lr_.assign(static_cast<size_t>(micro), 0.0f);
  scale_.assign(static_cast<size_t>(micro), 1.0f);
  inverseScale_.assign(static_cast<size_t>(micro), 1.0f);
  overflow_.assign(local, std::vector<float>(static_cast<size_t>(micro), 0.0f));
  for (int l = 0; l < local; ++l) {
    const ReplicaContext ctx{firstReplica_ + l, opts_.replicas > 1 ? ring_.get() : nullptr};
    auto e = std::make_unique<pipeline::PipelineEngine>(pipelined_, opts_.mode, ctx);
    for (size_t i = 0; i < train_.inputs.size(); ++i)
      e->connectInput(name(train_.inputs[i]), trainInputs_[l].storage[i].data());
    e->connectInput(name(train_.lr), lr_.data());
    e->connectOutput(name(train_.loss), losses_[l].data());
    e->setRoundingSeed(opts_.seed);  // as setUpReplicas: the same bits on every replica
    if (train_.lossScale >= 0) {
      e->connectInput(name(train_.lossScale), scale_.data());
      e->connectInput(name(train_.lossScaleInverse), inverseScale_.data());
      e->connectOutput(name(train_.overflow), overflow_[l].data());
    }
    pipelines_.push_back(std::move(e));
  }
}

void Trainer::runPipelines() {
  const auto runOne = [&](size_t l, std::exception_ptr& error) {
    omp_set_num_threads(opts_.threadsPerReplica);
    try {
      pipelines_[l]->run();
    } catch (const std::exception& e) {
      error = std::current_exception();
      ring_->abort(
          fmt::format("replica {} failed: {}", firstReplica_ + static_cast<int>(l), e.what()));
    }
  };
  std::vector<std::exception_ptr> errors(pipelines_.size());
  {
    // The replicas' collectives pair up, so every replica runs in its own thread.
    std::vector<std::jthread> others;
    for (size_t l = 1; l < pipelines_.size(); ++l)
      others.emplace_back([&, l] { runOne(l, errors[l]); });
    const int saved = omp_get_max_threads();
    runOne(0, errors[0]);
    omp_set_num_threads(saved);
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

const Executable& Trainer::trainExecutable() const {
  if (!trainExe_)
    throw std::logic_error("the training step is pipelined: see pipelinedExecutable()");
  return *trainExe_;
}

Engine& Trainer::trainEngine() {
  if (pipelined_)
    throw std::logic_error("the training step is pipelined: read variables by readVariable()");
  return group_ ? group_->engine(0) : *trainEngine_;
}

std::vector<std::string> Trainer::modelVariables() const {
  std::vector<std::string> names;
  for (const Tensor& t : train_.graph.tensors())
    if (t.kind == TensorKind::Variable) names.push_back(t.name);
  return names;
}

std::vector<float> Trainer::readVariable(const std::string& name) const {
  if (!pipelines_.empty()) return pipelines_.front()->readFloats(name);
  return group_ ? group_->engine(0).readFloats(name) : trainEngine_->readFloats(name);
}

BatchGeometry Trainer::geometry() const {
  BatchGeometry g;
  g.microBatch = opts_.batch;
  g.accumulation = opts_.accumulation;
  g.replicas = opts_.replicas;
  g.firstReplica = group_ ? group_->firstReplica() : firstReplica_;
  g.localReplicas = group_               ? group_->localReplicas()
                    : pipelines_.empty() ? 1
                                         : static_cast<int>(pipelines_.size());
  return g;
}

void Trainer::initialise(const std::map<std::string, std::vector<float>>& values) {
  const Graph& g = pipelined_ ? pipelined_->graph : trainExe_->graph;
  for (const Tensor& t : g.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    auto it = values.find(t.name);
    std::vector<float> zeros;
    const bool startsAtZero = std::find(zeroInitialised_.begin(), zeroInitialised_.end(), t.name) !=
                              zeroInitialised_.end();
    if (it == values.end() && !startsAtZero)
      throw std::invalid_argument(
          fmt::format("no initial value for variable '{}' {}", t.name, shapeStr(t.shape)));
    const std::vector<float>* v = it == values.end() ? nullptr : &it->second;
    if (!v || static_cast<std::int64_t>(v->size()) != t.elements()) {
      // A sharded momentum holds 1/R of the model's: it starts at zero like the whole one.
      const bool zero = !v || std::all_of(v->begin(), v->end(), [](float x) { return x == 0; });
      if (!zero)
        throw std::invalid_argument(
            fmt::format("initial value of '{}' has {} elements, the training graph's {} has {}",
                        t.name, v->size(), shapeStr(t.shape), t.elements()));
      zeros.assign(static_cast<size_t>(t.elements()), 0.0f);
      v = &zeros;
    }
    if (!pipelines_.empty())
      for (auto& e : pipelines_) e->writeTensor(t.name, *v);
    else if (group_)
      for (int l = 0; l < group_->localReplicas(); ++l) group_->engine(l).writeTensor(t.name, *v);
    else
      trainEngine_->writeTensor(t.name, *v);  // rounded to 16-bit variables' dtype
  }
}

float Trainer::step(const std::function<float(std::int64_t)>& lr, EpochStats& st) {
  std::fill(lr_.begin(), lr_.end(), lr(steps_));
  std::fill(scale_.begin(), scale_.end(), scaler_.scale());
  std::fill(inverseScale_.begin(), inverseScale_.end(), scaler_.inverseScale());
  if (group_ || !pipelines_.empty()) {
    if (group_)
      group_->run();
    else
      runPipelines();
    // The update part streams the flag out once per step, after the last micro-batch.
    if (train_.overflow >= 0 && !scaler_.update(overflow_[0].back() != 0.0f)) ++st.skippedSteps;
    double loss = 0;
    for (const auto& ls : losses_)
      for (float x : ls) loss += x;
    loss_ = static_cast<float>(loss /
                               static_cast<double>(geometry().localReplicas * opts_.accumulation));
  } else {
    trainEngine_->run();
    loss_ = losses_[0][0];
    // The overflow flag is 0, or NaN when some gradient was not finite (the step was skipped).
    if (train_.overflow >= 0 && !scaler_.update(overflow_[0][0] != 0.0f)) ++st.skippedSteps;
  }
  ++steps_;
  if (!std::isfinite(loss_)) st.finite = false;
  return loss_;
}

EpochStats Trainer::train(BatchSource& source, std::int64_t maxSteps,
                          const std::function<float(std::int64_t)>& lr,
                          const std::function<void(std::int64_t, float)>& onStep) {
  const BatchGeometry geo = geometry();
  EpochStats st;
  const auto t0 = std::chrono::steady_clock::now();
  double lossSum = 0;
  std::int64_t steps = 0;
  for (; maxSteps <= 0 || steps < maxSteps; ++steps) {
    if (!source.beginStep(steps_)) break;
    for (int l = 0; l < geo.localReplicas; ++l)
      for (int a = 0; a < geo.accumulation; ++a)
        source.fill(geo.firstReplica + l, a, trainInputs_[static_cast<size_t>(l)].slots[a]);
    source.endStep();  // a pipeline's batch goes back to its workers before the step runs
    lossSum += step(lr, st);
    if (onStep) onStep(steps_, loss_);
  }
  st.steps = steps;
  st.corruptFiles = source.corruptFiles();
  st.samples = steps * globalBatch();
  st.lossScale = scaler_.scale();
  st.meanLoss = steps ? lossSum / static_cast<double>(steps) : 0.0;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

EvalResult Trainer::evaluate(EvalSource& source, Metric& metric,
                             const std::function<void()>& onBatch) {
  const auto& init = train_.optimizer.init;
  const bool useEma = std::find(init.begin(), init.end(), StateInit::Weight) != init.end();
  if (pipelined_) {
    // As copyVariables, from the IPU of the pipeline that holds each variable.
    const Graph& pg = pipelined_->graph;
    for (const Tensor& t : evalEngine_->executable().graph.tensors()) {
      if (t.kind != TensorKind::Variable) continue;
      std::string from = t.name;
      if (useEma && pg.find(t.name + "/ema") >= 0) from = t.name + "/ema";
      if (pg.find(from) < 0) continue;
      evalEngine_->writeTensor(t.name, pipelines_.front()->readFloats(from));
    }
  } else {
    copyVariables(trainEngine(), *evalEngine_, useEma);
  }
  for (const std::string& role : metric.outputs()) (void)eval_.output(role);  // named if absent
  metric.reset();
  const MicroBatch& inputs = evalInputs_.slots[0];
  std::vector<bool> scored;
  EvalResult r;
  for (;;) {
    scored.assign(static_cast<size_t>(inputs.rows()), true);
    if (!source.next(inputs, scored)) break;
    evalEngine_->run();
    ++evalRuns_;
    metric.accumulate(inputs, evalOutputs_.slots[0], scored);
    r.rows += std::count(scored.begin(), scored.end(), true);
    if (onBatch) onBatch();
  }
  r.metric = metric.result();
  r.skipped = source.skipped();
  r.skippedFiles = source.skippedFiles();
  return r;
}

}  // namespace ipu::harness
