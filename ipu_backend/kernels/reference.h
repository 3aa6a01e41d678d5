// Reference kernels: plain, readable loops that the `tile` engine runs per vertex.
//
// Contract shared by every kernel here:
//   * A kernel computes the output elements with flat indices [out.begin, out.end) and writes
//     them to `y`, where y[0] is output element out.begin (the vertex's own output region).
//   * Inputs are Windows indexed by global flat index; the planner guarantees that every index a
//     kernel reads lies inside the window it was given (the window's assert checks it).
//   * Kernels with a `red` (reduction) range compute *partial* results summed over only that part
//     of the reduction, so the planner can split a reduction across tiles and add the partials in
//     a later compute set. Passing the full reduction range gives the complete result.
//   * Bad data that only shows at run time (a label out of range) throws std::invalid_argument
//     with a message naming the index and the value.
// Shapes are in the comments; see kernel_types.h for the dimension letters and layouts.
#pragma once

#include <cstdint>
#include <vector>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::ref {

using W = Window<float>;

// ---- convolution --------------------------------------------------------------------------
// y[N,OH,OW,K] = conv(x[N,H,W,C], w[K,R,S,C/G]) (cross-correlation, as every framework).
void conv2dForward(const Conv2dShape& s, W x, W w, float* y, Range out);
// y of a grouped convolution from x in blocks of gb groups (gb*C/G channels each): a vertex reads
// its groups' block only. The same sum, in the same order, as conv2dForward.
void conv2dForwardGroupBlocks(const Conv2dShape& s, i64 gb, W xBlocks, W w, float* y, Range out);
// dx[N,H,W,C] from dy[N,OH,OW,K] and w, summed over output channels k in red only (partials:
// each part then reads only the weight rows w[red.begin:red.end]).
void conv2dBackwardData(const Conv2dShape& s, W dy, W w, float* dx, Range out, Range red);
// The data gradient from transposed weights (groups == 1), the tile plan of a convolution whose
// weights exceed a tile: wt[C,R,S,K] = w[K,R,S,C] read as a forward convolution's weights, so a
// vertex reads the weights of its input channels only. The same sum, in the same order, as
// conv2dBackwardData over every k.
void conv2dBackwardDataTransposed(const Conv2dShape& s, W dy, W wt, float* dx, Range out);
// The weights in k-blocks: block b holds output channels [b*kb, min(K, (b+1)*kb)) as
// [C][R][S][kbb] (kbb its size) at flat offset b*kb*C*R*S; writes flat range `out` of it.
void conv2dWeightsToKBlocks(const Conv2dShape& s, i64 kb, W w, float* blocks, Range out);
// wt[C,R,S,K] from the k-blocks; `blocks[b]` is a window onto block b (global flat indices of
// the k-blocked buffer) for every block that range `out` reads.
void conv2dKBlocksToTransposed(const Conv2dShape& s, i64 kb, const std::vector<W>& blocks,
                               float* wt, Range out);
// An NHWC [pixels, c] tensor in blocks of cb channels: block b holds channels
// [b*cb, min(c, (b+1)*cb)) as [pixels][cbb] (cbb its size) at flat offset b*pixels*cb; writes
// flat range `out` of the blocks (the grouped convolution gradients' operands).
void toChannelBlocks(i64 pixels, i64 c, i64 cb, W x, float* blocks, Range out);
// dx of a grouped convolution from dy in blocks of gb groups (gb*K/G channels each): a vertex
// reads its groups' block only. The same sum, in the same order, as conv2dBackwardData over
// every k.
void conv2dBackwardDataGroupBlocks(const Conv2dShape& s, i64 gb, W dyBlocks, W w, float* dx,
                                   Range out);
// dx of an ungrouped convolution summed over output channels k in red only, from dy in k-blocks
// of kb channels (toChannelBlocks' layout, c = K): `dyBlocks[i]` is a window onto block
// red.begin / kb + i, one for every block red spans. The same sum, in the same order, as
// conv2dBackwardData over red.
void conv2dBackwardDataKBlocks(const Conv2dShape& s, i64 kb, const std::vector<W>& dyBlocks, W w,
                               float* dx, Range out, Range red);
// dw of a grouped convolution summed over output rows in red, from x and dy in blocks of gb
// groups (gb*C/G and gb*K/G channels each). The same sum, in the same order, as
// conv2dBackwardFilter.
void conv2dBackwardFilterGroupBlocks(const Conv2dShape& s, i64 gb, W xBlocks, W dyBlocks, float* dw,
                                     Range out, Range red);
