// SPDX-License-Identifier: MIT
/*
 * tandem's device scheduler, the device side: include in the .cu file that defines the handlers
 * (nvcc, sm_80 or later). The scheduler kernel is compiled here, in the program's own module,
 * with the program's handlers: each item is a direct call through a table of the same module, no
 * device function pointer crosses modules. The host API is tandem_dsched.h.
 *
 *     #include "tandem_dsched.cuh"
 *
 *     struct add_args { int *out; int value; };
 *     TDM_DSCHED_HANDLER(add)            // void add(void *args, unsigned size), host and device
 *     {
 *             struct add_args *a = (struct add_args *)args;
 *             *a->out += a->value;
 *     }
 *     TDM_DSCHED_HANDLER(nothing) { (void)args; (void)size; }
 *
 *     TDM_DSCHED_TABLE(my_steps, add, nothing);    // index 0: add, 1: nothing
 *
 * and from C: `extern const tdm_dsched_handlers my_steps;`, cfg.handlers = &my_steps. A handler
 * runs on one thread (lane 0) of a runner warp, with a copy of the item's arguments; it must
 * return (a warp that never comes back holds its share of the kernel), and a trap in it kills
 * the device's context (a sticky error: every await on the device resumes with -EIO). Lanes 1..31
 * of its warp wait meanwhile: a handler must not use a warp-wide collective (__syncwarp,
 * __shfl_sync or __ballot_sync with a full mask, a tiled_partition<32>) nor a block barrier
 * (__syncthreads): those deadlock. Its ordinary writes are seen by the host once its await
 * resumes (with TDM_DSCHED_SCOPE_DEVICE, those to device memory: it calls
 * tdm_dsched_fence_system() after writing host memory); writes through the async proxy (TMA,
 * cp.async.bulk) it must complete and fence before it returns. The same
 * source is compiled for the host, as the twin the `sim` backend runs: code that only a device
 * can run goes under `#ifdef __CUDA_ARCH__`. Device-only handlers (plain __device__ functions)
 * go into TDM_DSCHED_DEVICE_TABLE, which has no host twins (sim refuses it).
 *
 * The protocol, and what each load, store and fence below pairs with: docs/design/dsched.md.
 */
#ifndef TANDEM_DSCHED_CUH
#define TANDEM_DSCHED_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "tandem_dsched.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "tandem_dsched.cuh needs sm_80 or later (mbarrier)"
#endif

/* Defines a handler, `void name(void *args, unsigned size)`, for the device and the host. */
#define TDM_DSCHED_HANDLER(name) static __host__ __device__ void name(void *args, unsigned size)

/* Warps of a block that run items, at most; a block has one warp more, its fetcher. */
#define TDM__DSCHED_MAX_RUNNERS TDM_DSCHED_MAX_WARPS
#define TDM__DSCHED_MAX_THREADS ((TDM__DSCHED_MAX_RUNNERS + 1) * 32)
/* Items a fetcher holds claims on and looks at in one look, at most: 8 lanes an item. */
#ifndef TDM__DSCHED_WINDOW /* (a probe may set it: perf/probes/probe_dsched_rtt.cu) */
#define TDM__DSCHED_WINDOW 4
#endif
/* At least 2: with every group holding a claim, a control look reads the words in place of the
 * last claim's item, so a window of one would never look at its item again. */
static_assert(TDM__DSCHED_WINDOW >= 2 && TDM__DSCHED_WINDOW <= 4, "8 lanes an item, 32 lanes");
/* Of the claims held, how many a look reads at most (a probe may set it lower). */
#ifndef TDM__DSCHED_LOOK_ITEMS
#define TDM__DSCHED_LOOK_ITEMS TDM__DSCHED_WINDOW
#endif
static_assert(TDM__DSCHED_LOOK_ITEMS >= 1 && TDM__DSCHED_LOOK_ITEMS <= TDM__DSCHED_WINDOW,
              "a look reads 1..window claims");
/* After an item was taken, the fetcher holding the next one polls without sleeping this long. */
#define TDM__DSCHED_SPIN_NS 200000ull
/* Fetchers holding later items sleep at most this long between looks. */
#define TDM__DSCHED_NAP_MAX_NS 20000u

typedef void (*tdm__dsched_device_fn)(void *args, unsigned size);

