// SPDX-License-Identifier: MIT
/*
 * Linked into the Criterion test programs of ThreadSanitizer builds only (TANDEM_SANITIZE=thread).
 *
 * Criterion's sandbox (BoxFort) maps its shared arenas at 0x200000000000 + draw * 16 MiB, with
 * draw = rand_r() & 0x3fffff, and gives up after ten draws that land on mapped pages. TSan
 * reserves or protects nearly all of that range, leaving the program only a few TiB near
 * 0x550000000000 (how much depends on the TSan version), so test programs abort before the first
 * test ("Could not initialize inheritable arena") or crash inside Criterion: Criterion issue #274.
 * Here rand_r() answers libcriterion with draws that fall in that free part, found by probing;
 * every other caller gets the real rand_r().
 */
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define BXF_BASE 0x200000000000UL
#define BXF_STEP (1UL << 24)
#define BXF_DRAWS 0x400000UL
#define PROBE_STEP (1UL << 36) /* 64 GiB; a free probe's block gets arenas in its first half */
#define MAX_BLOCKS 128

/* A draw that puts BoxFort's arena in a free block; r picks which and where. */
static int free_draw(unsigned r)
{
	unsigned long blocks[MAX_BLOCKS], addr;
	unsigned n = 0;
	unsigned char vec;

	for (addr = BXF_BASE; addr < BXF_BASE + BXF_DRAWS * BXF_STEP && n < MAX_BLOCKS;
	     addr += PROBE_STEP)
		if (mincore((void *)addr, 4096, &vec) && errno == ENOMEM)
			blocks[n++] = addr;
	if (!n)
		return (int)r;
	addr = blocks[r % n] + (r / n % (PROBE_STEP / BXF_STEP / 2)) * BXF_STEP;
	return (int)((addr - BXF_BASE) / BXF_STEP);
}

int rand_r(unsigned *seed)
{
	int (*real)(unsigned *);
	Dl_info caller;
	int r, saved_errno = errno;

	/* POSIX's way to turn dlsym's object pointer into a function pointer. */
	*(void **)&real = dlsym(RTLD_NEXT, "rand_r");
	r = real(seed);
	if (dladdr(__builtin_return_address(0), &caller) && caller.dli_fname &&
	    strstr(caller.dli_fname, "libcriterion")) {
		r = free_draw((unsigned)r);
		errno = saved_errno;
	}
	return r;
}
