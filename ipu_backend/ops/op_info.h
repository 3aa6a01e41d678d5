// The op registry: everything about one op kind in one OpInfo, registered by the op's own file
// ipu_backend/ops/<op>.cpp. The IR (type inference), autodiff (gradient rule), the compiler
// (tile plan), both engine modes (tile vertex and fused kernel), the cost model and the op tests
// (tolerances) look the op up here, so adding an op kind is one file plus one test case
// (docs/ARCHITECTURE.md, "Adding an op kind"). ops/CMakeLists globs the folder and generates the
// call of every file's IPU_REGISTER_OPS function, so no list needs editing either.
//
// Every OpKind value has an OpInfo: there are no per-layer switches left.
// OpRegistry.EveryOpKindHasEveryFacetAndACase (tests/backend/ops_test.cpp) fails when a kind is
// not registered, an OpInfo lacks a facet, or no op test exercises it. The precision pass reads
// def.precision and def.usesPartials (ir/op_defs.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ipu_backend/ir/graph.h"
#include "ipu_backend/ir/op_defs.h"
#include "ipu_backend/kernels/kernel_types.h"

namespace ipu {
class Builder;
struct HostFusionPlan;  // engine/host_fusion.h
struct Target;          // target/target.h
struct TileSlice;       // compiler/executable.h
class Collective;
}  // namespace ipu

namespace ipu::ops {

using kernels::Range;
using FW = kernels::Window<float>;
using IW = kernels::Window<std::int32_t>;

// Allowed dtypes of one input.
using DTypes = std::vector<DType>;
// Functions, not globals: registration may run during another file's static initialisation.
inline DTypes floatTypes() {
  return {DType::F32, DType::F16, DType::BF16};
}
inline DTypes indexTypes() {
  return {DType::I32};
}

// ---- gradient --------------------------------------------------------------------------------
struct GradArgs {
  Graph& g;
  Builder& b;
  const Op& op;             // a copy: adding ops reallocates the graph's op list
  std::vector<int> dy;      // gradient of each output, -1 where the loss does not depend on it
  std::vector<bool> needs;  // needs[i]: input i needs a gradient
  std::function<void(int input, int grad)> accumulate;
  std::string label;  // "layer_norm 'ln1'", for errors
};
using GradRule = std::function<void(const GradArgs&)>;
// The explicit rule of ops that are not differentiated (backward ops, updates): throws naming
// the op and `why`.
GradRule noGradient(std::string why);

// ---- tile plan ---------------------------------------------------------------------------------
// Elements [begin, end) of a buffer that a vertex reads.
struct NeedWindow {
  int buffer;
  i64 begin, end;
};
using Windows = std::vector<NeedWindow>;

// What an op's plan may ask of the compiler's planner (compiler.cpp implements it).
class PlanApi {
 public:
  virtual ~PlanApi() = default;
  virtual const Graph& graph() const = 0;
  // A compute set of the op's `phase` with one vertex per slice of outs[0]'s tile mapping (cut
  // at multiples of cutAt when > 0): the vertex's work is that range r, it writes r of every
  // buffer in `outs` (buffers of one size share one mapping) and reads windows(r).
  // `what` names the compute set after the op ("normalize": "y/batch_norm_train/normalize").
  // `red`, where given, is the vertex's part of a reduced extent (what the cost model prices).
  virtual void perSlice(const Op& op, int phase, const std::vector<int>& outs,
                        const std::function<Windows(Range)>& windows, i64 cutAt = 0,
                        std::string_view what = {},
                        const std::function<Range(Range)>& red = {}) = 0;
  // A sum over `redExtent` units split into parts whose windows fit a vertex's budget: phase
  // firstPhase writes one partial row per part (vertex work r, red the part's units), phase
  // firstPhase + 1 sums them (sumPartials; combineMax: takes their maximum, maxPartials, and
  // the partials stay f32); one phase writing `out` directly when one part suffices. With
  // cutAt > 0 the vertices writing partials are cut at multiples of cutAt output elements
  // (outputs whose windows are not adjacent, e.g. one sample's channels each). With redBlock > 0
  // the parts' ranges are cut at multiples of redBlock units (operands stored in blocks of the
  // reduced extent: a part reads whole blocks).
  virtual void splitReduction(const Op& op, int firstPhase, int out, i64 redExtent,
                              i64 bytesPerRedUnit,
                              const std::function<Windows(Range out, Range red)>& windows,
                              bool combineMax = false, i64 cutAt = 0, i64 redBlock = 0) = 0;
  // The whole of a tensor (small operands: scalars, indices, per-channel parameters).
  virtual NeedWindow whole(int tensor) const = 0;

