// The process context (OpenTelemetry OTEP 4719, "process context"): a small
// mapping named OTEL_CTX that a profiler outside the process finds in
// /proc/<pid>/maps and reads, to learn which service the process is and how to
// read its threads' contexts (detail/span/thread_context.hpp): the names behind the
// attribute key indexes of otel_thread_ctx_v1's records.
//
// Opt-in (Options::publish_process_context, SPANPROF_PROCESS_CONTEXT=1):
// start() publishes it, a restart updates it, shutdown() removes it. The mapping
// is not inherited by a forked child (MADV_DONTFORK), as the OTEP asks: a child
// publishes its own when it starts spanprof. One writer: the runtime, under its
// lifecycle lock. Never on a request thread.
#ifndef SPANPROF_DETAIL_RUNTIME_PROCESS_CONTEXT_HPP_
#define SPANPROF_DETAIL_RUNTIME_PROCESS_CONTEXT_HPP_

#include <spanprof/detail/base/text.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/config.hpp>
#include <spanprof/profile/otlp_encoder.hpp>
#include <spanprof/detail/profile/protobuf_writer.hpp>
#include <spanprof/detail/span/thread_context.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

// The mapping starts with this header, as OTEP 4719 lays it out (32 bytes,
// native byte order). published_at_ns is written last and is 0 while the
// context changes: a reader reads it before and after the payload and retries
// when it differs.
struct ProcessContextHeader {
  char signature[8];              // "OTEL_CTX", no NUL
  std::uint32_t version;          // 2
  std::uint32_t payload_size;     // bytes of the protobuf ProcessContext
  std::uint64_t published_at_ns;  // CLOCK_BOOTTIME; 0: being changed
  std::uint64_t payload;          // address of the payload in this process
};
static_assert(sizeof(ProcessContextHeader) == 32, "OTEP 4719: a 32-byte header");

inline constexpr char process_context_name[] = "OTEL_CTX";
inline constexpr std::uint32_t process_context_version = 2;
// What threadlocal.schema_version says while OTEP 4947 is experimental.
inline constexpr char thread_context_schema_version[] = "tlsdesc_v1_dev";

// The protobuf ProcessContext (opentelemetry.proto.processcontext.v1development):
// `resource` (resource.v1.Resource) and `attributes` (common.v1.KeyValue), the
// thread context's reference data.
inline std::string encode_process_context(std::string_view service_name, std::int64_t pid) {
  namespace f = otlp_field;
  constexpr std::uint32_t context_resource = 1, context_attributes = 2;
  constexpr std::uint32_t any_value_array = 5, array_values = 1;  // common.v1 AnyValue.array_value, ArrayValue.values
  std::string out;
  ProtobufWriter writer(out);
  auto string_attribute = [](ProtobufWriter& kv, std::string_view key, std::string_view value) {
    kv.bytes_field(f::key_value::key, key);
    kv.message_field(f::key_value::value, [&](ProtobufWriter& any) { any.bytes_field(f::any_value::string_value, value); });
  };
  writer.message_field(context_resource, [&](ProtobufWriter& resource) {
    if (!service_name.empty())
      resource.message_field(f::resource::attributes,
                             [&](ProtobufWriter& kv) { string_attribute(kv, "service.name", service_name); });
    resource.message_field(f::resource::attributes, [&](ProtobufWriter& kv) {
      kv.bytes_field(f::key_value::key, "process.pid");
      kv.message_field(f::key_value::value, [&](ProtobufWriter& any) { any.int64_field(f::any_value::int_value, pid); });
    });
    resource.message_field(f::resource::attributes,
                           [&](ProtobufWriter& kv) { string_attribute(kv, "telemetry.sdk.name", "spanprof"); });
    resource.message_field(f::resource::attributes,
                           [&](ProtobufWriter& kv) { string_attribute(kv, "telemetry.sdk.language", "cpp"); });
    resource.message_field(f::resource::attributes, [&](ProtobufWriter& kv) {
      string_attribute(kv, "telemetry.sdk.version", SPANPROF_VERSION_STRING);
    });
  });
  writer.message_field(context_attributes, [&](ProtobufWriter& kv) {
    string_attribute(kv, "threadlocal.schema_version", thread_context_schema_version);
  });
  writer.message_field(context_attributes, [&](ProtobufWriter& kv) {
    kv.bytes_field(f::key_value::key, "threadlocal.attribute_key_map");
    kv.message_field(f::key_value::value, [&](ProtobufWriter& any) {
      any.message_field(any_value_array, [&](ProtobufWriter& array) {
        for (const char* key : thread_context_attribute_keys)  // index i is key index i of the records
          array.message_field(array_values,
                              [&](ProtobufWriter& item) { item.bytes_field(f::any_value::string_value, key); });
      });
    });
  });
  return out;
}

// Publishes, updates and removes the OTEL_CTX mapping: the header, then the
// payload, in one private mapping of a page or two.
class ProcessContextPublisher {
 public:
  ProcessContextPublisher() noexcept = default;
  ProcessContextPublisher(const ProcessContextPublisher&) = delete;
  ProcessContextPublisher& operator=(const ProcessContextPublisher&) = delete;

  // Publishes the context, or updates the one published. False (reported) when
  // it could not: then none is published.
  bool publish(std::string_view service_name) noexcept {
    std::string payload;
    SPANPROF_TRY {
      payload = encode_process_context(service_name, ::getpid());
    } SPANPROF_CATCH_ALL {
      return failed("out of memory encoding the process context");
    }
    if (mapping_ != nullptr && sizeof(ProcessContextHeader) + payload.size() <= mapping_size_) {
      update(payload);
      return true;
    }
    withdraw();
    return create(payload);
  }

