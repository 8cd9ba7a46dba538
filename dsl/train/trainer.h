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
#include "runtime/dist/process_group.h"  // distributed training (TrainerOptions::process_group)

namespace tessel::train {

struct TrainerOptions {
  int max_epochs = 10;
  int num_gpus = 0;              // GPUs to use (at most what the machine has; 0 = CPU)
  double gradient_clip_val = 0;  // 0 = no clipping
  bool progress = true;          // a progress bar when stderr is a terminal
  std::string plot_path;         // PNG of the loss/accuracy curves; empty = none
  // >>> distributed training and checkpoints
  // With a process group (the model usually an nn::DistributedDataParallel,
  // the loader's sampler a data::DistributedSampler, whose set_epoch fit
  // calls), only rank 0 prints and writes checkpoints; the epoch's loss and
  // accuracy are over every rank's examples. checkpoint_path: written after
  // every epoch (atomically: model, optimizer state and the epoch, one
  // safetensors file); resume_from: such a file to continue from, which every
  // rank reads (the next epoch sees the batches it would have seen).
  std::shared_ptr<dist::ProcessGroup> process_group;
  std::string checkpoint_path;
  std::string resume_from;
  // <<< distributed training and checkpoints
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
  // distributed training and checkpoints: rank 0 writes, every rank reads; resume returns the epoch done
  void save_checkpoint(nn::Module& model, optim::Optimizer& opt, int epoch) const;
  int resume(nn::Module& model, optim::Optimizer& opt, data::DataLoader& train) const;
  TrainerOptions opt_;
  Device device_;
};

/// Writes a PNG of per-epoch curves with gnuplot; returns false (and says why on stderr) when it cannot.
bool plot_metrics(const std::vector<EpochMetrics>& history, const std::string& png_path);

/// One line of plot_curves: its points and its title in the key.
struct Curve {
  std::string title;
  std::vector<double> x, y;
};
/// Any curves over one x axis (steps, say) as a PNG, with gnuplot as
/// plot_metrics (the points go to a .dat file beside it); false (and why on
/// stderr) when it cannot.
///   train::plot_curves({{"train loss", steps, train}, {"val loss", val_steps, val}}, "loss.png", "step", "loss");
bool plot_curves(const std::vector<Curve>& curves, const std::string& png_path, const std::string& xlabel,
                 const std::string& ylabel = "");

}  // namespace tessel::train
