#include "mpibert/report/http_client.hpp"

#include <curl/curl.h>

#include <atomic>
#include <mutex>
#include <stdexcept>

#include "mpibert/core/error.hpp"

namespace mpibert {
namespace {

constexpr const char* kCancelled = "cancelled before the server answered";

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("libcurl: curl_global_init failed");
  });
}

}  // namespace

// The request runs on a multi handle of its own, which cancel() can wake from another thread
// (curl_multi_wakeup): curl_easy_perform would look at a cancel flag only about once a second.
struct HttpClient::Handle {
  CURL* curl = nullptr;
  CURLM* multi = nullptr;
  curl_slist* headers = nullptr;
  std::atomic<bool> cancelled{false};
  ~Handle() {
    if (headers) curl_slist_free_all(headers);
    if (curl) curl_easy_cleanup(curl);
    if (multi) curl_multi_cleanup(multi);
  }
  // The transfer of `curl`, added to `multi`, to its end: "" or why it failed.
  std::string transfer();
};

std::string HttpClient::Handle::transfer() {
  int running = 1;
  while (true) {
    if (const CURLMcode code = curl_multi_perform(multi, &running); code != CURLM_OK) return curl_multi_strerror(code);
    if (running == 0) break;
    if (cancelled) return kCancelled;
    if (const CURLMcode code = curl_multi_poll(multi, nullptr, 0, 1000, nullptr); code != CURLM_OK)
      return curl_multi_strerror(code);
  }
  int left = 0;
  while (CURLMsg* message = curl_multi_info_read(multi, &left))
    if (message->msg == CURLMSG_DONE && message->easy_handle == curl)
      return message->data.result == CURLE_OK ? "" : curl_easy_strerror(message->data.result);
  return "libcurl: the transfer ended without a result";
}

std::string HttpResponse::describe() const {
  if (!answered()) return error;
  return "HTTP " + std::to_string(status) + (body.empty() ? "" : ": " + quote_excerpt(body, 300));
}

HttpClient::HttpClient(HttpSettings settings) : settings_(std::move(settings)), handle_(std::make_unique<Handle>()) {
  global_init_once();
  handle_->curl = curl_easy_init();
  handle_->multi = curl_multi_init();
  if (!handle_->curl || !handle_->multi) throw std::runtime_error("libcurl: curl_easy_init or curl_multi_init failed");
  CURL* curl = handle_->curl;
  handle_->headers = curl_slist_append(handle_->headers, "Content-Type: application/json");
  if (!settings_.bearer_token.empty())
    handle_->headers = curl_slist_append(handle_->headers, ("Authorization: Bearer " + settings_.bearer_token).c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, handle_->headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // another thread than main's: no SIGALRM, no SIGPIPE
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, settings_.connect_timeout_ms);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, settings_.timeout_ms);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  if (!settings_.username.empty()) {
    curl_easy_setopt(curl, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(curl, CURLOPT_USERNAME, settings_.username.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, settings_.password.c_str());
  }
  if (!settings_.verify_tls) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!settings_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, settings_.ca_file.c_str());
  if (!settings_.client_cert.empty()) curl_easy_setopt(curl, CURLOPT_SSLCERT, settings_.client_cert.c_str());
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::get(const std::string& path) { return perform(path, nullptr); }

HttpResponse HttpClient::post_json(const std::string& path, const std::string& body) { return perform(path, &body); }

HttpResponse HttpClient::perform(const std::string& path, const std::string* post_body) {
  CURL* curl = handle_->curl;
  HttpResponse response;
  std::string base = settings_.base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  const std::string url = base + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  if (post_body) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, post_body->c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(post_body->size()));
  } else {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  }
  if (handle_->cancelled) {
    response.error = kCancelled;
    return response;
  }
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  std::string failed = curl_multi_add_handle(handle_->multi, curl) == CURLM_OK ? handle_->transfer()
                                                                               : "libcurl: curl_multi_add_handle failed";
  curl_multi_remove_handle(handle_->multi, curl);  // a cancelled transfer is abandoned, its connection closed
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  if (!failed.empty()) {
    response.error = failed != kCancelled && error[0] ? error : failed;
    response.body.clear();
    return response;
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

void HttpClient::cancel() {
  handle_->cancelled = true;
  curl_multi_wakeup(handle_->multi);
}

std::string HttpClient::escape(const std::string& value) const {
  char* escaped = curl_easy_escape(handle_->curl, value.c_str(), static_cast<int>(value.size()));
  std::string result = escaped ? escaped : "";
  curl_free(escaped);
  return result;
}

std::string url_without_credentials(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t host = scheme + 3;
  const size_t end = url.find_first_of("/?#", host);
  const size_t at = url.rfind('@', end == std::string::npos ? url.size() : end);
  if (at == std::string::npos || at < host) return url;
  return url.substr(0, host) + url.substr(at + 1);
}

}  // namespace mpibert
