// A version announced before its store commit (docs/rl_step.md, "The publisher's write"): the
// image of a version published from memory is written into the store and committed on a thread
// of its own while the version is announced and seeded, so the fleet does not wait for the
// write. Until the commit, whole chunks are served from the image itself; after it, from the
// store's committed files.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "node/swarm_node.h"
#include "store/store.h"

namespace weightcast::publish {

class CommitBehind {
 public:
  // Runs `commit` (PreparedVersion::commit) on a thread. `image` is version `version`'s one file
  // and stays unchanged until Finish returns; `store` outlives this object. `hurry`
  // (PreparedVersion::hurry_commit, may be empty) is called by Finish before it waits.
  CommitBehind(const Store& store, std::string channel, Version version,
               std::span<const uint8_t> image, std::function<Status()> commit,
               std::function<void()> hurry = nullptr);
  ~CommitBehind();  // Finish()
  CommitBehind(const CommitBehind&) = delete;
  CommitBehind& operator=(const CommitBehind&) = delete;

  Version version() const;
  // Chunks of the version for a seeding node: copies out of the image while the commit runs,
  // then out of the store's committed files. After Finish of a commit that failed,
  // kUnavailable: the image is no longer read.
  node::ChunkReader Reader() const;
  // Hurries the image's write, waits for the commit and returns its status (the same on every
  // call). From its return on, the image is not read again.
  Status Finish();

 private:
  struct Source;
  std::shared_ptr<Source> source_;
  std::function<void()> hurry_;
  std::thread thread_;
  Status result_ = Internal("the commit did not finish");
  bool finished_ = false;
};

}  // namespace weightcast::publish
