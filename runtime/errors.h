// User-facing error types. Every user mistake raises one of these with a
// message that says what went wrong, where, and what to do about it.
// Internal invariants use TESSEL_ASSERT, which names the pass that broke.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace tessel {

/// Base of all tessel errors; catch this to catch any of them.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Shapes that do not broadcast, a rank mistake, or a layer fed the wrong width.
struct ShapeError : Error { using Error::Error; };
/// An operation that the tensor's dtype does not allow.
struct DTypeError : Error { using Error::Error; };
/// An index or dimension out of range.
struct IndexError : Error { using Error::Error; };
/// Tensors on different devices, or a device that does not exist.
struct DeviceError : Error { using Error::Error; };
/// A value that cannot be used (empty tensor read, uninitialized parameter, bad argument).
struct ValueError : Error { using Error::Error; };
/// A checkpoint file that breaks a rule of the format, or a state dict that does not fit.
struct CheckpointError : Error { using Error::Error; };
/// A kernel that failed to compile; carries the compiler log.
struct CompileError : Error { using Error::Error; };
/// Device memory exhausted after the cache was freed and the allocation retried.
struct OutOfMemoryError : Error { using Error::Error; };
/// A module used in a way its type does not allow (wrong cast, duplicate name).
struct ModuleError : Error { using Error::Error; };
/// A distributed run that cannot go on: a rank died or hung past the timeout,
/// ranks disagree (a model or a collective's tensors differ), or rendezvous failed.
struct DistError : Error { using Error::Error; };

/// An internal invariant broke: a bug in tessel, not a user mistake.
struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

[[noreturn]] void internal_failure(const char* pass, const char* cond, const char* file, int line);

/// Byte counts as out-of-memory messages print them: "0 B", "512 B", "1.50 KiB",
/// "2.00 GiB", "139.8 GiB" (two decimals below 10, one above).
std::string format_bytes(std::size_t bytes);

}  // namespace tessel

// Checks an invariant of tessel itself; `pass` names the stage that broke it.
#define TESSEL_ASSERT(pass, cond)                                     \
  do {                                                                \
    if (!(cond)) ::tessel::internal_failure(pass, #cond, __FILE__, __LINE__); \
  } while (0)
