#include "datasets/jpeg_region.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "datasets/decode_limits.h"
#include "datasets/error.h"

#ifdef DATASETS_HAVE_LIBJPEG
#include <csetjmp>
#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#endif

namespace datasets {

#ifndef DATASETS_HAVE_LIBJPEG

bool jpegRegionDecodeAvailable() {
  return false;
}
bool decodeJpegRegion(std::span<const uint8_t>, const std::string&, const CropRect&, int,
                      JpegRegion&) {
  return false;
}

#else

bool jpegRegionDecodeAvailable() {
  return true;
}

namespace {

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void onError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}
void onMessage(j_common_ptr) {}  // warnings: as OpenCV, tolerated (structure is checked first)

struct Plan {
  int scaleNum;
  int x0, y0, x1, y1;  // requested region in scaled coordinates
};

// Only POD locals between setjmp and longjmp; `mat` is owned by the caller. Returns 1 on success,
// 0 when not applicable, -1 on a decoder error (message in err.message), -2 when the frame
// (*outX0 x *outY0) breaks the decode limits: checked here too, before libjpeg allocates, since
// this decoder reads the frame header itself.
int decodeImpl(const uint8_t* data, size_t size, const CropRect& crop, int minSide, ErrorMgr& err,
               cv::Mat* mat, int* outX0, int* outY0, int* outScaleNum) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = onError;
  err.pub.output_message = onMessage;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const uint64_t w = cinfo.image_width, h = cinfo.image_height;
  if (w == 0 || h == 0 || w > kDecodeLimits.maxSide || h > kDecodeLimits.maxSide ||
      w * h > kDecodeLimits.maxPixels) {
    jpeg_destroy_decompress(&cinfo);
    *outX0 = static_cast<int>(w);
    *outY0 = static_cast<int>(h);
    return -2;
  }
  if (cinfo.num_components != 3 ||
      (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_RGB)) {
    jpeg_destroy_decompress(&cinfo);
    return 0;
  }
  // Smallest M/8 with both crop sides still >= minSide after scaling.
  int m = 8;
  while (m > 1 && crop.width * (m - 1) >= 8 * minSide && crop.height * (m - 1) >= 8 * minSide) --m;
  cinfo.scale_num = static_cast<unsigned>(m);
  cinfo.scale_denom = 8;
  cinfo.out_color_space = JCS_EXT_BGR;
  jpeg_start_decompress(&cinfo);
  const double s = m / 8.0;
  const int outW = static_cast<int>(cinfo.output_width),
            outH = static_cast<int>(cinfo.output_height);
  // One pixel of margin for the bilinear footprint.
  const int x0 = std::max(0, static_cast<int>(std::floor(crop.x * s)) - 1);
  const int y0 = std::max(0, static_cast<int>(std::floor(crop.y * s)) - 1);
  const int x1 = std::min(outW, static_cast<int>(std::ceil((crop.x + crop.width) * s)) + 1);
  const int y1 = std::min(outH, static_cast<int>(std::ceil((crop.y + crop.height) * s)) + 1);
  JDIMENSION xoff = static_cast<JDIMENSION>(x0), width = static_cast<JDIMENSION>(x1 - x0);
  if (width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &width);  // widens to iMCUs
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
  mat->create(y1 - y0, static_cast<int>(cinfo.output_width), CV_8UC3);
  while (static_cast<int>(cinfo.output_scanline) < y1) {
    JSAMPROW row = mat->ptr<uint8_t>(static_cast<int>(cinfo.output_scanline) - y0);
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  // Rows below the crop are never decoded.
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  *outX0 = static_cast<int>(xoff);
  *outY0 = y0;
  *outScaleNum = m;
  return 1;
}

}  // namespace

bool decodeJpegRegion(std::span<const uint8_t> data, const std::string& name, const CropRect& crop,
                      int minSide, JpegRegion& out) {
  checkFileBytes(data.size(), name);
  ErrorMgr err;
  int x0 = 0, y0 = 0, m = 8;
  const int rc = decodeImpl(data.data(), data.size(), crop, minSide, err, &out.bgr, &x0, &y0, &m);
  if (rc == -2) {
    checkImageDimensions(static_cast<uint64_t>(x0), static_cast<uint64_t>(y0), name);
    throw CorruptSampleError(fmt::format("{}: corrupt image: libjpeg frame {}x{}", name, x0, y0),
                             name);  // not reached: decodeImpl applied the same limits
  }
  if (rc < 0) {
    throw CorruptSampleError(fmt::format("{}: corrupt image: libjpeg: {}", name, err.message),
                             name);
  }
  if (rc == 0) return false;
  out.scale = m / 8.0;
  out.x0 = x0;
  out.y0 = y0;
  return true;
}

#endif

}  // namespace datasets
