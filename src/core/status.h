// Errors as values. Every boundary of tally (protocol, engine, storage) returns a
// Status or a Result<T>; exceptions never cross a layer.
#pragma once

#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <utility>

namespace tally {

// The kind of an error; the servers map each kind to their own wire spelling.
enum class ErrorCode {
  kInvalidArgument,  // the caller's input is malformed (not an integer, bad syntax, ...)
  kOverflow,         // an increment would leave the signed 64-bit range; nothing changed
  kNotFound,         // a named thing (definition, source) does not exist
  kWrongType,        // a value of the wrong type for the operation
  kIOError,          // the store or the OS failed; the operation did not take effect
  kCorruption,       // persisted bytes do not decode
  kUnavailable,      // the server cannot serve this now (shutting down, store closed)
  kInternal,         // a bug: an invariant did not hold
};

// A failed operation: what kind, and a message fit to show the client as is.
struct Error {
  ErrorCode code;
  std::string message;
};

// An error or a value of type T. Callers must look at it.
template <typename T>
using Result = tl::expected<T, Error>;

// Success, or an Error. Cheap to copy when ok.
using Status = tl::expected<void, Error>;

inline tl::unexpected<Error> MakeError(ErrorCode code, std::string message) {
  return tl::unexpected<Error>(Error{code, std::move(message)});
}
inline tl::unexpected<Error> InvalidArgument(std::string message) {
  return MakeError(ErrorCode::kInvalidArgument, std::move(message));
}
inline tl::unexpected<Error> IOError(std::string message) {
  return MakeError(ErrorCode::kIOError, std::move(message));
}
inline tl::unexpected<Error> Corruption(std::string message) {
  return MakeError(ErrorCode::kCorruption, std::move(message));
}
inline Status OkStatus() { return {}; }

}  // namespace tally
