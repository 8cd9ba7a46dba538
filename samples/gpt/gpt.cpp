// A character-level GPT (samples/gpt/gpt_model.h: minGPT's model) trained on
// the fortune files of Debian's `fortunes` package, then sampled.
//
//   gpt [--steps N] [--until N] [--batch N] [--resume] [--prompt TEXT] [--temperature T] [--top-k K]
//       [--out-dir DIR] [--tokens N] [--layers N] [--heads N] [--embd N] [--context N]
//       [--dropout P] [--lr LR] [--eval-every N] [--ckpt-every N] [--log-every N] [--seed N]
//
//   --steps        total training steps, the schedule's length (default 2000)
//   --until        stop after this step (default: --steps), to split a run; --resume with the
//                  same --steps continues it as if it had not stopped
//   --batch        context windows per step (default 32)
//   --resume       continue from OUT_DIR/ckpt.safetensors (its model size, seed and step;
//                  the same batches and dropout as if it had never stopped)
//   --prompt       the text generation starts from (default "Q: ")
//   --temperature  divides the logits before sampling (default 0.8)
//   --top-k        sample among the K likeliest characters; 0 = all (default 20)
//   --tokens       characters to generate (default 500); --steps 0 with --resume only samples
//   --out-dir      checkpoints, loss curves and the sample go here (default gpt_out)
//   --layers, --heads, --embd, --context, --dropout   the model (default 4, 4, 128, 128, 0.1)
//   --lr           peak learning rate (default 1e-3; min(100, steps/10) warmup steps, cosine to lr/10)
//   --eval-every   steps between validation-loss estimates (default 250)
//   --ckpt-every   steps between checkpoints (default 500; one at the end too)
//
// Prints a progress line every --log-every steps (step, loss, lr, tokens/s),
// the validation loss every --eval-every steps, and at the end
//   final: steps=N train_loss=X val_loss=Y tokens_per_s=Z train_seconds=S
// and a sample. Writes OUT_DIR/ckpt.safetensors (model, AdamW state, step:
// what --resume reads), OUT_DIR/gpt.safetensors (the model's state dict
// alone, which the same torch.nn model loads), OUT_DIR/loss.png (the curves,
// by gnuplot) and OUT_DIR/sample.txt. The checkpoints and the sample are
// written atomically (a crash leaves the previous file whole).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "dsl/io.h"
#include "dsl/tessel.h"
#include "dsl/train/trainer.h"
#include "runtime/atomic_file.h"
#include "samples/gpt/gpt_data.h"
#include "samples/gpt/gpt_model.h"
#include "samples/gpt/gpt_train.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

struct Args {
  gpt::TrainOptions train{.steps = 2000, .batch = 32};
  gpt::Config model;  // vocab_size from the corpus
  bool resume = false;
  std::string prompt = "Q: ";
  double temperature = 0.8;
  int64_t top_k = 20;
  int64_t tokens = 500;
  fs::path out_dir = "gpt_out";
  int64_t eval_every = 250, ckpt_every = 500, log_every = 10;
  int64_t until = -1;  // -1: --steps
};

