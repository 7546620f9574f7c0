#include "trainrun/launch/core/listen.hpp"
#include "trainrun/base/system.hpp"

#include <boost/asio/ip/v6_only.hpp>

namespace trainrun::launch {

using boost::asio::ip::tcp;

boost::system::error_code listen_on_every_address(tcp::acceptor& acceptor, unsigned short port,
                                                  bool reuse_address) {
  boost::system::error_code ec;
  for (const tcp protocol : {tcp::v6(), tcp::v4()}) {
    ec.clear();
    boost::system::error_code ignored;
    acceptor.close(ignored);
    acceptor.open(protocol, ec);
    if (!ec && protocol == tcp::v6()) acceptor.set_option(boost::asio::ip::v6_only(false), ec);
    if (!ec && reuse_address) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(tcp::endpoint(protocol, port), ec);
    if (!ec) acceptor.listen(trainrun::kListenBacklog, ec);
    if (!ec) return ec;
  }
  boost::system::error_code ignored;
  acceptor.close(ignored);
  return ec;
}

}  // namespace trainrun::launch
