// The DSL on a CUDA device, end to end: tensors created on gpu(i) compute
// through backend_for(device) -- NVRTC kernels, cuBLASLt products, device
// copies -- and give the CPU's numbers. The same program runs on a real GPU
// (label gpu) and on the emulated device (label emulated-gpu), which executes
// the generated CUDA source on the host and faults on any host read of device
// memory. Without a GPU the program exits 77 (Skipped).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/cuda/cuda_backend.h"
#include "dsl/data/dataloader.h"
#include "dsl/data/fashion_mnist.h"
#include "dsl/functional.h"
#include "dsl/io.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "dsl/train/trainer.h"
#include "runtime/errors.h"

using namespace tessel;

namespace {

std::vector<double> host(const Tensor& t) { return t.cpu().to(DType::f64).to_vector<double>(); }

// |got - want| <= tol * max(1, |want|) elementwise.
void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i])));
  }
}

}  // namespace

TEST_CASE("the issue's program: a fused chain, an MLP, cross_entropy, backward and an SGD step on gpu(0)", "[gpu]") {
  manual_seed(3);
  Tensor a = randn({1000}), b = randn({1000}), c = randn({1000}), d = randn({1000});
  Tensor want = relu(a * b + c) * d;
  Tensor ag = a.to(gpu(0)), bg = b.to(gpu(0)), cg = c.to(gpu(0)), dg = d.to(gpu(0));
  const CudaStats before = cuda_stats();
  Tensor got = relu(ag * bg + cg) * dg;
  CHECK(got.device() == gpu(0));
  check_close(host(got), host(want), 1e-5);
  CHECK(cuda_stats().kernels_launched == before.kernels_launched + 1);  // one fused kernel

  manual_seed(5);
  nn::Sequential net_cpu(nn::Linear(12, 16), nn::ReLU(), nn::Linear(16, 4));
  manual_seed(5);
  nn::Sequential net_gpu(nn::Linear(12, 16), nn::ReLU(), nn::Linear(16, 4));
  net_gpu->to(gpu(0));
  Tensor X = randn({8, 12});
  Tensor y = tensor({0, 1, 2, 3, 3, 2, 1, 0}).to(DType::i64);
  optim::SGD sgd_cpu(net_cpu->parameters(), {.lr = 0.1});
  optim::SGD sgd_gpu(net_gpu->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    Tensor lc = cross_entropy(net_cpu(X), y);
    Tensor lg = cross_entropy(net_gpu(X.to(gpu(0))), y.to(gpu(0)));
    CHECK(lg.device() == gpu(0));
    CHECK(lg.item<double>() == Approx(lc.item<double>()).epsilon(1e-5));
    sgd_cpu.zero_grad();
    sgd_gpu.zero_grad();
    lc.backward();
    lg.backward();
    auto pc = net_cpu->parameters(), pg = net_gpu->parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      CHECK(pg[i].grad().device() == gpu(0));
      check_close(host(pg[i].grad()), host(pc[i].grad()), 1e-5);
    }
    sgd_cpu.step();
    sgd_gpu.step();
  }
  auto pc = net_cpu->parameters(), pg = net_gpu->parameters();
  for (size_t i = 0; i < pc.size(); ++i) check_close(host(pg[i].data()), host(pc[i].data()), 1e-5);
}

TEST_CASE("device tensors print as PyTorch prints them and item() copies one value", "[gpu]") {
  Tensor x = tensor({1.0, 2.5, -3.0}, gpu(0));
  CHECK(x.str() == "tensor([ 1.0000,  2.5000, -3.0000], device='cuda:0')");
  Tensor i = tensor({1, 2, 3}).to(gpu(1));
  CHECK(i.str() == "tensor([1, 2, 3], device='cuda:1')");
  CHECK(Tensor(x * 2).sum().item<double>() == 1.0);
  CHECK(i.sum().item<int64_t>() == 6);
  CHECK(fmt::format("{}", ones({2, 2}, gpu(0))) == "tensor([[1., 1.],\n        [1., 1.]], device='cuda:0')");
}

