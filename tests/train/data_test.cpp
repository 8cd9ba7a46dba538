// DataLoader batching and the IDX reader's validation.
#include <catch2/catch.hpp>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "dsl/data/dataloader.h"
#include "dsl/data/fashion_mnist.h"
#include "dsl/tessel.h"
#include "tests/support/temp_dir.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {
data::DataLoader make_loader(data::DataLoaderOptions opt) {
  Tensor X = arange(10, DType::f32).reshape({10, 1});
  Tensor y = arange(10);
  return data::DataLoader(X, y, opt);
}
fs::path write_file(const std::string& name, const std::vector<unsigned char>& bytes) {
  const fs::path& dir = testing::process_temp_dir("tessel-data");
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return dir / name;
}
}  // namespace

TEST_CASE("batches cover the data in order without shuffle", "[data]") {
  auto loader = make_loader({.batch_size = 4});
  auto batches = loader.epoch();
  REQUIRE(batches.size() == 3);
  CHECK(loader.num_batches() == 3);
  CHECK(batches[2].second.to_vector<int64_t>() == std::vector<int64_t>{8, 9});
  CHECK(batches[0].first.shape() == Shape{4, 1});
}

TEST_CASE("drop_last drops the short batch", "[data]") {
  auto loader = make_loader({.batch_size = 4, .drop_last = true});
  CHECK(loader.epoch().size() == 2);
  CHECK(loader.num_batches() == 2);
}

TEST_CASE("shuffle is a seeded permutation that changes each epoch", "[data]") {
  auto a = make_loader({.batch_size = 10, .shuffle = true, .seed = 7});
  auto b = make_loader({.batch_size = 10, .shuffle = true, .seed = 7});
  auto e1 = a.epoch()[0].second.to_vector<int64_t>();
  CHECK(e1 == b.epoch()[0].second.to_vector<int64_t>());
  auto e2 = a.epoch()[0].second.to_vector<int64_t>();
  CHECK(e1 != e2);
  auto sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // Features travel with their labels.
  auto batch = a.epoch()[0];
  auto xs = batch.first.to_vector<float>();
  auto ys = batch.second.to_vector<int64_t>();
  for (size_t i = 0; i < ys.size(); ++i) CHECK(xs[i] == float(ys[i]));
}

TEST_CASE("DataLoader mistakes are clear errors", "[data][error]") {
  CHECK_THROWS_AS(data::DataLoader(zeros({3, 2}), zeros({4}), {}), ShapeError);
  CHECK_THROWS_WITH(make_loader({.batch_size = 0}), Catch::Contains("batch_size must be positive"));
}

TEST_CASE("read_idx reads a plain IDX file", "[data]") {
  auto f = write_file("ok.idx", {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 0, 1, 2, 3, 4, 255});
  Tensor t = data::read_idx(f, DType::f32, 1.0 / 255);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.to_vector<float>()[5] == 1.0f);
  CHECK(data::read_idx(f, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 255});
}

TEST_CASE("read_idx rejects bad magic, truncation and missing files", "[data][error]") {
  CHECK_THROWS_WITH(data::read_idx(write_file("magic.idx", {0, 0, 9, 1, 0, 0, 0, 1, 7}), DType::i64),
                    Catch::Contains("not an unsigned-byte IDX file"));
  CHECK_THROWS_WITH(data::read_idx(write_file("short.idx", {0, 0, 8, 1, 0, 0, 0, 5, 1, 2}), DType::i64),
                    Catch::Contains("promises 5 bytes of data but the file holds 2"));
  CHECK_THROWS_WITH(data::read_idx(write_file("rank.idx", {0, 0, 8, 9}), DType::i64), Catch::Contains("bad IDX rank"));
  CHECK_THROWS_WITH(data::read_idx("/nonexistent/x.gz", DType::i64), Catch::Contains("dataset-fashion-mnist"));
}

TEST_CASE("Fashion-MNIST loads with the documented shapes", "[data]") {
  if (!fs::exists(data::fashion_mnist_dir() / "t10k-labels-idx1-ubyte.gz")) {
    WARN("Fashion-MNIST not installed; scripts/setup-deps.sh installs it");
    return;
  }
  auto test = data::load_fashion_mnist(false);
  CHECK(test.X.shape() == Shape{10000, 1, 28, 28});
  CHECK(test.y.shape() == Shape{10000});
  CHECK(test.y.max().item<int64_t>() == 9);
  CHECK(test.X.max().item() <= 1.0);
}

TEST_CASE("an epoch's batches are gathered as they are visited, the same by iteration and by index", "[data]") {
  auto a = make_loader({.batch_size = 4, .shuffle = true, .seed = 3});
  auto b = make_loader({.batch_size = 4, .shuffle = true, .seed = 3});
  auto ea = a.epoch(), eb = b.epoch();
  size_t i = 0;
  for (auto& [X, y] : ea) {
    CHECK(y.to_vector<int64_t>() == eb[i].second.to_vector<int64_t>());
    CHECK(X.to_vector<float>() == eb[i].first.to_vector<float>());
    ++i;
  }
  CHECK(i == 3);
  CHECK_THROWS_WITH(eb[3], "DataLoader epoch: batch 3 of an epoch of 3 batches");
}
