// SPDX-License-Identifier: MIT
/* CPU lists (cpulist.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpulist.h"

int tdm__cpulist_parse(const char *l, cpu_set_t *set)
{
	CPU_ZERO(set);
	if (l == NULL || *l == '\0')
		return -EINVAL;
	for (;;) {
		char *end;
		/* Digits first, as in a kernel cpulist: strtol alone would take leading blanks and
		 * a sign (" 1", "+1", "-0", "1- 1"). */
		if (*l < '0' || *l > '9')
			return -EINVAL;
		long a = strtol(l, &end, 10), b = a;
		if (*end == '-') {
			const char *hi = end + 1;
			if (*hi < '0' || *hi > '9')
				return -EINVAL;
			b = strtol(hi, &end, 10);
			if (b < a)
				return -EINVAL;
		}
		if (b >= CPU_SETSIZE)
			return -EINVAL;
		for (long c = a; c <= b; c++)
			CPU_SET((int)c, set);
		/* One trailing newline (a list read from sysfs), nothing after it. */
		if (*end == '\0' || (*end == '\n' && end[1] == '\0'))
			return 0;
		if (*end != ',')
			return -EINVAL;
		l = end + 1;
	}
}

int tdm__cpulist_format(const cpu_set_t *set, char *out, size_t len)
{
	size_t at = 0;
	if (len == 0)
		return -ENOSPC;
	out[0] = '\0';
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, set))
			continue;
		int e = c;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
			e++;
		int n = e == c ? snprintf(out + at, len - at, "%s%d", at ? "," : "", c)
		               : snprintf(out + at, len - at, "%s%d-%d", at ? "," : "", c, e);
		if (n < 0 || (size_t)n >= len - at) {
			out[0] = '\0';
			return -ENOSPC;
		}
		at += (size_t)n;
		c = e;
	}
	return 0;
}

unsigned tdm__cpus_allowed(cpu_set_t *set)
{
	CPU_ZERO(set);
	if (sched_getaffinity(0, sizeof(*set), set) != 0)
		return 1;
	int n = CPU_COUNT(set);
	return n > 0 ? (unsigned)n : 1;
}
