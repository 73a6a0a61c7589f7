// Sharded publish, the rank's side (docs/sharded_publish.md): a rank prepares its part of a
// version in its own store like any version (delta on its own previous part), pads it to a
// whole number of chunks, gives it to the coordinator, waits until every rank's part is in, and
// then seeds its chunks of the assembled version. Members of publish::Publisher.
#include <algorithm>
#include <chrono>
#include <system_error>
#include <thread>

#include "format/safetensors.h"
#include "manifest/chunk_size.h"
#include "manifest/part_assembly.h"
#include "publish/channel_log.h"
#include "publish/publisher.h"
#include "trust/signed_manifest.h"
#include "util/file.h"

namespace weightcast::publish {
namespace {

namespace fs = std::filesystem;
namespace wire = coord::wire;

// The file that pads a rank's part to a whole number of chunks: zeros, sorted after every file
// a trainer writes ('~' is the last printable ASCII character), so it is the end of the part.
constexpr char kPadFile[] = "~weightcast-pad";

bool Unreachable(const Status& st) {
  return st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded;
}

Status SortsAfterPad(const fs::path& dir, const std::string& file) {
  return InvalidArgument(dir.string() + ": " + file + " sorts after the padding file " + kPadFile +
                         "; rename it (a rank's files must sort before it)");
}

Status LinkFailed(const std::string& file, const fs::path& scratch, const std::error_code& ec) {
  return ErrnoStatus("linking " + file + " into " + scratch.string(), ec.value());
}

// A directory holding `dir`'s files (hard links where the filesystem allows, copies otherwise)
// and `pad` zero bytes in kPadFile, under `scratch` (emptied first).
Result<fs::path> PaddedCopy(const fs::path& dir, const Checkpoint& checkpoint,
                            const fs::path& scratch, uint64_t pad) {
  std::error_code ec;
  fs::remove_all(scratch, ec);
  fs::create_directories(scratch, ec);
  if (ec) return ErrnoStatus("mkdir(" + scratch.string() + ")", ec.value());
  for (const CheckpointFile& f : checkpoint.files) {
    if (!(f.relative_path < std::string(kPadFile))) return SortsAfterPad(dir, f.relative_path);
    const fs::path to = scratch / f.relative_path;
    fs::create_directories(to.parent_path(), ec);
    fs::create_hard_link(dir / f.relative_path, to, ec);
    if (ec) {
      ec.clear();
      fs::copy_file(dir / f.relative_path, to, ec);
    }
    if (ec) return LinkFailed(f.relative_path, scratch, ec);
  }
  WC_RETURN_IF_ERROR(WriteFileAtomic(scratch / kPadFile, std::string(pad, '\0')));
  return scratch;
}

}  // namespace

// Defined in publisher.cc, instantiated there for these.
extern template Result<wire::PublishReply> Publisher::Call<wire::PublishReply>(
    const std::function<Result<wire::PublishReply>(coord::CoordinatorClient&)>&);
extern template Result<std::vector<uint8_t>> Publisher::Call<std::vector<uint8_t>>(
    const std::function<Result<std::vector<uint8_t>>(coord::CoordinatorClient&)>&);

bool Publisher::PartLogged(const wire::ChannelLog& log, Version version, const Digest& part_root) {
  bool listed = false;
  for (const wire::VersionEntry& e : log.versions()) {
    if (e.version() == version.value()) listed = e.decision() != wire::DECISION_ABORT;
  }
  if (!listed) return false;
  Result<std::vector<uint8_t>> bytes = Call<std::vector<uint8_t>>(
      [&](coord::CoordinatorClient& c) { return c.GetManifest(options_.channel, version); });
  if (!bytes.ok()) return false;
  Result<Manifest> assembled =
      VerifySignedManifest(*bytes, {options_.secret, options_.trust_anchor.get()});
  if (!assembled.ok()) return false;
  Result<std::vector<PartLayout>> parts = PartsOf(*assembled);
  return parts.ok() && options_.rank < parts->size() && (*parts)[options_.rank].root == part_root;
}

Result<PublishedVersion> Publisher::PublishPartDirectory(
    const fs::path& dir, const std::map<std::string, std::string>& metadata,
    const wire::ChannelLog& log) {
  const Stopwatch took;
  PrepareOptions o = BaseOptions();
  o.metadata = metadata;
  o.metadata[std::string(kPartKey)] = PartValue({options_.rank, options_.world});
  o.min_version = Version(
      std::max({NewestLogged(log), aborted_part_.value(), log.newest_aborted_assembly()}) + 1);
  // A delta on this rank's previous part, if the fleet holds the version it was part of.
  std::optional<Manifest> base;
  if (Result<Version> current = store_->Current(options_.channel); current.ok()) {
    Result<Manifest> m = store_->GetManifest(options_.channel, *current);
    if (m.ok()) base = std::move(m).value();
  }
  o.delta = base.has_value() && PartLogged(log, base->version, base->root);

  // Every rank cuts its part alike, and every part but the last ends on a chunk boundary, so
  // the coordinator can lay the parts end to end (docs/sharded_publish.md, "Layout").
  WC_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(dir));
  const uint64_t bytes = checkpoint.total_bytes();
  uint64_t chunk = options_.build.chunk_size;
  if (chunk == kAutoChunkSize) {
    chunk = base.has_value() ? base->chunk_size : ChooseChunkSize(bytes * options_.world);
  }
  o.build.chunk_size = chunk;
  fs::path source = dir;
  const uint64_t pad = options_.rank + 1 == options_.world ? 0 : (chunk - bytes % chunk) % chunk;
  const fs::path scratch = options_.store / (".part-import-" + options_.channel);
  if (pad != 0) {
    WC_ASSIGN_OR_RETURN(source, PaddedCopy(dir, checkpoint, scratch, pad));
    o.import = ImportPolicy::kAuto;
  }
  Result<PreparedVersion> made = PrepareVersion(*store_, source, o);
  std::error_code ec;
  if (pad != 0) fs::remove_all(scratch, ec);
  WC_ASSIGN_OR_RETURN(PreparedVersion prepared, std::move(made));
  std::erase_if(prepared.other_files, [](const auto& f) { return f.first == kPadFile; });

