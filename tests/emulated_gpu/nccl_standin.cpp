// A host stand-in for libnccl: the entry points tessel loads
// (runtime/cuda/nccl.cpp), for ranks that are threads of one process on the
// emulated devices. A unique id names an in-process clique of ranks;
// ncclCommInitRank blocks until all of them have joined; a collective blocks
// until every rank has called it, and the last to arrive computes it for all
// (with the devices' memory opened through tessel_emu_enter/leave), so a call
// returns with its work done, as everything on the emulated device does.
// Reductions with NCCL's semantics (sum, prod, max, min, avg) over the
// integer types and f32/f64; any type is broadcast and gathered. Selected
// with TESSEL_NCCL=<path> (the emulated driver names it when unset).
//
// What NCCL would refuse is refused here too, with its result code and a
// line on stderr (also ncclGetLastError): a null or destroyed communicator, a
// type, op or root out of range, a buffer that is not inside one allocation
// of the communicator's device, a stream of another device, two ranks of one
// clique on one device, an id not made by this process's ncclGetUniqueId.
// Where NCCL would hang or mix memory, this one reports instead, as an
// asynchronous error (ncclCommGetAsyncError) after the call returns:
// ranks that call different collectives (kind, count, type, op, root) get
// ncclInvalidUsage and nothing is written; a rank waiting longer than the
// stand-in's timeout for the others (300 s; TESSEL_EMULATED_NCCL_TIMEOUT_MS,
// or tessel_emu_nccl_set_timeout_ms) gives up with ncclRemoteError, as a
// real communicator does when a peer is lost -- as it does at once when a
// peer's communicator is destroyed or aborted while others wait.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

extern "C" int tessel_emu_enter(void);
extern "C" void tessel_emu_leave(void);
extern "C" int tessel_emu_range_device(const void* p, std::size_t bytes);
extern "C" int tessel_emu_current_device(void);
extern "C" int tessel_emu_stream_device(const void* stream);

