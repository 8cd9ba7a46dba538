#include "dsl/data/fashion_mnist.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace tessel::data {

std::filesystem::path fashion_mnist_dir() {
  if (const char* e = std::getenv("TESSEL_FASHION_MNIST")) return e;
  return "/usr/share/datasets/fashion-mnist";
}

const std::vector<std::string>& fashion_mnist_labels() {
  static const std::vector<std::string> names = {"t-shirt", "trouser", "pullover", "dress", "coat",
                                                 "sandal",  "shirt",   "sneaker",  "bag",   "ankle boot"};
  return names;
}

namespace {

// gzopen reads plain files too, so uncompressed IDX files work as well.
std::vector<unsigned char> read_all(const std::filesystem::path& file) {
  gzFile f = gzopen(file.c_str(), "rb");
  if (!f)
    throw ValueError(fmt::format("cannot open '{}'; install the Debian package dataset-fashion-mnist "
                                 "(scripts/setup-deps.sh does) or set TESSEL_FASHION_MNIST", file.string()));
  std::vector<unsigned char> out;
  unsigned char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) {
    out.insert(out.end(), buf, buf + n);
    if (out.size() > (size_t{1} << 31)) {
      gzclose(f);
      throw ValueError(fmt::format("'{}': larger than 2 GiB, not an IDX dataset", file.string()));
    }
  }
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    throw ValueError(fmt::format("'{}': corrupt gzip stream ({})", file.string(), msg));
  return out;
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

Tensor read_idx(const std::filesystem::path& file, DType as, double scale) {
  std::vector<unsigned char> bytes = read_all(file);
  if (bytes.size() < 4) throw ValueError(fmt::format("'{}': too short for an IDX header", file.string()));
  if (bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08)
    throw ValueError(fmt::format("'{}': not an unsigned-byte IDX file (magic {:02x}{:02x}{:02x}{:02x})",
                                 file.string(), bytes[0], bytes[1], bytes[2], bytes[3]));
  size_t rank = bytes[3];
  if (rank == 0 || rank > 4 || bytes.size() < 4 + 4 * rank)
    throw ValueError(fmt::format("'{}': bad IDX rank {}", file.string(), rank));
  std::vector<int64_t> dims;
  uint64_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    uint32_t d = be32(bytes.data() + 4 + 4 * i);
    dims.push_back(d);
    count *= d;
    if (count > (uint64_t{1} << 32)) throw ValueError(fmt::format("'{}': IDX dimensions overflow", file.string()));
  }
  size_t header = 4 + 4 * rank;
  if (bytes.size() != header + count)
    throw ValueError(fmt::format("'{}': IDX header promises {} bytes of data but the file holds {}", file.string(),
                                 count, bytes.size() - header));
  Tensor out = empty(Shape(dims), as);
  const unsigned char* src = bytes.data() + header;
  if (as == DType::f32) {
    float* p = out.buffer().ptr<float>();
    for (uint64_t i = 0; i < count; ++i) p[i] = static_cast<float>(src[i] * scale);
  } else if (as == DType::i64) {
    int64_t* p = out.buffer().ptr<int64_t>();
    for (uint64_t i = 0; i < count; ++i) p[i] = src[i];
  } else {
    throw DTypeError(fmt::format("read_idx: reads into f32 or i64, not {}", dtype_name(as)));
  }
  return out;
}

Dataset load_fashion_mnist(bool train, const std::filesystem::path& dir) {
  std::string prefix = train ? "train" : "t10k";
  Tensor X = read_idx(dir / (prefix + "-images-idx3-ubyte.gz"), DType::f32, 1.0 / 255.0);
  Tensor y = read_idx(dir / (prefix + "-labels-idx1-ubyte.gz"), DType::i64);
  if (X.dim() != 3 || y.dim() != 1 || X.size(0) != y.size(0))
    throw ValueError(fmt::format("Fashion-MNIST {}: images {} and labels {} do not match", prefix, X.shape().str(),
                                 y.shape().str()));
  return {X.reshape({X.size(0), 1, X.size(1), X.size(2)}), y};
}

}  // namespace tessel::data
