#include "trainrun/rendezvous/endpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace trainrun::rendezvous {
namespace {

int parse_port(const std::string& text, const std::string& whole) {
  bool digits = !text.empty() && text.size() <= 5 &&
                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  int port = digits ? std::stoi(text) : -1;
  if (port < 0 || port > 65535) {
    throw std::invalid_argument(
        fmt::format("\"{}\": port \"{}\" is not a number in 0..65535", whole, text));
  }
  return port;
}

}  // namespace

HostPort parse_endpoint(const std::string& text, int default_port) {
  HostPort out;
  out.port = default_port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) {
      throw std::invalid_argument(fmt::format("\"{}\": missing ']' after the IPv6 address", text));
    }
    out.host = text.substr(1, close - 1);
    std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        throw std::invalid_argument(fmt::format("\"{}\": expected ':port' after ']'", text));
      }
      out.port = parse_port(rest.substr(1), text);
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    auto colon = text.find(':');
    out.host = text.substr(0, colon);
    out.port = parse_port(text.substr(colon + 1), text);
  } else {
    out.host = text;  // no port, or a bare IPv6 address
  }
  if (out.host.empty()) throw std::invalid_argument(fmt::format("\"{}\": the host is empty", text));
  return out;
}

}  // namespace trainrun::rendezvous
