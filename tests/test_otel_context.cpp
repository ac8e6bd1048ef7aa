// The two contexts spanprof publishes for profilers outside the process, read the
// way such a profiler reads them, never through spanprof's API:
//   - the thread context (OTEP 4947): otel_thread_ctx_v1 found in the .dynsym of
//     the executable's ELF file, its address in another thread's static TLS block
//     computed from that thread's thread pointer (fs base) and the PT_TLS segment,
//     then the pointer and the record read through process_vm_readv; once from
//     this process, the thread telling its fs base as the kernel keeps it, and once
//     from another process that stops the thread with ptrace and takes the fs base
//     from its registers, as a profiler does (x86-64);
//   - the process context (OTEP 4719): the OTEL_CTX mapping found in
//     /proc/self/maps, its header read and its protobuf payload decoded by the
//     tests' own reader.
// Its own program: the executable must be linked as users link spanprof (the
// symbol exported), and it defines the variable itself, so the TLS block computed
// is the executable's (a variable in a shared library would need the DTV).
#include "support/catch.hpp"
#include "support/child_process.hpp"
#include "support/protobuf_reader.hpp"

#include <spanprof/spanprof.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <elf.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <asm/prctl.h>
#endif

namespace {

// ---- reading this process's memory as another process would --------------------------

// Fails a read: a test failure in a test case, an exit code in the reader
// process (where Catch2 assertions cannot run).
void expect(bool condition, const char* what) {
  if (!condition) throw std::runtime_error(what);
}

// The process read: this one, or the parent of the reader process below.
pid_t target_pid = ::getpid();

bool read_memory(std::uintptr_t address, void* out, std::size_t size) {
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};
  return ::process_vm_readv(target_pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

template <class T>
T read_value(std::uintptr_t address) {
  T value{};
  expect(read_memory(address, &value, sizeof value), "read_memory(address, &value, sizeof value)");
  return value;
}

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---- the thread context: the ELF symbol and the static TLS block ----------------------

struct TlsSymbol {
  bool found = false;
  unsigned char type = 0;
  std::uint64_t size = 0;
  std::uint64_t value = 0;  // offset in the module's TLS block
  std::uint64_t tls_memsz = 0, tls_align = 1, tls_vaddr = 0;
};

// otel_thread_ctx_v1 in the .dynsym of the executable's file, and its PT_TLS.
TlsSymbol find_dynamic_tls_symbol(const std::string& elf, const char* name) {
  TlsSymbol out;
  expect(elf.size() > sizeof(Elf64_Ehdr), "elf.size() > sizeof(Elf64_Ehdr)");
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  expect(std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0, "std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0");
  expect(eh.e_ident[EI_CLASS] == ELFCLASS64, "eh.e_ident[EI_CLASS] == ELFCLASS64");
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, elf.data() + eh.e_phoff + i * eh.e_phentsize, sizeof ph);
    if (ph.p_type != PT_TLS) continue;
    out.tls_memsz = ph.p_memsz;
    out.tls_align = ph.p_align == 0 ? 1 : ph.p_align;
    out.tls_vaddr = ph.p_vaddr;
  }
  auto section = [&](unsigned index) {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + eh.e_shoff + index * eh.e_shentsize, sizeof sh);
    return sh;
  };
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr dynsym = section(i);
    if (dynsym.sh_type != SHT_DYNSYM) continue;
    const Elf64_Shdr strings = section(dynsym.sh_link);
    for (std::uint64_t offset = 0; offset + sizeof(Elf64_Sym) <= dynsym.sh_size; offset += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, elf.data() + dynsym.sh_offset + offset, sizeof sym);
      if (std::strcmp(elf.data() + strings.sh_offset + sym.st_name, name) != 0) continue;
      out.found = true;
      out.type = ELF64_ST_TYPE(sym.st_info);
      out.size = sym.st_size;
      out.value = sym.st_value;
    }
  }
  return out;
}

