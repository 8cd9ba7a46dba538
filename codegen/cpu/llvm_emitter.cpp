#include "codegen/cpu/llvm_emitter.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <fmt/format.h>

#include <functional>

#include "runtime/errors.h"

namespace tessel::cpujit {

using ir::Op;
using kir::Stmt;
using kir::StmtKind;
using llvm::Value;

namespace {

constexpr unsigned kStreamVectorBytes = 64;  // one cache line per store
constexpr unsigned kColumnBlock = 8;         // rows a column block reduces at once

bool plain(DType t) { return t != DType::f16 && t != DType::bf16; }

// Statements an explicit vector body (every value <lanes x T>) computes:
// plain element types, no transcendental calls (those are scalar calls).
bool vector_statements(const std::vector<Stmt>& list) {
  for (const Stmt& s : list) {
    if (!plain(s.dtype)) return false;
    if (s.kind == StmtKind::Op && ir::has_trait(s.op, ir::kTranscendental)) return false;
  }
  return true;
}

}  // namespace

bool streamable(const kir::Kernel& k) {
  if (k.reduce != kir::ReduceKind::None || k.row_program() || k.indexed()) return false;
  DType out = k.params[0].dtype;
  if (out == DType::b8 || !plain(out)) return false;
  for (const kir::Param& p : k.params)
    if (!plain(p.dtype)) return false;
  return vector_statements(k.body);
}

std::string variant_key(const EmitOptions& o) {
  std::string s;
  if (o.streaming) s += ";streaming";
  if (o.output_alias_param >= 0) s += fmt::format(";alias={}", o.output_alias_param);
  return s;
}

bool wants_streaming(const kir::Kernel& k, const int64_t* args, int64_t rows) {
  if (!streamable(k)) return false;
  const size_t inner = static_cast<size_t>(k.rank - 1);
  const int64_t bytes = rows * args[inner] * static_cast<int64_t>(dtype_size(k.params[0].dtype));
  if (bytes < kStreamBytes) return false;
  for (size_t s = 0; s < k.num_slots(); ++s)
    if (args[k.slot_base(static_cast<int>(s)) + 1 + inner] != 1) return false;
  return true;
}

namespace {

struct Emitter {
  const kir::Kernel& k;
  llvm::LLVMContext& ctx;
  llvm::Module* m;
  llvm::IRBuilder<> b;
  llvm::Function* fn = nullptr;
  std::vector<Value*> ptrs;                 // per param
  std::vector<Value*> dims;                 // domain extents
  std::vector<Value*> off;                  // per slot
  std::vector<std::vector<Value*>> st;      // per slot, per dim
  std::vector<Value*> consts;               // per constant slot, as the compute type
  std::vector<Value*> stage_vals;           // row programs: the current row's stage results
  llvm::MDNode *in_list = nullptr, *out_list = nullptr;
  // Lanes of the values being built: 1 everywhere except the streaming path's
  // explicit vector body, where every compute type is <lanes x T>.
  unsigned lanes = 1;
  std::vector<Value*> vconsts;              // consts splat to `lanes` (streaming path)
  const std::vector<bool>* splat_loads = nullptr;  // per load slot: read once and splat in a vector body
  const std::vector<Value*>* gather_strides = nullptr;  // per load slot: a vector body gathers at this stride
  Value* stream = nullptr;                  // i1: this launch takes the streaming path (streamable kernels)

  const EmitOptions opts;

  Emitter(const kir::Kernel& kk, llvm::LLVMContext& c, llvm::Module* mm, EmitOptions o)
      : k(kk), ctx(c), m(mm), b(c), opts(o) {}

  // `s` widened to the current lane count.
  llvm::Type* ty(llvm::Type* s) { return lanes > 1 ? llvm::FixedVectorType::get(s, lanes) : s; }
  llvm::Type* scalar_cty(DType t) {
    switch (t) {
      case DType::f32: return b.getFloatTy();
      case DType::f64: return b.getDoubleTy();
      case DType::i64: return b.getInt64Ty();
      case DType::i32: return b.getInt32Ty();
      case DType::b8: return b.getInt1Ty();
      case DType::f16: case DType::bf16: return b.getInt16Ty();
    }
    return nullptr;
  }
  llvm::Type* cty(DType t) { return ty(scalar_cty(t)); }
  // Element type in memory (GEPs index by it; never widened).
  llvm::Type* mty(DType t) { return t == DType::b8 ? b.getInt8Ty() : scalar_cty(t); }
  static bool flt(DType t) { return t == DType::f32 || t == DType::f64; }
  static bool sint(DType t) { return t == DType::i32 || t == DType::i64; }

  // for (i = lo; i < hi; ++i) body(i); `plain`: the optimizer must not vectorize or unroll it
  // (short scalar head/tail loops and loops already written as vectors: compile time only);
  // `width` > 0: the vector width the optimizer must use.
  void loop(Value* lo, Value* hi, const std::function<void(Value*)>& body, const char* name, bool plain = false,
            int width = 0) {
    auto* pre = b.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx, name, fn);
    auto* exit = llvm::BasicBlock::Create(ctx, std::string(name) + ".exit", fn);
    b.CreateCondBr(b.CreateICmpSLT(lo, hi), head, exit);
    b.SetInsertPoint(head);
    auto* i = b.CreatePHI(b.getInt64Ty(), 2, name);
    i->addIncoming(lo, pre);
    body(i);
    Value* next = b.CreateAdd(i, b.getInt64(1), "", true, true);
    i->addIncoming(next, b.GetInsertBlock());
    auto* latch = b.CreateCondBr(b.CreateICmpSLT(next, hi), head, exit);
    if (width > 0) {
      llvm::Metadata* ops[] = {nullptr,
                               llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.vectorize.width"),
                                                       llvm::ConstantAsMetadata::get(b.getInt32(static_cast<uint32_t>(width)))})};
      auto* md = llvm::MDNode::getDistinct(ctx, ops);
      md->replaceOperandWith(0, md);
      latch->setMetadata(llvm::LLVMContext::MD_loop, md);
    }
    if (plain) {
      auto* off = llvm::ConstantAsMetadata::get(b.getFalse());
      auto* one = llvm::ConstantAsMetadata::get(b.getInt32(1));
      llvm::Metadata* ops[] = {nullptr,
                               llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.vectorize.enable"), off}),
                               llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.interleave.count"), one}),
                               llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")})};
      auto* md = llvm::MDNode::getDistinct(ctx, ops);
      md->replaceOperandWith(0, md);
      latch->setMetadata(llvm::LLVMContext::MD_loop, md);
    }
    b.SetInsertPoint(exit);
  }

  Value* call_math(const char* base, Value* x) {
    llvm::Type* t = x->getType();
    std::string name = std::string(base) + (t->isFloatTy() ? "f" : "");
    llvm::FunctionCallee f = m->getOrInsertFunction(name, llvm::FunctionType::get(t, {t}, false));
    auto* decl = llvm::cast<llvm::Function>(f.getCallee());
    decl->setDoesNotAccessMemory();
    decl->setDoesNotThrow();
    decl->addFnAttr(llvm::Attribute::WillReturn);
    auto* c = b.CreateCall(f, {x});
    c->setDoesNotAccessMemory();
    return c;
  }
  Value* intrinsic(llvm::Intrinsic::ID id, std::vector<Value*> a) {
    return b.CreateCall(llvm::Intrinsic::getDeclaration(m, id, {a[0]->getType()}), a);
  }

