// Issue 28: ResNet-50 at the published micro-batch 20 in FP16.16 fits one IPU-Mk2 with Graphcore's
// six split points used as recomputation checkpoints, and does not fit without recomputation.
// The verdict compiles the full model's training program twice and its evaluation program for
// 1,472 tiles (3-5 GB, a minute on a loaded 2-core host): nightly only (PipelineNightly.*).
#include <gtest/gtest.h>

#include <cstdio>

#include "harness/full_scale_projection.h"
#include "harness/pod_presets.h"

namespace ipu::harness {
namespace {

TEST(PipelineNightly, ResNet50MicroBatch20FitsOneMk2WithRecomputationAndNotWithout) {
  const PodPreset& preset = findPreset(Benchmark::kResNet50, 16, Scale::kFull);
  ASSERT_EQ(preset.micro_batch, 20);
  FitOptions options;
  options.recompute = true;
  options.compare_without_recomputation = true;
  const FitVerdict v = checkFit(preset, options);
  ASSERT_TRUE(v.training_without_recomputation.has_value());
  const ProgramMemory& with = v.training;
  const ProgramMemory& without = *v.training_without_recomputation;
  // The worst tile and the per-IPU peak (all tiles' live bytes at the fullest compute set).
  std::printf(
      "with the checkpoints: worst tile %d needs %lld B of %lld B, all tiles' peak %.1f MB\n"
      "without recomputation: worst tile %d needs %lld B, all tiles' peak %.1f MB\n%s\n",
      with.worst_tile, static_cast<long long>(with.worst_tile_bytes),
      static_cast<long long>(with.capacity), static_cast<double>(with.peak_live_bytes) / 1e6,
      without.worst_tile, static_cast<long long>(without.worst_tile_bytes),
      static_cast<double>(without.peak_live_bytes) / 1e6, v.message.c_str());
  EXPECT_TRUE(v.train_fits) << v.message;
  EXPECT_LE(with.worst_tile_bytes, with.capacity);
  EXPECT_TRUE(v.eval_fits);
  EXPECT_GT(without.worst_tile_bytes, without.capacity);
}

}  // namespace
}  // namespace ipu::harness
