// The mistakes a user makes with convolutions, pools and normalizations: the
// exact error type, the op, the shapes involved and what to change.
#include "error_testing.h"

#include "dsl/convolution.h"
#include "dsl/nn/batch_norm.h"
#include "dsl/nn/conv.h"
#include "dsl/nn/pooling.h"
#include "dsl/normalization.h"
#include "dsl/pooling.h"

using namespace tessel;
using tessel::testing::dims;

TEST_CASE("conv2d of an input that is not 3-D or 4-D", "[error][conv]") {
  REQUIRE_ERROR(conv2d(ones({5, 5}), ones({1, 1, 3, 3})), ShapeError, "conv2d", "[5, 5]", "[N, C, H, W]");
  REQUIRE_ERROR(conv2d(ones({1, 1, 1, 5, 5}), ones({1, 1, 3, 3})), ShapeError, "conv2d", "[1, 1, 1, 5, 5]");
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}), ones({3, 3})), ShapeError, "conv2d", "4-D weight", "[3, 3]");
  REQUIRE_ERROR(conv1d(ones({1, 2, 3, 7}), ones({1, 2, 3})), ShapeError, "conv1d", "[1, 2, 3, 7]");
  REQUIRE_ERROR(conv_transpose2d(ones({7}), ones({1, 1, 3, 3})), ShapeError, "conv_transpose2d", "[7]");
}

TEST_CASE("nn::Conv2d, Conv1d and ConvTranspose2d name the layer and the input's shape", "[error][conv]") {
  nn::Conv2d c(3, 4, 3);
  REQUIRE_ERROR(c(ones({3, 5})), ShapeError, "Conv2d", "[3, 5]");
  nn::Conv1d d(3, 4, 3);
  REQUIRE_ERROR(d(ones({1, 3, 5, 5})), ShapeError, "Conv1d", "[1, 3, 5, 5]");
  nn::ConvTranspose2d t(3, 4, 3);
  REQUIRE_ERROR(t(ones({1, 3})), ShapeError, "ConvTranspose2d", "[1, 3]");
}

TEST_CASE("conv2d input channels that do not match weight.size(1) * groups", "[error][conv]") {
  REQUIRE_ERROR(conv2d(ones({1, 3, 5, 5}), ones({4, 2, 3, 3})), ShapeError, "conv2d", "3 channels", "[1, 3, 5, 5]",
                "[4, 2, 3, 3]");
  // Groups 2 divide 6 input and 4 output channels, but the weight's 2 channels per group make 4, not 6.
  REQUIRE_ERROR(conv2d(ones({1, 6, 5, 5}), ones({4, 2, 3, 3}), Tensor(), {.groups = 2}), ShapeError, "conv2d",
                "6 channels", "[4, 2, 3, 3]", "groups");
  REQUIRE_ERROR(conv_transpose2d(ones({1, 3, 4, 4}), ones({2, 4, 3, 3})), ShapeError, "conv_transpose2d",
                "3 channels", "[2, 4, 3, 3]");
  nn::Conv2d c(3, 4, 3);
  REQUIRE_ERROR(c(ones({1, 2, 5, 5})), ShapeError, "Conv2d", "3 input channels", "[1, 2, 5, 5]");
  nn::ConvTranspose2d t(3, 4, 3);
  REQUIRE_ERROR(t(ones({1, 2, 5, 5})), ShapeError, "ConvTranspose2d", "[1, 2, 5, 5]");
}

TEST_CASE("conv1d channel mismatch names conv1d and the shapes the user gave", "[error][conv]") {
  REQUIRE_ERROR(conv1d(ones({1, 3, 7}), ones({4, 2, 3})), ShapeError, "conv1d", "[1, 3, 7]", "[4, 2, 3]");
}

TEST_CASE("conv2d bias that is not one value per output channel", "[error][conv]") {
  REQUIRE_ERROR(conv2d(ones({1, 2, 5, 5}), ones({4, 2, 3, 3}), ones({3})), ShapeError, "conv2d", "bias", "[4]",
                "[3]");
}

TEST_CASE("groups that do not divide the channels", "[error][conv]") {
  REQUIRE_ERROR(conv2d(ones({1, 6, 5, 5}), ones({4, 2, 3, 3}), Tensor(), {.groups = 3}), ValueError, "conv2d",
                "groups=3", "in_channels (6)", "out_channels (4)");
  REQUIRE_ERROR(conv2d(ones({1, 5, 5, 5}), ones({4, 1, 3, 3}), Tensor(), {.groups = 2}), ValueError, "conv2d",
                "groups=2", "in_channels (5)");
  REQUIRE_ERROR(conv2d(ones({1, 4, 5, 5}), ones({4, 4, 3, 3}), Tensor(), {.groups = 0}), ValueError, "conv2d",
                "groups", "0");
  REQUIRE_ERROR(nn::Conv2d(6, 4, 3, Conv2dOptions{.groups = 4}), ValueError, "Conv2d(6, 4)", "groups=4", "divide");
  REQUIRE_ERROR(nn::Conv1d(6, 9, 3, Conv1dOptions{.groups = 2}), ValueError, "Conv1d(6, 9)", "groups=2");
  REQUIRE_ERROR(nn::ConvTranspose2d(5, 4, 3, ConvTranspose2dOptions{.groups = 2}), ValueError, "ConvTranspose2d(5, 4)",
                "groups=2");
  REQUIRE_ERROR(nn::LazyConv2d(5, 3, Conv2dOptions{.groups = 2}), ValueError, "LazyConv2d", "groups=2");
}

