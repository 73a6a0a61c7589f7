#include "agent/version_fetcher.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "codec/chunk_codec.h"
#include "codec/version_codec.h"
#include "hash/digest.h"
#include "manifest/builder.h"
#include "node/chunk_intake.h"
#include "swarm/messages.h"
#include "trust/signed_manifest.h"

namespace weightcast::agent {

using swarm::EncodeMessage;
using swarm::ErrorStatus;
using swarm::kNoChunk;
using swarm::Message;
using swarm::MessageType;
using swarm::ParseMessage;
using swarm::PayloadKind;
namespace {

// Versions on the local side tried as a delta base, newest first.
constexpr size_t kBaseCandidates = 3;

Status SendMessage(net::Connection& connection, const Message& message) {
  return connection.SendControl(EncodeMessage(message));
}

// The next control message, skipping echoes; a chunk frame here is a protocol violation.
Result<Message> ReceiveMessage(net::Connection& connection, net::Duration timeout,
                               std::atomic<uint64_t>& wire_bytes) {
  while (true) {
    WC_ASSIGN_OR_RETURN(net::Frame frame, connection.Receive(timeout));
    wire_bytes += frame.body.size() + net::kFrameHeaderSize;
    if (frame.type != net::FrameType::kControl) {
      return Corrupt("p2p: unexpected " + std::string(net::FrameTypeName(frame.type)) +
                     " frame while waiting for a reply");
    }
    WC_ASSIGN_OR_RETURN(Message message, ParseMessage(frame.body));
    if (message.type != MessageType::kEcho) return message;
  }
}

Result<Manifest> RequestManifest(net::Connection& connection, uint64_t version,
                                 const FetchOptions& options, std::atomic<uint64_t>& wire_bytes) {
  WC_RETURN_IF_ERROR(
      SendMessage(connection, {.type = MessageType::kGetManifest, .version = version}));
  WC_ASSIGN_OR_RETURN(Message reply,
                      ReceiveMessage(connection, options.receive_timeout, wire_bytes));
  if (reply.type == MessageType::kError) return ErrorStatus(reply);
  if (reply.type != MessageType::kManifest) {
    return Corrupt("p2p: expected a manifest, got message type " +
                   std::to_string(static_cast<int>(reply.type)));
  }
  WC_ASSIGN_OR_RETURN(
      Manifest manifest,
      VerifySignedManifest(reply.blob, {options.manifest_secret, options.trust_anchor.get()}));
  if (manifest.channel != options.channel) {
    return Corrupt("p2p: server sent a manifest of channel '" + manifest.channel + "', not '" +
                   options.channel + "'");
  }
  if (version != 0 && manifest.version.value() != version) {
    return Corrupt("p2p: asked for v" + std::to_string(version) + ", got the manifest of v" +
                   std::to_string(manifest.version.value()));
  }
  return manifest;
}

// Versions from a listing call that treats a channel not yet present as empty.
Result<std::vector<Version>> CommittedVersions(const Store& store, std::string_view channel) {
  auto list = store.List(channel);
  if (!list.ok()) {
    if (list.status().code() == Code::kNotFound) return std::vector<Version>{};
    return list.status();
  }
  std::vector<Version> out;
  for (const VersionInfo& info : *list) out.push_back(info.version);
  return out;
}

struct LocalBase {
  Manifest manifest;
  codec::SnapshotReader bytes;
};

// The shared state of the worker threads of one fetch.
class Transfer {
 public:
  Transfer(net::Connection& connection, StagedVersion& staged, const Manifest& manifest,
           const LocalBase* base, const FetchOptions& options, FetchStats& stats,
           std::atomic<uint64_t>& wire_bytes)
      : connection_(connection),
        staged_(staged),
        manifest_(manifest),
        base_(base),
        options_(options),
        stats_(stats),
        wire_bytes_(wire_bytes) {}

  Status Run(std::deque<uint32_t> chunks, uint64_t done_bytes) {
    queue_ = std::move(chunks);
    remaining_ = queue_.size();
    progress_ = {done_bytes, manifest_.total_size(), wire_bytes_.load()};
    if (remaining_ == 0) return Status::Ok();
    std::vector<uint32_t> first;
    while (!queue_.empty() && first.size() < std::max<size_t>(options_.window, 1)) {
      first.push_back(queue_.front());
      queue_.pop_front();
    }
    for (uint32_t chunk : first) {
      outstanding_[chunk] = 0;
      WC_RETURN_IF_ERROR(Request(chunk, /*whole=*/false));
    }
    const size_t workers = std::max<size_t>(options_.workers, 1);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < workers; ++i) threads.emplace_back([this] { Work(); });
    for (std::thread& t : threads) t.join();
    std::lock_guard lock(mu_);
    return failure_;
  }

