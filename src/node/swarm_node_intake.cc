// Received chunks and payloads: checked against the manifest, decoded onto the base, staged.
#include "node/swarm_node_impl.h"

#include "codec/chunk_codec.h"
#include "hash/digest.h"
#include "node/chunk_intake.h"

namespace weightcast::node {

void SwarmNode::Impl::OnChunkFrame(PeerId from, net::Frame frame) {
  auto header = frame.chunk_header();
  if (!header.ok()) return;
  const uint64_t size = frame.chunk_payload().size();
  bytes_received_ += size;
  const Version v(header->version);
  if (target_.data == nullptr || protocol_.target_version() != v) return;  // a target we left
  target_.bytes_received += size;
  const uint32_t c = header->chunk_index;
  // Dropped unread unless it answers a request of this epoch and is not held or being checked.
  const swarm::Arrival arrival =
      protocol_.OnChunkArrived(Now(), from, v, ChunkIndex(c), header->encoding);
  if (!arrival.check) return;
  PendingCheck check{target_.data, std::make_shared<const net::Frame>(std::move(frame)),
                     from,         ChunkIndex(c),
                     arrival.item, arrival.epoch};
  if (CheckedOnLoop(check)) {
    loop_checks_.push_back(std::move(check));
    return;
  }
  pool_->Submit([this, check = std::move(check)] { Push(Check(check)); });
}

// A codec payload onto a small chunk is checked on the event loop's own thread, between
// batches and outside mu_: handing it to a worker and its result back costs two thread
// switches, more than decoding a few KiB onto the base. Whole chunks (a SHA-256 pass each) and
// large chunks stay on the workers, which spread them over the cores.
bool SwarmNode::Impl::CheckedOnLoop(const PendingCheck& check) {
  return check.kind == PayloadKind::kCodec &&
         check.data->manifest.ChunkRange(check.chunk).size <= kLoopCheckMaxChunkBytes;
}

SwarmNode::Impl::Verified SwarmNode::Impl::Check(const PendingCheck& c) {
  Verified result = VerifyAndStore(*c.data, c.epoch, c.frame, c.from, c.chunk, c.kind);
  if (result.status.code() == Code::kCorrupt && !result.decode_failed && options_.on_bad_chunk) {
    options_.on_bad_chunk(c.from);
  }
  return result;
}

// The event loop's own checks (CheckedOnLoop): run outside mu_, their outcomes handled under
// it. Handling an outcome never receives a frame, so one round empties the list.
void SwarmNode::Impl::RunLoopChecks() {
  std::vector<PendingCheck> checks;
  {
    LoopLock lock(*this);
    checks.swap(loop_checks_);
  }
  if (checks.empty()) return;
  std::vector<Verified> results;
  results.reserve(checks.size());
  for (const PendingCheck& c : checks) results.push_back(Check(c));
  LoopLock lock(*this);
  for (Verified& r : results) Handle(r);
}

// Runs on a worker: checks the chunk (or payload, then the decoded chunk) against the manifest
// and writes it to the staging. A chunk is marked verified only after its bytes hashed to the
// manifest's chunk hash.
SwarmNode::Impl::Verified SwarmNode::Impl::VerifyAndStore(
    TargetData& t, uint64_t epoch, const std::shared_ptr<const net::Frame>& frame, PeerId from,
    ChunkIndex chunk, PayloadKind kind) {
  Verified out{epoch, from, chunk, kind, Status::Ok()};
  const Manifest& m = t.manifest;
  const ByteRange range = m.ChunkRange(chunk);
  std::span<const uint8_t> payload = frame->chunk_payload();
  // Built only for an error: a delta step verifies hundreds of chunks a second.
  auto what = [&] { return "chunk " + std::to_string(chunk.value()) + " of " + V(m.version); };
  if (kind == PayloadKind::kRaw) {
    out.status = t.staged->PutChunk(chunk, payload);
    if (out.status.ok()) t.recent.Put(chunk, {payload, frame});
    return out;
  }
  const DeltaChunk& d = m.delta->chunks[chunk.value()];
  // The payload first, before a byte of it is parsed: its SHA-256 is in the signed manifest.
  // With the fast check (docs/verification.md) that hash is what makes the payload trusted
  // input, so the rebuilt chunk needs only its XXH3-128; otherwise it is hashed with SHA-256.
  std::optional<codec::CheckedPayload> checked;
  if (codec::UsesFastCheck(m, options_.verify_result)) {
    Result<codec::CheckedPayload> c =
        codec::CheckedPayload::Check(payload, d.payload_size, d.payload_hash);
    if (!c.ok()) {
      out.status = Corrupt(what() + ": payload does not match its manifest hash");
      return out;
    }
    checked = *c;
  } else if (payload.size() != d.payload_size ||
             HashBytes(m.delta->payload_hash_algorithm, payload) != d.payload_hash) {
    out.status = Corrupt(what() + ": payload does not match its manifest hash");
    return out;
  }
  if (t.payloads_only && !t.decoded[chunk.value()]) {
    // Authentic, and kept as it is: the sampler patches its live tensors with it and checks
    // every chunk it writes (docs/live.md, "Samplers that stage nothing").
    t.payloads->Put(chunk, HeldBytes{payload, frame});  // in its frame: no copy
    out.kept = true;
    return out;
  }
  // The payload is the publisher's own: a failure from here on is not the sender's fault.
  thread_local codec::CodecScratch scratch;
  thread_local std::vector<uint8_t> base_scratch;  // reused: a fresh one is an mmap per chunk
  const codec::HashedChunk base =
      BaseChunkFor(t.base_manifest ? &*t.base_manifest : nullptr,
                   t.base_bytes ? &*t.base_bytes : nullptr, chunk, m.hash_algorithm, base_scratch);
  // One pass: each decoded block is hashed and written to the staged file while it is in
  // cache (no dry run, no chunk-sized copy). The staged range holds unverified bytes until the
  // decoder has checked the whole chunk's hash; the chunk is marked verified only then, so a
  // failure (or a crash) leaves it missing and it is fetched again.
  Status write_error;
  const codec::DecodedBlockSink sink = [&](uint64_t offset, std::span<const uint8_t> block) {
    std::shared_lock current(t.write_mu);
    if (t.epoch != epoch) {
      // Restarted meanwhile: the new epoch may already hold this chunk, verified.
      write_error = Aborted("the fetch restarted while chunk " + std::to_string(chunk.value()) +
                            " was decoding");
      return write_error;
    }
    write_error = t.staged->WriteChunkPart(chunk, offset, block);
    return write_error;
  };
  const Digest* expected = &m.chunk_hashes[chunk.value()];
  Status status =
      checked ? codec::DecodeChunkStreaming(*checked, base, expected, m.fast_hashes[chunk.value()],
                                            range.size, sink, scratch)
              : codec::DecodeChunkStreaming(payload, base, expected, range.size, sink, scratch);
  if (!write_error.ok()) {
    out.status = write_error;  // ours (disk), not a decode failure
    return out;
  }
  if (!status.ok()) {
    out.status = status.WithContext(what());
    out.decode_failed = true;
    return out;
  }
  out.fast = checked.has_value();
  out.status = t.staged->MarkVerified(chunk);
  if (out.status.ok() && t.payloads != nullptr) {
    t.payloads->Put(chunk, HeldBytes{payload, frame});  // in its frame: no copy
  }
  return out;
}

void SwarmNode::Impl::Handle(Verified& e) {
  if (target_.data == nullptr || e.epoch != protocol_.epoch()) return;
  swarm::CheckOutcome outcome = swarm::CheckOutcome::kOk;
  std::string why;
  if (e.status.ok() && e.kept) {
    outcome = swarm::CheckOutcome::kPayloadKept;
    ++chunks_verified_;
  } else if (e.status.ok()) {
    ++chunks_verified_;
    if (e.kind == PayloadKind::kCodec) ++(e.fast ? delta_chunks_fast_ : delta_chunks_sha256_);
  } else if (e.decode_failed) {
    outcome = swarm::CheckOutcome::kUndecodable;
    why = e.status.ToString();
  } else if (e.status.code() == Code::kCorrupt) {
    outcome = swarm::CheckOutcome::kCorrupt;
    ++chunks_failed_;
    ++target_.chunks_failed;
    Log("bad data from peer " + std::to_string(e.from.value()) + ": " + e.status.ToString());
  } else {
    outcome = swarm::CheckOutcome::kStoreError;
    why = e.status.WithContext("storing chunk " + std::to_string(e.chunk.value())).ToString();
  }
  Apply(protocol_.OnChunkChecked(Now(), e.epoch, e.from, e.chunk, outcome, why));
}

}  // namespace weightcast::node
