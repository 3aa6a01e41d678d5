// The graph IR: tensors (shape, dtype, kind), ops in program order, attributes.
//
// A Graph is a static dataflow program, as PopART builds one: one training step (forward,
// backward, optimizer update) is one graph. Tensors are SSA values except Variables (weights,
// optimizer state, running statistics), which persist across steps and are written only by
// side-effecting update ops (optimizer_update, apply_update, ema_update). Inputs are fed by host
// streams every step.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ipu_backend/ir/dtype.h"

namespace ipu {

using i64 = std::int64_t;
using Shape = std::vector<i64>;

std::string shapeStr(const Shape& s);  // "[32,56,56,64]"
i64 numElements(const Shape& s);

// Errors found while building or checking a graph (bad shapes, unknown attributes, ...).
// Messages name the op and the tensors involved.
class GraphError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class TensorKind : std::uint8_t {
  Input,       // host stream in, new data every step (images, labels, learning rate)
  Variable,    // persistent state: weights, momentum, running statistics
  Activation,  // produced by an op inside the step
};
std::string_view tensorKindName(TensorKind k);

struct Tensor {
  int id = -1;
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  TensorKind kind = TensorKind::Activation;
  int producer = -1;  // op id for activations

  i64 elements() const { return numElements(shape); }
  i64 bytes() const { return elements() * sizeOf(dtype); }
};

using AttrValue = std::variant<bool, i64, double, std::string, std::vector<i64>>;

// Op attributes, kept sorted by key so the text form is canonical.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

  bool has(const std::string& k) const { return map_.count(k) != 0; }
  void set(const std::string& k, AttrValue v) { map_[k] = std::move(v); }
  const std::map<std::string, AttrValue>& all() const { return map_; }

  i64 getInt(const std::string& k) const;
  double getFloat(const std::string& k) const;  // accepts an integer value too
  bool getBool(const std::string& k) const;
  const std::string& getString(const std::string& k) const;
  const std::vector<i64>& getInts(const std::string& k) const;
  i64 getInt(const std::string& k, i64 dflt) const { return has(k) ? getInt(k) : dflt; }
  double getFloat(const std::string& k, double dflt) const { return has(k) ? getFloat(k) : dflt; }
  bool getBool(const std::string& k, bool dflt) const { return has(k) ? getBool(k) : dflt; }

  bool operator==(const Attrs& o) const { return map_ == o.map_; }

 private:
  const AttrValue& at(const std::string& k) const;
  std::map<std::string, AttrValue> map_;
};

enum class OpKind : std::uint8_t {
  Conv2d,
  Conv2dBackwardData,
  Conv2dBackwardFilter,
  MatMul,
  BatchNormTrain,
  BatchNormInference,
  BatchNormBackward,
  Unary,
  UnaryGrad,
  Binary,
  Reduce,
  Broadcast,
  Reshape,
  Transpose,
  MaxPool,
  MaxPoolGrad,
  AvgPool,
  AvgPoolGrad,
  Softmax,
  SoftmaxGrad,
  SoftmaxCrossEntropy,
  SoftmaxCrossEntropyGrad,
  Constant,
  // One weight's optimizer step (SGD, LARS, LAMB, RMSProp, Adam; loss scaling, sharding and a
  // weight EMA as attributes), as models and the replication pass see it; compile() lowers it
  // to ordinary ops and apply_update (ipu_backend/optimizers), so no later stage sees it.
  OptimizerUpdate,
  EmaUpdate,
  // Replication (ipu_backend/replication): cross-replica collectives and the update-side ops
  // around them. The collectives and replica_chunk depend on the replica index.
  CrossReplicaReduceScatter,
  CrossReplicaAllGather,
  ReplicaChunk,  // x -> this replica's chunk of x (replicated tensor sharding of an update)
  Assign,
  Accumulate,
  // Mixed precision (appended so the kinds above keep their values).
  Cast,  // x -> x converted to attribute `dtype` (RNE)
  // The one in-place write of every optimizer: target = keep target + factor (c1 x1 + c2 x2 +
  // c3 x3) unless skip != 0 (loss-scaling overflow), rounded to the target's dtype
  // (stochastically with stochastic_rounding).
  ApplyUpdate,
  // Sum over each group of `group` consecutive replicas (batch-norm statistics that span
  // replicas, Graphcore's bn_span); its gradient is the same sum of the gradients.
  CrossReplicaSum,
  // The learning rate times a trust ratio from the sums of squares of the weight and its update
  // (LARS and LAMB, ipu_backend/optimizers).
  LarsLearningRate,  // keep last: tables indexed by kind size themselves by it
};

