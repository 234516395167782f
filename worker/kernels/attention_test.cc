#include "worker/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/kernels/element.h"
#include "worker/kernels/initializer.h"

namespace meshcast::worker {
namespace {

const DType kFloatTypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                             DType::kFloat64};

// n elements uniform in [-1, 1), stored in `dtype`.
std::vector<uint8_t> Random(DType dtype, int64_t n, int tensor) {
  TensorSpec spec{{n}, dtype};
  std::vector<uint8_t> buf(n * DTypeSize(dtype));
  v1::Initializer init;
  init.set_kind(v1::Initializer::KIND_RANDOM);
  init.set_seed(91);
  EXPECT_TRUE(
      FillInitializer(absl::MakeSpan(buf), spec.full_box(), spec, tensor, init)
          .ok());
  return buf;
}

std::vector<double> Loaded(DType dtype, const std::vector<uint8_t>& bytes) {
  const int size = DTypeSize(dtype);
  std::vector<double> values(bytes.size() / size);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = LoadElement(dtype, bytes.data() + i * size);
  }
  return values;
}

double UnitRoundoff(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return std::ldexp(1.0, -11);
    case DType::kBFloat16:
      return std::ldexp(1.0, -8);
    case DType::kFloat32:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

// The kernels' accumulator: double for float64, float otherwise.
double AccumulatorRoundoff(DType dtype) {
  return dtype == DType::kFloat64 ? std::ldexp(1.0, -53)
                                  : std::ldexp(1.0, -24);
}

v1::AttentionBlockAttrs Attrs(int64_t batch, int64_t heads, int64_t kv_heads,
                              int64_t q_rows, int64_t kv_rows,
                              int64_t head_dim) {
  v1::AttentionBlockAttrs a;
  a.set_batch(batch);
  a.set_heads(heads);
  a.set_kv_heads(kv_heads);
  a.set_q_rows(q_rows);
  a.set_kv_rows(kv_rows);
  a.set_head_dim(head_dim);
  return a;
}

v1::AttentionFinishAttrs Finish(int64_t head_dim) {
  v1::AttentionFinishAttrs f;
  f.set_head_dim(head_dim);
  return f;
}

// One block's keys and values (float64 views of the dtype's values) and
// positions.
struct KvBlock {
  std::vector<double> k, v;
  std::vector<int64_t> pos;
  int64_t rows = 0;
};

// softmax(scale Q K^T, causal mask) V over every key of `blocks`, directly
// in float64, per O element; also, per element, sum_j w_j |v_j| (w the
// softmax weights: the scale of the kernel's errors) and the largest
// |scale| sum_c |q_c k_jc| of any kept key.
struct Direct {
  std::vector<double> o, mag;
  double e_max = 0;
};
Direct DirectAttention(const v1::AttentionBlockAttrs& a,
                       const std::vector<double>& q,
                       const std::vector<KvBlock>& blocks) {
  const int64_t d = a.head_dim(), group = a.heads() / a.kv_heads();
  const double scale =
      a.scale() != 0 ? a.scale() : 1 / std::sqrt(static_cast<double>(d));
  Direct out;
  out.o.assign(a.batch() * a.heads() * a.q_rows() * d, 0.0);
  out.mag = out.o;
  for (int64_t b = 0; b < a.batch(); ++b) {
    for (int64_t h = 0; h < a.heads(); ++h) {
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < a.q_rows(); ++i) {
        const int64_t row = (b * a.heads() + h) * a.q_rows() + i;
        const double* qi = q.data() + row * d;
        std::vector<double> s;
        std::vector<const double*> vs;
        for (const KvBlock& blk : blocks) {
          for (int64_t j = 0; j < blk.rows; ++j) {
            if (a.causal() && blk.pos[j] > a.q_position(i)) continue;
            const int64_t at = ((b * a.kv_heads() + kvh) * blk.rows + j) * d;
            double dot = 0, e = 0;
            for (int64_t c = 0; c < d; ++c) {
              dot += qi[c] * blk.k[at + c];
              e += std::abs(qi[c] * blk.k[at + c]);
            }
            s.push_back(scale * dot);
            vs.push_back(blk.v.data() + at);
            out.e_max = std::max(out.e_max, std::abs(scale) * e);
          }
        }
        if (s.empty()) continue;  // O = 0
        const double m = *std::max_element(s.begin(), s.end());
        double l = 0;
        for (double& x : s) l += (x = std::exp(x - m));
        for (size_t j = 0; j < s.size(); ++j) {
          for (int64_t c = 0; c < d; ++c) {
            out.o[row * d + c] += s[j] / l * vs[j][c];
            out.mag[row * d + c] += s[j] / l * std::abs(vs[j][c]);
          }
        }
      }
    }
  }
  return out;
}

