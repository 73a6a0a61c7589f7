// The version this node fetches or seeds: adopting it, committing it, leaving it.
#include "node/swarm_node_impl.h"

#include <algorithm>

#include "live/delta_file.h"
#include "manifest/selection.h"
#include "node/chunk_intake.h"
#include "store/partial.h"

namespace weightcast::node {

// Hands the target to the protocol: what it holds (`whole`, `payload`) and wants, and the
// sizes its item scaling needs. target_.data is set. Under mu_.
Status SwarmNode::Impl::StartTarget(std::vector<bool> whole, std::vector<bool> payload,
                                    std::vector<bool> want, TargetRole role) {
  const TargetData& t = *target_.data;
  const Manifest& m = t.manifest;
  swarm::TargetSpec spec{.version = m.version,
                         .chunk_count = m.chunk_count(),
                         .whole = std::move(whole),
                         .payload = std::move(payload),
                         .want = std::move(want),
                         .source = role.source,
                         .fetch_payloads = role.fetch_payloads,
                         .total_bytes = m.total_size(),
                         .chunk_bytes = m.chunk_size,
                         .payload_bytes = {},
                         .seed = options_.node_id.value() ^ (m.version.value() << 20),
                         .preferred = {}};
  if (preferred_.has_value() && preferred_->first == m.version) spec.preferred = preferred_->second;
  if (m.delta && m.delta->chunks.size() == m.chunk_count()) {
    spec.payload_bytes.reserve(m.chunk_count());
    for (const DeltaChunk& d : m.delta->chunks) {
      spec.payload_bytes.push_back(
          d.encoding == ChunkEncoding::kSame ? 0 : std::max<uint64_t>(d.payload_size, 1));
    }
  }
  Result<std::span<const Effect>> effects = protocol_.SetTarget(Now(), std::move(spec));
  if (!effects.ok()) {
    target_ = Target{};  // no target rather than one the protocol does not know
    return effects.status();
  }
  Apply(*effects);
  done_cv_.notify_all();
  return Status::Ok();
}

// Leaves the current target; its staging is dropped unless it was committed (`reason`: why,
// for streaming readers). Under mu_.
void SwarmNode::Impl::LeaveTarget(std::string_view reason) {
  if (target_.data == nullptr) return;
  if (!target_.data->committed.load() && target_.data->staged) {
    Status aborted = store_.Abort(options_.channel, target_.data->manifest.version, reason);
    if (!aborted.ok())
      Log("abort of " + V(target_.data->manifest.version) + ": " + aborted.ToString());
  }
  protocol_.LeaveTarget();
  target_ = Target{};
  RefreshOriginPeer();  // no target: the origin is no peer
  bytes_sent_at_target_ = bytes_sent_.load();
}

Result<std::optional<Manifest>> SwarmNode::Impl::Committed(Version v) {
  auto list = store_.List(options_.channel);
  if (!list.ok()) {
    if (list.status().code() == Code::kNotFound) return std::optional<Manifest>();
    return list.status();
  }
  for (const VersionInfo& info : *list) {
    if (info.version != v) continue;
    WC_ASSIGN_OR_RETURN(Manifest m, store_.GetManifest(options_.channel, v));
    return std::optional<Manifest>(std::move(m));
  }
  return std::optional<Manifest>();
}

// Which chunks of committed `m` hold its bytes: all, or a partial version's (Store::GetPartial).
Result<std::vector<bool>> SwarmNode::Impl::HeldChunks(const Manifest& m) const {
  WC_ASSIGN_OR_RETURN(std::optional<PartialVersion> partial,
                      store_.GetPartial(options_.channel, m.version));
  std::vector<bool> out(m.chunk_count(), !partial.has_value());
  if (partial) {
    for (ChunkIndex c : partial->chunks) out[c.value()] = true;
  }
  return out;
}

// Whether every wanted chunk still missing can be rebuilt from its payload: its encoding needs
// no base (kFull), or the base holds the chunk. A tensor-subset node's base is its previous
// partial version; when that lacks a chunk the delta needs, the version is fetched whole
// (payloads and whole chunks are not mixed within one target).
bool SwarmNode::Impl::BaseCoversDelta(const Manifest& m, const std::vector<bool>& want,
                                      const std::vector<bool>& whole,
                                      const std::vector<bool>& base_holds) {
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    if (!want[i] || whole[i] || m.delta->chunks[i].encoding == ChunkEncoding::kFull) continue;
    if (i < base_holds.size() && !base_holds[i]) return false;  // beyond it: decoded onto nothing
  }
  return true;
}

