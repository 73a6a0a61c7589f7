#include "net/p2p.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "util/file.h"

namespace weightcast::net {
namespace {

struct Usage {
  double user = 0, system = 0;
};

Usage ProcessUsage() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return {seconds(ru.ru_utime), seconds(ru.ru_stime)};
}

std::vector<uint8_t> U64Bytes(uint64_t v) {
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
  return out;
}

Result<uint64_t> ParseU64(const Frame& frame) {
  if (frame.type != FrameType::kControl || frame.body.size() != 8) {
    return Corrupt("expected an 8-byte control frame, got a " +
                   std::string(FrameTypeName(frame.type)) + " frame of " +
                   std::to_string(frame.body.size()) + " bytes");
  }
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | frame.body[i];
  return v;
}

using WallClock = std::chrono::steady_clock;

}  // namespace

std::string P2pStats::ToJson(std::string_view role) const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"role\":\"%.*s\",\"bytes\":%llu,\"chunks\":%llu,\"seconds\":%.6f,"
                "\"gbit_per_s\":%.4f,\"cpu_user_s\":%.4f,\"cpu_system_s\":%.4f,"
                "\"cpu_s_per_gb\":%.4f,\"transport\":\"%.16s\"}",
                static_cast<int>(role.size()), role.data(), static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(chunks), seconds, gbit_per_s(), cpu_user,
                cpu_system, bytes > 0 ? (cpu_user + cpu_system) / (bytes / 1e9) : 0.0,
                transport.c_str());
  return buf;
}

Result<P2pStats> P2pSend(Transport& transport, std::string_view address,
                         const P2pSendOptions& options) {
  if (options.chunk_bytes == 0) return InvalidArgument("chunk size must be positive");
  std::shared_ptr<const void> owner;
  std::span<const uint8_t> source;
  if (!options.file.empty()) {
    WC_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(options.file));
    if (mapped.size() < options.chunk_bytes) {
      return InvalidArgument(options.file.string() + " is smaller than one chunk");
    }
    auto shared = std::make_shared<MappedFile>(std::move(mapped));
    source = shared->bytes();
    owner = shared;
  } else {
    auto buffer = std::make_shared<std::vector<uint8_t>>(options.chunk_bytes);
    for (size_t i = 0; i < buffer->size(); ++i) (*buffer)[i] = static_cast<uint8_t>(i * 131);
    source = *buffer;
    owner = buffer;
  }
  WC_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, transport.Connect(address));
  const auto deadline = WallClock::now() + options.timeout;
  auto left = [&] { return std::chrono::duration_cast<Duration>(deadline - WallClock::now()); };

  const Usage u0 = ProcessUsage();
  const auto t0 = WallClock::now();
  WC_RETURN_IF_ERROR(conn->SendControl(U64Bytes(options.bytes), left()));
  P2pStats stats;
  stats.transport = conn->peer().transport;
  uint64_t offset_in_source = 0;
  while (stats.bytes < options.bytes) {
    uint64_t n = std::min<uint64_t>(options.chunk_bytes, options.bytes - stats.bytes);
    if (offset_in_source + n > source.size()) offset_in_source = 0;
    WC_RETURN_IF_ERROR(conn->SendChunk({.version = 1,
                                        .channel = 0,
                                        .chunk_index = static_cast<uint32_t>(stats.chunks),
                                        .payload_length = 0,
                                        .encoding = 0},
                                       source.subspan(offset_in_source, n), owner, left()));
    offset_in_source += n;
    stats.bytes += n;
    ++stats.chunks;
  }
  WC_ASSIGN_OR_RETURN(Frame ack, conn->Receive(left()));
  WC_ASSIGN_OR_RETURN(uint64_t acknowledged, ParseU64(ack));
  stats.seconds = std::chrono::duration<double>(WallClock::now() - t0).count();
  const Usage u1 = ProcessUsage();
  stats.cpu_user = u1.user - u0.user;
  stats.cpu_system = u1.system - u0.system;
  if (acknowledged != stats.bytes) {
    return Corrupt("receiver acknowledged " + std::to_string(acknowledged) + " of " +
                   std::to_string(stats.bytes) + " bytes");
  }
  return stats;
}

Result<P2pStats> P2pReceive(Listener& listener, Duration timeout) {
  const auto deadline = WallClock::now() + timeout;
  auto left = [&] { return std::chrono::duration_cast<Duration>(deadline - WallClock::now()); };
  WC_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, listener.Accept(left()));
  WC_ASSIGN_OR_RETURN(Frame first, conn->Receive(left()));
  WC_ASSIGN_OR_RETURN(uint64_t expected, ParseU64(first));
  const Usage u0 = ProcessUsage();
  const auto t0 = WallClock::now();
  P2pStats stats;
  stats.transport = conn->peer().transport;
  while (stats.bytes < expected) {
    WC_ASSIGN_OR_RETURN(Frame frame, conn->Receive(left()));
    if (frame.type != FrameType::kChunk) {
      return Corrupt("expected a chunk frame, got " + std::string(FrameTypeName(frame.type)));
    }
    WC_ASSIGN_OR_RETURN(ChunkHeader header, frame.chunk_header());
    if (header.chunk_index != static_cast<uint32_t>(stats.chunks)) {
      return Corrupt("chunk " + std::to_string(header.chunk_index) + " arrived where " +
                     std::to_string(stats.chunks) + " was due");
    }
    stats.bytes += header.payload_length;
    ++stats.chunks;
  }
  if (stats.bytes != expected) {
    return Corrupt("received " + std::to_string(stats.bytes) + " bytes, announced " +
                   std::to_string(expected));
  }
  stats.seconds = std::chrono::duration<double>(WallClock::now() - t0).count();
  const Usage u1 = ProcessUsage();
  stats.cpu_user = u1.user - u0.user;
  stats.cpu_system = u1.system - u0.system;
  WC_RETURN_IF_ERROR(conn->SendControl(U64Bytes(stats.bytes), left()));
  WC_RETURN_IF_ERROR(conn->Flush(left()));
  return stats;
}

}  // namespace weightcast::net