// dw[K,R,S,C/G] summed over output rows (n * OH + oh) in red only: a part reads only the dy rows
// in red and the x rows they cover.
void conv2dBackwardFilter(const Conv2dShape& s, W x, W dy, float* dw, Range out, Range red);
// The blocked weight gradient (groups == 1; compiler/conv_plan.h, FilterBlocks):
// dy in k-blocks dyB[K/kb][P][kbb] (P = N*OH*OW; block b at flat offset b*kb*P); writes `out`.
void conv2dGradToChannelBlocks(const Conv2dShape& s, i64 kb, W dy, float* dyB, Range out);
// x in c-blocks xB[C/cb][XP][cbb] (block g at g*cb*XP): XP = N*H*W, or when `subsampled` (1x1,
// no padding) the P pixels (n, oh*strideH, ow*strideW) the convolution reads, in output order.
void conv2dInputToChannelBlocks(const Conv2dShape& s, i64 cb, bool subsampled, W x, float* xB,
                                Range out);
// One part's block of the weight gradient, [kbb][R][S][cbb] of k-block b and c-block g:
// `out` is a range of the part's blocked layout (conv_plan::filterBlockOffset) inside one block,
// summed over output rows `red` only, in the order of conv2dBackwardFilter.
void conv2dBackwardFilterBlock(const Conv2dShape& s, i64 kb, i64 cb, bool subsampled, W xB, W dyB,
                               float* dwBlock, Range out, Range red);
// The blocked forward convolution (groups == 1; compiler/conv_plan.h, ForwardBlocks):
// w in the blocked weight gradient's layout wB[K/kb][C/cb][kbb][R][S][cbb]; writes `out`.
void conv2dWeightsToFilterBlocks(const Conv2dShape& s, i64 kb, i64 cb, W w, float* wB, Range out);
// Partials yP[C/cb][K/kb][P][kbb] of y: c-block g's sum over its input channels only (x in
// c-blocks as conv2dInputToChannelBlocks, w as conv2dWeightsToFilterBlocks), in the order of
// conv2dForward; `out` lies in one (c-block, k-block).
void conv2dForwardBlock(const Conv2dShape& s, i64 kb, i64 cb, bool subsampled, W xB, W wB,
                        float* yP, Range out);
// The blocked data gradient (groups == 1; compiler/conv_plan.h, DataBlocks): partials
// dxP[K/kb][C/cb][XP][cbb] of dx, k-block b's sum over its output channels only (dy in k-blocks
// as conv2dGradToChannelBlocks, w as conv2dWeightsToFilterBlocks), in the order of
// conv2dBackwardData. `out` is a range of [K/kb][C/cb][N*H*W][cbb] inside one (k-block,
// c-block); dxP receives the elements of its pixels that a tap reaches, in order (XP = N*H*W;
// when `subsampled`, a strided 1x1 convolution without padding, the other pixels are skipped).
void conv2dBackwardDataBlock(const Conv2dShape& s, i64 kb, i64 cb, bool subsampled, W dyB, W wB,
                             float* dxP, Range out);

// ---- matmul -------------------------------------------------------------------------------
// c[batch,M,N] = op(a) x op(b), summed over k in red = [k0, k1) only (partials).
void matMul(const MatMulShape& s, W a, W b, float* c, Range out, Range red);

// ---- elementwise --------------------------------------------------------------------------
// y[i] = f(x[i]); alpha is used by UnaryKind::Scale.
void unary(UnaryKind kind, float alpha, W x, float* y, Range out);
// dx[i] = dy[i] * f'(x[i]) for every UnaryKind (x is the forward *input*).
void unaryGrad(UnaryKind kind, float alpha, W x, W dy, float* dx, Range out);
// y = a (op) b with numpy broadcasting.
void binary(BinaryKind kind, const BroadcastShape& s, W a, W b, float* y, Range out);

// ---- reductions ---------------------------------------------------------------------------
// y[outElems] = reduce over the reduced dims, restricted to reduced flat indices in `red`.
// Mean divides by the *full* reducedCount() so that partial means add up to the mean.
void reduce(ReduceKind kind, const ReduceShape& s, W x, float* y, Range out, Range red);

