// Writes the seed corpus of the fuzz targets from what spanprof and the libraries
// it reads really produce: gperftools' CPU and heap profiles, spool files and
// names from a spool filled during a simulated outage, the pprof payloads inside
// them, response heads libcurl hands to a header callback, this process's vDSO,
// the records the sampling engines write, symbol names of this binary, and
// headers and environment values as the docs show them.
//
// Run by make_seeds.sh (which builds it with libprofiler, tcmalloc and libcurl):
//   make_seeds <output directory>
// Each target's seeds land in <output directory>/<target>/, in the input layout
// its fuzz_<target>.cpp describes.
#include <spanprof/spanprof.hpp>

#include <spanprof/detail/capture/classic_cpu_engine.hpp>
#include <spanprof/detail/capture/classic_heap_engine.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/delivery/spool.hpp>
#include <spanprof/detail/runtime/settings.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>

#include "support/http_server.hpp"

#include <curl/curl.h>
#include <execinfo.h>
#include <gperftools/malloc_extension.h>
#include <sys/auxv.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace sd = spanprof::detail;

std::string out_root;

void write_seed(const std::string& target, const std::string& name, std::string_view bytes) {
  const std::string dir = out_root + "/" + target;
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "make_seeds: %s\n", what.c_str());
  std::exit(1);
}

// ---- work to profile ------------------------------------------------------------

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

volatile double sink;

__attribute__((noinline)) void spin(int ms) {
  const std::int64_t deadline = thread_cpu_ns() + ms * 1'000'000LL;
  double x = 1;
  while (thread_cpu_ns() < deadline)
    for (int i = 1; i < 10000; ++i) x += 1.0 / i;
  sink = x;
}

__attribute__((noinline)) void price(int ms) { spin(ms); }
__attribute__((noinline)) void search(int ms) {
  spin(ms / 2);
  price(ms / 2);
}

__attribute__((noinline)) std::vector<std::unique_ptr<char[]>> allocate(std::size_t count, std::size_t size) {
  std::vector<std::unique_ptr<char[]>> blocks;
  for (std::size_t i = 0; i < count; ++i) {
    blocks.emplace_back(new char[size]);
    std::memset(blocks.back().get(), 1, size);
  }
  return blocks;
}

__attribute__((noinline)) std::vector<std::unique_ptr<char[]>> cache_fill() { return allocate(64, 4096); }

// ---- gperftools ------------------------------------------------------------------

void cpu_profiles() {
  for (const int ms : {300, 0}) {
    if (sd::classic_engine_start() != sd::ClassicStart::started) die("the classic CPU engine did not start");
    if (ms > 0) search(ms);
    std::string path;
    sd::classic_engine_stop([&path](const char* file) noexcept { path = file; });
    write_seed("cpu_profile", ms > 0 ? "classic-busy.prof" : "classic-idle.prof", read_file(path));
    ::unlink(path.c_str());
  }
}

void heap_profiles() {
  if (sd::classic_heap_start() != sd::ClassicHeapStart::started)
    die("the classic heap engine did not start (tcmalloc not the allocator?)");
  auto kept = cache_fill();
  auto more = allocate(16, 100);
  more.clear();
  char* text = sd::classic_heap_stop();
  if (text == nullptr) die("GetHeapProfile returned nothing");
  write_seed("heap_profile", "classic.heap", text);
  std::free(text);

  // tcmalloc's sampled dump ("heap_v2/<period>"): make_seeds.sh sets
  // TCMALLOC_SAMPLE_PARAMETER so that there is something to sample.
  auto sampled = allocate(256, 8192);
  std::string sample;
  MallocExtension::instance()->GetHeapSample(&sample);
  if (sample.rfind("heap profile:", 0) != 0) die("GetHeapSample gave no heap profile");
  write_seed("heap_profile", "sampled.heap", sample);
}

// ---- a spool filled during an outage -----------------------------------------------

std::string with_uploader(std::string_view uploader, std::string_view file) {
  std::string input(1, static_cast<char>(uploader.size()));
  input.append(uploader.data(), uploader.size());
  input += '\0';  // flags: the file as it is
  input.append(file.data(), file.size());
  return input;
}

