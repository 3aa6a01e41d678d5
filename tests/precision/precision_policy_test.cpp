#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <string>

#include "ipu_backend/precision/precision_policy.h"

namespace ipu::precision {
namespace {

// Built with append: GCC 12 warns falsely (-Wrestrict) on "'" + std::string(s) + "'".
std::string quoted(std::string_view s) {
  std::string q = "'";
  q.append(s);
  q.push_back('\'');
  return q;
}

std::string errorOf(std::string_view s) {
  try {
    PrecisionPolicy::parse(s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PrecisionPolicy, Presets) {
  const auto fp32 = PrecisionPolicy::parse("fp32");
  EXPECT_EQ(fp32.compute, DType::F32);
  EXPECT_EQ(fp32.lossScaling.mode, LossScalingMode::None);
  EXPECT_FALSE(fp32.stochasticRounding);
  EXPECT_FALSE(fp32.isMixed());

  const auto fp16 = PrecisionPolicy::parse("fp16");
  EXPECT_EQ(fp16.compute, DType::F16);
  EXPECT_EQ(fp16.masterWeights, DType::F32);
  EXPECT_EQ(fp16.partials, DType::F32);
  EXPECT_EQ(fp16.lossScaling.mode, LossScalingMode::Dynamic);

  const auto bf = PrecisionPolicy::parse("bf16");
  EXPECT_EQ(bf.compute, DType::BF16);
  EXPECT_FALSE(bf.nativeOnIpu);
  EXPECT_EQ(bf.lossScaling.mode, LossScalingMode::None);
  EXPECT_NE(bf.describe().find("not native"), std::string::npos);

  const auto p1616 = PrecisionPolicy::parse("16.16");
  EXPECT_EQ(p1616.compute, DType::F16);
  EXPECT_EQ(p1616.masterWeights, DType::F16);
  EXPECT_EQ(p1616.partials, DType::F16);
  EXPECT_TRUE(p1616.stochasticRounding);
  EXPECT_EQ(p1616.lossScaling, LossScalingConfig::fixed(128.0f));
  EXPECT_TRUE(p1616.nativeOnIpu);

  const auto p1632 = PrecisionPolicy::parse("16.32");
  EXPECT_EQ(p1632.compute, DType::F16);
  EXPECT_EQ(p1632.masterWeights, DType::F32);
  EXPECT_EQ(p1632.partials, DType::F32);
  EXPECT_EQ(precisionPresets().size(), 5u);
}

TEST(PrecisionPolicy, OptionsAndRoundTrip) {
  const auto p = PrecisionPolicy::parse("16.16,loss=dynamic,sr=off");
  EXPECT_EQ(p.lossScaling, LossScalingConfig::dynamic());
  EXPECT_FALSE(p.stochasticRounding);
  EXPECT_EQ(PrecisionPolicy::parse("fp16,sr=on,loss=static:1024").lossScaling.scale, 1024.0f);
  for (std::string_view s : {"fp32", "fp16", "bf16", "16.16", "16.32", "16.16,loss=none",
                             "fp16,loss=dynamic:32768:500", "bf16,loss=static:0.5,sr=on"}) {
    const auto q = PrecisionPolicy::parse(s);
    EXPECT_EQ(PrecisionPolicy::parse(q.toString()), q) << s << " -> " << q.toString();
    std::ostringstream os;
    os << q;
    EXPECT_EQ(os.str(), q.toString());
  }
  EXPECT_EQ(PrecisionPolicy::parse("16.16").toString(), "16.16,loss=static:128,sr=on");
}

TEST(PrecisionPolicy, LossScalingSpecs) {
  EXPECT_EQ(parseLossScaling("none"), LossScalingConfig::none());
  EXPECT_EQ(parseLossScaling("static:128"), LossScalingConfig::fixed(128.0f));
  EXPECT_EQ(parseLossScaling("static:1e3").scale, 1000.0f);
  EXPECT_EQ(parseLossScaling("dynamic"), LossScalingConfig::dynamic());
  EXPECT_EQ(parseLossScaling("dynamic:1024"), LossScalingConfig::dynamic(1024.0f));
  EXPECT_EQ(parseLossScaling("dynamic:1024:100"), LossScalingConfig::dynamic(1024.0f, 100));
  EXPECT_EQ(toString(LossScalingConfig::fixed(128.0f)), "static:128");
  EXPECT_EQ(toString(LossScalingConfig::dynamic(1024.0f, 100)), "dynamic:1024:100");
  for (std::string_view bad :
       {"", "static", "static:", "static:0", "static:-1", "static:abc", "static:12x", "static:inf",
        "static:nan", "static:1:2", "none:1", "dynamic:", "dynamic:0", "dynamic:1e30",
        "dynamic:8:0", "dynamic:8:1.5", "dynamic:8:9:10", "Static:128", "fixed:128"}) {
    try {
      parseLossScaling(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(quoted(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("static:<S>"), std::string::npos) << msg;
    }
  }
}

TEST(PrecisionPolicy, BadStringsNameTheStringAndValidForms) {
  for (std::string_view bad :
       {"", "fp8", "FP16", "16.8", "fp16 ", "fp16,", "fp16,loss=", "fp16,loss=static",
        "fp16,sr=maybe", "fp16,foo=1", "fp16,sr=on,sr=off", "fp16,loss=none,loss=none",
        "fp32,sr=on", "16.16;loss=none"}) {
    const std::string msg = errorOf(bad);
    ASSERT_FALSE(msg.empty()) << "accepted '" << bad << "'";
    EXPECT_NE(msg.find(quoted(bad)), std::string::npos) << msg;
    EXPECT_NE(msg.find("fp32, fp16, bf16, 16.16, 16.32"), std::string::npos) << msg;
  }
  EXPECT_NE(errorOf("fp16,loss=static:x").find("static:<S>"), std::string::npos);
}

}  // namespace
}  // namespace ipu::precision
