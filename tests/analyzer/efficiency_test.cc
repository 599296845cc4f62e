// Efficiency against datasheet peaks (efficiency.h, gpu_peaks.h). The golden
// numbers are derived by hand in the comments from the fixture's FLOPs,
// bytes and times and from the datasheet figures (docs/analyses.md); the
// real-trace test checks only what can be checked by hand (device matched,
// figures present and below 100 % of peak).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>
#include <string>

#include "gunzip.h"
#include "kineto_fixture.h"
#include "loaded_trace.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/efficiency.h"
#include "moetrace/analyzer/gpu_peaks.h"
#include "moetrace/analyzer/report.h"
#include "shared_data.h"
#include "test_paths.h"
#include "text_trace.h"

namespace moetrace::testing {
namespace {

using analyzer::analyze_efficiency;
using analyzer::find_gpu_peaks;

TEST(GpuPeaks, DeviceNamesMatchAsDriversAndProfilersWriteThem) {
  // CUDA's device names (nvidia-smi, cudaGetDeviceProperties, Kineto's
  // deviceProperties), any case and spacing.
  const std::pair<const char*, const char*> named[] = {
      {"NVIDIA H100 80GB HBM3", "H100 SXM"},    {"nvidia  h100-80gb-hbm3", "H100 SXM"},
      {"NVIDIA H100 PCIe", "H100 PCIe"},        {"NVIDIA H200", "H200"},
      {"NVIDIA H800", "H800"},                  {"NVIDIA B200", "B200"},
      {"NVIDIA B300 SXM6 AC", "B300"},          {"NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"},
      {"NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"}, {"AMD Instinct MI300X", "MI300X"},
      {"AMD INSTINCT MI300X OAM", "MI300X"},
  };
  for (const auto& [device, entry] : named) {
    const auto* p = find_gpu_peaks(device);
    ASSERT_NE(p, nullptr) << device;
    EXPECT_EQ(p->name, entry) << device;
  }
  // Variants with other clocks or memory are not guessed.
  for (const char* other : {"NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA A100 80GB PCIe", "NVIDIA A100-PG509-200",
                            "NVIDIA GB200", "Tesla V100-SXM2-32GB", ""})
    EXPECT_EQ(find_gpu_peaks(other), nullptr) << other;
}

// ROCm's Kineto traces leave the device name empty (the importer calls it
// "GPU N"): an MI300X by its properties alone, gfx942 (compute 9.4 as ROCm
// reports it), 304 compute units, 192 GiB (206141652992 bytes, as a real
// trace records it); not an MI300A (228 units) nor an MI325X (256 GB), nor
// anything with another compute capability. A name the table knows wins.
TEST(GpuPeaks, AnUnnamedDeviceByItsProperties) {
  const std::int64_t gib = 1LL << 30;
  const auto* mi300x = find_gpu_peaks("GPU 2", 9, 4, 304, 206141652992);
  ASSERT_NE(mi300x, nullptr);
  EXPECT_EQ(mi300x->name, "MI300X");
  EXPECT_EQ(find_gpu_peaks("", 9, 4, 304, 192 * gib), mi300x);
  EXPECT_EQ(find_gpu_peaks("GPU 0", 9, 4, 228, 128 * gib), nullptr);
  EXPECT_EQ(find_gpu_peaks("GPU 0", 9, 4, 304, 256 * gib), nullptr);
  EXPECT_EQ(find_gpu_peaks("GPU 0", 9, 0, 304, 192 * gib), nullptr);
  EXPECT_EQ(find_gpu_peaks("NVIDIA H100 80GB HBM3", 9, 0, 132, 80 * gib)->name, "H100 SXM");
}

TEST(GpuPeaks, EveryEntryNamesItsSourceAndDenseIsHalfOfSparse) {
  for (const auto& g : analyzer::gpu_peak_table()) {
    EXPECT_FALSE(g.source.empty()) << g.name;
    EXPECT_FALSE(g.checked.empty()) << g.name;
    if (g.bf16_tflops && g.fp8_tflops) {
      EXPECT_NEAR(*g.fp8_tflops, 2 * *g.bf16_tflops, 0.2) << g.name;
    }
  }
  // H100 SXM: the datasheet's 1,979 TFLOPS BF16 with sparsity -> 989.5 dense;
  // NVLink 900 GB/s both directions -> 450 per direction.
  const auto* h100 = find_gpu_peaks("NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ(*h100->bf16_tflops, 989.5);
  EXPECT_DOUBLE_EQ(*h100->link_gbps, 450.0);
  EXPECT_FALSE(find_gpu_peaks("NVIDIA H800")->bf16_tflops.has_value());  // not checked: left out
}

TEST(Efficiency, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(analyzer::busbw_factor("all_reduce", 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(analyzer::busbw_factor("all_to_all", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(analyzer::busbw_factor("all_to_all", 1), 0.0);
}

TEST(Efficiency, GoldenNumbersOnTwoGpus) {
  const auto t = load_text_trace("eff_two_gpus.db", kTwoGpus);
  const auto e = analyze_efficiency(t);
  EXPECT_TRUE(e.dtype_assumed);  // no dtype recorded: BF16
  EXPECT_EQ(e.dtype, analyzer::PeakDtype::kBf16);
  ASSERT_EQ(e.devices.size(), 2u);
  ASSERT_NE(e.devices[0].peaks, nullptr);
  ASSERT_NE(e.devices[1].peaks, nullptr);
  EXPECT_EQ(e.devices[0].peaks->name, "H100 SXM");
  EXPECT_EQ(e.devices[1].peaks->name, "A100 SXM 80GB");
  EXPECT_TRUE(e.unmatched_devices.empty());

  ASSERT_EQ(e.layers.size(), 2u);
  const auto& l0 = e.layers[0];
  const auto& l1 = e.layers[1];
  // Rank 0: 1e9 FLOPs over the union [1000, 3000) = 2000 ns: 1e9 / 2000 ns =
  // 5e5 GFLOP/s = 500 TFLOP/s; / 989.5 = 50.5306 %.
  EXPECT_DOUBLE_EQ(l0.expert.flops, 1e9);
  EXPECT_EQ(l0.expert.time_ns, 2000);
  EXPECT_DOUBLE_EQ(l0.expert.achieved_tflops, 500.0);
  EXPECT_NEAR(l0.expert.percent_of_peak, 100.0 * 500.0 / 989.5, 1e-9);
  // All-to-all: 800,000 B over 2000 ns = 400 GB/s; busbw x (2-1)/2 = 200;
  // / 450 = 44.444 %.
  EXPECT_EQ(l0.all_to_all.bytes, 800000);
  EXPECT_EQ(l0.all_to_all.group_size, 2);
  EXPECT_DOUBLE_EQ(l0.all_to_all.algbw_gbps, 400.0);
  EXPECT_DOUBLE_EQ(l0.all_to_all.busbw_gbps, 200.0);
  EXPECT_NEAR(l0.all_to_all.percent_of_link, 100.0 * 200.0 / 450.0, 1e-9);
  // Rank 1: 2e8 / 2000 ns = 100 TFLOP/s; / 312 = 32.0513 %. All-to-all
  // 800,000 B over 1000 + 400 ns = 571.43 GB/s; busbw 285.71; / 300 = 95.238 %.
  EXPECT_DOUBLE_EQ(l1.expert.achieved_tflops, 100.0);
  EXPECT_NEAR(l1.expert.percent_of_peak, 100.0 * 100.0 / 312.0, 1e-9);
  EXPECT_NEAR(l1.all_to_all.algbw_gbps, 800000.0 / 1400.0, 1e-9);
  EXPECT_NEAR(l1.all_to_all.busbw_gbps, 400000.0 / 1400.0, 1e-9);
  EXPECT_NEAR(l1.all_to_all.percent_of_link, 100.0 * (400000.0 / 1400.0) / 300.0, 1e-9);
  EXPECT_EQ(l1.all_reduce.ops, 0);  // the all-reduce is outside the layer

  // Per rank: the all-reduce too: 300,000 B / 1000 ns = 300 GB/s; busbw
  // x 2(2-1)/2 = 300; rank 0 / 450 = 66.667 %, rank 1 / 300 = 100 %.
  ASSERT_EQ(e.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(e.ranks[0].expert.achieved_tflops, 500.0);
  EXPECT_DOUBLE_EQ(e.ranks[0].all_reduce.algbw_gbps, 300.0);
  EXPECT_DOUBLE_EQ(e.ranks[0].all_reduce.busbw_gbps, 300.0);
  EXPECT_NEAR(e.ranks[0].all_reduce.percent_of_link, 100.0 * 300.0 / 450.0, 1e-9);
  EXPECT_NEAR(e.ranks[1].all_reduce.percent_of_link, 100.0, 1e-9);

  // Collectives. All-to-all, bucket [256 KiB, 512 KiB) (400,000 B): two
  // instances, four calls. Dispatch: rank 1 ready at 600, so rank 0 waits
  // 600 of its 1000 ns and transfers 400; rank 1 waits 0 and transfers 1000.
  // Combine: rank 0 waits 600 (until 3600) and transfers 400; rank 1 0 and
  // 400. Waits {600, 0, 600, 0}: total 1200, median (0 + 600) / 2 = 300;
  // transfers {400, 1000, 400, 400}: total 2200, median 400. busbw of the
  // transfer: 4 x 400,000 B x 1/2 / 2200 ns = 363.636 GB/s; two GPUs of
  // different links: no % of link.
  ASSERT_EQ(e.collectives.size(), 2u);
  EXPECT_TRUE(e.wait_separated);
  const auto& ar = e.collectives[0];
  const auto& aa = e.collectives[1];
  EXPECT_EQ(ar.kind, "all_reduce");  // sorted by kind: all_reduce < all_to_all
  EXPECT_EQ(aa.kind, "all_to_all");
  EXPECT_EQ(aa.min_bytes, 262144);
  EXPECT_EQ(aa.instances, 2);
  EXPECT_EQ(aa.calls, 4);
  EXPECT_EQ(aa.unpaired_calls, 0);
  EXPECT_EQ(aa.wait_total_ns, 1200);
  EXPECT_EQ(aa.wait_median_ns, 300);
  EXPECT_EQ(aa.transfer_total_ns, 2200);
  EXPECT_EQ(aa.transfer_median_ns, 400);
  EXPECT_NEAR(aa.busbw_gbps, 800000.0 / 2200.0, 1e-9);
  // Skew (rank_waits' wait): dispatch 600 - 0 on rank 0, combine 3600 - 3000.
  EXPECT_EQ(aa.skew_total_ns, 1200);
  EXPECT_LT(aa.percent_of_link, 0);
  // All-reduce [256 KiB, 512 KiB): one instance, both ready at 4000: no wait;
  // transfer 2 x 1000 ns; busbw 2 x 300,000 x 2(1)/2 / 2000 = 300 GB/s.
  EXPECT_EQ(ar.instances, 1);
  EXPECT_EQ(ar.calls, 2);
  EXPECT_EQ(ar.wait_total_ns, 0);
  EXPECT_EQ(ar.transfer_total_ns, 2000);
  EXPECT_EQ(ar.transfer_median_ns, 1000);
  EXPECT_DOUBLE_EQ(ar.busbw_gbps, 300.0);
}

TEST(Efficiency, RecordedDtypeUnknownGpuAndMissingFlops) {
  // FP8 recorded; rank 0's GPU is not in the table; the expert op has no
  // FLOPs on rank 1; one rank of the all-to-all only (rank 0's combine has
  // no partner): wait not separated for it.
  const auto t = load_text_trace("eff_dtype.db", R"(
    run world_size=2
    config torch_dtype=float8_e4m3fn
    device id=0 name=Tesla_V100-SXM2-32GB
    device id=1 name=NVIDIA_H200
    stream id=0 rank=0 device=0 role=compute
    stream id=2 rank=1 device=1 role=compute
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=0 end=1000 flops=1e8
    op rank=1 stream=2 kind=expert_ffn layer=0 iteration=0 start=0 end=1000
    op rank=1 stream=2 kind=combine_all_to_all layer=0 iteration=0 start=1000 end=1500 bytes=1000
  )");
  const auto e = analyze_efficiency(t);
  EXPECT_FALSE(e.dtype_assumed);
  EXPECT_EQ(e.dtype, analyzer::PeakDtype::kFp8);
  ASSERT_EQ(e.unmatched_devices.size(), 1u);
  EXPECT_EQ(e.unmatched_devices[0], "Tesla V100-SXM2-32GB");
  // Rank 0: 1e8 / 1000 ns = 100 TFLOP/s, no peak.
  EXPECT_DOUBLE_EQ(e.layers[0].expert.achieved_tflops, 100.0);
  EXPECT_LT(e.layers[0].expert.peak_tflops, 0);
  EXPECT_LT(e.layers[0].expert.percent_of_peak, 0);
  // Rank 1: no FLOPs: none, not 0; the H200's FP8 peak 1979 still given.
  EXPECT_LT(e.layers[1].expert.flops, 0);
  EXPECT_LT(e.layers[1].expert.achieved_tflops, 0);
  EXPECT_DOUBLE_EQ(e.layers[1].expert.peak_tflops, 1979.0);
  // One call, no partner: 500 ns all transfer; n from the world size (2):
  // busbw 1000 B x 1/2 / 500 ns = 1 GB/s.
  ASSERT_EQ(e.collectives.size(), 1u);
  EXPECT_FALSE(e.wait_separated);
  EXPECT_EQ(e.collectives[0].unpaired_calls, 1);
  EXPECT_EQ(e.collectives[0].wait_total_ns, 0);
  EXPECT_EQ(e.collectives[0].transfer_total_ns, 500);
  EXPECT_DOUBLE_EQ(e.collectives[0].busbw_gbps, 1.0);
  EXPECT_EQ(e.collectives[0].min_bytes, 512);

  // The report says which device was not found, and that FLOPs are missing.
  const auto a = analyzer::analyze(t, {}, {}, 1);
  std::ostringstream text;
  analyzer::ReportOptions o;
  analyzer::write_report(text, t, a, o);
  EXPECT_NE(text.str().find("\"Tesla V100-SXM2-32GB\" (rank 0): not found in the datasheet table"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("no FLOPs"), std::string::npos);
  EXPECT_NE(text.str().find("cannot be separated"), std::string::npos);
}

TEST(Efficiency, RanksOnOneGpuHaveNoLinkPeakAndOpsWithoutTimeAddNoBytes) {
  // Two ranks on one H200 (the emulated communicator): the all-to-all is a
  // copy within the GPU: 1,000,000 B / 1000 ns = 1000 GB/s algbw, busbw 500,
  // no % of link. A second all-to-all of zero length (no kernels) adds no
  // bytes.
  const auto t = load_text_trace("eff_one_gpu.db", R"(
    run world_size=2
    device id=0 name=NVIDIA_H200
    stream id=0 rank=0 device=0 role=comm
    stream id=1 rank=1 device=0 role=comm
    op rank=0 stream=0 kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=1000 bytes=1000000
    op rank=1 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=1000 bytes=1000000
    op rank=0 stream=0 kind=combine_all_to_all layer=0 iteration=0 start=2000 end=2000 bytes=8000000
  )");
  const auto e = analyze_efficiency(t);
  ASSERT_EQ(e.devices.size(), 2u);
  EXPECT_TRUE(e.devices[0].shared);
  EXPECT_TRUE(e.devices[1].shared);
  const auto& r0 = e.layers[0].all_to_all;
  EXPECT_EQ(r0.ops, 2);
  EXPECT_EQ(r0.ops_with_bytes, 1);
  EXPECT_EQ(r0.bytes, 1000000);
  EXPECT_DOUBLE_EQ(r0.algbw_gbps, 1000.0);
  EXPECT_DOUBLE_EQ(r0.busbw_gbps, 500.0);
  EXPECT_LT(r0.link_gbps, 0);
  EXPECT_LT(r0.percent_of_link, 0);
  for (const auto& b : e.collectives) EXPECT_LT(b.percent_of_link, 0);
}

// A real trace: TraceLens' MoE micro-benchmark recorded on a B300 (its
// deviceProperties name every GPU "NVIDIA B300 SXM6 AC"; the expert bmm
// ops record their input shapes and c10::BFloat16 types).
TEST(Efficiency, RealB300TraceMatchesItsDeviceAndStaysBelowPeak) {
  const auto in = shared_data("kineto/tracelens-b300-moe_04_top2_dense.json.gz");
  MOETRACE_NEED_SHARED(in);
  const auto t = import_and_load({in}, temp_path("eff_b300.db"));
  const auto e = analyze_efficiency(t);
  // By hand: the expert bmm ops record Input type ['c10::BFloat16', ...].
  EXPECT_FALSE(e.dtype_assumed) << e.dtype_source;
  EXPECT_EQ(e.dtype, analyzer::PeakDtype::kBf16);
  ASSERT_FALSE(e.devices.empty());
  for (const auto& d : e.devices) {
    ASSERT_NE(d.peaks, nullptr) << d.device;
    EXPECT_EQ(d.peaks->name, "B300");
  }
  ASSERT_FALSE(e.layers.empty());
  for (const auto& r : e.layers) {
    EXPECT_GT(r.expert.ops, 0);
    if (r.expert.flops < 0) continue;  // shapes not recorded: no TFLOP/s, checked below
    EXPECT_GT(r.expert.achieved_tflops, 0);
    EXPECT_GT(r.expert.percent_of_peak, 0);
    EXPECT_LT(r.expert.percent_of_peak, 100);
  }
  bool some_flops = false;
  for (const auto& r : e.layers) some_flops |= r.expert.flops > 0;
  EXPECT_TRUE(some_flops);
}

// A GPU fixture of ours (tests/data/gpu, README there): DPMoE with 4
// emulated ranks on one H200, FLOPs and bytes recorded by the executor.
// Checked by hand: its devices table holds one "NVIDIA H200", every rank on
// it; so the H200 is matched, the ranks share it (no % of link), and an
// expert GEMM cannot beat the dense peak.
TEST(Efficiency, H200FixtureMatchesItsDeviceAndStaysBelowPeak) {
  const std::string gz = std::string(MOETRACE_GPU_FIXTURES_DIR) + "/dpmoe.db.gz";
  if (!std::filesystem::exists(gz)) GTEST_SKIP() << "no GPU fixture " << gz;
  const auto db = temp_path("eff_dpmoe.db");
  ASSERT_EQ(gunzip(gz, db), "");
  const auto t = analyzer::load_trace(db);
  const auto e = analyze_efficiency(t);
  ASSERT_EQ(e.devices.size(), 4u);
  for (const auto& d : e.devices) {
    ASSERT_NE(d.peaks, nullptr) << d.device;
    EXPECT_EQ(d.peaks->name, "H200");
    EXPECT_TRUE(d.shared);
  }
  ASSERT_FALSE(e.layers.empty());
  for (const auto& r : e.layers) {
    EXPECT_GT(r.expert.achieved_tflops, 0);
    EXPECT_GT(r.expert.percent_of_peak, 0);
    EXPECT_LT(r.expert.percent_of_peak, 100);
    EXPECT_GT(r.all_to_all.busbw_gbps, 0);
    EXPECT_LT(r.all_to_all.percent_of_link, 0);  // ranks share the GPU
  }
}

}  // namespace
}  // namespace moetrace::testing
