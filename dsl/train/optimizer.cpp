#include "dsl/train/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string>

#include "dsl/assign_all.h"

namespace tessel::optim {

Optimizer::Optimizer(std::vector<nn::Parameter> params) : params_(std::move(params)) {
  for (auto& p : params_)
    if (!p.defined()) throw ValueError("optimizer: got an undefined parameter");
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.set_grad(Tensor());
}

OrderedDict<Tensor> Optimizer::state_dict() const {
  throw ValueError("optimizer: this optimizer has no state_dict(); override state_dict() and load_state_dict()");
}

void Optimizer::load_state_dict(const OrderedDict<Tensor>&) {
  throw ValueError("optimizer: this optimizer has no load_state_dict(); override state_dict() and load_state_dict()");
}

std::pair<std::string, size_t> Optimizer::parse_state_key(const std::string& key, const Tensor& value,
                                                          const std::vector<std::string>& names) const {
  auto dot = key.rfind('.');
  std::string name = dot == std::string::npos ? key : key.substr(0, dot);
  bool known = false;
  for (auto& n : names) known |= n == name;
  std::string index = dot == std::string::npos ? "" : key.substr(dot + 1);
  if (!known || index.empty() || index.find_first_not_of("0123456789") != std::string::npos)
    throw ValueError(fmt::format("optimizer load_state_dict: unexpected key '{}' (expected step, lr and {}.INDEX)", key,
                                 fmt::join(names, ".INDEX, ")));
  size_t i = std::stoul(index);
  if (i >= params_.size())
    throw ValueError(fmt::format("optimizer load_state_dict: '{}' names parameter {}, but this optimizer has {}", key,
                                 i, params_.size()));
  if (!value.defined() || value.shape() != params_[i].shape())
    throw ValueError(fmt::format("optimizer load_state_dict: '{}' has shape {}, parameter {} has shape {}", key,
                                 value.defined() ? value.shape().str() : "(undefined)", i, params_[i].shape().str()));
  return {name, i};
}

namespace {

Tensor scalar_i64(int64_t v) { return full({}, Scalar(v), DType::i64); }
Tensor scalar_f64(double v) { return full({}, Scalar(v), DType::f64); }

// A copy of a loaded buffer, on the parameter's device and with its dtype.
Tensor state_copy(const Tensor& value, const nn::Parameter& p) {
  NoGradGuard g;
  Tensor t = value.detach().to(p.device()).to(p.dtype()).clone();
  t.eval();
  return t;
}

// step and lr, when present; every other key is left to the caller.
void load_common(const OrderedDict<Tensor>& state, int64_t& steps, Optimizer& opt) {
  if (const Tensor* s = state.find("step")) {
    if (s->numel() != 1) throw ValueError(fmt::format("optimizer load_state_dict: 'step' must be a scalar, got {}",
                                                      s->shape().str()));
    steps = s->item<int64_t>();
  }
  if (const Tensor* lr = state.find("lr")) opt.set_lr(lr->item<double>());
}

}  // namespace

SGD::SGD(std::vector<nn::Parameter> params, SGDOptions opt) : Optimizer(std::move(params)), opt_(opt) {
  if (opt.lr < 0) throw ValueError(fmt::format("SGD: learning rate must be >= 0, got {}", opt.lr));
  if (opt.nesterov && opt.momentum <= 0) throw ValueError("SGD: nesterov needs momentum > 0");
  momentum_.resize(params_.size());
}

// Every update of a step is one realization (assign_all_): each parameter's
// and buffer's new value is computed into its own memory where its kernel
// allows, so a step allocates and copies nothing.
void SGD::step() {
  NoGradGuard g;
  ++steps_;
  std::vector<Tensor> dsts, values;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    Tensor w = params_[i].data();
    Tensor d = grad;
    if (opt_.weight_decay != 0) d = add(d, binary_op(ir::Op::Mul, w, Scalar(opt_.weight_decay)));
    if (opt_.momentum != 0) {
      Tensor& buf = momentum_[i];
      Tensor next;  // the buffer after this step
      if (!buf.defined()) {
        next = buf = d.clone();
      } else {
        next = add(binary_op(ir::Op::Mul, buf, Scalar(opt_.momentum)), d);
        dsts.push_back(buf);
        values.push_back(next);
      }
      d = opt_.nesterov ? add(d, binary_op(ir::Op::Mul, next, Scalar(opt_.momentum))) : next;
    }
    dsts.push_back(w);
    values.push_back(binary_op(ir::Op::Sub, w, binary_op(ir::Op::Mul, d, Scalar(opt_.lr))));
  }
  assign_all_(dsts, std::move(values));
}

OrderedDict<Tensor> SGD::state_dict() const {
  OrderedDict<Tensor> out{{"step", scalar_i64(steps_)}, {"lr", scalar_f64(opt_.lr)}};
  for (size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i].defined()) out.insert(fmt::format("momentum_buffer.{}", i), momentum_[i].detach().clone());
  return out;
}

void SGD::load_state_dict(const OrderedDict<Tensor>& state) {
  std::vector<Tensor> momentum(params_.size());
  for (auto& [key, value] : state) {
    if (key == "step" || key == "lr") continue;
    auto [name, i] = parse_state_key(key, value, {"momentum_buffer"});
    momentum[i] = state_copy(value, params_[i]);
  }
  load_common(state, steps_, *this);
  momentum_ = std::move(momentum);
}

