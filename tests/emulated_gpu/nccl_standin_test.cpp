// tessel's NCCL wrapper (runtime/cuda/nccl.h) over the host stand-in
// (libtessel-emulated-nccl.so), ranks as threads on the two emulated GPUs:
// reductions NCCL has and the process groups do not use (prod, min, out of
// place), exactly; and what NCCL refuses -- host or foreign-device pointers,
// bad roots, streams of another device, two ranks on one GPU -- refused with
// NCCL's result codes, as are ranks that call different collectives or lose
// a peer (asynchronous errors).
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "emulated_test_support.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nccl.h"
#include "runtime/errors.h"

using namespace tessel::cuda;
using tessel::DType;

namespace {

// fn(rank, comm) on `n` threads, rank r on device devices[r]; what each threw, or "".
std::vector<std::string> on_ranks(const std::vector<int>& devices, const std::function<void(int, NcclComm&)>& fn) {
  REQUIRE(nccl_available());
  const NcclUniqueId id = nccl_unique_id();
  const int n = static_cast<int>(devices.size());
  std::vector<std::string> errors(devices.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        NcclComm comm = NcclComm::init_rank(devices[static_cast<size_t>(r)], n, id, r);
        fn(r, comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

template <class T>
CUdeviceptr upload(int device, const std::vector<T>& v) {
  CUdeviceptr p = mem_alloc(device, v.size() * sizeof(T));
  memcpy_htod(p, v.data(), v.size() * sizeof(T));
  return p;
}

template <class T>
std::vector<T> download(CUdeviceptr p, size_t n) {
  std::vector<T> v(n);
  memcpy_dtoh(v.data(), p, n * sizeof(T));
  return v;
}

}  // namespace

TEST_CASE("the NCCL stand-in is what tessel loads", "[emulated-gpu][nccl]") {
  INFO(nccl_unavailable_reason());
  REQUIRE(nccl_available());
  CHECK(nccl_library() == TESSEL_EMU_NCCL_PATH);
  CHECK(nccl_version() == 22800);
}

TEST_CASE("the NCCL stand-in reduces as NCCL does: prod and min, out of place, integers and floats",
          "[emulated-gpu][nccl]") {
  // Rank 0 holds [1, -2, 3, 4], rank 1 [5, 6, -7, 2].
  const std::vector<std::vector<int>> held = {{1, -2, 3, 4}, {5, 6, -7, 2}};
  std::vector<std::vector<int32_t>> prod(2), min_scatter(2);
  std::vector<std::vector<double>> min(2), untouched(2);
  auto errors = on_ranks({0, 1}, [&](int r, NcclComm& comm) {
    const std::vector<int> mine = held[static_cast<size_t>(r)];
    CUdeviceptr a = upload(r, std::vector<int32_t>(mine.begin(), mine.end()));
    CUdeviceptr out = upload(r, std::vector<int32_t>(4, 0));
    comm.all_reduce(a, out, 4, DType::i32, NcclRedOp::prod, nullptr);
    prod[static_cast<size_t>(r)] = download<int32_t>(out, 4);
    CUdeviceptr f = upload(r, std::vector<double>(mine.begin(), mine.end()));
    CUdeviceptr g = upload(r, std::vector<double>(4, 0));
    comm.all_reduce(f, g, 4, DType::f64, NcclRedOp::min, nullptr);
    min[static_cast<size_t>(r)] = download<double>(g, 4);
    untouched[static_cast<size_t>(r)] = download<double>(f, 4);
    CUdeviceptr s = upload(r, std::vector<int32_t>(2, 0));
    comm.reduce_scatter(a, s, 2, DType::i32, NcclRedOp::min, nullptr);
    min_scatter[static_cast<size_t>(r)] = download<int32_t>(s, 2);
    for (CUdeviceptr p : {a, out, f, g, s}) mem_free(p);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
    CHECK(errors[static_cast<size_t>(r)].empty());
    CHECK(prod[static_cast<size_t>(r)] == std::vector<int32_t>{5, -12, -21, 8});
    CHECK(min[static_cast<size_t>(r)] == std::vector<double>{1, -2, -7, 2});
    CHECK(untouched[static_cast<size_t>(r)] == std::vector<double>(held[static_cast<size_t>(r)].begin(),
                                                                   held[static_cast<size_t>(r)].end()));
    CHECK(min_scatter[static_cast<size_t>(r)] ==
          (r == 0 ? std::vector<int32_t>{1, -2} : std::vector<int32_t>{-7, 2}));
  }
}

TEST_CASE("the NCCL stand-in refuses host pointers, other devices' memory and streams, bad roots",
          "[emulated-gpu][nccl]") {
  std::vector<std::string> refused;
  auto errors = on_ranks({0}, [&](int, NcclComm& comm) {
    CUdeviceptr a = mem_alloc(0, 256), other = mem_alloc(1, 256);  // 64 floats each
    std::vector<float> host(16);
    CUstream other_stream = stream_create(1);
    auto refuse = [&](const std::function<void()>& call) {
      try {
        call();
        refused.push_back("accepted");
      } catch (const tessel::DeviceError& e) {
        refused.push_back(e.what());
      }
    };
    const auto host_ptr = reinterpret_cast<CUdeviceptr>(host.data());
    refuse([&] { comm.all_reduce(host_ptr, host_ptr, 16, DType::f32, NcclRedOp::sum, nullptr); });
    refuse([&] { comm.all_reduce(other, a, 16, DType::f32, NcclRedOp::sum, nullptr); });
    refuse([&] { comm.all_reduce(a, a, 65, DType::f32, NcclRedOp::sum, nullptr); });  // one past the allocation
    refuse([&] { comm.broadcast(a, a, 16, DType::f32, 1, nullptr); });
    refuse([&] { comm.all_gather(a, a, 16, DType::f32, other_stream); });
    refuse([&] { comm.all_reduce(a, a, 16, DType::f16, NcclRedOp::sum, nullptr); });
    refuse([&] { comm.all_reduce(a, a, 16, DType::f32, NcclRedOp::sum, nullptr); });  // a world of 1: fine
    stream_destroy(other_stream);
    mem_free(a);
    mem_free(other);
  });
  REQUIRE(errors[0].empty());
  REQUIRE(refused.size() == 7);
  CHECK_THAT(refused[0], Catch::StartsWith("NCCL call ncclAllReduce failed: ncclInvalidArgument (4: ") &&
                             Catch::Contains("sendbuff") && Catch::Contains("is not a valid device pointer"));
  CHECK_THAT(refused[1], Catch::Contains("ncclInvalidArgument") &&
                             Catch::Contains("sendbuff allocated on device 1 mismatches with NCCL device 0"));
  CHECK_THAT(refused[2],
             Catch::Contains("ncclInvalidArgument") && Catch::Contains("(260 bytes) is not a valid device"));
  CHECK_THAT(refused[3], Catch::StartsWith("NCCL call ncclBroadcast failed: ncclInvalidArgument") &&
                             Catch::Contains("invalid root 1 (nranks 1)"));
  CHECK_THAT(refused[4], Catch::Contains("ncclUnhandledCudaError") &&
                             Catch::Contains("stream of device 1 given to the communicator of device 0"));
  CHECK_THAT(refused[5], Catch::Contains("ncclInvalidArgument") && Catch::Contains("reductions of float16"));
  CHECK(refused[6] == "accepted");
}

TEST_CASE("the NCCL stand-in refuses two ranks on one GPU, as NCCL does", "[emulated-gpu][nccl]") {
  auto errors = on_ranks({0, 0}, [](int, NcclComm&) {});
  for (const std::string& e : errors)
    CHECK_THAT(e, Catch::StartsWith("NCCL call ncclCommInitRank failed: ncclInvalidUsage") &&
                      Catch::Contains("Duplicate GPU detected: rank 0 and rank 1 both on CUDA device 0"));
}

TEST_CASE("ranks that call different collectives get ncclInvalidUsage and their memory is left alone",
          "[emulated-gpu][nccl]") {
  std::vector<std::string> async(2);
  std::vector<std::vector<float>> after(2);
  auto errors = on_ranks({0, 1}, [&](int r, NcclComm& comm) {
    const size_t n = r == 0 ? 4 : 3;
    CUdeviceptr a = upload(r, std::vector<float>(n, 1.0f + r));
    comm.all_reduce(a, a, n, DType::f32, NcclRedOp::sum, nullptr);  // queued: NCCL cannot tell
    async[static_cast<size_t>(r)] = comm.async_error();
    after[static_cast<size_t>(r)] = download<float>(a, n);
    mem_free(a);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
    CHECK(errors[static_cast<size_t>(r)].empty());
    CHECK_THAT(async[static_cast<size_t>(r)],
               Catch::StartsWith("ncclInvalidUsage (5: ") &&
                   Catch::Contains("ranks called different collectives as their #1: rank 0 ncclAllReduce(4 x "
                                   "float32, sum), rank 1 ncclAllReduce(3 x float32, sum)"));
    CHECK(after[static_cast<size_t>(r)] == std::vector<float>(r == 0 ? 4 : 3, 1.0f + r));
  }
}

TEST_CASE("a peer's communicator destroyed mid-run fails the others' collective with ncclRemoteError",
          "[emulated-gpu][nccl]") {
  std::atomic<bool> gone{false};
  std::string async;
  auto errors = on_ranks({0, 1}, [&](int r, NcclComm& comm) {
    if (r == 1) {
      comm = NcclComm();  // destroys rank 1's part
      gone = true;
      return;
    }
    while (!gone) std::this_thread::yield();
    CUdeviceptr a = upload(0, std::vector<float>(4, 1.0f));
    comm.all_reduce(a, a, 4, DType::f32, NcclRedOp::sum, nullptr);
    async = comm.async_error();
    mem_free(a);
  });
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK_THAT(async,
             Catch::StartsWith("ncclRemoteError (6: ") && Catch::Contains("rank 1's communicator was destroyed"));
}
