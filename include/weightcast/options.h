// Options of a Publisher (publisher.h) and a Subscriber (subscriber.h): plain structs, filled in
// by the caller and checked by Open, which names the option that is wrong (kInvalidArgument).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast {

// Chunk sizes a manifest accepts (docs/manifest_format.md). kAuto, every publisher's default,
// cuts a version by its size as `weightcast publish --chunk-size auto` does: about 8,192 chunks,
// 128 KiB to 64 MiB, and a channel's later versions keep the chunk size of the one before them
// (docs/publish.md, "Chunk size").
struct ChunkSizeLimits {
  static constexpr uint64_t kMin = 64ull << 10;
  static constexpr uint64_t kMax = 256ull << 20;
  static constexpr uint64_t kAuto = 0;
};

// The chunk size kAuto gives the first version of a channel of `total_bytes` (the same
// function as `weightcast publish --chunk-size auto`).
uint64_t AutoChunkSize(uint64_t total_bytes);

// The least severe events an in-process daemon logs.
enum class LogLevel { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn" or "error"; kInvalidArgument naming `text` otherwise.
Result<LogLevel> ParseLogLevel(std::string_view text);

// A byte count as the CLI reads --chunk-size and --upload-limit: "4194304", "4MiB", "4M"
// (binary), "1.5GB" (decimal), "10k". kInvalidArgument naming the input for negatives, garbage
// and overflow.
Result<uint64_t> ParseByteSize(std::string_view text);

// Where the cluster secret comes from: `secret` itself when not empty, else the first line of
// `secret_file` when not empty, else $WEIGHTCAST_SECRET. Keep secrets out of argv (it is visible
// to every user of the machine).
struct SecretSource {
  std::string secret;
  std::filesystem::path secret_file;
};

// Certificate mode (docs/security.md): the cluster CA's certificate and this node's own
// certificate and key (`weightcast ca issue`), all three or none. With them every TCP connection
// is mutual TLS (a UCX one, with transport "auto" or "ucx", proves each node's key in its
// handshake and is not encrypted), a publisher signs its versions with its key (its certificate
// must hold publisher:CHANNEL), and a subscriber's agent takes only versions signed by a publisher
// of its channel. None: development mode, the cluster secret alone. A crl.pem beside `ca` is read
// too. Bad files fail Open with kInvalidArgument naming the file.
struct CertificateFiles {
  std::filesystem::path ca;
  std::filesystem::path certificate;
  std::filesystem::path key;
};

struct PublisherOptions {
  // The publisher's own store: every version is committed there before it is announced. Created
  // when missing; a path that exists and is not a store (a file, or a directory with files but
  // without the `.lock` every store has) fails Open with kFailedPrecondition.
  std::filesystem::path store;
  std::string channel;  // the model being published, e.g. "policy"
  // host:port of the coordinator. Empty: a local publisher, which only commits each version into
  // `store` for subscribers and agents on this machine.
  std::string coordinator;
  SecretSource secret;                           // with a coordinator only
  CertificateFiles certificates;                 // with a coordinator only
  uint64_t chunk_size = ChunkSizeLimits::kAuto;  // bytes: kAuto, or in [kMin, kMax]
  // Also sign a device check per chunk into every version, for samplers whose live tensors sit
  // in GPU memory: they check each chunk written there on the device (docs/gpu.md). One more
  // pass over each version.
  bool device_checks = false;
  uint32_t keep_versions = 2;          // local publisher: versions kept (>= 1)
  std::string listen = "127.0.0.1:0";  // where peers fetch from this node
  // How peer connections travel: "tcp" (the default), "auto" (UCX with peers that offer it,
  // else TCP, and TCP when UCX fails) or "ucx" (no fallback to TCP for peers that offer UCX).
  // Anything else fails Open with kInvalidArgument. docs/transport_ucx.md.
  std::string transport = "tcp";
  std::string cluster = "default";  // must match the coordinator's
  uint64_t node_id = 0;             // 0: random
  // One writer per channel (with a coordinator; docs/cpp_api.md "One writer per channel"). The
  // writer's identity across restarts; empty: an id kept in the store (`STORE/.writer-id`, made
  // on first use), so a publisher restarted on the same store is the same writer and continues
  // the delta chain. While another live writer holds the channel, Open fails at once with
  // kFailedPrecondition ("channel C already has a writer: writer W (node N at ADDR, ...) ...").
  std::string writer_id;
  // Take the channel from the writer that holds it; that one is fenced: its next publish fails
  // with kFailedPrecondition ("fenced by writer ...").
  bool take_over = false;
  // Sharded publish (with a coordinator; docs/sharded_publish.md): this publisher is rank `rank`
  // of `world` processes that publish each version together, each its own tensors (its part),
  // into its own `store`, all with the same `writer_id` (required when world > 1). A version is
  // published once every rank published its part for it (the same step); Publish returns then,
  // or fails with kAborted when a part did not arrive within the coordinator's --part-timeout.
  uint32_t rank = 0;
  uint32_t world = 1;
  // Open fails (kUnavailable) when the coordinator cannot be reached for this long; a refused
  // handshake fails at once (kUnauthenticated: wrong secret; kFailedPrecondition: wrong cluster).
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(5);
  LogLevel log_level = LogLevel::kWarn;
  std::filesystem::path log_file;  // appended to; empty: stderr
};

struct SubscriberOptions {
  // Without a coordinator: the store that an agent (or a local Publisher) on this machine
  // maintains, read-only. With one: the store of the agent the Subscriber runs in this process.
  std::filesystem::path store;
  std::string channel;
  // host:port of the coordinator. Empty: no agent; the Subscriber only reads `store`.
  std::string coordinator;
  // The options below apply with a coordinator only (they configure the in-process agent).
  SecretSource secret;
  CertificateFiles certificates;
  std::string listen = "127.0.0.1:0";  // where peers reach this node
  std::string transport = "tcp";       // as PublisherOptions::transport
  std::string rack;
  std::string cluster = "default";
  uint64_t node_id = 0;         // 0: random
  uint64_t upload_limit = 0;    // bytes/s; 0: unlimited
  uint64_t download_limit = 0;  // bytes/s; 0: unlimited
  std::string metrics;          // ip:port to serve /metrics on; empty: none
  // Tensor names (globs: * and ?) the agent fetches, as `weightcast agent --tensors`; empty: every
  // tensor. With any, each version is committed partial and offers only those tensors
  // (ReceivedVersion::partial).
  std::vector<std::string> tensors;
  // Wait fails with kUnavailable once the agent has not reached the coordinator for this long
  // since Open (it never registered). After it once did, outages are waited out: the agent
  // reconnects, and status().error says why it cannot.
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(5);
  LogLevel log_level = LogLevel::kWarn;
  std::filesystem::path log_file;  // appended to; empty: stderr
};

}  // namespace weightcast