// The kernels' O against the direct one. Tolerance per element: (2 blocks
// + 1) u (o and l stored to the dtype by each block, O by the finish; m's
// rounding cancels in o / l) plus u_acc (2 (head_dim + 2) e_max + keys + 8
// blocks) (the scores' dot products, which enter p_j through s_j and m
// both, the sums of p and p v, the exponentials, the rescaling by f and
// the division, in the accumulator), over sum_j w_j |v_j|; plus two fp16
// subnormal steps for results near 0.
void ExpectNearDirect(DType dtype, const v1::AttentionBlockAttrs& a,
                      const std::vector<uint8_t>& out, const Direct& direct,
                      int64_t keys, int blocks) {
  const double u = UnitRoundoff(dtype), u_acc = AccumulatorRoundoff(dtype);
  const double rel = (2 * blocks + 1) * u +
                     u_acc * (2 * (a.head_dim() + 2) * direct.e_max + keys +
                              8 * blocks);
  const std::vector<double> got = Loaded(dtype, out);
  ASSERT_EQ(got.size(), direct.o.size());
  int checked = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    ASSERT_FALSE(std::isnan(got[e])) << e;
    ASSERT_NEAR(got[e], direct.o[e],
                rel * direct.mag[e] + (dtype == DType::kFloat16
                                           ? std::ldexp(1.0, -23)
                                           : 1e-300))
        << DTypeName(dtype) << " element " << e;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

KvBlock MakeBlock(DType dtype, const v1::AttentionBlockAttrs& a, int seed,
                  std::vector<uint8_t>* k, std::vector<uint8_t>* v) {
  const int64_t n = a.batch() * a.kv_heads() * a.kv_rows() * a.head_dim();
  *k = Random(dtype, n, seed);
  *v = Random(dtype, n, seed + 1);
  KvBlock blk;
  blk.k = Loaded(dtype, *k);
  blk.v = Loaded(dtype, *v);
  blk.pos.assign(a.kv_position().begin(), a.kv_position().end());
  blk.rows = a.kv_rows();
  return blk;
}

int64_t StateElements(const v1::AttentionBlockAttrs& a) {
  return a.batch() * a.heads() * a.q_rows() * (a.head_dim() + 2);
}

// Grouped-query attention (4 heads on 2 kv heads), 70 query rows (two
// tiles) against 300 keys (two chunks), in every float dtype: one block
// from an empty state, then the finish, against softmax(QK^T / sqrt(d)) V
// in float64. The state's m is the largest score, rounded to the dtype.
TEST(AttentionTest, BlockThenFinishMatchesDirectAttention) {
  const v1::AttentionBlockAttrs a = Attrs(2, 4, 2, 70, 300, 16);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const std::vector<uint8_t> q =
        Random(dtype, a.batch() * a.heads() * a.q_rows() * a.head_dim(), 1);
    std::vector<uint8_t> k, v;
    const KvBlock blk = MakeBlock(dtype, a, 2, &k, &v);
    std::vector<uint8_t> state(StateElements(a) * size, 0xAB);
    ASSERT_TRUE(RunAttentionBlock(a, dtype, q, k, v, {}, absl::MakeSpan(state))
                    .ok());
    std::vector<uint8_t> out(a.batch() * a.heads() * a.q_rows() *
                             a.head_dim() * size);
    ASSERT_TRUE(RunAttentionFinish(Finish(a.head_dim()), dtype, state,
                                   absl::MakeSpan(out))
                    .ok());
    const Direct direct = DirectAttention(a, Loaded(dtype, q), {blk});
    ExpectNearDirect(dtype, a, out, direct, a.kv_rows(), 1);
    // m of row 0 (b 0, head 0, query 0): the largest score, rounded once.
    const std::vector<double> s = Loaded(dtype, state);
    const std::vector<double> qv = Loaded(dtype, q);
    double best = -1e300;
    for (int64_t j = 0; j < a.kv_rows(); ++j) {
      double dot = 0;
      for (int64_t c = 0; c < 16; ++c) dot += qv[c] * blk.k[j * 16 + c];
      best = std::max(best, dot / 4);
    }
    EXPECT_NEAR(s[16], best,
                UnitRoundoff(dtype) * std::abs(best) +
                    AccumulatorRoundoff(dtype) * 20 * direct.e_max);
    EXPECT_GE(s[17], 1.0 - 1e-2);  // l >= exp(0) of the maximum's key
  }
}

// K and V split in two consecutive blocks (130 then 170 keys, the second
// in place on the first's state, and in the other order) give what one
// block over all 300 keys gives, and the direct attention.
TEST(AttentionTest, TwoBlocksEqualOneOverAllKeys) {
  const v1::AttentionBlockAttrs all = Attrs(1, 4, 2, 9, 300, 8);
  v1::AttentionBlockAttrs first = all, second = all;
  first.set_kv_rows(130);
  second.set_kv_rows(170);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const int64_t d = all.head_dim();
    const std::vector<uint8_t> q = Random(dtype, 4 * 9 * d, 1);
    std::vector<uint8_t> k, v;
    const KvBlock blk = MakeBlock(dtype, all, 2, &k, &v);
    // The halves per kv head: rows [0, 130) and [130, 300).
    std::vector<uint8_t> k1, v1, k2, v2;
    for (int64_t kvh = 0; kvh < 2; ++kvh) {
      const int64_t at = kvh * 300 * d * size;
      k1.insert(k1.end(), k.begin() + at, k.begin() + at + 130 * d * size);
      v1.insert(v1.end(), v.begin() + at, v.begin() + at + 130 * d * size);
      k2.insert(k2.end(), k.begin() + at + 130 * d * size,
                k.begin() + at + 300 * d * size);
      v2.insert(v2.end(), v.begin() + at + 130 * d * size,
                v.begin() + at + 300 * d * size);
    }
    const int64_t out_bytes = 4 * 9 * d * size;
    std::vector<uint8_t> one(StateElements(all) * size), one_out(out_bytes);
    ASSERT_TRUE(
        RunAttentionBlock(all, dtype, q, k, v, {}, absl::MakeSpan(one)).ok());
    ASSERT_TRUE(RunAttentionFinish(Finish(d), dtype, one,
                                   absl::MakeSpan(one_out))
                    .ok());
    std::vector<uint8_t> split(StateElements(all) * size), split_out(out_bytes);
    ASSERT_TRUE(
        RunAttentionBlock(first, dtype, q, k1, v1, {}, absl::MakeSpan(split))
            .ok());
    ASSERT_TRUE(RunAttentionBlock(second, dtype, q, k2, v2, split,
                                  absl::MakeSpan(split))
                    .ok());
    ASSERT_TRUE(RunAttentionFinish(Finish(d), dtype, split,
                                   absl::MakeSpan(split_out))
                    .ok());
    std::vector<uint8_t> reversed(StateElements(all) * size),
        reversed_out(out_bytes);
    ASSERT_TRUE(RunAttentionBlock(second, dtype, q, k2, v2, {},
                                  absl::MakeSpan(reversed))
                    .ok());
    ASSERT_TRUE(RunAttentionBlock(first, dtype, q, k1, v1, reversed,
                                  absl::MakeSpan(reversed))
                    .ok());
    ASSERT_TRUE(RunAttentionFinish(Finish(d), dtype, reversed,
                                   absl::MakeSpan(reversed_out))
                    .ok());
    const Direct direct = DirectAttention(all, Loaded(dtype, q), {blk});
    ExpectNearDirect(dtype, all, one_out, direct, 300, 1);
    ExpectNearDirect(dtype, all, split_out, direct, 300, 2);
    ExpectNearDirect(dtype, all, reversed_out, direct, 300, 2);
    if (dtype == DType::kFloat64) {
      const std::vector<double> a = Loaded(dtype, one_out),
                                b = Loaded(dtype, split_out);
      for (size_t e = 0; e < a.size(); ++e) ASSERT_NEAR(a[e], b[e], 1e-14);
    }
  }
}

