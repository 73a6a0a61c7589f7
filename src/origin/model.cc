#include "origin/model.h"

#include <algorithm>
#include <map>
#include <utility>

#include "util/file.h"

namespace weightcast::origin {
namespace {

// The first bytes read of every file: all of a typical safetensors header (a few KiB; about
// 100 KiB for a model with a thousand tensors in a shard) in the same request that learns its
// size. A longer header costs one more request.
constexpr uint64_t kProbeBytes = 256ull << 10;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

ByteSink AppendTo(std::vector<uint8_t>& out) {
  return [&out](std::span<const uint8_t> bytes) {
    out.insert(out.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  };
}

uint64_t HeaderEnd(std::span<const uint8_t> prefix) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  return n > kMaxSafetensorsHeaderBytes ? 0 : 8 + n;
}

}  // namespace

Result<OriginSpec> ResolveOriginSpec(std::string_view from) {
  if (from.find("://") != std::string_view::npos) return ParseOriginUrl(from);
  const std::string path(from);
  WC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxListBytes));
  OriginSpec spec;
  WC_ASSIGN_OR_RETURN(spec.files, ParseUrlList(text, path));
  return spec;
}

Result<OriginModel> DescribeOriginModel(HttpClient& http, const OriginSpec& spec) {
  std::vector<OriginFile> files = spec.files;
  std::map<std::string, std::string> index_texts;  // name -> text
  std::vector<OriginObject> objects;
  if (!spec.index_url.empty()) {
    std::vector<uint8_t> text;
    WC_ASSIGN_OR_RETURN(ObjectInfo info,
                        http.Probe(spec.index_url, kMaxSafetensorsHeaderBytes, AppendTo(text)));
    if (info.size != text.size()) {
      return InvalidArgument(RedactUrl(spec.index_url) + ": an index of " +
                             std::to_string(info.size) + " bytes is larger than " +
                             std::to_string(kMaxSafetensorsHeaderBytes));
    }
    std::string body(text.begin(), text.end());
    WC_ASSIGN_OR_RETURN(auto weight_map, ParseSafetensorsIndex(body, RedactUrl(spec.index_url)));
    const std::string dir = spec.index_name.substr(0, spec.index_name.rfind('/') + 1);
    for (const std::string& shard : IndexShards(weight_map)) {
      WC_RETURN_IF_ERROR(CheckFileName(shard).WithContext(RedactUrl(spec.index_url)));
      files.push_back({dir + shard, SiblingUrl(spec.index_url, shard)});
    }
    if (files.empty()) return InvalidArgument(RedactUrl(spec.index_url) + ": names no file");
    objects.push_back({spec.index_name, spec.index_url, info});
    index_texts.emplace(spec.index_name, std::move(body));
  }

  std::vector<CheckpointFile> described;
  described.reserve(objects.size() + files.size());
  for (const OriginObject& index : objects) {
    described.push_back({index.name, index.info.size, false, {}});
  }
  for (const OriginFile& file : files) {
    std::vector<uint8_t> prefix;
    const bool safetensors = EndsWith(file.name, ".safetensors");
    const bool index = EndsWith(file.name, ".safetensors.index.json");
    const uint64_t want = index ? kMaxSafetensorsHeaderBytes : safetensors ? kProbeBytes : 0;
    WC_ASSIGN_OR_RETURN(ObjectInfo info, http.Probe(file.url, want, AppendTo(prefix)));
    CheckpointFile described_file{file.name, info.size, safetensors, {}};
    if (safetensors) {
      if (prefix.size() < 8) {
        return Corrupt(RedactUrl(file.url) + ": " + std::to_string(info.size) +
                       " bytes, too short for a safetensors file");
      }
      const uint64_t end = HeaderEnd(prefix);
      if (end > prefix.size() && end <= info.size) {
        WC_RETURN_IF_ERROR(
            http.GetRange(file.url, prefix.size(), end - prefix.size(), info, AppendTo(prefix)));
      }
      WC_ASSIGN_OR_RETURN(described_file.header,
                          ParseSafetensorsHeader(prefix, info.size, RedactUrl(file.url)));
    } else if (index) {
      index_texts.emplace(file.name, std::string(prefix.begin(), prefix.end()));
    }
    described.push_back(std::move(described_file));
    objects.push_back({file.name, file.url, info});
  }

  const IndexReader read_index = [&](const CheckpointFile& f) -> Result<std::string> {
    auto it = index_texts.find(f.relative_path);
    if (it == index_texts.end()) return NotFound(f.relative_path + ": not read");
    return it->second;
  };
  const std::string label =
      spec.index_url.empty() ? std::string("origin") : RedactUrl(SiblingUrl(spec.index_url, ""));
  WC_ASSIGN_OR_RETURN(Checkpoint checkpoint,
                      AssembleCheckpoint(label, std::move(described), read_index));
  std::sort(objects.begin(), objects.end(),
            [](const OriginObject& a, const OriginObject& b) { return a.name < b.name; });
  for (size_t i = 1; i < objects.size(); ++i) {
    if (objects[i].name == objects[i - 1].name) {
      return InvalidArgument("the origin names " + objects[i].name + " twice");
    }
  }
  return OriginModel{std::move(checkpoint), std::move(objects)};
}

OriginReader::OriginReader(std::shared_ptr<HttpClient> http, std::vector<OriginObject> objects)
    : http_(std::move(http)), objects_(std::move(objects)) {
  for (const OriginObject& object : objects_) {
    starts_.push_back(total_);
    total_ += object.info.size;
  }
}

Status OriginReader::Stream(uint64_t offset, uint64_t length, const ByteSink& sink) const {
  if (offset > total_ || length > total_ - offset) {
    return OutOfRange("bytes [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                      ") beyond the model's " + std::to_string(total_));
  }
  auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
  size_t i = static_cast<size_t>(it - starts_.begin()) - 1;
  while (length > 0 && i < objects_.size()) {
    const OriginObject& object = objects_[i];
    const uint64_t within = offset - starts_[i];
    const uint64_t n = std::min(length, object.info.size - within);
    if (n > 0) WC_RETURN_IF_ERROR(http_->GetRange(object.url, within, n, object.info, sink));
    offset += n;
    length -= n;
    ++i;
  }
  return Status::Ok();
}

Status OriginReader::Read(uint64_t offset, std::span<uint8_t> out) const {
  size_t filled = 0;
  return Stream(offset, out.size(), [&](std::span<const uint8_t> bytes) {
    std::copy(bytes.begin(), bytes.end(), out.begin() + static_cast<ptrdiff_t>(filled));
    filled += bytes.size();
    return Status::Ok();
  });
}

}  // namespace weightcast::origin
