#include "publish/origin_version.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "hash/digest.h"
#include "manifest/builder.h"
#include "trust/signed_manifest.h"
#include "util/stopwatch.h"
#include "util/thread_pool.h"

namespace weightcast::publish {
namespace {

// Hashes chunks on a pool as they fill, holding at most `max_buffers` of them at once: the
// stream waits for a free buffer, so memory stays bounded whatever the model's size.
class ChunkHasher {
 public:
  ChunkHasher(const Manifest& manifest, size_t threads, bool fast)
      : manifest_(manifest),
        hashes_(manifest.chunk_count()),
        fast_hashes_(fast ? manifest.chunk_count() : 0),
        pool_(threads) {
    max_buffers_ = 2 * pool_.size() + 1;
  }

  // Bytes of the flat space in order.
  Status Take(std::span<const uint8_t> bytes) {
    while (!bytes.empty()) {
      if (current_ == nullptr) {
        if (next_chunk_ >= manifest_.chunk_count()) {
          return Internal("the origin sent more bytes than the manifest lays out");
        }
        current_ = Buffer();
        current_->reserve(manifest_.ChunkRange(ChunkIndex(next_chunk_)).size);
      }
      const uint64_t want = manifest_.ChunkRange(ChunkIndex(next_chunk_)).size - current_->size();
      const size_t n = static_cast<size_t>(std::min<uint64_t>(want, bytes.size()));
      current_->insert(current_->end(), bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
      bytes = bytes.subspan(n);
      if (current_->size() == manifest_.ChunkRange(ChunkIndex(next_chunk_)).size) Submit();
    }
    return Status::Ok();
  }

  // Waits for every hash; the chunks must all have been taken.
  Result<std::pair<std::vector<Digest>, std::vector<Digest>>> Finish() {
    // A model whose last chunk is empty cannot exist (chunks cover the bytes), but a model of
    // zero bytes has one empty chunk.
    if (current_ == nullptr && next_chunk_ < manifest_.chunk_count() &&
        manifest_.ChunkRange(ChunkIndex(next_chunk_)).size == 0) {
      current_ = Buffer();
      Submit();
    }
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ == 0; });
    if (next_chunk_ != manifest_.chunk_count() || current_ != nullptr) {
      return Internal("the origin sent fewer bytes than the manifest lays out");
    }
    return std::make_pair(std::move(hashes_), std::move(fast_hashes_));
  }

 private:
  std::shared_ptr<std::vector<uint8_t>> Buffer() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ < max_buffers_; });
    ++in_flight_;
    if (!free_.empty()) {
      auto b = std::move(free_.back());
      free_.pop_back();
      b->clear();
      return b;
    }
    return std::make_shared<std::vector<uint8_t>>();
  }

  void Submit() {
    const uint32_t index = next_chunk_++;
    pool_.Submit([this, index, bytes = std::move(current_)] {
      Hasher hasher(manifest_.hash_algorithm);
      if (fast_hashes_.empty()) {
        UpdateStreaming(hasher, manifest_.hash_algorithm, *bytes);
      } else {
        Hasher fast(HashAlgorithm::kXxh3_128);
        UpdateStreaming(hasher, manifest_.hash_algorithm, *bytes, &fast);
        fast_hashes_[index] = fast.Finish();
      }
      hashes_[index] = hasher.Finish();
      std::lock_guard lock(mu_);
      free_.push_back(bytes);
      --in_flight_;
      cv_.notify_all();
    });
  }

  const Manifest& manifest_;
  size_t max_buffers_ = 1;
  std::vector<Digest> hashes_;
  std::vector<Digest> fast_hashes_;
  std::shared_ptr<std::vector<uint8_t>> current_;  // the chunk being filled
  uint32_t next_chunk_ = 0;                        // the chunk current_ fills
  std::mutex mu_;
  std::condition_variable cv_;
  size_t in_flight_ = 0;  // buffers taken and not yet hashed
  std::vector<std::shared_ptr<std::vector<uint8_t>>> free_;
  // Last: destroyed first, so its workers finish before the state they use goes.
  ThreadPool pool_;
};

}  // namespace

Result<OriginPrepared> PrepareOriginVersion(const origin::OriginModel& model,
                                            const std::shared_ptr<origin::HttpClient>& http,
                                            const std::string& label,
                                            const PrepareOptions& options) {
  WC_RETURN_IF_ERROR(ValidateChannelName(options.channel));
  if (options.secret.empty() && options.signing_identity == nullptr) {
    return InvalidArgument("no cluster secret or publisher key to sign the manifest");
  }
  if (!options.allow_no_tensors && !model.checkpoint.has_tensors()) {
    return InvalidArgument(label +
                           " holds no tensors (no safetensors file with a tensor in it): a version "
                           "without weights would replace the model on every node; "
                           "--allow-no-tensors publishes it anyway");
  }
  Stopwatch start;
  OriginPrepared out;
  PreparedVersion& prepared = out.prepared;
  BuildOptions build = options.build;
  build.chunk_size = ResolveChunkSize(build.chunk_size, model.checkpoint.total_bytes(), nullptr);
  WC_ASSIGN_OR_RETURN(prepared.manifest, BuildManifestLayout(model.checkpoint, options.channel,
                                                             options.min_version, build));
  Manifest& manifest = prepared.manifest;
  for (const auto& [key, value] : options.metadata) manifest.metadata[key] = value;
  manifest.metadata[std::string(kSourceMetadataKey)] = label;
  // The objects, with their URLs, for agents that fetch from the origin too: left out when they
  // do not fit a metadata value (then every byte enters the fleet through this publisher).
  std::string objects = origin::EncodeOriginObjects(model.objects);
  if (objects.size() <= kMaxMetadataValueBytes) {
    manifest.metadata[std::string(origin::kObjectsMetadataKey)] = std::move(objects);
  }
  for (const CheckpointFile& f : model.checkpoint.files) {
    if (!f.is_safetensors && !f.relative_path.ends_with(".safetensors.index.json")) {
      prepared.other_files.emplace_back(f.relative_path, f.size);
    }
  }
  // The manifest lays the files out in checkpoint order, as the reader reads them.
  for (size_t i = 0; i < manifest.files.size(); ++i) {
    if (i >= model.objects.size() || manifest.files[i].path != model.objects[i].name) {
      return Internal("the manifest's files are not the origin's objects in order");
    }
  }

  auto reader = std::make_shared<origin::OriginReader>(http, model.objects);
  const uint64_t before = http->bytes_received();
  ChunkHasher hasher(manifest, options.build.threads, WantsFastHashes(build));
  WC_RETURN_IF_ERROR(reader->Stream(
      0, reader->total_size(), [&](std::span<const uint8_t> bytes) { return hasher.Take(bytes); }));
  WC_ASSIGN_OR_RETURN(auto hashes, hasher.Finish());
  if (Status s = FinishManifest(manifest, std::move(hashes.first), std::move(hashes.second));
      !s.ok()) {
    return InvalidArgument(label + ": " + s.message());
  }
  prepared.build_seconds = start.Seconds();
  out.origin_bytes = http->bytes_received() - before;
  WC_ASSIGN_OR_RETURN(prepared.signed_manifest,
                      SignManifest(manifest, {options.secret, options.signing_identity.get()}));
  out.reader = std::move(reader);
  return out;
}

}  // namespace weightcast::publish
