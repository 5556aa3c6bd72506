// Stand-in for the cuRAND device API (its header is not on this machine). The generator is a
// simple xorshift: tier 1 only compiles, so the numbers themselves do not matter here.
#pragma once
#include <cuda_runtime.h>
#include "curand.h"

struct curandStateXORWOW {
  unsigned int d, v[5];
};
typedef curandStateXORWOW curandStateXORWOW_t;
typedef curandStateXORWOW curandState_t;
typedef curandStateXORWOW curandState;
struct curandStatePhilox4_32_10 {
  unsigned int d, v[5];
};
typedef curandStatePhilox4_32_10 curandStatePhilox4_32_10_t;

template <class State>
__device__ inline void curand_init(unsigned long long seed, unsigned long long subsequence,
                                   unsigned long long offset, State* state) {
  state->d = static_cast<unsigned int>(seed ^ (subsequence * 0x9E3779B97F4A7C15ULL) ^ offset) | 1u;
}
template <class State>
__device__ inline unsigned int curand(State* state) {
  unsigned int x = state->d;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return state->d = x;
}
template <class State>
__device__ inline float curand_uniform(State* state) {
  return (curand(state) >> 8) * (1.0f / 16777216.0f) + (1.0f / 33554432.0f);
}
template <class State>
__device__ inline double curand_uniform_double(State* state) {
  return curand_uniform(state);
}
template <class State>
__device__ inline float curand_normal(State* state) {
  float u1 = curand_uniform(state), u2 = curand_uniform(state);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
template <class State>
__device__ inline double curand_normal_double(State* state) {
  return curand_normal(state);
}
template <class State>
__device__ inline float4 curand_uniform4(State* state) {
  return make_float4(curand_uniform(state), curand_uniform(state), curand_uniform(state), curand_uniform(state));
}
template <class State>
__device__ inline float4 curand_normal4(State* state) {
  return make_float4(curand_normal(state), curand_normal(state), curand_normal(state), curand_normal(state));
}
template <class State>
__device__ inline uint4 curand4(State* state) {
  return make_uint4(curand(state), curand(state), curand(state), curand(state));
}
