// Watching a trainer's checkpoint root (`weightcast publish --watch DIR`): decides when each new
// checkpoint directory under DIR is complete, in which order to publish them, and remembers what
// was published across restarts. No I/O besides reading DIR and the state file; no threads; time
// comes from an injected clock, so the decisions are tested without sleeping.
//
// A directory is ready when
//   - OpenCheckpoint succeeds on it: every file the trainer's index names exists and every
//     safetensors file has exactly the size its header implies, and
//   - nothing in it changed (the set of files, their sizes and mtimes) for `settle`, measured
//     from the first poll that saw its present state: a preallocated shard has its final size
//     from the start, so completeness alone does not show the writer is done.
// Directories are published in natural order (step_9 before step_10). A directory still settling
// holds back every later one, so versions keep the trainer's order. One that settles but does not
// open as a checkpoint is reported once (not on every poll) and holds nothing back; it is looked
// at again only if its contents change. Hidden directories (".tmp-step_5", which trainers rename
// into place when done) and plain files are ignored; a directory sorting before the newest
// published one is reported once and never published (it would go out as a newer version).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

#include "net/clock.h"

namespace weightcast::publish {

// "Natural" order: runs of digits compare as numbers ("step_9" < "step_10"), everything else
// byte by byte; a tie between equal numbers with different zero padding is broken by the
// plain byte order, so the order is total.
bool NaturalLess(std::string_view a, std::string_view b);

struct NaturalOrder {
  bool operator()(const std::string& a, const std::string& b) const { return NaturalLess(a, b); }
};
using NaturalNameSet = std::set<std::string, NaturalOrder>;

struct WatchOptions {
  std::filesystem::path dir;         // the trainer's checkpoint root
  std::filesystem::path state_file;  // names already published (written atomically)
  net::Duration settle = std::chrono::seconds(2);
};

enum class WatchEventKind {
  kReady,         // complete and settled: publish it now, in the order given
  kBroken,        // settled, but not a checkpoint (`problem` says why); reported once
  kSkippedOlder,  // sorts before the newest published directory; reported once
};

struct WatchEvent {
  WatchEventKind kind = WatchEventKind::kReady;
  std::string name;  // the directory's name under WatchOptions::dir
  std::filesystem::path path;
  Status problem;  // kBroken, kSkippedOlder: why
};

// Not thread-safe: one thread polls and marks.
class Watcher {
 public:
  // Reads the state file if it exists (kCorrupt if it is not one of ours). `clock` must outlive
  // the watcher. Fails if `dir` is not a directory.
  static Result<Watcher> Open(WatchOptions options, const net::Clock& clock = net::Clock::Real());

  // Scans `dir` once. Returns the reports that are new since the last poll and the directories
  // ready to publish, ready ones in natural order. The caller publishes them in that order and
  // calls MarkPublished after each; if one fails it should stop there (the rest stay ready and
  // come back on the next poll, after the failed one).
  Result<std::vector<WatchEvent>> Poll();

  // Records `name` as published and persists the state (atomically) before returning.
  Status MarkPublished(std::string_view name);

  bool IsPublished(std::string_view name) const { return published_.contains(std::string(name)); }
  // Published names in natural order.
  const NaturalNameSet& published() const { return published_; }

 private:
  struct Tracked {
    std::string fingerprint;  // files, sizes and mtimes; "" before the first scan
    net::TimePoint changed_at{};
    bool reported = false;  // kBroken / kSkippedOlder said for this fingerprint
  };

  Watcher(WatchOptions options, const net::Clock& clock);
  Status Save() const;

  WatchOptions options_;
  const net::Clock* clock_;
  NaturalNameSet published_;
  std::map<std::string, Tracked> tracked_;
};

// The watch state file of `channel` in a publisher's store root.
std::filesystem::path WatchStatePath(const std::filesystem::path& store_root,
                                     std::string_view channel);

}  // namespace weightcast::publish