  Value* cast(Value* v, DType src, DType dst) {
    if (src == dst) return v;
    if (!flt(src)) {  // integers and bool go through int64, then double for floats (as ref)
      Value* i = src == DType::b8 ? b.CreateZExt(v, ty(b.getInt64Ty())) : b.CreateSExtOrTrunc(v, ty(b.getInt64Ty()));
      switch (dst) {
        case DType::f32: return b.CreateFPTrunc(b.CreateSIToFP(i, ty(b.getDoubleTy())), ty(b.getFloatTy()));
        case DType::f64: return b.CreateSIToFP(i, ty(b.getDoubleTy()));
        case DType::i64: return i;
        case DType::i32: return b.CreateTrunc(i, ty(b.getInt32Ty()));
        case DType::b8: return b.CreateICmpNE(i, llvm::Constant::getNullValue(i->getType()));
        default: break;
      }
    } else {
      Value* d = src == DType::f64 ? v : b.CreateFPExt(v, ty(b.getDoubleTy()));
      switch (dst) {
        case DType::f32: return b.CreateFPTrunc(d, ty(b.getFloatTy()));
        case DType::f64: return d;
        case DType::i64: return b.CreateFPToSI(d, ty(b.getInt64Ty()));
        case DType::i32: return b.CreateTrunc(b.CreateFPToSI(d, ty(b.getInt64Ty())), ty(b.getInt32Ty()));
        case DType::b8: return b.CreateFCmpUNE(d, llvm::ConstantFP::get(d->getType(), 0.0));
        default: break;
      }
    }
    throw InternalError(fmt::format("emit_llvm: no cast {} -> {}", dtype_name(src), dtype_name(dst)));
  }

  Value* zero(DType t) { return llvm::Constant::getNullValue(cty(t)); }
  Value* fconst(DType t, double v) { return llvm::ConstantFP::get(cty(t), v); }

  // One elementwise op. `t` is the operands' dtype (the first value
  // operand's: Where's condition is bool), `out` the result's.
  Value* elementwise(Op op, DType t, DType out, const std::vector<Value*>& a) {
    using P = llvm::CmpInst::Predicate;
    const bool f = flt(t), i = sint(t), u = t == DType::b8;
    Value* x = a[0];
    Value* y = a.size() > 1 ? a[1] : nullptr;
    auto cmp = [&](P fp, P sp, P up) { return f ? b.CreateFCmp(fp, x, y) : b.CreateICmp(u ? up : sp, x, y); };
    // Logical and/or on numbers: 1 or 0 of the operands' type.
    auto logical = [&](bool both) -> Value* {
      Value* nx = f ? b.CreateFCmpUNE(x, zero(t)) : b.CreateICmpNE(x, zero(t));
      Value* ny = f ? b.CreateFCmpUNE(y, zero(t)) : b.CreateICmpNE(y, zero(t));
      Value* r = both ? b.CreateAnd(nx, ny) : b.CreateOr(nx, ny);
      return f ? b.CreateUIToFP(r, cty(t)) : b.CreateZExt(r, cty(t));
    };
    switch (op) {
      case Op::Neg:
        if (f) return b.CreateFNeg(x);
        if (i) return b.CreateNeg(x);
        break;
      case Op::Abs:
        if (u) return x;
        if (f) return b.CreateSelect(b.CreateFCmpOLT(x, zero(t)), b.CreateFNeg(x), x);
        if (i) return b.CreateSelect(b.CreateICmpSLT(x, zero(t)), b.CreateNeg(x), x);
        break;
      case Op::Exp: if (f) return intrinsic(llvm::Intrinsic::exp, {x}); break;
      case Op::Log: if (f) return intrinsic(llvm::Intrinsic::log, {x}); break;
      case Op::Sqrt: if (f) return intrinsic(llvm::Intrinsic::sqrt, {x}); break;
      case Op::Tanh: if (f) return call_math("tanh", x); break;
      case Op::Sigmoid:
        if (f)
          return b.CreateFDiv(fconst(t, 1.0), b.CreateFAdd(fconst(t, 1.0), intrinsic(llvm::Intrinsic::exp, {b.CreateFNeg(x)})));
        break;
      case Op::Relu:
        if (u) return x;
        if (f) return b.CreateSelect(b.CreateFCmpUGT(x, zero(t)), x, zero(t));
        if (i) return b.CreateSelect(b.CreateICmpSGT(x, zero(t)), x, zero(t));
        break;
      // libm calls, as the ref interpreter's std:: functions, so results match it bit for bit.
      case Op::Sin: if (f) return call_math("sin", x); break;
      case Op::Cos: if (f) return call_math("cos", x); break;
      case Op::Erf: if (f) return call_math("erf", x); break;
      case Op::Log1p: if (f) return call_math("log1p", x); break;
      case Op::Expm1: if (f) return call_math("expm1", x); break;
      case Op::Rsqrt: if (f) return b.CreateFDiv(fconst(t, 1.0), intrinsic(llvm::Intrinsic::sqrt, {x})); break;
      case Op::Reciprocal: if (f) return b.CreateFDiv(fconst(t, 1.0), x); break;
      case Op::Sign:
        if (u) return x;
        if (f) return b.CreateFSub(b.CreateUIToFP(b.CreateFCmpOGT(x, zero(t)), cty(t)),
                                   b.CreateUIToFP(b.CreateFCmpOLT(x, zero(t)), cty(t)));
        if (i) return b.CreateSub(b.CreateZExt(b.CreateICmpSGT(x, zero(t)), cty(t)),
                                  b.CreateZExt(b.CreateICmpSLT(x, zero(t)), cty(t)));
        break;
      case Op::Floor:
        if (u || i) return x;
        if (f) return intrinsic(llvm::Intrinsic::floor, {x});
        break;
      case Op::Ceil:
        if (u || i) return x;
        if (f) return intrinsic(llvm::Intrinsic::ceil, {x});
        break;
      case Op::Round:  // rint in the default rounding mode: half to even
        if (u || i) return x;
        if (f) return intrinsic(llvm::Intrinsic::rint, {x});
        break;
      case Op::IsNan: if (f) return b.CreateFCmpUNO(x, x); break;
      case Op::IsInf:
        if (f) return b.CreateFCmpOEQ(intrinsic(llvm::Intrinsic::fabs, {x}), fconst(t, INFINITY));
        break;
      case Op::Not:
        if (u) return b.CreateNot(x);
        if (f) return b.CreateSelect(b.CreateFCmpOEQ(x, zero(t)), fconst(t, 1.0), zero(t));
        if (i) return b.CreateZExt(b.CreateICmpEQ(x, zero(t)), cty(t));
        break;
      case Op::Cast: return cast(x, t, out);
      case Op::Add:
        if (u) return b.CreateOr(x, y);
        return f ? b.CreateFAdd(x, y) : b.CreateAdd(x, y);
      case Op::Sub:
        if (f) return b.CreateFSub(x, y);
        if (i) return b.CreateSub(x, y);
        break;
      case Op::Mul:
        if (u) return b.CreateAnd(x, y);
        return f ? b.CreateFMul(x, y) : b.CreateMul(x, y);
      case Op::Div: if (f) return b.CreateFDiv(x, y); break;
      case Op::Pow: if (f) return intrinsic(llvm::Intrinsic::pow, {x, y}); break;
      case Op::Maximum:
        if (u) return b.CreateOr(x, y);
        if (f) return b.CreateSelect(b.CreateOr(b.CreateFCmpUNO(x, x), b.CreateFCmpOGT(x, y)), x, y);
        return b.CreateSelect(b.CreateICmpSGT(x, y), x, y);
      case Op::Minimum:
        if (u) return b.CreateAnd(x, y);
        if (f) return b.CreateSelect(b.CreateOr(b.CreateFCmpUNO(x, x), b.CreateFCmpOLT(x, y)), x, y);
        return b.CreateSelect(b.CreateICmpSLT(x, y), x, y);
      case Op::Eq: return cmp(P::FCMP_OEQ, P::ICMP_EQ, P::ICMP_EQ);
      case Op::Ne: return cmp(P::FCMP_UNE, P::ICMP_NE, P::ICMP_NE);
      case Op::Lt: return cmp(P::FCMP_OLT, P::ICMP_SLT, P::ICMP_ULT);
      case Op::Le: return cmp(P::FCMP_OLE, P::ICMP_SLE, P::ICMP_ULE);
      case Op::Gt: return cmp(P::FCMP_OGT, P::ICMP_SGT, P::ICMP_UGT);
      case Op::Ge: return cmp(P::FCMP_OGE, P::ICMP_SGE, P::ICMP_UGE);
      case Op::And:
        if (u) return b.CreateAnd(x, y);
        return logical(true);
      case Op::Or:
        if (u) return b.CreateOr(x, y);
        return logical(false);
      case Op::Where: return b.CreateSelect(a[0], a[1], a[2]);
      TESSEL_IR_CASES_NOT_ELEMENTWISE
        throw InternalError(fmt::format("emit_llvm: {} is not an elementwise op", ir::op_name(op)));
    }
    throw InternalError(fmt::format("emit_llvm: no {} on {}", ir::op_name(op), dtype_name(t)));
  }

