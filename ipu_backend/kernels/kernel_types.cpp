#include "ipu_backend/kernels/kernel_types.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ipu::kernels {
namespace {

std::string dimsToString(const std::vector<i64>& dims) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << ']';
  return os.str();
}

}  // namespace

BroadcastShape BroadcastShape::make(const std::vector<i64>& aDims, const std::vector<i64>& bDims) {
  const int rank = static_cast<int>(std::max(aDims.size(), bDims.size()));
  if (rank > kMaxRank) {
    throw std::invalid_argument("broadcast of " + dimsToString(aDims) + " and " +
                                dimsToString(bDims) + ": rank exceeds " + std::to_string(kMaxRank));
  }
  BroadcastShape s;
  s.rank = rank;
  // Walk from the innermost dimension outwards (numpy aligns shapes on the right).
  i64 aStride = 1, bStride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const int ad = d - (rank - static_cast<int>(aDims.size()));
    const int bd = d - (rank - static_cast<int>(bDims.size()));
    const i64 a = ad >= 0 ? aDims[ad] : 1;
    const i64 b = bd >= 0 ? bDims[bd] : 1;
    if (a != b && a != 1 && b != 1) {
      throw std::invalid_argument("shapes " + dimsToString(aDims) + " and " + dimsToString(bDims) +
                                  " are not broadcast-compatible");
    }
    s.outDims[d] = a == 1 ? b : a;
    s.aStrides[d] = a == 1 ? 0 : aStride;
    s.bStrides[d] = b == 1 ? 0 : bStride;
    aStride *= a;
    bStride *= b;
  }
  return s;
}

i64 ReduceShape::inElems() const {
  i64 e = 1;
  for (i64 d : inDims) e *= d;
  return e;
}

i64 ReduceShape::outElems() const {
  i64 e = 1;
  for (size_t d = 0; d < inDims.size(); ++d) {
    if (!reduced[d]) e *= inDims[d];
  }
  return e;
}

i64 ReduceShape::reducedCount() const {
  i64 e = 1;
  for (size_t d = 0; d < inDims.size(); ++d) {
    if (reduced[d]) e *= inDims[d];
  }
  return e;
}

}  // namespace ipu::kernels