// Checks a new target against the current one: OK to replace, or a status (OK for "same").
std::optional<Status> SwarmNode::Impl::CheckReplace(const Manifest& manifest) {
  if (manifest.channel != options_.channel) {
    return InvalidArgument("manifest of channel '" + manifest.channel + "', node follows '" +
                           options_.channel + "'");
  }
  if (target_.data == nullptr) return std::nullopt;
  const Manifest& cur = target_.data->manifest;
  if (cur.version == manifest.version) {
    if (cur.root != manifest.root) {
      return FailedPrecondition(V(manifest.version) + " arrived with another root");
    }
    return Status::Ok();
  }
  // Another version, older ones included: after a rollback the fleet's current version is
  // below the target, and this node must serve it (or fetch it) instead.
  return std::nullopt;
}

Status SwarmNode::Impl::Fetch(const Manifest& manifest) {
  return OnLoop([&]() -> Status { return FetchLocked(manifest); });
}

bool SwarmNode::Impl::PayloadsOnly(const Manifest& target, const Manifest& base) const {
  return live_base_.value() != 0 && live_base_ == base.version && live_base_root_ == base.root &&
         options_.tensor_patterns.empty() && options_.use_delta && target.delta.has_value() &&
         target.delta->base_version == base.version && target.delta->base_root == base.root &&
         target.delta->chunks.size() == target.chunk_count() &&
         base.hash_algorithm == target.hash_algorithm;
}

void SwarmNode::Impl::SetLiveBase(Version version, const Digest& root) {
  OnLoop([&] {
    live_base_ = version;
    live_base_root_ = root;
  });
}

void SwarmNode::Impl::ReadoptIfAsked() {
  if (!readopt_.has_value()) return;
  const Manifest manifest = std::move(*readopt_);
  readopt_.reset();
  LeaveTarget("fetched again whole");
  if (Status s = FetchLocked(manifest); !s.ok()) {
    Log("fetching " + V(manifest.version) + " again whole failed: " + s.ToString());
  }
}