[[noreturn]] void usage(const std::string& why) {
  if (!why.empty()) fmt::print(stderr, "gpt: {}\n", why);
  fmt::print(stderr,
             "usage: gpt [--steps N] [--until N] [--batch N] [--resume] [--prompt TEXT] [--temperature T] [--top-k K]\n"
             "           [--out-dir DIR] [--tokens N] [--layers N] [--heads N] [--embd N] [--context N]\n"
             "           [--dropout P] [--lr LR] [--eval-every N] [--ckpt-every N] [--log-every N] [--seed N]\n");
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("");
    if (flag == "--resume") {
      a.resume = true;
      continue;
    }
    if (i + 1 >= argc) usage(fmt::format("{} needs a value", flag));
    std::string value = argv[++i];
    char* end = nullptr;
    auto integer = [&](int64_t min) {
      long long n = std::strtoll(value.c_str(), &end, 10);
      if (*end || value.empty() || n < min) usage(fmt::format("{} wants an integer >= {}, got '{}'", flag, min, value));
      return static_cast<int64_t>(n);
    };
    auto number = [&](double min, bool inclusive) {
      double x = std::strtod(value.c_str(), &end);
      if (*end || value.empty() || !(inclusive ? x >= min : x > min))
        usage(fmt::format("{} wants a number {} {}, got '{}'", flag, inclusive ? ">=" : ">", min, value));
      return x;
    };
    if (flag == "--steps") a.train.steps = integer(0);
    else if (flag == "--until") a.until = integer(0);
    else if (flag == "--batch") a.train.batch = integer(1);
    else if (flag == "--prompt") a.prompt = value;
    else if (flag == "--temperature") a.temperature = number(0, false);
    else if (flag == "--top-k") a.top_k = integer(0);
    else if (flag == "--tokens") a.tokens = integer(0);
    else if (flag == "--out-dir") a.out_dir = value;
    else if (flag == "--layers") a.model.n_layer = integer(1);
    else if (flag == "--heads") a.model.n_head = integer(1);
    else if (flag == "--embd") a.model.n_embd = integer(1);
    else if (flag == "--context") a.model.block_size = integer(2);
    else if (flag == "--dropout") a.model.dropout = number(0, true);
    else if (flag == "--lr") a.train.lr = number(0, false);
    else if (flag == "--eval-every") a.eval_every = integer(1);
    else if (flag == "--ckpt-every") a.ckpt_every = integer(1);
    else if (flag == "--log-every") a.log_every = integer(1);
    else if (flag == "--seed") a.train.seed = static_cast<uint64_t>(integer(0));
    else usage(fmt::format("unknown option '{}'", flag));
  }
  if (a.model.dropout >= 1) usage("--dropout must be below 1");
  a.train.min_lr = a.train.lr / 10;
  a.train.warmup = std::min<int64_t>(100, std::max<int64_t>(1, a.train.steps / 10));
  if (a.until < 0 || a.until > a.train.steps) a.until = a.train.steps;
  return a;
}

