#include "ipu_backend/kernels/onednn_common.h"

#include <omp.h>

#include <atomic>
#include <cstring>
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

Prim::Prim(const dnnl::primitive_desc_base& pd, dnnl::primitive prim) : prim_(std::move(prim)) {
  const dnnl::memory::desc sp = pd.scratchpad_desc();
  if (sp.get_size() > 0) arg(DNNL_ARG_SCRATCHPAD, ownedMemory(sp));
}

void Prim::arg(int key, const dnnl::memory& m) {
  mems_.push_back(m);
  args_.push_back(dnnl_exec_arg_t{key, m.get()});
}

void Prim::execute() const {
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

void waitStream() {
  cpuStream().wait();
}

}  // namespace detail
}  // namespace ipu::kernels::fused
