// What a node's certificate lets it do (docs/security.md). The roles travel in the certificate's
// subjectAltName as URIs, so that any X.509 tool shows them and the CA's signature covers them:
//
//   urn:weightcast:role:agent                 receives, serves and commits versions
//   urn:weightcast:role:publisher:CHANNEL     signs versions of CHANNEL ('*': of every channel)
//   urn:weightcast:role:coordinator           signs commit and abort decisions
//   urn:weightcast:role:operator              signs rollback statements
//
// URIs outside "urn:weightcast:" are left to other tools; an unknown one inside it is an error,
// so a certificate issued by a newer CA is refused rather than half understood.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast::trust {

inline constexpr std::string_view kRoleUriPrefix = "urn:weightcast:role:";
inline constexpr std::string_view kEveryChannel = "*";

struct Roles {
  bool agent = false;
  bool coordinator = false;
  bool operator_role = false;
  std::vector<std::string> publisher_channels{};  // sorted, unique; "*" for every channel

  bool MayPublish(std::string_view channel) const;
  bool empty() const {
    return !agent && !coordinator && !operator_role && publisher_channels.empty();
  }
  // "agent, publisher:main": for logs and refusals.
  std::string ToString() const;
  bool operator==(const Roles&) const = default;
};

// The URIs that carry `roles`, in a stable order.
std::vector<std::string> RoleUris(const Roles& roles);

// Roles from a certificate's URIs. kInvalidArgument for an unknown weightcast role or a channel
// name that is not one (builder.h's ValidateChannelName).
Result<Roles> ParseRoleUris(const std::vector<std::string>& uris);

// Roles as `weightcast ca issue --role` spells them: "agent", "publisher:CHANNEL",
// "publisher:*", "coordinator", "operator", separated by commas. kInvalidArgument naming the bad
// one, and for an empty list.
Result<Roles> ParseRolesFlag(std::string_view text);

}  // namespace weightcast::trust
