#include "datasets/image_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "datasets/image_decode.h"
#include "datasets/jpeg_region.h"

namespace datasets {
namespace fs = std::filesystem;

namespace {
bool isImageFile(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpeg" || ext == ".jpg" || ext == ".png";
}
bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}
// Resamples the rect (x, y, w, h) of the original image, decoded as `region`, to size x size:
// scaled pixel i covers original pixels [i/s, (i+1)/s), so the rect maps exactly.
void regionRectToOutput(const JpegRegion& region, double x, double y, double w, double h, int size,
                        const NormalizationLut& lut, bool flip, cv::Mat& scratch, float* out) {
  const double s = region.scale;
  resizeRectToOutput(region.bgr, x * s - region.x0, y * s - region.y0, w * s, h * s, size, size,
                     lut, flip, scratch, out);
}
}  // namespace

namespace {
ImageFolderIndex scanImageFolderImpl(const fs::path& dir, CorruptPolicy emptyClassPolicy,
                                     const std::vector<std::string>* classes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw DatasetError(fmt::format("{}: image folder not found (expected <root>/<split>/<synset>/"
                                   "*.JPEG)",
                                   dir.string()),
                       dir.string());
  }
  ImageFolderIndex idx;
  idx.dir = dir;
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && !hidden(e.path())) found.push_back(e.path().filename().string());
  }
  std::sort(found.begin(), found.end());
  if (found.empty()) {
    throw DatasetError(
        fmt::format("{}: no class folders (expected <synset>/*.JPEG below it)", dir.string()),
        dir.string());
  }
  idx.classes = classes ? *classes : found;
  std::map<std::string, int32_t> labelOf;
  for (size_t i = 0; i < idx.classes.size(); ++i) labelOf[idx.classes[i]] = static_cast<int32_t>(i);

  for (const std::string& name : found) {
    const auto it = labelOf.find(name);
    if (it == labelOf.end()) {
      throw DatasetError(fmt::format("{}: class folder '{}' is not among the {} given classes",
                                     (dir / name).string(), name, idx.classes.size()),
                         (dir / name).string());
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir / name)) {
      if (e.is_regular_file() && !hidden(e.path()) && isImageFile(e.path()))
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      const std::string p = (dir / name).string();
      if (emptyClassPolicy == CorruptPolicy::kFail) {
        throw DatasetError(fmt::format("{}: empty class folder (no *.JPEG/*.jpg/*.png files)", p),
                           p);
      }
      std::fprintf(stderr,
                   "datasets: warning: %s: empty class folder, class kept without samples\n",
                   p.c_str());
      idx.emptyClasses.push_back(name);
    }
    for (auto& f : files) idx.samples.push_back({std::move(f), it->second});
  }
  if (idx.samples.empty()) {
    throw DatasetError(fmt::format("{}: no image files in any class folder", dir.string()),
                       dir.string());
  }
  std::stable_sort(idx.samples.begin(), idx.samples.end(),
                   [](const auto& a, const auto& b) { return a.label < b.label; });
  return idx;
}
}  // namespace

ImageFolderIndex scanImageFolder(const fs::path& dir, CorruptPolicy emptyClassPolicy,
                                 const std::vector<std::string>* classes) {
  try {
    return scanImageFolderImpl(dir, emptyClassPolicy, classes);
  } catch (const fs::filesystem_error& e) {
    // An entry the scan cannot even stat: a symlink loop, an unreadable folder.
    const std::string p = e.path1().empty() ? dir.string() : e.path1().string();
    throw DatasetError(fmt::format("{}: cannot scan the image folder: {} (check the permissions "
                                   "and symbolic links below {})",
                                   p, e.code().message(), dir.string()),
                       p);
  }
}

ImageFolderSource::ImageFolderSource(ImageFolderIndex index, const ImageFolderOptions& options)
    : index_(std::move(index)), opt_(options), lut_(options.norm, 3) {
  if (opt_.cropSize <= 0 ||
      (opt_.transform == ImageTransform::kEval && opt_.resizeSize < opt_.cropSize)) {
    throw DatasetError(fmt::format("image folder {}: bad sizes crop={} resize={}",
                                   index_.dir.string(), opt_.cropSize, opt_.resizeSize));
  }
}

std::string ImageFolderSource::describe(int64_t index) const {
  if (index < 0 || index >= size()) return Source::describe(index);
  return index_.samples[index].path.string();
}

