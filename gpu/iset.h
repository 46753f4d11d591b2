// SPDX-License-Identifier: MIT
/*
 * A set of disjoint intervals on one clock, kept sorted, that intervals arriving out of order
 * merge into, with a bound on its size (gpu/iset.c). The metrics keep a device's busy time in
 * one per kind of work (gpu/metrics.c).
 *
 * Spans of different streams reach the metrics out of order (each stream's in order), so the
 * union is kept as a sorted list of disjoint intervals that each span merges into. It grows to
 * SET_MAX intervals (separate ones: back-to-back work merges into one); past that the older half
 * is folded into a sum, and a span that comes after its time was folded counts only from the
 * fold's end on (the part before goes to `unplaced`): overlap with what was folded can no longer
 * be told.
 */
#ifndef TDM_GPU_ISET_H
#define TDM_GPU_ISET_H

#include <stdint.h>

#define SET_MIN 64u
#define SET_MAX 4096u

struct ival {
	uint64_t start, end; /* start < end */
};

struct iset {
	struct ival *v; /* sorted by start, disjoint and not touching */
	unsigned n, cap;
	uint64_t folded_ns; /* the lengths of the intervals folded away */
	uint64_t floor_ns;  /* the end of the last one folded: spans count from here */
	uint64_t unplaced_ns;
};

/* Empties s (its memory stays). */
void tdm__iset_reset(struct iset *s);
/* Adds [a, b) (a < b), merging it with what it overlaps or touches. */
void tdm__iset_add(struct iset *s, uint64_t a, uint64_t b);
/* The length of the union, folded part included, up to `end`. */
uint64_t tdm__iset_total(const struct iset *s, uint64_t end);

#endif /* TDM_GPU_ISET_H */
