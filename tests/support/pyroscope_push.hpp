// Reads what a Pyroscope server receives from spanprof: a Push request
// (push.v1.PushRequest, grafana/pyroscope api/push/v1) or a legacy /ingest body.
#pragma once

#include "http_server.hpp"
#include "protobuf_reader.hpp"

#include <string>
#include <utility>
#include <vector>

namespace pyroscope_test {

struct PushedProfile {
  std::vector<std::pair<std::string, std::string>> labels;  // the series' labels, in order
  std::string id;
  std::string pprof_gzip;

  std::string label(const std::string& name) const {
    for (const auto& [key, value] : labels)
      if (key == name) return value;
    return {};
  }
};

// PushRequest{series(1): [{labels(1): [{name(1), value(2)}], samples(2): [{raw_profile(1), ID(2)}]}]}
inline std::vector<PushedProfile> parse_push(const std::string& body) {
  std::vector<PushedProfile> out;
  const proto_test::Msg request(body);
  for (const proto_test::Msg& series : request.messages(1)) {
    std::vector<std::pair<std::string, std::string>> labels;
    for (const proto_test::Msg& pair : series.messages(1)) labels.emplace_back(pair.bytes(1), pair.bytes(2));
    for (const proto_test::Msg& sample : series.messages(2))
      out.push_back(PushedProfile{labels, sample.bytes(2), sample.bytes(1)});
  }
  return out;
}

// The gzip'd pprof profiles one request carried, whichever API it used.
inline std::vector<std::string> pprof_bodies(const spanprof_test::Request& request) {
  if (request.path == "/ingest") return {request.body};
  std::vector<std::string> bodies;
  for (const PushedProfile& pushed : parse_push(request.body)) bodies.push_back(pushed.pprof_gzip);
  return bodies;
}

}  // namespace pyroscope_test
