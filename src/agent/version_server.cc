#include "agent/version_server.h"

#include <list>
#include <thread>
#include <vector>

#include "codec/version_codec.h"
#include "swarm/messages.h"
#include "trust/signed_manifest.h"

namespace weightcast::agent {

using swarm::EncodeMessage;
using swarm::kNoChunk;
using swarm::Message;
using swarm::MessageType;
using swarm::ParseMessage;
using swarm::PayloadKind;

struct VersionServer::Loaded {
  Manifest manifest;
  std::vector<uint8_t> signed_manifest;
  std::shared_ptr<const MappedVersion> view;  // the store's: chunks are sent from its mapping
};

namespace {

// Versions whose maps stay open; older ones are dropped from the cache (replies in flight keep
// theirs alive through the frame's keep_alive).
constexpr size_t kCachedVersions = 4;

Status SendMessage(net::Connection& connection, const Message& message) {
  return connection.SendControl(EncodeMessage(message));
}

}  // namespace

VersionServer::VersionServer(const Store& store, VersionServerOptions options)
    : store_(store), options_(std::move(options)) {
  if (options_.workers_per_connection == 0) options_.workers_per_connection = 1;
}

VersionServer::~VersionServer() = default;

VersionServerStats VersionServer::stats() const {
  return {manifests_.load(), raw_chunks_.load(), delta_chunks_.load(), payload_bytes_.load(),
          errors_.load()};
}

Result<std::shared_ptr<const VersionServer::Loaded>> VersionServer::Load(uint64_t version) {
  if (version == 0) {
    WC_ASSIGN_OR_RETURN(Version current, store_.Current(options_.channel));
    version = current.value();
  }
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(version);
    if (it != cache_.end()) return it->second;
  }
  WC_ASSIGN_OR_RETURN(Manifest manifest, store_.GetManifest(options_.channel, Version(version)));
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedVersion> view,
                      store_.OpenView(options_.channel, Version(version)));
  auto loaded = std::make_shared<Loaded>();
  WC_ASSIGN_OR_RETURN(
      loaded->signed_manifest,
      SignManifest(manifest, {options_.manifest_secret, options_.signing_identity.get()}));
  loaded->manifest = std::move(manifest);
  loaded->view = std::move(view);
  std::lock_guard lock(mu_);
  // Another thread may have loaded it meanwhile; keep one copy. Taken before eviction, which
  // may drop this very entry when it is the oldest version.
  std::shared_ptr<const Loaded> result = cache_.emplace(version, std::move(loaded)).first->second;
  while (cache_.size() > kCachedVersions) cache_.erase(cache_.begin());
  return result;
}