Status SwarmNode::Impl::FetchLocked(const Manifest& manifest) {
  if (auto s = CheckReplace(manifest)) return *s;
  const Stopwatch begun;
  const uint32_t n = manifest.chunk_count();
  auto data = std::make_shared<TargetData>();
  data->manifest = manifest;
  std::vector<bool> want(n, options_.tensor_patterns.empty());
  if (!options_.tensor_patterns.empty()) {
    // The chunks of the selected tensors and those that keep every file parseable (headers).
    TensorSelection selection = SelectTensors(manifest, options_.tensor_patterns);
    for (ChunkIndex c : selection.chunks) want[c.value()] = true;
    data->subset = PartialVersion{options_.tensor_patterns, std::move(selection.tensors),
                                  std::move(selection.chunks)};
  }

  WC_ASSIGN_OR_RETURN(std::optional<Manifest> held, Committed(manifest.version));
  bool held_as_payloads = false;  // and current: the live tensors hold it
  if (held) {
    WC_ASSIGN_OR_RETURN(std::optional<PartialVersion> partial,
                        store_.GetPartial(options_.channel, manifest.version));
    const Result<Version> current = store_.Current(options_.channel);
    held_as_payloads = partial.has_value() && partial->payloads;
    if (held_as_payloads && (!current.ok() || *current != manifest.version)) {
      // Whole only in the live tensors that applied it, and they moved on (a rollback to it):
      // fetched again, whole.
      WC_RETURN_IF_ERROR(store_.ForgetPayloadVersions(options_.channel, manifest.version).status());
      Log(V(manifest.version) + " was held as payloads only: fetching it again whole");
      held.reset();
    }
  }
  if (held) {
    if (held->root != manifest.root) {
      return FailedPrecondition("local " + V(manifest.version) + " has another root");
    }
    // A partial version (a tensor-subset node's) holds, and serves, only its chunks; so does
    // the current version held as payloads (its payloads went with the target that kept them).
    WC_ASSIGN_OR_RETURN(std::vector<bool> holds, HeldChunks(*held));
    if (held_as_payloads) want = holds;
    for (uint32_t i = 0; i < n; ++i) {
      if (want[i] && !holds[i]) {
        return FailedPrecondition("local " + V(manifest.version) +
                                  " is committed partially, without chunk " + std::to_string(i) +
                                  " that this node wants (other --tensors?)");
      }
    }
    LeaveTarget();
    data->committed = true;
    target_.data = std::move(data);
    // Every wanted chunk is held: the target is complete from the start.
    WC_RETURN_IF_ERROR(StartTarget(std::move(holds), std::vector<bool>(n, false), std::move(want)));
    Log("target " + V(manifest.version) + " already committed: serving it");
    return Status::Ok();
  }

  LeaveTarget();
  // The current committed version is the local base: chunks equal to its chunks are copied,
  // and a delta onto it travels as payloads.
  auto current = store_.Current(options_.channel);
  Result<Manifest> base = current.ok() ? store_.GetManifest(options_.channel, *current)
                                       : Result<Manifest>(current.status());
  // A partial base (this node's previous subset, or payloads) holds real bytes only in its chunks.
  auto base_holds = base.ok() ? HeldChunks(*base) : Result<std::vector<bool>>(base.status());
  if (base.ok() && base_holds.ok() && PayloadsOnly(manifest, *base)) {
    // Only the chunks outside every tensor are decoded; the base must hold those of them that
    // are decoded onto it.
    data->payloads_only = true;
    data->decoded.assign(n, false);
    for (ChunkIndex c : ChunksOutsideTensors(manifest)) data->decoded[c.value()] = true;
    for (uint32_t i = 0; i < n && data->payloads_only; ++i) {
      if (data->decoded[i] && manifest.delta->chunks[i].encoding != ChunkEncoding::kFull &&
          (i >= base->chunk_count() || !(*base_holds)[i])) {
        data->payloads_only = false;
      }
    }
  }
  const bool payloads_only = data->payloads_only;
  // Staging left by an earlier run: resumed when it is this version, dropped otherwise.
  auto staging = store_.ListStaging(options_.channel);
  if (staging.ok()) {
    for (Version v : *staging) {
      if (v == manifest.version) {
        auto resumed = store_.ResumeStaging(options_.channel, v);
        if (resumed.ok() && resumed->manifest().root == manifest.root) {
          data->staged.emplace(std::move(resumed).value());
          continue;
        }
      }
      if (v <= manifest.version) store_.Abort(options_.channel, v).IgnoreError();
    }
  }
  if (!data->staged) {
    // Payloads only: the files stay sparse but for the decoded chunks.
    WC_ASSIGN_OR_RETURN(StagedVersion begun, store_.BeginStaging(options_.channel, manifest,
                                                                 {.preallocate = !payloads_only}));
    data->staged.emplace(std::move(begun));
  }
  std::vector<bool> whole(n, false);
  for (uint32_t i = 0; i < n; ++i) whole[i] = data->staged->HasChunk(ChunkIndex(i));
  const uint32_t resumed = data->staged->verified_count();

  uint32_t copied = 0;
  bool fetch_payloads = false;
  if (base.ok() && base_holds.ok()) {
    // The base is read where the version changed: most of it in a dense RL step (only the
    // decoded chunks with payloads only).
    const codec::ReadPattern pattern = manifest.delta.has_value() && !payloads_only
                                           ? codec::BaseReadPattern(*manifest.delta)
                                           : codec::ReadPattern::kSparse;
    auto bytes =
        codec::SnapshotReader::Open(store_.VersionPath(options_.channel, *current), *base, pattern);
    if (bytes.ok() && base->hash_algorithm == manifest.hash_algorithm) {
      std::vector<uint8_t> scratch;
      for (uint32_t i = 0; i < n; ++i) {
        const ChunkIndex c(i);
        if (payloads_only && !data->decoded[i]) {
          // Equal to the base: the live tensors hold it already, nothing to fetch or stage.
          if (manifest.delta->chunks[i].encoding == ChunkEncoding::kSame) want[i] = false;
          continue;
        }
        if (whole[i] || !want[i] || i >= base->chunk_count() || !(*base_holds)[i]) continue;
        if (StageFromBase(manifest, c, *base, *bytes, options_.verify_result, *data->staged,
                          scratch)) {
          whole[i] = true;
          ++copied;
        }
      }
      // With payloads only, the base needs only the chunks that are decoded.
      std::vector<bool> decode = want;
      if (payloads_only) {
        for (uint32_t i = 0; i < n; ++i) decode[i] = want[i] && data->decoded[i];
      }
      fetch_payloads = options_.use_delta && manifest.delta.has_value() &&
                       manifest.delta->base_version == *current &&
                       manifest.delta->base_root == base->root &&
                       manifest.delta->chunks.size() == n &&
                       BaseCoversDelta(manifest, decode, whole, *base_holds);
      if (fetch_payloads) {
        data->base_manifest = *base;
        data->base_bytes.emplace(std::move(bytes).value());
        // Spilled past its memory bound into the store's own disk (TMPDIR may be tmpfs).
        data->payloads = std::make_shared<PayloadCache>(
            manifest.version, PayloadCacheOptions{.spill_dir = store_.root()});
      }
    }
  }
  if (payloads_only && !fetch_payloads) {
    // The base's files did not open: adopted again without payloads only (every chunk wanted,
    // the staging just begun resumed).
    live_base_ = Version();
    data->staged.reset();
    return FetchLocked(manifest);
  }
  WC_RETURN_IF_ERROR(data->staged->Flush());
  data->origin = OriginReaderFor(manifest);
  target_.data = std::move(data);
  target_.started = begun;
  WC_RETURN_IF_ERROR(StartTarget(std::move(whole), std::vector<bool>(n, false), std::move(want),
                                 {.fetch_payloads = fetch_payloads}));
  RefreshOriginPeer();
  Log("target " + V(manifest.version) + ": " + std::to_string(n) + " chunks, " +
      std::to_string(resumed) + " resumed, " + std::to_string(copied) + " copied locally, " +
      (payloads_only    ? "fetching delta payloads for the live tensors"
       : fetch_payloads ? "fetching delta payloads"
                        : "fetching whole chunks") +
      " (staged in " + std::to_string(static_cast<int64_t>(begun.Seconds() * 1000)) +
      " ms, window " + std::to_string(protocol_.window()) + ")");
  return Status::Ok();
}

