#include "dsl/aot.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "codegen/backend.h"
#include "codegen/grad_mode.h"
#include "dsl/nn/parameter.h"
#include "runtime/trace.h"

namespace tessel::aot {

namespace {

// Stand-ins for the parameters' memory while tracing. The trace allocates
// values it never computes, and an optimizer step copies those into the
// parameters it updates; with the stand-ins swapped in, the model's own
// memory is never written and pending tensors that read it stay pending.
// Each parameter gets its node (memory) and gradient back afterwards.
class ParameterStandIns {
 public:
  explicit ParameterStandIns(const std::vector<nn::Parameter>& params) {
    for (size_t i = 0; i < params.size(); ++i) {
      const nn::Parameter& p = params[i];
      if (!p.is_initialized())
        throw ValueError(fmt::format("aot export: parameter #{} (shape unknown) is uninitialized; run "
                                     "aot::materialize_lazy(model, inputs) or load its weights first", i));
      if (!p.device().is_cpu())
        throw DeviceError(fmt::format("aot export: parameter #{} is on {}; exports trace on the CPU (the kernels "
                                      "serve both): export a copy of the model moved to cpu()",
                                      i, p.device().str()));
      if (!p.is_realized())
        throw ValueError(fmt::format("aot export: parameter #{} {} holds a value not computed yet; eval() it first",
                                     i, p.shape().str()));
    }
    for (const nn::Parameter& p : params) {
      TensorImpl* impl = p.impl();
      saved_.push_back({p, impl->node, impl->grad, impl->is_leaf});
      // Same bytes, offset and strides as the real memory: the kernels see the same layout.
      const ir::BufferView& v = *impl->node->buffer;
      ir::BufferView s{Storage::allocate(v.storage->nbytes(), v.storage->device()), v.offset, v.strides};
      nn::Parameter handle = p;
      handle.set_value(from_buffer(std::move(s), p.dtype(), p.shape(), p.device()));
    }
  }
  ~ParameterStandIns() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {  // a parameter listed twice ends as it began
      TensorImpl* impl = it->p.impl();
      impl->node = it->node;
      impl->grad = it->grad;
      impl->is_leaf = it->is_leaf;
    }
  }
  ParameterStandIns(const ParameterStandIns&) = delete;
  ParameterStandIns& operator=(const ParameterStandIns&) = delete;

 private:
  struct Saved {
    nn::Parameter p;
    ir::NodePtr node;
    std::shared_ptr<TensorImpl> grad;
    bool is_leaf;
  };
  std::vector<Saved> saved_;
};

// An example input the trace may use: realized ones as they are (the trace
// reads no values); a lazy one is replaced by memory of its shape, dtype and
// gradient flag, since tracing would otherwise leave it holding garbage.
Tensor traceable_input(const Tensor& x) {
  if (x.is_realized()) return x;
  Tensor s = empty(x.shape(), x.dtype(), x.device());
  if (x.requires_grad()) s.requires_grad_();
  return s;
}

Manifest export_symbolic_model(nn::SymbolicBase& m, const std::vector<Tensor>& inputs,
                               const std::filesystem::path& out_dir, const ExportOptions& options) {
  const nn::SymbolicOptions& opt = m.options();
  if (inputs.size() != 1)
    throw ValueError(fmt::format("{}: a symbolic model takes one input ('{}'), but the export got {} example inputs",
                                 m.path(), opt.input, inputs.size()));
  std::vector<std::string> syms = m.symbols();
  if (std::find(syms.begin(), syms.end(), opt.input) == syms.end())
    throw ValueError(fmt::format("{}: the expression has no symbol '{}' for its input (SymbolicOptions::input); its "
                                 "symbols are {}: set .input to the one that stands for the input",
                                 m.path(), opt.input, fmt::join(syms, ", ")));
  if (!is_floating(inputs[0].dtype()))
    throw DTypeError(fmt::format("{}: the input '{}' is {}; a symbolic model's parameters are f32, so give a "
                                 "floating-point input", m.path(), opt.input, dtype_name(inputs[0].dtype())));
  // Shapes only: ShapeError naming the symbol before anything is traced.
  nn::SymbolicShapes shapes = m.infer_shapes(inputs[0].shape());
  SymbolTable bound;
  std::vector<nn::Parameter> params;
  for (auto& [name, p] : m.named_parameters()) {
    if (p.is_initialized()) {
      params.push_back(p);
      continue;
    }
    const nn::SymbolShape* s = shapes.find(name);
    if (!s) throw InternalError(fmt::format("aot export: the shape pass did not size '{}'", name));
    nn::Parameter stand_in(empty(s->shape));  // the model's own stays uninitialized
    bound.emplace(name, stand_in);
    params.push_back(stand_in);
  }
  return export_traced([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{m.forward_with(in.at(0), bound)}; },
                       {traceable_input(inputs[0])}, out_dir, options, params);
}

}  // namespace

