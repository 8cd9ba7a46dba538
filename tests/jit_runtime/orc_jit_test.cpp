// ORC JIT: modules built with IRBuilder are compiled, cached and run; the
// disk cache short-circuits LLVM; a bad entry is recompiled, never run.
#include <catch2/catch.hpp>

#include "tessel/config.h"

#if TESSEL_HAS_LLVM

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/CommandLine.h>

#include "runtime/errors.h"
#include "runtime/orc_jit.h"
#include "tests/support/temp_dir.h"

using tessel::CacheOrigin;
using tessel::JitKernel;
using tessel::KernelCache;
using tessel::OrcJit;
using tessel::OrcJitOptions;
using tessel::VectorMath;
using tessel::testing::TempDir;

namespace {

// Emits `void <name>(ptr noalias out, ptr noalias in..., <scalars>, i64 n)`
// as one loop over i whose body `body` computes out[i] from the loaded in[k][i].
using Body = std::function<llvm::Value*(llvm::IRBuilder<>&, std::vector<llvm::Value*>& loaded,
                                        std::vector<llvm::Value*>& scalars)>;

std::unique_ptr<llvm::Module> elementwise_module(llvm::LLVMContext& ctx, const std::string& name,
                                                 int inputs, int float_scalars, const Body& body) {
  auto m = std::make_unique<llvm::Module>(name + "_module", ctx);
  llvm::IRBuilder<> b(ctx);
  auto* f32 = b.getFloatTy();
  auto* i64 = b.getInt64Ty();
  auto* ptr = llvm::PointerType::get(ctx, 0);
  std::vector<llvm::Type*> params(1 + inputs, ptr);
  for (int s = 0; s < float_scalars; ++s) params.push_back(f32);
  params.push_back(i64);
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), params, false);
  auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, m.get());
  for (int p = 0; p < 1 + inputs; ++p) fn->addParamAttr(p, llvm::Attribute::NoAlias);
  fn->addFnAttr(llvm::Attribute::NoUnwind);

  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", fn);
  llvm::Value* n = fn->getArg(static_cast<unsigned>(params.size() - 1));
  b.SetInsertPoint(entry);
  b.CreateCondBr(b.CreateICmpSGT(n, b.getInt64(0)), loop, exit);

  b.SetInsertPoint(loop);
  auto* i = b.CreatePHI(i64, 2, "i");
  i->addIncoming(b.getInt64(0), entry);
  std::vector<llvm::Value*> loaded;
  for (int k = 0; k < inputs; ++k)
    loaded.push_back(b.CreateLoad(f32, b.CreateInBoundsGEP(f32, fn->getArg(1 + k), i)));
  std::vector<llvm::Value*> scalars;
  for (int s = 0; s < float_scalars; ++s) scalars.push_back(fn->getArg(1 + inputs + s));
  llvm::Value* v = body(b, loaded, scalars);
  b.CreateStore(v, b.CreateInBoundsGEP(f32, fn->getArg(0), i));
  auto* next = b.CreateAdd(i, b.getInt64(1), "i.next", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpSLT(next, n), loop, exit);

  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return m;
}

