#include "store_probe.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cstdint>
#include <memory>

#include "trainrun/rendezvous/crypto.hpp"

namespace trainrun::rendezvous {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// torch/csrc/distributed/c10d: QueryType of TCPStore.cpp (1.x) and TCPStoreBackend.hpp (2.x),
// and validationMagicNumber. Integers go over the wire in the sender's byte order: little-endian
// on every machine torch builds for.
constexpr std::uint8_t kTorch1GetNumKeys = 6;
constexpr std::uint8_t kTorch2Validate = 0;
constexpr std::uint8_t kTorch2Ping = 13;
constexpr std::uint32_t kTorch2Magic = 0x3C85F7CE;

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::uint64_t get_le(const std::string& in) {
  std::uint64_t v = 0;
  for (std::size_t i = in.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

struct Probe : std::enable_shared_from_this<Probe> {
  Probe(asio::io_context& io, StoreDialect dialect,
        std::function<void(std::optional<std::string>)> done)
      : socket(io), timer(io), dialect(dialect), done(std::move(done)) {
    if (dialect == StoreDialect::torch1) {
      question.push_back(static_cast<char>(kTorch1GetNumKeys));
      answer.resize(8);
    } else {
      const std::string nonce_text = random_nonce();
      nonce = static_cast<std::uint32_t>(std::hash<std::string>{}(nonce_text));
      question.push_back(static_cast<char>(kTorch2Validate));
      put_u32(question, kTorch2Magic);
      question.push_back(static_cast<char>(kTorch2Ping));
      put_u32(question, nonce);
      answer.resize(4);
    }
  }

  void start(const tcp::endpoint& endpoint, Clock::duration timeout) {
    auto self = shared_from_this();
    timer.expires_after(timeout);
    timer.async_wait([self](error_code ec) {
      if (!ec) self->finish(false);
    });
    socket.async_connect(endpoint, [self](error_code ec) {
      if (ec) return self->finish(false);
      asio::async_write(
          self->socket, asio::buffer(self->question), [self](error_code e, std::size_t) {
            if (e) return self->finish(false);
            asio::async_read(
                self->socket, asio::buffer(self->answer),
                [self](error_code r, std::size_t) { self->finish(!r && self->answered()); });
          });
    });
  }

  // A key count is small; a ping's answer is its nonce.
  bool answered() const {
    const std::uint64_t value = get_le(answer);
    return dialect == StoreDialect::torch1 ? value < (std::uint64_t{1} << 40) : value == nonce;
  }

  void finish(bool is_store) {
    if (!done) return;
    error_code ignored;
    timer.cancel();
    socket.close(ignored);
    auto call = std::move(done);
    done = nullptr;
    if (!is_store) return call(std::nullopt);
    call(dialect == StoreDialect::torch1 ? "it is a torch 1.x c10d TCPStore (it answered a store's "
                                           "key count)"
                                         : "it is a torch 2.x c10d TCPStore (it answered a store's "
                                           "ping)");
  }

  tcp::socket socket;
  asio::steady_timer timer;
  StoreDialect dialect;
  std::function<void(std::optional<std::string>)> done;
  std::string question;
  std::string answer;
  std::uint32_t nonce = 0;
};

}  // namespace

void probe_torch_store(asio::io_context& io, const tcp::endpoint& endpoint, StoreDialect dialect,
                       Clock::duration timeout,
                       std::function<void(std::optional<std::string>)> done) {
  std::make_shared<Probe>(io, dialect, std::move(done))->start(endpoint, timeout);
}

}  // namespace trainrun::rendezvous
