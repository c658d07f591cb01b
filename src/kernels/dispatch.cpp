#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/scratch.h"

namespace rkv::kernels {

// Defined in the per-ISA translation units (matmul_avx2.cpp, ...), which are compiled on x86-64
// only (CMakeLists.txt). The references must be strong: a weak one would not pull those members
// out of the static library, and the program would silently run the reference kernel.
#if defined(__x86_64__)
// F16C by CPUID (leaf 1, ECX bit 29): clang before 16 rejects "f16c" in __builtin_cpu_supports.
static bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

MatmulRowsFn matmul_rows_avx2_fn();
MatmulRowsFn matmul_rows_avx512_fn();
MatmulRowsFn matmul_rows_avx512bf16_fn();
Bf16SplitFn bf16_split_avx512bf16_fn();
Bf16RowsFn bf16_rows_avx512bf16_fn();
QuantizedRowsFn quantized_rows_avx2_fn();
QuantizedRowsFn quantized_rows_avx512vnni_fn();
QuantizedRowsFn quantized_rows_amx_int8_fn();
QuantizeActivationsFn quantize_activations_avx2_fn();
QuantizeActivationsKFn quantize_activations_k_avx2_fn();
static bool cpu_has_avx512vnni() {
  return __builtin_cpu_supports("avx512vnni");
}
#else
static QuantizedRowsFn quantized_rows_avx512vnni_fn() {
  return nullptr;
}
static QuantizedRowsFn quantized_rows_amx_int8_fn() {
  return nullptr;
}
static bool cpu_has_avx512vnni() {
  return false;
}
static QuantizedRowsFn quantized_rows_avx2_fn() {
  return nullptr;
}
static QuantizeActivationsFn quantize_activations_avx2_fn() {
  return nullptr;
}
static QuantizeActivationsKFn quantize_activations_k_avx2_fn() {
  return nullptr;
}
static MatmulRowsFn matmul_rows_avx2_fn() {
  return nullptr;
}
static MatmulRowsFn matmul_rows_avx512_fn() {
  return nullptr;
}
static MatmulRowsFn matmul_rows_avx512bf16_fn() {
  return nullptr;
}
static Bf16SplitFn bf16_split_avx512bf16_fn() {
  return nullptr;
}
static Bf16RowsFn bf16_rows_avx512bf16_fn() {
  return nullptr;
}
#endif

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Reference:
      return "reference";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

MatmulRowsFn matmul_rows_for(Isa isa) {
  switch (isa) {
    case Isa::Reference:
      return &matmul_rows_reference;
    case Isa::Avx2:
      return matmul_rows_avx2_fn();
    case Isa::Avx512:
      return matmul_rows_avx512_fn();
    case Isa::Avx512Bf16:
      return matmul_rows_avx512bf16_fn();
  }
  return nullptr;
}

Bf16SplitFn bf16_split_for(Isa isa) {
  return isa == Isa::Avx512Bf16 ? bf16_split_avx512bf16_fn() : nullptr;
}

namespace {

// CPUID leaf 7, EDX: AMX-BF16 (bit 22), AMX-TILE (bit 24), AMX-INT8 (bit 25).
bool cpu_has_amx(unsigned bit) {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (d & (1u << bit)) != 0 && (d & (1u << 24)) != 0;
#else
  (void)bit;
  return false;
#endif
}
bool cpu_has_amx_bf16() {
  return cpu_has_amx(22);
}
bool cpu_has_amx_int8() {
  return cpu_has_amx(25);
}

// Asks Linux for the AMX tile data state (XFEATURE_XTILEDATA, 18) for this process.
bool request_amx_permission(std::string& why) {
#if defined(__x86_64__) && defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return true;
  why = std::strerror(errno);
  return false;
#else
  why = "not Linux on x86-64";
  return false;
#endif
}

}  // namespace

namespace {

bool amx_turned_off() {
  const char* env = std::getenv("RKV_AMX");
  return env != nullptr && (std::string_view(env) == "off" || std::string_view(env) == "0");
}

// The tile state, asked for once per process; a refusal is said once on stderr.
bool amx_permitted() {
  static const bool granted = [] {
    std::string why;
    if (request_amx_permission(why)) return true;
    std::fprintf(stderr,
                 "rkv: the CPU has AMX, but the kernel refused the tile state (arch_prctl: %s); "
                 "prompt processing runs on AVX-512\n",
                 why.c_str());
    return false;
  }();
  return granted;
}

}  // namespace

bool amx_enabled() {
  static const bool enabled =
      !amx_turned_off() && active_isa() == Isa::Avx512Bf16 && cpu_has_amx_bf16() && amx_permitted();
  return enabled;
}

bool amx_int8_enabled() {
  static const bool enabled = !amx_turned_off() &&
                              (active_isa() == Isa::Avx512 || active_isa() == Isa::Avx512Bf16) &&
                              cpu_has_avx512vnni() && cpu_has_amx_int8() &&
                              quantized_rows_amx_int8_fn() != nullptr && amx_permitted();
  return enabled;
}

std::string kernels_name() {
  std::string name(isa_name(active_isa()));
  return amx_enabled() || amx_int8_enabled() ? name + "+amx" : name;
}

Bf16RowsFn bf16_rows_for(Isa isa) {
  return isa == Isa::Avx512Bf16 ? bf16_rows_avx512bf16_fn() : nullptr;
}

bool quantized_avx512_uses_vnni() {
  return cpu_has_avx512vnni() && quantized_rows_avx512vnni_fn() != nullptr;
}

QuantizedRowsFn quantized_rows_for(Isa isa) {
  switch (isa) {
    case Isa::Reference:
      return &quantized_rows_reference;
    case Isa::Avx2:
      return quantized_rows_avx2_fn();
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      // vpdpbusd (matmul_quant_avx512vnni.cpp) where the CPU has AVX512-VNNI, else AVX2's; with
      // AMX-INT8, prefill on tiles (matmul_quant_amxint8.cpp, which runs the VNNI kernels below
      // kQuantAmxMinT rows and for the types it has no tile kernel for).
      if (quantized_avx512_uses_vnni() && amx_int8_enabled()) return quantized_rows_amx_int8_fn();
      return quantized_avx512_uses_vnni() ? quantized_rows_avx512vnni_fn()
                                          : quantized_rows_avx2_fn();
  }
  return nullptr;
}

QuantizeActivationsFn quantize_activations_for(Isa isa) {
  switch (isa) {
    case Isa::Reference:
      return &quant::quantize_activations;
    case Isa::Avx2:
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      return quantize_activations_avx2_fn();
  }
  return nullptr;
}

QuantizeActivationsKFn quantize_activations_k_for(Isa isa) {
  switch (isa) {
    case Isa::Reference:
      return &quant::quantize_activations_k;
    case Isa::Avx2:
    case Isa::Avx512:
    case Isa::Avx512Bf16:
      return quantize_activations_k_avx2_fn();
  }
  return nullptr;
}

bool isa_supported(Isa isa) {
  if (matmul_rows_for(isa) == nullptr) return false;
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Reference:
      return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case Isa::Avx512Bf16:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bf16");
  }
  return false;
#else
  return isa == Isa::Reference;
#endif
}

