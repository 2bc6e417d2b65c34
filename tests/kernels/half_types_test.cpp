// kernels/half_types.h: every bfloat16 and float16 bit pattern to float32 and back, float32
// to each against a float64 reference that rounds by searching the type's sorted values
// (no bit tricks shared with the code under test), on every value, every halfway point
// between neighbours and the floats next to both, the overflow and underflow thresholds,
// and a million random bit patterns; and the same inputs against PyTorch 1.13's
// .to(torch.bfloat16) / .to(torch.float16) (tests/kernels/torch_half_rounding.py), bit
// for bit except NaNs, where PyTorch writes a canonical NaN and dpcore keeps the payload.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "kernels/half_types.h"
#include "tests/support/test_support.h"

namespace dpcore::kernels {
namespace {

// A 16-bit floating type's layout, and its conversions under test.
struct HalfFormat {
  const char* name;
  int mantissa_bits, exponent_bits;
  float (*to_float)(uint16_t);
  uint16_t (*from_float)(float);

  uint16_t infinity() const { return uint16_t(((1u << exponent_bits) - 1) << mantissa_bits); }
  uint16_t quiet_bit() const { return uint16_t(1u << (mantissa_bits - 1)); }
  bool is_nan(uint16_t h) const { return (h & 0x7fffu) > infinity(); }
  // The value of a pattern from its fields, in float64 (exact).
  double value(uint16_t h) const {
    const int bias = (1 << (exponent_bits - 1)) - 1;
    const uint32_t e = (h & 0x7fffu) >> mantissa_bits, m = h & ((1u << mantissa_bits) - 1);
    const double sign = (h & 0x8000u) ? -1.0 : 1.0;
    if (e == (1u << exponent_bits) - 1)
      return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
    if (e == 0) return sign * std::ldexp(double(m), 1 - bias - mantissa_bits);
    return sign * std::ldexp(double(m + (1u << mantissa_bits)), int(e) - bias - mantissa_bits);
  }
  // value(0) ... value(infinity() - 1), then where the next value would be if the exponent
  // went on (2^16 for float16, 2^128 for bfloat16): sorted, and index == bit pattern.
  std::vector<double> non_negative_values() const {
    std::vector<double> v;
    for (uint32_t h = 0; h < infinity(); ++h) v.push_back(value(uint16_t(h)));
    v.push_back(std::ldexp(1.0, 1 << (exponent_bits - 1)));
    return v;
  }
};

const HalfFormat kBFloat16{"bfloat16", 7, 8, [](uint16_t h) { return bfloat16_to_float(BFloat16{h}); },
                           [](float f) { return float_to_bfloat16(f).bits; }};
const HalfFormat kFloat16{"float16", 10, 5, [](uint16_t h) { return float16_to_float(Float16{h}); },
                          [](float f) { return float_to_float16(f).bits; }};

// Round-to-nearest-even of x by search: the nearest of the sorted values, the one with the
// even pattern on a tie; at or past the extra top value (a tie with the largest finite
// value, whose pattern is odd, goes there too) the infinity.
uint16_t reference_rounding(const HalfFormat& f, const std::vector<double>& values, float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  if (a >= values.back()) return uint16_t(sign | f.infinity());
  const size_t above = size_t(std::upper_bound(values.begin(), values.end(), a) - values.begin());
  const size_t below = above - 1;  // values[0] = 0 <= a
  const double to_below = a - values[below], to_above = values[above] - a;  // exact: both are in range
  size_t nearest = to_below < to_above ? below : to_above < to_below ? above : (below % 2 == 0 ? below : above);
  return uint16_t(sign | nearest);
}

float next_float(float x, float toward) { return std::nextafter(x, toward); }

// The inputs that decide rounding: every value, the halfway point to its neighbour above
// (exact in float32: one bit more than the format's significand) and the floats on either
// side of both, with both signs; the infinities, NaNs with several payloads, float32's
// extremes and subnormals; then a million random bit patterns.
std::vector<float> rounding_inputs(const HalfFormat& f) {
  const std::vector<double> values = f.non_negative_values();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> in;
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const float v = float(values[i]), mid = float((values[i] + values[i + 1]) / 2);
    EXPECT_EQ(double(mid), (values[i] + values[i + 1]) / 2) << f.name << ": halfway point not exact in float32";
    for (float x : {v, next_float(v, -inf), next_float(v, inf), mid, next_float(mid, -inf), next_float(mid, inf)}) {
      in.push_back(x);
      in.push_back(-x);
    }
  }
  const float nan_bits[] = {float32_from_bits(0x7fc00000u), float32_from_bits(0x7f800001u),
                            float32_from_bits(0xffc12345u), float32_from_bits(0x7fbfffffu)};
  in.insert(in.end(), std::begin(nan_bits), std::end(nan_bits));
  for (float x : {inf, std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), float32_from_bits(0x007fffffu), 65504.0f, 65519.996f,
                  65520.0f, 65536.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(1.5f, -25),
                  std::ldexp(1.0f, -26)}) {
    in.push_back(x);
    in.push_back(-x);
  }
  std::mt19937 rng(27);
  for (int i = 0; i < 1'000'000; ++i) in.push_back(float32_from_bits(uint32_t(rng())));
  return in;
}