// y[i] = a * x[i] + y[i], as `void axpy(float* y, const float* x, float a, int64_t n)`:
// out and the first input are the same array, so only x is an extra input.
std::unique_ptr<llvm::Module> axpy_module(llvm::LLVMContext& ctx) {
  auto m = std::make_unique<llvm::Module>("axpy_module", ctx);
  llvm::IRBuilder<> b(ctx);
  auto* f32 = b.getFloatTy();
  auto* i64 = b.getInt64Ty();
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, f32, i64}, false);
  auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, "axpy", m.get());
  fn->addParamAttr(0, llvm::Attribute::NoAlias);
  fn->addParamAttr(1, llvm::Attribute::NoAlias);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", fn);
  llvm::Value *y = fn->getArg(0), *x = fn->getArg(1), *a = fn->getArg(2), *n = fn->getArg(3);
  b.SetInsertPoint(entry);
  b.CreateCondBr(b.CreateICmpSGT(n, b.getInt64(0)), loop, exit);
  b.SetInsertPoint(loop);
  auto* i = b.CreatePHI(i64, 2, "i");
  i->addIncoming(b.getInt64(0), entry);
  auto* yp = b.CreateInBoundsGEP(f32, y, i);
  auto* xv = b.CreateLoad(f32, b.CreateInBoundsGEP(f32, x, i));
  auto* yv = b.CreateLoad(f32, yp);
  b.CreateStore(b.CreateFAdd(b.CreateFMul(a, xv), yv), yp);
  auto* next = b.CreateAdd(i, b.getInt64(1), "i.next", true, true);
  i->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpSLT(next, n), loop, exit);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return m;
}
using AxpyFn = void(float*, const float*, float, std::int64_t);

// relu(a*b + c) * d: the fused chain of the benchmarks.
std::unique_ptr<llvm::Module> fused_module(llvm::LLVMContext& ctx, const std::string& name = "fused") {
  return elementwise_module(ctx, name, 4, 0, [](auto& b, auto& in, auto&) {
    llvm::Value* t = b.CreateFAdd(b.CreateFMul(in[0], in[1]), in[2]);
    auto* zero = llvm::ConstantFP::get(b.getFloatTy(), 0.0);
    llvm::Value* relu = b.CreateSelect(b.CreateFCmpOGT(t, zero), t, zero);
    return b.CreateFMul(relu, in[3]);
  });
}
using FusedFn = void(float*, const float*, const float*, const float*, const float*, std::int64_t);

// tanh(exp(x) * s) + log(x): vector math through llvm.exp/llvm.log and a
// side-effect-free libm tanhf, as the emitter will declare it.
std::unique_ptr<llvm::Module> math_module(llvm::LLVMContext& ctx) {
  return elementwise_module(ctx, "math", 1, 1, [](auto& b, auto& in, auto& s) {
    llvm::Module* m = b.GetInsertBlock()->getModule();
    auto* f32 = b.getFloatTy();
    llvm::Value* e = b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, in[0]);
    llvm::Value* l = b.CreateUnaryIntrinsic(llvm::Intrinsic::log, in[0]);
    auto tanhf = m->getOrInsertFunction("tanhf", llvm::FunctionType::get(f32, {f32}, false));
    auto* decl = llvm::cast<llvm::Function>(tanhf.getCallee());
    decl->setDoesNotAccessMemory();
    decl->setDoesNotThrow();
    decl->addFnAttr(llvm::Attribute::WillReturn);
    auto* call = b.CreateCall(tanhf, {b.CreateFMul(e, s[0])});
    call->setDoesNotAccessMemory();
    return b.CreateFAdd(call, l);
  });
}
using MathFn = void(float*, const float*, float, std::int64_t);

// `void <name>(ptr noalias out, ptr noalias in, i64 n, i64 stride)`:
// out[i*stride] = in[i*stride] * 2 + 1 for i < n, where stride is a
// parameter (stride_param) or the constant 1 -- the two inner loops of a
// fused kernel, the general one and the unit-stride one.
void add_scaled_loop(llvm::Module& m, const std::string& name, bool stride_param) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  auto* f32 = b.getFloatTy();
  auto* i64 = b.getInt64Ty();
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, i64, i64}, false);
  auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, &m);
  fn->addParamAttr(0, llvm::Attribute::NoAlias);
  fn->addParamAttr(1, llvm::Attribute::NoAlias);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", fn);
  llvm::Value *out = fn->getArg(0), *in = fn->getArg(1), *n = fn->getArg(2);
  b.SetInsertPoint(entry);
  b.CreateCondBr(b.CreateICmpSGT(n, b.getInt64(0)), loop, exit);
  b.SetInsertPoint(loop);
  auto* i = b.CreatePHI(i64, 2, "i");
  i->addIncoming(b.getInt64(0), entry);
  llvm::Value* at = stride_param ? b.CreateMul(i, fn->getArg(3)) : static_cast<llvm::Value*>(i);
  llvm::Value* x = b.CreateLoad(f32, b.CreateInBoundsGEP(f32, in, at));
  llvm::Value* y = b.CreateFAdd(b.CreateFMul(x, llvm::ConstantFP::get(f32, 2.0)), llvm::ConstantFP::get(f32, 1.0));
  b.CreateStore(y, b.CreateInBoundsGEP(f32, out, at));
  auto* next = b.CreateAdd(i, b.getInt64(1), "i.next", true, true);
  i->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpSLT(next, n), loop, exit);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
}