TEST_CASE("reductions and row programs on the device match the CPU", "[gpu]") {
  manual_seed(7);
  Tensor x = randn({37, 53});
  Tensor g = x.to(gpu(0));
  check_close(host(g.sum({1})), host(x.sum({1})), 1e-5);
  check_close(host(g.mean({0}, true)), host(x.mean({0}, true)), 1e-5);
  check_close(host(g.max(1)), host(x.max(1)), 0);
  check_close(host(g.argmax(0)), host(x.argmax(0)), 0);
  check_close(host(softmax(g, 1)), host(softmax(x, 1)), 1e-5);
  check_close(host(log_softmax(g, 1)), host(log_softmax(x, 1)), 1e-5);
  // A layer-norm-style chain: mean, variance and the normalized rows.
  auto layer_norm = [](const Tensor& t) {
    Tensor mu = t.mean({1}, true);
    Tensor var = Tensor((t - mu) * (t - mu)).mean({1}, true);
    return Tensor((t - mu) / (var + 1e-5).sqrt());
  };
  check_close(host(layer_norm(g)), host(layer_norm(x)), 1e-4);
  CHECK(g.sum().item<double>() == Approx(x.sum().item<double>()).epsilon(1e-5));
}

TEST_CASE("prod on the device: rows, columns, integers, zeros, empty and its gradient", "[gpu]") {
  Tensor x = tensor({{1.5, -2.0, 0.5, 4.0}, {3.0, 0.0, -1.0, 2.0}, {-0.5, -0.5, 2.0, 2.0}});
  Tensor g = x.to(gpu(0));
  check_close(host(g.prod(1)), {-6, 0, 1}, 0);
  check_close(host(prod(g, 0, true)), {-2.25, 0, -1, 16}, 0);
  CHECK(g.prod().item<double>() == 0);
  Tensor i = tensor({{2, -3, 4}, {5, 1, -1}}).to(gpu(0));
  CHECK(i.prod(1).dtype() == DType::i64);
  check_close(host(i.prod(1)), {-24, -5}, 0);
  CHECK(full({39}, 3, DType::i64, gpu(0)).prod().item<int64_t>() == 4052555153018976267LL);  // int64 accumulator
  CHECK(zeros({0, 3}, DType::f32, gpu(0)).prod().item<double>() == 1);
  check_close(host(zeros({2, 0}, DType::f32, gpu(0)).prod(1)), {1, 1}, 0);
  // A long row (split across blocks) of factors near 1, against the CPU.
  manual_seed(11);
  Tensor near = Tensor(rand({1, 200003}) * 1e-5 + 1.0).to(DType::f64);
  CHECK(near.to(gpu(0)).prod().item<double>() == Approx(near.prod().item<double>()).epsilon(1e-9));
  // The gradient, zeros included: row 1 has one zero, row 2 none.
  Tensor w = x.to(gpu(0));
  w.requires_grad_();
  Tensor(w.prod(1) * tensor({1.0, 2.0, 3.0}, gpu(0))).sum().backward();
  check_close(host(w.grad()), {-4, 3, -12, -1.5, 0, -12, 0, 0, -6, -6, 1.5, 1.5}, 1e-6);
}

TEST_CASE("pad, cat, tril, masks and eye on the device: indexed loads in the generated kernels", "[gpu]") {
  manual_seed(11);
  Tensor x = randn({5, 7}), y = randn({5, 3});
  Tensor gx = x.to(gpu(0)), gy = y.to(gpu(0));
  check_close(host(pad(gx, {2, 1, 0, 1}, -1.0)), host(pad(x, {2, 1, 0, 1}, -1.0)), 0);
  check_close(host(Tensor(cat({gx.relu(), gy * 2.0}, 1)).exp()), host(Tensor(cat({x.relu(), y * 2.0}, 1)).exp()), 1e-6);
  check_close(host(tril(gx, 1)), host(tril(x, 1)), 0);
  check_close(host(masked_fill(gx, Tensor(gx > 0.5), -3.0)), host(masked_fill(x, Tensor(x > 0.5), -3.0)), 0);
  check_close(host(eye(3, 4, DType::f32, gpu(0))), host(eye(3, 4)), 0);
  check_close(host(stack({gx, gx}, 1).sum({1})), host(stack({x, x}, 1).sum({1})), 1e-6);
  // Gradients through a pad and a strided slice, on the device.
  Tensor w = gx.clone();
  w.requires_grad_(true);
  Tensor(pad(w, {1, 1}).slice(1, 0, 9, 2) * 3.0).sum().backward();
  Tensor wc = x.clone();
  wc.requires_grad_(true);
  Tensor(pad(wc, {1, 1}).slice(1, 0, 9, 2) * 3.0).sum().backward();
  CHECK(w.grad().device() == gpu(0));
  check_close(host(w.grad()), host(wc.grad()), 0);
  // An embedding: a gather kernel forward, a scatter-add backward.
  Tensor ids = tensor({{3, 0, 3}, {1, 1, 4}});
  Tensor table = randn({5, 4});
  Tensor gt = table.to(gpu(0));
  gt.requires_grad_(true);
  Tensor ct = table.clone();
  ct.requires_grad_(true);
  Tensor ge = embedding(ids.to(gpu(0)), gt), ce = embedding(ids, ct);
  check_close(host(ge), host(ce), 0);
  Tensor(ge * ge).sum().backward();
  Tensor(ce * ce).sum().backward();
  check_close(host(gt.grad()), host(ct.grad()), 1e-6);
}

