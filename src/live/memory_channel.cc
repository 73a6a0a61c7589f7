#include "live/memory_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>

#include "codec/version_codec.h"
#include "format/safetensors.h"
#include "live/delta_file.h"
#include "live/store_view.h"
#include "store/layout.h"
#include "util/file.h"

namespace weightcast::live {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSlotKey = "weightcast.memory.slot";
constexpr std::string_view kFileName = "model.safetensors";

fs::path SlotDir(const fs::path& channel_dir, int slot) {
  return channel_dir / ("slot-" + std::to_string(slot));
}
fs::path ManifestPath(const fs::path& channel_dir, Version v) {
  return channel_dir / (std::to_string(v.value()) + ".manifest");
}
fs::path DeltaPath(const fs::path& channel_dir, Version v) {
  return channel_dir / (std::to_string(v.value()) + ".delta");
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Result<Version> ReadCurrent(const fs::path& channel_dir) {
  const fs::path path = channel_dir / "current";
  std::error_code ec;
  if (!fs::exists(path, ec))
    return NotFound("no version in memory channel " + channel_dir.string());
  WC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, 64));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const std::optional<Version> v = store::ParseVersionName(text);
  if (!v.has_value()) return Corrupt(path.string() + ": not a version number: '" + text + "'");
  return *v;
}

// The slot files this process has mapped, by path. The publisher rewrites a slot in place for as
// long as its size stays the same, so a mapping stays valid and stays faulted in: mapping a slot
// afresh for every apply costs a page fault per 4 KiB read, which on a VM is several times the
// copy itself. A slot replaced by a new file (a new size, a new inode) is mapped again.
std::shared_ptr<const MappedFile> MapSlotForReading(const fs::path& path, Status* error) {
  static std::mutex mu;
  static std::map<fs::path, std::pair<ino_t, std::shared_ptr<const MappedFile>>> mapped;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *error = ErrnoStatus("stat(" + path.string() + ")", errno);
    return nullptr;
  }
  const std::lock_guard lock(mu);
  auto it = mapped.find(path);
  if (it != mapped.end() && it->second.first == st.st_ino &&
      it->second.second->size() == static_cast<uint64_t>(st.st_size)) {
    return it->second.second;
  }
  Result<MappedFile> file = MappedFile::Open(path, /*populate=*/true);
  if (!file.ok()) {
    *error = file.status();
    return nullptr;
  }
  auto shared = std::make_shared<const MappedFile>(std::move(file).value());
  mapped[path] = {st.st_ino, shared};
  // Let go of slots whose files are gone or replaced (a channel removed, a new size): a mapping
  // keeps a deleted tmpfs file's pages alive for as long as this process runs.
  for (auto it = mapped.begin(); it != mapped.end();) {
    struct stat now {};
    const bool stale = ::stat(it->first.c_str(), &now) != 0 || now.st_ino != it->second.first;
    it = stale ? mapped.erase(it) : std::next(it);
  }
  return shared;
}

// A version of a memory channel, opened for applying: manifest, its slot mapped, its delta file.
Result<std::unique_ptr<OpenedVersion>> OpenMemoryVersion(const fs::path& channel_dir,
                                                         std::string_view channel, Version v) {
  const fs::path path = ManifestPath(channel_dir, v);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return NotFound("v" + std::to_string(v.value()) + " of memory channel " + std::string(channel) +
                    " is gone (the publisher moved two versions on): apply the current one");
  }
  WC_ASSIGN_OR_RETURN(Manifest m, ReadManifestFile(path));
  if (m.channel != channel || m.version != v || m.files.size() != 1 ||
      m.files[0].path != kFileName || !m.metadata.contains(std::string(kSlotKey))) {
    return Corrupt(path.string() + ": not a manifest of this memory channel");
  }
  const std::string& slot_text = m.metadata.at(std::string(kSlotKey));
  if (slot_text != "0" && slot_text != "1") return Corrupt(path.string() + ": bad slot");
  Status error;
  std::shared_ptr<const MappedFile> file =
      MapSlotForReading(SlotDir(channel_dir, slot_text[0] - '0') / kFileName, &error);
  if (file == nullptr) return error;
  if (file->size() != m.files[0].size) {
    return Aborted("the slot of v" + std::to_string(v.value()) +
                   " was rewritten for a newer version: apply the current one");
  }
  std::optional<DeltaFile> delta;
  if (m.delta.has_value()) {
    if (Result<DeltaFile> d = DeltaFile::OpenAt(DeltaPath(channel_dir, v), m); d.ok()) {
      delta = std::move(*d);
    }
  }
  std::vector<std::shared_ptr<const MappedFile>> files;
  files.push_back(std::move(file));
  return std::make_unique<OpenedVersion>(std::move(m), std::move(files), std::move(delta));
}

}  // namespace

