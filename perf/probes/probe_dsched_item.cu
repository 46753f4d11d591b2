// SPDX-License-Identifier: MIT
/*
 * perf/probes/probe_dsched_item.cu: what the form of an item costs one round trip (issue 21; not
 * built by CMake). One warp polls pinned host memory for item i, one host thread writes it and
 * spins on the answer (a volatile store after fence.acq_rel.gpu, or after fence.acq_rel.sys for
 * "+sysans"). Per mode (how the warp looks / what the host writes): the round trip p50 and min,
 * and, on the device, the p50 of the look that found the item (issued to returned) and of the
 * looks each item took.
 *   w1/h1     lane 0 reads one 8-byte word; the host writes that word (the floor's form)
 *   w1/h16    lane 0 reads word 0; the host writes 16 words, word 0 last
 *   v2/h4     lanes 0-1 read 32 bytes (16 each); the host writes 4 words
 *   v4/h8     lanes 0-3 read 64 bytes; the host writes 8 words (one host cache line)
 *   v8/h16    lanes 0-7 read 128 bytes; the host writes 16 words (tandem's item today)
 *   v8+stop   v8/h16, and lane 8 a quiet stop word on a line of its own
 *   v8+3      v8/h16, and lanes 8-31 the three next items' lines (written long ago)
 *   v4+stop   v4/h8, and lane 8 the stop word
 *   w1+sysans w1/h1, answered after fence.acq_rel.sys
 *   v32x4     one load instruction: the item and the three next items' lines
 *   v8+stop1  one load instruction: the item (lanes 0-7) and the stop word (lane 8)
 *   v8+dev    v8/h16, and lane 8 a word of device memory (a load of its own)
 *   v8+dev1   the same in one load instruction
 *   w1/fix    w1/h1 with every item in one slot (the floor's: one line, always)
 *   v8/fix    v8/h16 with every item in one slot
 *   v8+acq    v8/h16, then fence.acq_rel.sys (the kernel's acquire) before the answer
 *   v8/ldacq  v8/h16 with acquire loads (ld.acquire.sys) in place of volatile ones
 *   v4+dup    v4/h8 written twice, to two lines; the warp reads the copies in turn, one look
 *             issued every half round trip (two in flight)
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/pdi perf/probes/probe_dsched_item.cu && /tmp/pdi [REPS]
 */
#include "probe.h"

#include <string.h>
#include <algorithm>
#include <vector>

#define SLOTS 64u
#define MODES 18
static const char *const names[MODES] = {"w1/h1",   "w1/h16",   "v2/h4",   "v4/h8",     "v8/h16",
                                         "v8+stop", "v8+3",     "v4+stop", "w1+sysans", "v4+dup",
                                         "v32x4",   "v8+stop1", "v8+dev",  "v8+dev1",   "w1/fix",
                                         "v8/fix",  "v8+acq",   "v8/ldacq"};
/* words the host writes, per mode */
#define HWORDS                                                                                     \
	{                                                                                          \
		1, 16, 4, 8, 16, 16, 16, 8, 1, 8, 16, 16, 16, 16, 1, 16, 16, 16                    \
	}
static const unsigned hwords[MODES] = HWORDS;
__constant__ unsigned d_hwords[MODES] = HWORDS;

static __device__ __forceinline__ uint64_t gclock(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __device__ __forceinline__ void ld2(const volatile uint64_t *p, uint64_t &a, uint64_t &b)
{
	asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
	             : "=l"(a), "=l"(b)
	             : "l"(p)
	             : "memory");
}

