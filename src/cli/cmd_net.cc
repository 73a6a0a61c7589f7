// weightcast net recv   listen for one authenticated point-to-point transfer and measure it
// weightcast net send   connect, send N bytes as chunk frames, measure (throughput, CPU s/GB)
// Both print one JSON line last. The cluster secret comes from --secret-file or the
// WEIGHTCAST_SECRET environment variable, never from the command line.
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include "cli/command.h"
#include "cli/node_flags.h"
#include "net/handshake.h"
#include "net/p2p.h"
#include "net/transport_select.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct NetFlags {
  std::string address;
  std::string secret_file;
  std::string cluster = "default";
  uint64_t node_id = 0;
  std::string timeout = "120s";
  // send only
  std::string bytes = "1GiB";
  std::string chunk_size = "4MiB";
  std::string file;
  std::string upload_limit;
  std::string download_limit;
  std::string tls_cert, tls_key, tls_ca;
  std::string transport = "tcp";
};

// TLS is TCP's: with it, the transport is TCP whatever --transport says.
Result<std::unique_ptr<net::Transport>> MakeTransport(const NetFlags& flags, net::Options options) {
  WC_ASSIGN_OR_RETURN(net::TransportKind kind, ParseTransportFlag(flags.transport));
  net::TransportSelection selection;
  selection.kind = options.tls.enabled ? net::TransportKind::kTcp : kind;
  selection.tcp_io_threads = 1;
  return net::CreateTransport(options, selection);
}

Result<net::Options> MakeOptions(const NetFlags& flags) {
  net::Options options;
  WC_ASSIGN_OR_RETURN(options.secret, net::LoadClusterSecret(flags.secret_file));
  options.self.cluster_id = flags.cluster;
  options.self.node_id = PeerId(flags.node_id != 0 ? flags.node_id : std::random_device{}());
  options.self.role = net::Role::kTool;
  if (!flags.tls_cert.empty() || !flags.tls_key.empty() || !flags.tls_ca.empty()) {
    if (flags.tls_cert.empty() || flags.tls_key.empty() || flags.tls_ca.empty()) {
      return InvalidArgument("TLS needs all of --tls-cert, --tls-key and --tls-ca");
    }
    options.tls = {.enabled = true,
                   .cert_file = flags.tls_cert,
                   .key_file = flags.tls_key,
                   .ca_file = flags.tls_ca};
  }
  if (!flags.upload_limit.empty()) {
    WC_ASSIGN_OR_RETURN(uint64_t rate, ParseSize(flags.upload_limit));
    options.upload_limit =
        std::make_shared<net::TokenBucket>(rate, std::max<uint64_t>(rate / 10, 1 << 20));
  }
  if (!flags.download_limit.empty()) {
    WC_ASSIGN_OR_RETURN(uint64_t rate, ParseSize(flags.download_limit));
    options.download_limit =
        std::make_shared<net::TokenBucket>(rate, std::max<uint64_t>(rate / 10, 1 << 20));
  }
  return options;
}

Result<net::Duration> Timeout(const NetFlags& flags) {
  WC_ASSIGN_OR_RETURN(const std::chrono::nanoseconds parsed, ParseDuration(flags.timeout));
  if (parsed.count() == 0) return InvalidArgument("--timeout must be above 0");
  return std::chrono::duration_cast<net::Duration>(parsed);
}

Status RunRecv(const NetFlags& flags) {
  WC_ASSIGN_OR_RETURN(net::Options options, MakeOptions(flags));
  WC_ASSIGN_OR_RETURN(const net::Duration timeout, Timeout(flags));
  WC_ASSIGN_OR_RETURN(auto transport, MakeTransport(flags, std::move(options)));
  WC_ASSIGN_OR_RETURN(auto listener, transport->Listen(flags.address));
  std::cerr << "listening on " << listener->address() << std::endl;
  WC_ASSIGN_OR_RETURN(net::P2pStats stats, net::P2pReceive(*listener, timeout));
  std::cout << stats.ToJson("recv") << std::endl;
  return Status::Ok();
}

