// Places ResNet-50 over S IPUs per replica and prints the placement, every IPU's memory and
// every stage's modeled time: hand split points (--splits) or the automatic search (--auto,
// over the residual units' boundaries), with the compile times.
//   pipeline_plan --image 64 --micro-batch 8 --ipus 4 --auto
//   pipeline_plan --image 64 --micro-batch 8 --ipus 4 --splits stage1_unit3,stage2_unit4,...
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "ipu_backend/cost/pipeline_search.h"
#include "models/resnet50/resnet50.h"

using namespace ipu;

int main(int argc, char** argv) {
  CLI::App app("ResNet-50 pipeline placement over several IPUs (modeled, Mk2)");
  int image = 224, microBatch = 20, ipus = 4, accumulation = 0, tiles = 1472;
  std::vector<std::string> splits;
  std::string schedule = "grouped";
  bool automatic = false;
  app.add_option("--image", image, "input height and width (224: the full model)");
  app.add_option("--micro-batch", microBatch, "images per micro-batch");
  app.add_option("--ipus", ipus, "IPUs per replica (one stage each)");
  app.add_option("--accumulation", accumulation, "G (0: the schedule's smallest valid count)");
  app.add_option("--schedule", schedule, "grouped | interleaved | sequential");
  app.add_option("--splits", splits, "hand split points (S - 1 layer names)")->delimiter(',');
  app.add_option("--tiles", tiles, "tiles per IPU (Mk2: 1472)");
  app.add_flag("--auto", automatic, "search the split points");
  CLI11_PARSE(app, argc, argv);

  models::ResNetConfig c = models::ResNetConfig::resnet50();
  c.inputH = c.inputW = image;
  const models::ResNetGraph rg = models::buildTraining(c, microBatch, models::resnetSgdOptions());
  Target ipu = Target::mk2();
  ipu.numTiles = tiles;
  pipeline::PipelineOptions o;
  o.schedule = pipeline::parseSchedule(schedule);
  o.accumulation =
      accumulation > 0 ? accumulation : pipeline::smallestAccumulation(o.schedule, ipus);
  std::vector<std::string> units;
  for (size_t s = 0; s < c.blocks.size(); ++s)
    for (int u = 1; u <= c.blocks[s]; ++u) units.push_back(fmt::format("stage{}_unit{}", s + 1, u));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (automatic) {
      const cost::AutoSplit a = cost::autoSplit(rg.graph, ipu, ipus, o, {}, units);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s  search + compiles: %.1f s\n", a.describe().c_str(), s);
    } else {
      o.splits = splits;
      const pipeline::PipelinedExecutable pe = pipeline::compilePipeline(rg.graph, ipu, o);
      const cost::PipelineStepCost pc = cost::estimatePipelineStep(pe);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s", pe.describe().c_str());
      const auto st = cost::stageSeconds(pc);
      for (size_t i = 0; i < st.size(); ++i)
        std::printf("  stage %zu: %.3f ms per micro-batch\n", i, st[i] * 1e3);
      std::printf("  step: %d cycles x %.3f ms + update %.3f ms = %.3f ms; compile %.1f s\n",
                  pc.cycles, pc.cycleSeconds * 1e3, pc.updateSeconds * 1e3, pc.seconds * 1e3, s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
