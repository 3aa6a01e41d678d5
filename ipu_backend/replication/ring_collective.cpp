#include "ipu_backend/replication/ring_collective.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

namespace ipu::replication {
namespace {

int mod(std::int64_t a, int m) {
  return static_cast<int>(((a % m) + m) % m);
}

const char* kindName(bool reduceScatter) {
  return reduceScatter ? "cross_replica_reduce_scatter" : "cross_replica_all_gather";
}

}  // namespace

RingCollective::RingCollective(int replicas, int firstReplica, int localReplicas, RingLink* link,
                               std::chrono::milliseconds timeout)
    : replicas_(replicas),
      first_(firstReplica),
      local_(localReplicas),
      link_(link),
      timeout_(timeout) {
  const int ranks = link ? link->ranks() : 1;
  if (replicas < 1 || localReplicas < 1 || localReplicas * ranks != replicas ||
      firstReplica != (link ? link->rank() : 0) * localReplicas)
    throw std::invalid_argument(fmt::format(
        "RingCollective: {} replicas cannot be split as {} per process over {} process(es) "
        "starting at replica {} (hint: the replica count must be a multiple of the process "
        "count)",
        replicas, localReplicas, ranks, firstReplica));
  slots_.resize(static_cast<size_t>(local_));
  work_.resize(static_cast<size_t>(local_));
}

void RingCollective::reduceScatter(int replica, const float* in, std::int64_t n, float* out,
                                   float scale, std::string_view what) {
  arrive(replica, {Kind::kReduceScatter, in, out, n, scale, std::string(what)});
}

void RingCollective::allGather(int replica, const float* chunk, float* out, std::int64_t n,
                               std::string_view what) {
  arrive(replica, {Kind::kAllGather, chunk, out, n, 1.0f, std::string(what)});
}

void RingCollective::abort(const std::string& reason) {
  std::lock_guard lk(mu_);
  if (!aborted_) reason_ = reason;
  aborted_ = true;
  cv_.notify_all();
}

void RingCollective::arrive(int replica, Slot slot) {
  const int l = replica - first_;
  if (l < 0 || l >= local_)
    throw std::invalid_argument(
        fmt::format("RingCollective: replica {} is not one of this "
                    "process's replicas [{}, {})",
                    replica, first_, first_ + local_));
  std::unique_lock lk(mu_);
  if (aborted_) throw CollectiveError(reason_);
  slots_[static_cast<size_t>(l)] = std::move(slot);
  if (++arrived_ < local_) {
    const std::uint64_t gen = generation_;
    // Spin (yielding) briefly first: an op is usually done within microseconds, far less than
    // a sleeping thread's wake-up on a loaded host; then block.
    lk.unlock();
    const auto spinUntil = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (generation_.load() == gen && std::chrono::steady_clock::now() < spinUntil)
      std::this_thread::yield();
    lk.lock();
    if (!cv_.wait_for(lk, timeout_, [&] { return generation_ != gen || aborted_; })) {
      aborted_ = true;
      reason_ = fmt::format(
          "replica {} waited {} ms for its sibling replicas at '{}' ({}); a "
          "replica is stuck or failed",
          replica, timeout_.count(), slots_[static_cast<size_t>(l)].what,
          kindName(slots_[static_cast<size_t>(l)].kind == Kind::kReduceScatter));
      cv_.notify_all();
    }
    if (aborted_) throw CollectiveError(reason_);
    return;
  }
  // The last to arrive runs the op for every local replica (the others wait on the lock).
  arrived_ = 0;
  try {
    for (const Slot& s : slots_)
      if (s.kind != slots_[0].kind || s.n != slots_[0].n || s.what != slots_[0].what)
        throw CollectiveError(fmt::format(
            "replicas disagree on the collective: '{}' ({}, {} elements) vs '{}' ({}, {} "
            "elements); every replica must run the same program",
            slots_[0].what, kindName(slots_[0].kind == Kind::kReduceScatter), slots_[0].n, s.what,
            kindName(s.kind == Kind::kReduceScatter), s.n));
    if (slots_[0].kind == Kind::kReduceScatter)
      runReduceScatter();
    else
      runAllGather();
  } catch (const std::exception& e) {
    aborted_ = true;
    reason_ = e.what();
    cv_.notify_all();
    throw CollectiveError(reason_);
  }
  ++generation_;
  cv_.notify_all();
}

void RingCollective::runReduceScatter() {
  const std::int64_t n = slots_[0].n, s = chunkElements(n, replicas_);
  auto begin = [&](int c) { return std::min<std::int64_t>(n, c * s); };
  auto end = [&](int c) { return std::min<std::int64_t>(n, (c + 1) * s); };
  for (int l = 0; l < local_; ++l) work_[l].assign(slots_[l].in, slots_[l].in + n);
  recv_.resize(static_cast<size_t>(s));
  const int last = first_ + local_ - 1;
  for (int k = 0; k + 1 < replicas_; ++k) {
    // At hop k replica r passes its partial sum of chunk r-1-k to replica r+1.
    if (remote()) {
      const int cs = mod(last - 1 - k, replicas_), cr = mod(first_ - 2 - k, replicas_);
      link_->shift(work_[local_ - 1].data() + begin(cs), end(cs) - begin(cs), recv_.data(),
                   end(cr) - begin(cr), slots_[0].what);
      float* dst = work_[0].data() + begin(cr);
      for (std::int64_t i = 0; i < end(cr) - begin(cr); ++i) dst[i] = recv_[i] + dst[i];
    }
    for (int l = 0; l < local_; ++l) {
      if (l == local_ - 1 && remote()) break;  // that hop went over the link
      const int r = first_ + l, c = mod(r - 1 - k, replicas_);
      const int next = (l + 1) % local_;
      const float* src = work_[l].data() + begin(c);
      float* dst = work_[next].data() + begin(c);
      for (std::int64_t i = 0; i < end(c) - begin(c); ++i) dst[i] = src[i] + dst[i];
    }
  }
  for (int l = 0; l < local_; ++l) {
    const int r = first_ + l;
    float* out = slots_[l].out;
    const float scale = slots_[l].scale;
    const std::int64_t b = begin(r), len = end(r) - b;
    for (std::int64_t i = 0; i < len; ++i) out[i] = work_[l][b + i] * scale;
    std::fill(out + len, out + s, 0.0f);
  }
}

void RingCollective::runAllGather() {
  const std::int64_t n = slots_[0].n, s = chunkElements(n, replicas_);
  gathered_.resize(static_cast<size_t>(s * replicas_));
  mine_.resize(static_cast<size_t>(s * local_));
  for (int l = 0; l < local_; ++l) std::copy(slots_[l].in, slots_[l].in + s, mine_.data() + l * s);
  if (remote())
    link_->allGather(mine_.data(), s * local_, gathered_.data(), slots_[0].what);
  else
    std::copy(mine_.begin(), mine_.end(), gathered_.begin() + first_ * s);
  for (int l = 0; l < local_; ++l) std::copy(gathered_.data(), gathered_.data() + n, slots_[l].out);
}

}  // namespace ipu::replication
