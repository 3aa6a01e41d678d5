// Winograd F(4x4, 3x3) (see winograd.h). The transforms are the standard ones (Lavin & Gray):
//   input   V = B^T d B   (d: a 6x6 input tile)
//   weights U = G g G^T   (g: a 3x3 filter)
//   output  Y = A^T M A   (M = U . V summed over input channels: the GEMMs)
// and for the weight gradient dg = G^T (sum over tiles of V . (A dY A^T)) G. Every transform
// below is one of those matrices applied to 3, 4 or 6 channel vectors at once (separable: the
// columns first, then the rows), vectorised over a chunk of channels.
#include "ipu_backend/kernels/winograd.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "ipu_backend/kernels/onednn_common.h"

namespace ipu::kernels::fused::detail {

namespace {

constexpr i64 kPoints = 36;  // 6x6 Winograd points per tile
constexpr i64 kChunk = 64;   // channels per transform step (its temporaries stay in L1)

// r = B^T d over 6 vectors of n channels.
inline void inputRows(const float* const d[6], float* const r[6], i64 n) {
#pragma omp simd
  for (i64 c = 0; c < n; ++c) {
    const float d0 = d[0][c], d1 = d[1][c], d2 = d[2][c], d3 = d[3][c], d4 = d[4][c], d5 = d[5][c];
    r[0][c] = 4.0f * d0 - 5.0f * d2 + d4;
    r[1][c] = -4.0f * d1 - 4.0f * d2 + d3 + d4;
    r[2][c] = 4.0f * d1 - 4.0f * d2 - d3 + d4;
    r[3][c] = -2.0f * d1 - d2 + 2.0f * d3 + d4;
    r[4][c] = 2.0f * d1 - d2 - 2.0f * d3 + d4;
    r[5][c] = 4.0f * d1 - 5.0f * d3 + d5;
  }
}

// o = A^T m: 6 vectors to 4.
inline void outputRows(const float* const m[6], float* const o[4], i64 n) {
#pragma omp simd
  for (i64 c = 0; c < n; ++c) {
    const float m0 = m[0][c], m1 = m[1][c], m2 = m[2][c], m3 = m[3][c], m4 = m[4][c], m5 = m[5][c];
    o[0][c] = m0 + m1 + m2 + m3 + m4;
    o[1][c] = m1 - m2 + 2.0f * m3 - 2.0f * m4;
    o[2][c] = m1 + m2 + 4.0f * m3 + 4.0f * m4;
    o[3][c] = m1 - m2 + 8.0f * m3 - 8.0f * m4 + m5;
  }
}

// u = G g: 3 vectors to 6.
inline void filterRows(const float* const g[3], float* const u[6], i64 n) {
#pragma omp simd
  for (i64 c = 0; c < n; ++c) {
    const float g0 = g[0][c], g1 = g[1][c], g2 = g[2][c];
    u[0][c] = 0.25f * g0;
    u[1][c] = -(g0 + g1 + g2) / 6.0f;
    u[2][c] = -(g0 - g1 + g2) / 6.0f;
    u[3][c] = g0 / 24.0f + g1 / 12.0f + g2 / 6.0f;
    u[4][c] = g0 / 24.0f - g1 / 12.0f + g2 / 6.0f;
    u[5][c] = g2;
  }
}

// z = A y: 4 vectors to 6 (an output gradient tile into the Winograd domain).
inline void gradientRows(const float* const y[4], float* const z[6], i64 n) {
#pragma omp simd
  for (i64 c = 0; c < n; ++c) {
    const float y0 = y[0][c], y1 = y[1][c], y2 = y[2][c], y3 = y[3][c];
    z[0][c] = y0;
    z[1][c] = y0 + y1 + y2 + y3;
    z[2][c] = y0 - y1 + y2 - y3;
    z[3][c] = y0 + 2.0f * y1 + 4.0f * y2 + 8.0f * y3;
    z[4][c] = y0 - 2.0f * y1 + 4.0f * y2 - 8.0f * y3;
    z[5][c] = y3;
  }
}

// r = G^T z: 6 vectors to 3 (a weight gradient out of the Winograd domain).
inline void filterGradientRows(const float* const z[6], float* const r[3], i64 n) {
#pragma omp simd
  for (i64 c = 0; c < n; ++c) {
    const float z0 = z[0][c], z1 = z[1][c], z2 = z[2][c], z3 = z[3][c], z4 = z[4][c], z5 = z[5][c];
    r[0][c] = 0.25f * z0 - (z1 + z2) / 6.0f + (z3 + z4) / 24.0f;
    r[1][c] = (z2 - z1) / 6.0f + (z3 - z4) / 12.0f;
    r[2][c] = (z3 + z4 - z1 - z2) / 6.0f + z5;
  }
}

// This thread's buffer for one operand of the Winograd domain (slot 0-2), shared by every
// Winograd kernel that runs on the thread (fused ops run one at a time per engine).
float* domainBuffer(int slot, i64 elements) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& b = buffers[slot];
  if (static_cast<i64>(b.size()) < elements) b.resize(static_cast<size_t>(elements));
  return b.data();
}

// The correlation each pass computes on the tiles: input [N, IH, IW, Cin] -> output
// [N, OH, OW, Cout] with padding (top, left) before the input.
struct Geometry {
  i64 n, ih, iw, cin, oh, ow, cout, padTop, padLeft;
  i64 tilesH() const { return (oh + 3) / 4; }
  i64 tilesW() const { return (ow + 3) / 4; }
  i64 tiles() const { return n * tilesH() * tilesW(); }
};

}  // namespace