// Causal attention over a zigzag layout (sequence 32 on 2 devices in 4
// chunks of 8: device 0 holds chunks 0 and 3, positions 0-7 and 24-31, as
// its queries and its own keys; device 1's keys are positions 8-23).
// Device 1's block first, from an empty state: queries 0-7 keep none of
// its keys, so their state stays empty (o = +0, m = -inf, l = +0, bit for
// bit); then the own block in place. The other order: device 1's block
// leaves those rows' state as the first block made it, bit for bit. Both
// give causal softmax attention over all 32 positions. scale 1.5: scores
// up to about +-10, exponentials far from 1.
TEST(AttentionTest, CausalZigzagAcrossBlocks) {
  std::vector<int64_t> own, other;
  for (int64_t p = 0; p < 8; ++p) own.push_back(p);
  for (int64_t p = 24; p < 32; ++p) own.push_back(p);
  for (int64_t p = 8; p < 24; ++p) other.push_back(p);
  v1::AttentionBlockAttrs mine = Attrs(1, 4, 2, 16, 16, 8);
  mine.set_causal(true);
  mine.set_scale(1.5);
  for (int64_t p : own) {
    mine.add_q_position(p);
    mine.add_kv_position(p);
  }
  v1::AttentionBlockAttrs theirs = mine;
  theirs.clear_kv_position();
  for (int64_t p : other) theirs.add_kv_position(p);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const int64_t d = 8, width = d + 2;
    const std::vector<uint8_t> q = Random(dtype, 4 * 16 * d, 1);
    std::vector<uint8_t> k_own, v_own, k_other, v_other;
    const KvBlock own_blk = MakeBlock(dtype, mine, 2, &k_own, &v_own);
    const KvBlock other_blk = MakeBlock(dtype, theirs, 4, &k_other, &v_other);
    const Direct direct =
        DirectAttention(mine, Loaded(dtype, q), {own_blk, other_blk});

    std::vector<uint8_t> state(StateElements(mine) * size, 0xAB);
    ASSERT_TRUE(RunAttentionBlock(theirs, dtype, q, k_other, v_other, {},
                                  absl::MakeSpan(state))
                    .ok());
    std::vector<uint8_t> empty_row(width * size);
    {
      for (int64_t c = 0; c < d; ++c) {
        StoreElement(dtype, empty_row.data() + c * size, 0.0);
      }
      StoreElement(dtype, empty_row.data() + d * size,
                   -std::numeric_limits<double>::infinity());
      StoreElement(dtype, empty_row.data() + (d + 1) * size, 0.0);
    }
    for (int64_t row = 0; row < 4 * 16; ++row) {
      const bool masked = row % 16 < 8;  // positions 0-7
      const std::vector<uint8_t> got(state.begin() + row * width * size,
                                     state.begin() + (row + 1) * width * size);
      if (masked) {
        EXPECT_EQ(got, empty_row) << row;
      } else {
        EXPECT_NE(got, empty_row) << row;
      }
    }
    ASSERT_TRUE(RunAttentionBlock(mine, dtype, q, k_own, v_own, state,
                                  absl::MakeSpan(state))
                    .ok());
    std::vector<uint8_t> out(4 * 16 * d * size);
    ASSERT_TRUE(
        RunAttentionFinish(Finish(d), dtype, state, absl::MakeSpan(out)).ok());
    ExpectNearDirect(dtype, mine, out, direct, 32, 2);

    // Own keys first: device 1's block keeps rows of positions 0-7.
    std::vector<uint8_t> s1(StateElements(mine) * size);
    ASSERT_TRUE(
        RunAttentionBlock(mine, dtype, q, k_own, v_own, {}, absl::MakeSpan(s1))
            .ok());
    std::vector<uint8_t> s2(s1.size(), 0xCD);
    ASSERT_TRUE(RunAttentionBlock(theirs, dtype, q, k_other, v_other, s1,
                                  absl::MakeSpan(s2))
                    .ok());
    for (int64_t row = 0; row < 4 * 16; ++row) {
      if (row % 16 >= 8) continue;
      EXPECT_TRUE(std::equal(s1.begin() + row * width * size,
                             s1.begin() + (row + 1) * width * size,
                             s2.begin() + row * width * size))
          << row;
    }
    ASSERT_TRUE(
        RunAttentionFinish(Finish(d), dtype, s2, absl::MakeSpan(out)).ok());
    ExpectNearDirect(dtype, mine, out, direct, 32, 2);
  }
}

// A query whose keys are all masked (position -1 before every key) ends
// with the empty state and an O of +0, without a NaN anywhere; the other
// query is ordinary attention.
TEST(AttentionTest, FullyMaskedRowGivesZerosAndNoNaN) {
  v1::AttentionBlockAttrs a = Attrs(1, 1, 1, 2, 3, 4);
  a.set_causal(true);
  a.add_q_position(-1);
  a.add_q_position(5);
  for (int64_t p : {0, 1, 2}) a.add_kv_position(p);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const std::vector<uint8_t> q = Random(dtype, 8, 1);
    std::vector<uint8_t> k, v;
    const KvBlock blk = MakeBlock(dtype, a, 2, &k, &v);
    std::vector<uint8_t> state(12 * size, 0xAB), out(8 * size, 0xAB);
    ASSERT_TRUE(
        RunAttentionBlock(a, dtype, q, k, v, {}, absl::MakeSpan(state)).ok());
    // The same block again, in place: row 0 stays empty.
    ASSERT_TRUE(
        RunAttentionBlock(a, dtype, q, k, v, state, absl::MakeSpan(state))
            .ok());
    const std::vector<double> s = Loaded(dtype, state);
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(s[c], 0.0);
      EXPECT_FALSE(std::signbit(s[c]));
    }
    EXPECT_EQ(s[4], -std::numeric_limits<double>::infinity());
    EXPECT_EQ(s[5], 0.0);
    for (double x : s) EXPECT_FALSE(std::isnan(x));
    ASSERT_TRUE(
        RunAttentionFinish(Finish(4), dtype, state, absl::MakeSpan(out)).ok());
    const std::vector<double> o = Loaded(dtype, out);
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(o[c], 0.0);
      EXPECT_FALSE(std::signbit(o[c]));
    }
    for (double x : o) EXPECT_FALSE(std::isnan(x));
    // Row 1 saw the three keys twice: the same weights, the same O.
    KvBlock twice = blk;
    const Direct direct = DirectAttention(a, Loaded(dtype, q), {blk, twice});
    ExpectNearDirect(dtype, a, out, direct, 6, 2);
  }
}

