// Fast path for the train transform: decode only the part of a JPEG the random crop needs, at the
// smallest DCT scale (M/8) that still leaves >= minSide pixels per crop side, using
// libjpeg-turbo's partial decode (jpeg_crop_scanline / jpeg_skip_scanlines / early abort). The
// crop's final resize therefore stays a shrink (or an identity), so quality is kept.
#pragma once

#include <opencv2/core.hpp>

#include <span>
#include <string>

#include "datasets/transforms.h"

namespace datasets {

struct JpegRegion {
  cv::Mat bgr;         // decoded pixels, CV_8UC3
  double scale = 1.0;  // decoded pixels per original pixel (M/8)
  int x0 = 0;          // position of bgr's top-left pixel in the scaled image
  int y0 = 0;
};

// True when this build has the libjpeg-turbo fast path.
bool jpegRegionDecodeAvailable();

// Decodes the region of `crop` (original coordinates). Returns false, decoding nothing, when the
// fast path does not apply (no libjpeg-turbo, or not a 3-component YCbCr/RGB JPEG: gray and CMYK
// take the OpenCV path). Throws CorruptSampleError naming `name` on a decoder error. The caller
// must already have run inspectImage() (container and EOI checks).
bool decodeJpegRegion(std::span<const uint8_t> data, const std::string& name, const CropRect& crop,
                      int minSide, JpegRegion& out);

}  // namespace datasets