namespace {

using Result = int;
enum : Result {
  Success = 0,
  UnhandledCudaError = 1,
  SystemError = 2,
  InternalError = 3,
  InvalidArgument = 4,
  InvalidUsage = 5,
  RemoteError = 6,
  InProgress = 7,
};
// ncclDataType_t, in order: int8 uint8 int32 uint32 int64 uint64 float16 float32 float64 bfloat16 fp8e4m3 fp8e5m2.
constexpr int kNumTypes = 12;
constexpr std::size_t kTypeSize[kNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
constexpr const char* kTypeName[kNumTypes] = {"int8",    "uint8",    "int32",    "uint32",  "int64",   "uint64",
                                              "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
constexpr int kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5, kFloat32 = 7, kFloat64 = 8;
// ncclRedOp_t
enum RedOp : int { Sum = 0, Prod = 1, Max = 2, Min = 3, Avg = 4, kNumOps = 5 };
constexpr const char* kOpName[kNumOps] = {"sum", "prod", "max", "min", "avg"};
constexpr int kVersion = 22800;  // reads as NCCL 2.28.0

constexpr std::size_t kIdBytes = 128;
struct UniqueId {
  char internal[kIdBytes];
};
constexpr char kIdMagic[16] = "tessel-emu-nccl";

enum class Kind { all_reduce, broadcast, all_gather, reduce_scatter };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce: return "ncclAllReduce";
    case Kind::broadcast: return "ncclBroadcast";
    case Kind::all_gather: return "ncclAllGather";
    case Kind::reduce_scatter: return "ncclReduceScatter";
  }
  return "?";
}

// One rank's part of a collective.
struct Call {
  Kind kind;
  const void* send;
  void* recv;
  std::size_t count;  // as NCCL counts it: per rank for all_gather's send, reduce_scatter's recv
  int type;
  int op;    // reductions
  int root;  // broadcast
  bool same_as(const Call& o) const {
    const bool reduces = kind == Kind::all_reduce || kind == Kind::reduce_scatter;
    return kind == o.kind && count == o.count && type == o.type && (!reduces || op == o.op) &&
           (kind != Kind::broadcast || root == o.root);
  }
  std::string str() const {
    std::string s = std::string(kind_name(kind)) + "(" + std::to_string(count) + " x " + kTypeName[type];
    if (kind == Kind::all_reduce || kind == Kind::reduce_scatter) s += std::string(", ") + kOpName[op];
    if (kind == Kind::broadcast) s += ", root " + std::to_string(root);
    return s + ")";
  }
};

// One collective, from the first rank's arrival until every rank has left it.
struct Round {
  std::vector<std::optional<Call>> calls;
  int arrived = 0, left = 0;
  bool done = false;
  Result failure_code = Success;
  std::string failure;  // why it cannot complete; every rank's communicator reports it
};

struct Communicator;

// The ranks one unique id names.
struct Clique {
  std::mutex mu;
  std::condition_variable changed;
  int nranks = 0;
  int joined = 0;
  bool ready = false;
  std::string init_failure;
  Result init_code = Success;
  std::vector<Communicator*> members;  // by rank
  std::vector<std::string> gone;       // "destroyed" / "aborted" by rank, "" while a member
  std::map<std::uint64_t, Round> rounds;
};

struct Communicator {
  std::shared_ptr<Clique> clique;
  int rank = 0, nranks = 0, device = 0;
  std::uint64_t next = 0;  // the number of this rank's next collective
  int busy = 0;            // calls in progress (under the clique's mutex)
  Result async = Success;  // under the clique's mutex
};

std::mutex g_mu;
std::map<std::string, std::shared_ptr<Clique>> g_cliques;  // by id, until every rank joined
std::set<const Communicator*> g_live;
std::atomic<long> g_timeout_ms{[] {
  const char* e = std::getenv("TESSEL_EMULATED_NCCL_TIMEOUT_MS");
  long v = e && *e ? std::atol(e) : 0;
  return v > 0 ? v : 300000L;
}()};
std::atomic<unsigned long long> g_collectives{0};
thread_local std::string t_last_error;

Result error(Result r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Result error(Result r, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  t_last_error = buf;
  std::fprintf(stderr, "tessel emulated NCCL: %s\n", buf);
  return r;
}

bool live(const Communicator* c) {
  std::lock_guard lock(g_mu);
  return g_live.count(c) != 0;
}

std::chrono::steady_clock::time_point deadline() {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(g_timeout_ms.load());
}

struct Open {
  Open() { tessel_emu_enter(); }
  ~Open() { tessel_emu_leave(); }
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;
};

// ---- arithmetic ----

template <class T>
void combine(T* acc, const T* x, std::size_t n, int op) {
  for (std::size_t i = 0; i < n; ++i) {
    switch (op) {
      case Sum:
      case Avg: acc[i] = static_cast<T>(acc[i] + x[i]); break;
      case Prod: acc[i] = static_cast<T>(acc[i] * x[i]); break;
      case Max: acc[i] = std::max(acc[i], x[i]); break;
      case Min: acc[i] = std::min(acc[i], x[i]); break;
    }
  }
}

template <class T>
void divide(T* acc, std::size_t n, int by) {
  for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] / static_cast<T>(by));
}

bool reducible(int type) {
  switch (type) {
    case kInt8:
    case kUint8:
    case kInt32:
    case kUint32:
    case kInt64:
    case kUint64:
    case kFloat32:
    case kFloat64: return true;
  }
  return false;
}

// acc (n elements) = acc op x, elementwise; Avg sums here and divides in finish_avg.
void reduce_into(void* acc, const void* x, std::size_t n, int type, int op) {
  switch (type) {
    case kInt8: return combine(static_cast<int8_t*>(acc), static_cast<const int8_t*>(x), n, op);
    case kUint8: return combine(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(x), n, op);
    case kInt32: return combine(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op);
    case kUint32: return combine(static_cast<uint32_t*>(acc), static_cast<const uint32_t*>(x), n, op);
    case kInt64: return combine(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op);
    case kUint64: return combine(static_cast<uint64_t*>(acc), static_cast<const uint64_t*>(x), n, op);
    case kFloat32: return combine(static_cast<float*>(acc), static_cast<const float*>(x), n, op);
    case kFloat64: return combine(static_cast<double*>(acc), static_cast<const double*>(x), n, op);
  }
}

