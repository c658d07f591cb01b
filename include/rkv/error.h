// Errors a user can act on. Every failure that comes from input (a file, a flag, a request)
// is an rkv::Error whose message names the thing at fault; the program reports it and exits
// (or the server answers 400) instead of crashing.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace rkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// What Engine::prepare throws for a request it refuses: the message, and the request setting it
// concerns in the HTTP API's naming ("kv" for the compression settings, "kv.dtype",
// "max_tokens", ...; empty when it is the request as a whole), which the server reports as the
// error's `param`.
class RequestError : public Error {
 public:
  RequestError(const std::string& message, std::string field)
      : Error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

}  // namespace rkv
