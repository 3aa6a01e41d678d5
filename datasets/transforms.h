// ImageNet preprocessing (MLPerf ResNet-50): train = RandomResizedCrop + horizontal flip, eval =
// resize shorter side + center crop; both write normalised RGB NHWC float32 straight into the
// caller's batch slot.
#pragma once

#include <opencv2/core.hpp>

#include "datasets/image_dataset.h"
#include "datasets/rng.h"

namespace datasets {

struct CropRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  bool operator==(const CropRect&) const = default;
};

struct RandomResizedCropParams {
  double minScale = 0.08;
  double maxScale = 1.0;
  double minRatio = 3.0 / 4.0;
  double maxRatio = 4.0 / 3.0;
  int attempts = 10;
};

// torchvision.transforms.RandomResizedCrop.get_params: `attempts` tries at a random area/aspect,
// then a center crop clamped to the ratio range. Uses only `rng`, so it can run on the header's
// size before decoding.
CropRect randomResizedCropRect(int width, int height, Rng& rng,
                               const RandomResizedCropParams& p = {});

// torchvision Resize(resize) (shorter side) then CenterCrop(crop), expressed in the source image's
// coordinates: the crop rect of the source and the size the whole image is resized to.
struct EvalGeometry {
  int resizedWidth = 0;
  int resizedHeight = 0;
  CropRect crop;  // in resized coordinates
};
EvalGeometry evalGeometry(int width, int height, int resize, int crop);

enum class Interpolation {
  kBilinear,     // cv::INTER_LINEAR everywhere (no antialiasing; TF resize_bilinear)
  kAntialiased,  // area averaging when shrinking, bilinear when enlarging (close to PIL)
};

// Writes `bgr` (CV_8UC3) as RGB, normalised, optionally mirrored, into out[h][w][3].
void writeNormalizedRgb(const cv::Mat& bgr, const NormalizationLut& lut, bool flip, float* out);

// Resizes bgr(roi) to size x size and writes it normalised. `scratch` is reused between calls.
void resizeRoiToOutput(const cv::Mat& bgr, const cv::Rect& roi, int outWidth, int outHeight,
                       Interpolation interp, const NormalizationLut& lut, bool flip,
                       cv::Mat& scratch, float* out);

// Bilinear resample of the sub-pixel rect (x, y, w, h) of bgr to outWidth x outHeight. Used after
// a DCT-scaled decode, where the crop no longer falls on whole pixels and the remaining shrink is
// below ~2.7x (the DCT scaling did the antialiasing).
void resizeRectToOutput(const cv::Mat& bgr, double x, double y, double w, double h, int outWidth,
                        int outHeight, const NormalizationLut& lut, bool flip, cv::Mat& scratch,
                        float* out);

// Eval transform of a decoded image into out[crop][crop][3].
void evalTransform(const cv::Mat& bgr, int resize, int crop, Interpolation interp,
                   const NormalizationLut& lut, float* out);

// Train transform of a decoded image into out[crop][crop][3]: draws the crop rect then the flip
// from `rng` (in that order, the same as torchvision).
void trainTransform(const cv::Mat& bgr, Rng& rng, int crop, Interpolation interp,
                    const NormalizationLut& lut, float* out, const RandomResizedCropParams& p = {});

}  // namespace datasets
