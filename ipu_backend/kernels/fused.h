// Fused kernels: one host kernel per IR op over whole tensors, used by the `fused` engine.
// oneDNN primitives for convolution, matmul, inference batch norm and pooling; vectorised OpenMP
// loops for the rest (one threading runtime: the OpenMP that oneDNN itself uses).
//
// Every kernel object is built once, when the engine is prepared, from its shape: it creates
// its oneDNN primitive(s) and allocates any scratch/workspace there, so run() allocates nothing
// (fresh pages are very expensive on the hosts we run on). run() may be called any number of
// times. Semantics, layouts and argument meanings are exactly those of reference.h, applied to
// the whole tensor (out = all elements, red = the whole reduction); results agree with the
// reference kernels within f32 rounding.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::fused {

// Number of threads the fused kernels use (OpenMP); set once at start-up.
void setNumThreads(int threads);
int numThreads();

// Convolution algorithm of the fused conv kernels. Auto: the kernel rule of the CPU's ISA
// (kernelRule below); Direct: always direct; OwnWinograd: our Winograd F(4x4, 3x3) for the 3x3
// convolutions the rule's shape test admits, on any ISA (to test and time it on an AVX-512
// host). Takes effect for kernels created afterwards.
enum class ConvAlgorithm { Auto, Direct, OwnWinograd };
void setConvAlgorithm(ConvAlgorithm a);
ConvAlgorithm convAlgorithm();

// The instruction set the fused kernels are chosen for: oneDNN's effective ISA, which
// ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) limits, read once per process. AMX counts as AVX-512
// (no f32 kernel of its own).
enum class KernelIsa { Avx512, Avx2, Older };
KernelIsa kernelIsa();
const char* isaName(KernelIsa isa);

// How the f32 3x3 stride-1 convolutions with >= 64 input and output channels and outputs of at
// least 7x7 run (every pass): oneDNN's Winograd F(4x4, 3x3) (AVX-512 only), ours (winograd.h,
// any ISA with its batched GEMMs in oneDNN), or oneDNN's direct kernels.
enum class Conv3x3Kernel { OnednnWinograd, OwnWinograd, Direct };

// The per-ISA kernel rule: which algorithm each convolution and loop takes, a function of the
// ISA (and of the ConvAlgorithm override) alone, so it is fixed when the kernels are created and
// the same in every process on the same ISA. AVX-512: oneDNN's Winograd (faster there than
// ours). AVX2: ours (oneDNN has no Winograd at AVX2). Older: direct. The pointwise / strided /
// im2col matmul routes of fused_onednn.cpp are the same on every ISA. reluMaskLoops: the vector
// code the batch-norm + add + ReLU mask loops were compiled with ("avx512", "avx2" or "scalar":
// chosen by -march, see docs/ARCHITECTURE.md "Instruction sets").
// Three more routes are AVX2's alone (oneDNN's AVX2 direct kernels lose to its AVX2 GEMM there;
// measured in docs/PERFORMANCE.md; on AVX-512 the direct kernels hold, so it keeps its rule):
//   smallImagePointwiseMatMul  1x1 stride-1 forwards and data gradients onto images of <= 14x14
//                              and weight gradients over images of <= 28x28 run as matmuls at
//                              any batch (not only up to the 4096-pixel bound of every ISA);
//   wideWeightGradMatMul       a pointwise (or strided pointwise) weight gradient with C < K as
//                              dW^T = x^T dy and a transpose (the GEMM's N the larger of C and
//                              K: 1.3-1.8x faster);
//   stride2Conv3x3Im2col       3x3 stride-2 forwards and weight gradients (ResNet-50's
//                              downsampling 3x3s) as im2col + matmul over blocks of output pixels.
struct KernelRule {
  KernelIsa isa = KernelIsa::Avx512;
  Conv3x3Kernel conv3x3 = Conv3x3Kernel::OnednnWinograd;
  const char* reluMaskLoops = "scalar";
  bool smallImagePointwiseMatMul = false;
  bool wideWeightGradMatMul = false;
  bool stride2Conv3x3Im2col = false;
};
KernelRule kernelRule(KernelIsa isa, ConvAlgorithm algorithm);
// The ISA whose rule the kernels created afterwards follow: the CPU's (std::nullopt, the
// default) or a given one, so that tests and benchmarks run one ISA's routes on another host
// (the AVX2 rule's on an AVX-512 one: its routes run on any ISA).
void setRuleIsa(std::optional<KernelIsa> isa);
// The rule the kernels created now follow: kernelRule(the rule's ISA, convAlgorithm()).
KernelRule activeKernelRule();
// One line, e.g. "isa avx2: conv3x3 stride 1 = winograd F(4x4,3x3) ours + oneDNN batched
// matmul; pointwise <= 4096 pixels = matmul; ...".
std::string describe(const KernelRule& rule);

