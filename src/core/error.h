// Errors a user can act on. Every failure that comes from input (a file, a flag, a request)
// is an rkv::Error whose message names the thing at fault; the program reports it and exits
// (or the server answers 400) instead of crashing.
#pragma once

#include <stdexcept>
#include <string>

namespace rkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace rkv