bool winogradF43Computes(const Conv2dShape& s) {
  return s.r == 3 && s.s == 3 && s.strideH == 1 && s.strideW == 1 && s.dilH == 1 && s.dilW == 1 &&
         s.groups == 1 && s.padTop <= 2 && s.padLeft <= 2 && s.padBottom <= 2 && s.padRight <= 2 &&
         s.outH() >= 1 && s.outW() >= 1;
}

struct WinogradF43::Impl {
  WinogradPass pass;
  Conv2dShape s;
  Geometry g;  // the tiles: over y (forward, weight gradient) or dx (data gradient)
  std::unique_ptr<MatMulPrimitive> gemm;
  i64 vElems = 0, mElems = 0, uElems = 0;
  std::vector<float> zeros;  // kChunk zero channels: the padding's pixels

  Impl(WinogradPass p, const Conv2dShape& shape) : pass(p), s(shape), zeros(kChunk, 0.0f) {
    if (!winogradF43Computes(s))
      throw std::invalid_argument("WinogradF43: not a 3x3 stride-1 ungrouped convolution");
    if (pass == WinogradPass::BackwardData)
      g = {s.n, s.outH(), s.outW(), s.k, s.h, s.w, s.c, 2 - s.padTop, 2 - s.padLeft};
    else
      g = {s.n, s.h, s.w, s.c, s.outH(), s.outW(), s.k, s.padTop, s.padLeft};
    const i64 t = g.tiles();
    MatMulShape mm;
    mm.batch = kPoints;
    if (pass == WinogradPass::BackwardFilter) {
      // Z[e] (K x C) = dYt[e]^T (K x T) x V[e] (T x C)
      mm.m = s.k, mm.k = t, mm.n = s.c, mm.transA = true;
      vElems = kPoints * t * s.c, mElems = kPoints * t * s.k, uElems = kPoints * s.k * s.c;
    } else {
      // M[e] (T x Cout) = V[e] (T x Cin) x U[e]: U is [K][C] in both passes, so the forward
      // (Cout = K) reads it transposed and the data gradient (Cin = K) as it is.
      mm.m = t, mm.k = g.cin, mm.n = g.cout, mm.transB = pass == WinogradPass::Forward;
      vElems = kPoints * t * g.cin, mElems = kPoints * t * g.cout, uElems = kPoints * s.k * s.c;
    }
    gemm = std::make_unique<MatMulPrimitive>(mm, dnnl::memory::data_type::f32);
    // Grow this thread's buffers now rather than in a step.
    (void)domainBuffer(0, vElems), (void)domainBuffer(1, mElems), (void)domainBuffer(2, uElems);
  }

