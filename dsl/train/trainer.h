// Trainer: the loop the chapter's GPU section drives (S7.7). It moves the
// model and each batch to the first GPU when there is one (prepare_model,
// prepare_batch), clips gradients when asked, shows progress on a terminal,
// and records per-epoch metrics (optionally plotted to a PNG).
//   train::Trainer trainer({.max_epochs = 10});
//   auto history = trainer.fit(*net, opt, train_loader, &test_loader);
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dsl/data/dataloader.h"
#include "dsl/nn/module.h"
#include "dsl/train/optimizer.h"

namespace tessel::train {

struct TrainerOptions {
  int max_epochs = 10;
  int num_gpus = 0;              // GPUs to use (at most what the machine has; 0 = CPU)
  double gradient_clip_val = 0;  // 0 = no clipping
  bool progress = true;          // a progress bar when stderr is a terminal
  std::string plot_path;         // PNG of the loss/accuracy curves; empty = none
};

struct EpochMetrics {
  int epoch = 0;
  double train_loss = 0, train_acc = 0;
  double val_loss = 0, val_acc = 0;
  double seconds = 0;
};

class Trainer {
 public:
  using LossFn = std::function<Tensor(const Tensor& logits, const Tensor& labels)>;
  explicit Trainer(TrainerOptions opt = {});

  std::vector<EpochMetrics> fit(nn::Module& model, optim::Optimizer& opt, data::DataLoader& train,
                                data::DataLoader* val = nullptr, LossFn loss = {});
  /// The device training runs on: the first GPU when num_gpus > 0 and one exists, else the CPU.
  Device device() const { return device_; }
  data::DataLoader::Batch prepare_batch(const data::DataLoader::Batch& b) const;
  void prepare_model(nn::Module& model) const;
  /// (mean loss, accuracy) of `model` over `loader`, without gradients.
  std::pair<double, double> evaluate(nn::Module& model, data::DataLoader& loader, const LossFn& loss) const;

 private:
  void plot(const std::vector<EpochMetrics>& history) const;
  TrainerOptions opt_;
  Device device_;
};

/// Writes a PNG of per-epoch curves with gnuplot; returns false (and says why on stderr) when it cannot.
bool plot_metrics(const std::vector<EpochMetrics>& history, const std::string& png_path);

}  // namespace tessel::train