  // -- mappings and budgets (the convolution, matmul and batch-norm plans) --
  // A buffer's tile mapping (slices in element order) and the tile holding one element.
  virtual const std::vector<TileSlice>& mapping(int buffer) const = 0;
  virtual int tileOf(int buffer, i64 element) const = 0;
  virtual i64 numTiles() const = 0;
  // What one vertex may gather of one operand (weights, rows) within a tile's memory.
  virtual i64 windowBudgetBytes() const = 0;
  // Maps `buffer` ([pixels, k], channels innermost) channel-blocked: tile (g, q) holds channels
  // [g*kg, (g+1)*kg) of the pixels of block q, so that a vertex needs only the weights of its
  // kg output channels. Only the op that writes the buffer may remap it, before planning.
  virtual void mapChannelBlocked(int buffer, i64 pixels, i64 k, i64 kg) = 0;
  // Maps `buffer` in blocks of blockElems elements, each block linearly over tiles of its own
  // (T / blocks of them), so that no tile's slice spans two blocks (a batched matmul's output:
  // a tile then reads one batch of its operands). Only the op that writes the buffer may remap
  // it, before planning.
  virtual void mapInBlocks(int buffer, i64 blockElems) = 0;
  // Per-channel sums over the rows of [rows, c] operands (batch norm): phase 0 one vertex per
  // part of the rows (work: all c channels, red: the part's rows) writing its pair of partial
  // rows (sums, second sums; `windows(channels, rows)`, `bytesPerRow` of them per row sets the
  // parts); phase 1 a vertex per slice of `outA` / `outB` (mapped alike, in runs that keep the
  // partials within the budget) reading the pairs of every part, interleaved.
  virtual void channelSums(const Op& op, i64 rows, i64 c, i64 bytesPerRow,
                           const std::function<Windows(Range channels, Range rows)>& windows,
                           int outA, int outB) = 0;
  // Ops that run off the tiles (replica ops): a compute set whose vertices only record which
  // tiles hold the operands (for liveness and vertex state); the engine moves the data.
  virtual void operandTiles(const Op& op) = 0;

  // A temporary f32 buffer of `elements`, mapped linearly, that later phases of the op read
  // (sums an op needs between its phases, e.g. group norm's per-group sums); its id.
  virtual int scratch(const Op& op, const std::string& what, i64 elements) = 0;

  // -- conv2d_backward_data's transposed-weights plan (compiler/conv_plan.h) --
  // With weights larger than a window budget and groups == 1, plans dx as a forward convolution
  // of dy with transposed weights wt[C,R,S,K] (phases conv_plan::kWeightKBlocksPhase,
  // kWeightTransposePhase, kTransposedDataPhase) where a tile holds less than under the split
  // over k; false (nothing planned) where that plan does not apply.
  virtual bool convBackwardDataTransposed(const Op& op) = 0;
  // The same split over its contraction K as well (compiler/conv_plan.h, DataBlocks): dy and w
  // copied into blocks (phases conv_plan::kDyKBlocksPhase, kDataWeightBlocksPhase), a partial per
  // (k-block, c-block, part of the pixels) (kDataBlocksPhase), then 1 sums the k-blocks, where
  // the transposed plan applies, its tile gathers more than conv_plan::kDataBlocksThreshold
  // window budgets and a tile holds less this way; false (nothing planned) otherwise.
  virtual bool convBackwardDataBlocked(const Op& op) = 0;

  // A temporary of `elements` in `dtype` that later phases of the op read, placed by `mapping`
  // (slices in element order covering [0, elements), e.g. following where an operand lives, so
  // that the phase writing it reads locally); its id.
  virtual int temporary(const Op& op, const std::string& what, i64 elements, DType dtype,
                        std::vector<TileSlice> mapping) = 0;
  // The target being compiled for (plans whose geometry depends on the tile size).
  virtual const Target& target() const = 0;