// Writes `text` to `path` atomically (runtime/atomic_file.h, as checkpoints are written).
void write_text(const fs::path& path, const std::string& text) {
  write_file_atomically(path, [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
}

}  // namespace

static int run(const Args& args) {
  gpt::Corpus corpus = gpt::load_corpus();
  fs::create_directories(args.out_dir);
  const fs::path ckpt = args.out_dir / "ckpt.safetensors";

  std::unique_ptr<gpt::Run> run;
  if (args.resume) {
    if (!fs::exists(ckpt)) throw ValueError(fmt::format("--resume: no checkpoint {}", ckpt.string()));
    auto ck = gpt::load_checkpoint(ckpt);
    if (!gpt::Run::same_vocab(ck, corpus))
      throw ValueError(fmt::format("--resume: {} was trained on another vocabulary", ckpt.string()));
    run = std::make_unique<gpt::Run>(ck, args.train);
    fmt::print("resumed from {} at step {}\n", ckpt.string(), run->step);
    if (const Tensor* total = ck.find("train.steps"); total && total->item<int64_t>() != args.train.steps)
      fmt::print("note: the checkpoint's run had --steps {}, this one {}: the learning-rate schedule differs\n",
                 total->item<int64_t>(), args.train.steps);
  } else {
    gpt::Config c = args.model;
    c.vocab_size = corpus.vocab_size();
    run = std::make_unique<gpt::Run>(c, args.train);
  }
  gpt::Run& r = *run;
  const gpt::Config& c = r.model->config;
  const int64_t tokens_per_step = args.train.batch * c.block_size;
  fmt::print("GPT: {} layers, {} heads, d={}, context {}, dropout {}, {} parameters; corpus {} files, "
             "{} train / {} val characters, vocabulary {}\n"
             "AdamW lr {} (warmup {}, cosine to {} at step {}), betas (0.9, {}), weight decay {} on Linear weights "
             "only, clip {}; batch {} x {} = {} tokens/step\n",
             c.n_layer, c.n_head, c.n_embd, c.block_size, c.dropout, r.model->num_parameters(), corpus.files.size(),
             corpus.train.size(), corpus.val.size(), corpus.vocab_size(), args.train.lr, args.train.warmup,
             args.train.min_lr, args.train.steps, args.train.beta2, args.train.weight_decay, args.train.grad_clip,
             args.train.batch, c.block_size, tokens_per_step);
  std::fflush(stdout);

  auto save_all = [&] {
    r.save_checkpoint(ckpt, corpus);
    save(r.model->state_dict(), args.out_dir / "gpt.safetensors");
  };
  double train_seconds = 0, last_val = NAN, window_loss = 0;
  int64_t window_steps = 0, trained_steps = 0;
  auto t_window = std::chrono::steady_clock::now();
  while (r.step < args.until) {
    auto t0 = std::chrono::steady_clock::now();
    double loss = r.train_step(corpus.train);
    train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++trained_steps;
    window_loss += loss;
    ++window_steps;
    const bool last = r.step == args.until;
    if (r.step % args.log_every == 0 || last) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_window).count();
      fmt::print("step {:>5}/{}: loss {:.4f} lr {:.2e} tokens/s {:.0f}\n", r.step, args.train.steps,
                 window_loss / static_cast<double>(window_steps), r.sched.get_last_lr(),
                 static_cast<double>(window_steps * tokens_per_step) / secs);
      std::fflush(stdout);
      window_loss = 0;
      window_steps = 0;
      t_window = std::chrono::steady_clock::now();
    }
    if (r.step % args.eval_every == 0 || last) {
      last_val = r.estimate_loss(corpus.val);
      r.record_val_loss(last_val);
      fmt::print("step {:>5}: val_loss {:.4f}\n", r.step, last_val);
      std::fflush(stdout);
      t_window = std::chrono::steady_clock::now();  // not counted in tokens/s
    }
    if (r.step % args.ckpt_every == 0 || last) {
      save_all();
      fmt::print("step {:>5}: checkpoint {}\n", r.step, ckpt.string());
      t_window = std::chrono::steady_clock::now();
    }
  }

  if (!r.history.step.empty()) {
    // The training loss averaged over windows of up to 20 steps (one step's is noisy).
    gpt::History& h = r.history;
    const size_t w = std::clamp<size_t>(h.train_loss.size() / 30, 1, 20);
    train::Curve smooth{fmt::format("train loss ({}-step mean)", w), {}, {}};
    for (size_t i = 0; i + w <= h.train_loss.size(); i += w) {
      double m = 0;
      for (size_t j = i; j < i + w; ++j) m += h.train_loss[j];
      smooth.x.push_back(h.step[i + w - 1]);
      smooth.y.push_back(m / static_cast<double>(w));
    }
    train::plot_curves({smooth, {"validation loss", h.val_step, h.val_loss}}, (args.out_dir / "loss.png").string(),
                       "step", "cross-entropy (nats/char)");
  }
  if (trained_steps > 0) {
    double tail = 0;
    size_t n = std::min<size_t>(50, r.history.train_loss.size());
    for (size_t i = r.history.train_loss.size() - n; i < r.history.train_loss.size(); ++i) tail += r.history.train_loss[i];
    fmt::print("final: steps={} train_loss={:.4f} val_loss={:.4f} tokens_per_s={:.0f} train_seconds={:.1f}\n", r.step,
               tail / static_cast<double>(n), last_val,
               static_cast<double>(trained_steps * tokens_per_step) / train_seconds, train_seconds);
  }

  auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> out = gpt::generate(r.model, corpus.encode(args.prompt), args.tokens, args.temperature,
                                           args.top_k, args.train.seed);
  double gen_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string text = corpus.decode(out);
  write_text(args.out_dir / "sample.txt", text + "\n");
  fmt::print("sample (temperature {}, top-k {}, {} characters in {:.1f}s):\n{}\n", args.temperature, args.top_k,
             args.tokens, gen_seconds, text);
  return 0;
}

int main(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpt: {}\n", e.what());
    return 1;
  }
}