Status SwarmNode::Impl::Seed(const Manifest& manifest, std::shared_ptr<const PayloadCache> payloads,
                             ChunkReader reader) {
  return OnLoop([&]() -> Status {
    if (auto s = CheckReplace(manifest)) return *s;
    if (!reader) {
      WC_ASSIGN_OR_RETURN(std::optional<Manifest> held, Committed(manifest.version));
      if (!held || held->root != manifest.root) {
        return FailedPrecondition("cannot seed " + V(manifest.version) +
                                  ": not committed in the store with this root");
      }
    }
    WC_RETURN_IF_ERROR(AdoptAsSource(manifest, std::move(payloads), std::move(reader)));
    Log("seeding " + V(manifest.version));
    return Status::Ok();
  });
}

Status SwarmNode::Impl::SeedFrom(const Manifest& manifest, ChunkReader reader) {
  return OnLoop([&]() -> Status {
    if (auto s = CheckReplace(manifest)) return *s;
    if (!reader) return InvalidArgument("cannot seed " + V(manifest.version) + ": no reader");
    WC_RETURN_IF_ERROR(AdoptAsSource(manifest, nullptr, std::move(reader)));
    Log("seeding " + V(manifest.version) + " from its origin");
    return Status::Ok();
  });
}

Status SwarmNode::Impl::AdoptAsSource(const Manifest& manifest,
                                      std::shared_ptr<const PayloadCache> payloads,
                                      ChunkReader reader) {
  const uint32_t n = manifest.chunk_count();
  LeaveTarget();
  if (reader) {
    std::lock_guard source(source_mu_);
    source_failure_ = Status::Ok();
  }
  auto data = std::make_shared<TargetData>();
  data->manifest = manifest;
  data->committed = true;
  data->seed_payloads = std::move(payloads);
  data->reader = std::move(reader);
  target_.data = std::move(data);
  std::vector<bool> payload(n, false);
  if (target_.data->seed_payloads != nullptr) {
    for (ChunkIndex c : target_.data->seed_payloads->Chunks()) {
      if (c.value() < n) payload[c.value()] = true;
    }
  }
  target_.started.Restart();
  return StartTarget(std::vector<bool>(n, true), std::move(payload), std::vector<bool>(n, true),
                     {.source = true});
}

