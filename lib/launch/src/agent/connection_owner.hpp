#pragma once

#include <sys/types.h>

#include <boost/asio/ip/tcp.hpp>
#include <optional>
#include <string_view>

#include "trainrun/launch/rollcall/roll_call.hpp"

namespace trainrun::launch {

// Which worker of this node made a TCP connection to the agent. A c10d store client sends no rank,
// so the kernel is asked for the connection's other end when that end is on this machine, by
// inode — through sock_diag, one exact lookup per connection (where a kernel has none, its tables
// /proc/net/tcp and tcp6, read whole) — and the worker holding that inode among its descriptors is
// the one. It names no process of another node, nor one the agent did not start.

// The inode of the socket whose own address is `peer` and whose other end is `local`, in one of
// the kernel's tables (the text of /proc/net/tcp or /proc/net/tcp6); IPv4-mapped IPv6 addresses
// are taken as IPv4. Pure.
std::optional<unsigned long> client_socket_inode(std::string_view table,
                                                 const boost::asio::ip::tcp::endpoint& peer,
                                                 const boost::asio::ip::tcp::endpoint& local);

// The rank of the worker of `workers` that holds the client end of the connection from `peer` to
// `local`; none when no worker of this node does (another node's, a stranger, one gone).
std::optional<int> connection_rank(const boost::asio::ip::tcp::endpoint& peer,
                                   const boost::asio::ip::tcp::endpoint& local,
                                   const NodeWorkers& workers);

}  // namespace trainrun::launch
