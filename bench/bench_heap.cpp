// What heap profiling costs an allocating thread, side by side in one run. Each
// benchmark runs the same loop; the scope is opened once around the whole loop.
//   */no_profiling          no heap scope anywhere: tcmalloc's fast path
//   new_delete_allocator_direct  the new_delete loop calling the process
//                           allocator's own entry points (tc_new and tc_delete, or
//                           malloc/free) directly: the cost with no hooks at all,
//                           in the same binary as spanprof_bench_operator_new's
//                           no_profiling (hooks compiled in, no scope open; target
//                           <= 1.05x) and sampled_scope (target <= 1.3x). For the
//                           handler loop the baseline is spanprof_bench's
//                           handler_no_profiling (a container with a custom
//                           allocator compiles to different code).
//   */sampled_scope         inside a heap scope, default sampling engine, 512 KiB
//                           (target <= 1.3x of no_profiling)
//   */scope_on_other_thread this thread is not profiled, but another thread has a
//                           heap scope open, so tcmalloc's hooks are installed
//   */classic_scope         inside a classic (gperftools heap profiler) scope
// Two loops: `handler` builds strings and a vector the way request code does;
// `new_delete` does nothing but allocate and free (the worst case for any hook).
// Built twice: spanprof_bench (tcmalloc's MallocHook as the heap hooks) and
// spanprof_bench_operator_new (spanprof's replacement operator new/delete).
#include <spanprof/spanprof.hpp>

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <dlfcn.h>
#include <string>
#include <thread>
#include <vector>

namespace {

const spanprof::SpanContext heap_span =
    spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b8-01").context;

void start_heap(spanprof::HeapEngine engine) {
  spanprof::Options options;  // e.g. SPANPROF_HEAP_INTERVAL
  options.profiles = spanprof::heap;
  options.heap_engine = engine;
  options.thread_buffer_bytes = 32u << 20;  // room for every sample of a long run
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [](const spanprof::EncodedProfile&, std::string_view) { return spanprof::UploadResult::ok(); }));
  spanprof::start(options);
}

// The allocator's own entry points, as an unhooked program's `new` and `delete`
// reach them (through the PLT: one indirect jump, as here).
struct DirectAllocator {
  void* (*allocate)(std::size_t) = nullptr;
  void (*deallocate)(void*) noexcept = nullptr;
  template <class F>
  static F resolve(const char* name) {
    return reinterpret_cast<F>(::dlsym(RTLD_DEFAULT, name));
  }
  DirectAllocator()
      : allocate(resolve<decltype(allocate)>("tc_new")),
        deallocate(resolve<decltype(deallocate)>("tc_delete")) {
    if (allocate == nullptr || deallocate == nullptr) {
      allocate = [](std::size_t n) { return std::malloc(n); };
      deallocate = [](void* p) noexcept { std::free(p); };
    }
  }
};
const DirectAllocator direct_allocator;

__attribute__((noinline)) void handler_work() {
  std::vector<std::string> fields;
  for (int i = 0; i < 16; ++i) fields.push_back(std::string(40 + i, static_cast<char>('a' + i)));
  benchmark::DoNotOptimize(fields.data());
}

__attribute__((noinline)) void new_delete_work() {
  for (std::size_t i = 0; i < 16; ++i) {
    void* p = ::operator new(64 + 16 * i);
    benchmark::DoNotOptimize(p);
    ::operator delete(p);
  }
}
__attribute__((noinline)) void new_delete_work_direct() {
  for (std::size_t i = 0; i < 16; ++i) {
    void* p = direct_allocator.allocate(64 + 16 * i);
    benchmark::DoNotOptimize(p);
    direct_allocator.deallocate(p);
  }
}

enum class Mode { none, sampled, other_thread, classic };

template <void (*Work)()>
void alloc_loop(benchmark::State& state, Mode mode) {
  start_heap(mode == Mode::classic ? spanprof::HeapEngine::classic : spanprof::HeapEngine::sampling);
  std::atomic<bool> stop{false};
  std::atomic<bool> open{false};
  std::thread other;
  if (mode == Mode::other_thread) {
    other = std::thread([&] {
      spanprof::ScopedProfile guard(heap_span, "elsewhere");
      open.store(true);
      while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (!open.load()) std::this_thread::yield();
  }
  const auto before = spanprof::stats();
  {
    spanprof::ScopedProfile guard(heap_span, "alloc loop",
                                  mode == Mode::sampled || mode == Mode::classic ? spanprof::heap
                                                                                 : spanprof::ProfileKinds{});
    for (auto _ : state) Work();
  }
  const auto after = spanprof::stats();
  stop.store(true);
  if (other.joinable()) other.join();
  state.counters["heap_samples"] = static_cast<double>(after.heap_samples_captured - before.heap_samples_captured);
  spanprof::flush();
}

void handler_no_profiling(benchmark::State& s) { alloc_loop<handler_work>(s, Mode::none); }
void handler_sampled_scope(benchmark::State& s) { alloc_loop<handler_work>(s, Mode::sampled); }
void handler_scope_on_other_thread(benchmark::State& s) { alloc_loop<handler_work>(s, Mode::other_thread); }
void handler_classic_scope(benchmark::State& s) { alloc_loop<handler_work>(s, Mode::classic); }
void new_delete_allocator_direct(benchmark::State& s) { alloc_loop<new_delete_work_direct>(s, Mode::none); }
void new_delete_no_profiling(benchmark::State& s) { alloc_loop<new_delete_work>(s, Mode::none); }
void new_delete_sampled_scope(benchmark::State& s) { alloc_loop<new_delete_work>(s, Mode::sampled); }
void new_delete_scope_on_other_thread(benchmark::State& s) { alloc_loop<new_delete_work>(s, Mode::other_thread); }
void new_delete_classic_scope(benchmark::State& s) { alloc_loop<new_delete_work>(s, Mode::classic); }

BENCHMARK(handler_no_profiling);
BENCHMARK(handler_sampled_scope);
BENCHMARK(handler_scope_on_other_thread);
BENCHMARK(handler_classic_scope);
BENCHMARK(new_delete_allocator_direct);
BENCHMARK(new_delete_no_profiling);
BENCHMARK(new_delete_sampled_scope);
BENCHMARK(new_delete_scope_on_other_thread);
BENCHMARK(new_delete_classic_scope);

}  // namespace
