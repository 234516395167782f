#include "worker/kernels/blas_arch.h"

#include <blis.h>
#include <stdlib.h>

#include <string>

#include "absl/strings/str_format.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace meshcast::worker {
namespace {

// CPUID's leaf 1 and leaf 7 bits and XCR0's (Intel SDM vol. 2A, CPUID;
// vol. 1, 13.3).
constexpr unsigned kFmaBit = 1u << 12;       // leaf 1, ecx
constexpr unsigned kOsxsaveBit = 1u << 27;   // leaf 1, ecx
constexpr unsigned kXcr0Ymm = 0x6;           // XCR0: SSE and AVX state
constexpr unsigned kXcr0Zmm = 0xe0;          // XCR0: opmask, ZMM0-15, 16-31
constexpr unsigned kAvx2Bit = 1u << 5;       // leaf 7, ebx
constexpr unsigned kAvx512fBit = 1u << 16;   // leaf 7, ebx
constexpr unsigned kAvx512dqBit = 1u << 17;  // leaf 7, ebx
constexpr unsigned kAvx512bwBit = 1u << 30;  // leaf 7, ebx
constexpr unsigned kAvx512vlBit = 1u << 31;  // leaf 7, ebx

// BLIS_ARCH_TYPE's value for a sub-configuration name ChooseBlasArch gives.
int ArchNumber(const std::string& arch) {
  return arch == "skx" ? BLIS_ARCH_SKX : BLIS_ARCH_HASWELL;
}

BlasArchChoice Configure() {
  BlasArchChoice choice;
  if (const char* set = getenv("BLIS_ARCH_TYPE"); set != nullptr) {
    choice.reason = absl::StrFormat("BLIS_ARCH_TYPE=%s set", set);
  } else if (const std::optional<BlasArchRequest> request =
                 ChooseBlasArch(ReadCpuFeatures())) {
    choice.requested = request->arch;
    choice.reason = request->reason;
    // Before BLIS's first call (it reads the variable once, then).
    setenv("BLIS_ARCH_TYPE", std::to_string(ArchNumber(request->arch)).c_str(),
           /*overwrite=*/0);
  } else {
    choice.reason = "BLIS's own choice for this CPU";
  }
  // Initialize first: querying the architecture of an uninitialized BLIS
  // that was asked for one aborts the process.
  bli_init();
  choice.arch = bli_arch_string(bli_arch_query_id());
  return choice;
}

}  // namespace

CpuFeatures ReadCpuFeatures() {
  CpuFeatures cpu;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return cpu;
  cpu.x86 = true;
  const unsigned max_leaf = eax;
  // "AuthenticAMD": ebx, edx, ecx spell it.
  cpu.amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;
  // Registers the OS saves on a context switch (XCR0): a CPU feature the
  // OS has not enabled cannot be used.
  bool os_ymm = false, os_zmm = false;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0) {
    const int base = (eax >> 8) & 0xf;
    cpu.family = base == 0xf ? base + ((eax >> 20) & 0xff) : base;
    if ((ecx & kOsxsaveBit) != 0) {
      unsigned xcr0_lo = 0, xcr0_hi = 0;
      __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
      os_ymm = (xcr0_lo & kXcr0Ymm) == kXcr0Ymm;
      os_zmm = os_ymm && (xcr0_lo & kXcr0Zmm) == kXcr0Zmm;
    }
    cpu.fma = os_ymm && (ecx & kFmaBit) != 0;
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    cpu.avx2 = os_ymm && (ebx & kAvx2Bit) != 0;
    cpu.avx512f = os_zmm && (ebx & kAvx512fBit) != 0;
    cpu.avx512dq = os_zmm && (ebx & kAvx512dqBit) != 0;
    cpu.avx512bw = os_zmm && (ebx & kAvx512bwBit) != 0;
    cpu.avx512vl = os_zmm && (ebx & kAvx512vlBit) != 0;
  }
#endif
  return cpu;
}

std::optional<BlasArchRequest> ChooseBlasArch(const CpuFeatures& cpu) {
  if (!cpu.x86 || !cpu.amd) return std::nullopt;
  const bool avx512 =
      cpu.avx512f && cpu.avx512dq && cpu.avx512bw && cpu.avx512vl;
  if (cpu.family >= 0x19 && avx512) {
    return BlasArchRequest{
        "skx", absl::StrFormat("AMD family 0x%x with AVX-512: BLIS 0.9 knows "
                               "no AMD CPU with AVX-512 and would run its "
                               "generic kernels",
                               cpu.family)};
  }
  if (cpu.family >= 0x1a && cpu.avx2 && cpu.fma) {
    return BlasArchRequest{
        "haswell",
        absl::StrFormat("AMD family 0x%x with AVX2: newer than any BLIS 0.9 "
                        "knows; it would run its generic kernels",
                        cpu.family)};
  }
  return std::nullopt;
}

const BlasArchChoice& EnsureBlasArch() {
  static const BlasArchChoice* const choice = new BlasArchChoice(Configure());
  return *choice;
}

}  // namespace meshcast::worker