static Isa choose_isa() {
  if (const char* forced = std::getenv("RKV_ISA"); forced != nullptr && *forced != '\0') {
    const std::string name(forced);
    for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
      if (name == isa_name(isa)) {
        if (!isa_supported(isa)) throw Error("RKV_ISA=" + name + " is not supported on this CPU");
        return isa;
      }
    }
    throw Error("RKV_ISA=" + name + ": expected reference, avx2, avx512 or avx512bf16");
  }
  for (Isa isa : {Isa::Avx512Bf16, Isa::Avx512, Isa::Avx2}) {
    if (isa_supported(isa)) return isa;
  }
  return Isa::Reference;
}

Isa active_isa() {
  static const Isa isa = choose_isa();
  return isa;
}

std::string_view matmul_precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::Exact ? "exact" : "llamacpp";
}

MatmulPrecision parse_matmul_precision(std::string_view name) {
  if (name == "exact") return MatmulPrecision::Exact;
  if (name == "llamacpp") return MatmulPrecision::Rounded;
  throw Error("unknown matmul precision '" + std::string(name) + "': expected exact or llamacpp");
}

void round_activations(const float* x, std::size_t n, DType dtype, float* out) {
  switch (dtype) {
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) out[i] = f16_to_f32(f32_to_f16(x[i]));
      return;
    default:
      std::copy(x, x + n, out);
  }
}