Status SwarmNode::Impl::SeedPart(const Manifest& manifest, const Manifest& part,
                                 uint32_t first_chunk,
                                 std::shared_ptr<const PayloadCache> payloads) {
  return OnLoop([&]() -> Status {
    if (auto s = CheckReplace(manifest)) return *s;
    const uint32_t n = manifest.chunk_count();
    const uint32_t own = part.chunk_count();
    if (first_chunk > n || own > n - first_chunk ||
        !std::equal(part.chunk_hashes.begin(), part.chunk_hashes.end(),
                    manifest.chunk_hashes.begin() + first_chunk)) {
      return FailedPrecondition(
          "cannot seed " + V(manifest.version) + ": this rank's part is not its chunks " +
          std::to_string(first_chunk) + ".." + std::to_string(first_chunk + own));
    }
    WC_ASSIGN_OR_RETURN(std::optional<Manifest> held, Committed(part.version));
    if (!held || held->root != part.root) {
      return FailedPrecondition("cannot seed " + V(manifest.version) +
                                ": this rank's part is not committed in the store");
    }
    LeaveTarget();
    auto data = std::make_shared<TargetData>();
    data->manifest = manifest;
    data->committed = true;
    data->seed_payloads = std::move(payloads);
    data->part = TargetData::PartSeed{part.version, first_chunk, own};
    target_.data = std::move(data);
    // This rank holds, wants and replicates its part's chunks only.
    std::vector<bool> own_chunks(n, false), payload(n, false);
    for (uint32_t i = first_chunk; i < first_chunk + own; ++i) own_chunks[i] = true;
    if (target_.data->seed_payloads != nullptr) {
      for (ChunkIndex c : target_.data->seed_payloads->Chunks()) {
        if (c.value() < own) payload[first_chunk + c.value()] = true;
      }
    }
    target_.started.Restart();
    WC_RETURN_IF_ERROR(StartTarget(own_chunks, std::move(payload), own_chunks, {.source = true}));
    Log("seeding " + V(manifest.version) + " chunks " + std::to_string(first_chunk) + ".." +
        std::to_string(first_chunk + own) + " (this rank's part)");
    return Status::Ok();
  });
}