// Convolutions over activations and weights stored as `t` (f32, or bf16 where
// bf16PrimitivesAvailable(): accumulated in f32, each result rounded to bf16 once). One kernel
// per pass for both types; the algorithm it picks (oneDNN primitive, or a matmul over pointwise,
// im2col or strided-pointwise pixels) depends on the shape and the type (fused_onednn.cpp).
// Pointers are to data of type `t`.
class Conv2dForward {
 public:
  explicit Conv2dForward(const Conv2dShape& s, ElementType t = ElementType::F32);
  ~Conv2dForward();
  void run(const void* x, const void* w, void* y);  // [N,H,W,C] x [K,R,S,C/G] -> [N,OH,OW,K]
  // oneDNN's name of the implementation, e.g. "brgconv:avx512_core", "jit_wino_4x3:avx512_core".
  std::string implementation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Conv2dBackwardData {
 public:
  explicit Conv2dBackwardData(const Conv2dShape& s, ElementType t = ElementType::F32);
  ~Conv2dBackwardData();
  void run(const void* dy, const void* w, void* dx);
  std::string implementation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Conv2dBackwardFilter {
 public:
  explicit Conv2dBackwardFilter(const Conv2dShape& s, ElementType t = ElementType::F32);
  ~Conv2dBackwardFilter();
  void run(const void* x, const void* dy, void* dw);
  std::string implementation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// C = op(A) x op(B), every operand stored as `t` (bf16: accumulated in f32, rounded once).
class MatMul {
 public:
  explicit MatMul(const MatMulShape& s, ElementType t = ElementType::F32);
  ~MatMul();
  void run(const void* a, const void* b, void* c);
  // Whether run() copies A or B into oneDNN's blocked layout first (f32 with many rows sharing
  // the packed operand: the same products, faster).
  bool packsOperands() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Training-mode batch norm over x viewed as [rows, C]: batch statistics (biased variance).
// OpenMP loops, not oneDNN (batch_norm.cpp: a pass over memory fewer). With
// `BatchNormRelu::kFused`, y = relu(batch norm(x)) in the same pass, and run() also writes
// `workspace` (workspaceBytes(): the per-channel map y = x * a + b, from which the fused
// backward recomputes the ReLU's decisions); without it, workspace is unused.
class BatchNormForwardTraining {
 public:
  BatchNormForwardTraining(i64 rows, i64 c, float eps, BatchNormRelu relu = BatchNormRelu::kNone);
  ~BatchNormForwardTraining();
  void run(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* var,
           void* workspace = nullptr);
  std::size_t workspaceBytes() const;
  // The statistics and the map y = x * a + b (affine: a[C], then b[C]) without writing y, for a
  // consumer that applies the map itself (batchNormAddRelu).
  void runStatistics(const float* x, const float* gamma, const float* beta, float* mean, float* var,
                     float* affine);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// out = relu(x * a + b + other) over [rows, C], with `affine` from runStatistics: a training
// batch norm's normalisation, a residual add and its ReLU in one pass, bit-identical to the
// three ops. With `otherAffine` (a', b'), other is normalised too: relu(x * a + b + (other *
// a' + b')), a projection shortcut's batch norm. With `reluBits` (rows * C / 8 bytes,
// C % 16 == 0), it also writes the ReLU's decisions (out > 0) as bits for addReluBackwardBits.
void batchNormAddRelu(const float* x, const float* affine, const float* other,
                      const float* otherAffine, float* out, i64 rows, i64 c,
                      std::uint8_t* reluBits = nullptr);

class BatchNormForwardInference {
 public:
  BatchNormForwardInference(i64 rows, i64 c, float eps, BatchNormRelu relu = BatchNormRelu::kNone);
  ~BatchNormForwardInference();
  void run(const float* x, const float* gamma, const float* beta, const float* mean,
           const float* var, float* y);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Backward of training-mode batch norm: dx, dgamma (= sumDyXhat), dbeta (= sumDy). With
// `BatchNormRelu::kFused`, dy is the gradient of relu(batch norm(x)) and `workspace` what the
// fused forward wrote: the ReLU backward happens inside the same pass.
// With kSwish, dy may be given per sample as dy' * scale + shift, scale and shift [N, C] for
// samples of rowsPerSample rows (EfficientNet's squeeze-excitation gradient: dy' the scaled
// tensor's gradient, shift the pooling's): each product and sum rounded as the separate ops
// round them, the same bits as a dy computed first.
struct PerSampleDy {
  const float* scale = nullptr;
  const float* shift = nullptr;
  i64 rowsPerSample = 0;
};

class BatchNormBackward {
 public:
  BatchNormBackward(i64 rows, i64 c, float eps, BatchNormRelu relu = BatchNormRelu::kNone);
  ~BatchNormBackward();
  void run(const float* x, const float* dy, const float* gamma, const float* mean, const float* var,
           float* dx, float* dgamma, float* dbeta, const void* workspace = nullptr,
           const PerSampleDy& perSample = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class MaxPoolForward {
 public:
  explicit MaxPoolForward(const Pool2dShape& s);
  ~MaxPoolForward();
  void run(const float* x, float* y);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Recomputes each window's argmax (its first maximum, as the reference) from x: the IR carries
// no opaque workspaces. OpenMP loops over images (max_pool_backward.cpp), not oneDNN's
// zero-fill + scatter: dx is zeroed row by row just before its windows scatter into it.
class MaxPoolBackward {
 public:
  explicit MaxPoolBackward(const Pool2dShape& s);
  ~MaxPoolBackward();
  void run(const float* x, const float* dy, float* dx);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class AvgPoolForward {
 public:
  explicit AvgPoolForward(const Pool2dShape& s);
  ~AvgPoolForward();
  void run(const float* x, float* y);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class AvgPoolBackward {
 public:
  explicit AvgPoolBackward(const Pool2dShape& s);
  ~AvgPoolBackward();
  void run(const float* dy, float* dx);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GELU in BERT's tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), over `count`
// elements: oneDNN's eltwise_gelu_tanh primitives (vectorised, threaded), forward y = gelu(x)
// and backward dx = dy * gelu'(x) from x.
class GeluTanh {
 public:
  explicit GeluTanh(i64 count);
  ~GeluTanh();
  void forward(const float* x, float* y);
  void backward(const float* x, const float* dy, float* dx);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- loops (stateless; whole tensors) ------------------------------------------------------
void unary(UnaryKind kind, float alpha, const float* x, float* y, i64 count);
void unaryGrad(UnaryKind kind, float alpha, const float* x, const float* dy, float* dx, i64 count);
void binary(BinaryKind kind, const BroadcastShape& s, const float* a, const float* b, float* y);
// The same on bf16 operands (their bits): computed in f32, rounded to nearest even, the bits of
// binary() on the widened operands rounded afterwards.
void binaryBf16(BinaryKind kind, const BroadcastShape& s, const std::uint16_t* a,
                const std::uint16_t* b, std::uint16_t* y);
// sum(x^2) over `count` elements in one read: per-thread double partials, added in thread order
// (deterministic for a thread count).
float sumOfSquares(const float* x, i64 count);
// Serial loops over one chunk of same-shape operands (the caller parallelises over chunks):
// the 16-bit elementwise path widens a chunk, computes with these and rounds it back.
void unaryChunk(UnaryKind kind, float alpha, const float* x, float* y, i64 n);
void unaryGradChunk(UnaryKind kind, float alpha, const float* x, const float* dy, float* dx, i64 n);
void binaryChunk(BinaryKind kind, const float* a, const float* b, float* y, i64 n);
// y = relu(a + b) over `count` elements (same shapes): a residual add and its ReLU in one pass.
void addRelu(const float* a, const float* b, float* y, i64 count);
// dx = (a + b) * relu'(x) over `count` elements (same shapes): the sum of two gradients and the
// ReLU backward that reads it in one pass (the gradient at a residual block's input).
void addReluBackward(const float* a, const float* b, const float* x, float* dx, i64 count);
// The same with the ReLU's decisions as bits (bit i of the little-endian words: x[i] > 0, as
// batchNormAddRelu writes them): reads 1/32 of what x is. count % 16 == 0.
void addReluBackwardBits(const float* a, const float* b, const std::uint8_t* reluBits, float* dx,
                         i64 count);
void reduce(ReduceKind kind, const ReduceShape& s, const float* x, float* y);
// The same on bf16 x (its bits), widened as read: reduce()'s sums in its order, into f32 y.
// Only where reduceBf16Runs(s): one run of reduced dimensions with kept ones inside it.
bool reduceBf16Runs(const ReduceShape& s);
void reduceBf16(ReduceKind kind, const ReduceShape& s, const std::uint16_t* x, float* y);
// y = the sum of a * b (same shape) over s's reduced dimensions, the products never written:
// reduce(Sum, s, a * b)'s bits (each product rounded, the sums in reduce()'s order). Only where
// mulReduceSumRuns(s): one run of reduced dimensions with kept ones inside it (the
// squeeze-excitation gradient's sum over H, W of [N, H, W, C]).
bool mulReduceSumRuns(const ReduceShape& s);
void mulReduceSum(const ReduceShape& s, const float* a, const float* b, float* y);
void transpose(const std::vector<i64>& inDims, const std::vector<int>& perm, const float* x,
               float* y);
void softmaxCrossEntropy(i64 n, i64 classes, float smoothing, const float* logits,
                         const std::int32_t* labels, float* loss);
void softmaxCrossEntropyGrad(i64 n, i64 classes, float smoothing, const float* logits,
                             const std::int32_t* labels, const float* dloss, float* dlogits);
void softmax(i64 rows, i64 cols, const float* x, float* y);
void softmaxGrad(i64 rows, i64 cols, const float* y, const float* dy, float* dx);
// Same semantics as ref::emaUpdate, parallelised.
void emaUpdate(float momentum, float scale, float* running, const float* value, i64 count);

}  // namespace ipu::kernels::fused