struct Op {
  int id = -1;
  OpKind kind = OpKind::Constant;
  std::vector<int> inputs;   // tensor ids
  std::vector<int> outputs;  // tensor ids (empty for pure side-effect ops)
  Attrs attrs;
  // Backward ops: the first output of the forward op whose gradient rule added this op (tensor
  // ids survive reordering). -1 for every other op. The pipeline pass puts a backward op on the
  // stage of its forward op (ipu_backend/compiler/pipeline.h). Not part of the text form.
  int gradientOf = -1;
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // Declares a host-fed input or a persistent variable. Names must be unique.
  int addInput(const std::string& name, Shape shape, DType dtype = DType::F32);
  int addVariable(const std::string& name, Shape shape, DType dtype = DType::F32);

  // Appends an op: checks inputs and attributes, infers output shapes (GraphError on mismatch,
  // naming the op and the shapes), creates the outputs. `outputNames` may be empty (generated
  // names) or give one name per output. Returns the op id.
  int addOp(OpKind kind, std::vector<int> inputs, Attrs attrs,
            std::vector<std::string> outputNames = {});
  // Convenience: the first output of the op just added.
  int addOp1(OpKind kind, std::vector<int> inputs, Attrs attrs, std::string outputName = "");

  // Marks a tensor to be streamed back to the host every step.
  void markOutput(int tensor);

  const Tensor& tensor(int id) const { return tensors_.at(static_cast<size_t>(id)); }
  const Op& op(int id) const { return ops_.at(static_cast<size_t>(id)); }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<int>& outputs() const { return outputs_; }
  // -1 if absent.
  int find(const std::string& name) const;
  int get(const std::string& name) const;  // throws GraphError naming the tensor

  // Consumers (op ids) of each tensor, in program order.
  std::vector<std::vector<int>> consumers() const;

  // Puts the ops in the given order (a permutation of op ids that keeps every producer before
  // its consumers; GraphError otherwise) and renumbers them; tensors keep their ids.
  void reorderOps(const std::vector<int>& order);
  // Removes the ops `drop` selects, which must have no outputs (lowered side-effect ops), and
  // renumbers the others in order; tensors keep their ids.
  void removeOps(const std::function<bool(const Op&)>& drop);
  // Gives op `op` new inputs and attributes of the same kind (compiler lowering passes). They are
  // checked like addOp's and must infer the outputs the op already has (GraphError otherwise).
  void rewriteOp(int op, std::vector<int> inputs, Attrs attrs);
  // Records that op `op` belongs to the gradient of the forward op producing `tensor`.
  void setGradientOf(int op, int tensor) { ops_.at(static_cast<size_t>(op)).gradientOf = tensor; }
  // A unique tensor name with the given stem ("conv_3", "conv_4", ...).
  std::string uniqueName(const std::string& stem) const;

 private:
  int addTensor(const std::string& name, Shape shape, DType dtype, TensorKind kind, int producer);

  std::string name_;
  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  std::vector<int> outputs_;
  std::unordered_map<std::string, int> byName_;
  mutable std::unordered_map<std::string, int> nameCounters_;
};

}  // namespace ipu
