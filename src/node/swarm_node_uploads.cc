// Chunks and payloads sent to peers: read from memory or the store, handed to the transport.
#include "node/swarm_node_impl.h"

namespace weightcast::node {

std::shared_ptr<SwarmNode::Impl::UploadSink> SwarmNode::Impl::MakeUploadSink() {
  auto sink = std::make_shared<UploadSink>();
  sink->impl = this;
  return sink;
}

// Starts the peer's next uploads. Any thread. A whole chunk is read through the store's views
// (opening one, faulting its pages in) on an upload worker, one at a time. Codec payloads are
// held in memory and a few KiB each: they go to the transport from this thread, several at a
// time (up to kPayloadBytesInTransport). One at a time, each would wait for the write of the
// one before to be reported back, two thread switches per payload of a delta step.
void SwarmNode::Impl::KickUploads(const std::shared_ptr<SwarmNode::Impl::Peer>& p) {
  while (true) {
    std::optional<UploadItem> item;
    std::optional<HeldBytes> payload;
    {
      std::lock_guard lock(p->wmu);
      while (!p->closing && !p->upload_active && !p->uploads.empty() && !item) {
        UploadItem& front = p->uploads.front();
        if (p->stopped.erase({front.target->epoch, front.chunk.value()}) != 0) {
          p->uploads.pop_front();
          continue;
        }
        if (front.kind != PayloadKind::kCodec) {
          p->upload_active = true;
          upload_pool_->Submit([this, p] { UploadNext(*p); });
          return;
        }
        payload = front.target->Payload(front.chunk);
        if (payload && p->payload_bytes_in_transport != 0 &&
            p->payload_bytes_in_transport + payload->bytes.size() > kPayloadBytesInTransport) {
          return;  // the next UploadDone of a payload starts it
        }
        item = std::move(front);
        p->uploads.pop_front();
        if (payload) p->payload_bytes_in_transport += payload->bytes.size();
      }
    }
    if (!item) return;
    if (!payload) {
      Log("cannot send the payload of chunk " + std::to_string(item->chunk.value()) + " of " +
          V(item->target->manifest.version) + " to peer " + std::to_string(p->id.value()) +
          ": no payload held");
      Push(UploadDone{item->target->epoch, p->id, item->chunk, false, p->gen});
      continue;
    }
    HeldBytes data = std::move(*payload);
    CorruptForTesting(data);
    SendUpload(*p, *item, std::move(data), /*payload=*/true);
  }
}

// Hands one upload's bytes to the transport; its release of the frame (UploadToken) reports
// the upload done.
void SwarmNode::Impl::SendUpload(Peer& p, const UploadItem& item, HeldBytes data, bool payload) {
  net::ChunkHeader header{.version = item.target->manifest.version.value(),
                          .chunk_index = item.chunk.value(),
                          .payload_length = static_cast<uint32_t>(data.bytes.size()),
                          .encoding = static_cast<uint8_t>(item.kind)};
  const size_t size = data.bytes.size();
  net::OutFrame frame = net::OutFrame::Chunk(header, data.bytes, std::move(data.owner));
  frame.on_written = std::make_shared<UploadToken>(
      upload_sink_,
      UploadDone{item.target->epoch, p.id, item.chunk, true, p.gen, payload, payload ? size : 0});
  // The transport's data queue holds at most one whole chunk or kPayloadBytesInTransport of
  // this peer's payloads, so it has room: no wait here.
  if (p.conn->Send(std::move(frame)).ok()) bytes_sent_ += size;
  // A failed send released the token: the connection is gone, and its end is reported.
}

// On an upload worker: reads the peer's next chunk and hands it to the transport; the
// transport's release of the frame (UploadToken) reports it done and lets the next one start.
void SwarmNode::Impl::UploadNext(Peer& p) {
  while (true) {
    std::optional<UploadItem> upload;
    {
      std::lock_guard lock(p.wmu);
      while (!p.closing && !p.uploads.empty() && !upload) {
        upload = std::move(p.uploads.front());
        p.uploads.pop_front();
        if (p.stopped.erase({upload->target->epoch, upload->chunk.value()}) != 0) upload.reset();
      }
      if (!upload) {
        p.upload_active = false;
        return;
      }
    }
    const UploadItem& item = *upload;
    auto bytes = ReadForUpload(item);
    if (!bytes.ok()) {
      Log("cannot send chunk " + std::to_string(item.chunk.value()) + " of " +
          V(item.target->manifest.version) + " to peer " + std::to_string(p.id.value()) + ": " +
          bytes.status().ToString());
      Push(UploadDone{item.target->epoch, p.id, item.chunk, false, p.gen});
      continue;
    }
    SendUpload(p, item, std::move(bytes).value(), /*payload=*/false);
    return;
  }
}

Result<HeldBytes> SwarmNode::Impl::ReadForUpload(const UploadItem& item) {
  TargetData& t = *item.target;
  HeldBytes data;
  if (item.kind == PayloadKind::kCodec) {
    std::optional<HeldBytes> payload = t.Payload(item.chunk);
    if (!payload) return NotFound("no payload held");
    data = std::move(*payload);
  } else if (std::optional<HeldBytes> recent = t.recent.Get(item.chunk)) {
    data = std::move(*recent);
    ++uploads_from_memory_;
  } else if (t.reader) {
    WC_ASSIGN_OR_RETURN(data, ReadFromSource(t, item.chunk));
  } else {
    // Through the store's mapped views: the frame sends from the mapping, which its owner
    // keeps (no copy, except for a chunk that spans files).
    auto committed = [&](Version v, ChunkIndex c) -> Result<HeldBytes> {
      WC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedVersion> view,
                          store_.OpenView(options_.channel, v));
      return view->Chunk(c);
    };
    Result<HeldBytes> bytes = NotFound("chunk not held");
    if (t.part) {
      if (!t.InPart(item.chunk)) return NotFound("chunk not in this rank's part");
      bytes = committed(t.part->stored, ChunkIndex(item.chunk.value() - t.part->first_chunk));
    } else {
      if (!t.committed.load() && t.staged) {
        auto view = t.staged->View();
        bytes = view.ok() ? (*view)->Chunk(item.chunk) : view.status();
      }
      // Committed (or committed while we read the staging): the version's view.
      if (!bytes.ok()) bytes = committed(t.manifest.version, item.chunk);
    }
    WC_RETURN_IF_ERROR(bytes.status());
    data = std::move(bytes).value();
    ++uploads_from_store_;
  }
  CorruptForTesting(data);
  return data;
}