#if defined(__x86_64__)
// x86-64 places static TLS blocks below the thread pointer (TLS variant II), the
// executable's first: its block ends at the thread pointer, starting
// round_up(memsz, align) below it (glibc's rule, with the block's first byte
// aligned as p_vaddr is).
std::uintptr_t executable_tls_address(std::uintptr_t thread_pointer, const TlsSymbol& s) {
  const std::uint64_t firstbyte = (0 - (s.tls_vaddr & (s.tls_align - 1))) & (s.tls_align - 1);
  const std::uint64_t block_offset =
      (s.tls_memsz - firstbyte + s.tls_align - 1) / s.tls_align * s.tls_align + firstbyte;
  return thread_pointer - block_offset + s.value;
}

// The thread's fs base as the kernel holds it (what an eBPF profiler reads from
// the task), asked by the thread itself.
std::uintptr_t own_thread_pointer() {
  unsigned long fs = 0;
  expect(::syscall(SYS_arch_prctl, ARCH_GET_FS, &fs) == 0, "::syscall(SYS_arch_prctl, ARCH_GET_FS, &fs) == 0");
  return fs;
}
#endif

struct ReadRecord {
  bool attached = false;  // the pointer is not null
  std::uint8_t trace_id[16] = {};
  std::uint8_t span_id[8] = {};
  std::uint8_t valid = 0, trace_flags = 0;
  std::vector<std::pair<std::uint8_t, std::string>> attributes;
};

// OTEP 4947's reading protocol: the pointer, the 28-byte header, then the attributes.
ReadRecord read_thread_context(std::uintptr_t variable_address) {
  ReadRecord out;
  const auto record = read_value<std::uint64_t>(variable_address);
  if (record == 0) return out;
  out.attached = true;
  expect(record % 2 == 0, "the record is 2-byte aligned");
  std::uint8_t header[28];
  expect(read_memory(record, header, sizeof header), "read_memory(record, header, sizeof header)");
  std::memcpy(out.trace_id, header, 16);
  std::memcpy(out.span_id, header + 16, 8);
  out.valid = header[24];
  out.trace_flags = header[25];
  std::uint16_t attrs_size = 0;
  std::memcpy(&attrs_size, header + 26, 2);
  std::string attrs(attrs_size, '\0');
  expect(read_memory(record + 28, attrs.data(), attrs.size()), "read_memory(record + 28, attrs.data(), attrs.size())");
  for (std::size_t pos = 0; pos + 2 <= attrs.size();) {
    const auto key = static_cast<std::uint8_t>(attrs[pos]);
    const auto length = static_cast<std::uint8_t>(attrs[pos + 1]);
    if (pos + 2 + length > attrs.size()) break;  // an incomplete entry ends the list
    out.attributes.emplace_back(key, attrs.substr(pos + 2, length));
    pos += 2 + length;
  }
  return out;
}

// ---- the process context: the OTEL_CTX mapping ----------------------------------------

// The start of the first mapping OTEP 4719 lets a publisher leave, or 0.
std::uintptr_t find_process_context_mapping() {
  std::istringstream maps(read_file("/proc/self/maps"));
  std::string line;
  while (std::getline(maps, line)) {
    const std::size_t name = line.find_first_of("/[", line.find(' '));
    if (name == std::string::npos) continue;
    const std::string path = line.substr(name);
    if (path.rfind("/memfd:OTEL_CTX", 0) == 0 || path.rfind("[anon:OTEL_CTX]", 0) == 0 ||
        path.rfind("[anon_shmem:OTEL_CTX]", 0) == 0)
      return std::stoull(line.substr(0, line.find('-')), nullptr, 16);
  }
  return 0;
}

struct ReadProcessContext {
  std::uint32_t version = 0;
  std::uint64_t published_at_ns = 0;
  std::string payload;
};

