#include "dsl/nn/distributed_data_parallel.h"

#include <fmt/format.h>

#include <map>
#include <optional>

#include "dsl/dist/collectives.h"

namespace tessel::nn {

namespace {

// One line per parameter and buffer, what ranks compare.
std::string describe(const char* kind, const std::string& name, const Tensor& t) {
  if (t.impl() && t.impl()->kind == TensorImpl::Kind::uninitialized_parameter)
    return fmt::format("{} '{}' (uninitialized)", kind, name);
  return fmt::format("{} '{}' {} {}", kind, name, dtype_name(t.dtype()), t.shape().str());
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find('\n', b);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// Every rank's text, by two all_gathers (lengths, then the padded bytes) of tensors on `d`.
std::vector<std::string> gather_text(const std::string& mine, dist::ProcessGroup* g, Device d) {
  std::vector<Tensor> lens =
      dist::all_gather(from_vector<int64_t>({static_cast<int64_t>(mine.size())}, Shape{1}, d), g);
  int64_t longest = 1;
  for (auto& l : lens) longest = std::max(longest, l.item<int64_t>());
  std::vector<int32_t> bytes(static_cast<size_t>(longest), 0);
  for (size_t i = 0; i < mine.size(); ++i) bytes[i] = static_cast<unsigned char>(mine[i]);
  std::vector<Tensor> all = dist::all_gather(from_vector<int32_t>(bytes, Shape{longest}, d), g);
  std::vector<std::string> out;
  for (size_t r = 0; r < all.size(); ++r) {
    std::vector<int32_t> v = all[r].to_vector<int32_t>();
    std::string s;
    for (int64_t i = 0; i < lens[r].item<int64_t>(); ++i) s.push_back(static_cast<char>(v[static_cast<size_t>(i)]));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

DistributedDataParallelImpl::DistributedDataParallelImpl(std::shared_ptr<Module> module,
                                                         DistributedDataParallelOptions options)
    : Module("DistributedDataParallel"), module_(std::move(module)), opt_(std::move(options)) {
  if (!module_) throw ValueError("DistributedDataParallel: the module is null");
  if (!(opt_.bucket_cap_mb > 0))
    throw ValueError(fmt::format("DistributedDataParallel: bucket_cap_mb must be positive, got {}", opt_.bucket_cap_mb));
  group_ = opt_.group ? opt_.group : dist::default_group();
  register_module("module", module_);
  device_ = model_device();
  check_same_model_and_broadcast();

  // Buckets in reverse parameter order, one dtype each (PyTorch's assignment by size).
  OrderedDict<Parameter> named = module_->named_parameters();
  std::vector<std::pair<std::string, Parameter>> params;
  for (auto& [name, p] : named)
    if (p.requires_grad()) params.emplace_back(name, p);
  const double cap = opt_.bucket_cap_mb * 1024 * 1024;
  std::map<DType, size_t> open;
  std::map<DType, double> filled;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const auto& [name, p] = *it;
    DType dt = p.dtype();
    if (!open.count(dt)) {
      open[dt] = buckets_.size();
      filled[dt] = 0;
      buckets_.emplace_back();
      buckets_.back().dtype = dt;
    }
    BucketState& b = buckets_[open[dt]];
    slots_.push_back({p, name, open[dt], b.numel, false});
    b.slots.push_back(slots_.size() - 1);
    b.numel += p.numel();
    filled[dt] += static_cast<double>(p.numel() * static_cast<int64_t>(dtype_size(dt)));
    if (filled[dt] >= cap) open.erase(dt);
  }
  for (BucketState& b : buckets_) {
    b.data = empty(Shape{b.numel}, b.dtype, device_);
    b.data.eval();
  }
  for (size_t i = 0; i < slots_.size(); ++i)
    hooks_.push_back(autograd::register_post_accumulate_grad_hook(slots_[i].param, [this, i](const Tensor&) {
      on_grad_ready(i);
    }));
}

DistributedDataParallelImpl::~DistributedDataParallelImpl() {
  for (auto& h : hooks_) h.remove();
  abandon_in_flight();
}

// The one device of every parameter and buffer, which must suit the group's backend.
Device DistributedDataParallelImpl::model_device() const {
  std::optional<std::pair<std::string, Device>> first;
  auto visit = [&](const char* kind, const std::string& name, const Tensor& t) {
    // An uninitialized parameter has no device yet; the model check reports it.
    if (t.impl() && t.impl()->kind == TensorImpl::Kind::uninitialized_parameter) return;
    Device d = t.device();
    if (!first) {
      first = {fmt::format("{} '{}'", kind, name), d};
    } else if (!(first->second == d)) {
      throw DeviceError(fmt::format("DistributedDataParallel: {} is on {} but {} '{}' is on {}; DDP replicates a model "
                                    "that lives on one device per rank: move it with .to(device) first",
                                    first->first, first->second.str(), kind, name, d.str()));
    }
    if (group_->device_kind() != d.kind)
      throw DeviceError(fmt::format(
          "DistributedDataParallel: {} '{}' is on {}; the {} backend reduces {} tensors only; {}", kind, name, d.str(),
          group_->backend(), d.is_cpu() ? "GPU" : "CPU",
          d.is_cpu() ? "move the model to this rank's GPU with .to(gpu(i))"
                     : "use the nccl backend for a model on a GPU, or move it with .to(cpu())"));
  };
  for (auto& [name, p] : module_->named_parameters()) visit("parameter", name, p);
  for (auto& [name, b] : module_->named_buffers()) visit("buffer", name, b);
  return first ? first->second : group_->device_kind() == Device::Kind::cpu ? cpu() : gpu(0);
}

void DistributedDataParallelImpl::check_same_model_and_broadcast() {
  std::vector<std::string> mine;
  for (auto& [name, p] : module_->named_parameters()) mine.push_back(describe("parameter", name, p));
  for (auto& [name, b] : module_->named_buffers()) mine.push_back(describe("buffer", name, b));
  std::string text;
  for (auto& l : mine) text += l + "\n";
  std::vector<std::string> all = gather_text(text, group_.get(), device_);
  std::vector<std::string> base = split_lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    std::vector<std::string> other = split_lines(all[r]);
    size_t i = 0;
    while (i < base.size() && i < other.size() && base[i] == other[i]) ++i;
    auto at = [](const std::vector<std::string>& v, size_t k) { return k < v.size() ? v[k] : std::string("nothing"); };
    throw ValueError(fmt::format(
        "DistributedDataParallel: the models differ across ranks: entry #{} is {} on rank 0 but {} on rank {} (rank 0 "
        "has {} parameters and buffers, rank {} has {}); every rank must build the same model: the same parameters "
        "and buffers, with the same names, shapes and dtypes, in the same order",
        i, at(base, i), at(other, i), r, base.size(), r, other.size()));
  }
  for (auto& l : base)
    if (l.ends_with("(uninitialized)"))
      throw ValueError(fmt::format("DistributedDataParallel: {}: a lazy layer's parameter has no shape yet; run a forward "
                                   "pass (or apply_init) on the model before wrapping it",
                                   l.substr(0, l.size() - 16)));
  NoGradGuard no_grad;
  for (auto& p : module_->parameters()) dist::broadcast(p, 0, group_.get());
  for (auto& b : module_->buffers()) dist::broadcast(b, 0, group_.get());
}

void DistributedDataParallelImpl::broadcast_buffers() {
  if (!opt_.broadcast_buffers || group_->size() == 1) return;
  NoGradGuard no_grad;
  for (auto& b : module_->buffers()) dist::broadcast(b, 0, group_.get());
}

Tensor DistributedDataParallelImpl::forward(const Tensor& x) {
  broadcast_buffers();
  return module_->forward(x);
}

void DistributedDataParallelImpl::abandon_in_flight() noexcept {
  for (BucketState& b : buckets_) {
    if (b.gate) b.gate->cancel();  // a no-op where it opened
    b.gate.reset();
    if (b.work) {
      try {
        b.work->wait();  // its memory must outlive it; its error belongs to a backward that already failed
      } catch (...) {
      }
      b.work.reset();
    }
  }
  in_backward_ = false;
}

void DistributedDataParallelImpl::on_grad_ready(size_t i) {
  if (!sync_) return;
  if (!in_backward_) {
    // The first gradient of a backward: a fresh round (a failed backward's leftovers are dropped).
    abandon_in_flight();
    for (Slot& s : slots_) s.ready = false;
    for (BucketState& b : buckets_) {
      b.pending = b.slots.size();
      b.ready = false;
    }
    next_bucket_ = 0;
    log_.clear();
    in_backward_ = true;
    autograd::queue_callback([this] { finish_gradient_synchronization(); });
    if (group_->agrees_ahead()) {
      // Every bucket's all_reduce now, in bucket order: the ranks agree on the
      // calls while backward still computes; each moves when its bucket is full.
      for (size_t k = 0; k < buckets_.size(); ++k) {
        BucketState& b = buckets_[k];
        b.gate = std::make_shared<dist::ReadyGate>();
        b.work = group_->all_reduce_after(dist::comm_buffer(b.data), dist::ReduceOp::avg, b.gate);
      }
    }
  }
  Slot& s = slots_[i];
  s.ready = true;
  log_.push_back("ready " + s.name);
  BucketState& b = buckets_[s.bucket];
  {
    // On the model's device, so a GPU's gradients never pass through the host.
    NoGradGuard no_grad;
    b.data.narrow(0, s.offset, s.param.numel()).copy_(s.param.grad().detach().reshape({s.param.numel()}));
  }
  if (--b.pending == 0) {
    b.ready = true;
    launch_ready_buckets();
  }
}

void DistributedDataParallelImpl::launch_ready_buckets() {
  // In bucket order on every rank, whatever order they filled in: collectives must match.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].ready) {
    BucketState& b = buckets_[next_bucket_];
    if (b.gate) b.gate->open();
    else b.work = group_->all_reduce(dist::comm_buffer(b.data), dist::ReduceOp::avg);
    log_.push_back(fmt::format("launch {}", next_bucket_));
    ++next_bucket_;
  }
}

void DistributedDataParallelImpl::finish_gradient_synchronization() {
  if (!in_backward_) return;
  if (next_bucket_ < buckets_.size()) {
    std::string missing;
    for (const Slot& s : slots_)
      if (!s.ready) missing += (missing.empty() ? "'" : ", '") + s.name + "'";
    abandon_in_flight();
    throw ValueError(fmt::format(
        "DistributedDataParallel: backward produced no gradient for parameter(s) {}; every parameter must take part "
        "in the loss of every synchronized backward (tessel's DDP has no find_unused_parameters)",
        missing));
  }
  in_backward_ = false;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    BucketState& b = buckets_[k];
    b.gate.reset();
    dist::WorkPtr w = std::move(b.work);
    try {
      if (w) w->wait();
    } catch (...) {
      abandon_in_flight();
      throw;
    }
    b.data.buffer().storage->bump_version();  // the collective wrote the bytes behind tessel's back
    NoGradGuard no_grad;
    for (size_t si : b.slots) {
      Slot& s = slots_[si];
      Tensor g = b.data.narrow(0, s.offset, s.param.numel()).reshape(s.param.shape().dims).clone();
      g.eval();  // its own memory: the next backward overwrites the bucket
      s.param.set_grad(g);
    }
    log_.push_back(fmt::format("done {}", k));
  }
}

std::vector<DistributedDataParallelImpl::Bucket> DistributedDataParallelImpl::buckets() const {
  std::vector<Bucket> out;
  for (const BucketState& b : buckets_) {
    Bucket o;
    o.numel = b.numel;
    o.dtype = b.dtype;
    for (size_t si : b.slots) o.names.push_back(slots_[si].name);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace tessel::nn
