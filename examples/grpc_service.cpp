// A gRPC service profiled per RPC with one line at the server builder:
//
//   spanprof::grpc::install(builder);
//
// The Checkout service (examples/grpc/checkout.proto) twice over loopback: a sync
// implementation and a callback (reactor) one. Quote prices an order (its hot code:
// price_order); Receipt streams an order's receipt in parts (render_receipt_part).
// The program's own client calls each with a W3C traceparent in the metadata; each
// RPC's profile carries that span's ids and the method as span_name:
//
//   go tool pprof -tags profiles/*.pb.gz
//   go tool pprof -tagfocus='span_id=^<id>$' -top profiles/*.pb.gz
//
// Output: one line per RPC the client made, then each profile with where its CPU went.
//   rpc <method> server=<sync|callback> span_id=<16 hex> status=<code>
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/grpc.hpp>
#include <spanprof/spanprof.hpp>

#include "checkout.grpc.pb.h"
#include "example_support.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

using namespace spanprof::example;

namespace {

// ---- the service's code ------------------------------------------------------------

__attribute__((noinline)) double price_order(int items, double cpu_ms) {
  const std::int64_t end = example::thread_cpu_ns() + static_cast<std::int64_t>(cpu_ms * 1e6);
  double total = 0;
  while (example::thread_cpu_ns() < end)
    for (int i = 0; i < 20000; ++i) total = total * 0.9999999 + 0.25 * items;
  return total;
}

__attribute__((noinline)) std::string render_receipt_part(int part, double cpu_ms) {
  const std::int64_t end = example::thread_cpu_ns() + static_cast<std::int64_t>(cpu_ms * 1e6);
  std::uint64_t hash = 1469598103934665603ull + static_cast<std::uint64_t>(part);
  while (example::thread_cpu_ns() < end)
    for (int i = 0; i < 20000; ++i) hash = (hash ^ static_cast<std::uint64_t>(i)) * 1099511628211ull;
  return "part " + std::to_string(part) + " #" + std::to_string(hash % 10000);
}

class SyncCheckout final : public Checkout::Service {
  grpc::Status Quote(grpc::ServerContext*, const QuoteRequest* request, QuoteReply* reply) override {
    reply->set_total(price_order(request->items(), request->cpu_ms()));
    return grpc::Status::OK;
  }
  grpc::Status Receipt(grpc::ServerContext*, const QuoteRequest* request,
                       grpc::ServerWriter<ReceiptPart>* writer) override {
    for (int part = 0; part < request->parts(); ++part) {
      ReceiptPart reply;
      reply.set_part(part);
      reply.set_text(render_receipt_part(part, request->cpu_ms()));
      if (!writer->Write(reply)) return grpc::Status::CANCELLED;
    }
    return grpc::Status::OK;
  }
};

// The receipt as a callback reactor: its first part is rendered in the handler
// (profiled by the interceptor), the others in OnWriteDone, on gRPC's executor
// threads. Nothing here knows spanprof: the handler makes it as
// spanprof::grpc::Profiled<ReceiptWriter>, which puts each step in the RPC's profile.
class ReceiptWriter : public grpc::ServerWriteReactor<ReceiptPart> {
 public:
  explicit ReceiptWriter(const QuoteRequest& request) : request_(request) { next(); }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::CANCELLED);
    next();
  }
  void OnDone() override { delete this; }

 private:
  void next() {
    if (part_ == request_.parts()) return Finish(grpc::Status::OK);
    reply_.set_part(part_);
    reply_.set_text(render_receipt_part(part_++, request_.cpu_ms()));
    StartWrite(&reply_);
  }
  QuoteRequest request_;
  ReceiptPart reply_;
  int part_ = 0;
};

class CallbackCheckout final : public Checkout::CallbackService {
  grpc::ServerUnaryReactor* Quote(grpc::CallbackServerContext* context, const QuoteRequest* request,
                                  QuoteReply* reply) override {
    reply->set_total(price_order(request->items(), request->cpu_ms()));
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerWriteReactor<ReceiptPart>* Receipt(grpc::CallbackServerContext*, const QuoteRequest* request) override {
    return new spanprof::grpc::Profiled<ReceiptWriter>(*request);  // every step in the RPC's profile
  }
};

std::unique_ptr<grpc::Server> serve(grpc::Service& service, int& port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  spanprof::grpc::install(builder);  // every RPC: one profile under its span
  return builder.BuildAndStart();
}

}  // namespace

int main() {
  spanprof::Options options;
  auto files = example::file_uploader(options);  // $SPANPROF_OUTPUT_DIR or ./profiles
  if (!std::getenv("SPANPROF_FREQUENCY")) options.frequency_hz = 250;  // more samples in a short demo
  example::ProfileSummaries summaries(options, files);
  spanprof::start(options);

  SyncCheckout sync_service;
  CallbackCheckout callback_service;
  int sync_port = 0, callback_port = 0;
  auto sync_server = serve(sync_service, sync_port);
  auto callback_server = serve(callback_service, callback_port);
  if (!sync_server || !callback_server) {
    std::fprintf(stderr, "could not start the gRPC servers\n");
    return 1;
  }

  // The client: each call carries its span in the traceparent metadata.
  std::mt19937_64 rng(2026);
  for (const auto& [server, port] : {std::pair<const char*, int>{"sync", sync_port}, {"callback", callback_port}}) {
    auto stub = Checkout::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    for (int call = 0; call < 4; ++call) {
      const std::string traceparent = example::random_traceparent(rng);
      grpc::ClientContext context;
      context.AddMetadata("traceparent", traceparent);
      QuoteRequest request;
      request.set_items(call + 1);
      request.set_cpu_ms(40);
      request.set_parts(4);
      grpc::Status status;
      const char* method = call % 2 == 0 ? "/spanprof.example.Checkout/Quote" : "/spanprof.example.Checkout/Receipt";
      if (call % 2 == 0) {
        QuoteReply reply;
        status = stub->Quote(&context, request, &reply);
      } else {
        auto reader = stub->Receipt(&context, request);
        for (ReceiptPart part; reader->Read(&part);) {
        }
        status = reader->Finish();
      }
      std::printf("rpc %s server=%s span_id=%s status=%d\n", method, server,
                  spanprof::parse_traceparent(traceparent).context.span_id.to_hex().c_str(),
                  static_cast<int>(status.error_code()));
    }
  }
  sync_server->Shutdown();
  callback_server->Shutdown();
  spanprof::flush();

  std::printf("\n");
  summaries.print();
  std::printf("\n%zu profiles written to %s\n", summaries.size(), files->directory().c_str());
  spanprof::shutdown();
  return 0;
}
