// SPDX-License-Identifier: MIT
/*
 * base/say.h: refusals that say what is wrong. The detail is a buffer of each thread's own; the
 * "once per text" is a small table of the texts' hashes, claimed with a CAS, so that a program
 * that retries a refused call in a loop gets one line, not one per try. A table full (64
 * distinct refusals in one process) says every further one again rather than none.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "say.h"
#include "tandem.h"

#define DETAIL_LEN 512
#define SAID_SLOTS 64

static _Thread_local char detail[DETAIL_LEN];
static _Thread_local const char *call_now;

/* Hashes of the texts said already; 0: free. */
static _Atomic uint64_t said[SAID_SLOTS];

const char *tdm_error_detail(void)
{
	return detail;
}

void tdm__detail_begin(const char *call)
{
	call_now = call;
	detail[0] = '\0';
}

/* FNV-1a, never 0 (0 marks a free slot). */
static uint64_t hash_text(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h != 0 ? h : 1;
}

/* True the first time a text comes (or when the table is full). Relaxed: only the hash
 * matters, and two threads with the same text at once both claiming it costs one line more. */
static bool first_time(const char *text)
{
	uint64_t h = hash_text(text);
	for (unsigned i = 0; i < SAID_SLOTS; i++) {
		uint64_t cur = atomic_load_explicit(&said[i], memory_order_relaxed);
		if (cur == h)
			return false;
		if (cur == 0) {
			if (atomic_compare_exchange_strong_explicit(
			        &said[i], &cur, h, memory_order_relaxed, memory_order_relaxed))
				return true;
			if (cur == h)
				return false;
		}
	}
	return true;
}

int tdm__refuse(int err, const char *fmt, ...)
{
	char text[DETAIL_LEN];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (n < 0)
		return err;
	size_t len = strlen(text);
	/* The cause is the text before the call's name: tdm_gpu_prepare and then tdm_gpu_create
	 * refusing one TANDEM_GPU say it once. */
	bool first = first_time(text);
	if (err < 0) {
		const char *name = strerrorname_np(-err);
		if (call_now != NULL)
			snprintf(text + len, sizeof(text) - len, " (%s returns -%s)", call_now,
			         name != NULL ? name : "?");
		else
			snprintf(text + len, sizeof(text) - len, " (-%s)",
			         name != NULL ? name : "?");
		memcpy(detail, text, sizeof(detail));
	}
	if (first)
		fprintf(stderr, "tandem: %s\n", text);
	return err;
}

void tdm__say(const char *fmt, ...)
{
	char text[DETAIL_LEN];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (n >= 0)
		fprintf(stderr, "tandem: %s\n", text); /* one call: one line, not torn by others */
}