void spool_files() {
  const std::string directory = out_root + "/.spool";
  const std::string dead = "http://127.0.0.1:" + std::to_string(spanprof_test::HttpServer::unused_port());
  spanprof::set_error_handler({});  // the outage is the point

  spanprof::Options options(spanprof::ignore_environment);
  options.profiles = spanprof::cpu | spanprof::wall;
  options.frequency_hz = 250;
  options.retry.max_attempts = 1;
  options.spool_directory = directory;
  auto callback = std::make_shared<spanprof::CallbackUploader>(
      [](const spanprof::EncodedProfile&, std::string_view) { return spanprof::UploadResult::retryable("backend down"); }, "callback");
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = dead;
  pyroscope.application_name = "checkout";
  pyroscope.delivery = spanprof::Delivery::per_span();
  spanprof::OtlpOptions otlp;
  otlp.endpoint = dead;
  otlp.delivery = spanprof::Delivery::per_span();
  options.uploaders = {callback, std::make_shared<spanprof::PyroscopeUploader>(pyroscope),
                       std::make_shared<spanprof::OtlpUploader>(otlp)};
  spanprof::start(options);
  {
    const auto span = spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span.context, "POST /checkout"});
    search(60);
  }
  {
    const auto span = spanprof::parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span.context, "GET /search"});
    price(40);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  spanprof::flush(std::chrono::seconds(30));
  spanprof::shutdown(std::chrono::seconds(10));

  sd::Spool spool(directory, std::uint64_t{1} << 30);
  if (const spanprof::Status opened = spool.open(); !opened) die(opened.message());
  int files = 0;
  for (const std::string uploader : {"callback", "pyroscope", "otlp"}) {
    int n = 0;
    for (const sd::SpoolItem& item : spool.pending(uploader)) {
      const std::string file = read_file(directory + "/" + item.file_name);
      const std::string tag = uploader + "-" + std::to_string(n++);
      write_seed("spool_file", tag, with_uploader(uploader, file));
      write_seed("report_reader", tag + ".spool", file);
      write_seed("spool_name", tag, item.file_name);
      if (n == 1) write_seed("spool_name", tag + ".tmp", sd::spool_format::temp_name(item.file_name));
      spanprof::EncodedProfile metadata;
      std::string payload;
      if (const spanprof::Status loaded = spool.load(item, metadata, payload); !loaded) die(loaded.message());
      if (payload.rfind("\x1f\x8b", 0) == 0) write_seed("gzip", tag + ".gz", payload);
      if (uploader == "callback" && n <= 2) write_seed("report_reader", tag + ".pb.gz", payload);
      ++files;
    }
  }
  if (files == 0) die("nothing was spooled");
  write_seed("spool_name", "lock", sd::spool_format::lock_name);
  for (const sd::SpoolItem& item : spool.pending("callback")) spool.remove(item);
  for (const sd::SpoolItem& item : spool.pending("pyroscope")) spool.remove(item);
  for (const sd::SpoolItem& item : spool.pending("otlp")) spool.remove(item);
}

// ---- HTTP responses, as libcurl hands them to a header callback -------------------

std::size_t append_to(char* data, std::size_t size, std::size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

std::string http_date(std::time_t when) {
  char text[64];
  std::tm tm{};
  gmtime_r(&when, &tm);
  std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return text;
}

void http_responses() {
  spanprof_test::HttpServer server;
  const std::time_t now = std::time(nullptr);
  using spanprof_test::Response;
  const std::vector<std::pair<std::string, Response>> responses = {
      {"ok", Response::status(200)},
      {"throttled", Response::retry_after(429, 7)},
      {"unavailable-date",
       Response::status(503, "upstream overloaded\n").with_header("Retry-After", http_date(now + 120))},
      {"redirect", Response::status(301).with_header("Location", "/ingest")},
      {"error-body", Response::status(400, "{\"code\":3,\"message\":\"invalid profile\"}")},
  };
  for (const auto& [name, response] : responses) server.push(response);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  for (const auto& [name, response] : responses) {
    CURL* curl = curl_easy_init();
    std::string head, body;
    curl_easy_setopt(curl, CURLOPT_URL, server.url("/ingest").c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "profile");
    curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &append_to);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &head);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append_to);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    if (curl_easy_perform(curl) != CURLE_OK) die("no response from the test server");
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    std::string input;
    for (int shift = 24; shift >= 0; shift -= 8)
      input += static_cast<char>((static_cast<std::uint32_t>(now) >> shift) & 0xff);
    input += static_cast<char>(status >> 8);
    input += static_cast<char>(status & 0xff);
    write_seed("http_response", name, input + head + body);
  }
}