namespace {

// One unit of work of the bf16 products: output rows [n0, n1) of product p for input rows
// [t0, t1).
struct Bf16Task {
  std::size_t p, n0, n1, t0, t1;
};

// The tasks of bf16 products that share one input of T rows, for a pool of `threads`.
//  * GEMM (T >= kBf16GemmMinT): one panel of kBf16GemmPanel rows a task, across every product,
//    handed out as threads come free. When the panels do not divide evenly among the threads, the
//    last (panels % threads) are each split into `threads` slices of the input rows, so that no
//    thread waits a whole panel for the other at the end. A row's result does not depend on the
//    slice it falls in (the micro-kernel computes every output on its own, in the same order).
//  * GEMV: each product's rows in about 4 chunks a thread, aligned to 16 (as parallel_ranges).
void bf16_tasks(std::span<const MatmulProduct> products, std::size_t T, std::size_t threads,
                std::vector<Bf16Task>& tasks) {
  tasks.clear();
  if (T >= kBf16GemmMinT) {
    for (std::size_t p = 0; p < products.size(); ++p) {
      const std::size_t N = products[p].w.rows;
      for (std::size_t n = 0; n < N; n += kBf16GemmPanel)
        tasks.push_back({p, n, std::min(N, n + kBf16GemmPanel), 0, T});
    }
    const std::size_t odd = threads > 1 ? tasks.size() % threads : 0;
    // Slices of whole micro-kernel row groups (8), each at least kBf16GemmMinT rows, so that every
    // slice takes the GEMM (whose results do not depend on T) and not the GEMV.
    const std::size_t step = ((T + threads - 1) / threads + 7) / 8 * 8;
    const std::size_t last_slice = T - (T - 1) / step * step;
    if (odd == 0 || step < kBf16GemmMinT || last_slice < kBf16GemmMinT) return;
    std::vector<Bf16Task> last(tasks.end() - static_cast<std::ptrdiff_t>(odd), tasks.end());
    tasks.resize(tasks.size() - odd);
    for (const Bf16Task& t : last)
      for (std::size_t t0 = 0; t0 < T; t0 += step)
        tasks.push_back({t.p, t.n0, t.n1, t0, std::min(T, t0 + step)});
    return;
  }
  for (std::size_t p = 0; p < products.size(); ++p) {
    const RangeSplit split(products[p].w.rows, 16, 4 * threads);
    for (std::size_t c = 0; c < split.chunks(); ++c) {
      const auto [n0, n1] = split.range(c);
      tasks.push_back({p, n0, n1, 0, T});
    }
  }
}

// Grow-only buffers of one quantized input, written whole by the quantizer.
struct QuantBuffers {
  Scratch q, d, sum, bsum, fsum;
};

// x's T rows quantized for w's kernels (8-bit blocks of 32, or Q8_K super-blocks for the
// k-quants off the tiles) into b: valid until b's next use. Rows are quantized independently:
// prefill shares them out (a fifth of a Q4_K GEMM's time on one thread when the tiles run it).
quant::ActivationBlocks quantize_into(const float* x, std::size_t T, const WeightView& w,
                                      bool on_tiles, ThreadPool& pool, QuantBuffers& b) {
  static const QuantizeActivationsFn quantize_fn = quantize_activations_for(active_isa());
  static const QuantizeActivationsKFn quantize_k_fn = quantize_activations_k_for(active_isa());
  const bool superblocks = quant::uses_superblock_activations(w.dtype) && !on_tiles;
  const std::size_t K = w.cols, nb = K / 32;
  // Per row: the scales and sums of blocks of 32, or of super-blocks (K / 256 scales, K / 16
  // sums).
  const std::size_t nd = superblocks ? K / 256 : nb, ns = superblocks ? K / 16 : nb;
  std::int8_t* const qp = scratch_array<std::int8_t>(b.q, T * K);
  float* const dp = scratch_array<float>(b.d, T * nd);
  std::int32_t* const sp = superblocks ? nullptr : scratch_array<std::int32_t>(b.sum, T * ns);
  std::int16_t* const bp = superblocks ? scratch_array<std::int16_t>(b.bsum, T * ns) : nullptr;
  float* const fp = superblocks ? scratch_array<float>(b.fsum, T * ns) : nullptr;
  auto quantize = [&](std::size_t t0, std::size_t t1) {
    if (superblocks)
      quantize_k_fn(x + t0 * K, t1 - t0, K, qp + t0 * K, dp + t0 * nd, bp + t0 * ns, fp + t0 * ns);
    else
      quantize_fn(x + t0 * K, t1 - t0, K, qp + t0 * K, dp + t0 * nb, sp + t0 * nb);
  };
  if (T >= 16)
    pool.parallel_ranges(T, 1, quantize);
  else
    quantize(0, T);
  return superblocks ? quant::ActivationBlocks{nullptr, nullptr, nullptr, qp, dp, bp, fp}
                     : quant::ActivationBlocks{qp, dp, sp};
}

// quantize_into the calling thread's buffers: valid until its next call.
quant::ActivationBlocks quantize_for(const float* x, std::size_t T, const WeightView& w,
                                     bool on_tiles, ThreadPool& pool) {
  thread_local QuantBuffers b;
  return quantize_into(x, T, w, on_tiles, pool, b);
}

// Rows of one product for one task of a GEMV region.
struct RowChunk {
  const MatmulProduct* p;
  std::size_t n0, n1;
};

// The products' rows, in that order, as the tasks of one parallel region of quantized products
// off the tiles, in rounds of one chunk a thread that each take half of what is left (at least
// 2 units of 16 rows a chunk; chunks end at the products' ends): big chunks first, small ones
// last, so that the thread that finishes first waits for little of the other's last chunk (32
// rows, where 4 equal chunks a thread left it up to an eighth of the product). With the shared
// regions below: Q4_K_M decode at depth 0 1.026x (medians of 8 alternating pairs, Zen 5), pp512
// on the VNNI panels not slower.
void guided_chunks(std::span<const MatmulProduct> products, std::size_t threads,
                   std::vector<RowChunk>& chunks) {
  constexpr std::size_t kUnit = 16, kMinUnits = 2;
  chunks.clear();
  std::size_t remaining = 0;
  for (const MatmulProduct& p : products) remaining += (p.w.rows + kUnit - 1) / kUnit;
  std::size_t pi = 0, u = 0;  // the next unit: product pi's unit u
  while (remaining > 0) {
    const std::size_t size = std::max(kMinUnits, (remaining + 2 * threads - 1) / (2 * threads));
    for (std::size_t t = 0; t < threads && remaining > 0; ++t) {
      std::size_t take = std::min(size, remaining);
      remaining -= take;
      while (take > 0) {
        const MatmulProduct& p = products[pi];
        const std::size_t units = (p.w.rows + kUnit - 1) / kUnit;
        const std::size_t here = std::min(take, units - u);
        if (here > 0) chunks.push_back({&p, u * kUnit, std::min(p.w.rows, (u + here) * kUnit)});
        u += here;
        take -= here;
        if (u == units) {
          ++pi;
          u = 0;
        }
      }
    }
  }
}

// Runs the GEMVs (or small GEMMs) of quantized products on activations quantized once.
void quantized_region(const quant::ActivationBlocks& xq, std::size_t T,
                      std::span<const MatmulProduct> products, ThreadPool& pool) {
  static const QuantizedRowsFn qrows_fn = quantized_rows_for(active_isa());
  thread_local std::vector<RowChunk> chunks;  // the calling thread's list, for every thread
  guided_chunks(products, static_cast<std::size_t>(pool.size()), chunks);
  const RowChunk* const list = chunks.data();
  pool.parallel_for(chunks.size(), [&](std::size_t i) {
    const RowChunk& c = list[i];
    qrows_fn(xq, T, c.p->w, c.n0, c.n1, c.p->y, c.p->w.rows);
  });
}

// Jobs whose products can share one parallel region: quantized weights, none on the AMX tiles
// (whose kernels lay the activations out per call).
bool share_quantized_jobs(std::span<const MatmulJob> jobs) {
  if (jobs.size() < 2) return false;
  for (const MatmulJob& j : jobs)
    if (!dtype_is_quantized(j.w.dtype) || (amx_int8_enabled() && quantized_on_tiles(j.w, j.T)))
      return false;
  return true;
}

// The jobs' products in one region: each distinct input (the same x, rows, columns and kind of
// activation blocks as an earlier job's) quantized once, their rows one list of chunks.
void quantized_jobs(std::span<const MatmulJob> jobs, ThreadPool& pool) {
  static const QuantizedRowsFn qrows_fn = quantized_rows_for(active_isa());
  // Grow-only; a deque, so that buffers in use stay where they are when more are added.
  thread_local std::deque<QuantBuffers> buffers;
  thread_local std::vector<quant::ActivationBlocks> xq;
  thread_local std::vector<MatmulProduct> products;
  xq.clear();
  products.clear();
  std::size_t used = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const MatmulJob& j = jobs[i];
    const bool sb = quant::uses_superblock_activations(j.w.dtype);
    std::size_t same = 0;
    while (same < i &&
           !(jobs[same].x == j.x && jobs[same].T == j.T && jobs[same].w.cols == j.w.cols &&
             quant::uses_superblock_activations(jobs[same].w.dtype) == sb))
      ++same;
    if (same < i) {
      xq.push_back(xq[same]);
    } else {
      if (used == buffers.size()) buffers.emplace_back();
      xq.push_back(quantize_into(j.x, j.T, j.w, false, pool, buffers[used++]));
    }
    products.push_back({j.w, j.y});
  }
  thread_local std::vector<RowChunk> chunks;  // the calling thread's list, for every thread
  guided_chunks(products, static_cast<std::size_t>(pool.size()), chunks);
  const RowChunk* const list = chunks.data();
  const MatmulProduct* const first = products.data();
  const quant::ActivationBlocks* const blocks = xq.data();
  pool.parallel_for(chunks.size(), [&](std::size_t i) {
    const RowChunk& c = list[i];
    const std::size_t job = static_cast<std::size_t>(c.p - first);
    qrows_fn(blocks[job], jobs[job].T, c.p->w, c.n0, c.n1, c.p->y, c.p->w.rows);
  });
}

