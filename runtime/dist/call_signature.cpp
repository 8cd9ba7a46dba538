#include "runtime/dist/call_signature.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/dist/process_group.h"
#include "runtime/errors.h"

namespace tessel::dist {

namespace {
constexpr std::string_view kCalls[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"};
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

void check_average_of(const char* call, DType t, ReduceOp op) {
  if (op == ReduceOp::avg && !is_floating(t))
    throw DTypeError(fmt::format("{}(avg): an average of {} tensors would truncate; use sum and divide, or convert "
                                 "to a floating dtype",
                                 call, dtype_name(t)));
}

std::array<int64_t, CallSignature::kWords> CallSignature::encode() const {
  std::array<int64_t, kWords> w{};
  w[0] = std::find(std::begin(kCalls), std::end(kCalls), call) - std::begin(kCalls);
  w[1] = param;
  w[2] = static_cast<int64_t>(dtype);
  w[3] = shape.rank();
  w[4] = shape.numel();
  for (int i = 0; i < std::min<int>(kMaxDims, static_cast<int>(shape.rank())); ++i) w[5 + i] = shape[i];
  return w;
}

CallSignature CallSignature::decode(const int64_t* w) {
  CallSignature s;
  s.call = w[0] >= 0 && w[0] < static_cast<int64_t>(std::size(kCalls)) ? kCalls[w[0]] : "an unknown call";
  s.param = w[1];
  s.dtype = static_cast<DType>(w[2]);
  std::vector<int64_t> dims;
  for (int i = 0; i < std::min<int64_t>(kMaxDims, w[3]); ++i) dims.push_back(w[5 + i]);
  s.shape = Shape(dims);
  return s;
}

bool CallSignature::operator==(const CallSignature& o) const { return encode() == o.encode(); }

std::string CallSignature::str() const {
  std::string head(call);
  if (call == "all_reduce" || call == "reduce_scatter")
    head += fmt::format("({})", reduce_op_name(static_cast<ReduceOp>(param)));
  else if (call == "broadcast")
    head += fmt::format("(root={})", param);
  if (call == "barrier") return head;
  return fmt::format("{} of {} {}", head, dtype_name(dtype), shape.str());
}

void check_same_call(const std::vector<CallSignature>& by_rank, uint64_t seq) {
  for (size_t r = 1; r < by_rank.size(); ++r) {
    if (by_rank[r] == by_rank[0]) continue;
    throw DistError(fmt::format("collective #{}: rank {} called {} but rank 0 called {}; every rank must make the "
                                "same collective calls in the same order, with tensors of the same shape and dtype",
                                seq, r, by_rank[r].str(), by_rank[0].str()));
  }
}

}  // namespace tessel::dist
