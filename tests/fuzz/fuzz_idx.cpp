// IDX files (Fashion-MNIST images and labels, plain or gzip): readIdxImages / readIdxLabels must
// either return a consistent dataset or throw DatasetError naming the file.
#include "datasets/error.h"
#include "datasets/fashion_mnist.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = ipu::fuzz::writeScratch("input-idx-ubyte", data, size);
  try {
    const datasets::ImageDataset images = datasets::readIdxImages(path);
    if (images.count < 0 ||
        images.pixels.size() != static_cast<size_t>(images.count) * images.imageElems()) {
      ipu::fuzz::violated("IDX images: pixel count disagrees with the header");
    }
  } catch (const datasets::DatasetError&) {
  }
  try {
    const auto labels = datasets::readIdxLabels(path, datasets::kFashionMnistClasses);
    for (int32_t l : labels) {
      if (l < 0 || l >= datasets::kFashionMnistClasses) {
        ipu::fuzz::violated("IDX labels: a label outside 0..9 was accepted");
      }
    }
  } catch (const datasets::DatasetError&) {
  }
  return 0;
}
