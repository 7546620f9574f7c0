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

namespace trainrun::launch {

using StoreClient = std::uint64_t;

// Bytes for one client, in the order they must reach it.
struct StoreReply {
  StoreClient client = 0;
  std::string bytes;
};

// The keys, values, queues and waiting clients of one c10d store, with the semantics of torch's
// libuv server (TCPStoreLibUvBackend.cpp): a GET of a missing key answers empty, a WAIT answers
// once every key exists, a QUEUE_PUSH wakes one waiter, a BARRIER counts arrivals in its key.
// Pure: requests in, replies out; the server around it owns the sockets.
class StoreData {
 public:
  explicit StoreData(const StoreLimits& limits = {});

  // The replies `request` from `client` causes: to it, and to clients whose wait it ends. Throws
  // StoreError when it would break a bound or is wrong for the data (ADD to a value that is not a
  // number); nothing is changed then.
  std::vector<StoreReply> handle(StoreClient client, const StoreRequest& request);
  // A client gone: its waits are dropped.
  void forget(StoreClient client);
  // Every key and queue gone (a new attempt); waits are dropped too.
  void clear();

  std::size_t keys() const { return data_.size(); }
  std::size_t stored_bytes() const { return stored_; }

 private:
  bool present(const std::string& key) const;
  void put_value(const std::string& key, std::string value);
  void store(const std::string& key, std::string value, std::vector<StoreReply>& out);
  void reserve(std::size_t more, std::size_t less) const;
  void wake(const std::string& key, bool one, std::vector<StoreReply>& out);
  void drop_waits(StoreClient client);

  StoreLimits limits_;
  std::map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<StoreClient>> waiting_;  // key -> clients
  std::unordered_map<StoreClient, std::size_t> awaited_;               // client -> keys left
  std::size_t stored_ = 0;
};

}  // namespace trainrun::launch
