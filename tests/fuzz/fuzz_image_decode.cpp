// The JPEG/PNG decode path of the ImageNet folders: the container check (inspectImage), the
// partial DCT-scaled JPEG region decode (jpeg_region) and the full OpenCV decode, through the
// train and eval transforms exactly as ImageFolderSource::load runs them. A bad file must end in
// CorruptSampleError naming it (the pipeline skips or fails on it), never a crash.
#include <vector>

#include "datasets/error.h"
#include "datasets/image_decode.h"
#include "datasets/image_folder.h"
#include "datasets/rng.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// Small crops keep one execution fast; the decode itself sees the input's full size.
datasets::ImageFolderSource makeSource(datasets::ImageTransform transform) {
  datasets::ImageFolderOptions opt;
  opt.transform = transform;
  opt.cropSize = 8;
  opt.resizeSize = 10;
  return datasets::ImageFolderSource(datasets::ImageFolderIndex{}, opt);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const datasets::ImageFolderSource train = makeSource(datasets::ImageTransform::kTrain);
  static const datasets::ImageFolderSource eval = makeSource(datasets::ImageTransform::kEval);
  static std::vector<float> out(8 * 8 * 3);
  const std::span<const uint8_t> bytes(data, size);
  for (const auto* source : {&train, &eval}) {
    datasets::Rng rng(size);
    try {
      source->transformBytes(bytes, "fuzz.JPEG", rng, out.data());
    } catch (const datasets::CorruptSampleError&) {
    }
  }
  try {  // DCT-scaled full decode (the train path's fallback without libjpeg-turbo)
    datasets::ImageHeader header;
    const cv::Mat img = datasets::decodeImageBgr(bytes, "fuzz.JPEG", 1 << (size % 4), &header);
    if (img.empty() || img.type() != CV_8UC3) {
      ipu::fuzz::violated("decodeImageBgr returned an empty or non-BGR image");
    }
  } catch (const datasets::CorruptSampleError&) {
  }
  return 0;
}
