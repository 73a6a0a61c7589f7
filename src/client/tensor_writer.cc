#include "client/tensor_writer.h"

#include "publish/local_publish.h"

#include <algorithm>
#include <set>
#include <system_error>
#include <utility>

#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast::client {

Status WriteTensorsFile(const std::filesystem::path& path, std::vector<TensorBytes> tensors) {
  std::set<std::string_view> names;
  for (const TensorBytes& t : tensors) {
    if (t.name.empty()) return InvalidArgument("a tensor has an empty name");
    if (!names.insert(t.name).second) return InvalidArgument("duplicate tensor name " + t.name);
    Result<uint64_t> size = TensorByteSize(t.dtype, t.shape);
    if (!size.ok()) return size.status().WithContext("tensor " + t.name);
    if (*size != t.bytes.size()) {
      return InvalidArgument("tensor " + t.name + ": " + std::string(DTypeName(t.dtype)) +
                             " of shape " + FormatShape(t.shape) + " is " + std::to_string(*size) +
                             " bytes, but " + std::to_string(t.bytes.size()) + " were given");
    }
  }
  // Wider elements first, then by name: the data section starts 8-byte aligned and every tensor
  // of a wider type is a whole number of its elements, so each tensor stays aligned to its
  // element size for readers that map it in place; the order never depends on the caller's.
  std::sort(tensors.begin(), tensors.end(), [](const TensorBytes& a, const TensorBytes& b) {
    const uint32_t abits = DTypeBits(a.dtype);
    const uint32_t bbits = DTypeBits(b.dtype);
    if (abits != bbits) return abits > bbits;
    return a.name < b.name;
  });
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorBytes& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  WC_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, std::move(specs)));
  for (const TensorBytes& t : tensors) WC_RETURN_IF_ERROR(writer->Append(t.bytes));
  return writer->Finish();
}

Result<std::filesystem::path> PrepareScratchDir(const std::filesystem::path& store_root,
                                                std::string_view channel) {
  const std::filesystem::path dir = store_root / (".python-publish-" + std::string(channel));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return IoError("removing " + dir.string() + ": " + ec.message());
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("mkdir(" + dir.string() + "): " + ec.message());
  return dir;
}

Result<LocalPublishResult> CommitDirectory(Store& store, std::string_view channel,
                                           const std::filesystem::path& dir, uint64_t chunk_size,
                                           const std::map<std::string, std::string>& metadata) {
  publish::LocalPublishOptions options;
  options.channel = std::string(channel);
  options.chunk_size = chunk_size;
  options.metadata = metadata;
  Result<publish::PreparedVersion> published = publish::PublishLocal(store, dir, options);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // the store holds its own links to the files now
  if (!published.ok()) return published.status();
  const Manifest& manifest = published->manifest;
  LocalPublishResult result;
  result.version = manifest.version;
  result.total_bytes = manifest.total_size();
  result.chunk_count = manifest.chunk_count();
  result.root = manifest.root;
  result.delta = manifest.delta.has_value();
  result.wire_bytes = manifest.delta.has_value() ? published->payload_bytes : manifest.total_size();
  result.seconds = published->build_seconds + published->encode_seconds + published->import_seconds;
  return result;
}

}  // namespace weightcast::client
