// What the host's clear of the job's c10d store costs between attempts (AgentStore: close every
// connection, then empty the store), for a store as init_process_group leaves it: each rank
// connected, and for each rank the key Gloo's full mesh sets. Torch 2.15 with Gloo leaves one
// key a rank, "0//cpu//0/R", whose value is 154 + 8 x ranks bytes (its address and a sequence
// number per peer; read with TCPStore.list_keys after init_process_group at 4, 8 and 16 ranks):
// N ranks hold about 8 N^2 bytes.
#pragma once

#include <sys/resource.h>

#include <fmt/format.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "trainrun/launch/store/store_protocol.hpp"
#include "trainrun/launch/store/store_server.hpp"

namespace trainrun::rendezvous::bench {

struct StoreClear {
  int ranks = 0;
  std::size_t bytes = 0;  // the keys and values the ranks leave
  double close_s = -1;    // close(): every rank's connection
  double clear_s = -1;    // then clear(): every key, as between attempts
  std::string skipped;    // why it was not measured: the store cannot serve that many ranks
};

inline std::size_t gloo_value_bytes(int ranks) { return 154 + 8 * static_cast<std::size_t>(ranks); }

inline std::string gloo_key(int rank) { return fmt::format("0//cpu//0/{}", rank); }

// Where the store cannot hold the job at all, why (its bounds, StoreLimits); else "".
inline std::string store_shortfall(int ranks, std::size_t bytes) {
  const launch::StoreLimits limits;
  if (static_cast<std::size_t>(ranks) > limits.max_connections)
    return fmt::format("{} ranks: over the store's {} connections", ranks, limits.max_connections);
  if (bytes > limits.max_held_bytes)
    return fmt::format("{} ranks' keys, {:.1f} GiB: over the store's {} GiB", ranks,
                       static_cast<double>(bytes) / (1 << 30), limits.max_held_bytes >> 30);
  return "";
}

// The descriptors measure_store_clear needs for `ranks`: both ends of each rank's connection in
// this one process, and a few more.
inline long store_clear_descriptors(long ranks) { return 2 * ranks + 256; }

// Where this process cannot hold both ends of each rank's connection (its RLIMIT_NOFILE), why;
// else "".
inline std::string descriptor_shortfall(int ranks) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return "";
  const auto needed = static_cast<rlim_t>(store_clear_descriptors(ranks));
  if (limit.rlim_cur >= needed) return "";
  return fmt::format("{} ranks: both ends of each connection need {} descriptors, over this "
                     "process's limit of {}",
                     ranks, needed, limit.rlim_cur);
}

// Fills a real StoreServer on `io` through `ranks` connections, each setting its rank's key as
// Gloo does, then times its close() and clear(). The clients are blocking sockets in a thread
// of their own, open until the clear is timed (a rank's connection ends only with the attempt).
inline StoreClear measure_store_clear(boost::asio::io_context& io, int ranks) {
  namespace asio = boost::asio;
  StoreClear r;
  r.ranks = ranks;
  const std::string value(gloo_value_bytes(ranks), 'v');
  for (int i = 0; i < ranks; ++i) r.bytes += gloo_key(i).size() + value.size();
  r.skipped = store_shortfall(ranks, r.bytes);
  if (r.skipped.empty()) r.skipped = descriptor_shortfall(ranks);
  if (!r.skipped.empty()) return r;

  launch::StoreServer server(io, [](const std::string& line, launch::Level) {
    std::fprintf(stderr, "rendezvous_scale: store: %s\n", line.c_str());
  });
  server.open(0);
  const int port = server.port();
  std::atomic<bool> sent{false}, timed{false}, failed{false};
  std::thread ranks_thread([&] {
    asio::io_context client_io;
    std::vector<asio::ip::tcp::socket> sockets;
    sockets.reserve(static_cast<std::size_t>(ranks));
    try {
      const asio::ip::tcp::endpoint store(asio::ip::make_address_v4("127.0.0.1"),
                                          static_cast<unsigned short>(port));
      for (int i = 0; i < ranks; ++i) {
        sockets.emplace_back(client_io);
        sockets.back().connect(store);
        launch::StoreRequest validate;
        validate.word = launch::kStoreValidationMagic;
        launch::StoreRequest set;
        set.query = launch::StoreQuery::set;
        set.keys = {gloo_key(i)};
        set.values = {value};
        asio::write(sockets.back(),
                    asio::buffer(launch::encode_request(validate) + launch::encode_request(set)));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rendezvous_scale: a rank of the store: %s\n", e.what());
      failed = true;
    }
    sent = true;
    while (!timed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while ((!sent || server.data().keys() < static_cast<std::size_t>(ranks)) && !failed &&
         std::chrono::steady_clock::now() < limit)
    io.run_for(std::chrono::milliseconds(1));
  if (!failed && server.data().keys() == static_cast<std::size_t>(ranks)) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    server.close();
    const auto closed = Clock::now();
    server.clear();
    r.close_s = std::chrono::duration<double>(closed - start).count();
    r.clear_s = std::chrono::duration<double>(Clock::now() - closed).count();
  }
  timed = true;
  ranks_thread.join();
  return r;
}

inline std::string describe(const StoreClear& r) {
  if (!r.skipped.empty()) return "n/a (" + r.skipped + ")";
  if (r.clear_s < 0) return "failed";
  return fmt::format("{:.3f} + {:.3f} ({} ranks, {:.0f} MiB)", r.close_s, r.clear_s, r.ranks,
                     static_cast<double>(r.bytes) / (1 << 20));
}

inline nlohmann::json to_json(const StoreClear& r) {
  return {{"ranks", r.ranks},
          {"bytes", r.bytes},
          {"close_s", r.close_s},
          {"clear_s", r.clear_s},
          {"skipped", r.skipped}};
}

}  // namespace trainrun::rendezvous::bench