// ---- layout -------------------------------------------------------------------------------
// y = permute(x) with y.dims[i] = x.dims[perm[i]]; rank <= 6.
void transpose(const std::vector<i64>& inDims, const std::vector<int>& perm, W x, float* y,
               Range out);

// ---- pooling ------------------------------------------------------------------------------
// y[N,OH,OW,C]; padded cells never win a max and are excluded from averages unless
// countIncludePad. A window entirely in padding gives 0 (max) / 0 (avg).
void maxPoolForward(const Pool2dShape& s, W x, float* y, Range out);
// dx[N,H,W,C]: each dy goes to the first (row-major in the window) maximum of its window.
void maxPoolBackward(const Pool2dShape& s, W x, W dy, float* dx, Range out);
void avgPoolForward(const Pool2dShape& s, W x, float* y, Range out);
void avgPoolBackward(const Pool2dShape& s, W dy, float* dx, Range out);

// ---- batch norm over x viewed as [rows, C] (rows = N*H*W for NHWC) -------------------------
// Partial per-channel sums over rows in `red`: sum[c] = sum x, sumSq[c] = sum x^2, for the
// channels in `out` (out indexes channels; sum/sumSq hold out.size() values each).
void batchNormSums(i64 rows, i64 c, W x, float* sum, float* sumSq, Range out, Range red);
// y = (x - mean) * rsqrt(var + eps) * gamma + beta, elementwise over out (flat indices of x).
void batchNormNormalize(i64 rows, i64 c, float eps, W x, W mean, W var, W gamma, W beta, float* y,
                        Range out);
// Partial per-channel backward sums over rows in `red`, for the channels in `out`:
//   sumDy[c] = sum dy, sumDyXhat[c] = sum dy * (x - mean) * rsqrt(var + eps).
void batchNormBackwardSums(i64 rows, i64 c, float eps, W x, W dy, W mean, W var, float* sumDy,
                           float* sumDyXhat, Range out, Range red);
// dx = gamma * rsqrt(var+eps) / rows * (rows * dy - sumDy - xhat * sumDyXhat), over out.
void batchNormBackwardData(i64 rows, i64 c, float eps, W x, W dy, W mean, W var, W gamma, W sumDy,
                           W sumDyXhat, float* dx, Range out);

// ---- loss ---------------------------------------------------------------------------------
// Per-sample softmax cross-entropy with label smoothing eps over logits[N, classes]:
//   target = (1 - eps) * onehot(label) + eps / classes;  loss[n] = -sum target * log_softmax.
// out indexes samples.
void softmaxCrossEntropy(i64 classes, float smoothing, W logits, Window<std::int32_t> labels,
                         float* loss, Range out);
// dlogits[n, j] = dloss[n] * (softmax[n, j] - target[n, j]); out indexes flat logits elements.
void softmaxCrossEntropyGrad(i64 classes, float smoothing, W logits, Window<std::int32_t> labels,
                             W dloss, float* dlogits, Range out);
// Softmax over the last dimension of x viewed as [rows, cols]; out indexes flat elements.
void softmax(i64 cols, W x, float* y, Range out);
// dx = y * (dy - sum_j dy_j * y_j) per row, from the softmax *output* y.
void softmaxGrad(i64 cols, W y, W dy, float* dx, Range out);

// ---- optimizer and state updates (optimizers are lowered to ordinary ops, ipu_backend/optimizers)
// LARS (You et al. 2017; TensorFlow's LARSOptimizer, used by the MLPerf ResNet-50 reference):
// lr x trust, trust = eta |w| / (|g| + weightDecay |w| + epsilon) when |w| > 0 and |g| > 0, else
// 1; |w| = sqrt(wSumSq), |g| = sqrt(gSumSq) x gradScaleInverse (gradients under loss scaling).
// The update then takes an SGD momentum step at this rate, as LARSOptimizer's apply_momentum;
// LAMB's trust ratio is the same with eta 1, weightDecay 0, epsilon 0.
float larsLearningRate(float lr, float wSumSq, float gSumSq, float gradScaleInverse, float eta,
                       float weightDecay, float epsilon);
// running = momentum * running + (1 - momentum) * scale * value  (scale: e.g. n/(n-1)).
void emaUpdate(float momentum, float scale, float* running, const float* value, i64 count);
// apply_update: see kernels/apply_update.h.

}  // namespace ipu::kernels::ref
