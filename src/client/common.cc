#include "client/common.h"

#include <weightcast/publisher.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include "format/safetensors.h"
#include "manifest/builder.h"
#include "net/handshake.h"
#include "publish/publisher.h"
#include "util/text.h"

namespace weightcast {

// The public free functions (tensor.h, options.h, publisher.h) are thin wrappers of the
// internal ones; the constants must agree with the manifest's.
static_assert(ChunkSizeLimits::kMin == kMinChunkSize);
static_assert(ChunkSizeLimits::kAuto == kAutoChunkSize);
static_assert(ChunkSizeLimits::kMax == kMaxChunkSize);

Result<uint32_t> DTypeBitWidth(std::string_view dtype) {
  WC_ASSIGN_OR_RETURN(DType parsed, ParseDType(dtype));
  return DTypeBits(parsed);
}

Result<uint64_t> TensorSizeInBytes(std::string_view dtype, std::span<const uint64_t> shape) {
  WC_ASSIGN_OR_RETURN(DType parsed, ParseDType(dtype));
  return TensorByteSize(parsed, shape);
}

Result<LogLevel> ParseLogLevel(std::string_view text) {
  if (text == "debug") return LogLevel::kDebug;
  if (text == "info") return LogLevel::kInfo;
  if (text == "warn") return LogLevel::kWarn;
  if (text == "error") return LogLevel::kError;
  return InvalidArgument("log_level must be debug, info, warn or error, not '" + std::string(text) +
                         "'");
}

Result<uint64_t> ParseByteSize(std::string_view text) { return ParseSize(text); }

uint64_t AutoChunkSize(uint64_t total_bytes) { return ChooseChunkSize(total_bytes); }

Result<SeedUntil> ParseSeedUntil(std::string_view text) {
  WC_ASSIGN_OR_RETURN(publish::SeedUntil until, publish::ParseSeedUntil(text));
  switch (until) {
    case publish::SeedUntil::kReplicated:
      return SeedUntil::kReplicated;
    case publish::SeedUntil::kComplete:
      return SeedUntil::kComplete;
    case publish::SeedUntil::kNever:
      return SeedUntil::kNever;
  }
  return Internal("unknown SeedUntil");
}

}  // namespace weightcast

namespace weightcast::client {

Result<metrics::Logger> MakeLogger(const std::string& component, LogLevel level,
                                   const std::filesystem::path& file) {
  metrics::LogLevel min_level = metrics::LogLevel::kWarn;
  switch (level) {
    case LogLevel::kDebug:
      min_level = metrics::LogLevel::kDebug;
      break;
    case LogLevel::kInfo:
      min_level = metrics::LogLevel::kInfo;
      break;
    case LogLevel::kWarn:
      min_level = metrics::LogLevel::kWarn;
      break;
    case LogLevel::kError:
      min_level = metrics::LogLevel::kError;
      break;
  }
  if (file.empty()) {
    metrics::Logger logger(component);
    logger.set_min_level(min_level);
    return logger;
  }
  WC_ASSIGN_OR_RETURN(metrics::Logger logger,
                      metrics::Logger::ToFile(component, metrics::LogFormat::kText, file));
  logger.set_min_level(min_level);
  return logger;
}

Result<std::optional<node::CertificateMode>> LoadCertificates(const CertificateFiles& files) {
  if (files.ca.empty() && files.certificate.empty() && files.key.empty()) {
    return std::optional<node::CertificateMode>();
  }
  if (files.ca.empty()) {
    return InvalidArgument("certificates: a certificate and key need the CA's certificate (ca)");
  }
  Result<node::CertificateMode> mode =
      node::LoadCertificateMode(files.ca, {}, files.certificate, files.key);
  if (!mode.ok()) return mode.status().WithContext("certificates");
  return std::optional<node::CertificateMode>(std::move(mode).value());
}

Result<std::string> LoadSecret(const SecretSource& source) {
  if (!source.secret.empty()) return source.secret;
  Result<std::string> secret = net::LoadClusterSecret(source.secret_file);
  if (!secret.ok()) return secret.status().WithContext("cluster secret");
  return secret;
}

Status CheckStorePath(const std::filesystem::path& root) {
  if (root.empty()) return InvalidArgument("store path is empty");
  std::error_code ec;
  const auto status = std::filesystem::status(root, ec);
  if (!std::filesystem::exists(status)) return Status::Ok();
  if (!std::filesystem::is_directory(status)) {
    return FailedPrecondition(root.string() +
                              " is not a weightcast store (it is a file, not a directory)");
  }
  if (std::filesystem::exists(root / ".lock", ec)) return Status::Ok();
  if (std::filesystem::is_empty(root, ec) || ec) return Status::Ok();
  return FailedPrecondition(root.string() +
                            " is not a weightcast store (a directory with files but no .lock; "
                            "give a new or empty directory, or an existing store)");
}

Result<std::vector<TensorBytes>> CheckTensors(std::span<const TensorView> tensors) {
  if (tensors.empty()) return InvalidArgument("tensors must be a non-empty list");
  std::vector<TensorBytes> out;
  out.reserve(tensors.size());
  std::set<std::string_view> names;
  for (const TensorView& t : tensors) {
    if (t.name.empty()) return InvalidArgument("a tensor has an empty name");
    if (!names.insert(t.name).second) return InvalidArgument("duplicate tensor name " + t.name);
    Result<DType> dtype = ParseDType(t.dtype);
    if (!dtype.ok()) return dtype.status().WithContext("tensor " + t.name);
    Result<uint64_t> size = TensorByteSize(*dtype, t.shape);
    if (!size.ok()) return size.status().WithContext("tensor " + t.name);
    if (*size != t.bytes.size()) {
      return InvalidArgument("tensor " + t.name + ": " + t.dtype + " of shape " +
                             FormatShape(t.shape) + " is " + std::to_string(*size) +
                             " bytes, but " + std::to_string(t.bytes.size()) + " were given");
    }
    out.push_back({t.name, *dtype, t.shape, t.bytes});
  }
  return out;
}

std::string FormatSeconds(std::chrono::nanoseconds d) {
  std::ostringstream text;
  text << std::chrono::duration<double>(d).count() << " s";
  return text.str();
}

NodeStatus ToNodeStatus(const node::SwarmProgress& p) {
  NodeStatus s;
  s.version = p.version;
  s.delta = p.delta;
  s.chunks_done = p.chunks_done;
  s.chunks_total = p.chunks_total;
  s.bytes_done = p.bytes_done;
  s.bytes_total = p.bytes_total;
  s.bytes_received = p.bytes_received;
  s.bytes_sent = p.bytes_sent;
  s.chunks_failed = p.chunks_failed;
  s.peers = p.peers;
  s.complete = p.complete;
  s.committed = p.committed;
  s.error = p.error;
  s.waiting = p.Starved();
  return s;
}

}  // namespace weightcast::client
