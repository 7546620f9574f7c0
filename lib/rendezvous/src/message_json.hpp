#pragma once

#include <nlohmann/json_fwd.hpp>

#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// The node of a `join` message that is part of a JSON value already parsed (the etcd state keeps
// its members as join messages), without encoding it to text and parsing it again; throws
// ProtocolError as decode_client_message does.
NodeDescriptor decode_join_node(const nlohmann::json& message);

}  // namespace trainrun::rendezvous