/* A probe's hook (perf/probes/probe_dsched_rtt.cu, -DSTAGES): TDM__DSCHED_STAMP(s, k, t) records
 * the time of stage k of item s (0: the look that found it was issued, 1: the fetcher saw it,
 * 2: its runner woke, 3: its completion word was stored, 4: the look that found it returned,
 * its items checked, 5 and 6: the look before it was issued and returned, 7: the look that found
 * it returned, its items not checked yet). Nothing when not defined. */
#ifdef TDM__DSCHED_STAMP
#define TDM__DSCHED_STAMPING 1
#else
#define TDM__DSCHED_STAMPING 0
#define TDM__DSCHED_STAMP(s, k, t) ((void)0)
#endif

static __device__ __forceinline__ uint64_t tdm__dsched_clock(void)
{
	uint64_t t;
	/* volatile: each read where it is written (a loop would hoist it otherwise). */
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* The time once `after` is there (a probe's stamps: when a load returned): the timer is read
 * under a predicate computed from `after`, so that it cannot be read before `after` arrives. */
static __device__ __forceinline__ uint64_t tdm__dsched_clock_after(uint64_t after)
{
	uint64_t t;
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.u64 p, %1, 1;\n\t"
	             "@p mov.u64 %0, %%globaltimer;\n\t@!p mov.u64 %0, %%globaltimer;\n\t}"
	             : "=l"(t)
	             : "l"(after));
	return t;
}

/* A system-scope acquire-release fence (fence.acq_rel.sys): before a completion word (a
 * volatile store, relaxed at system scope), what the host's acquire load of the word pairs with.
 * Lighter than __threadfence_system (fence.sc.sys), which orders nothing more that it needs. */
static __device__ __forceinline__ void tdm__dsched_fence(void)
{
	asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/*
 * For a handler of a scheduler made with TDM_DSCHED_SCOPE_DEVICE that writes host memory (pinned
 * or mapped) the host will read once the item's await resumes: call it after those writes. A
 * system-scope fence: it waits until the GPU's writes reached host memory (on an H200 about a
 * round trip over the bus). Nothing in the host twin (sim orders a handler's writes before its
 * completion already), nor needed with TDM_DSCHED_SCOPE_SYSTEM.
 */
static __host__ __device__ __forceinline__ void tdm_dsched_fence_system(void)
{
#ifdef __CUDA_ARCH__
	__threadfence_system();
#endif
}

/* ---- the hand-over between a block's fetcher and its runners: mbarriers in shared memory ----
 * Each box has two, of one arrival each: `full` (the fetcher put an item in it; arrive is a
 * release, the runner's wait an acquire, at block scope) and `empty` (the runner is done with
 * it). A waiter names the phase it waits for by its parity. */

static __device__ __forceinline__ unsigned tdm__dsched_smem(const void *p)
{
	return (unsigned)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void tdm__dsched_mbar_init(unsigned long long *bar)
{
	asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(tdm__dsched_smem(bar)) : "memory");
}

static __device__ __forceinline__ void tdm__dsched_mbar_arrive(unsigned long long *bar)
{
	asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared.b64 st, [%0];\n\t}" ::"r"(
	                 tdm__dsched_smem(bar))
	             : "memory");
}

/* Whether the phase of `parity` completed (an acquire when it did); does not wait. */
static __device__ __forceinline__ bool tdm__dsched_mbar_test(unsigned long long *bar,
                                                             unsigned parity)
{
	unsigned ok;
	asm volatile("{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n\t"
	             "selp.u32 %0, 1, 0, p;\n\t}"
	             : "=r"(ok)
	             : "r"(tdm__dsched_smem(bar)), "r"(parity)
	             : "memory");
	return ok != 0;
}

/* How long a runner's mbarrier.try_wait may stay suspended before it returns to try again: a
 * long hint, so that idle runners do not issue a try_wait every few hundred nanoseconds beside
 * their fetcher's looks (without it the round trip was 0.15-0.7 us longer: docs/design/dsched.md);
 * the phase's completion wakes the runner at once whatever the hint. */
#define TDM__DSCHED_WAIT_HINT_NS 1000000u

/* Waits until the phase of `parity` completed (an acquire). sm_90: the thread is suspended in
 * the wait (mbarrier.try_wait, with TDM__DSCHED_WAIT_HINT_NS), issuing nothing; sm_80: short
 * naps between tests. */
