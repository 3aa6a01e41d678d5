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
using ops::expectRank;
using ops::expectSameShape;
using ops::fail;
constexpr int kVariadic = -1;

// `partials`: accumulator type of conv / matmul partial sums ("f32" default, or "f16"), set by
// the precision pass.
const std::vector<AttrSpec> kConvAttrs = {{"stride", A::Ints, true},
                                          {"pad", A::Ints, true},
                                          {"dilation", A::Ints, true},
                                          {"groups", A::Int, true},
                                          {"partials", A::String, false}};

std::vector<AttrSpec> with(std::vector<AttrSpec> base, std::vector<AttrSpec> extra) {
  base.insert(base.end(), extra.begin(), extra.end());
  return base;
}

// The op table, one entry per op as it reads best (kept out of clang-format's layout).
// clang-format off
const std::vector<OpDef>& table() {
  static const std::vector<OpDef> defs = {
      {OpKind::Conv2d, "conv2d", 2, 1, {}, kConvAttrs,
       PrecisionRule::Compute, /*usesPartials=*/true},
      {OpKind::Conv2dBackwardData, "conv2d_backward_data", 2, 1, {},
       with(kConvAttrs, {{"input_shape", A::Ints, true}})},
      {OpKind::Conv2dBackwardFilter, "conv2d_backward_filter", 2, 1, {},
       with(kConvAttrs, {{"kernel", A::Ints, true}})},
      {OpKind::MatMul, "matmul", 2, 1, {},
       {{"trans_a", A::Bool, false},
        {"trans_b", A::Bool, false},
        {"partials", A::String, false}},
       PrecisionRule::Compute, /*usesPartials=*/true},
      {OpKind::BatchNormTrain, "batch_norm_train", 3, 3, {}, {{"eps", A::Float, true}},
       PrecisionRule::DataInCompute},
      {OpKind::BatchNormInference, "batch_norm_inference", 5, 1, {}, {{"eps", A::Float, true}},
       PrecisionRule::DataInCompute},
      {OpKind::BatchNormBackward, "batch_norm_backward", 5, 3, {}, {{"eps", A::Float, true}}},
  };
  return defs;
}
// clang-format on

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

const OpDef& opDef(OpKind kind) {
  if (const ops::OpInfo* info = ops::find(kind)) return info->def;
  const auto& t = table();
  for (const auto& d : t)
    if (d.kind == kind) return d;
  throw GraphError("internal: op kind missing from the op table");
}

