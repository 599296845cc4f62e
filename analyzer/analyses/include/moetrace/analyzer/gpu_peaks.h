// Datasheet peaks of the GPUs the efficiency figures (efficiency.h) compare
// against: dense (no 2:4 sparsity) tensor-core TFLOP/s, HBM bandwidth and
// the scale-up link's bandwidth per GPU and direction. One table, in
// gpu_peaks.cc, each entry with the vendor document it comes from; a figure
// that could not be checked is absent (nullopt), never guessed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace moetrace::analyzer {

// The element types a peak is given for.
enum class PeakDtype { kBf16, kFp16, kFp8, kTf32, kFp32 };
std::string_view peak_dtype_name(PeakDtype d);  // "BF16", "FP16", "FP8", "TF32", "FP32"

struct GpuPeaks {
  std::string_view name;  // "H100 SXM"
  // TFLOP/s, dense; BF16 and FP16 are the same on every GPU of the table.
  std::optional<double> bf16_tflops, fp8_tflops, tf32_tflops, fp32_tflops;
  std::optional<double> hbm_gbps;   // GB/s (10^9 bytes)
  std::optional<double> link_gbps;  // GB/s per GPU per direction (NVLink, Infinity Fabric)
  std::string_view link;            // "NVLink 4", "Infinity Fabric"
  std::string_view source;          // the vendor's document: title and URL
  std::string_view checked;         // where the figures were checked, and what was left out and why

  std::optional<double> tflops(PeakDtype d) const;
};

// Every GPU of the table, in its order.
std::span<const GpuPeaks> gpu_peak_table();

// The entry for a device name as CUDA/ROCm and the PyTorch profiler report
// it ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "AMD Instinct
// MI300X"), case, spaces, '-' and '_' ignored; nullptr where no entry
// matches (other GPUs, and variants of a listed GPU with other clocks or
// memory: H100 NVL, H200 NVL, A100 PCIe, GB200/GB300 superchips).
const GpuPeaks* find_gpu_peaks(std::string_view device_name);

// The entry of a device by its name, else, where the name matches none
// (ROCm's Kineto traces leave deviceProperties' name empty; the importer
// calls it "GPU N"), by its properties alone; nullptr where neither
// identifies one. An MI300X is gfx942 (compute 9.4 as ROCm reports it) with
// 304 compute units and 192 GB of HBM3 (its data sheet); the MI300A has 228
// units, the MI325X 256 GB.
const GpuPeaks* find_gpu_peaks(std::string_view name, int compute_major, int compute_minor, int sm_count,
                               std::int64_t memory_bytes);

// The element type a dtype name means for the peak ("bfloat16", "BF16",
// "torch.float16", "float8_e4m3fn", "fp8", "float32", "tf32"); nullopt
// where unknown.
std::optional<PeakDtype> parse_peak_dtype(std::string_view dtype);

}  // namespace moetrace::analyzer
