// Head sampling: decides, when a guard opens, whether this span is profiled.
// A "no" is the common answer in production, so it must cost next to nothing:
// samplers are called on the request thread and must not allocate, lock or block.
#ifndef SPANPROF_SAMPLER_HPP_
#define SPANPROF_SAMPLER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/span_context.hpp>

#include <functional>
#include <memory>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual bool should_profile(const SpanContext& span, std::string_view span_name) noexcept = 0;
};

class AlwaysSampler final : public Sampler {
 public:
  bool should_profile(const SpanContext&, std::string_view) noexcept override { return true; }
};

class NeverSampler final : public Sampler {
 public:
  bool should_profile(const SpanContext&, std::string_view) noexcept override { return false; }
};

// For rules that fit in a lambda. The callback runs on the request thread.
class CallbackSampler final : public Sampler {
 public:
  using Callback = std::function<bool(const SpanContext&, std::string_view)>;
  explicit CallbackSampler(Callback callback) : callback_(std::move(callback)) {}
  bool should_profile(const SpanContext& span, std::string_view name) noexcept override {
    try {
      return callback_ && callback_(span, name);
    } catch (...) {
      return false;
    }
  }

 private:
  Callback callback_;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_SAMPLER_HPP_
