#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainrun/launch/store/store_protocol.hpp"
#include "trainrun/rendezvous/byte_budget.hpp"

namespace trainrun::launch {

using StoreClient = std::uint64_t;

// Bytes for one client, in the order they must reach it.
struct StoreReply {
  StoreClient client = 0;
  std::string bytes;
};

// The refusal when what the store holds would pass StoreLimits::max_held_bytes.
StoreError held_bound_error(std::size_t would_hold, std::size_t bound);

// The keys, values, queues and waiting clients of one c10d store, with the semantics of torch's
// libuv server (TCPStoreLibUvBackend.cpp): a GET of a missing key answers empty, a WAIT answers
// once every key exists, a QUEUE_PUSH wakes one waiter, a BARRIER counts arrivals in its key.
// Pure: requests in, replies out; the server around it owns the sockets.
class StoreData {
 public:
  explicit StoreData(const StoreLimits& limits = {});

  // The replies `request` from `client` causes: to it, and to clients whose wait it ends. Throws
  // StoreError when it would break a bound (its data, its wait or its reply would take what the
  // store holds past StoreLimits::max_held_bytes) or is wrong for the data (ADD to a value that
  // is not a number); nothing is changed then.
  std::vector<StoreReply> handle(StoreClient client, StoreRequest request);
  // A client gone: its waits are dropped.
  void forget(StoreClient client);
  // Every key and queue gone (a new attempt); waits are dropped too.
  void clear();

  std::size_t keys() const { return data_.size(); }
  std::size_t stored_bytes() const { return stored_; }
  std::size_t wait_bytes() const { return waits_; }
  // Everything the store holds, under StoreLimits::max_held_bytes: the keys, values and waits
  // charged here, and what the server's connections charge for requests arriving and replies
  // unsent.
  rendezvous::ByteBudget& budget() { return budget_; }
  const rendezvous::ByteBudget& budget() const { return budget_; }

 private:
  bool present(const std::string& key) const;
  void put_value(const std::string& key, std::string value);
  void store(const std::string& key, std::string value, std::vector<StoreReply>& out);
  void reserve(std::size_t more, std::size_t less) const;
  void reserve_reply(std::size_t bytes) const;
  void charge(std::size_t& held, std::size_t wanted);
  void add_wait(StoreClient client, const std::string& key);
  void wake(const std::string& key, bool one, std::vector<StoreReply>& out);
  void drop_waits(StoreClient client);

  StoreLimits limits_;
  std::map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<StoreClient>> waiting_;  // key -> clients
  std::unordered_map<StoreClient, std::size_t> awaited_;               // client -> keys left
  rendezvous::ByteBudget budget_;
  std::size_t stored_ = 0;  // keys, values and queue items, as charged to budget_
  std::size_t waits_ = 0;   // waits, as charged to budget_
};

}  // namespace trainrun::launch
