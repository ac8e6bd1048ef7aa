// A real gRPC server for the cost benchmark (bench/server_bench.py --load grpc):
// the example's Checkout service (examples/grpc/checkout.proto) on the callback
// API, its unary Quote doing the same ~100 µs of work as the HTTP server's handler
// (server_support.hpp). What the server's own CPU per RPC costs with spanprof's
// interceptor, against none, is what a gRPC service pays.
//
//   grpc_bench MODE CONTROL_PORT                      the server
//   grpc_bench client CONTROL_PORT SECONDS CALLERS    its load: CALLERS threads, a channel each
//
// MODE:
//   off        no spanprof, no interceptor
//   empty      no spanprof; an interceptor that only proceeds: what gRPC itself charges
//              for a call with any server interceptor
//   installed  spanprof::grpc::install with a head sampler that profiles nothing:
//              what a server pays for the RPCs it does not profile (the factory's
//              decision; such an RPC gets no interceptor), nothing recorded
//   default    spanprof::grpc::install, default options: every RPC profiled
//   rare       every RPC profiled at 1 Hz (diagnostic): the interceptor and the
//              request's bookkeeping, almost no samples or profiles
// Profiles go to an uploader that counts them, so no disk or network I/O is measured.
//
// The control port speaks HTTP, as the HTTP server's does: GET /cpu answers
// "<process CPU ns> <RPCs served> <profiles>", GET /port the gRPC port, GET /quit stops.
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/grpc.hpp>
#include <spanprof/spanprof.hpp>

#include "checkout.grpc.pb.h"
#include "server_support.hpp"

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

using namespace spanprof::example;

namespace {

std::atomic<long> served{0};
std::atomic<long> profiles{0};

// Does nothing but let every batch through.
class EmptyInterceptor final : public grpc::experimental::Interceptor {
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override { methods->Proceed(); }
};
class EmptyInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo*) override {
    return new EmptyInterceptor;
  }
};

class Checkout final : public spanprof::example::Checkout::CallbackService {
  grpc::ServerUnaryReactor* Quote(grpc::CallbackServerContext* context, const QuoteRequest*,
                                  QuoteReply* reply) override {
    reply->set_total(static_cast<double>(bench::handle_work().size()));
    served.fetch_add(1, std::memory_order_relaxed);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

int serve(const std::string& mode, int control_port) {
  const bool installed = mode == "installed" || mode == "default" || mode == "rare";
  if (!installed && mode != "off" && mode != "empty") {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (installed) {
    spanprof::Options options(spanprof::ignore_environment);
    options.frequency_hz = mode == "rare" ? 1 : 100;
    if (mode == "installed") options.head_sampler = std::make_shared<spanprof::NeverSampler>();
    options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
        [](const spanprof::EncodedProfile&, std::string_view) {
          profiles.fetch_add(1, std::memory_order_relaxed);
          return spanprof::UploadResult::ok();
        },
        "count"));
    const auto started = spanprof::start(options);
    if (!started) {
      for (const auto& problem : started.problems) std::fprintf(stderr, "spanprof: %s\n", problem.message.c_str());
      return 1;
    }
  }
  Checkout service;
  int grpc_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &grpc_port);
  builder.RegisterService(&service);
  if (installed) spanprof::grpc::install(builder);
  if (mode == "empty") {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::make_unique<EmptyInterceptorFactory>());
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return 1;

  httplib::Server control;
  control.Get("/cpu", [](const httplib::Request&, httplib::Response& response) {
    char text[96];
    std::snprintf(text, sizeof text, "%lld %ld %ld\n", static_cast<long long>(bench::process_cpu_ns()),
                  served.load(std::memory_order_relaxed), profiles.load(std::memory_order_relaxed));
    response.set_content(text, "text/plain");
  });
  control.Get("/port", [&](const httplib::Request&, httplib::Response& response) {
    response.set_content(std::to_string(grpc_port) + "\n", "text/plain");
  });
  control.Get("/quit", [&](const httplib::Request&, httplib::Response& response) {
    response.set_content("bye\n", "text/plain");
    control.stop();
  });
  if (!control.listen("127.0.0.1", control_port)) return 1;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (installed) spanprof::shutdown(std::chrono::seconds(5));
  return 0;
}

// CALLERS threads, each with its own channel (its own connection), call Quote back
// to back for SECONDS, each call with a traceparent as a traced client sends.
int load(int control_port, double seconds, int callers) {
  httplib::Client control("127.0.0.1", control_port);
  const auto port = control.Get("/port");
  if (!port || port->status != 200) {
    std::fprintf(stderr, "grpc_bench client: no port from the server's control endpoint (%s)\n",
                 port ? std::to_string(port->status).c_str() : httplib::to_string(port.error()).c_str());
    return 1;
  }
  const std::string target = "127.0.0.1:" + std::to_string(std::atoi(port->body.c_str()));
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<long> failed{0};
  std::vector<std::thread> threads;
  for (int caller = 0; caller < callers; ++caller) {
    threads.emplace_back([&, caller] {
      grpc::ChannelArguments arguments;
      arguments.SetInt("spanprof.bench.caller", caller);  // a channel (a connection) of its own
      auto stub = spanprof::example::Checkout::NewStub(
          grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments));
      std::uint64_t random = 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(caller);
      QuoteRequest request;
      request.set_items(3);
      while (std::chrono::steady_clock::now() < end) {
        char traceparent[56];
        std::snprintf(traceparent, sizeof traceparent, "00-%016llx%016llx-%016llx-01",
                      static_cast<unsigned long long>(bench::next_random(random)),
                      static_cast<unsigned long long>(bench::next_random(random)),
                      static_cast<unsigned long long>(bench::next_random(random) | 1));
        grpc::ClientContext context;
        context.AddMetadata("traceparent", traceparent);
        // As a service's client would: a connection not up yet (the first calls
        // of a loaded machine) is waited for, not failed.
        context.set_wait_for_ready(true);
        QuoteReply reply;
        const grpc::Status status = stub->Quote(&context, request, &reply);
        if (!status.ok() && failed.fetch_add(1, std::memory_order_relaxed) == 0)
          std::fprintf(stderr, "grpc_bench client: Quote failed: %d %s\n", static_cast<int>(status.error_code()),
                       status.error_message().c_str());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (failed.load() != 0) std::fprintf(stderr, "grpc_bench client: %ld calls failed\n", failed.load());
  return failed.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "client") return load(std::atoi(argv[2]), std::atof(argv[3]), std::atoi(argv[4]));
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODE CONTROL_PORT | %s client CONTROL_PORT SECONDS CALLERS\n", argv[0], argv[0]);
    return 2;
  }
  return serve(argv[1], std::atoi(argv[2]));
}
