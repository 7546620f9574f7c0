#pragma once

#include "frame.hpp"
#include "fuzz_util.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::fuzz {

// Decoding either succeeds with a message that survives encode → decode unchanged, or throws
// ProtocolError; nothing else may escape.
template <class Decode>
void check_message(std::string_view body, Decode decode) {
  using rendezvous::ProtocolError;
  try {
    auto message = decode(body);
    std::string once = rendezvous::encode(message);
    auto again = decode(once);
    FUZZ_CHECK(again.index() == message.index());
    FUZZ_CHECK(rendezvous::encode(again) == once);
    FUZZ_CHECK(!rendezvous::type_name(message).empty());
  } catch (const ProtocolError&) {
  }
}

}  // namespace trainrun::fuzz