  // -- conv2d_backward_filter's blocked plan (compiler/conv_plan.h, FilterBlocks) --
  // With groups == 1, plans dw by blocks of output and input channels and parts of the output
  // rows (phases conv_plan::kFilterDyBlocksPhase, kFilterXBlocksPhase, kFilterBlocksPhase,
  // then 1) where a tile holds less than under the split over output rows; false (nothing
  // planned) otherwise.
  virtual bool convBackwardFilterBlocked(const Op& op) = 0;

  // -- conv2d's blocked plan (compiler/conv_plan.h, ForwardBlocks) --
  // With groups == 1, plans y by blocks of output and input channels and parts of the output
  // pixels (phases conv_plan::kForwardWeightBlocksPhase, kForwardXBlocksPhase,
  // kForwardBlocksPhase, then 1) where a tile holds less than under the split over output
  // channels and pixels and that split's tile exceeds two window budgets; false otherwise.
  virtual bool convForwardBlocked(const Op& op) = 0;
};
using PlanRule = std::function<void(PlanApi&, const Op&)>;

// ---- kernels -----------------------------------------------------------------------------------
// A tile vertex: its windows in plan order (16-bit data widened to f32; `ints` are the same
// windows read as i32, for index inputs), its output regions (f32, rounded back after it runs).
struct VertexArgs {
  const Graph& g;
  const Op& op;
  int phase;
  std::vector<FW> in;
  std::vector<IW> ints;
  std::vector<float*> out;
  Range work, red;
  const Target& target;  // the compiled target (plans whose geometry depends on the tile size)
};
using VertexKernel = std::function<std::function<void()>(const VertexArgs&)>;

// A fused (whole-op) kernel: every input and output as f32 (16-bit operands converted around
// it), i32 inputs in `ints` (nullptr for float inputs).
struct FusedArgs {
  const Graph& g;
  const Op& op;
  std::vector<float*> in;
  std::vector<const std::int32_t*> ints;
  std::vector<float*> out;
};
using FusedKernel = std::function<std::function<void()>(const FusedArgs&)>;

// Phase 1 of a splitReduction: the sum (maxPartials: the maximum) of the partial rows (the
// windows, in order).
std::function<void()> sumPartials(const VertexArgs& a);
std::function<void()> maxPartials(const VertexArgs& a);

// Elementwise ops (every input the output's shape): a vertex per slice of the output reading the
// same range of every input, and the two kernels from one element function
// f(inputs at element i) -> output, made once per op by `make(op)`.
void planElementwise(PlanApi& p, const Op& op);
using ElementFn = std::function<float(const float* in, i64 i)>;  // in: the inputs' values at i
VertexKernel elementwiseVertex(std::function<ElementFn(const Op&)> make);
FusedKernel elementwiseFused(std::function<ElementFn(const Op&)> make);

// ---- cost ------------------------------------------------------------------------------------
// Vector instructions per output vector of a vertex in `phase` (the cost model prices the rest:
// worker split, bytes, exchange).
using CostRule = std::function<double(const Op&, int phase)>;
// What the cost model needs to know beyond the instructions.
struct CostTraits {
  bool readModifyWrite = false;  // the in-place target is read as well as written (its bytes)
  // Vertices read same-sized operands element for element: the planned exchange moves only the
  // elements matching a vertex's outputs (cost_model.cpp, ExchangeModel::Planned).
  bool elementwise = false;
  // Vertices with a reduced range read (outputs x its extent) elements at one instruction per
  // vector: reductions and the combining of their partials (reduce).
  bool reduction = false;
  // Vertices read their whole input windows, not one element per output (pools, softmax rows).
  bool readsWindows = false;
  // Elements a vertex reads per output element (pools: the window), when not 1.
  std::function<double(const Graph&, const Op&)> elementsPerOutput;
  // AMP ops (convolutions, matmuls): their macPhases' vertices are priced as multiply-accumulates
  // (their share of `macs`: output elements and, split, their part of redExtent) at the AMP's
  // efficiency for the contraction length; the Planned exchange model prices moving planA /
  // planW (activations / weights: the tensors' bytes) for the best split of the tiles.
  struct MacWork {
    double macs = 0, contraction = 1, outElems = 1, redExtent = 1;
    std::vector<int> planA, planW;  // tensors
  };
  std::function<MacWork(const Graph&, const Op&)> macWork;
  // The phases of a macWork op whose vertices multiply (the others, e.g. the sum of partial
  // rows in phase 1, are priced by instructions per vector like any op).
  std::vector<int> macPhases{0};
  // Channel sums (PlanApi::channelSums, phases 0 and 1; batch norm): tensors a phase-0 vertex
  // reads per element (0: the op has none); phase 1 reads the two partial rows. The phases
  // after them are elementwise.
  int channelSumStreams = 0;
  // readModifyWrite per op, where an attribute decides it (apply_update: keep != 0).
  std::function<bool(const Op&)> readModifyWriteOf;
};

// ---- tests -----------------------------------------------------------------------------------
// Tolerances of the op tests, relative to the largest magnitude of the expected values.
struct Tolerance {
  double forward = 1e-5;  // against the plain reference
  double tileVsFused = 1e-5;
  double gradient = 2e-2;  // against central finite differences
};
struct Tolerances {
  Tolerance f32;
  Tolerance bf16{2e-2, 1e-2, 1e-1};
  Tolerance f16{4e-3, 2e-3, 5e-2};
  const Tolerance& of(DType t) const {
    return t == DType::BF16 ? bf16 : t == DType::F16 ? f16 : f32;
  }
};

// ---- native fused kernels (optional) ------------------------------------------------------------
// Kernels on the operands in their stored dtypes (oneDNN's bf16 primitives on bf16 data, no
// widening) and the op's part in host fusions (engine/host_fusion.h: a batch norm writing a
// relu's output and a mask its backward reads). The fused engine asks this facet first, once
// per op when it builds its steps; an empty function declines, and the engine then runs the f32
// `fused` kernel with 16-bit operands converted around it. An op planned into a host fusion
// must not decline if the fusion is its kernel's (batch norm's roles); the engine runs the others.
// The kernel objects belong to the returned function (captured shared_ptrs), built once, so a step
// calls the primitive directly.
struct NativeFusedArgs {
  const Graph& g;
  const Op& op;
  std::vector<void*> in, out;               // operand memory, in g.tensor(t).dtype
  const HostFusionPlan& fusion;             // fusion.role[op.id] and the fusion's tensors
  bool bf16Primitives;                      // this CPU's oneDNN has bf16 primitives
  std::function<void*(int tensor)> memory;  // any tensor's memory (a fusion's relu output)
  // A side buffer of this op that later ops find by its op id (a mask), and that of an
  // earlier op.
  std::function<void*(std::size_t bytes)> allocateFusionBuffer;
  std::function<void*(int op)> fusionBuffer;
};
using NativeFusedKernel = std::function<std::function<void()>(const NativeFusedArgs&)>;
// ---- facets of the elementwise, update and replica kinds --------------------------------------
// halfChunk (optional; elementwise kinds): the fused path of an op whose inputs all have its
// output's element count and some operand is stored in 16 bits. The engine widens a chunk of
// each input into f32 in cache, calls the chunk function and rounds the chunk of results back
// (RNE), instead of converting whole tensors through scratch (a third of the memory traffic;
// the same element loops, so the same bits). in[k]: input k's values over the chunk (data and
// the chunk's first global element), out: the chunk's results, r: its global range. Made once
// per op, called once per chunk of thousands of elements (no per-element indirection).
using ElementChunk = std::function<void(const FW* in, float* out, Range r)>;
using HalfChunkKernel = std::function<ElementChunk(const Graph&, const Op&)>;
inline constexpr size_t kMaxChunkInputs = 2;

// replica (optional; replica kinds): ops that run off the tiles on the engine's Collective and
// replica index, in both engine modes. The engine checks the replica count and the f32 operands
// and passes the tensors themselves (fused mode) or host copies of them (tile mode, copied off
// the tiles before and back after). Such a kind has no `vertex` or `fused` facet and plans with
// PlanApi::operandTiles.
struct ReplicaArgs {
  const Graph& g;
  const Op& op;
  Collective* collective;  // null when replicas == 1 (the collectives are the identity)
  int replica;             // this engine's replica index r
  i64 replicas;            // R, the replica count the op was compiled for
  std::vector<const float*> in;
  std::vector<float*> out;
};
using ReplicaKernel = std::function<std::function<void()>(const ReplicaArgs&)>;
// linkTraffic (with `replica`): what a replica op moves over the IPU-Links for the cost model:
// `halves` of a ring all-reduce of `scale` x the bytes of `tensor` over R replicas (tensor -1:
// none, e.g. a replica taking its own chunk).
struct LinkTraffic {
  int tensor = -1;
  double scale = 1;
  double halves = 0.5;  // a reduce-scatter or an all-gather is half an all-reduce
};
using LinkTrafficRule = std::function<LinkTraffic(const Op&)>;

// lowered: a kind compile() replaces by ordinary ops before planning (optimizer_update, lowered
// by ipu_backend/optimizers): it has no plan, kernels or cost; reaching them is an internal error.

// ---- the op kind -------------------------------------------------------------------------------
using InferRule = std::function<std::vector<TensorType>(
    const std::vector<const Tensor*>& in, const Attrs& attrs, const std::string& label)>;

struct OpInfo {
  OpDef def;  // kind (assigned at registration for new kinds), name, arity, attrs
  // Per input, checked before `infer`; a variadic kind (def.numInputs -1) gives one entry that
  // every input must meet.
  std::vector<DTypes> inputDTypes;
  InferRule infer;  // output types; throws GraphError naming the op and tensors
  GradRule grad;
  PlanRule plan;
  VertexKernel vertex;            // reference kernel (tile mode)
  FusedKernel fused;              // fast kernel (fused mode)
  NativeFusedKernel nativeFused;  // optional: stored dtypes and host fusions (fused mode)
  CostRule cost;
  CostTraits costTraits;
  Tolerances tolerances;
  std::string doc;  // one line: what it computes, shapes
  // The optional facets of the elementwise, update and replica kinds (above).
  HalfChunkKernel halfChunk;
  ReplicaKernel replica;
  LinkTrafficRule linkTraffic;
  bool lowered = false;
};

// Registers an op kind (called from IPU_REGISTER_OPS functions). A kind left as
// kUnassignedKind gets the next free value; a built-in kind keeps its enum value.
inline constexpr auto kUnassignedKind = static_cast<OpKind>(255);
OpKind registerOp(OpInfo info);

// nullptr when `kind` is not in the registry (a built-in kind still handled by the switches).
const OpInfo* find(OpKind kind);
// The dtypes input i of a registered kind accepts (variadic kinds: the one entry).
const DTypes& inputDTypesOf(const OpInfo& info, size_t i);
const OpInfo* find(std::string_view name);
// The kind of a registered op by name; throws GraphError listing the registered names.
OpKind kindNamed(std::string_view name);
std::vector<const OpInfo*> all();
// Appends a registered op by name; returns its output tensor ids.
std::vector<int> add(Graph& g, std::string_view name, std::vector<int> inputs, Attrs attrs = {},
                     std::vector<std::string> outputNames = {});
// Number of op kind values in use (built-in and registered), for tables indexed by kind.
int kindCount();

// Opening of an op file's registration function: IPU_REGISTER_OPS(layer_norm) { ... }.
#define IPU_REGISTER_OPS(stem) void ipuRegisterOps_##stem()

// Shared checks for `infer` rules (GraphError naming the op and tensors).
[[noreturn]] void fail(const std::string& label, const std::string& msg);
void expectRank(const Tensor& t, size_t rank, const std::string& label, const char* role);
void expectSameShape(const Tensor& a, const Tensor& b, const std::string& label);
// The `fn` attribute names one of `valid` (unary, binary, reduce functions).
void expectFunction(const Attrs& attrs, const std::vector<std::string_view>& valid,
                    const std::string& label);
// ceil(a / b) for positive b (tile and block counts in plans).
inline i64 ceilDiv(i64 a, i64 b) {
  return (a + b - 1) / b;
}
// Normalises a possibly negative axis of a rank-r tensor.
i64 axisOf(i64 axis, size_t rank, const std::string& label);
// The optional `partials` attribute of convolutions and matmuls: "f32" or "f16".
void expectPartials(const Attrs& attrs, const std::string& label);
// The type an op's partial sums are kept in: its `partials` attribute, f32 without one.
DType partialsOf(const Op& op);
// Every input and output of `op` is stored as `t` (native kernels).
bool allOperandsAre(const Graph& g, const Op& op, DType t);

}  // namespace ipu::ops
