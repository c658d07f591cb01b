// The narrow kernel interface (DESIGN.md property 6). Everything above this header calls these
// functions and never knows which instruction set runs them: dispatch.cpp picks, once, the best
// implementation the CPU supports (AVX512-BF16, AVX-512, AVX2, or the portable reference), and
// RKV_ISA=reference|avx2|avx512|avx512bf16 forces one (for parity tests and benchmarks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/dtype.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace rkv::kernels {

// How the float32 activations meet 16-bit (bf16, f16) weights in matmul.
//  * Exact (the default): x is used as it is; the products are those of a float32 reference to
//    float32 rounding (the golden checkpoints' tolerance is for that arithmetic).
//  * Rounded: x is first rounded to nearest even to the weights' dtype, once per call, as
//    llama.cpp's CPU backend does before these dot products (its vec_dot_type of BF16 and F16):
//    the llama.cpp-precision mode, `--matmul-precision llamacpp` (docs/USAGE.md). The products of
//    two 16-bit values are exact in float32, so what differs from Exact is that rounding alone.
// Other weight dtypes ignore it (f32 takes x as it is, quantized types always quantize x).
enum class MatmulPrecision : std::uint8_t { Exact, Rounded };
std::string_view matmul_precision_name(MatmulPrecision p);
// Parses "exact" or "llamacpp"; throws rkv::Error naming the valid values.
MatmulPrecision parse_matmul_precision(std::string_view name);

// A row-major weight matrix of `rows` x `cols` elements of type `dtype` (a Linear layer's
// [out_features][in_features]), used in place from the memory-mapped checkpoint. A quantized
// dtype (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4: core/quant.h) stores each row as cols / block blocks.
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::size_t rows = 0;
  std::size_t cols = 0;
  MatmulPrecision precision = MatmulPrecision::Exact;
};

// x rounded to nearest even to bf16 (dtype BF16) or f16 (F16) and widened back to f32, n values:
// what matmul multiplies for MatmulPrecision::Rounded. Any other dtype copies x unchanged.
void round_activations(const float* x, std::size_t n, DType dtype, float* out);

// y[t][n] = sum_k x[t][k] * w[n][k] for t < T, n < w.rows.
// x: [T][w.cols] f32, y: [T][w.rows] f32. Accumulation is float32 (or better). With
// w.precision == Rounded and 16-bit weights, x is round_activations(x) (rounded once, here).
// AVX512-BF16 makes its bf16 parts with VCVTNEPS2BF16, which reads a denormal activation
// (|x| < 1.2e-38) as zero.
// Quantized weights: x is first quantized to 8 bits, as llama.cpp does for these dot products: in
// blocks of 32 (quant::quantize_activations, its Q8_0; it keeps llama.cpp's greedy ids on its own
// Q8_0/Q4_0 goldens), and for Q4_K/Q6_K in super-blocks of 256 (quantize_activations_k, its Q8_K;
// blocks of 32 where the AMX-INT8 tiles run them). The products are exact integers per block
// (per super-block for Q4_K/Q6_K), scaled and summed in float32.
void matmul(const float* x, std::size_t T, const WeightView& w, float* y, ThreadPool& pool);

// Several products of the same input: y_i = x w_i^T. Where the weights are bf16 on AVX512-BF16
// (and share their column count and precision), the activations are split once for all of them
// and their rows are shared out among the threads as one list, so that products too small to
// divide evenly (a model's k and v) do not leave a thread waiting. Quantized weights of one
// column count and one kind of activation blocks, off the AMX tiles, likewise: quantized once,
// their rows one list of chunks. Elsewhere, matmul for each. Every output is the same, bit for
// bit, as matmul's.
struct MatmulProduct {
  WeightView w;
  float* y = nullptr;  // [T][w.rows]
};
void matmul_many(const float* x, std::size_t T, std::span<const MatmulProduct> products,
                 ThreadPool& pool);

// Products each of its own input: y_j = x_j w_j^T over x_j's T_j rows (a mixture of experts'
// chosen experts). Where every weight is quantized and none runs on the AMX tiles, each distinct
// input (the same x, T and columns as an earlier job's, for the same kind of activation blocks) is
// quantized once and all the jobs' rows are shared out as one list, in one parallel region
// instead of one a product. Elsewhere, matmul_many for each run of jobs on one input. Every
// output is the same, bit for bit, as matmul's.
struct MatmulJob {
  const float* x = nullptr;  // [T][w.cols]
  std::size_t T = 0;
  WeightView w;
  float* y = nullptr;  // [T][w.rows]
};
void matmul_jobs(std::span<const MatmulJob> jobs, ThreadPool& pool);

