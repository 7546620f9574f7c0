#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

namespace trainrun::launch {

// Opens `acceptor` listening on `port` (0: an ephemeral one) of every address: one IPv6 socket
// that takes IPv4 too where the kernel allows it, else IPv4 alone; the longest listen queue the
// system allows. `reuse_address` sets SO_REUSEADDR first. The error of the last family tried
// (the acceptor closed), or none.
boost::system::error_code listen_on_every_address(boost::asio::ip::tcp::acceptor& acceptor,
                                                  unsigned short port, bool reuse_address);

}  // namespace trainrun::launch
