// Errors are values. Every fallible call returns a Status or a Result<T>; nothing throws across
// the library boundary. An OK Status holds no allocation, so returning one is cheap.
#pragma once

#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace weightcast {

enum class Code {
  kOk = 0,
  kInvalidArgument,     // the caller passed something malformed (a flag, a path, a name)
  kNotFound,            // a file, version, tensor or peer does not exist
  kAlreadyExists,       // refusing to overwrite
  kCorrupt,             // bytes from outside (a file, the network) fail validation or a hash
  kIoError,             // the operating system refused (open, read, write, fsync, rename)
  kFailedPrecondition,  // the system is not in a state that allows the call (wrong base, ...)
  kOutOfRange,          // a size or index beyond a bound
  kUnauthenticated,     // a secret, HMAC or signature does not verify
  kUnavailable,         // a peer or service cannot be reached now; retrying may help
  kDeadlineExceeded,    // a timeout passed
  kAborted,             // a transaction was aborted
  kResourceExhausted,   // a buffer pool, disk or rate limit is full
  kInternal,            // a bug: an invariant of ours does not hold
};

std::string_view CodeName(Code code);

// Why a call failed, for the few callers that act on the cause and not only on the code (a
// client telling a wrong secret from another cluster, a transport telling a clean close from a
// failure). Set where the cause is known, kept by WithContext, carried in the coordinator's wire
// errors; the message is for people and is never parsed. Most errors have none.
enum class Reason : uint8_t {
  kNone = 0,
  kPeerClosed,       // the other side closed the connection cleanly
  kClosedHere,       // this node closed the connection
  kProtocolVersion,  // the peer speaks another protocol version
  kWrongCluster,     // the peer belongs to another cluster
  kWrongSecret,      // a proof of the cluster secret does not verify
  kNotCoordinator,   // the address answers, but not as a coordinator
  kStandby,          // a standby coordinator answered: the leader is elsewhere
  kWriterConflict,   // the channel has another writer, or this writer was fenced
};
inline constexpr uint8_t kMaxReason = static_cast<uint8_t>(Reason::kWriterConflict);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  Reason reason() const { return reason_; }

  // A copy carrying `reason` (an OK status stays OK, without one).
  Status WithReason(Reason reason) const {
    Status s = *this;
    if (!s.ok()) s.reason_ = reason;
    return s;
  }

  // "CORRUPT: model.safetensors: header length 2^40 is beyond the file (1024 bytes)"
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `, with the same reason. OK stays OK.
  Status WithContext(std::string_view context) const;

  // Marks a deliberately ignored status, so that [[nodiscard]] does not fire.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  Code code_ = Code::kOk;
  Reason reason_ = Reason::kNone;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
inline Status Corrupt(std::string m) { return {Code::kCorrupt, std::move(m)}; }
inline Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {Code::kFailedPrecondition, std::move(m)};
}
inline Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {Code::kUnauthenticated, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
inline Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

// Status from errno after a failed system call: "open(/x/y): No such file or directory".
Status ErrnoStatus(std::string_view what, int err);

// A value or the Status saying why there is none. Never holds an OK status without a value.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "Result built from an OK status without a value");
    if (status_.ok()) status_ = Internal("Result constructed from OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // The value. On an error this is a bug in the caller, in every build: it prints the status and
  // aborts, rather than hand out a value that is not there. Check ok() first.
  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const {
    if (!value_.has_value()) [[unlikely]] {
      std::fprintf(stderr, "weightcast: the value of a Result that holds an error: %s\n",
                   status_.ToString().c_str());
      std::abort();
    }
  }

  std::optional<T> value_;
  Status status_;
};

}  // namespace weightcast

#define WC_CONCAT_INNER_(a, b) a##b
#define WC_CONCAT_(a, b) WC_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define WC_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::weightcast::Status wc_status_ = (expr); \
    if (!wc_status_.ok()) return wc_status_;  \
  } while (false)

// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` is a declaration and `result` a name.
// `WC_ASSIGN_OR_RETURN(auto x, ComputeX());` declares x from a Result, or returns its Status.
#define WC_ASSIGN_OR_RETURN(lhs, expr) \
  WC_ASSIGN_OR_RETURN_IMPL_(WC_CONCAT_(wc_result_, __LINE__), lhs, expr)
#define WC_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                              \
  if (!result.ok()) return result.status();          \
  lhs = std::move(result).value()
// NOLINTEND(bugprone-macro-parentheses)