std::unique_ptr<llvm::Module> unit_and_strided_module(llvm::LLVMContext& ctx) {
  auto m = std::make_unique<llvm::Module>("unit_and_strided", ctx);
  add_scaled_loop(*m, "unit", false);
  add_scaled_loop(*m, "strided", true);
  return m;
}
using ScaledFn = void(float*, const float*, std::int64_t, std::int64_t);

std::string fmt_scale(float scale) { return "scale by " + std::to_string(scale); }

bool has_vector_values(const llvm::Function& f) {
  for (const llvm::BasicBlock& bb : f)
    for (const llvm::Instruction& inst : bb)
      if (inst.getType()->isVectorTy()) return true;
  return false;
}

OrcJitOptions options_in(const TempDir& d, VectorMath vm = VectorMath::automatic) {
  OrcJitOptions o;
  o.cache = std::make_shared<KernelCache>(KernelCache::Options{d.path, true});
  o.vector_math = vm;
  return o;
}

template <class T>
double median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void check_axpy(const JitKernel& k) {
  REQUIRE(k.address != nullptr);
  for (std::int64_t n : {0, 1, 7, 16, 1003}) {
    std::vector<float> x(n), y(n), want(n);
    for (std::int64_t i = 0; i < n; ++i) {
      x[i] = 0.25f * static_cast<float>(i) - 3.0f;
      y[i] = 1.0f / static_cast<float>(i + 1);
      want[i] = 1.5f * x[i] + y[i];
    }
    k.as<AxpyFn>()(y.data(), x.data(), 1.5f, n);
    for (std::int64_t i = 0; i < n; ++i) REQUIRE(y[i] == want[i]);
  }
}

std::vector<char> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("host target and LLVM version name the compiler and CPU", "[jit][orc]") {
  CHECK(tessel::llvm_version().rfind("LLVM 15.", 0) == 0);
  std::string t = tessel::host_target();
  CHECK(t.find("x86_64") != std::string::npos);
  CHECK(t.find(';') != std::string::npos);
  std::printf("host target: %.120s...\n", t.c_str());
}

// Kernel selects test data: x86's cmov converter would make branches of
// those with a load operand, which mispredict (see keep_selects_branch_free).
TEST_CASE("a JIT leaves selects branch-free: x86's cmov converter is off", "[jit][orc]") {
  TempDir d;
  OrcJit jit(options_in(d));
  auto& options = llvm::cl::getRegisteredOptions();
  auto it = options.find("x86-cmov-converter");
  REQUIRE(it != options.end());  // an x86 host: the backend registers it
  CHECK_FALSE(static_cast<llvm::cl::opt<bool>*>(it->second)->getValue());
}

