// The op table: the text name of every OpKind, its arity, its attribute schema, whether it has
// side effects, and its shape/dtype inference. One place, so the builder, the text parser and
// the passes all agree on what an op is. Kinds registered in ipu_backend/ops (ops/op_info.h)
// answer from their OpInfo; the table and the switch in op_defs.cpp hold the kinds not yet
// moved there.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu {

enum class AttrType : std::uint8_t { Bool, Int, Float, String, Ints };

struct AttrSpec {
  std::string_view name;
  AttrType type;
  bool required;
};

// How the precision pass (compiler/mixed_precision.h) treats an op kind under a 16-bit policy.
enum class PrecisionRule : std::uint8_t {
  Compute,        // float operands enter the policy's compute dtype (the default)
  KeepF32,        // numerically fragile: every float input is cast up to f32
  DataInCompute,  // input 0 in the compute dtype; the others (parameters, statistics, and the
                  // variables behind them) stay f32: the kernel widens input 0 (batch norm)
  FollowState,    // input 1 cast to input 0's dtype; input 0's variable stays f32 (ema_update)
};

struct OpDef {
  OpKind kind;
  std::string_view name;          // text-form name, e.g. "conv2d"
  int numInputs;                  // exact arity, or -1: any (optimizer_update)
  int numOutputs;                 // 0 for side-effect-only ops
  std::vector<int> writesInputs;  // inputs updated in place (must be Variables)
  std::vector<AttrSpec> attrs;
  PrecisionRule precision = PrecisionRule::Compute;
  bool usesPartials = false;  // takes the policy's accumulator type (attribute `partials`)
};

const OpDef& opDef(OpKind kind);
const OpDef* findOpDef(std::string_view name);
inline std::string_view opName(OpKind k) {
  return opDef(k).name;
}
bool hasSideEffects(OpKind k);
// Ops whose result depends on the replica running them (a registered `replica` facet): the
// engine runs them through its Collective or with its replica index, outside the tile vertices.
bool isReplicaOp(OpKind k);
// R of a replica op: its `replicas` attribute (a cross_replica_sum not yet through the
// replication pass: its group).
i64 replicasOf(const Op& op);

// The operands of an optimizer_update: weight, gradient, learning rate, the optimizer's state
// variables (written in place, like the weight) and, with loss_scaled, the inverse loss scale and
// the overflow flag. GraphError for another op.
struct UpdateOperands {
  int weight = -1, grad = -1, lr = -1;
  std::vector<int> state;
  int inverseScale = -1, overflow = -1;
};
UpdateOperands updateOperands(const Op& op);

// An apply_update's attributes and where its optional inputs sit (-1: absent): its kernels
// (ops/apply_update.cpp) and the host fusion ending an elementwise chain read it.
struct ApplyUpdateForm {
  int k = 1;  // addends
  float keep = 0;
  std::array<float, 3> c{1, 1, 1};
  int factorInput = -1, skipInput = -1;
};
ApplyUpdateForm applyUpdateForm(const Op& op);

struct TensorType {
  Shape shape;
  DType dtype;
};

// Checks attributes against the schema and infers output types. Throws GraphError whose message
// names the op (`opLabel`, e.g. "conv2d 'stage1_unit1_conv1'"), the offending tensors and shapes.
std::vector<TensorType> inferOutputTypes(OpKind kind, const std::vector<const Tensor*>& inputs,
                                         const Attrs& attrs, const std::string& opLabel);

// Valid values of the `fn` attribute of unary / binary / reduce.
const std::vector<std::string_view>& unaryFunctionNames();
const std::vector<std::string_view>& binaryFunctionNames();
const std::vector<std::string_view>& reduceFunctionNames();

// Output height and width of an r x s window (a convolution's kernel, a pool) over x [N,H,W,C]
// with the attributes stride, pad and (optional) dilation; GraphError naming the op (`label`) for
// bad attributes or a window larger than the padded input.
struct WindowGeometry {
  i64 oh, ow;
};
WindowGeometry windowGeometry(const Shape& x, i64 r, i64 s, const Attrs& a,
                              const std::string& label);

// Numpy broadcasting of two shapes; throws GraphError naming the op and both shapes.
Shape broadcastShapes(const Shape& a, const Shape& b, const std::string& opLabel);

}  // namespace ipu
