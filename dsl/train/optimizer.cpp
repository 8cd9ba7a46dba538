#include "dsl/train/optimizer.h"

#include <fmt/format.h>

#include <cmath>

namespace tessel::optim {

Optimizer::Optimizer(std::vector<nn::Parameter> params) : params_(std::move(params)) {
  for (auto& p : params_)
    if (!p.defined()) throw ValueError("optimizer: got an undefined parameter");
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.set_grad(Tensor());
}

SGD::SGD(std::vector<nn::Parameter> params, SGDOptions opt) : Optimizer(std::move(params)), opt_(opt) {
  if (opt.lr < 0) throw ValueError(fmt::format("SGD: learning rate must be >= 0, got {}", opt.lr));
  if (opt.nesterov && opt.momentum <= 0) throw ValueError("SGD: nesterov needs momentum > 0");
  momentum_.resize(params_.size());
}

void SGD::step() {
  NoGradGuard g;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    Tensor w = params_[i].data();
    Tensor d = grad;
    if (opt_.weight_decay != 0) d = add(d, binary_op(ir::Op::Mul, w, Scalar(opt_.weight_decay)));
    if (opt_.momentum != 0) {
      Tensor& buf = momentum_[i];
      if (!buf.defined()) buf = d.clone();
      else buf.assign_(add(binary_op(ir::Op::Mul, buf, Scalar(opt_.momentum)), d));
      d = opt_.nesterov ? add(d, binary_op(ir::Op::Mul, buf, Scalar(opt_.momentum))) : buf;
    }
    w -= binary_op(ir::Op::Mul, d, Scalar(opt_.lr));
  }
}

Adam::Adam(std::vector<nn::Parameter> params, AdamOptions opt) : Optimizer(std::move(params)), opt_(opt) {
  if (opt.lr < 0) throw ValueError(fmt::format("Adam: learning rate must be >= 0, got {}", opt.lr));
  if (opt.beta1 < 0 || opt.beta1 >= 1 || opt.beta2 < 0 || opt.beta2 >= 1)
    throw ValueError(fmt::format("Adam: betas must be in [0, 1), got ({}, {})", opt.beta1, opt.beta2));
  m_.resize(params_.size());
  v_.resize(params_.size());
}

void Adam::step() {
  NoGradGuard g;
  ++t_;
  double bc1 = 1 - std::pow(opt_.beta1, static_cast<double>(t_));
  double bc2 = 1 - std::pow(opt_.beta2, static_cast<double>(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    Tensor w = params_[i].data();
    if (opt_.decoupled && opt_.weight_decay != 0) w *= 1 - opt_.lr * opt_.weight_decay;
    if (!opt_.decoupled && opt_.weight_decay != 0) grad = add(grad, binary_op(ir::Op::Mul, w, Scalar(opt_.weight_decay)));
    if (!m_[i].defined()) {
      m_[i] = zeros(w.shape(), w.dtype(), w.device());
      v_[i] = zeros(w.shape(), w.dtype(), w.device());
    }
    m_[i].assign_(add(binary_op(ir::Op::Mul, m_[i], Scalar(opt_.beta1)), binary_op(ir::Op::Mul, grad, Scalar(1 - opt_.beta1))));
    v_[i].assign_(add(binary_op(ir::Op::Mul, v_[i], Scalar(opt_.beta2)),
                      binary_op(ir::Op::Mul, mul(grad, grad), Scalar(1 - opt_.beta2))));
    Tensor mhat = binary_op(ir::Op::Div, m_[i], Scalar(bc1));
    Tensor denom = binary_op(ir::Op::Add, binary_op(ir::Op::Div, v_[i], Scalar(bc2)).sqrt(), Scalar(opt_.eps));
    w -= binary_op(ir::Op::Mul, div(mhat, denom), Scalar(opt_.lr));
  }
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