// S' aliasing S exactly gives the bits of the out-of-place update; an S'
// that overlaps Q is computed into a copy (Q read as it was).
TEST(AttentionTest, InPlaceEqualsOutOfPlace) {
  const v1::AttentionBlockAttrs a = Attrs(2, 2, 1, 5, 7, 6);
  for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const std::vector<uint8_t> q = Random(dtype, 2 * 2 * 5 * 6, 1);
    std::vector<uint8_t> k, v;
    MakeBlock(dtype, a, 2, &k, &v);
    std::vector<uint8_t> s1(StateElements(a) * size);
    ASSERT_TRUE(
        RunAttentionBlock(a, dtype, q, k, v, {}, absl::MakeSpan(s1)).ok());
    std::vector<uint8_t> s2(s1.size());
    ASSERT_TRUE(
        RunAttentionBlock(a, dtype, q, k, v, s1, absl::MakeSpan(s2)).ok());
    std::vector<uint8_t> in_place = s1;
    ASSERT_TRUE(RunAttentionBlock(a, dtype, q, k, v, in_place,
                                  absl::MakeSpan(in_place))
                    .ok());
    EXPECT_EQ(in_place, s2);
    // Q inside S' (its first bytes): the result is the same.
    std::vector<uint8_t> shared(s1.size());
    std::memcpy(shared.data(), q.data(), q.size());
    ASSERT_TRUE(RunAttentionBlock(
                    a, dtype, absl::MakeConstSpan(shared.data(), q.size()), k,
                    v, {}, absl::MakeSpan(shared))
                    .ok());
    EXPECT_EQ(shared, s1);
  }
}

// scale 0 reads as 1 / sqrt(head_dim): the bits of the explicit scale.
TEST(AttentionTest, ScaleZeroReadsAsInverseSqrtHeadDim) {
  v1::AttentionBlockAttrs a = Attrs(1, 2, 2, 3, 5, 9);
  EXPECT_DOUBLE_EQ(AttentionScale(a), 1.0 / 3);
  const DType dtype = DType::kFloat32;
  const std::vector<uint8_t> q = Random(dtype, 2 * 3 * 9, 1);
  std::vector<uint8_t> k, v;
  MakeBlock(dtype, a, 2, &k, &v);
  std::vector<uint8_t> s0(2 * 3 * 11 * 4), s1(s0.size());
  ASSERT_TRUE(RunAttentionBlock(a, dtype, q, k, v, {}, absl::MakeSpan(s0)).ok());
  a.set_scale(1.0 / 3);
  EXPECT_DOUBLE_EQ(AttentionScale(a), 1.0 / 3);
  ASSERT_TRUE(RunAttentionBlock(a, dtype, q, k, v, {}, absl::MakeSpan(s1)).ok());
  EXPECT_EQ(s0, s1);
}