// Quantized products that can share one quantization of their input and one parallel region:
// off the tiles (whose kernels lay the activations out per call), all of one K and one kind of
// activation blocks. Decode's q/k/v and gate/up then cost one region each instead of three or
// two, and the small k and v products' chunks fill the gaps of q's.
bool share_quantized(std::span<const MatmulProduct> products, std::size_t T) {
  if (products.size() < 2) return false;
  const WeightView& w0 = products[0].w;
  for (const MatmulProduct& p : products)
    if (!dtype_is_quantized(p.w.dtype) || p.w.cols != w0.cols ||
        quant::uses_superblock_activations(p.w.dtype) !=
            quant::uses_superblock_activations(w0.dtype) ||
        (amx_int8_enabled() && quantized_on_tiles(p.w, T)))
      return false;
  return true;
}

// Whether this CPU has the bf16 kernels matmul_many shares its products out to.
bool have_bf16_kernels() {
  static const bool have =
      bf16_split_for(active_isa()) != nullptr && bf16_rows_for(active_isa()) != nullptr;
  return have;
}

}  // namespace

void matmul_many(const float* x, std::size_t T, std::span<const MatmulProduct> products,
                 ThreadPool& pool) {
  bool shared = have_bf16_kernels() && !products.empty();
  for (const MatmulProduct& p : products)
    shared = shared && p.w.dtype == DType::BF16 && p.w.cols == products[0].w.cols &&
             p.w.precision == products[0].w.precision;
  if (!shared && share_quantized(products, T)) {
    quantized_region(quantize_for(x, T, products[0].w, false, pool), T, products, pool);
    return;
  }
  if (!shared) {
    for (const MatmulProduct& p : products) matmul(x, T, p.w, p.y, pool);
    return;
  }
  static const Bf16SplitFn bf16_split = bf16_split_for(active_isa());
  static const Bf16RowsFn bf16_rows = bf16_rows_for(active_isa());
  // Split (or, for Rounded, round) once, here, for every product and every thread's rows.
  const std::size_t K = products[0].w.cols, kpad = (K + 31) / 32 * 32;
  const bool lo = products[0].w.precision != MatmulPrecision::Rounded;
  const std::size_t ld = Bf16Activations::row_stride(kpad, lo);
  // Rows, or groups of kBf16GroupRows rows (the last zero-padded), as Bf16RowsFn takes them.
  const bool grouped = bf16_grouped(T);
  const std::size_t step = grouped ? kBf16GroupRows : 1, units = (T + step - 1) / step;
  // The calling thread's buffer, for every thread; grow-only and never cleared (the split writes
  // every element Bf16RowsFn reads): a vector resized between products of different K zeroed up
  // to 10 MB a call.
  thread_local Scratch parts;
  auto* const buf = scratch_array<std::uint16_t>(parts, units * step * ld);
  auto split = [&](std::size_t u0, std::size_t u1) {
    for (std::size_t t = u0 * step; t < std::min(T, u1 * step); t += step)
      bf16_split(x + t * K, std::min(step, T - t), K, lo, kpad, grouped, buf + t * ld);
  };
  if (T >= 16)
    pool.parallel_ranges(units, 1, split);
  else
    split(0, units);
  thread_local std::vector<Bf16Task> tasks;
  bf16_tasks(products, T, static_cast<std::size_t>(pool.size()), tasks);
  const Bf16Task* const list = tasks.data();  // the calling thread's list, for every thread
  pool.parallel_for(tasks.size(), [&](std::size_t i) {
    const Bf16Task& t = list[i];
    const MatmulProduct& p = products[t.p];
    const Bf16Activations xs{buf + t.t0 * ld, t.t1 - t.t0, kpad, lo, grouped};
    bf16_rows(xs, p.w, t.n0, t.n1, p.y + t.t0 * p.w.rows, p.w.rows);
  });
}

