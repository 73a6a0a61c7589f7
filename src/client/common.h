// What the Publisher and the Subscriber share: options turned into the daemons' pieces (loggers,
// the secret), the check that a path is a store, and public tensor views turned into the
// internal form.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <weightcast/options.h>
#include <weightcast/progress.h>
#include <weightcast/status.h>
#include <weightcast/tensor.h>

#include "client/tensor_writer.h"
#include "metrics/log.h"
#include "node/certificate_mode.h"
#include "node/swarm_node.h"

namespace weightcast::client {

// A logger for an in-process daemon: events at `level` and above, appended to `file` (stderr
// when empty). kIoError when the file cannot be opened. Thread-safe once made.
Result<metrics::Logger> MakeLogger(const std::string& component, LogLevel level,
                                   const std::filesystem::path& file);

// The cluster secret from `source` (options.h), with "cluster secret: " before any error.
Result<std::string> LoadSecret(const SecretSource& source);

// Certificate mode from `files` (node/certificate_mode.h); nullopt when none is given (development
// mode). kInvalidArgument when only some are, or when one is wrong. TCP connections then run
// TLS; UCX ones prove each node's key in the handshake and are not encrypted.
Result<std::optional<node::CertificateMode>> LoadCertificates(const CertificateFiles& files);

// OK when `root` is a store, or can become one without taking over someone else's files: it
// does not exist, or is an empty directory. kFailedPrecondition for a file, or a directory with
// files but without the `.lock` every store holder creates (docs/store_layout.md).
Status CheckStorePath(const std::filesystem::path& root);

// `tensors` checked (names non-empty and unique, dtype known, size agreeing with dtype and
// shape) and converted; kInvalidArgument naming the first bad tensor. The spans are copied as
// they are (no bytes are copied).
Result<std::vector<TensorBytes>> CheckTensors(std::span<const TensorView> tensors);

// The public NodeStatus of a swarm node's progress (the fields both daemons report alike).
NodeStatus ToNodeStatus(const node::SwarmProgress& p);

// A timeout in messages: "0.2 s", "30 s".
std::string FormatSeconds(std::chrono::nanoseconds d);

}  // namespace weightcast::client