// Attributes that do not fit the operands, integer dtypes and ragged
// spans: INVALID_ARGUMENT naming the field and what is allowed.
TEST(AttentionTest, ErrorsNameTheField) {
  // batch 1, heads 4, kv_heads 2, q_rows 4, kv_rows 3, head_dim 2: Q 32, K
  // and V 12, S 64 elements.
  auto base = [] {
    v1::AttentionBlockAttrs a = Attrs(1, 4, 2, 4, 3, 2);
    a.set_causal(true);
    for (int64_t p : {0, 1, 2, 3}) a.add_q_position(p);
    for (int64_t p : {0, 1, 2}) a.add_kv_position(p);
    return a;
  };
  EXPECT_TRUE(CheckAttentionBlock(base(), 32, 12, 12, 64, 64).ok());
  EXPECT_TRUE(CheckAttentionBlock(base(), 32, 12, 12, -1, 64).ok());
  struct Case {
    std::function<void(v1::AttentionBlockAttrs&)> corrupt;
    int64_t q, k, v, s_in, s_out;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto& a) { a.set_batch(0); }, 32, 12, 12, 64, 64,
       "attention_block.batch = 0 must be in [1, 2147483647]"},
      {[](auto& a) { a.set_heads(-1); }, 32, 12, 12, 64, 64,
       "attention_block.heads = -1 must be in [1, 2147483647]"},
      {[](auto& a) { a.set_kv_heads(0); }, 32, 12, 12, 64, 64,
       "attention_block.kv_heads = 0 must be in [1,"},
      {[](auto& a) { a.set_q_rows(0); }, 32, 12, 12, 64, 64,
       "attention_block.q_rows = 0 must be in [1,"},
      {[](auto& a) { a.set_kv_rows(int64_t{1} << 40); }, 32, 12, 12, 64, 64,
       "attention_block.kv_rows = 1099511627776 must be in [1, 2147483647]"},
      {[](auto& a) { a.set_head_dim(0); }, 32, 12, 12, 64, 64,
       "attention_block.head_dim = 0 must be in [1,"},
      {[](auto& a) { a.set_kv_heads(3); }, 32, 12, 12, 64, 64,
       "attention_block.heads = 4 is not a multiple of kv_heads = 3"},
      {[](auto& a) { a.set_scale(std::numeric_limits<double>::infinity()); },
       32, 12, 12, 64, 64, "attention_block.scale = inf must be finite"},
      {[](auto& a) { a.mutable_q_position()->RemoveLast(); }, 32, 12, 12, 64,
       64, "attention_block.q_position has 3 entries; want q_rows = 4"},
      {[](auto& a) { a.clear_kv_position(); }, 32, 12, 12, 64, 64,
       "attention_block.kv_position has 0 entries; want kv_rows = 3 (causal "
       "masks by the global position of every row)"},
      {[](auto& a) {
         a.set_causal(false);
         a.add_kv_position(7);
       },
       32, 12, 12, 64, 64,
       "attention_block.kv_position has 4 entries; want kv_rows = 3 or none "
       "(without causal)"},
      {[](auto&) {}, 31, 12, 12, 64, 64,
       "attention_block: Q has 31 elements; want batch * heads * q_rows * "
       "head_dim = 1 * 4 * 4 * 2 = 32"},
      {[](auto&) {}, 32, 24, 12, 64, 64,
       "attention_block: K has 24 elements; want batch * kv_heads * kv_rows "
       "* head_dim = 1 * 2 * 3 * 2 = 12"},
      {[](auto&) {}, 32, 12, 6, 64, 64, "attention_block: V has 6 elements"},
      {[](auto&) {}, 32, 12, 12, 32, 64,
       "attention_block: S has 32 elements; want batch * heads * q_rows * "
       "(head_dim + 2) = 1 * 4 * 4 * (2 + 2) = 64"},
      {[](auto&) {}, 32, 12, 12, -1, 40, "attention_block: S' has 40"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    v1::AttentionBlockAttrs a = base();
    c.corrupt(a);
    const absl::Status s =
        CheckAttentionBlock(a, c.q, c.k, c.v, c.s_in, c.s_out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
  }
  // Without causal the positions may be left out.
  v1::AttentionBlockAttrs plain = base();
  plain.set_causal(false);
  plain.clear_q_position();
  plain.clear_kv_position();
  EXPECT_TRUE(CheckAttentionBlock(plain, 32, 12, 12, -1, 64).ok());

  // The kernels: the same checks on the spans, integers, ragged bytes.
  const DType f32 = DType::kFloat32;
  std::vector<uint8_t> q(32 * 4), k(12 * 4), v(12 * 4), s(64 * 4);
  absl::Status st =
      RunAttentionBlock(base(), f32, q, k, v, {}, absl::MakeSpan(s.data(), 40));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("attention_block: S' has 10 elements"),
            std::string::npos)
      << st;
  st = RunAttentionBlock(base(), f32, q, k, v, {}, absl::MakeSpan(s.data(), 7));
  EXPECT_NE(st.message().find("S' has 7 bytes, not a multiple of 4"),
            std::string::npos)
      << st;
  for (DType dtype :
       {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    std::vector<uint8_t> iq(32 * size), ik(12 * size), is(64 * size),
        io(32 * size);
    st = RunAttentionBlock(base(), dtype, iq, ik, ik, {}, absl::MakeSpan(is));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(absl::StrCat(
                  "attention_block on ", DTypeName(dtype),
                  " is not defined; allowed dtypes: float16, bfloat16, "
                  "float32, float64")),
              std::string::npos)
        << st;
    st = RunAttentionFinish(Finish(2), dtype, is, absl::MakeSpan(io));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(absl::StrCat("attention_finish on ",
                                             DTypeName(dtype),
                                             " is not defined")),
              std::string::npos)
        << st;
  }

  // The finish.
  EXPECT_TRUE(CheckAttentionFinish(Finish(2), 48, 24).ok());
  struct FinishCase {
    int64_t head_dim, s, o;
    std::string message;
  };
  for (const FinishCase& c : std::vector<FinishCase>{
           {0, 48, 24, "attention_finish.head_dim = 0 must be in [1,"},
           {2, 50, 24,
            "attention_finish.head_dim = 2: S has 50 elements, not whole rows "
            "of head_dim + 2 = 4"},
           {2, 48, 25,
            "attention_finish: O has 25 elements; want rows(S) * head_dim = "
            "12 * 2 = 24"},
       }) {
    SCOPED_TRACE(c.message);
    const absl::Status f = CheckAttentionFinish(Finish(c.head_dim), c.s, c.o);
    EXPECT_EQ(f.code(), absl::StatusCode::kInvalidArgument) << f;
    EXPECT_NE(f.message().find(c.message), std::string::npos) << f;
  }
  std::vector<uint8_t> o(24 * 4);
  st = RunAttentionFinish(Finish(2), f32, s, absl::MakeSpan(o.data(), 20));
  EXPECT_NE(st.message().find("attention_finish: O has 5 elements"),
            std::string::npos)
      << st;
}

// The finish divides each row's o by its l, rounding once; a row whose l
// is 0 gives +0 (its o is ignored); O may overlap S.
TEST(AttentionTest, FinishDividesByTheRowSum) {
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const std::vector<double> state = {1, -3, 0.5, 2,   // o = [1, -3], m, l 2
                                       7, 5, -1, 0,     // l = 0
                                       -6, 0.75, 0, 4};  // l = 4
    std::vector<uint8_t> s(state.size() * size);
    for (size_t i = 0; i < state.size(); ++i) {
      StoreElement(dtype, s.data() + i * size, state[i]);
    }
    std::vector<uint8_t> out(6 * size, 0xAB);
    ASSERT_TRUE(
        RunAttentionFinish(Finish(2), dtype, s, absl::MakeSpan(out)).ok());
    const std::vector<double> want = {0.5, -1.5, 0, 0, -1.5, 0.1875};
    EXPECT_EQ(Loaded(dtype, out), want);
    EXPECT_FALSE(std::signbit(Loaded(dtype, out)[2]));
    // In place over S's first bytes.
    ASSERT_TRUE(RunAttentionFinish(Finish(2), dtype, s,
                                   absl::MakeSpan(s.data(), 6 * size))
                    .ok());
    EXPECT_EQ(Loaded(dtype, std::vector<uint8_t>(s.begin(),
                                                 s.begin() + 6 * size)),
              want);
  }
}