fs::path MemoryChannelDir(const fs::path& dir, std::string_view channel) {
  return dir / (std::string(channel) + ".memory");
}

// One slot: a safetensors file mapped read-write for as long as its size stays the same.
struct MemoryChannelWriter::Slot {
  fs::path path;
  uint8_t* data = nullptr;
  uint64_t size = 0;
  ~Slot() {
    if (data != nullptr) ::munmap(data, size);
  }
};

MemoryChannelWriter::MemoryChannelWriter(fs::path dir, std::string channel,
                                         MemoryChannelOptions options)
    : dir_(std::move(dir)),
      channel_(std::move(channel)),
      options_(options),
      pool_(options.threads) {}

MemoryChannelWriter::~MemoryChannelWriter() {
  if (preparing_.joinable()) preparing_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<std::unique_ptr<MemoryChannelWriter>> MemoryChannelWriter::Open(
    const fs::path& dir, std::string channel, const MemoryChannelOptions& options) {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  if (options.chunk_size != kAutoChunkSize &&
      (options.chunk_size < kMinChunkSize || options.chunk_size > kMaxChunkSize)) {
    return InvalidArgument("chunk size " + std::to_string(options.chunk_size) + " is outside [" +
                           std::to_string(kMinChunkSize) + ", " + std::to_string(kMaxChunkSize) +
                           "] and not 0 (auto)");
  }
  const fs::path channel_dir = MemoryChannelDir(dir, channel);
  std::error_code ec;
  for (int i = 0; i < 2; ++i) {
    fs::create_directories(SlotDir(channel_dir, i), ec);
    if (ec) return IoError("mkdir " + SlotDir(channel_dir, i).string() + ": " + ec.message());
  }
  auto w =
      std::unique_ptr<MemoryChannelWriter>(new MemoryChannelWriter(channel_dir, channel, options));
  // Two writers would number their versions alike and rewrite each other's slots.
  const fs::path lock_path = channel_dir / ".lock";
  w->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (w->lock_fd_ < 0) return ErrnoStatus("open(" + lock_path.string() + ")", errno);
  if (::flock(w->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Unavailable("memory channel " + channel + " in " + dir.string() +
                         " already has a publisher (one writer per channel; close it first)");
    }
    return ErrnoStatus("flock(" + lock_path.string() + ")", errno);
  }
  for (int i = 0; i < 2; ++i) {
    w->slots_[i] = std::make_unique<Slot>();
    w->slots_[i]->path = SlotDir(channel_dir, i) / kFileName;
  }
  // A restarted publisher continues the numbering; its first version is full (the slots'
  // contents are not vouched for), and it writes first into the slot readers are not using.
  if (Result<Version> current = ReadCurrent(channel_dir); current.ok()) {
    w->next_ = Version(current->value() + 1);
    if (Result<Manifest> m = ReadManifestFile(ManifestPath(channel_dir, *current)); m.ok()) {
      const std::string slot =
          m->metadata.contains(std::string(kSlotKey)) ? m->metadata.at(std::string(kSlotKey)) : "1";
      w->current_slot_ = slot == "0" ? 0 : 1;
    }
  }
  return w;
}

Status MemoryChannelWriter::MapSlot(int index, uint64_t size) {
  Slot& s = *slots_[index];
  if (s.data != nullptr && s.size == size) return Status::Ok();
  if (s.data != nullptr) {
    ::munmap(s.data, s.size);
    s.data = nullptr;
  }
  // Another size: a new file (readers that still map the old one keep reading its pages; a
  // shrink in place would fault them).
  std::error_code ec;
  fs::remove(s.path, ec);
  const int fd = ::open(s.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open(" + s.path.string() + ")", errno);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("ftruncate(" + s.path.string() + ")", err);
  }
  void* p = size == 0
                ? nullptr
                : ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return ErrnoStatus("mmap(" + s.path.string() + ")", errno);
  s.data = static_cast<uint8_t*>(p);
  s.size = size;
  return Status::Ok();
}

Result<EncodedHeader> MemoryChannelWriter::LayOut(std::vector<SnapshotTensor>& tensors,
                                                  bool with_bytes) {
  for (const SnapshotTensor& t : tensors) {
    WC_ASSIGN_OR_RETURN(const uint64_t size, TensorByteSize(t.dtype, t.shape));
    if (with_bytes && size != t.bytes.size()) {
      return InvalidArgument("tensor " + t.name + ": " + std::to_string(t.bytes.size()) +
                             " bytes, its dtype and shape need " + std::to_string(size));
    }
  }
  // Wider elements first, then by name (as client::WriteTensorsFile): every tensor stays aligned
  // to its element and the same model lands at the same offsets every step.
  std::sort(tensors.begin(), tensors.end(), [](const SnapshotTensor& a, const SnapshotTensor& b) {
    const uint32_t abits = DTypeBits(a.dtype);
    const uint32_t bbits = DTypeBits(b.dtype);
    if (abits != bbits) return abits > bbits;
    return a.name < b.name;
  });
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const SnapshotTensor& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  return EncodeSafetensorsHeader(specs, {});
}

Status MemoryChannelWriter::Reserve(std::vector<SnapshotTensor> tensors) {
  WC_ASSIGN_OR_RETURN(const EncodedHeader header, LayOut(tensors, /*with_bytes=*/false));
  const uint64_t size = header.bytes.size() + header.data_bytes;
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !snapshot_pending_; });
  if (preparing_.joinable()) preparing_.join();
  const int first = current_slot_ < 0 ? 0 : 1 - current_slot_;
  WC_RETURN_IF_ERROR(MapSlot(first, size));
  // The other slot only when no reader can be in it: on a fresh channel.
  if (current_slot_ < 0) WC_RETURN_IF_ERROR(MapSlot(1 - first, size));
  return Status::Ok();
}

