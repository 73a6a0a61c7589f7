#include "publish/local_publish.h"

#include "live/delta_file.h"

namespace weightcast::publish {

Result<PreparedVersion> PublishLocal(Store& store, const std::filesystem::path& dir,
                                     const LocalPublishOptions& options) {
  PrepareOptions o;
  o.channel = options.channel;
  // PrepareVersion signs every manifest; nobody checks a local store's signature (its readers
  // trust the store), so any fixed key does.
  o.secret = "weightcast-local-store";
  o.build.chunk_size = options.chunk_size;
  o.build.device_checks = options.device_checks;
  o.build.algorithm = options.algorithm;
  o.build.threads = options.threads;
  o.codec.threads = options.threads;
  o.delta = options.delta;
  o.import = ImportPolicy::kHardlink;
  o.metadata = options.metadata;
  const std::filesystem::path root = store.root();
  o.before_commit = [&root](const Manifest& m, const node::PayloadCache* payloads) -> Status {
    if (payloads == nullptr || !m.delta.has_value()) return Status::Ok();
    return live::WriteDeltaFile(root, m, [&](ChunkIndex i) -> std::span<const uint8_t> {
      const std::optional<HeldBytes> p = payloads->Get(i);
      return p ? p->bytes : std::span<const uint8_t>();
    });
  };
  WC_ASSIGN_OR_RETURN(PreparedVersion out, PrepareVersion(store, dir, o));
  if (Result<std::vector<VersionInfo>> kept = store.List(options.channel); kept.ok()) {
    std::vector<Version> keep;
    for (const VersionInfo& v : *kept) keep.push_back(v.version);
    live::CollectDeltaFiles(root, options.channel, keep);
  }
  return out;
}

}  // namespace weightcast::publish