// The gradients of softmax(scale Q K^T + mask) V against dO, directly in
// float64 from the definition (P the softmax, D_i = sum_c dO_ic O_ic), and
// per element the sum of the magnitudes that went into it (the scale of
// the kernel's errors). dk and dv are [batch, kv_heads, keys, head_dim].
struct DirectGrads {
  std::vector<double> dq, dk, dv, dq_mag, dk_mag, dv_mag;
  double e_max = 0;
};
DirectGrads DirectAttentionGrads(const v1::AttentionBlockAttrs& a,
                                 const std::vector<double>& q,
                                 const std::vector<double>& k,
                                 const std::vector<double>& v,
                                 const std::vector<double>& dout) {
  const int64_t d = a.head_dim(), group = a.heads() / a.kv_heads();
  const int64_t n = a.kv_rows();
  const double scale = AttentionScale(a);
  DirectGrads g;
  g.dq.assign(q.size(), 0.0);
  g.dq_mag = g.dq;
  g.dk.assign(k.size(), 0.0);
  g.dk_mag = g.dk;
  g.dv = g.dk;
  g.dv_mag = g.dk;
  for (int64_t b = 0; b < a.batch(); ++b) {
    for (int64_t h = 0; h < a.heads(); ++h) {
      const int64_t kv0 = (b * a.kv_heads() + h / group) * n * d;
      for (int64_t i = 0; i < a.q_rows(); ++i) {
        const int64_t row = ((b * a.heads() + h) * a.q_rows() + i) * d;
        std::vector<double> p(n, 0.0);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          if (a.causal() && a.kv_position(j) > a.q_position(i)) continue;
          double dot = 0, e = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += q[row + c] * k[kv0 + j * d + c];
            e += std::abs(q[row + c] * k[kv0 + j * d + c]);
          }
          p[j] = scale * dot;
          m = std::max(m, p[j]);
          g.e_max = std::max(g.e_max, std::abs(scale) * e);
        }
        if (m == -std::numeric_limits<double>::infinity()) continue;
        double l = 0;
        for (int64_t j = 0; j < n; ++j) {
          const bool kept = !a.causal() || a.kv_position(j) <= a.q_position(i);
          p[j] = kept ? std::exp(p[j] - m) : 0.0;
          l += p[j];
        }
        std::vector<double> o(d, 0.0);
        for (int64_t j = 0; j < n; ++j) {
          p[j] /= l;
          for (int64_t c = 0; c < d; ++c) o[c] += p[j] * v[kv0 + j * d + c];
        }
        double delta = 0, delta_mag = 0;
        for (int64_t c = 0; c < d; ++c) {
          delta += dout[row + c] * o[c];
          delta_mag += std::abs(dout[row + c] * o[c]);
        }
        for (int64_t j = 0; j < n; ++j) {
          if (p[j] == 0) continue;
          double dp = 0, dp_mag = 0;
          for (int64_t c = 0; c < d; ++c) {
            dp += dout[row + c] * v[kv0 + j * d + c];
            dp_mag += std::abs(dout[row + c] * v[kv0 + j * d + c]);
          }
          const double ds = p[j] * (dp - delta);
          const double ds_mag = p[j] * (std::abs(dp - delta) + dp_mag + delta_mag);
          for (int64_t c = 0; c < d; ++c) {
            const int64_t kj = kv0 + j * d + c;
            g.dq[row + c] += scale * ds * k[kj];
            g.dq_mag[row + c] += std::abs(scale) * ds_mag * std::abs(k[kj]);
            g.dk[kj] += scale * ds * q[row + c];
            g.dk_mag[kj] += std::abs(scale) * ds_mag * std::abs(q[row + c]);
            g.dv[kj] += p[j] * dout[row + c];
            g.dv_mag[kj] += p[j] * std::abs(dout[row + c]);
          }
        }
      }
    }
  }
  return g;
}

// The forward on `a` (one block from an empty state, then the finish): the
// state S and the output O the backward reads.
void Forward(const v1::AttentionBlockAttrs& a, DType dtype,
             const std::vector<uint8_t>& q, const std::vector<uint8_t>& k,
             const std::vector<uint8_t>& v, std::vector<uint8_t>* state,
             std::vector<uint8_t>* out) {
  const int size = DTypeSize(dtype);
  state->assign(StateElements(a) * size, 0);
  out->assign(a.batch() * a.heads() * a.q_rows() * a.head_dim() * size, 0);
  ASSERT_TRUE(
      RunAttentionBlock(a, dtype, q, k, v, {}, absl::MakeSpan(*state)).ok());
  ASSERT_TRUE(RunAttentionFinish(Finish(a.head_dim()), dtype, *state,
                                 absl::MakeSpan(*out))
                  .ok());
}

v1::AttentionBackwardAttrs Backward(
    const v1::AttentionBlockAttrs& a,
    v1::AttentionBackwardAttrs::Target target, bool accumulate = false) {
  v1::AttentionBackwardAttrs g;
  *g.mutable_block() = a;
  g.set_target(target);
  g.set_accumulate(accumulate);
  return g;
}

// Kernel gradients against the direct ones. Tolerance per element, over
// its magnitude sum: 8 u (O, m and l stored to the dtype by the forward,
// the output by the backward) plus u_acc (4 (head_dim + 2) e_max + 4
// (head_dim + keys + rows) + 64) (the scores through P twice, the dot
// products dP and D, the sums over keys or query rows, the exponential
// and the division, in the accumulator); plus fp16 subnormal steps.
void ExpectGradNear(DType dtype, const std::vector<uint8_t>& got_bytes,
                    const std::vector<double>& want,
                    const std::vector<double>& mag, double e_max,
                    int64_t head_dim, int64_t sums, const char* what) {
  const double rel =
      8 * UnitRoundoff(dtype) +
      AccumulatorRoundoff(dtype) *
          (4 * (head_dim + 2) * e_max + 4 * (head_dim + sums) + 64);
  const std::vector<double> got = Loaded(dtype, got_bytes);
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    ASSERT_FALSE(std::isnan(got[e])) << what << " " << e;
    ASSERT_NEAR(got[e], want[e],
                rel * mag[e] + (dtype == DType::kFloat16 ? std::ldexp(1.0, -22)
                                                         : 1e-300))
        << DTypeName(dtype) << " " << what << " element " << e;
    largest = std::max(largest, std::abs(want[e]));
  }
  EXPECT_GT(largest, 1e-3) << what << ": the gradients are not all ~0";
}

// The oracle itself: its dQ, dK and dV against central finite differences
// of L = sum dO . O, computed in float64, at a few elements.
TEST(AttentionBackwardTest, DirectGradientsMatchFiniteDifferences) {
  v1::AttentionBlockAttrs a = Attrs(1, 2, 1, 5, 6, 4);
  a.set_causal(true);
  for (int64_t i = 0; i < 5; ++i) a.add_q_position(2 * i + 1);
  for (int64_t j = 0; j < 6; ++j) a.add_kv_position(2 * j);
  const DType dtype = DType::kFloat64;
  std::vector<double> q = Loaded(dtype, Random(dtype, 2 * 5 * 4, 1));
  std::vector<double> k = Loaded(dtype, Random(dtype, 6 * 4, 2));
  std::vector<double> v = Loaded(dtype, Random(dtype, 6 * 4, 3));
  const std::vector<double> dout = Loaded(dtype, Random(dtype, 2 * 5 * 4, 4));
  const DirectGrads g = DirectAttentionGrads(a, q, k, v, dout);
  auto loss = [&] {
    KvBlock blk{k, v, {a.kv_position().begin(), a.kv_position().end()}, 6};
    const Direct o = DirectAttention(a, q, {blk});
    double sum = 0;
    for (size_t e = 0; e < o.o.size(); ++e) sum += dout[e] * o.o[e];
    return sum;
  };
  const double h = 1e-6;
  auto numeric = [&](std::vector<double>& x, size_t e) {
    const double keep = x[e];
    x[e] = keep + h;
    const double up = loss();
    x[e] = keep - h;
    const double down = loss();
    x[e] = keep;
    return (up - down) / (2 * h);
  };
  for (size_t e : {0, 5, 13, 27, 39}) EXPECT_NEAR(numeric(q, e), g.dq[e], 1e-7);
  for (size_t e : {0, 7, 15, 23}) {
    EXPECT_NEAR(numeric(k, e), g.dk[e], 1e-7) << e;
    EXPECT_NEAR(numeric(v, e), g.dv[e], 1e-7) << e;
  }
}

