// Fashion-MNIST from IDX files (gzip or plain), validated before use.
//   auto train = data::load_fashion_mnist(true);   // X [60000, 1, 28, 28] f32 in [0,1], y [60000] i64
#pragma once

#include <filesystem>
#include <string>

#include "dsl/tensor.h"

namespace tessel::data {

struct Dataset {
  Tensor X;
  Tensor y;
};

/// The directory Debian's dataset-fashion-mnist installs into (or $TESSEL_FASHION_MNIST).
std::filesystem::path fashion_mnist_dir();
/// Loads the train or test split; ValueError naming the file on any malformed input.
Dataset load_fashion_mnist(bool train, const std::filesystem::path& dir = fashion_mnist_dir());
/// Reads one IDX file (magic, dims, uint8 data) into a uint8-valued tensor of dtype i64 or f32.
Tensor read_idx(const std::filesystem::path& file, DType as, double scale = 1.0);
/// The ten class names.
const std::vector<std::string>& fashion_mnist_labels();

}  // namespace tessel::data