TEST_CASE("a kernel larger than the padded input", "[error][conv]") {
  REQUIRE_ERROR(conv2d(ones({1, 1, 3, 3}), ones({1, 1, 5, 5})), ShapeError, "conv2d", "larger than the padded input",
                "[1, 1, 3, 3]");
  // A dilated 3x3 kernel spans 5 rows.
  REQUIRE_ERROR(conv2d(ones({1, 1, 4, 8}), ones({1, 1, 3, 3}), Tensor(), {.dilation = 2}), ShapeError, "conv2d",
                "larger than the padded input");
  // With padding 1 the same kernel fits.
  CHECK(dims(conv2d(ones({1, 1, 3, 3}), ones({1, 1, 5, 5}), Tensor(), {.padding = 1})) ==
        std::vector<int64_t>{1, 1, 1, 1});
  REQUIRE_ERROR(max_pool2d(ones({1, 1, 2, 2}), 3), ShapeError, "max_pool2d", "larger than the padded input",
                "[1, 1, 2, 2]");
  REQUIRE_ERROR(avg_pool2d(ones({1, 1, 2, 5}), 3), ShapeError, "avg_pool2d", "[1, 1, 2, 5]");
}

TEST_CASE("padding=\"same\" with a stride other than 1", "[error][conv]") {
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.stride = 2, .padding = "same"}), ValueError,
                "conv2d", "padding=\"same\"", "stride 1", "(2, 2)");
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.stride = {1, 2}, .padding = "same"}),
                ValueError, "padding=\"same\"", "(1, 2)");
  // The layer: at construction (as torch.nn.Conv2d) or at the latest on its first forward.
  REQUIRE_ERROR(nn::Conv2d(1, 1, 3, Conv2dOptions{.stride = 2, .padding = "same"})(ones({1, 1, 5, 5})), ValueError,
                "padding=\"same\"", "stride");
}

TEST_CASE("conv1d padding=\"same\" with stride 2 names conv1d", "[error][conv]") {
  REQUIRE_ERROR(conv1d(ones({1, 1, 7}), ones({1, 1, 3}), Tensor(), {.stride = 2, .padding = "same"}), ValueError,
                "conv1d", "padding=\"same\"", "stride");
}

TEST_CASE("an unknown padding string", "[error][conv]") {
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.padding = "full"}), ValueError, "conv2d",
                "\"same\"", "\"valid\"", "\"full\"");
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.padding = "SAME"}), ValueError, "\"SAME\"");
}

TEST_CASE("negative padding, zero stride and zero dilation", "[error][conv]") {
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.padding = -1}), ValueError, "conv2d",
                "padding", "-1");
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.stride = 0}), ValueError, "conv2d",
                "stride", "positive");
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.dilation = {1, 0}}), ValueError, "conv2d",
                "dilation", "positive");
}

TEST_CASE("conv_transpose2d output_padding not smaller than stride or dilation", "[error][conv]") {
  REQUIRE_ERROR(conv_transpose2d(ones({1, 1, 3, 3}), ones({1, 1, 3, 3}), Tensor(), {.stride = 2, .output_padding = 2}),
                ValueError, "conv_transpose2d", "output_padding (2, 2)", "stride (2, 2)");
}

TEST_CASE("conv2d of integer tensors or mixed dtypes", "[error][conv][dtype]") {
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}, DType::i64), ones({1, 1, 3, 3}, DType::i64)), DTypeError, "conv2d",
                "floating");
  REQUIRE_ERROR(conv2d(ones({1, 1, 5, 5}, DType::f64), ones({1, 1, 3, 3})), DTypeError, "conv2d", "same dtype");
}

TEST_CASE("pool padding more than half the kernel", "[error][pool]") {
  REQUIRE_ERROR(max_pool2d(ones({1, 1, 6, 6}), 2, {.padding = 2}), ValueError, "max_pool2d", "padding (2, 2)",
                "half the kernel size");
  REQUIRE_ERROR(max_pool2d(ones({1, 1, 6, 6}), {3, 2}, {.padding = {1, 2}}), ValueError, "max_pool2d", "(1, 2)",
                "half");
  REQUIRE_ERROR(avg_pool2d(ones({1, 1, 6, 6}), 3, {.padding = 2}), ValueError, "avg_pool2d", "padding (2, 2)",
                "half the kernel size");
  nn::MaxPool2d pool(2, MaxPool2dOptions{.padding = 3});
  REQUIRE_ERROR(pool(ones({1, 1, 6, 6})), ValueError, "max_pool2d", "padding (3, 3)");
  // Half the kernel is allowed.
  CHECK(dims(max_pool2d(ones({1, 1, 6, 6}), 2, {.padding = 1})) == std::vector<int64_t>{1, 1, 4, 4});
}

