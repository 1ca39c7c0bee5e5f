// Stop-string matching (see text_stream.h).
#include "server/text_stream.h"

#include <algorithm>

namespace futr::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  std::string buf = std::move(held_);
  held_.clear();
  buf.append(text);
  // 1. The earliest complete stop string ends the text before it.
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, buf.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    buf.resize(first);
    return buf;
  }
  // 2. Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, buf.size());
    for (size_t len = max_len; len > hold; --len)
      if (std::string_view(buf).substr(buf.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
  }
  held_ = buf.substr(buf.size() - hold);
  buf.resize(buf.size() - hold);
  return buf;
}

std::string StopMatcher::finish() {
  std::string s = std::move(held_);
  held_.clear();
  return s;
}

}  // namespace futr::server
