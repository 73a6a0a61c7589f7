#include "cli/demo_steps.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "codec/version_codec.h"
#include "format/safetensors.h"
#include "manifest/builder.h"
#include "store/store.h"
#include "synth/model.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kChannel = "policy";

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Gbps(uint64_t bytes, double seconds) {
  return Fixed(seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0) + " GB/s";
}

fs::path StepDir(const fs::path& trainer, uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%04llu", static_cast<unsigned long long>(step));
  return trainer / name;
}

// One row of the final table.
struct VersionRow {
  Version version;
  uint64_t model_bytes = 0;
  uint64_t wire_bytes = 0;
  double changed_fraction = 0;  // of elements, from synth (0 for the first version)
  double seconds = 0;           // encode + apply + commit at the receiver
  double copy_seconds = 0;      // a plain copy of the same files, same run
  bool identical = false;
};

// Compares two files byte for byte through mmap.
Result<bool> SameBytes(const fs::path& a, const fs::path& b) {
  ASSIGN_OR_RETURN(MappedFile fa, MappedFile::Open(a));
  ASSIGN_OR_RETURN(MappedFile fb, MappedFile::Open(b));
  if (fa.size() != fb.size()) return false;
  auto x = fa.bytes(), y = fb.bytes();
  return std::equal(x.begin(), x.end(), y.begin());
}

// Every file the manifest lists is byte-identical under both roots.
Result<bool> SameVersionFiles(const Manifest& manifest, const fs::path& a, const fs::path& b) {
  for (const ManifestFile& file : manifest.files) {
    ASSIGN_OR_RETURN(bool same, SameBytes(a / file.path, b / file.path));
    if (!same) return false;
  }
  return true;
}

// Times a plain recursive copy of `dir`, the reference a transfer is compared with.
Result<double> TimePlainCopy(const fs::path& dir, const fs::path& scratch) {
  std::error_code ec;
  fs::remove_all(scratch, ec);
  auto start = std::chrono::steady_clock::now();
  fs::copy(dir, scratch, fs::copy_options::recursive, ec);
  if (ec) return IoError("copy " + dir.string() + ": " + ec.message());
  double seconds = SecondsSince(start);
  fs::remove_all(scratch, ec);
  return seconds;
}

// Ships version `target` to the receiver as a delta against `base`, which the receiver holds
// committed: the trainer encodes every chunk against its own copy of the base, the receiver
// decodes each payload onto its committed base, checks every chunk's hash, stages and commits.
// Returns the payload bytes that crossed from trainer to receiver.
Result<uint64_t> ShipDelta(Store& store, const Manifest& base, const fs::path& trainer_base,
                           Manifest target, const fs::path& trainer_target) {
  ASSIGN_OR_RETURN(codec::SnapshotReader base_at_trainer,
                   codec::SnapshotReader::Open(trainer_base, base));
  ASSIGN_OR_RETURN(codec::SnapshotReader target_at_trainer,
                   codec::SnapshotReader::Open(trainer_target, target));
  // The "wire": payloads by chunk. A demo-sized delta fits in memory; the swarm streams them.
  std::map<uint32_t, std::vector<uint8_t>> wire;
  uint64_t wire_bytes = 0;
  ASSIGN_OR_RETURN(DeltaInfo delta,
                   codec::EncodeVersion(base, base_at_trainer, target, target_at_trainer,
                                        [&](ChunkIndex index, std::span<const uint8_t> payload) {
                                          wire_bytes += payload.size();
                                          wire[index.value()].assign(payload.begin(),
                                                                     payload.end());
                                          return Status::Ok();
                                        }));
  target.delta = std::move(delta);

  ASSIGN_OR_RETURN(codec::SnapshotReader base_at_receiver,
                   codec::SnapshotReader::Open(store.VersionPath(kChannel, base.version), base));
  ASSIGN_OR_RETURN(StagedVersion staged, store.BeginStaging(kChannel, target));
  Status decoded = codec::DecodeVersion(
      base, base_at_receiver, target,
      [&](ChunkIndex index) -> Result<std::span<const uint8_t>> {
        auto it = wire.find(index.value());
        if (it == wire.end())
          return NotFound("no payload for chunk " + std::to_string(index.value()));
        return std::span<const uint8_t>(it->second);
      },
      [&](ChunkIndex index, std::span<const uint8_t> bytes) {
        RETURN_IF_ERROR(staged.WriteChunk(index, bytes));
        return staged.MarkVerified(index);
      });
  if (!decoded.ok()) {
    store.Abort(kChannel, target.version).IgnoreError();
    return decoded;
  }
  RETURN_IF_ERROR(store.Commit(kChannel, target.version));
  return wire_bytes;
}

}  // namespace