TEST_CASE("flip, take_along_dim, linspace and the *_like factories on the device", "[gpu]") {
  manual_seed(12);
  Tensor x = randn({4, 6});
  Tensor gx = x.to(gpu(0));
  check_close(host(Tensor(flip(gx * 2.0, {0, 1})).relu()), host(Tensor(flip(x * 2.0, {0, 1})).relu()), 0);
  Tensor idx = tensor({{5, 0}, {1, 1}, {2, 3}, {0, 4}});
  check_close(host(take_along_dim(gx, idx.to(gpu(0)), 1)), host(take_along_dim(x, idx, 1)), 0);
  check_close(host(linspace(-1, 2, 7, DType::f32, gpu(0))), host(linspace(-1, 2, 7)), 0);
  Tensor z = zeros_like(gx), f = full_like(gx, 3.5);
  CHECK(z.device() == gpu(0));
  check_close(host(z + f), host(full_like(x, 3.5)), 0);
  CHECK(allclose(gx, x.to(gpu(0))));
  CHECK(equal(gx, x.to(gpu(0))));
  // flip's gradient on the device: the flipped upstream gradient.
  Tensor w = gx.clone();
  w.requires_grad_(true);
  Tensor wc = x.clone();
  wc.requires_grad_(true);
  Tensor(flip(w, {1}) * flip(w, {1})).sum().backward();
  Tensor(flip(wc, {1}) * flip(wc, {1})).sum().backward();
  check_close(host(w.grad()), host(wc.grad()), 1e-6);
}

TEST_CASE("matmuls with bias and ReLU epilogues run on cuBLASLt, batched ones too", "[gpu]") {
  manual_seed(9);
  Tensor a = randn({17, 29}), w = randn({29, 11}), b = randn({11});
  const CudaStats before = cuda_stats();
  Tensor got = relu(a.to(gpu(0)) % w.to(gpu(0)) + b.to(gpu(0)));
  check_close(host(got), host(relu(a % w + b)), 1e-4);
  CHECK(cuda_stats().blas_matmuls == before.blas_matmuls + 1);
  CHECK(cuda_stats().blas_epilogues == before.blas_epilogues + 1);  // bias + ReLU inside the product
  CHECK(cuda_stats().host_evals == before.host_evals);
  Tensor p = randn({3, 5, 7}), q = randn({3, 7, 2});
  check_close(host(p.to(gpu(0)).matmul(q.to(gpu(0)))), host(p.matmul(q)), 1e-4);
}

TEST_CASE("views and in-place writes on the device: slices, transposes, element and row writes", "[gpu]") {
  Tensor c = arange(0, 24).to(DType::f32).reshape({4, 6});
  Tensor g = c.to(gpu(0));
  for (Tensor* t : {&c, &g}) {
    Tensor v = t->slice(1, 1, 5, 2);
    v *= 10;
    (*t)[0][0] = -1.0;
    t->t()[5] += 100;  // column 5 through a transposed view
    t->data()[3] -= (*t)[1];
  }
  CHECK(host(g) == host(c));
  CHECK(g.slice(0, 1, 3).t().contiguous().device() == gpu(0));
  CHECK(host(g.slice(0, 1, 3).t().contiguous()) == host(c.slice(0, 1, 3).t().contiguous()));
  CHECK(host(g.reshape({6, 4})) == host(c.reshape({6, 4})));
}

TEST_CASE("Adam, AdamW and clip_grad_norm_ on device parameters give the CPU's parameters", "[gpu]") {
  for (bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    manual_seed(13);
    nn::Sequential mc(nn::Linear(6, 9), nn::ReLU(), nn::Linear(9, 3));
    manual_seed(13);
    nn::Sequential mg(nn::Linear(6, 9), nn::ReLU(), nn::Linear(9, 3));
    mg->to(gpu(0));
    optim::AdamOptions o{.lr = 0.01, .weight_decay = 0.1, .decoupled = decoupled};
    optim::Adam oc(mc->parameters(), o), og(mg->parameters(), o);
    Tensor X = randn({10, 6}), Y = randn({10, 3});
    for (int step = 0; step < 3; ++step) {
      Tensor lc = mse_loss(mc(X), Y), lg = mse_loss(mg(X.to(gpu(0))), Y.to(gpu(0)));
      oc.zero_grad();
      og.zero_grad();
      lc.backward();
      lg.backward();
      double nc = optim::clip_grad_norm_(mc->parameters(), 0.5);
      double ng = optim::clip_grad_norm_(mg->parameters(), 0.5);
      CHECK(ng == Approx(nc).epsilon(1e-5));
      oc.step();
      og.step();
    }
    auto pc = mc->parameters(), pg = mg->parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      CHECK(pg[i].device() == gpu(0));
      check_close(host(pg[i].data()), host(pc[i].data()), 1e-5);
    }
  }
}