static __device__ __forceinline__ void tdm__dsched_mbar_wait(unsigned long long *bar,
                                                             unsigned parity)
{
#if __CUDA_ARCH__ >= 900
	for (;;) {
		unsigned ok;
		asm volatile(
		    "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared.b64 p, [%1], %2, %3;\n\t"
		    "selp.u32 %0, 1, 0, p;\n\t}"
		    : "=r"(ok)
		    : "r"(tdm__dsched_smem(bar)), "r"(parity), "r"(TDM__DSCHED_WAIT_HINT_NS)
		    : "memory");
		if (ok != 0)
			return;
	}
#else
	while (!tdm__dsched_mbar_test(bar, parity))
		__nanosleep(32);
#endif
}

/* A block's boxes, in shared memory. */
struct tdm__dsched_boxes {
	uint32_t args[TDM__DSCHED_MAX_RUNNERS][TDM__DSCHED_WORDS]; /* [15]: handler | size << 16 */
	unsigned long long seq[TDM__DSCHED_MAX_RUNNERS];           /* ~0: leave */
	unsigned long long full[TDM__DSCHED_MAX_RUNNERS], empty[TDM__DSCHED_MAX_RUNNERS];
};

/* Lane 0 of a fetcher: which busy runners gave their box back (busy and parity updated). */
static __device__ __forceinline__ void tdm__dsched_reap(struct tdm__dsched_boxes *b, unsigned *busy,
                                                        unsigned *parity)
{
	for (unsigned m = *busy; m != 0; m &= m - 1u) {
		const unsigned r = __ffs(m) - 1u;
		if (tdm__dsched_mbar_test(&b->empty[r], (*parity >> r) & 1u)) {
			*busy &= ~(1u << r);
			*parity ^= 1u << r;
		}
	}
}

/*
 * The fetcher, warp 0 of each block. It holds claims on up to TDM__DSCHED_WINDOW sequence
 * numbers, as many as its block has runners free, and looks at their items with one load
 * instruction (8 lanes an item, 16 bytes each), with its block's own stop word now and then; the
 * items that are there, lowest first, go to free runners.
 * One warp per block polls host memory, each on lines no other poller reads: reads of one host
 * line by several warps queue behind each other (about a microsecond each on an H200), while
 * reads of distinct lines overlap (docs/design/dsched.md).
 * Every dependent step between a look's return and the next look's issue costs about 50 ns on
 * an H200 (a shuffle, a vote, a timer read; an mbarrier test about 90), so a look that finds
 * nothing while the fetcher spins takes the short way: one vote, and the next look at once.
 */
