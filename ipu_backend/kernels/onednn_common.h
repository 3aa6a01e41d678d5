// Internal to the fused kernels: the process-wide oneDNN engine/stream and a prepared
// primitive execution whose argument list is built once, so run() only rebinds pointers.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <vector>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::fused::detail {

dnnl::engine& cpuEngine();
dnnl::stream& cpuStream();

// Makes the calling thread's OpenMP team size equal numThreads() (the ICV is per thread and
// oneDNN sizes its parallel work from it, both at primitive creation and at execution).
void syncThreads();

// A memory object over user-owned data, created without a buffer (the pointer is bound per run).
dnnl::memory userMemory(const dnnl::memory::desc& md);
// A memory object owning a buffer, allocated and touched now so run() never faults new pages.
dnnl::memory ownedMemory(const dnnl::memory::desc& md);

inline void bind(const dnnl::memory& m, const void* p) {
  // oneDNN only reads inputs; its API takes non-const handles.
  m.set_data_handle(const_cast<void*>(p));
}

// Attributes every fused primitive is created with: scratchpad provided by us (see Prim).
dnnl::primitive_attr userScratchpadAttr();

// One primitive plus the arguments it executes with. The memories are owned here; their data
// handles may be rebound between executions. The scratchpad is the executing thread's shared
// buffer (grown to the largest primitive's request), not one buffer per primitive.
class Prim {
 public:
  Prim() = default;
  // Takes the primitive descriptor to allocate the scratchpad it asks for (if any).
  Prim(const dnnl::primitive_desc_base& pd, dnnl::primitive prim);
  void arg(int key, const dnnl::memory& m);
  void execute() const;  // on cpuStream(), without waiting
  bool valid() const { return static_cast<bool>(prim_); }

 private:
  dnnl::primitive prim_;
  std::vector<dnnl::memory> mems_;
  std::vector<dnnl_exec_arg_t> args_;
  size_t scratchpadBytes_ = 0;  // 0: none
  size_t scratchpadMem_ = 0;    // its index in mems_
};

// A reorder between two memories (created once; executed with Prim::execute).
Prim makeReorder(const dnnl::memory& from, const dnnl::memory& to);

// An operand in the caller's layout, and the primitive's own copy when the primitive wants
// another layout (blocked weights, Winograd's blocked activations): `primitive` is `user` itself
// when the layouts agree, else an owned buffer with a reorder user -> primitive (inputs) or
// primitive -> user (outputs, gradients).
// The reordered copy lives only during one run() (reorder in, execute, reorder out), so it is
// not owned: attach() points it at this thread's buffer for `slot` (0-2: one per operand of a
// kernel), shared by every kernel that runs on the thread, as the scratchpads are. Call attach()
// on every binding at the start of run(), before any reorder or execute.
struct LayoutBinding {
  dnnl::memory user;       // bound to the caller's pointer per run
  dnnl::memory primitive;  // what the primitive reads or writes
  Prim reorder;            // invalid when no reorder is needed
  int slot = 0;
  size_t bytes = 0;
  void attach() const;
  void reorderIfNeeded() const {
    if (reorder.valid()) reorder.execute();
  }
};
constexpr int kLayoutSlots = 3;
LayoutBinding bindLayout(const dnnl::memory::desc& userMd, const dnnl::memory::desc& primMd,
                         bool toUser, int slot);

void waitStream();

// The memory descriptors of C = op(A) x op(B) as stored (row-major, transposes as strides); a
// shared B over row-major A batches folds into one [batch * M, K] x [K, N] GEMM (batch 1, rows
// batch * M).
struct MatMulDescs {
  dnnl::memory::desc a, b, c;
  i64 batch = 1, rows = 1;
};
MatMulDescs matMulDescs(const MatMulShape& s, dnnl::memory::data_type dt);

// C = op(A) x op(B) of a MatMulShape with every operand of one data type: oneDNN takes the type
// as a field of the memory descriptors, so the f32 and the bf16 matmul are this one kernel.
// Created once; run() rebinds the pointers. With `accumulate`, C += op(A) x op(B) (oneDNN's sum
// post-op: a GEMM with beta = 1), for a product summed over blocks of its inner dimension.
struct MatMulPrimitive {
  MatMulPrimitive(const MatMulShape& s, dnnl::memory::data_type dt, bool accumulate = false);
  void run(const void* a, const void* b, void* c);
  dnnl::memory a, b, c;
  Prim mm;
};

// oneDNN batch norm over [rows, C] activations of type `dt` (f32 or bf16) with f32 scale, shift
// and statistics: one kernel for both types (the f32 inference and the bf16 training kernels).
// The activations are an N x C x 1 x 1 nhwc tensor: the same bytes as "nc", but it selects
// oneDNN's channels-last (nspc) implementations, which vectorise over C.
dnnl::memory::desc batchNormData(i64 rows, i64 c, dnnl::memory::data_type dt);
dnnl::memory::desc batchNormChannels(i64 c);
dnnl::normalization_flags batchNormFlags(BatchNormRelu relu);  // scale, shift (and the ReLU)
dnnl::batch_normalization_forward::primitive_desc batchNormForwardPd(
    dnnl::prop_kind prop, i64 rows, i64 c, float eps, dnnl::normalization_flags flags,
    dnnl::memory::data_type dt, const dnnl::primitive_attr& attr);

// Training (batch statistics written to mean / var; with the ReLU fused, its mask written to a
// workspace of workspaceBytes for the backward) or inference (mean / var read; no workspace).
struct BatchNormForwardPrimitive {
  BatchNormForwardPrimitive(i64 rows, i64 c, float eps, BatchNormRelu relu,
                            dnnl::memory::data_type dt, bool training);
  // `kernel` names the caller in the error when a needed workspace is missing.
  void run(const void* x, const float* gamma, const float* beta, void* y, const float* mean,
           const float* var, void* workspace, const char* kernel);
  dnnl::memory x, gamma, beta, y, mean, var, workspace;
  std::size_t workspaceBytes = 0;
  Prim bn;
};

}  // namespace ipu::kernels::fused::detail
