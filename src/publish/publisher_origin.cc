// Publishing a model that lives at an HTTP(S) origin (docs/origin.md): streamed once to build
// the manifest, then seeded from the origin itself. A member of publish::Publisher.
#include <chrono>

#include "origin/model.h"
#include "publish/channel_log.h"
#include "publish/origin_version.h"
#include "publish/publisher.h"

namespace weightcast::publish {

Result<PublishedVersion> Publisher::PublishOrigin(
    const std::string& from, const std::shared_ptr<origin::HttpClient>& http,
    const std::map<std::string, std::string>& metadata) {
  std::lock_guard publishing(publish_mu_);
  if (stopping_) return Aborted("the publisher is stopping");
  WC_RETURN_IF_ERROR(FinishCommitBehind());
  if (sharded()) {
    return FailedPrecondition("a sharded publisher publishes directories, not an origin");
  }
  WC_RETURN_IF_ERROR(lost_lease());
  {
    std::lock_guard lock(mu_);
    origin_http_ = http;
  }
  if (stopping_) http->Cancel();  // a Stop that came before the client was known
  const Stopwatch prepare;
  const std::string label = origin::RedactUrl(from);
  WC_ASSIGN_OR_RETURN(origin::OriginSpec spec, origin::ResolveOriginSpec(from));
  WC_ASSIGN_OR_RETURN(origin::OriginModel model, origin::DescribeOriginModel(*http, spec));
  WC_ASSIGN_OR_RETURN(coord::wire::ChannelLog log, LogBeforePublish());
  PrepareOptions o = BaseOptions();
  o.metadata = metadata;
  o.delta = false;
  // Above what the coordinator logged and what this store holds (a version published from a
  // directory by the same writer).
  Result<Version> stored = store_->NextVersion(options_.channel);
  o.min_version = Version(std::max(NewestLogged(log) + 1, stored.ok() ? stored->value() : 1));
  WC_ASSIGN_OR_RETURN(OriginPrepared built, PrepareOriginVersion(model, http, label, o));
  const PreparedVersion& prepared = built.prepared;
  PublishedVersion out;
  out.version = prepared.manifest.version;
  out.model_bytes = prepared.manifest.total_size();
  out.chunks = prepared.manifest.chunk_count();
  out.prepare_seconds = prepare.Seconds();
  WC_RETURN_IF_ERROR(PublishSigned(prepared));
  std::shared_ptr<const origin::OriginReader> reader = built.reader;
  WC_RETURN_IF_ERROR(node_->SeedFrom(
      prepared.manifest, prepared.signed_manifest, [reader](ByteRange range) -> Result<HeldBytes> {
        auto bytes = std::make_shared<std::vector<uint8_t>>(range.size);
        WC_RETURN_IF_ERROR(reader->Read(range.offset, *bytes));
        return HeldBytes::Of(std::move(bytes));
      }));
  NoteSeeding(prepared);
  options_.log.Info("published", {{"version", out.version.value()},
                                  {"from", label},
                                  {"bytes", out.model_bytes},
                                  {"origin_bytes", built.origin_bytes},
                                  {"chunks", static_cast<uint64_t>(out.chunks)},
                                  {"prepare_s", out.prepare_seconds}});
  return out;
}

}  // namespace weightcast::publish