TEST_CASE("pools of an input that is not 3-D or 4-D, and bad sizes", "[error][pool]") {
  REQUIRE_ERROR(max_pool2d(ones({6, 6}), 2), ShapeError, "max_pool2d", "[6, 6]", "[N, C, H, W]");
  REQUIRE_ERROR(avg_pool2d(ones({1, 1, 1, 6, 6}), 2), ShapeError, "avg_pool2d", "[1, 1, 1, 6, 6]");
  REQUIRE_ERROR(adaptive_avg_pool2d(ones({6}), 2), ShapeError, "adaptive_avg_pool2d", "[6]");
  REQUIRE_ERROR(adaptive_avg_pool2d(ones({1, 1, 6, 6}), 0), ValueError, "adaptive_avg_pool2d", "output_size");
  REQUIRE_ERROR(max_pool2d(ones({1, 1, 6, 6}), 0), ValueError, "max_pool2d", "kernel_size");
  REQUIRE_ERROR(avg_pool2d(ones({1, 1, 6, 6}), 2, {.divisor_override = 0}), ValueError, "avg_pool2d",
                "divisor_override");
  REQUIRE_ERROR(nn::MaxPool2d(0), ValueError, "MaxPool2d", "kernel_size");
}

TEST_CASE("batch_norm with running statistics, weight or bias of the wrong channel count", "[error][batch_norm]") {
  Tensor x = ones({2, 3, 4});
  REQUIRE_ERROR(batch_norm(x, zeros({4}), ones({4})), ShapeError, "batch_norm", "running_mean", "[4]", "[2, 3, 4]",
                "3 channels");
  REQUIRE_ERROR(batch_norm(x, zeros({3}), ones({2})), ShapeError, "batch_norm", "running_var", "[2]");
  REQUIRE_ERROR(batch_norm(x, zeros({3}), ones({3}), ones({5})), ShapeError, "batch_norm", "weight", "[5]");
  REQUIRE_ERROR(batch_norm(x, Tensor(), Tensor(), Tensor(), zeros({1}), true), ShapeError, "batch_norm", "bias",
                "[1]");
  REQUIRE_ERROR(batch_norm(x, zeros({3}), Tensor(), Tensor(), Tensor(), true), ValueError, "batch_norm",
                "running_mean", "running_var");
  REQUIRE_ERROR(batch_norm(ones({3}), Tensor(), Tensor(), Tensor(), Tensor(), true), ShapeError, "batch_norm", "[3]");
}

TEST_CASE("batch_norm in training with one value per channel", "[error][batch_norm]") {
  REQUIRE_ERROR(batch_norm(ones({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), true), ValueError, "batch_norm",
                "more than 1 value per channel", "[1, 3]");
  nn::BatchNorm1d bn(3);
  REQUIRE_ERROR(bn(ones({1, 3})), ValueError, "more than 1 value per channel");
  // In eval mode one sample is fine.
  bn->eval();
  CHECK(dims(bn(ones({1, 3}))) == std::vector<int64_t>{1, 3});
}

TEST_CASE("nn::BatchNorm2d and BatchNorm1d: the channel count and the rank of the input", "[error][batch_norm]") {
  nn::BatchNorm2d bn(4);
  REQUIRE_ERROR(bn(ones({2, 3, 2, 2})), ShapeError, "BatchNorm2d", "4 channels", "[2, 3, 2, 2]");
  REQUIRE_ERROR(bn(ones({2, 4})), ShapeError, "BatchNorm2d", "4-D", "[2, 4]");
  nn::BatchNorm1d bn1(4);
  REQUIRE_ERROR(bn1(ones({2, 4, 2, 2})), ShapeError, "BatchNorm1d", "[N, C]", "[2, 4, 2, 2]");
  REQUIRE_ERROR(bn1(ones({2, 5})), ShapeError, "BatchNorm1d", "4 channels", "[2, 5]");
  REQUIRE_ERROR(nn::BatchNorm2d(0), ValueError, "BatchNorm2d", "num_features");
}

TEST_CASE("group_norm and nn::GroupNorm with groups that do not divide the channels", "[error][group_norm]") {
  REQUIRE_ERROR(nn::GroupNorm(4, 6), ValueError, "GroupNorm(4, 6)", "divide");
  REQUIRE_ERROR(nn::GroupNorm(0, 6), ValueError, "GroupNorm(0, 6)");
  REQUIRE_ERROR(group_norm(ones({2, 6, 2}), 4), ValueError, "group_norm", "num_groups (4)", "6 channels", "[2, 6, 2]");
  REQUIRE_ERROR(group_norm(ones({2, 6, 2}), 3, ones({3})), ShapeError, "group_norm", "weight", "[3]");
  nn::GroupNorm gn(2, 6);
  REQUIRE_ERROR(gn(ones({2, 4, 3})), ShapeError, "GroupNorm", "[2, 4, 3]");
}
