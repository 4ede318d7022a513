// HTTP requests through libcurl, for the trackers that speak to a server (MLflow's REST API).
// One client per thread: a client keeps its connection open between requests. Another thread may
// cancel() it: the request in flight returns at once, unanswered (a bounded end, whatever the
// request's own timeout).
#pragma once

#include <memory>
#include <string>

namespace mpibert {

struct HttpSettings {
  std::string base_url;              // "http://host:5000", credentials in it allowed ("http://user:pass@host")
  std::string bearer_token;          // an Authorization: Bearer header
  std::string username, password;    // basic authentication
  bool verify_tls = true;            // false: accept any certificate
  std::string ca_file, client_cert;  // a CA bundle to verify the server with; a client certificate
  long connect_timeout_ms = 5000, timeout_ms = 30000;
};

struct HttpResponse {
  long status = 0;    // the HTTP status; 0 when no answer came
  std::string body;   // the answer's body
  std::string error;  // why no answer came (libcurl's words); "" when one did
  bool answered() const { return error.empty(); }
  bool ok() const { return answered() && status >= 200 && status < 300; }
  // "HTTP 404: BODY" or the transport's error, for messages (the body shortened).
  std::string describe() const;
};

class HttpClient {
 public:
  explicit HttpClient(HttpSettings settings);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // `path` after the base URL ("/api/2.0/mlflow/runs/get?run_id=..."); query values escaped by the caller.
  HttpResponse get(const std::string& path);
  HttpResponse post_json(const std::string& path, const std::string& body);
  // A query value, percent-encoded.
  std::string escape(const std::string& value) const;
  // From any thread: the request in flight, and every later one, returns unanswered at once.
  void cancel();

 private:
  HttpResponse perform(const std::string& path, const std::string* post_body);

  HttpSettings settings_;
  struct Handle;
  std::unique_ptr<Handle> handle_;
};

// The URL without the credentials it may carry ("http://user:secret@host" -> "http://host"): what
// messages and records show.
std::string url_without_credentials(const std::string& url);

}  // namespace mpibert
