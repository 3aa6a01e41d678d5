// Host fusions of the fused engine: op pairs whose second op's work the first op's kernel does
// in the same pass over memory, as CPU frameworks fuse them (the IPU program is unchanged: tile
// mode, the compiler's tile plan and the cost model still see every op).
//   batch_norm_train -> relu          one oneDNN batch norm with fuse_norm_relu (it also writes
//                                     a ReLU mask: the workspace); batch_norm_inference too
//                                     (without a mask)
//   relu_grad -> batch_norm_backward  one oneDNN batch norm backward that applies that mask
//   batch_norm_train -> swish, swish_grad -> batch_norm_backward
//                                     the same pair with a swish (f32, training: the swish's
//                                     input, the batch norm's y, is read by the swish and its
//                                     gradient only, and that gradient by the batch norm's
//                                     backward): the forward writes swish(y), the backward
//                                     recomputes y from x and the map kept in the workspace; y
//                                     and the swish's gradient are never written
//   add -> relu                       relu(a + b) in one loop (the residual add of a block)
//   add -> relu_grad                  (a + b) * relu'(x) in one loop (the sum of the two
//                                     gradients at a block's input and its ReLU backward; f32;
//                                     relu'(x) from the ReLU bits of the fusion below when x
//                                     is its output)
//   batch_norm_train -> add -> relu   the batch norm computes only its statistics; the add
//                                     writes relu(x * a + b + other) in one pass over x and
//                                     the other operand (a block's last batch norm, its
//                                     residual add and output ReLU; f32); a projection
//                                     shortcut's batch norm folds in the same way
//   elementwise chains                unary / binary ops, each the sole reader of the one
//                                     before, over the same elements (other operands: tensors
//                                     of those elements, single values, or a binary op's
//                                     operand that broadcasts to its result): one loop over
//                                     cache-sized chunks at the last op, the links never
//                                     written (the optimizers' update arithmetic: LAMB's
//                                     v / c2 -> sqrt -> + eps, g^2 -> the v update; the
//                                     squeeze-excitation gradient dy * gate + pool gradient);
//                                     a broadcast op whose result only a member reads is
//                                     absorbed (read broadcast, never written); an
//                                     apply_update adding the last link may end one; f32
//   update groups                     an optimizer's per-weight arithmetic: the elementwise
//                                     ops over one weight's elements, its in-place state
//                                     updates and its square -> sum norms, connected or not,
//                                     with no other op between them touching what they write,
//                                     as one loop over cache-sized chunks at the last of them;
//                                     only tensors read after the group are written (LAMB: g,
//                                     m, v and w read once, m, v and the update written, both
//                                     trust-ratio norms summed in the same pass); f32
//   16-bit binary -> cast to f32      the binary op (operands and result bf16 / f16, no
//                                     broadcast) rounds each chunk of its result to 16 bits
//                                     and writes it widened, as the cast's output: the 16-bit
//                                     tensor is never written nor read (BERT's tied word
//                                     embeddings: their two bf16 gradients' sum, cast for
//                                     LAMB)
//   chain -> swish_grad -> batch_norm_backward
//                                     a batch norm + swish backward whose dy is an elementwise
//                                     chain dy' * scale + broadcast(shift), scale and shift
//                                     [N, 1, ..., 1, C] (the squeeze-excitation gradient): the
//                                     backward's first pass forms dy itself, which is never
//                                     written; f32
//   square -> reduce sum              sum(x^2) over the whole tensor in one read of x (the
//                                     squares are never written): the optimizers' norms
//                                     (LAMB's trust ratio and global gradient clip, LARS); f32
//   mul -> reduce sum                 sum(a * b) over one run of axes with kept ones inside
//                                     it, in one read of a and b (the products are never
//                                     written): the squeeze-excitation scale's gradient,
//                                     sum over H, W of dy * x; f32
// The tensor between the two ops is never materialised (elided). A tensor that is a graph
// output, or that any other op reads, keeps its pair unfused. Operands: f32; the batch-norm
// pairs also in bf16 where the CPU has oneDNN's bf16 batch norm (`bf16BatchNorm`); add + relu
// in any one dtype (16-bit through the engine's chunked widening path).
#pragma once

#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu {

struct HostFusionPlan {
  enum class Role : unsigned char {
    kNone,                   // runs as its own kernel
    kBatchNormRelu,          // batch_norm_train/_inference writing relu(y) to `reluOut`
    kBatchNormReluBackward,  // batch_norm_backward reading the relu's gradient `reluGradIn`
    kAddRelu,                // add writing relu(a + b) to `reluOut`
    kAddReluBackward,        // add writing relu_grad(reluX, a + b) to `reluOut`
    kBatchNormStatistics,    // batch_norm_train writing mean, var and its map y = x * a + b
                             // (not y): a later kAddBatchNormRelu normalises
    kAddBatchNormRelu,       // add writing relu(normX * a + b + addOther) to `reluOut`, the
                             // map from its kBatchNormStatistics op `forwardOp` (with
                             // `otherBn`: + addOther * a' + b', that op's map)
    kSquareSum,              // unary square writing the sum of its squares to `sumOut`
                             // (the reduce over all axes that alone reads them)
    kMulReduceSum,           // binary mul writing the sums of its products to `sumOut`
                             // (the reduce sum that alone reads them)
    kElementwiseChain,       // the last op of a chain: runs every op of `chain` chunk by chunk
    kUpdateGroup,            // the last op of an update group: runs every op of `group` chunk
                             // by chunk
    kWidenedOutput,          // a 16-bit binary op writing its rounded result widened to f32 as
                             // `widenOut` (its cast's output)
    kAbsorbed,               // its work is done by another op's kernel: runs nothing
  };
  std::vector<Role> role;       // per op id
  std::vector<int> reluOut;     // per op id: kBatchNormRelu, kAddRelu, kAddReluBackward,
                                // kAddBatchNormRelu
  std::vector<int> reluX;       // per op id: kAddReluBackward: the relu_grad's x (its mask)
  std::vector<int> reluGradIn;  // per op id: kBatchNormReluBackward: the relu_grad's dy
  std::vector<int> forwardOp;   // per op id: kBatchNormReluBackward: its kBatchNormRelu op;
                                // kAddBatchNormRelu: its kBatchNormStatistics op
  std::vector<int> normX;       // per op id: kAddBatchNormRelu: the batch norm's input x
  std::vector<int> addOther;    // per op id: kAddBatchNormRelu: the add's other operand (with
                                // otherBn: that batch norm's input x)
  std::vector<int> otherBn;     // per op id: kAddBatchNormRelu: a second kBatchNormStatistics op
                                // whose y was the other operand (a projection shortcut), or -1
  // kAddReluBackward whose relu_grad's x is the output of a kAddBatchNormRelu over C % 16 == 0
  // channels: that op also writes the ReLU's decisions as bits, which this op reads instead of
  // x (1/32 of the bytes). reluBitsFrom: per op id, the writer (or -1); writesReluBits: per op.
  std::vector<int> reluBitsFrom;
  std::vector<bool> writesReluBits;
  std::vector<int> sumOut;    // per op id: kSquareSum: the reduce's output (one element);
                              // kMulReduceSum: the reduce's output
  std::vector<int> widenOut;  // per op id: kWidenedOutput: the cast's f32 output
  // per op id: kBatchNormRelu / kBatchNormReluBackward whose activation is a swish, not a ReLU
  // (reluOut: the swish's output; reluGradIn: the swish gradient's dy)
  std::vector<bool> swish;
  // per op id: kBatchNormReluBackward (swish) whose dy was a chain (absorbed) computing
  // perSampleDy * perSampleScale + broadcast(perSampleShift) (+ 0, as the broadcast op): the
  // three tensors, or -1.
  std::vector<int> perSampleDy, perSampleScale, perSampleShift;
  // per op id: kElementwiseChain: the chain's ops in program order (this op last); each op's
  // output is the next one's input, and only that.
  std::vector<std::vector<int>> chain;
  std::vector<std::vector<int>> chainInputs;  // per op id: the tensors the chain reads
  // per op id: kUpdateGroup: its ops in program order (this op last; a square's absorbed
  // reduce among them, the square's sum in sumOut), the tensors they read from memory and the
  // tensors they write (the others live in chunk buffers).
  std::vector<std::vector<int>> group;
  std::vector<std::vector<int>> groupInputs;
  std::vector<std::vector<int>> groupOutputs;
  std::vector<bool> elided;  // per tensor id: never written nor read
  int absorbedOps = 0;

  // The tensors an op's kernel reads and writes under this plan (absorbed ops: none).
  std::vector<int> inputsOf(const Op& op) const;
  std::vector<int> outputsOf(const Op& op) const;
};

struct HostFusionOptions {
  bool bf16BatchNorm = false;  // native bf16 batch norm kernels (x, y bf16; parameters f32)
  // Fusions whose backward kernel reads what its forward kernel left in the engine (the oneDNN
  // ReLU mask, the ReLU bits). Off when a pipeline runs the forward of later micro-batches
  // before the backward of earlier ones (that state is not stashed per micro-batch).
  bool stateFromForwardToBackward = true;
  // Update groups run at their last op, so a group must lie within one part of the program
  // that runs as a whole: never across updateFirstOp (with gradient accumulation the ops before
  // it run once per micro-batch, those after once per step), and not at all when the program
  // is run in segments the plan does not know (pipelines).
  bool updateGroups = true;
  int updateFirstOp = -1;
};

HostFusionPlan planHostFusions(const Graph& g, const HostFusionOptions& options = {});

}  // namespace ipu