/* items: SLOTS items of 16 words (128 bytes); dup: a second copy of each; stop: a quiet line. */
__global__ void pp(int mode, const volatile uint64_t *items, const volatile uint64_t *dup,
                   const volatile uint64_t *stop, const volatile uint64_t *devw,
                   volatile uint64_t *ack, unsigned n, unsigned long long *look_ns, unsigned *tries)
{
	const unsigned lane = threadIdx.x & 31u;
	for (unsigned i = 1; i <= n; i++) {
		const volatile uint64_t *it = items + (size_t)(mode >= 14 ? 0 : i % SLOTS) * 16;
		const volatile uint64_t *it2 = dup + (size_t)(i % SLOTS) * 16;
		const uint32_t tag = i;
		unsigned k = 0;
		uint64_t t0 = 0, t1 = 0;
		if (mode == 9) {
			/* Two looks in flight, at the two copies, each issued half a round trip
			 * after the other: the first of them that sees the item wins. */
			uint64_t a0 = 0, b0 = 0, a1 = 0, b1 = 0, ta = 0, tb = 0;
			ta = gclock();
			if (lane < 4)
				ld2(it + 2 * lane, a0, b0);
			for (;; k++) {
				/* wait for copy A's look, half a round trip after it went */
				while (gclock() - ta < 600) {
				}
				tb = gclock();
				if (lane < 4)
					ld2(it2 + 2 * lane, a1, b1);
				bool ok = lane >= 4 || ((uint32_t)(a0 >> 32) == tag &&
				                        (uint32_t)(b0 >> 32) == tag);
				if (__all_sync(~0u, ok)) {
					t0 = ta;
					t1 = gclock();
					break;
				}
				while (gclock() - tb < 600) {
				}
				ta = gclock();
				if (lane < 4)
					ld2(it + 2 * lane, a0, b0);
				ok = lane >= 4 ||
				     ((uint32_t)(a1 >> 32) == tag && (uint32_t)(b1 >> 32) == tag);
				if (__all_sync(~0u, ok)) {
					t0 = tb;
					t1 = gclock();
					break;
				}
			}
		} else {
			for (;; k++) {
				t0 = gclock();
				uint64_t a = 0, b = 0, x = 0, y = 0;
				bool ok = true;
				switch (mode) {
				case 0:
				case 1:
				case 8:
				case 14:
					if (lane == 0)
						a = it[0];
					ok = lane != 0 || (uint32_t)(a >> 32) == tag;
					break;
				case 10:
				case 11:
				case 13: {
					/* one load instruction: the item, and other lines */
					const volatile uint64_t *p = nullptr;
					if (lane < 8)
						p = it + 2 * lane;
					else if (mode == 10)
						p = items + (size_t)((i + lane / 8u) % SLOTS) * 16 +
						    2 * (lane % 8u);
					else if (lane == 8)
						p = mode == 11 ? stop : devw;
					asm volatile(
					    "{\n\t.reg .pred q;\n\tsetp.ne.u64 q, %2, 0;\n\t"
					    "@q ld.volatile.global.v2.u64 {%0, %1}, [%2];\n\t}"
					    : "+l"(a), "+l"(b)
					    : "l"(p)
					    : "memory");
					ok = lane >= 8 || ((uint32_t)(a >> 32) == tag &&
					                   (uint32_t)(b >> 32) == tag);
					break;
				}
				case 17:
					if (lane < 8)
						asm volatile(
						    "ld.acquire.sys.global.v2.u64 {%0, %1}, [%2];"
						    : "=l"(a), "=l"(b)
						    : "l"(it + 2 * lane)
						    : "memory");
					ok = lane >= 8 || ((uint32_t)(a >> 32) == tag &&
					                   (uint32_t)(b >> 32) == tag);
					break;
				case 12:
					if (lane < 8)
						ld2(it + 2 * lane, a, b);
					else if (lane == 8)
						x = *devw;
					ok = lane >= 8 || ((uint32_t)(a >> 32) == tag &&
					                   (uint32_t)(b >> 32) == tag);
					if (x == 12345)
						ok = false;
					break;
				case 15:
				case 16:
				case 2:
				case 3:
				case 4:
				case 5:
				case 6:
				case 7: {
					const unsigned lanes = d_hwords[mode] / 2;
					if (lane < lanes)
						ld2(it + 2 * lane, a, b);
					else if ((mode == 5 || mode == 7) && lane == 8)
						x = *stop;
					else if (mode == 6 && lane >= 8) {
						const unsigned g = lane / 8u;
						ld2(items + (size_t)((i + g) % SLOTS) * 16 +
						        2 * (lane % 8u),
						    x, y);
					}
					ok = lane >= lanes || ((uint32_t)(a >> 32) == tag &&
					                       (uint32_t)(b >> 32) == tag);
					if (x == 12345 && y == 678) /* never: keeps the loads */
						ok = false;
					break;
				}
				}
				if (__all_sync(~0u, ok)) {
					t1 = gclock();
					break;
				}
			}
		}
		if (lane == 0) {
			if (mode == 16)
				asm volatile("fence.acq_rel.sys;" ::: "memory");
			if (mode == 8)
				asm volatile("fence.acq_rel.sys;" ::: "memory");
			else
				asm volatile("fence.acq_rel.gpu;" ::: "memory");
			*ack = i;
			look_ns[i - 1] = t1 - t0;
			tries[i - 1] = k + 1;
		}
	}
}

