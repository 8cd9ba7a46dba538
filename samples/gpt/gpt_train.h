// Training the GPT sample: a model with its AdamW optimizer and warmup +
// cosine schedule, one step at a time, and checkpoints a run resumes from
// exactly; shared by the sample (gpt.cpp) and its test (tests/train).
//
//   gpt::Run run(config, {.steps = 2000, .batch = 32});      // a fresh run (seeded)
//   double loss = run.train_step(corpus.train);               // step 1, 2, ...
//   run.save_checkpoint("out/ckpt.safetensors", corpus);
//   gpt::Run resumed(gpt::load_checkpoint("out/ckpt.safetensors"), options);  // continues at run.step + 1
//
// A step is deterministic given (seed, step): the batch's offsets come from
// them (get_batch) and the global generator, which dropout draws from, is
// re-seeded from them before the forward pass. So a resumed run, whose
// checkpoint holds the weights, AdamW's moments and step count, the
// schedule's epoch and the seed, takes the same steps as an uninterrupted one.
//
// The checkpoint is one safetensors file (one atomic write): "model.*" the
// model's state dict (lm_head.weight an alias of transformer.wte.weight),
// "optimizer.*" AdamW's state_dict(), "scheduler.last_epoch", "config.*",
// "vocab" (the corpus's bytes), "train.step", "train.seed", "train.steps"
// (the schedule's length) and "history.*"
// (the loss curves so far).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dsl/io.h"
#include "dsl/tessel.h"
#include "dsl/train/lr_scheduler.h"
#include "dsl/train/optimizer.h"
#include "samples/gpt/gpt_data.h"
#include "samples/gpt/gpt_model.h"

namespace gpt {

struct TrainOptions {
  int64_t steps = 2000;         // the schedule's length
  int64_t batch = 32;           // context windows per step
  double lr = 1e-3;             // peak learning rate
  double min_lr = 1e-4;         // at the end of the cosine
  int64_t warmup = 100;         // linear warmup steps
  double weight_decay = 0.1;    // on the Linear weights only (param_groups)
  double beta2 = 0.99;          // AdamW's betas are (0.9, beta2)
  double grad_clip = 1.0;       // max global gradient norm
  uint64_t seed = 1337;         // weights, batches, dropout (a resumed run keeps its checkpoint's)
  int64_t eval_iters = 20;      // validation batches per estimate
};

/// Loss curves: training loss at every step, validation loss when estimated.
struct History {
  std::vector<double> step, train_loss, val_step, val_loss;
};

using tessel::OrderedDict;
using tessel::Tensor;

inline Tensor i64_scalar(int64_t v) { return tessel::full({}, tessel::Scalar(v), tessel::DType::i64); }
inline Tensor f64_scalar(double v) { return tessel::full({}, tessel::Scalar(v), tessel::DType::f64); }
inline Tensor f64_vector(const std::vector<double>& v) {
  return tessel::from_vector<double>(v, {static_cast<int64_t>(v.size())});
}

/// A checkpoint's entries (dsl/io.h's load_dict: aliases come back as the same tensor).
inline OrderedDict<Tensor> load_checkpoint(const std::filesystem::path& file) { return tessel::load_dict(file); }

/// The model configuration a checkpoint was trained with.
inline Config config_of(const OrderedDict<Tensor>& ck) {
  auto i = [&](const char* k) { return ck.at(fmt::format("config.{}", k)).item<int64_t>(); };
  return {.vocab_size = i("vocab_size"), .block_size = i("block_size"), .n_layer = i("n_layer"),
          .n_head = i("n_head"), .n_embd = i("n_embd"), .dropout = ck.at("config.dropout").item<double>()};
}

/// The entries of `ck` under "prefix.", without it.
inline OrderedDict<Tensor> with_prefix(const OrderedDict<Tensor>& ck, const std::string& prefix) {
  OrderedDict<Tensor> out;
  for (auto& [k, v] : ck)
    if (k.starts_with(prefix + ".")) out.insert(k.substr(prefix.size() + 1), v);
  return out;
}

/// A model, its optimizer and schedule, the step reached and the curves.
/// Not movable: the schedule holds the optimizer.
class Run {
 public:
  /// A fresh run: the weights drawn from options.seed.
  Run(const Config& c, const TrainOptions& o) : Run(c, o, nullptr) {}
  /// A run resumed from a checkpoint (config, weights, optimizer, schedule,
  /// step, seed, curves); `o` gives the rest (batch, steps, rates).
  Run(const OrderedDict<Tensor>& ck, const TrainOptions& o) : Run(config_of(ck), o, &ck) {}
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  GPT model;
  tessel::optim::Adam opt;
  tessel::optim::CosineWithWarmup sched;
  TrainOptions options;
  int64_t step = 0;  // steps taken
  History history;