  PublishedVersion out;
  out.version = prepared.manifest.version;
  out.delta = prepared.manifest.delta.has_value();
  out.model_bytes = prepared.manifest.total_size();
  out.payload_bytes = prepared.payload_bytes;
  out.chunks = prepared.manifest.chunk_count();
  out.prepare_seconds = took.Seconds();
  WC_RETURN_IF_ERROR(PublishPartSigned(prepared));
  WC_RETURN_IF_ERROR(StartSeedingPart(prepared));
  options_.log.Info("published a part", {{"version", out.version.value()},
                                         {"rank", static_cast<uint64_t>(options_.rank)},
                                         {"world", static_cast<uint64_t>(options_.world)},
                                         {"dir", dir.string()},
                                         {"delta", out.delta},
                                         {"bytes", out.model_bytes},
                                         {"pad_bytes", pad},
                                         {"payload_bytes", out.payload_bytes},
                                         {"prepare_s", out.prepare_seconds},
                                         {"total_s", took.Seconds()}});
  return out;
}

Status Publisher::PublishPartSigned(const PreparedVersion& part) {
  const Version version = part.manifest.version;
  const net::TimePoint start = clock().Now();
  uint32_t reported = 0;
  while (!Stopping()) {
    const uint64_t epoch = writer_epoch();
    Result<wire::PublishReply> reply = Call<wire::PublishReply>(
        [&](coord::CoordinatorClient& c) { return c.PublishPart(part.signed_manifest, epoch); });
    if (reply.ok()) {
      if (reply->version() != version.value()) {
        return Internal("the coordinator took part of v" + std::to_string(version.value()) +
                        " as v" + std::to_string(reply->version()));
      }
      if (reply->assembled()) return Status::Ok();
      if (reply->parts_in() != reported) {
        reported = reply->parts_in();
        options_.log.Info("waiting for the other ranks' parts",
                          {{"version", version.value()},
                           {"parts_in", static_cast<uint64_t>(reply->parts_in())},
                           {"world", static_cast<uint64_t>(reply->world())}});
      }
    } else if (reply.status().code() == Code::kAborted) {
      aborted_part_ = std::max(aborted_part_, version);
      return reply.status();
    } else if (!Unreachable(reply.status())) {
      return reply.status().WithContext("publishing rank " + std::to_string(options_.rank) +
                                        "'s part of v" + std::to_string(version.value()));
    } else if (options_.unreachable_timeout != net::kForever &&
               clock().Now() - start >= options_.unreachable_timeout) {
      return Unavailable("the coordinator at " + options_.coordinator +
                         " did not take the part of v" + std::to_string(version.value()) + ": " +
                         reply.status().ToString());
    }
    // The coordinator answers at once; the parts of the other ranks take as long as they take
    // (the coordinator's --part-timeout bounds it). Each poll costs the coordinator a signature
    // check of the part under its lock, so not faster than the publisher's poll interval.
    SleepFor(options_.poll_interval);
  }
  return Aborted("stopped before v" + std::to_string(version.value()) + " was assembled");
}