static void put(uint64_t *items, uint64_t *dup, int mode, unsigned i)
{
	uint64_t *it = items + (size_t)(mode >= 14 ? 0 : i % SLOTS) * 16,
	         *it2 = dup + (size_t)(i % SLOTS) * 16;
	const uint64_t tag = (uint64_t)i << 32;
	for (unsigned k = hwords[mode]; k-- > 0;) {
		__atomic_store_n(&it[k], tag | k, __ATOMIC_RELEASE);
		if (mode == 9)
			__atomic_store_n(&it2[k], tag | k, __ATOMIC_RELEASE);
	}
}

int main(int argc, char **argv)
{
	const unsigned reps = argc > 1 ? (unsigned)atoi(argv[1]) : 20000, warm = 500;
	CK(cudaSetDevice(0));
	size_t bytes = 2 * SLOTS * 128 + 256;
	char *mem;
	CK(cudaHostAlloc((void **)&mem, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
	uint64_t *items = (uint64_t *)mem, *dup = items + SLOTS * 16, *stop = dup + SLOTS * 16,
	         *ack = stop + 16;
	unsigned long long *look_d;
	unsigned *tries_d;
	uint64_t *devw;
	CK(cudaMalloc((void **)&devw, 64));
	CK(cudaMemset(devw, 0, 64));
	const unsigned n = warm + reps;
	CK(cudaMalloc((void **)&look_d, n * sizeof(*look_d)));
	CK(cudaMalloc((void **)&tries_d, n * sizeof(*tries_d)));
	std::vector<unsigned long long> look(n);
	std::vector<unsigned> tries(n);
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	printf("%-10s %8s %8s %8s %10s %6s\n", "mode", "p50_us", "p99_us", "min_us", "look_p50",
	       "tries");
	for (int mode = 0; mode < MODES; mode++) {
		memset(mem, 0, bytes);
		pp<<<1, 32, 0, st>>>(mode, items, dup, stop, devw, ack, n, look_d, tries_d);
		CK(cudaGetLastError());
		std::vector<uint64_t> v;
		v.reserve(reps);
		ping_pong([&](unsigned i) { put(items, dup, mode, i); }, ack, n, warm, 0, v);
		CK(cudaStreamSynchronize(st));
		CK(cudaMemcpy(look.data(), look_d, n * sizeof(*look_d), cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(tries.data(), tries_d, n * sizeof(*tries_d), cudaMemcpyDeviceToHost));
		std::vector<unsigned long long> l(look.begin() + warm, look.end());
		std::vector<unsigned> t(tries.begin() + warm, tries.end());
		std::sort(v.begin(), v.end());
		std::sort(l.begin(), l.end());
		std::sort(t.begin(), t.end());
		printf("%-10s %8.2f %8.2f %8.2f %10.2f %6u\n", names[mode], v[v.size() / 2] / 1e3,
		       v[v.size() * 99 / 100] / 1e3, v[0] / 1e3, l[l.size() / 2] / 1e3,
		       t[t.size() / 2]);
		fflush(stdout);
	}
	return 0;
}