// OTEP 4719's reading protocol: signature and version, a non-zero timestamp, the
// payload, and the same timestamp after it.
ReadProcessContext read_process_context(std::uintptr_t mapping) {
  ReadProcessContext out;
  for (int attempt = 0; attempt < 3; ++attempt) {
    char header[32];
    expect(read_memory(mapping, header, sizeof header), "read_memory(mapping, header, sizeof header)");
    expect(std::string_view(header, 8) == "OTEL_CTX", "std::string_view(header, 8) == \"OTEL_CTX\"");
    std::uint32_t payload_size = 0;
    std::uint64_t payload = 0;
    std::memcpy(&out.version, header + 8, 4);
    std::memcpy(&payload_size, header + 12, 4);
    std::memcpy(&out.published_at_ns, header + 16, 8);
    std::memcpy(&payload, header + 24, 8);
    if (out.published_at_ns == 0) continue;  // being changed
    expect(payload_size > 0, "payload_size > 0");
    expect(payload_size <= 65536, "payload_size <= 65536");  // the OTel eBPF profiler's bound
    out.payload.assign(payload_size, '\0');
    expect(read_memory(payload, out.payload.data(), payload_size), "read_memory(payload, out.payload.data(), payload_size)");
    if (read_value<std::uint64_t>(mapping + 16) == out.published_at_ns) return out;
  }
  throw std::runtime_error("the process context kept changing");
}

// proto: common.v1.KeyValue{key = 1, value = 2}, AnyValue{string_value = 1,
// int_value = 3, array_value = 5}, ArrayValue{values = 1}.
std::string any_value_text(const proto_test::Msg& any) {
  if (any.count(1) != 0) return any.bytes(1);
  if (any.count(3) != 0) return std::to_string(static_cast<std::int64_t>(any.scalar(3)));
  if (any.count(5) != 0) {
    std::string out;
    for (const auto& item : any.message(5).messages(1)) out += (out.empty() ? "" : ",") + any_value_text(item);
    return "[" + out + "]";
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> key_values(const std::vector<proto_test::Msg>& list) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : list) out.emplace_back(kv.bytes(1), any_value_text(kv.message(2)));
  return out;
}

std::string value_of(const std::vector<std::pair<std::string, std::string>>& list, const std::string& key) {
  std::string found = "(absent)";
  for (const auto& [k, v] : list)
    if (k == key) found = v;
  return found;
}

spanprof::Options quiet_options() {
  spanprof::Options options(spanprof::ignore_environment);
  options.uploaders = {std::make_shared<spanprof::CallbackUploader>(
      [](const spanprof::EncodedProfile&, std::string_view) { return spanprof::UploadResult::ok(); })};
  return options;
}

// ---- where memfd, or naming a mapping, is refused -----------------------------------

constexpr unsigned long set_vma = 0x53564d41, set_vma_anon_name = 0;  // linux/prctl.h, Linux 5.17

// seccomp makes memfd_create fail (EPERM), as a strict sandbox does; with
// `naming_too`, also prctl(PR_SET_VMA, ...).
bool refuse(bool naming_too) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_prctl, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),  // the low half, on x86-64 and arm64
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<__u32>(naming_too ? set_vma : 0xffffffffu), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// Whether this kernel names anonymous mappings (CONFIG_ANON_VMA_NAME).
bool kernel_names_anonymous_mappings() {
  const long page = ::sysconf(_SC_PAGESIZE);
  void* probe = ::mmap(nullptr, static_cast<std::size_t>(page), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) return false;
  const bool named = ::prctl(set_vma, set_vma_anon_name, reinterpret_cast<unsigned long>(probe),
                             static_cast<unsigned long>(page), reinterpret_cast<unsigned long>("probe")) == 0;
  ::munmap(probe, static_cast<std::size_t>(page));
  return named;
}

// Prints the mapping's line in /proc/self/maps and whether its context reads,
// and every error spanprof reported.
int publish_refused(bool naming_too) {
  const bool can_name = kernel_names_anonymous_mappings();
  if (!refuse(naming_too)) {
    std::printf("cannot install seccomp filter\n");
    return 3;
  }
  std::string errors;
  spanprof::set_error_handler([&](const spanprof::Error& e) {
    errors += "error " + std::string(spanprof::to_string(e.code)) + ": " + std::string(e.message) + "\n";
  });
  spanprof::Options options = quiet_options();
  options.publish_process_context = true;
  if (!spanprof::start(options)) return 4;
  std::printf("kernel names anonymous mappings: %d\n", can_name ? 1 : 0);
  std::istringstream maps(read_file("/proc/self/maps"));
  std::string line;
  while (std::getline(maps, line))
    if (line.find("OTEL_CTX") != std::string::npos) std::printf("mapping: %s\n", line.c_str());
  if (const std::uintptr_t mapping = find_process_context_mapping(); mapping != 0) {
    const ReadProcessContext context = read_process_context(mapping);
    std::printf("read: version %u, %zu payload bytes\n", context.version, context.payload.size());
  }
  std::printf("%s", errors.c_str());
  spanprof::shutdown();
  return 0;
}

