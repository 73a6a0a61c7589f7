// The origin as one more source (docs/origin.md). A node the coordinator granted a share of an
// origin version's chunks (SetOriginShare) fetches them from the HTTP(S) origin its manifest
// names, as if from a peer that seeds just those chunks: the protocol knows the origin as peer
// kOriginPeer, which announced itself a source (kHaveSource: asked only for chunks no receiver
// peer of this node holds). Its requests become ranged GETs on a small pool; what they bring is
// checked against the manifest like any peer's chunk, and a bad one bans the origin as it would
// a peer. Every other effect addressed to the origin (HAVEs, cancels) has nobody to reach.
#include "node/swarm_node_impl.h"

namespace weightcast::node {

void SwarmNode::Impl::SetOriginShare(uint32_t stripe, uint32_t stripes) {
  OnLoop([&] {
    if (stripes != 0 && stripe >= stripes) stripes = 0;  // not a share: none
    if (origin_.stripe == stripe && origin_.stripes == stripes) return;
    origin_.stripe = stripe;
    origin_.stripes = stripes;
    RefreshOriginPeer();
  });
}

std::shared_ptr<const origin::OriginReader> SwarmNode::Impl::OriginReaderFor(
    const Manifest& manifest) {
  if (options_.origin_http == nullptr) return nullptr;
  auto it = manifest.metadata.find(std::string(origin::kObjectsMetadataKey));
  if (it == manifest.metadata.end()) return nullptr;
  Result<std::vector<origin::OriginObject>> objects = origin::ParseOriginObjects(it->second);
  bool same = objects.ok() && objects->size() == manifest.files.size();
  for (size_t i = 0; same && i < manifest.files.size(); ++i) {
    same = (*objects)[i].name == manifest.files[i].path &&
           (*objects)[i].info.size == manifest.files[i].size;
  }
  if (!same) {
    Log(V(manifest.version) + " names origin objects that are not its files (" +
        (objects.ok() ? std::string("names or sizes differ") : objects.status().ToString()) +
        "): not fetching from its origin");
    return nullptr;
  }
  return std::make_shared<const origin::OriginReader>(options_.origin_http,
                                                      std::move(objects).value());
}

// Under mu_: the protocol's view of the origin follows the share and the target. The origin is a
// peer only while this node fetches a target whose origin it can read, with a share granted;
// any change disconnects it and, if it still applies, connects it again with its new chunks.
void SwarmNode::Impl::RefreshOriginPeer() {
  const swarm::Time now = Now();
  if (origin_.connected) {
    origin_.connected = false;
    Apply(protocol_.OnPeerDisconnected(now, kOriginPeer));
  }
  if (origin_.stripes == 0 || target_.data == nullptr) return;
  const TargetData& t = *target_.data;
  if (t.origin == nullptr || t.committed.load() || !protocol_.Admits(now, kOriginPeer)) return;
  const uint32_t n = t.manifest.chunk_count();
  std::vector<bool> share(n, false);
  for (uint32_t c = origin_.stripe; c < n; c += origin_.stripes) share[c] = true;
  origin_.connected = true;
  Apply(protocol_.OnPeerConnected(now, kOriginPeer));
  Message have{.type = MessageType::kSwarmHave,
               .version = t.manifest.version.value(),
               .chunk = n,
               .code = swarm::kHaveSource | swarm::kHaveSkipHeld};
  have.blob = swarm::PackBits(share);
  const std::vector<uint8_t> no_payloads = swarm::PackBits(std::vector<bool>(n, false));
  have.blob.insert(have.blob.end(), no_payloads.begin(), no_payloads.end());
  Apply(protocol_.OnMessage(now, kOriginPeer, have));
}

// Under mu_: an effect addressed to the origin. True when handled here (every kind but the
// target-wide ones, which do not name a peer).
bool SwarmNode::Impl::OriginEffect(const Effect& e) {
  switch (e.kind) {
    case EffectKind::kSend: {
      const Message& m = e.message;
      if (m.type != MessageType::kRequest) return true;  // HAVEs, cancels: nobody to reach
      const Version version(m.version);
      const ChunkIndex chunk(m.chunk);
      std::shared_ptr<const origin::OriginReader> reader =
          target_.data != nullptr && target_.data->manifest.version == version
              ? target_.data->origin
              : nullptr;
      if (reader == nullptr || origin_pool_ == nullptr ||
          m.code != static_cast<uint8_t>(PayloadKind::kRaw) ||
          chunk.value() >= target_.data->manifest.chunk_count()) {
        // The origin holds whole chunks of its own version only.
        Apply(protocol_.OnMessage(Now(), kOriginPeer,
                                  Message{.type = MessageType::kReject,
                                          .version = m.version,
                                          .chunk = m.chunk,
                                          .code = m.code}));
        return true;
      }
      const ByteRange range = target_.data->manifest.ChunkRange(chunk);
      origin_pool_->Submit([this, reader, version, chunk, range] {
        net::Frame frame;
        frame.type = net::FrameType::kChunk;
        frame.body.resize(net::kChunkHeaderSize + range.size);
        net::EncodeChunkHeader(
            net::ChunkHeader{.version = version.value(),
                             .chunk_index = chunk.value(),
                             .payload_length = static_cast<uint32_t>(range.size),
                             .encoding = static_cast<uint8_t>(PayloadKind::kRaw)},
            std::span<uint8_t, net::kChunkHeaderSize>(frame.body.data(), net::kChunkHeaderSize));
        Status read = reader->Read(range.offset,
                                   std::span<uint8_t>(frame.body).subspan(net::kChunkHeaderSize));
        if (read.ok()) origin_bytes_ += range.size;
        Push(OriginRead{
            version, chunk,
            read.ok() ? Result<net::Frame>(std::move(frame)) : Result<net::Frame>(read)});
      });
      return true;
    }
    case EffectKind::kUpload:
      // The origin never asks for anything; the slot frees as if the upload had ended.
      Push(UploadDone{e.epoch, e.peer, e.chunk, false, 0});
      return true;
    case EffectKind::kStopUpload:
      return true;
    case EffectKind::kClose:
      // Banned: a chunk from it failed its hash (content changed at the origin).
      Log("not fetching from the origin any more: " + e.why);
      origin_.connected = false;
      return true;
    default:
      return false;
  }
}

// On the event loop, under mu_.
void SwarmNode::Impl::Handle(OriginRead& e) {
  if (!origin_.connected || target_.data == nullptr ||
      target_.data->manifest.version != e.version) {
    return;  // a target or a share left since it was asked
  }
  if (e.frame.ok()) {
    OnChunkFrame(kOriginPeer, std::move(e.frame).value());
    return;
  }
  const Status& why = e.frame.status();
  Log("origin read of chunk " + std::to_string(e.chunk.value()) + " of " + V(e.version) +
      " failed: " + why.ToString());
  const Code code = why.code();
  if (code == Code::kUnavailable || code == Code::kDeadlineExceeded) {
    // Down for now (the client retried already): the chunk is asked elsewhere or again later.
    Apply(protocol_.OnMessage(Now(), kOriginPeer,
                              Message{.type = MessageType::kReject,
                                      .version = e.version.value(),
                                      .chunk = e.chunk.value(),
                                      .code = static_cast<uint8_t>(PayloadKind::kRaw)}));
    return;
  }
  // Changed, gone or refused: this target fetches nothing more from it.
  target_.data->origin = nullptr;
  RefreshOriginPeer();
}

}  // namespace weightcast::node