Status RunSend(const NetFlags& flags) {
  WC_ASSIGN_OR_RETURN(net::Options options, MakeOptions(flags));
  // A UCX listener has a port of its own, which `net recv` prints after the TCP one: without it
  // the peer offers no UCX and the transfer would go over TCP, unasked.
  if (flags.transport == "ucx" && !options.tls.enabled &&
      flags.address.find(",ucx=") == std::string::npos) {
    return InvalidArgument("--transport ucx: " + flags.address +
                           " names no UCX port; connect to the address `net recv` printed "
                           "(ip:port,ucx=PORT)");
  }
  net::P2pSendOptions send;
  WC_ASSIGN_OR_RETURN(send.bytes, ParseSize(flags.bytes));
  WC_ASSIGN_OR_RETURN(uint64_t chunk, ParseSize(flags.chunk_size));
  if (chunk == 0 || chunk > (256u << 20)) {
    return InvalidArgument("--chunk-size must be between 1 byte and 256 MiB");
  }
  options.max_frame_bytes = static_cast<uint32_t>(chunk + net::kChunkHeaderSize);
  send.chunk_bytes = static_cast<uint32_t>(chunk);
  send.file = flags.file;
  WC_ASSIGN_OR_RETURN(send.timeout, Timeout(flags));
  WC_ASSIGN_OR_RETURN(auto transport, MakeTransport(flags, std::move(options)));
  WC_ASSIGN_OR_RETURN(net::P2pStats stats, net::P2pSend(*transport, flags.address, send));
  std::cout << stats.ToJson("send") << std::endl;
  return Status::Ok();
}

void AddCommon(CLI::App* cmd, NetFlags& flags) {
  cmd->add_option("--secret-file", flags.secret_file, kSecretFileHelp);
  cmd->add_option("--cluster", flags.cluster, "Cluster id both sides must share");
  cmd->add_option("--node-id", flags.node_id, "This node's id (default: random)");
  cmd->add_option("--timeout", flags.timeout,
                  "Give up after this long (e.g. 120s, 2m; a bare number is seconds)");
  cmd->add_option("--upload-limit", flags.upload_limit, "Upload rate limit, bytes/s (e.g. 100MiB)");
  cmd->add_option("--download-limit", flags.download_limit, "Download rate limit, bytes/s");
  cmd->add_option("--tls-cert", flags.tls_cert, "Enable TLS: this node's PEM certificate");
  cmd->add_option("--tls-key", flags.tls_key, "TLS: PEM private key of --tls-cert");
  cmd->add_option("--tls-ca", flags.tls_ca, "TLS: PEM certificate of the cluster CA");
  AddTransportFlag(cmd, flags.transport);
}

void SetupNet(CLI::App& app) {
  CLI::App* net = app.add_subcommand("net", "Point-to-point transfers over the wire protocol");
  net->require_subcommand(1);
  auto recv_flags = std::make_shared<NetFlags>();
  CLI::App* recv = net->add_subcommand("recv", "Receive one transfer and print its figures");
  recv->add_option("--listen", recv_flags->address, "ip:port to listen on")->required();
  AddCommon(recv, *recv_flags);
  recv->callback([recv_flags] { Finish("net recv", RunRecv(*recv_flags)); });

  auto send_flags = std::make_shared<NetFlags>();
  CLI::App* send = net->add_subcommand("send", "Send N bytes as chunk frames and print figures");
  send->add_option("--connect", send_flags->address, "ip:port of the receiver")->required();
  send->add_option("--bytes", send_flags->bytes, "How many bytes to send (e.g. 2GiB)");
  send->add_option("--chunk-size", send_flags->chunk_size, "Chunk payload size (e.g. 4MiB)");
  send->add_option("--file", send_flags->file,
                   "Send this file's bytes (memory-mapped, cyclically) instead of a buffer");
  AddCommon(send, *send_flags);
  send->callback([send_flags] { Finish("net send", RunSend(*send_flags)); });
}

const CommandRegistration kRegistered{"net", 80, &SetupNet};

}  // namespace
}  // namespace weightcast::cli
