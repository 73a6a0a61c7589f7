// weightcast store list|verify|rollback|gc|import: look after a versioned store on disk
// (docs/store_layout.md) without running an agent.
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/command.h"
#include "format/safetensors.h"
#include "manifest/builder.h"
#include "store/store.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct Flags {
  std::string root;
  std::string channel;
  std::string version;  // positional, optional
  uint32_t keep = 2;
  // import
  std::string source;
  std::string chunk_size = "auto";
  std::string hash = "sha256";
  bool link = false;
};

Result<Version> ParseVersion(std::string_view text) {
  uint64_t v = 0;
  if (text.empty() || text.size() > 19) {
    return InvalidArgument("version '" + std::string(text) + "' is not a number");
  }
  for (char c : text) {
    if (c < '0' || c > '9') {
      return InvalidArgument("version '" + std::string(text) + "' is not a number");
    }
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v == 0) return InvalidArgument("versions start at 1");
  return Version(v);
}

Result<std::optional<Version>> OptionalVersion(const std::string& text) {
  if (text.empty()) return std::optional<Version>();
  WC_ASSIGN_OR_RETURN(Version v, ParseVersion(text));
  return std::optional<Version>(v);
}

Status NeedChannel(const Flags& flags) {
  if (flags.channel.empty()) return InvalidArgument("--channel is required");
  return Status::Ok();
}

Result<std::vector<std::string>> ChannelsToShow(const Store& store, const Flags& flags) {
  if (!flags.channel.empty()) return std::vector<std::string>{flags.channel};
  return store.Channels();
}

Status RunList(const Flags& flags) {
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(flags.root, {.read_only = true}));
  WC_ASSIGN_OR_RETURN(std::vector<std::string> channels, ChannelsToShow(store, flags));
  if (channels.empty()) std::cout << "no channels in " << flags.root << "\n";
  for (const std::string& channel : channels) {
    WC_ASSIGN_OR_RETURN(std::vector<VersionInfo> versions, store.List(channel));
    WC_ASSIGN_OR_RETURN(std::vector<Version> staging, store.ListStaging(channel));
    std::cout << "channel " << channel << "\n";
    for (const VersionInfo& info : versions) {
      std::cout << (info.current ? "  * " : "    ") << info.version.value();
      if (info.has_manifest) {
        std::cout << "  " << FormatBytes(info.total_size) << "  " << info.chunk_count
                  << " chunks  root " << ToHex(info.root).substr(0, 16);
        if (info.partial) std::cout << "  partial (only the selected tensors' chunks)";
      } else {
        std::cout << "  (manifest missing or unreadable: run store verify)";
      }
      std::cout << "\n";
    }
    if (versions.empty()) std::cout << "    no committed versions\n";
    for (Version v : staging) std::cout << "    " << v.value() << "  (staging)\n";
  }
  return Status::Ok();
}

Status RunVerify(const Flags& flags) {
  WC_RETURN_IF_ERROR(NeedChannel(flags));
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(flags.root, {.read_only = true}));
  std::vector<Version> targets;
  if (flags.version == "all") {
    WC_ASSIGN_OR_RETURN(std::vector<VersionInfo> versions, store.List(flags.channel));
    for (const VersionInfo& info : versions) targets.push_back(info.version);
  } else if (flags.version.empty()) {
    WC_ASSIGN_OR_RETURN(Version current, store.Current(flags.channel));
    targets.push_back(current);
  } else {
    WC_ASSIGN_OR_RETURN(Version v, ParseVersion(flags.version));
    targets.push_back(v);
  }
  std::set<Version> partial;
  if (Result<std::vector<VersionInfo>> infos = store.List(flags.channel); infos.ok()) {
    for (const VersionInfo& info : *infos) {
      if (info.partial) partial.insert(info.version);
    }
  }
  Status first_error;
  for (Version v : targets) {
    Status st = store.Verify(flags.channel, v);
    if (st.ok()) {
      std::cout << flags.channel << "/" << v.value() << ": ok"
                << (partial.count(v) != 0 ? " (partial: the selected tensors' chunks)" : "")
                << "\n";
    } else {
      std::cout << flags.channel << "/" << v.value() << ": " << st.ToString() << "\n";
      if (first_error.ok()) first_error = st;
    }
  }
  return first_error;
}

Status RunRollback(const Flags& flags) {
  WC_RETURN_IF_ERROR(NeedChannel(flags));
  WC_ASSIGN_OR_RETURN(std::optional<Version> to, OptionalVersion(flags.version));
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(flags.root));
  auto before = store.Current(flags.channel);
  WC_ASSIGN_OR_RETURN(Version now, store.Rollback(flags.channel, to));
  std::cout << flags.channel << ": current ";
  if (before.ok()) std::cout << before->value() << " -> ";
  std::cout << now.value() << "\n";
  return Status::Ok();
}

