// Decode + augment throughput of the ImageNet train (or eval) transform on one thread, over a
// folder of JPEGs held in memory (file I/O excluded, as in torchvision_pipeline.py). Prints JSON.
//
//   datasets_bench --dir DIR [--repeats 5] [--transform train|eval] [--reduced 1|0]
//                  [--threads N]   (N > 1: the full Pipeline with N workers, from disk)
//                  [--on-corrupt fail|skip]
//
// An untimed first pass transforms every file once: a corrupt one ends the program with exit 1
// and its name (fail, the default), or is named on stderr and left out of the timed passes
// (skip; counted in the JSON's "skipped").
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <opencv2/core/utility.hpp>
#include <string>
#include <vector>

#include "datasets/image_decode.h"
#include "datasets/image_folder.h"
#include "datasets/pipeline.h"

namespace fs = std::filesystem;
using datasets::ImageFolderIndex;
using datasets::ImageFolderOptions;
using datasets::ImageFolderSource;

namespace {

int run(int argc, char** argv) {
  std::string dir, transform = "train", onCorrupt = "fail";
  int repeats = 5, reduced = 1, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir")
      dir = v;
    else if (k == "--repeats")
      repeats = std::atoi(v.c_str());
    else if (k == "--transform")
      transform = v;
    else if (k == "--reduced")
      reduced = std::atoi(v.c_str());
    else if (k == "--threads")
      threads = std::atoi(v.c_str());
    else if (k == "--on-corrupt")
      onCorrupt = v;
    else {
      fmt::print(stderr, "unknown option {}\n", k);
      return 2;
    }
  }
  if (dir.empty() || repeats <= 0 || threads <= 0 || (onCorrupt != "fail" && onCorrupt != "skip")) {
    fmt::print(stderr,
               "usage: {} --dir DIR [--repeats N] [--transform train|eval] [--reduced 0|1] "
               "[--threads N] [--on-corrupt fail|skip]\n",
               argv[0]);
    return 2;
  }
  cv::setNumThreads(0);  // one thread, as the pipeline workers run
  ImageFolderIndex index;
  index.dir = dir;
  index.classes = {"all"};
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".JPEG" || ext == ".jpg" || ext == ".jpeg")) {
      index.samples.push_back({e.path(), 0});
    }
  }
  std::sort(index.samples.begin(), index.samples.end(),
            [](const auto& a, const auto& b) { return a.path < b.path; });
  if (index.samples.empty()) {
    fmt::print(stderr, "no JPEGs under {}\n", dir);
    return 1;
  }
  ImageFolderOptions opt;
  opt.transform =
      transform == "eval" ? datasets::ImageTransform::kEval : datasets::ImageTransform::kTrain;
  opt.reducedDecode = reduced != 0;

  // The untimed pass: read and transform every file once; corrupt ones fail or are left out.
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ImageFolderIndex::Sample> good;
  size_t skipped = 0;
  {
    const ImageFolderSource probe(index, opt);
    std::vector<float> scratch(probe.shape().elems());
    for (const auto& sample : index.samples) {
      std::vector<uint8_t> b;
      try {
        datasets::readFileBytes(sample.path, b);
        datasets::Rng rng(0);
        probe.transformBytes(b, sample.path.string(), rng, scratch.data());
      } catch (const datasets::CorruptSampleError& e) {
        if (onCorrupt == "fail") {
          fmt::print(stderr,
                     "datasets_bench: {}\n(--on-corrupt skip leaves such files out of the "
                     "timing)\n",
                     e.what());
          return 1;
        }
        fmt::print(stderr, "datasets_bench: skipped: {}\n", e.what());
        ++skipped;
        continue;
      }
      good.push_back(sample);
      bytes.push_back(std::move(b));
    }
  }
  if (good.empty()) {
    fmt::print(stderr, "datasets_bench: every one of the {} files under {} is corrupt\n",
               index.samples.size(), dir);
    return 1;
  }
  index.samples = std::move(good);
  auto source = std::make_shared<ImageFolderSource>(index, opt);
  const size_t n = index.samples.size();
  std::vector<float> out(source->shape().elems() * (threads > 1 ? 0 : 1));

  std::vector<double> rates;
  double checksum = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t images = 0;
    if (threads == 1) {
      for (size_t i = 0; i < n; ++i) {
        datasets::Rng rng(datasets::hashSeed({0, static_cast<uint64_t>(r), i}));
        source->transformBytes(bytes[i], index.samples[i].path.string(), rng, out.data());
        checksum += out[i % out.size()];
      }
      images = n;
    } else {
      datasets::PipelineOptions po = datasets::PipelineOptions::train(32, 0, threads);
      po.lastBatch = datasets::LastBatch::kPad;
      datasets::Pipeline p(source, po, r);
      while (auto b = p.next()) {
        images += b->validCount;
        checksum += b->images[0];
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(images / s);
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  fmt::print(
      "{{\"impl\": \"opencv\", \"transform\": \"{}\", \"reduced_decode\": {}, \"threads\": {}, "
      "\"images\": {}, \"skipped\": {}, \"repeats\": {}, \"median_images_per_s\": {:.2f}, "
      "\"median_images_per_s_per_core\": {:.2f}, \"runs\": [{:.2f}], \"checksum\": {:.4f}}}\n",
      transform, reduced ? "true" : "false", threads, n, skipped, repeats, median, median / threads,
      fmt::join(rates, ", "), checksum);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // e.g. an unreadable folder: a message, not an abort
    fmt::print(stderr, "datasets_bench: error: {}\n", e.what());
    return 1;
  }
}
