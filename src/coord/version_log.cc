#include "coord/version_log.h"

#include <algorithm>
#include <cstdio>

#include "manifest/attestation.h"
#include "manifest/builder.h"
#include "trust/decision_statement.h"
#include "trust/signed_manifest.h"

namespace weightcast::coord {
namespace {

std::string VersionName(std::string_view channel, uint64_t version) {
  return std::string(channel) + " v" + std::to_string(version);
}

std::string AsString(const Digest& digest) {
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

// The 16 digest bytes of the manifest's attestation digest (coord.proto Attestation.digest).
std::string AttestationDigestBytes(const Manifest& m) {
  return AsString(ExpectedAttestation(m)).substr(0, 16);
}

}  // namespace

const wire::VersionEntry* ChannelState::Find(uint64_t version) const {
  auto it =
      std::lower_bound(versions.begin(), versions.end(), version,
                       [](const wire::VersionEntry& e, uint64_t v) { return e.version() < v; });
  return it != versions.end() && it->version() == version ? &*it : nullptr;
}

wire::VersionEntry* ChannelState::Find(uint64_t version) {
  return const_cast<wire::VersionEntry*>(std::as_const(*this).Find(version));
}

VersionLog::VersionLog(std::unique_ptr<LogStore> store, std::string secret,
                       std::shared_ptr<const trust::TrustAnchor> trust_anchor)
    : store_(std::move(store)),
      secret_(std::move(secret)),
      trust_anchor_(std::move(trust_anchor)) {}

const ChannelState* VersionLog::channel(std::string_view name) const {
  auto it = channels_.find(name);
  return it == channels_.end() ? nullptr : &it->second;
}

Result<std::unique_ptr<VersionLog>> VersionLog::Open(
    const std::filesystem::path& state_dir, std::string secret,
    std::shared_ptr<const trust::TrustAnchor> trust_anchor) {
  WC_ASSIGN_OR_RETURN(std::unique_ptr<FileLogStore> store, FileLogStore::Open(state_dir));
  return Open(std::move(store), std::move(secret), std::move(trust_anchor));
}

Result<std::unique_ptr<VersionLog>> VersionLog::Open(
    std::unique_ptr<LogStore> store, std::string secret,
    std::shared_ptr<const trust::TrustAnchor> trust_anchor) {
  std::unique_ptr<VersionLog> log(
      new VersionLog(std::move(store), std::move(secret), std::move(trust_anchor)));
  const std::string where = log->store_->Describe();
  WC_ASSIGN_OR_RETURN(LogStore::Loaded loaded, log->store_->Load());
  log->recovery_.torn_bytes = loaded.torn_bytes;
  for (const std::string& bytes : loaded.records) {
    state::LogRecord record;
    if (!record.ParseFromString(bytes)) {
      return Corrupt(where + ": record " + std::to_string(log->sequence_ + 1) + " does not parse");
    }
    WC_RETURN_IF_ERROR(log->Apply(record).WithContext(where));
    ++log->recovery_.records;
  }
  // Every logged version must still have its manifest, exactly as published.
  for (auto& [name, channel] : log->channels_) {
    for (wire::VersionEntry& entry : channel.versions) {
      auto bytes = log->store_->GetManifest(name, entry.version());
      if (!bytes.ok()) {
        if (bytes.status().code() == Code::kUnavailable) return bytes.status();
        return Corrupt("the log records " + VersionName(name, entry.version()) +
                       " but its manifest cannot be read: " + bytes.status().ToString());
      }
      const std::string path = where + ": " + VersionName(name, entry.version()) + "'s manifest";
      std::span<const uint8_t> view(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
      auto manifest = VerifySignedManifest(view, {log->secret_, log->trust_anchor_.get()});
      if (!manifest.ok()) {
        return Status(manifest.status().code(),
                      path + ": " + manifest.status().message() +
                          (manifest.status().code() == Code::kUnauthenticated
                               ? " (was the state written with another cluster secret or CA?)"
                               : ""));
      }
      if (manifest->channel != name || manifest->version.value() != entry.version() ||
          AsString(manifest->root) != entry.root()) {
        return Corrupt(path + " is not the manifest the log records for " +
                       VersionName(name, entry.version()));
      }
      entry.set_attestation_digest(AttestationDigestBytes(*manifest));
      if (entry.version() == channel.newest()) {
        channel.newest_manifest =
            std::make_shared<const std::vector<uint8_t>>(view.begin(), view.end());
      }
    }
  }
  return log;
}

Status VersionLog::Apply(const state::LogRecord& record) {
  if (record.sequence() != sequence_ + 1) {
    return Corrupt("record sequence " + std::to_string(record.sequence()) + " follows " +
                   std::to_string(sequence_));
  }
  if (Status valid = ValidateChannelName(record.channel()); !valid.ok()) {
    return Corrupt("record " + std::to_string(record.sequence()) + ": " + valid.message());
  }
  const std::string& name = record.channel();
  switch (record.kind_case()) {
    case state::LogRecord::kPublished: {
      ChannelState& channel = channels_[name];
      channel.name = name;
      const wire::VersionEntry& entry = record.published();
      if (entry.version() <= channel.newest()) {
        return Corrupt("record " + std::to_string(record.sequence()) + " publishes " +
                       VersionName(name, entry.version()) + " after v" +
                       std::to_string(channel.newest()));
      }
      if (entry.decision() != wire::DECISION_NONE) {
        WC_RETURN_IF_ERROR(CheckDecision(record, entry.version(), entry.root(), entry.decision(),
                                         entry.abort_reason()));
      }
      channel.versions.push_back(entry);
      channel.newest_decision = record.signed_decision();
      if (entry.decision() != wire::DECISION_NONE) {
        channel.versions.back().set_decided_unix_ms(entry.published_unix_ms());
      }
      if (entry.decision() == wire::DECISION_COMMIT) {
        channel.versions.back().set_committed_once(true);
        if (entry.version() > channel.current_version) {
          channel.current_version = entry.version();
          channel.rollback_order.clear();
        }
      }
      break;
    }
    case state::LogRecord::kDecision: {
      auto it = channels_.find(name);
      wire::VersionEntry* entry =
          it == channels_.end() ? nullptr : it->second.Find(record.decision().version());
      if (entry == nullptr) {
        return Corrupt("record " + std::to_string(record.sequence()) + " decides on unknown " +
                       VersionName(name, record.decision().version()));
      }
      WC_RETURN_IF_ERROR(CheckDecision(record, entry->version(), entry->root(),
                                       record.decision().decision(),
                                       record.decision().abort_reason()));
      if (entry->version() == it->second.newest()) {
        it->second.newest_decision = record.signed_decision();
      }
      entry->set_decision(record.decision().decision());
      entry->set_abort_reason(record.decision().abort_reason());
      entry->set_decided_unix_ms(record.decision().unix_ms());
      if (entry->decision() == wire::DECISION_COMMIT) entry->set_committed_once(true);
      if (entry->decision() == wire::DECISION_COMMIT &&
          entry->version() > it->second.current_version) {
        it->second.current_version = entry->version();
        it->second.rollback_order.clear();
      }
      break;
    }
    case state::LogRecord::kRollback: {
      auto it = channels_.find(name);
      const uint64_t target = record.rollback().version();
      if (it == channels_.end() || it->second.Find(target) == nullptr) {
        return Corrupt("record " + std::to_string(record.sequence()) + " rolls back to unknown " +
                       VersionName(name, target));
      }
      const wire::VersionEntry& newest = it->second.versions.back();
      WC_RETURN_IF_ERROR(CheckDecision(record, newest.version(), newest.root(),
                                       wire::DECISION_ABORT, record.rollback().abort_reason()));
      it->second.newest_decision = record.signed_decision();
      it->second.current_version = target;
      it->second.rollback_order = record.rollback().order();
      for (wire::VersionEntry& entry : it->second.versions) {
        if (entry.version() == target && entry.decision() != wire::DECISION_COMMIT) {
          // Rolled back past before and now current again: committed, as it was.
          entry.set_decision(wire::DECISION_COMMIT);
          entry.clear_abort_reason();
          entry.set_decided_unix_ms(record.rollback().unix_ms());
        }
        if (entry.version() <= target) continue;
        if (entry.decision() != wire::DECISION_ABORT ||
            entry.abort_reason() != record.rollback().abort_reason()) {
          entry.set_decided_unix_ms(record.rollback().unix_ms());
        }
        entry.set_decision(wire::DECISION_ABORT);
        entry.set_abort_reason(record.rollback().abort_reason());
      }
      break;
    }
    case state::LogRecord::kWriter: {
      const wire::ChannelWriter& writer = record.writer();
      auto it = writers_.find(name);
      const uint64_t previous = it == writers_.end() ? 0 : it->second.epoch();
      if (writer.epoch() <= previous) {
        return Corrupt("record " + std::to_string(record.sequence()) + " gives " + name +
                       " writer epoch " + std::to_string(writer.epoch()) + " after epoch " +
                       std::to_string(previous));
      }
      wire::ChannelWriter& slot = writers_[name];
      slot = writer;
      slot.clear_live();
      break;
    }
    default:
      return Corrupt("record " + std::to_string(record.sequence()) + " has no known kind");
  }
  sequence_ = record.sequence();
  return Status::Ok();
}

const wire::ChannelWriter* VersionLog::writer(std::string_view channel) const {
  auto it = writers_.find(channel);
  return it == writers_.end() ? nullptr : &it->second;
}

Status VersionLog::RecordWriter(std::string_view channel, const wire::ChannelWriter& writer) {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel).WithContext("writer"));
  const wire::ChannelWriter* current = this->writer(channel);
  if (writer.epoch() <= (current == nullptr ? 0 : current->epoch())) {
    return FailedPrecondition("writer epoch " + std::to_string(writer.epoch()) + " of " +
                              std::string(channel) + " is not above the current one");
  }
  state::LogRecord record;
  record.set_channel(std::string(channel));
  *record.mutable_writer() = writer;
  record.mutable_writer()->clear_live();
  return Append(std::move(record));
}

Status VersionLog::Append(state::LogRecord record) {
  record.set_sequence(sequence_ + 1);
  std::string bytes;
  if (!record.SerializeToString(&bytes)) return Internal("log record did not serialize");
  WC_RETURN_IF_ERROR(store_->Append(record.sequence(), bytes));
  // The record is on disk; applying it cannot fail for a record our own checks let through.
  Status applied = Apply(record);
  if (!applied.ok()) return Internal("applying a logged record: " + applied.ToString());
  return Status::Ok();
}

Result<std::string> VersionLog::SignDecision(std::string_view channel, uint64_t version,
                                             std::string_view root, wire::Decision decision,
                                             std::string_view reason) const {
  if (trust_anchor_ == nullptr) return std::string();
  if (decision_signer_ == nullptr) {
    return FailedPrecondition(
        "decision on " + VersionName(channel, version) +
        ": a coordinator with a CA signs its decisions, and this one has no identity");
  }
  trust::DecisionStatement statement;
  statement.channel = std::string(channel);
  statement.version = version;
  if (root.size() != statement.root.size()) return Internal("a logged root is not 32 bytes");
  std::copy(root.begin(), root.end(), statement.root.begin());
  statement.commit = decision == wire::DECISION_COMMIT;
  statement.sequence = sequence_ + 1;  // the record Append gives it
  statement.reason = std::string(reason);
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                      trust::SignDecision(statement, *decision_signer_));
  return std::string(bytes.begin(), bytes.end());
}

