#include "ipu_backend/kernels/onednn_common.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "ipu_backend/kernels/fused.h"

namespace ipu::kernels::fused {
namespace {
std::atomic<int> gThreads{0};  // 0: not set yet, use the OpenMP default
}  // namespace

void setNumThreads(int threads) {
  if (threads < 1) throw std::invalid_argument("setNumThreads: threads must be >= 1");
  gThreads = threads;
  omp_set_num_threads(threads);
}

int numThreads() {
  const int t = gThreads.load();
  return t > 0 ? t : omp_get_max_threads();
}

namespace detail {

dnnl::engine& cpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpuStream() {
  static dnnl::stream stream(cpuEngine());
  return stream;
}

void syncThreads() {
  const int t = gThreads.load();
  if (t > 0 && omp_get_max_threads() != t) omp_set_num_threads(t);
}

dnnl::memory userMemory(const dnnl::memory::desc& md) {
  return dnnl::memory(md, cpuEngine(), DNNL_MEMORY_NONE);
}

dnnl::memory ownedMemory(const dnnl::memory::desc& md) {
  dnnl::memory m(md, cpuEngine());
  if (md.get_size() > 0) std::memset(m.get_data_handle(), 0, md.get_size());
  return m;
}

dnnl::primitive_attr userScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

// The scratchpad every primitive executed by this thread borrows: a primitive needs its
// scratchpad only while it executes, and one thread executes one primitive at a time, so one
// buffer per thread (as large as the largest request) serves them all. Replicas run on their
// own threads and get their own buffers.
struct ThreadScratchpad {
  std::byte* p = nullptr;
  size_t bytes = 0;
  ~ThreadScratchpad() { std::free(p); }
  void* atLeast(size_t n) {
    if (n > bytes) {
      std::free(p);
      const size_t rounded = (n + 4095) / 4096 * 4096;
      p = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
      if (!p) throw std::bad_alloc();
      std::memset(p, 0, rounded);  // touch the pages once, outside the timed kernels
      bytes = rounded;
    }
    return p;
  }
};

void* threadScratchpad(size_t bytes) {
  thread_local ThreadScratchpad scratch;
  return scratch.atLeast(bytes);
}

void* threadLayoutBuffer(int slot, size_t bytes) {
  thread_local ThreadScratchpad slots[kLayoutSlots];
  return slots[slot].atLeast(bytes);
}

}  // namespace

Prim::Prim(const dnnl::primitive_desc_base& pd, dnnl::primitive prim) : prim_(std::move(prim)) {
  const dnnl::memory::desc sp = pd.scratchpad_desc();
  if (sp.get_size() > 0) {
    scratchpadBytes_ = sp.get_size();
    scratchpadMem_ = mems_.size();
    arg(DNNL_ARG_SCRATCHPAD, userMemory(sp));
  }
}

void Prim::arg(int key, const dnnl::memory& m) {
  mems_.push_back(m);
  args_.push_back(dnnl_exec_arg_t{key, m.get()});
}

void Prim::execute() const {
  if (scratchpadBytes_ > 0)
    mems_[scratchpadMem_].set_data_handle(threadScratchpad(scratchpadBytes_));
  // The C entry point takes our prebuilt argument array: the C++ wrapper would rebuild it
  // from a map on every call.
  const dnnl_status_t st = dnnl_primitive_execute(prim_.get(), cpuStream().get(),
                                                  static_cast<int>(args_.size()), args_.data());
  if (st != dnnl_success) {
    throw std::runtime_error("oneDNN primitive execution failed, status " + std::to_string(st));
  }
}

Prim makeReorder(const dnnl::memory& from, const dnnl::memory& to) {
  dnnl::reorder::primitive_desc pd(from, to, userScratchpadAttr());
  Prim p(pd, dnnl::reorder(pd));
  p.arg(DNNL_ARG_FROM, from);
  p.arg(DNNL_ARG_TO, to);
  return p;
}

LayoutBinding bindLayout(const dnnl::memory::desc& userMd, const dnnl::memory::desc& primMd,
                         bool toUser, int slot) {
  if (slot < 0 || slot >= kLayoutSlots)
    throw std::invalid_argument("bindLayout: slot " + std::to_string(slot) + " out of range");
  LayoutBinding b;
  b.user = userMemory(userMd);
  b.slot = slot;
  if (primMd == userMd) {
    b.primitive = b.user;
  } else {
    b.primitive = userMemory(primMd);
    b.bytes = primMd.get_size();
    b.reorder = toUser ? makeReorder(b.primitive, b.user) : makeReorder(b.user, b.primitive);
    b.attach();  // grows this thread's buffer now rather than in a step
  }
  return b;
}

void LayoutBinding::attach() const {
  if (reorder.valid()) primitive.set_data_handle(threadLayoutBuffer(slot, bytes));
}

void waitStream() {
  cpuStream().wait();
}

}  // namespace detail
namespace detail {

MatMulDescs matMulDescs(const MatMulShape& s, dnnl::memory::data_type dt) {
  using memory = dnnl::memory;
  i64 batch = s.batch, m = s.m;
  if (s.broadcastB && !s.transA) {
    // A shared B over row-major A batches is one tall GEMM: [batch*M, K] x [K, N].
    m *= batch;
    batch = 1;
  }
  const i64 k = s.k, n = s.n;
  MatMulDescs d;
  d.rows = m;
  if (batch == 1) {
    d.a = memory::desc({m, k}, dt, s.transA ? memory::dims{1, m} : memory::dims{k, 1});
    d.b = memory::desc({k, n}, dt, s.transB ? memory::dims{1, k} : memory::dims{n, 1});
    d.c = memory::desc({m, n}, dt, memory::dims{n, 1});
  } else {
    const i64 bBatch = s.broadcastB ? 1 : batch;
    d.a = memory::desc({batch, m, k}, dt,
                       s.transA ? memory::dims{m * k, 1, m} : memory::dims{m * k, k, 1});
    d.b = memory::desc({bBatch, k, n}, dt,
                       s.transB ? memory::dims{k * n, 1, k} : memory::dims{k * n, n, 1});
    d.c = memory::desc({batch, m, n}, dt, memory::dims{m * n, n, 1});
  }
  d.batch = batch;
  return d;
}

MatMulPrimitive::MatMulPrimitive(const MatMulShape& s, dnnl::memory::data_type dt,
                                 bool accumulate) {
  syncThreads();
  const MatMulDescs d = matMulDescs(s, dt);
  const dnnl::memory::desc &ad = d.a, &bd = d.b, &cd = d.c;
  dnnl::matmul::desc desc(ad, bd, cd);
  dnnl::primitive_attr attr = userScratchpadAttr();
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc pd(desc, attr, cpuEngine());
  a = userMemory(ad);
  b = userMemory(bd);
  c = userMemory(cd);
  mm = Prim(pd, dnnl::matmul(pd));
  mm.arg(DNNL_ARG_SRC, a);
  mm.arg(DNNL_ARG_WEIGHTS, b);
  mm.arg(DNNL_ARG_DST, c);
}

void MatMulPrimitive::run(const void* pa, const void* pb, void* pc) {
  syncThreads();
  bind(a, pa);
  bind(b, pb);
  bind(c, pc);
  mm.execute();
  waitStream();
}

dnnl::memory::desc batchNormData(i64 rows, i64 c, dnnl::memory::data_type dt) {
  return dnnl::memory::desc({rows, c, 1, 1}, dt, dnnl::memory::format_tag::nhwc);
}

dnnl::memory::desc batchNormChannels(i64 c) {
  return dnnl::memory::desc({c}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::x);
}

dnnl::normalization_flags batchNormFlags(BatchNormRelu relu) {
  using Flags = dnnl::normalization_flags;
  if (relu == BatchNormRelu::kSwish)  // oneDNN fuses only a ReLU
    throw std::invalid_argument(
        "oneDNN batch norm: a fused swish is only in the f32 training kernels "
        "(BatchNormForwardTraining, BatchNormBackward)");
  return relu == BatchNormRelu::kFused ? Flags::use_scale | Flags::use_shift | Flags::fuse_norm_relu
                                       : Flags::use_scale | Flags::use_shift;
}

dnnl::batch_normalization_forward::primitive_desc batchNormForwardPd(
    dnnl::prop_kind prop, i64 rows, i64 c, float eps, dnnl::normalization_flags flags,
    dnnl::memory::data_type dt, const dnnl::primitive_attr& attr) {
  dnnl::batch_normalization_forward::desc desc(prop, batchNormData(rows, c, dt), eps, flags);
  return dnnl::batch_normalization_forward::primitive_desc(desc, attr, cpuEngine());
}

BatchNormForwardPrimitive::BatchNormForwardPrimitive(i64 rows, i64 c, float eps, BatchNormRelu relu,
                                                     dnnl::memory::data_type dt, bool training) {
  syncThreads();
  // Inference with fuse_norm_relu needs no workspace (there is no backward to feed).
  const auto flags = training ? batchNormFlags(relu)
                              : dnnl::normalization_flags::use_global_stats | batchNormFlags(relu);
  const auto pd = batchNormForwardPd(
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, rows, c,
      eps, flags, dt, userScratchpadAttr());
  x = userMemory(pd.src_desc());
  y = userMemory(pd.dst_desc());
  gamma = userMemory(batchNormChannels(c));
  beta = userMemory(batchNormChannels(c));
  mean = userMemory(pd.mean_desc());
  var = userMemory(pd.variance_desc());
  bn = Prim(pd, dnnl::batch_normalization_forward(pd));
  bn.arg(DNNL_ARG_SRC, x);
  bn.arg(DNNL_ARG_SCALE, gamma);
  bn.arg(DNNL_ARG_SHIFT, beta);
  bn.arg(DNNL_ARG_DST, y);
  bn.arg(DNNL_ARG_MEAN, mean);
  bn.arg(DNNL_ARG_VARIANCE, var);
  if (training && relu == BatchNormRelu::kFused) {
    workspace = userMemory(pd.workspace_desc());
    workspaceBytes = pd.workspace_desc().get_size();
    bn.arg(DNNL_ARG_WORKSPACE, workspace);
  }
}

void BatchNormForwardPrimitive::run(const void* px, const float* pgamma, const float* pbeta,
                                    void* py, const float* pmean, const float* pvar,
                                    void* pworkspace, const char* kernel) {
  syncThreads();
  if (workspaceBytes > 0) {
    if (!pworkspace)
      throw std::invalid_argument(std::string(kernel) + " with fused ReLU: no workspace given");
    bind(workspace, pworkspace);
  }
  bind(x, px);
  bind(gamma, pgamma);
  bind(beta, pbeta);
  bind(y, py);
  bind(mean, pmean);
  bind(var, pvar);
  bn.execute();
  waitStream();
}

}  // namespace detail

}  // namespace ipu::kernels::fused
