#include "ipu_backend/ir/op_defs.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ipu_backend/ops/op_info.h"

namespace ipu {
namespace {

using A = AttrType;
// The checks registered ops use too (ops/op_info.h).
using ops::expectSameShape;
using ops::fail;
constexpr int kVariadic = -1;

const char* attrTypeName(AttrType t) {
  switch (t) {
    case A::Bool:
      return "bool";
    case A::Int:
      return "int";
    case A::Float:
      return "float";
    case A::String:
      return "string";
    case A::Ints:
      return "int list";
  }
  return "?";
}

bool attrMatches(const AttrValue& v, AttrType t) {
  switch (t) {
    case A::Bool:
      return std::holds_alternative<bool>(v);
    case A::Int:
      return std::holds_alternative<i64>(v);
    case A::Float:
      return std::holds_alternative<double>(v) || std::holds_alternative<i64>(v);
    case A::String:
      return std::holds_alternative<std::string>(v);
    case A::Ints:
      return std::holds_alternative<std::vector<i64>>(v);
  }
  return false;
}

void checkAttrs(const OpDef& def, const Attrs& attrs, const std::string& label) {
  for (const auto& [key, value] : attrs.all()) {
    auto it = std::find_if(def.attrs.begin(), def.attrs.end(),
                           [&](const AttrSpec& s) { return s.name == key; });
    if (it == def.attrs.end()) {
      std::vector<std::string> valid;
      for (const auto& s : def.attrs) valid.emplace_back(s.name);
      fail(label, fmt::format("unknown attribute '{}' (valid: {})", key, fmt::join(valid, ", ")));
    }
    if (!attrMatches(value, it->type))
      fail(label, fmt::format("attribute '{}' must be a {}", key, attrTypeName(it->type)));
  }
  for (const auto& s : def.attrs)
    if (s.required && !attrs.has(std::string(s.name)))
      fail(label,
           fmt::format("missing required attribute '{}' ({})", s.name, attrTypeName(s.type)));
}

void expectIntsLen(const Attrs& a, const char* key, size_t n, const std::string& label) {
  if (a.getInts(key).size() != n)
    fail(label, fmt::format("attribute '{}' must have {} values", key, n));
}

}  // namespace

WindowGeometry windowGeometry(const Shape& x, i64 r, i64 s, const Attrs& a,
                              const std::string& label) {
  expectIntsLen(a, "stride", 2, label);
  expectIntsLen(a, "pad", 4, label);
  const auto& st = a.getInts("stride");
  const auto& pd = a.getInts("pad");
  std::vector<i64> dl = a.has("dilation") ? a.getInts("dilation") : std::vector<i64>{1, 1};
  if (dl.size() != 2) fail(label, "attribute 'dilation' must have 2 values");
  if (st[0] < 1 || st[1] < 1 || dl[0] < 1 || dl[1] < 1)
    fail(label, "stride and dilation must be >= 1");
  for (i64 p : pd)
    if (p < 0) fail(label, "padding must be >= 0");
  i64 effR = dl[0] * (r - 1) + 1, effS = dl[1] * (s - 1) + 1;
  i64 hp = x[1] + pd[0] + pd[2], wp = x[2] + pd[1] + pd[3];
  if (hp < effR || wp < effS)
    fail(label, fmt::format("window {}x{} (dilated) is larger than the padded input {}x{} of {}",
                            effR, effS, hp, wp, shapeStr(x)));
  return {(hp - effR) / st[0] + 1, (wp - effS) / st[1] + 1};
}

// Every op kind is registered (ipu_backend/ops): the registry is the op table.
const OpDef& opDef(OpKind kind) {
  if (const ops::OpInfo* info = ops::find(kind)) return info->def;
  throw GraphError(fmt::format("internal: op kind {} is not registered", static_cast<int>(kind)));
}

const OpDef* findOpDef(std::string_view name) {
  const ops::OpInfo* info = ops::find(name);
  return info ? &info->def : nullptr;
}

bool isReplicaOp(OpKind k) {
  const ops::OpInfo* info = ops::find(k);
  return info && info->replica;
}

i64 replicasOf(const Op& op) {
  if (op.kind == OpKind::CrossReplicaSum)
    return op.attrs.getInt("replicas", op.attrs.getInt("group"));
  return op.attrs.getInt("replicas");
}

UpdateOperands updateOperands(const Op& op) {
  if (op.kind != OpKind::OptimizerUpdate)
    throw GraphError(
        fmt::format("internal: op {} ({}) is not an optimizer_update", op.id, opName(op.kind)));
  UpdateOperands u;
  u.weight = op.inputs[0];
  u.grad = op.inputs[1];
  u.lr = op.inputs[2];
  size_t end = op.inputs.size();
  if (op.attrs.getBool("loss_scaled", false)) {
    u.inverseScale = op.inputs[end - 2];
    u.overflow = op.inputs[end - 1];
    end -= 2;
  }
  u.state.assign(op.inputs.begin() + 3, op.inputs.begin() + static_cast<long>(end));
  return u;
}

ApplyUpdateForm applyUpdateForm(const Op& op) {
  ApplyUpdateForm u;
  u.k = static_cast<int>(op.attrs.getInt("addends", 1));
  u.keep = static_cast<float>(op.attrs.getFloat("keep", 0.0));
  static const char* const kCoefficient[] = {"c1", "c2", "c3"};
  for (int i = 0; i < 3; ++i) u.c[i] = static_cast<float>(op.attrs.getFloat(kCoefficient[i], 1.0));
  int next = 1 + u.k;
  if (op.attrs.getBool("factor", false)) u.factorInput = next++;
  if (next < static_cast<int>(op.inputs.size())) u.skipInput = next;
  return u;
}

bool hasSideEffects(OpKind k) {
  return !opDef(k).writesInputs.empty();
}

const std::vector<std::string_view>& unaryFunctionNames() {
  static const std::vector<std::string_view> v = {"identity", "relu",  "neg",    "exp",     "log",
                                                  "sqrt",     "rsqrt", "square", "sigmoid", "tanh",
                                                  "gelu",     "swish", "scale"};
  return v;
}
const std::vector<std::string_view>& binaryFunctionNames() {
  static const std::vector<std::string_view> v = {"add", "sub", "mul", "div", "max", "min"};
  return v;
}
const std::vector<std::string_view>& reduceFunctionNames() {
  static const std::vector<std::string_view> v = {"sum", "mean", "max"};
  return v;
}

Shape broadcastShapes(const Shape& a, const Shape& b, const std::string& label) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    i64 da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    i64 db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(label, fmt::format("shapes {} and {} do not broadcast (dimension {}: {} vs {})",
                              shapeStr(a), shapeStr(b), i, da, db));
    out[i] = std::max(da, db);
  }
  return out;
}

std::vector<TensorType> inferOutputTypes(OpKind kind, const std::vector<const Tensor*>& in,
                                         const Attrs& a, const std::string& label) {
  const OpDef& def = opDef(kind);
  if (def.numInputs != kVariadic && static_cast<int>(in.size()) != def.numInputs)
    fail(label, fmt::format("expects {} inputs, got {}", def.numInputs, in.size()));
  checkAttrs(def, a, label);
  if (const ops::OpInfo* info = ops::find(kind)) {
    for (size_t i = 0; i < in.size(); ++i) {
      const auto& ok = ops::inputDTypesOf(*info, i);
      if (std::find(ok.begin(), ok.end(), in[i]->dtype) == ok.end()) {
        std::vector<std::string_view> names;
        for (DType t : ok) names.push_back(dtypeName(t));
        fail(label, fmt::format("input {} '{}' is {}; expected one of {}", i, in[i]->name,
                                dtypeName(in[i]->dtype), fmt::join(names, ", ")));
      }
    }
    return info->infer(in, a, label);
  }
  fail(label, "internal: not a registered op kind");
}

}  // namespace ipu