  // V[e][t][c] = (B^T d B)[e] of each input tile (zero outside the image).
  void transformInput(const float* in, float* v) const {
    const i64 th = g.tilesH(), tw = g.tilesW(), tiles = g.tiles(), cin = g.cin;
#pragma omp parallel for schedule(static)
    for (i64 t = 0; t < tiles; ++t) {
      alignas(64) float tmp[kPoints * kChunk];
      const i64 n = t / (th * tw), i = t / tw % th, j = t % tw;
      for (i64 c0 = 0; c0 < cin; c0 += kChunk) {
        const i64 nc = std::min(kChunk, cin - c0);
        const float* d[6][6];
        for (i64 u = 0; u < 6; ++u) {
          const i64 y = 4 * i - g.padTop + u;
          for (i64 w = 0; w < 6; ++w) {
            const i64 x = 4 * j - g.padLeft + w;
            d[u][w] = (y < 0 || y >= g.ih || x < 0 || x >= g.iw)
                          ? zeros.data()
                          : in + ((n * g.ih + y) * g.iw + x) * cin + c0;
          }
        }
        // Columns: tmp[a][w] = sum_u B^T[a][u] d[u][w]; rows: V[a][b] = sum_w tmp[a][w] B[w][b].
        for (i64 w = 0; w < 6; ++w) {
          const float* col[6] = {d[0][w], d[1][w], d[2][w], d[3][w], d[4][w], d[5][w]};
          float* out[6];
          for (i64 a = 0; a < 6; ++a) out[a] = tmp + (a * 6 + w) * kChunk;
          inputRows(col, out, nc);
        }
        for (i64 a = 0; a < 6; ++a) {
          const float* row[6];
          float* out[6];
          for (i64 b = 0; b < 6; ++b) {
            row[b] = tmp + (a * 6 + b) * kChunk;
            out[b] = v + ((a * 6 + b) * tiles + t) * cin + c0;
          }
          inputRows(row, out, nc);
        }
      }
    }
  }

  // U[e][k][c] = (G g G^T)[e], g the 3x3 filter w[k][.][.][c] (forward) or the one the data
  // gradient correlates dy with, w[k][2 - r][2 - s][c] (rotated; C and K swap roles).
  void transformWeights(const float* w, float* u) const {
    const bool rotate = pass == WinogradPass::BackwardData;
#pragma omp parallel for schedule(static)
    for (i64 k = 0; k < s.k; ++k) {
      alignas(64) float tmp[6 * 3 * kChunk];
      for (i64 c0 = 0; c0 < s.c; c0 += kChunk) {
        const i64 nc = std::min(kChunk, s.c - c0);
        auto tap = [&](i64 r, i64 t) {
          if (rotate) r = 2 - r, t = 2 - t;
          return w + ((k * 3 + r) * 3 + t) * s.c + c0;
        };
        for (i64 t = 0; t < 3; ++t) {  // columns: tmp[a][t] = sum_r G[a][r] g[r][t]
          const float* col[3] = {tap(0, t), tap(1, t), tap(2, t)};
          float* out[6];
          for (i64 a = 0; a < 6; ++a) out[a] = tmp + (a * 3 + t) * kChunk;
          filterRows(col, out, nc);
        }
        for (i64 a = 0; a < 6; ++a) {  // rows: U[a][b] = sum_t tmp[a][t] G[b][t]
          const float* row[3] = {tmp + (a * 3) * kChunk, tmp + (a * 3 + 1) * kChunk,
                                 tmp + (a * 3 + 2) * kChunk};
          float* out[6];
          for (i64 b = 0; b < 6; ++b) out[b] = u + ((a * 6 + b) * s.k + k) * s.c + c0;
          filterRows(row, out, nc);
        }
      }
    }
  }

  // out[n][4i + p][4j + q][c] = (A^T M A)[p][q] of each tile, the pixels inside the output.
  void transformOutput(const float* m, float* out) const {
    const i64 th = g.tilesH(), tw = g.tilesW(), tiles = g.tiles(), cout = g.cout;
#pragma omp parallel for schedule(static)
    for (i64 t = 0; t < tiles; ++t) {
      alignas(64) float tmp[4 * 6 * kChunk];
      alignas(64) float sink[4 * kChunk];  // the tile's pixels beyond the output's edge
      const i64 n = t / (th * tw), i = t / tw % th, j = t % tw;
      for (i64 c0 = 0; c0 < cout; c0 += kChunk) {
        const i64 nc = std::min(kChunk, cout - c0);
        for (i64 b = 0; b < 6; ++b) {  // columns: tmp[p][b] = sum_a A^T[p][a] M[a][b]
          const float* col[6];
          for (i64 a = 0; a < 6; ++a) col[a] = m + ((a * 6 + b) * tiles + t) * cout + c0;
          float* o[4];
          for (i64 p = 0; p < 4; ++p) o[p] = tmp + (p * 6 + b) * kChunk;
          outputRows(col, o, nc);
        }
        for (i64 p = 0; p < 4; ++p) {  // rows: Y[p][q] = sum_b tmp[p][b] A[b][q]
          const i64 y = 4 * i + p;
          const float* row[6];
          for (i64 b = 0; b < 6; ++b) row[b] = tmp + (p * 6 + b) * kChunk;
          float* o[4];
          for (i64 q = 0; q < 4; ++q) {
            const i64 x = 4 * j + q;
            o[q] = (y < g.oh && x < g.ow) ? out + ((n * g.oh + y) * g.ow + x) * cout + c0
                                          : sink + q * kChunk;
          }
          outputRows(row, o, nc);
        }
      }
    }
  }