static __device__ __forceinline__ void
tdm__dsched_fetch(const struct tdm__dsched_queue q, struct tdm__dsched_boxes *b, unsigned runners)
{
	const unsigned lane = threadIdx.x & 31u, group = lane >> 3, part = lane & 7u;
	const unsigned all = runners >= 32 ? ~0u : (1u << runners) - 1u;
	const volatile uint64_t *stop_word = q.stop + (size_t)blockIdx.x * TDM__DSCHED_STOP_STRIDE;
	volatile uint64_t *front_ns = q.dev + 2;
	unsigned busy = 0, parity = 0; /* lane 0's: runners holding an item; their empty phases */
	/* The claims held, in lanes 0..n-1 of `mine`, the lowest in lane 0, and in every lane the
	 * claim its group looks at (`mine_g`, group < n) and the lowest (`first_claim`): registers,
	 * since an array indexed at run time would live in local memory, which is cached in the L1
	 * that each look's acquire invalidates. */
	unsigned long long mine = 0, mine_g = 0, first_claim = 0;
	unsigned n = 0; /* claims held; the same in every lane */
	/* The front (the highest item taken, plus one) and when it moved, as the last control look
	 * that decided a nap saw them. */
	uint64_t front = 0, moved = 0;
	unsigned idle = all;   /* runners free, as of the last reap, less those given items since */
	bool found = true;     /* the last look found an item */
	bool spinning = false; /* the last nap was none: the next looks go at once */
#if TDM__DSCHED_STAMPING
	uint64_t prev_ns = 0, prev_ret_ns = 0, ret_ns = 0, look_ns = 0;
#endif
	for (unsigned looks = 1;; looks++) {
#if TDM__DSCHED_STAMPING
		prev_ns = look_ns;
		prev_ret_ns = ret_ns;
		look_ns = tdm__dsched_clock();
#endif
		/*
		 * One look, one load instruction: a warp's loads of host memory in separate
		 * instructions take a round trip over the bus each, one after the other, while one
		 * instruction's lanes read many lines in one (docs/design/dsched.md). Group g
		 * (lanes 8g..8g+7) reads the item of claim g, 16 bytes a lane. The control words
		 * go in the group after the items' (lane 0 of it the stop word, lanes 1 and 2 the
		 * front and when it moved, device memory): on every look while a group is free;
		 * with every group holding a claim, in place of the last claim's item, after a
		 * look that found nothing (they decide the nap) and every 16th look (the stop
		 * word). Acquire loads at system scope, 8 bytes each at least whole: a word whose
		 * tag is this item's carries this item's payload, whatever order the submitter's
		 * stores reach the device in (they are release stores: gpu/dsched.c, put_item).
		 */
		const unsigned nh =
		    min(n, (unsigned)TDM__DSCHED_LOOK_ITEMS); /* claims to look at */
		const bool ctl = n > 0 && (nh < TDM__DSCHED_WINDOW || !found || (looks & 15u) == 0);
		const unsigned nl =
		    ctl && nh == TDM__DSCHED_WINDOW ? nh - 1u : nh; /* items looked at */
		const unsigned c = 8u * nl; /* the control group's first lane */
		const volatile uint64_t *at = nullptr;
		if (group < nl)
			at = q.items + (mine_g & q.mask) * TDM__DSCHED_WORDS + 2u * part;
		else if (ctl && group == nl && part < 3u)
			at = part == 0 ? stop_word
			               : q.dev + 2u * (part - 1u); /* dev[0..1], dev[2..3] */
		uint64_t lo = 0, hi = 0;
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.u64 p, %2, 0;\n\t"
		             "@p ld.acquire.sys.global.v2.u64 {%0, %1}, [%2];\n\t}"
		             : "+l"(lo), "+l"(hi)
		             : "l"(at)
		             : "memory");
#if TDM__DSCHED_STAMPING
		ret_ns = tdm__dsched_clock_after(__shfl_sync(0xffffffffu, lo, 0));
#endif
		/* One vote says what the look saw: the lanes reading an item's first word, whether
		 * it carries the item's tag; the stop word's lane, in a control look, whether to
		 * leave (cancelled, or the lowest claim at or past the last item: drain). */
		const bool first =
		    part == 0 && group < nl && (uint32_t)(lo >> 32) == (uint32_t)(mine_g + 1u);
		const bool halt =
		    ctl && lane == c &&
		    ((lo & TDM__DSCHED_CANCEL) != 0 || first_claim >= (lo & ~TDM__DSCHED_CANCEL));
		const unsigned vote = __ballot_sync(0xffffffffu, first || halt);
		/* The short way, while spinning with every claim held: nothing there, so the
		 * claims, the runners and the nap stay as they are: look again. Every 16th look
		 * goes the long way, which reads the front again and decides the nap. */
		if (vote == 0 && spinning && n == TDM__DSCHED_WINDOW && (looks & 15u) != 0) {
			found = false;
			continue;
		}
		if (ctl && ((vote >> c) & 1u) != 0)
			break; /* destroy */
		/* The items that are there whole, lowest first: every word an item's size needs
		 * (word 0 has the size) carries its tag. Each group's lanes check their item's
		 * words; a second vote says which groups are whole. */
		unsigned taken = 0;
		if (vote != 0) {
			const uint64_t w0 = __shfl_sync(0xffffffffu, lo, 8u * group);
			const uint32_t tag = (uint32_t)(mine_g + 1u);
			/* The size as submitted is at most TDM_DSCHED_ARGS_MAX; bounded here too,
			 * so that a stray write cannot overrun a box. */
			const unsigned size = min((unsigned)(w0 >> 16) & 0xffu,
			                          (unsigned)TDM_DSCHED_ARGS_MAX),
			               nw = (size + 3u) / 4u;
			const bool ok =
			    group < nl && (uint32_t)(w0 >> 32) == tag &&
			    (2u * part < 1u || 2u * part > nw || (uint32_t)(lo >> 32) == tag) &&
			    (2u * part + 1u > nw || (uint32_t)(hi >> 32) == tag);
			const unsigned whole = __ballot_sync(0xffffffffu, ok);
			while (taken < nl && ((whole >> (8u * taken)) & 0xffu) == 0xffu)
				taken++;
		}
		if (taken > 0) {
			/* The lanes' acquire loads of the items' words pair with the submitter's
			 * release stores of them: what it wrote before the submit (the buffers the
			 * handler reads) is seen by each lane that read a word, then, through the
			 * warp's barrier, by lane 0, whose arrive on the box's `full` (a release at
			 * block scope) the runner's wait acquires. An acquire load is the load and
			 * an invalidation of the SM's L1 (LDG.STRONG.SYS, CCTL.IVALL): no fence,
			 * which at system scope would wait for a round trip over the bus
			 * (docs/design/dsched.md). */
			__syncwarp();
#if TDM__DSCHED_STAMPING
			if (lane == 0) {
				TDM__DSCHED_STAMP(mine_g, 4, tdm__dsched_clock());
				TDM__DSCHED_STAMP(mine_g, 5, prev_ns);
				TDM__DSCHED_STAMP(mine_g, 6, prev_ret_ns);
				TDM__DSCHED_STAMP(mine_g, 7, ret_ns);
			}
#endif
			/* A free runner for each (there are as many as claims: claims are taken for
			 * free runners only), and its box, written by lane 0 (the one thread that
			 * also tests the runner's `empty`): word 0 (handler and size) into the
			 * box's last word, words 1..15 (the arguments) into its words 0..14, each
			 * word's low half, gathered from the item's 8 lanes. */
			for (unsigned g = 0; g < taken; g++) {
				const unsigned r = __ffs(idle) - 1u, base = 8u * g;
				idle &= ~(1u << r);
				const unsigned long long cl =
				    __shfl_sync(0xffffffffu, mine_g, base);
				uint32_t words[TDM__DSCHED_WORDS];
				for (unsigned k = 0; k < 8u; k++) {
					words[2u * k] =
					    __shfl_sync(0xffffffffu, (uint32_t)lo, base + k);
					words[2u * k + 1u] =
					    __shfl_sync(0xffffffffu, (uint32_t)hi, base + k);
				}
				if (lane == 0) {
					for (unsigned k = 1; k < TDM__DSCHED_WORDS; k++)
						b->args[r][k - 1u] = words[k];
					b->args[r][TDM__DSCHED_WORDS - 1u] = words[0];
					b->seq[r] = cl;
					busy |= 1u << r;
#if TDM__DSCHED_STAMPING
					if (g == 0) {
						TDM__DSCHED_STAMP(cl, 0, look_ns);
						TDM__DSCHED_STAMP(cl, 1, tdm__dsched_clock());
					}
#endif
					/* Release (block scope): the box, before the runner's wait
					 * ends. */
					tdm__dsched_mbar_arrive(&b->full[r]);
				}
			}
		}
		found = taken > 0;
		/* The runners done (lane 0), off the items' way. */
		if (lane == 0)
			tdm__dsched_reap(b, &busy, &parity);
		idle = __shfl_sync(0xffffffffu, all & ~busy, 0);
		const unsigned long long last =
		    __shfl_sync(0xffffffffu, mine, taken > 0 ? taken - 1u : 0u);
		if (taken > 0)
			mine = __shfl_sync(0xffffffffu, mine, (lane + taken) & 31u);
		n -= taken;
		/* Claims for as many free runners as the window holds (device scope: only the
		 * fetchers claim), taken once the items found were handed out: the atomic's answer
		 * is a round trip to L2 that the runners need not wait for. */
		unsigned want = (unsigned)__popc(idle);
		want = want < TDM__DSCHED_WINDOW ? want : TDM__DSCHED_WINDOW;
		want = want > n ? want - n : 0;
		if (want > 0) {
			unsigned long long first_new = 0;
			if (lane == 0)
				first_new = atomicAdd((unsigned long long *)q.dev,
				                      (unsigned long long)want);
			first_new = __shfl_sync(0xffffffffu, first_new, 0);
			if (lane >= n && lane < n + want)
				mine = first_new + (lane - n);
			n += want;
		}
		if (taken > 0 || want > 0) {
			mine_g = __shfl_sync(0xffffffffu, mine, group);
			first_claim = __shfl_sync(0xffffffffu, mine, 0);
		}
		if (taken > 0) {
			/* The front: the highest item taken, a hint for the naps below (relaxed,
			 * device memory), once a look. */
			if (lane == 0) {
				atomicMax((unsigned long long *)(q.dev + 1), last + 1u);
				*front_ns = tdm__dsched_clock();
			}
			continue;
		}
		if (nl == 0) {
			if (want == 0)
				__nanosleep(100); /* every runner busy */
			continue;
		}
		if (!ctl)
			continue; /* nothing there: look again, with the control words */
		front = __shfl_sync(0xffffffffu, hi, c + 1u);
		moved = __shfl_sync(0xffffffffu, lo, c + 2u);
		/* Nothing there. While items came within the last TDM__DSCHED_SPIN_NS, a fetcher
		 * whose lowest claim is among the next ones (up to a window past the front) looks
		 * again at once, so that the next item's fetcher is looking already when the one
		 * before is taken; otherwise every microsecond. One holding a later item naps
		 * longer the farther it is from the front, so that an idle scheduler does not
		 * keep the bus busy. */
		unsigned nap = 0;
		if (lane == 0) {
			const uint64_t ahead = first_claim > front ? first_claim - front : 0;
			if (ahead <= TDM__DSCHED_WINDOW + 1u)
				nap =
				    tdm__dsched_clock() - moved < TDM__DSCHED_SPIN_NS ? 0u : 1000u;
			else
				nap = ahead > TDM__DSCHED_NAP_MAX_NS / 256u
				          ? TDM__DSCHED_NAP_MAX_NS
				          : (unsigned)ahead * 256u;
			if (nap != 0)
				__nanosleep(nap);
		}
		spinning = __shfl_sync(0xffffffffu, nap, 0) == 0;
	}
	/* Every runner done with its item, then told to leave. */
	if (lane == 0) {
		for (;;) {
			tdm__dsched_reap(b, &busy, &parity);
			if (busy == 0)
				break;
			__nanosleep(1000);
		}
		for (unsigned r = 0; r < runners; r++) {
			b->seq[r] = ~0ull;
			tdm__dsched_mbar_arrive(&b->full[r]);
		}
	}
	__syncwarp();
}