void expect_every_pattern_round_trips(const HalfFormat& f) {
  int64_t failures = 0;
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t h = uint16_t(bits);
    const float x = f.to_float(h);
    const double want = f.value(h);
    const uint16_t back = f.from_float(x);
    // A quiet NaN comes back as it was; a signalling one quietened, sign and payload kept.
    const uint16_t want_back = f.is_nan(h) ? uint16_t(h | f.quiet_bit()) : h;
    const bool value_ok = f.is_nan(h) ? std::isnan(x) : double(x) == want && std::signbit(x) == bool(h & 0x8000u);
    if ((!value_ok || back != want_back) && ++failures <= 10)
      ADD_FAILURE() << f.name << " 0x" << std::hex << bits << ": to float " << x << " (want " << want << "), back 0x"
                    << back << " (want 0x" << want_back << ")";
  }
  EXPECT_EQ(failures, 0) << f.name;
}

void expect_rounding_matches_reference(const HalfFormat& f) {
  const std::vector<double> values = f.non_negative_values();
  int64_t failures = 0;
  for (float x : rounding_inputs(f)) {
    const uint16_t got = f.from_float(x);
    if (std::isnan(x)) {
      // Sign and the upper payload bits kept, the quiet bit set.
      const uint32_t u = float32_bits(x);
      const uint16_t want = uint16_t(((u >> 16) & 0x8000u) | f.infinity() | f.quiet_bit() |
                                     ((u & 0x7fffffu) >> (23 - f.mantissa_bits)));
      if (got != want && ++failures <= 10) ADD_FAILURE() << f.name << " NaN 0x" << std::hex << u << " -> 0x" << got;
      continue;
    }
    const uint16_t want = reference_rounding(f, values, x);
    if (got != want && ++failures <= 10)
      ADD_FAILURE() << f.name << ": " << x << " (0x" << std::hex << float32_bits(x) << ") -> 0x" << got
                    << ", the reference rounds to 0x" << want;
  }
  EXPECT_EQ(failures, 0) << f.name;
}

TEST(HalfTypes, EveryBFloat16PatternRoundTrips) { expect_every_pattern_round_trips(kBFloat16); }
TEST(HalfTypes, EveryFloat16PatternRoundTrips) { expect_every_pattern_round_trips(kFloat16); }
TEST(HalfTypes, BFloat16RoundsToNearestEven) { expect_rounding_matches_reference(kBFloat16); }
TEST(HalfTypes, Float16RoundsToNearestEven) { expect_rounding_matches_reference(kFloat16); }

// The thresholds by name, so that a failure of the sweeps above reads plainly.
TEST(HalfTypes, Float16OverflowAndUnderflowThresholds) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_float16(65504.0f).bits, 0x7bffu);
  EXPECT_EQ(float_to_float16(next_float(65520.0f, 0.0f)).bits, 0x7bffu);
  EXPECT_EQ(float_to_float16(65520.0f).bits, 0x7c00u);  // the tie goes to even: past 65504 (odd), inf
  EXPECT_EQ(float_to_float16(-inf).bits, 0xfc00u);
  EXPECT_EQ(float_to_float16(std::ldexp(1.0f, -25)).bits, 0x0000u);                    // tie with 0: even
  EXPECT_EQ(float_to_float16(next_float(std::ldexp(1.0f, -25), inf)).bits, 0x0001u);  // 2^-24
  EXPECT_EQ(float_to_float16(std::ldexp(3.0f, -25)).bits, 0x0002u);                    // 1.5 * 2^-24: tie, even
  EXPECT_EQ(float_to_float16(-std::ldexp(1.0f, -30)).bits, 0x8000u);                   // -0
  EXPECT_EQ(float16_to_float(Float16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80u);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::denorm_min()).bits, 0x0000u);
  EXPECT_EQ(float_to_bfloat16(float32_from_bits(0x00008000u)).bits, 0x0000u);  // tie, even
  EXPECT_EQ(float_to_bfloat16(float32_from_bits(0x00018000u)).bits, 0x0002u);  // tie, even
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(HalfTypes, MatchPyTorchBitForBit) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  std::vector<float> in = rounding_inputs(kBFloat16);
  const std::vector<float> more = rounding_inputs(kFloat16);
  in.insert(in.end(), more.begin(), more.end());
  testing::TempDir dir;
  const std::string in_path = dir.file("in.bin"), out_path = dir.file("out.bin");
  {
    std::ofstream f(in_path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(in.data()), std::streamsize(in.size() * sizeof(float)));
  }
  const testing::ScriptResult script =
      testing::run_python_script("tests/kernels/torch_half_rounding.py", "'" + in_path + "' '" + out_path + "'");
  ASSERT_EQ(script.status, 0) << script.output;
  const std::vector<char> out = read_file(out_path);
  ASSERT_EQ(out.size(), in.size() * 4) << "bfloat16 and float16 patterns for " << in.size() << " inputs";
  std::vector<uint16_t> torch(in.size() * 2);
  std::memcpy(torch.data(), out.data(), out.size());
  for (const HalfFormat* f : {&kBFloat16, &kFloat16}) {
    const uint16_t* want = torch.data() + (f == &kBFloat16 ? 0 : in.size());
    int64_t failures = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t got = f->from_float(in[i]);
      const bool same = std::isnan(in[i]) ? f->is_nan(got) && f->is_nan(want[i]) : got == want[i];
      if (!same && ++failures <= 10)
        ADD_FAILURE() << f->name << ": " << in[i] << " (0x" << std::hex << float32_bits(in[i]) << ") -> 0x" << got
                      << ", PyTorch 0x" << want[i];
    }
    EXPECT_EQ(failures, 0) << f->name << " over " << in.size() << " inputs";
  }
}

}  // namespace
}  // namespace dpcore::kernels
