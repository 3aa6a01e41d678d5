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

// C = op(A) x op(B) of a MatMulShape with every operand of one data type: oneDNN takes the type
// as a field of the memory descriptors, so the f32 and the bf16 matmul are this one kernel.
// Created once; run() rebinds the pointers.
struct MatMulPrimitive {
  MatMulPrimitive(const MatMulShape& s, dnnl::memory::data_type dt);
  void run(const void* a, const void* b, void* c);
  dnnl::memory a, b, c;
  Prim mm;
};

}  // namespace ipu::kernels::fused::detail
