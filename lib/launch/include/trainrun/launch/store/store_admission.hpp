#pragma once

#include <boost/asio/ip/address.hpp>
#include <set>
#include <string>
#include <vector>

namespace trainrun::launch {

// `a` as the job's store compares addresses: an IPv4-mapped IPv6 address as the IPv4 one, an
// IPv6 address without its scope (a dual-stack socket shows an IPv4 client mapped).
boost::asio::ip::address comparable_address(boost::asio::ip::address a);

// Whether the job's store admits a connection from `peer`: a loopback address always (IPv4's
// 127/8 and IPv6's ::1, mapped or not), else when `admitted` (comparable addresses) holds it. Pure.
bool store_admits(const boost::asio::ip::address& peer,
                  const std::set<boost::asio::ip::address>& admitted);

// Who may connect to the job's store during one attempt (docs/protocol.md, "The workers' c10d
// store"): the job's nodes, by the addresses the rendezvous knows them by, this machine and
// loopback. Default: loopback alone.
class StoreAdmission {
 public:
  StoreAdmission() = default;
  // A job without a round (one node alone): this machine's addresses (`own`) and loopback.
  static StoreAdmission this_machine(const std::vector<std::string>& own);
  // A round's, from its assignment's node addresses: those, this machine's and loopback. Every
  // address where a node is known by a host name alone, or the rendezvous named no address (its
  // host runs an older trainrun): the rule cannot be applied, and open_why() says why.
  static StoreAdmission round(const std::vector<std::string>& node_addresses,
                              const std::vector<std::string>& own);

  bool admits(const boost::asio::ip::address& peer) const {
    return everyone_ || store_admits(peer, addresses_);
  }
  // Why every address is admitted; "" while the rule holds.
  const std::string& open_why() const { return why_; }
  // Who is admitted, for a refusal's line: "the round's nodes: 10.0.0.1, 10.0.0.2".
  const std::string& admitted() const { return admitted_; }

 private:
  std::set<boost::asio::ip::address> addresses_;
  bool everyone_ = false;
  std::string why_;
  std::string admitted_ = "loopback only";
};

}  // namespace trainrun::launch
