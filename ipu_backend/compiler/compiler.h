// The compiler driver: lowers the optimizer updates, maps every buffer onto tiles, splits every
// op into vertices, plans the exchanges and the per-tile arenas, checks tile memory, and emits the BSP
// program. Throws CompileError (with the worst tile, its bytes, the capacity and the largest
// occupants) when a tile overflows and options.checkMemory is set.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "ipu_backend/compiler/executable.h"

namespace ipu {

class CompileError : public std::runtime_error {
 public:
  CompileError(const std::string& msg, int tile, i64 bytes, i64 capacity)
      : std::runtime_error(msg), tile_(tile), bytes_(bytes), capacity_(capacity) {}
  int tile() const { return tile_; }
  i64 bytes() const { return bytes_; }
  i64 capacity() const { return capacity_; }
  // A tile-memory verdict carries the program as planned up to it (mappings, vertices, arenas,
  // tile memory and its detail; no exchange copies): what a report of the overflow draws.
  std::shared_ptr<const Executable> partial() const { return partial_; }
  CompileError& withPartial(std::shared_ptr<const Executable> p) {
    partial_ = std::move(p);
    return *this;
  }

 private:
  int tile_;
  i64 bytes_, capacity_;
  std::shared_ptr<const Executable> partial_;
};

Executable compile(Graph graph, const Target& target, const CompileOptions& options = {});

}  // namespace ipu