Status VersionLog::CheckDecision(const state::LogRecord& record, uint64_t version,
                                 std::string_view root, wire::Decision decision,
                                 std::string_view reason) const {
  if (trust_anchor_ == nullptr) return Status::Ok();
  const std::string what = "record " + std::to_string(record.sequence()) + ": the " +
                           (decision == wire::DECISION_COMMIT ? "commit" : "abort") + " of " +
                           VersionName(record.channel(), version);
  const std::string& bytes = record.signed_decision();
  if (bytes.empty()) {
    return Unauthenticated(what +
                           " carries no coordinator's signature (a log written without a "
                           "CA, or changed since)");
  }
  Result<trust::CheckedDecision> checked = trust::VerifyDecision(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, *trust_anchor_);
  if (!checked.ok()) return Unauthenticated(what + ": " + checked.status().message());
  const trust::DecisionStatement& d = checked->decision;
  const bool same =
      d.channel == record.channel() && d.version == version &&
      std::string_view(reinterpret_cast<const char*>(d.root.data()), d.root.size()) == root &&
      d.commit == (decision == wire::DECISION_COMMIT) && d.sequence == record.sequence() &&
      d.reason == trust::DecisionReason(reason);
  if (!same) {
    return Unauthenticated(what + " carries the coordinator's " + trust::DecisionName(d) +
                           " of record " + std::to_string(d.sequence) + " instead");
  }
  return Status::Ok();
}