void materialize_lazy(nn::Module& m, const std::vector<Tensor>& inputs) {
  bool lazy = false;
  for (auto& [name, p] : m.named_parameters()) lazy = lazy || !p.is_initialized();
  if (!lazy) return;
  if (inputs.empty()) throw ValueError(fmt::format("{}: materialize_lazy needs an example input", m.path()));
  NoGradGuard g;
  BackendOverride ref(ref_backend());  // first values without a compile
  if (auto* s = m.as_if<nn::SymbolicBase>()) return s->materialize(inputs[0].shape());
  Tensor y = m.forward(inputs.at(0));
  y.eval();
}

Manifest export_module(nn::Module& m, const std::vector<Tensor>& inputs, const std::filesystem::path& out_dir,
                       const ExportOptions& options) {
  if (auto* s = m.as_if<nn::SymbolicBase>()) return export_symbolic_model(*s, inputs, out_dir, options);
  if (inputs.empty()) throw ValueError("aot::export_kernels: give at least one example input");
  materialize_lazy(m, inputs);
  return export_traced([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{m.forward(in.at(0))}; }, inputs,
                       out_dir, options, m.parameters());
}

Manifest export_traced(const Forward& forward, const std::vector<Tensor>& inputs, const std::filesystem::path& out_dir,
                       const ExportOptions& options, const std::vector<nn::Parameter>& params) {
  if (inputs.empty()) throw ValueError("aot::export_kernels: give at least one example input");
  const OptimizerSpec* spec = options.optimizer.get();
  if (spec) {
    if (!spec->make) throw ValueError(fmt::format("aot export: the optimizer '{}' has no factory (make)", spec->name));
    if (!options.backward)
      throw ValueError(fmt::format("aot export: an optimizer step ('{}') needs gradients: set .backward = true as well",
                                   spec->name));
    if (params.empty())
      throw ValueError(fmt::format("aot export: the optimizer '{}' has no parameters to step: export a module, or pass "
                                   "the parameters to aot::export_traced",
                                   spec->name));
  }
  TraceBackend tb;
  {
    ParameterStandIns stand_ins(params);
    BackendOverride trace(tb);
    std::unique_ptr<optim::Optimizer> opt;
    if (spec) opt = spec->make(params);
    // A training loop's first step creates the optimizer's state (momentum,
    // Adam's moments), later ones update it: different kernels, so trace both.
    const int iterations = spec ? 2 : 1;
    for (int it = 0; it < iterations; ++it) {
      for (const nn::Parameter& p : params) p.set_grad(Tensor());  // the loop zero_grad()s before backward
      std::vector<Tensor> outs = forward(inputs);
      if (outs.empty()) throw ValueError("aot::export_kernels: the traced function returned no tensor");
      // A training step reads its outputs (the loss) before backward: realize them first.
      realize(outs);
      if (options.backward) {
        Tensor loss = outs[0].sum();
        for (size_t i = 1; i < outs.size(); ++i) loss = add(loss, outs[i].sum());
        if (!loss.requires_grad())
          throw ValueError("aot::export_kernels: backward was requested but no output depends on a tensor that requires grad");
        loss.backward();
      }
      if (opt) opt->step();
    }
  }
  if (detail::trace_enabled("jit"))
    detail::trace_line("jit", fmt::format("aot export '{}': {} kernels from {} realizations ({} matmuls, {} fallbacks){}",
                                          options.name, tb.kernels().size(), tb.realizations(), tb.matmuls(),
                                          tb.fallbacks(), spec ? ", optimizer " + spec->name : ""));
  return write_artifacts(tb.kernels(), out_dir, options);
}

}  // namespace tessel::aot

