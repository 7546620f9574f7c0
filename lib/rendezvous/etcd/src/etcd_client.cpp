#include "trainrun/rendezvous/etcd_client.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <optional>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

namespace trainrun::rendezvous {

namespace asio = boost::asio;

std::string EtcdReply::describe() const {
  if (!transport_ok) return error;
  return fmt::format("HTTP {}: {}", http_status, body.substr(0, 200));
}

namespace {

// One request: its easy handle, what it sends and what came back so far.
struct Transfer {
  CURL* easy = nullptr;
  std::string url, body, response, pending_line;
  bool streaming = false;
  EtcdClient::Reply done;
  EtcdClient::Line line;
  char error[CURL_ERROR_SIZE] = {0};
  asio::io_context* io = nullptr;
  std::weak_ptr<void> alive;
  // The caller's loop has work while a request is out: it does not run out and return.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
};

size_t on_data(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (!t->streaming) {
    t->response.append(data, n);
    return n;
  }
  t->pending_line.append(data, n);
  size_t nl;
  while ((nl = t->pending_line.find('\n')) != std::string::npos) {
    std::string one = t->pending_line.substr(0, nl);
    t->pending_line.erase(0, nl + 1);
    asio::post(*t->io, [alive = t->alive, cb = t->line, one = std::move(one)] {
      if (alive.lock()) cb(one);
    });
  }
  return n;
}

CURL* make_easy(Transfer& t, std::chrono::milliseconds timeout) {
  CURL* e = curl_easy_init();
  curl_easy_setopt(e, CURLOPT_URL, t.url.c_str());
  curl_easy_setopt(e, CURLOPT_POST, 1L);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, t.body.c_str());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(t.body.size()));
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.error);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  if (timeout.count() > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  // etcd streams watch events as they happen: no proxy, no buffering in between.
  curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  t.easy = e;
  return e;
}

EtcdReply finish(Transfer& t, CURLcode code) {
  EtcdReply r;
  r.transport_ok = code == CURLE_OK;
  r.body = std::move(t.response);
  if (!r.transport_ok) r.error = t.error[0] ? t.error : curl_easy_strerror(code);
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &r.http_status);
  char* ip = nullptr;
  if (curl_easy_getinfo(t.easy, CURLINFO_LOCAL_IP, &ip) == CURLE_OK && ip) r.local_ip = ip;
  return r;
}

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

}  // namespace

// The curl thread: adds queued transfers to the multi handle, runs them, posts the results.
struct EtcdClient::Impl {
  asio::io_context& io;
  std::shared_ptr<int> alive = std::make_shared<int>(0);
  CURLM* multi = nullptr;
  std::mutex mutex;
  std::deque<std::unique_ptr<Transfer>> queued;  // guarded by mutex
  bool cancel = false;                           // guarded by mutex
  std::atomic<bool> stopping{false};
  std::list<std::unique_ptr<Transfer>> running;  // curl thread only
  std::thread thread;

  explicit Impl(asio::io_context& context) : io(context) {
    static CurlGlobal global;
    multi = curl_multi_init();
    thread = std::thread([this] { loop(); });
  }

  ~Impl() {
    stopping = true;
    curl_multi_wakeup(multi);
    thread.join();
    for (auto& t : running) {
      curl_multi_remove_handle(multi, t->easy);
      curl_easy_cleanup(t->easy);
    }
    curl_multi_cleanup(multi);
  }

  void submit(std::unique_ptr<Transfer> t) {
    t->io = &io;
    t->alive = alive;
    t->work.emplace(io.get_executor());
    {
      std::lock_guard<std::mutex> lock(mutex);
      queued.push_back(std::move(t));
    }
    curl_multi_wakeup(multi);
  }

  void take_queued() {
    std::lock_guard<std::mutex> lock(mutex);
    while (!queued.empty()) {
      curl_multi_add_handle(multi, queued.front()->easy);
      running.push_back(std::move(queued.front()));
      queued.pop_front();
    }
    if (cancel) {
      cancel = false;
      for (auto it = running.begin(); it != running.end();) {
        if (!(*it)->streaming) {
          ++it;
          continue;
        }
        complete(**it, CURLE_ABORTED_BY_CALLBACK);
        it = running.erase(it);
      }
    }
  }

  void complete(Transfer& t, CURLcode code) {
    curl_multi_remove_handle(multi, t.easy);
    EtcdReply reply = finish(t, code);
    curl_easy_cleanup(t.easy);
    asio::post(io, [alive = t.alive, cb = std::move(t.done), reply = std::move(reply),
                    work = std::move(t.work)]() mutable {
      if (alive.lock()) cb(std::move(reply));
    });
  }

  void loop() {
    while (!stopping) {
      take_queued();
      int still = 0;
      curl_multi_perform(multi, &still);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        for (auto it = running.begin(); it != running.end(); ++it) {
          if ((*it)->easy != m->easy_handle) continue;
          complete(**it, m->data.result);
          running.erase(it);
          break;
        }
      }
      curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
    }
  }
};

EtcdClient::EtcdClient(asio::io_context& io, std::string base_url)
    : base_url_(std::move(base_url)), impl_(std::make_shared<Impl>(io)) {}

EtcdClient::~EtcdClient() = default;

void EtcdClient::post(const std::string& path, std::string body, std::chrono::milliseconds timeout,
                      Reply done) {
  auto t = std::make_unique<Transfer>();
  t->url = base_url_ + path;
  t->body = std::move(body);
  t->done = std::move(done);
  make_easy(*t, timeout);
  impl_->submit(std::move(t));
}

void EtcdClient::stream(const std::string& path, std::string body, Line line, Reply done) {
  auto t = std::make_unique<Transfer>();
  t->url = base_url_ + path;
  t->body = std::move(body);
  t->streaming = true;
  t->line = std::move(line);
  t->done = std::move(done);
  make_easy(*t, std::chrono::milliseconds(0));
  impl_->submit(std::move(t));
}

void EtcdClient::cancel_streams() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->cancel = true;
  }
  curl_multi_wakeup(impl_->multi);
}

EtcdReply EtcdClient::post_now(const std::string& path, const std::string& body,
                               std::chrono::milliseconds timeout) const {
  Transfer t;
  t.url = base_url_ + path;
  t.body = body;
  CURL* e = make_easy(t, timeout);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  EtcdReply r = finish(t, curl_easy_perform(e));
  curl_easy_cleanup(e);
  return r;
}

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

std::string base64_decode(const std::string& text) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const char* p = c ? std::strchr(kAlphabet, c) : nullptr;
    if (!p) continue;
    acc = (acc << 6) | static_cast<std::uint32_t>(p - kAlphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

}  // namespace trainrun::rendezvous