// ---- ELF: this process's vDSO, as the symbolizer reads it ------------------------

void vdso() {
  const auto* image = reinterpret_cast<const unsigned char*>(::getauxval(AT_SYSINFO_EHDR));
  if (image == nullptr) die("no vDSO");
  Elf64_Ehdr header;
  std::memcpy(&header, image, sizeof header);
  const std::size_t size = header.e_shoff + std::size_t{header.e_shnum} * header.e_shentsize;
  write_seed("elf", "vdso", std::string("\x01", 1) + std::string(reinterpret_cast<const char*>(image), size));
}

// ---- symbol names of this binary, as load_elf_function_symbols reads them ---------

void symbol_names() {
  std::vector<sd::ElfSymbol> symbols;
  if (const spanprof::Status read = sd::load_elf_function_symbols("/proc/self/exe", 0, symbols); !read)
    die(read.message());
  int mangled = 0, cloned = 0, plain = 0;
  for (const sd::ElfSymbol& symbol : symbols) {
    const std::string& name = symbol.name;
    const bool is_clone = name.find('.') != std::string::npos;
    int& count = is_clone ? cloned : name.rfind("_Z", 0) == 0 ? mangled : plain;
    if (count >= 8 || name.size() > 200) continue;
    write_seed("symbol_name",
               (is_clone                   ? "clone-"
                : name.rfind("_Z", 0) == 0 ? "mangled-"
                                           : "plain-") +
                   std::to_string(count++),
               name);
  }
}

// ---- the records the sampling engines write ----------------------------------------

__attribute__((noinline)) void stack_records() {
  void* stack[32];
  const int depth = ::backtrace(stack, 32);
  std::vector<std::uint64_t> words(64 + 4 * depth);
  std::size_t used = 0;
  // A CPU record (1 period, 10 ms), a wall record (the tag and 30 ms), as the signal handler writes them.
  for (const std::uint64_t weight : {sd::cpu_record_weight(1, 10'000'000), sd::wall_record_tag | 30'000'000}) {
    sd::write_stack_record(words.data() + used, weight, reinterpret_cast<std::uintptr_t>(stack[0]), stack + 1, depth);
    used += sd::stack_record_words(depth);
  }
  words.resize(used);
  write_seed("sample_records", "stack", std::string(reinterpret_cast<const char*>(words.data()), used * 8));

  std::vector<std::uint64_t> handoff;
  std::vector<std::uint64_t> pcs;
  for (int i = 0; i < depth; ++i) pcs.push_back(reinterpret_cast<std::uintptr_t>(stack[i]));
  for (const std::uint64_t size : {64, 4096, 1 << 20}) {
    const sd::HeapLogRecord record{size, 0, 0, static_cast<std::size_t>(depth), pcs.data()};
    sd::append_heap_handoff_record(handoff, record, size != 4096);
  }
  write_seed("sample_records", "heap-handoff",
             std::string(reinterpret_cast<const char*>(handoff.data()), handoff.size() * 8));
}

// ---- text: traceparent headers and environment values --------------------------------

