#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <optional>
#include <string>

#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// The store protocol a probe speaks. The c10d TCPStore is the commonest program on a port meant
// for the rendezvous (torchrun's own rendezvous endpoint, a job's MASTER_PORT), and it answers a
// hello in ways that look like a flooded trainrun host (torch 1.x resets the connection) or like
// a slow one (torch 2.x holds it): a question in its own protocol tells them apart.
enum class StoreDialect {
  torch1,  // GETNUMKEYS (query 6): the key count, 8 bytes. A trainrun host reads one byte of a
           // frame's length and waits, so the question costs it nothing but a closed connection.
  torch2,  // VALIDATE with torch's magic number, then PING (query 13) with a nonce, echoed.
           // Not a valid frame: asked only of a peer already known not to answer as a host.
};

// On one new connection to `endpoint`, asks the question of `dialect` and calls `done` once, on
// the io_context's thread: with what the peer is ("a torch 2.x c10d TCPStore") when it answered
// as a store within `timeout`, or nullopt (no answer, another answer, no connection). The
// connection is closed before `done` is called. Nothing is left pending once `done` has run.
void probe_torch_store(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& endpoint,
                       StoreDialect dialect, Clock::duration timeout,
                       std::function<void(std::optional<std::string>)> done);

}  // namespace trainrun::rendezvous