Result<VerifiedPublish> VersionLog::VerifyPublish(std::span<const uint8_t> signed_manifest) const {
  VerifiedPublish out;
  WC_ASSIGN_OR_RETURN(out.manifest,
                      VerifySignedManifest(signed_manifest, {secret_, trust_anchor_.get()}));
  const Manifest& m = out.manifest;
  const uint64_t version = m.version.value();
  if (version == 0) return InvalidArgument("publish: version 0 is not a version");
  const ChannelState* channel = this->channel(m.channel);
  if (channel != nullptr) {
    if (const wire::VersionEntry* same = channel->Find(version); same != nullptr) {
      if (same->root() != AsString(m.root)) {
        return AlreadyExists("publish: " + VersionName(m.channel, version) +
                             " is already published with another root");
      }
      out.duplicate = true;
      return out;
    }
    if (version <= channel->newest()) {
      return FailedPrecondition("publish: " + VersionName(m.channel, version) +
                                " is not above the newest published version v" +
                                std::to_string(channel->newest()));
    }
  }
  if (m.delta.has_value()) {
    const uint64_t base = m.delta->base_version.value();
    const wire::VersionEntry* entry = channel == nullptr ? nullptr : channel->Find(base);
    if (entry == nullptr) {
      return FailedPrecondition("publish: " + VersionName(m.channel, version) + " is a delta on v" +
                                std::to_string(base) +
                                ", which is not a published version of the channel");
    }
    if (entry->root() != AsString(m.delta->base_root)) {
      return FailedPrecondition("publish: " + VersionName(m.channel, version) +
                                " is a delta on a v" + std::to_string(base) +
                                " whose root is not the published one");
    }
    if (entry->decision() == wire::DECISION_ABORT) {
      return FailedPrecondition("publish: " + VersionName(m.channel, version) + " is a delta on v" +
                                std::to_string(base) + ", which was aborted (" +
                                entry->abort_reason() + ")");
    }
  }
  out.signed_manifest.assign(signed_manifest.begin(), signed_manifest.end());
  return out;
}

