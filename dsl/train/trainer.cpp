#include "dsl/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "dsl/functional.h"

namespace tessel::train {

Trainer::Trainer(TrainerOptions opt) : opt_(std::move(opt)) {
  if (opt_.max_epochs <= 0) throw ValueError(fmt::format("Trainer: max_epochs must be positive, got {}", opt_.max_epochs));
  device_ = opt_.num_gpus > 0 ? try_gpu(0) : cpu();
}

data::DataLoader::Batch Trainer::prepare_batch(const data::DataLoader::Batch& b) const {
  return {b.first.to(device_), b.second.to(device_)};
}

void Trainer::prepare_model(nn::Module& model) const { model.to(device_); }

namespace {
double accuracy_count(const Tensor& logits, const Tensor& y) {
  NoGradGuard g;
  return binary_op(ir::Op::Eq, logits.argmax(1), y).to(DType::f32).sum().item<double>();
}
}  // namespace

std::pair<double, double> Trainer::evaluate(nn::Module& model, data::DataLoader& loader, const LossFn& loss) const {
  NoGradGuard g;
  bool was_training = model.is_training();
  model.eval();
  double total_loss = 0, correct = 0, n = 0;
  for (auto& batch : loader.epoch()) {
    auto [X, y] = prepare_batch(batch);
    Tensor logits = model(X);
    auto bs = static_cast<double>(y.size(0));
    total_loss += loss(logits, y).item<double>() * bs;
    correct += accuracy_count(logits, y);
    n += bs;
  }
  model.train(was_training);
  return {total_loss / std::max(n, 1.0), correct / std::max(n, 1.0)};
}

std::vector<EpochMetrics> Trainer::fit(nn::Module& model, optim::Optimizer& opt, data::DataLoader& train,
                                       data::DataLoader* val, LossFn loss) {
  if (!loss) loss = [](const Tensor& a, const Tensor& b) { return cross_entropy(a, b); };
  prepare_model(model);
  bool tty = opt_.progress && isatty(STDERR_FILENO);
  std::vector<EpochMetrics> history;
  auto params = model.parameters();
  for (int epoch = 1; epoch <= opt_.max_epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    model.train();
    double total_loss = 0, correct = 0, n = 0;
    auto batches = train.epoch();
    for (size_t i = 0; i < batches.size(); ++i) {
      auto [X, y] = prepare_batch(batches[i]);
      Tensor logits = model(X);
      Tensor l = loss(logits, y);
      opt.zero_grad();
      l.backward();
      if (opt_.gradient_clip_val > 0) optim::clip_grad_norm_(model.parameters(), opt_.gradient_clip_val);
      opt.step();
      auto bs = static_cast<double>(y.size(0));
      double lv = l.item<double>();
      total_loss += lv * bs;
      correct += accuracy_count(logits, y);
      n += bs;
      if (tty) {
        int width = 30, done = static_cast<int>(width * (i + 1) / batches.size());
        fmt::print(stderr, "\repoch {:>2}/{} [{}{}] {:>4}/{} loss {:.4f} acc {:.4f}", epoch, opt_.max_epochs,
                   std::string(static_cast<size_t>(done), '='), std::string(static_cast<size_t>(width - done), ' '),
                   i + 1, batches.size(), lv, correct / n);
      }
    }
    EpochMetrics m;
    m.epoch = epoch;
    m.train_loss = total_loss / std::max(n, 1.0);
    m.train_acc = correct / std::max(n, 1.0);
    if (val) std::tie(m.val_loss, m.val_acc) = evaluate(model, *val, loss);
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty) fmt::print(stderr, "\r{}\r", std::string(80, ' '));
    fmt::print("epoch {:>2}: train_loss={:.4f} train_acc={:.4f}{} time={:.1f}s\n", epoch, m.train_loss, m.train_acc,
               val ? fmt::format(" val_loss={:.4f} val_acc={:.4f}", m.val_loss, m.val_acc) : "", m.seconds);
    std::fflush(stdout);
    history.push_back(m);
  }
  if (!opt_.plot_path.empty()) plot_metrics(history, opt_.plot_path);
  return history;
}

bool plot_metrics(const std::vector<EpochMetrics>& history, const std::string& png_path) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    fmt::print(stderr, "note: gnuplot is not installed, so no plot was written ({}); scripts/setup-deps.sh installs it\n",
               png_path);
    return false;
  }
  std::filesystem::path dat = std::filesystem::path(png_path).replace_extension(".dat");
  std::FILE* f = std::fopen(dat.c_str(), "w");
  if (!f) return false;
  fmt::print(f, "# epoch train_loss train_acc val_loss val_acc\n");
  for (auto& m : history) fmt::print(f, "{} {} {} {} {}\n", m.epoch, m.train_loss, m.train_acc, m.val_loss, m.val_acc);
  std::fclose(f);
  std::string script = fmt::format(
      "set terminal png size 900,500; set output '{}'; set xlabel 'epoch'; set key bottom left; set grid; "
      "plot '{}' using 1:2 with linespoints title 'train loss', '' using 1:3 with linespoints title 'train acc', "
      "'' using 1:5 with linespoints title 'val acc'",
      png_path, dat.string());
  std::string cmd = fmt::format("gnuplot -e \"{}\" 2>&1", script);
  int rc = std::system(cmd.c_str());
  if (rc != 0) fmt::print(stderr, "note: gnuplot failed to write {}\n", png_path);
  return rc == 0;
}

}  // namespace tessel::train
