// SPDX-License-Identifier: MIT
/*
 * CPU lists as the kernel writes them ("0-3,8,10-11"): each number starts with a digit, ranges
 * ascend, no blanks, nothing empty; one trailing newline (a list read from sysfs) is allowed.
 * The executor's tdm_config.cpus and the topology's facts both read this grammar.
 */
#ifndef TDM_BASE_CPULIST_H
#define TDM_BASE_CPULIST_H

#include <sched.h>
#include <stddef.h>

/* list into set. -EINVAL when malformed, empty, or naming a CPU past CPU_SETSIZE. */
int tdm__cpulist_parse(const char *list, cpu_set_t *set);

/* The CPUs this process may run on into set, and how many (1 when the kernel does not say):
 * the executor's default worker count, and tdm_gpu_prepare's. */
unsigned tdm__cpus_allowed(cpu_set_t *set);

/* set as a cpulist into out ("" for an empty set). -ENOSPC (and "") when it does not fit. */
int tdm__cpulist_format(const cpu_set_t *set, char *out, size_t len);

#endif /* TDM_BASE_CPULIST_H */