Result<wire::VersionEntry> VersionLog::RecordPublish(const VerifiedPublish& publish,
                                                     PeerId publisher, uint64_t unix_ms,
                                                     wire::Decision decision,
                                                     std::string_view abort_reason) {
  const Manifest& m = publish.manifest;
  if (publish.duplicate) {
    const ChannelState* channel = this->channel(m.channel);
    const wire::VersionEntry* entry =
        channel == nullptr ? nullptr : channel->Find(m.version.value());
    if (entry == nullptr) return Internal("duplicate publish of an unknown version");
    return *entry;
  }
  wire::VersionEntry entry;
  entry.set_version(m.version.value());
  entry.set_root(AsString(m.root));
  entry.set_total_bytes(m.total_size());
  entry.set_chunk_count(m.chunk_count());
  entry.set_attestation_digest(AttestationDigestBytes(m));
  if (m.delta.has_value()) {
    entry.set_base_version(m.delta->base_version.value());
    uint64_t payload = 0;
    for (const DeltaChunk& chunk : m.delta->chunks) payload += chunk.payload_size;
    entry.set_payload_bytes(payload);
  }
  entry.set_published_unix_ms(unix_ms);
  entry.set_publisher_node(publisher.value());
  entry.set_decision(decision);
  entry.set_abort_reason(std::string(abort_reason));

  std::string signed_decision;
  if (decision != wire::DECISION_NONE) {
    WC_ASSIGN_OR_RETURN(signed_decision, SignDecision(m.channel, m.version.value(), entry.root(),
                                                      decision, abort_reason));
  }
  WC_RETURN_IF_ERROR(store_->PutManifest(m.channel, m.version.value(), publish.signed_manifest));
  state::LogRecord record;
  record.set_channel(m.channel);
  *record.mutable_published() = entry;
  record.set_signed_decision(std::move(signed_decision));
  WC_RETURN_IF_ERROR(Append(std::move(record)));
  channels_[m.channel].newest_manifest =
      std::make_shared<const std::vector<uint8_t>>(publish.signed_manifest);
  return entry;
}

