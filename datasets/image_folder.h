// ImageNet in its standard folder layout: <root>/<split>/<synset>/*.JPEG, classes = sorted synset
// folder names.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "datasets/error.h"
#include "datasets/source.h"
#include "datasets/transforms.h"

namespace datasets {

struct ImageFolderIndex {
  std::filesystem::path dir;         // the split directory that was scanned
  std::vector<std::string> classes;  // sorted; label = position
  struct Sample {
    std::filesystem::path path;
    int32_t label;
  };
  std::vector<Sample> samples;            // sorted by (label, file name)
  std::vector<std::string> emptyClasses;  // class folders without images (kSkip only)
};

// Scans `dir` (e.g. root/"train"). Image files are *.jpeg / *.jpg / *.png, any case; other files
// and hidden entries are ignored. If `classes` is given (e.g. train's classes when scanning val)
// labels follow it and every folder of `dir` must be in it.
// Errors (DatasetError naming the path): missing directory, no class folders, no image at all, an
// unknown class folder, and an empty class folder under kFail. Under kSkip an empty class folder
// keeps its label (so val labels still match train) and is listed in emptyClasses, with a
// warning on stderr.
ImageFolderIndex scanImageFolder(const std::filesystem::path& dir, CorruptPolicy emptyClassPolicy,
                                 const std::vector<std::string>* classes = nullptr);

enum class ImageTransform { kTrain, kEval };

struct ImageFolderOptions {
  ImageTransform transform = ImageTransform::kTrain;
  int cropSize = 224;    // output is cropSize x cropSize x 3
  int resizeSize = 256;  // eval: shorter side before the center crop
  Normalization norm = Normalization::imageNet();
  Interpolation interp = Interpolation::kAntialiased;
  RandomResizedCropParams rrc;
  // Train: decode only the region of the JPEG the random crop needs, DCT-scaled to the smallest
  // M/8 that keeps >= cropSize pixels per crop side (libjpeg-turbo fast path, jpeg_region.h;
  // without it OpenCV's IMREAD_REDUCED_* 1/2, 1/4, 1/8). The final resize is still a shrink, so
  // output quality is kept; the crop and flip drawn are the same either way. Eval (antialiased,
  // shrinking JPEGs): the same for the centre crop's region (resize + crop as one rect).
  bool reducedDecode = true;
};

// Decodes and transforms the files of an ImageFolderIndex. Corrupt files throw
// CorruptSampleError naming the file (the pipeline applies the CorruptPolicy).
class ImageFolderSource : public Source {
 public:
  ImageFolderSource(ImageFolderIndex index, const ImageFolderOptions& options);
  int64_t size() const override { return static_cast<int64_t>(index_.samples.size()); }
  SampleShape shape() const override { return {opt_.cropSize, opt_.cropSize, 3}; }
  int numClasses() const override { return static_cast<int>(index_.classes.size()); }
  void load(int64_t index, Rng& rng, float* outNHWC, int32_t* label) const override;
  std::string describe(int64_t index) const override;
  const ImageFolderIndex& index() const { return index_; }

  // The transform on bytes already in memory (benchmarks, tests).
  void transformBytes(std::span<const uint8_t> bytes, const std::string& name, Rng& rng,
                      float* outNHWC) const;

 private:
  // The eval transform from a decoded region of a JPEG; false where it does not apply.
  bool evalFromRegion(std::span<const uint8_t> bytes, const std::string& name, float* out) const;

  ImageFolderIndex index_;
  ImageFolderOptions opt_;
  NormalizationLut lut_;
};

}  // namespace datasets