// One instruction set's implementation of matmul for the output rows [n0, n1): the unit that
// dispatch splits across threads. ldy is y's row stride.
using MatmulRowsFn = void (*)(const float* x, std::size_t T, const WeightView& w, std::size_t n0,
                              std::size_t n1, float* y, std::size_t ldy);

enum class Isa { Reference, Avx2, Avx512, Avx512Bf16 };
std::string_view isa_name(Isa isa);
// The instruction set used by matmul (best supported, or RKV_ISA).
Isa active_isa();
// Whether this CPU (and build) can run `isa`.
bool isa_supported(Isa isa);
// The row kernel for one instruction set (nullptr where this build has none).
MatmulRowsFn matmul_rows_for(Isa isa);

// Portable reference implementation, the ground truth of the parity tests.
void matmul_rows_reference(const float* x, std::size_t T, const WeightView& w, std::size_t n0,
                           std::size_t n1, float* y, std::size_t ldy);

// ---- bf16 weights on AVX512-BF16 ----
// matmul splits the activations into bf16 parts once (hi = bf16(x), and for the exact precision
// lo = bf16(x - hi)) for every thread's rows, as it quantizes them once for quantized weights, and
// splits the rows over threads with Bf16RowsFn. Two layouts of `data`, both row_stride() elements
// a row:
//  * rows (the GEMV, and the AMX tiles, which read 16 rows of 32 elements in place): row t starts
//    at t * row_stride(): hi, then (exact precision only) lo at + kpad (kpad = cols rounded up to
//    32; zero past cols). The rounded precision's rows are hi alone, packed, so the GEMM's input
//    takes half the cache.
//  * grouped (the vector GEMM, bf16_grouped): rows in groups of kBf16GroupRows, group g at
//    g * kBf16GroupRows * row_stride(); within a group, for each bf16 pair p (elements 2p, 2p+1),
//    the group's hi pairs row by row, then (exact) their lo pairs: 32-bit pair (p, part, i) at
//    ((p * parts + part) * kBf16GroupRows + i) * 2 elements. The micro-kernel's broadcasts for one
//    pair then come from one cache line instead of one line a row. Rows past T in the last group
//    are zero.
struct Bf16Activations {
  const std::uint16_t* data = nullptr;
  std::size_t T = 0;
  std::size_t kpad = 0;
  bool lo = true;
  bool grouped = false;
  static std::size_t row_stride(std::size_t kpad, bool lo) { return lo ? 2 * kpad : kpad; }
  std::size_t row_stride() const { return row_stride(kpad, lo); }
};
inline constexpr std::size_t kBf16GroupRows = 8;
// Rows [0, n) of x (K columns) into `out`: n rows in the rows layout, or (grouped) one group,
// n <= kBf16GroupRows.
using Bf16SplitFn = void (*)(const float* x, std::size_t n, std::size_t K, bool lo,
                             std::size_t kpad, bool grouped, std::uint16_t* out);
using Bf16RowsFn = void (*)(const Bf16Activations& x, const WeightView& w, std::size_t n0,
                            std::size_t n1, float* y, std::size_t ldy);
// From kBf16GemmMinT input rows Bf16RowsFn runs a packed GEMM over panels of kBf16GemmPanel
// weight rows (below, a GEMV); matmul gives each thread whole panels, so that only a matrix's last
// panel is partial.
inline constexpr std::size_t kBf16GemmMinT = 34;
inline constexpr std::size_t kBf16GemmPanel = 48;
// nullptr where `isa` has no bf16 dot-product instruction (every ISA but Avx512Bf16).
Bf16SplitFn bf16_split_for(Isa isa);
Bf16RowsFn bf16_rows_for(Isa isa);

