#include "datasets/fashion_mnist.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "datasets/error.h"
#include "tests/datasets/test_util.h"

namespace datasets {
namespace {

using testing::TempDir;

struct Checksum {
  uint64_t sum = 0;
  uint64_t weighted = 0;  // sum of px * ((i % 65521) + 1), order-sensitive
};
Checksum checksum(const std::vector<uint8_t>& px) {
  Checksum c;
  for (size_t i = 0; i < px.size(); ++i) {
    c.sum += px[i];
    c.weighted += px[i] * ((i % 65521) + 1);
  }
  return c;
}

std::filesystem::path realDir() {
  return kDefaultFashionMnistDir;
}

// Decompressed copy of a real file.
std::vector<uint8_t> gunzip(const std::string& name) {
  return readMaybeGzip(realDir() / name);
}

void writeGzip(const std::filesystem::path& p, const std::vector<uint8_t>& data) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())),
            static_cast<int>(data.size()));
  gzclose(f);
}

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "(no DatasetError)";
}

// Reference values computed independently with Python's gzip + numpy.
TEST(FashionMnist, LoadsRealTrainSplit) {
  const ImageDataset ds = loadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  ASSERT_EQ(ds.count, 60000);
  EXPECT_EQ(ds.height, 28);
  EXPECT_EQ(ds.width, 28);
  EXPECT_EQ(ds.channels, 1);
  EXPECT_EQ(ds.numClasses, 10);
  ASSERT_EQ(ds.labels.size(), 60000u);
  // The first training image is an ankle boot (class 9).
  const std::vector<int32_t> first(ds.labels.begin(), ds.labels.begin() + 10);
  EXPECT_EQ(first, (std::vector<int32_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  std::vector<int> perClass(10);
  for (int32_t l : ds.labels) ++perClass[l];
  EXPECT_EQ(perClass, std::vector<int>(10, 6000));
  const Checksum c = checksum(ds.pixels);
  EXPECT_EQ(c.sum, 3431114169ull);
  EXPECT_EQ(c.weighted, 112463966970509ull);
}

TEST(FashionMnist, LoadsRealTestSplit) {
  const ImageDataset ds = loadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  ASSERT_EQ(ds.count, 10000);
  const std::vector<int32_t> first(ds.labels.begin(), ds.labels.begin() + 10);
  EXPECT_EQ(first, (std::vector<int32_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  const Checksum c = checksum(ds.pixels);
  EXPECT_EQ(c.sum, 573469082ull);
  EXPECT_EQ(c.weighted, 18731464165863ull);
}

TEST(FashionMnist, ReadsUncompressedFiles) {
  TempDir dir;
  testing::writeAll(dir.path() / "t10k-images-idx3-ubyte", gunzip("t10k-images-idx3-ubyte.gz"));
  testing::writeAll(dir.path() / "t10k-labels-idx1-ubyte", gunzip("t10k-labels-idx1-ubyte.gz"));
  const ImageDataset plain = loadFashionMnist(dir.path(), Split::kTest);
  const ImageDataset gz = loadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  EXPECT_EQ(plain.pixels, gz.pixels);
  EXPECT_EQ(plain.labels, gz.labels);
}

TEST(FashionMnist, MissingFileNamesFileAndPackage) {
  TempDir dir;
  const std::string msg = errorOf([&] { loadFashionMnist(dir.path() / "nope", Split::kTrain); });
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
}

TEST(FashionMnist, TruncatedGzipIsReported) {
  TempDir dir;
  auto bytes = testing::readAll(realDir() / "t10k-images-idx3-ubyte.gz");
  bytes.resize(bytes.size() / 2);
  const auto path = dir.path() / "t10k-images-idx3-ubyte.gz";
  testing::writeAll(path, bytes);
  const std::string msg = errorOf([&] { readIdxImages(path); });
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(FashionMnist, TruncatedPixelDataSaysExpectedAndFound) {
  TempDir dir;
  auto bytes = gunzip("t10k-images-idx3-ubyte.gz");
  bytes.resize(16 + 1000);
  const auto path = dir.path() / "t10k-images-idx3-ubyte.gz";
  writeGzip(path, bytes);  // a valid gzip of a short IDX file
  const std::string msg = errorOf([&] { readIdxImages(path); });
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 7840000 bytes of pixel data"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 1000 bytes"), std::string::npos) << msg;
}

TEST(FashionMnist, TruncatedHeader) {
  TempDir dir;
  const auto path = dir.path() / "x-labels-idx1-ubyte";
  testing::writeAll(path, {0, 0, 8});
  const std::string msg = errorOf([&] { readIdxLabels(path, 10); });
  EXPECT_NE(msg.find("8-byte IDX header"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(FashionMnist, BadMagic) {
  TempDir dir;
  auto bytes = gunzip("t10k-labels-idx1-ubyte.gz");
  const auto path = dir.path() / "t10k-images-idx3-ubyte";
  testing::writeAll(path, bytes);  // a labels file where images are expected
  const std::string msg = errorOf([&] { readIdxImages(path); });
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic 0x00000803"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 0x00000801"), std::string::npos) << msg;
}

TEST(FashionMnist, ImageLabelCountMismatch) {
  TempDir dir;
  testing::writeAll(dir.path() / "t10k-images-idx3-ubyte", gunzip("t10k-images-idx3-ubyte.gz"));
  auto labels = gunzip("t10k-labels-idx1-ubyte.gz");
  labels[7] = 0x0F;  // count 10000 (0x2710) -> 9999 (0x270F)
  labels.pop_back();
  testing::writeAll(dir.path() / "t10k-labels-idx1-ubyte", labels);
  const std::string msg = errorOf([&] { loadFashionMnist(dir.path(), Split::kTest); });
  EXPECT_NE(msg.find("t10k-labels-idx1-ubyte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 10000 labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 9999"), std::string::npos) << msg;
}

TEST(FashionMnist, LabelOutOfRange) {
  TempDir dir;
  auto labels = gunzip("t10k-labels-idx1-ubyte.gz");
  labels[8 + 123] = 10;
  const auto path = dir.path() / "t10k-labels-idx1-ubyte";
  testing::writeAll(path, labels);
  const std::string msg = errorOf([&] { readIdxLabels(path, 10); });
  EXPECT_NE(msg.find("byte offset 131"), std::string::npos) << msg;
  EXPECT_NE(msg.find("label in 0..9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sample 123"), std::string::npos) << msg;
}

TEST(Synthetic, DeterministicForSeed) {
  const SyntheticSpec spec{16, 5, 7, 3, 4, 42};
  const ImageDataset a = makeSyntheticDataset(spec), b = makeSyntheticDataset(spec);
  EXPECT_EQ(a.pixels.size(), 16u * 5 * 7 * 3);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
  for (int32_t l : a.labels) EXPECT_TRUE(l >= 0 && l < 4);
  SyntheticSpec other = spec;
  other.seed = 43;
  EXPECT_NE(makeSyntheticDataset(other).pixels, a.pixels);
}

TEST(FillBatch, NormalisesPerChannelNhwc) {
  ImageDataset ds;
  ds.count = 2;
  ds.height = 1;
  ds.width = 2;
  ds.channels = 3;
  ds.numClasses = 3;
  ds.pixels = {0, 51, 102, 153, 204, 255, 255, 0, 255, 0, 255, 0};
  ds.labels = {2, 1};
  const Normalization norm{{0.1f, 0.2f, 0.3f}, {0.5f, 0.25f, 2.f}};
  std::vector<float> out(2 * 6);
  std::vector<int32_t> labels(2);
  const std::vector<int64_t> idx = {1, 0};
  fillBatch(ds, idx, norm, out, labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{1, 2}));
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < 6; ++i) {
      const int c = i % 3;
      const float px = ds.pixels[idx[s] * 6 + i] / 255.f;
      EXPECT_NEAR(out[s * 6 + i], (px - norm.mean[c]) / norm.stddev[c], 1e-6) << s << " " << i;
    }
  }
  std::vector<float> small(5);
  EXPECT_THROW(fillBatch(ds, idx, norm, small, labels), DatasetError);
  const std::vector<int64_t> bad = {2, 0};
  EXPECT_THROW(fillBatch(ds, bad, norm, out, labels), DatasetError);
}

// A 2-channel 5x4 image whose pixel (y, x, k) is 1 + 40 y + 8 x + k (never 0, so the zero
// padding is told apart from image pixels).
ImageDataset gradientImages(int count) {
  ImageDataset ds;
  ds.count = count, ds.height = 5, ds.width = 4, ds.channels = 2, ds.numClasses = 3;
  for (int n = 0; n < count; ++n) {
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 4; ++x)
        for (int k = 0; k < 2; ++k)
          ds.pixels.push_back(static_cast<uint8_t>(1 + 40 * y + 8 * x + k));
    ds.labels.push_back(n % 3);
  }
  return ds;
}