 private:
  Status Request(uint32_t chunk, bool whole) {
    uint64_t base = (whole || base_ == nullptr) ? 0 : base_->manifest.version.value();
    return SendMessage(connection_, {.type = MessageType::kGetChunk,
                                     .version = manifest_.version.value(),
                                     .chunk = chunk,
                                     .base_version = base});
  }

  void Fail(Status status) {
    {
      std::lock_guard lock(mu_);
      if (failure_.ok()) failure_ = std::move(status);
    }
    // Wakes the other workers (their Receive returns) and drops replies still on the way.
    connection_.Close();
  }

  bool Stopped() {
    std::lock_guard lock(mu_);
    return done_ || !failure_.ok();
  }

  void Work() {
    codec::CodecScratch scratch;
    std::vector<uint8_t> out, base_scratch;
    while (!Stopped()) {
      auto frame = connection_.Receive(options_.receive_timeout);
      if (!frame.ok()) {
        if (!Stopped()) Fail(frame.status().WithContext("p2p fetch"));
        return;
      }
      wire_bytes_ += frame->body.size() + net::kFrameHeaderSize;
      Status status = Handle(*frame, scratch, out, base_scratch);
      if (!status.ok()) {
        Fail(std::move(status));
        return;
      }
    }
  }

  Status Handle(const net::Frame& frame, codec::CodecScratch& scratch, std::vector<uint8_t>& out,
                std::vector<uint8_t>& base_scratch) {
    if (frame.type == net::FrameType::kControl) {
      WC_ASSIGN_OR_RETURN(Message message, ParseMessage(frame.body));
      if (message.type == MessageType::kEcho) return Status::Ok();
      if (message.type == MessageType::kError && message.chunk != kNoChunk) {
        WC_RETURN_IF_ERROR(CheckOutstanding(message.chunk));
        return Retry(message.chunk, ErrorStatus(message));
      }
      return Corrupt("p2p: unexpected message type " +
                     std::to_string(static_cast<int>(message.type)) + " during the transfer");
    }
    if (frame.type != net::FrameType::kChunk) {
      return Corrupt("p2p: unexpected " + std::string(net::FrameTypeName(frame.type)) + " frame");
    }
    WC_ASSIGN_OR_RETURN(net::ChunkHeader header, frame.chunk_header());
    if (header.version != manifest_.version.value()) {
      return Corrupt("p2p: chunk of v" + std::to_string(header.version) + " while fetching v" +
                     std::to_string(manifest_.version.value()));
    }
    const uint32_t chunk = header.chunk_index;
    WC_RETURN_IF_ERROR(CheckOutstanding(chunk));
    const ChunkIndex index(chunk);
    const ByteRange range = manifest_.ChunkRange(index);
    const Digest& expected = manifest_.chunk_hashes[chunk];
    std::span<const uint8_t> payload = frame.chunk_payload();
    if (header.encoding == static_cast<uint8_t>(PayloadKind::kRaw)) {
      Status staged = staged_.PutChunk(index, payload);
      if (staged.code() == Code::kCorrupt) return Retry(chunk, staged);
      WC_RETURN_IF_ERROR(staged);
      return Completed(chunk, range.size, /*delta=*/false);
    }
    if (header.encoding == static_cast<uint8_t>(PayloadKind::kCodec)) {
      out.resize(range.size);
      // The server encoded this payload on the fly: no signed delta table lists its SHA-256, so
      // the rebuilt chunk is checked against the chunk hash (SHA-256) whatever
      // options_.verify_result says; the fast check needs an authenticated payload
      // (docs/verification.md).
      Status decoded =
          codec::DecodeChunk(payload,
                             node::BaseChunkFor(base_ != nullptr ? &base_->manifest : nullptr,
                                                base_ != nullptr ? &base_->bytes : nullptr, index,
                                                manifest_.hash_algorithm, base_scratch),
                             &expected, out, scratch);
      if (!decoded.ok()) {
        return Retry(chunk, decoded.WithContext("chunk " + std::to_string(chunk)));
      }
      WC_RETURN_IF_ERROR(staged_.WriteChunk(index, out));
      WC_RETURN_IF_ERROR(staged_.MarkVerified(index));
      return Completed(chunk, range.size, /*delta=*/true);
    }
    return Retry(chunk, Corrupt("chunk " + std::to_string(chunk) + " has unknown encoding " +
                                std::to_string(header.encoding)));
  }