// Grouped-query attention (4 heads on 2 kv heads), 70 query rows (two
// tiles) against 300 keys (two chunks), causal with interleaved positions
// and without, in every float dtype: dQ and dKV of the kernel against the
// direct float64 gradients.
TEST(AttentionBackwardTest, MatchesDirectGradients) {
  for (bool causal : {false, true}) {
    v1::AttentionBlockAttrs a = Attrs(2, 4, 2, 70, 300, 16);
    a.set_causal(causal);
    if (causal) {
      for (int64_t i = 0; i < 70; ++i) a.add_q_position(4 * i + 20);
      for (int64_t j = 0; j < 300; ++j) a.add_kv_position(j);
    }
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), causal ? " causal" : ""));
      const int size = DTypeSize(dtype);
      const int64_t nq = a.batch() * a.heads() * a.q_rows() * a.head_dim();
      const std::vector<uint8_t> q = Random(dtype, nq, 1);
      const std::vector<uint8_t> dout = Random(dtype, nq, 9);
      std::vector<uint8_t> k, v, state, o;
      const KvBlock blk = MakeBlock(dtype, a, 2, &k, &v);
      Forward(a, dtype, q, k, v, &state, &o);
      std::vector<uint8_t> dq(nq * size, 0x5A), dkv(2 * k.size(), 0x5A);
      ASSERT_TRUE(RunAttentionBackward(
                      Backward(a, v1::AttentionBackwardAttrs::TARGET_DQ),
                      dtype, q, k, v, dout, o, state, absl::MakeSpan(dq))
                      .ok());
      ASSERT_TRUE(RunAttentionBackward(
                      Backward(a, v1::AttentionBackwardAttrs::TARGET_DKV),
                      dtype, q, k, v, dout, o, state, absl::MakeSpan(dkv))
                      .ok());
      const DirectGrads g = DirectAttentionGrads(
          a, Loaded(dtype, q), blk.k, blk.v, Loaded(dtype, dout));
      ExpectGradNear(dtype, dq, g.dq, g.dq_mag, g.e_max, 16, 300, "dQ");
      const std::vector<uint8_t> dk(dkv.begin(), dkv.begin() + k.size());
      const std::vector<uint8_t> dv(dkv.begin() + k.size(), dkv.end());
      ExpectGradNear(dtype, dk, g.dk, g.dk_mag, g.e_max, 16, 2 * 70, "dK");
      ExpectGradNear(dtype, dv, g.dv, g.dv_mag, g.e_max, 16, 2 * 70, "dV");
    }
  }
}

// A ring's view: the keys in two blocks (130 then 170). dQ accumulated
// over both blocks, and each block's dKV, equal the gradients over all
// 300 keys at once; accumulate adds to what the output holds.
TEST(AttentionBackwardTest, AccumulatesAcrossBlocks) {
  const v1::AttentionBlockAttrs all = Attrs(1, 4, 2, 9, 300, 8);
  const DType dtype = DType::kFloat64;
  const int size = DTypeSize(dtype);
  const int64_t nq = 4 * 9 * 8;
  const std::vector<uint8_t> q = Random(dtype, nq, 1);
  const std::vector<uint8_t> dout = Random(dtype, nq, 7);
  std::vector<uint8_t> k, v, state, o;
  MakeBlock(dtype, all, 2, &k, &v);
  Forward(all, dtype, q, k, v, &state, &o);
  std::vector<uint8_t> dq_all(nq * size), dkv_all(2 * k.size());
  ASSERT_TRUE(RunAttentionBackward(
                  Backward(all, v1::AttentionBackwardAttrs::TARGET_DQ), dtype,
                  q, k, v, dout, o, state, absl::MakeSpan(dq_all))
                  .ok());
  ASSERT_TRUE(RunAttentionBackward(
                  Backward(all, v1::AttentionBackwardAttrs::TARGET_DKV), dtype,
                  q, k, v, dout, o, state, absl::MakeSpan(dkv_all))
                  .ok());
  const std::vector<double> dq_want = Loaded(dtype, dq_all);
  const std::vector<double> dkv_want = Loaded(dtype, dkv_all);
  std::vector<uint8_t> dq(nq * size);
  int64_t at = 0;
  for (int64_t rows : {130, 170}) {
    v1::AttentionBlockAttrs part = Attrs(1, 4, 2, 9, rows, 8);
    // This block's keys and values: rows [at, at + rows) of each kv head.
    std::vector<uint8_t> kp, vp;
    for (int64_t kvh = 0; kvh < 2; ++kvh) {
      const int64_t from = (kvh * 300 + at) * 8 * size, n = rows * 8 * size;
      kp.insert(kp.end(), k.begin() + from, k.begin() + from + n);
      vp.insert(vp.end(), v.begin() + from, v.begin() + from + n);
    }
    ASSERT_TRUE(RunAttentionBackward(
                    Backward(part, v1::AttentionBackwardAttrs::TARGET_DQ,
                             /*accumulate=*/at > 0),
                    dtype, q, kp, vp, dout, o, state, absl::MakeSpan(dq))
                    .ok());
    // dKV accumulated onto a known start: 1.0 everywhere.
    std::vector<double> ones(2 * kp.size() / size, 1.0);
    std::vector<uint8_t> dkv(2 * kp.size());
    for (size_t e = 0; e < ones.size(); ++e) {
      std::memcpy(dkv.data() + e * size, &ones[e], size);
    }
    ASSERT_TRUE(RunAttentionBackward(
                    Backward(part, v1::AttentionBackwardAttrs::TARGET_DKV,
                             /*accumulate=*/true),
                    dtype, q, kp, vp, dout, o, state, absl::MakeSpan(dkv))
                    .ok());
    const std::vector<double> got = Loaded(dtype, dkv);
    for (int64_t half = 0; half < 2; ++half) {      // dK, dV
      for (int64_t kvh = 0; kvh < 2; ++kvh) {
        for (int64_t j = 0; j < rows; ++j) {
          for (int64_t c = 0; c < 8; ++c) {
            const double want =
                dkv_want[((half * 2 + kvh) * 300 + at + j) * 8 + c];
            ASSERT_NEAR(got[((half * 2 + kvh) * rows + j) * 8 + c],
                        want + 1.0, 1e-12)
                << half << " " << kvh << " " << j << " " << c;
          }
        }
      }
    }
    at += rows;
  }
  const std::vector<double> dq_got = Loaded(dtype, dq);
  for (size_t e = 0; e < dq_got.size(); ++e) {
    ASSERT_NEAR(dq_got[e], dq_want[e], 1e-12) << e;
  }
}