const spanprof_test::ChildScenario memfd_refused("otel_ctx_memfd_refused", [] { return publish_refused(false); });
const spanprof_test::ChildScenario all_refused("otel_ctx_memfd_and_naming_refused", [] { return publish_refused(true); });

#if defined(__x86_64__)
std::string hex(const std::uint8_t* bytes, std::size_t size) {
  std::string out;
  char digits[3];
  for (std::size_t i = 0; i < size; ++i) {
    std::snprintf(digits, sizeof digits, "%02x", bytes[i]);
    out += digits;
  }
  return out;
}

// Another process, as a profiler is: stops the thread (ptrace), takes its fs base
// from its registers, finds the variable through the ELF file of /proc/<pid>/exe,
// reads the target's memory, lets the thread go and prints what it read.
int read_from_outside_as_child() {
  target_pid = static_cast<pid_t>(std::atol(std::getenv("SPANPROF_TEST_TARGET_PID")));
  const auto tid = static_cast<pid_t>(std::atol(std::getenv("SPANPROF_TEST_TARGET_TID")));
  if (::ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
    std::printf("ptrace refused: %s\n", std::strerror(errno));
    return 0;
  }
  int status = 0;
  if (::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 || ::waitpid(tid, &status, __WALL) != tid) return 5;
  user_regs_struct registers{};
  const bool got_registers = ::ptrace(PTRACE_GETREGS, tid, nullptr, &registers) == 0;
  std::string read;
  if (got_registers) {
    const TlsSymbol symbol = find_dynamic_tls_symbol(
        read_file(("/proc/" + std::to_string(target_pid) + "/exe").c_str()), "otel_thread_ctx_v1");
    const ReadRecord record = read_thread_context(executable_tls_address(registers.fs_base, symbol));
    if (!record.attached) {
      read = "null";
    } else {
      read = "trace_id=" + hex(record.trace_id, 16) + " span_id=" + hex(record.span_id, 8) +
             " valid=" + std::to_string(record.valid) + " flags=" + std::to_string(record.trace_flags);
      for (const auto& [key, value] : record.attributes) read += " attr" + std::to_string(key) + "=" + value;
    }
  }
  ::ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  if (!got_registers) return 6;
  std::printf("read: %s\n", read.c_str());
  return 0;
}
const spanprof_test::ChildScenario outside_reader("otel_ctx_read_from_outside", [] {
  try {
    return read_from_outside_as_child();
  } catch (const std::exception& e) {
    std::printf("read failed: %s\n", e.what());
    return 7;
  }
});

spanprof_test::CommandResult read_from_outside(pid_t tid) {
  ::setenv("SPANPROF_TEST_TARGET_PID", std::to_string(::getpid()).c_str(), 1);
  ::setenv("SPANPROF_TEST_TARGET_TID", std::to_string(tid).c_str(), 1);
  return spanprof_test::run_in_child("otel_ctx_read_from_outside", 30);
}
#endif

spanprof::SpanContext span_context(const char* traceparent) { return spanprof::parse_traceparent(traceparent).context; }

}  // namespace