void VersionServer::Serve(net::Listener& listener) {
  // A connection's thread, and whether it finished: finished ones are joined at the next accept,
  // so a long-lived server holds threads for the connections it serves, not for all it served.
  struct Served {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
  };
  std::list<Served> served;
  while (true) {
    auto connection = listener.Accept(net::kForever);
    if (!connection.ok()) break;
    for (auto it = served.begin(); it != served.end();) {
      if (!it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = served.erase(it);
    }
    std::shared_ptr<net::Connection> shared(std::move(connection).value());
    Served& s = served.emplace_back();
    s.thread = std::thread([this, shared, done = s.done] {
      ServeConnection(*shared);
      done->store(true);
    });
  }
  for (Served& s : served) s.thread.join();
}

void VersionServer::ServeConnection(net::Connection& connection) {
  const std::string peer = connection.peer().address;
  std::vector<std::thread> workers;
  for (size_t i = 0; i < options_.workers_per_connection; ++i) {
    workers.emplace_back([this, &connection] {
      codec::CodecScratch scratch;
      while (true) {
        auto frame = connection.Receive(net::kForever);
        if (!frame.ok()) return;
        if (frame->type != net::FrameType::kControl) {
          options_.log("p2p server: unexpected " + std::string(net::FrameTypeName(frame->type)) +
                       " frame; closing");
          connection.Close();
          return;
        }
        Status status = Answer(connection, frame->body, scratch);
        if (!status.ok()) {
          if (connection.status().ok()) {
            options_.log("p2p server: " + status.ToString() + "; closing");
          }
          connection.Close();
          return;
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  (void)peer;
}

Status VersionServer::Answer(net::Connection& connection, std::span<const uint8_t> body,
                             codec::CodecScratch& scratch) {
  WC_ASSIGN_OR_RETURN(Message request, ParseMessage(body));
  switch (request.type) {
    case MessageType::kEcho:
      return SendMessage(connection, Message{.type = MessageType::kEcho});
    case MessageType::kGetManifest: {
      auto loaded = Load(request.version);
      if (!loaded.ok()) {
        ++errors_;
        return SendMessage(connection, {.type = MessageType::kError,
                                        .version = request.version,
                                        .chunk = kNoChunk,
                                        .code = static_cast<uint8_t>(loaded.status().code()),
                                        .text = loaded.status().message()});
      }
      ++manifests_;
      return SendMessage(connection, {.type = MessageType::kManifest,
                                      .version = (*loaded)->manifest.version.value(),
                                      .blob = (*loaded)->signed_manifest});
    }
    case MessageType::kGetChunk: {
      Status sent =
          SendChunk(connection, request.version, request.chunk, request.base_version, scratch);
      if (sent.ok() || !connection.status().ok()) return sent;
      // The request could not be served (unknown version, chunk out of range): say why.
      ++errors_;
      return SendMessage(connection, {.type = MessageType::kError,
                                      .version = request.version,
                                      .chunk = request.chunk,
                                      .code = static_cast<uint8_t>(sent.code()),
                                      .text = sent.message()});
    }
    default:
      return Corrupt("p2p server: unexpected message type " +
                     std::to_string(static_cast<int>(request.type)));
  }
}

Status VersionServer::SendChunk(net::Connection& connection, uint64_t version, uint32_t chunk,
                                uint64_t base_version, codec::CodecScratch& scratch) {
  if (version == 0) return InvalidArgument("chunk request without a version");
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const Loaded> target, Load(version));
  const Manifest& manifest = target->manifest;
  if (chunk >= manifest.chunk_count()) {
    return OutOfRange("chunk " + std::to_string(chunk) + " of v" + std::to_string(version) +
                      " (it has " + std::to_string(manifest.chunk_count()) + ")");
  }
  const ChunkIndex index(chunk);
  net::ChunkHeader header{.version = version, .chunk_index = chunk};

  // A partial version (a tensor-subset agent's) refuses the chunks it does not hold.
  WC_ASSIGN_OR_RETURN(HeldBytes target_bytes, target->view->Chunk(index));

  // A delta when the client names a base we hold with this chunk; otherwise the raw bytes.
  std::shared_ptr<const Loaded> base;
  if (base_version != 0 && base_version != version) {
    auto loaded = Load(base_version);
    if (loaded.ok() && (*loaded)->view->Holds(index) &&
        (*loaded)->manifest.hash_algorithm == manifest.hash_algorithm) {
      base = *loaded;
    }
  }
  Result<HeldBytes> base_bytes =
      base != nullptr ? base->view->Chunk(index) : Result<HeldBytes>(NotFound("no base"));
  if (base_bytes.ok()) {
    auto encoded = codec::EncodeChunk(
        codec::HashedChunk::FromVerifiedManifest(
            base_bytes->bytes, base->manifest.chunk_hashes[chunk], base->manifest.hash_algorithm),
        codec::HashedChunk::FromVerifiedManifest(target_bytes.bytes, manifest.chunk_hashes[chunk],
                                                 manifest.hash_algorithm),
        codec::ChunkSegments(manifest, index), options_.encode, scratch);
    if (encoded.ok() && encoded->encoding != ChunkEncoding::kSame) {
      auto payload = std::make_shared<std::vector<uint8_t>>(std::move(encoded->payload));
      header.encoding = static_cast<uint8_t>(PayloadKind::kCodec);
      ++delta_chunks_;
      payload_bytes_ += payload->size();
      std::span<const uint8_t> view(*payload);
      return connection.SendChunk(header, view, std::move(payload));
    }
    // kSame (the client copies those itself) or an encoder failure: send the chunk whole.
  }
  header.encoding = static_cast<uint8_t>(PayloadKind::kRaw);
  ++raw_chunks_;
  payload_bytes_ += target_bytes.bytes.size();
  // The owner keeps the mapping (or a gathered copy) until the transport wrote the bytes.
  return connection.SendChunk(header, target_bytes.bytes, std::move(target_bytes.owner));
}

}  // namespace weightcast::agent
