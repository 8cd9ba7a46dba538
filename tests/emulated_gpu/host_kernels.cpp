#include "host_kernels.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>

#ifndef TESSEL_EMU_DEFAULT_CXX
#define TESSEL_EMU_DEFAULT_CXX "c++"
#endif
#ifndef TESSEL_EMU_INCLUDE_DIR
#error "TESSEL_EMU_INCLUDE_DIR must name the folder of cuda_emulation.h"
#endif

extern char** environ;

namespace tessel_emu {
namespace {

namespace fs = std::filesystem;

// Bumped whenever the generated code changes, so older cached objects are not reused.
constexpr std::string_view kGeneratorVersion = "tessel-emulated-cuda launchers v1";
constexpr std::string_view kBegin = "//@tessel-cuda-source-begin";
constexpr std::string_view kEnd = "//@tessel-cuda-source-end";

std::atomic<unsigned long long> g_compiles{0};

bool trace() {
  static const bool on = [] {
    const char* t = std::getenv("TESSEL_EMU_TRACE");
    return t && *t && std::strcmp(t, "0") != 0;
  }();
  return on;
}

// 128 bits from two 64-bit FNV-1a passes with different offsets; plenty for a cache key.
std::string hash_hex(std::string_view text) {
  std::uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull ^ text.size();
  for (unsigned char c : text) {
    h1 = (h1 ^ c) * 0x100000001b3ull;
    h2 = (h2 ^ c) * 0x00000100000001b3ull + 0x9e3779b97f4a7c15ull;
  }
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h1),
                static_cast<unsigned long long>(h2));
  return buf;
}

std::string read_file(const fs::path& p, bool* ok) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  *ok = static_cast<bool>(in) || in.eof();
  return s.str();
}

// Written under a private name and renamed into place, so a reader (another
// test process sharing the directory) sees all of the file or none of it.
bool publish(const fs::path& dst, std::string_view content) {
  static std::atomic<unsigned> counter{0};
  fs::path tmp = dst;
  tmp += ".tmp" + std::to_string(getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), dst.c_str()) == 0;
}

fs::path unique_temp(const fs::path& dir, std::string_view stem, std::string_view ext) {
  static std::atomic<unsigned> counter{0};
  return dir / (std::string(".") + std::string(stem) + "." + std::to_string(getpid()) + "." +
                std::to_string(counter++) + std::string(ext));
}

