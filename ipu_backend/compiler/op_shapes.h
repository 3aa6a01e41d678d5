// Translation of IR op attributes into the kernels' shape structs. Shared by the planner (to
// compute input windows) and the engine (to call kernels), so both read attributes one way.
#pragma once

#include "ipu_backend/ir/graph.h"
#include "ipu_backend/kernels/kernel_types.h"

namespace ipu {

kernels::Conv2dShape convShapeOf(const Graph& g, const Op& op);  // any of the three conv ops
kernels::MatMulShape matMulShapeOf(const Graph& g, const Op& op);
kernels::Pool2dShape poolShapeOf(const Graph& g, const Op& op);  // pools and their grads
kernels::ReduceShape reduceShapeOf(const Graph& g, const Op& op);
kernels::UnaryKind unaryKindOf(const Op& op);
kernels::BinaryKind binaryKindOf(const Op& op);
kernels::ReduceKind reduceKindOf(const Op& op);
// Broadcast of a binary op's operands to the op's output shape.
kernels::BroadcastShape binaryShapeOf(const Graph& g, const Op& op);
// Bounding range of the input flat indices that a broadcast operand (`strides`: s.aStrides or
// s.bStrides) contributes to the outputs `out`; the whole operand for long ranges.
kernels::Range broadcastBounds(const kernels::BroadcastShape& s, const i64* strides,
                               kernels::Range out, i64 inElems);
// Bounding range of the input flat indices of a reduction restricted to the outputs `out` and
// the reduced units `red`.
kernels::Range reduceBounds(const kernels::ReduceShape& s, kernels::Range out, kernels::Range red);
// Window rows of convolutions and pools over NHWC tensors (tile plans): the rows of length rowLen
// that flat range `elems` touches; the input rows (n*H + h) that output rows [oRows) read through
// a window of `span` rows with the given stride and top padding (clamped); and its transpose,
// the output rows (n*OH + oh) that read input rows [iRows).
kernels::Range rowsOf(kernels::Range elems, i64 rowLen);
// The innermost-dimension indices (channels) that flat range `elems` of a [..., k] tensor
// touches: their exact span within one row, all k when it spans rows.
kernels::Range channelsOf(kernels::Range elems, i64 k);
kernels::Range inputRowsForOutputRows(kernels::Range oRows, i64 oh, i64 h, i64 stride, i64 padTop,
                                      i64 span);
kernels::Range outputRowsForInputRows(kernels::Range iRows, i64 oh, i64 h, i64 stride, i64 padTop,
                                      i64 span);

// Rows and channels of a batch-norm input viewed as [rows, C].
struct RowsC {
  i64 rows, c;
};
RowsC rowsChannelsOf(const Graph& g, int tensor);

}  // namespace ipu
