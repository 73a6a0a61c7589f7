// The coordinator's side of sharded publish (docs/sharded_publish.md): the rank set that holds a
// channel's writer lease, and the assembly of a version from its ranks' parts
// (manifest/part_assembly.h). Members of Coordinator (coordinator.h), kept apart from
// coordinator.cc; every function here runs with mu_ held.
#include <algorithm>
#include <utility>

#include "coord/coordinator.h"
#include "coord/writer_text.h"
#include "trust/assembled_manifest.h"
#include "trust/signed_manifest.h"
#include "util/text.h"

namespace weightcast::coord {
namespace {

// Aborted assemblies remembered per channel, so a rank that asks again hears the reason.
constexpr size_t kAbortedRemembered = 16;

std::string V(uint64_t v) { return "v" + std::to_string(v); }

uint64_t HeldEpochOf(const wire::Register& request, std::string_view channel) {
  for (const wire::WriterLease& lease : request.leases()) {
    if (lease.channel() == channel) return lease.epoch();
  }
  return 0;
}

}  // namespace

Result<Coordinator::WriterGrant> Coordinator::GrantShardedWriterLocked(
    const std::string& channel, const net::PeerInfo& peer, const wire::Register& request,
    const wire::ChannelWriter& current, net::TimePoint now) const {
  const uint32_t world = request.world() > 1 ? request.world() : 1;
  const uint32_t held_world = current.world() > 1 ? current.world() : 1;
  const uint64_t held = HeldEpochOf(request, channel);
  const bool same_writer = current.writer_id() == request.writer_id() && world == held_world;
  WriterGrant grant;
  grant.channel = channel;
  auto live_ranks = [&] {
    std::vector<PeerId> out;
    auto ranks = rank_holders_.find(channel);
    if (ranks == rank_holders_.end()) {
      if (current.world() <= 1) out.push_back(PeerId(current.node_id()));
      return out;
    }
    for (const auto& [rank, id] : ranks->second) {
      if (id != peer.node_id) out.push_back(id);
    }
    return out;
  };
  auto next = [&](std::string how, bool taken_over) {
    wire::ChannelWriter record;
    record.set_writer_id(request.writer_id().empty()
                             ? "node-" + std::to_string(peer.node_id.value())
                             : request.writer_id());
    record.set_epoch(current.epoch() + 1);
    record.set_node_id(peer.node_id.value());
    record.set_address(request.peer_address());
    record.set_hostname(request.hostname());
    record.set_since_unix_ms(UnixMs());
    record.set_taken_over(taken_over);
    if (world > 1) record.set_world(world);
    grant.epoch = record.epoch();
    grant.record = std::move(record);
    grant.how = std::move(how);
  };
  if (same_writer) {
    // Another rank of the set, or a rank in a new process (a restart: its old process, if it
    // still runs, is fenced). The epoch stays, so the other ranks keep their leases.
    if (held != 0 && held != current.epoch()) {
      return CheckNotFencedLocked(channel, peer.node_id, held);
    }
    grant.epoch = current.epoch();
    auto ranks = rank_holders_.find(channel);
    if (ranks != rank_holders_.end()) {
      auto it = ranks->second.find(request.rank());
      if (it != ranks->second.end() && it->second != peer.node_id) grant.fenced = it->second;
    }
    grant.how = "rank " + std::to_string(request.rank()) + " of " + std::to_string(world);
    return grant;
  }
  if (held != 0) return CheckNotFencedLocked(channel, peer.node_id, held);
  if (!WriterLiveLocked(channel, current, now)) {
    next("the lease of " + current.writer_id() + " had lapsed", false);
    return grant;
  }
  if (request.take_over()) {
    next("taken over from " + current.writer_id(), true);
    grant.fenced_ranks = live_ranks();
    return grant;
  }
  const std::string mine =
      world > 1 ? "a writer of " + std::to_string(world) + " ranks" : "a second, unsharded writer";
  return FailedPrecondition(
             "channel " + channel + " already has a writer: " + DescribeWriter(current, UnixMs()) +
             "; " + mine + " is refused. Stop that publisher (its lease lapses " +
             FormatSeconds(options_.heartbeat_timeout) +
             " after its last heartbeat) or take the channel over (--take-over, take_over=True)")
      .WithReason(Reason::kWriterConflict);
}

void Coordinator::NoteRanksLocked(const net::PeerInfo& peer, const wire::Register& request,
                                  const WriterGrant& grant) {
  if (grant.record.has_value()) {
    // A new lease, a new rank set: a version the old set was assembling will never complete.
    rank_holders_.erase(grant.channel);
    AbortAssemblyLocked(grant.channel, "the channel's writer lease moved to " +
                                           grant.record->writer_id() + " (" + grant.how + ")");
  }
  const wire::ChannelWriter* current = log_->writer(grant.channel);
  if (current == nullptr || current->world() <= 1 || request.world() <= 1) return;
  rank_holders_[grant.channel][request.rank()] = peer.node_id;
}

Result<wire::PublishReply> Coordinator::OnPublishPartLocked(const net::PeerInfo& peer,
                                                            const wire::Publish& request,
                                                            const Manifest& manifest, PartId part,
                                                            net::TimePoint now) {
  const std::string& channel = manifest.channel;
  const uint64_t version = manifest.version.value();
  const std::string what =
      "rank " + std::to_string(part.rank) + "'s part of " + channel + " " + V(version);
  // Only a rank of the channel's sharded writer gives parts, and only its own rank's.
  const wire::ChannelWriter* writer = log_->writer(channel);
  if (writer == nullptr || writer->world() <= 1) {
    return FailedPrecondition("publish: " + what +
                              ": the channel has no sharded writer; register with a rank and "
                              "world (--rank/--world) first");
  }
  WC_RETURN_IF_ERROR(
      CheckNotFencedLocked(channel, peer.node_id, request.writer_epoch()).WithContext("publish"));
  if (part.world != writer->world()) {
    return InvalidArgument("publish: " + what + " says " + PartValue(part) +
                           " but the writer has " + std::to_string(writer->world()) + " ranks");
  }
  if (auto ranks = rank_holders_.find(channel); ranks != rank_holders_.end()) {
    auto it = ranks->second.find(part.rank);
    if (it == ranks->second.end() || it->second != peer.node_id) {
      return FailedPrecondition("publish: " + what + " came from node " +
                                std::to_string(peer.node_id.value()) +
                                ", which does not hold that rank");
    }
  }

  wire::PublishReply reply;
  reply.set_version(version);
  reply.set_world(part.world);
  if (auto aborted = aborted_parts_.find(channel); aborted != aborted_parts_.end()) {
    if (auto it = aborted->second.find(version); it != aborted->second.end()) {
      return Aborted(V(version) + " was aborted: " + it->second);
    }
  }
  // Assembled already: a rank asking again (or restarted) learns it, if its part is the one in.
  if (const ChannelState* state = log_->channel(channel);
      state != nullptr && state->Find(version) != nullptr) {
    WC_ASSIGN_OR_RETURN(auto bytes, log_->GetManifest(channel, version));
    WC_ASSIGN_OR_RETURN(
        Manifest assembled,
        VerifySignedManifest(*bytes, {options_.secret, options_.trust_anchor.get()}));
    WC_ASSIGN_OR_RETURN(std::vector<PartLayout> parts, PartsOf(assembled));
    if (part.rank < parts.size() && parts[part.rank].root == manifest.root) {
      reply.set_assembled(true);
      reply.set_parts_in(part.world);
      return reply;
    }
    return AlreadyExists("publish: " + what + ": " + V(version) +
                         " is already published with another part for this rank");
  }
  if (const ChannelState* state = log_->channel(channel);
      state != nullptr && version <= state->newest()) {
    return FailedPrecondition("publish: " + what + ": the channel is at " + V(state->newest()) +
                              "; a part must be of a newer version");
  }

  auto it = assemblies_.find(channel);
  if (it != assemblies_.end() && it->second.version().value() != version) {
    return FailedPrecondition(
        "publish: " + what + ": " + V(it->second.version().value()) +
        " is still being assembled (" + std::to_string(it->second.parts_in()) + " of " +
        std::to_string(it->second.world()) + " parts in); every rank publishes the same version");
  }
  if (it == assemblies_.end()) {
    it = assemblies_
             .emplace(channel, PartAssembly(channel, manifest.version, part.world,
                                            now + options_.part_timeout))
             .first;
    options_.log(channel + " " + V(version) + ": first part in (rank " + std::to_string(part.rank) +
                 " of " + std::to_string(part.world) + "), waiting " +
                 FormatSeconds(options_.part_timeout) + " for the others");
  }
  PartAssembly& assembly = it->second;
  Result<PartAssembly::Added> added =
      assembly.Add(part, manifest,
                   {reinterpret_cast<const uint8_t*>(request.signed_manifest().data()),
                    request.signed_manifest().size()});
  if (!added.ok()) {
    if (added.status().code() == Code::kFailedPrecondition) {
      // A conflict (another step, a tensor twice): these parts can never be one version.
      AbortAssemblyLocked(channel, added.status().message());
    }
    return added.status().WithContext("publish");
  }
  reply.set_parts_in(assembly.parts_in());
  if (!assembly.complete()) return reply;

  // Every part is in: one manifest, signed with the cluster secret as a publisher signs it, and
  // published through the same checks and log as an unsharded version.
  std::optional<Manifest> base;
  const Manifest& first = *assembly.Part(0);
  if (first.delta.has_value()) {
    const ChannelState* state = log_->channel(channel);
    const wire::VersionEntry* entry =
        state != nullptr ? state->Find(first.delta->base_version.value()) : nullptr;
    if (entry != nullptr && entry->decision() != wire::DECISION_ABORT) {
      auto bytes = log_->GetManifest(channel, entry->version());
      if (bytes.ok()) {
        auto parsed = VerifySignedManifest(**bytes, {options_.secret, options_.trust_anchor.get()});
        if (parsed.ok()) base = std::move(parsed).value();
      }
    }
  }
  std::string why_full;
  Result<Manifest> assembled = assembly.Assemble(base ? &*base : nullptr, &why_full);
  if (!assembled.ok()) {
    AbortAssemblyLocked(channel, assembled.status().message());
    return Aborted(V(version) + " was aborted: " + assembled.status().message());
  }
  // Development mode: signed with the cluster secret as a publisher signs. Certificate mode:
  // nobody signs it; it travels as the ranks' signed parts, which every node checks and
  // assembles itself (trust/assembled_manifest.h), with the base paired here.
  const std::vector<uint8_t> signed_bytes =
      options_.trust_anchor == nullptr
          ? SignManifestWithSecret(*assembled, options_.secret)
          : JoinAssembledManifest(
                assembly.SignedParts(),
                assembled->delta.has_value() ? assembled->delta->base_version.value() : 0,
                assembled->delta.has_value() ? assembled->delta->base_root : Digest{});
  Result<VerifiedPublish> verified = log_->VerifyPublish(signed_bytes);
  if (!verified.ok()) {
    AbortAssemblyLocked(channel, verified.status().message());
    return Aborted(V(version) + " was aborted: " + verified.status().message());
  }
  if (!why_full.empty() && first.delta.has_value()) {
    options_.log(channel + " " + V(version) + ": assembled as a full version: " + why_full);
  }
  assemblies_.erase(it);
  WC_ASSIGN_OR_RETURN(wire::VersionEntry entry, RecordPublishLocked(*verified, peer.node_id));
  (void)entry;
  reply.set_assembled(true);
  return reply;
}

void Coordinator::AbortAssemblyLocked(const std::string& channel, std::string reason) {
  auto it = assemblies_.find(channel);
  if (it == assemblies_.end()) return;
  const uint64_t version = it->second.version().value();
  options_.log(channel + " " + V(version) + " aborted before it was assembled: " + reason);
  std::map<uint64_t, std::string>& aborted = aborted_parts_[channel];
  aborted[version] = std::move(reason);
  while (aborted.size() > kAbortedRemembered) aborted.erase(aborted.begin());
  assemblies_.erase(it);
}

void Coordinator::ExpirePartsLocked(net::TimePoint now) {
  std::vector<std::pair<std::string, std::string>> expired;
  for (const auto& [channel, assembly] : assemblies_) {
    if (assembly.Expired(now)) {
      expired.emplace_back(channel, assembly.ExpiredReason(FormatSeconds(options_.part_timeout)));
    }
  }
  for (auto& [channel, reason] : expired) AbortAssemblyLocked(channel, std::move(reason));
}

}  // namespace weightcast::coord