void finish_avg(void* acc, std::size_t n, int type, int nranks) {
  switch (type) {
    case kInt8: return divide(static_cast<int8_t*>(acc), n, nranks);
    case kUint8: return divide(static_cast<uint8_t*>(acc), n, nranks);
    case kInt32: return divide(static_cast<int32_t*>(acc), n, nranks);
    case kUint32: return divide(static_cast<uint32_t*>(acc), n, nranks);
    case kInt64: return divide(static_cast<int64_t*>(acc), n, nranks);
    case kUint64: return divide(static_cast<uint64_t*>(acc), n, nranks);
    case kFloat32: return divide(static_cast<float*>(acc), n, nranks);
    case kFloat64: return divide(static_cast<double*>(acc), n, nranks);
  }
}

// The reduction over ranks of `bytes` starting `offset` bytes into each rank's send buffer.
std::vector<unsigned char> reduced(const Round& r, std::size_t offset, std::size_t n, int type, int op) {
  const std::size_t bytes = n * kTypeSize[type];
  std::vector<unsigned char> acc(bytes);
  std::memcpy(acc.data(), static_cast<const unsigned char*>(r.calls[0]->send) + offset, bytes);
  for (std::size_t k = 1; k < r.calls.size(); ++k)
    reduce_into(acc.data(), static_cast<const unsigned char*>(r.calls[k]->send) + offset, n, type, op);
  if (op == Avg) finish_avg(acc.data(), n, type, static_cast<int>(r.calls.size()));
  return acc;
}

// Every rank's part of a round, by the last rank to arrive. Results are
// computed whole before any is written, so in-place calls read clean inputs.
void run(const Round& r) {
  const Call& c0 = *r.calls[0];
  const int nranks = static_cast<int>(r.calls.size());
  const std::size_t es = kTypeSize[c0.type], n = c0.count, bytes = n * es;
  Open open;
  switch (c0.kind) {
    case Kind::all_reduce: {
      std::vector<unsigned char> out = reduced(r, 0, n, c0.type, c0.op);
      for (const auto& c : r.calls) std::memcpy(c->recv, out.data(), bytes);
      break;
    }
    case Kind::broadcast: {
      std::vector<unsigned char> out(bytes);
      std::memcpy(out.data(), r.calls[static_cast<std::size_t>(c0.root)]->send, bytes);
      for (const auto& c : r.calls) std::memcpy(c->recv, out.data(), bytes);
      break;
    }
    case Kind::all_gather: {
      std::vector<unsigned char> out(bytes * static_cast<std::size_t>(nranks));
      for (int k = 0; k < nranks; ++k) std::memcpy(out.data() + bytes * k, r.calls[k]->send, bytes);
      for (const auto& c : r.calls) std::memcpy(c->recv, out.data(), out.size());
      break;
    }
    case Kind::reduce_scatter: {
      std::vector<std::vector<unsigned char>> chunks;
      for (int k = 0; k < nranks; ++k) chunks.push_back(reduced(r, bytes * k, n, c0.type, c0.op));
      for (int k = 0; k < nranks; ++k) std::memcpy(r.calls[k]->recv, chunks[k].data(), bytes);
      break;
    }
  }
}

// ---- checks ----

Result check_buffer(const char* call, const char* what, const void* p, std::size_t bytes, int device) {
  if (!p) return error(InvalidArgument, "%s: %s is NULL", call, what);
  const int d = tessel_emu_range_device(p, bytes);
  if (d < 0)
    return error(InvalidArgument, "%s: %s %p (%zu bytes) is not a valid device pointer: no allocation holds it whole",
                 call, what, p, bytes);
  if (d != device)
    return error(InvalidArgument, "%s: %s allocated on device %d mismatches with NCCL device %d", call, what, d,
                 device);
  return Success;
}