void matmul(const float* x, std::size_t T, const WeightView& w, float* y, ThreadPool& pool) {
  static const MatmulRowsFn rows_fn = matmul_rows_for(active_isa());
  const std::size_t N = w.rows;
  if (w.dtype == DType::BF16 && have_bf16_kernels()) {
    const MatmulProduct one{w, y};
    matmul_many(x, T, {&one, 1}, pool);
    return;
  }
  if (w.precision == MatmulPrecision::Rounded &&
      (w.dtype == DType::BF16 || w.dtype == DType::F16)) {
    // Rounded once, here, for every thread's rows (O(T K) against the product's O(T K N)).
    thread_local Scratch rounded;
    float* const r = scratch_array<float>(rounded, T * w.cols);
    round_activations(x, T * w.cols, w.dtype, r);
    x = r;
  }
  if (dtype_is_quantized(w.dtype)) {
    const bool on_tiles = amx_int8_enabled() && quantized_on_tiles(w, T);
    const quant::ActivationBlocks xq = quantize_for(x, T, w, on_tiles, pool);
    if (!on_tiles) {
      const MatmulProduct one{w, y};
      quantized_region(xq, T, {&one, 1}, pool);
      return;
    }
    // The tiles lay the activations out once per call: one range per thread (their work is even).
    static const QuantizedRowsFn qrows_fn = quantized_rows_for(active_isa());
    pool.parallel_ranges(N, 16,
                         [&](std::size_t n0, std::size_t n1) { qrows_fn(xq, T, w, n0, n1, y, N); });
    return;
  }
  // Split the output rows: every thread streams its own slice of the weights once.
  pool.parallel_ranges(
      N, 16, [&](std::size_t n0, std::size_t n1) { rows_fn(x, T, w, n0, n1, y, N); }, 4);
}

void matmul_jobs(std::span<const MatmulJob> jobs, ThreadPool& pool) {
  if (share_quantized_jobs(jobs)) {
    quantized_jobs(jobs, pool);
    return;
  }
  // Runs of jobs on one input through matmul_many (which shares what it can among them).
  thread_local std::vector<MatmulProduct> run;  // grow-only, as the other lists here
  for (std::size_t i = 0; i < jobs.size();) {
    std::size_t end = i + 1;
    while (end < jobs.size() && jobs[end].x == jobs[i].x && jobs[end].T == jobs[i].T) ++end;
    run.clear();
    for (std::size_t k = i; k < end; ++k) run.push_back({jobs[k].w, jobs[k].y});
    matmul_many(jobs[i].x, jobs[i].T, run, pool);
    i = end;
  }
}

}  // namespace rkv::kernels