TEST(FillBatch, AugmentedImagesAreFlippedTranslatedCopiesSeededPerSample) {
  const ImageDataset ds = gradientImages(64);
  const NormalizationLut lut(Normalization::unit(2), 2);
  std::vector<int64_t> idx(64);
  for (int i = 0; i < 64; ++i) idx[i] = 63 - i;
  SmallImageAugment aug;
  aug.flip = true, aug.padding = 2, aug.seed = 7, aug.epoch = 3;
  std::vector<float> out(64 * 40);
  std::vector<int32_t> labels(64);
  fillBatch(ds, idx, lut, aug, out, labels);
  // Each output image is the source flipped or not and shifted by (dy, dx) in [-2, 2], zero
  // outside; recover the transform from the output and check every pixel against it.
  int flips = 0, shifted = 0;
  for (int s = 0; s < 64; ++s) {
    EXPECT_EQ(labels[s], ds.labels[idx[s]]);
    const float* img = out.data() + s * 40;
    bool matched = false;
    for (int f = 0; f < 2 && !matched; ++f)
      for (int dy = -2; dy <= 2 && !matched; ++dy)
        for (int dx = -2; dx <= 2 && !matched; ++dx) {
          bool all = true;
          for (int y = 0; y < 5 && all; ++y)
            for (int x = 0; x < 4 && all; ++x)
              for (int k = 0; k < 2 && all; ++k) {
                const int sy = y + dy, fx = x + dx, sx = f ? 3 - fx : fx;
                const bool in = sy >= 0 && sy < 5 && fx >= 0 && fx < 4;
                const float want = in ? (1 + 40 * sy + 8 * sx + k) / 255.f : 0.f;
                all = std::abs(img[(y * 4 + x) * 2 + k] - want) < 1e-6f;
              }
          if (all) {
            matched = true;
            flips += f;
            shifted += (dy != 0 || dx != 0);
          }
        }
    EXPECT_TRUE(matched) << "sample " << s << " is not a flipped/translated copy";
  }
  // Both choices occur (64 fair coins: all equal has probability 2^-63).
  EXPECT_GT(flips, 0);
  EXPECT_LT(flips, 64);
  EXPECT_GT(shifted, 32);

  // A sample's transform depends on (seed, epoch, index) only, not on its place in the batch.
  std::vector<float> one(40);
  std::vector<int32_t> oneLabel(1);
  const std::vector<int64_t> single = {idx[10]};
  fillBatch(ds, single, lut, aug, one, oneLabel);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), out.begin() + 10 * 40));
  // Another epoch draws other transforms; a disabled augmentation is the plain fill.
  aug.epoch = 4;
  std::vector<float> other(out.size());
  fillBatch(ds, idx, lut, aug, other, labels);
  EXPECT_NE(other, out);
  std::vector<float> plain(out.size()), off(out.size());
  fillBatch(ds, idx, lut, plain, labels);
  fillBatch(ds, idx, lut, SmallImageAugment{}, off, labels);
  EXPECT_EQ(plain, off);
}

TEST(FillBatch, AugmentationPaddingOutsideTheImageIsRefused) {
  const ImageDataset ds = gradientImages(1);
  const NormalizationLut lut(Normalization::unit(2), 2);
  std::vector<float> out(40);
  std::vector<int32_t> labels(1);
  const std::vector<int64_t> idx = {0};
  SmallImageAugment aug;
  aug.padding = 4;  // the image is 4 pixels wide
  try {
    fillBatch(ds, idx, lut, aug, out, labels);
    FAIL() << "padding 4 on a 5x4 image was accepted";
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find("padding 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace datasets