Status SwarmNode::Impl::CommitTarget() {
  std::shared_ptr<TargetData> data;
  bool kept_payloads = false;  // every payload was fetched and decoded (no fall-back)
  WC_RETURN_IF_ERROR(OnLoop([&]() -> Status {
    if (target_.data == nullptr) return FailedPrecondition("no target to commit");
    if (target_.data->committed.load()) return Status::Ok();  // data stays null: done
    if (!protocol_.complete()) {
      const swarm::Scheduler* scheduler = protocol_.scheduler();
      return FailedPrecondition(V(target_.data->manifest.version) + " is not complete (" +
                                std::to_string(scheduler != nullptr ? scheduler->missing() : 0) +
                                " missing)");
    }
    data = target_.data;
    kept_payloads = protocol_.fetching_payloads();
    return Status::Ok();
  }));
  if (data == nullptr) return Status::Ok();
  // The commit (fsyncs, renames) runs without the lock; uploads keep reading the staging
  // and fall back to the committed files once it moved.
  WC_RETURN_IF_ERROR(data->staged->Flush());
  if (data->subset) {
    // Only the chunks of its tensors (docs/agent.md, "Tensor subsets"): no delta file, since
    // samplers of a partial version read its files.
    WC_RETURN_IF_ERROR(
        store_.CommitPartial(options_.channel, data->manifest.version, *data->subset));
  } else if (data->payloads_only) {
    // The delta file is the version for its sampler: without it, nothing is committed.
    WC_RETURN_IF_ERROR(KeepDeltaFile(*data));
    PartialVersion held;
    for (uint32_t i = 0; i < data->decoded.size(); ++i) {
      if (data->decoded[i]) held.chunks.emplace_back(i);
    }
    held.payloads = true;
    WC_RETURN_IF_ERROR(store_.CommitPartial(options_.channel, data->manifest.version, held));
  } else {
    if (kept_payloads) {
      if (Status s = KeepDeltaFile(*data); !s.ok() && s.code() != Code::kInvalidArgument) {
        Log("no delta file for " + V(data->manifest.version) + ": " + s.ToString());
      }
    }
    WC_RETURN_IF_ERROR(store_.Commit(options_.channel, data->manifest.version));
  }
  if (Result<std::vector<VersionInfo>> kept = store_.List(options_.channel); kept.ok()) {
    std::vector<Version> keep;
    for (const VersionInfo& v : *kept) keep.push_back(v.version);
    live::CollectDeltaFiles(store_.root(), options_.channel, keep);
  }
  data->committed = true;
  Log("committed " + V(data->manifest.version));
  done_cv_.notify_all();
  return Status::Ok();
}

// Samplers on this machine patch their live tensors from a version's payloads instead of
// copying its chunks (docs/live.md): when this node received the delta as payloads (every
// one checked against the signed manifest), keep them in the delta file beside the store,
// before the version becomes current. A node that took some chunks whole has no complete set:
// its samplers copy the chunks that differ instead.
Status SwarmNode::Impl::KeepDeltaFile(const TargetData& data) {
  if (data.payloads == nullptr || !data.manifest.delta.has_value()) {
    return FailedPrecondition(V(data.manifest.version) + " was not received as payloads");
  }
  return live::WriteDeltaFile(store_.root(), data.manifest,
                              [&](ChunkIndex i) -> std::span<const uint8_t> {
                                // The cache keeps every payload it holds alive, so the span
                                // outlives `p`.
                                const std::optional<HeldBytes> p = data.payloads->Get(i);
                                if (!p) return {};
                                return p->bytes;
                              });
}

void SwarmNode::Impl::PreferChunks(Version version, std::vector<ChunkIndex> order) {
  OnLoop([&] {
    preferred_.emplace(version, order);
    if (target_.data != nullptr && target_.data->manifest.version == version) {
      Apply(protocol_.Prefer(Now(), std::move(order)));
    }
  });
}

Status SwarmNode::Impl::AbortTarget(std::string_view reason) {
  return OnLoop([&]() -> Status {
    if (target_.data == nullptr) return Status::Ok();
    if (target_.data->committed.load()) {
      return FailedPrecondition(V(target_.data->manifest.version) + " is already committed");
    }
    LeaveTarget(reason);
    done_cv_.notify_all();
    return Status::Ok();
  });
}

}  // namespace weightcast::node
