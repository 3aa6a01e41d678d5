// A typed builder over Graph for model code: one call per op, arguments named as in the
// frameworks users know, shape checks at build time (GraphError names the op and the shapes).
#pragma once

#include <string>

#include "ipu_backend/ir/graph.h"

namespace ipu {

struct Conv2dOptions {
  i64 strideH = 1, strideW = 1;
  i64 padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  i64 dilH = 1, dilW = 1;
  i64 groups = 1;
  // Symmetric "same"-style padding for odd kernels at stride s: pad = dil*(r-1)/2.
  static Conv2dOptions make(i64 stride, i64 pad, i64 groups = 1, i64 dilation = 1) {
    Conv2dOptions o;
    o.strideH = o.strideW = stride;
    o.padTop = o.padLeft = o.padBottom = o.padRight = pad;
    o.dilH = o.dilW = dilation;
    o.groups = groups;
    return o;
  }
};

struct Pool2dOptions {
  i64 kernelH = 1, kernelW = 1;
  i64 strideH = 1, strideW = 1;
  i64 padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  bool countIncludePad = false;
  static Pool2dOptions make(i64 kernel, i64 stride, i64 pad) {
    Pool2dOptions o;
    o.kernelH = o.kernelW = kernel;
    o.strideH = o.strideW = stride;
    o.padTop = o.padLeft = o.padBottom = o.padRight = pad;
    return o;
  }
};

struct BatchNormOutputs {
  int y, mean, var;
};

class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}
  Graph& graph() { return g_; }

  int input(const std::string& name, Shape shape, DType dt = DType::F32) {
    return g_.addInput(name, std::move(shape), dt);
  }
  int variable(const std::string& name, Shape shape, DType dt = DType::F32) {
    return g_.addVariable(name, std::move(shape), dt);
  }

  int conv2d(int x, int w, const Conv2dOptions& o, const std::string& name = "");
  int matmul(int a, int b, bool transA = false, bool transB = false, const std::string& name = "");
  // x [M, K] x w [K, N] + bias [N]
  int dense(int x, int w, int bias, const std::string& name = "");
  BatchNormOutputs batchNormTrain(int x, int gamma, int beta, double eps,
                                  const std::string& name = "");
  // Training batch norm whose statistics span `group` replicas (Graphcore's bn_span = group x
  // micro-batch): per-channel sums go through cross_replica_sum, in two passes (mean, then the
  // centred squares) as the single-replica op computes them. Built from reduce / binary / unary
  // ops, so autodiff gives the synchronised backward. group 1 is batchNormTrain itself.
  BatchNormOutputs batchNormTrainAcrossReplicas(int x, int gamma, int beta, double eps, i64 group,
                                                const std::string& name = "");
  int batchNormInference(int x, int gamma, int beta, int mean, int var, double eps,
                         const std::string& name = "");
  int unary(const std::string& fn, int x, const std::string& name = "", double alpha = 1.0);
  int relu(int x, const std::string& name = "") { return unary("relu", x, name); }
  int scale(int x, double alpha, const std::string& name = "") {
    return unary("scale", x, name, alpha);
  }
  int binary(const std::string& fn, int a, int b, const std::string& name = "");
  int add(int a, int b, const std::string& name = "") { return binary("add", a, b, name); }
  int sub(int a, int b, const std::string& name = "") { return binary("sub", a, b, name); }
  int mul(int a, int b, const std::string& name = "") { return binary("mul", a, b, name); }
  int reduce(const std::string& fn, int x, std::vector<i64> axes, bool keepDims = false,
             const std::string& name = "");
  int reduceSum(int x, std::vector<i64> axes, bool keep = false, const std::string& name = "") {
    return reduce("sum", x, std::move(axes), keep, name);
  }
  int reduceMean(int x, std::vector<i64> axes, bool keep = false, const std::string& name = "") {
    return reduce("mean", x, std::move(axes), keep, name);
  }
  // [N,H,W,C] -> [N,C]
  int globalAvgPool(int x, const std::string& name = "") {
    return reduceMean(x, {1, 2}, false, name);
  }
  int broadcast(int x, Shape shape, const std::string& name = "");
  int reshape(int x, Shape shape, const std::string& name = "");
  int transpose(int x, std::vector<i64> perm, const std::string& name = "");
  int maxPool(int x, const Pool2dOptions& o, const std::string& name = "");
  int avgPool(int x, const Pool2dOptions& o, const std::string& name = "");
  int softmax(int x, const std::string& name = "");
  // Per-sample loss [N].
  int softmaxCrossEntropy(int logits, int labels, double smoothing = 0.0,
                          const std::string& name = "");
  int constant(Shape shape, double value, DType dt = DType::F32, const std::string& name = "");
  // x converted to dt (round to nearest even); x itself when it already is dt.
  int cast(int x, DType dt, const std::string& name = "");

 private:
  Graph& g_;
};

// Attribute helpers shared by the builder, autodiff and the parser tests.
Attrs convAttrs(const Conv2dOptions& o);
Attrs poolAttrs(const Pool2dOptions& o);

}  // namespace ipu
