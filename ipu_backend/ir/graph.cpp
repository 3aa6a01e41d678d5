#include "ipu_backend/ir/graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ipu_backend/ir/op_defs.h"

namespace ipu {

std::string shapeStr(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ","));
}

i64 numElements(const Shape& s) {
  i64 n = 1;
  for (i64 d : s) n *= d;
  return n;
}

std::string_view tensorKindName(TensorKind k) {
  switch (k) {
    case TensorKind::Input:
      return "input";
    case TensorKind::Variable:
      return "variable";
    case TensorKind::Activation:
      return "activation";
  }
  return "?";
}

const AttrValue& Attrs::at(const std::string& k) const {
  auto it = map_.find(k);
  if (it == map_.end()) throw GraphError(fmt::format("missing attribute '{}'", k));
  return it->second;
}

i64 Attrs::getInt(const std::string& k) const {
  const auto& v = at(k);
  if (auto p = std::get_if<i64>(&v)) return *p;
  throw GraphError(fmt::format("attribute '{}' is not an int", k));
}

double Attrs::getFloat(const std::string& k) const {
  const auto& v = at(k);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<i64>(&v)) return static_cast<double>(*p);
  throw GraphError(fmt::format("attribute '{}' is not a float", k));
}

bool Attrs::getBool(const std::string& k) const {
  const auto& v = at(k);
  if (auto p = std::get_if<bool>(&v)) return *p;
  throw GraphError(fmt::format("attribute '{}' is not a bool", k));
}

const std::string& Attrs::getString(const std::string& k) const {
  const auto& v = at(k);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  throw GraphError(fmt::format("attribute '{}' is not a string", k));
}

const std::vector<i64>& Attrs::getInts(const std::string& k) const {
  const auto& v = at(k);
  if (auto p = std::get_if<std::vector<i64>>(&v)) return *p;
  throw GraphError(fmt::format("attribute '{}' is not an int list", k));
}

int Graph::addTensor(const std::string& name, Shape shape, DType dtype, TensorKind kind,
                     int producer) {
  if (name.empty()) throw GraphError("tensor names must not be empty");
  if (byName_.count(name))
    throw GraphError(fmt::format("tensor name '{}' is already used (by {} {})", name,
                                 tensorKindName(tensors_[byName_[name]].kind),
                                 shapeStr(tensors_[byName_[name]].shape)));
  for (i64 d : shape)
    if (d < 1)
      throw GraphError(
          fmt::format("tensor '{}': dimensions must be >= 1, got {}", name, shapeStr(shape)));
  Tensor t;
  t.id = static_cast<int>(tensors_.size());
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.kind = kind;
  t.producer = producer;
  byName_[name] = t.id;
  tensors_.push_back(std::move(t));
  return tensors_.back().id;
}

int Graph::addInput(const std::string& name, Shape shape, DType dtype) {
  return addTensor(name, std::move(shape), dtype, TensorKind::Input, -1);
}

int Graph::addVariable(const std::string& name, Shape shape, DType dtype) {
  return addTensor(name, std::move(shape), dtype, TensorKind::Variable, -1);
}

int Graph::addOp(OpKind kind, std::vector<int> inputs, Attrs attrs,
                 std::vector<std::string> outputNames) {
  const OpDef& def = opDef(kind);
  std::string label = fmt::format("{} (op {})", def.name, ops_.size());
  if (!outputNames.empty() && !outputNames[0].empty())
    label = fmt::format("{} '{}'", def.name, outputNames[0]);
  std::vector<const Tensor*> ins;
  for (int id : inputs) {
    if (id < 0 || id >= static_cast<int>(tensors_.size()))
      throw GraphError(fmt::format("{}: input tensor id {} does not exist", label, id));
    ins.push_back(&tensors_[id]);
  }
  for (int w : def.writesInputs)
    if (w < static_cast<int>(ins.size()) && ins[w]->kind != TensorKind::Variable)
      throw GraphError(
          fmt::format("{}: input {} ('{}') is updated in place and must be a "
                      "variable, it is an {}",
                      label, w, ins[w]->name, tensorKindName(ins[w]->kind)));
  std::vector<TensorType> types = inferOutputTypes(kind, ins, attrs, label);
  if (!outputNames.empty() && outputNames.size() != types.size())
    throw GraphError(fmt::format("{}: {} output names given for {} outputs", label,
                                 outputNames.size(), types.size()));
  Op op;
  op.id = static_cast<int>(ops_.size());
  op.kind = kind;
  op.inputs = std::move(inputs);
  op.attrs = std::move(attrs);
  for (size_t i = 0; i < types.size(); ++i) {
    std::string nm = outputNames.empty() || outputNames[i].empty()
                         ? uniqueName(std::string(def.name))
                         : outputNames[i];
    op.outputs.push_back(
        addTensor(nm, types[i].shape, types[i].dtype, TensorKind::Activation, op.id));
  }
  ops_.push_back(std::move(op));
  return ops_.back().id;
}