  /// One training step (number step + 1) on a batch of `train`; its loss.
  double train_step(const std::vector<int64_t>& train) {
    using namespace tessel;
    const int64_t s = step + 1, B = options.batch, T = model->config.block_size;
    manual_seed(options.seed * 1000003u + static_cast<uint64_t>(s));  // dropout's draws for this step
    Batch b = get_batch(train, B, T, options.seed, s);
    model->train();
    Tensor loss = loss_of(b);
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(opt.params(), options.grad_clip);
    opt.step();
    sched.step();
    step = s;
    const double l = loss.item<double>();
    history.step.push_back(static_cast<double>(s));
    history.train_loss.push_back(l);
    return l;
  }

  /// Mean loss over options.eval_iters batches of `data` (the same batches
  /// every time), in eval mode without gradients.
  double estimate_loss(const std::vector<int64_t>& data) {
    using namespace tessel;
    NoGradGuard g;
    model->eval();
    double total = 0;
    for (int64_t i = 0; i < options.eval_iters; ++i)
      total += loss_of(get_batch(data, options.batch, model->config.block_size, options.seed ^ 0xe7a1u, i))
                   .item<double>();
    model->train();
    return total / static_cast<double>(options.eval_iters);
  }

  /// Records a validation loss at the current step (for the curves).
  void record_val_loss(double v) {
    history.val_step.push_back(static_cast<double>(step));
    history.val_loss.push_back(v);
  }

  /// Everything a resumed run needs, in one file (an atomic write).
  void save_checkpoint(const std::filesystem::path& file, const Corpus& corpus) const {
    const Config& c = model->config;
    OrderedDict<Tensor> ck;
    for (auto& [k, v] : model->state_dict()) ck.insert("model." + k, v);
    for (auto& [k, v] : opt.state_dict()) ck.insert("optimizer." + k, v);
    for (auto& [k, v] : sched.state_dict()) ck.insert("scheduler." + k, v);
    ck.insert("config.vocab_size", i64_scalar(c.vocab_size));
    ck.insert("config.block_size", i64_scalar(c.block_size));
    ck.insert("config.n_layer", i64_scalar(c.n_layer));
    ck.insert("config.n_head", i64_scalar(c.n_head));
    ck.insert("config.n_embd", i64_scalar(c.n_embd));
    ck.insert("config.dropout", f64_scalar(c.dropout));
    std::vector<int64_t> vocab(corpus.chars.begin(), corpus.chars.end());
    ck.insert("vocab", tessel::from_vector<int64_t>(vocab, {static_cast<int64_t>(vocab.size())}));
    ck.insert("train.step", i64_scalar(step));
    ck.insert("train.seed", i64_scalar(static_cast<int64_t>(options.seed)));
    ck.insert("train.steps", i64_scalar(options.steps));
    ck.insert("history.step", f64_vector(history.step));
    ck.insert("history.train_loss", f64_vector(history.train_loss));
    ck.insert("history.val_step", f64_vector(history.val_step));
    ck.insert("history.val_loss", f64_vector(history.val_loss));
    tessel::save(ck, file);
  }

  /// Whether checkpoint `ck` was trained on this vocabulary.
  static bool same_vocab(const OrderedDict<Tensor>& ck, const Corpus& corpus) {
    std::vector<int64_t> v = ck.at("vocab").to_vector<int64_t>();
    return v == std::vector<int64_t>(corpus.chars.begin(), corpus.chars.end());
  }

 private:
  Run(const Config& c, const TrainOptions& o, const OrderedDict<Tensor>* ck)
      : model(seeded(c, ck ? static_cast<uint64_t>(ck->at("train.seed").item<int64_t>()) : o.seed)),
        opt(tessel::optim::AdamW(param_groups(model, o.weight_decay),
                                 {.lr = o.lr, .beta1 = 0.9, .beta2 = o.beta2, .weight_decay = o.weight_decay})),
        sched(opt, o.warmup, std::max(o.steps, o.warmup + 1), o.min_lr),  // (--steps 0: sampling only)
        options(o) {
    if (!ck) return;
    options.seed = static_cast<uint64_t>(ck->at("train.seed").item<int64_t>());
    model->load_state_dict(with_prefix(*ck, "model"));
    opt.load_state_dict(with_prefix(*ck, "optimizer"));
    sched.load_state_dict(with_prefix(*ck, "scheduler"));
    step = ck->at("train.step").item<int64_t>();
    auto vec = [&](const char* k) { return ck->at(fmt::format("history.{}", k)).to_vector<double>(); };
    history = {vec("step"), vec("train_loss"), vec("val_step"), vec("val_loss")};
  }

  static GPT seeded(const Config& c, uint64_t seed) {
    tessel::manual_seed(seed);
    return GPT(c);
  }

  // Mean cross-entropy of the next character over every position of the batch.
  Tensor loss_of(const Batch& b) {
    const int64_t N = b.x.numel(), V = model->config.vocab_size;
    return tessel::cross_entropy(model(b.x).reshape({N, V}), b.y.reshape({N}));
  }
};

}  // namespace gpt
