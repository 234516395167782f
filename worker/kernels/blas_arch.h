// BlasArch: which of BLIS's kernel sets (its "sub-configurations": skx,
// haswell, zen3, ..., generic) this process's GEMMs run on, chosen once
// before the first BLAS call.
//
//   const BlasArchChoice& blas = EnsureBlasArch();   // idempotent
//   LOG: "BLAS: BLIS skx (requested: AMD family 0x1a is newer than ...)"
//
// Why: BLIS picks its kernels by the CPU's vendor, family and model, and
// Debian bookworm's BLIS (0.9) knows no AMD CPU after Zen 3: on Zen 4 and
// Zen 5 it falls back to 'generic', portable C kernels about 6x slower than
// its AVX-512 ones on the same core (a 256^3 float32 GEMM: 30 against
// 183 GFLOP/s on one Zen 5 core). Every GEMM of a CPU worker (tp_overlap,
// moe, attention, pipeline jobs) and the GEMM rate its probe reports would
// run at that speed. BLIS reads the environment variable BLIS_ARCH_TYPE
// (the arch_t number) once, when its first call initializes it; so before
// that call EnsureBlasArch sets it to the kernels the CPU's features allow
// where BLIS would pick none:
//  - an AMD CPU of family 0x19 (Zen 3 / Zen 4) or later with AVX-512 F,
//    DQ, BW and VL: skx (BLIS 0.9 has no Zen 4 or Zen 5 configuration);
//  - an AMD CPU of family 0x1a or later with AVX2 and FMA only: haswell;
//  - anything else, or BLIS_ARCH_TYPE already set by the user: BLIS's own
//    choice, untouched.
// Every entry point of worker/kernels that calls BLAS calls EnsureBlasArch
// first, so no caller has to remember it.
//
// Thread safety: EnsureBlasArch is thread-safe (runs once); the choice is
// per process. ChooseBlasArch is pure.
#ifndef MESHCAST_WORKER_KERNELS_BLAS_ARCH_H_
#define MESHCAST_WORKER_KERNELS_BLAS_ARCH_H_

#include <optional>
#include <string>

namespace meshcast::worker {

// The CPU facts the choice depends on (x86 CPUID). A vector feature counts
// only where the OS also saves its registers (XCR0).
struct CpuFeatures {
  bool x86 = false;
  bool amd = false;
  int family = 0;  // the displayed family (base + extended)
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512dq = false;
  bool avx512bw = false;
  bool avx512vl = false;
};

// This CPU's features (all false off x86).
CpuFeatures ReadCpuFeatures();

// The kernel set to request for `cpu`, by BLIS's sub-configuration name
// ("skx", "haswell"), with the reason; nullopt to leave BLIS's own choice.
struct BlasArchRequest {
  std::string arch;
  std::string reason;
};
std::optional<BlasArchRequest> ChooseBlasArch(const CpuFeatures& cpu);

struct BlasArchChoice {
  std::string arch;       // what BLIS runs: bli_arch_string, e.g. "skx"
  std::string requested;  // what was requested ("" if nothing)
  std::string reason;     // why, or why not
};

// Requests ChooseBlasArch's kernels (unless BLIS_ARCH_TYPE is set), then
// initializes BLIS and reports what it runs. Call before any BLAS call;
// later calls return the first result. The first call may setenv: a
// program with threads calls it before starting them (the worker does at
// the top of main); the kernels' own calls then find it done.
const BlasArchChoice& EnsureBlasArch();

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_BLAS_ARCH_H_
