// Where the version log keeps its records and manifests: the persistence seam under VersionLog
// (docs/coordinator_etcd.md). VersionLog holds the rules (what a record means, what may follow
// what); a LogStore only keeps bytes, in order, durably. Two implementations:
//
//   FileLogStore  the embedded default: <state-dir>/log (LogFile) and
//                 <state-dir>/manifests/<channel>/<version>.wcsm, as before (docs/coordinator.md)
//   EtcdLogStore  records and manifests in etcd, appended by transactions fenced by the
//                 coordinator's leadership (coord/etcd_log_store.h)
//
// Not thread-safe: VersionLog's owner serializes calls (Health() excepted: any thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast::coord {

class LogFile;

class LogStore {
 public:
  struct Loaded {
    std::vector<std::string> records;  // in sequence order: record i has sequence i + 1
    uint64_t torn_bytes = 0;           // cut off a torn end (file store only)
  };

  virtual ~LogStore() = default;

  // Every record, once, before the first Append.
  virtual Result<Loaded> Load() = 0;
  // Makes `record` the log's record number `sequence` (one above the last loaded or appended),
  // durably, before returning. kUnavailable when the store cannot be reached (nothing was
  // decided; the same record at the same sequence is accepted once it turns out to be stored
  // already), and when it refuses because this coordinator's view is stale (etcd's fence:
  // another coordinator leads now, or the sequence holds a write this one does not know): the
  // caller's client retries and finds the leader.
  virtual Status Append(uint64_t sequence, std::string_view record) = 0;
  // Stores a version's signed manifest durably, replacing any earlier bytes for that version
  // (a manifest no record names is an orphan a later publish overwrites). Before the record.
  virtual Status PutManifest(std::string_view channel, uint64_t version,
                             std::span<const uint8_t> signed_manifest) = 0;
  virtual Result<std::string> GetManifest(std::string_view channel, uint64_t version) = 0;

  // Why writes cannot be made now, for `status` ("" while nothing is wrong). Any thread.
  virtual std::string Health() const = 0;
  // Where the state lives, for logs: "DIR" or "etcd ENDPOINTS, prefix P".
  virtual std::string Describe() const = 0;
};

class FileLogStore final : public LogStore {
 public:
  // Creates `state_dir` when missing; the log file is opened by Load.
  static Result<std::unique_ptr<FileLogStore>> Open(const std::filesystem::path& state_dir);
  ~FileLogStore() override;

  Result<Loaded> Load() override;
  Status Append(uint64_t sequence, std::string_view record) override;
  Status PutManifest(std::string_view channel, uint64_t version,
                     std::span<const uint8_t> signed_manifest) override;
  Result<std::string> GetManifest(std::string_view channel, uint64_t version) override;
  std::string Health() const override { return {}; }
  std::string Describe() const override { return state_dir_.string(); }

 private:
  explicit FileLogStore(std::filesystem::path state_dir);
  std::filesystem::path ManifestPath(std::string_view channel, uint64_t version) const;

  std::filesystem::path state_dir_;
  std::unique_ptr<LogFile> log_;
  uint64_t appended_ = 0;  // the sequence of the last record in the file
};

}  // namespace weightcast::coord
