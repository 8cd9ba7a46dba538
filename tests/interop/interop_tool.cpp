// The C++ half of the interop test (check_interop.py is the Python half).
//   interop_tool write-mlp DIR    MLP + tied MLP state dicts, inputs and outputs
//   interop_tool write-lenet DIR  the relu-bn LeNet's state dicts, an input and its outputs
//   interop_tool write-resnet DIR the same for samples/resnet's ResNet
//   interop_tool write-transformer DIR  a TransformerEncoderLayer and a MultiheadAttention, inputs, outputs
//   interop_tool write-gpt DIR    samples/gpt's GPT (tiny, lm_head tied to wte) trained 3 steps, token ids, logits
//   interop_tool read FILE        one line per tensor: name dtype [shape] sum first-values
//   interop_tool copy IN OUT      load IN and save its entries again as OUT
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "dsl/io.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "samples/gpt/gpt_model.h"
#include "samples/lenet/lenet_model.h"
#include "samples/resnet/resnet_model.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: interop_tool write-mlp DIR | write-lenet DIR | write-resnet DIR | write-transformer DIR"
               " | write-gpt DIR | read FILE | copy IN OUT\n");
  return 2;
}

// The MLP of S6.3 and a variant whose middle layer is used twice (tied).
int write_mlp(const fs::path& dir) {
  fs::create_directories(dir);
  manual_seed(42);
  nn::Sequential mlp(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
  nn::LazyLinear shared(32);
  nn::Sequential tied(nn::LazyLinear(32), nn::ReLU(), shared, nn::ReLU(), shared, nn::ReLU(),
                      nn::LazyLinear(10));
  Tensor x = rand({4, 20});
  Tensor y = mlp(x);
  Tensor y_tied = tied(x);
  save(mlp->state_dict(), dir / "mlp.safetensors");
  save(tied->state_dict(), dir / "mlp_tied.safetensors");
  save(OrderedDict<Tensor>{{"x", x}, {"y", y}, {"y_tied", y_tied}}, dir / "io.safetensors");
  return 0;
}

// A model with batch norms: a few SGD steps first, so that the batch norms'
// affine parameters and running statistics are not their initial values;
// then the logits of one batch in eval mode (running statistics) and in
// training mode (the batch's), with the state dict saved before the
// training-mode pass updates it and again after: NAME.safetensors,
// NAME_io.safetensors (x, y, y_train), NAME_after_train_forward.safetensors.
int write_trained(const fs::path& dir, const std::string& name, nn::Module& net) {
  fs::create_directories(dir);
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  net.train();
  for (int step = 0; step < 3; ++step) {
    Tensor loss = cross_entropy(net(rand({16, 1, 28, 28})), randint(0, 10, {16}));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  Tensor x = rand({8, 1, 28, 28});
  Tensor y, y_train;
  {
    NoGradGuard g;
    net.eval();
    y = net(x);
    save(net.state_dict(), dir / (name + ".safetensors"));
    net.train();
    y_train = net(x);
  }
  save(OrderedDict<Tensor>{{"x", x}, {"y", y}, {"y_train", y_train}}, dir / (name + "_io.safetensors"));
  save(net.state_dict(), dir / (name + "_after_train_forward.safetensors"));  // running statistics updated
  return 0;
}

// samples/lenet's relu-bn LeNet (convolutions, batch norm, max pooling).
int write_lenet(const fs::path& dir) {
  manual_seed(42);
  auto net = lenet::make_lenet(lenet::Variant::relu_bn);
  net->apply(lenet::init_xavier);
  return write_trained(dir, "lenet", *net);
}

// samples/resnet's ResNet (residual blocks with 1x1-convolution shortcuts,
// nested batch norms, global average pooling).
int write_resnet(const fs::path& dir) {
  manual_seed(42);
  auto net = resnet::make_resnet();
  return write_trained(dir, "resnet", *net);
}

// Moves every parameter off its initial value (zero biases, unit LayerNorm
// weights), so that a parameter loaded under the wrong name shows.
void perturb(nn::Module& m) {
  NoGradGuard g;
  for (auto& [name, p] : m.named_parameters()) p.data() += Tensor(randn(p.shape()) * 0.1);
}

// A TransformerEncoderLayer (d_model 16, nhead 4, dim_feedforward 32, gelu,
// norm_first, batch_first) and a MultiheadAttention (embed_dim 16, 4 heads,
// [L, B, E]), in eval mode, with their outputs on fixed inputs and masks
// (bool masks saved as 0/1 floats; true = not allowed, as torch.nn's):
// encoder_layer.safetensors, mha.safetensors, transformer_io.safetensors.
int write_transformer(const fs::path& dir) {
  fs::create_directories(dir);
  manual_seed(42);
  nn::TransformerEncoderLayer layer(16, 4, {.dim_feedforward = 32, .dropout = 0.1, .activation = "gelu",
                                            .batch_first = true, .norm_first = true});
  nn::MultiheadAttention mha(16, 4, {.dropout = 0.1});
  perturb(*layer);
  perturb(*mha);
  layer->eval();
  mha->eval();
  Tensor x = randn({2, 5, 16});
  // Batch 1's last two positions are padding.
  Tensor kpm = tensor({{false, false, false, false, false}, {false, false, false, true, true}});
  Tensor q = randn({3, 2, 16}), k = randn({4, 2, 16}), v = randn({4, 2, 16});
  Tensor mha_kpm = tensor({{false, false, true, false}, {false, false, false, false}});
  Tensor mha_mask = tensor({{false, true, false, false}, {false, false, false, true}, {true, false, false, false}});
  Tensor y, y_mha;
  {
    NoGradGuard g;
    y = layer(x, {.src_key_padding_mask = kpm});
    y_mha = mha(q, k, v, {.key_padding_mask = mha_kpm, .attn_mask = mha_mask});
  }
  save(layer->state_dict(), dir / "encoder_layer.safetensors");
  save(mha->state_dict(), dir / "mha.safetensors");
  save(OrderedDict<Tensor>{{"x", x},
                           {"kpm", kpm.to(DType::f32)},
                           {"y", y},
                           {"q", q},
                           {"k", k},
                           {"v", v},
                           {"mha_kpm", mha_kpm.to(DType::f32)},
                           {"mha_mask", mha_mask.to(DType::f32)},
                           {"y_mha", y_mha}},
       dir / "transformer_io.safetensors");
  return 0;
}

// ---- GPT (samples/gpt) ------------------------------------------------------
// A tiny configuration of the sample's model, three AdamW steps on random
// tokens (so no weight is its init), then the eval-mode logits of a batch:
// gpt.safetensors (the state dict: lm_head.weight an alias of
// transformer.wte.weight) and gpt_io.safetensors (idx [2, 16] int64, logits
// [2, 16, vocab]). check_interop.py's check_torch_loads_tessel_gpt is the
// other half.
int write_gpt(const fs::path& dir) {
  fs::create_directories(dir);
  manual_seed(42);
  const gpt::Config c{.vocab_size = 40, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32, .dropout = 0.1};
  gpt::GPT model(c);
  auto opt = optim::AdamW(gpt::param_groups(model, 0.1), {.lr = 1e-2});
  model->train();
  for (int step = 0; step < 3; ++step) {
    Tensor idx = randint(0, c.vocab_size, {4, c.block_size}), next = randint(0, c.vocab_size, {4 * c.block_size});
    Tensor loss = cross_entropy(model(idx).reshape({4 * c.block_size, c.vocab_size}), next);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  Tensor idx = randint(0, c.vocab_size, {2, c.block_size});
  Tensor logits;
  {
    NoGradGuard g;
    model->eval();
    logits = model(idx);
  }
  save(model->state_dict(), dir / "gpt.safetensors");
  save(OrderedDict<Tensor>{{"idx", idx}, {"logits", logits}}, dir / "gpt_io.safetensors");
  return 0;
}
// ---- end GPT -------------------------------------------------------------------

std::string shape_str(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? "," : "") + std::to_string(t.size(d));
  return s + "]";
}

int read(const fs::path& file) {
  Checkpoint ck = load(file);
  for (auto& [name, t] : ck.dict()) {
    auto v = t.to_vector<double>();
    double sum = 0;
    for (double e : v) sum += e;
    std::printf("%s %s %s %.17g", name.c_str(), std::string(dtype_torch_name(t.dtype())).c_str(),
                shape_str(t).c_str(), sum);
    for (size_t i = 0; i < v.size() && i < 4; ++i) std::printf(" %.17g", v[i]);
    std::printf("\n");
  }
  return 0;
}

int copy(const fs::path& in, const fs::path& out) {
  save(load_dict(in), out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  std::string cmd = argv[1];
  try {
    if (cmd == "write-mlp") return write_mlp(argv[2]);
    if (cmd == "write-lenet") return write_lenet(argv[2]);
    if (cmd == "write-resnet") return write_resnet(argv[2]);
    if (cmd == "write-transformer") return write_transformer(argv[2]);
    if (cmd == "write-gpt") return write_gpt(argv[2]);
    if (cmd == "read") return read(argv[2]);
    if (cmd == "copy" && argc == 4) return copy(argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "interop_tool %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  return usage();
}