TEST_CASE("net.to(gpu(0)) then forward, a lazy layer included, stays on the device", "[gpu]") {
  manual_seed(17);
  nn::Sequential net(nn::LazyLinear(5), nn::ReLU(), nn::LazyLinear(2));
  Tensor X = randn({4, 3});
  Tensor want = net(X);
  net->to(gpu(0));
  for (auto& p : net->parameters()) CHECK(p.device() == gpu(0));
  Tensor got = net(X.to(gpu(0)));
  CHECK(got.device() == gpu(0));
  check_close(host(got), host(want), 1e-5);
  // The CPU input is an error that names both devices.
  try {
    (void)Tensor(net(X)).eval();
    FAIL("expected DeviceError");
  } catch (const DeviceError& e) {
    std::string m = e.what();
    CHECK(m.find("cpu") != std::string::npos);
    CHECK(m.find("cuda:0") != std::string::npos);
  }
}

TEST_CASE("device tensors save through the host and load onto a device on request", "[gpu]") {
  auto dir = std::filesystem::temp_directory_path() / ("tessel_device_io_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  manual_seed(19);
  nn::Sequential net(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2));
  net->to(gpu(1));
  save(net->state_dict(), dir / "net.safetensors");
  auto on_cpu = load_dict(dir / "net.safetensors");
  auto on_gpu = load_dict(dir / "net.safetensors", gpu(0));
  for (const auto& [name, t] : net->state_dict()) {
    INFO(name);
    CHECK(on_cpu.at(name).device() == cpu());
    CHECK(on_gpu.at(name).device() == gpu(0));
    CHECK(host(on_cpu.at(name)) == host(t));
    CHECK(host(on_gpu.at(name)) == host(t));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("expression templates over device tensors take the IR path and see in-place writes", "[gpu]") {
  Tensor x = ones({4}, gpu(0));
  Tensor y = tensor({1.0, 2.0, 3.0, 4.0}, gpu(0));
  for (int round = 0; round < 3; ++round) {
    Tensor z = relu(x * 2 + y) * y;  // the same expression type each round
    CHECK(z.device() == gpu(0));
    CHECK(host(z) == std::vector<double>{(2. * (round + 1) + 1) * 1, (2. * (round + 1) + 2) * 2,
                                         (2. * (round + 1) + 3) * 3, (2. * (round + 1) + 4) * 4});
    x += 1;
  }
}

TEST_CASE("X.cuda(1) copies between two devices and Z.to(Z.device()) is Z", "[gpu]") {
  if (num_gpus() < 2) {
    WARN("one GPU: skipped");
    return;
  }
  Tensor X = arange(0, 6).to(DType::f32).reshape({2, 3}).to(gpu(0));
  Tensor Z = X.cuda(1);
  CHECK(Z.device() == gpu(1));
  CHECK(Z.to(Z.device()).is_same(Z));
  CHECK(host(Z) == host(X));
  Tensor W = Tensor(Z * 2).to(gpu(0)) + X;
  CHECK(W.device() == gpu(0));
  CHECK(host(W) == std::vector<double>{0, 3, 6, 9, 12, 15});
}

TEST_CASE("train::Trainer fits a model on the device (S7.7) and its metrics match the CPU's", "[gpu]") {
  auto run = [](int gpus) {
    manual_seed(23);
    Tensor X = randn({96, 8});
    Tensor y = Tensor(X.sum({1}) > 0).to(DType::i64);
    data::DataLoader loader(X, y, {.batch_size = 32});
    nn::Sequential net(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 2));
    train::Trainer trainer({.max_epochs = 2, .num_gpus = gpus, .gradient_clip_val = 1.0, .progress = false});
    trainer.prepare_model(*net);
    optim::SGD opt(net->parameters(), {.lr = 0.1});
    auto metrics = trainer.fit(*net, opt, loader);
    return std::pair{trainer.device(), metrics};
  };
  auto [dc, mc] = run(0);
  auto [dg, mg] = run(1);
  CHECK(dc == cpu());
  CHECK(dg == gpu(0));
  REQUIRE(mc.size() == 2);
  REQUIRE(mg.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    CHECK(mg[e].train_loss == Approx(mc[e].train_loss).epsilon(1e-5));
    CHECK(mg[e].train_acc == Approx(mc[e].train_acc).epsilon(1e-9));
  }
}

TEST_CASE("one epoch of the Fashion-MNIST MLP on 4096 images: the device's loss is the CPU's at every step", "[gpu]") {
  auto train_set = data::load_fashion_mnist(true);
  Tensor X = train_set.X.slice(0, 0, 4096).contiguous(), y = train_set.y.slice(0, 0, 4096).contiguous();
  auto losses = [&](Device d) {
    manual_seed(0);
    nn::Sequential net(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
    net->to(d);
    optim::SGD opt(net->parameters(), {.lr = 0.1});
    data::DataLoader loader(X, y, {.batch_size = 256, .shuffle = true, .seed = 0});
    std::vector<double> out;
    for (auto& [bx, by] : loader.epoch()) {
      Tensor loss = cross_entropy(net(bx.to(d)), by.to(d));
      opt.zero_grad();
      loss.backward();
      opt.step();
      out.push_back(loss.item<double>());
    }
    return out;
  };
  std::vector<double> on_cpu = losses(cpu()), on_gpu = losses(gpu(0));
  REQUIRE(on_cpu.size() == 16);
  REQUIRE(on_gpu.size() == 16);
  for (size_t s = 0; s < on_cpu.size(); ++s) {
    INFO("step " << s);
    CHECK(on_gpu[s] == Approx(on_cpu[s]).epsilon(1e-4));
  }
  CHECK(on_cpu.back() < on_cpu.front());
}

TEST_CASE("a conv net on gpu(0): conv2d, batch_norm (train), relu, max_pool2d, linear, cross_entropy match the CPU",
          "[gpu][conv]") {
  auto make_net = [] {
    manual_seed(29);
    return nn::Sequential(nn::Conv2d(2, 4, 3, Conv2dOptions{.padding = 1}), nn::BatchNorm2d(4), nn::ReLU(),
                          nn::MaxPool2d(2), nn::Flatten(), nn::Linear(4 * 3 * 3, 5));
  };
  nn::Sequential net_cpu = make_net(), net_gpu = make_net();
  net_gpu->to(gpu(0));
  manual_seed(31);
  Tensor X = randn({4, 2, 6, 6});
  Tensor y = tensor({0, 3, 1, 4}).to(DType::i64);
  Tensor xc = X.clone(), xg = X.to(gpu(0));
  xc.requires_grad_(true);
  xg.requires_grad_(true);
  Tensor lc = cross_entropy(net_cpu(xc), y);
  Tensor lg = cross_entropy(net_gpu(xg), y.to(gpu(0)));
  CHECK(lg.device() == gpu(0));
  CHECK(lg.item<double>() == Approx(lc.item<double>()).epsilon(1e-5));
  lc.backward();
  lg.backward();
  REQUIRE(xg.grad().defined());
  CHECK(xg.grad().device() == gpu(0));
  check_close(host(xg.grad()), host(xc.grad()), 1e-5);
  auto pc = net_cpu->named_parameters(), pg = net_gpu->named_parameters();
  REQUIRE(pc.keys() == pg.keys());
  REQUIRE(pc.size() == 6);  // conv, batch norm and linear weights and biases
  for (const auto& [name, p] : pc) {
    INFO(name);
    REQUIRE(pg.at(name).grad().defined());
    CHECK(pg.at(name).grad().device() == gpu(0));
    check_close(host(pg.at(name).grad()), host(p.grad()), 1e-5);
  }
  // The training step updated the running statistics the same way on both.
  auto bc = net_cpu->named_buffers(), bg = net_gpu->named_buffers();
  REQUIRE(bc.keys() == std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
  for (const auto& [name, b] : bc) {
    INFO(name);
    CHECK(bg.at(name).device() == gpu(0));
    check_close(host(bg.at(name)), host(b), 1e-5);
  }
  CHECK(host(bg.at("1.num_batches_tracked")) == std::vector<double>{1});
  // Eval mode normalizes by those statistics, on the device too.
  net_cpu->eval();
  net_gpu->eval();
  check_close(host(net_gpu(xg.detach())), host(net_cpu(X)), 1e-5);
}
