// The GPU datasheet table (gpu_peaks.h). Dense means without 2:4 structured
// sparsity: NVIDIA's datasheets give tensor-core figures with sparsity and
// say the dense ones are half ("Shown with sparsity. Specifications 1/2
// lower without sparsity"), so each NVIDIA figure below is the sheet's
// halved. Links: the sheets give NVLink bandwidth as the GPU's total of both
// directions; the table holds half of it, one direction, as the busbw of
// nccl-tests is (doc/PERFORMANCE.md: "The measurement is of a unidirectional
// bandwidth"). docs/analyses.md shows the same table.
#include "moetrace/analyzer/gpu_peaks.h"

#include <array>
#include <string>

#include "moetrace/schema/ascii.h"

namespace moetrace::analyzer {

namespace {

constexpr std::string_view kH100Sheet =
    "NVIDIA H100 Tensor Core GPU Datasheet, "
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet";
constexpr std::string_view kHgxPage =
    "NVIDIA HGX Platform, specifications of HGX B200 and HGX B300 (8 GPUs; per GPU = platform / 8), "
    "https://www.nvidia.com/en-us/data-center/hgx/";
constexpr std::string_view kA100Sheet =
    "NVIDIA A100 Tensor Core GPU Datasheet, "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf";

const std::array<GpuPeaks, 9> kTable = {{
    {"H100 SXM", 989.5, 1979.0, 494.5, 67.0, 3350.0, 450.0, "NVLink 4", kH100Sheet,
     "the sheet's H100 SXM column (BF16 1,979, FP8 3,958, TF32 989 TFLOPS with sparsity; FP32 67 TFLOPS; "
     "3.35 TB/s; NVLink 900 GB/s) as reproduced at https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html "
     "and https://glennklockwood.com/garden/processors/h100"},
    {"H100 PCIe", 756.5, 1513.0, 378.0, 51.0, 2000.0, 300.0, "NVLink bridge", kH100Sheet,
     "the sheet's H100 PCIe column (BF16 1,513, FP8 3,026, TF32 756 TFLOPS with sparsity; FP32 51 TFLOPS; "
     "2,000 GB/s; NVLink bridge 600 GB/s) as reproduced at https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html"},
    {"H200", 989.5, 1979.0, std::nullopt, std::nullopt, 4800.0, 450.0, "NVLink 4",
     "NVIDIA H200 Tensor Core GPU, https://www.nvidia.com/en-us/data-center/h200/",
     "FP8 3,958 and BF16 1,979 TFLOPS with sparsity, 4.8 TB/s, NVLink 900 GB/s, as quoted at "
     "https://lzwjava.github.io/nvidia-h200-gpu-specs-en and the ai-hpc.github.io 8x H200 page; TF32 and FP32 "
     "not checked: left out"},
    {"H800", std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, 200.0, "NVLink 4",
     "no public NVIDIA datasheet found",
     "NVLink 400 GB/s (both directions) as given at https://www.philisun.com/technical-analysis/"
     "nvidia-h800-vs-h100-a-technical-deep-dive-into-politically-defined-ai-chips/; its tensor-core and HBM "
     "figures could not be checked against an NVIDIA document: left out"},
    {"B200", 2250.0, 4500.0, std::nullopt, std::nullopt, 8000.0, 900.0, "NVLink 5", kHgxPage,
     "HGX B200: FP16/BF16 36 PFLOPS and FP8 72 PFLOPS with sparsity, NVLink 1.8 TB/s per GPU, as reproduced at "
     "https://fibermall.com/blog/?p=17161; 8 TB/s per GPU and the dense figures at "
     "https://glennklockwood.com/garden/processors/B200; TF32 left out (18 PFLOPS / 8 / 2 = 1,125 against 1,100 "
     "there), FP32 left out (the sources differ)"},
    {"B300", 2250.0, 4500.0, std::nullopt, std::nullopt, 8000.0, 900.0, "NVLink 5", kHgxPage,
     "HGX B300: FP16/BF16 36 PFLOPS and FP8 72 PFLOPS with sparsity, NVLink 1.8 TB/s per GPU, as reproduced at "
     "https://fibermall.com/blog/?p=17161; 8 TB/s and the dense figures at "
     "https://glennklockwood.com/garden/processors/B300 (a blog's ~3,500 TFLOPS BF16 is not NVIDIA's HGX figure); "
     "TF32 and FP32 left out"},
    {"A100 SXM 80GB", 312.0, std::nullopt, 156.0, 19.5, 2039.0, 300.0, "NVLink 3", kA100Sheet,
     "dense BF16 312, TF32 156, FP32 19.5 TFLOPS, 2,039 GB/s, NVLink 600 GB/s as given at "
     "https://glennklockwood.com/garden/processors/A100 (citing the sheet); the A100 has no FP8"},
    {"A100 SXM 40GB", 312.0, std::nullopt, 156.0, 19.5, 1555.0, 300.0, "NVLink 3", kA100Sheet,
     "dense BF16 312, TF32 156, FP32 19.5 TFLOPS, 1,555 GB/s, NVLink 600 GB/s as given at "
     "https://glennklockwood.com/garden/processors/A100 (citing the sheet); the A100 has no FP8"},
    {"MI300X", 1307.4, 2614.9, std::nullopt, std::nullopt, 5300.0, 448.0, "Infinity Fabric",
     "AMD Instinct MI300X Accelerator data sheet, https://www.amd.com/content/dam/amd/en/documents/"
     "instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
     "dense BF16 1,307.4 and FP8 2,614.9 TFLOPS, 5.3 TB/s as quoted in "
     "github.com/alpharomercoma/MI300X-vs-H200 METHODOLOGY.md; Infinity Fabric 896 GB/s (both directions, 7 "
     "peers x 128 GB/s) at https://gpu.blog/gpus/instinct-mi300x-mi300x; TF32 and FP32 not checked: left out"},
}};

std::string normalized(std::string_view s) {
  std::string n;
  for (char c : s)
    if (c != ' ' && c != '-' && c != '_' && c != '\t') n += ascii_lower(c);
  return n;
}

const GpuPeaks* entry(std::string_view name) {
  for (const auto& g : kTable)
    if (g.name == name) return &g;
  return nullptr;
}

}  // namespace

std::string_view peak_dtype_name(PeakDtype d) {
  switch (d) {
    case PeakDtype::kBf16: return "BF16";
    case PeakDtype::kFp16: return "FP16";
    case PeakDtype::kFp8: return "FP8";
    case PeakDtype::kTf32: return "TF32";
    case PeakDtype::kFp32: return "FP32";
  }
  return "BF16";
}

std::optional<double> GpuPeaks::tflops(PeakDtype d) const {
  switch (d) {
    case PeakDtype::kBf16:
    case PeakDtype::kFp16: return bf16_tflops;
    case PeakDtype::kFp8: return fp8_tflops;
    case PeakDtype::kTf32: return tf32_tflops;
    case PeakDtype::kFp32: return fp32_tflops;
  }
  return std::nullopt;
}

std::span<const GpuPeaks> gpu_peak_table() { return kTable; }

const GpuPeaks* find_gpu_peaks(std::string_view device_name) {
  const auto n = normalized(device_name);
  auto has = [&](std::string_view s) { return n.find(s) != std::string::npos; };
  if (has("mi300x")) return entry("MI300X");
  if (has("gb200") || has("gb300")) return nullptr;  // superchips: other clocks and power
  if (has("b300")) return entry("B300");
  if (has("b200")) return entry("B200");
  if (has("h800")) return has("pcie") ? nullptr : entry("H800");
  if (has("h200")) return has("nvl") || has("pcie") ? nullptr : entry("H200");
  if (has("h100")) {
    if (has("nvl")) return nullptr;
    return has("pcie") ? entry("H100 PCIe") : entry("H100 SXM");
  }
  if (has("a100") && !has("pcie")) {
    if (has("80gb")) return entry("A100 SXM 80GB");
    if (has("40gb")) return entry("A100 SXM 40GB");
  }
  return nullptr;
}

const GpuPeaks* find_gpu_peaks(std::string_view name, int compute_major, int compute_minor, int sm_count,
                               std::int64_t memory_bytes) {
  if (const GpuPeaks* p = find_gpu_peaks(name)) return p;
  const double gib = static_cast<double>(memory_bytes) / static_cast<double>(1LL << 30);
  if (compute_major == 9 && compute_minor == 4 && sm_count == 304 && gib > 176 && gib <= 192) return entry("MI300X");
  return nullptr;
}

std::optional<PeakDtype> parse_peak_dtype(std::string_view dtype) {
  auto n = normalized(dtype);
  for (std::string_view prefix : {"torch.", "c10::"})
    if (n.starts_with(prefix)) n.erase(0, prefix.size());
  if (n == "bf16" || n == "bfloat16") return PeakDtype::kBf16;
  if (n == "fp16" || n == "float16" || n == "half") return PeakDtype::kFp16;
  if (n.starts_with("fp8") || n.starts_with("float8") || n == "e4m3" || n == "e5m2") return PeakDtype::kFp8;
  if (n == "tf32") return PeakDtype::kTf32;
  if (n == "fp32" || n == "float32" || n == "float") return PeakDtype::kFp32;
  return std::nullopt;
}

}  // namespace moetrace::analyzer