namespace {
std::vector<nn::Parameter> flatten_groups(const std::vector<ParamGroup>& groups) {
  std::vector<nn::Parameter> out;
  for (auto& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}
}  // namespace

Adam::Adam(std::vector<nn::Parameter> params, AdamOptions opt)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), std::nullopt}}, opt) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions opt) : Optimizer(flatten_groups(groups)), opt_(opt) {
  if (opt.lr < 0) throw ValueError(fmt::format("Adam: learning rate must be >= 0, got {}", opt.lr));
  if (opt.beta1 < 0 || opt.beta1 >= 1 || opt.beta2 < 0 || opt.beta2 >= 1)
    throw ValueError(fmt::format("Adam: betas must be in [0, 1), got ({}, {})", opt.beta1, opt.beta2));
  for (auto& g : groups) {
    double wd = g.weight_decay.value_or(opt.weight_decay);
    if (wd < 0) throw ValueError(fmt::format("Adam: weight decay must be >= 0, got {}", wd));
    weight_decay_.insert(weight_decay_.end(), g.params.size(), wd);
  }
  m_.resize(params_.size());
  v_.resize(params_.size());
}

OrderedDict<Tensor> Adam::state_dict() const {
  OrderedDict<Tensor> out{{"step", scalar_i64(t_)}, {"lr", scalar_f64(opt_.lr)}};
  for (size_t i = 0; i < m_.size(); ++i) {
    if (!m_[i].defined()) continue;
    out.insert(fmt::format("exp_avg.{}", i), m_[i].detach().clone());
    out.insert(fmt::format("exp_avg_sq.{}", i), v_[i].detach().clone());
  }
  return out;
}

void Adam::load_state_dict(const OrderedDict<Tensor>& state) {
  std::vector<Tensor> m(params_.size()), v(params_.size());
  for (auto& [key, value] : state) {
    if (key == "step" || key == "lr") continue;
    auto [name, i] = parse_state_key(key, value, {"exp_avg", "exp_avg_sq"});
    (name == "exp_avg" ? m : v)[i] = state_copy(value, params_[i]);
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (m[i].defined() != v[i].defined())
      throw ValueError(fmt::format("optimizer load_state_dict: parameter {} has {} but not {}", i,
                                   m[i].defined() ? "exp_avg" : "exp_avg_sq", m[i].defined() ? "exp_avg_sq" : "exp_avg"));
  load_common(state, t_, *this);
  m_ = std::move(m);
  v_ = std::move(v);
}

void Adam::step() {
  NoGradGuard g;
  ++t_;
  double bc1 = 1 - std::pow(opt_.beta1, static_cast<double>(t_));
  double bc2 = 1 - std::pow(opt_.beta2, static_cast<double>(t_));
  std::vector<Tensor> dsts, values;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    Tensor w = params_[i].data();
    const double wd = weight_decay_[i];
    if (!opt_.decoupled && wd != 0) grad = add(grad, binary_op(ir::Op::Mul, w, Scalar(wd)));
    if (!m_[i].defined()) {
      m_[i] = zeros(w.shape(), w.dtype(), w.device());
      v_[i] = zeros(w.shape(), w.dtype(), w.device());
    }
    Tensor m = add(binary_op(ir::Op::Mul, m_[i], Scalar(opt_.beta1)), binary_op(ir::Op::Mul, grad, Scalar(1 - opt_.beta1)));
    Tensor v = add(binary_op(ir::Op::Mul, v_[i], Scalar(opt_.beta2)),
                   binary_op(ir::Op::Mul, mul(grad, grad), Scalar(1 - opt_.beta2)));
    Tensor mhat = binary_op(ir::Op::Div, m, Scalar(bc1));
    Tensor denom = binary_op(ir::Op::Add, binary_op(ir::Op::Div, v, Scalar(bc2)).sqrt(), Scalar(opt_.eps));
    // AdamW decays the weight first: w * (1 - lr * wd), then the Adam step.
    Tensor decayed = opt_.decoupled && wd != 0 ? binary_op(ir::Op::Mul, w, Scalar(1 - opt_.lr * wd)) : w;
    dsts.insert(dsts.end(), {m_[i], v_[i], w});
    values.push_back(std::move(m));
    values.push_back(std::move(v));
    values.push_back(binary_op(ir::Op::Sub, decayed, binary_op(ir::Op::Mul, div(mhat, denom), Scalar(opt_.lr))));
  }
  assign_all_(dsts, std::move(values));
}

double clip_grad_norm_(const std::vector<nn::Parameter>& params, double max_norm) {
  NoGradGuard g;
  double total = 0;
  for (auto& p : params) {
    Tensor gr = p.grad();
    if (gr.defined()) total += mul(gr, gr).sum().item<double>();
  }
  double norm = std::sqrt(total);
  if (norm > max_norm && norm > 0) {
    double scale = max_norm / (norm + 1e-6);
    for (auto& p : params) {
      Tensor gr = p.grad();
      if (gr.defined()) gr *= scale;
    }
  }
  return norm;
}

}  // namespace tessel::optim