fs::path cache_dir() {
  if (const char* d = std::getenv("TESSEL_EMU_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("TESSEL_CACHE_DIR"); d && *d) return fs::path(d) / "emulated-cuda";
  const char* home = std::getenv("HOME");
  if (!home || !*home) {
    if (const passwd* pw = getpwuid(getuid())) home = pw->pw_dir;
  }
  return fs::path(home && *home ? home : "/tmp") / ".cache" / "tessel" / "emulated-cuda";
}

// Runs argv with stdout and stderr into `log`; the exit status, or -1 when it did not run.
int run(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    std::ofstream(log, std::ios::app) << "cannot run " << args[0] << ": " << std::strerror(rc) << "\n";
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Toolchain {
  std::string compiler;
  std::vector<std::string> flags;  // for both the precompiled header and the kernels
  std::string header;              // cuda_emulation.h's text
  bool header_ok = false;
  std::string flags_text;          // part of every key
};

const Toolchain& toolchain() {
  static const Toolchain t = [] {
    Toolchain t;
    const char* cxx = std::getenv("TESSEL_EMU_CXX");
    t.compiler = cxx && *cxx ? cxx : TESSEL_EMU_DEFAULT_CXX;
    // -Og: with the precompiled header it compiles as fast as -O0 (~20% faster
    // than -O1) and its kernels run nearly as fast as -O1's (-O0's take ~1.8x).
    t.flags = {"-std=c++20", "-Og", "-fPIC", "-w", "-fvisibility=hidden", "-I" TESSEL_EMU_INCLUDE_DIR};
    t.header = read_file(fs::path(TESSEL_EMU_INCLUDE_DIR) / "cuda_emulation.h", &t.header_ok);
    t.flags_text = t.compiler;
    for (const std::string& f : t.flags) t.flags_text += " " + f;
    return t;
  }();
  return t;
}

// A precompiled header of cuda_emulation.h, built once per cache directory (it
// halves a small kernel's compile). Returns the header to pass to -include, or
// "" to compile without (disabled, or it could not be built).
std::string precompiled_header(const fs::path& dir) {
  static std::mutex mu;
  static std::map<std::string, std::string> built;  // cache dir -> header
  if (const char* e = std::getenv("TESSEL_EMU_PCH"); e && std::strcmp(e, "0") == 0) return "";
  const Toolchain& tc = toolchain();
  std::lock_guard lock(mu);
  if (auto it = built.find(dir.string()); it != built.end()) return it->second;
  const fs::path pch_dir = dir / ("pch-" + hash_hex(std::string(kGeneratorVersion) + '\0' + tc.flags_text + '\0' + tc.header));
  const fs::path header = pch_dir / "emu_pch.h", gch = pch_dir / "emu_pch.h.gch";
  std::error_code ec;
  std::string result;
  if (fs::exists(gch, ec) && fs::exists(header, ec)) {
    result = header.string();
  } else {
    fs::create_directories(pch_dir, ec);
    const std::string text = "#include \"" TESSEL_EMU_INCLUDE_DIR "/cuda_emulation.h\"\n#include <type_traits>\n#include <utility>\n";
    if (publish(header, text)) {
      const fs::path tmp = unique_temp(pch_dir, "emu_pch.h.gch", ""), log = unique_temp(pch_dir, "pch", ".log");
      std::vector<std::string> args{tc.compiler};
      args.insert(args.end(), tc.flags.begin(), tc.flags.end());
      args.insert(args.end(), {"-x", "c++-header", header.string(), "-o", tmp.string()});
      const auto start = std::chrono::steady_clock::now();
      if (run(args, log) == 0 && std::rename(tmp.c_str(), gch.c_str()) == 0) {
        result = header.string();
        if (trace())
          std::fprintf(stderr, "[tessel emu] precompiled cuda_emulation.h in %.0f ms\n",
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      } else {
        bool ok = false;
        std::fprintf(stderr, "tessel emulated GPU: cannot precompile cuda_emulation.h (kernels compile without it):\n%s\n",
                     read_file(log, &ok).c_str());
        fs::remove(tmp, ec);
      }
      fs::remove(log, ec);
    }
  }
  built.emplace(dir.string(), result);
  return result;
}

// `source` with comments blanked out (string and character literals kept), so
// a commented-out kernel is not taken for one.
std::string without_comments(std::string_view s) {
  std::string out(s);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    if (c == '"' || c == '\'') {
      for (++i; i < out.size() && out[i] != c; ++i)
        if (out[i] == '\\') ++i;
    } else if (c == '/' && i + 1 < out.size() && out[i + 1] == '/') {
      for (; i < out.size() && out[i] != '\n'; ++i) out[i] = ' ';
    } else if (c == '/' && i + 1 < out.size() && out[i + 1] == '*') {
      std::size_t end = out.find("*/", i + 2);
      end = end == std::string::npos ? out.size() : end + 2;
      for (; i < end; ++i)
        if (out[i] != '\n') out[i] = ' ';
      --i;
    }
  }
  return out;
}

bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string generate_unit(const std::string& source, const std::vector<std::string>& kernels) {
  std::string u;
  u += "// Generated by the tessel emulated GPU: a PTX image's CUDA source and its launchers.\n";
  u += "#ifndef TESSEL_CUDA_EMULATION\n#include \"cuda_emulation.h\"\n#endif\n";
  u += "#line 1 \"kernel.cu\"\n";
  u += source;
  if (!source.empty() && source.back() != '\n') u += '\n';
  u += R"(#line 1 "tessel-emulated-launchers"
namespace tessel_emu_launch {
// cuLaunchKernel's params[i] points at the i-th argument, of the parameter's type.
template <class... P, std::size_t... I>
void call(void (*kernel)(P...), void** params, dim3 grid, dim3 block, std::size_t shared, std::index_sequence<I...>) {
  if constexpr (sizeof...(P) > 0) {
    if (!params) throw emu::EmulationError("cuLaunchKernel: kernelParams is null but the kernel takes parameters");
  }
  emu::launch(emu::LaunchOptions{.dynamic_shared_bytes = shared}, kernel, grid, block,
              *static_cast<std::remove_cvref_t<P>*>(params[I])...);
}
template <class... P>
void call(void (*kernel)(P...), void** params, dim3 grid, dim3 block, std::size_t shared) {
  call(kernel, params, grid, block, shared, std::index_sequence_for<P...>{});
}
}  // namespace tessel_emu_launch
)";
  for (const std::string& k : kernels) {
    u += "extern \"C\" __attribute__((visibility(\"default\"))) void tessel_emu_launch_" + k +
         "(void** params, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, "
         "std::size_t shared_bytes) {\n  tessel_emu_launch::call(" +
         k + ", params, dim3(gx, gy, gz), dim3(bx, by, bz), shared_bytes);\n}\n";
  }
  return u;
}

std::shared_ptr<HostModule> open_module(const fs::path& so, const std::vector<std::string>& kernels,
                                        std::string* why) {
  void* lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    *why = e ? e : "dlopen failed";
    return nullptr;
  }
  share_fiber_stacks(lib);
  auto m = std::make_shared<HostModule>();
  m->library = lib;
  m->kernels = kernels;
  return m;
}

LoadResult build(const std::string& key, const std::string& source) {
  LoadResult r;
  const Toolchain& tc = toolchain();
  const std::vector<std::string> kernels = kernel_names(source);
  const fs::path dir = cache_dir();
  const fs::path so = dir / (key + ".so");
  std::error_code ec;
  std::string why;
  if (fs::exists(so, ec)) {
    if ((r.module = open_module(so, kernels, &why))) return r;
  }
  fs::create_directories(dir, ec);
  if (ec && !fs::is_directory(dir)) {
    r.status = LoadStatus::compile_failed;
    r.log = "cannot create the kernel cache directory " + dir.string() + ": " + ec.message();
    return r;
  }
  const std::string pch = precompiled_header(dir);
  const fs::path cpp = dir / (key + ".cpp");
  publish(cpp, generate_unit(source, kernels));
  const fs::path tmp_so = unique_temp(dir, key, ".so"), log = unique_temp(dir, key, ".log");
  std::vector<std::string> args{tc.compiler};
  args.insert(args.end(), tc.flags.begin(), tc.flags.end());
  if (!pch.empty()) args.insert(args.end(), {"-include", pch});
  args.insert(args.end(), {"-shared", cpp.string(), "-o", tmp_so.string()});
  const auto start = std::chrono::steady_clock::now();
  const int rc = run(args, log);
  ++g_compiles;
  bool ok = false;
  std::string output = read_file(log, &ok);
  fs::remove(log, ec);
  if (rc != 0) {
    fs::remove(tmp_so, ec);
    r.status = LoadStatus::compile_failed;
    r.log = "the host compiler rejected the kernel source (" + cpp.string() + "):\n" + output;
    std::fprintf(stderr, "tessel emulated GPU: compiling %s failed:\n%s\n", cpp.c_str(), output.c_str());
    return r;
  }
  if (std::rename(tmp_so.c_str(), so.c_str()) != 0) {
    r.status = LoadStatus::compile_failed;
    r.log = "cannot publish " + so.string() + ": " + std::strerror(errno);
    fs::remove(tmp_so, ec);
    return r;
  }
  if (trace()) {
    std::string names;
    for (const std::string& k : kernels) names += (names.empty() ? "" : ", ") + k;
    std::fprintf(stderr, "[tessel emu] compiled %s (%s) in %.0f ms%s\n", key.c_str(), names.c_str(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                 pch.empty() ? " without a precompiled header" : "");
  }
  if (!(r.module = open_module(so, kernels, &why))) {
    r.status = LoadStatus::compile_failed;
    r.log = "cannot load the compiled kernels " + so.string() + ": " + why;
  }
  return r;
}

}  // namespace

Launcher HostModule::launcher(const char* name) const {
  if (!library || !name) return nullptr;
  const std::string symbol = std::string("tessel_emu_launch_") + name;
  return reinterpret_cast<Launcher>(dlsym(library, symbol.c_str()));
}

bool extract_source(std::string_view image, std::string* source) {
  std::size_t at = image.find(kBegin);
  while (at != std::string_view::npos && at > 0 && image[at - 1] != '\n') at = image.find(kBegin, at + 1);
  if (at == std::string_view::npos) return false;
  at = image.find('\n', at);
  if (at == std::string_view::npos) return false;
  ++at;
  std::string out;
  while (at < image.size()) {
    std::size_t nl = image.find('\n', at);
    if (nl == std::string_view::npos) nl = image.size();
    const std::string_view line = image.substr(at, nl - at);
    if (line == kEnd) {
      *source = std::move(out);
      return true;
    }
    if (line.substr(0, 3) != "//@") return false;  // the block was cut short
    out.append(line.substr(3));
    out += '\n';
    at = nl + 1;
  }
  return false;  // no end marker
}

std::vector<std::string> kernel_names(std::string_view source) {
  const std::string s = without_comments(source);
  std::vector<std::string> names;
  auto skip_space = [&](std::size_t i) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    return i;
  };
  constexpr std::string_view kGlobal = "__global__";
  for (std::size_t at = s.find(kGlobal); at != std::string::npos; at = s.find(kGlobal, at + 1)) {
    if ((at > 0 && ident_char(s[at - 1])) || ident_char(s[at + kGlobal.size()])) continue;
    // extern "C" right before (whitespace between the words allowed)
    std::size_t b = at;
    while (b > 0 && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\n' || s[b - 1] == '\r')) --b;
    if (b < 3 || s.compare(b - 3, 3, "\"C\"") != 0) continue;
    b -= 3;
    while (b > 0 && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\n' || s[b - 1] == '\r')) --b;
    if (b < 6 || s.compare(b - 6, 6, "extern") != 0 || (b > 6 && ident_char(s[b - 7]))) continue;
    std::size_t i = skip_space(at + kGlobal.size());
    if (s.compare(i, 4, "void") != 0 || ident_char(s[i + 4])) continue;
    i = skip_space(i + 4);
    if (s.compare(i, 17, "__launch_bounds__") == 0) {
      i = s.find(')', i);
      if (i == std::string::npos) break;
      i = skip_space(i + 1);
    }
    std::size_t end = i;
    while (end < s.size() && ident_char(s[end])) ++end;
    if (end == i || (s[i] >= '0' && s[i] <= '9')) continue;
    if (skip_space(end) >= s.size() || s[skip_space(end)] != '(') continue;
    std::string name = s.substr(i, end - i);
    bool seen = false;
    for (const std::string& n : names) seen |= n == name;
    if (!seen) names.push_back(std::move(name));
  }
  return names;
}

LoadResult load_host_module(const void* image) {
  LoadResult r;
  const auto* bytes = static_cast<const unsigned char*>(image);
  if (!image) {
    r.status = LoadStatus::not_ptx_with_source;
    r.log = "tessel emulated GPU: the module image is null";
    return r;
  }
  // Compared byte by byte: a short text image stops at its NUL, which no magic contains.
  auto starts_with = [&](std::initializer_list<unsigned char> magic) {
    std::size_t i = 0;
    for (unsigned char m : magic)
      if (bytes[i++] != m) return false;
    return true;
  };
  if (starts_with({0x7f, 'E', 'L', 'F'}) || starts_with({0x50, 0xed, 0x55, 0xba}) ||
      starts_with({0xb1, 0x43, 0x62, 0x46})) {
    r.status = LoadStatus::cubin;
    r.log = "tessel emulated GPU: the image is a CUBIN/fatbin (machine code for a real GPU); the emulated device "
            "runs only PTX from tessel's NVRTC wrapper, which carries the CUDA source";
    return r;
  }
  std::string source;
  if (!extract_source(reinterpret_cast<const char*>(image), &source)) {
    r.status = LoadStatus::not_ptx_with_source;
    r.log = "tessel emulated GPU: the PTX carries no //@tessel-cuda-source-begin ... //@tessel-cuda-source-end "
            "block (compile it with tessel::cuda::compile so the host can run its CUDA source)";
    return r;
  }
  const Toolchain& tc = toolchain();
  if (!tc.header_ok) {
    r.status = LoadStatus::compile_failed;
    r.log = "tessel emulated GPU: cannot read " TESSEL_EMU_INCLUDE_DIR "/cuda_emulation.h";
    return r;
  }
  const std::string key =
      hash_hex(std::string(kGeneratorVersion) + '\0' + tc.flags_text + '\0' + tc.header + '\0' + source);

  static std::mutex mu;
  static std::map<std::string, std::shared_future<LoadResult>> loaded;
  std::promise<LoadResult> promise;
  std::shared_future<LoadResult> result;
  bool mine = false;
  {
    std::lock_guard lock(mu);
    if (auto it = loaded.find(key); it != loaded.end()) {
      result = it->second;
    } else {
      result = promise.get_future().share();
      loaded.emplace(key, result);
      mine = true;
    }
  }
  if (mine) {
    LoadResult built;
    try {
      built = build(key, source);
    } catch (const std::exception& e) {
      built.status = LoadStatus::compile_failed;
      built.log = std::string("tessel emulated GPU: ") + e.what();
    }
    if (built.status != LoadStatus::ok) {
      std::lock_guard lock(mu);
      loaded.erase(key);  // a later load tries again
    }
    promise.set_value(std::move(built));
  }
  return result.get();
}

unsigned long long host_compiles() { return g_compiles.load(); }

}  // namespace tessel_emu
