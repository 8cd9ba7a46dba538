// CallSignature: what one rank asked a collective to do (which call, its
// reduce op or root, dtype, shape). Ranks exchange these before the payload
// moves; a difference is a user error (ranks out of step, or tensors that
// differ across ranks), reported instead of exchanging mismatched memory.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace tessel::dist {

struct CallSignature {
  static constexpr int kMaxDims = 8;  // shapes with more dims compare by numel and their first 8 dims
  static constexpr int kWords = 5 + kMaxDims;
  std::string_view call;  // "all_reduce", ...; encoded by its index in kCalls
  int64_t param = 0;      // the reduce op, or the broadcast root
  DType dtype = DType::f32;
  Shape shape;

  std::array<int64_t, kWords> encode() const;
  static CallSignature decode(const int64_t* words);
  bool operator==(const CallSignature& o) const;
  /// "all_reduce(sum) of f32 [3, 4]"
  std::string str() const;
};

/// Throws DistError naming the first rank whose call differs from rank 0's.
/// `seq` numbers the collective in this group (1 = the first).
void check_same_call(const std::vector<CallSignature>& by_rank, uint64_t seq);

}  // namespace tessel::dist
