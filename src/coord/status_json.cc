#include "coord/status_json.h"

#include <google/protobuf/util/json_util.h>

namespace weightcast::coord {

Result<std::string> FleetStatusJson(const wire::FleetStatus& status) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  auto st = google::protobuf::util::MessageToJsonString(status, &out, options);
  if (!st.ok()) return Internal("status as JSON: " + std::string(st.message()));
  return out;
}

}  // namespace weightcast::coord