  Status CheckOutstanding(uint32_t chunk) {
    std::lock_guard lock(mu_);
    if (outstanding_.count(chunk) == 0) {
      return Corrupt("p2p: server sent chunk " + std::to_string(chunk) +
                     ", which was not asked for");
    }
    return Status::Ok();
  }

  // A chunk that failed verification (or that the server could not send) is asked for whole
  // once more; a second failure ends the fetch.
  Status Retry(uint32_t chunk, const Status& why) {
    {
      std::lock_guard lock(mu_);
      int& attempts = outstanding_[chunk];
      if (attempts >= 1) {
        return why.WithContext("p2p: chunk " + std::to_string(chunk) +
                               " failed again after a whole refetch");
      }
      attempts = 1;
      ++stats_.chunks_refetched;
    }
    if (options_.log) options_.log("p2p fetch: " + why.ToString() + "; fetching it whole");
    return Request(chunk, /*whole=*/true);
  }

  Status Completed(uint32_t chunk, uint64_t bytes, bool delta) {
    std::optional<uint32_t> next;
    bool finished = false;
    {
      std::lock_guard lock(mu_);
      outstanding_.erase(chunk);
      ++(delta ? stats_.chunks_delta : stats_.chunks_raw);
      progress_.done_bytes += bytes;
      progress_.wire_bytes = wire_bytes_.load();
      if (options_.progress) options_.progress(progress_);
      if (!queue_.empty()) {
        next = queue_.front();
        queue_.pop_front();
        outstanding_[*next] = 0;
      }
      finished = --remaining_ == 0;
      if (finished) done_ = true;
    }
    if (next) WC_RETURN_IF_ERROR(Request(*next, /*whole=*/false));
    if (finished) {
      // The other workers wait in Receive: one echo each wakes them to see that we are done.
      for (size_t i = 1; i < std::max<size_t>(options_.workers, 1); ++i) {
        WC_RETURN_IF_ERROR(SendMessage(connection_, {.type = MessageType::kEcho}));
      }
    }
    return Status::Ok();
  }

  net::Connection& connection_;
  StagedVersion& staged_;
  const Manifest& manifest_;
  const LocalBase* base_;
  const FetchOptions& options_;
  FetchStats& stats_;
  std::atomic<uint64_t>& wire_bytes_;