Status Publisher::StartSeedingPart(const PreparedVersion& part) {
  const Version version = part.manifest.version;
  WC_ASSIGN_OR_RETURN(std::vector<uint8_t> signed_manifest,
                      Call<std::vector<uint8_t>>([&](coord::CoordinatorClient& c) {
                        return c.GetManifest(options_.channel, version);
                      }));
  WC_ASSIGN_OR_RETURN(
      Manifest assembled,
      VerifySignedManifest(signed_manifest, {options_.secret, options_.trust_anchor.get()}));
  WC_ASSIGN_OR_RETURN(std::vector<PartLayout> parts, PartsOf(assembled));
  if (options_.rank >= parts.size() || parts[options_.rank].root != part.manifest.root) {
    return FailedPrecondition("v" + std::to_string(version.value()) +
                              " was assembled without this rank's part");
  }
  // The assembled delta is the parts' deltas laid end to end; when it is full, the payloads
  // serve nobody.
  std::shared_ptr<const node::PayloadCache> payloads = part.payloads;
  if (!assembled.delta.has_value()) payloads.reset();
  WC_RETURN_IF_ERROR(node_->SeedPart(assembled, signed_manifest, part.manifest,
                                     parts[options_.rank].first_chunk, std::move(payloads)));
  bool held = false;
  {
    std::lock_guard lock(mu_);
    seeding_ = version;
    seeding_chunks_ = part.manifest.chunk_count();
    seeding_bytes_ = part.manifest.total_size();
    held = heartbeat_held_;
    cv_.notify_all();
  }
  if (held) WakeHeartbeat();
  return Status::Ok();
}

Status Publisher::ReconcilePart(Version current, const wire::ChannelLog& log) {
  WC_ASSIGN_OR_RETURN(PreparedVersion prepared,
                      ReloadVersion(*store_, current, BaseOptions(), /*encode_payloads=*/true));
  if (current.value() > NewestLogged(log) && current.value() > log.newest_aborted_assembly()) {
    // This rank's part was prepared but its version never assembled (the process died, or is
    // being restarted mid-version): give it again. A delta on a base the fleet lacks is sent
    // whole.
    const auto& delta = prepared.manifest.delta;
    if (delta.has_value() && !PartLogged(log, delta->base_version, delta->base_root)) {
      WC_RETURN_IF_ERROR(SendWhole(prepared));
    }
    options_.log.Info("giving again a part the coordinator has not assembled",
                      {{"version", current.value()}});
    Status given = PublishPartSigned(prepared);
    if (given.code() == Code::kAborted) {
      options_.log.Warn("that version was aborted; the next one goes above it",
                        {{"version", current.value()}, {"error", given.ToString()}});
      return Status::Ok();
    }
    WC_RETURN_IF_ERROR(given);
    return StartSeedingPart(prepared);
  }
  if (!PartLogged(log, current, prepared.manifest.root)) return Status::Ok();
  options_.log.Info("seeding this rank's part of the version logged before the restart",
                    {{"version", current.value()}});
  return StartSeedingPart(prepared);
}

}  // namespace weightcast::publish
