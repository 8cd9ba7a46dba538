#include <bit>
#include "codegen/ir.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include <cctype>
#include <unordered_map>
#include <vector>

#include "codegen/grad_mode.h"
#include "codegen/node_table.h"
#include "runtime/errors.h"

namespace tessel {

namespace {
thread_local bool g_grad_enabled = true;
}
bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

namespace ir {

Node::~Node() {
  std::vector<NodePtr> doomed;
  for (NodePtr& a : args)
    if (a.use_count() == 1) doomed.push_back(std::move(a));
  if (grad_via && grad_via.use_count() == 1) doomed.push_back(std::move(grad_via));
  while (!doomed.empty()) {
    NodePtr n = std::move(doomed.back());
    doomed.pop_back();
    for (NodePtr& a : n->args)
      if (a.use_count() == 1) doomed.push_back(std::move(a));
    if (n->grad_via && n->grad_via.use_count() == 1) doomed.push_back(std::move(n->grad_via));
    n->args.clear();  // n dies here with no uniquely held args: no recursion
  }
}


std::string_view op_name(Op op) {
  static const std::string names[] = {
#define TESSEL_X(name, cat, attrs, traits, doc) [] { std::string s = #name; for (char& c : s) c = static_cast<char>(std::tolower(c)); return s; }(),
      TESSEL_IR_NODE_KINDS(TESSEL_X)
#undef TESSEL_X
  };
  return names[static_cast<size_t>(op)];
}

Category op_category(Op op) {
  static constexpr Category cats[] = {
#define TESSEL_X(name, cat, attrs, traits, doc) Category::cat,
      TESSEL_IR_NODE_KINDS(TESSEL_X)
#undef TESSEL_X
  };
  return cats[static_cast<size_t>(op)];
}

AttrKind op_attr_kind(Op op) {
  static constexpr AttrKind kinds[] = {
#define TESSEL_X(name, cat, attrs, traits, doc) AttrKind::attrs,
      TESSEL_IR_NODE_KINDS(TESSEL_X)
#undef TESSEL_X
  };
  return kinds[static_cast<size_t>(op)];
}

void Node::throw_wrong_attrs(const char* what) const {
  throw InternalError(fmt::format("ir: a {} node has no {} attribute (attrs alternative {}; a builder or pass set the "
                                  "wrong one)",
                                  op_name(op), what, attrs.index()));
}

uint32_t op_traits(Op op) {
  static constexpr uint32_t traits[] = {
#define TESSEL_X(name, cat, attrs, t, doc) static_cast<uint32_t>(t),
      TESSEL_IR_NODE_KINDS(TESSEL_X)
#undef TESSEL_X
  };
  return traits[static_cast<size_t>(op)];
}

std::vector<Node*> topo_order(const std::vector<NodePtr>& roots) {
  std::vector<Node*> order;
  thread_local NodeTable seen;  // the walk below calls nothing that walks again
  seen.clear();
  // Iterative DFS: trees grown in loops (X /= 2 a hundred times) are deep.
  std::vector<std::pair<Node*, size_t>> stack;
  for (const auto& r : roots) {
    if (seen.find(r.get())) continue;
    stack.push_back({r.get(), 0});
    seen.put(r.get(), 1);
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (!n->realized() && next < n->args.size()) {
        Node* a = n->args[next++].get();
        if (!seen.find(a)) {
          seen.put(a, 1);
          stack.push_back({a, 0});
        }
        continue;
      }
      order.push_back(n);
      stack.pop_back();
    }
  }
  return order;
}

namespace {

std::string attrs(const Node& n) {
  if (n.op == Op::Constant) return n.value.is_int ? fmt::format(" {}", n.value.i) : fmt::format(" {}", n.value.f);
  switch (op_attr_kind(n.op)) {
    case AttrKind::None: return {};
    case AttrKind::Reduce:
      return fmt::format(" axes=[{}]{}", fmt::join(n.reduce().axes, ", "), n.reduce().keepdim ? " keepdim" : "");
    case AttrKind::Order: return fmt::format(" order=[{}]", fmt::join(n.order().order, ", "));
    case AttrKind::Window: {
      std::string s = " start_step=[";
      for (size_t d = 0; d < n.window().dims.size(); ++d)
        s += fmt::format("{}{}, {}", d ? ", " : "", n.window().dims[d].start, n.window().dims[d].step);
      return s + "]";
    }
    case AttrKind::Widths: {
      std::string s = " before_after=[";
      for (size_t d = 0; d < n.widths().dims.size(); ++d)
        s += fmt::format("{}{}, {}", d ? ", " : "", n.widths().dims[d].before, n.widths().dims[d].after);
      return s + "]";
    }
    case AttrKind::Axis: return fmt::format(" axis={}", n.axis());
    case AttrKind::Conv: {
      const ConvAttrs& c = n.conv();
      return fmt::format(" stride=[{}] pad=[{}]/[{}] dilation=[{}] groups={}", fmt::join(c.stride, ", "),
                         fmt::join(c.pad_before, ", "), fmt::join(c.pad_after, ", "), fmt::join(c.dilation, ", "),
                         c.groups);
    }
    case AttrKind::Attention: {
      const AttentionAttrs& a = n.attention();
      return fmt::format(" scale={} causal={} mask={} dropout={} seed={}", a.scale, a.causal, static_cast<int>(a.mask),
                         a.dropout_p, a.seed);
    }
  }
  return {};
}

}  // namespace

void append_attrs(std::vector<int64_t>& key, const Node& n) {
  key.push_back(static_cast<int64_t>(n.attrs.index()));
  switch (op_attr_kind(n.op)) {
    case AttrKind::None: return;
    case AttrKind::Reduce:
      key.push_back(static_cast<int64_t>(n.reduce().axes.size()) << 1 | int64_t{n.reduce().keepdim});
      key.insert(key.end(), n.reduce().axes.begin(), n.reduce().axes.end());
      return;
    case AttrKind::Order:
      key.push_back(static_cast<int64_t>(n.order().order.size()));
      key.insert(key.end(), n.order().order.begin(), n.order().order.end());
      return;
    case AttrKind::Window:
      key.push_back(static_cast<int64_t>(n.window().dims.size()));
      for (const SliceDim& d : n.window().dims) key.insert(key.end(), {d.start, d.step});
      return;
    case AttrKind::Widths:
      key.push_back(static_cast<int64_t>(n.widths().dims.size()));
      for (const PadWidth& w : n.widths().dims) key.insert(key.end(), {w.before, w.after});
      return;
    case AttrKind::Axis: key.push_back(n.axis()); return;
    case AttrKind::Conv: {
      const ConvAttrs& c = n.conv();
      for (const auto* a : {&c.stride, &c.pad_before, &c.pad_after, &c.dilation}) key.insert(key.end(), a->begin(), a->end());
      key.push_back(c.groups);
      return;
    }
    case AttrKind::Attention: {
      const AttentionAttrs& a = n.attention();
      key.insert(key.end(), {std::bit_cast<int64_t>(a.scale), int64_t{a.causal}, static_cast<int64_t>(a.mask),
                             std::bit_cast<int64_t>(a.dropout_p), static_cast<int64_t>(a.seed)});
      return;
    }
  }
}

std::string to_string(const std::vector<NodePtr>& roots) {
  std::vector<Node*> order = topo_order(roots);
  std::unordered_map<const Node*, int> id;
  std::string out;
  int next = 0;
  for (Node* n : order) {
    id[n] = next;
    if (n->realized()) {
      out += fmt::format("%{} = input {}{}\n", next, dtype_name(n->dtype), n->shape.str());
    } else {
      std::string args;
      for (size_t i = 0; i < n->args.size(); ++i) args += fmt::format("{}%{}", i ? ", " : "", id.at(n->args[i].get()));
      out += fmt::format("%{} = {}({}){} {}{}\n", next, op_name(n->op), args, attrs(*n), dtype_name(n->dtype),
                         n->shape.str());
    }
    ++next;
  }
  if (roots.size() > 1) {
    out += "return";
    for (size_t i = 0; i < roots.size(); ++i) out += fmt::format("{} %{}", i ? "," : "", id.at(roots[i].get()));
    out += "\n";
  }
  return out;
}

std::string to_string(const NodePtr& root) { return to_string(std::vector<NodePtr>{root}); }

uint64_t structural_hash(const std::vector<NodePtr>& roots) {
  std::string text = to_string(roots);
  return XXH3_64bits(text.data(), text.size());
}

}  // namespace ir
}  // namespace tessel