Result<HeldBytes> SwarmNode::Impl::ReadFromSource(TargetData& t, ChunkIndex chunk) {
  const Manifest& m = t.manifest;
  const ByteRange range = m.ChunkRange(chunk);
  Result<HeldBytes> bytes = t.reader(range);
  if (!bytes.ok()) {
    // An origin that is down may come back (the reader retried already; peers ask again). One
    // whose object changed or went away will not.
    const Code code = bytes.status().code();
    if (code == Code::kFailedPrecondition || code == Code::kNotFound || code == Code::kCorrupt) {
      NoteSourceFailure(bytes.status());
    }
    return bytes.status();
  }
  if (bytes->bytes.size() != range.size ||
      HashBytes(m.hash_algorithm, bytes->bytes) != m.chunk_hashes[chunk.value()]) {
    // Origin bytes are checked like a peer's: what fails its hash is never sent.
    Status bad = Corrupt("chunk " + std::to_string(chunk.value()) + " of " + V(m.version) +
                         " as read from its origin does not match the manifest: the content "
                         "changed at the origin");
    NoteSourceFailure(bad);
    return bad;
  }
  HeldBytes held = std::move(bytes).value();
  t.recent.Put(chunk, held);
  ++uploads_from_store_;
  return held;
}

void SwarmNode::Impl::NoteSourceFailure(const Status& status) {
  std::lock_guard lock(source_mu_);
  if (source_failure_.ok()) source_failure_ = status;
}

// A test's node that sends every chunk with one bit flipped (corrupt_uploads_for_testing). A
// fault point: compiled in only with WC_TEST_HOOKS (the builds the tests run), never in the
// builds users install.
void SwarmNode::Impl::CorruptForTesting(HeldBytes& data) const {
#if WC_TEST_HOOKS
  if (!options_.corrupt_uploads_for_testing || data.bytes.empty()) return;
  auto copy = std::make_shared<std::vector<uint8_t>>(data.bytes.begin(), data.bytes.end());
  (*copy)[copy->size() / 2] ^= 0x01;
  data = HeldBytes::Of(std::move(copy));
#else
  (void)data;
#endif
}

void SwarmNode::Impl::Handle(UploadDone& e) {
  if (e.sent) {
    auto it = peers_.find(e.peer.value());
    if (it != peers_.end() && it->second->gen == e.gen) {
      {
        std::lock_guard lock(it->second->wmu);
        if (e.payload) {
          it->second->payload_bytes_in_transport -= e.payload_bytes;
        } else {
          it->second->upload_active = false;
        }
      }
      KickUploads(it->second);
    }
  }
  Apply(protocol_.OnUploadDone(Now(), e.epoch, e.peer, e.chunk));
}

}  // namespace weightcast::node
