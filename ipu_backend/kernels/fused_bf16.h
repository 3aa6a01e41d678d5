// Native bf16 fused kernels: oneDNN batch-norm primitives on bf16 storage, and the probes of
// what this CPU has. The convolutions and the matmul are fused.h's with ElementType::BF16: what
// the fused engine runs for conv / matmul ops whose operands are all bf16. The primitives
// accumulate in f32 and round each result to bf16 once, round-to-nearest-even: the rule the
// tile engine applies when it widens bf16 operands, computes in f32 and rounds the output, so
// the two modes agree within bf16's tolerance (they differ only in summation order).
// On AVX512-BF16 CPUs oneDNN uses the native dot-product instructions; on AVX512F-only CPUs it
// emulates them; nativeBf16Isa() says which.
// Pointers are to bf16 data (2 bytes per element), in the layouts of fused.h.
#pragma once

#include <cstddef>
#include <memory>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::fused {

// True when oneDNN dispatches bf16 convolutions to AVX512-BF16 (or AMX) instructions.
bool nativeBf16Isa();

// True when this CPU's oneDNN builds bf16 convolution, matmul and batch-norm primitives at all
// (it needs AVX512F; on AVX2-only CPUs it has none). Probed once on tiny shapes. Without them
// the fused engine widens bf16 operands to f32 and rounds the results, as the tile engine does.
bool bf16PrimitivesAvailable();

// Batch norm on bf16 activations ([rows, C], channels innermost): f32 gamma / beta, batch
// statistics and parameter gradients; statistics computed in f32, y / dx rounded to bf16.
class BatchNormForwardTrainingBf16 {
 public:
  // relu kFused: y = relu(batch norm(x)), and run() writes the ReLU mask to `workspace`
  // (workspaceBytes()) for the fused backward, as BatchNormForwardTraining.
  BatchNormForwardTrainingBf16(i64 rows, i64 c, float eps,
                               BatchNormRelu relu = BatchNormRelu::kNone);
  ~BatchNormForwardTrainingBf16();
  void run(const void* x, const float* gamma, const float* beta, void* y, float* mean, float* var,
           void* workspace = nullptr);
  std::size_t workspaceBytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class BatchNormBackwardBf16 {
 public:
  BatchNormBackwardBf16(i64 rows, i64 c, float eps, BatchNormRelu relu = BatchNormRelu::kNone);
  ~BatchNormBackwardBf16();
  void run(const void* x, const void* dy, const float* gamma, const float* mean, const float* var,
           void* dx, float* dgamma, float* dbeta, const void* workspace = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ipu::kernels::fused
