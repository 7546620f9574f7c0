#include "trainrun/launch/store/store_data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace trainrun::launch {

namespace {

// ADD and BARRIER keep a count as its decimal text, as torch does; another value cannot be added
// to (torch's server throws from std::stoll and drops the connection).
std::int64_t counter_value(const std::string& key, const std::string& text) {
  const std::string digits = text;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || end == digits.c_str() || errno == ERANGE)
    throw StoreError(StoreFault::malformed,
                     fmt::format("ADD to key '{}', whose value is not a number", key));
  return n;
}

// What one client's wait on one key holds beyond the key: its place in the lists of waiters.
constexpr std::size_t kWaitBytes = 64;

const std::string kNoValue;

const std::string& value_or_empty(const std::map<std::string, std::string>& data,
                                  const std::string& key) {
  auto it = data.find(key);
  return it == data.end() ? kNoValue : it->second;
}

void reply_byte(std::vector<StoreReply>& out, StoreClient c, std::uint8_t b) {
  StoreReply r{c, {}};
  put_u8(r.bytes, b);
  out.push_back(std::move(r));
}

}  // namespace

StoreData::StoreData(const StoreLimits& limits) : limits_(limits), budget_(limits.max_held_bytes) {}

bool StoreData::present(const std::string& key) const {
  if (data_.count(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

StoreError held_bound_error(std::size_t would_hold, std::size_t bound) {
  return StoreError(StoreFault::held_bound,
                    fmt::format("the store would hold {} bytes: more than its bound of {} bytes "
                                "(keys, values, waits, requests arriving and replies unsent)",
                                would_hold, bound));
}

void StoreData::reserve(std::size_t more, std::size_t less) const {
  if (more <= less || budget_.used() - less + more <= budget_.limit()) return;
  throw held_bound_error(budget_.used() - less + more, budget_.limit());
}

void StoreData::charge(std::size_t& held, std::size_t wanted) {
  // reserve() said it fits, or it shrinks.
  budget_.resize(held, wanted);
}

void StoreData::put_value(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const std::size_t less = it == data_.end() ? 0 : key.size() + it->second.size();
  reserve(key.size() + value.size(), less);
  charge(stored_, stored_ - less + key.size() + value.size());
  data_[key] = std::move(value);
}

void StoreData::store(const std::string& key, std::string value, std::vector<StoreReply>& out) {
  put_value(key, std::move(value));
  wake(key, false, out);
}

void StoreData::wake(const std::string& key, bool one, std::vector<StoreReply>& out) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  auto& clients = it->second;
  for (auto c = clients.begin(); c != clients.end();) {
    const StoreClient client = *c;
    c = clients.erase(c);
    charge(waits_, waits_ - key.size() - kWaitBytes);
    auto left = awaited_.find(client);
    if (left == awaited_.end() || --left->second > 0) continue;
    awaited_.erase(left);
    reply_byte(out, client, kStoreStopWaiting);
    if (one) break;
  }
  if (clients.empty()) waiting_.erase(it);
}

void StoreData::drop_waits(StoreClient client) {
  if (!awaited_.erase(client)) return;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    auto& v = it->second;
    const auto gone = std::remove(v.begin(), v.end(), client);
    charge(waits_,
           waits_ - static_cast<std::size_t>(v.end() - gone) * (it->first.size() + kWaitBytes));
    v.erase(gone, v.end());
    it = v.empty() ? waiting_.erase(it) : std::next(it);
  }
}

void StoreData::add_wait(StoreClient client, const std::string& key) {
  waiting_[key].push_back(client);
  charge(waits_, waits_ + key.size() + kWaitBytes);
}

void StoreData::forget(StoreClient client) { drop_waits(client); }

void StoreData::clear() {
  data_.clear();
  queues_.clear();
  waiting_.clear();
  awaited_.clear();
  charge(stored_, 0);
  charge(waits_, 0);
}

void StoreData::reserve_reply(std::size_t bytes) const { reserve(bytes, 0); }

std::vector<StoreReply> StoreData::handle(StoreClient client, StoreRequest r) {
  std::vector<StoreReply> out;
  StoreReply mine{client, {}};
  const std::string no_key;
  const std::string& key = r.keys.empty() ? no_key : r.keys[0];
  switch (r.query) {
    case StoreQuery::validate:
      return out;
    case StoreQuery::ping:
      put_u32(mine.bytes, r.word);
      break;
    case StoreQuery::set:
      store(key, std::move(r.values.at(0)), out);
      return out;
    case StoreQuery::multi_set: {
      // Checked whole first: a refused MULTI_SET changes nothing.
      std::map<std::string, std::size_t> sizes;
      std::size_t more = 0, less = 0;
      for (std::size_t i = 0; i < r.keys.size(); ++i) sizes[r.keys[i]] = r.values.at(i).size();
      for (const auto& [k, size] : sizes) {
        more += k.size() + size;
        auto it = data_.find(k);
        if (it != data_.end()) less += k.size() + it->second.size();
      }
      reserve(more, less);
      for (std::size_t i = 0; i < r.keys.size(); ++i)
        store(r.keys[i], std::move(r.values.at(i)), out);
      return out;
    }
    case StoreQuery::compare_set: {
      const std::string& expected = r.values.at(0);
      const std::string& desired = r.values.at(1);
      auto it = data_.find(key);
      // The reply is one of the three values; checked before anything changes.
      reserve_reply(sizeof(std::uint64_t) +
                    std::max({expected.size(), desired.size(),
                              it == data_.end() ? std::size_t(0) : it->second.size()}));
      std::string result;
      if (it == data_.end()) {
        // As torch: a missing key is set only when the caller expected it empty; otherwise the
        // caller gets its own expected value back.
        if (expected.empty()) store(key, desired, out);
        result = expected.empty() ? desired : expected;
        wake(key, false, out);
      } else {
        if (it->second == expected) store(key, desired, out);
        result = data_.at(key);
        wake(key, false, out);
      }
      put_bytes(mine.bytes, result);
      break;
    }
    case StoreQuery::get: {
      const std::string& value = value_or_empty(data_, key);
      reserve_reply(sizeof(std::uint64_t) + value.size());
      put_bytes(mine.bytes, value);
      break;
    }
    case StoreQuery::multi_get: {
      // Counted before it is made: a reply of many copies of a large value is refused whole.
      std::size_t size = 0;
      for (const auto& k : r.keys) size += sizeof(std::uint64_t) + value_or_empty(data_, k).size();
      reserve_reply(size);
      mine.bytes.reserve(size);
      for (const auto& k : r.keys) put_bytes(mine.bytes, value_or_empty(data_, k));
      break;
    }
    case StoreQuery::add: {
      auto it = data_.find(key);
      std::int64_t value = r.number;
      if (it != data_.end())
        value =
            static_cast<std::int64_t>(static_cast<std::uint64_t>(value) +
                                      static_cast<std::uint64_t>(counter_value(key, it->second)));
      store(key, std::to_string(value), out);
      put_i64(mine.bytes, value);
      out.insert(out.begin(), std::move(mine));
      return out;
    }
    case StoreQuery::append: {
      auto it = data_.find(key);
      std::string& more = r.values.at(0);
      if (it == data_.end()) {
        store(key, std::move(more), out);
        return out;
      }
      // In place: appending to a large value does not copy it.
      reserve(more.size(), 0);
      charge(stored_, stored_ + more.size());
      it->second += more;
      wake(key, false, out);
      return out;
    }
    case StoreQuery::check: {
      const bool ready =
          std::all_of(r.keys.begin(), r.keys.end(), [&](const auto& k) { return present(k); });
      put_u8(mine.bytes, ready ? kStoreReady : kStoreNotReady);
      break;
    }
    case StoreQuery::wait: {
      if (std::all_of(r.keys.begin(), r.keys.end(), [&](const auto& k) { return present(k); })) {
        put_u8(mine.bytes, kStoreStopWaiting);
        break;
      }
      // As torch: a client waits on each key not yet set (a queue key counts until pushed).
      drop_waits(client);
      std::size_t n = 0, bytes = 0;
      for (const auto& k : r.keys) {
        if (data_.count(k)) continue;
        bytes += k.size() + kWaitBytes;
        ++n;
      }
      reserve(bytes, 0);
      for (const auto& k : r.keys)
        if (!data_.count(k)) add_wait(client, k);
      awaited_[client] = n;
      return out;
    }
    case StoreQuery::get_num_keys:
      put_i64(mine.bytes, static_cast<std::int64_t>(data_.size()));
      break;
    case StoreQuery::delete_key: {
      auto it = data_.find(key);
      const bool found = it != data_.end();
      if (found) {
        charge(stored_, stored_ - it->first.size() - it->second.size());
        data_.erase(it);
      }
      put_i64(mine.bytes, found ? 1 : 0);
      break;
    }
    case StoreQuery::cancel_wait:
      drop_waits(client);
      put_u8(mine.bytes, kStoreWaitCanceled);
      break;
    case StoreQuery::queue_push: {
      std::string& value = r.values.at(0);
      reserve(key.size() + value.size(), 0);
      charge(stored_, stored_ + key.size() + value.size());
      queues_[key].push_back(std::move(value));
      wake(key, true, out);
      return out;
    }
    case StoreQuery::queue_pop: {
      auto& q = queues_[key];
      put_i64(mine.bytes, static_cast<std::int64_t>(q.size()));
      if (!q.empty()) {
        reserve_reply(2 * sizeof(std::uint64_t) + q.front().size());
        put_bytes(mine.bytes, q.front());
        charge(stored_, stored_ - key.size() - q.front().size());
        q.pop_front();
      }
      if (q.empty()) queues_.erase(key);
      break;
    }
    case StoreQuery::queue_len: {
      auto q = queues_.find(key);
      put_i64(mine.bytes, q == queues_.end() ? 0 : static_cast<std::int64_t>(q->second.size()));
      break;
    }
    case StoreQuery::list_keys: {
      std::size_t size = sizeof(std::int64_t);
      for (const auto& [k, v] : data_) size += sizeof(std::uint64_t) + k.size();
      reserve_reply(size);
      put_i64(mine.bytes, static_cast<std::int64_t>(data_.size()));
      for (const auto& [k, v] : data_) put_bytes(mine.bytes, k);
      break;
    }
    case StoreQuery::barrier: {
      auto it = data_.find(key);
      const std::int64_t count = it == data_.end() ? 1 : counter_value(key, it->second) + 1;
      // As torch: the count is kept without waking anyone until the last arrival.
      put_value(key, std::to_string(count));
      if (count >= r.number) {
        wake(key, false, out);
        put_u8(mine.bytes, kStoreStopWaiting);
        break;
      }
      drop_waits(client);
      reserve(key.size() + kWaitBytes, 0);
      add_wait(client, key);
      awaited_[client] = 1;
      return out;
    }
  }
  out.insert(out.begin(), std::move(mine));
  return out;
}

}  // namespace trainrun::launch
