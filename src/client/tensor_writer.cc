#include "client/tensor_writer.h"

#include "publish/local_publish.h"

#include <algorithm>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast::client {

namespace {

// Checks names, sizes and dtypes, then sorts into file order: wider elements first, then by name.
// The data section starts 8-byte aligned and every tensor of a wider type is a whole number of
// its elements, so each tensor stays aligned to its element size for readers that map it in
// place; the order never depends on the caller's.
Status SortIntoFileOrder(std::vector<TensorBytes>& tensors) {
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
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorBytes& a, const TensorBytes& b) {
    const uint32_t abits = DTypeBits(a.dtype);
    const uint32_t bbits = DTypeBits(b.dtype);
    if (abits != bbits) return abits > bbits;
    return a.name < b.name;
  });
  return Status::Ok();
}

std::vector<TensorSpec> SpecsOf(const std::vector<TensorBytes>& tensors) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorBytes& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  return specs;
}

}  // namespace

Status WriteTensorsFile(const std::filesystem::path& path, std::vector<TensorBytes> tensors) {
  WC_RETURN_IF_ERROR(SortIntoFileOrder(tensors));
  WC_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, SpecsOf(tensors)));
  for (const TensorBytes& t : tensors) WC_RETURN_IF_ERROR(writer->Append(t.bytes));
  return writer->Finish();
}

Result<TensorsFileLayout> LayOutTensorsFile(std::span<const TensorBytes> tensors) {
  std::vector<TensorBytes> sorted(tensors.begin(), tensors.end());
  WC_RETURN_IF_ERROR(SortIntoFileOrder(sorted));
  // The same header SafetensorsWriter::Create writes for these specs (no metadata).
  WC_ASSIGN_OR_RETURN(EncodedHeader header, EncodeSafetensorsHeader(SpecsOf(sorted), {}));
  TensorsFileLayout out;
  out.size = header.bytes.size() + header.data_bytes;
  std::map<std::string_view, uint64_t> offset_of;
  uint64_t at = header.bytes.size();
  for (const TensorBytes& t : sorted) {
    offset_of[t.name] = at;
    at += t.bytes.size();
  }
  out.offsets.reserve(tensors.size());
  for (const TensorBytes& t : tensors) out.offsets.push_back(offset_of.at(t.name));
  out.header = std::move(header.bytes);
  return out;
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
                                           const std::filesystem::path& dir,
                                           const CommitLayout& layout,
                                           const std::map<std::string, std::string>& metadata) {
  publish::LocalPublishOptions options;
  options.channel = std::string(channel);
  options.chunk_size = layout.chunk_size;
  options.device_checks = layout.device_checks;
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
