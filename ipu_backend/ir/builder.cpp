#include "ipu_backend/ir/builder.h"

#include <numeric>

#include <fmt/format.h>

namespace ipu {

Attrs convAttrs(const Conv2dOptions& o) {
  return Attrs{{"stride", std::vector<i64>{o.strideH, o.strideW}},
               {"pad", std::vector<i64>{o.padTop, o.padLeft, o.padBottom, o.padRight}},
               {"dilation", std::vector<i64>{o.dilH, o.dilW}},
               {"groups", o.groups}};
}

Attrs poolAttrs(const Pool2dOptions& o) {
  return Attrs{{"kernel", std::vector<i64>{o.kernelH, o.kernelW}},
               {"stride", std::vector<i64>{o.strideH, o.strideW}},
               {"pad", std::vector<i64>{o.padTop, o.padLeft, o.padBottom, o.padRight}}};
}

int Builder::conv2d(int x, int w, const Conv2dOptions& o, const std::string& name) {
  return g_.addOp1(OpKind::Conv2d, {x, w}, convAttrs(o), name);
}

int Builder::matmul(int a, int b, bool ta, bool tb, const std::string& name) {
  Attrs at;
  if (ta) at.set("trans_a", true);
  if (tb) at.set("trans_b", true);
  return g_.addOp1(OpKind::MatMul, {a, b}, at, name);
}

int Builder::dense(int x, int w, int bias, const std::string& name) {
  int y = matmul(x, w, false, false, name.empty() ? "" : name + "/matmul");
  return add(y, bias, name);
}

BatchNormOutputs Builder::batchNormTrain(int x, int gamma, int beta, double eps,
                                         const std::string& name) {
  std::vector<std::string> names;
  if (!name.empty()) names = {name, name + "/mean", name + "/var"};
  int op = g_.addOp(OpKind::BatchNormTrain, {x, gamma, beta}, Attrs{{"eps", eps}}, names);
  const auto& outs = g_.op(op).outputs;
  return {outs[0], outs[1], outs[2]};
}

BatchNormOutputs Builder::batchNormTrainAcrossReplicas(int x, int gamma, int beta, double eps,
                                                       i64 group, const std::string& name) {
  if (group < 1)
    throw GraphError(fmt::format("batch norm '{}': replica group {} must be >= 1", name, group));
  if (group == 1) return batchNormTrain(x, gamma, beta, eps, name);
  const Tensor& xt = g_.tensor(x);
  if (xt.shape.size() < 2)
    throw GraphError(fmt::format("batch norm '{}': input '{}' {} needs a channel axis", name,
                                 xt.name, shapeStr(xt.shape)));
  const i64 c = xt.shape.back();
  const double count = static_cast<double>(xt.elements() / c) * static_cast<double>(group);
  std::vector<i64> rows(xt.shape.size() - 1);
  std::iota(rows.begin(), rows.end(), 0);
  auto n = [&](const char* suffix) { return name.empty() ? std::string() : name + suffix; };
  auto groupSum = [&](int t, const char* suffix) {
    return g_.addOp1(OpKind::CrossReplicaSum, {t}, Attrs{{"group", group}}, n(suffix));
  };
  const int mean =
      scale(groupSum(reduceSum(x, rows, false, n("/sum")), "/group_sum"), 1.0 / count, n("/mean"));
  const int centred = sub(x, mean, n("/centred"));
  const int sumSq = reduceSum(mul(centred, centred, n("/centred_sq")), rows, false, n("/sum_sq"));
  const int var = scale(groupSum(sumSq, "/group_sum_sq"), 1.0 / count, n("/var"));
  const int invStd = unary("rsqrt", add(var, constant({c}, eps)), n("/inv_std"));
  const int y = add(mul(centred, mul(invStd, gamma)), beta, name);
  return {y, mean, var};
}

int Builder::batchNormInference(int x, int gamma, int beta, int mean, int var, double eps,
                                const std::string& name) {
  return g_.addOp1(OpKind::BatchNormInference, {x, gamma, beta, mean, var}, Attrs{{"eps", eps}},
                   name);
}

int Builder::unary(const std::string& fn, int x, const std::string& name, double alpha) {
  Attrs a{{"fn", fn}};
  if (fn == "scale") a.set("alpha", alpha);
  return g_.addOp1(OpKind::Unary, {x}, a, name);
}

int Builder::binary(const std::string& fn, int a, int b, const std::string& name) {
  return g_.addOp1(OpKind::Binary, {a, b}, Attrs{{"fn", fn}}, name);
}

int Builder::reduce(const std::string& fn, int x, std::vector<i64> axes, bool keep,
                    const std::string& name) {
  Attrs a{{"fn", fn}, {"axes", std::move(axes)}};
  if (keep) a.set("keep_dims", true);
  return g_.addOp1(OpKind::Reduce, {x}, a, name);
}

int Builder::broadcast(int x, Shape shape, const std::string& name) {
  return g_.addOp1(OpKind::Broadcast, {x}, Attrs{{"shape", std::move(shape)}}, name);
}

int Builder::reshape(int x, Shape shape, const std::string& name) {
  return g_.addOp1(OpKind::Reshape, {x}, Attrs{{"shape", std::move(shape)}}, name);
}

int Builder::transpose(int x, std::vector<i64> perm, const std::string& name) {
  return g_.addOp1(OpKind::Transpose, {x}, Attrs{{"perm", std::move(perm)}}, name);
}

int Builder::maxPool(int x, const Pool2dOptions& o, const std::string& name) {
  return g_.addOp1(OpKind::MaxPool, {x}, poolAttrs(o), name);
}

int Builder::avgPool(int x, const Pool2dOptions& o, const std::string& name) {
  Attrs a = poolAttrs(o);
  if (o.countIncludePad) a.set("count_include_pad", true);
  return g_.addOp1(OpKind::AvgPool, {x}, a, name);
}

int Builder::softmax(int x, const std::string& name) {
  return g_.addOp1(OpKind::Softmax, {x}, Attrs{}, name);
}

int Builder::softmaxCrossEntropy(int logits, int labels, double smoothing,
                                 const std::string& name) {
  Attrs a;
  if (smoothing != 0.0) a.set("smoothing", smoothing);
  return g_.addOp1(OpKind::SoftmaxCrossEntropy, {logits, labels}, a, name);
}

int Builder::constant(Shape shape, double value, DType dt, const std::string& name) {
  Attrs a{{"shape", std::move(shape)}, {"value", value}};
  if (dt != DType::F32) a.set("dtype", std::string(dtypeName(dt)));
  return g_.addOp1(OpKind::Constant, {}, a, name);
}

int Builder::cast(int x, DType dt, const std::string& name) {
  if (g_.tensor(x).dtype == dt) return x;
  return g_.addOp1(OpKind::Cast, {x}, Attrs{{"dtype", std::string(dtypeName(dt))}}, name);
}

}  // namespace ipu