Status RunGc(const Flags& flags) {
  if (flags.keep == 0) return InvalidArgument("--keep must be at least 1");
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(flags.root, {.keep_versions = flags.keep}));
  WC_ASSIGN_OR_RETURN(std::vector<std::string> channels, ChannelsToShow(store, flags));
  for (const std::string& channel : channels) {
    WC_ASSIGN_OR_RETURN(std::vector<Version> removed, store.CollectGarbage(channel));
    std::cout << channel << ": removed " << removed.size() << " version(s)";
    for (size_t i = 0; i < removed.size(); ++i) {
      std::cout << (i == 0 ? ": " : ", ") << removed[i].value();
    }
    std::cout << "\n";
  }
  return Status::Ok();
}

Status RunImport(const Flags& flags) {
  WC_RETURN_IF_ERROR(NeedChannel(flags));
  if (flags.source.empty()) return InvalidArgument("give the checkpoint directory to import");
  BuildOptions options;
  WC_ASSIGN_OR_RETURN(options.chunk_size, ParseChunkSize(flags.chunk_size));
  WC_ASSIGN_OR_RETURN(options.algorithm, ParseHashAlgorithm(flags.hash));
  WC_ASSIGN_OR_RETURN(std::optional<Version> requested, OptionalVersion(flags.version));
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(flags.root));
  WC_ASSIGN_OR_RETURN(Version next, store.NextVersion(flags.channel));
  Version version = requested.value_or(next);
  WC_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(flags.source));
  // As a publish cuts it, so that the next version can be a delta of this one.
  std::optional<Manifest> held;
  if (Result<Version> current = store.Current(flags.channel); current.ok()) {
    WC_ASSIGN_OR_RETURN(held, store.GetManifest(flags.channel, *current));
  }
  options.chunk_size =
      ResolveChunkSize(options.chunk_size, checkpoint.total_bytes(), held ? &*held : nullptr);
  WC_ASSIGN_OR_RETURN(Manifest manifest,
                      BuildManifest(checkpoint, flags.channel, version, options));
  WC_RETURN_IF_ERROR(store.ImportDirectory(flags.channel, manifest, checkpoint.root,
                                           flags.link ? ImportMode::kHardlink : ImportMode::kCopy));
  std::cout << "committed " << flags.channel << "/" << version.value() << "  "
            << FormatBytes(manifest.total_size()) << "  " << manifest.chunk_count()
            << " chunks  root " << ToHex(manifest.root) << "\n"
            << "current -> " << store.VersionPath(flags.channel, version).string() << "\n";
  return Status::Ok();
}

void SetupStore(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "store", "Look after a versioned store: list, verify, roll back, collect, import");
  cmd->require_subcommand(1);
  auto flags = std::make_shared<Flags>();
  auto common = [&](CLI::App* sub, bool channel_required) {
    sub->add_option("--root", flags->root, "Store root directory")->required();
    auto* opt = sub->add_option("--channel", flags->channel, "Channel name");
    if (channel_required) opt->required();
  };

  CLI::App* list = cmd->add_subcommand("list", "List committed and staging versions");
  common(list, false);
  list->callback([flags] { Finish("store list", RunList(*flags)); });

  CLI::App* verify =
      cmd->add_subcommand("verify", "Re-hash a committed version against its manifest");
  common(verify, true);
  verify->add_option("version", flags->version, "Version number, or 'all' (default: current)");
  verify->callback([flags] { Finish("store verify", RunVerify(*flags)); });

  CLI::App* rollback = cmd->add_subcommand(
      "rollback", "Switch current to a kept version (default: the one below current)");
  common(rollback, true);
  rollback->add_option("version", flags->version, "Version to make current");
  rollback->callback([flags] { Finish("store rollback", RunRollback(*flags)); });

  CLI::App* gc = cmd->add_subcommand("gc", "Remove committed versions beyond the kept ones");
  common(gc, false);
  gc->add_option("--keep", flags->keep, "Newest versions to keep (the current one always stays)")
      ->capture_default_str();
  gc->callback([flags] { Finish("store gc", RunGc(*flags)); });

  CLI::App* import = cmd->add_subcommand(
      "import", "Commit a checkpoint directory as the next version of a channel");
  common(import, true);
  import->add_option("dir", flags->source, "Checkpoint directory (or one .safetensors file)")
      ->required();
  import->add_option("--version", flags->version, "Version number (default: the next one)");
  import
      ->add_option("--chunk-size", flags->chunk_size,
                   "Chunk size: auto (the default): the channel's current one, else about 8,192 "
                   "chunks, 128KiB .. 64MiB, by the size (docs/publish.md); or a size, 64KiB .. "
                   "256MiB")
      ->capture_default_str();
  import->add_option("--hash", flags->hash, "Chunk hash: sha256 or xxh3-128")
      ->capture_default_str();
  import->add_flag("--link", flags->link,
                   "Hard-link the files instead of copying (the source must never be modified)");
  import->callback([flags] { Finish("store import", RunImport(*flags));
});
}  // namespace

const CommandRegistration kRegistered{"store", 40, &SetupStore};

}  // namespace weightcast::cli
}  // namespace weightcast::cli