TEST_CASE("an IRBuilder axpy is compiled, linked and runs", "[jit][orc]") {
  TempDir d;
  OrcJit jit(options_in(d));
  auto key = jit.make_key("axpy v1");
  int builds = 0;
  JitKernel k = jit.get_or_compile(key, "axpy", [&](llvm::LLVMContext& ctx) {
    ++builds;
    return axpy_module(ctx);
  });
  CHECK(k.origin == CacheOrigin::compiled);
  CHECK(k.compile_ms > 0);
  check_axpy(k);

  // Asking again is a lookup in this process: no build, same function.
  JitKernel again = jit.get_or_compile(key, "axpy", [&](llvm::LLVMContext& ctx) {
    ++builds;
    return axpy_module(ctx);
  });
  CHECK(again.origin == CacheOrigin::memory);
  CHECK(again.address == k.address);
  CHECK(builds == 1);
  CHECK(jit.cache().stats().compiles == 1);
  CHECK(jit.stats().objects_linked == 1);
}

TEST_CASE("add_module takes a module built beforehand", "[jit][orc]") {
  TempDir d;
  OrcJit jit(options_in(d));
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = axpy_module(*ctx);
  JitKernel k = jit.add_module(jit.make_key("axpy v1"), "axpy", std::move(ctx), std::move(m));
  CHECK(k.origin == CacheOrigin::compiled);
  check_axpy(k);
}

TEST_CASE("a fresh JIT on the same folder loads from disk without LLVM", "[jit][orc]") {
  TempDir d;
  double first_ms, second_ms;
  {
    OrcJit jit(options_in(d));
    auto t0 = std::chrono::steady_clock::now();
    JitKernel k = jit.get_or_compile(jit.make_key("axpy v1"), "axpy", axpy_module);
    first_ms = ms_since(t0);
    CHECK(k.origin == CacheOrigin::compiled);
    check_axpy(k);
  }
  OrcJit jit(options_in(d));
  bool built = false;
  auto t0 = std::chrono::steady_clock::now();
  JitKernel k = jit.get_or_compile(jit.make_key("axpy v1"), "axpy", [&](llvm::LLVMContext& ctx) {
    built = true;
    return axpy_module(ctx);
  });
  second_ms = ms_since(t0);
  CHECK(k.origin == CacheOrigin::disk);
  CHECK_FALSE(built);
  CHECK(k.compile_ms == 0);
  auto s = jit.cache().stats();
  CHECK(s.disk_hits == 1);
  CHECK(s.compiles == 0);
  CHECK(jit.stats().compiles == 0);
  check_axpy(k);
  std::printf("axpy: first JIT %.2f ms (compile), fresh JIT %.3f ms (disk hit)\n", first_ms,
              second_ms);
}

TEST_CASE("a corrupt object entry is recompiled, never run", "[jit][orc]") {
  TempDir d;
  std::filesystem::path entry;
  {
    OrcJit jit(options_in(d));
    auto key = jit.make_key("axpy v1");
    jit.get_or_compile(key, "axpy", axpy_module);
    entry = jit.cache().entry_path(key);
  }
  auto raw = read_file(entry);
  REQUIRE(raw.size() > KernelCache::kHeaderSize + 64);
  raw[KernelCache::kHeaderSize + (raw.size() - KernelCache::kHeaderSize) / 2] ^= 0x5a;
  {
    std::ofstream f(entry, std::ios::binary | std::ios::trunc);
    f.write(raw.data(), static_cast<std::streamsize>(raw.size()));
  }
  OrcJit jit(options_in(d));
  JitKernel k = jit.get_or_compile(jit.make_key("axpy v1"), "axpy", axpy_module);
  CHECK(k.origin == CacheOrigin::compiled);
  auto s = jit.cache().stats();
  CHECK(s.corrupt_dropped == 1);
  CHECK(s.compiles == 1);
  check_axpy(k);
  // The recompiled object replaced the bad entry.
  jit.cache().flush();
  OrcJit third(options_in(d));
  CHECK(third.get_or_compile(third.make_key("axpy v1"), "axpy", axpy_module).origin ==
        CacheOrigin::disk);
}

