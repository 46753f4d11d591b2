// SPDX-License-Identifier: MIT
/* The interval set of the metrics (iset.h). */
#include <stdlib.h>
#include <string.h>

#include "iset.h"

void tdm__iset_reset(struct iset *s)
{
	s->n = 0;
	s->folded_ns = s->floor_ns = s->unplaced_ns = 0;
}

/* Room for one more: grows, or folds the older half. */
static void iset_room(struct iset *s)
{
	if (s->n < s->cap)
		return;
	if (s->cap < SET_MAX) {
		unsigned cap = s->cap != 0 ? 2 * s->cap : SET_MIN;
		struct ival *v = realloc(s->v, cap * sizeof(*v));
		if (v != NULL) {
			s->v = v;
			s->cap = cap;
			return;
		}
		if (s->n == 0)
			return; /* nowhere to keep anything: iset_add drops the span (unplaced) */
	}
	unsigned k = (s->n + 1) / 2;
	for (unsigned i = 0; i < k; i++)
		s->folded_ns += s->v[i].end - s->v[i].start;
	s->floor_ns = s->v[k - 1].end;
	memmove(s->v, s->v + k, (s->n - k) * sizeof(*s->v));
	s->n -= k;
}

void tdm__iset_add(struct iset *s, uint64_t a, uint64_t b)
{
	if (a >= b)
		return;
	iset_room(s);
	if (a < s->floor_ns) {
		uint64_t cut = b < s->floor_ns ? b : s->floor_ns;
		s->unplaced_ns += cut - a;
		a = cut;
		if (a >= b)
			return;
	}
	if (s->n == s->cap) { /* no memory at all */
		s->unplaced_ns += b - a;
		return;
	}
	/* The first interval that ends at or after a (ends grow with starts: disjoint). */
	unsigned lo = 0, hi = s->n;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if (s->v[mid].end < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	unsigned i = lo, j = lo;
	while (j < s->n && s->v[j].start <= b)
		j++;
	if (i == j) { /* touches none: a new interval at i */
		memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof(*s->v));
		s->v[i] = (struct ival){a, b};
		s->n++;
		return;
	}
	/* Merges v[i..j) with [a, b). */
	if (s->v[i].start < a)
		a = s->v[i].start;
	if (s->v[j - 1].end > b)
		b = s->v[j - 1].end;
	s->v[i] = (struct ival){a, b};
	memmove(s->v + i + 1, s->v + j, (s->n - j) * sizeof(*s->v));
	s->n -= j - i - 1;
}

/* The union's length up to `end`. */
uint64_t tdm__iset_total(const struct iset *s, uint64_t end)
{
	uint64_t t = s->folded_ns;
	for (unsigned i = 0; i < s->n && s->v[i].start < end; i++)
		t += (s->v[i].end < end ? s->v[i].end : end) - s->v[i].start;
	return t;
}
