// The CPU backend's plan cache.
//
// A loop realizes DAGs of the same form again and again. Scheduling and
// lowering one again costs microseconds -- far more than launching a small
// kernel -- so a realization made of fused kernels, matmuls (with their
// epilogues) and views is recorded as a plan: per kernel the compiled
// function, its launch arguments, and where each buffer comes from; per
// matmul its BLAS form and operands. A training step's backward, replayed,
// schedules, lowers and hashes nothing. The key holds everything scheduling and lowering read
// (ops, dtypes, shapes, attributes, the DAG's sharing, which nodes need
// gradients, leaves' offsets and strides and which leaves share storage,
// which constants are equal), so a hit replays exactly the launches a fresh
// schedule would make; only constant values, read from the nodes, and the
// storages differ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codegen/backend.h"
#include "codegen/blas/gemm.h"
#include "codegen/cpu/jit_code_lifetime.h"
#include "codegen/cpu/llvm_emitter.h"
#include "codegen/ir.h"
#include "codegen/kernel_ir.h"
#include "codegen/lower.h"
#include "codegen/node_table.h"

namespace tessel::cpujit {

constexpr size_t kMaxPlanNodes = 160;  // larger DAGs take the general path
constexpr size_t kMaxPlans = 4096;    // beyond this, new forms are not planned
// Nor beyond this many recorded steps in all: a training step's plan holds
// dozens of kernels (each with its kernel IR), so the count alone would let
// a program of many distinct forms hold hundreds of MB of plans.
constexpr size_t kMaxPlanSteps = 16384;

// What one launch did, for the plan cache: a kernel (its function, variant
// and lowering, whose buffers are the storages it read and wrote), a matmul
// (its operands in BLAS form and its dense output), or a matmul with its
// epilogue (both).
// A 2-D product C = A @ B, [M, K] x [K, N], with its operands in BLAS form.
struct GemmForm {
  DType dtype = DType::f32;
  int64_t M = 0, N = 0, K = 0;
  gemm::Operand a, b;
};

struct Recorded {
  enum class Kind : uint8_t { kernel, matmul, matmul_epilogue };
  Kind kind = Kind::kernel;
  cpujit::KernelFn* fn = nullptr;  // the kernel or the epilogue
  cpujit::EmitOptions variant;
  lower::Lowered l;
  GemmForm gemm;       // matmuls
  ir::BufferView out;  // a matmul's dense product
};

// Where a buffer of a replayed step comes from: a leaf of the walk (>= 0, its
// index in the walk's order) or one of the plan's allocations (-1 - a).
using BufSource = int32_t;

struct PlanStep {
  Recorded::Kind kind = Recorded::Kind::kernel;
  cpujit::KernelFn* fn = nullptr;                       // from the plan's code generation
  cpujit::EmitOptions variant;                          // to find fn again in a later one
  kir::Kernel kernel;                                   // for the launch shape (rank, slots)
  std::vector<int64_t> args;                            // as recorded
  std::vector<std::pair<uint32_t, uint32_t>> consts;    // (argument index, node with that constant's value)
  std::vector<BufSource> bufs;                          // per param of the kernel
  int64_t rows = 0;
  // Matmuls: the product's form (operand views not kept), the operands'
  // sources with their element offsets, and the product's.
  GemmForm gemm;
  BufSource a_src = 0, b_src = 0, out_src = 0;
  int64_t a_off = 0, b_off = 0, out_off = 0;
};

// A node the realization gave a value: which memory, at what offset and strides.
struct PlanSet {
  uint32_t node;
  BufSource src;
  int64_t offset;
  Strides strides;
};

struct Plan {
  std::vector<int64_t> key;
  bool replayable = false;
  std::vector<PlanStep> steps;
  std::vector<size_t> allocs;  // bytes of each allocation, made as the replay starts
  std::vector<PlanSet> sets;
};

// Plans of the current code generation; dropped with the code they call.
struct PlanCache {
  std::mutex mu;
  std::unordered_map<uint64_t, std::unique_ptr<Plan>> plans;  // by key hash; a colliding key is not planned
  size_t steps = 0;                                            // recorded steps of all plans
};
PlanCache& plan_cache();
/// Hands the plans to `g`, to be freed with the code they call.
void drop_plans(Garbage& g);

// The DAG below the roots in post-order (stopping at realized nodes, as the
// topo pass does) and its key. Thread-local scratch: no allocation per call.
struct Walk {
  std::vector<ir::Node*> order;
  std::vector<std::pair<ir::Node*, size_t>> stack;
  std::vector<int64_t> key;

  // Each node met: its position in `order`, or kOnStack before it gets one.
  ir::NodeTable met;
  static constexpr int kOnStack = -1;

  int index_of(const ir::Node* n) const {
    const int* i = met.find(n);
    return i ? *i : -1;
  }
  bool seen(const ir::Node* n) const { return met.find(n) != nullptr; }

  // False when the DAG is too large to plan.
  bool build(const std::vector<ir::NodePtr>& roots, bool keep_grad_values);
  // Appends the roots' destinations (Backend::realize_into) to the key: per
  // root none, or the walk's leaf with that memory, offset and strides.
  // False when one is no leaf of the walk.
  bool add_destinations(const std::vector<ir::BufferView>& into);
};

// A plan from a recorded realization; replayable stays false when some
// buffer or constant cannot be traced back to the DAG.
void make_plan(Plan& P, const std::vector<ir::Node*>& order, const std::vector<bool>& was_realized,
               const std::vector<Recorded>& rec);

/// Replays plan `P` over `order`, the walk of a DAG with P's key: its
/// kernels run on the DAG's leaves and constants and set the nodes P sets.
void replay(const Plan& P, const std::vector<ir::Node*>& order);

/// A replay of plan `P` over a caller's leaves (realize_recorded), or null
/// unless P is kernels only, the one node it sets is `root` and every buffer
/// it reads is one of `leaves`. `w` is the walk whose key found P, `gen` the code generation
/// of P's kernels.
std::unique_ptr<LeafReplay> leaf_replay(const Plan& P, std::uint64_t gen, const Walk& w, const ir::NodePtr& root,
                                        const std::vector<ir::NodePtr>& leaves);

}  // namespace tessel::cpujit
