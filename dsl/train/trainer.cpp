#include "dsl/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "dsl/functional.h"
#include "dsl/dist/collectives.h"  // distributed training and checkpoints
#include "dsl/io.h"

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
  // >>> distributed training and checkpoints
  dist::ProcessGroup* pg = opt_.process_group.get();
  const bool rank0 = !pg || pg->rank() == 0;
  int first_epoch = 1;
  if (!opt_.resume_from.empty()) first_epoch = resume(model, opt, train) + 1;
  // <<< distributed training and checkpoints
  bool tty = rank0 && opt_.progress && isatty(STDERR_FILENO);
  std::vector<EpochMetrics> history;
  auto params = model.parameters();
  for (int epoch = first_epoch; epoch <= opt_.max_epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    model.train();
    double total_loss = 0, correct = 0, n = 0;
    if (train.sampler()) train.sampler()->set_epoch(static_cast<uint64_t>(epoch - 1));  // PyTorch's loop: set_epoch(0) first
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
    // >>> distributed training and checkpoints: the epoch's figures over every rank's examples
    if (pg && pg->size() > 1) {
      // On the model's GPU when the group moves GPU memory (nccl), else on the CPU.
      Device d = pg->device_kind() == Device::Kind::cpu || params.empty() ? cpu() : params.front().device();
      Tensor sums = from_vector<double>({total_loss, correct, n}, Shape{3}, d);
      dist::all_reduce(sums, dist::ReduceOp::sum, pg);
      auto v = sums.to_vector<double>();
      total_loss = v[0], correct = v[1], n = v[2];
    }
    // <<< distributed training and checkpoints
    EpochMetrics m;
    m.epoch = epoch;
    m.train_loss = total_loss / std::max(n, 1.0);
    m.train_acc = correct / std::max(n, 1.0);
    if (val) std::tie(m.val_loss, m.val_acc) = evaluate(model, *val, loss);
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty) fmt::print(stderr, "\r{}\r", std::string(80, ' '));
    if (rank0)
      fmt::print("epoch {:>2}: train_loss={:.4f} train_acc={:.4f}{} time={:.1f}s\n", epoch, m.train_loss, m.train_acc,
                 val ? fmt::format(" val_loss={:.4f} val_acc={:.4f}", m.val_loss, m.val_acc) : "", m.seconds);
    std::fflush(stdout);
    history.push_back(m);
    if (!opt_.checkpoint_path.empty()) save_checkpoint(model, opt, epoch);  // distributed training and checkpoints
  }
  if (rank0 && !opt_.plot_path.empty()) plot_metrics(history, opt_.plot_path);
  return history;
}

// >>> distributed training and checkpoints
void Trainer::save_checkpoint(nn::Module& model, optim::Optimizer& opt, int epoch) const {
  dist::ProcessGroup* pg = opt_.process_group.get();
  if (!pg || pg->rank() == 0) {
    OrderedDict<Tensor> ck;
    for (auto& [k, v] : model.state_dict()) ck.insert("model." + k, v.to(cpu()));
    for (auto& [k, v] : opt.state_dict()) ck.insert("optimizer." + k, v.to(cpu()));
    ck.insert("trainer.epoch", from_vector<int64_t>({epoch}, Shape{1}));
    save(ck, opt_.checkpoint_path);  // atomic: a crash leaves the previous checkpoint
  }
  // Every rank returns once the checkpoint of this epoch exists.
  if (pg && pg->size() > 1) dist::barrier(pg);
}

int Trainer::resume(nn::Module& model, optim::Optimizer& opt, data::DataLoader& train) const {
  OrderedDict<Tensor> ck = load_dict(opt_.resume_from);
  OrderedDict<Tensor> model_state, opt_state;
  int64_t epoch = -1;
  for (auto& [k, v] : ck) {
    if (k.starts_with("model.")) model_state.insert(k.substr(6), v);
    else if (k.starts_with("optimizer.")) opt_state.insert(k.substr(10), v);
    else if (k == "trainer.epoch") epoch = v.to_vector<int64_t>()[0];
  }
  if (epoch < 0)
    throw CheckpointError(fmt::format("Trainer: {} is not a Trainer checkpoint (no 'trainer.epoch' entry)",
                                      opt_.resume_from));
  model.load_state_dict(model_state);
  model.to(device_);
  opt.load_state_dict(opt_state);
  train.set_epoch(static_cast<uint64_t>(epoch));  // the shuffled order continues where it stopped
  return static_cast<int>(epoch);
}
// <<< distributed training and checkpoints

namespace {
bool have_gnuplot(const std::string& png_path) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) return true;
  fmt::print(stderr, "note: gnuplot is not installed, so no plot was written ({}); scripts/setup-deps.sh installs it\n",
             png_path);
  return false;
}
}  // namespace

bool plot_curves(const std::vector<Curve>& curves, const std::string& png_path, const std::string& xlabel,
                 const std::string& ylabel) {
  if (!have_gnuplot(png_path)) return false;
  std::filesystem::path dat = std::filesystem::path(png_path).replace_extension(".dat");
  std::FILE* f = std::fopen(dat.c_str(), "w");
  if (!f) return false;
  // One gnuplot data block per curve (blocks are separated by two blank lines).
  std::string plots;
  for (size_t c = 0; c < curves.size(); ++c) {
    fmt::print(f, "# {}: {} {}\n", curves[c].title, xlabel, ylabel.empty() ? "y" : ylabel);
    for (size_t i = 0; i < curves[c].x.size() && i < curves[c].y.size(); ++i)
      fmt::print(f, "{} {}\n", curves[c].x[i], curves[c].y[i]);
    fmt::print(f, "\n\n");
    std::string title = curves[c].title;
    for (char& ch : title)
      if (ch == '\'' || ch == '"') ch = ' ';
    plots += fmt::format("{}'{}' index {} using 1:2 with lines lw 2 title '{}'", c ? ", " : "", dat.string(), c, title);
  }
  std::fclose(f);
  if (plots.empty()) return false;
  std::string script = fmt::format(
      "set terminal png size 900,500; set output '{}'; set xlabel '{}'; set ylabel '{}'; set key top right; "
      "set grid; plot {}",
      png_path, xlabel, ylabel, plots);
  std::string cmd = fmt::format("gnuplot -e \"{}\" 2>&1", script);
  int rc = std::system(cmd.c_str());
  if (rc != 0) fmt::print(stderr, "note: gnuplot failed to write {}\n", png_path);
  return rc == 0;
}

bool plot_metrics(const std::vector<EpochMetrics>& history, const std::string& png_path) {
  if (!have_gnuplot(png_path)) return false;
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
