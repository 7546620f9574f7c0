#include "trainrun/rendezvous/endpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <optional>
#include <stdexcept>

#include "trainrun/base/numbers.hpp"

namespace trainrun::rendezvous {
namespace {

int parse_port(const std::string& text, const std::string& whole) {
  // Digits only: no sign, so "-0" is not a port either.
  const bool digits = text.size() <= 5 && std::all_of(text.begin(), text.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
  const std::optional<long long> port = digits ? trainrun::parse_integer(text) : std::nullopt;
  if (!port || *port > 65535) {
    throw std::invalid_argument(
        fmt::format("\"{}\": port \"{}\" is not a number in 0..65535", whole, text));
  }
  return static_cast<int>(*port);
}

}  // namespace

std::string to_string(const HostPort& endpoint) {
  return fmt::format("{}:{}", endpoint.host, endpoint.port);
}

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

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

}  // namespace trainrun::rendezvous