Status MemoryChannelWriter::Snapshot(std::vector<SnapshotTensor> tensors,
                                     std::map<std::string, std::string> metadata) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !snapshot_pending_; });
  WC_ASSIGN_OR_RETURN(const EncodedHeader header, LayOut(tensors, /*with_bytes=*/true));
  const int slot = current_slot_ < 0 ? 0 : 1 - current_slot_;
  if (preparing_.joinable()) preparing_.join();
  WC_RETURN_IF_ERROR(MapSlot(slot, header.bytes.size() + header.data_bytes));
  uint8_t* out = slots_[slot]->data;
  std::memcpy(out, header.bytes.data(), header.bytes.size());
  out += header.bytes.size();
  for (const SnapshotTensor& t : tensors) {
    if (!t.bytes.empty()) std::memcpy(out, t.bytes.data(), t.bytes.size());
    out += t.bytes.size();
  }
  building_ = slot;
  metadata_ = std::move(metadata);
  snapshot_pending_ = true;
  snapshot_seconds_ = Since(start);
  return Status::Ok();
}

Result<MemoryPublished> MemoryChannelWriter::Finish() {
  std::unique_lock lock(mu_);
  if (!snapshot_pending_) return FailedPrecondition("no snapshot to publish");
  // Whatever happens, the snapshot is used up: a failed Finish leaves the channel as it was.
  struct Done {
    MemoryChannelWriter* w;
    ~Done() {
      w->snapshot_pending_ = false;
      w->cv_.notify_all();
    }
  } done{this};
  MemoryPublished out;
  out.snapshot_seconds = snapshot_seconds_;
  auto start = std::chrono::steady_clock::now();
  const int slot = building_;
  const Slot& target = *slots_[slot];
  WC_ASSIGN_OR_RETURN(const Checkpoint checkpoint, OpenCheckpoint(SlotDir(dir_, slot)));
  BuildOptions build;
  // The channel keeps its chunk size, as a publisher's does, so that every version can be a
  // delta of the one before.
  build.chunk_size =
      ResolveChunkSize(options_.chunk_size, checkpoint.total_bytes(), current_.get());
  build.algorithm = options_.algorithm;
  build.threads = options_.threads;
  WC_ASSIGN_OR_RETURN(Manifest manifest, BuildManifestLayout(checkpoint, channel_, next_, build));
  manifest.metadata = metadata_;
  manifest.metadata[std::string(kSlotKey)] = std::to_string(slot);
  const codec::SnapshotReader target_bytes =
      codec::SnapshotReader::FromMemory({target.data, target.size});
  std::vector<Digest> hashes;
  std::map<uint32_t, std::vector<uint8_t>> payloads;
  std::optional<DeltaInfo> delta;
  if (options_.deltas && current_ != nullptr && current_->chunk_size == manifest.chunk_size &&
      current_->hash_algorithm == manifest.hash_algorithm) {
    const Slot& base = *slots_[current_slot_];
    const codec::SnapshotReader base_bytes =
        codec::SnapshotReader::FromMemory({base.data, base.size});
    codec::VersionCodecOptions codec_options;
    codec_options.threads = options_.threads;
    const codec::PayloadSink sink = [&](ChunkIndex i, std::span<const uint8_t> p) {
      payloads[i.value()].assign(p.begin(), p.end());
      out.payload_bytes += p.size();
      return Status::Ok();
    };
    WC_ASSIGN_OR_RETURN(
        delta, codec::EncodeVersionHashing(*current_, base_bytes, manifest, target_bytes, sink,
                                           &hashes, codec_options));
  } else {
    // From this writer's own mapping, which the snapshot's copy has just faulted in (hashing the
    // file through a fresh mapping would fault every page again).
    hashes.resize(manifest.chunk_count());
    pool_.ParallelFor(hashes.size(), [&](size_t i) {
      const ByteRange r = manifest.ChunkRange(ChunkIndex(static_cast<uint32_t>(i)));
      hashes[i] = HashBytes(manifest.hash_algorithm,
                            std::span<const uint8_t>(target.data + r.offset, r.size));
    });
    out.payload_bytes = manifest.total_size();
  }
  WC_RETURN_IF_ERROR(FinishManifest(manifest, std::move(hashes)));
  manifest.delta = std::move(delta);
  out.encode_seconds = Since(start);

  start = std::chrono::steady_clock::now();
  if (manifest.delta.has_value()) {
    WC_RETURN_IF_ERROR(WriteDeltaFileAt(
        DeltaPath(dir_, manifest.version), manifest, [&](ChunkIndex i) -> std::span<const uint8_t> {
          auto it = payloads.find(i.value());
          return it == payloads.end() ? std::span<const uint8_t>()
                                      : std::span<const uint8_t>(it->second);
        }));
  }
  WC_RETURN_IF_ERROR(WriteManifestFile(ManifestPath(dir_, manifest.version), manifest));
  WC_RETURN_IF_ERROR(
      WriteFileAtomic(dir_ / "current", std::to_string(manifest.version.value()) + "\n"));
  // The version before the previous one lived in the slot just rewritten: its files go.
  std::error_code ec;
  for (uint64_t old = manifest.version.value() >= 2 ? manifest.version.value() - 2 : 0; old > 0;
       --old) {
    const bool had = fs::remove(ManifestPath(dir_, Version(old)), ec);
    fs::remove(DeltaPath(dir_, Version(old)), ec);
    if (!had) break;
  }
  out.version = manifest.version;
  out.delta = manifest.delta.has_value();
  out.total_bytes = manifest.total_size();
  out.chunk_count = manifest.chunk_count();
  out.root = manifest.root;
  out.publish_seconds = Since(start);
  current_ = std::make_shared<const Manifest>(std::move(manifest));
  // Only after the channel's first version ever is the other slot known to hold nothing a
  // reader could still open (a restarted writer finds the previous version there).
  if (current_slot_ < 0 && !preparing_.joinable()) {
    preparing_ = std::thread([this, other = 1 - slot, size = target.size] {
      (void)MapSlot(other, size);  // on failure the next Snapshot maps it and says why
    });
  }
  current_slot_ = slot;
  next_ = Version(next_.value() + 1);
  return out;
}

