// The attention kernel written once as plain loops over fixed-width lanes that the compiler
// vectorises; attention_{reference,avx2,avx512}.cpp compile it with their own -m flags. The
// reference build runs it for every head size, the AVX2 build for head sizes other than 64, 128
// and 256 (256 with a float32 cache too) and the AVX-512 builds for sizes other than 64 and 128
// (those take their blocked kernels); all of them use exp_inplace.
// Everything here has internal linkage (anonymous namespace): each translation unit gets its
// own copy, so an AVX-512 body can never be picked for the portable path by the linker.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "rkv/kv_dtype.h"

namespace rkv::kernels {
namespace {

constexpr int kLanes = 16;

inline float dot_lanes(const float* a, const float* b, int d) {
  float acc[kLanes] = {};
  int k = 0;
  for (; k + kLanes <= d; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[k + l] * b[k + l];
  float s = 0.0f;
  for (; k < d; ++k) s += a[k] * b[k];
  float t = 0.0f;
  for (int l = 0; l < kLanes; ++l) t += acc[l];
  return t + s;
}

// exp via 2^(x/ln2) = 2^n * 2^f: range reduction, a degree-6 polynomial for 2^f on [-0.5, 0.5],
// and the exponent written into the float's bits. Branch-free, so the loop vectorises.
inline void exp_inplace(float* x, int n) {
  for (int i = 0; i < n; ++i) {
    float v = x[i];
    v = v < -87.3f ? -87.3f : v;
    v = v > 88.3f ? 88.3f : v;
    const float t = v * 1.44269504088896341f;  // x / ln 2
    const float r = std::nearbyint(t);
    // f = x - r*ln2 in two parts for accuracy, then e^f by its Taylor polynomial.
    const float f = (v - r * 0.693145751953125f) - r * 1.428606765330187045e-06f;
    float p = 1.0f / 5040.0f;
    p = p * f + 1.0f / 720.0f;
    p = p * f + 1.0f / 120.0f;
    p = p * f + 1.0f / 24.0f;
    p = p * f + 1.0f / 6.0f;
    p = p * f + 0.5f;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    const std::int32_t e = static_cast<std::int32_t>(r) + 127;
    const std::uint32_t bits = static_cast<std::uint32_t>(e) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    x[i] = p * scale;
  }
}

// probs[g][0, n) <- softmax of those scores, for each of the G rows, in place.
inline void softmax_rows(float* probs, int G, int n) {
  for (int g = 0; g < G; ++g) {
    float* p = probs + static_cast<std::size_t>(g) * n;
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) m = p[j] > m ? p[j] : m;
    for (int j = 0; j < n; ++j) p[j] -= m;
    exp_inplace(p, n);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += p[j];
    const float inv = 1.0f / sum;
    for (int j = 0; j < n; ++j) p[j] *= inv;
  }
}

inline void attention_impl(const float* q, int G, int d, const float* keys, const float* values,
                           int n, float scale, float* out, float* probs) {
  for (int j = 0; j < n; ++j) {
    const float* kj = keys + static_cast<std::size_t>(j) * d;
    for (int g = 0; g < G; ++g)
      probs[static_cast<std::size_t>(g) * n + j] = dot_lanes(q + g * d, kj, d) * scale;
  }
  softmax_rows(probs, G, n);
  for (int k = 0; k < G * d; ++k) out[k] = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float* vj = values + static_cast<std::size_t>(j) * d;
    for (int g = 0; g < G; ++g) {
      const float pj = probs[static_cast<std::size_t>(g) * n + j];
      float* o = out + g * d;
      for (int k = 0; k < d; ++k) o[k] += pj * vj[k];
    }
  }
}

// attention_impl on a cache stored in another dtype: its n rows of keys and values are converted
// to float32 first (by `decode`, the instruction set's kv_decode), into per-thread scratch.
template <class Decode>
void attention_decoded(Decode decode, KvDtype dtype, const float* q, int G, int d, const void* keys,
                       const void* values, int n, float scale, float* out, float* probs) {
  thread_local std::vector<float> kf, vf;
  const std::size_t size = static_cast<std::size_t>(n) * static_cast<std::size_t>(d);
  kf.resize(size);
  vf.resize(size);
  decode(dtype, keys, static_cast<std::size_t>(n), d, kf.data());
  decode(dtype, values, static_cast<std::size_t>(n), d, vf.data());
  attention_impl(q, G, d, kf.data(), vf.data(), n, scale, out, probs);
}

}  // namespace
}  // namespace rkv::kernels
