// The ImageNet folder scan (scanImageFolder): the input describes a folder tree, one entry per
// line ("a/b.JPEG" a file, "a/" a folder, "!a/b" a symlink to the entry before it, "!x>a/b" a
// symlink to x), built under a scratch folder and scanned as "train" and then as "val" with train's
// classes. Every outcome must be an index or a DatasetError naming the path.
#include <unistd.h>

#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/error.h"
#include "datasets/image_folder.h"
#include "tests/fuzz/fuzz_target.h"

namespace fs = std::filesystem;

namespace {

// Only relative paths below the root, a few levels deep, and not too many entries: the fuzzer
// explores names and shapes of the tree, not the file system's limits.
bool safeRelative(std::string_view p) {
  if (p.empty() || p.size() > 64 || p.front() == '/') return false;
  int depth = 0;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string_view part = p.substr(start, end - start);
    if (part == "." || part == "..") return false;
    if (part.find('\0') != std::string_view::npos) return false;
    if (++depth > 4) return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path root = ipu::fuzz::scratchDir() / "tree";
  std::error_code ec;
  fs::remove_all(root, ec);
  fs::create_directories(root / "train");
  fs::create_directories(root / "val");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fs::path previous;
  int entries = 0;
  for (size_t start = 0; start < text.size() && entries < 32;) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const bool link = !line.empty() && line.front() == '!';
    if (link) line.remove_prefix(1);
    // "!target>name": a symlink to any path below the root (loops and dangling links included).
    std::string_view target;
    if (const size_t gt = line.find('>'); link && gt != std::string_view::npos) {
      target = line.substr(0, gt);
      line.remove_prefix(gt + 1);
      if (!safeRelative(target)) continue;
    }
    if (!safeRelative(line)) continue;
    ++entries;
    const fs::path p = root / std::string(line);
    if (link) {
      if (!target.empty()) {
        fs::create_symlink(root / std::string(target), p, ec);
      } else if (!previous.empty()) {
        fs::create_symlink(previous, p, ec);
      }
    } else if (line.back() == '/') {
      fs::create_directories(p, ec);
    } else {
      fs::create_directories(p.parent_path(), ec);
      std::ofstream(p).put('x');  // may fail (a parent is a file): that tree just lacks it
    }
    previous = p;
  }
  for (auto policy : {datasets::CorruptPolicy::kFail, datasets::CorruptPolicy::kSkip}) {
    try {
      const datasets::ImageFolderIndex train = datasets::scanImageFolder(root / "train", policy);
      for (const auto& s : train.samples) {
        if (s.label < 0 || s.label >= static_cast<int32_t>(train.classes.size())) {
          ipu::fuzz::violated("scanImageFolder: a sample's label is outside its classes");
        }
      }
      try {
        datasets::scanImageFolder(root / "val", policy, &train.classes);
      } catch (const datasets::DatasetError&) {
      }
    } catch (const datasets::DatasetError&) {
    }
  }
  return 0;
}