const OpDef* findOpDef(std::string_view name) {
  if (const ops::OpInfo* info = ops::find(name)) return &info->def;
  for (const auto& d : table())
    if (d.name == name) return &d;
  return nullptr;
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
  for (size_t i = 0; i < in.size(); ++i) {
    // Kinds not yet in the registry (whose OpInfo declares its inputs' dtypes) take floats.
    if (in[i]->dtype == DType::I32)
      fail(label,
           fmt::format("input '{}' is i32; this op takes floating-point tensors", in[i]->name));
  }

  if (a.has("partials")) {
    auto pt = parseDType(a.getString("partials"));
    if (!pt || (*pt != DType::F32 && *pt != DType::F16))
      fail(label, fmt::format("partials type '{}' is not f32 or f16", a.getString("partials")));
  }

  switch (kind) {
    case OpKind::Conv2d: {
      const Tensor &x = *in[0], &w = *in[1];
      expectRank(x, 4, label, "input [N,H,W,C]");
      expectRank(w, 4, label, "weight [K,R,S,C/G]");
      i64 g = a.getInt("groups");
      if (g < 1 || x.shape[3] % g != 0 || w.shape[0] % g != 0)
        fail(label, fmt::format("groups={} must divide input channels {} and output channels {}", g,
                                x.shape[3], w.shape[0]));
      if (w.shape[3] * g != x.shape[3])
        fail(label, fmt::format("weight '{}' {} expects {} input channels per group, input '{}' "
                                "{} has {} channels for {} groups",
                                w.name, shapeStr(w.shape), w.shape[3], x.name, shapeStr(x.shape),
                                x.shape[3], g));
      auto geo = windowGeometry(x.shape, w.shape[1], w.shape[2], a, label);
      return {{{x.shape[0], geo.oh, geo.ow, w.shape[0]}, x.dtype}};
    }
    case OpKind::Conv2dBackwardData: {
      const Tensor &dy = *in[0], &w = *in[1];
      expectRank(dy, 4, label, "gradient [N,OH,OW,K]");
      expectRank(w, 4, label, "weight [K,R,S,C/G]");
      const auto& xs = a.getInts("input_shape");
      if (xs.size() != 4) fail(label, "attribute 'input_shape' must have 4 values");
      auto geo = windowGeometry(xs, w.shape[1], w.shape[2], a, label);
      if (dy.shape != Shape{xs[0], geo.oh, geo.ow, w.shape[0]})
        fail(label, fmt::format("gradient '{}' {} does not match the output {} of input {}",
                                dy.name, shapeStr(dy.shape),
                                shapeStr({xs[0], geo.oh, geo.ow, w.shape[0]}), shapeStr(xs)));
      return {{xs, dy.dtype}};
    }
    case OpKind::Conv2dBackwardFilter: {
      const Tensor &x = *in[0], &dy = *in[1];
      expectRank(x, 4, label, "input [N,H,W,C]");
      expectRank(dy, 4, label, "gradient [N,OH,OW,K]");
      const auto& ks = a.getInts("kernel");
      if (ks.size() != 2) fail(label, "attribute 'kernel' must have 2 values");
      i64 g = a.getInt("groups");
      if (g < 1 || x.shape[3] % g != 0 || dy.shape[3] % g != 0)
        fail(label, "groups must divide input and output channels");
      auto geo = windowGeometry(x.shape, ks[0], ks[1], a, label);
      if (dy.shape != Shape{x.shape[0], geo.oh, geo.ow, dy.shape[3]})
        fail(label, fmt::format("gradient '{}' {} does not match input '{}' {}", dy.name,
                                shapeStr(dy.shape), x.name, shapeStr(x.shape)));
      return {{{dy.shape[3], ks[0], ks[1], x.shape[3] / g}, x.dtype}};
    }
    case OpKind::MatMul: {
      const Tensor &x = *in[0], &y = *in[1];
      if (x.shape.size() < 2 || y.shape.size() < 2)
        fail(label, fmt::format("operands must have rank >= 2, got '{}' {} and '{}' {}", x.name,
                                shapeStr(x.shape), y.name, shapeStr(y.shape)));
      bool ta = a.getBool("trans_a", false), tb = a.getBool("trans_b", false);
      size_t ra = x.shape.size(), rb = y.shape.size();
      i64 m = ta ? x.shape[ra - 1] : x.shape[ra - 2];
      i64 k = ta ? x.shape[ra - 2] : x.shape[ra - 1];
      i64 kb = tb ? y.shape[rb - 1] : y.shape[rb - 2];
      i64 n = tb ? y.shape[rb - 2] : y.shape[rb - 1];
      if (k != kb)
        fail(label,
             fmt::format("contraction dimensions differ: '{}' {} gives K={}, '{}' {} gives "
                         "K={} (trans_a={}, trans_b={})",
                         x.name, shapeStr(x.shape), k, y.name, shapeStr(y.shape), kb, ta, tb));
      Shape batch(x.shape.begin(), x.shape.end() - 2);
      if (rb > 2 && Shape(y.shape.begin(), y.shape.end() - 2) != batch)
        fail(label, fmt::format("batch dimensions of '{}' {} and '{}' {} must match (or the "
                                "second operand must be rank 2)",
                                x.name, shapeStr(x.shape), y.name, shapeStr(y.shape)));
      Shape out = batch;
      out.push_back(m);
      out.push_back(n);
      return {{out, x.dtype}};
    }
    case OpKind::BatchNormTrain:
    case OpKind::BatchNormInference:
    case OpKind::BatchNormBackward: {
      const Tensor& x = *in[0];
      if (x.shape.size() < 2) fail(label, "input must have rank >= 2 (channels innermost)");
      i64 c = x.shape.back();
      auto expectC = [&](const Tensor& t) {
        if (t.shape != Shape{c})
          fail(label, fmt::format("'{}' {} must have shape [{}] (channels of '{}' {})", t.name,
                                  shapeStr(t.shape), c, x.name, shapeStr(x.shape)));
      };
      if (kind == OpKind::BatchNormBackward) {
        expectSameShape(x, *in[1], label);
        for (int i = 2; i < 5; ++i) expectC(*in[i]);
        return {{x.shape, x.dtype}, {{c}, DType::F32}, {{c}, DType::F32}};
      }
      for (size_t i = 1; i < in.size(); ++i) expectC(*in[i]);
      if (kind == OpKind::BatchNormTrain)
        return {{x.shape, x.dtype}, {{c}, DType::F32}, {{c}, DType::F32}};
      return {{x.shape, x.dtype}};
    }
    default:  // registered kinds (ipu_backend/ops) returned above
      break;
  }
  fail(label, "internal: unhandled op kind");
}

}  // namespace ipu