int Graph::addOp1(OpKind kind, std::vector<int> inputs, Attrs attrs, std::string outputName) {
  std::vector<std::string> names;
  if (!outputName.empty()) names.push_back(std::move(outputName));
  int id = addOp(kind, std::move(inputs), std::move(attrs), std::move(names));
  if (ops_[id].outputs.empty()) throw GraphError("internal: op has no output");
  return ops_[id].outputs[0];
}

void Graph::markOutput(int t) {
  (void)tensor(t);
  for (int o : outputs_)
    if (o == t) return;
  outputs_.push_back(t);
}

int Graph::find(const std::string& name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? -1 : it->second;
}

int Graph::get(const std::string& name) const {
  int id = find(name);
  if (id < 0) throw GraphError(fmt::format("no tensor named '{}' in graph '{}'", name, name_));
  return id;
}

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> c(tensors_.size());
  for (const Op& op : ops_)
    for (int t : op.inputs) c[t].push_back(op.id);
  return c;
}

std::string Graph::uniqueName(const std::string& stem) const {
  int& n = nameCounters_[stem];
  std::string nm;
  do {
    nm = fmt::format("{}_{}", stem, n++);
  } while (byName_.count(nm));
  return nm;
}

void Graph::reorderOps(const std::vector<int>& order) {
  const size_t n = ops_.size();
  std::vector<int> newId(n, -1);
  for (size_t i = 0; i < order.size(); ++i) {
    const int o = order[i];
    if (o < 0 || static_cast<size_t>(o) >= n || newId[o] != -1 || order.size() != n)
      throw GraphError(fmt::format("reorderOps: order is not a permutation of the {} op ids", n));
    newId[o] = static_cast<int>(i);
  }
  for (const Op& op : ops_)
    for (int t : op.inputs) {
      const int p = tensors_[t].producer;
      if (p >= 0 && newId[p] > newId[op.id])
        throw GraphError(fmt::format("reorderOps: op {} would run before the producer of '{}'",
                                     op.id, tensors_[t].name));
    }
  std::vector<Op> ops(n);
  for (Op& op : ops_) {
    const int id = newId[op.id];
    op.id = id;
    ops[id] = std::move(op);
  }
  ops_ = std::move(ops);
  for (Tensor& t : tensors_)
    if (t.producer >= 0) t.producer = newId[t.producer];
}

void Graph::removeOps(const std::function<bool(const Op&)>& drop) {
  std::vector<int> newId(ops_.size(), -1);
  std::vector<Op> kept;
  for (Op& op : ops_) {
    if (drop(op)) {
      if (!op.outputs.empty())
        throw GraphError(fmt::format("removeOps: op {} ({}) has outputs", op.id, opName(op.kind)));
      continue;
    }
    newId[op.id] = static_cast<int>(kept.size());
    op.id = newId[op.id];
    kept.push_back(std::move(op));
  }
  ops_ = std::move(kept);
  for (Tensor& t : tensors_)
    if (t.producer >= 0) t.producer = newId[t.producer];
}

void Graph::rewriteOp(int opId, std::vector<int> inputs, Attrs attrs) {
  Op& op = ops_.at(static_cast<size_t>(opId));
  const std::string label = fmt::format("{} (op {}, rewritten)", opName(op.kind), opId);
  std::vector<const Tensor*> ins;
  for (int id : inputs) {
    if (id < 0 || id >= static_cast<int>(tensors_.size()))
      throw GraphError(fmt::format("{}: input tensor id {} does not exist", label, id));
    if (tensors_[id].producer >= opId)
      throw GraphError(
          fmt::format("{}: input '{}' is produced after the op", label, tensors_[id].name));
    ins.push_back(&tensors_[id]);
  }
  const std::vector<TensorType> types = inferOutputTypes(op.kind, ins, attrs, label);
  if (types.size() != op.outputs.size())
    throw GraphError(fmt::format("{}: {} outputs inferred, the op has {}", label, types.size(),
                                 op.outputs.size()));
  for (size_t i = 0; i < types.size(); ++i) {
    const Tensor& t = tensors_[op.outputs[i]];
    if (t.shape != types[i].shape || t.dtype != types[i].dtype)
      throw GraphError(fmt::format("{}: output '{}' would change from {}{} to {}{}", label, t.name,
                                   dtypeName(t.dtype), shapeStr(t.shape), dtypeName(types[i].dtype),
                                   shapeStr(types[i].shape)));
  }
  op.inputs = std::move(inputs);
  op.attrs = std::move(attrs);
}

}  // namespace ipu