Result check_call(Communicator* comm, const Call& c, void* stream) {
  const char* name = kind_name(c.kind);
  if (!comm) return error(InvalidArgument, "%s: comm is NULL", name);
  if (!live(comm)) return error(InvalidArgument, "%s: comm %p is not a live communicator", name, (void*)comm);
  {
    std::lock_guard lock(comm->clique->mu);
    if (comm->async != Success)
      return error(comm->async, "%s: the communicator failed earlier; abort or destroy it", name);
  }
  if (c.type < 0 || c.type >= kNumTypes) return error(InvalidArgument, "%s: invalid type %d", name, c.type);
  const bool reduces = c.kind == Kind::all_reduce || c.kind == Kind::reduce_scatter;
  if (reduces && (c.op < 0 || c.op >= kNumOps)) return error(InvalidArgument, "%s: invalid reduction %d", name, c.op);
  if (reduces && !reducible(c.type))
    return error(InvalidArgument, "%s: reductions of %s are not emulated (integers, float32 and float64 are)", name,
                 kTypeName[c.type]);
  if (c.kind == Kind::broadcast && (c.root < 0 || c.root >= comm->nranks))
    return error(InvalidArgument, "%s: invalid root %d (nranks %d)", name, c.root, comm->nranks);
  const int sd = tessel_emu_stream_device(stream);
  if (sd == -1)
    return error(UnhandledCudaError, "%s: stream %p is not a live stream: invalid resource handle", name, stream);
  if (sd >= 0 && sd != comm->device)
    return error(UnhandledCudaError, "%s: stream of device %d given to the communicator of device %d", name, sd,
                 comm->device);
  if (c.count == 0) return Success;
  const std::size_t one = c.count * kTypeSize[c.type], all = one * static_cast<std::size_t>(comm->nranks);
  std::size_t send = one, recv = one;
  if (c.kind == Kind::all_gather) recv = all;
  if (c.kind == Kind::reduce_scatter) send = all;
  if (c.kind != Kind::broadcast || c.root == comm->rank)
    if (Result r = check_buffer(name, "sendbuff", c.send, send, comm->device)) return r;
  return check_buffer(name, "recvbuff", c.recv, recv, comm->device);
}

// Marks the rounds in flight failed and wakes their ranks (clique mutex held).
void fail_open_rounds(Clique& cl, Result code, const std::string& why) {
  for (auto& [seq, r] : cl.rounds)
    if (!r.done && r.failure.empty()) {
      r.failure = why;
      r.failure_code = code;
    }
  cl.changed.notify_all();
}

Result collective(Communicator* comm, const Call& c, void* stream) {
  if (Result r = check_call(comm, c, stream)) return r;
  if (c.count == 0) return Success;  // as NCCL: nothing to move, no rendezvous
  Clique& cl = *comm->clique;
  std::unique_lock lock(cl.mu);
  ++comm->busy;
  const std::uint64_t seq = comm->next++;
  Round& r = cl.rounds[seq];
  if (r.calls.empty()) r.calls.resize(static_cast<std::size_t>(cl.nranks));
  r.calls[static_cast<std::size_t>(comm->rank)] = c;
  ++r.arrived;
  for (int k = 0; k < cl.nranks && r.failure.empty(); ++k)
    if (!cl.gone[k].empty()) {
      r.failure = "rank " + std::to_string(k) + "'s communicator was " + cl.gone[k];
      r.failure_code = RemoteError;
    }
  if (r.failure.empty() && r.arrived == cl.nranks) {
    for (int k = 1; k < cl.nranks && r.failure.empty(); ++k)
      if (!r.calls[k]->same_as(*r.calls[0])) {
        r.failure = "ranks called different collectives as their #" + std::to_string(seq + 1) + ": rank 0 " +
                    r.calls[0]->str() + ", rank " + std::to_string(k) + " " + r.calls[k]->str();
        r.failure_code = InvalidUsage;
      }
    if (r.failure.empty()) {
      run(r);
      r.done = true;
      ++g_collectives;
    }
    cl.changed.notify_all();
  } else if (r.failure.empty()) {
    if (!cl.changed.wait_until(lock, deadline(), [&] { return r.done || !r.failure.empty(); })) {
      std::string missing;
      for (int k = 0; k < cl.nranks; ++k)
        if (!r.calls[k]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
      r.failure = "rank(s) " + missing + " did not call collective #" + std::to_string(seq + 1) + " within " +
                  std::to_string(g_timeout_ms.load()) + " ms";
      r.failure_code = RemoteError;
      cl.changed.notify_all();
    }
  }
  const bool ok = r.done;
  if (!ok) {
    comm->async = r.failure_code;
    error(r.failure_code, "%s (rank %d, collective #%llu): %s", kind_name(c.kind), comm->rank,
          static_cast<unsigned long long>(seq + 1), r.failure.c_str());
  }
  // A completed round is dropped by its last rank; a failed one stays, so a
  // rank arriving late finds the failure instead of waiting for the others.
  if (++r.left == cl.nranks && ok) cl.rounds.erase(seq);
  --comm->busy;
  cl.changed.notify_all();
  return Success;  // queued; a failure is the communicator's asynchronous error, as with NCCL
}

// Ends a rank's membership: the others' rounds in flight fail at once.
void leave(Communicator* comm, const char* how) {
  {
    std::lock_guard lock(g_mu);
    g_live.erase(comm);
  }
  Clique& cl = *comm->clique;
  std::unique_lock lock(cl.mu);
  cl.gone[static_cast<std::size_t>(comm->rank)] = how;
  fail_open_rounds(cl, RemoteError, "rank " + std::to_string(comm->rank) + "'s communicator was " + how);
  cl.changed.wait(lock, [&] { return comm->busy == 0; });
  cl.members[static_cast<std::size_t>(comm->rank)] = nullptr;
}

}  // namespace

