#include "client_stops.hpp"

#include <fmt/format.h>

namespace trainrun::rendezvous {

Stop ClientStops::not_a_host(const std::string& what) const {
  return Stop{
      StopCause::rejected,
      fmt::format("rendezvous endpoint {} answers, but not as a trainrun rendezvous host: {}",
                  endpoint, what),
      Refusal::not_a_host};
}

std::string ClientStops::sent(std::string_view head, bool more) {
  std::string shown;
  for (const char ch : head) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      shown += ch;
    } else {
      shown += fmt::format("\\x{:02x}", c);
    }
  }
  return fmt::format("it sent \"{}\"{}", shown, more ? "..." : "");
}

Stop ClientStops::tampered(const std::string& why, bool admitted) const {
  return Stop{admitted ? StopCause::server_lost : StopCause::rejected,
              fmt::format("the connection to the rendezvous server at {} was tampered with: {}",
                          endpoint, why),
              1, std::nullopt};
}

Stop ClientStops::server_lost(const std::string& why) const {
  return Stop{StopCause::server_lost,
              fmt::format("lost the rendezvous server at {}: {}", endpoint, why), 1, std::nullopt};
}

Stop ClientStops::invalid_message(const std::string& what) const {
  return Stop{
      StopCause::server_lost,
      fmt::format("the rendezvous server at {} sent an invalid message: {}", endpoint, what), 1,
      std::nullopt};
}

Stop ClientStops::silent(Clock::duration heartbeat_timeout) const {
  return server_lost(
      fmt::format("no message for {:.0f} s (heartbeat timeout)", in_seconds(heartbeat_timeout)));
}

Stop ClientStops::refused(const std::string& reason, Refusal kind) const {
  return Stop{StopCause::rejected,
              fmt::format("the rendezvous at {} refused this node: {}", endpoint, reason), kind};
}

Stop ClientStops::refused_server(const std::string& why) const {
  return Stop{StopCause::rejected,
              fmt::format("this node refused the rendezvous at {}: {}", endpoint, why), 1,
              std::nullopt};
}

Stop ClientStops::dropped(const Reject& reject) const {
  return Stop{StopCause::rejected,
              fmt::format("the rendezvous at {} dropped this node: {}", endpoint, reject.reason),
              reject.kind};
}

}  // namespace trainrun::rendezvous