// AMX: with AVX512-BF16 active, a CPU with AMX-TILE and AMX-BF16 and a kernel that grants the
// process the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM)), bf16 products run on tiles: the GEMM
// (prefill, from kBf16GemmMinT rows) TDPBF16PS on the same packed panels and the same hi/lo
// activation parts, and fewer rows (decode, decode batches) TDPBF16PS on the weight rows in place
// (the rows layout), so both precisions keep their arithmetic (products of bf16 exact in f32,
// f32 accumulation); a bf16 cache's attention scores likewise (attention_amx_for in
// attention.h). RKV_AMX=off keeps it off; a CPU with AMX whose kernel refuses says so once on
// stderr. Decided once, on the first call.
bool amx_enabled();
// The layout Bf16RowsFn takes for T input rows: grouped for the vector GEMM (T >= kBf16GemmMinT,
// not on tiles), rows otherwise.
inline bool bf16_grouped(std::size_t T) {
  return T >= kBf16GemmMinT && !amx_enabled();
}
// AMX-INT8: with an AVX-512 ISA active, AVX512-VNNI, AMX-TILE and AMX-INT8 and the tile state
// granted, the quantized GEMM runs on tiles from kQuantAmxMinT rows for Q4_K, Q6_K and Q8_0 (K a
// multiple of 64): TDPBSSD on 8-bit activation blocks of 32 (for Q4_K and Q6_K too, which
// elsewhere take super-blocks of 256) and the weights' small integers, each block's integer dot
// product exact. Not in the llama.cpp-precision
// mode (MatmulPrecision::Rounded), whose quantized products keep the VNNI kernels' summation
// order, llama.cpp's. RKV_AMX=off keeps it off too.
bool amx_int8_enabled();
inline constexpr std::size_t kQuantAmxMinT = 16;
// Whether a product of T rows by w runs on the AMX-INT8 tiles (on a CPU where they are enabled).
inline bool quantized_on_tiles(const WeightView& w, std::size_t T) {
  return T >= kQuantAmxMinT && w.precision != MatmulPrecision::Rounded &&
         (w.dtype == DType::Q4_K || w.dtype == DType::Q6_K ||
          (w.dtype == DType::Q8_0 && w.cols % 64 == 0));
}
// "<isa>+amx" when either AMX path is on, else isa_name(active_isa()): what benchmarks print.
std::string kernels_name();

// ---- quantized weights ----
// matmul quantizes the activations once (an ISA's QuantizeActivationsFn or, for Q4_K/Q6_K off
// the AMX tiles, QuantizeActivationsKFn; every ISA's gives the same bytes as the quant:: one) and
// splits the rows over threads with that ISA's
// QuantizedRowsFn. x holds T rows of w.cols activations, quantized.
using QuantizedRowsFn = void (*)(const quant::ActivationBlocks& x, std::size_t T,
                                 const WeightView& w, std::size_t n0, std::size_t n1, float* y,
                                 std::size_t ldy);
using QuantizeActivationsFn = void (*)(const float* x, std::size_t T, std::size_t K, std::int8_t* q,
                                       float* d, std::int32_t* sum);
// The super-block activations of Q4_K/Q6_K weights (quant::quantize_activations_k's bytes).
using QuantizeActivationsKFn = void (*)(const float* x, std::size_t T, std::size_t K,
                                        std::int8_t* q, float* d, std::int16_t* bsum, float* fsum);
// nullptr where this build has none. The AVX-512 ISAs run the AVX512-VNNI kernels for quantized
// types where the CPU has VNNI (quantized_avx512_uses_vnni), else the AVX2 ones; every ISA
// quantizes the activations with the AVX2 quantizer (the same bytes as the reference).
QuantizedRowsFn quantized_rows_for(Isa isa);
bool quantized_avx512_uses_vnni();
QuantizeActivationsFn quantize_activations_for(Isa isa);
QuantizeActivationsKFn quantize_activations_k_for(Isa isa);
void quantized_rows_reference(const quant::ActivationBlocks& x, std::size_t T, const WeightView& w,
                              std::size_t n0, std::size_t n1, float* y, std::size_t ldy);
// An ISA's matmul rows for quantized weights from f32 activations (quantized here, per call):
// what each MatmulRowsFn runs for a quantized dtype.
void quantized_rows_from_f32(Isa isa, const float* x, std::size_t T, const WeightView& w,
                             std::size_t n0, std::size_t n1, float* y, std::size_t ldy);

}  // namespace rkv::kernels
