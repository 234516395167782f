// Reading and writing one tensor element of any DType as a number.
//
// The kernels' slow paths (fp16/bf16 arithmetic, integer wrap-around), the
// initializers and the verifier of computed outputs all go through these
// functions, so that "what number does this element hold" and "how does a
// number become an element" are defined once:
//
//   double x = LoadElement(DType::kBFloat16, bytes + 2 * i);
//   StoreElement(DType::kFloat16, out + 2 * i, x + 1.0);
//
// Contract:
//  - Elements are DTypeSize(dtype) bytes, host byte order (little endian), no
//    alignment required.
//  - Floating-point stores round to nearest, ties to even, directly from the
//    double (no double rounding through float): overflow gives +-inf, NaN
//    stays NaN (a quiet NaN), tiny values become subnormals or signed zero.
//  - Integer stores truncate toward zero and then wrap to the width, as
//    int64 arithmetic followed by a narrowing store would (values beyond
//    +-2^63 wrap modulo 2^64; NaN stores 0). uint8 holds the value mod 256.
//  - int64 loads above 2^53 in magnitude are rounded by the conversion to
//    double; LoadInteger / StoreInteger keep integers exact.
//
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_KERNELS_ELEMENT_H_
#define MESHCAST_WORKER_KERNELS_ELEMENT_H_

#include <cstdint>

#include "planner/tensor.h"

namespace meshcast::worker {

// The element at `in` as a double (integers by value, floats decoded).
double LoadElement(DType dtype, const uint8_t* in);

// Writes `value` to `out`, rounded (floats) or truncated and wrapped
// (integers) to the dtype.
void StoreElement(DType dtype, uint8_t* out, double value);

// True for int8, uint8, int32, int64.
bool IsIntegerDType(DType dtype);

// Integer dtypes: the element's exact value (int8/int32/int64 signed, uint8
// in [0, 255]). Floating-point dtypes: LoadElement truncated toward zero.
int64_t LoadInteger(DType dtype, const uint8_t* in);

// Integer dtypes: `value` wrapped to the width. Floating-point dtypes: the
// nearest value (StoreElement of the double).
void StoreInteger(DType dtype, uint8_t* out, int64_t value);

// `value` wrapped to an integer dtype's width and read back (int8: the
// signed byte, uint8: 0..255); the identity for int64 and for float dtypes.
int64_t WrapInteger(DType dtype, int64_t value);

// Truncates toward zero and wraps modulo 2^64 (NaN: 0): how a double becomes
// an int64 under the rules above.
int64_t DoubleToWrappedInt64(double value);

// The bits of an IEEE-754 binary format with `exponent_bits` and
// `mantissa_bits` (fp16: 5, 10; bf16: 8, 7) nearest to `value`, ties to
// even; exposed for tests.
uint64_t RoundToFloatBits(double value, int exponent_bits, int mantissa_bits);

// Decodes such bits; exposed for tests.
double FloatBitsToDouble(uint64_t bits, int exponent_bits, int mantissa_bits);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_ELEMENT_H_