  // Value of a statement list; `load(slot)` gives a load slot's element index.
  std::vector<Value*> stmts(const std::vector<Stmt>& list, const std::function<Value*(int)>& index, Value* acc,
                            Value* count) {
    std::vector<Value*> v;
    std::vector<DType> t;
    for (const Stmt& s : list) {
      Value* r = nullptr;
      switch (s.kind) {
        case StmtKind::Load: {
          int p = k.load_params[static_cast<size_t>(s.slot)];
          // A load of the output's own memory reads the element about to be
          // written: the store's index (slot -1 maps to it), so the optimizer
          // sees one address, read then written.
          const bool of_output = p == opts.output_alias_param;
          Value* idx = index(of_output ? -1 : s.slot);
          if (s.index >= 0) idx = b.CreateAdd(idx, v[static_cast<size_t>(s.index)]);
          // A vector body reads a load that does not move along the row once, for every lane.
          const bool splat = lanes > 1 && splat_loads && (*splat_loads)[static_cast<size_t>(s.slot)];
          auto emit_load = [&]() -> Value* {
            if (lanes > 1 && gather_strides) {  // lane i at idx + i * stride
              const unsigned n = lanes;
              Value* stride = (*gather_strides)[static_cast<size_t>(s.slot)];
              std::vector<llvm::Constant*> steps;
              for (unsigned i = 0; i < n; ++i) steps.push_back(b.getInt64(i));
              Value* at = b.CreateAdd(b.CreateVectorSplat(n, idx),
                                      b.CreateMul(llvm::ConstantVector::get(steps), b.CreateVectorSplat(n, stride)));
              Value* where = b.CreateInBoundsGEP(mty(s.dtype), ptrs[static_cast<size_t>(p)], at);
              auto* ld = b.CreateMaskedGather(llvm::FixedVectorType::get(mty(s.dtype), n), where,
                                              llvm::Align(dtype_size(s.dtype)));
              ld->setMetadata(llvm::LLVMContext::MD_alias_scope, in_list);
              ld->setMetadata(llvm::LLVMContext::MD_noalias, out_list);
              return s.dtype == DType::b8 ? b.CreateICmpNE(ld, llvm::Constant::getNullValue(ld->getType()))
                                          : static_cast<Value*>(ld);
            }
            Value* gep = b.CreateInBoundsGEP(mty(s.dtype), ptrs[static_cast<size_t>(p)], idx);
            if (splat) {
              const unsigned n = lanes;
              lanes = 1;
              auto* one = b.CreateAlignedLoad(mty(s.dtype), gep, llvm::Align(dtype_size(s.dtype)));
              one->setMetadata(llvm::LLVMContext::MD_alias_scope, in_list);
              one->setMetadata(llvm::LLVMContext::MD_noalias, out_list);
              Value* x = s.dtype == DType::b8 ? b.CreateICmpNE(one, b.getInt8(0)) : static_cast<Value*>(one);
              lanes = n;
              return b.CreateVectorSplat(n, x);
            }
            auto* ld = b.CreateAlignedLoad(ty(mty(s.dtype)), gep, llvm::Align(dtype_size(s.dtype)));
            ld->setMetadata(llvm::LLVMContext::MD_alias_scope, of_output ? out_list : in_list);
            ld->setMetadata(llvm::LLVMContext::MD_noalias, of_output ? in_list : out_list);
            return s.dtype == DType::b8 ? b.CreateICmpNE(ld, llvm::Constant::getNullValue(ld->getType())) : static_cast<Value*>(ld);
          };
          if (s.pred < 0) {
            r = emit_load();
            break;
          }
          // Only where the predicate holds: outside, the index may be out of the buffer.
          TESSEL_ASSERT("emit_llvm", lanes == 1);  // predicated loads never take the explicit-vector path
          auto* from = b.GetInsertBlock();
          auto* inside = llvm::BasicBlock::Create(ctx, "load.in", fn);
          auto* join = llvm::BasicBlock::Create(ctx, "load.join", fn);
          b.CreateCondBr(v[static_cast<size_t>(s.pred)], inside, join);
          b.SetInsertPoint(inside);
          Value* loaded = emit_load();
          auto* loaded_in = b.GetInsertBlock();
          b.CreateBr(join);
          b.SetInsertPoint(join);
          auto* phi = b.CreatePHI(loaded->getType(), 2);
          phi->addIncoming(llvm::Constant::getNullValue(loaded->getType()), from);
          phi->addIncoming(loaded, loaded_in);
          r = phi;
          break;
        }
        case StmtKind::Coord: r = index(static_cast<int>(k.load_params.size()) + s.slot); break;
        case StmtKind::Const: r = (lanes > 1 ? vconsts : consts)[static_cast<size_t>(s.slot)]; break;
        case StmtKind::Acc: r = acc; break;
        case StmtKind::Count: r = cast(count, DType::i64, s.dtype); break;
        case StmtKind::Stage:
          r = stage_vals.at(static_cast<size_t>(s.slot));
          if (lanes > 1) r = b.CreateVectorSplat(lanes, r);
          break;
        case StmtKind::Op: {
          std::vector<Value*> args;
          for (int i : s.args) args.push_back(v[static_cast<size_t>(i)]);
          // The operands' dtype: Where's value operands', every other op's first.
          const DType operands = t[static_cast<size_t>(s.args[s.op == Op::Where ? 1 : 0])];
          r = elementwise(s.op, operands, s.dtype, args);
          break;
        }
      }
      v.push_back(r);
      t.push_back(s.dtype);
    }
    return v;
  }

  void store(Value* val, DType t, Value* idx, int param = 0) {
    if (t == DType::b8) val = b.CreateZExt(val, b.getInt8Ty());
    auto* s = b.CreateStore(val, b.CreateInBoundsGEP(mty(t), ptrs[static_cast<size_t>(param)], idx));
    s->setMetadata(llvm::LLVMContext::MD_alias_scope, out_list);
    s->setMetadata(llvm::LLVMContext::MD_noalias, in_list);
    if (lanes > 1) {  // the streaming path: whole aligned cache lines, bypassing the cache
      s->setAlignment(llvm::Align(kStreamVectorBytes));
      s->setMetadata(llvm::LLVMContext::MD_nontemporal,
                     llvm::MDNode::get(ctx, {llvm::ConstantAsMetadata::get(b.getInt32(1))}));
    }
  }