  // Removes the mapping, if any.
  void withdraw() noexcept {
    if (mapping_ == nullptr) return;
    mark_changing();  // a reader mid-read sees a change
    ::munmap(mapping_, mapping_size_);
    mapping_ = nullptr;
    mapping_size_ = 0;
  }

  // A forked child has no mapping (MADV_DONTFORK): forget the parent's address,
  // which the child may reuse for anything.
  void forget_after_fork() noexcept {
    mapping_ = nullptr;
    mapping_size_ = 0;
  }

 private:
  ProcessContextHeader* header() const noexcept { return static_cast<ProcessContextHeader*>(mapping_); }
  char* payload_area() const noexcept { return static_cast<char*>(mapping_) + sizeof(ProcessContextHeader); }

  // The publication protocol of OTEP 4719: a memfd named OTEL_CTX (so that the
  // mapping is named even where the kernel cannot name anonymous mappings), else an
  // anonymous mapping; not inherited by fork; the timestamp written last; then
  // the mapping named by prctl, which may fail (Linux < 5.17, or a kernel without
  // CONFIG_ANON_VMA_NAME). Without both a memfd and a name no reader can find it.
  bool create(const std::string& payload) noexcept {
    const long page = ::sysconf(_SC_PAGESIZE);
    const std::size_t wanted = sizeof(ProcessContextHeader) + payload.size();
    const std::size_t size = (wanted + static_cast<std::size_t>(page) - 1) / static_cast<std::size_t>(page) *
                             static_cast<std::size_t>(page);
    void* mapping = MAP_FAILED;
    const int memfd = create_memfd();
    if (memfd >= 0) {
      if (::ftruncate(memfd, static_cast<off_t>(size)) == 0)
        mapping = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, memfd, 0);
      ::close(memfd);  // the mapping keeps the file; /proc/<pid>/maps still names it
    }
    const bool named_file = mapping != MAP_FAILED;
    if (!named_file) mapping = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) return failed("mmap failed", errno);
    if (::madvise(mapping, size, MADV_DONTFORK) != 0) {
      const int error = errno;
      ::munmap(mapping, size);
      return failed("madvise(MADV_DONTFORK) failed", error);
    }
    mapping_ = mapping;
    mapping_size_ = size;
    ProcessContextHeader* h = header();
    std::memcpy(payload_area(), payload.data(), payload.size());
    std::memcpy(h->signature, process_context_name, sizeof h->signature);
    h->version = process_context_version;
    h->payload_size = static_cast<std::uint32_t>(payload.size());
    h->payload = reinterpret_cast<std::uintptr_t>(payload_area());
    mark_published();
    if (!name_mapping() && !named_file) {
      withdraw();
      return failed("neither memfd_create nor naming an anonymous mapping (prctl PR_SET_VMA_ANON_NAME) works here");
    }
    return true;
  }

  // The updating protocol: timestamp 0, the new payload, a new timestamp, the name again.
  void update(const std::string& payload) noexcept {
    mark_changing();
    std::memcpy(payload_area(), payload.data(), payload.size());
    header()->payload_size = static_cast<std::uint32_t>(payload.size());
    mark_published();
    name_mapping();
  }

  // The OTEP's barriers, as atomic operations on the timestamp itself (the reader
  // is another process: the ordering must hold for the CPU, not only the
  // compiler). Zero, by a read-modify-write whose acquire half keeps the payload
  // writes after it; then the new timestamp, by a store whose release half keeps
  // them before it.
  void mark_changing() noexcept { (void)__atomic_exchange_n(&header()->published_at_ns, 0, __ATOMIC_SEQ_CST); }
  void mark_published() noexcept { __atomic_store_n(&header()->published_at_ns, next_timestamp(), __ATOMIC_SEQ_CST); }

  static int create_memfd() noexcept {
    constexpr unsigned noexec_seal = 0x0008U;  // MFD_NOEXEC_SEAL (Linux 6.3), newer than glibc 2.36's headers
    const int fd = ::memfd_create(process_context_name, MFD_CLOEXEC | MFD_ALLOW_SEALING | noexec_seal);
    if (fd >= 0) return fd;
    return ::memfd_create(process_context_name, MFD_CLOEXEC | MFD_ALLOW_SEALING);  // an older kernel refuses the flag
  }

  bool name_mapping() noexcept {
    constexpr int set_vma = 0x53564d41, set_vma_anon_name = 0;  // linux/prctl.h, Linux 5.17
    return ::prctl(set_vma, set_vma_anon_name, reinterpret_cast<unsigned long>(mapping_), mapping_size_,
                   reinterpret_cast<unsigned long>(process_context_name)) == 0;
  }

  // CLOCK_BOOTTIME, and never the same value twice: readers take an unchanged
  // timestamp for an unchanged context.
  std::uint64_t next_timestamp() noexcept {
    timespec now{};
    ::clock_gettime(CLOCK_BOOTTIME, &now);
    std::uint64_t ns = static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(now.tv_nsec);
    if (ns <= last_published_ns_) ns = last_published_ns_ + 1;
    last_published_ns_ = ns;
    return ns;
  }

  static bool failed(const char* what, int error = 0) noexcept {
    char message[200];
    std::snprintf(message, sizeof message, "the process context (OTEL_CTX, OTEP 4719) is not published: %s%s%s", what,
                  error != 0 ? ": " : "", error != 0 ? error_text(error) : "");
    report_error(ErrorCode::process_context_failed, message);
    return false;
  }

  void* mapping_ = nullptr;
  std::size_t mapping_size_ = 0;
  std::uint64_t last_published_ns_ = 0;
};

}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_RUNTIME_PROCESS_CONTEXT_HPP_