// A query row that sees no key (l = 0: causal, every key after it) gets
// no gradient and gives no NaN; keys no query sees get none either.
TEST(AttentionBackwardTest, FullyMaskedRowsGiveZeros) {
  v1::AttentionBlockAttrs a = Attrs(1, 1, 1, 3, 4, 4);
  a.set_causal(true);
  for (int64_t p : {0, 10, 20}) a.add_q_position(p);
  for (int64_t p : {5, 6, 7, 30}) a.add_kv_position(p);
  for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<uint8_t> q = Random(dtype, 12, 1);
    const std::vector<uint8_t> dout = Random(dtype, 12, 5);
    std::vector<uint8_t> k, v, state, o;
    MakeBlock(dtype, a, 2, &k, &v);
    Forward(a, dtype, q, k, v, &state, &o);
    std::vector<uint8_t> dq(q.size()), dkv(2 * k.size());
    ASSERT_TRUE(RunAttentionBackward(
                    Backward(a, v1::AttentionBackwardAttrs::TARGET_DQ), dtype,
                    q, k, v, dout, o, state, absl::MakeSpan(dq))
                    .ok());
    ASSERT_TRUE(RunAttentionBackward(
                    Backward(a, v1::AttentionBackwardAttrs::TARGET_DKV), dtype,
                    q, k, v, dout, o, state, absl::MakeSpan(dkv))
                    .ok());
    const std::vector<double> gq = Loaded(dtype, dq), gkv = Loaded(dtype, dkv);
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(gq[c], 0.0) << c;  // row 0
    double row1 = 0;
    for (int64_t c = 4; c < 12; ++c) row1 += std::abs(gq[c]);
    EXPECT_GT(row1, 0);  // rows 1 and 2 see keys 5, 6, 7
    for (double x : gkv) EXPECT_FALSE(std::isnan(x));
    for (int64_t c = 0; c < 4; ++c) {  // key 3 (position 30): no query
      EXPECT_EQ(gkv[3 * 4 + c], 0.0);
      EXPECT_EQ(gkv[16 + 3 * 4 + c], 0.0);
    }
  }
}

// The kernels' float exponential: within 2 ulp of exp over its range
// (every 1/1024 from -87 to 88), an exact 0 where the result would be
// subnormal or for -inf, +inf beyond the float range, exactly 1 at 0.
TEST(AttentionTest, FastExpIsWithinTwoUlp) {
  double worst = 0;
  for (int i = -87 * 1024; i <= 88 * 1024; ++i) {
    const float x = i / 1024.0f;
    const double want = std::exp(static_cast<double>(x));
    const float got = AttentionFastExp(x);
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    worst = std::max(worst, std::abs(got - want) / ulp);
    ASSERT_LE(std::abs(got - want), 2 * ulp) << x;
  }
  EXPECT_GT(worst, 0);  // it is an approximation, measured
  EXPECT_EQ(AttentionFastExp(0.0f), 1.0f);
  EXPECT_EQ(AttentionFastExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(AttentionFastExp(-88.0f), 0.0f);
  EXPECT_EQ(AttentionFastExp(89.0f), std::numeric_limits<float>::infinity());
}

// Bad attributes and operands: INVALID_ARGUMENT naming the field.
TEST(AttentionBackwardTest, ErrorsNameTheField) {
  const v1::AttentionBlockAttrs a = Attrs(1, 2, 1, 3, 4, 4);
  const DType dtype = DType::kFloat32;
  const std::vector<uint8_t> q = Random(dtype, 24, 1), k = Random(dtype, 16, 2);
  const std::vector<uint8_t> state(2 * 3 * 6 * 4);
  std::vector<uint8_t> dq(q.size()), dkv(2 * k.size());
  auto message = [&](const v1::AttentionBackwardAttrs& g,
                     absl::Span<const uint8_t> dout, absl::Span<uint8_t> out,
                     DType type = DType::kFloat32) {
    const absl::Status st =
        RunAttentionBackward(g, type, q, k, k, dout, q, state, out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    return std::string(st.message());
  };
  EXPECT_NE(message(Backward(a, v1::AttentionBackwardAttrs::TARGET_UNSPECIFIED),
                    q, absl::MakeSpan(dq))
                .find("attention_backward.target"),
            std::string::npos);
  EXPECT_NE(message(Backward(a, v1::AttentionBackwardAttrs::TARGET_DKV), q,
                    absl::MakeSpan(dq))
                .find("dKV has 24 elements"),
            std::string::npos);
  EXPECT_NE(message(Backward(a, v1::AttentionBackwardAttrs::TARGET_DQ),
                    absl::MakeConstSpan(q.data(), 20), absl::MakeSpan(dq))
                .find("dO has 5 elements"),
            std::string::npos);
  v1::AttentionBlockAttrs bad = a;
  bad.set_kv_heads(3);
  EXPECT_NE(message(Backward(bad, v1::AttentionBackwardAttrs::TARGET_DQ), q,
                    absl::MakeSpan(dq))
                .find("attention_backward.block: "),
            std::string::npos);
  EXPECT_NE(message(Backward(a, v1::AttentionBackwardAttrs::TARGET_DQ), q,
                    absl::MakeSpan(dq), DType::kInt32)
                .find("allowed dtypes"),
            std::string::npos);
}

}  // namespace
}  // namespace meshcast::worker
