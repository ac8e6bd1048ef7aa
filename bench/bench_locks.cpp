// An uncontended lock and unlock with spanprof's lock hooks (docs/locks.md), side by
// side in one run, in this order (the hooks stay on once a lock span has opened):
//   mutex_glibc          glibc's own lock and unlock, past the hooks: the reference
//   mutex_hooks_idle     pthread_mutex_lock and unlock (std::mutex's) before any
//                        span asked for lock profiles
//   mutex_hooks_on       the same after a lock-profiled span opened, outside spans
//   mutex_in_lock_span   the same inside a lock-profiled span
//   mutex_every_thread   the same outside spans while the continuous profile
//                        records every thread's lock waits (continuous, cpu | lock)
// Goal: the five within what a benchmark can tell apart.
#include <spanprof/spanprof.hpp>

#include <benchmark/benchmark.h>

#include <pthread.h>

#if defined(__x86_64__) || defined(__aarch64__)
extern "C" {
int bench_glibc_mutex_lock(pthread_mutex_t* mutex);
int bench_glibc_mutex_unlock(pthread_mutex_t* mutex);
#if defined(__x86_64__)
__asm__(".symver bench_glibc_mutex_lock, __pthread_mutex_lock@GLIBC_2.2.5");
__asm__(".symver bench_glibc_mutex_unlock, __pthread_mutex_unlock@GLIBC_2.2.5");
#else
__asm__(".symver bench_glibc_mutex_lock, __pthread_mutex_lock@GLIBC_2.17");
__asm__(".symver bench_glibc_mutex_unlock, __pthread_mutex_unlock@GLIBC_2.17");
#endif
}

namespace {

const spanprof::SpanContext span =
    spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902d1-01").context;

// Every case runs with spanprof started, as a lock in a profiled service does.
void mutex_glibc(benchmark::State& state) {
  spanprof::start({});
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  for (auto _ : state) {
    bench_glibc_mutex_lock(&mutex);
    bench_glibc_mutex_unlock(&mutex);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(mutex_glibc);

void mutex_hooks_idle(benchmark::State& state) {
  spanprof::start({});
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  for (auto _ : state) {
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(mutex_hooks_idle);

void mutex_hooks_on(benchmark::State& state) {
  spanprof::start({});
  { spanprof::ScopedProfile turns_them_on(spanprof::NamedSpan{span, "lock"}, spanprof::lock); }
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  for (auto _ : state) {
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(mutex_hooks_on);

void mutex_in_lock_span(benchmark::State& state) {
  spanprof::start({});
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "lock"}, spanprof::lock);
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  for (auto _ : state) {
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(mutex_in_lock_span);

void mutex_every_thread(benchmark::State& state) {
  spanprof::Options options;
  options.continuous = true;
  options.profiles = spanprof::cpu | spanprof::lock;
  spanprof::start(options);
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  for (auto _ : state) {
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
    benchmark::ClobberMemory();
  }
  spanprof::start({});  // the cases after it run without the continuous profile
}
BENCHMARK(mutex_every_thread);

}  // namespace
#endif