/* Runner r, warp r + 1: waits for an item in its box, runs it on lane 0, writes its completion
 * word, and gives the box back. */
static __device__ __forceinline__ void tdm__dsched_run(const struct tdm__dsched_queue q,
                                                       struct tdm__dsched_boxes *b, unsigned r,
                                                       const tdm__dsched_device_fn *fns,
                                                       unsigned nfns)
{
	const unsigned lane = threadIdx.x & 31u;
	for (unsigned phase = 0;; phase ^= 1u) {
		unsigned long long s = 0;
		if (lane == 0) {
			/* Acquire (block scope): pairs with the fetcher's arrive; the box, and what
			 * the submitter wrote before the item, are seen below. */
			tdm__dsched_mbar_wait(&b->full[r], phase);
			s = b->seq[r];
			if (s != ~0ull) {
				TDM__DSCHED_STAMP(s, 2, tdm__dsched_clock());
				const uint32_t hdr = b->args[r][TDM__DSCHED_WORDS - 1];
				const unsigned h = hdr & 0xffffu;
				if (h < nfns)
					fns[h](b->args[r], min((hdr >> 16) & 0xffu,
					                       (unsigned)TDM_DSCHED_ARGS_MAX));
				/* Release: the handler's writes before the completion word; pairs
				 * with the host's acquire load of it (gpu/dsched.c, done_word),
				 * after which the slot may be written again. System scope by
				 * default (its writes to host memory too); GPU scope where the
				 * scheduler was made with TDM_DSCHED_SCOPE_DEVICE (its writes to
				 * device memory), which spares the wait for a round trip over the
				 * bus that a system-scope fence makes. */
				if (q.flags & TDM__DSCHED_DEVICE_SCOPE)
					asm volatile("fence.acq_rel.gpu;" ::: "memory");
				else
					tdm__dsched_fence();
				*(volatile uint64_t *)&q.done[s & q.mask] = s + 1;
				TDM__DSCHED_STAMP(s, 3, tdm__dsched_clock());
				/* Release (block scope): this lane's reads of the box before the
				 * fetcher writes it again. */
				tdm__dsched_mbar_arrive(&b->empty[r]);
			}
		}
		if (__shfl_sync(0xffffffffu, s, 0) == ~0ull)
			return;
	}
}

