#include "origin/listing.h"

#include <charconv>
#include <set>

namespace weightcast::origin {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The URL's path, without query or fragment.
std::string_view PathPart(std::string_view url) {
  const size_t scheme = url.find("://");
  std::string_view rest = url.substr(scheme == std::string_view::npos ? 0 : scheme + 3);
  rest = rest.substr(0, rest.find_first_of("?#"));
  const size_t slash = rest.find('/');
  return slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
}

std::string LastSegment(std::string_view url) {
  const std::string_view path = PathPart(url);
  return std::string(path.substr(path.rfind('/') + 1));
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

}  // namespace

std::string RedactUrl(std::string_view url) {
  std::string out(url.substr(0, url.find_first_of("?#")));
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const size_t host = scheme + 3;
    const size_t path = out.find('/', host);
    const size_t at = out.rfind('@', path == std::string::npos ? out.size() : path);
    if (at != std::string::npos && at >= host) out.erase(host, at + 1 - host);
  }
  if (out.size() < url.size() && url[out.size()] != '#' &&
      url.find('?') != std::string_view::npos) {
    out += "?...";
  }
  return out;
}

bool IsHttpUrl(std::string_view text) {
  return text.starts_with("http://") || text.starts_with("https://");
}

Status CheckFileName(std::string_view name) {
  if (name.empty() || name.size() > 4096) {
    return InvalidArgument("file name of " + std::to_string(name.size()) +
                           " bytes (1 to 4096 allowed)");
  }
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = std::min(name.find('/', start), name.size());
    const std::string_view segment = name.substr(start, end - start);
    if (segment.empty() || segment == "." || segment == "..") {
      return InvalidArgument("file name \"" + std::string(name) +
                             "\" is not a relative path of named segments");
    }
    for (char c : segment) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-' || c == '+';
      if (!ok) {
        return InvalidArgument("file name \"" + RedactUrl(name) +
                               "\" has a character outside [A-Za-z0-9._+-/]");
      }
    }
    start = end + 1;
  }
  return Status::Ok();
}

std::string SiblingUrl(std::string_view url, std::string_view name) {
  const std::string_view base = url.substr(0, url.find_first_of("?#"));
  return std::string(base.substr(0, base.rfind('/') + 1)) + std::string(name);
}

Result<OriginSpec> ParseOriginUrl(std::string_view url) {
  if (!IsHttpUrl(url)) {
    return InvalidArgument("origin URL " + RedactUrl(url) + ": only http:// and https:// are read");
  }
  const std::string_view path = PathPart(url);
  if (path.empty()) {
    return InvalidArgument("origin URL " + RedactUrl(url) +
                           " names no path: give a .safetensors file, a "
                           ".safetensors.index.json, or a directory ending in /");
  }
  OriginSpec spec;
  if (EndsWith(path, "/")) {
    spec.index_name = std::string(kDefaultIndexName);
    spec.index_url = SiblingUrl(url, kDefaultIndexName);
    return spec;
  }
  const std::string name = LastSegment(url);
  WC_RETURN_IF_ERROR(CheckFileName(name).WithContext("origin URL " + RedactUrl(url)));
  if (EndsWith(name, ".safetensors.index.json")) {
    spec.index_name = name;
    spec.index_url = std::string(url);
    return spec;
  }
  if (EndsWith(name, ".safetensors")) {
    spec.files.push_back({name, std::string(url)});
    return spec;
  }
  return InvalidArgument("origin URL " + RedactUrl(url) +
                         " names neither a .safetensors file, a .safetensors.index.json nor a "
                         "directory ending in /; a list of URLs is given as a local file");
}

Result<std::vector<OriginFile>> ParseUrlList(std::string_view text, std::string_view label) {
  if (text.size() > kMaxListBytes) {
    return InvalidArgument(std::string(label) + ": larger than " + std::to_string(kMaxListBytes) +
                           " bytes");
  }
  std::vector<OriginFile> files;
  std::set<std::string, std::less<>> names;
  size_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    line = Trim(line);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = std::string(label) + ":" + std::to_string(line_number);
    const size_t space = line.find_first_of(" \t");
    OriginFile file;
    if (space == std::string_view::npos) {
      file.url = std::string(line);
      file.name = LastSegment(line);
    } else {
      file.name = std::string(line.substr(0, space));
      file.url = std::string(Trim(line.substr(space)));
      if (file.url.find_first_of(" \t") != std::string::npos) {
        return InvalidArgument(where + ": expected \"NAME URL\" or \"URL\"");
      }
    }
    if (!IsHttpUrl(file.url)) {
      return InvalidArgument(where + ": " + RedactUrl(file.url) + " is not an http(s) URL");
    }
    WC_RETURN_IF_ERROR(CheckFileName(file.name).WithContext(where));
    if (!names.insert(file.name).second) {
      return InvalidArgument(where + ": \"" + file.name + "\" is listed twice");
    }
    files.push_back(std::move(file));
  }
  if (files.empty()) return InvalidArgument(std::string(label) + ": lists no file");
  return files;
}

std::string EncodeOriginObjects(const std::vector<OriginObject>& objects) {
  std::string out;
  for (const OriginObject& o : objects) {
    out += o.name + "\t" + std::to_string(o.info.size) + "\t" + o.info.etag + "\t" +
           o.info.last_modified + "\t" + o.url + "\n";
  }
  return out;
}

Result<std::vector<OriginObject>> ParseOriginObjects(std::string_view text) {
  std::vector<OriginObject> out;
  size_t start = 0;
  size_t line = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view row = text.substr(start, end - start);
    start = end + 1;
    ++line;
    std::vector<std::string_view> fields;
    size_t from = 0;
    while (fields.size() < 5) {
      const size_t tab = row.find('\t', from);
      if (tab == std::string_view::npos || fields.size() == 4) {
        fields.push_back(row.substr(from));
        break;
      }
      fields.push_back(row.substr(from, tab - from));
      from = tab + 1;
    }
    const std::string where = "origin objects, line " + std::to_string(line);
    if (fields.size() != 5) return InvalidArgument(where + ": expected 5 tab-separated fields");
    OriginObject o;
    o.name = std::string(fields[0]);
    WC_RETURN_IF_ERROR(CheckFileName(o.name).WithContext(where));
    uint64_t size = 0;
    const auto [ptr, ec] =
        std::from_chars(fields[1].data(), fields[1].data() + fields[1].size(), size);
    if (ec != std::errc() || ptr != fields[1].data() + fields[1].size() || fields[1].empty()) {
      return InvalidArgument(where + ": the size is not a number");
    }
    o.info.size = size;
    o.info.etag = std::string(fields[2]);
    o.info.last_modified = std::string(fields[3]);
    o.url = std::string(fields[4]);
    if (!IsHttpUrl(o.url)) return InvalidArgument(where + ": the URL is not http(s)");
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace weightcast::origin