Status VersionLog::RecordDecision(std::string_view channel, uint64_t version,
                                  wire::Decision decision, std::string_view abort_reason,
                                  uint64_t unix_ms) {
  const ChannelState* state = this->channel(channel);
  const wire::VersionEntry* entry = state == nullptr ? nullptr : state->Find(version);
  if (entry == nullptr) {
    return NotFound("decision: " + VersionName(channel, version) + " is not published");
  }
  WC_ASSIGN_OR_RETURN(std::string signed_decision,
                      SignDecision(channel, version, entry->root(), decision, abort_reason));
  state::LogRecord record;
  record.set_signed_decision(std::move(signed_decision));
  record.set_channel(std::string(channel));
  record.mutable_decision()->set_version(version);
  record.mutable_decision()->set_decision(decision);
  record.mutable_decision()->set_abort_reason(std::string(abort_reason));
  record.mutable_decision()->set_unix_ms(unix_ms);
  return Append(std::move(record));
}

Result<uint64_t> VersionLog::ResolveRollback(std::string_view channel, uint64_t version) const {
  const ChannelState* state = this->channel(channel);
  if (state == nullptr || state->versions.empty()) {
    return NotFound("rollback: channel " + std::string(channel) + " has no published version");
  }
  const uint64_t current = state->current_version;
  if (version == 0) {
    for (auto it = state->versions.rbegin(); it != state->versions.rend(); ++it) {
      if (it->version() < current && it->decision() == wire::DECISION_COMMIT) {
        version = it->version();
        break;
      }
    }
    if (version == 0) {
      return FailedPrecondition("rollback: " + std::string(channel) +
                                " has no committed version below the current v" +
                                std::to_string(current));
    }
  }
  const wire::VersionEntry* entry = state->Find(version);
  if (entry == nullptr) {
    return FailedPrecondition("rollback: " + VersionName(channel, version) + " is not published");
  }
  if (!entry->committed_once()) {
    return FailedPrecondition(
        "rollback: " + VersionName(channel, version) + " was never committed" +
        (entry->abort_reason().empty() ? std::string() : " (" + entry->abort_reason() + ")"));
  }
  if (version >= current) {
    return FailedPrecondition("rollback: " + VersionName(channel, version) +
                              " is not below the current v" + std::to_string(current));
  }
  return version;
}

Result<uint64_t> VersionLog::RecordRollback(std::string_view channel, uint64_t version,
                                            uint64_t unix_ms, std::string order) {
  WC_ASSIGN_OR_RETURN(version, ResolveRollback(channel, version));
  const std::string reason = "rolled back to v" + std::to_string(version);
  const wire::VersionEntry& newest = this->channel(channel)->versions.back();
  WC_ASSIGN_OR_RETURN(
      std::string signed_decision,
      SignDecision(channel, newest.version(), newest.root(), wire::DECISION_ABORT, reason));
  state::LogRecord record;
  record.set_channel(std::string(channel));
  record.set_signed_decision(std::move(signed_decision));
  record.mutable_rollback()->set_version(version);
  record.mutable_rollback()->set_abort_reason(reason);
  record.mutable_rollback()->set_unix_ms(unix_ms);
  record.mutable_rollback()->set_order(std::move(order));
  WC_RETURN_IF_ERROR(Append(std::move(record)));
  return version;
}

Result<std::shared_ptr<const std::vector<uint8_t>>> VersionLog::GetManifest(
    std::string_view channel, uint64_t version) const {
  const ChannelState* state = this->channel(channel);
  if (state == nullptr || state->versions.empty()) {
    return NotFound("channel " + std::string(channel) + " has no published version");
  }
  if (version == 0 || version == state->newest()) {
    if (state->newest_manifest == nullptr) return Internal("newest manifest not loaded");
    return state->newest_manifest;
  }
  if (state->Find(version) == nullptr) {
    return NotFound(VersionName(channel, version) + " is not published");
  }
  WC_ASSIGN_OR_RETURN(std::string bytes, store_->GetManifest(channel, version));
  return std::make_shared<const std::vector<uint8_t>>(bytes.begin(), bytes.end());
}

}  // namespace weightcast::coord
