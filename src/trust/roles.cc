#include "trust/roles.h"

#include <algorithm>

#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast::trust {
namespace {

constexpr std::string_view kWeightcastUri = "urn:weightcast:";

Status AddRole(std::string_view role, std::string_view where, Roles& roles) {
  if (role == "agent") {
    roles.agent = true;
  } else if (role == "coordinator") {
    roles.coordinator = true;
  } else if (role == "operator") {
    roles.operator_role = true;
  } else if (role.starts_with("publisher:")) {
    std::string_view channel = role.substr(std::string_view("publisher:").size());
    if (channel != kEveryChannel) {
      Status valid = ValidateChannelName(channel);
      if (!valid.ok()) {
        return InvalidArgument(std::string(where) + ": publisher role for '" +
                               std::string(channel) + "': " + valid.message());
      }
    }
    roles.publisher_channels.emplace_back(channel);
  } else {
    return InvalidArgument(std::string(where) + ": unknown role '" + std::string(role) +
                           "' (agent, publisher:CHANNEL, publisher:*, coordinator, operator)");
  }
  return Status::Ok();
}

void Normalize(Roles& roles) {
  std::sort(roles.publisher_channels.begin(), roles.publisher_channels.end());
  roles.publisher_channels.erase(
      std::unique(roles.publisher_channels.begin(), roles.publisher_channels.end()),
      roles.publisher_channels.end());
}

}  // namespace

bool Roles::MayPublish(std::string_view channel) const {
  return std::any_of(publisher_channels.begin(), publisher_channels.end(),
                     [&](const std::string& c) { return c == kEveryChannel || c == channel; });
}

std::string Roles::ToString() const {
  std::vector<std::string> parts;
  if (agent) parts.emplace_back("agent");
  for (const std::string& channel : publisher_channels) parts.push_back("publisher:" + channel);
  if (coordinator) parts.emplace_back("coordinator");
  if (operator_role) parts.emplace_back("operator");
  if (parts.empty()) return "no roles";
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

std::vector<std::string> RoleUris(const Roles& roles) {
  std::vector<std::string> uris;
  const std::string prefix(kRoleUriPrefix);
  if (roles.agent) uris.push_back(prefix + "agent");
  for (const std::string& channel : roles.publisher_channels) {
    uris.push_back(prefix + "publisher:");
    uris.back() += channel;
  }
  if (roles.coordinator) uris.push_back(prefix + "coordinator");
  if (roles.operator_role) uris.push_back(prefix + "operator");
  return uris;
}

Result<Roles> ParseRoleUris(const std::vector<std::string>& uris) {
  Roles roles;
  for (const std::string& uri : uris) {
    if (!std::string_view(uri).starts_with(kWeightcastUri)) continue;
    if (!std::string_view(uri).starts_with(kRoleUriPrefix)) {
      return InvalidArgument("certificate: unknown weightcast URI '" + uri + "'");
    }
    WC_RETURN_IF_ERROR(
        AddRole(std::string_view(uri).substr(kRoleUriPrefix.size()), "certificate", roles));
  }
  Normalize(roles);
  return roles;
}

Result<Roles> ParseRolesFlag(std::string_view text) {
  Roles roles;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    WC_RETURN_IF_ERROR(AddRole(rest.substr(0, comma), "--role", roles));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (roles.empty()) return InvalidArgument("--role: name at least one role");
  Normalize(roles);
  return roles;
}

}  // namespace weightcast::trust