Result<Version> WaitMemoryChannel(const fs::path& dir, std::string_view channel,
                                  Version min_version, std::optional<double> timeout_seconds,
                                  const std::atomic<bool>* cancel) {
  const fs::path channel_dir = MemoryChannelDir(dir, channel);
  const auto deadline = timeout_seconds
                            ? std::chrono::steady_clock::now() +
                                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(*timeout_seconds))
                            : std::chrono::steady_clock::time_point::max();
  const int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return ErrnoStatus("inotify_init1", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  bool watching = false;
  while (true) {
    if (!watching) {
      // Watch first, then look: a switch of `current` between the two is not missed.
      watching = ::inotify_add_watch(fd, channel_dir.c_str(), IN_MOVED_TO | IN_CREATE) >= 0;
    }
    Result<Version> current = ReadCurrent(channel_dir);
    if (current.ok() && *current >= min_version && current->value() > 0) return *current;
    if (!current.ok() && current.status().code() != Code::kNotFound) return current.status();
    if (cancel != nullptr && cancel->load()) return Aborted("the subscriber was closed");
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return DeadlineExceeded("no version " + std::to_string(min_version.value()) +
                              " of memory channel " + channel_dir.string() + " in time");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    // Without a watch (the directory does not exist yet) poll; with one, sleep until an event.
    const int ms = static_cast<int>(std::min<int64_t>(watching ? 100 : 20, left.count() + 1));
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms) > 0) {
      char buf[4096];
      while (::read(fd, buf, sizeof buf) > 0) {
      }
    }
  }
}

Result<ApplyReport> ApplyFromMemory(const fs::path& dir, std::string_view channel, Version version,
                                    LiveSet& live) {
  const fs::path channel_dir = MemoryChannelDir(dir, channel);
  Result<ApplyReport> r = ApplyChain(
      version, live, [&](Version v) { return OpenMemoryVersion(channel_dir, channel, v); });
  if (!r.ok() && r.status().code() == Code::kCorrupt) {
    // A slot rewritten while we read it fails the check; say so when that is what happened.
    Result<Version> current = ReadCurrent(channel_dir);
    if (current.ok() && current->value() >= version.value() + 2) {
      return Aborted("v" + std::to_string(version.value()) +
                     " was overwritten by newer versions while it was applied (" +
                     r.status().message() + "): apply the current one");
    }
  }
  return r;
}

}  // namespace weightcast::live
