#include "trainrun/launch/store/store_admission.hpp"

#include <fmt/format.h>

#include <optional>

namespace trainrun::launch {

namespace asio = boost::asio;

namespace {

// The refusal line names at most this many of the round's nodes' addresses.
constexpr std::size_t kNamedAddresses = 8;

std::optional<asio::ip::address> parsed(const std::string& text) {
  boost::system::error_code ec;
  const auto a = asio::ip::make_address(text, ec);
  if (ec) return std::nullopt;
  return comparable_address(a);
}

void add_all(std::set<asio::ip::address>& to, const std::vector<std::string>& addresses) {
  for (const auto& text : addresses)
    if (const auto a = parsed(text)) to.insert(*a);
}

}  // namespace

asio::ip::address comparable_address(asio::ip::address a) {
  if (a.is_v4()) return a;
  asio::ip::address_v6 v6 = a.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6);
  v6.scope_id(0);
  return v6;
}

bool store_admits(const asio::ip::address& peer, const std::set<asio::ip::address>& admitted) {
  const asio::ip::address a = comparable_address(peer);
  return a.is_loopback() || admitted.count(a) > 0;
}

StoreAdmission StoreAdmission::this_machine(const std::vector<std::string>& own) {
  StoreAdmission out;
  add_all(out.addresses_, own);
  out.admitted_ = "the job runs on this machine alone";
  return out;
}

StoreAdmission StoreAdmission::round(const std::vector<std::string>& node_addresses,
                                     const std::vector<std::string>& own) {
  StoreAdmission out;
  if (node_addresses.empty()) {
    out.everyone_ = true;
    out.why_ = "the rendezvous named no node addresses (its host runs an older trainrun)";
    return out;
  }
  std::string named;
  for (std::size_t i = 0; i < node_addresses.size(); ++i) {
    const std::string& text = node_addresses[i];
    if (!parsed(text)) {
      out.everyone_ = true;
      out.why_ = fmt::format(
          "a node of the round is known only by the host name \"{}\", which the agent does not "
          "resolve (give that node --local-addr with an IP address)",
          text);
      return out;
    }
    if (i < kNamedAddresses) named += (named.empty() ? "" : ", ") + text;
  }
  if (node_addresses.size() > kNamedAddresses)
    named += fmt::format(" and {} more", node_addresses.size() - kNamedAddresses);
  add_all(out.addresses_, node_addresses);
  add_all(out.addresses_, own);
  out.admitted_ = "the round's nodes: " + named;
  return out;
}

}  // namespace trainrun::launch
