#include "publish/commit_behind.h"

#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

namespace weightcast::publish {

// What the readers share with the committing thread. A reader copies out of the image under
// the shared lock; moving on from the image takes it exclusively, so once `from` is no longer
// kImage no read of the image is in progress, and the caller may reuse its memory.
struct CommitBehind::Source {
  enum class From { kImage, kStore, kNothing };
  const Store& store;
  std::string channel;
  Version version;
  std::span<const uint8_t> image;
  std::shared_mutex mu;
  From from = From::kImage;

  Source(const Store& s, std::string c, Version v, std::span<const uint8_t> i)
      : store(s), channel(std::move(c)), version(v), image(i) {}

  void MoveTo(From next) {
    std::unique_lock lock(mu);
    from = next;
  }

  // From the image a copy (the image goes back to its owner after the commit); from the store
  // a view of its mapping, owned by the view.
  Result<HeldBytes> Read(ByteRange range) {
    std::shared_lock lock(mu);
    std::span<const uint8_t> bytes;
    std::shared_ptr<const MappedVersion> view;
    switch (from) {
      case From::kImage:
        bytes = image;
        break;
      case From::kStore: {
        WC_ASSIGN_OR_RETURN(view, store.OpenView(channel, version));
        bytes = view->File(0);
        break;
      }
      case From::kNothing:
        return Unavailable("v" + std::to_string(version.value()) +
                           " is not held: its store commit failed");
    }
    if (range.offset > bytes.size() || range.size > bytes.size() - range.offset) {
      return OutOfRange("bytes beyond v" + std::to_string(version.value()) + "'s file");
    }
    const std::span<const uint8_t> piece = bytes.subspan(range.offset, range.size);
    if (view != nullptr) return HeldBytes{piece, std::move(view)};
    return HeldBytes::Of(std::make_shared<const std::vector<uint8_t>>(piece.begin(), piece.end()));
  }
};

CommitBehind::CommitBehind(const Store& store, std::string channel, Version version,
                           std::span<const uint8_t> image, std::function<Status()> commit,
                           std::function<void()> hurry)
    : source_(std::make_shared<Source>(store, std::move(channel), version, image)),
      hurry_(std::move(hurry)) {
  thread_ = std::thread([this, commit = std::move(commit)] {
    result_ = commit();
    // Committed: whole chunks come from the store's files from now on.
    if (result_.ok()) source_->MoveTo(Source::From::kStore);
  });
}

CommitBehind::~CommitBehind() { Finish().IgnoreError(); }

Version CommitBehind::version() const { return source_->version; }

node::ChunkReader CommitBehind::Reader() const {
  return [source = source_](ByteRange range) { return source->Read(range); };
}

Status CommitBehind::Finish() {
  if (!finished_) {
    if (hurry_) hurry_();
    thread_.join();
    finished_ = true;
    if (!result_.ok()) source_->MoveTo(Source::From::kNothing);
  }
  return result_;
}

}  // namespace weightcast::publish