#if defined(__x86_64__)
TEST_CASE("a profiler reads otel_thread_ctx_v1 of another thread from the ELF symbol and its TLS block",
          "[otel_context]") {
  REQUIRE(spanprof::start(quiet_options()));
  const TlsSymbol symbol = find_dynamic_tls_symbol(read_file("/proc/self/exe"), "otel_thread_ctx_v1");
  REQUIRE(symbol.found);  // exported in .dynsym: the link option of spanprof's targets
  CHECK(symbol.type == STT_TLS);
  CHECK(symbol.size == 8);
  REQUIRE(symbol.tls_memsz > 0);

  const auto span = span_context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  spanprof::RequestProfile request(span, "GET /inventory");
  REQUIRE(request.active());

  // The worker runs a fragment, says where its thread pointer is, and waits while
  // it is read; then closes the fragment and waits again.
  std::atomic<int> step{0};
  std::atomic<std::uintptr_t> thread_pointer{0};
  std::atomic<pid_t> worker_tid{0};
  auto wait_for = [&](int value) {
    while (step.load() < value) std::this_thread::yield();
  };
  std::thread worker([&] {
    thread_pointer.store(own_thread_pointer());
    worker_tid.store(static_cast<pid_t>(::syscall(SYS_gettid)));
    step.store(1);
    wait_for(2);
    {
      spanprof::Fragment fragment(request);
      step.store(3);
      wait_for(4);
    }
    step.store(5);
    wait_for(6);
  });
  // A failed REQUIRE below lets the worker go, so that it can be joined.
  struct Release {
    std::atomic<int>& step;
    std::thread& worker;
    ~Release() {
      step.store(6);
      worker.join();
    }
  } release{step, worker};

  wait_for(1);
  const std::uintptr_t variable = executable_tls_address(thread_pointer.load(), symbol);
  CHECK_FALSE(read_thread_context(variable).attached);  // no fragment yet
  step.store(2);
  wait_for(3);
  const ReadRecord inside = read_thread_context(variable);
  REQUIRE(inside.attached);
  CHECK(std::memcmp(inside.trace_id, span.trace_id.bytes().data(), 16) == 0);
  CHECK(std::memcmp(inside.span_id, span.span_id.bytes().data(), 8) == 0);
  CHECK(int(inside.valid) == 1);
  CHECK(int(inside.trace_flags) == 0x01);
  REQUIRE(inside.attributes.size() == 1);
  CHECK(int(inside.attributes[0].first) == 0);  // index 0 of threadlocal.attribute_key_map: span_name
  CHECK(inside.attributes[0].second == "GET /inventory");
  // This thread runs no fragment: its own variable, in its own block, is null.
  CHECK_FALSE(read_thread_context(executable_tls_address(own_thread_pointer(), symbol)).attached);

  // The same from another process that stops the thread and takes its fs base
  // from its registers (unless ptrace is refused here: a container's seccomp).
  const auto outside = read_from_outside(worker_tid.load());
  INFO(outside.output);
  REQUIRE(outside.exit_code == 0);
  const bool ptrace_refused = outside.output.find("ptrace refused") != std::string::npos;
  if (ptrace_refused) WARN("ptrace refused: the thread context was read from this process only");
  else CHECK(outside.output.find("read: trace_id=0af7651916cd43dd8448eb211c80319c span_id=b7ad6b7169203331 valid=1 "
                                 "flags=1 attr0=GET /inventory\n") != std::string::npos);

  step.store(4);
  wait_for(5);
  CHECK_FALSE(read_thread_context(variable).attached);  // the fragment closed
  if (!ptrace_refused) CHECK(read_from_outside(worker_tid.load()).output.find("read: null\n") != std::string::npos);
  request.discard();
  spanprof::shutdown();
}
#endif