Status RunDemo(const DemoConfig& config, std::ostream& out) {
  const fs::path work = config.work_dir;
  const fs::path trainer = work / "trainer";
  const fs::path receiver_root = work / "receiver";
  std::error_code ec;
  fs::remove_all(work, ec);
  fs::create_directories(trainer, ec);
  if (ec) return IoError("create " + trainer.string() + ": " + ec.message());

  out << "weightcast demo: trainer -> receiver on this machine, in " << work.string() << "\n\n";

  // 1. The trainer's checkpoint and RL-like steps.
  auto start = std::chrono::steady_clock::now();
  synth::SynthModelOptions model_options;
  model_options.out_dir = StepDir(trainer, 0);
  model_options.target_bytes = config.model_bytes;
  model_options.seed = config.seed;
  ASSIGN_OR_RETURN(synth::SynthModelSummary model, synth::WriteSynthModel(model_options));
  out << "[1] synth: " << model.tensors << " bf16 tensors, " << FormatBytes(model.file_bytes)
      << " in " << model.files.size() << " files (" << Fixed(SecondsSince(start)) << " s)\n";

  std::vector<synth::StepStats> steps;
  if (config.steps > 0) {
    start = std::chrono::steady_clock::now();
    synth::SynthStepsOptions step_options;
    step_options.from = StepDir(trainer, 0);
    step_options.out_dir = trainer;
    step_options.steps = config.steps;
    step_options.seed = config.seed;
    if (config.lr > 0) step_options.adam.lr = config.lr;
    ASSIGN_OR_RETURN(steps, synth::WriteSynthSteps(step_options));
    out << "[2] synth steps: " << steps.size() << " RL-like steps (Adam, lr "
        << step_options.adam.lr << "), changed elements per step:";
    for (const auto& s : steps) out << " " << Fixed(100 * s.changed_fraction()) << "%";
    out << " (" << Fixed(SecondsSince(start)) << " s)\n";
  }

  // 2. Manifests: one per version, chunk hashes over all cores.
  std::vector<Manifest> manifests;
  for (uint64_t v = 0; v <= steps.size(); ++v) {
    start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(StepDir(trainer, v)));
    ASSIGN_OR_RETURN(Manifest manifest,
                     BuildManifest(checkpoint, std::string(kChannel), Version(v + 1)));
    double seconds = SecondsSince(start);
    out << "[3] manifest v" << v + 1 << ": " << manifest.files.size() << " files, "
        << manifest.tensors.size() << " tensors, " << manifest.chunk_count() << " chunks of "
        << FormatBytes(manifest.chunk_size) << ", root " << ToHex(manifest.root).substr(0, 16)
        << "… (" << Gbps(manifest.total_size(), seconds) << ")\n";
    manifests.push_back(std::move(manifest));
  }

  // 3. The receiver: v1 arrives whole; every later version as a delta onto the one before.
  ASSIGN_OR_RETURN(Store store, Store::Open(receiver_root));
  std::vector<VersionRow> rows;
  for (size_t i = 0; i < manifests.size(); ++i) {
    const Manifest& manifest = manifests[i];
    const fs::path source = StepDir(trainer, i);
    VersionRow row;
    row.version = manifest.version;
    row.model_bytes = manifest.total_size();
    row.changed_fraction = i == 0 ? 1.0 : steps[i - 1].changed_fraction();
    start = std::chrono::steady_clock::now();
    if (i == 0) {
      // The first version travels whole.
      RETURN_IF_ERROR(store.ImportDirectory(kChannel, manifest, source));
      row.wire_bytes = manifest.total_size();
    } else {
      ASSIGN_OR_RETURN(row.wire_bytes, ShipDelta(store, manifests[i - 1], StepDir(trainer, i - 1),
                                                 manifest, source));
    }
    row.seconds = SecondsSince(start);
    RETURN_IF_ERROR(store.Verify(kChannel, manifest.version));
    ASSIGN_OR_RETURN(row.copy_seconds, TimePlainCopy(source, work / "plain-copy"));
    ASSIGN_OR_RETURN(row.identical,
                     SameVersionFiles(manifest, source, store.VersionPath(kChannel, row.version)));
    ASSIGN_OR_RETURN(Version current, store.Current(kChannel));
    out << "[4] receiver: v" << row.version.value() << " committed and verified, current -> v"
        << current.value()
        << (i == 0 ? " (full copy)"
                   : " (delta applied onto v" + std::to_string(current.value() - 1) + ")")
        << (row.identical ? ", byte-identical" : ", DIFFERS") << "\n";
    rows.push_back(row);
  }

  // 4. Rollback: the previous kept version becomes current again, nothing fetched.
  if (manifests.size() >= 2) {
    ASSIGN_OR_RETURN(Version back, store.Rollback(kChannel));
    out << "[5] rollback: current -> v" << back.value();
    ASSIGN_OR_RETURN(Version forward, store.Rollback(kChannel, manifests.back().version));
    out << ", then forward again -> v" << forward.value() << "\n";
  }

  out << "\n version   model bytes   on the wire   ratio   changed    time   plain copy  "
         "identical\n";
  bool all_identical = true;
  for (const VersionRow& r : rows) {
    char line[200];
    double ratio = r.wire_bytes ? static_cast<double>(r.model_bytes) / r.wire_bytes : 0;
    std::snprintf(line, sizeof line, " v%-6llu %13s %13s %7.1fx %8.2f%% %6.2fs %10.2fs  %s\n",
                  static_cast<unsigned long long>(r.version.value()),
                  FormatBytes(r.model_bytes).c_str(), FormatBytes(r.wire_bytes).c_str(), ratio,
                  100 * r.changed_fraction, r.seconds, r.copy_seconds, r.identical ? "yes" : "NO");
    out << line;
    all_identical = all_identical && r.identical;
  }
  if (!config.keep) fs::remove_all(work, ec);
  if (!all_identical) return Internal("a committed version differs from the trainer's files");
  out << "\nevery committed version is byte-identical to the trainer's files\n";
  return Status::Ok();
}

}  // namespace weightcast::cli
