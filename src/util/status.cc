#include <weightcast/status.h>

#include <cerrno>
#include <cstring>

namespace weightcast {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Code::kCorrupt:
      return "CORRUPT";
    case Code::kIoError:
      return "IO_ERROR";
    case Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::kOutOfRange:
      return "OUT_OF_RANGE";
    case Code::kUnauthenticated:
      return "UNAUTHENTICATED";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::kAborted:
      return "ABORTED";
    case Code::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Code::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(CodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m)).WithReason(reason_);
}

Status ErrnoStatus(std::string_view what, int err) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  Code code = Code::kIoError;
  if (err == ENOENT) code = Code::kNotFound;
  if (err == EEXIST) code = Code::kAlreadyExists;
  if (err == ENOSPC) code = Code::kResourceExhausted;
  return Status(code, std::move(m));
}

}  // namespace weightcast
