// The text form of the IR. print(parse(print(g))) == print(g).
//
//   graph tiny {
//     input %x: f32[8,28,28,1]
//     variable %conv0_weight: f32[16,3,3,1]
//     %conv0: f32[8,28,28,16] = conv2d(%x, %conv0_weight) {dilation=[1,1], groups=1, ...}
//     %bn0, %bn0/mean: f32[16], %bn0/var: f32[16] = batch_norm_train(...) {eps=1e-05}
//     optimizer_update(%conv0_weight, %conv0_weight/grad, %lr, %conv0_weight/momentum) {...}
//     output %loss
//   }
//
// Every output carries its type so the text is self-describing; the parser re-infers the types
// and reports a mismatch. Floats always print with a '.' or an exponent (so 1.0 stays a float).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "ipu_backend/ir/graph.h"

namespace ipu {

class ParseError : public std::runtime_error {
 public:
  ParseError(const std::string& msg, int line, int column)
      : std::runtime_error(msg), line_(line), column_(column) {}
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_, column_;
};

std::string printGraph(const Graph& g);
// `source` names the text in error messages ("<string>", a file path).
Graph parseGraph(std::string_view text, const std::string& source = "<string>");

}  // namespace ipu