TEST_CASE("a cached object that lacks the kernel's symbol is dropped and recompiled", "[jit][orc]") {
  // Two builds that name one key's kernel differently share a cache folder:
  // the entry passes its checksum but cannot serve the other's symbol.
  TempDir d;
  {
    OrcJit jit(options_in(d));
    jit.get_or_compile(jit.make_key("shared key"), "axpy", axpy_module);
    jit.cache().flush();
  }
  auto add = [](llvm::LLVMContext& ctx) {
    return elementwise_module(ctx, "add2", 2, 0, [](auto& b, auto& in, auto&) { return b.CreateFAdd(in[0], in[1]); });
  };
  OrcJit jit(options_in(d));
  JitKernel k = jit.get_or_compile(jit.make_key("shared key"), "add2", add);
  CHECK(k.origin == CacheOrigin::compiled);
  CHECK(jit.cache().stats().compiles == 1);
  using Fn = void(float*, const float*, const float*, std::int64_t);
  float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, out[3];
  k.as<Fn>()(out, a, b, 3);
  CHECK(out[2] == 9.0f);
  jit.cache().flush();
  OrcJit third(options_in(d));  // the entry now holds the recompiled object
  CHECK(third.get_or_compile(third.make_key("shared key"), "add2", add).origin == CacheOrigin::disk);
}

TEST_CASE("kernels may reuse symbol names under different keys", "[jit][orc]") {
  TempDir d;
  OrcJit jit(options_in(d));
  auto add = [](llvm::LLVMContext& ctx) {
    return elementwise_module(ctx, "k", 2, 0,
                              [](auto& b, auto& in, auto&) { return b.CreateFAdd(in[0], in[1]); });
  };
  auto mul = [](llvm::LLVMContext& ctx) {
    return elementwise_module(ctx, "k", 2, 0,
                              [](auto& b, auto& in, auto&) { return b.CreateFMul(in[0], in[1]); });
  };
  using Fn = void(float*, const float*, const float*, std::int64_t);
  auto* fadd = jit.get_or_compile(jit.make_key("add"), "k", add).as<Fn>();
  auto* fmul = jit.get_or_compile(jit.make_key("mul"), "k", mul).as<Fn>();
  float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, out[3];
  fadd(out, a, b, 3);
  CHECK(out[2] == 9.0f);
  fmul(out, a, b, 3);
  CHECK(out[2] == 18.0f);
}

TEST_CASE("8 threads asking for one kernel compile and link it once", "[jit][orc]") {
  TempDir d;
  OrcJit jit(options_in(d));
  auto key = jit.make_key("fused v1");
  std::atomic<int> builds{0};
  std::latch start(8);
  std::vector<void*> addrs(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      addrs[t] = jit.get_or_compile(key, "fused", [&](llvm::LLVMContext& ctx) {
                      builds.fetch_add(1);
                      return fused_module(ctx);
                    }).address;
    });
  for (auto& th : threads) th.join();
  CHECK(builds == 1);
  for (void* a : addrs) CHECK(a == addrs[0]);
  CHECK(jit.cache().stats().compiles == 1);
  CHECK(jit.stats().objects_linked == 1);

  const int n = 1001;
  std::vector<float> a(n), b(n), c(n), dd(n), out(n);
  for (int i = 0; i < n; ++i) {
    a[i] = std::sin(0.1f * i);
    b[i] = 2.0f;
    c[i] = -0.25f;
    dd[i] = 0.5f * i;
  }
  reinterpret_cast<FusedFn*>(addrs[0])(out.data(), a.data(), b.data(), c.data(), dd.data(), n);
  for (int i = 0; i < n; ++i) {
    float t = a[i] * b[i] + c[i];
    REQUIRE(out[i] == (t > 0 ? t : 0.0f) * dd[i]);
  }
}