TEST_CASE("with publish_process_context, start() publishes OTEL_CTX, a restart updates it, shutdown removes it",
          "[otel_context]") {
  spanprof::shutdown();
  REQUIRE(find_process_context_mapping() == 0);
  spanprof::Options options = quiet_options();
  options.publish_process_context = true;
  options.service_name = "inventory";
  REQUIRE(spanprof::start(options));

  const std::uintptr_t mapping = find_process_context_mapping();
  REQUIRE(mapping != 0);
  const ReadProcessContext first = read_process_context(mapping);
  CHECK(first.version == 2);
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  const std::uint64_t boot_ns = static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u + now.tv_nsec;
  CHECK(first.published_at_ns <= boot_ns);
  CHECK(first.published_at_ns > boot_ns - 60'000'000'000u);  // CLOCK_BOOTTIME, published moments ago

  const proto_test::Msg context(first.payload);  // ProcessContext{resource = 1, attributes = 2}
  const auto resource = key_values(context.message(1).messages(1));  // Resource{attributes = 1}
  CHECK(value_of(resource, "service.name") == "inventory");
  CHECK(value_of(resource, "process.pid") == std::to_string(::getpid()));
  CHECK(value_of(resource, "telemetry.sdk.name") == "spanprof");
  CHECK(value_of(resource, "telemetry.sdk.language") == "cpp");
  CHECK(value_of(resource, "telemetry.sdk.version") == SPANPROF_VERSION_STRING);
  const auto attributes = key_values(context.messages(2));
  CHECK(value_of(attributes, "threadlocal.schema_version") == "tlsdesc_v1_dev");
  CHECK(value_of(attributes, "threadlocal.attribute_key_map") == "[span_name]");

  // A restart with other options: the same mapping, a new timestamp, the new payload.
  options.service_name = "inventory-v2";
  REQUIRE(spanprof::start(options));
  CHECK(find_process_context_mapping() == mapping);
  const ReadProcessContext second = read_process_context(mapping);
  CHECK(second.published_at_ns > first.published_at_ns);
  CHECK(value_of(key_values(proto_test::Msg(second.payload).message(1).messages(1)), "service.name") ==
        "inventory-v2");

  spanprof::shutdown();
  CHECK(find_process_context_mapping() == 0);
}

TEST_CASE("without publish_process_context there is no OTEL_CTX mapping, and a restart without it removes it",
          "[otel_context]") {
  spanprof::shutdown();
  REQUIRE(spanprof::start(quiet_options()));
  CHECK(find_process_context_mapping() == 0);
  spanprof::Options on = quiet_options();
  on.publish_process_context = true;
  REQUIRE(spanprof::start(on));
  CHECK(find_process_context_mapping() != 0);
  REQUIRE(spanprof::start(quiet_options()));
  CHECK(find_process_context_mapping() == 0);
  spanprof::shutdown();
}

TEST_CASE("a forked child does not inherit the process context; it publishes its own when it starts spanprof",
          "[otel_context][fork]") {
  spanprof::Options options = quiet_options();
  options.publish_process_context = true;
  REQUIRE(spanprof::start(options));
  REQUIRE(find_process_context_mapping() != 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int code = 5;  // a failed REQUIRE while reading
    try {
      code = find_process_context_mapping() == 0 ? 0 : 1;
      if (code == 0 && !spanprof::start(options)) code = 2;
      if (code == 0 && find_process_context_mapping() == 0) code = 3;
      if (code == 0) {
        const ReadProcessContext own = read_process_context(find_process_context_mapping());
        if (value_of(key_values(proto_test::Msg(own.payload).message(1).messages(1)), "process.pid") !=
            std::to_string(::getpid()))
          code = 4;
      }
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 1: inherited, 2: no start, 3: not published, 4: the parent's pid, 5: unreadable
  spanprof::shutdown();
}

TEST_CASE("without memfd the process context is an anonymous mapping named OTEL_CTX; with neither, one error and none",
          "[otel_context]") {
  const auto anonymous = spanprof_test::run_in_child("otel_ctx_memfd_refused", 30);
  INFO(anonymous.output);
  REQUIRE(anonymous.exit_code == 0);
  CHECK(anonymous.output.find("/memfd:") == std::string::npos);
  if (anonymous.output.find("kernel names anonymous mappings: 1") != std::string::npos) {
    CHECK(anonymous.output.find("[anon:OTEL_CTX]") != std::string::npos);
    CHECK(anonymous.output.find("read: version 2") != std::string::npos);
    CHECK(anonymous.output.find("error ") == std::string::npos);
  } else {  // a kernel without CONFIG_ANON_VMA_NAME: nothing a reader could find
    CHECK(anonymous.output.find("mapping: ") == std::string::npos);
    CHECK(anonymous.output.find("error process_context_failed") != std::string::npos);
  }

  const auto neither = spanprof_test::run_in_child("otel_ctx_memfd_and_naming_refused", 30);
  INFO(neither.output);
  REQUIRE(neither.exit_code == 0);
  CHECK(neither.output.find("mapping: ") == std::string::npos);
  CHECK(neither.output.find("error process_context_failed: the process context (OTEL_CTX, OTEP 4719) is not "
                            "published: neither memfd_create nor") != std::string::npos);
}