#define NCCL_API extern "C" __attribute__((visibility("default")))

NCCL_API Result ncclGetVersion(int* version) {
  if (!version) return error(InvalidArgument, "ncclGetVersion: version is NULL");
  *version = kVersion;
  return Success;
}

NCCL_API const char* ncclGetErrorString(Result r) {
  switch (r) {
    case Success: return "no error";
    case UnhandledCudaError: return "unhandled cuda error (the emulated NCCL says more on stderr)";
    case SystemError: return "unhandled system error";
    case InternalError: return "internal error";
    case InvalidArgument: return "invalid argument (the emulated NCCL says more on stderr)";
    case InvalidUsage: return "invalid usage (the emulated NCCL says more on stderr)";
    case RemoteError: return "remote process exited or there was a network error";
    case InProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

NCCL_API const char* ncclGetLastError(Communicator*) { return t_last_error.c_str(); }

NCCL_API Result ncclGetUniqueId(UniqueId* id) {
  if (!id) return error(InvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  static std::atomic<std::uint64_t> serial{0};
  std::memset(id->internal, 0, kIdBytes);
  std::memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  const std::int64_t pid = ::getpid();
  const std::uint64_t n = ++serial;
  const std::uint64_t nonce = std::random_device{}();
  std::memcpy(id->internal + 16, &pid, sizeof pid);
  std::memcpy(id->internal + 24, &n, sizeof n);
  std::memcpy(id->internal + 32, &nonce, sizeof nonce);
  return Success;
}

NCCL_API Result ncclCommInitRank(Communicator** out, int nranks, UniqueId id, int rank) {
  if (!out) return error(InvalidArgument, "ncclCommInitRank: comm is NULL");
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return error(InvalidArgument, "ncclCommInitRank: rank %d is not in [0, nranks %d)", rank, nranks);
  std::int64_t pid = 0;
  std::memcpy(&pid, id.internal + 16, sizeof pid);
  if (std::memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0 || pid != ::getpid())
    return error(InvalidArgument, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId in this process "
                                  "(the emulated NCCL joins ranks that are threads of one process)");
  const int current = tessel_emu_current_device();
  const int device = current >= 0 ? current : 0;  // as the CUDA runtime: device 0 unless one is current
  const std::string key(id.internal, kIdBytes);
  std::shared_ptr<Clique> cl;
  {
    std::lock_guard lock(g_mu);
    std::shared_ptr<Clique>& slot = g_cliques[key];
    if (!slot) {
      slot = std::make_shared<Clique>();
      slot->nranks = nranks;
      slot->members.resize(static_cast<std::size_t>(nranks));
      slot->gone.resize(static_cast<std::size_t>(nranks));
    }
    cl = slot;
  }
  auto forget = [&] {
    std::lock_guard lock(g_mu);
    if (auto it = g_cliques.find(key); it != g_cliques.end() && it->second == cl) g_cliques.erase(it);
  };
  auto comm = std::make_unique<Communicator>();
  comm->clique = cl;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = device;
  std::unique_lock lock(cl->mu);
  if (cl->init_failure.empty() && cl->nranks != nranks) {
    cl->init_failure =
        "ranks disagree on nranks (" + std::to_string(cl->nranks) + " and " + std::to_string(nranks) + ")";
    cl->init_code = InvalidUsage;
  } else if (cl->init_failure.empty() && cl->members[static_cast<std::size_t>(rank)]) {
    cl->init_failure = "rank " + std::to_string(rank) + " joined twice";
    cl->init_code = InvalidUsage;
  }
  if (cl->init_failure.empty()) {
    cl->members[static_cast<std::size_t>(rank)] = comm.get();
    if (++cl->joined == cl->nranks) {
      for (int i = 0; i < nranks && cl->init_failure.empty(); ++i)
        for (int j = i + 1; j < nranks && cl->init_failure.empty(); ++j)
          if (cl->members[i]->device == cl->members[j]->device) {
            cl->init_failure = "Duplicate GPU detected: rank " + std::to_string(i) + " and rank " + std::to_string(j) +
                               " both on CUDA device " + std::to_string(cl->members[i]->device);
            cl->init_code = InvalidUsage;
          }
      cl->ready = cl->init_failure.empty();
    }
  }
  cl->changed.notify_all();
  if (!cl->changed.wait_until(lock, deadline(), [&] { return cl->ready || !cl->init_failure.empty(); })) {
    cl->init_failure = "only " + std::to_string(cl->joined) + " of " + std::to_string(nranks) +
                       " ranks joined within " + std::to_string(g_timeout_ms.load()) + " ms";
    cl->init_code = RemoteError;
    cl->changed.notify_all();
  }
  if (!cl->ready) {
    if (cl->members[static_cast<std::size_t>(rank)] == comm.get())
      cl->members[static_cast<std::size_t>(rank)] = nullptr;
    const std::string why = cl->init_failure;
    const Result code = cl->init_code;
    lock.unlock();
    forget();
    return error(code, "ncclCommInitRank (rank %d of %d, device %d): %s", rank, nranks, device, why.c_str());
  }
  lock.unlock();
  forget();  // every rank joined: the id is spent
  {
    std::lock_guard g(g_mu);
    g_live.insert(comm.get());
  }
  *out = comm.release();
  return Success;
}

NCCL_API Result ncclCommDestroy(Communicator* comm) {
  if (!comm) return Success;
  if (!live(comm)) return error(InvalidArgument, "ncclCommDestroy: comm %p is not a live communicator", (void*)comm);
  leave(comm, "destroyed");
  delete comm;
  return Success;
}

NCCL_API Result ncclCommAbort(Communicator* comm) {
  if (!comm) return Success;
  if (!live(comm)) return error(InvalidArgument, "ncclCommAbort: comm %p is not a live communicator", (void*)comm);
  leave(comm, "aborted");
  delete comm;
  return Success;
}

NCCL_API Result ncclCommGetAsyncError(Communicator* comm, Result* state) {
  if (!comm || !state) return error(InvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  if (!live(comm))
    return error(InvalidArgument, "ncclCommGetAsyncError: comm %p is not a live communicator", (void*)comm);
  std::lock_guard lock(comm->clique->mu);
  *state = comm->async;
  return Success;
}

NCCL_API Result ncclAllReduce(const void* send, void* recv, std::size_t count, int type, int op, Communicator* comm,
                              void* stream) {
  return collective(comm, {Kind::all_reduce, send, recv, count, type, op, 0}, stream);
}

NCCL_API Result ncclBroadcast(const void* send, void* recv, std::size_t count, int type, int root, Communicator* comm,
                              void* stream) {
  return collective(comm, {Kind::broadcast, send, recv, count, type, 0, root}, stream);
}

NCCL_API Result ncclAllGather(const void* send, void* recv, std::size_t send_count, int type, Communicator* comm,
                              void* stream) {
  return collective(comm, {Kind::all_gather, send, recv, send_count, type, 0, 0}, stream);
}

NCCL_API Result ncclReduceScatter(const void* send, void* recv, std::size_t recv_count, int type, int op,
                                  Communicator* comm, void* stream) {
  return collective(comm, {Kind::reduce_scatter, send, recv, recv_count, type, op, 0}, stream);
}

// ---- for tests ----

/// Sets how long a rank waits for the others (ms); returns the previous value.
NCCL_API long tessel_emu_nccl_set_timeout_ms(long ms) { return g_timeout_ms.exchange(ms > 0 ? ms : 1); }
/// Collectives completed so far (every rank's part counted once).
NCCL_API unsigned long long tessel_emu_nccl_collectives(void) { return g_collectives.load(); }