  Value* init_acc(kir::ReduceKind red, DType acc_dtype) {
    bool f = acc_dtype == DType::f64;
    switch (red) {
      case kir::ReduceKind::Max:
        return f ? fconst(DType::f64, -INFINITY) : static_cast<Value*>(b.getInt64(INT64_MIN));
      case kir::ReduceKind::Min:
        return f ? fconst(DType::f64, INFINITY) : static_cast<Value*>(b.getInt64(INT64_MAX));
      case kir::ReduceKind::Prod: return f ? fconst(DType::f64, 1.0) : static_cast<Value*>(b.getInt64(1));
      case kir::ReduceKind::Sum: case kir::ReduceKind::Mean: return zero(acc_dtype);
      case kir::ReduceKind::None: break;
    }
    throw InternalError("emit_llvm: no accumulator for an elementwise kernel");
  }
  Value* combine(kir::ReduceKind red, DType acc_dtype, Value* acc, Value* v) {
    bool f = acc_dtype == DType::f64;
    switch (red) {
      // Floating products multiply in the interpreter's order, one serial
      // chain (floating sums take lane_sum_over_row).
      case kir::ReduceKind::Sum: case kir::ReduceKind::Mean: return f ? b.CreateFAdd(acc, v) : b.CreateAdd(acc, v);
      case kir::ReduceKind::Prod: return f ? b.CreateFMul(acc, v) : b.CreateMul(acc, v);  // i64 wraps, as torch
      case kir::ReduceKind::Max: case kir::ReduceKind::Min: {
        bool mx = red == kir::ReduceKind::Max;
        if (!f) return b.CreateSelect(mx ? b.CreateICmpSGT(v, acc) : b.CreateICmpSLT(v, acc), v, acc);
        Value* better = b.CreateOr(mx ? b.CreateFCmpOGT(v, acc) : b.CreateFCmpOLT(v, acc), b.CreateFCmpUNO(v, v));
        return b.CreateSelect(b.CreateFCmpUNO(acc, acc), acc, b.CreateSelect(better, v, acc));
      }
      case kir::ReduceKind::None: break;
    }
    throw InternalError("emit_llvm: unknown reduction");
  }

