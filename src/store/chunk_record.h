// The persisted list of verified chunks of a staging version (staging/<v>/chunks.log), so that a
// restarted receiver resumes instead of fetching everything again.
//
// Format (docs/store_layout.md): a 16-byte header, "WCCHUNK1" then the first 8 bytes of the
// manifest root, then 8-byte records appended in any order: the chunk index as uint32 little
// endian, then the index XOR kRecordCheck. A record is only ever appended after the chunk's
// bytes are durable, so every record names a chunk whose bytes are on disk.
//
// On open, a torn tail (a partial record from a crash mid-write) is cut off; the first record that
// fails its check or names a chunk beyond the manifest ends the trusted prefix and everything from
// it on is cut off too (those chunks are fetched again). A header for another manifest resets the
// whole record. Nothing here trusts the file: a corrupt record costs refetching, never bad bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "hash/digest.h"

namespace weightcast::store {

inline constexpr uint32_t kRecordCheck = 0x9E3779B9u;
inline constexpr size_t kRecordHeaderBytes = 16;
inline constexpr size_t kRecordBytes = 8;

// What opening an existing record found.
struct RecordRecovery {
  uint32_t chunks = 0;           // distinct chunks the record vouches for
  uint64_t discarded_bytes = 0;  // cut off: torn tail, bad records and what followed them
  bool header_mismatch = false;  // the header was damaged or for another manifest: reset
};

// An open chunk record. Move-only; closes on destruction. Not thread-safe (StagedVersion
// serializes access).
class ChunkRecord {
 public:
  // Creates an empty record at `path` (fails if it exists), durable on return.
  static Result<ChunkRecord> Create(const std::filesystem::path& path, const Digest& root);

  // Opens an existing record, repairing it as described above. Sets verified[i] for every chunk
  // the record holds; `verified` must have one entry per chunk of the manifest.
  static Result<ChunkRecord> Open(const std::filesystem::path& path, const Digest& root,
                                  std::vector<bool>& verified, RecordRecovery& recovery);

  ChunkRecord() = default;
  ChunkRecord(ChunkRecord&& other) noexcept;
  ChunkRecord& operator=(ChunkRecord&& other) noexcept;
  ChunkRecord(const ChunkRecord&) = delete;
  ChunkRecord& operator=(const ChunkRecord&) = delete;
  ~ChunkRecord();

  // Appends records for `chunks` with one write and fdatasyncs the record.
  Status Append(std::span<const ChunkIndex> chunks);

  void Close();

 private:
  ChunkRecord(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

// The verified chunks of a staging as they are verified, for readers streaming the version
// (staging/<v>/verified.live): the chunk record's format, each record written at once and never
// synced. Not durable and never read back by the store: a resume rewrites it from the durable
// record. A chunk appears here only once verified and written (its bytes are in the page cache,
// which another process on the machine reads). Advisory: a failed write only delays a reader
// until the commit. Move-only.
class LiveRecord {
 public:
  // (Re)creates `path` holding `verified`.
  static Result<LiveRecord> Create(const std::filesystem::path& path, const Digest& root,
                                   std::span<const ChunkIndex> verified);
  LiveRecord() = default;
  LiveRecord(LiveRecord&& other) noexcept;
  LiveRecord& operator=(LiveRecord&& other) noexcept;
  LiveRecord(const LiveRecord&) = delete;
  LiveRecord& operator=(const LiveRecord&) = delete;
  ~LiveRecord();

  // One write(2) of one record; safe from many threads (O_APPEND).
  void Append(ChunkIndex chunk) const;
  void Close();

 private:
  explicit LiveRecord(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Reads the records of a chunk record another process appends to, read-only, as they arrive (a
// streaming reader of a version still being received, client/version_stream.h). Not
// thread-safe.
class ChunkRecordReader {
 public:
  // Opens `path` for a version with `root` and `chunk_count` chunks. kNotFound when the file
  // does not exist (yet).
  static Result<ChunkRecordReader> Open(const std::filesystem::path& path, const Digest& root,
                                        uint32_t chunk_count);

  ChunkRecordReader() = default;
  ChunkRecordReader(ChunkRecordReader&& other) noexcept;
  ChunkRecordReader& operator=(ChunkRecordReader&& other) noexcept;
  ChunkRecordReader(const ChunkRecordReader&) = delete;
  ChunkRecordReader& operator=(const ChunkRecordReader&) = delete;
  ~ChunkRecordReader();

  // Appends to `fresh` the chunks recorded since the last call (each chunk once over the
  // reader's life). A partial record at the end is left for the next call; so is a record that
  // fails its check (the writer cuts such a tail off when it resumes, and the file then reads
  // again from its start). kCorrupt when the header is for another version.
  Status Poll(std::vector<ChunkIndex>& fresh);

 private:
  ChunkRecordReader(int fd, std::filesystem::path path, const Digest& root, uint32_t count);
  int fd_ = -1;
  std::filesystem::path path_;
  Digest root_{};
  uint64_t offset_ = 0;  // bytes parsed (0: the header is not read yet)
  std::vector<bool> seen_;
};

// Parses the records in `bytes` (which follow a record's header): appends each valid record's
// chunk below `chunk_count` to `out` and returns the bytes consumed, stopping before a partial
// record or one that fails its check or names a chunk beyond the version. Pure.
size_t ParseChunkRecords(std::span<const uint8_t> bytes, uint32_t chunk_count,
                         std::vector<ChunkIndex>& out);

}  // namespace weightcast::store
