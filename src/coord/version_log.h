// The coordinator's version log: per channel, the published versions in order with their
// decisions and the version the fleet should have current, plus each version's signed manifest.
// Everything it accepts is durable in its LogStore before the call returns: by default the
// state directory (coord/log_store.h, docs/coordinator.md):
//
//   <state-dir>/log                                  LogFile of state.proto LogRecords
//   <state-dir>/manifests/<channel>/<version>.wcsm   signed manifest bytes, as published
//
// or etcd (coord/etcd_log_store.h, docs/coordinator_etcd.md); the rules below are the same.
// A version's manifest is stored before the log record that publishes it, so a record always
// finds its manifest; a manifest without a record (a crash between the two) is ignored and
// overwritten by the next publish of that version.
//
// Not thread-safe: the Coordinator serializes calls.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "coord/coord.pb.h"
#include "coord/log_store.h"
#include "coord/state.pb.h"
#include "manifest/manifest.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"

namespace weightcast::coord {

struct ChannelState {
  std::string name;
  std::vector<wire::VersionEntry> versions;  // ascending by version
  uint64_t current_version = 0;              // 0: none committed yet
  // The operator's order of the rollback that made current_version current (certificate
  // mode); empty once a commit moves current_version on, or without one.
  std::string rollback_order;
  std::shared_ptr<const std::vector<uint8_t>> newest_manifest;  // signed bytes of the newest
  // Certificate mode: the coordinator's signed statement of the newest version's decision
  // (trust/decision_statement.h), as logged; empty while it is undecided, or without a CA.
  std::string newest_decision;

  uint64_t newest() const { return versions.empty() ? 0 : versions.back().version(); }
  const wire::VersionEntry* Find(uint64_t version) const;
  wire::VersionEntry* Find(uint64_t version);
};

// A publish request that passed every check, ready to be recorded.
struct VerifiedPublish {
  Manifest manifest;
  std::vector<uint8_t> signed_manifest;
  // The same version with the same root is already published (a publisher retrying after a
  // lost reply): nothing to record, the answer is that version.
  bool duplicate = false;
};

class VersionLog {
 public:
  struct Recovery {
    uint64_t records = 0;
    uint64_t torn_bytes = 0;  // cut off the end of the log (a crash mid-append)
  };

  // Opens (creating) the state directory and replays its log. Every logged version's manifest
  // must exist and verify (with `trust_anchor`'s publishers, or with `secret` in development
  // mode when it is null) and match the logged root (kCorrupt otherwise; a manifest that no
  // longer verifies means the cluster secret or CA changed: kUnauthenticated).
  static Result<std::unique_ptr<VersionLog>> Open(
      const std::filesystem::path& state_dir, std::string secret,
      std::shared_ptr<const trust::TrustAnchor> trust_anchor = nullptr);
  // The same over any store (etcd's): replays what store->Load() returns.
  static Result<std::unique_ptr<VersionLog>> Open(
      std::unique_ptr<LogStore> store, std::string secret,
      std::shared_ptr<const trust::TrustAnchor> trust_anchor = nullptr);

  const LogStore& store() const { return *store_; }

  const Recovery& recovery() const { return recovery_; }

  // Certificate mode: the coordinator's own identity (coordinator role), which signs every
  // decision the log records from now on. Without it a log opened with a CA records no decision
  // (kFailedPrecondition); replay needs only the CA.
  void set_decision_signer(std::shared_ptr<const trust::SigningIdentity> signer) {
    decision_signer_ = std::move(signer);
  }

  // Checks a publish without changing anything: the signature (kUnauthenticated), the manifest
  // (kCorrupt), the version above every published one of its channel (kFailedPrecondition;
  // the same version with another root: kAlreadyExists), and for a delta that its base is a
  // published, not aborted version of the channel whose root is the delta's base root
  // (kFailedPrecondition).
  Result<VerifiedPublish> VerifyPublish(std::span<const uint8_t> signed_manifest) const;

  // Records a verified publish durably (manifest file, then log record) and applies it.
  Result<wire::VersionEntry> RecordPublish(const VerifiedPublish& publish, PeerId publisher,
                                           uint64_t unix_ms, wire::Decision decision,
                                           std::string_view abort_reason);

  // Records a decision change of a published version (kNotFound for an unknown version).
  Status RecordDecision(std::string_view channel, uint64_t version, wire::Decision decision,
                        std::string_view abort_reason, uint64_t unix_ms = 0);

  // The version a rollback to `version` would make current (0: the committed version below the
  // current one), changing nothing. Refuses (kFailedPrecondition) a version that is not
  // published, was never committed, or is not below the current one. A version committed once
  // and rolled back past later may be returned to.
  Result<uint64_t> ResolveRollback(std::string_view channel, uint64_t version) const;
  // Switches the channel's current version back to ResolveRollback(channel, version), aborting
  // every version above it (the target itself reads COMMIT again).
  Result<uint64_t> RecordRollback(std::string_view channel, uint64_t version, uint64_t unix_ms = 0,
                                  std::string order = {});

  // The signed manifest of `version` (0: the newest) of `channel`; kNotFound when absent.
  Result<std::shared_ptr<const std::vector<uint8_t>>> GetManifest(std::string_view channel,
                                                                  uint64_t version) const;

  const std::map<std::string, ChannelState, std::less<>>& channels() const { return channels_; }
  const ChannelState* channel(std::string_view name) const;

  // The holder of `channel`'s writer lease as last logged (null: no writer yet).
  const wire::ChannelWriter* writer(std::string_view channel) const;
  // Logs a new writer epoch of `channel` durably and applies it. kFailedPrecondition unless
  // writer.epoch() is above the channel's current epoch.
  Status RecordWriter(std::string_view channel, const wire::ChannelWriter& writer);

 private:
  VersionLog(std::unique_ptr<LogStore> store, std::string secret,
             std::shared_ptr<const trust::TrustAnchor> trust_anchor);
  // Applies one record to the in-memory state; the same rules at recovery and at run time, so
  // a replayed log gives exactly the state that was served before the restart.
  Status Apply(const state::LogRecord& record);
  Status Append(state::LogRecord record);
  // Certificate mode: the signed statement of `decision` on `version` (with `root`) that the next
  // record makes. Empty without a CA.
  Result<std::string> SignDecision(std::string_view channel, uint64_t version,
                                   std::string_view root, wire::Decision decision,
                                   std::string_view reason) const;
  // Certificate mode: `record` carries a coordinator's statement of exactly this decision, with
  // the record's sequence (kUnauthenticated otherwise). Ok without a CA.
  Status CheckDecision(const state::LogRecord& record, uint64_t version, std::string_view root,
                       wire::Decision decision, std::string_view reason) const;

  std::unique_ptr<LogStore> store_;
  std::string secret_;
  std::shared_ptr<const trust::TrustAnchor> trust_anchor_;
  std::shared_ptr<const trust::SigningIdentity> decision_signer_;
  uint64_t sequence_ = 0;
  Recovery recovery_;
  std::map<std::string, ChannelState, std::less<>> channels_;
  // Kept apart from channels_: a channel may have a writer before it has a version.
  std::map<std::string, wire::ChannelWriter, std::less<>> writers_;
};

}  // namespace weightcast::coord