namespace tessel::aot {

namespace {
std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find_first_of(",; ", i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(std::stoi(s.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}
}  // namespace

std::shared_ptr<const OptimizerSpec> sgd(optim::SGDOptions o) {
  return optimizer("sgd", [o](std::vector<nn::Parameter> ps) { return std::make_unique<optim::SGD>(std::move(ps), o); });
}
std::shared_ptr<const OptimizerSpec> adam(optim::AdamOptions o) {
  return optimizer("adam", [o](std::vector<nn::Parameter> ps) { return std::make_unique<optim::Adam>(std::move(ps), o); });
}
std::shared_ptr<const OptimizerSpec> adamw(optim::AdamOptions o) {
  return optimizer("adamw", [o](std::vector<nn::Parameter> ps) {
    return std::make_unique<optim::Adam>(optim::AdamW(std::move(ps), o));
  });
}
std::shared_ptr<const OptimizerSpec> optimizer(std::string name, OptimizerFactory make) {
  if (!make) throw ValueError(fmt::format("aot::optimizer('{}'): give a function that builds the optimizer", name));
  return std::make_shared<const OptimizerSpec>(OptimizerSpec{std::move(name), std::move(make)});
}

std::shared_ptr<const OptimizerSpec> parse_optimizer(std::string_view text) {
  const std::string_view kind = text.substr(0, text.find(':'));
  std::map<std::string, double> kv;
  if (size_t colon = text.find(':'); colon != std::string_view::npos) {
    std::string_view rest = text.substr(colon + 1);
    while (!rest.empty()) {
      std::string_view item = rest.substr(0, rest.find(','));
      rest = item.size() < rest.size() ? rest.substr(item.size() + 1) : std::string_view{};
      size_t eq = item.find('=');
      double v = 0;
      std::string_view num = eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1);
      auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (num.empty() || ec != std::errc{} || end != num.data() + num.size())
        throw ValueError(fmt::format("optimizer '{}': '{}' is not key=number (e.g. sgd:lr=0.1,momentum=0.9)", text, item));
      kv[std::string(item.substr(0, eq))] = v;
    }
  }
  auto take = [&](std::initializer_list<std::pair<const char*, double*>> fields) {
    for (auto& [k, v] : kv) {
      double* dst = nullptr;
      std::vector<std::string> names;
      for (auto& [name, field] : fields) {
        names.emplace_back(name);
        if (k == name) dst = field;
      }
      if (!dst)
        throw ValueError(fmt::format("optimizer '{}': unknown setting '{}'; {} takes {}", text, k, kind,
                                     fmt::join(names, ", ")));
      *dst = v;
    }
  };
  if (kind == "sgd") {
    optim::SGDOptions o;
    double nesterov = 0;
    take({{"lr", &o.lr}, {"momentum", &o.momentum}, {"weight_decay", &o.weight_decay}, {"nesterov", &nesterov}});
    o.nesterov = nesterov != 0;
    return sgd(o);
  }
  if (kind == "adam" || kind == "adamw") {
    optim::AdamOptions o;
    take({{"lr", &o.lr}, {"beta1", &o.beta1}, {"beta2", &o.beta2}, {"eps", &o.eps}, {"weight_decay", &o.weight_decay}});
    return kind == "adam" ? adam(o) : adamw(o);
  }
  throw ValueError(fmt::format("optimizer '{}': unknown kind '{}'; use sgd, adam or adamw (e.g. sgd:lr=0.1)", text, kind));
}

GeneratorArgs parse_generator_args(int argc, char** argv) {
  GeneratorArgs g;
  bool cubin_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ValueError(fmt::format("aot generator: {} needs a value", a));
      return argv[++i];
    };
    if (a == "--out") g.out = value();
    else if (a == "--name") g.options.name = value();
    else if (a == "--archs") g.options.ptx_archs = int_list(value());
    else if (a == "--cubin-archs") { g.options.cubin_archs = int_list(value()); cubin_given = true; }
    else if (a == "--backward") g.options.backward = true;
    else if (a == "--optimizer") g.options.optimizer = parse_optimizer(value());
    else if (a == "--no-cuda") g.options.cuda = false;
    else if (a == "--no-cpu") g.options.cpu = false;
    else if (a == "--cpu") g.options.cpu_target = value();
    else if (a.rfind("--", 0) == 0) g.extra[a.substr(2)] = value();
    else throw ValueError(fmt::format("aot generator: unexpected argument '{}'", a));
  }
  if (g.out.empty()) throw ValueError("aot generator: --out DIR is required");
  // CUBIN for the newest listed arch unless told otherwise.
  if (!cubin_given && !g.options.ptx_archs.empty())
    g.options.cubin_archs = {*std::max_element(g.options.ptx_archs.begin(), g.options.ptx_archs.end())};
  return g;
}

}  // namespace tessel::aot