  void build(const std::string& symbol) {
    auto* ptr = llvm::PointerType::get(ctx, 0);
    auto* i64 = b.getInt64Ty();
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, i64, i64}, false);
    fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    fn->addParamAttr(0, llvm::Attribute::NoAlias);
    fn->addParamAttr(1, llvm::Attribute::NoAlias);
    llvm::MDBuilder md(ctx);
    auto* domain = md.createAnonymousAliasScopeDomain("tessel.kernel");
    in_list = llvm::MDNode::get(ctx, {md.createAnonymousAliasScope(domain, "in")});
    out_list = llvm::MDNode::get(ctx, {md.createAnonymousAliasScope(domain, "out")});

    b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
    Value* bufs = fn->getArg(0);
    Value* args = fn->getArg(1);
    auto arg = [&](size_t i) { return b.CreateLoad(i64, b.CreateConstInBoundsGEP1_64(i64, args, i)); };
    for (size_t p = 0; p < k.params.size(); ++p)
      ptrs.push_back(b.CreateLoad(ptr, b.CreateConstInBoundsGEP1_64(ptr, bufs, p)));
    if (opts.output_alias_param > 0) {  // elementwise only: the store's index is the element's
      TESSEL_ASSERT("emit_llvm", static_cast<size_t>(opts.output_alias_param) < ptrs.size() &&
                                     k.params[static_cast<size_t>(opts.output_alias_param)].dtype == k.params[0].dtype &&
                                     k.reduce == kir::ReduceKind::None && !k.row_program());
      ptrs[static_cast<size_t>(opts.output_alias_param)] = ptrs[0];  // one pointer: the optimizer sees the same memory
    }
    const int R = k.rank;
    for (int d = 0; d < R; ++d) dims.push_back(arg(static_cast<size_t>(d)));
    const size_t slots = k.num_slots();
    for (size_t s = 0; s < slots; ++s) {
      size_t base = k.slot_base(static_cast<int>(s));
      off.push_back(arg(base));
      st.emplace_back();
      for (int d = 0; d < R; ++d) st.back().push_back(arg(base + 1 + static_cast<size_t>(d)));
    }
    for (size_t c = 0; c < k.const_types.size(); ++c) {
      Value* bits = arg(k.const_base() + c);
      DType t = k.const_types[c];
      Value* v;
      switch (t) {
        case DType::f64: v = b.CreateBitCast(bits, b.getDoubleTy()); break;
        case DType::f32: v = b.CreateFPTrunc(b.CreateBitCast(bits, b.getDoubleTy()), b.getFloatTy()); break;
        case DType::b8: v = b.CreateICmpNE(bits, b.getInt64(0)); break;
        default: v = b.CreateTrunc(bits, cty(t)); break;
      }
      consts.push_back(v);
    }
    const bool red = k.reduce != kir::ReduceKind::None || k.row_program();
    const int outer = red ? R - k.reduce_rank : R - 1;  // dims decomposed from the row index
    if (opts.streaming && streamable(k)) {
      // Loop-invariant: unit inner strides, aligned output, and enough bytes in [begin, end).
      const size_t d = static_cast<size_t>(R - 1);
      const int64_t esize = static_cast<int64_t>(dtype_size(k.params[0].dtype));
      Value* ok = b.getTrue();
      for (size_t s = 0; s < slots; ++s) ok = b.CreateAnd(ok, b.CreateICmpEQ(st[s][d], b.getInt64(1)));
      Value* addr = b.CreatePtrToInt(ptrs[0], i64);
      ok = b.CreateAnd(ok, b.CreateICmpEQ(b.CreateURem(addr, b.getInt64(esize)), b.getInt64(0)));
      Value* rows = b.CreateSub(fn->getArg(3), fn->getArg(2));
      Value* bytes = b.CreateMul(b.CreateMul(rows, dims[d]), b.getInt64(esize));
      stream = b.CreateAnd(ok, b.CreateICmpSGE(bytes, b.getInt64(kStreamBytes)), "stream");
    }
    // The first row's index is decomposed into the outer dims once; each
    // later row steps them like an odometer. A division per dim per row
    // (tens of cycles each) used to cost more than the row itself when rows
    // are a few elements long (a pool's 2-wide windows).
    llvm::IRBuilder<> eb(&fn->getEntryBlock(), fn->getEntryBlock().begin());
    std::vector<llvm::AllocaInst*> at(static_cast<size_t>(outer)), cur(slots);
    for (auto& a : at) a = eb.CreateAlloca(i64, nullptr, "row.at");
    for (auto& c : cur) c = eb.CreateAlloca(i64, nullptr, "row.base");
    Value* begin = fn->getArg(2);
    Value* end = fn->getArg(3);
    auto* first = llvm::BasicBlock::Create(ctx, "rows.first", fn);
    auto* none = llvm::BasicBlock::Create(ctx, "rows.none", fn);
    b.CreateCondBr(b.CreateICmpSLT(begin, end), first, none);
    b.SetInsertPoint(first);
    {
      std::vector<Value*> base(off);
      Value* t = begin;
      for (int d = outer - 1; d >= 0; --d) {
        Value* ext = dims[static_cast<size_t>(d)];
        Value* i = d == 0 ? t : b.CreateURem(t, ext);
        if (d > 0) t = b.CreateUDiv(t, ext);
        b.CreateStore(i, at[static_cast<size_t>(d)]);
        for (size_t s = 0; s < slots; ++s) base[s] = b.CreateAdd(base[s], b.CreateMul(i, st[s][static_cast<size_t>(d)]));
      }
      for (size_t s = 0; s < slots; ++s) b.CreateStore(base[s], cur[s]);
    }
    // Rows in order; a launch whose sums walk their rows at a stride while
    // neighbouring rows are neighbours in memory (a bias gradient: a sum over
    // the batch axis) takes kColumnBlock rows at a time as columns
    // (column_block), one vector load across the block per row element.
    const bool columns = column_capable(outer);
    Value* columns_ok = columns ? column_launch(outer) : nullptr;
    auto* row_at = eb.CreateAlloca(i64, nullptr, "row");
    b.CreateStore(begin, row_at);
    auto* head = llvm::BasicBlock::Create(ctx, "row", fn);
    auto* exit = llvm::BasicBlock::Create(ctx, "row.exit", fn);
    b.CreateBr(head);
    b.SetInsertPoint(head);
    Value* row = b.CreateLoad(i64, row_at);
    std::vector<Value*> base(slots);
    for (size_t s = 0; s < slots; ++s) base[s] = b.CreateLoad(i64, cur[s]);
    Value* taken = b.getInt64(1);  // rows this iteration computed
    if (columns) {
      const size_t last = static_cast<size_t>(outer - 1);
      Value* block = b.CreateAnd(columns_ok, b.CreateAnd(b.CreateICmpSLE(b.CreateAdd(row, b.getInt64(kColumnBlock)), end),
                                                        b.CreateICmpSLE(b.CreateAdd(b.CreateLoad(i64, at[last]), b.getInt64(kColumnBlock)),
                                                                        dims[last])));
      auto* cb = llvm::BasicBlock::Create(ctx, "row.columns", fn);
      auto* one = llvm::BasicBlock::Create(ctx, "row.one", fn);
      auto* joined = llvm::BasicBlock::Create(ctx, "row.computed", fn);
      b.CreateCondBr(block, cb, one);
      b.SetInsertPoint(cb);
      column_block(base, outer);
      // The block's last row is the current one for the step below (no wrap: the block fits its dim).
      b.CreateStore(b.CreateAdd(b.CreateLoad(i64, at[last]), b.getInt64(kColumnBlock - 1)), at[last]);
      for (size_t s = 0; s < slots; ++s)
        b.CreateStore(b.CreateAdd(base[s], b.CreateMul(b.getInt64(kColumnBlock - 1), st[s][last])), cur[s]);
      auto* cb_end = b.GetInsertBlock();
      b.CreateBr(joined);
      b.SetInsertPoint(one);
      reduce_row(base, outer);
      auto* one_end = b.GetInsertBlock();
      b.CreateBr(joined);
      b.SetInsertPoint(joined);
      auto* n = b.CreatePHI(i64, 2, "rows.taken");
      n->addIncoming(b.getInt64(kColumnBlock), cb_end);
      n->addIncoming(b.getInt64(1), one_end);
      taken = n;
    } else if (k.row_program()) {
      row_program(base, outer);
    } else if (!red && k.short_inner > 0) {
      // A whole run of the dim above the short innermost one at once, where
      // the launch matches the strides the kernel was lowered with and the
      // run starts here and ends inside the launch; else this row alone.
      const size_t last = static_cast<size_t>(outer - 1);
      Value* run = b.CreateAnd(short_inner_launch(),
                               b.CreateAnd(b.CreateICmpEQ(b.CreateLoad(i64, at[last]), b.getInt64(0)),
                                           b.CreateICmpSLE(b.CreateAdd(row, dims[last]), end)));
      auto* rb = llvm::BasicBlock::Create(ctx, "row.run", fn);
      auto* one = llvm::BasicBlock::Create(ctx, "row.one", fn);
      auto* joined = llvm::BasicBlock::Create(ctx, "row.computed", fn);
      b.CreateCondBr(run, rb, one);
      b.SetInsertPoint(rb);
      short_inner_run(base);
      // The run's last row is the current one for the step below (no wrap: the run is its dim).
      Value* back = b.CreateSub(dims[last], b.getInt64(1));
      b.CreateStore(back, at[last]);
      for (size_t s = 0; s < slots; ++s) b.CreateStore(b.CreateAdd(base[s], b.CreateMul(back, st[s][last])), cur[s]);
      auto* rb_end = b.GetInsertBlock();
      b.CreateBr(joined);
      b.SetInsertPoint(one);
      elementwise_rows(base);
      auto* one_end = b.GetInsertBlock();
      b.CreateBr(joined);
      b.SetInsertPoint(joined);
      auto* n = b.CreatePHI(i64, 2, "rows.taken");
      n->addIncoming(dims[last], rb_end);
      n->addIncoming(b.getInt64(1), one_end);
      taken = n;
    } else if (!red) {
      elementwise_rows(base);
    } else {
      reduce_row(base, outer);
    }
    Value* next_row = b.CreateAdd(row, taken);
    b.CreateStore(next_row, row_at);
    auto* stepped = llvm::BasicBlock::Create(ctx, "row.stepped", fn);
    for (int d = outer - 1; d >= 0; --d) {
      const size_t du = static_cast<size_t>(d);
      Value* i = b.CreateAdd(b.CreateLoad(i64, at[du]), b.getInt64(1));
      auto advance = [&] {
        b.CreateStore(i, at[du]);
        for (size_t s = 0; s < slots; ++s)
          b.CreateStore(b.CreateAdd(b.CreateLoad(i64, cur[s]), st[s][du]), cur[s]);
        b.CreateBr(stepped);
      };
      if (d == 0) {  // the last row of the launch may step past the end: never read
        advance();
        break;
      }
      auto* inc = llvm::BasicBlock::Create(ctx, "row.inc", fn);
      auto* wrap = llvm::BasicBlock::Create(ctx, "row.wrap", fn);
      b.CreateCondBr(b.CreateICmpSLT(i, dims[du]), inc, wrap);
      b.SetInsertPoint(inc);
      advance();
      b.SetInsertPoint(wrap);
      b.CreateStore(b.getInt64(0), at[du]);
      Value* back = b.CreateSub(dims[du], b.getInt64(1));
      for (size_t s = 0; s < slots; ++s)
        b.CreateStore(b.CreateSub(b.CreateLoad(i64, cur[s]), b.CreateMul(back, st[s][du])), cur[s]);
    }
    if (outer == 0) b.CreateBr(stepped);
    b.SetInsertPoint(stepped);
    b.CreateCondBr(b.CreateICmpSLT(next_row, end), head, exit);
    b.SetInsertPoint(exit);
    b.CreateBr(none);
    b.SetInsertPoint(none);
    if (stream) {  // non-temporal stores are weakly ordered: fence before the results are published
      auto* fence = llvm::BasicBlock::Create(ctx, "stream.fence", fn);
      auto* done = llvm::BasicBlock::Create(ctx, "done", fn);
      b.CreateCondBr(stream, fence, done);
      b.SetInsertPoint(fence);
      b.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
      b.CreateBr(done);
      b.SetInsertPoint(done);
    }
    b.CreateRetVoid();
  }

  // The innermost dim, twice: unit strides everywhere (vectorizable), and general.
  // Slots [first_slot, last_slot) move along the dim; coordinates always move
  // by their coefficient (a mask's row coordinate does not move along a row),
  // so they take no part in choosing the unit-stride loop.
  void inner(const std::vector<Value*>& base, int d, size_t first_slot, size_t last_slot,
             const std::function<void(const std::function<Value*(size_t)>&)>& body) {
    const size_t first_coord = k.load_params.size() + 1;
    // A load marked invariant (kir::Kernel::invariant) is read at its row's
    // base in the fast loop, which then holds only when its stride is 0.
    const bool innermost = d == k.rank - 1;
    // Loads marked interleaved are read at their constant stride there, 4
    // lanes wide: their rows are a pool's output rows, often short (max pool
    // forward in training, [256,16,10,10]: 0.32 -> 0.21 ms; at [256,16,112,112]
    // memory-bound, level with the widest).
    auto step = [&](size_t s) -> int64_t { return innermost && s >= 1 && s < first_coord ? k.inner_step(s - 1) : 1; };
    auto invariant = [&](size_t s) { return step(s) == 0; };
    Value* fast = b.getTrue();
    for (size_t s = first_slot; s < std::min(last_slot, first_coord); ++s)
      fast = b.CreateAnd(fast, b.CreateICmpEQ(st[s][static_cast<size_t>(d)], b.getInt64(step(s))));
    auto* fb = llvm::BasicBlock::Create(ctx, "unit", fn);
    auto* gb = llvm::BasicBlock::Create(ctx, "strided", fn);
    auto* join = llvm::BasicBlock::Create(ctx, "join", fn);
    b.CreateCondBr(fast, fb, gb);
    for (int unit = 1; unit >= 0; --unit) {
      b.SetInsertPoint(unit ? fb : gb);
      loop(b.getInt64(0), dims[static_cast<size_t>(d)], [&](Value* j) {
        body([&](size_t s) {
          if (unit && invariant(s)) return base[s];
          if (unit && s < first_coord && step(s) > 1) return b.CreateAdd(base[s], b.CreateMul(j, b.getInt64(step(s))));
          return unit && s < first_coord ? b.CreateAdd(base[s], j)
                                         : b.CreateAdd(base[s], b.CreateMul(j, st[s][static_cast<size_t>(d)]));
        });
      }, unit ? "i.unit" : "i", false, unit && !k.interleave.empty() ? 4 : 0);
      b.CreateBr(join);
    }
    b.SetInsertPoint(join);
  }

  // Whether this launch's strides along the last two dims, and its innermost
  // extent, are those the kernel was lowered with (kir::Kernel::short_inner).
  Value* short_inner_launch() {
    const size_t inner_d = static_cast<size_t>(k.rank - 1);
    Value* ok = b.CreateICmpEQ(dims[inner_d], b.getInt64(k.short_inner));
    for (size_t s = 0; s <= k.load_params.size(); ++s)
      for (size_t i = 0; i < 2; ++i)
        ok = b.CreateAnd(ok, b.CreateICmpEQ(st[s][inner_d - 1 + i], b.getInt64(k.short_inner_steps[2 * s + i])));
    return ok;
  }

  // One run of the dim above the short innermost dim, as one loop the
  // optimizer vectorizes: per step, the short dim's elements unrolled, every
  // store and load at the constant strides of short_inner_launch(). Runs are
  // short (a pool's output row: 14 or 5 in LeNet), so 4 lanes, not the
  // widest: a run of 14 then leaves 2 steps to the scalar tail, not 6
  // (relu + max pool forward and backward, [256,6,28,28]: 3.41 -> 3.24 ms).
  void short_inner_run(const std::vector<Value*>& base) {
    const size_t inner_d = static_cast<size_t>(k.rank - 1), above = inner_d - 1;
    const size_t first_coord = k.load_params.size() + 1;
    loop(b.getInt64(0), dims[above], [&](Value* j) {
      for (int e = 0; e < k.short_inner; ++e) {
        auto index = [&](size_t s) -> Value* {
          if (s >= first_coord)  // coordinates move by their coefficients
            return b.CreateAdd(base[s], b.CreateAdd(b.CreateMul(j, st[s][above]),
                                                    b.CreateMul(b.getInt64(e), st[s][inner_d])));
          const int64_t s_above = k.short_inner_steps[2 * s], s_inner = k.short_inner_steps[2 * s + 1];
          return b.CreateAdd(base[s], b.CreateAdd(b.CreateMul(j, b.getInt64(s_above)), b.getInt64(e * s_inner)));
        };
        auto v = stmts(k.body, [&](int slot) { return index(static_cast<size_t>(slot) + 1); }, nullptr, nullptr);
        store(v[static_cast<size_t>(k.value)], k.body[static_cast<size_t>(k.value)].dtype, index(0));
      }
    }, "i.run", false, /*width=*/4);
  }

  void elementwise_rows(const std::vector<Value*>& base) {
    auto body = [&](const std::function<Value*(size_t)>& index) {
      auto v = stmts(k.body, [&](int slot) { return index(static_cast<size_t>(slot) + 1); }, nullptr, nullptr);
      store(v[static_cast<size_t>(k.value)], k.body[static_cast<size_t>(k.value)].dtype, index(0));
    };
    if (!stream) {
      inner(base, k.rank - 1, 0, k.moving_slots(), body);
      return;
    }
    auto* sb = llvm::BasicBlock::Create(ctx, "stream", fn);
    auto* nb = llvm::BasicBlock::Create(ctx, "cached", fn);
    auto* join = llvm::BasicBlock::Create(ctx, "stream.join", fn);
    b.CreateCondBr(stream, sb, nb);
    b.SetInsertPoint(nb);
    inner(base, k.rank - 1, 0, k.moving_slots(), body);
    b.CreateBr(join);
    b.SetInsertPoint(sb);
    stream_row(base, body);
    b.CreateBr(join);
    b.SetInsertPoint(join);
  }

  // One unit-stride row with streaming stores: scalar elements up to the
  // first cache-line boundary of the output, whole lines as explicit vectors
  // (every statement at <lanes x T>), then the scalar tail.
  void stream_row(const std::vector<Value*>& base, const std::function<void(const std::function<Value*(size_t)>&)>& body) {
    const DType out = k.params[0].dtype;
    const int64_t esize = static_cast<int64_t>(dtype_size(out));
    const unsigned vl = kStreamVectorBytes / static_cast<unsigned>(esize);
    Value* n = dims[static_cast<size_t>(k.rank - 1)];
    auto at = [&](Value* j) { return [&base, j, this](size_t s) { return b.CreateAdd(base[s], j); }; };
    Value* first = b.CreatePtrToInt(b.CreateInBoundsGEP(mty(out), ptrs[0], base[0]), b.getInt64Ty());
    Value* mis = b.CreateAnd(first, b.getInt64(kStreamVectorBytes - 1));
    Value* head = b.CreateUDiv(b.CreateAnd(b.CreateSub(b.getInt64(kStreamVectorBytes), mis), b.getInt64(kStreamVectorBytes - 1)),
                               b.getInt64(esize));
    head = b.CreateSelect(b.CreateICmpSLT(head, n), head, n);
    loop(b.getInt64(0), head, [&](Value* j) { body(at(j)); }, "s.head", true);
    Value* lines = b.CreateSDiv(b.CreateSub(n, head), b.getInt64(vl));
    vconsts.clear();
    for (Value* c : consts) vconsts.push_back(b.CreateVectorSplat(vl, c));
    lanes = vl;
    loop(b.getInt64(0), lines, [&](Value* line) { body(at(b.CreateAdd(head, b.CreateMul(line, b.getInt64(vl))))); },
         "s.line", true);
    lanes = 1;
    loop(b.CreateAdd(head, b.CreateMul(lines, b.getInt64(vl))), n, [&](Value* j) { body(at(j)); }, "s.tail", true);
  }

  // Nested loops over the reduced dims [K, rank) of a row; slots [lo, hi) move.
  void over_row(const std::vector<Value*>& base, int K, size_t lo, size_t hi,
                const std::function<void(const std::function<Value*(size_t)>&)>& body) {
    std::function<void(const std::vector<Value*>&, int)> level = [&](const std::vector<Value*>& offs, int d) {
      if (d == k.rank - 1) {
        inner(offs, d, lo, hi, body);
        return;
      }
      loop(b.getInt64(0), dims[static_cast<size_t>(d)], [&](Value* i) {
        std::vector<Value*> o(offs);
        for (size_t s = lo; s < hi; ++s) o[s] = b.CreateAdd(o[s], b.CreateMul(i, st[s][static_cast<size_t>(d)]));
        level(o, d + 1);
      }, "r");
    };
    level(base, K);
  }

  // Whether a vector body can compute a reduction's statements: as
  // streamable() asks of an elementwise kernel, with every load a strided walk
  // of plain memory.
  bool vector_body(const std::vector<Stmt>& body) const {
    if (k.indexed() || !vector_statements(body)) return false;
    for (const Stmt& s : body)
      if (s.kind == StmtKind::Load && !plain(k.params[static_cast<size_t>(k.load_params[static_cast<size_t>(s.slot)])].dtype))
        return false;
    return true;
  }

  // A floating Sum or Mean over a row in ir::kSumLanes partial sums (the
  // order ir.h defines, as the ref interpreter adds): element p of the row
  // goes to partial p % L. Whole groups of L elements that start at a
  // multiple of L are one vector add (contiguous loads along unit strides,
  // gathers along others); the rest, and bodies no vector computes
  // (transcendental calls, half types, indexed loads), add element by element.
  Value* lane_sum_over_row(const std::vector<Value*>& base, int K, const std::vector<Stmt>& body, int value) {
    constexpr unsigned L = ir::kSumLanes;
    auto* vty = llvm::FixedVectorType::get(b.getDoubleTy(), L);
    llvm::IRBuilder<> eb(&fn->getEntryBlock(), fn->getEntryBlock().begin());
    auto* partial = eb.CreateAlloca(vty, nullptr, "partial");
    auto* pos = eb.CreateAlloca(b.getInt64Ty(), nullptr, "pos");
    b.CreateStore(llvm::Constant::getNullValue(vty), partial);
    b.CreateStore(b.getInt64(0), pos);
    const DType vt = body[static_cast<size_t>(value)].dtype;
    const size_t lo = 1, hi = k.moving_slots();
    // Element at position p of the row into partial p % L. Only that lane's
    // double is read and written, and p comes from the loop's index, so
    // consecutive elements form no chain through memory.
    auto one = [&](const std::function<Value*(size_t)>& index, Value* p) {
      auto v = stmts(body, [&](int slot) { return index(static_cast<size_t>(slot) + 1); }, nullptr, nullptr);
      Value* x = cast(v[static_cast<size_t>(value)], vt, DType::f64);
      Value* at = b.CreateInBoundsGEP(b.getDoubleTy(), partial, b.CreateAnd(p, b.getInt64(L - 1)));
      b.CreateStore(b.CreateFAdd(b.CreateLoad(b.getDoubleTy(), at), x), at);
    };
    const bool vectors = vector_body(body);
    const size_t first_coord = k.load_params.size() + 1;
    std::vector<bool> splat(k.load_params.size(), false);
    std::function<void(const std::vector<Value*>&, int)> level = [&](const std::vector<Value*>& offs, int d) {
      const size_t du = static_cast<size_t>(d);
      if (d < k.rank - 1) {
        loop(b.getInt64(0), dims[du], [&](Value* i) {
          std::vector<Value*> o(offs);
          for (size_t s = lo; s < hi; ++s) o[s] = b.CreateAdd(o[s], b.CreateMul(i, st[s][du]));
          level(o, d + 1);
        }, "r");
        return;
      }
      Value* n = dims[du];
      // Elements up to the next multiple of L in the row's count one by one,
      // then groups of L whose lanes are known, one vector add each (loads
      // contiguous along unit strides, gathered along others), then the rest
      // one by one.
      auto walk = [&](const std::function<std::function<Value*(size_t)>(Value*)>& at, bool gather) {
        Value* p0 = b.CreateLoad(b.getInt64Ty(), pos);
        Value* head = b.CreateAnd(b.CreateSub(b.getInt64(L), b.CreateAnd(p0, b.getInt64(L - 1))), b.getInt64(L - 1));
        head = b.CreateSelect(b.CreateICmpSLT(head, n), head, n);
        loop(b.getInt64(0), head, [&](Value* j) { one(at(j), b.CreateAdd(p0, j)); }, "sum.head", true);
        Value* groups = b.CreateSDiv(b.CreateSub(n, head), b.getInt64(L));
        vconsts.clear();
        for (Value* c : consts) vconsts.push_back(b.CreateVectorSplat(L, c));
        std::vector<Value*> strides;
        for (size_t s = 1; s < first_coord; ++s) strides.push_back(st[s][du]);
        if (gather) gather_strides = &strides;
        else splat_loads = &splat;
        lanes = L;
        loop(b.getInt64(0), groups, [&](Value* g) {
          Value* j = b.CreateAdd(head, b.CreateMul(g, b.getInt64(L)));
          auto v = stmts(body, [&](int slot) { return at(j)(static_cast<size_t>(slot) + 1); }, nullptr, nullptr);
          Value* x = cast(v[static_cast<size_t>(value)], vt, DType::f64);
          b.CreateStore(b.CreateFAdd(b.CreateLoad(vty, partial), x), partial);
        }, "sum.group", true);
        lanes = 1;
        splat_loads = nullptr;
        gather_strides = nullptr;
        Value* done = b.CreateAdd(head, b.CreateMul(groups, b.getInt64(L)));
        loop(done, n, [&](Value* j) { one(at(j), b.CreateAdd(p0, j)); }, "sum.tail", true);
        b.CreateStore(b.CreateAdd(p0, n), pos);
      };
      auto strided = [&](Value* j) {
        return [&offs, du, j, this](size_t s) { return b.CreateAdd(offs[s], b.CreateMul(j, st[s][du])); };
      };
      // Unit strides, or 0 for loads marked invariant (read once per row, splat).
      Value* fast = b.getTrue();
      for (size_t s = lo; s < std::min(hi, first_coord); ++s) {
        const bool inv = k.inner_invariant(s - 1);
        splat[s - 1] = inv;
        fast = b.CreateAnd(fast, b.CreateICmpEQ(st[s][du], b.getInt64(inv ? 0 : 1)));
      }
      // Coordinates move by their coefficient, as in inner().
      auto unit = [&offs, &splat, du, first_coord, this](Value* j) {
        return [&offs, &splat, du, first_coord, j, this](size_t s) {
          if (s >= first_coord) return b.CreateAdd(offs[s], b.CreateMul(j, st[s][du]));
          return s >= 1 && splat[s - 1] ? offs[s] : b.CreateAdd(offs[s], j);
        };
      };
      auto* fb = llvm::BasicBlock::Create(ctx, "sum.unit", fn);
      auto* gb = llvm::BasicBlock::Create(ctx, "sum.strided", fn);
      auto* join = llvm::BasicBlock::Create(ctx, "sum.join", fn);
      b.CreateCondBr(fast, fb, gb);
      if (!vectors) {
        // One by one, each element into its partial. Along unit strides an
        // invariant load is read at the row's base, so what only it feeds
        // (the log of a row's sum in cross entropy) is computed once per
        // row, not once per element.
        b.SetInsertPoint(gb);
        Value* p0 = b.CreateLoad(b.getInt64Ty(), pos);
        loop(b.getInt64(0), n, [&](Value* j) { one(strided(j), b.CreateAdd(p0, j)); }, "i", true);
        b.CreateStore(b.CreateAdd(p0, n), pos);
        b.CreateBr(join);
        b.SetInsertPoint(fb);
        Value* q0 = b.CreateLoad(b.getInt64Ty(), pos);
        loop(b.getInt64(0), n, [&](Value* j) { one(unit(j), b.CreateAdd(q0, j)); }, "i.unit", true);
        b.CreateStore(b.CreateAdd(q0, n), pos);
        b.CreateBr(join);
        b.SetInsertPoint(join);
        return;
      }
      b.SetInsertPoint(gb);
      walk(strided, true);
      b.CreateBr(join);
      b.SetInsertPoint(fb);
      walk(unit, false);
      b.CreateBr(join);
      b.SetInsertPoint(join);
    };
    level(base, K);
    Value* acc = b.CreateLoad(vty, partial);
    Value* total = fconst(DType::f64, 0.0);
    for (unsigned l = 0; l < L; ++l) total = b.CreateFAdd(total, b.CreateExtractElement(acc, b.getInt64(l)));
    return total;
  }

  // Column blocks: a floating Sum or Mean whose body a vector computes, with
  // kept dims to block over.
  bool column_capable(int outer) const {
    return outer >= 1 && !k.row_program() && (k.reduce == kir::ReduceKind::Sum || k.reduce == kir::ReduceKind::Mean) &&
           k.acc_dtype == DType::f64 && vector_body(k.body);
  }

  // Whether this launch takes column blocks: along the last kept dim every
  // slot (output and loads) steps by 1, and some load does not walk its row
  // at unit stride (else the row loop reads contiguous vectors already).
  Value* column_launch(int outer) {
    const size_t last = static_cast<size_t>(outer - 1), inner_d = static_cast<size_t>(k.rank - 1);
    Value* ok = b.getTrue();
    Value* rows_contiguous = b.getTrue();
    for (size_t s = 0; s < k.moving_slots(); ++s) {
      ok = b.CreateAnd(ok, b.CreateICmpEQ(st[s][last], b.getInt64(1)));
      if (s >= 1)
        rows_contiguous = b.CreateAnd(rows_contiguous,
                                      b.CreateICmpEQ(st[s][inner_d], b.getInt64(k.inner_invariant(s - 1) ? 0 : 1)));
    }
    return b.CreateAnd(ok, b.CreateNot(rows_contiguous), "columns");
  }

  // kColumnBlock neighbouring rows of a Sum or Mean at once, in the order
  // ir::kSumLanes defines for each: element p of every row goes to partial
  // p % L, each partial a vector across the block (one load of kColumnBlock
  // neighbours per row element), then 0 + partial 0 + ... + partial L-1, so
  // every row's result equals the one-row loop's bit for bit.
  void column_block(const std::vector<Value*>& base, int K) {
    constexpr unsigned L = ir::kSumLanes;
    auto* vty = llvm::FixedVectorType::get(b.getDoubleTy(), kColumnBlock);
    auto* aty = llvm::ArrayType::get(vty, L);
    llvm::IRBuilder<> eb(&fn->getEntryBlock(), fn->getEntryBlock().begin());
    auto* partial = eb.CreateAlloca(aty, nullptr, "column.partial");
    auto* pos = eb.CreateAlloca(b.getInt64Ty(), nullptr, "column.pos");
    b.CreateStore(llvm::Constant::getNullValue(aty), partial);
    b.CreateStore(b.getInt64(0), pos);
    const DType vt = k.body[static_cast<size_t>(k.value)].dtype;
    vconsts.clear();
    for (Value* c : consts) vconsts.push_back(b.CreateVectorSplat(kColumnBlock, c));
    std::function<void(const std::vector<Value*>&, int)> level = [&](const std::vector<Value*>& offs, int d) {
      const bool innermost = d + 1 == k.rank;
      // The position of the innermost loop's elements: its start plus the
      // loop index, with no chain through memory from one element to the next.
      Value* p0 = innermost ? b.CreateLoad(b.getInt64Ty(), pos) : nullptr;
      loop(b.getInt64(0), dims[static_cast<size_t>(d)], [&](Value* i) {
        std::vector<Value*> o(offs);
        for (size_t s = 1; s < k.moving_slots(); ++s) o[s] = b.CreateAdd(o[s], b.CreateMul(i, st[s][static_cast<size_t>(d)]));
        if (!innermost) {
          level(o, d + 1);
          return;
        }
        lanes = kColumnBlock;
        auto v = stmts(k.body, [&](int slot) { return o[static_cast<size_t>(slot) + 1]; }, nullptr, nullptr);
        Value* x = cast(v[static_cast<size_t>(k.value)], vt, DType::f64);
        lanes = 1;
        Value* lane = b.CreateAnd(b.CreateAdd(p0, i), b.getInt64(L - 1));
        Value* at = b.CreateInBoundsGEP(aty, partial, {b.getInt64(0), lane});
        b.CreateStore(b.CreateFAdd(b.CreateLoad(vty, at), x), at);
      }, "column.r", true);
      if (innermost) b.CreateStore(b.CreateAdd(p0, dims[static_cast<size_t>(d)]), pos);
    };
    level(base, K);
    Value* count = b.getInt64(1);
    for (int d = K; d < k.rank; ++d) count = b.CreateMul(count, dims[static_cast<size_t>(d)]);
    Value* total = llvm::Constant::getNullValue(vty);
    for (unsigned l = 0; l < L; ++l)
      total = b.CreateFAdd(total, b.CreateLoad(vty, b.CreateInBoundsGEP(aty, partial, {b.getInt64(0), b.getInt64(l)})));
    for (unsigned r = 0; r < kColumnBlock; ++r) {
      auto e = stmts(k.epilogue, [](int) -> Value* { return nullptr; }, b.CreateExtractElement(total, b.getInt64(r)), count);
      store(e[static_cast<size_t>(k.result)], k.epilogue[static_cast<size_t>(k.result)].dtype,
            b.CreateAdd(base[0], b.getInt64(r)));
    }
  }

  // One reduction over a row: the accumulated body, then the epilogue's value.
  Value* reduce_over_row(const std::vector<Value*>& base, int K, kir::ReduceKind red, DType acc_dtype,
                         const std::vector<Stmt>& body, int value, const std::vector<Stmt>& epilogue, int result) {
    Value* count = b.getInt64(1);
    for (int d = K; d < k.rank; ++d) count = b.CreateMul(count, dims[static_cast<size_t>(d)]);
    if ((red == kir::ReduceKind::Sum || red == kir::ReduceKind::Mean) && acc_dtype == DType::f64) {
      auto e = stmts(epilogue, [](int) -> Value* { return nullptr; }, lane_sum_over_row(base, K, body, value), count);
      return e[static_cast<size_t>(result)];
    }
    llvm::IRBuilder<> eb(&fn->getEntryBlock(), fn->getEntryBlock().begin());
    auto* acc = eb.CreateAlloca(cty(acc_dtype), nullptr, "acc");
    b.CreateStore(init_acc(red, acc_dtype), acc);
    const DType vt = body[static_cast<size_t>(value)].dtype;
    over_row(base, K, 1, k.moving_slots(), [&](const std::function<Value*(size_t)>& index) {
      auto v = stmts(body, [&](int slot) { return index(static_cast<size_t>(slot) + 1); }, nullptr, nullptr);
      Value* x = cast(v[static_cast<size_t>(value)], vt, acc_dtype);
      b.CreateStore(combine(red, acc_dtype, b.CreateLoad(cty(acc_dtype), acc), x), acc);
    });
    auto e = stmts(epilogue, [](int) -> Value* { return nullptr; }, b.CreateLoad(cty(acc_dtype), acc), count);
    return e[static_cast<size_t>(result)];
  }

  void reduce_row(const std::vector<Value*>& base, int K) {
    Value* r = reduce_over_row(base, K, k.reduce, k.acc_dtype, k.body, k.value, k.epilogue, k.result);
    store(r, k.epilogue[static_cast<size_t>(k.result)].dtype, base[0]);
  }

  // A row program's row: each stage is one pass over the row (its value stays
  // in a register for the later passes), then the main reduction or the
  // elementwise pass, whose inner loop reads the stages as loop invariants.
  void row_program(const std::vector<Value*>& base, int K) {
    stage_vals.clear();
    for (size_t i = 0; i < k.stages.size(); ++i) {
      const kir::Stage& g = k.stages[i];
      Value* r = reduce_over_row(base, K, g.reduce, g.acc_dtype, g.body, g.value, g.epilogue, g.result);
      if (g.store >= 0)
        store(r, g.epilogue[static_cast<size_t>(g.result)].dtype, base[static_cast<size_t>(k.stage_store_slot(i))], g.store);
      stage_vals.push_back(r);
    }
    if (k.reduce != kir::ReduceKind::None) {
      reduce_row(base, K);
      return;
    }
    over_row(base, K, 0, k.moving_slots(), [&](const std::function<Value*(size_t)>& index) {
      auto v = stmts(k.body, [&](int slot) { return index(static_cast<size_t>(slot) + 1); }, nullptr, nullptr);
      store(v[static_cast<size_t>(k.value)], k.body[static_cast<size_t>(k.value)].dtype, index(0));
    });
  }
};

}  // namespace

std::unique_ptr<llvm::Module> emit_llvm(const kir::Kernel& k, const std::string& symbol, llvm::LLVMContext& ctx,
                                       EmitOptions options) {
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  Emitter e(k, ctx, m.get(), options);
  e.build(symbol);
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*m, &os))
    throw InternalError("emit_llvm produced an invalid module: " + os.str() + "\n" + k.text());
  return m;
}

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return os.str();
}

}  // namespace tessel::cpujit
