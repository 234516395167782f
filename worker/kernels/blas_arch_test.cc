#include "worker/kernels/blas_arch.h"

#include <stdlib.h>

#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

CpuFeatures Amd(int family, bool avx512) {
  CpuFeatures cpu;
  cpu.x86 = true;
  cpu.amd = true;
  cpu.family = family;
  cpu.avx2 = cpu.fma = true;
  cpu.avx512f = cpu.avx512dq = cpu.avx512bw = cpu.avx512vl = avx512;
  return cpu;
}

std::optional<std::string> Arch(const CpuFeatures& cpu) {
  const std::optional<BlasArchRequest> request = ChooseBlasArch(cpu);
  if (!request.has_value()) return std::nullopt;
  EXPECT_FALSE(request->reason.empty());
  return request->arch;
}

TEST(ChooseBlasArchTest, AmdWithAvx512AfterZen3GetsSkx) {
  EXPECT_EQ(Arch(Amd(0x1a, true)), "skx");  // Zen 5
  EXPECT_EQ(Arch(Amd(0x19, true)), "skx");  // Zen 4
}

TEST(ChooseBlasArchTest, NewAmdWithoutAvx512GetsHaswell) {
  EXPECT_EQ(Arch(Amd(0x1a, false)), "haswell");
  CpuFeatures partial = Amd(0x1a, true);
  partial.avx512bw = false;  // skx's kernels need F, DQ, BW and VL
  EXPECT_EQ(Arch(partial), "haswell");
}

TEST(ChooseBlasArchTest, CpusBlisKnowsKeepItsChoice) {
  EXPECT_EQ(Arch(Amd(0x19, false)), std::nullopt);  // Zen 3: BLIS's zen3
  EXPECT_EQ(Arch(Amd(0x17, false)), std::nullopt);  // Zen 1/2
  CpuFeatures intel = Amd(6, true);
  intel.amd = false;
  EXPECT_EQ(Arch(intel), std::nullopt);
  CpuFeatures arm;
  EXPECT_EQ(Arch(arm), std::nullopt);
}

TEST(ChooseBlasArchTest, NoAvx2NoRequest) {
  CpuFeatures old = Amd(0x1a, false);
  old.avx2 = false;
  EXPECT_EQ(Arch(old), std::nullopt);
}

#if defined(__x86_64__)
TEST(ReadCpuFeaturesTest, ReadsThisCpu) {
  const CpuFeatures cpu = ReadCpuFeatures();
  EXPECT_TRUE(cpu.x86);
  EXPECT_GE(cpu.family, 6);
  // Every AVX-512 CPU has AVX2.
  if (cpu.avx512f) {
    EXPECT_TRUE(cpu.avx2);
  }
}
#endif

TEST(EnsureBlasArchTest, BlisRunsWhatWasRequested) {
  // The first call decides, so what it reports holds for the whole
  // process, whichever test ran BLAS first.
  const BlasArchChoice& choice = EnsureBlasArch();
  EXPECT_FALSE(choice.arch.empty());
  EXPECT_FALSE(choice.reason.empty());
  if (!choice.requested.empty()) {
    EXPECT_EQ(choice.arch, choice.requested);
  }
  const std::optional<BlasArchRequest> request =
      ChooseBlasArch(ReadCpuFeatures());
  if (request.has_value() && choice.reason.rfind("BLIS_ARCH_TYPE", 0) != 0) {
    EXPECT_EQ(choice.arch, request->arch);
  }
  EXPECT_EQ(&EnsureBlasArch(), &choice);
}

}  // namespace
}  // namespace meshcast::worker