TEST_CASE("exp, log and tanh vectorize through a vector math library", "[jit][orc]") {
  const int n = 4099;
  std::vector<float> x(n), out(n);
  for (int i = 0; i < n; ++i) x[i] = 0.01f + 3.0f * static_cast<float>(i) / n;
  for (VectorMath vm : {VectorMath::none, VectorMath::libmvec, VectorMath::sleef,
                        VectorMath::automatic}) {
    TempDir d;
    OrcJit jit(options_in(d, vm));
    INFO("options " << jit.options_string());
    auto key = jit.make_key("math v1");
    JitKernel k = jit.get_or_compile(key, "math", math_module);
    k.as<MathFn>()(out.data(), x.data(), 0.5f, n);
    for (int i = 0; i < n; ++i) {
      double want = std::tanh(std::exp(double(x[i])) * 0.5) + std::log(double(x[i]));
      REQUIRE(out[i] == Approx(want).epsilon(1e-5).margin(1e-6));
    }
    // The object calls the library's vector entry points.
    auto obj = jit.cache().get(key);
    REQUIRE(obj.has_value());
    std::string bytes(obj->begin(), obj->end());
    if (jit.vector_math() == VectorMath::sleef) {
      CHECK(bytes.find("Sleef_expf") != std::string::npos);
      CHECK(bytes.find("Sleef_tanhf") != std::string::npos);
    } else if (jit.vector_math() == VectorMath::libmvec) {
      CHECK(bytes.find("_ZGV") != std::string::npos);
    } else {
      CHECK(bytes.find("Sleef_") == std::string::npos);
      CHECK(bytes.find("_ZGV") == std::string::npos);
    }
    std::printf("vector math '%s' -> %s\n", jit.options_string().c_str(),
                jit.vector_math() == VectorMath::sleef     ? "sleef"
                : jit.vector_math() == VectorMath::libmvec ? "libmvec"
                                                          : "none");
  }
}

TEST_CASE("the lean pipeline vectorizes unit-stride loops and leaves run-time strides scalar", "[jit][orc]") {
  TempDir d;
  OrcJitOptions lean = options_in(d, VectorMath::none), o3 = lean;
  o3.lean = false;
  for (bool is_lean : {true, false}) {
    INFO((is_lean ? "lean" : "O3") << " pipeline");
    OrcJit jit(is_lean ? lean : o3);
    // TESSEL_JIT_PIPELINE=o3 in the environment makes every JIT use O3.
    const bool lean_active = jit.options_string().find(";lean") != std::string::npos;
    CHECK((lean_active || !is_lean || std::getenv("TESSEL_JIT_PIPELINE")));
    llvm::LLVMContext ctx;
    auto m = unit_and_strided_module(ctx);
    REQUIRE_FALSE(jit.compile_object(*m).empty());  // optimizes m in place
    CHECK(has_vector_values(*m->getFunction("unit")));
    // O3 versions the strided loop on stride == 1 and vectorizes that copy,
    // which a fused kernel never runs (it has its own unit-stride loop).
    CHECK(has_vector_values(*m->getFunction("strided")) == !lean_active);
  }

  // Both loops compute the same values, for every stride.
  OrcJit jit(lean);
  JitKernel k = jit.get_or_compile(jit.make_key("unit and strided"), "unit", unit_and_strided_module);
  JitKernel ks = jit.get_or_compile(jit.make_key("unit and strided"), "strided", unit_and_strided_module);
  REQUIRE(k.address != ks.address);
  for (std::int64_t stride : {1, 3, 0}) {
    for (std::int64_t n : {1, 7, 64, 1001}) {
      INFO("stride " << stride << " n " << n);
      const std::int64_t len = stride == 0 ? 1 : n * stride;
      std::vector<float> in(static_cast<size_t>(len)), out(static_cast<size_t>(len), -5.0f);
      for (std::int64_t i = 0; i < len; ++i) in[static_cast<size_t>(i)] = 0.37f * static_cast<float>(i) - 4.0f;
      ks.as<ScaledFn>()(out.data(), in.data(), n, stride);
      for (std::int64_t i = 0; i < len; ++i) {
        const float want = stride != 0 && i % stride != 0 ? -5.0f : in[static_cast<size_t>(i)] * 2.0f + 1.0f;
        REQUIRE(out[static_cast<size_t>(i)] == want);
      }
      if (stride == 1) {
        std::vector<float> unit_out(static_cast<size_t>(n));
        k.as<ScaledFn>()(unit_out.data(), in.data(), n, 0);
        REQUIRE(unit_out == out);
      }
    }
  }
}