/*
 * The scheduler's kernel body: warp 0 of each block fetches items from the queue in host memory,
 * the others run them.
 */
static __device__ __forceinline__ void
tdm__dsched_loop(const struct tdm__dsched_queue q, const tdm__dsched_device_fn *fns, unsigned nfns)
{
	__shared__ __align__(16) struct tdm__dsched_boxes boxes;
	const unsigned warp = threadIdx.x >> 5, runners = (blockDim.x >> 5) - 1u;
	if (blockDim.x < 64u || blockDim.x % 32u != 0)
		return; /* no runner (tandem launches (warps + 1) x 32 threads, warps >= 1) */
	if (threadIdx.x == 0)
		for (unsigned r = 0; r < runners; r++) {
			tdm__dsched_mbar_init(&boxes.full[r]);
			tdm__dsched_mbar_init(&boxes.empty[r]);
		}
	__syncthreads();
	if (warp == 0)
		tdm__dsched_fetch(q, &boxes, runners);
	else
		tdm__dsched_run(q, &boxes, warp - 1u, fns, nfns);
}

/* The launcher a table carries: the kernel on the scheduler's stream, the caller's current
 * device given back after it. */
#define TDM__DSCHED_LAUNCHER(name)                                                                 \
	static int name##_launch(const tdm_dsched_launch *l)                                       \
	{                                                                                          \
		int prev = -1;                                                                     \
		if (cudaGetDevice(&prev) != cudaSuccess)                                           \
			prev = -1;                                                                 \
		cudaError_t e = cudaSetDevice(l->device);                                          \
		if (e == cudaSuccess) {                                                            \
			cudaLaunchConfig_t c = {};                                                 \
			c.gridDim = dim3(l->blocks);                                               \
			c.blockDim = dim3(l->threads);                                             \
			c.stream = (cudaStream_t)l->stream;                                        \
			e = cudaLaunchKernelEx(&c, name##_kernel, l->queue);                       \
		}                                                                                  \
		if (prev >= 0 && prev != l->device)                                                \
			(void)cudaSetDevice(prev);                                                 \
		if (e != cudaSuccess)                                                              \
			(void)cudaGetLastError();                                                  \
		return (int)e;                                                                     \
	}

#define TDM__DSCHED_KERNEL(name)                                                                   \
	static __global__ void __launch_bounds__(TDM__DSCHED_MAX_THREADS)                          \
	    name##_kernel(const struct tdm__dsched_queue q)                                        \
	{                                                                                          \
		tdm__dsched_loop(                                                                  \
		    q, name##_device_fns,                                                          \
		    (unsigned)(sizeof(name##_device_fns) / sizeof(name##_device_fns[0])));         \
	}

/*
 * Defines `const tdm_dsched_handlers name` (external, C linkage) for handlers defined with
 * TDM_DSCHED_HANDLER: their device table, the kernel that runs them, its launcher, and their host
 * twins for sim. Index i is the i-th handler listed.
 */
#define TDM_DSCHED_TABLE(name, ...)                                                                \
	static __device__ const tdm__dsched_device_fn name##_device_fns[] = {__VA_ARGS__};         \
	static const tdm_dsched_host_fn name##_host_fns[] = {__VA_ARGS__};                         \
	TDM__DSCHED_KERNEL(name)                                                                   \
	TDM__DSCHED_LAUNCHER(name)                                                                 \
	extern "C" const tdm_dsched_handlers name = {                                              \
	    TDM_DSCHED_ABI, (unsigned)(sizeof(name##_host_fns) / sizeof(name##_host_fns[0])),      \
	    name##_launch, name##_host_fns, #name}

/* The same for device-only handlers (`__device__ void f(void *args, unsigned size)`): no host
 * twins, so the scheduler runs on cuda alone (sim: -ENOTSUP). */
#define TDM_DSCHED_DEVICE_TABLE(name, ...)                                                         \
	static __device__ const tdm__dsched_device_fn name##_device_fns[] = {__VA_ARGS__};         \
	TDM__DSCHED_KERNEL(name)                                                                   \
	TDM__DSCHED_LAUNCHER(name)                                                                 \
	extern "C" const tdm_dsched_handlers name = {                                              \
	    TDM_DSCHED_ABI, (unsigned)(sizeof(name##_device_fns) / sizeof(name##_device_fns[0])),  \
	    name##_launch, NULL, #name}

#endif /* TANDEM_DSCHED_CUH */