void traceparents() {
  std::mt19937_64 random(2024);
  for (int i = 0; i < 3; ++i) {
    spanprof::SpanContext context;
    std::uint8_t bytes[24];
    for (auto& b : bytes) b = static_cast<std::uint8_t>(random());
    context.trace_id = spanprof::TraceId(bytes);
    context.span_id = spanprof::SpanId(bytes + 16);
    context.flags.value = static_cast<std::uint8_t>(i == 0 ? 0 : 1);
    write_seed("traceparent", "formatted-" + std::to_string(i), spanprof::format_traceparent(context));
  }
  // The W3C specification's examples: the header, and a later version's extra fields.
  write_seed("traceparent", "w3c", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  write_seed("traceparent", "w3c-future",
             "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-will-be-like");
}

void environments() {
  // The target picks the n-th row of the settings table that has a variable, n the
  // first byte modulo their number. The byte is n plus that number, never 0: a NUL
  // would end the record.
  const auto record = [](const char* name, std::string_view value) {
    std::size_t index = 0, count = 0;
    bool found = false;
    for (const sd::Setting& row : sd::settings) {
      if (row.variable == nullptr) continue;
      if (!found && std::string_view(row.variable) == name) {
        index = count;
        found = true;
      }
      ++count;
    }
    if (!found) die(std::string("no variable ") + name);
    std::string r(1, static_cast<char>(index + count));
    r.append(value.data(), value.size());
    return r + '\0';
  };
  // The configurations docs/configuration.md walks through.
  write_seed("environment", "capture",
             record("SPANPROF_PROFILES", "cpu,wall") + record("SPANPROF_ENGINE", "sampling") +
                 record("SPANPROF_SOURCE", "perf_event") + record("SPANPROF_FREQUENCY", "250") +
                 record("SPANPROF_WALL_FREQUENCY", "100") + record("SPANPROF_SIGNAL", "0") +
                 record("SPANPROF_HEAP_ENGINE", "classic") + record("SPANPROF_HEAP_INTERVAL", "524288"));
  write_seed("environment", "sampling",
             record("SPANPROF_SAMPLER", "parentbased_traceidratio") + record("SPANPROF_SAMPLER_ARG", "0.25") +
                 record("SPANPROF_MAX_PROFILES_PER_SECOND", "2.5") + record("SPANPROF_KEEP", "slow,error") +
                 record("SPANPROF_SLOW_THRESHOLD_MS", "250") + record("SPANPROF_TRIGGER_FACTOR", "3") +
                 record("SPANPROF_TRIGGER_SPANS", "5"));
  write_seed("environment", "delivery",
             record("SPANPROF_OUTPUT_DIR", "/var/tmp/spanprof-profiles") +
                 record("SPANPROF_SPOOL_DIR", "/var/tmp/spanprof-spool") + record("SPANPROF_SPOOL_MAX_MB", "256") +
                 record("SPANPROF_UPLOAD_ATTEMPTS", "3") + record("SPANPROF_QUEUE_OVERFLOW", "drop_oldest"));
  write_seed("environment", "pyroscope",
             record("OTEL_SERVICE_NAME", "checkout") + record("PYROSCOPE_SERVER_ADDRESS", "http://pyroscope:4040") +
                 record("PYROSCOPE_APPLICATION_NAME", "checkout-service") +
                 record("PYROSCOPE_BASIC_AUTH_USER", "123456") + record("PYROSCOPE_BASIC_AUTH_PASSWORD", "glc_secret") +
                 record("PYROSCOPE_TENANT_ID", "team-a") + record("SPANPROF_UPLOAD_WINDOW_MS", "10000"));
  write_seed("environment", "otlp",
             record("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318") +
                 record("OTEL_EXPORTER_OTLP_HEADERS", "api-key=secret%20value,x-tenant=a") +
                 record("OTEL_RESOURCE_ATTRIBUTES", "service.name=checkout,deployment.environment=prod") +
                 record("SPANPROF_UPLOAD_WINDOW_MS", "0"));
  write_seed("environment", "refused",
             record("SPANPROF_FREQUENCY", "fast") + record("SPANPROF_KEEP", "sometimes") +
                 record("PYROSCOPE_SERVER_ADDRESS", "pyroscope:4040"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) die("usage: make_seeds <output directory>");
  out_root = argv[1];
  cpu_profiles();
  heap_profiles();
  spool_files();
  http_responses();
  vdso();
  symbol_names();
  stack_records();
  traceparents();
  environments();
  return 0;
}