TEST_CASE("compile_object for an ObjectTarget writes a relocatable object and links nothing", "[jit][orc]") {
  TempDir d;
  OrcJit jit(options_in(d, VectorMath::none));
  llvm::LLVMContext ctx;
  auto m = axpy_module(ctx);
  std::vector<char> obj = jit.compile_object(*m, {.cpu = "host"});
  REQUIRE(obj.size() > 64);
  CHECK(std::string(obj.data(), 4) == "\x7f" "ELF");
  CHECK(obj[16] == 1);  // e_type ET_REL (little-endian): a relocatable object
  CHECK_FALSE(m->getTargetTriple().empty());  // set for the target, as the JIT's own compiles do
  CHECK(jit.linked_kernels() == 0);
}

TEST_CASE("threads compiling different kernels at once each get a working kernel", "[jit][orc]") {
  // Concurrent compiles borrow separate target machines; each comes back for reuse.
  TempDir d;
  OrcJit jit(options_in(d, VectorMath::none));
  constexpr int kThreads = 4, kPerThread = 3;
  std::latch start(kThreads);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int j = 0; j < kPerThread; ++j) {
        const float scale = static_cast<float>(t * kPerThread + j + 2);
        JitKernel k = jit.get_or_compile(jit.make_key(fmt_scale(scale)), "k", [&](llvm::LLVMContext& ctx) {
          return elementwise_module(ctx, "k", 1, 0, [scale](auto& b, auto& in, auto&) {
            return b.CreateFMul(in[0], llvm::ConstantFP::get(b.getFloatTy(), scale));
          });
        });
        std::vector<float> x(333), y(333);
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
        k.as<void(float*, const float*, std::int64_t)>()(y.data(), x.data(), 333);
        for (size_t i = 0; i < x.size(); ++i)
          if (y[i] != x[i] * scale) wrong.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong.load() == 0);
  CHECK(jit.stats().compiles == kThreads * kPerThread);
}

TEST_CASE("JIT options and the host are part of the key", "[jit][orc]") {
  TempDir d;
  OrcJitOptions o2 = options_in(d);
  o2.opt_level = 2;
  OrcJitOptions fast = options_in(d);
  fast.fast_math = true;
  OrcJit a(options_in(d)), b(o2), c(fast);
  CHECK(a.make_key("src") == OrcJit(options_in(d)).make_key("src"));
  CHECK(a.make_key("src") != b.make_key("src"));
  CHECK(a.make_key("src") != c.make_key("src"));
  CHECK(a.make_key("src") != a.make_key("src", "shape=4x4"));
  CHECK(a.options_string().find("O3") != std::string::npos);
}

TEST_CASE("bad modules and missing symbols are CompileErrors", "[jit][orc]") {
  TempDir d;
  OrcJit jit(options_in(d));
  auto broken = [](llvm::LLVMContext& ctx) {
    auto m = std::make_unique<llvm::Module>("broken", ctx);
    auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false);
    auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, "broken", m.get());
    llvm::BasicBlock::Create(ctx, "entry", fn);  // no terminator
    return m;
  };
  CHECK_THROWS_AS(jit.get_or_compile(jit.make_key("broken"), "broken", broken),
                  tessel::CompileError);
  CHECK_THROWS_AS(jit.get_or_compile(jit.make_key("axpy v1"), "no_such_symbol", axpy_module),
                  tessel::CompileError);
  CHECK_THROWS_AS(jit.get_or_compile(jit.make_key("null"), "x",
                                     [](llvm::LLVMContext&) { return nullptr; }),
                  tessel::CompileError);
  // Nothing bad was cached.
  jit.cache().flush();
  CHECK(jit.cache().stats().disk_writes == 1);  // only axpy, which is valid
}

