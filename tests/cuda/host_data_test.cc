#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "moetrace/cuda/device_math.h"
#include "moetrace/cuda/host_data.h"
#include "moetrace/plan/reference.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_value(0x3F80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(bf16_bits(-2.0f), 0xC000);
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_value(bf16_bits(std::numeric_limits<float>::infinity()))));
}

TEST(Bf16, RoundTripKeepsEightBits) {
  for (double v : {0.1, -3.14159, 1e-3, 12345.678}) {
    const double back = bf16_value(bf16_bits(static_cast<float>(v)));
    EXPECT_LE(std::abs(back - v), std::abs(v) * std::ldexp(1.0, -8)) << v;
  }
}

TEST(DeviceTypes, ConvertBothWays) {
  const std::vector<double> in{0.5, -1.25, 3.0, 1e-2};
  for (DType t : {DType::kFp32, DType::kBf16}) {
    std::vector<char> dev(in.size() * static_cast<std::size_t>(dtype_bytes(t)));
    to_device_type(in.data(), static_cast<std::int64_t>(in.size()), t, dev.data());
    std::vector<double> out(in.size());
    from_device_type(dev.data(), static_cast<std::int64_t>(in.size()), t, out.data());
    for (std::size_t i = 0; i < in.size(); ++i)
      EXPECT_NEAR(out[i], in[i], t == DType::kFp32 ? 1e-7 : std::abs(in[i]) * 4e-3) << i;
  }
}

TEST(RandomTrainingData, DrawnByIndexAsRandomTrainingDataMakesThem) {
  plan::ModelShape shape;
  shape.model_dim = 5;
  const std::vector<std::int64_t> tokens{3, 0, 4};
  const int iterations = 3;
  const std::uint64_t seed = 77;
  const plan::TrainingData made = plan::random_training_data(shape, iterations, tokens, seed);
  const RandomTrainingData d{iterations, tokens, shape.model_dim, seed};
  for (int it = 0; it < iterations; ++it)
    for (int b = 0; b < 3; ++b)
      for (bool grad : {false, true}) {
        const plan::Matrix& m = grad ? made.output_grad(it, b) : made.input(it, b);
        const std::uint64_t first = training_normal_offset(d, grad, it, b);
        for (std::size_t j = 0; j < m.data.size(); ++j)
          ASSERT_EQ(splitmix64_normal(seed, first + j), m.data[j]) << it << " " << b << " " << grad << " " << j;
      }
  EXPECT_THROW(training_normal_offset(d, false, 3, 0), Error);
  EXPECT_THROW(training_normal_offset(d, true, 0, 3), Error);
}

}  // namespace
}  // namespace moetrace::cuda
