#include "datasets/transforms.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "datasets/error.h"

namespace datasets {

CropRect randomResizedCropRect(int width, int height, Rng& rng, const RandomResizedCropParams& p) {
  const double area = static_cast<double>(width) * height;
  const double logLo = std::log(p.minRatio), logHi = std::log(p.maxRatio);
  for (int i = 0; i < p.attempts; ++i) {
    const double targetArea = area * rng.uniform(p.minScale, p.maxScale);
    const double aspect = std::exp(rng.uniform(logLo, logHi));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(targetArea * aspect)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(targetArea / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int y = static_cast<int>(rng.uniformInt(0, height - h));
      const int x = static_cast<int>(rng.uniformInt(0, width - w));
      return {x, y, w, h};
    }
  }
  // Fallback: whole image, clamped to the ratio range, centred.
  const double inRatio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (inRatio < p.minRatio) {
    h = static_cast<int>(std::nearbyint(w / p.minRatio));
  } else if (inRatio > p.maxRatio) {
    w = static_cast<int>(std::nearbyint(h * p.maxRatio));
  }
  h = std::clamp(h, 1, height);
  w = std::clamp(w, 1, width);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

EvalGeometry evalGeometry(int width, int height, int resize, int crop) {
  EvalGeometry g;
  // torchvision Resize(int): shorter side -> resize, longer side int(resize * long / short).
  if (width <= height) {
    g.resizedWidth = resize;
    g.resizedHeight = static_cast<int>(static_cast<int64_t>(resize) * height / width);
  } else {
    g.resizedHeight = resize;
    g.resizedWidth = static_cast<int>(static_cast<int64_t>(resize) * width / height);
  }
  if (crop > g.resizedWidth || crop > g.resizedHeight) {
    throw DatasetError(fmt::format("eval transform: crop {} larger than resized image {}x{}", crop,
                                   g.resizedWidth, g.resizedHeight));
  }
  // torchvision CenterCrop: int(round((size - crop) / 2)); Python rounds half to even, as
  // nearbyint does in the default rounding mode.
  g.crop = {static_cast<int>(std::nearbyint((g.resizedWidth - crop) / 2.0)),
            static_cast<int>(std::nearbyint((g.resizedHeight - crop) / 2.0)), crop, crop};
  return g;
}

void writeNormalizedRgb(const cv::Mat& bgr, const NormalizationLut& lut, bool flip, float* out) {
  const int w = bgr.cols, h = bgr.rows;
  const float* r = lut.channel(0);
  const float* g = lut.channel(1);
  const float* b = lut.channel(2);
  for (int y = 0; y < h; ++y) {
    const uint8_t* src = bgr.ptr<uint8_t>(y);
    float* row = out + static_cast<size_t>(y) * w * 3;
    if (!flip) {
      for (int x = 0; x < w; ++x) {
        row[3 * x + 0] = r[src[3 * x + 2]];
        row[3 * x + 1] = g[src[3 * x + 1]];
        row[3 * x + 2] = b[src[3 * x + 0]];
      }
    } else {
      for (int x = 0; x < w; ++x) {
        const uint8_t* s = src + 3 * (w - 1 - x);
        row[3 * x + 0] = r[s[2]];
        row[3 * x + 1] = g[s[1]];
        row[3 * x + 2] = b[s[0]];
      }
    }
  }
}

void resizeRoiToOutput(const cv::Mat& bgr, const cv::Rect& roi, int outWidth, int outHeight,
                       Interpolation interp, const NormalizationLut& lut, bool flip,
                       cv::Mat& scratch, float* out) {
  const cv::Mat src = bgr(roi);
  if (roi.width == outWidth && roi.height == outHeight) {
    writeNormalizedRgb(src, lut, flip, out);
    return;
  }
  const bool shrink = roi.width >= outWidth && roi.height >= outHeight;
  const int flag =
      interp == Interpolation::kAntialiased && shrink ? cv::INTER_AREA : cv::INTER_LINEAR;
  cv::resize(src, scratch, cv::Size(outWidth, outHeight), 0, 0, flag);
  writeNormalizedRgb(scratch, lut, flip, out);
}

void resizeRectToOutput(const cv::Mat& bgr, double x, double y, double w, double h, int outWidth,
                        int outHeight, const NormalizationLut& lut, bool flip, cv::Mat& scratch,
                        float* out) {
  // Inverse map, pixel centres: src = x + (u + 0.5) * w / outWidth - 0.5.
  const double ax = w / outWidth, ay = h / outHeight;
  const cv::Matx23d m(ax, 0, x + 0.5 * ax - 0.5, 0, ay, y + 0.5 * ay - 0.5);
  cv::warpAffine(bgr, scratch, m, cv::Size(outWidth, outHeight),
                 cv::INTER_LINEAR | cv::WARP_INVERSE_MAP, cv::BORDER_REPLICATE);
  writeNormalizedRgb(scratch, lut, flip, out);
}

void evalTransform(const cv::Mat& bgr, int resize, int crop, Interpolation interp,
                   const NormalizationLut& lut, float* out) {
  const EvalGeometry g = evalGeometry(bgr.cols, bgr.rows, resize, crop);
  thread_local cv::Mat resized;
  const cv::Rect c(g.crop.x, g.crop.y, g.crop.width, g.crop.height);
  if (g.resizedWidth == bgr.cols && g.resizedHeight == bgr.rows) {
    writeNormalizedRgb(bgr(c), lut, false, out);
    return;
  }
  const bool shrink = g.resizedWidth <= bgr.cols && g.resizedHeight <= bgr.rows;
  const int flag =
      interp == Interpolation::kAntialiased && shrink ? cv::INTER_AREA : cv::INTER_LINEAR;
  cv::resize(bgr, resized, cv::Size(g.resizedWidth, g.resizedHeight), 0, 0, flag);
  writeNormalizedRgb(resized(c), lut, false, out);
}

void trainTransform(const cv::Mat& bgr, Rng& rng, int crop, Interpolation interp,
                    const NormalizationLut& lut, float* out, const RandomResizedCropParams& p) {
  const CropRect r = randomResizedCropRect(bgr.cols, bgr.rows, rng, p);
  const bool flip = rng.bernoulli(0.5);
  thread_local cv::Mat scratch;
  resizeRoiToOutput(bgr, cv::Rect(r.x, r.y, r.width, r.height), crop, crop, interp, lut, flip,
                    scratch, out);
}

}  // namespace datasets