// Not a pass/fail test: prints the numbers the compile_latency figure needs.
TEST_CASE("timing: ORC compile and disk-cache hit of a small fused kernel", "[jit][orc][timing]") {
  TempDir d;
  const int kernels = 15;
  std::vector<double> compile_ms, compile_total_ms, hit_ms, hit_load_ms;
  tessel::OrcJitStats before, after;
  {
    OrcJit jit(options_in(d));
    // One warm-up so one-time LLVM initialization is not counted.
    jit.get_or_compile(jit.make_key("warm-up"), "fused", [](auto& ctx) { return fused_module(ctx); });
    before = jit.stats();
    for (int i = 0; i < kernels; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      JitKernel k = jit.get_or_compile(jit.make_key("fused #" + std::to_string(i)), "fused",
                                       [](auto& ctx) { return fused_module(ctx); });
      compile_total_ms.push_back(ms_since(t0));
      compile_ms.push_back(k.compile_ms);
      REQUIRE(k.origin == CacheOrigin::compiled);
    }
    after = jit.stats();
  }
  REQUIRE(after.compiles - before.compiles == kernels);
  auto per_kernel = [&](double tessel::OrcJitStats::*f) { return (after.*f - before.*f) / kernels; };
  // The phases are parts of the compile time.
  CHECK(per_kernel(&tessel::OrcJitStats::optimize_ms_total) > 0);
  CHECK(per_kernel(&tessel::OrcJitStats::codegen_ms_total) > 0);
  CHECK(per_kernel(&tessel::OrcJitStats::target_machine_ms_total) +
            per_kernel(&tessel::OrcJitStats::optimize_ms_total) +
            per_kernel(&tessel::OrcJitStats::codegen_ms_total) <=
        per_kernel(&tessel::OrcJitStats::compile_ms_total) * 1.0001);
  {
    OrcJit jit(options_in(d));
    jit.get_or_compile(jit.make_key("warm-up"), "fused", [](auto& ctx) { return fused_module(ctx); });
    for (int i = 0; i < kernels; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      JitKernel k = jit.get_or_compile(jit.make_key("fused #" + std::to_string(i)), "fused",
                                       [](auto& ctx) { return fused_module(ctx); });
      hit_ms.push_back(ms_since(t0));
      hit_load_ms.push_back(k.load_ms);
      REQUIRE(k.origin == CacheOrigin::disk);
    }
    CHECK(jit.cache().stats().compiles == 0);
  }
  std::printf(
      "compile_latency relu(a*b+c)*d, %d kernels: ORC optimize+codegen median %.2f ms, "
      "whole miss (build IR + compile + cache write + link) median %.2f ms; disk-cache hit "
      "median %.3f ms (link %.3f ms)\n",
      kernels, median(compile_ms), median(compile_total_ms), median(hit_ms), median(hit_load_ms));
  std::printf(
      "  mean per compiled kernel: build IR %.3f ms, target machine %.3f ms, optimize %.2f ms, codegen %.2f ms, "
      "link %.3f ms\n",
      per_kernel(&tessel::OrcJitStats::emit_ms_total), per_kernel(&tessel::OrcJitStats::target_machine_ms_total),
      per_kernel(&tessel::OrcJitStats::optimize_ms_total), per_kernel(&tessel::OrcJitStats::codegen_ms_total),
      per_kernel(&tessel::OrcJitStats::link_ms_total));
}

#else  // !TESSEL_HAS_LLVM

TEST_CASE("ORC JIT tests need LLVM", "[jit][orc]") {
  SUCCEED("built without LLVM 15: the CPU JIT is off, the ref backend runs everything");
}

#endif