// Eval as one rect: resizing the image so its shorter side is resizeSize and cutting the
// centre crop is the crop's rect in original coordinates scaled onto the output, so only that
// region of a shrinking JPEG is decoded, DCT-scaled as far as the crop size allows.
bool ImageFolderSource::evalFromRegion(std::span<const uint8_t> bytes, const std::string& name,
                                       float* out) const {
  const ImageHeader h = inspectImage(bytes, name);
  const EvalGeometry g = evalGeometry(h.width, h.height, opt_.resizeSize, opt_.cropSize);
  if (h.format != ImageFormat::kJpeg || g.resizedWidth >= h.width || g.resizedHeight >= h.height)
    return false;
  const double sx = static_cast<double>(h.width) / g.resizedWidth;
  const double sy = static_cast<double>(h.height) / g.resizedHeight;
  const double x = g.crop.x * sx, y = g.crop.y * sy, w = g.crop.width * sx, hh = g.crop.height * sy;
  const int x0 = static_cast<int>(std::floor(x)), y0 = static_cast<int>(std::floor(y));
  const CropRect enclosing{x0, y0, std::min(h.width, static_cast<int>(std::ceil(x + w))) - x0,
                           std::min(h.height, static_cast<int>(std::ceil(y + hh))) - y0};
  thread_local JpegRegion region;
  if (!decodeJpegRegion(bytes, name, enclosing, opt_.cropSize, region)) return false;
  thread_local cv::Mat scratch;
  regionRectToOutput(region, x, y, w, hh, opt_.cropSize, lut_, false, scratch, out);
  return true;
}

void ImageFolderSource::transformBytes(std::span<const uint8_t> bytes, const std::string& name,
                                       Rng& rng, float* out) const {
  if (opt_.transform == ImageTransform::kEval) {
    if (opt_.reducedDecode && opt_.interp == Interpolation::kAntialiased &&
        evalFromRegion(bytes, name, out))
      return;
    const cv::Mat img = decodeImageBgr(bytes, name);
    evalTransform(img, opt_.resizeSize, opt_.cropSize, opt_.interp, lut_, out);
    return;
  }
  // Train: the crop and flip are drawn on the full-size geometry from the header, so the
  // augmentation is identical whether or not the decode is reduced.
  const ImageHeader h = inspectImage(bytes, name);
  const CropRect r = randomResizedCropRect(h.width, h.height, rng, opt_.rrc);
  const bool flip = rng.bernoulli(0.5);
  thread_local cv::Mat scratch;
  if (opt_.reducedDecode && h.format == ImageFormat::kJpeg) {
    // Decode only the crop's region, DCT-scaled as far as the crop size allows.
    thread_local JpegRegion region;
    if (decodeJpegRegion(bytes, name, r, opt_.cropSize, region)) {
      if (region.scale == 1.0) {  // unscaled: same integer crop as the full decode
        resizeRoiToOutput(region.bgr, cv::Rect(r.x - region.x0, r.y - region.y0, r.width, r.height),
                          opt_.cropSize, opt_.cropSize, opt_.interp, lut_, flip, scratch, out);
      } else {
        regionRectToOutput(region, r.x, r.y, r.width, r.height, opt_.cropSize, lut_, flip, scratch,
                           out);
      }
      return;
    }
  }
  int reduce = 1;
  if (opt_.reducedDecode && h.format == ImageFormat::kJpeg) {
    while (reduce < 8 && r.width / (reduce * 2) >= opt_.cropSize &&
           r.height / (reduce * 2) >= opt_.cropSize) {
      reduce *= 2;
    }
  }
  const cv::Mat img = decodeImageBgr(bytes, name, reduce);
  if (reduce == 1) {
    resizeRoiToOutput(img, cv::Rect(r.x, r.y, r.width, r.height), opt_.cropSize, opt_.cropSize,
                      opt_.interp, lut_, flip, scratch, out);
    return;
  }
  // Reduced pixel i covers original pixels [i*reduce, (i+1)*reduce): map the crop exactly.
  const double s = 1.0 / reduce;
  resizeRectToOutput(img, r.x * s, r.y * s, r.width * s, r.height * s, opt_.cropSize, opt_.cropSize,
                     lut_, flip, scratch, out);
}

void ImageFolderSource::load(int64_t index, Rng& rng, float* outNHWC, int32_t* label) const {
  if (index < 0 || index >= size()) {
    throw DatasetError(fmt::format("image folder {}: index {} outside 0..{}", index_.dir.string(),
                                   index, size() - 1));
  }
  const auto& s = index_.samples[index];
  thread_local std::vector<uint8_t> bytes;
  readFileBytes(s.path, bytes);
  transformBytes(bytes, s.path.string(), rng, outNHWC);
  *label = s.label;
}

}  // namespace datasets