  std::mutex mu_;
  std::deque<uint32_t> queue_;
  std::map<uint32_t, int> outstanding_;  // chunk -> whole refetches so far
  size_t remaining_ = 0;
  bool done_ = false;
  Status failure_;
  FetchProgress progress_;
};

std::string Fixed(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

}  // namespace

std::string FetchStats::ToJson() const {
  const double ratio = wire_bytes > 0 ? static_cast<double>(model_bytes) / wire_bytes : 0;
  const double gbps = seconds > 0 ? static_cast<double>(model_bytes) * 8 / seconds / 1e9 : 0;
  std::string json = "{\"version\":" + std::to_string(version.value()) +
                     ",\"already_held\":" + (already_held ? "true" : "false") +
                     ",\"base\":" + (base ? std::to_string(base->value()) : "null") +
                     ",\"chunks\":" + std::to_string(chunks) +
                     ",\"chunks_resumed\":" + std::to_string(chunks_resumed) +
                     ",\"chunks_same\":" + std::to_string(chunks_same) +
                     ",\"chunks_delta\":" + std::to_string(chunks_delta) +
                     ",\"chunks_raw\":" + std::to_string(chunks_raw) +
                     ",\"chunks_refetched\":" + std::to_string(chunks_refetched) +
                     ",\"model_bytes\":" + std::to_string(model_bytes) +
                     ",\"wire_bytes\":" + std::to_string(wire_bytes) +
                     ",\"ratio\":" + Fixed(ratio) + ",\"seconds\":" + Fixed(seconds) +
                     ",\"model_gbit_per_s\":" + Fixed(gbps) + "}";
  return json;
}

Result<FetchStats> FetchVersion(net::Connection& connection, Store& store,
                                const FetchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<uint64_t> wire_bytes{0};
  FetchStats stats;
  auto finish = [&] {
    stats.wire_bytes = wire_bytes.load();
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto fail = [&](Status status) {
    connection.Close();
    return status;
  };

  auto manifest_or = RequestManifest(connection, options.version ? options.version->value() : 0,
                                     options, wire_bytes);
  if (!manifest_or.ok()) return fail(manifest_or.status());
  Manifest manifest = std::move(manifest_or).value();
  manifest.delta.reset();  // how the server's store received it is no concern of ours
  stats.version = manifest.version;
  stats.chunks = manifest.chunk_count();
  stats.model_bytes = manifest.total_size();

  WC_ASSIGN_OR_RETURN(std::vector<Version> committed, CommittedVersions(store, options.channel));
  for (Version v : committed) {
    if (v != manifest.version) continue;
    WC_ASSIGN_OR_RETURN(Manifest local, store.GetManifest(options.channel, v));
    if (local.root != manifest.root) {
      return FailedPrecondition("local v" + std::to_string(v.value()) +
                                " differs from the server's (another root)");
    }
    stats.already_held = true;
    finish();
    return stats;
  }

  // Resume a staging of the same content, or start one.
  std::optional<StagedVersion> staged;
  auto staging = store.ListStaging(options.channel);
  if (staging.ok()) {
    for (Version v : *staging) {
      if (v != manifest.version) continue;
      WC_ASSIGN_OR_RETURN(StagedVersion resumed, store.ResumeStaging(options.channel, v));
      if (resumed.manifest().root == manifest.root) {
        staged = std::move(resumed);
      } else {
        WC_RETURN_IF_ERROR(store.Abort(options.channel, v));
      }
    }
  }
  if (!staged) {
    WC_ASSIGN_OR_RETURN(StagedVersion begun, store.BeginStaging(options.channel, manifest));
    staged = std::move(begun);
  }
  stats.chunks_resumed = staged->verified_count();

  // A base: the newest local committed version the server also holds with the same root.
  std::unique_ptr<LocalBase> base;
  if (options.use_delta) {
    size_t tried = 0;
    for (auto it = committed.rbegin(); it != committed.rend() && tried < kBaseCandidates; ++it) {
      ++tried;
      auto remote = RequestManifest(connection, it->value(), options, wire_bytes);
      if (!remote.ok()) {
        if (remote.status().code() == Code::kNotFound) continue;
        return fail(remote.status());
      }
      WC_ASSIGN_OR_RETURN(Manifest local, store.GetManifest(options.channel, *it));
      if (local.root != remote->root || local.hash_algorithm != manifest.hash_algorithm) continue;
      auto bytes = codec::SnapshotReader::Open(
          store.VersionPath(options.channel, *it), local,
          manifest.delta ? codec::BaseReadPattern(*manifest.delta) : codec::ReadPattern::kSparse);
      if (!bytes.ok()) continue;
      base = std::make_unique<LocalBase>(LocalBase{std::move(local), std::move(bytes).value()});
      stats.base = *it;
      break;
    }
  }

  // Chunks equal to the base's are copied locally (and still checked); the rest go on the wire.
  std::deque<uint32_t> wanted;
  uint64_t done_bytes = 0;
  std::vector<bool> missing(manifest.chunk_count(), false);
  for (ChunkIndex index : staged->MissingChunks()) missing[index.value()] = true;
  std::vector<uint8_t> scratch;
  for (uint32_t i = 0; i < manifest.chunk_count(); ++i) {
    const ByteRange range = manifest.ChunkRange(ChunkIndex(i));
    if (!missing[i]) {
      done_bytes += range.size;
      continue;
    }
    if (base != nullptr && node::StageFromBase(manifest, ChunkIndex(i), base->manifest, base->bytes,
                                               options.verify_result, *staged, scratch)) {
      ++stats.chunks_same;
      done_bytes += range.size;
      continue;
    }
    wanted.push_back(i);
  }

  Transfer transfer(connection, *staged, manifest, base.get(), options, stats, wire_bytes);
  Status transferred = transfer.Run(std::move(wanted), done_bytes);
  if (!transferred.ok()) {
    staged->Flush().IgnoreError();  // keep what was verified for a resume
    connection.Close();
    return transferred;
  }
  WC_RETURN_IF_ERROR(staged->Flush());
  WC_RETURN_IF_ERROR(store.Commit(options.channel, manifest.version));
  finish();
  return stats;
}

}  // namespace weightcast::agent
