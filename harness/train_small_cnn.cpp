// The embedded default job: trains the small CNN on real Fashion-MNIST through the emulated IPU
// backend and prints loss, test accuracy and time per epoch.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <fstream>

#include "datasets/fashion_mnist.h"
#include "harness/image_task.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/report/report.h"
#include "models/small_cnn/small_cnn.h"

int main(int argc, char** argv) {
  CLI::App app{"Train a small CNN on Fashion-MNIST through the emulated IPU backend"};
  std::string dataDir = datasets::kDefaultFashionMnistDir, engine = "fused", reportPath, pagePath;
  int epochs = 2, threads = 2;
  std::int64_t batch = 64, trainSubset = 0;
  double lr = 0.05;
  std::uint64_t seed = 1;
  app.add_option("--data-dir", dataDir, "Fashion-MNIST folder (IDX files, gzip or plain)")
      ->capture_default_str();
  app.add_option("--epochs", epochs, "training epochs")->capture_default_str();
  app.add_option("--batch", batch, "micro-batch size")->capture_default_str();
  app.add_option("--lr", lr, "peak learning rate (linear decay to 0)")->capture_default_str();
  app.add_option("--train-subset", trainSubset, "train on the first N shuffled images (0: all)")
      ->capture_default_str();
  app.add_option("--engine", engine, "engine mode: fused or tile")->capture_default_str();
  app.add_option("--threads", threads, "compute threads")->capture_default_str();
  app.add_option("--seed", seed, "seed for weights and shuffling")->capture_default_str();
  app.add_option("--report", reportPath, "write the training step's JSON compile report here");
  app.add_option("--report-page", pagePath,
                 "write the training step's report page (HTML: tile memory, liveness, the cost "
                 "model's BSP timeline) here");
  CLI11_PARSE(app, argc, argv);
  try {
    ipu::kernels::fused::setNumThreads(threads);
    auto train = datasets::loadFashionMnist(dataDir, datasets::Split::kTrain);
    auto test = datasets::loadFashionMnist(dataDir, datasets::Split::kTest);
    ipu::models::SmallCnnConfig cfg;
    ipu::SgdOptions sgd;
    sgd.momentum = 0.9;
    sgd.weightDecay = 5e-4;
    ipu::harness::TrainerOptions opts;
    opts.batch = batch;
    opts.mode = ipu::parseEngineMode(engine);
    opts.seed = seed;
    ipu::harness::Trainer trainer(ipu::models::buildSmallCnnTraining(cfg, batch, sgd),
                                  ipu::models::buildSmallCnnInference(cfg, batch), opts);
    const auto& rep = trainer.trainExecutable().report();
    fmt::print(
        "compiled for {}: {} compute sets, {} vertices, max tile memory {} B of {} B, "
        "compile {:.2f} s\n",
        opts.target.name, rep["program"]["compute_sets"].get<long>(),
        rep["program"]["vertices"].get<long>(), rep["memory"]["max_tile_bytes"].get<long>(),
        opts.target.bytesPerTile, rep["compile_seconds"].get<double>());
    if (!reportPath.empty()) {
      std::ofstream(reportPath) << rep.dump(2) << "\n";
      fmt::print("compile report written to {}\n", reportPath);
    }
    if (!pagePath.empty()) {
      const ipu::Executable& exe = trainer.trainExecutable();
      const std::string title = fmt::format(
          "small CNN training step, batch {} (Fashion-MNIST 28x28), {}", batch, opts.target.name);
      ipu::report::writeHtmlPage(
          pagePath, {ipu::report::compileView(exe, ipu::cost::estimateStep(exe), title)}, title);
      fmt::print("report page written to {}\n", pagePath);
    }
    trainer.initialise(ipu::models::initSmallCnn(trainer.trainExecutable().graph, seed));
    std::int64_t perEpoch =
        (trainSubset > 0 ? std::min<std::int64_t>(trainSubset, train.count) : train.count) / batch;
    std::int64_t total = perEpoch * epochs;
    auto schedule = [&](std::int64_t step) {
      return static_cast<float>(lr *
                                (1.0 - static_cast<double>(step) / static_cast<double>(total)));
    };
    auto norm = datasets::Normalization::fashionMnist();
    double seconds = 0;
    for (int e = 1; e <= epochs; ++e) {
      auto st = trainImageEpoch(trainer, train, norm, e, schedule, trainSubset);
      seconds += st.seconds;
      double acc = evaluateImageTopOne(trainer, test, norm);
      fmt::print("epoch {}: loss {:.4f}  test accuracy {:.4f}  {:.1f} s ({:.0f} images/s)\n", e,
                 st.meanLoss, acc, st.seconds, static_cast<double>(st.samples) / st.seconds);
      if (!st.finite) {
        fmt::print(stderr, "training diverged (NaN/Inf loss)\n");
        return 2;
      }
    }
    fmt::print("trained {} epochs in {:.1f} s ({} engine, {} threads)\n", epochs, seconds, engine,
               threads);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