  // dYt[e][t][k] = (A dY A^T)[e] of each 4x4 output-gradient tile (zero beyond the edge).
  void transformGradient(const float* dy, float* z) const {
    const i64 th = g.tilesH(), tw = g.tilesW(), tiles = g.tiles(), k = s.k;
#pragma omp parallel for schedule(static)
    for (i64 t = 0; t < tiles; ++t) {
      alignas(64) float tmp[6 * 4 * kChunk];
      const i64 n = t / (th * tw), i = t / tw % th, j = t % tw;
      for (i64 c0 = 0; c0 < k; c0 += kChunk) {
        const i64 nc = std::min(kChunk, k - c0);
        for (i64 q = 0; q < 4; ++q) {  // columns: tmp[a][q] = sum_p A[a][p] dY[p][q]
          const i64 x = 4 * j + q;
          const float* col[4];
          for (i64 p = 0; p < 4; ++p) {
            const i64 y = 4 * i + p;
            col[p] =
                (y < g.oh && x < g.ow) ? dy + ((n * g.oh + y) * g.ow + x) * k + c0 : zeros.data();
          }
          float* o[6];
          for (i64 a = 0; a < 6; ++a) o[a] = tmp + (a * 4 + q) * kChunk;
          gradientRows(col, o, nc);
        }
        for (i64 a = 0; a < 6; ++a) {  // rows: dYt[a][b] = sum_q tmp[a][q] A^T[q][b]
          const float* row[4];
          for (i64 q = 0; q < 4; ++q) row[q] = tmp + (a * 4 + q) * kChunk;
          float* o[6];
          for (i64 b = 0; b < 6; ++b) o[b] = z + ((a * 6 + b) * tiles + t) * k + c0;
          gradientRows(row, o, nc);
        }
      }
    }
  }

  // dw[k][r][t][c] = (G^T Z G)[r][t], Z[e][k][c] the sums over the tiles.
  void transformFilterGradient(const float* z, float* dw) const {
#pragma omp parallel for schedule(static)
    for (i64 k = 0; k < s.k; ++k) {
      alignas(64) float tmp[3 * 6 * kChunk];
      for (i64 c0 = 0; c0 < s.c; c0 += kChunk) {
        const i64 nc = std::min(kChunk, s.c - c0);
        for (i64 b = 0; b < 6; ++b) {  // columns: tmp[r][b] = sum_a G^T[r][a] Z[a][b]
          const float* col[6];
          for (i64 a = 0; a < 6; ++a) col[a] = z + ((a * 6 + b) * s.k + k) * s.c + c0;
          float* o[3] = {tmp + b * kChunk, tmp + (6 + b) * kChunk, tmp + (12 + b) * kChunk};
          filterGradientRows(col, o, nc);
        }
        for (i64 r = 0; r < 3; ++r) {  // rows: dw[r][t] = sum_b tmp[r][b] G[b][t]
          const float* row[6];
          for (i64 b = 0; b < 6; ++b) row[b] = tmp + (r * 6 + b) * kChunk;
          float* o[3];
          for (i64 t = 0; t < 3; ++t) o[t] = dw + ((k * 3 + r) * 3 + t) * s.c + c0;
          filterGradientRows(row, o, nc);
        }
      }
    }
  }

  void run(const float* in0, const float* in1, float* out) {
    syncThreads();
    float* v = domainBuffer(0, vElems);
    float* m = domainBuffer(1, mElems);
    float* u = domainBuffer(2, uElems);
    if (pass == WinogradPass::BackwardFilter) {
      transformInput(in0, v);     // x
      transformGradient(in1, m);  // dy
      gemm->run(m, v, u);
      transformFilterGradient(u, out);
      return;
    }
    transformWeights(in1, u);
    transformInput(in0, v);  // x (forward) or dy (data gradient)
    gemm->run(v, u, m);
    transformOutput(m, out);
  }
};

WinogradF43::WinogradF43(WinogradPass pass, const Conv2dShape& s)
    : impl_(std::make_unique<Impl>(pass, s)) {}
WinogradF43::~WinogradF43() = default;
void WinogradF43::run(const float* in0, const float* in1, float* out) {
  impl_->run(in0, in1, out);
}

}  // namespace ipu::kernels::fused::detail
